#pragma once
// What a strict load_state_dict of A (the checkpoint) into B (the model) would do, and why.
//
// Steps:
//   1. map A's names through the rules (rules/rule.h); a drop rule takes the key out;
//   2. align mapped A names with B's names (a hash join);
//   3. classify each pair with load_state_dict semantics: match, renamed (matched only through a rule),
//      shape_mismatch (a strict load fails), dtype_mismatch (a strict load casts, so it does not fail),
//      copy_error (same shape, but param.copy_ raises: a torchao tensor subclass against a plain tensor,
//      a quantized torch.ao tensor into a float one), missing (in B only), unexpected (in A only), dropped
//      (removed by a drop rule);
//   The load sees keys, not StateLens's groups: a quantized group stored under several keys (bitsandbytes'
//   weight + absmax + quant_map, GPTQ's qweight + qzeros + scales, FP8's weight + weight_scale_inv) is
//   compared key by key (rows name the part), unless the other side holds the same group under keys that
//   correspond one to one; then the pair is one row.
//   4. explain every row that is not a plain match where a known cause applies (reasons.cpp): wrapper
//      prefixes, quantized or sharded counterparts, tied weights, transposed or padded shapes, fused vs split
//      projections, per-expert vs stacked MoE weights, non-persistent buffers;
//   5. fold rows that differ only by layer or expert index into templates (folding).

#include "model/source.h"
#include "rules/rule.h"
#include "rules/rule_engine.h"
#include "util/typed_index.h"

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace sl {

enum class RowStatus : uint8_t { Match, Renamed, ShapeMismatch, DtypeMismatch, Missing, Unexpected, Dropped, CopyError };
std::string_view rowStatusName(RowStatus s); // "match", "renamed", "shape_mismatch", ...
// Every status, in the enum's order: a new status goes here too (rowStatusName's switch fails to compile
// without it, and diff.cpp checks this list's order). Counts, colours and buttons are arrays of its size.
constexpr std::array kAllRowStatuses = { RowStatus::Match, RowStatus::Renamed, RowStatus::ShapeMismatch,
    RowStatus::DtypeMismatch, RowStatus::Missing, RowStatus::Unexpected, RowStatus::Dropped, RowStatus::CopyError };
constexpr size_t kRowStatusCount = kAllRowStatuses.size();

enum class Reason : uint8_t {
    None,
    WrapperPrefix, // _orig_mod., module., _fsdp_wrapped_module., _checkpoint_wrapped_module., base_model.model.
    FlatParam, // FSDP1 flat parameters: the original names are not in the file
    QuantizedCounterpart, // one side holds the quantized group of the other side's float weight
    ShardedCounterpart, // a local shard against the global shape
    TiedWeight, // a missing key that shares storage with a present one (lm_head / embed)
    Transposed, // the same dimensions in the other order
    PaddedVocabulary, // dimension 0 padded to a multiple
    FusedProjection, // qkv or gate_up on one side, separate projections on the other
    StackedExperts, // per-expert MoE weights on one side, one stacked tensor on the other
    NonPersistentBuffer, // a buffer the model does not save (rotary inv_freq, position_ids)
    DtypeCast, // a different dtype that a strict load would cast
    SuggestedRename, // an unexpected and a missing key that a pending suggestion renames one onto the other
};
constexpr Reason kLastReason = Reason::SuggestedRename;
std::string_view reasonName(Reason r); // "wrapper_prefix", ...

// The index spaces a diff row points into.
using EntryOfA = TypedIndex<struct EntryOfATag>; // A's entries
using EntryOfB = TypedIndex<struct EntryOfBTag>; // B's entries
using PartIndex = TypedIndex<struct PartTag>; // an entry's parts
using RuleIndex = TypedIndex<struct RuleTag>; // the rule set's rules
using RowIndex = TypedIndex<struct RowTag>; // the diff's rows
using SuggestionIndex = TypedIndex<struct SuggestionTag>; // the suggestions made for the diff

// The rule engine's "last rule" (-1: none) as a row's rule index.
inline RuleIndex ruleIndex(int lastRule) { return lastRule >= 0 ? RuleIndex(static_cast<size_t>(lastRule)) : RuleIndex(); }

struct DiffRow {
    RowStatus status = RowStatus::Match;
    EntryOfA a;
    EntryOfB b;
    // When the row is one stored key of a group kept under several keys: the index of that part in
    // entries[a].parts (entries[b].parts); none when the row is the whole entry.
    PartIndex aPart;
    PartIndex bPart;
    RuleIndex rule; // the last rule that renamed or dropped the A key
    // The row of the counterpart on the other side that the reason names: an unexpected key and the missing
    // key it corresponds to (a wrapper prefix, a quantized key and its weight, a pending suggestion) point
    // at each other; many-to-one reasons (fused projections, stacked experts) point each of the many at the
    // one and the one at the first of them. None when no row is the counterpart.
    RowIndex partner;
    // The pending suggestion that would rename or drop this row's key: the last one along the chain when
    // several apply. None when none does or suggestions were not made.
    SuggestionIndex suggestion;
    Reason reason = Reason::None;
    std::string mapped; // A's name after the rules (empty for missing rows)
    std::string explanation; // one line, when there is a reason
};

struct DiffSummary {
    size_t counts[kRowStatusCount] = {};
    size_t count(RowStatus s) const { return counts[static_cast<size_t>(s)]; }
    // No missing, unexpected, shape_mismatch or copy_error rows (and, when asked, no dtype_mismatch either).
    bool loadSucceeds(bool failOnDtype = false) const;
};

struct DiffOptions {
    bool explain = true; // reasons are cheap but not free; the GUI's live preview may skip them
};

struct DiffResult {
    std::vector<DiffRow> rows; // A's order first (matched, unexpected, dropped), then B's missing keys
    DiffSummary summary;
    std::vector<PatternError> ruleErrors;
    std::vector<uint32_t> ruleHits; // per rule of the set: how many of A's keys it matched along the chain
};

// A and B must outlive nothing: rows refer to them by index only.
DiffResult diffSources(const Source& a, const Source& b, const RuleSet& rules, const DiffOptions& options = {});
// Same with rules compiled already (the GUI recompiles only when rules change).
DiffResult diffSources(const Source& a, const Source& b, const CompiledRules& rules, const DiffOptions& options = {});

// Rows that differ only by integer name segments (layer, expert) and share status and reason, folded:
// "layers.{0..31}.mlp.up_proj.weight" (32 rows).
// A pair shows on one line: the missing row stands for both, and its unexpected partner is folded with it.
struct FoldedRow {
    std::string name; // the template with ranges filled in
    std::string templateKey; // with "{}" for every folded segment
    RowStatus status = RowStatus::Match;
    Reason reason = Reason::None;
    std::vector<size_t> rows; // indices into DiffResult::rows, in order
    // For lines that show rows of the other side (rowLines): those rows' names, folded the same way
    // ("layers.{0..31}.attention.wq.weight"; per-expert weights as "experts.{0..255}.w1.weight"), and the
    // rows themselves. Empty otherwise. The names are A's when the rows are missing rows (B's), else B's.
    std::string partnerName;
    std::vector<size_t> partnerRows;
};
std::vector<FoldedRow> foldRows(const DiffResult& diff, const Source& a, const Source& b);
struct RowLines;
std::vector<FoldedRow> foldRows(const DiffResult& diff, const Source& a, const Source& b, const RowLines& lines);

// The partner of `row` when the two point at each other one to one and are an unexpected and a missing row,
// else none. (Fused projections and stacked experts, many to one, are lines of their own: rowLines.)
RowIndex pairedRow(const DiffResult& diff, size_t row);

// Which rows share a line in the window and the reports. A pair's unexpected row is shown on its missing
// partner's line; the many rows of a many-to-one counterpart (per-expert weights, split projections) are
// shown on the line of the one they point at (the stacked tensor, the fused projection), whichever side it
// is on. A line's own row is its head.
struct RowLines {
    std::vector<int32_t> shownWith; // per row: the head whose line shows it, or -1 (it is a head or alone)
    // Per head, the other side's rows on its line, in row order. Offsets into `rows`: head h holds
    // rows[begin[h]] .. rows[begin[h + 1]] (begin has one more item than the diff has rows).
    std::vector<uint32_t> begin;
    std::vector<uint32_t> rows;
    std::span<const uint32_t> on(size_t head) const
    {
        if (begin.empty())
            return {};
        return std::span<const uint32_t>(rows).subspan(begin[head], begin[head + 1] - begin[head]);
    }
    size_t count(size_t head) const { return begin.empty() ? 0 : begin[head + 1] - begin[head]; }
    // The row a line shows on A's side, and on B's (the head, or the first row shown with it).
    size_t rowA(const DiffResult& diff, size_t head) const;
    size_t rowB(const DiffResult& diff, size_t head) const;
};
RowLines rowLines(const DiffResult& diff);

// The names of rows folded into one text by index template ("experts.{0..255}.w1.weight"), templates in
// order of first appearance joined by " + ".
std::string foldedNames(const DiffResult& diff, const Source& a, const Source& b, std::span<const uint32_t> rows);

// The display name of a row: B's key when it has one, else A's mapped key.
const std::string& rowName(const DiffRow& row, const Source& a, const Source& b);
// What the row compares on each side: the entry, or the part when the row is one key of a group; nullptr
// where the side has none.
const Entry* rowEntryA(const DiffRow& row, const Source& a);
const Entry* rowEntryB(const DiffRow& row, const Source& b);
// The key as the file stores it (before the rules): the part's key for a part row, else the entry's name.
const std::string& rowKeyA(const DiffRow& row, const Source& a);
const std::string& rowKeyB(const DiffRow& row, const Source& b);
// A group whose parts are separate keys of the state dict (each part has the attribute `key`).
bool isKeyedGroup(const Entry& e);

// "layers.3.attn.q.weight" -> "layers.{}.attn.q.weight", and the numbers it took out.
std::string foldIndices(std::string_view name, std::vector<int64_t>* numbers = nullptr);

} // namespace sl
