#pragma once
// A tensor's elements, read straight from its source when asked: the mapped file for safetensors and
// uncompressed torch.save records (no copy), the inflated record for deflated archives (one storage at a
// time), and the storage offset and strides a view has, walked in logical (row-major) order. Every offset
// is checked against the storage and the file before anything is read, so a hostile header cannot make
// StateLens read outside the file.

#include "io/mapped_file.h"
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

// The files of a source, mapped once and shared by the threads that read them, with a descriptor for
// reading contiguous runs with pread: copying a run into a reused buffer keeps the resident set at a few
// buffers, where touching the mapping would make every page read part of it.
class FileCache {
public:
    std::shared_ptr<const MappedFile> get(const std::string& path);
    int descriptor(const std::string& path); // -1 when the file cannot be opened again

private:
    std::mutex m_mutex;
    std::map<std::string, std::shared_ptr<const MappedFile>> m_files;
    std::map<std::string, ReadableFile> m_fds; // fd() -1: it could not be opened
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
    uint64_t multiplicity() const { return m_multiplicity; }

    DType dtype() const { return m_dtype; }
    unsigned itemSize() const { return m_item; }
    uint64_t numel() const { return m_numel; }
    bool contiguous() const { return m_contiguous; }
    // Elements [first, first + count) in logical order, `count * itemSize()` bytes: a pointer into the file
    // when they lie there in order, else gathered into `scratch`.
    const uint8_t* elements(uint64_t first, uint64_t count, std::vector<uint8_t>& scratch) const;
    // The same bytes, read without touching the mapping where possible (pread into `buffer`); for large
    // sequential sweeps.
    const uint8_t* read(uint64_t first, uint64_t count, std::vector<uint8_t>& buffer) const;
    // Elements [first, first + count) decoded to numbers (element_decode.h) into `out`, read as read() does;
    // for the small side tensors (scales, code tables) a dequantization needs. The dtype must be decodable.
    void decodeTo(uint64_t first, uint64_t count, std::vector<double>& out) const;

private:
    static TensorBytes open(const Source& source, const Entry& entry, FileCache& files, bool collapse);
    std::shared_ptr<const MappedFile> m_file; // keeps m_base valid
    std::shared_ptr<const std::vector<uint8_t>> m_inflated; // or this, for a deflated record
    const uint8_t* m_base = nullptr; // element [0, ..., 0]
    int m_fd = -1; // the file, for read(); -1 reads from the mapping
    uint64_t m_fileOffset = 0; // element [0, ..., 0] in the file
    DType m_dtype = DType::Unknown;
    unsigned m_item = 0;
    uint64_t m_numel = 0;
    uint64_t m_multiplicity = 1;
    bool m_contiguous = true;
    std::vector<int64_t> m_sizes;
    std::vector<int64_t> m_strides; // in elements
    // A DCP tensor: its chunks (each a contiguous row-major block of the global tensor in some file),
    // assembled in logical order as elements are asked for.
    struct Chunk {
        const uint8_t* base = nullptr;
        std::vector<int64_t> offsets, sizes, strides;
    };
    std::vector<Chunk> m_chunks;
    std::shared_ptr<const distributed::ChunkTiling> m_tiling; // which chunk holds an element
    std::vector<std::shared_ptr<const MappedFile>> m_chunkFiles;
    const uint8_t* chunked(uint64_t first, uint64_t count, std::vector<uint8_t>& scratch) const;
};

} // namespace sl::values
