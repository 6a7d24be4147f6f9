#pragma once
// Rename rules: an ordered list that maps A's (the checkpoint's) names into B's (the model's) namespace.
//
// Semantics (also in docs/command-line.md, "Rules"): each enabled rule is tried in order on the output of the
// one before, like `for r in rules: key = re.sub(r.pattern, r.replacement, key)` in Python, replacing every
// non-overlapping match. A rule with `drop` removes a key it matches (the key is expected to be absent on the
// other side) and stops the chain. Patterns use the subset of regular expressions on which Python's `re` and
// PCRE2 agree (see rule_engine.h); replacements use Python's `\1`, `\g<1>` and `\g<name>`. A pattern that is
// one whole literal key (`^model\.norm\.weight$`) is looked up in a hash table instead of run, so rule files
// of explicit old -> new pairs (a CSV import) stay fast at 100,000 rules.

#include <cstdint>
#include <string>
#include <vector>

namespace sl {

struct Rule {
    std::string pattern;
    std::string replacement;
    bool drop = false;
    bool enabled = true;
    std::string note; // why the rule exists ("strip torch.compile's _orig_mod. prefix")
    std::vector<std::string> comments; // comment lines of the rule file kept with this rule
};

// How a key goes through the list. Chain is StateLens's own (and a Python loop of re.sub); FirstMatch is
// Hugging Face `key_mapping` / `_checkpoint_conversion_mapping`: the first rule that matches the original
// key rewrites it and the others are not tried.
enum class RuleMode : uint8_t { Chain, FirstMatch };

struct RuleSet {
    int version = 1;
    RuleMode mode = RuleMode::Chain;
    std::vector<Rule> rules;
    std::vector<std::string> headerComments; // comment lines before the rules
};

} // namespace sl
