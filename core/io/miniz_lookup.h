#pragma once
// Which record torch reads when a zip holds several records of one name.
//
// torch.load and torch.jit.load read archives with caffe2's PyTorchStreamReader
// (caffe2/serialize/inline_container.cc, v1.13.1 and v2.6.0 alike), which finds every record with
// miniz's `mz_zip_reader_locate_file(archive, "<folder>/<name>", nullptr, 0)`. With no flags miniz does
// not scan the central directory: at open (`mz_zip_reader_init` without MZ_ZIP_FLAG_DO_NOT_SORT_...) it
// heap-sorts an index of the central directory by name (`mz_zip_reader_sort_central_dir_offsets_by_
// filename`, comparing with `mz_zip_reader_filename_less`: ASCII-lowercased bytes, then length), and a
// lookup binary-searches that index (`mz_zip_locate_file_binary_search`), returning the first probe
// that compares equal. A heap sort is not stable, so of several equal names the one found depends on
// the whole archive's layout and the names around them, not simply the first or the last (the hostile
// fixtures have layouts where torch reads the first, the middle and the last of three copies).
//
// torch 1.13 vendors miniz 2.1.0 (mz_version "10.1.0"), torch 2.6 miniz 3.0.2 ("11.0.2"); the four
// functions above are the same in both (and in 2.0.8, older torch), so one implementation answers for
// both versions. This is our own implementation of that algorithm, step for step (the same sift-down
// order and comparisons; any difference changes which duplicate is found); tests check it against what
// real torch 1.13 and 2.6 load from the same files (tests/fixtures/make_hostile_fixtures.py,
// tests/fixtures/make_hostile_duplicates_torch2.py).
//
// Case-insensitive, as miniz is: a lookup of "a/data.pkl" may find a record named "a/DATA.PKL".

#include <cstdint>
#include <string_view>
#include <vector>

namespace sl {

struct ZipEntry;

class MinizLookup {
public:
    static constexpr size_t npos = SIZE_MAX;

    // Builds the sorted index over `entries` (central-directory order). O(n log n) name comparisons;
    // ZipArchive builds one only for archives whose names repeat (exactly or ignoring case).
    explicit MinizLookup(const std::vector<ZipEntry>& entries);

    // Position in `entries` of the record mz_zip_reader_locate_file(name, nullptr, 0) returns, or npos.
    // `entries` must be the vector the index was built from.
    size_t locate(const std::vector<ZipEntry>& entries, std::string_view name) const;

    // miniz's mz_zip_filename_compare (and mz_zip_reader_filename_less: compare(a, b) < 0): lowercased
    // bytes, then length. 0 when the names are equal ignoring ASCII case.
    static int compare(std::string_view a, std::string_view b);

private:
    std::vector<uint32_t> m_sorted; // positions in entries, in miniz's sorted order
};

} // namespace sl
