#pragma once
// Where the statelens executable finds what is installed with it: the modules it loads on demand (the GUI,
// libstatelens-gui.so, and the LibTorch plugin, libstatelens-torch.so) and the dump helper.
//
// Everything is found relative to the executable (/proc/self/exe), never through an absolute path compiled
// in, so the same binary works in its build tree, in a `cmake --install` tree under any prefix or DESTDIR,
// and from the .deb. Beside the executable comes first: that is the build tree's layout, and a build-tree
// binary must load the modules built with it, never an installed copy of another version (the install
// folder, relative to build/app/, does not exist). The install layout's folders come from GNUInstallDirs
// (top-level CMakeLists.txt), passed in as paths relative to the executable's folder.

#include <string>

namespace sl::app {

// This executable, symlinks resolved.
std::string selfExecutable();

// The module `file` (e.g. "libstatelens-gui.so") beside the executable, else in the installed module folder
// (e.g. /usr/lib/x86_64-linux-gnu/statelens for /usr/bin/statelens); the first that exists, or the path
// beside the executable when neither does, so an error names where a build puts it.
std::string findModule(const std::string& file);

// The dump helper (statelens_dump.py) as this executable's install put it, or "" when it is not there
// (a build tree, or an install without the Python module).
std::string installedDumpHelper();

} // namespace sl::app
