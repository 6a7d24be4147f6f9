#include "miniz_lookup.h"

#include "io/zip_archive.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace sl {

namespace {

// MZ_TOLOWER: ASCII only, on unsigned bytes.
inline uint8_t lower(char c)
{
    const auto b = static_cast<uint8_t>(c);
    return b >= 'A' && b <= 'Z' ? static_cast<uint8_t>(b - 'A' + 'a') : b;
}

} // namespace

int MinizLookup::compare(std::string_view a, std::string_view b)
{
    // Lowercased bytes up to the shorter length; the first difference decides, else the shorter is less.
    const size_t n = std::min(a.size(), b.size());
    for (size_t i = 0; i < n; ++i) {
        const uint8_t l = lower(a[i]), r = lower(b[i]);
        if (l != r)
            return int(l) - int(r);
    }
    return a.size() < b.size() ? -1 : a.size() > b.size() ? 1 : 0;
}

MinizLookup::MinizLookup(const std::vector<ZipEntry>& entries)
{
    if (entries.size() >= UINT32_MAX)
        throw std::length_error("MinizLookup: more records than miniz indexes");
    const size_t size = entries.size();
    m_sorted.resize(size);
    for (size_t i = 0; i < size; ++i)
        m_sorted[i] = static_cast<uint32_t>(i); // miniz starts from central-directory order
    if (size <= 1)
        return;
    auto less = [&](size_t i, size_t j) { return compare(entries[m_sorted[i]].name, entries[m_sorted[j]].name) < 0; };
    // The sift-down of mz_zip_reader_sort_central_dir_offsets_by_filename: the larger child (the right one
    // only when strictly larger), and stop unless the root is strictly less than it.
    auto siftDown = [&](size_t root, size_t end) {
        for (;;) {
            size_t child = 2 * root + 1;
            if (child >= end)
                break;
            if (child + 1 < end && less(child, child + 1))
                ++child;
            if (!less(root, child))
                break;
            std::swap(m_sorted[root], m_sorted[child]);
            root = child;
        }
    };
    // Build the max-heap from the last parent down to the root, then move the root to the end one by one.
    for (size_t start = (size - 2) / 2;; --start) {
        siftDown(start, size);
        if (start == 0)
            break;
    }
    for (size_t end = size - 1; end > 0; --end) {
        std::swap(m_sorted[end], m_sorted[0]);
        siftDown(0, end);
    }
}

size_t MinizLookup::locate(const std::vector<ZipEntry>& entries, std::string_view name) const
{
    // torch passes a C string: miniz's strlen stops at a NUL inside the name.
    if (size_t nul = name.find('\0'); nul != std::string_view::npos)
        name = name.substr(0, nul);
    // mz_zip_locate_file_binary_search: the first probe that compares equal wins.
    int64_t l = 0, h = static_cast<int64_t>(m_sorted.size()) - 1;
    while (l <= h) {
        const int64_t m = l + ((h - l) >> 1);
        const uint32_t index = m_sorted[static_cast<size_t>(m)];
        const int c = compare(entries[index].name, name);
        if (c == 0)
            return index;
        if (c < 0)
            l = m + 1;
        else
            h = m - 1;
    }
    return npos;
}

} // namespace sl
