#include "safetensors_reader.h"

#include "formats/json_keys.h"
#include "formats/safetensors_rows.h"
#include "formats/safetensors_scan.h"
#include "io/byte_reader.h"
#include "util/block_vector.h"
#include "util/emplace_built.h"
#include "util/error.h"
#include "util/json_space.h"
#include "util/timings.h"
#include "util/name_hash.h"
#include "util/name_index.h"

#include <simdjson.h>

#include <algorithm>
#include <bit>
#include <utility>
#include <optional>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <cstring>

namespace sl {

namespace {

// A broken file can have one problem per tensor; the first few name their tensors, then a count.
constexpr size_t kMaxFindingsPerKind = 20;

struct Span {
    uint64_t begin;
    uint64_t end;
    size_t entry;
};
// The order the offsets check sorts spans in.
bool spanBefore(const Span& a, const Span& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; }

// The offsets check (checkHeader) folded in as tensors arrive, for a header whose spans strictly increase in
// header order, as writers list them: that order is then the sorted one, and one pass finds the gaps and
// overlaps, keeping only the first few. A 100,000-tensor header's spans were 2.4 MB of fresh memory. A span out
// of order breaks the fold; the header is then read again with every span kept, which checkHeader folds in
// sorted order.
struct OffsetFold {
    struct Gap {
        uint64_t begin, expected;
        size_t entry;
    };
    bool broken = false;
    bool started = false;
    Span last {};
    uint64_t expected = 0; // where the next span should begin: the furthest end so far
    size_t gapCount = 0;
    std::vector<Gap> gaps; // the first kMaxFindingsPerKind
    void add(const Span& s)
    {
        if (started && !spanBefore(last, s))
            broken = true;
        started = true;
        last = s;
        if (s.begin != expected && gapCount++ < kMaxFindingsPerKind)
            gaps.push_back(Gap { s.begin, expected, s.entry });
        expected = std::max(expected, s.end);
    }
};

// (name hash, tensor index) pairs. 32 bits of hash: names whose hashes collide are told apart by comparing
// them (100,000 names make about one such pair), and the sort below takes half the passes of 64 bits.
using NameHashes = std::vector<std::pair<uint32_t, uint32_t>>;
uint32_t nameHash(std::string_view name) { return static_cast<uint32_t>(nameHash64(name) >> 32); }

// Sorts (name hash, tensor index) pairs that arrive in index order into (hash, index) order, as std::sort
// would: stable counting passes over a digit of the hash each (an LSD radix sort), which keep equal
// hashes in index order. A fifth of std::sort's time at 100,000 names, where the sort was a sixth of the
// header reader's.
void sortHashesInIndexOrder(NameHashes& v)
{
    if (v.size() < 256) {
        std::sort(v.begin(), v.end());
        return;
    }
    // Digits of about log2(n) bits: each pass clears and sums 2^bits counters, which a 16-bit digit made
    // the whole cost for a shard of a few hundred names (the 163 headers of a DeepSeek-V3 index).
    const unsigned bits = std::clamp<unsigned>(static_cast<unsigned>(std::bit_width(v.size())), 8, 16);
    const uint32_t mask = (uint32_t(1) << bits) - 1;
    NameHashes other(v.size());
    std::vector<uint32_t> start(size_t(1) << bits);
    for (unsigned shift = 0; shift < 32; shift += bits) {
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
        if (!isJsonSpace(static_cast<char>(head[i])))
            return false;
    }
    return false;
}

namespace {

// A header object's members, read into tensors, findings and the lists the checks after the parse take
// (spans or their fold, name hashes and, when kept, names). A header read in chunks is read by one Members,
// chunk by chunk.
class Members {
public:
    // `keepNames`: names() lists every tensor's name, a view into the text (which must outlive it).
    // `keepSpans`: every span is kept (tally.spans), else folded (tally.fold). Findings, metadata and
    // unescaped names go to `out`.
    Members(const std::string& path, uint64_t fileSize, uint64_t bufferStart, SafetensorsHeader& out, bool keepNames,
        bool keepSpans, size_t scanBatch)
        : m_path(path)
        , m_fileSize(fileSize)
        , m_bufferStart(bufferStart)
        , m_out(&out)
        , m_keepNames(keepNames)
        , m_keepSpans(keepSpans)
        , m_scanBatch(scanBatch)
    {
    }

    // Parses the JSON object in text[0, length) (with simdjson's padding after it), handing each tensor to
    // `onTensor` in order. Throws LoadError as the reference reader refuses. Members in the writers' layout
    // are read by SafetensorsScan, `scanBatch` at a time (OpenOptions::headerScanBatch; 0: none). From the
    // first member it cannot read, simdjson reads the rest: from the ',' before that member, overwritten with
    // '{' so that the rest is an object of its own.
    template <typename OnTensor> void parse(char* text, size_t length, size_t capacity, OnTensor&& onTensor)
    {
        size_t from = 0;
        if (m_scanBatch) {
            SafetensorsScan scan(text, length);
            for (SafetensorsScan::Step step; (step = scan.next(m_scanBatch)) != SafetensorsScan::Step::Other;) {
                for (const SafetensorsScan::Member& member : scan.members()) {
                    if (member.isMetadata) {
                        for (uint32_t k = 0; k < member.metadataCount; ++k) {
                            const auto& [key, value] = scan.metadata()[member.metadataFirst + k];
                            m_out->metadata.emplace_back(std::string(key), std::string(value));
                        }
                        continue;
                    }
                    SafetensorsTensor t;
                    t.name = member.name;
                    t.shape = member.shape;
                    onTensor(tensor(std::move(t), member.dtype, member.begin, member.end));
                }
                if (step == SafetensorsScan::Step::End)
                    return;
            }
            if (scan.resumeAt() != SafetensorsScan::npos) {
                from = scan.resumeAt();
                text[from] = '{';
            }
        }
        parseJson(text + from, length - from, capacity - from, onTensor);
    }

    size_t scanBatch() const { return m_scanBatch; }
    bool keepsSpans() const { return m_keepSpans; }

    // Room for a header of `length` bytes read in one piece (a tensor takes over 64 of them). A header read in
    // chunks grows its lists as it goes: reserved from the length, their untouched tails still took huge pages.
    void reserve(size_t length)
    {
        tally.hashes.reserve(length / 64);
        if (m_keepNames)
            names.reserve(length / 64);
    }
    // After the last member: the count of unknown dtypes beyond those named.
    void finish()
    {
        if (tally.unknownDtypes > kMaxFindingsPerKind)
            finding(Severity::Warning, std::to_string(tally.unknownDtypes) + " tensors in all have unknown dtypes", {});
    }

    // What the members read so far add up to, for the checks after the parse.
    struct Tally {
        size_t count = 0; // tensors
        BlockVector<Span, 8192> spans; // with keepSpans
        OffsetFold fold; // without
        // Each name's hash, taken while the name is in cache, for the duplicate check.
        NameHashes hashes;
        size_t unknownDtypes = 0;
        // Whether each finding made names an unknown dtype (a chunk read on another thread counts its own;
        // they are capped over the whole header when its chunk joins the others, adopt()).
        std::vector<bool> unknownDtypeFinding;
    };
    Tally tally;
    std::vector<std::string_view> names; // when kept, every name, a view into the text

    // Another thread's reader, for one chunk: from here on its findings, metadata and unescaped names go to
    // `out`, and it tallies from zero (keeping its vectors' room).
    void startChunk(SafetensorsHeader& out)
    {
        m_out = &out;
        tally.count = 0;
        tally.unknownDtypes = 0;
        tally.spans.clear();
        tally.hashes.clear();
        tally.unknownDtypeFinding.clear();
    }

    // What another thread's reader found in a chunk after those read so far, as if read here: `found` its
    // findings and metadata. The chunk's tensors are handed over after this.
    void adopt(const Tally& chunk, SafetensorsHeader& found)
    {
        const auto offset = static_cast<uint32_t>(tally.count);
        for (size_t i = 0; i < chunk.spans.size(); ++i)
            addSpan(Span { chunk.spans[i].begin, chunk.spans[i].end, chunk.spans[i].entry + offset });
        for (const auto& [hash, index] : chunk.hashes)
            tally.hashes.emplace_back(hash, index + offset);
        for (size_t i = 0; i < found.findings.size(); ++i)
            if (!chunk.unknownDtypeFinding[i] || ++tally.unknownDtypes <= kMaxFindingsPerKind)
                finding(found.findings[i].severity, std::move(found.findings[i].message), found.findings[i].entry);
        tally.unknownDtypes += chunk.unknownDtypes - std::min(chunk.unknownDtypes, kMaxFindingsPerKind);
        for (auto& kv : found.metadata)
            m_out->metadata.push_back(std::move(kv));
        tally.count += chunk.count;
    }

private:
    // The object in text[0, length) read by simdjson On-Demand.
    template <typename OnTensor> void parseJson(const char* text, size_t length, size_t capacity, OnTensor&& onTensor)
    {
        const char* const textEnd = text + length;
        simdjson::ondemand::document doc;
        if (auto err = m_parser.iterate(text, length, capacity).get(doc))
            throw LoadError(m_path, std::string("InvalidHeaderDeserialization: ") + simdjson::error_message(err));
        simdjson::ondemand::object header;
        if (doc.get_object().get(header))
            throw LoadError(m_path, "InvalidHeaderDeserialization: the header is not a JSON object");
        for (auto member : header) {
            simdjson::ondemand::field field;
            check(std::move(member).get(field), [] { return "malformed tensor name"; });
            std::string_view key;
            check(jsonKey(field, textEnd, m_out->unescaped, key), [] { return "malformed tensor name"; });
            simdjson::ondemand::value value = field.value();
            if (key == "__metadata__")
                metadata(value);
            else
                onTensor(tensor(key, value));
        }
        // On-Demand stops at the end of the object; anything after it (a second value) is malformed JSON.
        if (const char* at = nullptr; !doc.current_location().get(at))
            bad("unexpected content after the header object");
    }

    void addSpan(const Span& s)
    {
        if (m_keepSpans)
            tally.spans.push_back(s);
        else
            tally.fold.add(s);
    }

    [[noreturn]] void bad(const std::string& what) const
    {
        throw LoadError(m_path, "InvalidHeaderDeserialization: " + what);
    }
    // `what` is only called on an error: a message built per field cost more than the parse itself.
    template <typename What> void check(simdjson::error_code err, What&& what) const
    {
        if (err) [[unlikely]]
            bad(std::string(what()) + " (" + simdjson::error_message(err) + ")");
    }
    void finding(Severity s, std::string message, std::string_view entry, bool unknownDtype = false)
    {
        m_out->findings.push_back(Finding { s, std::move(message), std::string(entry) });
        tally.unknownDtypeFinding.push_back(unknownDtype);
    }

    void metadata(simdjson::ondemand::value value)
    {
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
            m_out->metadata.emplace_back(std::move(k), std::string(s));
        }
    }

    // A tensor's fields read by simdjson.
    SafetensorsTensor tensor(std::string_view key, simdjson::ondemand::value value)
    {
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
        uint64_t begin = 0;
        uint64_t end = 0;
        for (auto f : info) {
            std::string_view k;
            check(f.unescaped_key().get(k), [&] { return "malformed field in entry '" + std::string(t.name) + "'"; });
            if (k == "dtype") {
                if (f.value().get_string().get(dtypeStr))
                    bad(named("has no string dtype"));
                haveDtype = true;
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
        return tensor(std::move(t), dtypeStr, begin, end);
    }

    // A tensor whose name, shape and fields are read (by either reader): its dtype, the checks the reference
    // reader makes, and the tally.
    SafetensorsTensor tensor(SafetensorsTensor&& t, std::string_view dtypeStr, uint64_t begin, uint64_t end)
    {
        if (tally.count >= UINT32_MAX)
            bad("more than 4 billion tensors");
        tally.hashes.emplace_back(nameHash(t.name), static_cast<uint32_t>(tally.count));
        if (m_keepNames)
            names.push_back(t.name);
        // dtype strings repeat; the previous one's answer usually applies (kept as a copy: a text read in
        // chunks is overwritten by the next).
        if (dtypeStr != m_lastDtype) {
            m_lastDt = dtypeFromSafetensors(dtypeStr);
            m_lastDtype.assign(dtypeStr);
        }
        uint64_t numel = 1;
        bool overflow = false;
        for (int64_t d : t.shape)
            overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel);

        if (!m_lastDt) {
            if (++tally.unknownDtypes <= kMaxFindingsPerKind)
                finding(Severity::Warning,
                    "unknown dtype '" + std::string(dtypeStr) + "'; the reference reader refuses the file", t.name, true);
            // Kept: simdjson unescaped it into its buffer, a chunk's text is overwritten by the next.
            t.dtypeText = m_out->unescaped.emplace_back(dtypeStr);
        }
        t.dtype = m_lastDt.value_or(DType::Unknown);

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
        t.bytesInFile = begin <= m_fileSize - m_bufferStart && end <= m_fileSize - m_bufferStart;

        // torch sees F4 as float4_e2m1fn_x2 with the last dimension halved (two values per byte).
        if (t.dtype == DType::Float4_e2m1fn && !t.shape.empty() && t.shape.back() % 2 == 0) {
            t.halvedF4 = true;
            t.dtype = DType::Float4_e2m1fn_x2;
            t.shape.back() /= 2;
        }
        addSpan(Span { begin, end, tally.count++ });
        return std::move(t);
    }

    const std::string& m_path;
    const uint64_t m_fileSize;
    const uint64_t m_bufferStart;
    SafetensorsHeader* m_out; // findings, metadata and unescaped names go here
    const bool m_keepNames;
    const bool m_keepSpans;
    const size_t m_scanBatch;
    simdjson::ondemand::parser m_parser; // reused: a header read in chunks parses one document a chunk
    std::string m_lastDtype;
    std::optional<DType> m_lastDt;
};


// The header's length from its first 8 bytes, checked as the reference reader checks it.
uint64_t headerLength(const InputFile& file)
{
    const uint64_t fileSize = file.size();
    const std::string& path = file.path();
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
    return n;
}

// The whole header read into out.text (with the padding simdjson reads past the text without interpreting
// it) and parsed in one document.
template <typename OnTensor> void parseWhole(const InputFile& file, size_t n, SafetensorsHeader& out, Members& m, OnTensor&& onTensor)
{
    out.text = paddedJsonBuffer(n);
    file.readInto(8, std::span(reinterpret_cast<uint8_t*>(out.text.get()), n));
    m.reserve(n);
    m.parse(out.text.get(), n, n + simdjson::SIMDJSON_PADDING, onTensor);
}

// Where a chunk starts or ends: the ',' of the first `}` [space] `,` [space] `"` whose '}' lies in
// text[from, limit), the '"' read too. Nothing here proves the ',' lies between two top-level members rather
// than inside a name or a nested object: the text up to it, closed with '}', parses as a whole object only
// where it does (parseChunks).
struct Cut {
    enum { Found, None, More } state; // More: the text read so far (`filled`) may not hold the answer
    size_t at = 0;
};
Cut firstCut(const char* text, size_t from, size_t limit, size_t filled, bool atEnd)
{
    for (size_t at = from; at < std::min(limit, filled);) {
        const auto* close = static_cast<const char*>(std::memchr(text + at, '}', std::min(limit, filled) - at));
        if (!close)
            break;
        size_t i = static_cast<size_t>(close - text) + 1;
        while (i < filled && isJsonSpace(text[i]))
            ++i;
        if (i < filled && text[i] == ',') {
            const size_t comma = i++;
            while (i < filled && isJsonSpace(text[i]))
                ++i;
            if (i < filled && text[i] == '"')
                return { Cut::Found, comma };
        }
        if (i >= filled && !atEnd)
            return { Cut::More };
        at = static_cast<size_t>(close - text) + 1;
    }
    return { atEnd || filled >= limit ? Cut::None : Cut::More };
}

// One chunk's document. Chunk k starts at the first cut whose '}' lies in [k * chunk, (k + 1) * chunk) (chunk 0
// at the header's start) and ends at the first cut from (k + 1) * chunk on (the last at the header's end),
// written "{" members "}" over the two cuts' ','. Chunks are told apart by these rules alone, so each is read
// on its own, by either thread. One with no cut in its range is empty: the chunk before runs over it (a member
// longer than a chunk). Each chunk reads its own range and on to its end, so the header is read about once.
struct ChunkText {
    std::unique_ptr<char[]> buffer;
    size_t room = 0;
    char* doc = nullptr;
    size_t length = 0; // 0: an empty chunk
    size_t capacity = 0; // from doc to the end of the buffer's padding
};
void readChunk(const InputFile& file, size_t n, size_t k, size_t chunk, ChunkText& out)
{
    const size_t from = k * chunk;
    size_t filled = 0, want = std::min(n - from, chunk + chunk / 8);
    out.length = 0;
    while (true) {
        if (want > out.room) {
            out.room = std::max(want, 2 * out.room);
            auto grown = paddedJsonBuffer(out.room);
            if (filled)
                std::memcpy(grown.get(), out.buffer.get(), filled);
            out.buffer = std::move(grown);
        }
        char* const text = out.buffer.get();
        file.readInto(8 + from + filled, std::span(reinterpret_cast<uint8_t*>(text) + filled, want - filled));
        filled = want;
        const bool atEnd = from + filled == n;
        const Cut start = k == 0 ? Cut { Cut::Found, 0 } : firstCut(text, 0, chunk, filled, atEnd);
        if (start.state == Cut::None)
            return; // empty
        const Cut end = start.state == Cut::Found ? firstCut(text, chunk, SIZE_MAX, filled, atEnd) : Cut { Cut::More };
        if (end.state == Cut::More) {
            want = std::min(n - from, 2 * want);
            continue;
        }
        if (k != 0)
            text[start.at] = '{';
        size_t last = filled; // the document's end: the '}' written over the end's ',', or the header's end
        if (end.state == Cut::Found) {
            text[end.at] = '}';
            last = end.at + 1;
        }
        out.doc = text + start.at;
        out.length = last - start.at;
        out.capacity = out.room + simdjson::SIMDJSON_PADDING - start.at;
        return;
    }
}

// A chunk read on the second thread: its text (its tensors' names are views into it) and what it found.
struct ReadChunk {
    ChunkText text;
    SafetensorsHeader found; // findings, metadata and unescaped names
    std::vector<SafetensorsTensor> tensors;
    Members::Tally tally;
    bool ok = false;
};

// The header read in chunks (readChunk) of about `chunk` bytes through reused buffers. With `parallel`, on two
// threads: this one reads every fifth chunk and hands its tensors over as it reads them; the second reads the
// others into tensors of their own, handed over here in their turn. Handing over builds the entries, which is
// this thread's work and, since SafetensorsScan, costs more than parsing: of every third, fifth and eighth
// chunk and none, the fifth was quickest (c's 13 MB header: 20.7 / 15.6 / - / 15.9 ms and - / 20.9 / 21.4 /
// 24.2 ms in two interleaved runs of 21).
// Every chunk parses as a whole object only when its cuts lie between top-level members, and then the chunks
// hold exactly the header's members, in order. False when they do not (a cut inside a name, any error): the
// caller reads the header again in one piece, which reports the first error where it occurs. Names are views
// into the chunk's text only while `onTensor` runs.
template <typename OnTensor>
bool parseChunks(const InputFile& file, size_t n, size_t chunk, bool parallel, SafetensorsHeader& out, Members& m,
    OnTensor&& onTensor)
{
    const size_t chunks = (n + chunk - 1) / chunk;
    ChunkText text;
    // A chunk read here, its tensors handed over as they are read. False when it does not parse.
    const auto readHere = [&](size_t k) {
        try {
            readChunk(file, n, k, chunk, text);
            if (text.length)
                m.parse(text.doc, text.length, text.capacity, onTensor);
            return true;
        } catch (const LoadError&) {
            return false;
        }
    };
    if (!parallel) {
        for (size_t k = 0; k < chunks; ++k)
            if (!readHere(k))
                return false;
        return true;
    }
    const auto mine = [](size_t k) { return k % 5 == 0; };
    // The second thread's chunks, in order, at most kAhead of them waiting to be handed over.
    constexpr size_t kAhead = 3;
    std::mutex mutex;
    std::condition_variable changed;
    std::deque<std::unique_ptr<ReadChunk>> ready;
    std::vector<std::unique_ptr<ReadChunk>> spare; // handed over, to be read into again (their memory is touched)
    bool stop = false, done = false;
    auto second = std::async(std::launch::async, [&] {
        struct Done { // however the thread ends, the handing over learns it
            std::mutex& mutex;
            std::condition_variable& changed;
            bool& done;
            ~Done()
            {
                {
                    std::lock_guard lock(mutex);
                    done = true;
                }
                changed.notify_all();
            }
        } announce { mutex, changed, done };
        Members reader(file.path(), file.size(), out.bufferStart, out, false, true, m.scanBatch());
        for (size_t k = 0; k < chunks; ++k) {
            if (mine(k))
                continue;
            std::unique_ptr<ReadChunk> c;
            {
                std::unique_lock lock(mutex);
                changed.wait(lock, [&] { return stop || ready.size() < kAhead; });
                if (stop)
                    return;
                if (!spare.empty()) {
                    c = std::move(spare.back());
                    spare.pop_back();
                }
            }
            try {
                if (!c)
                    c = std::make_unique<ReadChunk>();
                c->found = SafetensorsHeader();
                c->tensors.clear();
                c->ok = false;
                readChunk(file, n, k, chunk, c->text);
                reader.startChunk(c->found);
                if (c->text.length)
                    reader.parse(c->text.doc, c->text.length, c->text.capacity,
                        [&](const SafetensorsTensor& t) { c->tensors.push_back(t); });
                std::swap(c->tally, reader.tally); // the reader reuses the room of the chunk's old tally
                c->ok = true;
            } catch (...) {
                // Any failure (an error in the chunk, no memory) reads the header again in one piece.
                if (!c)
                    return; // the handing over finds no chunk: `stop` ends it
            }
            const bool failed = !c->ok;
            {
                std::lock_guard lock(mutex);
                ready.push_back(std::move(c));
            }
            changed.notify_all();
            if (failed)
                return;
        }
    });
    // The second thread reads what lives here: it is stopped and waited for however this ends.
    struct Join {
        std::mutex& mutex;
        std::condition_variable& changed;
        bool& stop;
        std::future<void>& second;
        ~Join()
        {
            {
                std::lock_guard lock(mutex);
                stop = true;
            }
            changed.notify_all();
            second.wait();
        }
    } join { mutex, changed, stop, second };
    for (size_t k = 0; k < chunks; ++k) {
        if (mine(k)) {
            if (!readHere(k))
                return false;
            continue;
        }
        std::unique_ptr<ReadChunk> c;
        {
            std::unique_lock lock(mutex);
            // Empty and the second thread done: it could not make the chunk it owed.
            changed.wait(lock, [&] { return !ready.empty() || done; });
            if (ready.empty())
                return false;
            c = std::move(ready.front());
            ready.pop_front();
        }
        changed.notify_all();
        if (!c->ok)
            return false;
        m.adopt(c->tally, c->found);
        for (const SafetensorsTensor& t : c->tensors)
            onTensor(t);
        std::lock_guard lock(mutex);
        spare.push_back(std::move(c));
    }
    return true;
}

// The checks after the parse: duplicate names and offsets that tile the byte buffer. `nameOf(i)` names the
// i-th tensor.
template <typename NameOf>
void checkHeader(const OpenOptions& options, SafetensorsHeader& out, Members& m, uint64_t fileSize, NameOf&& nameOf)
{
    const uint64_t bufferStart = out.bufferStart;
    const auto finding = [&out](Severity s, std::string message, std::string_view entry = {}) {
        out.findings.push_back(Finding { s, std::move(message), std::string(entry) });
    };
    const BlockVector<Span, 8192>& spans = m.tally.spans;
    NameHashes& hashes = m.tally.hashes;

    // Duplicate names: sort name hashes and compare the names of equal neighbours. Cheaper than a
    // hash table whose 100,000 random probes miss the cache; the reference reader keeps only one of them.
    PhaseTimer duplicateTimer(options.timings, "duplicate names");
    {
        sortHashesInIndexOrder(hashes);
        std::vector<uint32_t> duplicates;
        for (size_t i = 1; i < hashes.size(); ++i)
            for (size_t j = i; j-- > 0 && hashes[j].first == hashes[i].first;)
                if (nameOf(hashes[j].second) == nameOf(hashes[i].second)) {
                    duplicates.push_back(std::max(hashes[i].second, hashes[j].second));
                    break;
                }
        std::sort(duplicates.begin(), duplicates.end());
        out.duplicateNames = !duplicates.empty();
        for (size_t i = 0; i < duplicates.size() && i < kMaxFindingsPerKind; ++i)
            finding(Severity::Danger, "duplicate tensor name in the header; the reference reader keeps only one",
                nameOf(duplicates[i]));
        if (duplicates.size() > kMaxFindingsPerKind)
            finding(Severity::Danger, std::to_string(duplicates.size()) + " duplicate tensor names in all");
    }
    duplicateTimer.stop();
    PhaseTimer validateTimer(options.timings, "validate offsets");
    // Offsets must tile the buffer exactly: sorted, each beginning where the previous ended.
    const auto gap = [&](uint64_t begin, uint64_t expected, size_t entry) {
        finding(Severity::Danger,
            std::string("InvalidOffset: data starts at ") + std::to_string(begin) + " but the previous tensor ends at "
                + std::to_string(expected) + (begin > expected ? " (a gap)" : " (overlap)"),
            nameOf(entry));
    };
    // Spans that strictly increase in header order (as writers list them) are in their sorted order already: the
    // fold over them is the check. A streamed header folded them as they arrived; kept spans are folded here,
    // and again sorted when that fold finds them out of order.
    OffsetFold kept;
    if (m.keepsSpans()) {
        for (size_t i = 0; i < spans.size(); ++i)
            kept.add(spans[i]);
        if (kept.broken) {
            std::vector<Span> sorted;
            sorted.reserve(spans.size());
            for (size_t i = 0; i < spans.size(); ++i)
                sorted.push_back(spans[i]);
            std::sort(sorted.begin(), sorted.end(), spanBefore);
            kept = OffsetFold();
            for (const Span& sp : sorted)
                kept.add(sp);
        }
    }
    const OffsetFold& fold = m.keepsSpans() ? kept : m.tally.fold;
    for (const OffsetFold::Gap& g : fold.gaps)
        gap(g.begin, g.expected, g.entry);
    const size_t reported = fold.gapCount;
    const uint64_t expected = fold.expected;
    if (reported > kMaxFindingsPerKind)
        finding(Severity::Danger, "InvalidOffset: " + std::to_string(reported) + " gaps or overlaps between tensors in all");
    if (expected != fileSize - bufferStart)
        finding(Severity::Danger,
            "MetadataIncompleteBuffer: tensors end at buffer byte " + std::to_string(expected) + " but the buffer holds "
                + std::to_string(fileSize - bufferStart)
                + (expected > fileSize - bufferStart ? " (the file is truncated)" : " (trailing bytes)"));
}

} // namespace

void readSafetensorsHeader(const InputFile& file, const OpenOptions& options, SafetensorsHeader& out,
    const std::function<void(const SafetensorsTensor&)>& onTensor)
{
    const uint64_t n = headerLength(file);
    out.bufferStart = 8 + n;
    PhaseTimer parseTimer(options.timings, "header parse");
    // simdjson On-Demand walks the text once without building a document (the DOM parser's tape and string
    // buffers for a 13 MB header cost as much as the parse). Names stay views into the text.
    Members m(file.path(), file.size(), out.bufferStart, out, true, true, options.headerScanBatch);
    parseWhole(file, static_cast<size_t>(n), out, m, onTensor);
    m.finish();
    parseTimer.stop();
    checkHeader(options, out, m, file.size(), [&](size_t i) { return m.names[i]; });
}

void streamSafetensorsHeader(const InputFile& file, const OpenOptions& options, SafetensorsHeader& out,
    const std::function<void(const SafetensorsTensor&)>& onTensor, const std::function<std::string_view(size_t)>& nameOf,
    const std::function<void()>& onRestart)
{
    const uint64_t n = headerLength(file);
    out.bufferStart = 8 + n;
    PhaseTimer parseTimer(options.timings, "header parse");
    std::optional<Members> m;
    m.emplace(file.path(), file.size(), out.bufferStart, out, false, false, options.headerScanBatch);
    // Reading again from the first tensor: what was handed over is forgotten.
    const auto restart = [&](bool keepSpans) {
        out.findings.clear();
        out.metadata.clear();
        out.unescaped.clear();
        onRestart();
        m.emplace(file.path(), file.size(), out.bufferStart, out, false, keepSpans, options.headerScanBatch);
    };
    const size_t chunk = std::max<size_t>(options.headerChunk, 1);
    const bool chunked = options.headerChunk != 0 && n > 2 * chunk;
    const bool parallel = options.parallelHeader && std::thread::hardware_concurrency() > 1;
    if (chunked && parseChunks(file, static_cast<size_t>(n), chunk, parallel, out, *m, onTensor)) {
        out.chunks = (static_cast<size_t>(n) + chunk - 1) / chunk;
    } else {
        if (chunked) // the chunks did not join
            restart(false);
        parseWhole(file, static_cast<size_t>(n), out, *m, onTensor);
    }
    if (m->tally.fold.broken) { // the spans are not in header order: read again, keeping every one to sort
        out.chunks = 0;
        out.text.reset();
        restart(true);
        parseWhole(file, static_cast<size_t>(n), out, *m, onTensor);
    }
    out.text.reset(); // nothing refers to it
    m->finish();
    parseTimer.stop();
    checkHeader(options, out, *m, file.size(), nameOf);
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
    // Read in chunks: each entry keeps its name, so the header's text need not stay. A listing keeps rows
    // (formats/safetensors_rows.h) while every tensor fits one, and builds entries from the first that does
    // not on.
    std::shared_ptr<SafetensorsRows> rows;
    const bool listing = options.deferEntries;
    bool asRows = listing;
    streamSafetensorsHeader(
        *file, options, header,
        [&](const SafetensorsTensor& t) {
            if (asRows) {
                if (!rows) // the header's length is known once its tensors arrive
                    rows = std::make_shared<SafetensorsRows>(header.bufferStart);
                if (rows->add(t))
                    return;
                asRows = false;
                rows->build(out.entries); // the rows so far, as entries
                rows.reset();
            }
            if (out.entries.empty())
                out.entries.reserve(static_cast<size_t>(header.bufferStart / 64));
            emplaceBuilt(out.entries, [&] { return safetensorsEntry(header.bufferStart, t, 0); });
        },
        [&](size_t i) -> std::string_view { return rows ? rows->name(i) : std::string_view(out.entries[i].name); },
        [&] {
            out.entries.clear();
            rows.reset();
            asRows = listing;
        });
    if (rows)
        out.entries.defer(std::move(rows));
    out.metadata = std::move(header.metadata);
    out.findings = std::move(header.findings);
    out.backing = std::make_shared<SourceBacking>(); // entries hold offsets; nothing to keep open
    return out;
}

} // namespace sl
