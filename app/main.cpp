// statelens: the GUI by default, headless subcommands when the first argument names one.
//
// The GUI is a module loaded on demand (see CMakeLists.txt), so headless runs never load Qt Widgets.

#include "cli/cli.h"

#include <cstdio>
#include <dlfcn.h>
#include <string>
#include <unistd.h>

namespace {

#ifdef STATELENS_HAVE_GUI
// libstatelens-gui.so beside the executable, found through /proc/self/exe (symlinks resolved).
std::string guiModulePath()
{
    char buf[4096];
    ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    std::string exe = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("./statelens");
    return exe.substr(0, exe.rfind('/') + 1) + "libstatelens-gui.so";
}

int runGui(int argc, char** argv)
{
    const std::string path = guiModulePath();
    void* module = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!module) {
        std::fprintf(stderr, "statelens: cannot load the GUI (%s); headless commands still work: statelens --help\n",
            ::dlerror());
        return 2;
    }
    using GuiMain = int (*)(int, char**);
    auto guiMain = reinterpret_cast<GuiMain>(::dlsym(module, "statelens_gui_main"));
    if (!guiMain) {
        std::fprintf(stderr, "statelens: %s has no statelens_gui_main\n", path.c_str());
        return 2;
    }
    return guiMain(argc, argv);
}
#endif

} // namespace

int main(int argc, char** argv)
{
    if (argc > 1 && sl::cli::wantsCommandLine(argv[1]))
        return sl::cli::run(argc, argv);
#ifdef STATELENS_HAVE_GUI
    return runGui(argc, argv);
#else
    std::fprintf(stderr, "statelens was built without the GUI; try `statelens --help`\n");
    return 2;
#endif
}
