#pragma once
// The number of elements a shape holds: 0 for any zero or negative dimension, saturating at UINT64_MAX
// instead of wrapping (shapes come from files; readers check them, this stays safe regardless). The
// overflow builtin, not a division per dimension: it runs for every entry of a 100,000-entry listing.

#include "model/dims.h"
#include "model/dtype.h"

#include <cstdint>
#include <span>

namespace sl {

inline uint64_t shapeVolume(std::span<const int64_t> shape)
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
inline uint64_t shapeVolume(const Dims& shape) { return shapeVolume(std::span<const int64_t>(shape.data(), shape.size())); }

// Bytes `numel` elements of `dtype` occupy (numel * bits / 8, rounded up), saturating at UINT64_MAX.
inline uint64_t tensorBytes(uint64_t numel, DType dtype)
{
    uint64_t bits = 0;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtypeBits(dtype)), &bits) || bits > UINT64_MAX - 7)
        return UINT64_MAX;
    return (bits + 7) / 8;
}

} // namespace sl
