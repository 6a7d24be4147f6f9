#pragma once
// Several torch.save files of one sharded save (model_rank0.pt, model_rank1.pt, ... as FSDP/DTensor
// per-rank saves write them) opened together as one source: format id "per-rank".
//
// What the merged source holds:
//   - files: the rank files in rank order. A file's rank is the number after "rank" in its name
//     (model_rank3.pt, rank-3.pt, mp_rank_03.pt); else the last number in every name (shard_3.pt); else the
//     rank its ShardedTensors or DTensors say saved them; else the order given (an info finding says so).
//   - entries: the union of the files' keys, in the order they first appear (rank 0's order, a key only
//     later ranks hold slotted in after its predecessor there). Each tensor gets sharding kind
//     per_rank_files with one chunk per piece a file holds (file, offsets and sizes when known, byte range
//     when the bytes are stored plainly, label "rank N"); placements and mesh come from DTensors.
//   - the global shape: DTensor and ShardedTensor entries carry it. Plain tensors: 0-d in every file -> a
//     replica, shape []; identical shapes in every file of a save that holds DTensors -> a
//     replica (FSDP2 and tensor parallelism shard as DTensors and keep buffers whole on every rank); pieces
//     that differ along exactly one dim, present in every file -> concatenated along that dim in rank order
//     (torch.chunk-style per-rank pieces); identical shapes without DTensors -> unknown (a replica or an
//     even shard, which the files do not say), as is anything else. The attribute "global_shape" says
//     which rule applied.
//   - a DTensor's piece is its file's one chunk, located or not (a subclass local tensor such as NF4 has
//     its bytes in parts); without a mesh coordinate it is placed at the rank's row-major mesh position.
//   - findings: each file's findings (once, with the ranks they occur in when not all), and warnings for a
//     key missing in some files, ranks that disagree on a key's dtype, global shape or storage kind, files
//     that look like different saves (few keys in common, the same saving rank twice, different world
//     sizes, a file named rank A holding rank B's tensors), pieces that do not cover a tensor, fewer files
//     than the save's world size.
// A path that is not a torch.save file (safetensors, an index, a folder, a DCP checkpoint) is a LoadError
// naming it. Rank numbers in names: formats/rank_sets.h; a folder of rank files: formats/rank_folder_reader.h. Another
// container is selected in every file at once (Source::withContainer).

#include "formats/open_options.h"
#include "model/source.h"

#include <string>
#include <vector>

namespace sl {

Source openRankFiles(const std::vector<std::string>& paths, const OpenOptions& options);

} // namespace sl
