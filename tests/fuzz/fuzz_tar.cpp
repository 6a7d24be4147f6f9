// libFuzzer target: the tar member lister on its own, then the pre-0.1.10 torch.save tar layout
// (sys_info, storages, tensors, pickle members) through readTorchLegacy.

#include "fuzz_common.h"

#include "formats/torch_legacy_reader.h"
#include "io/input_file.h"
#include "io/tar_archive.h"

#include <cstdint>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string name = "fuzz.tar";
    auto file = sl::InputFile::fromBuffer(name, std::vector<uint8_t>(data, data + size));
    sl::fuzz::expectOnlyLoadError(name, [&] {
        try {
            for (const auto& m : sl::listTarMembers(*file))
                if (m.offset > size || m.size > size - m.offset)
                    sl::fuzz::die("tar member outside the archive", m.name.c_str());
        } catch (const sl::FormatError&) {
        }
    });
    if (sl::looksLikeTar(sl::Bytes(data, size)))
        sl::fuzz::expectOnlyLoadError(name, [&] {
            sl::Source s = sl::readTorchLegacy(file, {});
            sl::fuzz::exercise(s, name);
        });
    return 0;
}
