// statelens __torchscript-worker PATH (hidden): the child process that loads a TorchScript archive.
//
// core/formats/torchscript_reader.cpp starts it with a deadline and an address-space limit, because
// torch::jit::load runs code from the archive and may crash or hang on a malformed one. It dlopens the
// LibTorch plugin (libstatelens-torch.so beside this executable or in the installed module folder,
// app/install_layout.h, or $STATELENS_TORCH_PLUGIN), lets it
// describe the archive and writes the plugin's JSON to stdout; errors are JSON too
// ({"statelens_torchscript": 1, "error": ..., "error_kind": "plugin_missing" | "plugin_load" | "plugin_abi" | "load"}).

#include "cli/commands.h"

#include "install_layout.h"
#include "torchscript/torchscript_plugin.h"

#include <cerrno>
#include <cstdlib>
#include <dlfcn.h>
#include <string>
#include <unistd.h>

namespace sl::cli {

namespace {

void writeAll(int fd, const char* data, size_t size)
{
    while (size > 0) {
        ssize_t n = ::write(fd, data, size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        data += n;
        size -= static_cast<size_t>(n);
    }
}

void writeToFd(void* context, const char* data, size_t size)
{
    writeAll(*static_cast<int*>(context), data, size);
}

std::string jsonString(const std::string& s)
{
    std::string out = "\"";
    for (char c : s) {
        auto u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (u < 0x20 || u >= 0x80) {
            out += '?'; // dlerror() text and paths: keep the document ASCII and valid
        } else {
            out += c;
        }
    }
    return out + "\"";
}

[[noreturn]] void finish(int fd, const std::string& doc, int code)
{
    writeAll(fd, doc.data(), doc.size());
    // _exit: no static destructors of LibTorch, which is not built to be torn down cleanly.
    ::_exit(code);
}

[[noreturn]] void fail(int fd, const std::string& kind, const std::string& message, const std::string& plugin)
{
    finish(fd,
        "{\"statelens_torchscript\": 1, \"error_kind\": " + jsonString(kind) + ", \"error\": " + jsonString(message)
            + ", \"plugin\": " + jsonString(plugin) + "}",
        4);
}

std::string pluginPath()
{
    if (const char* env = std::getenv("STATELENS_TORCH_PLUGIN"); env && *env)
        return env;
    return sl::app::findModule(STATELENS_TORCH_PLUGIN_FILE);
}

// The .deb only recommends LibTorch (resources/packaging/CMakeLists.txt), so an installed plugin whose LibTorch was
// left out or removed is expected: the error says what to install, not only what dlopen could not find.
std::string missingLibTorchHint(const std::string& dlopenError)
{
    if (dlopenError.find("libtorch") == std::string::npos && dlopenError.find("libc10") == std::string::npos)
        return {};
#ifdef STATELENS_LIBTORCH_PACKAGE
    return " (LibTorch is not installed: apt install " STATELENS_LIBTORCH_PACKAGE ")";
#else
    return " (LibTorch is not installed)";
#endif
}

[[noreturn]] void runWorker(const std::string& archive)
{
    // The answer goes to a private copy of stdout; stdout itself becomes stderr, so nothing LibTorch or
    // the archive's TorchScript code prints (print() in a __setstate__) can forge or corrupt the answer.
    int answer = ::dup(1);
    if (answer < 0 || ::dup2(2, 1) < 0)
        ::_exit(5);
    const std::string plugin = pluginPath();
    void* module = ::dlopen(plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!module) {
        const char* error = ::dlerror();
        const std::string why = error ? error : "dlopen failed";
        // A plugin that is there but does not load (LibTorch uninstalled, out of address space) is not
        // a missing one: building it again would not help.
        if (::access(plugin.c_str(), F_OK) == 0)
            fail(answer, "plugin_load", why + missingLibTorchHint(why), plugin);
        fail(answer, "plugin_missing", why, plugin);
    }
    using AbiFn = int (*)();
    using DescribeFn = int (*)(const char*, statelens_torch_write_fn, void*);
    auto abi = reinterpret_cast<AbiFn>(::dlsym(module, "statelens_torch_plugin_abi"));
    auto describe = reinterpret_cast<DescribeFn>(::dlsym(module, "statelens_torchscript_describe"));
    if (!abi || !describe || abi() != STATELENS_TORCH_PLUGIN_ABI)
        fail(answer, "plugin_abi", "the plugin was built for another version of statelens; rebuild both", plugin);
    int rc = describe(archive.c_str(), writeToFd, &answer);
    ::_exit(rc == 0 ? 0 : 3);
}

} // namespace

Runner addTorchScriptWorkerCommand(CLI::App& app)
{
    CLI::App* sub = app.add_subcommand("__torchscript-worker", "Internal: load a TorchScript archive (child process)");
    sub->group(""); // hidden from --help
    auto archive = std::make_shared<std::string>();
    sub->add_option("path", *archive, "TorchScript archive")->required();
    return [archive]() -> int { runWorker(*archive); };
}

} // namespace sl::cli
