#pragma once
// One finished comparison, immutable once built, shared by the models and panels that show it. Built off
// the UI thread from the two sources and the rule set of that moment, so a later rule change never mutates
// what a view is drawing.

#include "diff/diff.h"
#include "diff/rule_checks.h"
#include "model/source.h"
#include "rules/rule.h"
#include "suggest/suggestions.h"

#include <memory>
#include <vector>

namespace sl::gui {

struct DiffSnapshot {
    // Never null: a side that is not open yet is an empty Source (hasA/hasB say which).
    std::shared_ptr<const Source> a;
    std::shared_ptr<const Source> b;
    bool hasA = false;
    bool hasB = false;
    RuleSet rules; // the rules the diff ran: the document's, with any that reached a match limit turned off
    DiffResult diff;
    std::vector<RuleIssue> issues; // checkRules on the pair (only when both sides are open)
    RowLines lines; // which rows share a line (pairs, many-to-one counterparts)
    std::vector<FoldedRow> folded; // diff rows folded by index template, a line's rows together
    // The pending suggestions marked on the rows (suggest/pending_pairs.h): empty in the first snapshot of
    // a diff, set in the one that follows when suggestions are ready.
    std::vector<Suggestion> suggestions;
    double milliseconds = 0; // how long building it took
    uint64_t generation = 0;

    bool complete() const { return hasA && hasB; }
};

// The same snapshot with the pending suggestions' pairs marked on its rows and folded again. Safe to call on
// any thread.
std::shared_ptr<const DiffSnapshot> withPendingSuggestions(const DiffSnapshot& snapshot, std::vector<Suggestion> suggestions);

// Runs the diff, the rule checks and the folding. Safe to call on any thread.
std::shared_ptr<const DiffSnapshot> buildSnapshot(std::shared_ptr<const Source> a, std::shared_ptr<const Source> b,
    const RuleSet& rules, uint64_t generation);

} // namespace sl::gui
