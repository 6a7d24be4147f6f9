#pragma once
// Outputs are written atomically: into a temporary file beside the target, flushed to disk, then renamed
// over it, so a crash or a full disk never leaves a half-written report or rule file behind. Only a regular
// file (keeping its permissions) or a path that does not exist yet is replaced that way; a symlink is written
// through (the file it points to is replaced beside itself, the link stays), a FIFO or a device is written
// straight into (`-o /dev/null` leaves /dev/null a device), a directory is an error.
// Whether the path is an input is the caller's question (io/file_trust.h).

#include <string>
#include <string_view>

namespace sl {

// Throws std::runtime_error naming the path when any step fails; the temporary file is removed then.
void writeFileAtomically(const std::string& path, std::string_view contents);

} // namespace sl
