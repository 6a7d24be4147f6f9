#pragma once
// safetensors files, format id "safetensors" (huggingface/safetensors, safetensors/src/tensor.rs).
//
// Layout:
//   1. u64 little-endian N: the header length
//   2. N bytes of UTF-8 JSON: {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//      "__metadata__": {"key": "string value", ...}}; writers pad it with spaces to a multiple of 8
//   3. the byte buffer; a tensor's bytes are at file offset 8 + N + begin, little-endian, row-major
// The reference reader refuses a file when N exceeds 100,000,000, when offsets leave gaps or overlap once
// sorted, when a byte count differs from numel * bits / 8, or when bytes trail the last tensor. Those are
// reported here as danger findings naming the reference error, so the file can still be inspected;
// only an unreadable header is an error.

#include "formats/open_options.h"
#include "io/input_file.h"
#include "model/source.h"

#include <memory>

namespace sl {

constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

Source readSafetensors(const std::shared_ptr<const InputFile>& file, const OpenOptions& options);

// An 8-byte length that fits the file followed by '{' (leading whitespace allowed, as serde does): `head` is
// the file's first bytes, `fileSize` its size.
bool looksLikeSafetensors(Bytes head, uint64_t fileSize);

} // namespace sl
