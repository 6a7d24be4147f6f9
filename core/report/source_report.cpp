#include "source_report.h"

#include <algorithm>
#include <cstdio>

namespace sl {

std::string_view locationKindName(TensorLocation::Kind k)
{
    switch (k) {
    case TensorLocation::Kind::None: return "none";
    case TensorLocation::Kind::Mapped: return "mapped";
    case TensorLocation::Kind::Compressed: return "compressed";
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
    w.field("format", s.format);
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
    w.endObject();
}

void writeEntryJson(JsonWriter& w, const Entry& e, const Source& s)
{
    w.beginObject();
    w.field("name", e.name);
    w.field("kind", entryKindName(e.kind));
    w.key("shape");
    w.beginArray();
    for (int64_t d : e.shape)
        w.integer(d);
    w.endArray();
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
        if (!loc.strides.empty()) {
            w.key("strides");
            w.beginArray();
            for (int64_t st : loc.strides)
                w.integer(st);
            w.endArray();
        }
        w.endObject();
    }
    if (!e.attributes.empty()) {
        w.key("attributes");
        w.beginObject();
        for (const auto& [k, v] : e.attributes)
            w.field(k, v);
        w.endObject();
    }
    if (!e.parts.empty()) {
        w.key("parts");
        w.beginArray();
        for (const auto& p : e.parts)
            writeEntryJson(w, p, s);
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

std::string sourceToJson(const Source& s)
{
    JsonWriter w;
    w.beginObject();
    w.key("source");
    writeSourceJson(w, s);
    w.key("entries");
    w.beginArray();
    for (const auto& e : s.entries)
        writeEntryJson(w, e, s);
    w.endArray();
    w.key("findings");
    writeFindingsJson(w, s.findings);
    w.endObject();
    std::string out(w.text());
    out += '\n';
    return out;
}

std::string sourceToTable(const Source& s)
{
    struct Row {
        std::string name, dtype, shape, count, storage;
    };
    std::vector<Row> rows;
    rows.reserve(s.entries.size());
    for (const auto& e : s.entries) {
        Row r;
        r.name = sanitizeUtf8(e.name.empty() ? std::string_view("(tensor)") : std::string_view(e.name));
        if (e.kind == EntryKind::Object) {
            r.dtype = e.typeName.empty() ? "object" : e.typeName;
            r.shape = e.value;
        } else {
            r.dtype = std::string(dtypeName(e.dtype));
            r.shape = e.dtype == DType::Unknown && e.shape.empty() ? "?" : shapeToString(e.shape);
            r.count = std::to_string(e.numel());
            if (e.kind == EntryKind::Group)
                r.dtype += " (" + std::to_string(e.parts.size()) + " parts)";
            else if (!e.typeName.empty())
                r.dtype += " <" + e.typeName.substr(e.typeName.rfind('.') + 1) + ">";
        }
        r.storage = e.location.storageId;
        rows.push_back(std::move(r));
    }
    size_t wName = 4, wDtype = 5, wShape = 5, wCount = 5;
    for (const auto& r : rows) {
        wName = std::max(wName, r.name.size());
        wDtype = std::max(wDtype, r.dtype.size());
        wShape = std::max(wShape, r.shape.size());
        wCount = std::max(wCount, r.count.size());
    }
    wName = std::min<size_t>(wName, 100);
    wShape = std::min<size_t>(wShape, 40);

    std::string out;
    out.reserve(rows.size() * (wName + wDtype + wShape + wCount + 16) + 512);
    out += "path:      " + sanitizeUtf8(s.path) + "\n";
    out += "format:    " + s.format + "\n";
    out += "container: " + (s.container.empty() ? std::string("(top level)") : s.container);
    if (s.containers.size() > 1)
        out += "   (" + std::to_string(s.containers.size() - 1) + " more: statelens ls --containers)";
    out += "\n\n";
    auto pad = [&](const std::string& text, size_t width, bool right = false) {
        if (text.size() >= width)
            return text;
        std::string spaces(width - text.size(), ' ');
        return right ? spaces + text : text + spaces;
    };
    out += pad("NAME", wName) + "  " + pad("DTYPE", wDtype) + "  " + pad("SHAPE", wShape) + "  " + pad("NUMEL", wCount, true)
        + "  STORAGE\n";
    // Same layout as pad(), appended in place: no temporary strings per cell on listings of 100k rows.
    auto cell = [&](std::string_view text, size_t width, bool right = false) {
        size_t fill = text.size() < width ? width - text.size() : 0;
        if (right)
            out.append(fill, ' ');
        out += text;
        if (!right)
            out.append(fill, ' ');
    };
    for (const auto& r : rows) {
        cell(r.name, wName);
        out += "  ";
        cell(r.dtype, wDtype);
        out += "  ";
        if (r.shape.size() > 40)
            cell(r.shape.substr(0, 37) + "...", wShape);
        else
            cell(r.shape, wShape);
        out += "  ";
        cell(r.count, wCount, true);
        out += "  ";
        out += r.storage;
        out += '\n';
    }
    out += "\n" + std::to_string(s.entries.size()) + " entries, " + humanCount(s.totalParameters()) + " parameters, "
        + humanBytes(s.totalBytes()) + "\n";
    if (!s.findings.empty()) {
        out += "\nfindings:\n";
        for (const auto& f : s.findings) {
            out += "  [" + std::string(severityName(f.severity)) + "] ";
            if (!f.entry.empty())
                out += sanitizeUtf8(f.entry) + ": ";
            out += sanitizeUtf8(f.message) + "\n";
        }
    }
    return out;
}

} // namespace sl
