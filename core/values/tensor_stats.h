#pragma once
// Statistics of tensor values, read from the source only when asked: min, max, mean and standard
// deviation over the finite values, counts of NaN, +Inf, -Inf and zeros, a histogram with a chosen number
// of bins, and a content hash of the elements in logical order.
//
// How: each tensor is cut into pieces of 4 MiB of elements; the pieces of all tensors run on every core,
// each read with pread into a reused buffer (the resident set stays at a few buffers per thread whatever
// the checkpoint's size; touching the mapping instead would make every page read resident).
//   - 8- and 16-bit dtypes (fp16, bf16, fp8, int8, ...) are counted by bit pattern: one sweep fills a 256-
//     or 65,536-entry table per tensor, and every statistic and the histogram follow exactly from it.
//   - Wider dtypes are decoded block by block (element_decode.h) into a small buffer that stays in cache;
//     a block's mean and squared deviations come from two passes over it and are merged with Chan's
//     formula, so the variance stays accurate over billions of values. The histogram needs the tensor's
//     range first, so it is a second sweep.
// Why not ATen: loading LibTorch costs ~370 ms per process here, ATen makes one pass per statistic over a
// converted copy, and LibTorch 1.13 has no float8 types; the tests hold these results to torch's own.
//
// Conventions, matching what the tests check against torch: the standard deviation is torch's default
// (unbiased, correction 1); the histogram is torch.histc over the finite values with min and max the
// finite range, a value equal to max landing in the last bin; when every finite value is equal they all
// land in bin 0. The hash is XXH3-64 of the elements' bytes (little-endian, in their own dtype, row-major):
// of the bytes themselves for tensors up to one piece, else of the list of the pieces' hashes, so equal
// tensors hash equal however they are strided or stored. Quantized groups and packed float4 tensors are
// summarised from their values (value_reader.h: dequantized as their library computes them), and their hash
// is of those values as float64.

#include "model/source.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace sl {
class LoadControl;
}

namespace sl::values {

struct TensorStats {
    uint64_t numel = 0;
    uint64_t finite = 0;
    uint64_t nan = 0;
    uint64_t posInf = 0;
    uint64_t negInf = 0;
    uint64_t zeros = 0;
    double min = 0; // over finite values; meaningless when finite == 0
    double max = 0;
    double mean = 0;
    double m2 = 0; // sum of squared deviations from the mean
    double sum() const { return mean * static_cast<double>(finite); }
    // Unbiased (torch's default); nullopt with fewer than two finite values.
    std::optional<double> std() const;
    std::vector<uint64_t> histogram; // empty when there are no finite values or no bins were asked for
    // Of the stored bytes (for torch.ao tensors too, whose statistics are of dequantized values); of the
    // float64 values for groups (see above).
    uint64_t hash = 0;
    // How the values were read: "" for plain tensors, "dequantized (torch.ao per-tensor affine)",
    // "dequantized: bitsandbytes nf4, ...", or why a quantized tensor's statistics are of its stored integers.
    std::string note;
};

struct StatsOptions {
    unsigned bins = 16;
    unsigned threads = 0; // 0: one per core
    // Logical bytes per piece (the unit of parallel work). The hash of a tensor longer than one piece is
    // built from its pieces' hashes, so hashes compare only between runs with the same piece size.
    uint64_t pieceBytes = uint64_t(4) << 20;
    // Quantized tensors whose scheme is known (torch.ao per-tensor and per-channel affine; the groups of
    // value_reader.h) are summarised dequantized, as their library computes them; off (or a scheme not
    // dequantized): the stored integers, of a group's main part (listed first), with a note saying so.
    bool dequantize = true;
    const LoadControl* control = nullptr; // progress (in pieces) and cancellation
};

struct TensorStatsResult {
    size_t entry = 0; // index into the source's entries
    std::optional<TensorStats> stats;
    std::string skipped; // why there are no stats (not a tensor, bytes not reachable, ...)
};

// Statistics of the given entries, in the given order. Throws LoadCancelled when cancelled.
std::vector<TensorStatsResult> computeStats(const Source& source, const std::vector<size_t>& entries, const StatsOptions& options = {});
// The same, handed over batch by batch (in order; the callee may move from the batch), so that a caller
// writing them out never holds all of them.
void computeStats(const Source& source, const std::vector<size_t>& entries, const StatsOptions& options,
    const std::function<void(std::vector<TensorStatsResult>&)>& batchDone);

} // namespace sl::values
