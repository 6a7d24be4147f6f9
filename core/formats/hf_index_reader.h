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
#include "model/source.h"

#include <string>

namespace sl {

Source readHfIndex(const std::string& indexPath, const OpenOptions& options);

} // namespace sl
