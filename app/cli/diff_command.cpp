// statelens diff A B [--rules FILE] [--format text|json|md|csv|html|junit] [-o FILE] [--fail-on-dtype]
//                    [--container-a C] [--container-b C] [--suggest]
//
// Exit codes: 0 when a strict load_state_dict of A into B would succeed after the rules (no missing,
// unexpected or shape_mismatch rows; with --fail-on-dtype no dtype_mismatch either), 1 when it would not,
// 2 on an error (unreadable input, bad rule file).

#include "cli/commands.h"

#include "diff/diff.h"
#include "diff/rule_checks.h"
#include "report/diff_report.h"
#include "rules/rule_io.h"
#include "suggest/suggestions.h"
#include "util/error.h"

namespace sl::cli {

namespace {

struct DiffOptionsCli {
    SideOption a, b;
    std::string rules;
    std::string format = "text";
    std::string output;
    bool failOnDtype = false;
    bool suggest = false;
};

int runDiff(const DiffOptionsCli& o)
{
    const Source& a = openSide(o.a);
    const Source& b = openSide(o.b);
    const RuleSet& rules = keepUntilExit(o.rules.empty() ? RuleSet {} : loadRules(o.rules));
    const DiffResult& diff = keepUntilExit(diffSources(a, b, rules));
    if (!diff.ruleErrors.empty()) {
        const auto& e = diff.ruleErrors.front();
        throw LoadError(o.rules, "rule " + std::to_string(e.rule + 1) + ": " + e.message + " at position "
                + std::to_string(e.offset) + (e.inReplacement ? " of the replacement" : " of the pattern"));
    }
    // Rule checks are only worth their cost when there are rules; suggestions only when asked.
    const auto& issues = keepUntilExit(rules.rules.empty() ? std::vector<RuleIssue> {} : checkRules(rules, a, b));
    const auto& suggestions = keepUntilExit(o.suggest ? suggestRules(a, b, rules) : std::vector<Suggestion> {});

    DiffReportInput in { a, b, rules, diff };
    in.ruleIssues = &issues;
    in.suggestions = o.suggest ? &suggestions : nullptr;
    in.failOnDtype = o.failOnDtype;
    const auto format = parseDiffReportFormat(o.format);
    emit(keepUntilExit(renderDiffReport(in, format.value_or(DiffReportFormat::Text))), o.output);
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
    return [o] { return runDiff(*o); };
}

} // namespace sl::cli
