// libFuzzer target: legacy torch.save streams (magic, protocol, sys_info, the object pickle, storage keys,
// storage counts) and the pre-0.1.10 tar layout, both through readTorchLegacy.

#include "fuzz_common.h"

#include "formats/torch_legacy_reader.h"
#include "io/input_file.h"

#include <cstdint>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string name = "fuzz.pt";
    auto file = sl::InputFile::fromBuffer(name, std::vector<uint8_t>(data, data + size));
    (void)sl::looksLikeLegacyTorch(sl::Bytes(data, size));
    sl::fuzz::expectOnlyLoadError(name, [&] {
        sl::Source s = sl::readTorchLegacy(file, {});
        sl::fuzz::exercise(s, name);
    });
    return 0;
}
