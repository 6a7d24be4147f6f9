#include "suggest/pending_pairs.h"

#include "rules/rule_engine.h"

#include <unordered_map>

namespace sl {

namespace {

// The suggestions' rules as one set, appended in order as accepting them all would, and which suggestion
// each rule came from.
struct PendingRules {
    CompiledRules compiled;
    std::vector<size_t> owner; // per rule: the suggestion's index
};

PendingRules compilePending(RuleMode mode, const std::vector<Suggestion>& suggestions)
{
    RuleSet set;
    set.mode = mode;
    PendingRules out;
    for (size_t s = 0; s < suggestions.size(); ++s)
        for (const Rule& r : suggestions[s].rules) {
            set.rules.push_back(r);
            out.owner.push_back(s);
        }
    out.compiled = CompiledRules::compile(set); // a rule that does not compile is left out
    return out;
}

// The name the pending rules make of an unexpected row's key, or nullopt when they leave it alone. In
// first-match mode a key an earlier rule already matched is not offered to the appended ones.
std::optional<CompiledRules::Result> applyPending(const PendingRules& pending, const DiffRow& row, RuleMode mode,
    std::vector<uint32_t>* matched = nullptr)
{
    if (row.status != RowStatus::Unexpected || (mode == RuleMode::FirstMatch && row.rule.valid()))
        return std::nullopt;
    try {
        CompiledRules::Result r = pending.compiled.apply(row.mapped, matched);
        if (r.lastRule < 0)
            return std::nullopt;
        return r;
    } catch (const RuleMatchError&) {
        return std::nullopt; // the rule's own check names it
    }
}

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

} // namespace

void markPendingSuggestions(DiffResult& diff, const Source& a, const Source& b, RuleMode mode,
    const std::vector<Suggestion>& suggestions)
{
    if (suggestions.empty())
        return;
    const PendingRules pending = compilePending(mode, suggestions);
    std::unordered_map<std::string_view, size_t> missing;
    for (size_t i = 0; i < diff.rows.size(); ++i)
        if (diff.rows[i].status == RowStatus::Missing)
            missing.emplace(rowName(diff.rows[i], a, b), i);
    auto& rows = diff.rows;
    // A row that leaves an earlier pair for this one: the row it left no longer points at it.
    auto leave = [&](size_t row, size_t staying) {
        const RowIndex old = pairedRow(diff, row);
        if (!old.valid() || old.get() == staying)
            return;
        DiffRow& o = rows[old.get()];
        o.partner = {};
        o.reason = Reason::None; // its explanation named this row
        o.explanation.clear();
    };
    for (size_t u = 0; u < rows.size(); ++u) {
        const auto result = applyPending(pending, rows[u], mode);
        if (!result)
            continue;
        const size_t suggestion = pending.owner[static_cast<size_t>(result->lastRule)];
        if (result->dropped) {
            rows[u].suggestion = SuggestionIndex(suggestion);
            continue;
        }
        auto it = missing.find(result->name);
        if (it == missing.end())
            continue;
        const size_t m = it->second;
        missing.erase(it); // one key of A per key of B, as the load would see it
        rows[u].suggestion = rows[m].suggestion = SuggestionIndex(suggestion);
        if (pairedRow(diff, u) == RowIndex(m))
            continue; // the reason already names this counterpart (a wrapper prefix)
        leave(u, m);
        leave(m, u);
        rows[u].partner = RowIndex(m);
        rows[m].partner = RowIndex(u);
        rows[u].reason = rows[m].reason = Reason::SuggestedRename;
        const std::string number = std::to_string(suggestion + 1);
        const Entry* ea = rowEntryA(rows[u], a);
        const Entry* eb = rowEntryB(rows[m], b);
        std::string shapes;
        if (ea && eb && ea->shapeKnown && eb->shapeKnown && !(ea->shape == eb->shape))
            shapes = "; their shapes differ (" + shapeToString(ea->shape) + " vs " + shapeToString(eb->shape) + "), so the load would still fail on it";
        rows[u].explanation = "suggestion " + number + " renames it to " + quoted(result->name) + ", which the model expects" + shapes;
        rows[m].explanation = "suggestion " + number + " renames the checkpoint's " + quoted(rowKeyA(rows[u], a)) + " to this key" + shapes;
    }
}

std::vector<size_t> suggestionChain(const DiffResult& diff, size_t row, RuleMode mode, const std::vector<Suggestion>& suggestions)
{
    std::vector<size_t> out;
    if (row >= diff.rows.size() || suggestions.empty())
        return out;
    const DiffRow* r = &diff.rows[row];
    if (r->status == RowStatus::Missing && pairedRow(diff, row).valid())
        r = &diff.rows[r->partner.get()]; // the rules act on the checkpoint's key
    const PendingRules pending = compilePending(mode, suggestions);
    std::vector<uint32_t> matched;
    if (!applyPending(pending, *r, mode, &matched))
        return out;
    for (uint32_t rule : matched) {
        const size_t s = pending.owner[rule];
        if (out.empty() || out.back() != s)
            out.push_back(s);
    }
    return out;
}

} // namespace sl
