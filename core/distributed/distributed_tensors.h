#pragma once
// Distributed tensor subclasses inside torch.save pickles: DTensor (torch.distributed.tensor and
// torch.distributed._tensor), ShardedTensor (torch.distributed._shard), and FSDP1 flat parameters.
// Called while a tensor becomes an entry; fills Entry::sharding and keeps Entry::shape the global shape.
//
// Pickled layouts (docs/on-disk-formats.md, "Distributed tensors in torch.save pickles" and "Names: wrapper
// prefixes and optimizer state"; "Looking at the bytes yourself" there prints them from the fixtures):
//
//   DTensor      _rebuild_from_type_v2(_rebuild_wrapper_subclass, DTensor,
//                    (DTensor, dtype, GLOBAL size, GLOBAL stride, 0, layout, device, requires_grad),
//                    (None, {'_local_tensor': <this rank's tensor>, '_spec': DTensorSpec}))
//                class torch.distributed.tensor.DTensor (2.5+) or torch.distributed._tensor.api.DTensor
//                (2.0-2.4); any class named DTensor under torch.distributed.* is taken.
//   DTensorSpec  NEWOBJ + BUILD {'mesh': DeviceMesh, 'placements': (p, ...), 'tensor_meta': TensorMeta, ...}
//   TensorMeta   NamedTuple (shape, stride, dtype): NEWOBJ with those args
//   placements   NEWOBJ + BUILD: Shard {'dim'}, _StridedShard {'dim', 'split_factor'}, Replicate {},
//                Partial / _Partial {'reduce_op'} ("sum" or an old c10d ReduceOp), _MaskPartial {...};
//                placements[i] acts on mesh dim i, Shard(d) cuts tensor dim d with torch.chunk.
//   DeviceMesh   NEWOBJ + BUILD of its __dict__, which differs by release; read tolerantly:
//                'mesh' (int tensor of global ranks; its shape is the mesh shape) or '_layout' (CuTe
//                layout, 2.9+), 'mesh_dim_names' / '_mesh_dim_names', 'device_type' / '_device_type',
//                '_coordinate_on_dim' (the saving rank's mesh coordinate), '_flatten_mesh_list' /
//                '_flatten_rank_map' (the ranks in row-major mesh order). The rank tensor's bytes are
//                never read.
//
//   ShardedTensor  _rebuild_from_type_v2(_rebuild_wrapper_subclass, ShardedTensor, (..., GLOBAL size, ...),
//                (local_shards, ShardedTensorMetadata, ProcessGroupState, sharding_spec, init_rrefs))
//   Shard        NEWOBJ + BUILD (None, {'tensor': local tensor, 'metadata': ShardMetadata})
//   ShardMetadata  BUILD (None, {'shard_offsets': [...], 'shard_sizes': [...], 'placement': _remote_device})
//   _remote_device BUILD {'_worker_name', '_rank', '_device'}
//   ShardedTensorMetadata BUILD {'shards_metadata': [ShardMetadata of EVERY rank], 'size': Size,
//                'tensor_properties': TensorProperties (state (dtype, layout, requires_grad, memfmt, pin))}
//   ProcessGroupState BUILD {'local_rank', 'global_rank', 'local_world_size', 'global_world_size'}
//
//   FSDP1 LOCAL_STATE_DICT: `<prefix>_flat_param` (2.x) / `flat_param` (1.13), a 1-D ShardedTensor (or a
//   plain tensor) holding this rank's unpadded slice of a unit's flattened parameters.
//
// What an entry gets: shape = the global shape (the wrapper's size); location = the local piece's bytes
// (the only data in the file; location.strides describe the local piece); sharding = kind, local shape,
// placements as torch prints them ("Shard(dim=0)", "Replicate()", "Partial(sum)",
// "_StridedShard(dim=0, sf=2)"), mesh shape and names, chunks (ShardedTensor: every rank's piece from the
// metadata; DTensor: this rank's piece when the mesh says where it sits). The generic subclass description
// (inner tensors as parts, other state as attributes) is replaced. Contradictions (a local shape that is not
// a torch.chunk piece, shards outside the tensor, ...) go into the attribute "sharding_problem", which
// reportDistributedFindings turns into warnings.

#include "model/entry.h"
#include "model/source.h"
#include "pickle/value.h"

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sl::distributed {

// What describeDistributedTensor needs from the walk that builds entries.
struct DescribeContext {
    // An inner tensor as an entry (file context and walk budget of the caller); `role` is its name.
    std::function<Entry(const pickle::TensorValue&, std::string)> tensorEntry;
    // Charges work (one unit per shard, placement, ...) to the walk's budget; throws FormatError when spent:
    // the metadata list of a ShardedTensor can be shared by every tensor of a hostile file.
    std::function<void(size_t)> charge;
    // True the first time the walk meets this object (a shard metadata list). Real tensors each own their
    // list; a list shared (through the pickle memo) by many tensors is described once, not once per tensor.
    std::function<bool(const void*)> firstUse;
};

// Classes named DTensor / ShardedTensor under torch.distributed.*.
bool isDTensorClass(const pickle::GlobalValue* cls);
bool isShardedTensorClass(const pickle::GlobalValue* cls);

// Returns true when `t` is a distributed tensor it described (the quantized-subclass description is then
// skipped). `e` already holds the generic description (name, wrapper dtype and size, parts, attributes).
bool describeDistributedTensor(const pickle::TensorValue& t, Entry& e, const DescribeContext& ctx);

// Entry-level findings for a built state dict: a warning per entry with a "sharding_problem" attribute, plain
// FSDP flat parameters marked as such, and one warning per source when LOCAL_STATE_DICT flat parameters are
// present (the original parameter names are not in the file). Called once per container selection.
// `candidates` are the entries that can have one (mayHaveDistributedFinding), ascending: a state dict's
// other entries are not read again.
void reportDistributedFindings(Source& s, std::span<const size_t> candidates);

// True for `flat_param` / `<prefix>._flat_param` / `<prefix>.flat_param` keys.
bool isFlatParamName(std::string_view name);

// An entry with attributes, sharding, or one dimension under a flat parameter's name: what
// reportDistributedFindings looks at.
inline bool mayHaveDistributedFinding(const Entry& e)
{
    return !e.attributes.empty() || e.sharding || (e.shape.size() == 1 && isFlatParamName(e.name));
}

// torch.chunk along one dim, as Shard.local_shard_size_and_offset computes it: the size and offset of piece
// `index` when `size` elements are cut into `pieces` (an empty piece sits at the end of the dim).
std::pair<int64_t, int64_t> chunkPiece(int64_t size, int64_t pieces, int64_t index);

// For the per-rank reader: the local shape and global offsets of mesh coordinate `coord`'s piece, from the
// placement texts describeDistributedTensor writes. False when a placement is not understood, the coordinate
// is outside the mesh, or the piece is not one box (`local` is still set in that last case).
bool dtensorPiece(const Shape& global, const std::vector<std::string>& placements, const Shape& meshShape,
    const Shape& coord, Shape& local, Shape& offsets);

} // namespace sl::distributed
