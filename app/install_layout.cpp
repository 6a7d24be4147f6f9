#include "install_layout.h"

#include <filesystem>
#include <unistd.h>

// Set by app/CMakeLists.txt from the install layout: each folder relative to the executable's folder.
#ifndef STATELENS_MODULE_DIR_FROM_BIN
#define STATELENS_MODULE_DIR_FROM_BIN "../lib/statelens"
#endif
#ifndef STATELENS_PYTHON_DIR_FROM_BIN
#define STATELENS_PYTHON_DIR_FROM_BIN "../lib/python3/dist-packages"
#endif

namespace sl::app {

namespace {

std::string executableFolder()
{
    const std::string exe = selfExecutable();
    return exe.substr(0, exe.rfind('/') + 1);
}

bool exists(const std::string& path)
{
    return ::access(path.c_str(), F_OK) == 0;
}

} // namespace

std::string selfExecutable()
{
    char buf[4096];
    ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("./statelens");
}

std::string findModule(const std::string& file)
{
    const std::string folder = executableFolder();
    const std::string beside = folder + file;
    if (exists(beside))
        return beside;
    // lexically_normal is exact here: /proc/self/exe has no symlinks left, so "bin/.." is bin's parent.
    const std::string installed
        = std::filesystem::path(folder + STATELENS_MODULE_DIR_FROM_BIN + "/" + file).lexically_normal().string();
    return exists(installed) ? installed : beside;
}

std::string installedDumpHelper()
{
    const std::string path
        = std::filesystem::path(executableFolder() + STATELENS_PYTHON_DIR_FROM_BIN + "/statelens_dump.py").lexically_normal().string();
    return exists(path) ? path : std::string();
}

} // namespace sl::app
