#pragma once
// Key-pattern grouping of quantized parameters (groupQuantizedEntries, quantized_tensors.h), run once per
// opened source after its reader, over the whole state dict (an index's shards merged), and again after a
// container switch. Private to quant/: the Grouper (grouper.cpp: the name index, plans, claims and turning
// plans into groups) and one file per scheme family that finds its plans (scheme_*.cpp).
//
// Each scheme is a pattern of keys under one module prefix plus a dtype that float modules do not write
// (docs/on-disk-formats.md, "Quantized layouts"):
//   bitsandbytes 4-bit  W + W.absmax, W.quant_map, [W.nested_absmax, W.nested_quant_map],
//                       W.quant_state.bitsandbytes__nf4|fp4 (uint8 bytes of JSON: original shape and dtype)
//   bitsandbytes 8-bit  P.weight (int8) + P.SCB + P.weight_format
//   GPTQ / AWQ          P.qweight (int32) + P.qzeros + P.scales [+ P.g_idx]   -> group P.weight
//   FP8                 W (float8) + W_scale_inv (block) | W_scale [+ P.input_scale]
//   torchao flattened   `M._P_<inner>` or `N:<inner>` with __metadata__ tensor_names and per-name JSON
//   torch.ao eager      qint8/quint8 tensors and packed-params tuples get Quantization; P.scale/P.zero_point
//                       of quantized modules are marked as activation qparams
// Each match becomes one Group at its weight's position; the other keys move into its parts.
//
// Cost: one pass that looks at each name's last component and dtype; ordinary float state dicts stop
// there. Only sources with a trigger build a name index (NameIndex, O(1) lookups); nothing is quadratic.
// Running it again finds the groups already formed (their parts are no longer top-level keys) and changes
// nothing; findings are added only when not already there.

#include "quantized_tensors.h"

#include "io/open_files.h"
#include "util/error.h"
#include "util/name_index.h"
#include <simdjson.h>
#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace sl::quant::grouping {

constexpr size_t npos = SIZE_MAX;
constexpr size_t kMaxFindingsPerKind = 20;
constexpr size_t kMaxShardHeaders = 64; // shards whose __metadata__ is read for torchao's layout
constexpr uint64_t kMaxHeaderBytes = 100'000'000; // all shard headers read, together (one reader limit)
constexpr size_t kMaxParams = 16;
constexpr size_t kMaxParamChars = 160;

inline std::string_view lastComponent(std::string_view name)
{
    const size_t dot = name.rfind('.');
    return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

// "a.b.c" without ".c"; "c" without "c" is "".
inline std::string_view prefixOf(std::string_view name, std::string_view last)
{
    std::string_view p = name.substr(0, name.size() - last.size());
    if (!p.empty() && p.back() == '.')
        p.remove_suffix(1);
    return p;
}

// "prefix.key" ("key" when the prefix is empty), written into `out`.
inline void assignJoined(std::string& out, std::string_view prefix, std::string_view key)
{
    out.clear();
    out.reserve(prefix.size() + key.size() + 1);
    out += prefix;
    if (!prefix.empty())
        out += '.';
    out += key;
}

inline std::string join(std::string_view prefix, std::string_view key)
{
    std::string out;
    assignJoined(out, prefix, key);
    return out;
}

inline bool isFloat8(DType t)
{
    return t == DType::Float8_e4m3fn || t == DType::Float8_e5m2 || t == DType::Float8_e4m3fnuz
        || t == DType::Float8_e5m2fnuz;
}

inline std::string shapeText(const Shape& s) { return shapeToString(s); }

inline std::string clip(std::string s)
{
    if (s.size() > kMaxParamChars) {
        s.resize(kMaxParamChars);
        s += "...";
    }
    return s;
}

inline int64_t ceilDiv(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; }

// ---------------------------------------------------------------------------------------------------
// The few bytes of a bitsandbytes quant_state tensor, read through the entry's location.

class SmallReads {
public:
    explicit SmallReads(const Source& s)
        : m_s(s)
    {
    }

    // The bytes at [offset, offset+length) of files[file], or the reason they cannot be had.
    std::optional<std::string> read(int32_t file, uint64_t offset, uint64_t length, std::string& why)
    {
        if (file < 0 || static_cast<size_t>(file) >= m_s.files.size()) {
            why = "its file is not known";
            return std::nullopt;
        }
        if (length > kMaxQuantStateBytes) {
            why = "larger than " + std::to_string(kMaxQuantStateBytes) + " bytes; not read";
            return std::nullopt;
        }
        std::shared_ptr<const InputFile> f;
        try {
            f = m_files.get(m_s.files[static_cast<size_t>(file)]);
        } catch (const LoadError&) {
            why = "its file cannot be opened";
            return std::nullopt;
        }
        if (offset > f->size() || length > f->size() - offset) {
            why = "its bytes lie past the end of the file";
            return std::nullopt;
        }
        std::string out(length, '\0');
        try {
            f->readInto(offset, std::span<uint8_t>(reinterpret_cast<uint8_t*>(out.data()), out.size()));
        } catch (const std::exception&) {
            why = "reading its bytes failed";
            return std::nullopt;
        }
        return out;
    }

private:
    const Source& m_s;
    OpenFiles m_files;
};

struct QuantState {
    std::string quantType;
    int64_t blocksize = 0;
    DType dtype = DType::Unknown;
    std::string dtypeText;
    Shape shape;
    bool nested = false;
    int64_t nestedBlocksize = 0;
    std::string nestedDtype;
    std::optional<double> nestedOffset; // added back to the dequantized absmax (values need it)
};

inline DType dtypeFromText(std::string_view t)
{
    if (t.starts_with("torch."))
        t.remove_prefix(6);
    auto d = dtypeFromName(t);
    return d ? *d : DType::Unknown;
}

// QuantState.as_dict(packed=True)'s JSON: {"quant_type", "blocksize", "dtype", "shape", ["nested_blocksize",
// "nested_dtype", "nested_offset"]}. Returns the reason when it is not that.
inline std::optional<QuantState> parseQuantState(simdjson::dom::parser& parser, const std::string& bytes, std::string& why)
{
    simdjson::dom::element doc;
    simdjson::dom::object obj;
    if (parser.parse(bytes.data(), bytes.size(), true).get(doc) || doc.get_object().get(obj)) {
        why = "its bytes are not a JSON object";
        return std::nullopt;
    }
    QuantState qs;
    bool haveShape = false;
    for (auto [key, value] : obj) {
        std::string_view s;
        int64_t i = 0;
        if (key == "quant_type" && !value.get_string().get(s)) {
            qs.quantType = std::string(s.substr(0, 32));
        } else if (key == "blocksize" && !value.get_int64().get(i)) {
            qs.blocksize = i;
        } else if (key == "dtype" && !value.get_string().get(s)) {
            qs.dtypeText = std::string(s.substr(0, 32));
            qs.dtype = dtypeFromText(s);
        } else if (key == "nested_blocksize" && !value.get_int64().get(i)) {
            qs.nested = true;
            qs.nestedBlocksize = i;
        } else if (key == "nested_dtype" && !value.get_string().get(s)) {
            qs.nested = true;
            qs.nestedDtype = std::string(s.substr(0, 32));
        } else if (key == "nested_offset") {
            double d = 0; // simdjson reads an integer as a double too
            if (!value.get_double().get(d)) {
                qs.nested = true;
                qs.nestedOffset = d;
            }
        } else if (key == "shape") {
            simdjson::dom::array dims;
            if (value.get_array().get(dims) || dims.size() > 64) {
                why = "its \"shape\" is not a list of at most 64 sizes";
                return std::nullopt;
            }
            uint64_t numel = 1;
            for (auto d : dims) {
                if (d.get_int64().get(i) || i < 0 || __builtin_mul_overflow(numel, static_cast<uint64_t>(i), &numel)
                    || numel > (uint64_t(1) << 62)) {
                    why = "its \"shape\" holds a size that is not a small non-negative integer";
                    return std::nullopt;
                }
                qs.shape.push_back(i);
            }
            haveShape = true;
        }
    }
    if (!haveShape) {
        why = "its JSON has no \"shape\"";
        return std::nullopt;
    }
    return qs;
}

// ---------------------------------------------------------------------------------------------------
// torchao's safetensors metadata

// A __metadata__ value holds JSON text; an index's "metadata" values are JSON themselves (a string value
// arrives quoted). The text inside, or the value as it is.
inline std::string unquoted(simdjson::dom::parser& parser, std::string_view v)
{
    if (v.empty() || v.front() != '"')
        return std::string(v);
    simdjson::dom::element doc;
    std::string_view s;
    if (parser.parse(v.data(), v.size(), true).get(doc) || doc.get_string().get(s))
        return std::string(v);
    return std::string(s);
}

// The __metadata__ of a safetensors file, read from its header (not from any tensor's bytes).
// `budget` (bytes of headers still allowed) shrinks by what is read.
inline std::vector<std::pair<std::string, std::string>> readSafetensorsMetadata(
    const std::string& path, simdjson::dom::parser& parser, uint64_t& budget)
{
    std::vector<std::pair<std::string, std::string>> out;
    std::string header;
    try {
        const auto file = InputFile::open(path);
        uint8_t len[8];
        file->readInto(0, len);
        uint64_t n = 0;
        for (int i = 7; i >= 0; --i)
            n = n << 8 | len[i];
        if (n <= budget && n + 8 <= file->size()) {
            budget -= n;
            header.resize(n);
            file->readInto(8, std::span<uint8_t>(reinterpret_cast<uint8_t*>(header.data()), header.size()));
        }
    } catch (const std::exception&) {
        return out; // unreadable: no metadata (the reader reports the file itself)
    }
    simdjson::dom::element doc;
    simdjson::dom::object meta;
    if (header.empty() || parser.parse(header.data(), header.size(), true).get(doc)
        || doc["__metadata__"].get_object().get(meta))
        return out;
    for (auto [k, v] : meta) {
        std::string_view s;
        if (!v.get_string().get(s))
            out.emplace_back(std::string(k), std::string(s));
    }
    return out;
}

// Inner tensor names torchao classes use; a flattened layout without metadata is recognised by them.
constexpr std::string_view kTorchaoInner[] = { "qdata", "scale", "zero_point", "scale_and_zero", "act_pre_scale",
    "per_tensor_scale", "act_per_tensor_scale", "act_quant_scale", "act_quant_zero_point", "group_scale",
    "group_zero", "row_scale", "quantized_data", "scaler_mean", "quantization_factor", "quantized_scalers", "nf4",
    "original_weight", "original_weight_tensor", "_data", "_scale" };
// The tensor whose position a flattened group takes, and whose dtype is the storage dtype.
constexpr std::string_view kTorchaoPrimary[] = { "qdata", "quantized_data", "_data", "original_weight",
    "original_weight_tensor", "data" };

// "_weight_qdata": the data tensor of torchao's flattened layout (every class it saves has a qdata).
inline bool isUnderscoreQdata(std::string_view last) { return last.size() >= 8 && last[0] == '_' && last.ends_with("_qdata"); }

inline bool isTorchaoInner(std::string_view inner)
{
    return std::find(std::begin(kTorchaoInner), std::end(kTorchaoInner), inner) != std::end(kTorchaoInner);
}

// "<class 'torchao.quantization.Float8Tensor'>" -> "torchao.quantization.Float8Tensor".
inline std::string_view classFromTypeText(std::string_view t)
{
    if (t.starts_with("<class '") && t.ends_with("'>"))
        return t.substr(8, t.size() - 10);
    return t;
}

// ---------------------------------------------------------------------------------------------------

enum class Concern : uint8_t { MissingPart, Orphan, Inconsistent, Unscaled, Count_ };

class Grouper {
public:
    explicit Grouper(Source& s);

    void run();

private:
    struct Part {
        std::string role;
        size_t index;
    };
    struct Plan {
        size_t anchor = npos;
        std::string name;
        std::vector<Part> parts;
        // Empty for a plain tensor stored under another key. Shared: groups of one scheme and layout (the
        // 45,000 FP8 weights of a DeepSeek-V3 index) point at one description.
        std::shared_ptr<const Quantization> q;
        DType dtype = DType::Unknown;
        Shape shape;
        bool shapeKnown = true;
        std::string typeName;
    };

    // Which patterns occur at all. A float state dict without any of them returns at once.
    bool scan();

    struct NameOf {
        const std::vector<Entry>* entries;
        std::string_view operator()(size_t i) const { return (*entries)[i].name; }
    };
    NameOf nameOf() const { return { &m_e }; }

    size_t find(std::string_view name);
    bool isFree(size_t i) const { return i != npos && (m_claimed.empty() || !m_claimed[i]); }
    size_t findFree(std::string_view name);

    // findFree(name), trying `beside` first: writers list a weight's scale right after it (sorted keys), and
    // that comparison saves a hashed lookup, a cache miss, for each of 45,000 FP8 weights. Where a name
    // repeats, the copy beside the weight is the one paired.
    size_t findFreeBeside(size_t beside, std::string_view name);

    bool addPlan(Plan p);

    void report(Concern c, Severity s, std::string message, std::string entry);

    // ---- torch.ao eager quantization: already described by state_dict_tree, here given Quantization.

    static Quantization torchAoQuantization(const Entry& t);

    void torchAo();

    // ---- torchao's flattened safetensors layout

    void loadTorchaoMetadata();

    std::optional<std::string_view> meta(std::string_view key) const;

    // Entries named "<base>:<inner>", by base: torchao's colon spelling.
    void indexColonNames();

    struct TorchaoInfo {
        std::string type; // short class name, "Tensor" for plain tensors
        std::string qualified; // when the file names the module
        std::vector<std::string> dataNames; // _tensor_data_names, when given
        DType dtype = DType::Unknown;
        Shape shape;
        bool haveShape = false;
        std::vector<std::pair<std::string, std::string>> params;
        bool described = false;
    };

    static DType dtypeOfJson(simdjson::dom::element v);

    static bool shapeOfJson(simdjson::dom::element v, Shape& out);

    TorchaoInfo torchaoInfo(const std::string& name);

    // Logical shape of a flattened torchao tensor when the metadata does not state it.
    static bool logicalShapeFromData(std::string_view type, const Entry& primary, Shape& out);

    void torchaoFlattened();

    void torchaoGroup(const std::string& name, const TorchaoInfo& info);

    // ---- bitsandbytes

    struct Bnb4 {
        std::string_view base;
        size_t absmax = npos, quantMap = npos, nestedAbsmax = npos, nestedQuantMap = npos, state = npos;
        std::string_view quantType;
        size_t first = npos;
    };

    void bitsandbytes4();

    void bnb4Group(const Bnb4& b);

    void checkBnb4Sizes(const std::string& name, const QuantState& qs, const Entry& weight, size_t absmax);

    void bitsandbytes8();

    // ---- GPTQ / AWQ

    struct Packed {
        bool ok = false;
        int64_t in = 0, out = 0, bits = 0, groups = 0;
        std::string layout;
    };

    static bool known2d(const Entry* e) { return e && e->shapeKnown && e->shape.size() == 2; }

    // Bits and the logical [out, in] from the int32-packed layouts, when the shapes determine them.
    static Packed derivePacked(const Entry& qw, const Entry* qz, const Entry* sc, const Entry* gi);

    void gptq();

    // ---- FP8 (and int8 with weight_scale, compressed-tensors style)

    static std::string blockOf(const Shape& w, const Shape& s);

    // One shared description per distinct FP8 layout: a checkpoint has a handful, over thousands of weights.
    std::shared_ptr<const Quantization> fp8Quantization(
        DType stored, std::string_view granularity, const std::string& block, bool inverseScale, bool inputScale);

    // `base` + `suffix` in a buffer reused across calls, for lookups that would otherwise allocate a name each.
    std::string_view withSuffix(std::string_view base, std::string_view suffix);
    // join(prefix, key) in the same buffer.
    std::string_view joinedKey(std::string_view prefix, std::string_view key);

    void fp8();

    // ---- torchao subclasses in torch.save files (described by describeQuantizedSubclass)

    void subclassFindings();

    // ---- The plans become groups, in place of their anchors; the other parts leave the top level.

    void apply();

    Entry buildGroup(Plan& plan);

    void flushFindings();

    Source& m_s;
    std::vector<Entry>& m_e;
    SmallReads m_reads;
    simdjson::dom::parser m_parser;
    NameIndex m_index;
    bool m_indexed = false;
    std::vector<bool> m_claimed; // empty until the first plan
    std::vector<Plan> m_plans;
    NameIndex m_planNames; // positions in m_plans by name
    std::string m_key; // scratch for lookups (withSuffix, fp8Quantization)
    std::unordered_map<std::string, std::shared_ptr<const Quantization>> m_fp8Descriptions;
    std::vector<Finding> m_findings;
    std::array<size_t, static_cast<size_t>(Concern::Count_)> m_counts {};
    std::array<std::string, static_cast<size_t>(Concern::Count_)> m_firstOver {};
    size_t m_bnb4Groups = 0;

    std::unordered_map<std::string_view, std::string_view> m_meta;
    std::vector<std::pair<std::string, std::string>> m_shardMeta;
    std::unordered_map<std::string_view, std::vector<size_t>> m_colon;

    bool m_hasTorchAo = false, m_hasColon = false, m_hasFp8 = false, m_hasUnderscore = false, m_hasBnb4 = false,
         m_hasBnb8 = false, m_hasGptq = false, m_hasTensorNames = false, m_hasInputScale = false;
};

} // namespace sl::quant::grouping
