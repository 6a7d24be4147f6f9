#include "compare/comparison.h"

#include "diff/reasons.h"
#include "rules/rule_engine.h"
#include "suggest/pending_pairs.h"
#include "util/timings.h"

#include <algorithm>
#include <future>

namespace sl {

namespace {

// Steps 1 and 2. The diff runs first without reasons; the rule checks need only its mapping, so they run on
// a second thread while the reasons are worked out.
void diffAndExplain(ComparisonResult& c, const Source& a, const Source& b, const ComparisonOptions& options)
{
    PhaseTimer diffTimer(options.timings, "diff");
    c.diff = diffSources(a, b, c.rules, DiffOptions { .explain = false });
    diffTimer.stop();
    PhaseTimer checkTimer(options.timings, "reasons + rule checks");
    std::future<std::vector<RuleIssue>> checks;
    if (options.checkRules)
        checks = std::async(std::launch::async, [&] { return checkRules(c.rules, a, b, &c.diff); });
    // The future's destructor waits for the checks, also when the reasons throw.
    if (options.explain)
        explainRows(c.diff, a, b);
    if (checks.valid())
        c.issues = checks.get();
}

} // namespace

ComparisonResult compareSources(const Source& a, const Source& b, const RuleSet& rules, const ComparisonOptions& options)
{
    ComparisonResult c;
    c.rules = rules;
    // Each pass turns one rule off, so there are at most as many passes as rules.
    std::vector<RuleIssue> stopped;
    for (;;) {
        try {
            diffAndExplain(c, a, b, options);
            break;
        } catch (const RuleMatchError& e) {
            if (options.onMatchLimit == ComparisonOptions::OnMatchLimit::Throw)
                throw;
            RuleIssue issue;
            issue.kind = RuleIssue::Kind::Invalid;
            issue.severity = Severity::Danger;
            issue.rule = RuleIndex(e.rule());
            issue.message = e.what();
            stopped.push_back(std::move(issue));
            c.rules.rules[e.rule()].enabled = false;
        }
    }
    c.issues.insert(c.issues.begin(), stopped.begin(), stopped.end());

    PhaseTimer suggestTimer(options.timings, "suggestions");
    if (options.suggest)
        c.suggestions = suggestRules(a, b, c.rules);
    suggestTimer.stop();

    PhaseTimer valuesTimer(options.timings, "values");
    if (options.values)
        c.values = values::compareDiffRows(a, b, c.diff, options.valueOptions);
    if (options.matchContent) {
        std::vector<Suggestion> fromContent = suggestFromContent(c, a, b, &c.contentMatches, options.valueOptions);
        std::move(fromContent.begin(), fromContent.end(), std::back_inserter(c.suggestions));
    }
    valuesTimer.stop();

    // The pairs the pending suggestions would resolve, on one line in every view and report.
    if (options.suggest || options.matchContent)
        markPendingSuggestions(c.diff, a, b, c.rules.mode, c.suggestions);
    return c;
}

void addSuggestions(ComparisonResult& c, const Source& a, const Source& b)
{
    c.suggestions = suggestRules(a, b, c.rules);
    markPendingSuggestions(c.diff, a, b, c.rules.mode, c.suggestions);
}

std::vector<Suggestion> suggestFromContent(const ComparisonResult& c, const Source& a, const Source& b,
    std::vector<values::ContentMatch>* matches, const values::StatsOptions& options)
{
    std::vector<size_t> unexpected, missing;
    std::vector<const DiffRow*> rowOfA(a.entries.size(), nullptr);
    for (const DiffRow& row : c.diff.rows) {
        if (row.aPart.valid() || row.bPart.valid())
            continue; // one stored key of a quantized group: its bytes are codes or scales, not a weight
        if (row.status == RowStatus::Unexpected) {
            unexpected.push_back(row.a.get());
            rowOfA[row.a.get()] = &row;
        } else if (row.status == RowStatus::Missing) {
            missing.push_back(row.b.get());
        }
    }
    std::vector<values::ContentMatch> found = values::matchByContent(a, unexpected, b, missing, options);
    std::vector<Suggestion> out;
    std::vector<std::string> seen; // pattern and replacement of each rule made so far
    for (const values::ContentMatch& m : found) {
        if (m.b.size() != 1)
            continue; // B holds the bytes more than once: which key the model means is a guess
        auto s = inferRule(rowOfA[m.a]->mapped, b.entries[m.b[0]].name, a, b, c.rules);
        if (!s || s->rules.empty())
            continue;
        const std::string key = s->rules.front().pattern + "\n" + s->rules.front().replacement;
        if (std::find(seen.begin(), seen.end(), key) != seen.end())
            continue;
        seen.push_back(key);
        s->title = "same bytes: " + a.entries[m.a].name + " holds what the model calls " + b.entries[m.b[0]].name + "; " + s->title;
        out.push_back(std::move(*s));
    }
    if (matches)
        *matches = std::move(found);
    return out;
}

} // namespace sl
