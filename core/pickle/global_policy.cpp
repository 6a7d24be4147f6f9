#include "global_policy.h"

#include <array>
#include <utility>

namespace sl::pickle {

namespace {

bool moduleIs(std::string_view module, std::string_view root)
{
    return module == root || (module.size() > root.size() && module.substr(0, root.size()) == root
                                 && module[root.size()] == '.');
}

struct DangerousModule {
    std::string_view module;
    std::string_view reason;
};
// Modules whose members run commands, load code, touch the network or the file system when called.
constexpr std::array<DangerousModule, 34> kDangerousModules { {
    { "os", "runs shell commands and touches files" },
    { "posix", "runs shell commands (os on Unix)" },
    { "nt", "runs shell commands (os on Windows)" },
    { "subprocess", "starts processes" },
    { "sys", "reaches the interpreter's internals" },
    { "shutil", "copies and deletes files" },
    { "socket", "opens network connections" },
    { "pty", "spawns a shell" },
    { "runpy", "runs Python modules" },
    { "importlib", "imports arbitrary code" },
    { "code", "runs Python source" },
    { "codeop", "compiles Python source" },
    { "commands", "runs shell commands (Python 2)" },
    { "webbrowser", "opens URLs" },
    { "ctypes", "calls native code" },
    { "multiprocessing", "starts processes" },
    { "pickle", "unpickles nested, unchecked data" },
    { "_pickle", "unpickles nested, unchecked data" },
    { "marshal", "loads code objects" },
    { "types", "builds functions and code objects" },
    { "bdb", "runs code under a debugger" },
    { "pdb", "runs code under a debugger" },
    { "timeit", "runs Python source" },
    { "pip", "installs packages" },
    { "asyncio", "starts processes and connections" },
    { "http", "makes network requests" },
    { "urllib", "makes network requests" },
    { "requests", "makes network requests" },
    { "aiohttp", "makes network requests" },
    { "ftplib", "makes network requests" },
    { "smtplib", "sends mail" },
    { "telnetlib", "makes network connections" },
    { "signal", "installs signal handlers" },
    { "__main__", "is whatever the loading script defines; torch.load runs its reduce/setstate code" },
} };

struct DangerousName {
    std::string_view module;
    std::string_view name;
    std::string_view reason;
};
constexpr std::array<DangerousName, 20> kDangerousNames { {
    { "builtins", "eval", "evaluates Python source" },
    { "builtins", "exec", "executes Python source" },
    { "builtins", "execfile", "executes a Python file" },
    { "builtins", "compile", "compiles Python source" },
    { "builtins", "open", "opens files" },
    { "builtins", "__import__", "imports arbitrary modules" },
    { "builtins", "input", "reads from the terminal" },
    { "builtins", "breakpoint", "starts a debugger" },
    { "builtins", "apply", "calls an arbitrary function" },
    { "builtins", "exit", "ends the process" },
    { "builtins", "quit", "ends the process" },
    { "operator", "attrgetter", "reaches arbitrary attributes" },
    { "operator", "methodcaller", "calls arbitrary methods" },
    { "functools", "partial", "binds arbitrary calls" },
    { "torch", "load", "loads another pickle without checks" },
    { "torch.serialization", "load", "loads another pickle without checks" },
    { "torch.hub", "load", "downloads and runs code" },
    { "torch.jit", "load", "loads TorchScript code" },
    { "numpy", "load", "loads pickled numpy data" },
    { "numpy.testing._private.utils", "runstring", "executes Python source" },
} };

// Everything torch's weights-only unpickler accepts by default (plus the torch globals we model).
bool isWeightsOnlySafe(std::string_view module, std::string_view name)
{
    if (module == "collections" && (name == "OrderedDict" || name == "Counter" || name == "defaultdict"))
        return true;
    if (module == "builtins"
        && (name == "set" || name == "frozenset" || name == "bytearray" || name == "complex" || name == "slice"
            || name == "dict" || name == "list" || name == "tuple" || name == "int" || name == "float"
            || name == "str" || name == "bool" || name == "object"))
        return true;
    if (module == "_codecs" && name == "encode")
        return true;
    if (module == "copyreg" && name == "_reconstructor")
        return true;
    if (module == "torch._utils" || module == "torch._tensor" || module == "torch.storage")
        return name.substr(0, 8) == "_rebuild" || name == "_get_layout" || name == "UntypedStorage"
            || name == "TypedStorage" || name == "_load_from_bytes" || name == "Tensor";
    if (module == "torch.serialization" && name == "_get_layout")
        return true;
    if (module == "torch.nn.parameter" && (name == "Parameter" || name == "Buffer"))
        return true;
    if (module == "torch" || module == "torch.cuda")
        return name != "load"; // dtypes, storage classes, Size, device, layouts, qschemes, Tensor
    return false;
}

struct AllowlistedClass {
    std::string_view module;
    std::string_view name; // empty: every class of the module whose name ends with `suffix`
    std::string_view suffix;
    std::string_view import;
};
// torch/distributed/tensor/__init__.py (2.6): DeviceMesh, _DTensorSpec, TensorMeta, DTensor, Partial, Replicate
// and Shard, but not _StridedShard (FSDP2 over tensor parallelism writes it). torchao 0.9: the classes its
// modules pass to add_safe_globals, and every layout and tensor impl registered with register_layout
// (torchao/utils.py); `import torchao` imports torchao.float8 too, but not torchao.prototype.low_bit_optim.
constexpr std::array<AllowlistedClass, 38> kAllowlistedOnImport { {
    { "torch.distributed.device_mesh", "DeviceMesh", {}, "torch.distributed.tensor" },
    { "torch.distributed.tensor._dtensor_spec", "DTensorSpec", {}, "torch.distributed.tensor" },
    { "torch.distributed.tensor._dtensor_spec", "TensorMeta", {}, "torch.distributed.tensor" },
    { "torch.distributed.tensor", "DTensor", {}, "torch.distributed.tensor" }, // its __module__ since 2.5
    { "torch.distributed.tensor.placement_types", "Partial", {}, "torch.distributed.tensor" },
    { "torch.distributed.tensor.placement_types", "Replicate", {}, "torch.distributed.tensor" },
    { "torch.distributed.tensor.placement_types", "Shard", {}, "torch.distributed.tensor" },
    { "torchao.dtypes.affine_quantized_tensor", "AffineQuantizedTensor", {}, "torchao" },
    { "torchao.dtypes.nf4tensor", "NF4Tensor", {}, "torchao" },
    { "torchao.dtypes", {}, "Layout", "torchao" },
    { "torchao.dtypes", {}, "TensorImpl", "torchao" },
    { "torchao.quantization.quant_primitives", "MappingType", {}, "torchao" },
    { "torchao.quantization.quant_primitives", "ZeroPointDomain", {}, "torchao" },
    { "torchao.quantization.observer", "PerRow", {}, "torchao" },
    { "torchao.quantization.observer", "PerTensor", {}, "torchao" },
    { "torchao.quantization.linear_activation_quantized_tensor", "LinearActivationQuantizedTensor", {}, "torchao" },
    { "torchao.quantization.linear_activation_weight_observed_tensor", "LinearActivationWeightObservedTensor", {}, "torchao" },
    { "torchao.quantization.weight_tensor_linear_activation_quantization", "WeightTensorWithLinearActivationQuantizationMetadata", {}, "torchao" },
    { "torchao.quantization.linear_activation_scale", "WeightTensorWithLinearActivationScaleMetadata", {}, "torchao" },
    { "torchao.quantization.quant_api", "_int8_asymm_per_token_quant", {}, "torchao" },
    { "torchao.quantization.quant_api", "_int8_symm_per_token_reduced_range_quant", {}, "torchao" },
    { "torchao.quantization.quant_api", "_int8_symm_per_token_reduced_range_quant_cutlass", {}, "torchao" },
    { "torchao.quantization.quant_api", "_int4_symm_per_token_quant_cutlass", {}, "torchao" },
    { "torchao.quantization.quant_api", "_input_activation_quant_func_fp8", {}, "torchao" },
    { "torchao.float8.float8_tensor", "Float8Tensor", {}, "torchao" },
    { "torchao.float8.float8_tensor", "ScaledMMConfig", {}, "torchao" },
    { "torchao.float8.float8_tensor", "GemmInputRole", {}, "torchao" },
    { "torchao.float8.float8_tensor", "LinearMMConfig", {}, "torchao" },
    { "torchao.float8.inference", "Float8MMConfig", {}, "torchao" },
    { "torchao.float8.stateful_float8_linear", "WeightWithDelayedFloat8CastTensor", {}, "torchao" },
    { "torchao.prototype.low_bit_optim.subclass_8bit", "OptimState8bit", {}, "torchao.prototype.low_bit_optim" },
    { "torchao.prototype.low_bit_optim.subclass_4bit", "OptimState4bit", {}, "torchao.prototype.low_bit_optim" },
    { "torchao.prototype.low_bit_optim.subclass_fp8", "OptimStateFp8", {}, "torchao.prototype.low_bit_optim" },
    // The same optimizer states where torchao >= 0.11 moved them (torchao.optim).
    { "torchao.optim.subclass_8bit", "OptimState8bit", {}, "torchao.optim" },
    { "torchao.optim.subclass_4bit", "OptimState4bit", {}, "torchao.optim" },
    { "torchao.optim.subclass_fp8", "OptimStateFp8", {}, "torchao.optim" },
    // torch 2.0-2.4 kept DTensor under torch.distributed._tensor, which allow-lists nothing: no entry.
    { "torchao.quantization.autoquant", {}, "Tensor", "torchao" },
    { "torchao.quantization.autoquant", {}, "TensorImpl", "torchao" },
} };

} // namespace

std::string_view allowlistingImport(std::string_view module, std::string_view name)
{
    for (const auto& a : kAllowlistedOnImport) {
        if (!a.name.empty() ? (module == a.module && name == a.name)
                            : (moduleIs(module, a.module) && name.size() > a.suffix.size()
                                  && name.substr(name.size() - a.suffix.size()) == a.suffix))
            return a.import;
    }
    return {};
}

bool importsCover(const std::vector<std::string>& needed, const std::vector<std::string>& imported)
{
    for (const auto& n : needed) {
        bool covered = false;
        for (const auto& i : imported)
            covered |= i == n || (n == "torch.distributed.tensor" && moduleIs(i, "torchao"))
                || (i.size() > n.size() && i.compare(0, n.size(), n) == 0 && i[n.size()] == '.');
        if (!covered)
            return false;
    }
    return true;
}

GlobalVerdict classifyGlobal(std::string_view module, std::string_view name)
{
    for (const auto& d : kDangerousNames)
        if (module == d.module && name == d.name)
            return { GlobalRisk::Dangerous, std::string(d.reason) };
    for (const auto& d : kDangerousModules)
        if (moduleIs(module, d.module))
            return { GlobalRisk::Dangerous, std::string(d.reason) };
    if (isWeightsOnlySafe(module, name))
        return { GlobalRisk::Safe, {} };
    return { GlobalRisk::Unknown, {} };
}

std::pair<std::string_view, std::string_view> mapLegacyName(std::string_view module, std::string_view name)
{
    struct ModuleRename {
        std::string_view from, to;
    };
    static constexpr ModuleRename kModules[] = {
        { "__builtin__", "builtins" },
        { "copy_reg", "copyreg" },
        { "exceptions", "builtins" },
        { "cPickle", "pickle" },
        { "Queue", "queue" },
        { "UserDict", "collections" },
        { "UserList", "collections" },
        { "torch.tensor", "torch._tensor" }, // torch.load's own rename
    };
    if (module == "__builtin__" && name == "xrange")
        return { "builtins", "range" };
    if (module == "__builtin__" && name == "unicode")
        return { "builtins", "str" };
    if (module == "__builtin__" && name == "basestring")
        return { "builtins", "str" };
    for (const auto& r : kModules)
        if (module == r.from)
            return { r.to, name };
    return { module, name };
}

} // namespace sl::pickle
