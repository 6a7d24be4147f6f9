#pragma once
// Members of a POSIX tar archive (ustar/pax/GNU), for torch.save's pre-0.1.10 layout. Headers are
// 512-byte blocks: name (100 bytes), size (12 octal digits at 124), type flag (at 156); data follows,
// padded to 512. pax ('x') and GNU long-name ('L') headers rename the next member.

#include "io/input_file.h"

#include <string>
#include <vector>

namespace sl {

struct TarMember {
    std::string name;
    uint64_t offset = 0; // of the data
    uint64_t size = 0;
};

// Regular-file members, from their headers (read with pread; members' data is not read). Throws FormatError
// on a malformed header or a member past the end.
std::vector<TarMember> listTarMembers(const InputFile& file);

// The "ustar" magic at offset 257 of the first header.
bool looksLikeTar(Bytes data);

} // namespace sl
