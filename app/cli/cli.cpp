#include "cli.h"

#include "cli/commands.h"
#include "io/file_trust.h"
#include "rules/rule_engine.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/timings.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <new>

namespace sl::cli {

namespace {
constexpr std::string_view kSubcommands[] = { "ls", "diff", "suggest", "rules", "stats", "convert", "demo", "dump-helper", "__torchscript-worker" };
}

bool wantsCommandLine(std::string_view arg)
{
    for (auto s : kSubcommands)
        if (arg == s)
            return true;
    // --verbose is the command line's own flag (before the subcommand, or after it: fallthrough below).
    return arg == "--help" || arg == "-h" || arg == "--version" || arg == "help" || arg == "-v" || arg == "--verbose";
}

bool usesOneHeapArena(int argc, char** argv)
{
    for (int i = 1; i < argc; ++i)
        if (argv[i][0] != '-') // the first word that is no flag (--verbose may come first) names the subcommand
            return std::string_view(argv[i]) == "ls";
    return false;
}

std::unique_ptr<OutputFile> openOutput(const std::string& outputPath)
{
    // Everything this run read (sources, their shards and metadata, rule files) is an input, and inputs are
    // never written over: `ls A -o A` is refused here, before a byte is written.
    if (!outputPath.empty() && outputPath != "-")
        refuseOutputOntoInput(outputPath);
    return std::make_unique<OutputFile>(outputPath);
}

void emit(const std::string& text, const std::string& outputPath)
{
    const auto out = openOutput(outputPath);
    out->write(text);
    out->commit();
}

int namingRuleFile(const std::string& file, const std::function<int()>& run)
{
    try {
        return run();
    } catch (const RuleMatchError& e) {
        throw LoadError(file, e.what());
    }
}

void printTimings(const Timings& t)
{
    double total = 0;
    // The peak column shows which phase grows the process's memory (the benchmark parses only the name and ms).
    for (const auto& p : t.phases) {
        if (p.peakRss)
            std::fprintf(stderr, "%-24s %9.2f ms   peak RSS %6.1f MB\n", p.name.c_str(), p.ms, double(p.peakRss) / 1e6);
        else
            std::fprintf(stderr, "%-24s %9.2f ms\n", p.name.c_str(), p.ms);
        total += p.ms;
    }
    std::fprintf(stderr, "%-24s %9.2f ms\n", "total (phases)", total);
}

int run(int argc, char** argv)
{
    CLI::App app { "StateLens: inspect PyTorch state dicts.\nWithout a subcommand, `statelens [A [B]]` opens the GUI.",
        "statelens" };
    app.set_version_flag("--version", std::string("statelens ") + STATELENS_VERSION);
    app.require_subcommand(1);
    bool verbose = false;
    app.add_flag("-v,--verbose", verbose, "Log what the readers do (to stderr)");
    app.fallthrough(); // `statelens ls FILE -v` as well as `statelens -v ls FILE`

    // Each subcommand's file registers its options and returns what runs it; --help lists them in this order.
    const std::pair<const char*, Runner (*)(CLI::App&)> kCommands[] = {
        { "ls", addLsCommand },
        { "diff", addDiffCommand },
        { "suggest", addSuggestCommand },
        { "rules", addRulesCommand },
        { "stats", addStatsCommand },
        { "convert", addConvertCommand },
        { "demo", addDemoCommand },
        { "dump-helper", addDumpHelperCommand },
        { "__torchscript-worker", addTorchScriptWorkerCommand },
    };
    std::vector<std::pair<CLI::App*, Runner>> commands;
    for (const auto& [name, add] : kCommands) {
        Runner run = add(app);
        commands.emplace_back(app.get_subcommand(name), std::move(run));
    }

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        int code = app.exit(e);
        return code == 0 ? 0 : 2;
    }
    // Readers log what they do at debug level (core never logs above it). On stderr, plainly: stdout carries
    // the listing or report, and the lines are read by people and CI logs, not terminals only.
    auto logger = spdlog::stderr_logger_st("statelens");
    logger->set_pattern("statelens: %v");
    spdlog::set_default_logger(std::move(logger));
    spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::warn);
    try {
        for (auto& [sub, runner] : commands)
            if (sub->parsed())
                return runner();
    } catch (const LoadError& e) {
        std::fprintf(stderr, "statelens: %s\n", e.what());
        return 2;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "statelens: out of memory\n");
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "statelens: %s\n", oneLineMessage(e.what()).c_str()); // may quote a path
        return 2;
    }
    return 2;
}

} // namespace sl::cli
