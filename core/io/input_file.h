#pragma once
// A file StateLens reads, read where a reader asks and never mapped whole.
//
// Why not mmap: a mapping costs address space for the whole file, so a 100 GB checkpoint cannot even be
// listed under the `ulimit -v` HPC clusters set; and a file that shrinks while it is mapped kills the
// process with SIGBUS at the next touch of a vanished page. Reading with pread needs neither: readers ask for
// the ranges they parse (a safetensors header, a zip's central directory and its data.pkl, a DCP .metadata),
// and a range the file no longer holds is one clear error ("changed while reading"). Tensor bytes are read
// the same way, only when values are asked for.
//
// In-memory inputs (the embedded demo, fuzzers, DCP items held in memory) have the same interface; their
// ranges are views of the buffer, with no copy.

#include "io/bytes.h"
#include "io/file_trust.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace sl {

class InputFile;

// Bytes read from a file, owned.
class Region {
public:
    Bytes bytes() const { return m_bytes; }
    uint64_t offset() const { return m_offset; } // where bytes() starts in the file

private:
    friend class InputFile;
    Bytes m_bytes;
    uint64_t m_offset = 0;
    std::unique_ptr<uint8_t[]> m_owned;
};

class InputFile {
public:
    // Regular files only (io/file_trust.h); throws LoadError naming the path.
    static std::shared_ptr<const InputFile> open(const std::string& path, InputKind kind = InputKind::Checkpoint);
    static std::shared_ptr<const InputFile> fromBuffer(std::string name, std::vector<uint8_t> bytes);

    const std::string& path() const { return m_path; }
    uint64_t size() const { return m_size; }
    // True for a file on disk (another process can open path()), false for in-memory inputs.
    bool onDisk() const { return m_fd >= 0; }
    int descriptor() const { return m_fd; }

    // [offset, offset + length), read now into `buffer` (resized; copied, for an in-memory file).
    // Throws FormatError when the range is not inside size(), and LoadError "changed while reading" when
    // the file ends before it (it shrank since it was opened).
    Bytes read(uint64_t offset, uint64_t length, std::vector<uint8_t>& buffer) const;
    // The same range copied into `out` (out.size() bytes from `offset`), for callers that own a buffer with
    // room of their own (simdjson's padding).
    void readInto(uint64_t offset, std::span<uint8_t> out) const;
    // The same range, kept alive by the returned region (parsed pickles point into their bytes).
    std::shared_ptr<const Region> region(uint64_t offset, uint64_t length) const;
    // The whole file, for the files that are all metadata (index JSON, .metadata, live dumps, rule files):
    // refused (LoadError) past `maxSize` rather than read.
    std::shared_ptr<const Region> whole(uint64_t maxSize, const char* what) const;
    // whole()'s refusal alone, for a reader that reads the file another way (io/arriving_bytes.h).
    void refuseLargerThan(uint64_t maxSize, const char* what) const;
    // Up to `length` bytes from `offset` (fewer at the end of the file): what format sniffing looks at.
    Bytes prefix(uint64_t length, std::vector<uint8_t>& buffer) const;

    ~InputFile();
    InputFile(const InputFile&) = delete;
    InputFile& operator=(const InputFile&) = delete;

private:
    InputFile() = default;
    // Throws FormatError when [offset, offset + length) is not inside size().
    void checkRange(uint64_t offset, uint64_t length) const;
    void readAt(uint64_t offset, uint8_t* out, uint64_t length) const;
    std::string m_path;
    uint64_t m_size = 0;
    int m_fd = -1;
    std::vector<uint8_t> m_buffer; // in-memory inputs
};

// Reads [offset, offset + length) of an open descriptor with pread, retrying short and interrupted reads.
// Returns 0, an errno value, or -1 when the file ends first. For readers that keep a descriptor.
int preadFully(int fd, uint64_t offset, uint8_t* out, uint64_t length);

} // namespace sl
