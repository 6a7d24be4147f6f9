#pragma once
// safetensors blobs as DCP writes them: SerializationFormat.SAFETENSORS appends one blob to each .distcp
// file (after the file's bytes items), and HuggingFaceStorageWriter writes plain .safetensors files. The
// blob is a safetensors file: u64 LE header length N, N bytes of JSON {name: {dtype, shape, data_offsets},
// "__metadata__": {...}}, then the data. DCP puts two keys in __metadata__:
//   DCP_SHARDING_INFO  JSON text {fqn: {"saved_offsets": [..]}}: where each tensor sits in the global one
//   DCP_VERSION        "1.0"
// Only the header is read.

#include "io/input_file.h"
#include "model/dims.h"
#include "model/dtype.h"

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace sl::dcp {

struct BlobTensor {
    std::string dtypeName; // as the header writes it ("F32", "BF16", ...)
    std::optional<DType> dtype;
    Dims shape;
    uint64_t begin = 0; // data_offsets, relative to the data section
    uint64_t end = 0;
    bool hasSavedOffsets = false;
    Dims savedOffsets; // from DCP_SHARDING_INFO
};

struct Blob {
    uint64_t dataStart = 0; // offset of the data section from the blob's first byte (8 + N)
    std::vector<std::string> order; // tensor names in header order
    std::unordered_map<std::string, BlobTensor> tensors;
    bool hasShardingInfo = false;
    std::string dcpVersion;
};

// Parses the header of the blob that starts at `offset` of `file` (only the header is read). Throws
// FormatError when it is not a readable safetensors header (the caller names the file).
Blob parseBlob(const InputFile& file, uint64_t offset = 0);

// Cheap check: the file starts like a safetensors blob whose header mentions DCP_SHARDING_INFO.
bool looksLikeDcpSafetensors(const InputFile& file);

} // namespace sl::dcp
