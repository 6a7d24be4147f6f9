#pragma once
// Quantized state dicts: one logical parameter shown as one entry (kind Group) with its stored tensors as
// parts, the logical shape and dtype, and Entry::quantization {scheme, storage dtype, params}.
// - describeQuantizedSubclass: torchao tensor subclasses met while a torch.save tensor becomes an entry
//   (AffineQuantizedTensor and its tensor impls, Float8Tensor, Int4Tensor, Int8Tensor, NF4Tensor, MXTensor,
//   NVFP4Tensor, Float8TrainingTensor, wrappers such as LinearActivationQuantizedTensor, ...).
// - groupQuantizedEntries: key-pattern grouping after any reader (bitsandbytes 4/8-bit, GPTQ/AWQ, FP8
//   scales, torchao's flattened safetensors layout, torch.ao eager modules), with the checks for weights
//   loaded without their scales (warnings). Idempotent, linear in the number of entries, and it leaves
//   float state dicts alone: a group needs a quantized dtype or a key pattern no float module writes.
//
// Grouped parts keep their own locations; their `name` is their role ("qdata", "absmax", "qweight") and an
// attribute "key" keeps the state-dict key they were stored under. The group takes the position of its
// weight. Nothing here reads tensor bytes, except the few bytes of a bitsandbytes quant_state tensor (UTF-8
// JSON holding the original shape and dtype), read through its location with a strict size cap.

#include "model/source.h"
#include "pickle/value.h"

#include <functional>
#include <memory>

namespace sl::quant {

// Attribute a quantized entry carries when inner tensors its scheme needs are absent (comma-separated
// roles); groupQuantizedEntries reports it as a warning.
inline constexpr const char* kMissingPartsAttribute = "quantization_missing";
// Attribute of a grouped part: the state-dict key it was stored under.
inline constexpr const char* kPartKeyAttribute = "key";
// The most bytes read from one bitsandbytes quant_state tensor (real ones hold ~150 bytes of JSON).
inline constexpr uint64_t kMaxQuantStateBytes = 16 * 1024;

// Refines the generic description of a tensor subclass (inner tensors in e.parts, other state in
// e.attributes) when it is a torchao quantized class. Returns whether it recognised the class.
bool describeQuantizedSubclass(const pickle::TensorValue& t, Entry& e);
void groupQuantizedEntries(Source& s);

namespace grouping {
class Fp8Layouts;
}

// FP8 weights grouped with their block scales while an index's entries are built (formats/hf_index_reader.cpp):
// a float8 weight followed by its `_scale_inv` becomes at once the group groupQuantizedEntries would form,
// so neither is built as a top-level entry first and then moved (DeepSeek-V3: 45,000 pairs, and the
// grouping pass has little left to do). The source marks such groups provisional
// (Source::provisionalFp8Groups): groupQuantizedEntries keeps them where FP8 is the only scheme present and
// splits them back otherwise. The caller pairs only where every key is unique.
class Fp8PairGrouper {
public:
    Fp8PairGrouper();
    ~Fp8PairGrouper();
    // Whether the key after `weight` (its dtype given) is its block scale.
    static bool pairs(std::string_view weight, DType dtype, std::string_view next);
    // `name`: the weight's key; `weight` and `scale` build the two entries, in their places among the parts.
    Entry group(std::string name, const std::function<Entry()>& weight, const std::function<Entry()>& scale);

private:
    std::unique_ptr<grouping::Fp8Layouts> m_layouts;
};

} // namespace sl::quant
