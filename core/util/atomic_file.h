#pragma once
// Outputs are written atomically: into a temporary file beside the target, flushed to disk, then renamed
// over it, so a crash or a full disk never leaves a half-written report or rule file behind.

#include <string>
#include <string_view>

namespace sl {

// Throws std::runtime_error naming the path when any step fails; the temporary file is removed then.
void writeFileAtomically(const std::string& path, std::string_view contents);

} // namespace sl
