#pragma once
// Compiled rules: PCRE2 with the options that make it behave like Python's `re` on str patterns (UTF-8,
// Unicode \d \w \s as Python 3 has them), JIT where available, and a literal prefilter so a rule anchored
// on a literal prefix costs a comparison, not a regex run, on keys it cannot match.
//
// Only the subset of syntax both engines read the same way is accepted: constructs that one engine lacks
// or reads differently (\K, \R, \h, \v, \p{..}, \z, \Z, (?a), (?L), possessive quantifiers, atomic groups,
// (?| ...), recursion, callouts, \Q..\E, named groups other than (?P<name>...)/(?<name>...)) are refused
// with the position, so an exported Python artefact maps keys exactly as StateLens does.

#include "rules/rule.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sl {

struct PatternError {
    size_t rule = 0;
    size_t offset = 0; // in the pattern (or replacement, when `inReplacement`)
    bool inReplacement = false;
    std::string message;
};

class CompiledRules {
public:
    CompiledRules();
    ~CompiledRules();
    CompiledRules(CompiledRules&&) noexcept;
    CompiledRules& operator=(CompiledRules&&) noexcept;

    // Compiles every rule; a rule that fails is left out (and reported), the others still apply.
    static CompiledRules compile(const RuleSet& rules, std::vector<PatternError>* errors = nullptr);

    struct Result {
        std::string name; // the mapped name (unchanged when no rule matched)
        bool dropped = false; // a drop rule matched
        int lastRule = -1; // index (in the RuleSet) of the last rule that changed or dropped the key
        int firstRule = -1; // index of the first rule that matched
        unsigned matchedCount = 0; // how many rules matched along the chain
    };
    // `matchedRules`, when given, receives the index of every rule that matched along the way.
    Result apply(std::string_view name, std::vector<uint32_t>* matchedRules = nullptr) const;
    // Whether rule `index` matches `name` (on its own, not in the chain).
    bool matches(size_t index, std::string_view name) const;

    size_t ruleCount() const;
    bool empty() const;
    bool usable(size_t index) const; // compiled and enabled

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

// Checks one pattern without compiling a set: the first problem, or nullopt.
std::optional<PatternError> validatePattern(std::string_view pattern);
std::optional<PatternError> validateReplacement(std::string_view replacement, std::string_view pattern);

} // namespace sl
