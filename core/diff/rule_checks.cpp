#include "diff/rule_checks.h"

#include "rules/rule_engine.h"
#include "rules/rule_inverse.h"

#include <unordered_map>

namespace sl {

namespace {

constexpr size_t kExamples = 5;

std::string ruleLabel(size_t index) { return "rule " + std::to_string(index + 1); }

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

} // namespace

std::string_view ruleIssueKindName(RuleIssue::Kind k)
{
    switch (k) {
    case RuleIssue::Kind::Invalid: return "invalid";
    case RuleIssue::Kind::Collision: return "collision";
    case RuleIssue::Kind::Unused: return "unused";
    case RuleIssue::Kind::Shadowed: return "shadowed";
    case RuleIssue::Kind::RoundTrip: return "round_trip";
    case RuleIssue::Kind::NotInvertible: return "not_invertible";
    }
    return "invalid";
}

std::vector<RuleIssue> checkRules(const RuleSet& rules, const Source& a, const Source& b)
{
    std::vector<RuleIssue> out;
    std::vector<PatternError> errors;
    const CompiledRules compiled = CompiledRules::compile(rules, &errors);
    for (const auto& e : errors) {
        RuleIssue issue;
        issue.kind = RuleIssue::Kind::Invalid;
        issue.severity = Severity::Danger;
        issue.rule = static_cast<int>(e.rule);
        issue.message = ruleLabel(e.rule) + ": " + (e.inReplacement ? "replacement" : "pattern") + " at position " + std::to_string(e.offset)
            + ": " + e.message;
        out.push_back(std::move(issue));
    }

    // One pass over A: which rules fire, and where two keys land on one name.
    std::vector<size_t> hits(rules.rules.size(), 0);
    std::vector<uint32_t> matched;
    std::unordered_map<std::string, size_t> landed; // mapped name -> first A entry that got it
    landed.reserve(a.entries.size());
    std::vector<std::pair<size_t, size_t>> collisions; // (earlier entry, later entry)
    std::vector<std::string> mappedNames(a.entries.size());
    for (size_t i = 0; i < a.entries.size(); ++i) {
        matched.clear();
        CompiledRules::Result r = compiled.apply(a.entries[i].name, &matched);
        for (uint32_t k : matched)
            ++hits[k];
        if (r.dropped)
            continue;
        auto [it, inserted] = landed.try_emplace(r.name, i);
        if (!inserted)
            collisions.emplace_back(it->second, i);
        mappedNames[i] = std::move(r.name);
    }
    if (!collisions.empty()) {
        RuleIssue issue;
        issue.kind = RuleIssue::Kind::Collision;
        issue.severity = Severity::Danger;
        const auto& [first, second] = collisions.front();
        issue.message = std::to_string(collisions.size()) + " of the checkpoint's keys map onto a name another key already has, e.g. "
            + quoted(a.entries[first].name) + " and " + quoted(a.entries[second].name) + " both become " + quoted(mappedNames[second]);
        for (size_t k = 0; k < collisions.size() && k < kExamples; ++k)
            issue.examples.push_back(a.entries[collisions[k].first].name + " + " + a.entries[collisions[k].second].name + " -> "
                + mappedNames[collisions[k].second]);
        out.push_back(std::move(issue));
    }

    // Unused and shadowed rules: what a rule would match on A's original keys, against what it matched.
    for (size_t k = 0; k < rules.rules.size(); ++k) {
        if (!compiled.usable(k))
            continue;
        size_t wouldMatch = 0;
        std::vector<std::string> examples;
        int shadowedBy = -1;
        for (size_t i = 0; i < a.entries.size(); ++i) {
            if (!compiled.matches(k, a.entries[i].name))
                continue;
            ++wouldMatch;
            // Which earlier rule took the key first.
            if (rules.mode == RuleMode::FirstMatch || hits[k] == 0) {
                CompiledRules::Result r = compiled.apply(a.entries[i].name);
                if (r.firstRule >= 0 && static_cast<size_t>(r.firstRule) < k) {
                    if (shadowedBy < 0)
                        shadowedBy = r.firstRule;
                    if (examples.size() < kExamples)
                        examples.push_back(a.entries[i].name);
                }
            }
            if (hits[k] != 0 && rules.mode == RuleMode::Chain)
                break; // used; nothing more to learn
        }
        RuleIssue issue;
        issue.rule = static_cast<int>(k);
        if (hits[k] == 0 && wouldMatch == 0) {
            issue.kind = RuleIssue::Kind::Unused;
            issue.message = ruleLabel(k) + " (" + quoted(rules.rules[k].pattern) + ") matches none of the checkpoint's keys";
        } else if (hits[k] == 0) {
            issue.kind = RuleIssue::Kind::Shadowed;
            issue.message = ruleLabel(k) + " would match " + std::to_string(wouldMatch) + " of the checkpoint's keys, but "
                + (shadowedBy >= 0 ? ruleLabel(static_cast<size_t>(shadowedBy)) : std::string("earlier rules"))
                + (rules.mode == RuleMode::FirstMatch ? " matches them first" : " rewrites them first");
            issue.examples = std::move(examples);
        } else if (rules.mode == RuleMode::FirstMatch && !examples.empty()) {
            // first_match: a rule that fires on some keys but loses others to earlier rules.
            issue.kind = RuleIssue::Kind::Shadowed;
            issue.message = ruleLabel(k) + " matches " + std::to_string(wouldMatch) + " keys, but " + std::to_string(wouldMatch - hits[k])
                + " of them go to " + ruleLabel(static_cast<size_t>(shadowedBy)) + " first (first match wins)";
            issue.examples = std::move(examples);
        } else {
            continue;
        }
        out.push_back(std::move(issue));
    }

    // Round trip, when the renames can be inverted.
    InvertedRules inverse = invertRules(rules);
    if (!inverse.problems.empty()) {
        RuleIssue issue;
        issue.kind = RuleIssue::Kind::NotInvertible;
        issue.severity = Severity::Info;
        issue.message = "no round trip B -> A -> B: " + inverse.problems.front()
            + (inverse.problems.size() > 1 ? " (and " + std::to_string(inverse.problems.size() - 1) + " more)" : "");
        issue.examples = std::move(inverse.problems);
        out.push_back(std::move(issue));
        return out;
    }
    if (inverse.rules.rules.empty())
        return out;
    const CompiledRules backward = CompiledRules::compile(inverse.rules);
    size_t failures = 0;
    RuleIssue issue;
    issue.kind = RuleIssue::Kind::RoundTrip;
    issue.severity = Severity::Danger;
    std::string first;
    for (const Entry& e : b.entries) {
        CompiledRules::Result toA = backward.apply(e.name);
        CompiledRules::Result back = compiled.apply(toA.name);
        if (!back.dropped && back.name == e.name)
            continue;
        ++failures;
        std::string example = e.name + " -> " + toA.name + " -> " + (back.dropped ? std::string("(dropped)") : back.name);
        if (first.empty())
            first = example;
        if (issue.examples.size() < kExamples)
            issue.examples.push_back(std::move(example));
    }
    if (failures) {
        issue.message = "the round trip B -> A -> B changes " + std::to_string(failures) + " of the model's keys, e.g. " + first;
        out.push_back(std::move(issue));
    }
    return out;
}

} // namespace sl
