#include "global_policy.h"

#include <algorithm>
#include <array>
#include <utility>

namespace sl::pickle {

namespace {

bool moduleIs(std::string_view module, std::string_view root)
{
    return module == root || (module.size() > root.size() && module.substr(0, root.size()) == root
                                 && module[root.size()] == '.');
}

struct Reasoned {
    std::string_view key;
    std::string_view reason;
};
// Modules whose members run commands, load code, touch files or the network when called. Matched against
// every segment of the dotted path: `torch.os.system` reaches os through torch's own import of it.
constexpr Reasoned kDangerousSegments[] = {
    { "os", "runs shell commands and touches files" },
    { "posix", "runs shell commands (os on Unix)" },
    { "nt", "runs shell commands (os on Windows)" },
    { "subprocess", "starts processes" },
    { "_posixsubprocess", "starts processes" },
    { "_winapi", "starts processes" },
    { "sys", "reaches the interpreter's internals" },
    { "builtins", "reaches Python's builtins" },
    { "__builtins__", "reaches Python's builtins" },
    { "shutil", "copies and deletes files" },
    { "socket", "opens network connections" },
    { "_socket", "opens network connections" },
    { "pty", "spawns a shell" },
    { "runpy", "runs Python modules" },
    { "importlib", "imports arbitrary code" },
    { "imp", "loads Python source" },
    { "zipimport", "imports code from archives" },
    { "commands", "runs shell commands (Python 2)" },
    { "webbrowser", "opens URLs" },
    { "ctypes", "calls native code" },
    { "_ctypes", "calls native code" },
    { "multiprocessing", "starts processes" },
    { "pickle", "unpickles nested, unchecked data" },
    { "_pickle", "unpickles nested, unchecked data" },
    { "cPickle", "unpickles nested, unchecked data" },
    { "dill", "unpickles nested, unchecked data" },
    { "cloudpickle", "unpickles nested, unchecked data" },
    { "marshal", "loads code objects" },
    { "bdb", "runs code under a debugger" },
    { "pdb", "runs code under a debugger" },
    { "profile", "runs Python source under the profiler" },
    { "cProfile", "runs Python source under the profiler" },
    { "_lsprof", "runs code under the profiler" },
    { "timeit", "runs Python source" },
    { "pydoc", "runs shell commands (its pagers)" },
    { "_thread", "starts threads that call anything" },
};
// Modules that are dangerous as the path's root only: their names are ordinary words that user packages
// also use for sub-modules (`myproject.code`, `mylib.types`).
constexpr Reasoned kDangerousRoots[] = {
    { "io", "opens files" },
    { "_io", "opens files" },
    { "tempfile", "creates files" },
    { "code", "runs Python source" },
    { "codeop", "compiles Python source" },
    { "types", "builds functions and code objects" },
    { "trace", "runs code under a tracer" },
    { "pkgutil", "imports arbitrary code" },
    { "joblib", "unpickles nested, unchecked data" },
    { "shelve", "unpickles nested, unchecked data" },
    { "pip", "installs packages" },
    { "ensurepip", "installs packages" },
    { "distutils", "compiles and installs code" },
    { "setuptools", "compiles and installs code" },
    { "venv", "creates environments" },
    { "asyncio", "starts processes and connections" },
    { "http", "makes network requests" },
    { "urllib", "makes network requests" },
    { "urllib2", "makes network requests" },
    { "urllib3", "makes network requests" },
    { "requests", "makes network requests" },
    { "httpx", "makes network requests" },
    { "aiohttp", "makes network requests" },
    { "ftplib", "makes network requests" },
    { "socketserver", "listens on the network" }, // SocketServer in a protocol 0-2 pickle, too
    { "smtplib", "sends mail" },
    { "telnetlib", "makes network connections" },
    { "signal", "installs signal handlers" },
    { "gc", "reaches every live object" },
    { "inspect", "reaches frames and code" },
    { "linecache", "reads files" },
    { "glob", "lists files" },
    { "tarfile", "extracts and writes files" },
    { "zipfile", "extracts and writes files" },
    { "compileall", "compiles and writes files" },
    { "py_compile", "compiles and writes files" },
    { "sqlite3", "opens and writes database files" },
    { "ssl", "opens network connections" },
    { "xmlrpc", "makes network requests" },
    { "mmap", "maps files into memory" },
};

// Dotted paths (exact, or prefixes ending in '.') that load nested bytes, download, compile or write.
constexpr Reasoned kDangerousPaths[] = {
    { "torch.load", "loads another pickle without checks" },
    { "torch.save", "writes a file" },
    { "torch.serialization.", "loads or writes pickles without checks" },
    { "torch.storage._load_from_bytes", "loads nested pickled bytes with torch.load" },
    { "torch._utils._load_from_bytes", "loads nested pickled bytes with torch.load" },
    { "torch.hub.", "downloads and runs code" },
    { "torch.utils.model_zoo.", "downloads files" },
    { "torch.utils.cpp_extension.", "compiles and loads native code" },
    { "torch.utils.data.datapipes.", "opens files and URLs" },
    { "torch.jit.load", "loads TorchScript code" },
    { "torch.jit.save", "writes a file" },
    { "torch.jit._load_for_lite_interpreter", "loads TorchScript code" },
    { "torch.package.", "imports packaged Python code" },
    { "torch._C.", "calls torch's native internals" },
    { "torch.ops.", "calls native operators" },
    { "torch._ops.", "calls native operators" },
    { "torch.distributed.elastic.", "starts processes" },
    { "torch.multiprocessing.", "starts processes" },
    { "torch._dynamo.", "compiles and runs code" },
    { "torch._inductor.", "compiles and runs code" },
    { "torch.compile", "compiles and runs code" },
    { "logging.config.", "evaluates configuration and listens on sockets" },
    { "functools.partial", "binds arbitrary calls" },
    { "functools.reduce", "chains arbitrary calls" },
    { "operator.", "reaches arbitrary attributes and calls" },
    { "_operator.", "reaches arbitrary attributes and calls" },
    { "numpy.load", "loads pickled numpy data" },
    { "numpy.save", "writes files" },
    { "numpy.fromfile", "reads files" },
    { "numpy.testing._private.utils.runstring", "executes Python source" },
    { "numpy.f2py.", "compiles native code" },
    { "numpy.distutils.", "compiles native code" },
    { "pandas.read_pickle", "loads nested pickles" },
    { "pandas.io.", "reads and writes files" },
    { "yaml.load", "can construct arbitrary objects" },
    { "yaml.unsafe_load", "constructs arbitrary objects" },
    { "sklearn.externals.joblib.", "loads nested pickles" },
};

// Gadgets by their last segment, in any module: they reach attributes, evaluate source or run commands.
constexpr Reasoned kGadgets[] = {
    { "getattr", "reaches arbitrary attributes (a gadget for calling anything)" },
    { "setattr", "overwrites arbitrary attributes" },
    { "delattr", "deletes arbitrary attributes" },
    { "eval", "evaluates Python source" },
    { "exec", "executes Python source" },
    { "execfile", "executes a Python file" },
    { "compile", "compiles Python source" },
    { "__import__", "imports arbitrary modules" },
    { "import_module", "imports arbitrary modules" },
    { "methodcaller", "calls arbitrary methods" },
    { "attrgetter", "reaches arbitrary attributes" },
    { "globals", "reaches a module's globals" },
    { "locals", "reaches a frame's locals" },
    { "vars", "reaches an object's attributes" },
    { "system", "runs shell commands" },
    { "popen", "runs shell commands" },
    { "fork_exec", "starts processes" },
    { "load_source", "loads Python source" },
    { "load_module", "loads Python modules" },
    { "run_path", "runs a Python file" },
    { "run_module", "runs a Python module" },
    { "runctx", "runs Python source" },
    { "pipepager", "runs a shell command" },
    { "load_inline", "compiles and loads native code" },
    { "load_state_dict_from_url", "downloads and loads a pickle" },
    { "urlopen", "makes network requests" },
    { "urlretrieve", "downloads files" },
    { "open", "opens files" },
    { "breakpoint", "starts a debugger" },
};

// Functions the pickle may call that run no code beyond building data, besides torch's weights-only ones.
constexpr std::string_view kSafeCallables[] = {
    "collections.OrderedDict", "collections.defaultdict", "collections.deque", "collections.Counter",
    "collections.ChainMap", "copyreg._reconstructor", "copyreg.__newobj__", "copyreg.__newobj_ex__",
    "_codecs.encode", "numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct",
    "numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar", "numpy.dtype", "numpy.ndarray",
    "numpy.random.__RandomState_ctor", "numpy.random._pickle.__randomstate_ctor",
    "numpy.random._pickle.__bit_generator_ctor", "numpy.random._pickle.__generator_ctor",
    "numpy.core.numeric._frombuffer", "numpy._core.numeric._frombuffer", "datetime.datetime", "datetime.date",
    "datetime.time", "datetime.timedelta", "datetime.timezone", "decimal.Decimal", "fractions.Fraction",
    "uuid.UUID", "re._compile", "torch.device", "torch.Size", "torch.dtype", "torch.finfo", "torch.iinfo",
    "torch.jit._pickle.build_intlist", "torch.jit._pickle.build_doublelist", "torch.jit._pickle.build_boollist",
    "torch.jit._pickle.build_tensorlist", "torch.jit._pickle.build_tensor_from_id",
    "torch.jit._pickle.restore_type_tag", "torch._tensor._rebuild_from_type_v2",
    "torch.serialization._get_layout", "torch.nested._internal.nested_tensor._rebuild_njt",
    "torch.distributed._shard.sharded_tensor.api.ShardedTensor",
};
// numpy's scalar types are lower-case classes.
constexpr std::string_view kNumpyScalarTypes[] = { "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16",
    "uint32", "uint64", "float16", "float32", "float64", "complex64", "complex128", "str_", "bytes_", "object_",
    "longlong", "ulonglong", "intc", "uintc", "half", "single", "double", "longdouble", "clongdouble", "datetime64",
    "timedelta64" };
// Builtins that only build data (beyond the weights-only ones).
constexpr std::string_view kPlainBuiltins[] = { "range", "bytes", "memoryview", "NotImplemented", "Ellipsis",
    "type(None)", "print" };

bool isDunder(std::string_view seg) { return seg.size() > 4 && seg.starts_with("__") && seg.ends_with("__"); }

// Python's convention: functions are lower case, classes capitalised (a leading underscore aside).
bool looksLikeFunction(std::string_view lastSegment)
{
    size_t i = lastSegment.find_first_not_of('_');
    return i != std::string_view::npos && lastSegment[i] >= 'a' && lastSegment[i] <= 'z';
}

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
            || name == "TypedStorage" || name == "Tensor";
    if (module == "torch.serialization" && name == "_get_layout")
        return true;
    if (module == "torch.nn.parameter" && (name == "Parameter" || name == "Buffer"))
        return true;
    if (module == "torch" || module == "torch.cuda") { // dtypes, storage classes, Size, device, layouts, qschemes
        // ... but not the modules torch imports (torch.os is os, torch.sys is sys) nor its dunders
        if (isDunder(name) || std::any_of(std::begin(kDangerousSegments), std::end(kDangerousSegments), [&](const Reasoned& d) { return name == d.key; }))
            return false;
        return name.find('.') == std::string_view::npos && name != "load" && name != "save" && name != "compile";
    }
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

GlobalVerdict classifyGlobal(std::string_view module, std::string_view name, uint8_t uses)
{
    const bool called = (uses & (kCalled | kUsesUnknown)) != 0;
    // torch's dtypes, layouts and storage classes are values; of its functions only these build data.
    const bool torchFunctionCall = (module == "torch" || module == "torch.cuda") && called && looksLikeFunction(name)
        && name != "device" && name != "dtype" && name != "finfo" && name != "iinfo";
    if (!torchFunctionCall && isWeightsOnlySafe(module, name))
        return { GlobalRisk::Safe, {} };
    std::string path = std::string(module) + "." + std::string(name);
    std::string_view full(path);
    if (module == "builtins" && name.find('.') == std::string_view::npos) {
        // getattr(<class>, "NAME") is how Python 3.11+ pickles an enum member: reading it runs nothing.
        if (name == "getattr" && uses == kAttributeLookup)
            return { GlobalRisk::Unknown, {} };
        for (auto p : kPlainBuiltins)
            if (name == p)
                return { GlobalRisk::Unknown, {} };
    }
    for (const auto& d : kDangerousPaths)
        if (d.key.ends_with('.') ? full.starts_with(d.key) : full == d.key)
            return { GlobalRisk::Dangerous, std::string(d.reason) };
    std::string_view last = full.substr(full.rfind('.') + 1);
    for (const auto& g : kGadgets)
        if (last == g.key)
            return { GlobalRisk::Dangerous, std::string(g.reason) };
    for (size_t at = 0; at <= full.size();) {
        size_t dot = full.find('.', at);
        std::string_view seg = full.substr(at, dot == std::string_view::npos ? std::string_view::npos : dot - at);
        for (const auto& d : kDangerousSegments)
            if (seg == d.key)
                return { GlobalRisk::Dangerous, std::string(d.reason) };
        if (isDunder(seg) && seg != "__main__" && seg != "__torch__" && seg != "__newobj__" && seg != "__newobj_ex__")
            return { GlobalRisk::Dangerous, "reaches the interpreter's internals (" + std::string(seg) + ")" };
        if (dot == std::string_view::npos)
            break;
        at = dot + 1;
    }
    std::string_view root = full.substr(0, full.find('.'));
    if (full != "types.SimpleNamespace")
        for (const auto& d : kDangerousRoots)
            if (root == d.key)
                return { GlobalRisk::Dangerous, std::string(d.reason) };
    for (auto c : kSafeCallables)
        if (full == c)
            return { GlobalRisk::Unknown, {} };
    if ((module == "numpy" || module == "numpy.core" || module == "numpy._core"))
        for (auto t : kNumpyScalarTypes)
            if (name == t)
                return { GlobalRisk::Unknown, {} };
    // A function the pickle calls that nobody vouches for runs whatever it does.
    if (called && looksLikeFunction(last) && !(full.starts_with("torch._utils._rebuild") || full.starts_with("torch._tensor._rebuild")))
        return { GlobalRisk::Dangerous, "is a function outside the known-safe list, and torch.load would call it" };
    return { GlobalRisk::Unknown, {} };
}

namespace {
struct Python2Name {
    std::string_view module, name, newModule, newName;
};
struct Python2Module {
    std::string_view module, newModule;
};
#include "pickle/python2_names.inc"
} // namespace

std::pair<std::string_view, std::string_view> mapLegacyName(std::string_view module, std::string_view name, int protocol)
{
    if (module == "torch.tensor")
        module = "torch._tensor"; // torch.load's load_module_mapping, before pickle's own find_class
    if (protocol >= 3)
        return { module, name };
    // pickle's find_class (fix_imports): a renamed (module, name) pair, else a renamed module.
    for (const auto& r : kPython2Names)
        if (module == r.module && name == r.name)
            return { r.newModule, r.newName };
    for (const auto& r : kPython2Modules)
        if (module == r.module)
            return { r.newModule, name };
    return { module, name };
}

} // namespace sl::pickle
