#pragma once
// One finished comparison, immutable once built, shared by the models and panels that show it. Built off
// the UI thread from the two sources and the rule set of that moment, so a later rule change never mutates
// what a view is drawing.

#include "compare/comparison.h"
#include "diff/diff.h"
#include "model/source.h"

#include <memory>
#include <vector>

namespace sl::gui {

// The core's comparison result (compare/comparison.h: rules as run, diff, rule issues, suggestions), with the two
// sources it compared and the window's line and folding layout of its rows. Its rules are the document's,
// with any that reached a match limit turned off; its issues are empty while one side is not open; its
// suggestions are empty in the first snapshot of a diff and set in the one that follows when they are ready.
struct DiffSnapshot : ComparisonResult {
    // Never null: a side that is not open yet is an empty Source (hasA/hasB say which).
    std::shared_ptr<const Source> a;
    std::shared_ptr<const Source> b;
    bool hasA = false;
    bool hasB = false;
    RowLines lines; // which rows share a line (pairs, many-to-one counterparts)
    std::vector<FoldedRow> folded; // diff rows folded by index template, a line's rows together
    double milliseconds = 0; // how long building it took
    uint64_t generation = 0;

    bool complete() const { return hasA && hasB; }
};

// The same snapshot with its suggestions (compare/comparison.h's addSuggestions: the pending pairs marked on
// its rows) and folded again. Safe to call on any thread; throws RuleMatchError as suggestRules does.
std::shared_ptr<const DiffSnapshot> withSuggestions(const DiffSnapshot& snapshot);

// Runs the comparison (without suggestions) and the folding. Safe to call on any thread.
std::shared_ptr<const DiffSnapshot> buildSnapshot(std::shared_ptr<const Source> a, std::shared_ptr<const Source> b,
    const RuleSet& rules, uint64_t generation);

} // namespace sl::gui
