#pragma once
// Files compiled into the statelens binary: the demo pair a first launch opens.

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace sl::demo {

struct EmbeddedFile {
    std::string_view name;
    std::span<const unsigned char> bytes;
};

// checkpoint.pt (A: what is loaded) and model.pt (B: what the model expects), in that order.
const std::vector<EmbeddedFile>& files();

} // namespace sl::demo

namespace sl::helper {

using demo::EmbeddedFile;

// statelens_dump.py (resources/python), the live-dump helper `statelens dump-helper DIR` writes out.
const std::vector<EmbeddedFile>& files();

} // namespace sl::helper
