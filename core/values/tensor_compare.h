#pragma once
// Values of two checkpoints side by side: for aligned pairs (a row of the diff that has both sides), whether
// the elements are the same bytes and how far apart the values are; for keys on one side only, which keys
// on the other side hold exactly the same elements (a rename that names alone cannot prove); and within one
// side, which tensors are duplicates.
//
// Definitions (the tests hold them to torch's float64 arithmetic):
//   equal_bytes    same dtype and identical elements in logical order (NaN payloads included); never for
//                  quantized groups, which have no single stored tensor: they compare by their dequantized
//                  values (value_reader.h), so a bf16 weight can be held against its FP8 or 4-bit copy
//   max_abs_diff   max |a - b| over positions where both are finite
//   max_rel_diff   max |a - b| / max(|a|, |b|) over positions where both are finite and not both zero
//   cosine         cosine similarity over positions where both are finite (none when a norm is zero)
//   nan_mismatch   positions where exactly one side is NaN

#include "diff/diff.h"
#include "model/source.h"
#include "values/tensor_stats.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sl::values {

struct ValueComparison {
    bool compared = false;
    std::string why; // when not compared: different shapes, bytes not reachable, ...
    bool equalBytes = false;
    bool equalValues = false; // every value identical (as float64, NaN payloads included)
    std::string note; // how values were made when a side is a quantized group ("A dequantized: ...")
    uint64_t finiteCompared = 0;
    std::optional<double> maxAbsDiff;
    std::optional<double> maxRelDiff;
    std::optional<double> cosine;
    uint64_t nanMismatch = 0;
};

// One comparison per (A entry, B entry) pair, in order. Throws LoadCancelled when cancelled.
std::vector<ValueComparison> compareValues(const Source& a, const Source& b,
    const std::vector<std::pair<size_t, size_t>>& pairs, const StatsOptions& options = {});

// One comparison per row of a diff of A and B (rows with both sides compared; the others stay
// `compared == false`), as `diff --values` and the window's "Compare values" show them.
std::vector<ValueComparison> compareDiffRows(const Source& a, const Source& b, const DiffResult& diff, const StatsOptions& options = {});

// Keys of A (from `aEntries`) whose elements equal those of keys of B (from `bEntries`): same dtype,
// shape and bytes, found by content hash and confirmed byte by byte. Only A keys with a match are listed.
struct ContentMatch {
    size_t a = 0;
    std::vector<size_t> b; // more than one: B holds duplicates, the match is ambiguous
};
std::vector<ContentMatch> matchByContent(const Source& a, const std::vector<size_t>& aEntries, const Source& b,
    const std::vector<size_t>& bEntries, const StatsOptions& options = {});

// Groups of entries with identical dtype, shape and elements (two or more each, in entry order), and
// which of those share one storage (tied) rather than holding copies.
struct DuplicateGroup {
    std::vector<size_t> entries;
    bool tied = false; // every member views the same storage
};
std::vector<DuplicateGroup> findDuplicates(const Source& s, const std::vector<size_t>& entries, const StatsOptions& options = {});

} // namespace sl::values
