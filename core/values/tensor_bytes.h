#pragma once
// A tensor's elements, read straight from its source when asked: the mapped file for safetensors and
// uncompressed torch.save records (no copy), the inflated record for deflated archives (one storage at a
// time), and the storage offset and strides a view has, walked in logical (row-major) order. Every offset
// is checked against the storage and the file before anything is read, so a hostile header cannot make
// StateLens read outside the file.

#include "formats/dcp_item.h"
#include "io/input_file.h"
#include "io/open_files.h"
#include "model/source.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace sl::distributed {
class ChunkTiling;
}

namespace sl::values {

// The files of a source, opened once and shared by the threads that read them (pread is safe to share).
// Reads land in reused buffers: the resident set stays at a few buffers whatever the checkpoint's size.
// The files values are read from (io/open_files.h), and where DCP chunks sit in their items.
class FileCache : public OpenFiles {
public:
    // Where a DCP chunk's elements are in its item (dcp::locateInItem), each file's safetensors blobs
    // parsed once however many chunks they hold. Throws FormatError when the item cannot be read.
    dcp::ItemData locateInItem(const InputFile& file, uint64_t itemOffset, uint64_t itemLength, std::string_view fqn,
        const Shape& offsets, const Shape& sizes, DType dtype, const std::string& where);

private:
    std::mutex m_blobMutex;
    std::map<std::string, dcp::BlobCache> m_blobs;
};

class TensorBytes {
public:
    // Throws LoadError naming the source's path and the entry when its bytes cannot be reached (no
    // location, a missing file, bytes inline in the pickle, offsets or strides past the storage).
    static TensorBytes open(const Source& source, const Entry& entry, FileCache& files);
    // For statistics, which can weigh elements: a large broadcast view (stride 0 along some dimensions, as
    // expand() makes) is opened as its stored elements only, the broadcast dimensions collapsed to size 1;
    // multiplicity() says how often each stands in the logical tensor. Work stays proportional to the stored
    // bytes however many elements the view names. Small views are read as open() reads them.
    static TensorBytes openCollapsingBroadcasts(const Source& source, const Entry& entry, FileCache& files);
    // For a reader that reads each element once, in order (convert): a contiguous tensor in a deflated
    // record is inflated as the reads advance, through a bounded window, instead of whole. Reads out of order
    // still work (the stream starts again), but cost a pass over the record each.
    static TensorBytes openSequential(const Source& source, const Entry& entry, FileCache& files);
    uint64_t multiplicity() const { return m_multiplicity; }

    DType dtype() const { return m_dtype; }
    unsigned itemSize() const { return m_item; }
    uint64_t numel() const { return m_numel; }
    bool contiguous() const { return m_contiguous; }
    // Elements [first, first + count) in logical order, `count * itemSize()` bytes, read (pread) or gathered
    // into `buffer`. Throws LoadError when the file no longer holds them (it shrank since it was listed).
    const uint8_t* read(uint64_t first, uint64_t count, std::vector<uint8_t>& buffer) const;
    const uint8_t* elements(uint64_t first, uint64_t count, std::vector<uint8_t>& buffer) const { return read(first, count, buffer); }
    // Bytes this tensor holds in memory while it is open: an inflated record, or the span of a view that is
    // not contiguous (read once, then gathered from).
    uint64_t heldBytes() const { return m_held ? m_held->size() : 0; }
    // Elements [first, first + count) decoded to numbers (element_decode.h) into `out`, read as read() does;
    // for the small side tensors (scales, code tables) a dequantization needs. The dtype must be decodable.
    void decodeTo(uint64_t first, uint64_t count, std::vector<double>& out) const;

private:
    enum class Mode : uint8_t { Whole, CollapseBroadcasts, Sequential };
    static TensorBytes open(const Source& source, const Entry& entry, FileCache& files, Mode mode);
    const uint8_t* gather(uint64_t first, uint64_t count, std::vector<uint8_t>& scratch) const;
    const uint8_t* chunked(uint64_t first, uint64_t count, std::vector<uint8_t>& scratch) const;

    std::shared_ptr<const InputFile> m_file; // contiguous tensors: read with pread from here
    class Inflater;
    std::shared_ptr<Inflater> m_inflater; // openSequential's deflated record, inflated as reads advance
    uint64_t m_fileOffset = 0; // element [0, ..., 0] in the file
    // Or these bytes, in memory: an inflated deflated record, or the span of a non-contiguous view.
    std::shared_ptr<const std::vector<uint8_t>> m_held;
    const uint8_t* m_base = nullptr; // element [0, ..., 0] in m_held
    DType m_dtype = DType::Unknown;
    unsigned m_item = 0;
    uint64_t m_numel = 0;
    uint64_t m_multiplicity = 1;
    bool m_contiguous = true;
    std::vector<int64_t> m_sizes;
    std::vector<int64_t> m_strides; // in elements
    // A DCP tensor or per-rank pieces: its chunks (each a contiguous row-major block of the global tensor
    // in some file), assembled in logical order as elements are asked for.
    struct Chunk {
        const InputFile* file = nullptr; // kept open by m_chunkFiles
        uint64_t fileOffset = 0;
        std::vector<int64_t> offsets, sizes, strides;
    };
    std::vector<Chunk> m_chunks;
    std::shared_ptr<const distributed::ChunkTiling> m_tiling; // which chunk holds an element
    std::vector<std::shared_ptr<const InputFile>> m_chunkFiles;
};

} // namespace sl::values
