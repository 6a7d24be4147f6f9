#include "copy_compat.h"

#include "model/dtype.h"

#include <string_view>

namespace sl {

namespace {

std::string_view lastSegment(std::string_view s)
{
    const size_t dot = s.rfind('.');
    return dot == std::string_view::npos ? s : s.substr(dot + 1);
}

// The torchao class the load would meet: the outermost subclass (LinearActivationQuantizedTensor wraps an
// AffineQuantizedTensor), from the pickled type or the group's scheme.
std::string_view torchaoClass(const Entry& e)
{
    if (std::string_view(e.typeName).starts_with("torchao."))
        return lastSegment(e.typeName);
    if (e.quantization && e.quantization->scheme.starts_with("torchao."))
        return std::string_view(e.quantization->scheme).substr(8);
    return {};
}

bool isTorchAoQuantized(const Entry& e)
{
    return dtypeIsQuantized(e.dtype) || (e.quantization && e.quantization->scheme.starts_with("torch.ao."));
}

// A DTensor the load would copy into or from; the pieces of a per-rank set stand for their global tensor.
bool isDTensor(const Entry& e)
{
    if (e.sharding && e.sharding->kind == Sharding::Kind::PerRankFiles)
        return false;
    return lastSegment(e.typeName) == "DTensor";
}

constexpr std::string_view kAssign = "; load_state_dict(..., assign=True) takes the checkpoint's tensor as it is";

} // namespace

CopyVerdict copyCompatibility(const Entry& checkpoint, const Entry& model)
{
    CopyVerdict v;
    const std::string_view src = torchaoClass(checkpoint);
    const std::string_view dst = torchaoClass(model);
    if (!src.empty() || !dst.empty()) {
        v.quantized = true;
        if (dst == "NF4Tensor" && (src.empty() || src == "NF4Tensor"))
            return v; // NF4Tensor's copy_ quantizes a plain tensor and copies another NF4Tensor
        if (dst == "AffineQuantizedTensor" || dst == "LinearActivationQuantizedTensor") {
            v.fails = true;
            v.why = "the model's parameter is a torchao " + std::string(dst)
                + ", whose copy_ torchao does not implement (checked with torchao 0.9), so a strict load raises while "
                  "copying; quantize after loading float weights, or "
                + std::string(kAssign.substr(2));
            return v;
        }
        if (dst.empty()) {
            v.fails = true;
            v.why = "the checkpoint holds a torchao " + std::string(src)
                + " and the model a plain tensor: copy_ dispatches to torchao, which cannot copy into a plain tensor, "
                  "so a strict load raises; dequantize the checkpoint first, quantize the model the same way before "
                  "loading"
                + std::string(kAssign);
            return v;
        }
        if (src != dst) {
            v.fails = true;
            v.why = "the checkpoint holds a torchao " + (src.empty() ? std::string("plain tensor") : std::string(src))
                + ", the model a torchao " + std::string(dst) + ": copy_ between them raises" + std::string(kAssign);
        }
        return v;
    }
    if (isTorchAoQuantized(checkpoint) && !isTorchAoQuantized(model) && dtypeIsFloatingPoint(model.dtype)) {
        v.quantized = true;
        v.fails = true;
        v.why = "a quantized torch.ao tensor (" + std::string(dtypeName(checkpoint.dtype))
            + ") into a float parameter: torch refuses to copy from a quantized tensor; dequantize() it first, or load into "
              "the quantized model";
        return v;
    }
    if (isDTensor(checkpoint) != isDTensor(model)) {
        v.fails = true;
        v.why = isDTensor(model)
            ? "the model's parameter is a DTensor (FSDP2, tensor parallel) and the checkpoint's a plain tensor: copy_ raises "
              "on the mix; load full tensors with torch.distributed.checkpoint.state_dict.set_model_state_dict(..., "
              "StateDictOptions(full_state_dict=True)), or distribute them first"
            : "the checkpoint holds a DTensor (one rank's file) and the model a plain tensor: copy_ raises on the mix; "
              "gather the ranks first (DCP's dcp_to_torch_save, or full_tensor())";
    }
    return v;
}

} // namespace sl
