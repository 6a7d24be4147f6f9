#include "source_report.h"

#include "model/shape_volume.h"
#include "report/chunked_output.h"
#include "util/parallel.h"

#include "util/terminal_text.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <cstdio>
#include <memory>

namespace sl {

std::string_view locationKindName(TensorLocation::Kind k)
{
    switch (k) {
    case TensorLocation::Kind::None: return "none";
    case TensorLocation::Kind::Mapped: return "mapped";
    case TensorLocation::Kind::Compressed: return "compressed";
    case TensorLocation::Kind::Transformed: return "transformed";
    case TensorLocation::Kind::Inline: return "inline";
    case TensorLocation::Kind::Unavailable: return "unavailable";
    }
    return "none";
}

std::string_view entryKindName(EntryKind k)
{
    switch (k) {
    case EntryKind::Tensor: return "tensor";
    case EntryKind::Group: return "group";
    case EntryKind::Object: return "object";
    }
    return "tensor";
}

std::string humanBytes(uint64_t bytes)
{
    static constexpr const char* kUnits[] = { "B", "KB", "MB", "GB", "TB", "PB" };
    double v = static_cast<double>(bytes);
    size_t u = 0;
    while (v >= 1000 && u + 1 < std::size(kUnits)) {
        v /= 1000;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, kUnits[u]);
    return buf;
}

std::string humanCount(uint64_t n)
{
    static constexpr const char* kUnits[] = { "", "K", "M", "B", "T" };
    double v = static_cast<double>(n);
    size_t u = 0;
    while (v >= 1000 && u + 1 < std::size(kUnits)) {
        v /= 1000;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f%s" : "%.1f%s", v, kUnits[u]);
    return buf;
}

void writeSourceJson(JsonWriter& w, const Source& s)
{
    w.beginObject();
    w.field("path", s.path);
    w.field("format", formatId(s.format));
    w.field("container", s.container);
    w.key("containers");
    w.beginArray();
    for (const auto& c : s.containers) {
        w.beginObject();
        w.field("path", c.path);
        w.field("role", containerRoleName(c.role));
        w.field("tensors", static_cast<uint64_t>(c.tensorCount));
        w.endObject();
    }
    w.endArray();
    w.key("files");
    w.beginArray();
    for (const auto& f : s.files)
        w.string(f);
    w.endArray();
    w.key("metadata");
    w.beginObject();
    for (const auto& [k, v] : s.metadata)
        w.field(k, v);
    w.endObject();
    if (s.weightsOnly.checked || !s.weightsOnly.executes.empty()) {
        // For CI gates: "yes", "after_import" (run the imports first) or "no" (refused); and the load-safety
        // verdict, "weights-only", "imports" or "executes" (see WeightsOnlyLoad::verdict).
        const WeightsOnlyLoad& wo = s.weightsOnly;
        w.key("weights_only");
        w.beginObject();
        w.field("loads", wo.loads() ? "yes" : wo.refused.empty() ? "after_import" : "no");
        w.field("verdict", wo.verdict());
        for (auto [key, list] : { std::pair { "imports", &wo.imports }, std::pair { "refused", &wo.refused },
                 std::pair { "executes", &wo.executes } }) {
            w.key(key);
            w.beginArray();
            for (const auto& name : *list)
                w.string(name);
            w.endArray();
        }
        w.endObject();
    }
    w.endObject();
}

namespace {

char* put(char* p, std::string_view text)
{
    std::memcpy(p, text.data(), text.size());
    return p + text.size();
}
template <typename Int> char* putNumber(char* p, Int v) { return std::to_chars(p, p + 20, v).ptr; } // 20: any 64-bit

} // namespace

std::vector<uint8_t> plainFiles(const Source& s)
{
    std::vector<uint8_t> plain(s.files.size());
    for (size_t i = 0; i < s.files.size(); ++i)
        plain[i] = jsonPlainAscii(s.files[i]);
    return plain;
}

namespace {

// The fixed-text writer below: an entry whose strings need no escaping and that has no sharding (nor parts
// nested deeper than kMaxRawDepth), written in the order and bytes of writeEntryJson's field-by-field path.
constexpr int kMaxRawDepth = 4;
// Room for an entry's keys, punctuation and names when every optional field is there: putEntry's literals
// and brackets come to 396 bytes, and the dtype (twice, with quantization), kind and location names add at
// most 47.
constexpr size_t kFixedText = 512;

struct RawEntryWriter {
    const Source& s;
    std::span<const uint8_t> plainFiles;

    // The file the location names, or nullptr (writeEntryJson leaves "file" out then).
    const std::string* file(const TensorLocation& loc) const
    {
        return loc.file >= 0 && static_cast<size_t>(loc.file) < s.files.size() ? &s.files[static_cast<size_t>(loc.file)]
                                                                              : nullptr;
    }
    bool plainFile(const TensorLocation& loc) const
    {
        const std::string* f = file(loc);
        if (!f)
            return true;
        return plainFiles.size() == s.files.size() ? plainFiles[static_cast<size_t>(loc.file)] != 0 : jsonPlainAscii(*f);
    }
    static bool plainPairs(const auto& pairs, size_t& bytes)
    {
        for (const auto& [k, v] : pairs) {
            if (!jsonPlainAscii(k) || !jsonPlainAscii(v))
                return false;
            bytes += k.size() + v.size() + 6;
        }
        return true;
    }

    // At most how many bytes putEntry writes for `e`, or 0 when it cannot write it.
    size_t size(const Entry& e, int depth) const
    {
        const TensorLocation& loc = e.location;
        if (e.kind == EntryKind::Object || e.sharding || depth > kMaxRawDepth || !jsonPlainAscii(e.name)
            || !jsonPlainAscii(e.device) || !jsonPlainAscii(e.typeName) || !jsonPlainAscii(loc.storageId)
            || !plainFile(loc))
            return 0;
        // The fixed text, the strings, and 21 bytes for each number and dimension.
        const std::string* f = file(loc);
        size_t bytes = kFixedText + e.name.size() + e.device.size() + e.typeName.size() + (f ? f->size() : 0)
            + loc.storageId.size() + 21 * (e.shape.size() + loc.strides.size() + 7);
        if (!plainPairs(e.attributes, bytes))
            return 0;
        if (const Quantization* q = e.quantization.get()) {
            if (!jsonPlainAscii(q->scheme) || !plainPairs(q->params, bytes))
                return 0;
            bytes += q->scheme.size();
        }
        for (const Entry& part : e.parts) {
            const size_t n = size(part, depth + 1);
            if (!n)
                return 0;
            bytes += n + 1;
        }
        return bytes;
    }

    static char* putPairs(char* p, const auto& pairs)
    {
        *p++ = '{';
        bool first = true;
        for (const auto& [k, v] : pairs) {
            if (!first)
                *p++ = ',';
            first = false;
            *p++ = '"';
            p = put(p, k);
            p = put(p, "\":\"");
            p = put(p, v);
            *p++ = '"';
        }
        *p++ = '}';
        return p;
    }
    static char* putIntegers(char* p, const auto& values)
    {
        *p++ = '[';
        bool first = true;
        for (int64_t v : values) {
            if (!first)
                *p++ = ',';
            first = false;
            p = putNumber(p, v);
        }
        *p++ = ']';
        return p;
    }

    // Fields in writeEntryJson's order.
    char* putEntry(char* p, const Entry& e) const
    {
        p = put(p, "{\"name\":\"");
        p = put(p, e.name);
        p = put(p, "\",\"kind\":\"");
        p = put(p, entryKindName(e.kind));
        p = put(p, "\",\"shape\":");
        p = putIntegers(p, e.shape);
        if (!e.shapeKnown)
            p = put(p, ",\"shape_known\":false");
        p = put(p, ",\"dtype\":\"");
        p = put(p, dtypeName(e.dtype));
        p = put(p, "\",\"numel\":");
        p = putNumber(p, e.numel());
        p = put(p, ",\"nbytes\":");
        p = putNumber(p, e.nbytes());
        if (e.requiresGrad)
            p = put(p, ",\"requires_grad\":true");
        if (e.isParameter)
            p = put(p, ",\"parameter\":true");
        if (!e.device.empty()) {
            p = put(p, ",\"device\":\"");
            p = put(p, e.device);
            *p++ = '"';
        }
        if (!e.typeName.empty()) {
            p = put(p, ",\"type\":\"");
            p = put(p, e.typeName);
            *p++ = '"';
        }
        const TensorLocation& loc = e.location;
        if (loc.kind != TensorLocation::Kind::None) {
            p = put(p, ",\"location\":{\"kind\":\"");
            p = put(p, locationKindName(loc.kind));
            *p++ = '"';
            if (const std::string* f = file(loc)) {
                p = put(p, ",\"file\":\"");
                p = put(p, *f);
                *p++ = '"';
            }
            p = put(p, ",\"offset\":");
            p = putNumber(p, loc.offset);
            p = put(p, ",\"length\":");
            p = putNumber(p, loc.length);
            if (!loc.storageId.empty()) {
                p = put(p, ",\"storage\":\"");
                p = put(p, loc.storageId);
                p = put(p, "\",\"storage_byte_offset\":");
                p = putNumber(p, loc.storageByteOffset);
                p = put(p, ",\"storage_nbytes\":");
                p = putNumber(p, loc.storageNbytes);
            }
            p = put(p, ",\"storage_offset\":");
            p = putNumber(p, loc.storageOffset);
            if (!loc.strides.empty()) {
                p = put(p, ",\"strides\":");
                p = putIntegers(p, loc.strides);
            }
            *p++ = '}';
        }
        if (!e.attributes.empty()) {
            p = put(p, ",\"attributes\":");
            p = putPairs(p, e.attributes);
        }
        if (const Quantization* q = e.quantization.get()) {
            p = put(p, ",\"quantization\":{\"scheme\":\"");
            p = put(p, q->scheme);
            p = put(p, "\",\"storage_dtype\":\"");
            p = put(p, dtypeName(q->storageDType));
            *p++ = '"';
            if (!q->logicalShapeKnown)
                p = put(p, ",\"logical_shape_known\":false");
            if (!q->params.empty()) {
                p = put(p, ",\"params\":");
                p = putPairs(p, q->params);
            }
            *p++ = '}';
        }
        if (!e.parts.empty()) {
            p = put(p, ",\"parts\":[");
            bool first = true;
            for (const Entry& part : e.parts) {
                if (!first)
                    *p++ = ',';
                first = false;
                p = putEntry(p, part);
            }
            *p++ = ']';
        }
        *p++ = '}';
        return p;
    }
};

} // namespace

bool writePlainTensorJson(JsonWriter& w, const Entry& e, const Source& s, std::span<const uint8_t> plainFiles)
{
    const RawEntryWriter raw { s, plainFiles };
    const size_t most = raw.size(e, 0);
    if (!most)
        return false;
    w.rawValue(most, [&](char* p) { return raw.putEntry(p, e); });
    return true;
}

void writeEntryJson(JsonWriter& w, const Entry& e, const Source& s, bool shortcut, std::span<const uint8_t> plainFiles)
{
    if (shortcut && writePlainTensorJson(w, e, s, plainFiles))
        return;
    w.beginObject();
    w.field("name", e.name);
    w.field("kind", entryKindName(e.kind));
    w.integers("shape", e.shape);
    if (!e.shapeKnown)
        w.field("shape_known", false);
    w.field("dtype", e.kind == EntryKind::Object ? std::string_view("object") : dtypeName(e.dtype));
    if (e.kind != EntryKind::Object) {
        w.field("numel", e.numel());
        w.field("nbytes", e.nbytes());
    }
    if (e.requiresGrad)
        w.field("requires_grad", true);
    if (e.isParameter)
        w.field("parameter", true);
    if (!e.device.empty())
        w.field("device", e.device);
    if (!e.typeName.empty())
        w.field("type", e.typeName);
    if (e.kind == EntryKind::Object)
        w.field("value", e.value);
    const auto& loc = e.location;
    if (loc.kind != TensorLocation::Kind::None) {
        w.key("location");
        w.beginObject();
        w.field("kind", locationKindName(loc.kind));
        if (loc.file >= 0 && static_cast<size_t>(loc.file) < s.files.size())
            w.field("file", s.files[static_cast<size_t>(loc.file)]);
        w.field("offset", loc.offset);
        w.field("length", loc.length);
        if (!loc.storageId.empty()) {
            w.field("storage", loc.storageId);
            w.field("storage_byte_offset", loc.storageByteOffset);
            w.field("storage_nbytes", loc.storageNbytes);
        }
        w.field("storage_offset", loc.storageOffset);
        if (!loc.strides.empty())
            w.integers("strides", loc.strides);
        w.endObject();
    }
    if (!e.attributes.empty()) {
        w.key("attributes");
        w.beginObject();
        for (const auto& [k, v] : e.attributes)
            w.field(k, v);
        w.endObject();
    }
    if (e.sharding) {
        const Sharding& sh = *e.sharding;
        w.key("sharding");
        w.beginObject();
        w.field("kind", shardingKindName(sh.kind));
        if (!sh.localShape.empty() || sh.kind == Sharding::Kind::DTensor)
            w.integers("local_shape", sh.localShape);
        if (!sh.placements.empty()) {
            w.key("placements");
            w.beginArray();
            for (const auto& p : sh.placements)
                w.string(p);
            w.endArray();
        }
        if (!sh.meshShape.empty())
            w.integers("mesh_shape", sh.meshShape);
        if (!sh.meshDimNames.empty()) {
            w.key("mesh_dim_names");
            w.beginArray();
            for (const auto& n : sh.meshDimNames)
                w.string(n);
            w.endArray();
        }
        if (!sh.chunks.empty()) {
            w.key("chunks");
            w.beginArray();
            for (const auto& c : sh.chunks) {
                w.beginObject();
                w.integers("offsets", c.offsets);
                w.integers("sizes", c.sizes);
                if (c.file >= 0 && static_cast<size_t>(c.file) < s.files.size())
                    w.field("file", s.files[static_cast<size_t>(c.file)]);
                if (c.byteLength) {
                    w.field("byte_offset", c.byteOffset);
                    w.field("byte_length", c.byteLength);
                    if (c.inItem) // the range is the DCP item holding the chunk, not yet read (ls --inspect-items)
                        w.field("in_item", true);
                    if (c.transformed) // the item's bytes are transformed (zstd): not the elements
                        w.field("transformed", true);
                }
                if (!c.label.empty())
                    w.field("label", c.label);
                w.endObject();
            }
            w.endArray();
        }
        w.endObject();
    }
    if (e.quantization) {
        const Quantization& q = *e.quantization;
        w.key("quantization");
        w.beginObject();
        w.field("scheme", q.scheme);
        w.field("storage_dtype", dtypeName(q.storageDType));
        if (!q.logicalShapeKnown)
            w.field("logical_shape_known", false);
        if (!q.params.empty()) {
            w.key("params");
            w.beginObject();
            for (const auto& [k, v] : q.params)
                w.field(k, v);
            w.endObject();
        }
        w.endObject();
    }
    if (!e.parts.empty()) {
        w.key("parts");
        w.beginArray();
        for (const auto& p : e.parts)
            writeEntryJson(w, p, s, shortcut, plainFiles);
        w.endArray();
    }
    w.endObject();
}

void writeFindingsJson(JsonWriter& w, const std::vector<Finding>& findings)
{
    w.beginArray();
    for (const auto& f : findings) {
        w.beginObject();
        w.field("severity", severityName(f.severity));
        w.field("message", f.message);
        if (!f.entry.empty())
            w.field("entry", f.entry);
        w.endObject();
    }
    w.endArray();
}

void sourceToJson(const Source& s, const TextSink& sink)
{
    JsonWriter w;
    auto handOn = [&] {
        sink(w.text());
        w.clearText();
    };
    w.beginObject();
    w.key("source");
    writeSourceJson(w, s);
    w.key("entries");
    w.beginArray();
    handOn();
    // Each chunk an array of its own whose brackets are left out. Rows not built yet stay so: each entry is
    // built, written and forgotten (DeferredEntries::forEachBuilt), the same text as from the built entries.
    JsonWriter chunkWriters[3];
    const DeferredEntries* rows = s.entries.deferred();
    const std::vector<uint8_t> plain = plainFiles(s); // each entry names one of them
    writeInChunks(
        s.entries.size(), 1024, // a few hundred bytes each
        [&](size_t slot, size_t from, size_t to) {
            JsonWriter& c = chunkWriters[slot];
            c.restart();
            c.beginArray();
            if (rows)
                rows->forEachBuilt(from, to, [&](const Entry& e) { writeEntryJson(c, e, s, true, plain); });
            else
                for (size_t i = from; i < to; ++i)
                    writeEntryJson(c, s.entries[i], s, true, plain);
            c.endArray();
            const std::string_view text = c.text();
            return text.substr(1, text.size() - 2);
        },
        sink, true);
    w.endArray();
    w.key("findings");
    writeFindingsJson(w, s.findings);
    w.endObject();
    handOn();
    sink("\n");
}

std::string sourceToJson(const Source& s)
{
    std::string out;
    sourceToJson(s, [&out](std::string_view part) { out += part; });
    return out;
}

namespace {

// Names, keys and messages come from the file: shown terminal-safe (util/terminal_text.h), and columns
// measured on what is shown.
void appendDisplay(std::string& out, std::string_view text)
{
    appendTerminalText(out, text);
}
size_t displayWidth(std::string_view text)
{
    return terminalColumns(text);
}

// The DTYPE and SHAPE cells of a row, written into small buffers: no allocation per row.
struct RowCells {
    char dtype[96];
    size_t dtypeLen;
    char shape[48];
    size_t shapeLen;
    char count[24];
    size_t countLen;
    std::string_view objectType;
    std::string_view objectValue;
    // Only the lengths say what is filled: no need to clear the buffers for every row.
    void reset()
    {
        dtypeLen = shapeLen = countLen = 0;
        objectType = objectValue = {};
    }
};

void put(char* buf, size_t cap, size_t& len, std::string_view s)
{
    size_t n = std::min(s.size(), cap - len);
    std::memcpy(buf + len, s.data(), n);
    len += n;
}

// What a table row shows: of an entry, or of a row handed over in its place (model/entry_list.h). Read
// through accessors, so that each pass decodes only the fields it shows.
class TableRow {
public:
    explicit TableRow(const Entry& e)
        : m_entry(&e)
    {
    }
    explicit TableRow(const EntryRow& r)
        : m_row(r)
    {
    }
    std::string_view name() const { return m_entry ? std::string_view(m_entry->name) : m_row.name; }
    EntryKind kind() const { return m_entry ? m_entry->kind : m_row.parts ? EntryKind::Group : EntryKind::Tensor; }
    DType dtype() const { return m_entry ? m_entry->dtype : m_row.dtype; }
    std::string_view typeName() const { return m_entry ? m_entry->typeName.view() : std::string_view(); }
    bool hasTypeName() const { return m_entry && !m_entry->typeName.empty(); }
    std::string_view value() const { return m_entry ? m_entry->value.view() : std::string_view(); }
    size_t partCount() const { return m_entry ? m_entry->parts.size() : m_row.parts; }
    bool shapeKnown() const { return m_entry ? m_entry->shapeKnown : true; }
    std::span<const int64_t> shape() const
    {
        return m_entry ? std::span<const int64_t>(m_entry->shape.data(), m_entry->shape.size()) : m_row.shape;
    }
    uint64_t numel() const { return m_entry ? m_entry->numel() : shapeVolume(m_row.shape); }
    uint64_t nbytes() const
    {
        return m_entry ? m_entry->nbytes() : m_row.parts ? m_row.groupBytes : tensorBytes(numel(), m_row.dtype);
    }
    std::string_view storageId() const { return m_entry ? m_entry->location.storageId.view() : m_row.storageId; }

private:
    const Entry* m_entry = nullptr;
    EntryRow m_row;
};

void rowCells(const TableRow& e, RowCells& r)
{
    if (e.kind() == EntryKind::Object) {
        r.objectType = e.hasTypeName() ? e.typeName() : std::string_view("object");
        r.objectValue = e.value();
        return;
    }
    put(r.dtype, sizeof r.dtype, r.dtypeLen, dtypeName(e.dtype()));
    if (e.kind() == EntryKind::Group) {
        // to_chars, not snprintf: an index of DeepSeek-V3's size lists 45,000 groups.
        char count[24];
        auto [end, ec] = std::to_chars(count, count + sizeof count, e.partCount());
        put(r.dtype, sizeof r.dtype, r.dtypeLen, " (");
        put(r.dtype, sizeof r.dtype, r.dtypeLen, std::string_view(count, static_cast<size_t>(end - count)));
        put(r.dtype, sizeof r.dtype, r.dtypeLen, " parts)");
    } else if (e.hasTypeName()) {
        std::string_view t = e.typeName();
        put(r.dtype, sizeof r.dtype, r.dtypeLen, " <");
        put(r.dtype, sizeof r.dtype, r.dtypeLen,
            terminalText(t.substr(t.rfind('.') + 1))); // a class name from the pickle
        put(r.dtype, sizeof r.dtype, r.dtypeLen, ">");
    }
    if (!e.shapeKnown()) {
        put(r.shape, sizeof r.shape, r.shapeLen, "?");
    } else {
        // "[a, b, c]", cut to 40 characters with "..." like the column allows.
        // Only the first 40 characters are shown, so formatting stops once 44 are written.
        constexpr size_t kShown = 44;
        char full[kShown + 32]; // room for one more ", " + 20 digits + "]" past kShown
        size_t len = 0;
        full[len++] = '[';
        for (size_t i = 0; i < e.shape().size() && len < kShown; ++i) {
            if (i) {
                full[len++] = ',';
                full[len++] = ' ';
            }
            auto [p, ec] = std::to_chars(full + len, full + kShown + 28, e.shape()[i]);
            len = static_cast<size_t>(p - full);
        }
        if (len < sizeof full)
            full[len++] = ']';
        if (len > 40) {
            put(r.shape, sizeof r.shape, r.shapeLen, std::string_view(full, 37));
            put(r.shape, sizeof r.shape, r.shapeLen, "...");
        } else {
            put(r.shape, sizeof r.shape, r.shapeLen, std::string_view(full, len));
        }
    }
    auto [p, ec] = std::to_chars(r.count, r.count + sizeof r.count, e.numel());
    r.countLen = static_cast<size_t>(p - r.count);
}

} // namespace

std::string loadSafetyLine(const Source& s)
{
    const WeightsOnlyLoad& wo = s.weightsOnly;
    if (!wo.checked && wo.executes.empty())
        return {};
    std::string line = "load safety: " + std::string(wo.verdict()) + " (";
    if (!wo.executes.empty()) {
        line += "loading it would run code: see the danger findings";
    } else if (!wo.refused.empty()) {
        line += "torch.load(weights_only=False) would import classes outside torch's allowlist";
    } else {
        line += "torch.load(weights_only=True) loads it";
        for (size_t i = 0; i < wo.imports.size(); ++i)
            line += std::string(i ? ", " : " after ") + "`import " + terminalText(wo.imports[i]) + "`";
    }
    return line + ")\n";
}

std::string sourceToTable(const Source& s)
{
    std::string out;
    sourceToTable(s, [&out](std::string_view part) { out += part; });
    return out;
}

namespace {

// The columns, and the totals of the footer, measured in the same pass over the entries.
struct TableWidths {
    size_t name = 4, dtype = 5, shape = 5, count = 5;
    uint64_t parameters = 0, bytes = 0; // as Source::totalParameters and totalBytes
};

// Characters std::to_chars writes for v.
size_t decimalWidth(uint64_t v)
{
    size_t n = 1;
    for (; v >= 10; v /= 10)
        ++n;
    return n;
}
size_t decimalWidth(int64_t v) { return v < 0 ? 1 + decimalWidth(0 - static_cast<uint64_t>(v)) : decimalWidth(static_cast<uint64_t>(v)); }

// The columns rows [from, to) need; rowAt(i) gives row i's TableRow.
template <typename RowAt> TableWidths measureRows(const RowAt& rowAt, size_t from, size_t to)
{
    TableWidths w;
    RowCells cells; // filled by rowCells after reset(); the buffers are never read past their lengths
    for (size_t i = from; i < to; ++i) {
        const TableRow e = rowAt(i);
        w.parameters += e.kind() == EntryKind::Object ? 0 : e.numel(); // as Source::parameterCount
        w.bytes += e.nbytes();
        w.name = std::max(w.name, e.name().empty() ? size_t(8) : displayWidth(e.name()));
        const bool group = e.kind() == EntryKind::Group;
        if (((e.kind() == EntryKind::Tensor && !e.hasTypeName()) || group) && e.shapeKnown()) {
            // A plain tensor's or a group's cells measured without writing them: what rowCells writes is its
            // dtype's name (a group's followed by " (n parts)"), "[a, b, c]" shown up to 40 characters, and the
            // element count.
            size_t shape = 2 + (e.shape().empty() ? 0 : 2 * (e.shape().size() - 1));
            for (int64_t d : e.shape())
                shape += decimalWidth(d);
            const size_t dtype = dtypeName(e.dtype()).size() + (group ? 9 + decimalWidth(uint64_t(e.partCount())) : 0);
            w.dtype = std::max(w.dtype, std::min(dtype, sizeof cells.dtype));
            w.shape = std::max(w.shape, std::min<size_t>(shape, 40));
            w.count = std::max(w.count, decimalWidth(e.numel()));
            continue;
        }
        cells.reset();
        rowCells(e, cells);
        if (e.kind() == EntryKind::Object) {
            w.dtype = std::max(w.dtype, displayWidth(cells.objectType));
            w.shape = std::max(w.shape, std::min<size_t>(displayWidth(cells.objectValue), 40));
        } else {
            w.dtype = std::max(w.dtype, cells.dtypeLen);
            w.shape = std::max(w.shape, cells.shapeLen);
            w.count = std::max(w.count, cells.countLen);
        }
    }
    return w;
}

void fillTo(std::string& out, size_t used, size_t width)
{
    if (used < width)
        out.append(width - used, ' ');
}

// `text` shown (terminal-safe) and padded to `width` columns.
void appendCell(std::string& out, std::string_view text, size_t width)
{
    const size_t before = out.size();
    appendDisplay(out, text);
    fillTo(out, out.size() - before, width);
}

// An object's DTYPE, SHAPE and NUMEL cells, padded, with the two spaces between them.
std::string objectCells(const RowCells& cells, const TableWidths& w)
{
    std::string out;
    appendCell(out, cells.objectType, w.dtype);
    out += "  ";
    // Cut what is shown, not the raw bytes: an escape or a UTF-8 sequence is never split.
    const std::string v = terminalText(cells.objectValue);
    size_t columns = 0;
    size_t cut = 0;
    for (; cut < v.size(); ++cut) {
        if ((static_cast<unsigned char>(v[cut]) & 0xC0) != 0x80 && ++columns > 37)
            break;
    }
    const bool longer = displayWidth(v) > 40;
    out.append(longer ? std::string_view(v).substr(0, cut) : std::string_view(v));
    if (longer)
        out += "...";
    fillTo(out, longer ? 40 : displayWidth(v), w.shape);
    out += "  ";
    fillTo(out, 0, w.count);
    return out;
}

// A chunk of rows, laid out in place: each row is written through a pointer in one step, where a dozen
// std::string appends, each checking the length, took a fifth of a 76,800-row table's time.
class RowText {
public:
    // Room for `n` more bytes at the end; keep(end) keeps what was written there, up to `end`.
    char* room(size_t n)
    {
        if (m_capacity - m_size < n)
            grow(m_size + n);
        return m_data.get() + m_size;
    }
    void keep(const char* end) { m_size = static_cast<size_t>(end - m_data.get()); }
    void clear() { m_size = 0; }
    std::string_view view() const { return { m_data.get(), m_size }; }

private:
    void grow(size_t need)
    {
        const size_t capacity = std::max(need, 2 * m_capacity);
        auto grown = std::make_unique_for_overwrite<char[]>(capacity);
        if (m_size)
            std::memcpy(grown.get(), m_data.get(), m_size);
        m_data = std::move(grown);
        m_capacity = capacity;
    }
    std::unique_ptr<char[]> m_data;
    size_t m_size = 0;
    size_t m_capacity = 0;
};

// A row's writes go a word at a time, up to this many bytes past what they keep: room() asks for it beyond
// the row's widest, and what lies past the row's end is overwritten by the next row or never kept. Short
// pieces through memcpy and memset calls, and a name checked in one pass and copied in another, cost 3-15%
// of a 76,800-row table (in-process medians, three interleaved pairs).
constexpr size_t kRowSlack = 64;

// Spaces from `used` columns up to `width`, at p; returns the end. Writes whole words (kRowSlack).
char* padTo(char* p, size_t used, size_t width)
{
    if (used >= width)
        return p;
    constexpr uint64_t kSpaces = 0x2020202020202020ull;
    for (size_t i = 0; i < width - used; i += 8)
        std::memcpy(p + i, &kSpaces, 8);
    return p + (width - used);
}

// `n` bytes of a cell buffer at least 16 bytes long, a word or two at a time (kRowSlack); n is at most the
// buffer's size.
template <size_t N> char* copyCell(char* p, const char (&cell)[N], size_t n)
{
    static_assert(N >= 16);
    if (n <= 16)
        std::memcpy(p, cell, 16); // a constant size: two moves, not a call
    else
        std::memcpy(p, cell, n);
    return p + n;
}

// `text` shown terminal-safe at p, with the columns it takes. Printable ASCII (nearly every name) is checked
// and copied in one pass, a word at a time (kRowSlack); anything else is written escaped, from the start.
char* writeDisplay(char* p, std::string_view text, size_t& columns)
{
    size_t i = 0;
    for (; i + 8 <= text.size(); i += 8) {
        uint64_t w;
        std::memcpy(&w, text.data() + i, 8);
        if (!printableAsciiWord(w))
            break;
        std::memcpy(p + i, &w, 8);
    }
    for (; i < text.size() && printableAsciiByte(text[i]); ++i)
        p[i] = text[i];
    if (i == text.size()) {
        columns = text.size();
        return p + text.size();
    }
    char* end = writeTerminalText(p, text);
    columns = displayWidth(std::string_view(p, static_cast<size_t>(end - p)));
    return end;
}

// Rows [from, to), appended to `out`.
template <typename RowAt> void appendRows(RowText& out, const RowAt& rowAt, size_t from, size_t to, const TableWidths& w)
{
    RowCells cells;
    std::string object; // an object row's middle cells
    for (size_t i = from; i < to; ++i) {
        const TableRow e = rowAt(i);
        cells.reset();
        rowCells(e, cells);
        const bool isObject = e.kind() == EntryKind::Object;
        if (isObject)
            object = objectCells(cells, w);
        const std::string_view storage = e.storageId();
        // Each part at its widest: text grown by escapes, cells past their column, padding, separators.
        const size_t room = kTerminalTextGrowth * (std::max<size_t>(e.name().size(), 8) + storage.size()) + w.name
            + (isObject ? object.size()
                        : std::max(cells.dtypeLen, w.dtype) + std::max(cells.shapeLen, w.shape)
                        + std::max(cells.countLen, w.count) + 4)
            + 5 + kRowSlack;
        char* p = out.room(room);
        size_t columns = 8;
        p = e.name().empty() ? copyBytes(p, "(tensor)") : writeDisplay(p, e.name(), columns);
        p = padTo(p, columns, w.name);
        p = copyBytes(p, "  ");
        if (isObject) {
            p = copyBytes(p, object);
        } else {
            p = copyCell(p, cells.dtype, cells.dtypeLen);
            p = padTo(p, cells.dtypeLen, w.dtype);
            p = copyBytes(p, "  ");
            p = copyCell(p, cells.shape, cells.shapeLen);
            p = padTo(p, cells.shapeLen, w.shape);
            p = copyBytes(p, "  ");
            p = padTo(p, cells.countLen, w.count);
            p = copyCell(p, cells.count, cells.countLen);
        }
        p = copyBytes(p, "  ");
        p = writeDisplay(p, storage, columns);
        *p++ = '\n';
        out.keep(p);
    }
}

template <typename RowAt> void writeTable(const Source& s, size_t rowCount, const RowAt& rowAt, const TextSink& sink)
{
    // Pass 1: column widths, over each half on a core of its own when there are rows enough to pay for the
    // thread (as writeInChunks starts its helper only for two chunks or more). Pass 2: the rows.
    const size_t half = rowCount / 2;
    TableWidths halves[2];
    parallelFor(2, rowCount >= 8192 ? 2 : 1,
        [&](size_t j) { halves[j] = measureRows(rowAt, j ? half : 0, j ? rowCount : half); });
    TableWidths w;
    w.name = std::min<size_t>(std::max(halves[0].name, halves[1].name), 100);
    w.dtype = std::max(halves[0].dtype, halves[1].dtype);
    w.shape = std::min<size_t>(std::max(halves[0].shape, halves[1].shape), 40);
    w.count = std::max(halves[0].count, halves[1].count);
    w.parameters = halves[0].parameters + halves[1].parameters;
    w.bytes = halves[0].bytes + halves[1].bytes;

    std::string out;
    out += "path:      ";
    appendDisplay(out, s.path);
    out += "\nformat:    " + std::string(formatId(s.format)) + "\n";
    out += "container: ";
    appendDisplay(out, s.container.empty() ? std::string_view("(top level)") : std::string_view(s.container));
    if (s.containers.size() > 1)
        out += "   (" + std::to_string(s.containers.size() - 1) + " more: statelens ls --containers)";
    out += "\n\n";
    appendCell(out, "NAME", w.name);
    out += "  ";
    appendCell(out, "DTYPE", w.dtype);
    out += "  ";
    appendCell(out, "SHAPE", w.shape);
    out += "  ";
    fillTo(out, 5, w.count);
    out += "NUMEL  STORAGE\n";
    sink(out);
    out.clear();
    RowText rows[3];
    writeInChunks(
        rowCount, 4096, // about a hundred bytes each
        [&](size_t slot, size_t from, size_t to) {
            rows[slot].clear();
            appendRows(rows[slot], rowAt, from, to, w);
            return rows[slot].view();
        },
        sink, false);
    out += "\n" + std::to_string(rowCount) + " entries, " + humanCount(w.parameters) + " parameters, "
        + humanBytes(w.bytes) + "\n";
    out += loadSafetyLine(s);
    if (!s.findings.empty()) {
        out += "\nfindings:\n";
        for (const auto& f : s.findings) {
            out += "  [" + std::string(severityName(f.severity)) + "] ";
            if (!f.entry.empty()) {
                appendDisplay(out, f.entry);
                out += ": ";
            }
            appendDisplay(out, f.message);
            out += '\n';
        }
    }
    sink(out);
}

} // namespace

void sourceToTable(const Source& s, const TextSink& sink)
{
    // Rows handed over in place of entries are listed as they are: the entries are not built for a listing.
    if (const DeferredEntries* rows = s.entries.deferred()) {
        writeTable(s, rows->size(), [rows](size_t i) { return TableRow(rows->row(i)); }, sink);
    } else {
        const std::vector<Entry>& entries = s.entries.vector();
        writeTable(s, entries.size(), [&entries](size_t i) { return TableRow(entries[i]); }, sink);
    }
}

} // namespace sl
