#pragma once
// One tensor as torch.save pickles it, matched opcode by opcode so the unpickler and the opcode scan can take
// it in one step instead of some thirty opcodes each: a state dict of 100,000 tensors is 100,000 of these.
//
//   GET _rebuild_tensor_v2  MARK  MARK 'storage' GET <storage class> <key> <location> <numel> TUPLE [PUT]
//   BINPERSID  <offset>  <size tuple> [PUT]  <stride tuple> [PUT]  NEWFALSE|NEWTRUE
//   GET OrderedDict  EMPTY_TUPLE  REDUCE [PUT]  TUPLE [PUT]  REDUCE [PUT]
//
// with each string a GET or a BINUNICODE (SHORT_BINUNICODE) literal with an optional PUT, each integer
// BININT1, BININT2, BININT or LONG1, and each tuple EMPTY_TUPLE, TUPLE1-3 or MARK ... TUPLE. The match is
// syntax only and changes nothing: what the values mean (is the first GET really _rebuild_tensor_v2?) is the
// caller's to check, and anything else, including the first tensor of a file (which names its globals with
// GLOBAL), is left to the opcode loop. A record whose PUTs overwrite a slot it also reads, or one slot twice,
// is not matched either, so its GETs and PUTs can be applied in any order.

#include "io/bytes.h"

#include <cstdint>
#include <string_view>

namespace sl::pickle {

struct TensorRecord {
    static constexpr size_t kMaxRank = 64; // as the torch layer's limit on dimensions
    static constexpr size_t kMaxPuts = 12;

    // A value the record takes: a memo slot it fetches (GET), or a string literal of the pickle.
    struct Ref {
        bool literal = false;
        uint64_t slot = 0; // GET
        std::string_view text; // literal: a view of the pickle's bytes
    };
    // What a PUT in the record stores. Args, PersistentId, Size, Stride and Hooks are values only the opcode
    // loop builds; Result is the tensor.
    enum class Part : uint8_t { Tag, Key, Location, PersistentId, Size, Stride, Hooks, Args, Result };
    struct Put {
        uint64_t slot = 0;
        Part part = Part::Result;
    };

    Ref callable, tag, storageClass, key, location, hooksCallable; // callable, storageClass, hooksCallable: GETs
    int64_t numel = 0;
    int64_t offset = 0;
    uint8_t rank = 0, strideRank = 0;
    bool requiresGrad = false;
    int64_t size[kMaxRank];
    int64_t stride[kMaxRank];
    Put puts[kMaxPuts];
    uint8_t putCount = 0;
    size_t end = 0; // the position after the record (after the result's PUT, when there is one)
    size_t lastOpcode = 0; // where its last opcode starts (the result's PUT, or the REDUCE): what the opcode
                           // loop names as the last one read, should the pickle end right after the record

    // Whether a PUT of this part stores a string literal (a GET is never followed by a PUT in a record).
    static bool isLiteral(Part p) { return p == Part::Tag || p == Part::Key || p == Part::Location; }
    // The text of a literal part.
    std::string_view literalOf(Part p) const { return p == Part::Tag ? tag.text : p == Part::Key ? key.text : location.text; }
};

// Matches the record starting at data[pos] (its first GET); false when the bytes are anything else.
bool matchTensorRecord(Bytes data, size_t pos, TensorRecord& out);

} // namespace sl::pickle
