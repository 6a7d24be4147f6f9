#pragma once
// Compiled rules: PCRE2 with the options that make it behave like Python's `re` on str patterns (UTF-8,
// Unicode \d \w \s as Python 3 has them), JIT where available, and a literal prefilter so a rule anchored
// on a literal prefix costs a comparison, not a regex run, on keys it cannot match. Patterns of plain text
// ('^_orig_mod\.', '\.base_layer\.', a bare '^') never reach PCRE2: they are compared or searched for.
//
// Only the subset of syntax both engines read the same way is accepted: constructs that one engine lacks
// or reads differently (\K, \R, \h, \v, \p{..}, \z, \Z, (?a), (?L), possessive quantifiers, atomic groups,
// (?| ...), recursion, callouts, \Q..\E, named groups other than (?P<name>...)/(?<name>...)) are refused
// with the position, so an exported Python artefact maps keys exactly as StateLens does.
//
// Bounds (docs/command-line.md, "Rules"): a pattern such as (a+)+$ backtracks exponentially, so every match
// runs under PCRE2 limits. A key on which a rule reaches one is a RuleMatchError naming the rule and the key,
// never "no match": the mapping of that key would be a guess. A set holds at most kMaxPatternRules rules that
// run a regex (whole-key literal rules are hash lookups and do not count), since every such rule is tried on
// every key.

#include "rules/rule.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sl {

// Backtracking steps one match attempt may take (PCRE2's match limit; JIT honours it). Its default, 10
// million, let (a+)+$ spend 30 ms on each of 2,000 keys; the patterns of real rule files need under
// 30,000 steps even on 10,000-character keys (measured; docs/command-line.md, "Rules").
inline constexpr uint32_t kRuleMatchLimit = 1'000'000;
// The interpreter (when JIT is unavailable) ignores the match limit's meaning for depth: nested
// backtracking frames and their memory are bounded separately. JIT ignores both and uses its own stack.
inline constexpr uint32_t kRuleDepthLimit = 100'000;
inline constexpr uint32_t kRuleHeapLimitKiB = 64 * 1024;
inline constexpr size_t kRuleJitStackBytes = size_t(1) << 20;
// Rules that run a regex, per set: each is tried on every key, so 100,000 of them over 100,000 keys is
// 10^10 matches. Whole-key literal rules (a CSV import's 100,000 pairs) are not counted.
inline constexpr size_t kMaxPatternRules = 1'000;

// A rule reached a match limit (or PCRE2 failed) on a key. what() is one line, "rule 3 ('(a+)+$') took
// more than ... on the key '...': ...", with pattern and key shortened and escaped; problem() is the part
// after the rule's label. Callers that know the rule file name it (LoadError).
class RuleMatchError : public std::runtime_error {
public:
    RuleMatchError(size_t rule, const std::string& label, std::string problem)
        : std::runtime_error(label + " " + problem)
        , m_rule(rule)
        , m_problem(std::move(problem))
    {
    }
    size_t rule() const { return m_rule; } // 0-based, in the RuleSet
    const std::string& problem() const { return m_problem; }

private:
    size_t m_rule;
    std::string m_problem;
};

struct PatternError {
    size_t rule = 0;
    size_t offset = 0; // in the pattern (or replacement, when `inReplacement`)
    bool inReplacement = false;
    bool positioned = true; // false: about the rule as a whole (offset unused)
    std::string message;
};
// "rule 3: pattern at position 6: MESSAGE" (rules numbered from 1, as files show them), or "rule 3: MESSAGE".
std::string describePatternError(const PatternError& e);

class CompiledRules {
public:
    CompiledRules();
    ~CompiledRules();
    CompiledRules(CompiledRules&&) noexcept;
    CompiledRules& operator=(CompiledRules&&) noexcept;

    // Compiles every rule; a rule that fails is left out (and reported), the others still apply. The result
    // keeps what it needs of each rule, so it may outlive `rules`. Pattern
    // rules past kMaxPatternRules are left out too, with one error on the first of them.
    static CompiledRules compile(const RuleSet& rules, std::vector<PatternError>* errors = nullptr);

    struct Result {
        std::string name; // the mapped name (unchanged when no rule matched)
        bool dropped = false; // a drop rule matched
        int lastRule = -1; // index (in the RuleSet) of the last rule that changed or dropped the key
        int firstRule = -1; // index of the first rule that matched
        unsigned matchedCount = 0; // how many rules matched along the chain
    };
    // `matchedRules`, when given, receives the index of every rule that matched along the way.
    // Throws RuleMatchError when a rule reaches a match limit on the key.
    Result apply(std::string_view name, std::vector<uint32_t>* matchedRules = nullptr) const;
    // The same into `out`, whose name keeps its buffer, with `scratch` for the names along the chain: a loop
    // over 100,000 keys that reuses both allocates nothing per key (two heap blocks a key, otherwise).
    void applyInto(std::string_view name, Result& out, std::string& scratch,
        std::vector<uint32_t>* matchedRules = nullptr) const;
    // Whether rule `index` matches `name` (on its own, not in the chain). Throws as apply does.
    bool matches(size_t index, std::string_view name) const;
    // For a rule that matches one whole key (`^model\.norm\.weight$`, a hash lookup): that key.
    std::optional<std::string_view> literalKey(size_t index) const;

    size_t ruleCount() const;
    bool empty() const;
    bool usable(size_t index) const; // compiled and enabled

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

// Whether a pattern is one whole literal key (`^model\.norm\.weight$`), which is looked up, not run.
bool isWholeKeyLiteral(std::string_view pattern);
// The error for a set with more than kMaxPatternRules pattern rules (0-based index of the first rule
// over the cap), or nullopt.
std::optional<PatternError> patternRuleCapError(const RuleSet& rules);

// Checks one pattern without compiling a set: the first problem, or nullopt.
std::optional<PatternError> validatePattern(std::string_view pattern);
std::optional<PatternError> validateReplacement(std::string_view replacement, std::string_view pattern);

} // namespace sl
