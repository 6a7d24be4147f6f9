#pragma once
// "Untouched since init": values that suggest a tensor never received trained weights. A hint, not a
// verdict: a freshly initialised LayerNorm is all ones on purpose. Rules:
//   all zeros            every element is zero
//   all ones             every element is one
//   std far from peers   among tensors that differ only by layer or expert index (the same folded
//                        template, at least three of them), a standard deviation more than 10x away
//                        from the template's median (an expert left at its init value)

#include "model/source.h"
#include "values/tensor_stats.h"

#include <string>
#include <vector>

namespace sl::values {

// One hint per result (empty when nothing stands out), for the entries `stats` were computed for.
std::vector<std::string> initHints(const Source& s, const std::vector<TensorStatsResult>& stats);

} // namespace sl::values
