#pragma once
// The headless half of `statelens`: subcommands that need no display.

#include <string_view>

namespace sl::cli {

// True when argv[1] asks for the command line (a subcommand, --help, --version) rather than the GUI.
bool wantsCommandLine(std::string_view firstArgument);

// Whether the subcommand argv names loads one source, so all its threads share one heap arena (ls;
// app/heap_tuning.h).
bool usesOneHeapArena(int argc, char** argv);

// Runs a subcommand. Exit codes: 0 success, 1 the command's check failed (e.g. --fail-on), 2 error.
int run(int argc, char** argv);

} // namespace sl::cli
