#pragma once
// Hugging Face sharded checkpoints: model.safetensors.index.json (format id "safetensors-index") and
// pytorch_model.bin.index.json ("torch-bin-index").
//
// The index is {"metadata": {"total_size": <bytes>, ...}, "weight_map": {"tensor name": "shard file"}}.
// Every shard named in weight_map is opened (in parallel) with its own reader and the tensors are
// presented as one state dict, in weight_map order. A shard that is missing, unreadable, a Git LFS
// pointer, or disagrees with the index is a finding; a shard path that leaves the index's folder is
// never opened.

#include "formats/open_options.h"
#include "io/bytes.h"
#include "model/source.h"

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sl {

Source readHfIndex(const std::string& indexPath, const OpenOptions& options);
// An index's JSON says nothing of its shards' format; its name does (transformers writes only these two).
SourceFormat indexFormat(const std::string& indexPath);

// The index JSON alone, before any shard is opened (readHfIndex's first step; fuzzers call it directly).
struct HfIndexFile {
    std::vector<std::pair<std::string, std::string>> metadata; // "metadata" members, values as JSON text
    std::optional<uint64_t> totalSize; // metadata.total_size, when it is a non-negative number
    std::vector<std::string> shards; // shard names as written, in order of first mention
    // Tensor name -> index into `shards`. The names are views into `text` (or into `unescaped`, for a name
    // written with escapes), so 90,427 names cost no allocation each.
    std::vector<std::pair<std::string_view, uint32_t>> weightMap;
    std::unique_ptr<char[]> text; // the index JSON with simdjson's padding after it
    std::deque<std::string> unescaped;
};
// Parses index JSON held in memory (copied); `name` names it in errors. Opens nothing. Throws LoadError.
HfIndexFile parseHfIndex(const std::string& name, Bytes json);
// Whether a shard name stays inside the index's folder: relative, no "..", no NUL or backslash.
bool isSafeShardName(std::string_view name);

} // namespace sl
