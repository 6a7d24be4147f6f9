#pragma once
// What `statelens convert` will write, decided before a byte is written: each tensor of the source under
// its name after the rules, in the dtype asked for; which keys the rules drop, which --only leaves out,
// which entries are not tensors (listed, never dropped silently), and which tensors are the same bytes
// under several names (tied weights: written once, the other names recorded in __metadata__ as
// safetensors.torch.save_model records them). A plan that cannot be written faithfully (two keys mapped
// onto one name, a dtype safetensors has no name for, a tensor with no bytes) is refused here, so a bad
// conversion fails before anything exists on disk.

#include "model/source.h"
#include "rules/rule.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sl::convert {

// --dtype: floating tensors (float16, bfloat16, float32, float64) cast as torch's Tensor.to casts them;
// quantized groups dequantized (the value reader's recipes, float32) and then cast; everything else
// (integers, bool, float8 tensors that are no group's weight) is written as stored.
enum class TargetDType : uint8_t { Keep, BFloat16, Float16, Float32 };
std::optional<TargetDType> targetDTypeFromName(std::string_view name); // "keep", "bf16", "fp16", "fp32"

struct ConvertOptions {
    RuleSet rules; // renames and drops, applied to each key (a quantized part's own key included)
    std::string only; // when not empty: only source keys this regular expression matches (searched anywhere)
    TargetDType dtype = TargetDType::Keep;
};

struct PlannedTensor {
    std::string name; // the key written
    std::string sourceName; // the key in the source (a quantized part's own key)
    const Entry* entry = nullptr; // the tensor in the source (a group's part), read when written
    // A quantized group written as its logical values (--dtype): `entry` is the group, read through
    // values::ValueReader; sourceDType is then float32, what the reader's values are.
    bool dequantize = false;
    DType sourceDType = DType::Unknown;
    DType dtype = DType::Unknown; // as written
    Shape shape;
    uint64_t nbytes = 0; // as written
    std::vector<std::string> tiedNames; // other keys naming the same bytes: not written, in __metadata__
};

struct ConvertPlan {
    std::vector<PlannedTensor> tensors; // in the source's order
    // __metadata__: {"format": "pt"} as Hugging Face writes it, and each tied key left out -> the key kept.
    std::vector<std::pair<std::string, std::string>> metadata;
    std::vector<Finding> findings; // non-tensor entries, tied keys, what the rules dropped
    std::vector<std::string> notTensors; // source keys of entries that are not tensors (not written)
    std::vector<std::string> droppedByRules; // source keys a drop rule removed
    size_t leftOutByOnly = 0; // keys --only did not match
    uint64_t totalBytes = 0; // tensor bytes written, over every shard
};

// Throws LoadError naming `source.path` (or "--only" for a bad pattern) when the conversion cannot be
// written faithfully; the message says which key and why, and that nothing was written.
ConvertPlan planConversion(const Source& source, const ConvertOptions& options);

} // namespace sl::convert
