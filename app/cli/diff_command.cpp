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

#include "diff/diff.h"
#include "diff/reasons.h"
#include "diff/rule_checks.h"
#include "report/diff_report.h"
#include "rules/rule_io.h"
#include "suggest/pending_pairs.h"
#include "suggest/suggestions.h"
#include "util/error.h"
#include "util/timings.h"
#include "values/tensor_compare.h"

#include <algorithm>
#include <cstdio>
#include <future>

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
        throw LoadError(o.rules, describePatternError(diff.ruleErrors.front()));
    }
    PhaseTimer suggestTimer(t, "suggestions");
    auto& suggestions = keepUntilExit(o.suggest ? suggestRules(a, b, rules) : std::vector<Suggestion> {});
    suggestTimer.stop();

    PhaseTimer valuesTimer(t, "values");
    auto& comparisons = keepUntilExit(std::vector<values::ValueComparison>());
    if (o.values)
        comparisons = values::compareDiffRows(a, b, diff);
    auto& matches = keepUntilExit(std::vector<values::ContentMatch>());
    if (o.matchContent) {
        std::vector<size_t> unexpected, missing;
        std::vector<const DiffRow*> rowOfA(a.entries.size(), nullptr);
        for (const DiffRow& row : diff.rows) {
            if (row.aPart >= 0 || row.bPart >= 0)
                continue; // one stored key of a quantized group: its bytes are codes or scales, not a weight
            if (row.status == RowStatus::Unexpected) {
                unexpected.push_back(static_cast<size_t>(row.a));
                rowOfA[static_cast<size_t>(row.a)] = &row;
            } else if (row.status == RowStatus::Missing) {
                missing.push_back(static_cast<size_t>(row.b));
            }
        }
        matches = values::matchByContent(a, unexpected, b, missing);
        // A rule for each unambiguous match, each rule once.
        std::vector<std::string> seen;
        for (const values::ContentMatch& m : matches) {
            if (m.b.size() != 1)
                continue;
            auto s = inferRule(rowOfA[m.a]->mapped, b.entries[m.b[0]].name, a, b, rules);
            if (!s || s->rules.empty())
                continue;
            const std::string key = s->rules.front().pattern + "\n" + s->rules.front().replacement;
            if (std::find(seen.begin(), seen.end(), key) != seen.end())
                continue;
            seen.push_back(key);
            s->title = "same bytes: " + a.entries[m.a].name + " holds what the model calls " + b.entries[m.b[0]].name + "; " + s->title;
            suggestions.push_back(std::move(*s));
        }
    }
    valuesTimer.stop();
    // Pairs the pending suggestions would resolve, on one line in every report.
    if (o.suggest || o.matchContent)
        markPendingSuggestions(diff, a, b, rules.mode, suggestions);

    DiffReportInput in { a, b, rules, diff };
    in.ruleIssues = &issues;
    in.suggestions = o.suggest || o.matchContent ? &suggestions : nullptr;
    in.values = o.values ? &comparisons : nullptr;
    in.contentMatches = o.matchContent ? &matches : nullptr;
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
