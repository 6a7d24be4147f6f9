// libFuzzer target: the safetensors reader on arbitrary bytes (header length, JSON header, offsets).

#include "fuzz_common.h"

#include "formats/safetensors_reader.h"
#include "io/input_file.h"

#include <cstdint>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string name = "fuzz.safetensors";
    auto file = sl::InputFile::fromBuffer(name, std::vector<uint8_t>(data, data + size));
    (void)sl::looksLikeSafetensors(sl::Bytes(data, size), size);
    sl::fuzz::expectOnlyLoadError(name, [&] {
        sl::Source s = sl::readSafetensors(file, {});
        sl::fuzz::exercise(s, name);
    });
    return 0;
}
