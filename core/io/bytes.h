#pragma once
// A read-only view of bytes: what every parser takes (a file's region, an in-memory buffer).

#include <cstdint>
#include <span>

namespace sl {

using Bytes = std::span<const uint8_t>;

} // namespace sl
