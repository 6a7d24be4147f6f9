#include "chunk_tiling.h"

#include <algorithm>
#include <compare>

namespace sl::distributed {

namespace {

constexpr uint64_t kCellAllowance = uint64_t(1) << 16;

bool empty(const ChunkBox& b)
{
    return std::any_of(b.sizes.begin(), b.sizes.end(), [](int64_t s) { return s == 0; });
}

} // namespace

ChunkTiling ChunkTiling::check(
    const Dims& shape, size_t count, const std::function<ChunkBox(size_t)>& box, uint64_t cellsPerPiece)
{
    ChunkTiling t;
    const size_t nd = shape.size();
    auto stop = [&](Verdict v, size_t a, size_t b = 0) {
        t.m_verdict = v;
        t.m_first = a;
        t.m_second = b;
        t.m_cells.clear();
        return t;
    };
    // Every piece inside the shape, and the elements they hold (saturating: volumes come from files).
    for (size_t i = 0; i < count; ++i) {
        const ChunkBox b = box(i);
        if (b.offsets.size() != nd || b.sizes.size() != nd)
            return stop(Verdict::Outside, i);
        uint64_t volume = 1;
        for (size_t d = 0; d < nd; ++d) {
            const int64_t o = b.offsets[d], s = b.sizes[d];
            if (o < 0 || s < 0 || o > shape[d] || s > shape[d] - o)
                return stop(Verdict::Outside, i);
            if (__builtin_mul_overflow(volume, static_cast<uint64_t>(s), &volume))
                volume = UINT64_MAX;
        }
        if (__builtin_add_overflow(t.m_covered, volume, &t.m_covered))
            t.m_covered = UINT64_MAX;
    }
    for (int64_t d : shape)
        if (d == 0)
            return t; // nothing to cover; every piece inside is empty

    // The grid: per dimension, every boundary some piece has.
    t.m_cuts.assign(nd, {});
    for (size_t d = 0; d < nd; ++d)
        t.m_cuts[d] = { 0, shape[d] };
    for (size_t i = 0; i < count; ++i) {
        const ChunkBox b = box(i);
        if (empty(b))
            continue;
        for (size_t d = 0; d < nd; ++d) {
            t.m_cuts[d].push_back(b.offsets[d]);
            t.m_cuts[d].push_back(b.offsets[d] + b.sizes[d]);
        }
    }
    uint64_t cells = 1;
    for (auto& c : t.m_cuts) {
        std::sort(c.begin(), c.end());
        c.erase(std::unique(c.begin(), c.end()), c.end());
        if (__builtin_mul_overflow(cells, static_cast<uint64_t>(c.size() - 1), &cells))
            cells = UINT64_MAX;
    }
    uint64_t budget = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(count), cellsPerPiece, &budget)
        || __builtin_add_overflow(budget, kCellAllowance, &budget))
        budget = UINT64_MAX;
    if (cells > budget || count > static_cast<size_t>(INT32_MAX))
        return stop(Verdict::Irregular, 0);

    // Paint each piece's cells; a cell painted twice is an overlap. Work stops at the first overlap, so it
    // never exceeds the cells plus one piece's worth.
    t.m_cells.assign(static_cast<size_t>(cells), -1);
    std::vector<size_t> lo(nd), hi(nd), at(nd);
    for (size_t i = 0; i < count; ++i) {
        const ChunkBox b = box(i);
        if (empty(b))
            continue;
        for (size_t d = 0; d < nd; ++d) {
            const auto& c = t.m_cuts[d];
            lo[d] = static_cast<size_t>(std::lower_bound(c.begin(), c.end(), b.offsets[d]) - c.begin());
            hi[d] = static_cast<size_t>(std::lower_bound(c.begin(), c.end(), b.offsets[d] + b.sizes[d]) - c.begin());
        }
        at = lo;
        while (true) {
            size_t cell = 0;
            for (size_t d = 0; d < nd; ++d)
                cell = cell * (t.m_cuts[d].size() - 1) + at[d];
            if (t.m_cells[cell] >= 0)
                return stop(Verdict::Overlap, static_cast<size_t>(t.m_cells[cell]), i);
            t.m_cells[cell] = static_cast<int32_t>(i);
            size_t d = nd;
            while (d-- > 0) {
                if (++at[d] < hi[d])
                    break;
                at[d] = lo[d];
            }
            if (d == SIZE_MAX)
                break;
        }
    }
    if (std::find(t.m_cells.begin(), t.m_cells.end(), -1) != t.m_cells.end())
        return stop(Verdict::Gap, 0);
    return t;
}

std::vector<size_t> distinctBoxes(size_t count, const std::function<ChunkBox(size_t)>& box)
{
    std::vector<size_t> order(count);
    for (size_t i = 0; i < count; ++i)
        order[i] = i;
    auto less = [&](size_t a, size_t b) {
        const ChunkBox x = box(a), y = box(b);
        if (auto c = std::lexicographical_compare_three_way(
                x.offsets.begin(), x.offsets.end(), y.offsets.begin(), y.offsets.end());
            c != 0)
            return c < 0;
        return std::lexicographical_compare(x.sizes.begin(), x.sizes.end(), y.sizes.begin(), y.sizes.end());
    };
    auto same = [&](size_t a, size_t b) {
        const ChunkBox x = box(a), y = box(b);
        return std::equal(x.offsets.begin(), x.offsets.end(), y.offsets.begin(), y.offsets.end())
            && std::equal(x.sizes.begin(), x.sizes.end(), y.sizes.begin(), y.sizes.end());
    };
    std::stable_sort(order.begin(), order.end(), less);
    std::vector<size_t> keep;
    for (size_t k = 0; k < order.size(); ++k)
        if (k == 0 || !same(order[k], order[k - 1]))
            keep.push_back(order[k]);
    std::sort(keep.begin(), keep.end());
    return keep;
}

int64_t ChunkTiling::pieceAt(const int64_t* index) const
{
    if (m_verdict != Verdict::Tiles || m_cells.empty())
        return -1;
    size_t cell = 0;
    for (size_t d = 0; d < m_cuts.size(); ++d) {
        const auto& c = m_cuts[d];
        auto it = std::upper_bound(c.begin(), c.end(), index[d]);
        if (it == c.begin() || it == c.end())
            return -1;
        cell = cell * (c.size() - 1) + static_cast<size_t>(it - c.begin() - 1);
    }
    return m_cells[cell];
}

} // namespace sl::distributed
