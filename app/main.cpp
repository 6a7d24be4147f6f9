// statelens: the GUI by default, headless subcommands when the first argument names one.
//
// The GUI is a module loaded on demand (see CMakeLists.txt), so headless runs never load Qt Widgets.
// LibTorch is never loaded here at all: TorchScript archives are read by this same executable's hidden
// `__torchscript-worker` subcommand in a child process (core/formats/torchscript_reader.h).

#include "cli/cli.h"
#include "heap_tuning.h"
#include "install_layout.h"
#include "formats/torchscript_reader.h"
#include "util/terminal_text.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <string>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {

using sl::app::selfExecutable;

#ifdef STATELENS_HAVE_GUI
int runGui(int argc, char** argv)
{
    // Beside the executable (a build tree) or in the installed module folder (install_layout.h).
    const std::string path = sl::app::findModule("libstatelens-gui.so");
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

// A first argument that is neither an existing path nor looks like one ("list", "stat") is a mistyped
// command: say so, rather than opening the window on a file that is not there.
bool looksLikeMistypedCommand(const char* arg)
{
    struct stat st;
    return arg[0] != '-' && !std::strchr(arg, '/') && !std::strchr(arg, '.') && ::stat(arg, &st) != 0;
}

} // namespace

static void raiseOpenFileLimit()
{
    rlimit l {};
    if (getrlimit(RLIMIT_NOFILE, &l) == 0 && l.rlim_cur < l.rlim_max) {
        l.rlim_cur = l.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &l);
    }
}

int main(int argc, char** argv)
{
    const bool headless = argc > 1 && sl::cli::wantsCommandLine(argv[1]);
    if (headless)
        sl::app::tuneHeapForHeadlessRun(argv, sl::cli::usesOneHeapArena(argc, argv)); // may run a fresh copy instead
    // Values of a set of hundreds of rank files read from all of them at once; the soft limit on open
    // files (often 1024) is raised to the hard one, as the descriptors are the process's own.
    raiseOpenFileLimit();
    // Every subcommand that opens files may meet a TorchScript archive (one readlink, no LibTorch).
    sl::setTorchScriptWorker(sl::torchScriptWorkerFor(selfExecutable()));
    if (headless)
        return sl::cli::run(argc, argv);
    if (argc > 1 && looksLikeMistypedCommand(argv[1])) {
        std::fprintf(stderr,
            "statelens: '%s' is neither a command nor a file (commands: ls, diff, suggest, rules, stats, demo, dump-helper; "
            "see statelens --help)\n",
            sl::terminalText(argv[1]).c_str());
        return 2;
    }
#ifdef STATELENS_HAVE_GUI
    // Without a display Qt would abort with its platform-plugin message; one line says what to do instead.
    if (!std::getenv("DISPLAY") && !std::getenv("WAYLAND_DISPLAY") && !std::getenv("QT_QPA_PLATFORM")) {
        std::fprintf(stderr, "statelens: no display for the window (DISPLAY is not set); run it under xvfb-run, or use "
                             "the headless commands: statelens --help\n");
        return 2;
    }
    return runGui(argc, argv);
#else
    std::fprintf(stderr, "statelens was built without the GUI; try `statelens --help`\n");
    return 2;
#endif
}
