#pragma once
// What the pending suggestions would do to a diff, before any is taken: the unexpected key and the missing
// key that a suggestion renames one onto the other are a pair (DiffRow::partner both ways, and
// DiffRow::suggestion), so the window and the reports show them on one line with the suggestion that
// resolves them. Keys a pending drop rule would take out get DiffRow::suggestion too.
//
// The suggestions are applied as accepting all of them would (appended to the diff's rules, each on what
// the earlier ones made), so a pair is exactly what accepting them makes a match.

#include "diff/diff.h"
#include "suggest/suggestions.h"

#include <vector>

namespace sl {

// A pair's reason agrees with it: a row whose reason already names the same counterpart keeps it (a
// wrapper prefix); any other reason (a guess such as "probably tied to ...", or none) becomes
// Reason::SuggestedRename. Fold the rows again afterwards (foldRows), since reasons change.
void markPendingSuggestions(DiffResult& diff, const Source& a, const Source& b, RuleMode mode,
    const std::vector<Suggestion>& suggestions);

// The suggestions (indices, in order) that must be taken together for `row`'s key to become what they
// make of it: every one that matched along the chain. Empty when none applies.
std::vector<size_t> suggestionChain(const DiffResult& diff, size_t row, RuleMode mode, const std::vector<Suggestion>& suggestions);

} // namespace sl
