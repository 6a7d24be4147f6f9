// statelens: the GUI by default, headless subcommands when the first argument names one.

#include "cli/cli.h"

#include <cstdio>

#ifdef STATELENS_HAVE_GUI
namespace sl::gui {
int run(int argc, char** argv);
}
#endif

int main(int argc, char** argv)
{
    if (argc > 1 && sl::cli::wantsCommandLine(argv[1]))
        return sl::cli::run(argc, argv);
#ifdef STATELENS_HAVE_GUI
    return sl::gui::run(argc, argv);
#else
    std::fprintf(stderr, "statelens was built without the GUI; try `statelens --help`\n");
    return 2;
#endif
}
