#pragma once
// The number of elements a shape holds: 0 for any zero or negative dimension, saturating at UINT64_MAX
// instead of wrapping (shapes come from files; readers check them, this stays safe regardless). The
// overflow builtin, not a division per dimension: it runs for every entry of a 100,000-entry listing.

#include "model/dims.h"

#include <cstdint>

namespace sl {

inline uint64_t shapeVolume(const Dims& shape)
{
    uint64_t n = 1;
    for (int64_t d : shape) {
        if (d <= 0)
            return 0;
        if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n))
            return UINT64_MAX;
    }
    return n;
}

} // namespace sl
