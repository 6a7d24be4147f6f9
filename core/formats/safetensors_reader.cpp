#include "safetensors_reader.h"

#include "io/byte_reader.h"
#include "util/error.h"
#include "util/timings.h"
#include "util/name_index.h"

#include <simdjson.h>

#include <algorithm>

namespace sl {

namespace {

struct Span {
    uint64_t begin;
    uint64_t end;
    size_t entry;
};

// The backing of a safetensors source: just the mapping.
struct MappedBacking : SourceBacking {
    std::shared_ptr<const MappedFile> file;
};

bool isJsonSpace(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

} // namespace

bool looksLikeSafetensors(Bytes data)
{
    if (data.size() < 10)
        return false;
    ByteReader r(data);
    uint64_t n = r.u64le();
    if (n < 2 || n > kSafetensorsMaxHeader || n > data.size() - 8)
        return false;
    for (size_t i = 8; i < 8 + n; ++i) {
        if (data[i] == '{')
            return true;
        if (!isJsonSpace(data[i]))
            return false;
    }
    return false;
}

Source readSafetensors(const std::shared_ptr<const MappedFile>& file, const OpenOptions& options)
{
    Source out;
    out.path = file->path();
    out.format = "safetensors";
    out.files.push_back(file->path());
    Bytes data = file->bytes();

    if (data.size() < 8)
        throw LoadError(file->path(), "HeaderTooSmall: " + std::to_string(data.size()) + " bytes, a safetensors file needs at least 8");
    uint64_t n = ByteReader(data).u64le();
    if (n > kSafetensorsMaxHeader)
        throw LoadError(file->path(), "HeaderTooLarge: header length " + std::to_string(n) + " exceeds the 100,000,000-byte limit");
    if (n > data.size() - 8)
        throw LoadError(file->path(), "InvalidHeaderLength: header length " + std::to_string(n) + " runs past the end of the "
                + std::to_string(data.size()) + "-byte file");
    const uint64_t bufferStart = 8 + n;

    PhaseTimer jsonTimer(options.timings, "header json");
    simdjson::dom::parser parser;
    simdjson::dom::element root;
    // simdjson reads up to SIMDJSON_PADDING bytes past the text (never interpreting them). The tensor buffer
    // usually follows, so parse the mapping in place; copy the header into a padded buffer only when the
    // file ends too soon after it.
    const bool padded = data.size() - bufferStart >= simdjson::SIMDJSON_PADDING;
    auto err = parser.parse(reinterpret_cast<const char*>(data.data() + 8), static_cast<size_t>(n), !padded).get(root);
    if (err)
        throw LoadError(file->path(), std::string("InvalidHeaderDeserialization: ") + simdjson::error_message(err));
    simdjson::dom::object header;
    if (root.get_object().get(header))
        throw LoadError(file->path(), "InvalidHeaderDeserialization: the header is not a JSON object");

    jsonTimer.stop();
    PhaseTimer entriesTimer(options.timings, "header entries");
    auto bad = [&](const std::string& what) { throw LoadError(file->path(), "InvalidHeaderDeserialization: " + what); };

    // Tensor names so far, for the duplicate check: a flat index over `names` (an unordered_set of 100k
    // names cost more than parsing the JSON). The views point into the parser, alive until we return.
    std::vector<std::string_view> names;
    NameIndex seen;
    auto nameAt = [&](size_t i) { return names[i]; };
    std::vector<Span> spans;
    out.entries.reserve(header.size());
    spans.reserve(header.size());
    names.reserve(header.size());
    seen.reserve(header.size());

    for (auto [key, value] : header) {
        if (key == "__metadata__") {
            simdjson::dom::object meta;
            if (value.get_object().get(meta))
                bad("__metadata__ is not an object");
            for (auto [mk, mv] : meta) {
                std::string_view s;
                if (mv.get_string().get(s))
                    bad("__metadata__ value for '" + std::string(mk) + "' is not a string");
                out.metadata.emplace_back(std::string(mk), std::string(s));
            }
            continue;
        }
        names.push_back(key);
        if (seen.insert(names.size() - 1, nameAt) != names.size() - 1)
            out.addFinding(Severity::Danger, "duplicate tensor name in the header; the reference reader keeps only one",
                std::string(key));
        simdjson::dom::object info;
        if (value.get_object().get(info))
            bad("entry '" + std::string(key) + "' is not an object");
        std::string_view dtypeStr;
        simdjson::dom::array shapeArr;
        simdjson::dom::array offsets;
        if (info["dtype"].get_string().get(dtypeStr))
            bad("entry '" + std::string(key) + "' has no string dtype");
        if (info["shape"].get_array().get(shapeArr))
            bad("entry '" + std::string(key) + "' has no shape array");
        if (info["data_offsets"].get_array().get(offsets))
            bad("entry '" + std::string(key) + "' has no data_offsets array");

        Entry e;
        e.name = std::string(key);
        e.device = "cpu";
        auto dt = dtypeFromSafetensors(dtypeStr);
        if (!dt) {
            out.addFinding(Severity::Warning,
                "unknown dtype '" + std::string(dtypeStr) + "'; the reference reader refuses the file", e.name);
            e.attributes.emplace_back("header_dtype", std::string(dtypeStr));
        }
        e.dtype = dt.value_or(DType::Unknown);
        uint64_t numel = 1;
        bool overflow = false;
        for (auto d : shapeArr) {
            uint64_t dim = 0;
            if (d.get_uint64().get(dim) || dim > static_cast<uint64_t>(INT64_MAX))
                bad("entry '" + e.name + "' has a shape that is not a list of non-negative integers");
            if (e.shape.size() >= 64)
                bad("entry '" + e.name + "' has more than 64 dimensions");
            e.shape.push_back(static_cast<int64_t>(dim));
            overflow |= __builtin_mul_overflow(numel, dim, &numel);
        }
        uint64_t begin = 0;
        uint64_t end = 0;
        if (offsets.size() != 2 || offsets.at(0).get_uint64().get(begin) || offsets.at(1).get_uint64().get(end))
            bad("entry '" + e.name + "' needs data_offsets [begin, end]");

        // Byte count against the shape, as Metadata::validate checks it.
        unsigned bits = dtypeBits(e.dtype);
        uint64_t totalBits = 0;
        overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(bits), &totalBits);
        if (overflow)
            out.addFinding(Severity::Danger, "ValidationOverflow: shape too large", e.name);
        else if (bits && totalBits % 8)
            out.addFinding(Severity::Danger, "MisalignedSlice: " + std::to_string(totalBits) + " bits is not whole bytes", e.name);
        else if (bits && end >= begin && end - begin != totalBits / 8)
            out.addFinding(Severity::Danger,
                "TensorInvalidInfo: offsets cover " + std::to_string(end - begin) + " bytes but the shape needs "
                    + std::to_string(totalBits / 8),
                e.name);
        if (end < begin)
            out.addFinding(Severity::Danger, "InvalidOffset: data_offsets end before they begin", e.name);

        auto& loc = e.location;
        loc.kind = TensorLocation::Kind::Mapped;
        loc.file = 0;
        loc.storageByteOffset = bufferStart + begin;
        loc.offset = loc.storageByteOffset;
        loc.length = end >= begin ? end - begin : 0;
        loc.storageNbytes = loc.length;
        if (begin > data.size() - bufferStart || end > data.size() - bufferStart)
            loc.kind = TensorLocation::Kind::Unavailable;

        // torch sees F4 as float4_e2m1fn_x2 with the last dimension halved (two values per byte).
        if (e.dtype == DType::Float4_e2m1fn && !e.shape.empty() && e.shape.back() % 2 == 0) {
            e.attributes.emplace_back("header_dtype", "F4");
            e.attributes.emplace_back("header_shape", shapeToString(e.shape));
            e.dtype = DType::Float4_e2m1fn_x2;
            e.shape.back() /= 2;
        }
        spans.push_back(Span { begin, end, out.entries.size() });
        out.entries.push_back(std::move(e));
    }

    entriesTimer.stop();
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
        if (s.begin != expected && reported++ < 20)
            out.addFinding(Severity::Danger,
                std::string("InvalidOffset: data starts at ") + std::to_string(s.begin) + " but the previous tensor ends at "
                    + std::to_string(expected) + (s.begin > expected ? " (a gap)" : " (overlap)"),
                out.entries[s.entry].name);
        expected = std::max(expected, s.end);
    }
    if (expected != data.size() - bufferStart)
        out.addFinding(Severity::Danger,
            "MetadataIncompleteBuffer: tensors end at buffer byte " + std::to_string(expected) + " but the buffer holds "
                + std::to_string(data.size() - bufferStart)
                + (expected > data.size() - bufferStart ? " (the file is truncated)" : " (trailing bytes)"));

    auto backing = std::make_shared<MappedBacking>();
    backing->file = file;
    out.backing = backing;
    return out;
}

} // namespace sl
