// libstatelens-torch.so: a TorchScript module's state, as torch itself sees it, written as JSON.
//
// Runs only inside the `statelens __torchscript-worker` child process (never in the caller: loading a
// TorchScript archive runs the archive's own code). What it writes:
//
//   {"statelens_torchscript": 1, "libtorch": "1.13.0", "class": "__torch__.MyModel", "training": true,
//    "entries": [ENTRY...],        // state_dict() order: per module its parameters, its buffers, then
//                                  // what torch.ao's eager state_dict() adds for quantized modules, then
//                                  // its submodules
//    "state_dict_entries": N,      // how many of them torch.jit.load(...).state_dict() lists itself
//    "unpacked_entries": K,        // how many were unpacked from quantized packed-params attributes
//    "opaque": ["a.b (__torch__.torch.classes.x.Y)"],   // packed objects that could not be unpacked
//    "tensor_attributes": ["a.t"], // tensors held as plain attributes (not in any state_dict())
//    "warnings": ["..."]}          // what LibTorch warned about while loading
//
//   ENTRY: {"name", "kind": "tensor"|"group"|"object", "role": "parameter"|"buffer"|"packed_params",
//           "module": owning module's class, "is_parameter", tensor fields, "parts": [ENTRY...] (groups),
//           "type", "value" (objects; also the value of a 0-d tensor that was made from a number)}
//   tensor fields: "dtype" (torch's name), "shape", "layout", "strides", "storage_offset", "storage" (an id
//           shared by tensors that share bytes), "storage_nbytes", "requires_grad", "device",
//           "quant": {"qscheme", "scale", "zero_point"} or {"qscheme", "axis", "scales": T, "zero_points": T}
//
// On failure: {"statelens_torchscript": 1, "error": "one line", "error_kind": "load"|"internal"}.
//
// Quantized modules: torch.ao's quantized Linear/Conv keep their weights in packed C++ objects
// (torch.classes.quantized.*PackedParamsBase) that are attributes, not parameters, so
// torch.jit.load(...).state_dict() does not list them. The eager modules' _save_to_state_dict does, under
// fixed names; this file unpacks the objects (their own `unpack` method) and names the results the same
// way, so a scripted quantized model and its eager checkpoint line up:
//   LinearPackedParams:  <p>.dtype (torch.dtype), <p>._packed_params (tuple: weight, bias)
//   quantized Linear:    <p>.scale, <p>.zero_point (0-d tensors from its float/int attributes)
//   quantized Conv*:     <p>.weight, <p>.bias, <p>.scale, <p>.zero_point
//   EmbeddingPackedParams: <p>.dtype, <p>._packed_weight
// Other packed objects with an `unpack` method become a group under their attribute's name; the rest are
// reported in "opaque".

#include "torchscript_plugin.h"

#include "util/utf8.h"

#include <torch/script.h>
#include <torch/version.h>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

constexpr int kMaxDepth = 128; // module nesting; TorchScript has no cycles, a hostile archive might
constexpr size_t kMaxEntries = 10'000'000; // shared submodules could otherwise multiply the listing
constexpr size_t kMaxListed = 50; // names kept in "opaque", "tensor_attributes" and "warnings"

// JSON must be valid UTF-8 for the reader's parser; names come from the archive. The core's strict check
// (util/utf8.h: overlong forms and surrogates are invalid too), each bad byte shown as U+FFFD as everywhere.
std::string utf8(std::string_view s) { return sl::sanitizeUtf8(s); }

// LibTorch's messages span many lines (dispatch tables, TorchScript source excerpts): keep the first few
// non-empty lines, joined, and cut the rest.
std::string shortMessage(const std::string& text, size_t maxLength = 400)
{
    std::string out;
    size_t start = 0;
    int lines = 0;
    while (start < text.size() && lines < 3) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos)
            end = text.size();
        std::string line = text.substr(start, end - start);
        start = end + 1;
        size_t a = line.find_first_not_of(" \t\r");
        if (a == std::string::npos)
            continue;
        line = line.substr(a);
        while (!line.empty() && (line.back() == ' ' || line.back() == '\r' || line.back() == '\t'))
            line.pop_back();
        out += (out.empty() ? "" : " ") + line;
        ++lines;
    }
    if (out.size() > maxLength) {
        size_t cut = maxLength; // not inside a character: back to the first byte of the one at the cut
        while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80)
            --cut;
        out = out.substr(0, cut) + "...";
    }
    return utf8(out);
}

const char* dtypeName(c10::ScalarType t)
{
    switch (t) {
    case c10::ScalarType::Byte: return "uint8";
    case c10::ScalarType::Char: return "int8";
    case c10::ScalarType::Short: return "int16";
    case c10::ScalarType::Int: return "int32";
    case c10::ScalarType::Long: return "int64";
    case c10::ScalarType::Half: return "float16";
    case c10::ScalarType::Float: return "float32";
    case c10::ScalarType::Double: return "float64";
    case c10::ScalarType::ComplexHalf: return "complex32";
    case c10::ScalarType::ComplexFloat: return "complex64";
    case c10::ScalarType::ComplexDouble: return "complex128";
    case c10::ScalarType::Bool: return "bool";
    case c10::ScalarType::QInt8: return "qint8";
    case c10::ScalarType::QUInt8: return "quint8";
    case c10::ScalarType::QInt32: return "qint32";
    case c10::ScalarType::BFloat16: return "bfloat16";
    case c10::ScalarType::QUInt4x2: return "quint4x2";
    case c10::ScalarType::QUInt2x4: return "quint2x4";
    default: return "unknown";
    }
}

std::string className(const c10::ClassTypePtr& type)
{
    return type && type->name() ? utf8(type->name()->qualifiedName()) : std::string("?");
}

// Collects LibTorch's warnings instead of letting them go to stderr unseen.
class CollectWarnings : public c10::WarningHandler {
public:
    void process(const c10::SourceLocation&, const std::string& msg, const bool) override
    {
        if (messages.size() < kMaxListed)
            messages.push_back(shortMessage(msg, 300));
    }
    std::vector<std::string> messages;
};

class Describer {
public:
    explicit Describer(Writer& w)
        : m_w(w)
    {
    }

    void module(const torch::jit::Module& m, const std::string& prefix, int depth)
    {
        if (depth > kMaxDepth) {
            note(m_opaque, prefix + " (modules nested deeper than " + std::to_string(kMaxDepth) + ")");
            return;
        }
        const c10::ClassTypePtr type = m.type();
        const std::string cls = className(type);
        const size_t n = type->numAttributes();
        auto slot = [&](size_t i) { return m._ivalue()->getSlot(i); };
        // What torch.jit.load(...).state_dict() lists (ParameterPolicy / BufferPolicy of torch::jit).
        for (size_t i = 0; i < n; ++i)
            if (type->is_parameter(i) && slot(i).isTensor())
                tensorEntry(prefix + type->getAttributeName(i), slot(i).toTensor(), "parameter", cls, true);
        for (size_t i = 0; i < n; ++i)
            if (!type->is_parameter(i) && type->is_buffer(i) && slot(i).isTensor())
                tensorEntry(prefix + type->getAttributeName(i), slot(i).toTensor(), "buffer", cls, false);
        // What the eager quantized module's _save_to_state_dict would add.
        packedParams(m, prefix, cls);
        for (size_t i = 0; i < n; ++i) {
            const c10::IValue v = slot(i);
            if (v.isTensor() && !type->is_parameter(i) && !type->is_buffer(i))
                note(m_tensorAttributes, prefix + type->getAttributeName(i));
        }
        for (size_t i = 0; i < n; ++i) {
            const c10::IValue v = slot(i);
            if (type->getAttribute(i)->is_module() && v.isObject())
                module(torch::jit::Module(v.toObject()), prefix + type->getAttributeName(i) + ".", depth + 1);
        }
    }

    const std::vector<std::string>& opaque() const { return m_opaque; }
    const std::vector<std::string>& tensorAttributes() const { return m_tensorAttributes; }
    bool truncated() const { return m_truncated; }
    size_t stateDictCount() const { return m_stateDictCount; }
    size_t unpackedCount() const { return m_unpacked; }

private:
    bool budget()
    {
        if (m_entries < kMaxEntries)
            return true;
        m_truncated = true;
        return false;
    }

    static void note(std::vector<std::string>& list, std::string name)
    {
        if (list.size() < kMaxListed)
            list.push_back(utf8(name));
    }

    // `track`: give the storage an id. Only for tensors the module keeps alive (parameters, buffers):
    // tensors made while describing (unpacked weights) are freed, and their addresses reused.
    void tensorFields(const at::Tensor& t, bool track = true)
    {
        auto& w = m_w;
        w.Key("dtype");
        w.String(dtypeName(t.scalar_type()));
        w.Key("shape");
        w.StartArray();
        for (int64_t d : t.sizes())
            w.Int64(d);
        w.EndArray();
        w.Key("requires_grad");
        w.Bool(t.requires_grad());
        w.Key("device");
        w.String(utf8(t.device().str()).c_str());
        if (t.layout() != c10::kStrided) {
            std::ostringstream layout;
            layout << t.layout();
            w.Key("layout");
            w.String(utf8(layout.str()).c_str());
            return; // sparse and mkldnn tensors have no strides or single storage
        }
        w.Key("strides");
        w.StartArray();
        for (int64_t s : t.strides())
            w.Int64(s);
        w.EndArray();
        w.Key("storage_offset");
        w.Int64(t.storage_offset());
        if (track && t.has_storage()) {
            const void* impl = t.storage().unsafeGetStorageImpl();
            auto [it, inserted] = m_storages.emplace(impl, static_cast<int64_t>(m_storages.size()));
            w.Key("storage");
            w.Int64(it->second);
            w.Key("storage_nbytes");
            w.Uint64(static_cast<uint64_t>(t.storage().nbytes()));
        }
        if (t.is_quantized()) {
            w.Key("quant");
            w.StartObject();
            const c10::QScheme q = t.qscheme();
            w.Key("qscheme");
            w.String(c10::toString(q).c_str());
            if (q == c10::kPerTensorAffine || q == c10::kPerTensorSymmetric) {
                w.Key("scale");
                w.Double(t.q_scale());
                w.Key("zero_point");
                w.Int64(t.q_zero_point());
            } else {
                w.Key("axis");
                w.Int64(t.q_per_channel_axis());
                w.Key("scales");
                plainTensor(t.q_per_channel_scales());
                w.Key("zero_points");
                plainTensor(t.q_per_channel_zero_points());
            }
            w.EndObject();
        }
    }

    void plainTensor(const at::Tensor& t)
    {
        m_w.StartObject();
        m_w.Key("kind");
        m_w.String("tensor");
        tensorFields(t, false);
        m_w.EndObject();
    }

    void beginEntry(const std::string& name, const char* kind, const char* role, const std::string& cls)
    {
        ++m_entries;
        m_w.StartObject();
        m_w.Key("name");
        m_w.String(utf8(name).c_str());
        m_w.Key("kind");
        m_w.String(kind);
        m_w.Key("role");
        m_w.String(role);
        m_w.Key("module");
        m_w.String(cls.c_str());
    }

    void tensorEntry(const std::string& name, const at::Tensor& t, const char* role, const std::string& cls,
        bool isParameter, const char* value = nullptr)
    {
        if (!budget())
            return;
        beginEntry(name, "tensor", role, cls);
        m_w.Key("is_parameter");
        m_w.Bool(isParameter);
        tensorFields(t, std::string_view(role) != "packed_params");
        if (value) {
            m_w.Key("value");
            m_w.String(value);
        }
        m_w.EndObject();
        if (std::string_view(role) == "packed_params")
            ++m_unpacked;
        else
            ++m_stateDictCount;
    }

    void objectEntry(const std::string& name, const std::string& type, const std::string& value, const std::string& cls)
    {
        if (!budget())
            return;
        beginEntry(name, "object", "packed_params", cls);
        m_w.Key("type");
        m_w.String(type.c_str());
        m_w.Key("value");
        m_w.String(utf8(value).c_str());
        m_w.EndObject();
        ++m_unpacked;
    }

    // A tuple of tensors (None parts skipped, as the part numbering of torch.save's reader keeps them).
    void groupEntry(const std::string& name, const std::vector<c10::IValue>& parts, const std::string& type,
        const std::string& cls)
    {
        if (!budget())
            return;
        beginEntry(name, "group", "packed_params", cls);
        m_w.Key("type");
        m_w.String(type.c_str());
        m_w.Key("parts");
        m_w.StartArray();
        for (size_t i = 0; i < parts.size(); ++i) {
            if (!parts[i].isTensor())
                continue;
            m_w.StartObject();
            m_w.Key("name");
            m_w.String(std::to_string(i).c_str());
            m_w.Key("kind");
            m_w.String("tensor");
            m_w.Key("is_parameter");
            m_w.Bool(false);
            tensorFields(parts[i].toTensor(), false);
            m_w.EndObject();
        }
        m_w.EndArray();
        m_w.EndObject();
        ++m_unpacked;
    }

    static std::vector<c10::IValue> elements(const c10::IValue& v)
    {
        if (v.isTuple())
            return v.toTupleRef().elements().vec();
        if (v.isList())
            return v.toList().vec();
        if (v.isTensor())
            return { v };
        return {};
    }

    static bool hasAttribute(const torch::jit::Module& m, const std::string& name, c10::IValue& out)
    {
        if (!m.type()->hasAttribute(name))
            return false;
        out = m.attr(name);
        return true;
    }

    void dtypeEntry(const torch::jit::Module& m, const std::string& prefix, const std::string& cls)
    {
        c10::IValue dtype;
        if (hasAttribute(m, "dtype", dtype) && dtype.isInt())
            objectEntry(prefix + "dtype", "torch.dtype",
                std::string("torch.") + dtypeName(static_cast<c10::ScalarType>(dtype.toInt())), cls);
    }

    void packedParams(const torch::jit::Module& m, const std::string& prefix, const std::string& cls)
    {
        const c10::ClassTypePtr type = m.type();
        bool savesScale = false;
        for (size_t i = 0; i < type->numAttributes(); ++i) {
            const c10::IValue v = m._ivalue()->getSlot(i);
            if (!v.isObject())
                continue;
            const std::string attr = type->getAttributeName(i);
            const std::string kind = className(v.toObjectRef().type());
            if (v.toObjectRef().type()->is_module()) {
                // quantized Linear saves scale/zero_point; its weights sit in a LinearPackedParams child.
                if (attr == "_packed_params" && kind.ends_with("LinearPackedParams"))
                    savesScale = true;
                continue;
            }
            torch::jit::Object obj(v.toObject());
            if (!obj.find_method("unpack")) {
                note(m_opaque, prefix + attr + " (" + kind + ")");
                continue;
            }
            c10::IValue unpacked;
            try {
                unpacked = obj.run_method("unpack");
            } catch (const std::exception& e) {
                note(m_opaque, prefix + attr + " (" + kind + "; unpack failed: " + shortMessage(e.what(), 120) + ")");
                continue;
            }
            std::vector<c10::IValue> parts = elements(unpacked);
            if (kind.ends_with("quantized.LinearPackedParamsBase")) {
                dtypeEntry(m, prefix, cls);
                if (parts.size() > 2)
                    parts.resize(2);
                groupEntry(prefix + attr, parts, "tuple", cls);
            } else if (kind.find("quantized.Conv") != std::string::npos && kind.ends_with("PackedParamsBase")) {
                if (!parts.empty() && parts[0].isTensor())
                    tensorEntry(prefix + "weight", parts[0].toTensor(), "packed_params", cls, false);
                if (parts.size() > 1 && parts[1].isTensor())
                    tensorEntry(prefix + "bias", parts[1].toTensor(), "packed_params", cls, false);
                savesScale = true;
            } else if (kind.ends_with("EmbeddingPackedParamsBase") && !parts.empty() && parts[0].isTensor()) {
                dtypeEntry(m, prefix, cls);
                tensorEntry(prefix + attr, parts[0].toTensor(), "packed_params", cls, false);
            } else if (!parts.empty()) {
                groupEntry(prefix + attr, parts, kind, cls);
            } else {
                note(m_opaque, prefix + attr + " (" + kind + ")");
            }
        }
        if (!savesScale)
            return;
        c10::IValue scale, zeroPoint;
        if (hasAttribute(m, "scale", scale) && scale.isDouble() && hasAttribute(m, "zero_point", zeroPoint)
            && zeroPoint.isInt() && !type->is_buffer(*type->findAttributeSlot("scale"))) {
            // torch.tensor(self.scale) and torch.tensor(self.zero_point), as eager state_dict() saves them.
            char text[64];
            std::snprintf(text, sizeof text, "%.17g", scale.toDouble());
            tensorEntry(prefix + "scale", torch::scalar_tensor(scale.toDouble(), torch::kFloat), "packed_params", cls,
                false, text);
            std::snprintf(text, sizeof text, "%lld", static_cast<long long>(zeroPoint.toInt()));
            tensorEntry(prefix + "zero_point", torch::scalar_tensor(zeroPoint.toInt(), torch::kLong), "packed_params", cls,
                false, text);
        }
    }

    Writer& m_w;
    std::unordered_map<const void*, int64_t> m_storages;
    std::vector<std::string> m_opaque;
    std::vector<std::string> m_tensorAttributes;
    size_t m_entries = 0;
    size_t m_stateDictCount = 0;
    size_t m_unpacked = 0;
    bool m_truncated = false;
};

void writeStrings(Writer& w, const char* key, const std::vector<std::string>& list)
{
    w.Key(key);
    w.StartArray();
    for (const auto& s : list)
        w.String(s.c_str());
    w.EndArray();
}

std::string errorDocument(const std::string& message, const char* kind)
{
    rapidjson::StringBuffer buf;
    Writer w(buf);
    w.StartObject();
    w.Key("statelens_torchscript");
    w.Int(1);
    w.Key("libtorch");
    w.String(TORCH_VERSION);
    w.Key("error");
    w.String(shortMessage(message).c_str());
    w.Key("error_kind");
    w.String(kind);
    w.EndObject();
    return { buf.GetString(), buf.GetSize() };
}

std::string describe(const char* path)
{
    CollectWarnings warnings;
    c10::Warning::WarningHandlerGuard guard(&warnings);
    torch::jit::Module m = torch::jit::load(path, torch::kCPU);

    rapidjson::StringBuffer buf;
    Writer w(buf);
    w.StartObject();
    w.Key("statelens_torchscript");
    w.Int(1);
    w.Key("libtorch");
    w.String(TORCH_VERSION);
    w.Key("class");
    w.String(className(m.type()).c_str());
    w.Key("training");
    w.Bool(m.is_training());
    w.Key("entries");
    w.StartArray();
    Describer d(w);
    d.module(m, "", 0);
    w.EndArray();
    w.Key("state_dict_entries");
    w.Uint64(d.stateDictCount());
    w.Key("unpacked_entries");
    w.Uint64(d.unpackedCount());
    w.Key("truncated");
    w.Bool(d.truncated());
    writeStrings(w, "opaque", d.opaque());
    writeStrings(w, "tensor_attributes", d.tensorAttributes());
    writeStrings(w, "warnings", warnings.messages);
    w.EndObject();
    return { buf.GetString(), buf.GetSize() };
}

} // namespace

extern "C" __attribute__((visibility("default"))) int statelens_torch_plugin_abi(void)
{
    return STATELENS_TORCH_PLUGIN_ABI;
}

extern "C" __attribute__((visibility("default"))) int statelens_torchscript_describe(
    const char* path, statelens_torch_write_fn write, void* context)
{
    std::string doc;
    int rc = 0;
    try {
        doc = describe(path);
    } catch (const c10::Error& e) {
        doc = errorDocument(e.what_without_backtrace(), "load");
        rc = 1;
    } catch (const std::exception& e) {
        doc = errorDocument(e.what(), "load");
        rc = 1;
    } catch (...) {
        doc = errorDocument("unknown exception while loading", "internal");
        rc = 1;
    }
    write(context, doc.data(), doc.size());
    return rc;
}
