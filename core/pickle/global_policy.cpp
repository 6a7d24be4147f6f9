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

} // namespace

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
