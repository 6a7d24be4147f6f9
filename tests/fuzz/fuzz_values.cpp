// libFuzzer target: reading tensor values from arbitrary files (core/values). The input is written to a
// temporary file, opened by the loader (any format), and every tensor's bytes are read for statistics,
// compared with themselves and drawn as a thumbnail: hostile offsets, strides, storage sizes, dtypes and
// deflated records must end in a refused tensor or a LoadError, never a read outside the file.

#include "fuzz_common.h"

#include "values/tensor_compare.h"
#include "values/tensor_stats.h"
#include "values/thumbnail.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    static const std::string path = [] {
        char name[] = "/tmp/statelens-fuzz-values-XXXXXX";
        const int fd = ::mkstemp(name);
        if (fd < 0)
            sl::fuzz::die("mkstemp", name);
        ::close(fd);
        return std::string(name);
    }();
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0)
        sl::fuzz::die("cannot write the input to", path.c_str());
    sl::fuzz::expectOnlyLoadError(path, [&] {
        const sl::Source s = sl::openSource(path);
        std::vector<size_t> entries;
        std::vector<std::pair<size_t, size_t>> pairs;
        for (size_t i = 0; i < s.entries.size() && i < 64; ++i) {
            entries.push_back(i);
            pairs.emplace_back(i, i);
        }
        sl::values::StatsOptions o;
        o.threads = 1;
        o.bins = 8;
        o.pieceBytes = 4096; // many pieces: the merging paths run too
        (void)sl::values::computeStats(s, entries, o);
        (void)sl::values::compareValues(s, s, pairs, o);
        for (size_t i : entries)
            (void)sl::values::thumbnail(s, s.entries[i], 8);
    });
    return 0;
}
