#pragma once
// Whether the pieces of a sharded tensor (DCP chunks, the pieces of per-rank files) tile it, and which
// piece holds a given element. One home for the three places that ask: listing a DCP checkpoint, merging
// per-rank files, and assembling values.
//
// How: every real layout is a grid. Each dimension is cut at a few boundaries (torch.chunk pieces per
// mesh dimension), and every piece is a block of whole grid cells. The cuts of all pieces, per dimension,
// give the grid; painting its cells with piece numbers finds an overlap (a cell painted twice) or a gap
// (a cell never painted) in time linear in the cells, which a grid layout has as many of as pieces, and
// locates an element by one binary search per dimension. Comparing pieces pairwise instead took 48 s for
// 100,000 chunks. A layout whose cells would far outnumber its pieces (staggered cuts no sharding writes)
// is reported as irregular rather than checked at any cost.

#include "model/dims.h"

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace sl::distributed {

struct ChunkBox {
    ChunkBox(const Dims& o, const Dims& s)
        : offsets(o.data(), o.size())
        , sizes(s.data(), s.size())
    {
    }
    ChunkBox(const std::vector<int64_t>& o, const std::vector<int64_t>& s)
        : offsets(o)
        , sizes(s)
    {
    }
    std::span<const int64_t> offsets, sizes;
};

class ChunkTiling {
public:
    enum class Verdict : uint8_t {
        Tiles, // every element in exactly one piece
        Outside, // piece `first` has the wrong rank or runs past the shape (or is negative)
        Overlap, // pieces `first` and `second` share elements
        Gap, // some element is in no piece; covered() says how many are
        Irregular, // the cuts make far more cells than pieces: not checked
    };

    // `box(i)` gives piece i of `count`. Pieces with no elements (a zero size) are ignored, as torch.chunk's
    // empty trailing pieces are. `cellsPerPiece` bounds the work: the grid may have at most that many cells
    // per piece (plus a fixed allowance) before the layout counts as irregular.
    static ChunkTiling check(
        const Dims& shape, size_t count, const std::function<ChunkBox(size_t)>& box, uint64_t cellsPerPiece = 8);

    Verdict verdict() const { return m_verdict; }
    size_t first() const { return m_first; }
    size_t second() const { return m_second; }
    // Elements in some piece (overlaps counted once per piece); meaningful for Gap.
    uint64_t covered() const { return m_covered; }
    // The piece holding the element at `index` (one coordinate per dimension), or -1: only after Tiles.
    int64_t pieceAt(const int64_t* index) const;

private:
    Verdict m_verdict = Verdict::Tiles;
    size_t m_first = 0, m_second = 0;
    uint64_t m_covered = 0;
    std::vector<std::vector<int64_t>> m_cuts; // per dimension: sorted distinct boundaries, 0 and size included
    std::vector<int32_t> m_cells; // row-major over the grid: the piece in each cell
};

// The pieces that are not an earlier piece's exact copy (replicas: the same box saved by several ranks), in
// their original order. Sorting makes it n log n.
std::vector<size_t> distinctBoxes(size_t count, const std::function<ChunkBox(size_t)>& box);

} // namespace sl::distributed
