#pragma once
// The `.metadata` file of a torch.distributed.checkpoint (DCP) folder, read with the safe pickle VM into
// plain structs. No file other than the pickle is touched here (dcp_reader.cpp opens the .distcp files).
//
// What torch writes (FileSystemWriter.finish: `pickle.dump(metadata)`, protocol 4 on Python 3.8-3.13, 5 on
// newer ones):
//   Metadata(state_dict_metadata, planner_data=None, storage_data=None, storage_meta=None, version=None)
//     state_dict_metadata: {fqn: TensorStorageMetadata | BytesStorageMetadata}
//       TensorStorageMetadata(properties: TensorProperties, size: torch.Size,
//                             chunks: [ChunkStorageMetadata(offsets: torch.Size, sizes: torch.Size)])
//         chunks are the union over all ranks
//       TensorProperties pickles through __getstate__ as (dtype, layout, requires_grad, memory format enum,
//         pin_memory)
//       BytesStorageMetadata() stands for a non-tensor value (an int, a dict, _extra_state, ...)
//     planner_data: with flatten_state_dict (the 2.x default) {flat key: (path element, ...)}, elements
//       str or int (list positions); joined with "." they give the key
//     storage_data: {MetadataIndex(fqn, offset: torch.Size | None, index): _StorageInfo(relative_path, offset,
//       length[, transform_descriptors])}; MetadataIndex.offset is the chunk's offsets (absent for bytes
//       items), _StorageInfo.__getstate__ (2.x) drops None fields
//     storage_meta: StorageMeta(checkpoint_id, save_id, load_id, modules); version: "1.0.0" in newer 2.x
//   Megatron-Core adds fields (mcore_data); they are listed, not interpreted.
// Classes are matched by short name, never by module: torch 1.13 has them under
// torch.distributed._shard.checkpoint, 2.x under torch.distributed.checkpoint, and TensorProperties moved
// from torch.distributed._shard.sharded_tensor.metadata to torch.distributed.checkpoint.metadata.

#include "io/bytes.h"
#include "model/source.h"
#include "util/name_index.h"

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace sl {
class ArrivingBytes;
class LoadControl;
}

namespace sl::dcp {

// Text kept in blocks that never move, so views of it stay valid as long as the store, moves included: one
// allocation per block instead of one per string (a std::string per key and per planner_data path, each
// allocated and freed, was a tenth of listing an 8-rank save of 10,846 keys, its freeing another tenth).
class TextStore {
public:
    TextStore() = default;
    TextStore(TextStore&&) = default;
    TextStore& operator=(TextStore&&) = default;
    TextStore(const TextStore&) = delete; // views would point at the original's blocks
    TextStore& operator=(const TextStore&) = delete;

    std::string_view store(std::string_view s);

private:
    std::vector<std::unique_ptr<char[]>> m_blocks;
    std::vector<std::unique_ptr<char[]>> m_long; // strings too long to share a block
    char* m_next = nullptr; // the free end of the last block
    size_t m_free = 0;
};

// Strings that repeat across storage_data (each of half a million chunks names its key and its file), each
// kept once and numbered; views of them stay valid as long as the table (TextStore).
class StringTable {
public:
    uint32_t intern(std::string_view s);
    std::string_view operator[](uint32_t id) const { return m_strings[id]; }
    size_t size() const { return m_strings.size(); }

private:
    TextStore m_text;
    std::vector<std::string_view> m_strings; // into m_text
    NameIndex m_index;
};

struct ChunkMeta {
    Shape offsets;
    Shape sizes;
};

// One state_dict_metadata entry.
struct ItemMeta {
    enum class Kind : uint8_t { Tensor, Bytes, Unknown };
    uint32_t fqnId = 0; // in MetadataFile::fqns; read through MetadataFile::fqnOf
    Kind kind = Kind::Unknown;
    std::string className; // qualified class of the storage metadata object, for unknown kinds
    DType dtype = DType::Unknown;
    std::string dtypeText; // what the pickle named, when it is not a known torch dtype
    Shape size;
    bool sizeKnown = false;
    bool requiresGrad = false;
    std::vector<ChunkMeta> chunks;
    std::vector<std::string> problems; // what was malformed about this entry (warnings)
};

// One storage_data entry: where one chunk (or bytes item) is stored.
struct StorageRef {
    uint32_t fqn = 0; // in MetadataFile::fqns
    bool hasOffset = false; // MetadataIndex.offset is not None (a tensor chunk)
    Shape offset;
    bool pathIsText = false; // relative_path is a str
    uint32_t path = 0; // in MetadataFile::paths: relative_path, or (not a str) its repr
    bool rangeKnown = false; // _StorageInfo offset and length are non-negative ints
    uint64_t itemOffset = 0; // the item's bytes in the file
    uint64_t itemLength = 0;
    // transform_descriptors: MetadataFile::transformLists[transformList - 1], 0 when there are none. An index
    // rather than a vector here: storage_data has an entry per chunk (555,000 in a 256-rank save), almost
    // never with transforms, and an empty vector in each was 13 MB.
    uint32_t transformList = 0;
    bool transformed() const { return transformList != 0; }
};

struct MetadataFile {
    std::vector<ItemMeta> items; // in state_dict_metadata order
    std::vector<StorageRef> storage;
    std::vector<std::vector<std::string>> transformLists; // StorageRef::transformList
    const std::vector<std::string>& transformsOf(const StorageRef& r) const { return transformLists[r.transformList - 1]; }
    std::string_view fqnOf(const ItemMeta& item) const { return fqns[item.fqnId]; }
    StringTable fqns; // the keys items and storage_data name
    StringTable paths; // the relative paths storage_data names
    bool hasPlannerData = false;
    // planner_data in its order: each key (in fqns) with its path, elements [first, first + count) of
    // plannerElems, each with a flag saying it was an int.
    struct PathElem {
        std::string_view text; // in plannerText
        bool isIndex = false;
    };
    struct PlannerPath {
        std::string_view key;
        uint32_t first = 0;
        uint32_t count = 0;
    };
    std::vector<PlannerPath> plannerData;
    std::vector<PathElem> plannerElems;
    TextStore plannerText;
    std::span<const PathElem> pathOf(const PlannerPath& p) const { return { plannerElems.data() + p.first, p.count }; }
    int protocol = 0;
    size_t laneRecords = 0; // chunk and storage records the dataclass lane took whole (0: off or restarted)
    size_t pickleBytes = 0; // the .metadata's size, which bounds the work spent on its items
    std::vector<std::pair<std::string, std::string>> info; // for Source::metadata
    std::vector<Finding> findings; // about the pickle itself (globals, malformed parts)
    std::vector<std::string> executes; // imports of the pickle that run code (torch/load_safety.h)
};

// Parses .metadata bytes. `name` names the file in errors. Throws LoadError when the bytes are not a
// pickle or the pickle holds no DCP Metadata object; LoadCancelled when `control` is cancelled meanwhile.
// `lane` takes each chunk and storage record whole (pickle/dataclass_record.h), to the same result; tests
// turn it off to compare.
MetadataFile parseMetadata(
    const std::string& name, Bytes pickle, const LoadControl* control = nullptr, bool lane = true);
// The same, for .metadata bytes not read yet (io/arriving_bytes.h): they are read on the scan's thread while
// the unpickler follows. A read error is thrown as the reader's LoadError.
MetadataFile parseMetadata(
    const std::string& name, ArrivingBytes& pickle, const LoadControl* control = nullptr, bool lane = true);

// "[2, 3]": how chunk offsets are shown in messages.
std::string dimsText(const Shape& s);

// Everything parseMetadata read, as text, for tests and fuzzers that compare two reads (the dataclass lane's
// and the opcode loop's).
std::string dumpMetadata(const MetadataFile& md);

} // namespace sl::dcp
