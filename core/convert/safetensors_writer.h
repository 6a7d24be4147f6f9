#pragma once
// Writing a conversion plan as safetensors: one file, or shards with a Hugging Face index.
//
// - Each file is the header (u64 length, JSON padded with spaces to a multiple of 8, tensors in the order
//   the safetensors library writes them: larger dtypes first, then by name) and then every tensor's bytes,
//   copied from the source through one bounded buffer (values/tensor_bytes.h reads them in logical order
//   from any source kind: mapped files, deflated records, views, DCP chunks, per-rank pieces), so the
//   resident set stays at a few buffers whatever the checkpoint's size.
// - Shards are cut as huggingface_hub's split_torch_state_dict_into_shards cuts them (in the state dict's
//   order, a new shard when the next tensor would pass the size, a tensor larger than the size alone), named
//   model-00001-of-0000N.safetensors, with model.safetensors.index.json ({"metadata": {"total_size"},
//   "weight_map"}, as transformers' save_pretrained writes it: indent 2, keys sorted). One shard is written
//   as model.safetensors without an index, as they do.
// - Atomic: everything is written into a temporary folder beside the output, verified (each header re-read by
//   formats/safetensors_reader.h and compared with the plan; an index re-opened by the loader), then renamed
//   into place. On an error or a cancel the temporary folder is removed and nothing is left.

#include "convert/convert_plan.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sl {
class LoadControl;
}

namespace sl::convert {

// "5GB" (10^9), "500MB", "2GiB" (2^30), "100KB", "4096" (bytes); nullopt when it is none of those or zero.
std::optional<uint64_t> parseByteSize(std::string_view text);

// The plan's tensors (indices into plan.tensors) per shard, as huggingface_hub cuts them; one shard when
// maxShardBytes is 0.
std::vector<std::vector<size_t>> splitIntoShards(const ConvertPlan& plan, uint64_t maxShardBytes);

// One file's header bytes (the 8-byte length included) for these tensors, in the library's order, with
// `metadata` as __metadata__ (left out when empty). `offsets` receives each tensor's [begin, end) in the
// byte buffer, by position in `tensors`.
std::string safetensorsHeader(const ConvertPlan& plan, const std::vector<size_t>& tensors,
    const std::vector<std::pair<std::string, std::string>>& metadata, std::vector<std::pair<uint64_t, uint64_t>>* offsets,
    std::vector<size_t>* fileOrder);

struct WriteOptions {
    // A path ending in ".safetensors": that one file (shardBytes must be 0). Anything else: a folder (new,
    // or empty) that receives model.safetensors or the shards and their index.
    std::string output;
    uint64_t shardBytes = 0; // 0: one file
    size_t bufferBytes = size_t(8) << 20; // the copy buffer
    LoadControl* control = nullptr; // cancel (checked between buffers); its done/total count tensor bytes
    // Called after each buffer with the tensor bytes written so far, their total and the tensor's key.
    std::function<void(uint64_t done, uint64_t total, const std::string& name)> progress;
};

struct WriteReport {
    std::vector<std::string> files; // as written (final paths), shards in order, the index last
    size_t tensorsWritten = 0;
    uint64_t bytesWritten = 0; // tensor bytes
    uint64_t fileBytes = 0; // every file's size, headers and index included
    size_t shards = 0;
};

// Throws LoadError (naming the output, or the source for a tensor that cannot be read) and LoadCancelled;
// then nothing is left at the output, and whatever was there before is unchanged.
WriteReport writeSafetensors(const Source& source, const ConvertPlan& plan, const WriteOptions& options);

} // namespace sl::convert
