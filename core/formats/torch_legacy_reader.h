#pragma once
// Legacy torch.save files (before torch 1.6, or `_use_new_zipfile_serialization=False`), format id
// "torch-legacy" (docs/on-disk-formats.md, "Legacy files"). The file is five pickles back to back, then raw
// storage bytes:
//   1. the magic number 0x1950a86a20f9469cfc6c (a LONG1, or a text LONG at protocol 0/1)
//   2. the protocol version, 1001
//   3. sys_info: {'protocol_version', 'little_endian', 'type_sizes'}
//   4. the object; storages are persistent ids ('storage', cls, key, location, numel, view_metadata)
//      where view_metadata = (view_key, offset, size) makes a slice of another storage, and whole-module
//      saves add ('module', cls, source_file, source)
//   5. the storage keys, sorted as strings
// then, for each key of (5) in that order: a u64 element count in the byte order of sys_info, followed by
// count * element_size bytes. Only the counts are read, to find where each storage starts.

#include "formats/open_options.h"
#include "io/input_file.h"
#include "model/source.h"

#include <memory>

namespace sl {

Source readTorchLegacy(const std::shared_ptr<const InputFile>& file, const OpenOptions& options);

// The magic number at the start, in any pickle protocol.
bool looksLikeLegacyTorch(Bytes data);

} // namespace sl
