// Key-pattern grouping of quantized parameters (groupQuantizedEntries), run once per opened source after
// its reader, over the whole state dict (an index's shards merged), and again after a container switch.
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

namespace sl::quant {

namespace {

constexpr size_t npos = SIZE_MAX;
constexpr size_t kMaxFindingsPerKind = 20;
constexpr size_t kMaxShardHeaders = 64; // shards whose __metadata__ is read for torchao's layout
constexpr uint64_t kMaxHeaderBytes = 100'000'000; // all shard headers read, together (one reader limit)
constexpr size_t kMaxParams = 16;
constexpr size_t kMaxParamChars = 160;

std::string_view lastComponent(std::string_view name)
{
    const size_t dot = name.rfind('.');
    return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

// "a.b.c" without ".c"; "c" without "c" is "".
std::string_view prefixOf(std::string_view name, std::string_view last)
{
    std::string_view p = name.substr(0, name.size() - last.size());
    if (!p.empty() && p.back() == '.')
        p.remove_suffix(1);
    return p;
}

// "prefix.key" ("key" when the prefix is empty), written into `out`.
void assignJoined(std::string& out, std::string_view prefix, std::string_view key)
{
    out.clear();
    out.reserve(prefix.size() + key.size() + 1);
    out += prefix;
    if (!prefix.empty())
        out += '.';
    out += key;
}

std::string join(std::string_view prefix, std::string_view key)
{
    std::string out;
    assignJoined(out, prefix, key);
    return out;
}

bool isFloat8(DType t)
{
    return t == DType::Float8_e4m3fn || t == DType::Float8_e5m2 || t == DType::Float8_e4m3fnuz
        || t == DType::Float8_e5m2fnuz;
}

std::string shapeText(const Shape& s) { return shapeToString(s); }

std::string clip(std::string s)
{
    if (s.size() > kMaxParamChars) {
        s.resize(kMaxParamChars);
        s += "...";
    }
    return s;
}

int64_t ceilDiv(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; }

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

DType dtypeFromText(std::string_view t)
{
    if (t.starts_with("torch."))
        t.remove_prefix(6);
    auto d = dtypeFromName(t);
    return d ? *d : DType::Unknown;
}

// QuantState.as_dict(packed=True)'s JSON: {"quant_type", "blocksize", "dtype", "shape", ["nested_blocksize",
// "nested_dtype", "nested_offset"]}. Returns the reason when it is not that.
std::optional<QuantState> parseQuantState(simdjson::dom::parser& parser, const std::string& bytes, std::string& why)
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
std::string unquoted(simdjson::dom::parser& parser, std::string_view v)
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
std::vector<std::pair<std::string, std::string>> readSafetensorsMetadata(
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
bool isUnderscoreQdata(std::string_view last) { return last.size() >= 8 && last[0] == '_' && last.ends_with("_qdata"); }

bool isTorchaoInner(std::string_view inner)
{
    return std::find(std::begin(kTorchaoInner), std::end(kTorchaoInner), inner) != std::end(kTorchaoInner);
}

// "<class 'torchao.quantization.Float8Tensor'>" -> "torchao.quantization.Float8Tensor".
std::string_view classFromTypeText(std::string_view t)
{
    if (t.starts_with("<class '") && t.ends_with("'>"))
        return t.substr(8, t.size() - 10);
    return t;
}

// ---------------------------------------------------------------------------------------------------

enum class Concern : uint8_t { MissingPart, Orphan, Inconsistent, Unscaled, Count_ };

class Grouper {
public:
    explicit Grouper(Source& s)
        : m_s(s)
        , m_e(s.entries)
        , m_reads(s)
    {
    }

    void run()
    {
        if (!scan())
            return;
        torchAo();
        torchaoFlattened();
        bitsandbytes4();
        bitsandbytes8();
        gptq();
        fp8();
        subclassFindings();
        apply();
        flushFindings();
    }

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
    bool scan()
    {
        for (const Entry& e : m_e) {
            const std::string_view name = e.name;
            const std::string_view last = lastComponent(name);
            if (e.quantization || dtypeIsQuantized(e.dtype) || (e.kind == EntryKind::Group && e.typeName == "tuple"))
                m_hasTorchAo = true;
            if (name.find(':') != std::string_view::npos)
                m_hasColon = true;
            if (isFloat8(e.dtype))
                m_hasFp8 = true;
            if (isUnderscoreQdata(last))
                m_hasUnderscore = true;
            if (last == "absmax" || last == "quant_map" || last == "nested_absmax" || last == "nested_quant_map"
                || last.starts_with("bitsandbytes__"))
                m_hasBnb4 = true;
            else if (last == "SCB" || last == "weight_format")
                m_hasBnb8 = true;
            else if (last == "qweight" || last == "qzeros" || last == "g_idx")
                m_hasGptq = true;
            else if (last.ends_with("_scale_inv") || last.ends_with("weight_scale"))
                m_hasFp8 = true;
            else if (last == "input_scale")
                m_hasFp8 = m_hasInputScale = true;
        }
        for (const auto& [k, v] : m_s.metadata)
            if (k == "tensor_names")
                m_hasTensorNames = true;
        return m_hasTorchAo || m_hasColon || m_hasFp8 || m_hasBnb4 || m_hasBnb8 || m_hasGptq
            || m_hasUnderscore || m_hasTensorNames;
    }

    struct NameOf {
        const std::vector<Entry>* entries;
        std::string_view operator()(size_t i) const { return (*entries)[i].name; }
    };
    NameOf nameOf() const { return { &m_e }; }

    size_t find(std::string_view name)
    {
        if (!m_indexed) {
            m_index.insertAll(m_e.size(), nameOf());
            m_indexed = true;
        }
        return m_index.find(name, nameOf());
    }
    bool isFree(size_t i) const { return i != npos && (m_claimed.empty() || !m_claimed[i]); }
    size_t findFree(std::string_view name)
    {
        const size_t i = find(name);
        return isFree(i) ? i : npos;
    }

    // findFree(name), trying `beside` first: writers list a weight's scale right after it (sorted keys), and
    // that comparison saves a hashed lookup, a cache miss, for each of 45,000 FP8 weights. Where a name
    // repeats, the copy beside the weight is the one paired.
    size_t findFreeBeside(size_t beside, std::string_view name)
    {
        if (beside < m_e.size() && isFree(beside) && m_e[beside].name == name)
            return beside;
        return findFree(name);
    }

    bool addPlan(Plan p)
    {
        m_plans.push_back(std::move(p));
        const auto planName = [this](size_t i) -> std::string_view { return m_plans[i].name; };
        if (m_planNames.insert(m_plans.size() - 1, planName) != m_plans.size() - 1) {
            m_plans.pop_back(); // two schemes claim one logical name: keep the first
            return false;
        }
        if (m_claimed.empty())
            m_claimed.assign(m_e.size(), false);
        for (const Part& part : m_plans.back().parts)
            m_claimed[part.index] = true;
        return true;
    }

    void report(Concern c, Severity s, std::string message, std::string entry)
    {
        // A load_state_dict error lists only the keys that failed: absent partners are not missing.
        if (m_s.format == "load-error-text")
            return;
        auto& n = m_counts[static_cast<size_t>(c)];
        if (n++ < kMaxFindingsPerKind)
            m_findings.push_back(Finding { s, std::move(message), std::move(entry) });
        else if (n == kMaxFindingsPerKind + 1)
            m_firstOver[static_cast<size_t>(c)] = entry;
    }

    // ---- torch.ao eager quantization: already described by state_dict_tree, here given Quantization.

    static Quantization torchAoQuantization(const Entry& t)
    {
        Quantization q;
        const std::string* qscheme = t.attribute("qscheme");
        q.scheme = "torch.ao." + (qscheme ? *qscheme : std::string("per_tensor_affine"));
        q.storageDType = t.dtype;
        if (const std::string* axis = t.attribute("axis")) {
            q.params.emplace_back("axis", *axis);
        } else {
            if (const std::string* scale = t.attribute("scale"))
                q.params.emplace_back("scale", *scale);
            if (const std::string* zp = t.attribute("zero_point"))
                q.params.emplace_back("zero_point", *zp);
        }
        return q;
    }

    void torchAo()
    {
        if (!m_hasTorchAo)
            return;
        bool quantizedModules = false;
        for (Entry& e : m_e) {
            if (e.quantization) {
                quantizedModules |= e.quantization->scheme.starts_with("torch.ao.");
                continue;
            }
            if (e.kind == EntryKind::Tensor && dtypeIsQuantized(e.dtype)) {
                e.quantization = std::make_shared<const Quantization>(torchAoQuantization(e));
                quantizedModules = true;
            } else if (e.kind == EntryKind::Group && e.typeName == "tuple" && !e.parts.empty()) {
                // Packed params: (weight, bias) of a quantized or dynamically quantized Linear.
                const Entry& w = e.parts.front();
                Quantization q;
                if (dtypeIsQuantized(w.dtype)) {
                    q = torchAoQuantization(w);
                } else if (w.dtype == DType::Float16 && e.name.ends_with("_packed_params._packed_params")) {
                    q.scheme = "torch.ao.dynamic_float16";
                    q.storageDType = DType::Float16;
                } else {
                    continue;
                }
                q.params.emplace_back("packed_params", "(weight, bias)");
                e.quantization = std::make_shared<const Quantization>(std::move(q));
                quantizedModules = true;
            }
        }
        if (!quantizedModules)
            return;
        // A quantized module's output (or QuantStub's input) qparams: P.scale and P.zero_point, 0-d or [1].
        for (size_t i = 0; i < m_e.size(); ++i) {
            Entry& e = m_e[i];
            if (lastComponent(e.name) != "scale" || !dtypeIsFloatingPoint(e.dtype) || e.numel() != 1
                || e.shape.size() > 1 || e.attribute("quant_role"))
                continue;
            const size_t zp = find(join(prefixOf(e.name, "scale"), "zero_point"));
            if (zp == npos || e.kind != EntryKind::Tensor || m_e[zp].numel() != 1 || dtypeIsFloatingPoint(m_e[zp].dtype)
                || m_e[zp].attribute("quant_role"))
                continue;
            e.attributes.emplace_back("quant_role", "activation scale (torch.ao)");
            m_e[zp].attributes.emplace_back("quant_role", "activation zero_point (torch.ao)");
        }
    }

    // ---- torchao's flattened safetensors layout

    void loadTorchaoMetadata()
    {
        for (const auto& [k, v] : m_s.metadata)
            m_meta.emplace(k, v);
        if (m_meta.count("tensor_names") || m_s.format != "safetensors-index")
            return;
        // An index keeps only total_size; torchao's metadata is in each shard's own header (transformers
        // writes the whole model's into every shard). Read the headers of shards holding torchao-style
        // keys until one has tensor_names, within a byte budget.
        std::vector<bool> tried(m_s.files.size(), false);
        uint64_t budget = kMaxHeaderBytes;
        size_t shards = 0;
        for (const Entry& e : m_e) {
            const std::string_view last = lastComponent(e.name);
            const bool torchaoKey = e.name.find(':') != std::string::npos || isUnderscoreQdata(last);
            const int32_t f = e.location.file;
            if (!torchaoKey || f < 0 || static_cast<size_t>(f) >= tried.size() || tried[static_cast<size_t>(f)])
                continue;
            tried[static_cast<size_t>(f)] = true;
            auto more = readSafetensorsMetadata(m_s.files[static_cast<size_t>(f)], m_parser, budget);
            bool found = false;
            for (auto& kv : more) {
                found |= kv.first == "tensor_names";
                m_shardMeta.push_back(std::move(kv));
            }
            if (found || ++shards >= kMaxShardHeaders || budget == 0)
                break;
        }
        for (const auto& [k, v] : m_shardMeta)
            m_meta.emplace(k, v);
    }

    std::optional<std::string_view> meta(std::string_view key) const
    {
        auto it = m_meta.find(key);
        if (it == m_meta.end())
            return std::nullopt;
        return it->second;
    }

    // Entries named "<base>:<inner>", by base: torchao's colon spelling.
    void indexColonNames()
    {
        for (size_t i = 0; i < m_e.size(); ++i) {
            const std::string_view name = m_e[i].name;
            const size_t colon = name.rfind(':');
            if (colon != std::string_view::npos && colon > 0 && isFree(i))
                m_colon[name.substr(0, colon)].push_back(i);
        }
    }

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

    static DType dtypeOfJson(simdjson::dom::element v)
    {
        std::string_view s;
        if (!v.get_string().get(s))
            return dtypeFromText(s);
        simdjson::dom::object o;
        if (!v.get_object().get(o) && !o["_data"].get_string().get(s))
            return dtypeFromText(s); // {"_type": "torch.dtype", "_data": "bfloat16"}
        return DType::Unknown;
    }

    static bool shapeOfJson(simdjson::dom::element v, Shape& out)
    {
        simdjson::dom::array a;
        if (v.get_array().get(a) || a.size() > 64)
            return false;
        out.clear();
        for (auto d : a) {
            int64_t i = 0;
            if (d.get_int64().get(i) || i < 0)
                return false;
            out.push_back(i);
        }
        return true;
    }

    TorchaoInfo torchaoInfo(const std::string& name)
    {
        TorchaoInfo info;
        simdjson::dom::element doc;
        simdjson::dom::object obj;
        if (auto m = meta(name)) {
            // {"_type": "Float8Tensor", "_data": {...}, "_tensor_data_names": [...]}
            const std::string text(*m);
            if (!m_parser.parse(text.data(), text.size(), true).get(doc) && !doc.get_object().get(obj)) {
                std::string_view type;
                if (!obj["_type"].get_string().get(type)) {
                    info.type = std::string(type.substr(0, 80));
                    info.described = true;
                }
                simdjson::dom::array names;
                if (!obj["_tensor_data_names"].get_array().get(names))
                    for (auto n : names) {
                        std::string_view s;
                        if (!n.get_string().get(s) && info.dataNames.size() < 32)
                            info.dataNames.emplace_back(s);
                    }
                simdjson::dom::object data;
                if (!obj["_data"].get_object().get(data))
                    for (auto [k, v] : data) {
                        if (k == "dtype" || k == "orig_dtype" || k == "_orig_dtype") {
                            if (DType d = dtypeOfJson(v); d != DType::Unknown)
                                info.dtype = d;
                        } else if (k == "shape") {
                            info.haveShape = shapeOfJson(v, info.shape);
                        } else if (info.params.size() < kMaxParams && !v.is_null()) {
                            info.params.emplace_back(std::string(k), clip(simdjson::to_string(v)));
                        }
                    }
            }
            return info;
        }
        // The earlier spelling: one metadata key per attribute, "<name>:tensor_type", "<name>:block_size", ...
        const std::string prefix = name + ":";
        if (auto t = meta(prefix + "tensor_type")) {
            const std::string_view qualified = classFromTypeText(*t);
            info.qualified = std::string(qualified.substr(0, 120));
            info.type = std::string(qualified.substr(qualified.rfind('.') + 1));
            info.described = true;
            for (std::string_view attr : { "dtype", "orig_dtype", "_orig_dtype" })
                if (auto d = meta(prefix + std::string(attr)))
                    if (DType dt = dtypeFromText(unquoted(m_parser, *d)); dt != DType::Unknown)
                        info.dtype = dt;
            for (std::string_view attr : { "block_size", "mm_config", "kernel_preference", "act_quant_kwargs",
                     "input_quant_func", "quant_kwargs", "elem_dtype", "target_dtype" })
                if (auto v = meta(prefix + std::string(attr)))
                    info.params.emplace_back(std::string(attr), clip(std::string(*v)));
            if (auto v = meta(prefix + "shape")) {
                const std::string text(*v);
                if (!m_parser.parse(text.data(), text.size(), true).get(doc))
                    info.haveShape = shapeOfJson(doc, info.shape);
            }
        }
        return info;
    }

    // Logical shape of a flattened torchao tensor when the metadata does not state it.
    static bool logicalShapeFromData(std::string_view type, const Entry& primary, Shape& out)
    {
        if (!primary.shapeKnown || primary.shape.empty())
            return false;
        out = primary.shape;
        if (type == "Float8Tensor" || type == "Int8Tensor" || type == "IntxUnpackedToInt8Tensor"
            || type == "Float8TrainingTensor" || type == "LinearActivationQuantizedTensor")
            return true;
        if (type == "NVFP4Tensor" || (type == "MXTensor" && (primary.dtype == DType::UInt8 || primary.dtype == DType::Float4_e2m1fn_x2))) {
            out.back() *= 2; // two fp4 values per byte
            return true;
        }
        if (type == "MXTensor")
            return true;
        return false;
    }

    void torchaoFlattened()
    {
        if (!m_hasColon && !m_hasUnderscore && !m_hasTensorNames)
            return;
        loadTorchaoMetadata();
        if (m_hasColon)
            indexColonNames();
        std::vector<std::string> names;
        if (auto tn = meta("tensor_names")) {
            const std::string text = unquoted(m_parser, *tn);
            simdjson::dom::element doc;
            simdjson::dom::array arr;
            if (!m_parser.parse(text.data(), text.size(), true).get(doc) && !doc.get_array().get(arr))
                for (auto n : arr) {
                    std::string_view s;
                    if (!n.get_string().get(s) && names.size() <= m_e.size())
                        names.emplace_back(s);
                }
        }
        std::unordered_set<std::string> described;
        for (const std::string& name : names)
            if (described.insert(name).second)
                torchaoGroup(name, torchaoInfo(name));
        // No metadata (or not for these keys): the spelling alone, class unknown.
        for (auto& [base, members] : m_colon) {
            const std::string name(base);
            if (described.count(name) || find(name) != npos)
                continue;
            bool known = false;
            for (size_t i : members)
                known |= isTorchaoInner(m_e[i].name.substr(base.size() + 1));
            if (known)
                torchaoGroup(name, TorchaoInfo {});
        }
        if (m_hasUnderscore)
            for (size_t i = 0; i < m_e.size(); ++i) {
                // "M._P_qdata" -> "M.P"
                const std::string_view last = lastComponent(m_e[i].name);
                if (!isFree(i) || !isUnderscoreQdata(last))
                    continue;
                const std::string name = join(prefixOf(m_e[i].name, last), last.substr(1, last.size() - 7));
                if (!described.count(name) && find(name) == npos)
                    torchaoGroup(name, TorchaoInfo {});
            }
    }

    void torchaoGroup(const std::string& name, const TorchaoInfo& info)
    {
        const std::string_view nameView = name;
        const std::string_view param = lastComponent(nameView);
        const std::string underscorePrefix = join(prefixOf(nameView, param), "_" + std::string(param) + "_");
        std::vector<Part> parts;
        std::vector<std::string> missing;
        auto take = [&](std::string_view inner) -> bool {
            for (const Part& p : parts)
                if (p.role == inner)
                    return true;
            size_t i = findFree(name + ":" + std::string(inner));
            if (i == npos && param.size() < nameView.size())
                i = findFree(underscorePrefix + std::string(inner));
            if (i == npos)
                return false;
            parts.push_back({ std::string(inner), i });
            return true;
        };
        const bool plain = info.type == "Tensor" || info.type == "torch.Tensor";
        if (plain) {
            // A plain tensor: under its own name (nothing to do), or "<name>:data" in the colon spelling.
            if (find(name) != npos)
                return;
            if (!take("data") && !take("_data"))
                return;
        } else {
            for (const std::string& inner : info.dataNames)
                if (!take(inner))
                    missing.push_back(inner);
            auto colon = m_colon.find(nameView);
            if (colon != m_colon.end())
                for (size_t i : colon->second)
                    if (isFree(i))
                        take(std::string_view(m_e[i].name).substr(name.size() + 1));
            if (info.dataNames.empty())
                for (std::string_view inner : kTorchaoInner)
                    take(inner);
        }
        if (parts.empty() || find(name) != npos)
            return;
        size_t primary = npos;
        for (std::string_view role : kTorchaoPrimary)
            for (const Part& p : parts)
                if (primary == npos && p.role == role)
                    primary = p.index;
        if (primary == npos)
            primary = parts.front().index;
        // The data first, then the scales in file order (the colon spelling has no declared order).
        if (info.dataNames.empty())
            std::stable_partition(parts.begin(), parts.end(), [&](const Part& p) { return p.index == primary; });

        Plan plan;
        plan.anchor = primary;
        plan.name = name;
        plan.typeName = info.qualified.empty() ? info.type : info.qualified;
        const Entry& data = m_e[primary];
        if (plain) {
            plan.dtype = data.dtype;
            plan.shape = data.shape;
            plan.shapeKnown = data.shapeKnown;
            plan.typeName = "torch.Tensor";
        } else {
            Quantization q;
            q.scheme = info.type.empty() ? std::string("torchao") : "torchao." + info.type;
            q.storageDType = data.dtype;
            plan.dtype = info.dtype;
            if (info.type == "LinearActivationQuantizedTensor" && info.dtype == DType::Unknown)
                plan.dtype = data.dtype; // a float weight with quantized activations
            plan.shape = info.shape;
            if (!info.haveShape && !logicalShapeFromData(info.type, data, plan.shape)) {
                plan.shapeKnown = false;
                plan.shape.clear();
                q.logicalShapeKnown = false;
            }
            if (info.type.empty())
                q.params.emplace_back("class", "not recorded (no torchao __metadata__ for this tensor)");
            q.params.emplace_back("layout", "torchao flattened safetensors");
            for (const auto& kv : info.params)
                q.params.push_back(kv);
            plan.q = std::make_shared<const Quantization>(std::move(q));
        }
        for (Part& p : parts)
            plan.parts.push_back(std::move(p));
        const std::string typeLabel = info.type.empty() ? std::string("torchao tensor") : "torchao " + info.type;
        if (addPlan(std::move(plan)) && !missing.empty()) {
            std::string list;
            for (const auto& m : missing)
                list += (list.empty() ? "" : ", ") + m;
            report(Concern::MissingPart, Severity::Warning,
                typeLabel + " is stored without its " + list + " (its __metadata__ lists them); torchao cannot "
                    + "rebuild it and the weight is lost or loads unscaled",
                name);
        }
    }

    // ---- bitsandbytes

    struct Bnb4 {
        std::string_view base;
        size_t absmax = npos, quantMap = npos, nestedAbsmax = npos, nestedQuantMap = npos, state = npos;
        std::string_view quantType;
        size_t first = npos;
    };

    void bitsandbytes4()
    {
        if (!m_hasBnb4)
            return;
        std::vector<Bnb4> found;
        std::unordered_map<std::string_view, size_t> byBase;
        for (size_t i = 0; i < m_e.size(); ++i) {
            if (!isFree(i))
                continue;
            const std::string_view name = m_e[i].name;
            const std::string_view last = lastComponent(name);
            std::string_view base;
            size_t Bnb4::*field = nullptr;
            std::string_view quantType;
            if (last == "absmax")
                field = &Bnb4::absmax;
            else if (last == "quant_map")
                field = &Bnb4::quantMap;
            else if (last == "nested_absmax")
                field = &Bnb4::nestedAbsmax;
            else if (last == "nested_quant_map")
                field = &Bnb4::nestedQuantMap;
            else if (last.starts_with("bitsandbytes__") && std::string_view(prefixOf(name, last)).ends_with(".quant_state")) {
                field = &Bnb4::state;
                quantType = last.substr(14);
            } else
                continue;
            base = prefixOf(name, last);
            if (field == &Bnb4::state)
                base = prefixOf(base, "quant_state");
            if (base.empty())
                continue;
            auto [it, inserted] = byBase.emplace(base, found.size());
            if (inserted) {
                Bnb4 b;
                b.base = base;
                b.first = i;
                found.push_back(b);
            }
            Bnb4& b = found[it->second];
            if (b.*field == npos)
                b.*field = i;
            if (!quantType.empty())
                b.quantType = quantType;
        }
        for (const Bnb4& b : found)
            bnb4Group(b);
        m_bnb4Groups += static_cast<size_t>(std::count_if(m_e.begin(), m_e.end(), [](const Entry& e) {
            return e.quantization && e.quantization->scheme.starts_with("bitsandbytes.") && e.quantization->scheme != "bitsandbytes.int8";
        }));
        if (m_bnb4Groups == 0)
            return;
        // Packed uint8 weights ([n, 1]) with none of their state, in a file whose other layers have it.
        for (size_t i = 0; i < m_e.size(); ++i) {
            const Entry& e = m_e[i];
            if (isFree(i) && e.kind == EntryKind::Tensor && lastComponent(e.name) == "weight" && e.dtype == DType::UInt8
                && e.shape.size() == 2 && e.shape[1] == 1)
                report(Concern::MissingPart, Severity::Warning,
                    "uint8 [n, 1] weight like the bitsandbytes 4-bit layers of this file, but without absmax, quant_map "
                    "or quant_state: it cannot be dequantized",
                    e.name);
        }
    }

    void bnb4Group(const Bnb4& b)
    {
        const size_t w = find(b.base);
        if (w == npos) {
            report(Concern::Orphan, Severity::Warning,
                "bitsandbytes 4-bit state (absmax/quant_map/quant_state) without its weight '" + std::string(b.base)
                    + "': the quantized weight is missing",
                m_e[b.first].name);
            return;
        }
        if (!isFree(w))
            return;
        const Entry& weight = m_e[w];
        Plan plan;
        plan.anchor = w;
        plan.name = std::string(b.base);
        plan.parts.push_back({ "weight", w });
        std::vector<std::string> missing;
        auto part = [&](const char* role, size_t idx) {
            if (idx != npos)
                plan.parts.push_back({ role, idx });
        };
        part("absmax", b.absmax);
        part("quant_map", b.quantMap);
        part("nested_absmax", b.nestedAbsmax);
        part("nested_quant_map", b.nestedQuantMap);
        const std::string stateRole = "quant_state.bitsandbytes__" + std::string(b.quantType.empty() ? "nf4" : b.quantType);
        part(stateRole.c_str(), b.state);
        if (b.absmax == npos)
            missing.push_back("absmax");
        if (b.quantMap == npos)
            missing.push_back("quant_map");
        if (b.state == npos)
            missing.push_back("quant_state");

        Quantization q;
        q.storageDType = weight.dtype;
        std::string type(b.quantType);
        std::optional<QuantState> qs;
        std::string why = "absent";
        if (b.state != npos) {
            const Entry& st = m_e[b.state];
            const auto& loc = st.location;
            if (loc.kind == TensorLocation::Kind::Mapped) {
                if (auto bytes = m_reads.read(loc.file, loc.offset, loc.length, why)) {
                    qs = parseQuantState(m_parser, *bytes, why);
                    if (!qs)
                        report(Concern::Inconsistent, Severity::Warning,
                            "bitsandbytes quant_state is not the JSON bitsandbytes writes (" + why
                                + "): the original shape and dtype are lost and bitsandbytes cannot load it",
                            std::string(b.base));
                }
            } else if (loc.kind == TensorLocation::Kind::Compressed) {
                why = "inside a compressed record; not read";
            } else if (loc.kind == TensorLocation::Kind::Unavailable) {
                why = "in a shard that is not available";
            } else {
                why = "its bytes are not in a file";
            }
        }
        if (qs) {
            if (type.empty())
                type = qs->quantType;
            plan.dtype = qs->dtype;
            plan.shape = qs->shape;
            q.params.emplace_back("quant_type", qs->quantType);
            q.params.emplace_back("blocksize", std::to_string(qs->blocksize));
            if (qs->dtype == DType::Unknown && !qs->dtypeText.empty())
                q.params.emplace_back("dtype", qs->dtypeText);
            if (qs->nested) {
                q.params.emplace_back("double_quant", "true");
                q.params.emplace_back("nested_blocksize", std::to_string(qs->nestedBlocksize));
                if (!qs->nestedDtype.empty())
                    q.params.emplace_back("nested_dtype", qs->nestedDtype);
                if (qs->nestedOffset) {
                    char buf[32]; // shortest text that reads back as the same double
                    const auto r = std::to_chars(buf, buf + sizeof buf, *qs->nestedOffset);
                    q.params.emplace_back("nested_offset", std::string(buf, r.ptr));
                }
                if (b.nestedAbsmax == npos)
                    missing.push_back("nested_absmax");
                if (b.nestedQuantMap == npos)
                    missing.push_back("nested_quant_map");
            }
            checkBnb4Sizes(plan.name, *qs, weight, b.absmax);
        } else {
            plan.shapeKnown = false;
            q.logicalShapeKnown = false;
            q.params.emplace_back("quant_state", "original shape and dtype not known: quant_state " + why);
            if (b.nestedAbsmax != npos || b.nestedQuantMap != npos)
                q.params.emplace_back("double_quant", "true");
        }
        if (b.nestedAbsmax != npos && b.nestedQuantMap == npos)
            missing.push_back("nested_quant_map");
        if (b.nestedQuantMap != npos && b.nestedAbsmax == npos)
            missing.push_back("nested_absmax");
        q.scheme = "bitsandbytes." + (type.empty() ? std::string("4bit") : type);
        q.params.emplace_back("quant_storage", std::string(dtypeName(weight.dtype)));
        plan.q = std::make_shared<const Quantization>(std::move(q));
        const std::string name = plan.name;
        if (!addPlan(std::move(plan)))
            return;
        ++m_bnb4Groups;
        if (!missing.empty()) {
            std::string list;
            for (const auto& m : missing)
                list += (list.empty() ? "" : ", ") + m;
            report(Concern::MissingPart, Severity::Warning,
                "bitsandbytes 4-bit weight stored without its " + list
                    + ": it cannot be dequantized (Linear4bit loaded with strict=False computes garbage)",
                name);
        }
    }

    void checkBnb4Sizes(const std::string& name, const QuantState& qs, const Entry& weight, size_t absmax)
    {
        uint64_t n = 1;
        for (int64_t d : qs.shape)
            n *= static_cast<uint64_t>(d);
        // Params4bit packs two values per byte into ((n + 1) // (itemsize * 2), 1) elements of quant_storage.
        const unsigned item = dtypeItemSize(weight.dtype);
        if (weight.shapeKnown && item) {
            const uint64_t want = (n + 1) / (2 * item);
            if (weight.numel() != want)
                report(Concern::Inconsistent, Severity::Warning,
                    "bitsandbytes quant_state says shape " + shapeText(qs.shape) + " (" + std::to_string(n)
                        + " values), which packs into " + std::to_string(want) + " " + std::string(dtypeName(weight.dtype))
                        + " elements, but the stored weight has " + std::to_string(weight.numel())
                        + ": the state belongs to another tensor",
                    name);
        }
        if (absmax != npos && qs.blocksize > 0 && m_e[absmax].shapeKnown) {
            const uint64_t blocks = (n + static_cast<uint64_t>(qs.blocksize) - 1) / static_cast<uint64_t>(qs.blocksize);
            if (m_e[absmax].numel() != blocks)
                report(Concern::Inconsistent, Severity::Warning,
                    "bitsandbytes absmax has " + std::to_string(m_e[absmax].numel()) + " values, but "
                        + std::to_string(n) + " values in blocks of " + std::to_string(qs.blocksize) + " need "
                        + std::to_string(blocks),
                    name);
        }
    }

    void bitsandbytes8()
    {
        if (!m_hasBnb8)
            return;
        struct Bnb8 {
            std::string_view prefix;
            size_t scb = npos, format = npos;
        };
        std::vector<Bnb8> found;
        std::unordered_map<std::string_view, size_t> byPrefix;
        for (size_t i = 0; i < m_e.size(); ++i) {
            const std::string_view last = lastComponent(m_e[i].name);
            if (!isFree(i) || (last != "SCB" && last != "weight_format"))
                continue;
            const std::string_view prefix = prefixOf(m_e[i].name, last);
            auto [it, inserted] = byPrefix.emplace(prefix, found.size());
            if (inserted)
                found.push_back(Bnb8 { prefix });
            (last == "SCB" ? found[it->second].scb : found[it->second].format) = i;
        }
        size_t groups = 0;
        for (const Bnb8& b : found) {
            const std::string weightName = join(b.prefix, "weight");
            const size_t w = find(weightName);
            const size_t first = b.scb != npos ? b.scb : b.format;
            if (w == npos) {
                report(Concern::Orphan, Severity::Warning,
                    "bitsandbytes 8-bit " + std::string(b.scb != npos ? "row scales (SCB)" : "weight_format")
                        + " without the int8 weight '" + weightName + "': the quantized weight is missing",
                    m_e[first].name);
                continue;
            }
            if (!isFree(w))
                continue;
            const Entry& weight = m_e[w];
            if (weight.dtype != DType::Int8 && weight.dtype != DType::Unknown) {
                if (b.scb != npos)
                    report(Concern::Inconsistent, Severity::Warning,
                        "bitsandbytes 8-bit row scales (SCB) beside a " + std::string(dtypeName(weight.dtype))
                            + " weight: the weight is not int8 (dequantized, or replaced) and SCB no longer applies",
                        m_e[b.scb].name);
                continue;
            }
            Plan plan;
            plan.anchor = w;
            plan.name = weightName;
            plan.parts.push_back({ "weight", w });
            if (b.scb != npos)
                plan.parts.push_back({ "SCB", b.scb });
            if (b.format != npos)
                plan.parts.push_back({ "weight_format", b.format });
            plan.shape = weight.shape;
            plan.shapeKnown = weight.shapeKnown;
            plan.dtype = weight.dtype; // the original dtype is not stored: show the key's own, as torch does
            Quantization q;
            q.scheme = "bitsandbytes.int8";
            q.storageDType = DType::Int8;
            q.params.emplace_back("layout", "row-major int8, per-row absmax scales (SCB)");
            q.params.emplace_back("original_dtype", "not stored");
            plan.q = std::make_shared<const Quantization>(std::move(q));
            if (addPlan(std::move(plan))) {
                ++groups;
                if (b.scb == npos)
                    report(Concern::MissingPart, Severity::Warning,
                        "bitsandbytes 8-bit weight stored without its row scales (SCB): it cannot be dequantized",
                        weightName);
            }
        }
        groups += static_cast<size_t>(std::count_if(m_e.begin(), m_e.end(), [](const Entry& e) {
            return e.quantization && e.quantization->scheme == "bitsandbytes.int8";
        }));
        if (!groups)
            return;
        for (size_t i = 0; i < m_e.size(); ++i) {
            const Entry& e = m_e[i];
            if (isFree(i) && e.kind == EntryKind::Tensor && e.dtype == DType::Int8 && lastComponent(e.name) == "weight")
                report(Concern::MissingPart, Severity::Warning,
                    "int8 weight like the bitsandbytes 8-bit layers of this file, but without SCB: it cannot be "
                    "dequantized",
                    e.name);
        }
    }

    // ---- GPTQ / AWQ

    struct Packed {
        bool ok = false;
        int64_t in = 0, out = 0, bits = 0, groups = 0;
        std::string layout;
    };

    static bool known2d(const Entry* e) { return e && e->shapeKnown && e->shape.size() == 2; }

    // Bits and the logical [out, in] from the int32-packed layouts, when the shapes determine them.
    static Packed derivePacked(const Entry& qw, const Entry* qz, const Entry* sc, const Entry* gi)
    {
        Packed p;
        if (!known2d(&qw) || !known2d(sc))
            return p;
        const int64_t q0 = qw.shape[0], q1 = qw.shape[1], s0 = sc->shape[0], s1 = sc->shape[1];
        auto goodBits = [](int64_t b) { return b == 2 || b == 3 || b == 4 || b == 8; };
        if (q1 == s1) {
            // GPTQ: qweight [in * bits / 32, out], qzeros [groups, out * bits / 32], scales [groups, out].
            p.layout = "gptq";
            p.out = s1;
            if (gi && gi->shapeKnown && gi->shape.size() == 1 && gi->shape[0] > 0 && (q0 * 32) % gi->shape[0] == 0) {
                p.in = gi->shape[0];
                p.bits = q0 * 32 / p.in;
            } else if (known2d(qz) && p.out > 0 && (qz->shape[1] * 32) % p.out == 0) {
                p.bits = qz->shape[1] * 32 / p.out;
                if (p.bits <= 0 || (q0 * 32) % p.bits)
                    return p;
                p.in = q0 * 32 / p.bits;
            } else {
                return p;
            }
            if (!goodBits(p.bits) || (known2d(qz) && qz->shape[1] * 32 != p.out * p.bits))
                return p;
        } else if (q1 > 0 && s1 % q1 == 0 && 32 % (s1 / q1) == 0) {
            // AWQ GEMM: qweight [in, out / (32 / bits)], qzeros [in / group, out / (32 / bits)], scales [in / group, out].
            p.layout = "awq-gemm";
            p.bits = 32 / (s1 / q1);
            p.in = q0;
            p.out = s1;
            if (!goodBits(p.bits) || (known2d(qz) && qz->shape[1] != q1))
                return p;
        } else {
            return p;
        }
        p.groups = s0;
        p.ok = p.in > 0 && p.out > 0 && s0 > 0 && s0 <= p.in;
        return p;
    }

    void gptq()
    {
        if (!m_hasGptq)
            return;
        std::unordered_set<std::string_view> orphanPrefixes;
        for (size_t i = 0; i < m_e.size(); ++i) {
            const std::string_view last = lastComponent(m_e[i].name);
            if (!isFree(i))
                continue;
            if (last == "qzeros" || last == "g_idx") {
                const std::string_view prefix = prefixOf(m_e[i].name, last);
                if (find(join(prefix, "qweight")) == npos && orphanPrefixes.insert(prefix).second)
                    report(Concern::Orphan, Severity::Warning,
                        "GPTQ/AWQ " + std::string(last) + " without its qweight '" + join(prefix, "qweight")
                            + "': the quantized weight is missing",
                        m_e[i].name);
                continue;
            }
            if (last != "qweight" || (m_e[i].dtype != DType::Int32 && m_e[i].dtype != DType::Unknown))
                continue;
            const std::string_view prefix = prefixOf(m_e[i].name, last);
            const size_t qz = findFree(join(prefix, "qzeros"));
            const size_t sc = findFree(join(prefix, "scales"));
            const size_t gi = findFree(join(prefix, "g_idx"));
            std::string name = join(prefix, "weight");
            if (find(name) != npos)
                name = m_e[i].name; // a real weight key beside it: keep qweight's own name
            const Entry& qw = m_e[i];
            const Packed p = derivePacked(qw, qz != npos ? &m_e[qz] : nullptr, sc != npos ? &m_e[sc] : nullptr,
                gi != npos ? &m_e[gi] : nullptr);
            Plan plan;
            plan.anchor = i;
            plan.name = name;
            plan.parts.push_back({ "qweight", i });
            if (qz != npos)
                plan.parts.push_back({ "qzeros", qz });
            if (sc != npos)
                plan.parts.push_back({ "scales", sc });
            if (gi != npos)
                plan.parts.push_back({ "g_idx", gi });
            Quantization q;
            q.storageDType = DType::Int32;
            plan.dtype = sc != npos ? m_e[sc].dtype : DType::Unknown;
            if (p.ok) {
                q.scheme = p.layout == "gptq" ? "gptq" : "awq";
                plan.shape = Shape { p.out, p.in };
                q.params.emplace_back("bits", std::to_string(p.bits));
                q.params.emplace_back("group_size",
                    p.groups == 1 ? std::string("-1 (one group per output channel)")
                                  : (p.in % p.groups == 0 ? "" : "about ") + std::to_string(p.in / p.groups));
                q.params.emplace_back("layout", p.layout);
            } else {
                q.scheme = gi != npos ? "gptq" : "gptq-or-awq";
                plan.shapeKnown = false;
                q.logicalShapeKnown = false;
                q.params.emplace_back("bits_and_group_size",
                    "not determined by the tensors; quantize_config.json (or config.json's quantization_config) "
                    "has them");
            }
            if (gi != npos)
                q.params.emplace_back("g_idx", "present (group of each input channel; act-order when permuted)");
            plan.q = std::make_shared<const Quantization>(std::move(q));
            if (!addPlan(std::move(plan)))
                continue;
            std::string missing;
            if (sc == npos)
                missing = "scales";
            if (qz == npos)
                missing += std::string(missing.empty() ? "" : ", ") + "qzeros";
            if (!missing.empty())
                report(Concern::MissingPart, Severity::Warning,
                    "GPTQ/AWQ qweight stored without its " + missing + ": it cannot be dequantized", name);
        }
    }

    // ---- FP8 (and int8 with weight_scale, compressed-tensors style)

    static std::string blockOf(const Shape& w, const Shape& s)
    {
        // The block edge per dimension: the power of two whose ceil-division gives the scale's size.
        std::string out = "[";
        for (size_t d = 0; d < w.size() && d < s.size(); ++d) {
            int64_t b = 1;
            while (b < (int64_t(1) << 30) && ceilDiv(w[d], b) > s[d])
                b *= 2;
            if (ceilDiv(w[d], b) != s[d])
                b = s[d] > 0 ? ceilDiv(w[d], s[d]) : 0;
            out += (d ? ", " : "") + std::to_string(b);
        }
        return out + "]";
    }

    // One shared description per distinct FP8 layout: a checkpoint has a handful, over thousands of weights.
    std::shared_ptr<const Quantization> fp8Quantization(
        DType stored, std::string_view granularity, const std::string& block, bool inverseScale, bool inputScale)
    {
        std::string& key = m_key;
        key.assign(dtypeName(stored));
        key += '|';
        key += granularity;
        key += '|';
        key += block;
        key += inverseScale ? "|inv" : "|";
        key += inputScale ? "|input" : "|";
        auto& cached = m_fp8Descriptions[key];
        if (cached)
            return cached;
        Quantization q;
        q.storageDType = stored;
        if (!block.empty())
            q.params.emplace_back("block_size", block);
        if (inverseScale)
            q.params.emplace_back("scale", "weight_scale_inv (dequantized = weight * scale, per block)");
        if (inputScale)
            q.params.emplace_back("activation_scale", "static (input_scale)");
        q.params.emplace_back("original_dtype", "not stored");
        q.scheme = std::string(stored == DType::Int8 ? "int8" : "fp8") + "." + std::string(granularity);
        cached = std::make_shared<const Quantization>(std::move(q));
        return cached;
    }

    // `base` + `suffix` in a buffer reused across calls, for lookups that would otherwise allocate a name each.
    std::string_view withSuffix(std::string_view base, std::string_view suffix)
    {
        m_key.assign(base);
        m_key += suffix;
        return m_key;
    }
    // join(prefix, key) in the same buffer.
    std::string_view joinedKey(std::string_view prefix, std::string_view key)
    {
        assignJoined(m_key, prefix, key);
        return m_key;
    }

    void fp8()
    {
        if (!m_hasFp8)
            return;
        // Groups formed by an earlier run count too (they are no longer top-level weights).
        size_t scaled = static_cast<size_t>(std::count_if(m_e.begin(), m_e.end(), [](const Entry& e) {
            return e.quantization && e.quantization->scheme.starts_with("fp8.");
        }));
        std::vector<size_t> unscaled;
        for (size_t i = 0; i < m_e.size(); ++i) {
            if (!isFree(i))
                continue;
            const Entry& e = m_e[i];
            const std::string_view last = lastComponent(e.name);
            if (!last.ends_with("weight") || e.kind != EntryKind::Tensor)
                continue;
            const bool f8 = isFloat8(e.dtype);
            const bool i8 = e.dtype == DType::Int8;
            const bool unknown = e.dtype == DType::Unknown;
            const size_t inv = findFreeBeside(i + 1, withSuffix(e.name, "_scale_inv"));
            const size_t sc = inv == npos ? findFreeBeside(i + 1, withSuffix(e.name, "_scale")) : npos;
            if (!f8 && !(i8 && sc != npos) && !(unknown && inv != npos)) {
                if (inv != npos && dtypeIsFloatingPoint(e.dtype))
                    report(Concern::Inconsistent, Severity::Warning,
                        "a " + std::string(dtypeName(e.dtype)) + " weight beside a block-FP8 scale (" + e.name
                            + "_scale_inv): the weight was dequantized (or never quantized) but the scale kept; an "
                              "FP8 model would apply it to the wrong values",
                        e.name);
                continue;
            }
            if (inv == npos && sc == npos) {
                if (f8)
                    unscaled.push_back(i);
                continue;
            }
            // (A lookup that cannot succeed still costs a cache miss: 45,000 of them for DeepSeek-V3.)
            const size_t input = last == "weight" && m_hasInputScale ? findFree(joinedKey(prefixOf(e.name, last), "input_scale")) : npos;
            const size_t scale = inv != npos ? inv : sc;
            const Entry& s = m_e[scale];
            Plan plan;
            plan.anchor = i;
            plan.name = e.name;
            plan.parts.push_back({ "weight", i });
            plan.parts.push_back({ inv != npos ? "weight_scale_inv" : "weight_scale", scale });
            if (input != npos)
                plan.parts.push_back({ "input_scale", input });
            plan.shape = e.shape;
            plan.shapeKnown = e.shapeKnown;
            plan.dtype = e.dtype; // the original dtype is not stored: show the key's own, as torch does
            std::string_view granularity = "scaled";
            std::string block;
            if (e.shapeKnown && s.shapeKnown) {
                const uint64_t sn = s.numel();
                if (sn == 1 && inv == npos)
                    granularity = "per_tensor";
                else if (!e.shape.empty() && inv == npos && (s.shape == Shape { e.shape[0], 1 } || s.shape == Shape { e.shape[0] }))
                    granularity = "per_channel";
                else if (s.shape.size() == e.shape.size() && sn < e.numel()) {
                    granularity = "block";
                    block = blockOf(e.shape, s.shape);
                }
            } else if (inv != npos) {
                granularity = "block";
            }
            plan.q = fp8Quantization(e.dtype, granularity, block, inv != npos, input != npos);
            if (addPlan(std::move(plan)))
                ++scaled;
        }
        // Scales whose weight is gone.
        for (size_t i = 0; i < m_e.size(); ++i) {
            if (!isFree(i))
                continue;
            const std::string_view name = m_e[i].name;
            const std::string_view last = lastComponent(name);
            std::string_view weight;
            if (last.ends_with("weight_scale_inv"))
                weight = name.substr(0, name.size() - 10);
            else if (last.ends_with("weight_scale"))
                weight = name.substr(0, name.size() - 6);
            else if (last == "input_scale" && scaled)
                weight = {};
            else
                continue;
            const std::string weightName = weight.empty() ? join(prefixOf(name, last), "weight") : std::string(weight);
            if (find(weightName) == npos)
                report(Concern::Orphan, Severity::Warning,
                    std::string(last) + " without its weight '" + weightName + "': the quantized weight is missing",
                    std::string(name));
        }
        if (unscaled.empty())
            return;
        if (scaled) {
            for (size_t i : unscaled)
                report(Concern::Unscaled, Severity::Warning,
                    std::string(dtypeName(m_e[i].dtype)) + " weight without a scale (no " + m_e[i].name + "_scale_inv or "
                        + m_e[i].name + "_scale), while the file's other FP8 weights have one: it would load unscaled, "
                        + "off by its missing scale factor",
                    m_e[i].name);
        } else {
            report(Concern::Unscaled, Severity::Info,
                std::to_string(unscaled.size()) + " float8 weight(s) without scale tensors: plain casts (scale 1), or "
                    + "their scales were dropped",
                m_e[unscaled.front()].name);
        }
    }

    // ---- torchao subclasses in torch.save files (described by describeQuantizedSubclass)

    void subclassFindings()
    {
        for (const Entry& e : m_e) {
            if (!e.quantization)
                continue;
            if (const std::string* missing = e.attribute(kMissingPartsAttribute))
                report(Concern::MissingPart, Severity::Warning,
                    e.quantization->scheme + " is stored without its " + *missing
                        + " (torchao fills missing fields with None): it cannot be dequantized",
                    e.name);
        }
    }

    // ---- The plans become groups, in place of their anchors; the other parts leave the top level.

    void apply()
    {
        if (m_plans.empty())
            return;
        // Each group is built where its anchor was (the anchor is one of its parts, so its slot is free once
        // the parts have moved out), then one in-place compaction: unclaimed entries keep their order.
        std::vector<bool> isGroup(m_e.size());
        for (Plan& plan : m_plans) {
            Entry group = buildGroup(plan);
            m_e[plan.anchor] = std::move(group);
            isGroup[plan.anchor] = true;
        }
        size_t w = 0;
        for (size_t i = 0; i < m_e.size(); ++i) {
            if ((isGroup[i] || !m_claimed[i]) && w++ != i)
                m_e[w - 1] = std::move(m_e[i]); // never onto itself: a self-moved vector empties
        }
        m_e.erase(m_e.begin() + static_cast<std::ptrdiff_t>(w), m_e.end());
        m_index = NameIndex();
        m_indexed = false;
    }

    Entry buildGroup(Plan& plan)
    {
        Entry g;
        g.name = std::move(plan.name);
        g.kind = EntryKind::Group;
        g.dtype = plan.dtype;
        g.shape = std::move(plan.shape);
        g.shapeKnown = plan.shapeKnown;
        g.typeName = std::move(plan.typeName);
        const Entry& anchor = m_e[plan.anchor];
        g.isParameter = anchor.isParameter;
        g.requiresGrad = anchor.requiresGrad;
        g.device = anchor.device;
        g.quantization = std::move(plan.q);
        g.parts.reserve(plan.parts.size());
        for (Part& part : plan.parts) {
            Entry& p = g.parts.emplace_back(std::move(m_e[part.index]));
            p.attributes.emplace_back(kPartKeyAttribute, std::move(p.name));
            p.name = std::move(part.role);
        }
        return g;
    }

    void flushFindings()
    {
        static constexpr const char* kWhat[] = { "quantized weights stored without their scales or state",
            "scales or quantization state without their weight", "inconsistent quantization state",
            "float8 weights without scales" };
        for (size_t c = 0; c < static_cast<size_t>(Concern::Count_); ++c)
            if (m_counts[c] > kMaxFindingsPerKind)
                m_findings.push_back(Finding { Severity::Warning,
                    std::to_string(m_counts[c] - kMaxFindingsPerKind) + " more " + kWhat[c] + " (" + std::to_string(m_counts[c])
                        + " in all)",
                    m_firstOver[c] });
        if (m_findings.empty())
            return;
        std::unordered_set<std::string> have;
        for (const Finding& f : m_s.findings)
            if (!f.entry.empty())
                have.insert(f.entry + '\n' + f.message);
        for (Finding& f : m_findings)
            if (have.insert(f.entry + '\n' + f.message).second)
                m_s.findings.push_back(std::move(f));
    }

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

} // namespace

void groupQuantizedEntries(Source& s)
{
    if (s.entries.empty())
        return;
    Grouper(s).run();
}

} // namespace sl::quant
