#include "diff/rule_checks.h"

#include "diff/diff.h"
#include "rules/rule_engine.h"
#include "rules/rule_inverse.h"
#include "util/name_index.h"

#include <algorithm>
#include <deque>
#include <future>
#include <optional>
#include <string_view>
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

namespace {

// A's keys as the forward rules map them, where already known (the diff mapped them): the round trip's
// second leg looks a key up here instead of running the rules again when B -> A lands on one of A's keys,
// as it does for every key the rules pair.
struct KnownMapping {
    const Source& a;
    const std::vector<std::string_view>& mapped;
    const std::vector<uint8_t>& dropped;
    const std::vector<uint8_t>& known;
    NameIndex index;
    std::string_view nameAt(size_t i) const { return a.entries[i].name; }
};

// Where every rename can be inverted: B -> A -> B must give back each of B's keys.
std::vector<RuleIssue> roundTripIssues(const RuleSet& rules, const Source& b, const KnownMapping& fromA)
{
    std::vector<RuleIssue> out;
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
    // B's keys in two halves, one on a second thread (CompiledRules keeps per-instance match data, so each
    // thread compiles its own): the round trip is the longest check at 100,000 keys.
    struct Half {
        size_t failures = 0;
        std::vector<std::string> examples;
    };
    auto check = [&rules, &inverse, &b, &fromA](size_t begin, size_t end) {
        const CompiledRules forward = CompiledRules::compile(rules);
        const CompiledRules backward = CompiledRules::compile(inverse.rules);
        const auto nameOf = [&fromA](size_t k) { return fromA.nameAt(k); };
        Half h;
        CompiledRules::Result toA, back; // reused: their names keep their buffers from key to key
        std::string scratch;
        for (size_t i = begin; i < end; ++i) {
            const std::string& name = b.entries[i].name;
            backward.applyInto(name, toA, scratch);
            const size_t inA = fromA.index.find(toA.name, nameOf);
            if (inA != NameIndex::npos && fromA.known[inA]) {
                back.dropped = fromA.dropped[inA] != 0;
                if (!back.dropped && fromA.mapped[inA] == name)
                    continue;
                back.name.assign(fromA.mapped[inA]);
            } else {
                forward.applyInto(toA.name, back, scratch);
            }
            if (!back.dropped && back.name == name)
                continue;
            if (h.failures++ < kExamples)
                h.examples.push_back(name + " -> " + toA.name + " -> " + (back.dropped ? std::string("(dropped)") : back.name));
        }
        return h;
    };
    const size_t middle = b.entries.size() / 2;
    auto secondHalf = std::async(std::launch::async, check, middle, b.entries.size());
    Half first = check(0, middle);
    Half second = secondHalf.get();
    const size_t failures = first.failures + second.failures;
    RuleIssue issue;
    issue.kind = RuleIssue::Kind::RoundTrip;
    issue.severity = Severity::Danger;
    for (auto* h : { &first, &second })
        for (auto& e : h->examples)
            if (issue.examples.size() < kExamples)
                issue.examples.push_back(std::move(e));
    if (failures) {
        issue.message = "the round trip B -> A -> B changes " + std::to_string(failures) + " of the model's keys, e.g. " + issue.examples.front();
        out.push_back(std::move(issue));
    }
    return out;
}

} // namespace

std::vector<RuleIssue> invalidRuleIssues(const std::vector<PatternError>& errors)
{
    std::vector<RuleIssue> out;
    for (const auto& e : errors) {
        RuleIssue issue;
        issue.kind = RuleIssue::Kind::Invalid;
        issue.severity = Severity::Danger;
        issue.rule = RuleIndex(e.rule);
        issue.message = describePatternError(e);
        out.push_back(std::move(issue));
    }
    return out;
}

std::vector<RuleIssue> checkRules(const RuleSet& rules, const Source& a, const Source& b, const DiffResult* diff)
{
    std::vector<PatternError> errors;
    const CompiledRules compiled = CompiledRules::compile(rules, &errors);
    std::vector<RuleIssue> out = invalidRuleIssues(errors);

    // One pass over A: which rules fire, and where two keys land on one name.
    std::vector<size_t> hits(rules.rules.size(), 0);
    // Views of the diff's own mapped names or of A's keys; a name only mapped here is kept in `computed`.
    std::vector<std::string_view> mappedNames(a.entries.size());
    std::deque<std::string> computed;
    std::vector<uint8_t> dropped(a.entries.size(), 0);
    std::vector<uint8_t> known(a.entries.size(), 0); // mappedNames[i] or dropped[i] is set
    if (diff && diff->ruleHits.size() == hits.size()) {
        std::copy(diff->ruleHits.begin(), diff->ruleHits.end(), hits.begin());
        for (const auto& row : diff->rows) {
            if (!row.a.valid())
                continue;
            const size_t i = row.a.get();
            if (row.aPart.valid()) { // one key of a keyed group: the group's own name is mapped below
                CompiledRules::Result r = compiled.apply(a.entries[i].name);
                dropped[i] = r.dropped;
                mappedNames[i] = computed.emplace_back(std::move(r.name));
            } else if (row.status == RowStatus::Dropped) {
                dropped[i] = 1;
            } else {
                mappedNames[i] = row.mapped.empty() ? std::string_view(a.entries[i].name) : std::string_view(row.mapped);
            }
            known[i] = 1;
        }
    } else {
        std::vector<uint32_t> matched;
        CompiledRules::Result r;
        std::string scratch;
        for (size_t i = 0; i < a.entries.size(); ++i) {
            matched.clear();
            compiled.applyInto(a.entries[i].name, r, scratch, &matched);
            for (uint32_t k : matched)
                ++hits[k];
            if (r.dropped)
                dropped[i] = 1;
            else
                mappedNames[i] = computed.emplace_back(std::move(r.name));
            known[i] = 1;
        }
    }
    // Mapped name -> the first A entry that got it (a flat index: no node per key).
    NameIndex landed;
    landed.reserve(a.entries.size());
    const auto landedName = [&mappedNames](size_t i) { return mappedNames[i]; };
    std::vector<std::pair<size_t, size_t>> collisions; // (earlier entry, later entry)
    for (size_t i = 0; i < a.entries.size(); ++i) {
        if (dropped[i])
            continue;
        if (const size_t first = landed.insert(i, landedName); first != i)
            collisions.emplace_back(first, i);
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
                + std::string(mappedNames[collisions[k].second]));
        out.push_back(std::move(issue));
    }

    // Unused and shadowed rules: what a rule would match on A's original keys, against what it matched.
    // A whole-key literal rule can match only the entries of that name: they are looked up, not scanned,
    // so 100,000 unused literal rules (a CSV import for another model) cost 100,000 lookups.
    std::unordered_map<std::string_view, std::vector<size_t>> entriesNamed;
    std::vector<size_t> candidates;
    for (size_t k = 0; k < rules.rules.size(); ++k) {
        if (!compiled.usable(k))
            continue;
        // In a chain, a rule that fired is neither unused nor shadowed: nothing to learn from a scan.
        if (hits[k] != 0 && rules.mode == RuleMode::Chain)
            continue;
        const std::optional<std::string_view> literal = compiled.literalKey(k);
        candidates.clear();
        if (literal) {
            if (entriesNamed.empty())
                for (size_t i = 0; i < a.entries.size(); ++i)
                    entriesNamed[a.entries[i].name].push_back(i);
            for (const std::string& name :
                { std::string(*literal), std::string(*literal) + "\n" }) // '$' before a final newline
                if (auto it = entriesNamed.find(name); it != entriesNamed.end())
                    candidates.insert(candidates.end(), it->second.begin(), it->second.end());
            std::sort(candidates.begin(), candidates.end());
        }
        size_t wouldMatch = 0;
        std::vector<std::string> examples;
        int shadowedBy = -1;
        const size_t scanned = literal ? candidates.size() : a.entries.size();
        for (size_t c = 0; c < scanned; ++c) {
            const size_t i = literal ? candidates[c] : c;
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
        }
        RuleIssue issue;
        issue.rule = RuleIndex(k);
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

    KnownMapping fromA { a, mappedNames, dropped, known, {} };
    fromA.index.insertAll(a.entries.size(), [&fromA](size_t k) { return fromA.nameAt(k); });
    for (auto& issue : roundTripIssues(rules, b, fromA))
        out.push_back(std::move(issue));
    return out;
}

} // namespace sl
