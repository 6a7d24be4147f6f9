#pragma once
// Entries moved from one Source into another that lists the first one's files from `base` on (the shards of
// an index, the files of a per-rank set): every file index an entry carries moves with them: its own
// location's, its parts' (a torchao tensor's qdata and scale, a group's weight and scale) and its pieces'
// (a DTensor's chunks). Readers number their own files from 0.

#include "entry.h"

#include <algorithm>
#include <memory>

namespace sl {

inline void shiftFileIndices(Entry& e, int32_t base)
{
    if (base == 0)
        return;
    if (e.location.file >= 0)
        e.location.file += base;
    for (Entry& part : e.parts)
        shiftFileIndices(part, base);
    // The pieces are shared with the source they came from (and its other entries): changed in a copy.
    const auto located = [](const ShardChunk& c) { return c.file >= 0; };
    if (e.sharding && std::any_of(e.sharding->chunks.begin(), e.sharding->chunks.end(), located)) {
        auto sharding = std::make_shared<Sharding>(*e.sharding);
        for (ShardChunk& c : sharding->chunks)
            if (c.file >= 0)
                c.file += base;
        e.sharding = std::move(sharding);
    }
}

} // namespace sl
