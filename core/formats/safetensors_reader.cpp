#include "safetensors_reader.h"

#include "formats/json_keys.h"
#include "io/byte_reader.h"
#include "util/emplace_built.h"
#include "util/error.h"
#include "util/timings.h"
#include "util/name_index.h"

#include <simdjson.h>

#include <algorithm>
#include <bit>
#include <utility>
#include <optional>

namespace sl {

namespace {

// A broken file can have one problem per tensor; the first few name their tensors, then a count.
constexpr size_t kMaxFindingsPerKind = 20;

struct Span {
    uint64_t begin;
    uint64_t end;
    size_t entry;
};

bool isJsonSpace(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Sorts (name hash, tensor index) pairs that arrive in index order into (hash, index) order, as std::sort
// would: stable counting passes over a digit of the hash each (an LSD radix sort), which keep equal
// hashes in index order. A fifth of std::sort's time at 100,000 names, where the sort was a sixth of the
// header reader's.
void sortHashesInIndexOrder(std::vector<std::pair<uint64_t, uint32_t>>& v)
{
    if (v.size() < 256) {
        std::sort(v.begin(), v.end());
        return;
    }
    // Digits of about log2(n) bits: each pass clears and sums 2^bits counters, which a 16-bit digit made
    // the whole cost for a shard of a few hundred names (the 163 headers of a DeepSeek-V3 index).
    const unsigned bits = std::clamp<unsigned>(static_cast<unsigned>(std::bit_width(v.size())), 8, 16);
    const uint64_t mask = (uint64_t(1) << bits) - 1;
    std::vector<std::pair<uint64_t, uint32_t>> other(v.size());
    std::vector<uint32_t> start(size_t(1) << bits);
    for (unsigned shift = 0; shift < 64; shift += bits) {
        std::fill(start.begin(), start.end(), 0);
        for (const auto& p : v)
            ++start[(p.first >> shift) & mask];
        uint32_t sum = 0;
        for (uint32_t& s : start)
            sum += std::exchange(s, sum);
        for (const auto& p : v)
            other[start[(p.first >> shift) & mask]++] = p;
        v.swap(other);
    }
}

} // namespace

bool looksLikeSafetensors(Bytes head, uint64_t fileSize)
{
    if (head.size() < 10 || fileSize < head.size())
        return false;
    ByteReader r(head);
    uint64_t n = r.u64le();
    if (n < 2 || n > kSafetensorsMaxHeader || n > fileSize - 8)
        return false;
    for (size_t i = 8; i < 8 + n && i < head.size(); ++i) {
        if (head[i] == '{')
            return true;
        if (!isJsonSpace(head[i]))
            return false;
    }
    return false;
}

void readSafetensorsHeader(const InputFile& file, const OpenOptions& options, SafetensorsHeader& out,
    const std::function<void(const SafetensorsTensor&)>& onTensor)
{
    const uint64_t fileSize = file.size();
    const std::string& path = file.path();
    const auto finding = [&out](Severity s, std::string message, std::string_view entry = {}) {
        out.findings.push_back(Finding { s, std::move(message), std::string(entry) });
    };

    if (fileSize < 8)
        throw LoadError(path, "HeaderTooSmall: " + std::to_string(fileSize) + " bytes, a safetensors file needs at least 8");
    uint8_t length[8];
    file.readInto(0, length);
    uint64_t n = ByteReader(Bytes(length)).u64le();
    if (n > kSafetensorsMaxHeader)
        throw LoadError(path, "HeaderTooLarge: header length " + std::to_string(n) + " exceeds the 100,000,000-byte limit");
    if (n > fileSize - 8)
        throw LoadError(path, "InvalidHeaderLength: header length " + std::to_string(n) + " runs past the end of the "
                + std::to_string(fileSize) + "-byte file");
    const uint64_t bufferStart = 8 + n;
    out.bufferStart = bufferStart;

    PhaseTimer parseTimer(options.timings, "header parse");
    // Only the header is read, into a buffer with the padding simdjson reads past the text (without
    // interpreting it). simdjson On-Demand walks it once without building a document (the DOM parser's tape
    // and string buffers for a 13 MB header cost as much as the parse). Names stay views into the text.
    out.text = paddedJsonBuffer(static_cast<size_t>(n));
    file.readInto(8, std::span(reinterpret_cast<uint8_t*>(out.text.get()), static_cast<size_t>(n)));
    const char* const textEnd = out.text.get() + n;
    auto bad = [&](const std::string& what) { throw LoadError(path, "InvalidHeaderDeserialization: " + what); };
    // `what` is only called on an error: a message built per field cost more than the parse itself.
    auto check = [&](simdjson::error_code err, auto&& what) {
        if (err) [[unlikely]]
            bad(std::string(what()) + " (" + simdjson::error_message(err) + ")");
    };
    simdjson::ondemand::parser parser;
    simdjson::ondemand::document doc;
    if (auto err = parser.iterate(out.text.get(), static_cast<size_t>(n), static_cast<size_t>(n) + simdjson::SIMDJSON_PADDING)
                       .get(doc))
        throw LoadError(path, std::string("InvalidHeaderDeserialization: ") + simdjson::error_message(err));
    simdjson::ondemand::object header;
    if (doc.get_object().get(header))
        throw LoadError(path, "InvalidHeaderDeserialization: the header is not a JSON object");

    std::vector<Span> spans;
    spans.reserve(static_cast<size_t>(n / 64));
    // Each name's hash, taken while the name is in cache, for the duplicate check below.
    std::vector<std::pair<uint64_t, uint32_t>> hashes;
    hashes.reserve(static_cast<size_t>(n / 64));
    // Every name, for the checks after the parse (views into the text).
    std::vector<std::string_view> names;
    names.reserve(static_cast<size_t>(n / 64));
    std::string_view lastDtype;
    std::optional<DType> lastDt;
    size_t unknownDtypes = 0;

    for (auto member : header) {
        simdjson::ondemand::field field;
        check(std::move(member).get(field), [] { return "malformed tensor name"; });
        std::string_view key;
        check(jsonKey(field, textEnd, out.unescaped, key), [] { return "malformed tensor name"; });
        simdjson::ondemand::value value = field.value();
        if (key == "__metadata__") {
            simdjson::ondemand::object meta;
            if (value.get_object().get(meta))
                bad("__metadata__ is not an object");
            for (auto mf : meta) {
                std::string_view mk;
                check(mf.unescaped_key().get(mk), [] { return "malformed __metadata__ key"; });
                std::string k(mk);
                std::string_view s;
                if (mf.value().get_string().get(s))
                    bad("__metadata__ value for '" + k + "' is not a string");
                out.metadata.emplace_back(std::move(k), std::string(s));
            }
            continue;
        }
        if (names.size() >= UINT32_MAX)
            bad("more than 4 billion tensors");
        hashes.emplace_back(std::hash<std::string_view> {}(key), static_cast<uint32_t>(names.size()));
        names.push_back(key);
        SafetensorsTensor t;
        t.name = key;
        const auto named = [&t](const char* what) { return "entry '" + std::string(t.name) + "' " + what; };
        simdjson::ondemand::object info;
        if (value.get_object().get(info))
            bad(named("is not an object"));
        std::string_view dtypeStr;
        bool haveDtype = false;
        bool haveShape = false;
        bool haveOffsets = false;
        uint64_t numel = 1;
        bool overflow = false;
        uint64_t begin = 0;
        uint64_t end = 0;
        for (auto f : info) {
            std::string_view k;
            check(f.unescaped_key().get(k), [&] { return "malformed field in entry '" + std::string(t.name) + "'"; });
            if (k == "dtype") {
                if (f.value().get_string().get(dtypeStr))
                    bad(named("has no string dtype"));
                haveDtype = true;
                // dtype strings repeat; the previous one's answer usually applies.
                if (dtypeStr != lastDtype) {
                    lastDt = dtypeFromSafetensors(dtypeStr);
                    lastDtype = dtypeStr;
                }
            } else if (k == "shape") {
                simdjson::ondemand::array shapeArr;
                if (f.value().get_array().get(shapeArr))
                    bad(named("has no shape array"));
                for (auto d : shapeArr) {
                    uint64_t dim = 0;
                    if (d.get_uint64().get(dim) || dim > static_cast<uint64_t>(INT64_MAX))
                        bad(named("has a shape that is not a list of non-negative integers"));
                    if (t.shape.size() >= 64)
                        bad(named("has more than 64 dimensions"));
                    t.shape.push_back(static_cast<int64_t>(dim));
                    overflow |= __builtin_mul_overflow(numel, dim, &numel);
                }
                haveShape = true;
            } else if (k == "data_offsets") {
                simdjson::ondemand::array offsets;
                if (f.value().get_array().get(offsets))
                    bad(named("has no data_offsets array"));
                size_t count = 0;
                for (auto o : offsets) {
                    uint64_t v = 0;
                    if (o.get_uint64().get(v) || count >= 2)
                        bad(named("needs data_offsets [begin, end]"));
                    (count == 0 ? begin : end) = v;
                    ++count;
                }
                if (count != 2)
                    bad(named("needs data_offsets [begin, end]"));
                haveOffsets = true;
            }
        }
        if (!haveDtype)
            bad(named("has no string dtype"));
        if (!haveShape)
            bad(named("has no shape array"));
        if (!haveOffsets)
            bad(named("has no data_offsets array"));

        if (!lastDt) {
            if (++unknownDtypes <= kMaxFindingsPerKind)
                finding(Severity::Warning,
                    "unknown dtype '" + std::string(dtypeStr) + "'; the reference reader refuses the file", t.name);
            t.dtypeText = dtypeStr;
        }
        t.dtype = lastDt.value_or(DType::Unknown);

        // Byte count against the shape, as Metadata::validate checks it.
        unsigned bits = dtypeBits(t.dtype);
        uint64_t totalBits = 0;
        overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(bits), &totalBits);
        if (overflow)
            finding(Severity::Danger, "ValidationOverflow: shape too large", t.name);
        else if (bits && totalBits % 8)
            finding(Severity::Danger, "MisalignedSlice: " + std::to_string(totalBits) + " bits is not whole bytes", t.name);
        else if (bits && end >= begin && end - begin != totalBits / 8)
            finding(Severity::Danger,
                "TensorInvalidInfo: offsets cover " + std::to_string(end - begin) + " bytes but the shape needs "
                    + std::to_string(totalBits / 8),
                t.name);
        if (end < begin)
            finding(Severity::Danger, "InvalidOffset: data_offsets end before they begin", t.name);
        t.begin = begin;
        t.end = end;
        t.bytesInFile = begin <= fileSize - bufferStart && end <= fileSize - bufferStart;

        // torch sees F4 as float4_e2m1fn_x2 with the last dimension halved (two values per byte).
        if (t.dtype == DType::Float4_e2m1fn && !t.shape.empty() && t.shape.back() % 2 == 0) {
            t.halvedF4 = true;
            t.dtype = DType::Float4_e2m1fn_x2;
            t.shape.back() /= 2;
        }
        spans.push_back(Span { begin, end, names.size() - 1 });
        onTensor(t);
    }
    // On-Demand stops at the end of the object; anything after it (a second value) is malformed JSON.
    if (const char* at = nullptr; !doc.current_location().get(at))
        bad("unexpected content after the header object");
    if (unknownDtypes > kMaxFindingsPerKind)
        finding(Severity::Warning, std::to_string(unknownDtypes) + " tensors in all have unknown dtypes");
    parseTimer.stop();

    // Duplicate names: sort 64-bit name hashes and compare the names of equal neighbours. Cheaper than a
    // hash table whose 100,000 random probes miss the cache; the reference reader keeps only one of them.
    PhaseTimer duplicateTimer(options.timings, "duplicate names");
    {
        sortHashesInIndexOrder(hashes);
        std::vector<uint32_t> duplicates;
        for (size_t i = 1; i < hashes.size(); ++i)
            for (size_t j = i; j-- > 0 && hashes[j].first == hashes[i].first;)
                if (names[hashes[j].second] == names[hashes[i].second]) {
                    duplicates.push_back(std::max(hashes[i].second, hashes[j].second));
                    break;
                }
        std::sort(duplicates.begin(), duplicates.end());
        out.duplicateNames = !duplicates.empty();
        for (size_t i = 0; i < duplicates.size() && i < kMaxFindingsPerKind; ++i)
            finding(Severity::Danger, "duplicate tensor name in the header; the reference reader keeps only one",
                names[duplicates[i]]);
        if (duplicates.size() > kMaxFindingsPerKind)
            finding(Severity::Danger, std::to_string(duplicates.size()) + " duplicate tensor names in all");
    }
    duplicateTimer.stop();
    PhaseTimer validateTimer(options.timings, "validate offsets");
    // Offsets must tile the buffer exactly: sorted, each beginning where the previous ended.
    auto before = [](const Span& a, const Span& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; };
    // Writers usually list tensors in buffer order. When the spans strictly increase, their sorted order is
    // unique and std::sort could not change it, so the sort (a tenth of a 100k-tensor listing) is skipped.
    bool strictlyIncreasing = std::adjacent_find(spans.begin(), spans.end(),
                                  [&](const Span& a, const Span& b) { return !before(a, b); })
        == spans.end();
    if (!strictlyIncreasing)
        std::sort(spans.begin(), spans.end(), before);
    uint64_t expected = 0;
    size_t reported = 0;
    for (const Span& s : spans) {
        if (s.begin != expected && reported++ < kMaxFindingsPerKind)
            finding(Severity::Danger,
                std::string("InvalidOffset: data starts at ") + std::to_string(s.begin) + " but the previous tensor ends at "
                    + std::to_string(expected) + (s.begin > expected ? " (a gap)" : " (overlap)"),
                names[s.entry]);
        expected = std::max(expected, s.end);
    }
    if (reported > kMaxFindingsPerKind)
        finding(Severity::Danger, "InvalidOffset: " + std::to_string(reported) + " gaps or overlaps between tensors in all");
    if (expected != fileSize - bufferStart)
        finding(Severity::Danger,
            "MetadataIncompleteBuffer: tensors end at buffer byte " + std::to_string(expected) + " but the buffer holds "
                + std::to_string(fileSize - bufferStart)
                + (expected > fileSize - bufferStart ? " (the file is truncated)" : " (trailing bytes)"));
}

Entry safetensorsEntry(uint64_t bufferStart, const SafetensorsTensor& t, int32_t file)
{
    Entry e;
    e.name = std::string(t.name);
    e.dtype = t.dtype;
    e.shape = t.shape;
    e.device = "cpu";
    if (!t.dtypeText.empty())
        e.attributes.emplace_back("header_dtype", std::string(t.dtypeText));
    if (t.halvedF4) {
        Shape written = t.shape;
        written.back() *= 2;
        e.attributes.emplace_back("header_dtype", "F4");
        e.attributes.emplace_back("header_shape", shapeToString(written));
    }
    auto& loc = e.location;
    loc.kind = t.bytesInFile ? TensorLocation::Kind::Mapped : TensorLocation::Kind::Unavailable;
    loc.file = file;
    loc.storageByteOffset = bufferStart + t.begin;
    loc.offset = loc.storageByteOffset;
    loc.length = t.end >= t.begin ? t.end - t.begin : 0;
    loc.storageNbytes = loc.length;
    return e;
}

Source readSafetensors(const std::shared_ptr<const InputFile>& file, const OpenOptions& options)
{
    Source out;
    out.path = file->path();
    out.format = SourceFormat::Safetensors;
    out.files.push_back(file->path());
    SafetensorsHeader header;
    readSafetensorsHeader(*file, options, header, [&](const SafetensorsTensor& t) {
        if (out.entries.empty()) // the header's length is known once its tensors arrive
            out.entries.reserve(static_cast<size_t>(header.bufferStart / 64));
        emplaceBuilt(out.entries, [&] { return safetensorsEntry(header.bufferStart, t, 0); });
    });
    out.metadata = std::move(header.metadata);
    out.findings = std::move(header.findings);
    out.backing = std::make_shared<SourceBacking>(); // entries hold offsets; nothing to keep open
    return out;
}

} // namespace sl
