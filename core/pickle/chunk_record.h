#pragma once
// One chunk of a torch.distributed.checkpoint tensor as torch 2.x pickles it in `.metadata` (a
// ChunkStorageMetadata dataclass; protocol 4 or later, so every new value is MEMOIZEd), matched opcode by
// opcode so the unpickler can take it in one step instead of some twenty-five: a 256-rank save of a 70B
// model holds 555,000 of them, and their graph (an object, its state dict, two int tuples and the tuples
// around them) was most of what the unpickler built.
//
//   GET <class>  EMPTY_TUPLE  NEWOBJ [MEMOIZE]  EMPTY_DICT [MEMOIZE]  MARK
//     <key>  GET <torch.Size>  <int tuple> [MEMOIZE]  TUPLE1 [MEMOIZE]  REDUCE [MEMOIZE]
//     <key>  GET <torch.Size>  <int tuple> [MEMOIZE]  TUPLE1 [MEMOIZE]  REDUCE [MEMOIZE]
//   SETITEMS  BUILD
//
// with each key a GET or a SHORT_BINUNICODE/BINUNICODE literal with an optional MEMOIZE, each int BININT1,
// BININT2, BININT or LONG1 (up to 8 bytes), and each int tuple EMPTY_TUPLE, TUPLE1-3 or MARK ... TUPLE of at
// most kMaxRank. As with the tensor record (pickle/tensor_record.h) the match is syntax only: what the GETs
// fetch and what the keys say is the caller's to check. Only MEMOIZE stores: its slots are the memo's next
// ones, so none is one the record also reads (BINPUT, which may name any slot, ends the match).

#include "io/bytes.h"

#include <cstdint>
#include <string_view>

namespace sl::pickle {

struct ChunkRecord {
    static constexpr size_t kMaxRank = 4; // what the chunk value holds inline; longer chunks take the opcodes
    static constexpr size_t kMaxMemoized = 10;

    struct Ref { // a memo slot the record fetches (GET), or a string literal of the pickle
        bool literal = false;
        uint64_t slot = 0;
        std::string_view text;
    };
    // What each MEMOIZE of the record stores, in order.
    enum class Part : uint8_t { Object, State, Key0, Tuple0, Args0, Size0, Key1, Tuple1, Args1, Size1 };

    uint64_t classSlot = 0;
    Ref key[2];
    uint64_t sizeSlot[2] = {};
    int64_t dims[2][kMaxRank] = {};
    uint8_t rank[2] = {};
    Part memoized[kMaxMemoized] = {};
    uint8_t memoizedCount = 0;
    size_t end = 0; // the position after the record (after BUILD)

    static bool isKey(Part p) { return p == Part::Key0 || p == Part::Key1; }
    std::string_view keyText(Part p) const { return key[p == Part::Key0 ? 0 : 1].text; }
};

// Matches the record starting at data[pos] (its first GET); false when the bytes are anything else.
bool matchChunkRecord(Bytes data, size_t pos, ChunkRecord& out);

} // namespace sl::pickle
