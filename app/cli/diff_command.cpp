// statelens diff A B [--rules FILE] [--format text|json|md|csv|html|junit] [-o FILE] [--fail-on-dtype] [--fail-on LEVEL]
//                    [--container-a C] [--container-b C] [--suggest] [--values] [--match-content]
//
// --values reads the tensor bytes of every pair that has both sides and adds how far apart they are;
// --match-content pairs unexpected and missing keys whose bytes are equal and offers rules for them.
//
// Exit codes: 0 when a strict load_state_dict of A into B would succeed after the rules (no missing,
// unexpected or shape_mismatch rows; with --fail-on-dtype no dtype_mismatch either; with --fail-on danger no
// danger finding on either source), 1 when it would not,
// 2 on an error (unreadable input, bad rule file).

#include "cli/commands.h"

#include "compare/comparison.h"
#include "report/diff_report.h"
#include "rules/rule_engine.h"
#include "rules/rule_io.h"
#include "util/error.h"
#include "util/timings.h"

#include <cstdio>

namespace sl::cli {

namespace {

struct DiffOptionsCli {
    TwoSides sides;
    std::string rules;
    std::string format = "text";
    std::string output;
    bool failOnDtype = false;
    std::string failOn = "none";
    bool suggest = false;
    bool values = false;
    bool matchContent = false;
    bool timings = false;
};

int runDiff(const DiffOptionsCli& o)
{
    Timings timings;
    Timings* t = o.timings ? &timings : nullptr;
    PhaseTimer openTimer(t, "open a + b");
    // Plain references, not a structured binding: clang 14 cannot capture those in lambdas.
    const auto opened = openBoth(o.sides.a, o.sides.b);
    const Source& a = opened.first;
    const Source& b = opened.second;
    openTimer.stop();
    const RuleSet& rules = keepUntilExit(o.rules.empty() ? RuleSet {} : loadRules(o.rules));
    std::vector<PatternError> patternErrors; // a pattern that does not compile: the rule file is refused (exit 2)
    CompiledRules::compile(rules, &patternErrors);
    if (!patternErrors.empty())
        throw LoadError(o.rules, describePatternError(patternErrors.front()));

    ComparisonOptions options;
    options.checkRules = !rules.rules.empty();
    options.suggest = o.suggest;
    options.values = o.values;
    options.matchContent = o.matchContent;
    options.timings = t;
    const ComparisonResult& c = keepUntilExit(compareSources(a, b, rules, options));
    const DiffResult& diff = c.diff;

    DiffReportInput in { a, b, rules, diff };
    in.ruleIssues = &c.issues;
    in.suggestions = o.suggest || o.matchContent ? &c.suggestions : nullptr;
    in.values = o.values ? &c.values : nullptr;
    in.contentMatches = o.matchContent ? &c.contentMatches : nullptr;
    in.failOnDtype = o.failOnDtype;
    PhaseTimer formatTimer(t, "format + write");
    const auto format = parseDiffReportFormat(o.format);
    const auto out = openOutput(o.output);
    renderDiffReport(in, format.value_or(DiffReportFormat::Text), [&out](std::string_view part) { out->write(part); });
    out->commit();
    formatTimer.stop();
    if (t)
        printTimings(timings);
    // --fail-on gates on either source's findings, as `ls --fail-on` does on one.
    auto any = [&](Severity s) { return a.countFindings(s) + b.countFindings(s) > 0; };
    if ((o.failOn == "danger" || o.failOn == "warning") && any(Severity::Danger))
        return 1;
    if (o.failOn == "warning" && any(Severity::Warning))
        return 1;
    return diff.summary.loadSucceeds(o.failOnDtype) ? 0 : 1;
}

} // namespace

Runner addDiffCommand(CLI::App& app)
{
    auto o = std::make_shared<DiffOptionsCli>();
    CLI::App* cmd = app.add_subcommand("diff",
        "What a strict load_state_dict of A into B would do, row by row, and why (exit 0: it loads, 1: it does not, 2: error)");
    addTwoSides(cmd, o->sides);
    cmd->add_option("--rules", o->rules, "Rename rules (YAML or JSON) applied to A's keys first");
    cmd->add_option("--format", o->format, "Report format")
        ->check(CLI::IsMember({ "text", "json", "md", "markdown", "csv", "html", "junit" }));
    cmd->add_option("-o,--output", o->output, "Write the report here (atomically) instead of stdout");
    cmd->add_flag("--fail-on-dtype", o->failOnDtype, "Also exit 1 on dtype mismatches (a strict load casts them)");
    cmd->add_option("--fail-on", o->failOn, "Also exit 1 when either source has a finding of this severity or worse (danger: loading it would run code, or it is not what torch reads)")
        ->check(CLI::IsMember({ "none", "warning", "danger" }));
    cmd->add_flag("--suggest", o->suggest, "Add the suggested rules to the report");
    cmd->add_flag("--values", o->values, "Read both sides' tensor bytes and compare the values of every pair (equal bytes, max abs/rel diff, cosine)");
    cmd->add_flag("--match-content", o->matchContent, "Pair unexpected and missing keys whose bytes are equal, and suggest rules for them");
    cmd->add_flag("--timings", o->timings, "Print how long each phase took (to stderr)");
    return [o] {
        splitTwoSides(o->sides, "diff");
        return namingRuleFile(o->rules, [&] { return runDiff(*o); });
    };
}

} // namespace sl::cli
