#pragma once
// A read-only view of bytes: what every parser takes (a file's region, an in-memory buffer).

#include <cstdint>
#include <span>

namespace sl {

using Bytes = std::span<const uint8_t>;

// The unsigned little-endian integer of `width` bytes (at most 8) at d[pos], the range checked by the caller:
// zip fields, and the length prefixes a pickle's strings are read again from.
inline uint64_t littleEndianAt(Bytes d, size_t pos, unsigned width)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < width; ++i)
        v |= uint64_t(d[pos + i]) << (8 * i);
    return v;
}

} // namespace sl
