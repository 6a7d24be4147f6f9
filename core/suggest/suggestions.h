#pragma once
// One-click rules: what the diff's unexpected and missing rows have in common, offered as ready rules with
// the number of rows each resolves. Nothing is applied: a suggestion becomes a rule only when the user
// (or `statelens suggest`) takes it.
//
// In order, each step on what the steps before left:
//   1. wrapper prefixes: torch.compile, DDP, FSDP, activation checkpointing and PEFT segments, stripped from
//      A's keys or added to them when the model carries them;
//   2. non-persistent buffers (inv_freq, position_ids) in A: drop rules;
//   3. systematic renames: unexpected and missing rows folded into index templates, clusters paired by
//      their indices and shapes (and by name similarity when shapes tie), and the smallest anchored regex
//      with captures that maps one cluster onto the other.
// Every candidate is measured, not estimated: it is applied to the remaining unexpected keys and counted
// against the missing ones, and refused where it would rename a key that already matches.

#include "model/source.h"
#include "rules/rule.h"

#include <optional>
#include <string>
#include <vector>

namespace sl {

struct Suggestion {
    enum class Kind : uint8_t { WrapperPrefix, DropBuffer, SystematicRename, FromPair };
    Kind kind = Kind::SystematicRename;
    std::vector<Rule> rules; // usually one; nested wrappers (module._orig_mod.) need two together
    std::string title; // "strip '_orig_mod.' (torch.compile) from the checkpoint's keys: resolves 291 pairs"
    size_t resolves = 0; // unexpected/missing pairs that become matches (drop rules: unexpected keys dropped)
    size_t collisions = 0; // keys it would map onto a name already taken
    std::vector<std::string> examples; // "a -> b", a few
};
std::string_view suggestionKindName(Suggestion::Kind k);

struct SuggestOptions {
    size_t maxSuggestions = 100;
};

// Suggestions for the pair under `existing` rules, in the order they should be appended.
std::vector<Suggestion> suggestRules(const Source& a, const Source& b, const RuleSet& existing = {}, const SuggestOptions& options = {});

// From one chosen pair (an unexpected key of A, after `existing`, and a missing key of B): the general rule,
// with numeric segments that agree turned into captures, and what else it resolves. Nullopt when the two
// names cannot be related by one rule.
std::optional<Suggestion> inferRule(std::string_view fromA, std::string_view toB, const Source& a, const Source& b, const RuleSet& existing = {});

// The candidates for `name`'s partner (the other side's unmatched keys), most likely first, as the
// suggester scores a pair: by the segments they share at the end, then by how alike the parts that differ
// are (2 * LCS / total length, plus one for each segment renamed between known naming schemes, such
// as mlp -> feed_forward and down_proj -> w2), then by the segments they share at the start. Ties keep the given order.
// Returns positions in `candidates`.
std::vector<size_t> rankPartners(std::string_view name, const std::vector<std::string_view>& candidates);

// A rule file that appends the suggestions to `existing`, each with its title as a comment.
RuleSet withSuggestions(const RuleSet& existing, const std::vector<Suggestion>& suggestions);

} // namespace sl
