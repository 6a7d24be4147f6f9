#pragma once
// Each subcommand registers its options on the CLI11 app and returns what runs it after parsing.

#include <CLI/CLI.hpp>

#include <functional>

namespace sl::cli {

using Runner = std::function<int()>;

Runner addLsCommand(CLI::App& app);
Runner addDemoCommand(CLI::App& app);

// Writes `text` to `outputPath` atomically, or to stdout when the path is empty or "-".
void emit(const std::string& text, const std::string& outputPath);

} // namespace sl::cli
