#pragma once
// Checks that run on a rule set against the loaded pair, before anyone trusts or exports it:
//   invalid      a pattern or replacement that does not compile (with the position);
//   collision    two of A's keys mapped onto one name (a dict keeps one, silently);
//   unused       a rule that matches none of A's keys;
//   shadowed     a rule that would match some of A's keys, but earlier rules rewrite (or, in first_match
//                mode, claim) them first;
//   round_trip   where every rename rule is invertible: B -> A -> B must give back each of B's keys;
//   not_invertible  why no round trip was run.

#include "diff/diff.h"
#include "model/source.h"
#include "rules/rule.h"
#include "rules/rule_engine.h"

#include <string>
#include <vector>

namespace sl {

struct RuleIssue {
    enum class Kind : uint8_t { Invalid, Collision, Unused, Shadowed, RoundTrip, NotInvertible };
    Kind kind = Kind::Invalid;
    Severity severity = Severity::Warning; // Danger for invalid, collision and round-trip failures
    RuleIndex rule; // the rule it is about; none when about the set (reports number rules from 1)
    std::string message; // one line, rules numbered from 1 as the files show them
    std::vector<std::string> examples; // a few keys it concerns
};
std::string_view ruleIssueKindName(RuleIssue::Kind k); // "invalid", "collision", ...

// With `diff` (diffSources of the same pair and rules), its mapping and rule hits are reused instead of
// mapping A's keys again.
std::vector<RuleIssue> checkRules(const RuleSet& rules, const Source& a, const Source& b, const DiffResult* diff = nullptr);
// A rule set's compile errors as Invalid issues (checkRules starts with them).
std::vector<RuleIssue> invalidRuleIssues(const std::vector<PatternError>& errors);

} // namespace sl
