#include "diff/name_diff.h"

#include <algorithm>
#include <cstdint>

namespace sl {

namespace {

std::vector<NameSpan> segmentsOf(std::string_view name)
{
    std::vector<NameSpan> out;
    forEachNameSegment(name, [&](std::string_view s) { out.push_back({ static_cast<size_t>(s.data() - name.data()), s.size() }); });
    return out;
}

} // namespace

std::vector<NameSpan> differingSegments(std::string_view name, std::string_view other)
{
    const std::vector<NameSpan> a = segmentsOf(name), b = segmentsOf(other);
    auto textA = [&](size_t i) { return name.substr(a[i].start, a[i].length); };
    auto textB = [&](size_t j) { return other.substr(b[j].start, b[j].length); };
    // Names have tens of segments: the quadratic table is small. Beyond that, no diff is drawn.
    constexpr size_t kMaxSegments = 256;
    if (a.size() > kMaxSegments || b.size() > kMaxSegments)
        return {};
    std::vector<std::vector<uint16_t>> lcs(a.size() + 1, std::vector<uint16_t>(b.size() + 1, 0));
    for (size_t i = a.size(); i-- > 0;)
        for (size_t j = b.size(); j-- > 0;)
            lcs[i][j] = textA(i) == textB(j) ? static_cast<uint16_t>(lcs[i + 1][j + 1] + 1) : std::max(lcs[i + 1][j], lcs[i][j + 1]);
    std::vector<bool> kept(a.size(), false);
    for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
        if (textA(i) == textB(j)) {
            kept[i] = true;
            ++i;
            ++j;
        } else if (lcs[i + 1][j] >= lcs[i][j + 1]) {
            ++i;
        } else {
            ++j;
        }
    }
    std::vector<NameSpan> out;
    for (size_t i = 0; i < a.size(); ++i) {
        if (kept[i] || a[i].length == 0)
            continue;
        NameSpan s = a[i];
        if (s.start + s.length < name.size())
            ++s.length; // the dot after it
        else if (s.start > 0)
            --s.start, ++s.length; // a last segment takes the dot before it
        if (!out.empty() && out.back().start + out.back().length >= s.start) {
            const size_t end = std::max(out.back().start + out.back().length, s.start + s.length);
            out.back().length = end - out.back().start;
        } else {
            out.push_back(s);
        }
    }
    return out;
}

} // namespace sl
