// torchao tensor subclasses inside torch.save files, recognised without torchao (docs/on-disk-formats.md,
// "torchao subclasses in torch.save").
//
// Every torchao class is a wrapper subclass: _rebuild_from_type_v2(_rebuild_wrapper_subclass, cls,
// (cls, dtype, size, ...), state), so the entry's dtype and shape are already the logical ones and the
// state's inner tensors are already parts (state_dict_tree's generic description). Here the entry becomes a
// Group with Quantization; AffineQuantizedTensor's tensor impl is flattened into its parts, and wrappers
// (LinearActivationQuantizedTensor, ...) take over the quantization of the tensor they wrap. Classes are
// matched by module prefix `torchao.` and class name; fields torchao fills with None when absent are
// optional here too.

#include "quantized_tensors.h"

#include "pickle/value_repr.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace sl::quant {

using namespace sl::pickle;

namespace {


// "_orig_dtype" and "orig_dtype" are one parameter under two spellings (private fields in older releases).
std::string_view stripUnderscores(std::string_view name)
{
    const size_t i = name.find_first_not_of('_');
    return i == std::string_view::npos ? name : name.substr(i);
}

// Real torchao states hold a dozen fields; lookups in a larger (hostile, memo-shared) one are skipped so a
// file cannot make every tensor pay for a huge dict.
constexpr size_t kMaxStateItems = 256;

// The subclass state as a dict: a __dict__, or the dict half of (dict, slots).
const DictValue* stateDict(const TensorValue& t)
{
    const DictValue* d = asDict(t.extras().state);
    if (auto* tup = asSeq(t.extras().state); !d && tup && tup->kind == Kind::Tuple && tup->items.size() == 2)
        d = asDict(tup->items[0]);
    return d && d->items.size() <= kMaxStateItems ? d : nullptr;
}

// How a recognised class is described.
enum class Shape : uint8_t {
    Leaf, // quantized data and scales as direct inner tensors
    Affine, // AffineQuantizedTensor: data and scales inside its tensor impl
    Wrapper, // wraps another (quantized) weight tensor: original_weight_tensor
    Impl, // a tensor impl: described by the AffineQuantizedTensor that holds it
};

struct Spec {
    std::string_view cls;
    Shape shape = Shape::Leaf;
    std::string_view scheme; // empty: "torchao." + cls
    std::vector<std::string_view> required; // inner tensors; "a|b" accepts either (renamed across releases)
    std::vector<std::string_view> params; // state attributes copied into Quantization::params
};

// The storage tensor of a scheme is the first of these among the parts (else the first part).
constexpr std::string_view kStorageRoles[] = { "qdata", "int_data", "packed_weight", "float8_data", "quantized_data",
    "_data", "data", "original_weight_tensor" };

const std::vector<Spec>& specs()
{
    static const std::vector<Spec> table {
        // quantization/quantize_/workflows (torchao >= 0.12)
        { "Float8Tensor", Shape::Leaf, {}, { "qdata", "scale" },
            { "block_size", "mm_config", "act_quant_kwargs", "kernel_preference" } },
        { "Int4Tensor", Shape::Leaf, {}, { "qdata", "scale", "zero_point" },
            { "block_size", "shape", "activation_dtype" } },
        { "Int4PlainInt32Tensor", Shape::Leaf, {}, { "qdata", "scale", "zero_point" }, { "block_size", "shape" } },
        { "Int4TilePackedTo4dTensor", Shape::Leaf, {}, { "qdata", "scale_and_zero" }, { "block_size", "shape" } },
        { "Int4PreshuffledTensor", Shape::Leaf, {}, { "qdata" }, { "block_size", "shape" } },
        { "Int4MarlinSparseTensor", Shape::Leaf, {}, { "qdata" }, { "block_size", "shape" } },
        { "Int4OpaqueTensor", Shape::Leaf, {}, { "qdata" }, { "block_size", "shape" } },
        { "IntxUnpackedToInt8Tensor", Shape::Leaf, {}, { "qdata", "scale", "zero_point" },
            { "target_dtype", "block_size", "activation_quantization" } },
        { "IntxUnpackedTensor", Shape::Leaf, {}, { "qdata", "scale", "zero_point" }, { "bit_width", "block_size" } },
        { "Int8Tensor", Shape::Leaf, {}, { "qdata", "scale" }, { "block_size", "act_quant_kwargs" } },
        { "NF4Tensor", Shape::Leaf, {},
            { "quantized_data", "scaler_mean", "quantization_factor", "quantized_scalers", "nf4" },
            { "block_size", "n_blocks", "scaler_block_size" } },
        { "MXTensor", Shape::Leaf, {}, { "qdata|_data", "scale|_scale_e8m0" },
            { "elem_dtype", "_elem_dtype", "block_size", "_block_size", "orig_dtype", "_orig_dtype" } },
        { "NVFP4Tensor", Shape::Leaf, {}, { "qdata", "scale|_scale_e4m3" },
            { "block_size", "_block_size", "orig_dtype", "_orig_dtype", "is_swizzled_scales" } },
        { "Float8TrainingTensor", Shape::Leaf, {}, { "_data", "_scale" },
            { "_orig_dtype", "_gemm_input_role", "_axiswise_dim" } },
        // dtypes/ (deleted Apr 2026, still in files): the data lives in the tensor impl.
        { "AffineQuantizedTensor", Shape::Affine, {}, { "tensor_impl|layout_tensor" },
            { "block_size", "quant_min", "quant_max", "zero_point_domain" } },
        { "PlainAQTTensorImpl", Shape::Impl, {}, { "int_data", "scale" }, {} },
        { "PlainAQTLayout", Shape::Impl, {}, { "int_data", "scale" }, {} },
        { "TensorCoreTiledAQTTensorImpl", Shape::Impl, {}, { "packed_weight", "scale_and_zero" }, {} },
        { "TensorCoreTiledAQTLayout", Shape::Impl, {}, { "packed_weight", "scale_and_zero" }, {} },
        { "Float8AQTTensorImpl", Shape::Impl, {}, { "float8_data", "scale" }, {} },
        { "Float8AQTLayout", Shape::Impl, {}, { "float8_data", "scale" }, {} },
        // Wrappers of another weight tensor.
        { "LinearActivationQuantizedTensor", Shape::Wrapper, {}, { "original_weight_tensor" },
            { "input_quant_func", "quant_kwargs" } },
        { "WeightTensorWithLinearActivationScaleMetadata", Shape::Wrapper, {}, { "original_weight_tensor" }, {} },
        { "WeightTensorWithLinearActivationQuantizationMetadata", Shape::Wrapper, {}, { "original_weight_tensor" },
            { "input_quant_func", "quant_kwargs" } },
        // quantization/subclass.py (2024): the first torchao subclasses.
        { "Int8DynamicallyQuantizedLinearWeight", Shape::Leaf, {}, { "int_data", "q_scales" }, {} },
        { "Int8WeightOnlyQuantizedLinearWeight", Shape::Leaf, {}, { "int_data", "q_scales" }, {} },
        { "Int4WeightOnlyQuantizedLinearWeight", Shape::Leaf, {}, { "int_data", "scales_and_zeros" },
            { "groupsize", "inner_k_tiles" } },
    };
    return table;
}

const Spec* findSpec(std::string_view module, std::string_view cls)
{
    // torchao.float8's Float8Tensor (renamed Float8TrainingTensor) is not the inference Float8Tensor.
    if (cls == "Float8Tensor" && module.starts_with("torchao.float8.") && !module.starts_with("torchao.float8.inference"))
        cls = "Float8TrainingTensor";
    for (const Spec& s : specs())
        if (s.cls == cls)
            return &s;
    return nullptr;
}

size_t findPart(const Entry& e, std::string_view role)
{
    for (size_t i = 0; i < e.parts.size(); ++i)
        if (e.parts[i].name == role)
            return i;
    return SIZE_MAX;
}

// Index of the part satisfying "a|b", or SIZE_MAX.
size_t findAlternative(const Entry& e, std::string_view alternatives)
{
    while (true) {
        const size_t bar = alternatives.find('|');
        if (size_t i = findPart(e, alternatives.substr(0, bar)); i != SIZE_MAX)
            return i;
        if (bar == std::string_view::npos)
            return SIZE_MAX;
        alternatives.remove_prefix(bar + 1);
    }
}

DType storageDTypeOf(const Entry& e)
{
    for (std::string_view role : kStorageRoles)
        if (size_t i = findPart(e, role); i != SIZE_MAX)
            return e.parts[i].dtype;
    return e.parts.empty() ? DType::Unknown : e.parts.front().dtype;
}

void noteMissing(Entry& e, const std::string& missing)
{
    if (missing.empty())
        return;
    for (auto& [k, v] : e.attributes)
        if (k == kMissingPartsAttribute) {
            v += ", " + missing;
            return;
        }
    e.attributes.emplace_back(kMissingPartsAttribute, missing);
}

std::string missingOf(const Entry& e, const std::vector<std::string_view>& required)
{
    std::string missing;
    for (std::string_view r : required)
        if (findAlternative(e, r) == SIZE_MAX) {
            if (!missing.empty())
                missing += ", ";
            missing += r.substr(0, r.find('|'));
        }
    return missing;
}

void addParams(Quantization& q, const DictValue* state, const std::vector<std::string_view>& names)
{
    if (!state)
        return;
    for (std::string_view name : names) {
        const Value* v = state->lookup(name);
        if (!v || v->kind == Kind::None || v->kind == Kind::Tensor)
            continue;
        q.params.emplace_back(std::string(stripUnderscores(name)), pickle::paramText(v));
    }
}

std::string shortClass(std::string_view qualified) { return std::string(qualified.substr(qualified.rfind('.') + 1)); }

void describeAffine(const TensorValue& t, Entry& e, Quantization& q)
{
    // The data and scales live in the tensor impl (a subclass of its own, already a part): its parts become
    // the group's, its layout goes into the params.
    const size_t at = findAlternative(e, "tensor_impl|layout_tensor");
    if (at == SIZE_MAX)
        return;
    Entry impl = std::move(e.parts[at]);
    e.parts.erase(e.parts.begin() + static_cast<std::ptrdiff_t>(at));
    e.parts.insert(e.parts.begin() + static_cast<std::ptrdiff_t>(at), std::make_move_iterator(impl.parts.begin()),
        std::make_move_iterator(impl.parts.end()));
    q.params.emplace_back("tensor_impl", shortClass(impl.typeName));
    if (const std::string* missing = impl.attribute(kMissingPartsAttribute))
        noteMissing(e, *missing);
    const DictValue* state = stateDict(t);
    const TensorValue* implValue = state ? asTensor(state->lookup(impl.name)) : nullptr;
    if (const DictValue* implState = implValue ? stateDict(*implValue) : nullptr) {
        for (std::string_view name : { "_layout", "layout_type", "transposed" })
            if (const Value* v = implState->lookup(name); v && v->kind != Kind::None)
                q.params.emplace_back(std::string(stripUnderscores(name)), pickle::paramText(v));
    }
}

void describeWrapper(const TensorValue& t, const Spec& spec, Entry& e, Quantization& q)
{
    const size_t at = findPart(e, "original_weight_tensor");
    if (at == SIZE_MAX)
        return;
    Entry inner = std::move(e.parts[at]);
    e.parts.erase(e.parts.begin() + static_cast<std::ptrdiff_t>(at));
    if (const std::string* missing = inner.attribute(kMissingPartsAttribute))
        noteMissing(e, *missing);
    CompactVector<Entry> own = std::move(e.parts); // the wrapper's own tensors (activation scales)
    e.parts.clear();
    if (inner.quantization) {
        // A quantized weight inside: the group is that weight, with the wrapper's activation handling noted.
        q = *inner.quantization;
        e.parts = std::move(inner.parts);
        q.params.emplace_back("weight_class", shortClass(inner.typeName));
    } else {
        // A float weight: only the activations are quantized (fake-quantized or scaled at run time).
        q.storageDType = inner.dtype;
        inner.parts.clear();
        e.parts.push_back(std::move(inner));
    }
    q.params.emplace_back("wrapper", std::string(spec.cls));
    addParams(q, stateDict(t), spec.params);
    std::unordered_set<std::string> roles;
    for (const Entry& p : e.parts)
        roles.insert(p.name);
    for (Entry& p : own) {
        if (roles.count(p.name))
            p.name = "wrapper." + p.name; // roles stay unique
        e.parts.push_back(std::move(p));
    }
}

} // namespace

bool describeQuantizedSubclass(const TensorValue& t, Entry& e)
{
    if (!t.extras().subclass)
        return false;
    const std::string_view module = t.extras().subclass->module;
    const std::string_view cls = t.extras().subclass->name;
    const bool torchao = module == "torchao" || module.starts_with("torchao.");
    const Spec* spec = findSpec(module, cls);
    // The 2024 subclasses were often pickled from __main__ (scripts that defined or re-exported them):
    // matched by name only when their own inner tensors are there.
    if (!torchao) {
        if (module != "__main__" || !spec || !cls.ends_with("QuantizedLinearWeight") || !missingOf(e, spec->required).empty())
            return false;
    }
    if (spec && spec->shape == Shape::Impl)
        return true; // flattened into its AffineQuantizedTensor
    if (!spec) {
        // Another torchao class (new ones appear every release): a quantized group when it has inner tensors.
        if (e.parts.empty() || cls.ends_with("TensorImpl") || cls.ends_with("AQTLayout"))
            return false;
    }

    Quantization q;
    q.scheme = spec && !spec->scheme.empty() ? std::string(spec->scheme)
                                             : "torchao." + std::string(spec ? spec->cls : cls);
    std::string missing = spec ? missingOf(e, spec->required) : std::string();
    if (!torchao)
        q.params.emplace_back("class_module", std::string(module) + " (matched by class name and state)");
    const Shape shape = spec ? spec->shape : Shape::Leaf;
    if (shape == Shape::Affine)
        describeAffine(t, e, q);
    if (shape == Shape::Wrapper)
        describeWrapper(t, *spec, e, q);
    else
        q.storageDType = storageDTypeOf(e);
    if (shape != Shape::Wrapper && spec)
        addParams(q, stateDict(t), spec->params);
    noteMissing(e, missing);
    e.kind = EntryKind::Group;
    e.quantization = std::make_shared<const Quantization>(std::move(q));
    return true;
}

} // namespace sl::quant
