#pragma once
// One item of a state dict: a tensor (dense, quantized, subclass, view), a group of tensors that form one
// logical parameter, or a non-tensor value that still occupies a key (`_extra_state`, `_packed_params.dtype`).
// Readers fill what their format knows; later stages (sharding, quantization, values) add to `attributes`
// and `parts` instead of reshaping this struct.

#include "compact_dims.h"
#include "compact_string.h"
#include "compact_vector.h"
#include "dims.h"
#include "dtype.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sl {

using Shape = Dims;

// Where a tensor's bytes live. Offsets are absolute byte offsets in `Source::files[file]`.
struct TensorLocation {
    enum class Kind : uint8_t {
        None, // no bytes anywhere: meta tensors, storage-less wrapper subclasses, non-tensor values
        Mapped, // plain bytes at [offset, offset+length) of the file
        Compressed, // inside a deflated zip record; `offset` is the record's data offset
        Transformed, // a DCP item stored through stream transforms (zstd); [offset, offset+length) is the item
        Inline, // bytes embedded in the pickle itself (numpy arrays, XLA tensors)
        Unavailable, // the file that holds them is missing or unreadable
    };
    Kind kind = Kind::None;
    int32_t file = -1; // index into Source::files
    uint64_t offset = 0; // first byte of this tensor's span
    uint64_t length = 0; // bytes spanned by the view (0 for an empty tensor)
    // The storage the tensor views. Tensors with the same non-empty storageId in the same file share bytes
    // (tied weights, views; sharesStorageWith); storageOffset and strides are in elements, as torch reports
    // them. Ids are the file's own ("0", "1", ... in a torch.save zip), so each shard of an index has its "0".
    CompactString storageId;
    uint64_t storageByteOffset = 0; // absolute offset of the storage's first byte
    uint64_t storageNbytes = 0;
    int64_t storageOffset = 0;
    CompactDims strides; // empty when the reader only knows the tensor is contiguous

    bool sharesStorageWith(const TensorLocation& other) const
    {
        return !storageId.empty() && file == other.file && storageId == other.storageId;
    }
};

// How a tensor is split across ranks or files. `Entry::shape` is always the global (logical) shape; the
// piece one rank or one file holds is described here.
struct ShardChunk {
    Shape offsets; // where the piece starts in the global tensor, per dimension
    Shape sizes; // its extent
    int32_t file = -1; // Source::files index holding its bytes, -1 when not known
    // DCP: byteOffset and byteLength are the item holding the chunk (a torch.save archive or a safetensors
    // blob), not yet read; where the elements start in it is found when values are read (formats/dcp_item.h).
    // (Beside `file`, where it costs no padding: a 256-rank save has 555,987 chunks.)
    bool inItem = false;
    // DCP: the item is stored through stream transforms (torch 2.x `_extensions`, zstd): its range is the
    // transformed bytes', which StateLens does not undo; `label` names the transforms.
    bool transformed = false;
    uint64_t byteOffset = 0; // its bytes in that file (byteLength 0 when not known)
    uint64_t byteLength = 0;
    CompactDims strides; // in elements, when the piece is stored as a view (a rank's local tensor); empty: row-major
    std::string label; // "rank 1", "__0_0.distcp", ...
};

struct Sharding {
    enum class Kind : uint8_t {
        DTensor, // torch.distributed.tensor: placements over a device mesh (FSDP2, tensor parallel)
        ShardedTensor, // torch.distributed._shard ShardedTensor (FSDP1 SHARDED_STATE_DICT)
        FlatParameter, // FSDP1 LOCAL_STATE_DICT: a 1-D slice of a unit's flattened parameters
        DcpChunks, // torch.distributed.checkpoint: the global tensor's chunks in .distcp files
        PerRankFiles, // one torch.save file per rank, opened together
    };
    Kind kind = Kind::DTensor;
    Shape localShape; // the piece this source holds (DTensor, ShardedTensor, per-rank files)
    std::vector<std::string> placements; // "Shard(0)", "Replicate()", "Partial(sum)", "_StridedShard(0, sf=2)"
    Shape meshShape;
    std::vector<std::string> meshDimNames;
    std::vector<ShardChunk> chunks; // every known piece, for DCP the union over all ranks
};
std::string_view shardingKindName(Sharding::Kind k);

// One logical parameter stored quantized. The entry's dtype and shape are the logical ones (what the
// float weight was); `parts` hold the stored tensors (qdata, scale, absmax, qweight, ...).
struct Quantization {
    std::string scheme; // "torchao.Float8Tensor", "bitsandbytes.nf4", "gptq", "fp8.block", "torch.ao.per_channel"
    DType storageDType = DType::Unknown; // how the values are stored (uint8, int32, float8_e4m3fn, qint8)
    std::vector<std::pair<std::string, std::string>> params; // block size, group size, bits, axis, ...
    bool logicalShapeKnown = true; // false when only the packed layout is known
    const std::string* param(std::string_view key) const; // nullptr when absent
};

enum class EntryKind : uint8_t {
    Tensor,
    Group, // one logical parameter stored as several tensors (quantized weights, packed params)
    Object, // a non-tensor value under a state-dict key
};

struct Entry {
    std::string name;
    // The small fields sit together: padding after each would cost 16 bytes an entry (a state dict holds
    // hundreds of thousands, and the parts of quantized groups are entries too).
    EntryKind kind = EntryKind::Tensor;
    DType dtype = DType::Unknown;
    // False when the source names the key but not its shape (a missing shard, a key in an error message):
    // then `shape` is empty and means "unknown", not a 0-d tensor.
    bool shapeKnown = true;
    bool requiresGrad = false;
    bool isParameter = false; // saved as torch.nn.Parameter
    Shape shape;
    TensorLocation location;

    CompactString device; // "cpu", "cuda:0", "meta", ...; empty when the format does not say
    CompactString typeName; // tensor subclass or Python class ("torch.distributed.tensor.DTensor", "int")
    CompactString value; // short repr of an Object entry's value

    // Format- and stage-specific facts shown as-is (qscheme, scale, placements, "header_shape", ...).
    CompactVector<std::pair<std::string, std::string>> attributes;
    // Component tensors of a Group, or the inner tensors of a wrapper subclass; `name` holds the role.
    CompactVector<Entry> parts;
    // Set when the tensor is sharded or quantized; shared so copying an entry stays cheap.
    std::shared_ptr<const Sharding> sharding;
    std::shared_ptr<const Quantization> quantization;

    uint64_t numel() const;
    // Bytes the tensor's elements occupy (numel * bits / 8, rounded up); 0 for non-tensors.
    uint64_t nbytes() const;
    const std::string* attribute(std::string_view key) const;
    const Entry* part(std::string_view role) const; // the part with this role (`name`), or nullptr
};

// "[2, 3]" as torch.Size prints inside brackets.
std::string shapeToString(const Shape& s);

} // namespace sl
