#pragma once
// safetensors files, format id "safetensors" (huggingface/safetensors, safetensors/src/tensor.rs;
// docs/on-disk-formats.md, "safetensors files").
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

#include <deque>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

namespace sl {

constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

// One tensor of a header as read, before it becomes an entry: a shard index keeps these for 163 shards at
// once (about 100 bytes a tensor, the name a view into the header text) and builds each entry once, in its
// final place.
struct SafetensorsTensor {
    std::string_view name; // into SafetensorsHeader::text, or ::unescaped for a name written with escapes
    DType dtype = DType::Unknown; // as torch sees it (F4 becomes float4_e2m1fn_x2, the last dimension halved)
    bool halvedF4 = false;
    bool bytesInFile = true; // false: data_offsets run past the end of the file
    std::string_view dtypeText; // as written, kept for an unknown dtype
    Shape shape;
    uint64_t begin = 0; // data_offsets, relative to the byte buffer
    uint64_t end = 0;
};
// The rest of a header, which the tensors' views point into.
struct SafetensorsHeader {
    uint64_t bufferStart = 0; // file offset of the byte buffer: 8 + header length
    std::vector<std::pair<std::string, std::string>> metadata; // __metadata__
    std::vector<Finding> findings; // the reference reader's refusals, each naming its tensor
    std::unique_ptr<char[]> text; // the header JSON with simdjson's padding (empty once streamed)
    std::deque<std::string> unescaped;
    bool duplicateNames = false; // some name is written twice (a danger finding says which)
    size_t chunks = 0; // the chunks a streamed header was read in (streamSafetensorsHeader); 0: in one piece
};
// Reads the header into `out`, handing each tensor to `onTensor` in header order (its views stay valid while
// `out` lives). Throws LoadError when the header cannot be read at all.
void readSafetensorsHeader(const InputFile& file, const OpenOptions& options, SafetensorsHeader& out,
    const std::function<void(const SafetensorsTensor&)>& onTensor);
// The same for a caller that keeps what it needs of each tensor as it arrives: a large header is read a chunk
// at a time through one small buffer, so the tensor's views are valid only during `onTensor`, and nothing
// of the text stays in `out`. `nameOf(i)` names the i-th tensor handed over (the checks after the parse name
// tensors). Should the chunks not join, or the tensors' data_offsets not increase in header order (the offsets
// check then needs them all kept; formats/safetensors_reader.cpp), `onRestart` is called to forget the tensors
// handed over so far, and they are handed over again from the first.
void streamSafetensorsHeader(const InputFile& file, const OpenOptions& options, SafetensorsHeader& out,
    const std::function<void(const SafetensorsTensor&)>& onTensor, const std::function<std::string_view(size_t)>& nameOf,
    const std::function<void()>& onRestart);
// The entry for one tensor of a header, its bytes in Source::files[file].
Entry safetensorsEntry(uint64_t bufferStart, const SafetensorsTensor& t, int32_t file);
// Whether that entry has no attribute (its dtype and shape are torch's as written: no unknown dtype, no F4),
// so that a row (model/entry_list.h) holds all of it.
inline bool safetensorsEntryIsPlain(const SafetensorsTensor& t) { return t.dtypeText.empty() && !t.halvedF4; }

Source readSafetensors(const std::shared_ptr<const InputFile>& file, const OpenOptions& options);

// An 8-byte length that fits the file followed by '{' (leading whitespace allowed, as serde does): `head` is
// the file's first bytes, `fileSize` its size.
bool looksLikeSafetensors(Bytes head, uint64_t fileSize);

} // namespace sl
