#pragma once
// Each subcommand registers its options on the CLI11 app and returns what runs it after parsing.

#include "model/source.h"
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

// One side of a comparison: a path and, optionally, the container to select ("" keeps the picked one).
struct SideOption {
    std::string path;
    std::string container;
    bool containerGiven = false;
};
// Registers the positional PATH and --container-<letter> on `cmd`.
void addSideOptions(CLI::App* cmd, SideOption& side, const std::string& positional, const std::string& letter,
    const std::string& description);
const Source& openSide(const SideOption& side);
// Both sides at once (each reader is single-threaded; two cores halve the wait).
std::pair<const Source&, const Source&> openBoth(const SideOption& a, const SideOption& b);

// `--timings`: each phase and their total, to stderr.
void printTimings(const Timings& t);

// Writes `text` to `outputPath` atomically, or to stdout when the path is empty or "-".
void emit(const std::string& text, const std::string& outputPath);

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
