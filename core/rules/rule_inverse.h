#pragma once
// The inverse of a rule list, where one exists: B's names back into A's namespace. Used for the round-trip
// check (B -> A -> B must give back every key) and to export the "save back" direction.
//
// A rule is invertible when its pattern is literal text and capturing groups (each group's inside may be
// any regex without parentheses: `(\d+)`, `([^.]+)`), optionally anchored, and its replacement uses every
// group exactly once. The inverse swaps the roles: the replacement's literals become the pattern, the
// pattern's literals the replacement, and each group moves with its reference. Drop rules have no inverse
// and are left out (the keys they drop exist on A's side only).

#include "rules/rule.h"

#include <string>
#include <variant>

namespace sl {

// The inverse rule, or why there is none.
std::variant<Rule, std::string> invertRule(const Rule& rule);

struct InvertedRules {
    RuleSet rules; // in reverse order, chain mode
    std::vector<std::string> problems; // "rule 3: the pattern has '|' outside a group"; empty when invertible
};
InvertedRules invertRules(const RuleSet& rules);

// Python-`re`-safe escaping of literal text, in a pattern and in a replacement.
std::string escapePattern(std::string_view literal);
std::string escapeReplacement(std::string_view literal);

} // namespace sl
