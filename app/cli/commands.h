#pragma once
// Each subcommand registers its options on the CLI11 app and returns what runs it after parsing.

#include "formats/open_options.h"
#include "model/source.h"
#include "util/atomic_file.h"
#include "util/timings.h"

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace sl::cli {

using Runner = std::function<int()>;

Runner addLsCommand(CLI::App& app);
Runner addDemoCommand(CLI::App& app);
Runner addTorchScriptWorkerCommand(CLI::App& app); // hidden: the child that loads TorchScript
Runner addDiffCommand(CLI::App& app);
Runner addSuggestCommand(CLI::App& app);
Runner addRulesCommand(CLI::App& app); // rules export | rules import
Runner addStatsCommand(CLI::App& app); // tensor values
Runner addConvertCommand(CLI::App& app); // the fixed checkpoint, written as safetensors
Runner addDumpHelperCommand(CLI::App& app); // statelens_dump.py into a Python environment

// One source on the command line: a path (a file, a folder, a quoted pattern such as 'ckpt/model_rank*.pt')
// or the rank files of one set, and optionally the container to select ("" keeps the picked one).
struct SideOption {
    std::vector<std::string> paths;
    std::string container;
    bool containerGiven = false;
};
// diff and suggest: positional paths, A's then B's, split into the two sides (formats/rank_sets.h) after
// parsing, and --container-a / --container-b.
struct TwoSides {
    std::vector<std::string> arguments;
    SideOption a, b;
};
void addTwoSides(CLI::App* cmd, TwoSides& sides);
// Splits the arguments into a and b; a LoadError saying how to write them when they do not make two sides.
void splitTwoSides(TwoSides& sides, const std::string& command);
// The arguments as a shell would take them back (for hints that print a command to run next).
std::string shellWords(const std::vector<std::string>& arguments);
// Opens a side: one path through the loader, several files as one per-rank source; patterns expanded.
const Source& openSide(const SideOption& side, OpenOptions options = {});
// Both sides at once (each reader is single-threaded; two cores halve the wait).
std::pair<const Source&, const Source&> openBoth(const SideOption& a, const SideOption& b);

// `--timings`: each phase and their total, to stderr.
void printTimings(const Timings& t);

// Runs `run`, whose rules come from `file` (or "--filter"): a rule that reaches a match limit on a key
// (rules/rule_engine.h) becomes a LoadError naming that file, one line and exit 2 like a rule that does
// not compile.
int namingRuleFile(const std::string& file, const std::function<int()>& run);

// Writes `text` to `outputPath` atomically, or to stdout when the path is empty or "-". A LoadError, and
// nothing written, when the path reaches a file the command read (io/file_trust.h).
void emit(const std::string& text, const std::string& outputPath);
// The same for an output written as it is made: commit() it when complete.
std::unique_ptr<OutputFile> openOutput(const std::string& outputPath);

// A command's loaded data, deliberately not freed: the process exits right after its output, and tearing
// down a 100,000-entry source took longer than listing it. Sanitizer builds free it, so leak checks work.
template <typename T> T& keepUntilExit(T&& value)
{
#ifdef STATELENS_FREE_AT_EXIT
    static std::mutex lock; // diff opens its two sides on two threads
    static std::vector<std::unique_ptr<T>> freedAtExit;
    auto owned = std::make_unique<T>(std::move(value));
    T& kept = *owned;
    std::lock_guard<std::mutex> guard(lock);
    freedAtExit.push_back(std::move(owned));
    return kept;
#else
    return *new T(std::move(value));
#endif
}

} // namespace sl::cli
