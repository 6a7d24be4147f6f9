#include "name_hash.h"

#include <xxhash.h>

namespace sl {

uint64_t nameHash64(std::string_view name) { return XXH3_64bits(name.data(), name.size()); }

} // namespace sl
