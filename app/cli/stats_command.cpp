// statelens stats PATH... [--filter REGEX] [--format table|json] [--bins N] [--stored] [--container C] [-o FILE]
//
// Reads the values of the source's tensors (only now: every other command leaves tensor bytes alone) and
// prints, per tensor, min, max, mean, std, NaN/Inf/zero counts, a histogram and a content hash. See
// core/values/tensor_stats.h for the definitions and core/report/stats_report.h for the output.

#include "cli/commands.h"

#include "report/stats_report.h"
#include "rules/rule_engine.h"
#include "util/error.h"
#include "values/tensor_stats.h"

namespace sl::cli {

namespace {

struct StatsOptionsCli {
    SideOption source;
    std::string filter;
    std::string format = "table";
    unsigned bins = 16;
    bool stored = false; // quantized tensors by their stored integers, not dequantized
    std::string output;
};

int runStats(const StatsOptionsCli& o)
{
    const Source& s = openSide(o.source);
    std::vector<size_t> entries;
    if (o.filter.empty()) {
        entries.reserve(s.entries.size());
        for (size_t i = 0; i < s.entries.size(); ++i)
            entries.push_back(i);
    } else {
        // The rule engine's regex dialect (Python's `re` subset), searched anywhere in the name.
        RuleSet one;
        one.rules.push_back(Rule { o.filter, "", false, true, {}, {} });
        std::vector<PatternError> errors;
        const CompiledRules re = CompiledRules::compile(one, &errors);
        if (!errors.empty())
            throw LoadError("--filter", "position " + std::to_string(errors[0].offset) + ": " + errors[0].message);
        try {
            for (size_t i = 0; i < s.entries.size(); ++i)
                if (re.matches(0, s.entries[i].name))
                    entries.push_back(i);
        } catch (const RuleMatchError& e) {
            throw LoadError("--filter", "the pattern " + e.problem());
        }
    }
    values::StatsOptions options;
    options.bins = o.bins;
    options.dequantize = !o.stored;
    StatsReport report(s, o.format == "json" ? StatsReport::Format::Json : StatsReport::Format::Table, o.bins);
    report.reserve(entries.size());
    values::computeStats(s, entries, options, [&](std::vector<values::TensorStatsResult>& batch) { report.add(batch); });
    const auto out = openOutput(o.output);
    report.write(*out);
    out->commit();
    return 0;
}

} // namespace

Runner addStatsCommand(CLI::App& app)
{
    auto o = std::make_shared<StatsOptionsCli>();
    CLI::App* cmd = app.add_subcommand("stats", "Read tensor values: min, max, mean, std, NaN/Inf/zero counts, histogram, content hash");
    cmd->add_option("path", o->source.paths,
           "The checkpoint whose values to summarise: a file, a folder or a quoted pattern; several files of one "
           "sharded save are one source")
        ->required();
    cmd->add_option("--container", o->source.container, "Select this container instead of the picked one (see `ls --containers`)")
        ->each([o](const std::string&) { o->source.containerGiven = true; });
    cmd->add_option("--filter", o->filter, "Only tensors whose name matches this regular expression (searched anywhere)");
    cmd->add_option("--format", o->format, "Output format")->check(CLI::IsMember({ "table", "json" }));
    cmd->add_option("--bins", o->bins, "Histogram bins (0: no histogram)")->check(CLI::Range(0u, 4096u));
    cmd->add_flag("--stored", o->stored, "Summarise quantized tensors by their stored integers (a group by its main part) instead of dequantizing");
    cmd->add_option("-o,--output", o->output, "Write the output here (atomically) instead of stdout");
    return [o] { return runStats(*o); };
}

} // namespace sl::cli
