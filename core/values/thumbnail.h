#pragma once
// A downsampled picture of a weight for the details panel: the tensor viewed as a matrix (dimension 0 by
// the product of the others) and averaged over blocks into at most `maxSide` x `maxSide` cells, streaming
// the values once in logical order (memory: the cells; quantized weights dequantized, value_reader.h).
// Non-finite values are left out of the averages.

#include "model/source.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sl {
class LoadControl;
}

namespace sl::values {

struct Thumbnail {
    int rows = 0;
    int cols = 0;
    std::vector<float> cells; // rows * cols, row-major; NaN where a block held no finite value
    float min = 0; // over the cells
    float max = 0;
};

// Nullopt (with why) for tensors with fewer than two dimensions or unreachable bytes.
std::optional<Thumbnail> thumbnail(const Source& s, const Entry& e, int maxSide, std::string* why = nullptr,
    const LoadControl* control = nullptr);

} // namespace sl::values
