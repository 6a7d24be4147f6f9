#pragma once
// The comparison pipeline, in one place for the CLI's `diff` and the window: the name diff, then its reasons
// beside the rule checks, then (when asked) suggestions, value comparisons and content matches, and last the
// pending pairs the suggestions would resolve. Each step is also callable on its own, so the window can show
// the diff first and add suggestions when they are ready, and compare values when the user asks.
//
//   compareSources(a, b, rules, options)
//     1. diffSources          name mapping and join (diff/diff.h)
//     2. explainRows          why each row differs  | checkRules on a second thread (diff/rule_checks.h)
//     3. suggestRules         rules for the residual rows (suggest/)
//     4. compareDiffRows      both sides' bytes, per pair (values/)
//     5. matchByContent       unexpected and missing keys with equal bytes, and a rule for each (values/)
//     6. markPendingSuggestions

#include "diff/diff.h"
#include "diff/rule_checks.h"
#include "model/source.h"
#include "rules/rule.h"
#include "suggest/suggestions.h"
#include "values/tensor_compare.h"

#include <vector>

namespace sl {

struct Timings;

struct ComparisonOptions {
    bool explain = true; // reasons per row (nothing to explain while one side is empty)
    bool checkRules = true; // invalid, colliding, unused and shadowed rules, the B -> A -> B round trip
    bool suggest = false;
    bool values = false; // read both sides' tensor bytes for every pair
    bool matchContent = false; // pair unexpected and missing keys whose bytes are equal; a rule for each
    // A rule that reaches a PCRE2 match limit on a key: Throw passes the RuleMatchError on (the CLI names the
    // rule file and exits 2); DisableRule turns that rule off, names it as an invalid-rule issue and runs
    // again, so the window still shows what the other rules do.
    enum class OnMatchLimit { Throw, DisableRule } onMatchLimit = OnMatchLimit::Throw;
    values::StatsOptions valueOptions; // progress and cancellation of steps 4 and 5
    Timings* timings = nullptr; // phases "diff", "reasons + rule checks", "suggestions", "values"
};

struct ComparisonResult {
    RuleSet rules; // the rules as run: with DisableRule, those that reached a match limit are off
    DiffResult diff;
    std::vector<RuleIssue> issues; // empty unless checkRules
    std::vector<Suggestion> suggestions; // suggestRules's, then one per unambiguous content match
    std::vector<values::ValueComparison> values; // per diff row, when values
    std::vector<values::ContentMatch> contentMatches;
};

ComparisonResult compareSources(const Source& a, const Source& b, const RuleSet& rules, const ComparisonOptions& options = {});

// Step 3 on its own: the suggestions for a finished comparison, with the rows they would pair marked
// (steps 3 and 6). Throws RuleMatchError as suggestRules does.
void addSuggestions(ComparisonResult& c, const Source& a, const Source& b);

// Step 5 on its own: matches unexpected against missing rows by their bytes, and returns a rule for each
// unambiguous match (one key of A whose bytes equal one key of B), each rule once.
std::vector<Suggestion> suggestFromContent(const ComparisonResult& c, const Source& a, const Source& b,
    std::vector<values::ContentMatch>* matches, const values::StatsOptions& options = {});

} // namespace sl
