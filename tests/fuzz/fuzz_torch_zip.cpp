// libFuzzer target: torch.save zip archives: the zip reader (end records, ZIP64, central directory, local
// headers, deflate), data.pkl through the pickle VM with torch semantics, and storage record lookup.
// Also the format sniffer and the public in-memory entry point.

#include "fuzz_common.h"

#include "formats/torch_zip_reader.h"
#include "io/input_file.h"
#include "io/zip_archive.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

// The zip layer on its own, reading every record the way a caller might.
void zipAlone(const sl::InputFile& file)
{
    try {
        sl::ZipArchive zip(file);
        std::vector<uint8_t> buffer;
        size_t n = 0;
        for (const auto& e : zip.entries()) {
            if (++n > 64)
                break;
            (void)zip.find(e.name);
            try {
                (void)zip.dataOffset(e);
                (void)zip.contents(e, buffer, 1 << 20);
            } catch (const sl::FormatError&) {
            }
        }
    } catch (const sl::FormatError&) {
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string name = "fuzz.pt";
    std::vector<uint8_t> bytes(data, data + size);
    auto file = sl::InputFile::fromBuffer(name, bytes);
    sl::fuzz::expectOnlyLoadError(name, [&] { zipAlone(*file); });
    sl::fuzz::expectOnlyLoadError(name, [&] {
        sl::Source s = sl::readTorchZip(file, {});
        sl::fuzz::exercise(s, name);
    });
    // Through the sniffer, as `statelens ls` opens files: a state dict of plain tensors handed over as rows
    // (model/entry_list.h). Its table, and the entries built from the rows, are those of the entries built
    // as the file is read.
    if (sl::looksLikeZip(bytes))
        sl::fuzz::expectOnlyLoadError(name, [&] {
            sl::OpenOptions ls;
            ls.deferEntries = true;
            const sl::Source rows = sl::openSourceFromMemory(name, bytes, ls);
            const sl::Source built = sl::openSourceFromMemory(name, std::move(bytes));
            if (sl::sourceToTable(rows) != sl::sourceToTable(built) || sl::sourceToJson(rows) != sl::sourceToJson(built)) {
                std::fprintf(stderr, "the listing from rows differs from the one from entries\n");
                std::abort();
            }
        });
    return 0;
}
