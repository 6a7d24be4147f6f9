#pragma once
// Where a DCP chunk's elements sit inside the item DCP wrote for it. `.metadata` names each chunk's item
// only as a byte range of a data file: a torch.save archive (SerializationFormat.TORCH_SAVE: the elements
// are its data/<key> record, after the archive's local header) or a safetensors blob that the rank's
// tensors share (SAFETENSORS: the blob's header says where each tensor is). Finding the elements means
// reading the item, and a 256-rank save has half a million of them, so listing leaves each chunk at its
// item's range (ShardChunk::inItem) and values are located here when they are read; `ls --inspect-items`
// asks for it while listing, for the findings it gives (a data record shorter than the chunk, a blob that
// holds the tensor under another shape).

#include "formats/dcp_safetensors.h"
#include "io/input_file.h"
#include "model/dims.h"
#include "model/dtype.h"
#include "model/source.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace sl::dcp {

struct ItemData {
    enum class Format : uint8_t { Unknown, TorchSave, Safetensors };
    Format format = Format::Unknown;
    bool available = true; // false: the item's file ends before the elements (shortFile) or they run past the item
    bool shortFile = false;
    std::string why; // when not available
    uint64_t offset = 0; // the elements in the file; the whole item when not found (raw false)
    uint64_t length = 0;
    bool raw = false; // offset and length hold the chunk's elements as they are
    Severity noteSeverity = Severity::Info;
    std::string note; // something worth a finding (a short record, a compressed record, another shape)
};

// The safetensors blobs of one data file, parsed once each (by the offset where they start).
class BlobCache {
public:
    struct Slot {
        bool parsed = false;
        std::optional<Blob> blob;
        std::string error;
    };
    Slot& at(uint64_t itemOffset) { return m_slots[itemOffset]; }

private:
    std::unordered_map<uint64_t, Slot> m_slots;
};

// Whether the item starts like a zip archive (a torch.save item): its first four bytes.
bool itemLooksLikeZip(const InputFile& file, uint64_t itemOffset, uint64_t itemLength);
// What finding a torch.save item's directory costs: cheap when torch wrote it (no comment: the end record
// ends the item), up to 64 KiB of scanning otherwise.
size_t zipScanCost(const InputFile& file, uint64_t itemOffset, uint64_t itemLength);
// Bytes a chunk of `sizes` elements of `dtype` takes, rounded up to whole bytes; false on overflow.
bool chunkBytes(const Shape& sizes, DType dtype, uint64_t& out);

// Reading an item costs: scanning a zip's directory (cheap when torch wrote it), a blob's header. Callers
// that hold an allowance ask before paying; `maySpend` null spends freely.
using SpendCheck = bool (*)(void* context, size_t cost);

// Locates the elements of the chunk of `fqn` at `offsets` with `sizes` and `dtype` in the item [itemOffset,
// itemOffset + itemLength) of `file`, which the caller has checked lies inside the file. `where` names
// the item in notes (" (__0_0.distcp at 1234)"). Returns available with raw false and the item's range
// when the allowance refuses the cost.
ItemData locateInItem(const InputFile& file, uint64_t itemOffset, uint64_t itemLength, std::string_view fqn,
    const Shape& offsets, const Shape& sizes, DType dtype, const std::string& where, BlobCache& blobs, SpendCheck maySpend = nullptr,
    void* context = nullptr);

} // namespace sl::dcp
