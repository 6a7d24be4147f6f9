#pragma once
// The one entry point for opening anything StateLens reads: it sniffs the format from the bytes (not the
// file name) and dispatches to the reader. Errors are LoadErrors naming the path.

#include "formats/open_options.h"
#include "formats/safetensors_reader.h"
#include "model/source.h"

#include <optional>
#include <string>
#include <vector>

namespace sl {

// The format a path would be read as, or throws LoadError saying why it is none.
SourceFormat detectFormat(const std::string& path);

Source openSource(const std::string& path, const OpenOptions& options = {});
// Same for bytes in memory (embedded demo files, fuzzers); `name` stands in for the path.
Source openSourceFromMemory(const std::string& name, std::vector<uint8_t> bytes, const OpenOptions& options = {});

// A shard of an index, opened as openSource would: a safetensors file as its header alone (the index then
// builds each entry once, in its final place), anything else as a Source.
struct ShardContents {
    std::optional<SafetensorsHeader> header;
    std::vector<SafetensorsTensor> tensors; // the header's, in header order
    std::optional<Source> source;
};
ShardContents openShard(const std::string& path, const OpenOptions& options);

} // namespace sl
