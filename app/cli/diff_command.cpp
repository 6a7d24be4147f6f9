// statelens diff A B [--rules FILE] [--format text|json|md|csv|html|junit] [-o FILE] [--fail-on-dtype]
//                    [--container-a C] [--container-b C] [--suggest]
//
// Exit codes: 0 when a strict load_state_dict of A into B would succeed after the rules (no missing,
// unexpected or shape_mismatch rows; with --fail-on-dtype no dtype_mismatch either), 1 when it would not,
// 2 on an error (unreadable input, bad rule file).

#include "cli/commands.h"

#include "diff/diff.h"
#include "diff/reasons.h"
#include "diff/rule_checks.h"
#include "report/diff_report.h"
#include "rules/rule_io.h"
#include "suggest/suggestions.h"
#include "util/error.h"
#include "util/timings.h"

#include <cstdio>
#include <future>

namespace sl::cli {

namespace {

struct DiffOptionsCli {
    SideOption a, b;
    std::string rules;
    std::string format = "text";
    std::string output;
    bool failOnDtype = false;
    bool suggest = false;
    bool timings = false;
};

int runDiff(const DiffOptionsCli& o)
{
    Timings timings;
    Timings* t = o.timings ? &timings : nullptr;
    PhaseTimer openTimer(t, "open a + b");
    // Plain references, not a structured binding: clang 14 cannot capture those in lambdas.
    const auto sides = openBoth(o.a, o.b);
    const Source& a = sides.first;
    const Source& b = sides.second;
    openTimer.stop();
    const RuleSet& rules = keepUntilExit(o.rules.empty() ? RuleSet {} : loadRules(o.rules));

    // The diff first without reasons; then the rule checks (which need only its mapping) run on a second
    // thread while the reasons are worked out.
    PhaseTimer diffTimer(t, "diff");
    DiffOptions options;
    options.explain = false;
    DiffResult& diff = keepUntilExit(diffSources(a, b, rules, options));
    diffTimer.stop();
    PhaseTimer checkTimer(t, "reasons + rule checks");
    std::future<std::vector<RuleIssue>> checks;
    if (!rules.rules.empty())
        checks = std::async(std::launch::async, [&] { return checkRules(rules, a, b, &diff); });
    explainRows(diff, a, b);
    const auto& issues = keepUntilExit(checks.valid() ? checks.get() : std::vector<RuleIssue> {});
    checkTimer.stop();
    if (!diff.ruleErrors.empty()) {
        const auto& e = diff.ruleErrors.front();
        throw LoadError(o.rules, "rule " + std::to_string(e.rule + 1) + ": " + e.message + " at position "
                + std::to_string(e.offset) + (e.inReplacement ? " of the replacement" : " of the pattern"));
    }
    PhaseTimer suggestTimer(t, "suggestions");
    const auto& suggestions = keepUntilExit(o.suggest ? suggestRules(a, b, rules) : std::vector<Suggestion> {});
    suggestTimer.stop();

    DiffReportInput in { a, b, rules, diff };
    in.ruleIssues = &issues;
    in.suggestions = o.suggest ? &suggestions : nullptr;
    in.failOnDtype = o.failOnDtype;
    PhaseTimer formatTimer(t, "format");
    const auto format = parseDiffReportFormat(o.format);
    const std::string& text = keepUntilExit(renderDiffReport(in, format.value_or(DiffReportFormat::Text)));
    formatTimer.stop();
    PhaseTimer writeTimer(t, "write output");
    emit(text, o.output);
    writeTimer.stop();
    if (t)
        printTimings(timings);
    return diff.summary.loadSucceeds(o.failOnDtype) ? 0 : 1;
}

} // namespace

Runner addDiffCommand(CLI::App& app)
{
    auto o = std::make_shared<DiffOptionsCli>();
    CLI::App* cmd = app.add_subcommand("diff",
        "What a strict load_state_dict of A into B would do, row by row, and why (exit 0: it loads, 1: it does not, 2: error)");
    addSideOptions(cmd, o->a, "a", "a", "The checkpoint (what is loaded)");
    addSideOptions(cmd, o->b, "b", "b", "The model (what receives it): a live dump, load-error text or checkpoint");
    cmd->add_option("--rules", o->rules, "Rename rules (YAML or JSON) applied to A's keys first");
    cmd->add_option("--format", o->format, "Report format")
        ->check(CLI::IsMember({ "text", "json", "md", "markdown", "csv", "html", "junit" }));
    cmd->add_option("-o,--output", o->output, "Write the report here (atomically) instead of stdout");
    cmd->add_flag("--fail-on-dtype", o->failOnDtype, "Also exit 1 on dtype mismatches (a strict load casts them)");
    cmd->add_flag("--suggest", o->suggest, "Add the suggested rules to the report");
    cmd->add_flag("--timings", o->timings, "Print how long each phase took (to stderr)");
    return [o] { return runDiff(*o); };
}

} // namespace sl::cli
