#pragma once
// The hash of a tensor name, for every name index and duplicate check (NameIndex, the safetensors header's
// duplicate names). XXH3 (libxxhash, already here for value hashes) takes half the time of std::hash's
// MurmurHash on names of 30 to 60 bytes (5 ns against 9 ns), and a listing hashes each name once or
// twice: 90,000-100,000 of them in the benchmark's large cases.

#include <cstdint>
#include <string_view>

namespace sl {

uint64_t nameHash64(std::string_view name);

} // namespace sl
