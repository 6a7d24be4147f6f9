#pragma once
// One dataclass object as torch 2.x pickles it with protocol 4 or later (so every new value is MEMOIZEd),
// matched opcode by opcode so the unpickler and the load-safety scan can take it in one step instead of
// some twenty to thirty. A DCP .metadata is mostly three such classes, one of each per chunk:
// ChunkStorageMetadata in state_dict_metadata, and a MetadataIndex -> _StorageInfo pair in storage_data. A
// 256-rank save of a 70B model holds 555,000 chunks, and the graph the opcodes build for them (an object,
// its state dict and the tuples) was most of what the unpickler built.
//
//   GET <class>  EMPTY_TUPLE  NEWOBJ [MEMOIZE]  EMPTY_DICT [MEMOIZE]  MARK  (<key> <value>){1,kMaxFields}
//   SETITEMS  BUILD
//
// with each key a GET or a SHORT_BINUNICODE/BINUNICODE literal with an optional MEMOIZE, and each value one of
//   Int      BININT1, BININT2, BININT or LONG1 (up to 8 bytes)
//   None     NONE
//   Str      a string literal with an optional MEMOIZE
//   Fetched  a GET (a string or anything else met before; what it is is the caller's to check)
//   Size     GET <callable>  <int tuple> [MEMOIZE]  TUPLE1 [MEMOIZE]  REDUCE [MEMOIZE]   (torch.Size(...))
// and each int tuple EMPTY_TUPLE, TUPLE1-3 or MARK ... TUPLE of at most kMaxRank ints. As with the tensor
// record (pickle/tensor_record.h) the match is syntax only: which class, which keys and what the GETs fetch
// are the caller's to check. Only MEMOIZE stores: its slots are the memo's next ones, so none is one the
// record also reads (BINPUT, which may name any slot, ends the match).

#include "io/bytes.h"

#include <cstdint>
#include <string_view>

namespace sl::pickle {

struct DataclassRecord {
    static constexpr size_t kMaxFields = 4;
    static constexpr size_t kMaxRank = 4; // what the values built from a record hold inline; longer: opcodes
    static constexpr size_t kMaxMemoized = 2 + 4 * kMaxFields; // object, state; per field its key and a Size's three

    struct Ref { // a memo slot the record fetches (GET), or a string literal of the pickle
        bool literal = false;
        uint64_t slot = 0;
        std::string_view text;
    };
    enum class Form : uint8_t { Int, None, Str, Fetched, Size };
    struct Field {
        Ref key;
        Form form = Form::None;
        int64_t integer = 0; // Int
        Ref str; // Str (a literal) and Fetched (a GET)
        uint64_t sizeSlot = 0; // Size: the callable's GET
        int64_t dims[kMaxRank] = {}; // Size
        uint8_t rank = 0;
    };
    // What each MEMOIZE of the record stores, in order: the object, its state dict, or a field's key, string
    // value, or the int tuple, argument tuple and result of its Size.
    enum class Part : uint8_t { Object, State, Key, Str, Tuple, Args, Size };
    struct Memoized {
        Part part = Part::Object;
        uint8_t field = 0;
    };

    uint64_t classSlot = 0;
    Field fields[kMaxFields];
    uint8_t fieldCount = 0;
    Memoized memoized[kMaxMemoized];
    uint8_t memoizedCount = 0;
    size_t end = 0; // the position after the record (after BUILD)

    static bool isLiteral(Part p) { return p == Part::Key || p == Part::Str; }
    // The text of a memoised literal (isLiteral).
    std::string_view literalOf(Memoized m) const { return m.part == Part::Key ? fields[m.field].key.text : fields[m.field].str.text; }
};

// Whether records of a class of this name are worth matching: the three a DCP .metadata holds one of per
// chunk. By name only: the unpickler's semantics also checks the module; the scan's effects do not depend
// on the class.
bool isLaneDataclass(std::string_view className);

// Matches the record starting at data[pos] (its first GET); false when the bytes are anything else.
bool matchDataclassRecord(Bytes data, size_t pos, DataclassRecord& out);

} // namespace sl::pickle
