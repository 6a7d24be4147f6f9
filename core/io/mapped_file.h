#pragma once
// Read-only view of a whole file's bytes: mmap for regular files (so a 100 GB checkpoint costs nothing
// until a page is touched), or an owned buffer for in-memory inputs (embedded demo files, fuzzers).

#include "io/file_trust.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace sl {

using Bytes = std::span<const uint8_t>;

// Maps the pages of [data, data + size) now, in one call (MADV_POPULATE_READ, Linux >= 5.14; the older
// MADV_WILLNEED read-ahead otherwise), so the reads that follow take no page fault each: touching many
// scattered small records of a mapped file one fault at a time cost more than reading them.
void populate(const void* data, size_t size);

class MappedFile {
public:
    // Throws LoadError naming the path when it cannot be opened or mapped, or is not a regular file
    // (io/file_trust.h, which also records it as an input of `kind`).
    static std::shared_ptr<const MappedFile> open(const std::string& path, InputKind kind = InputKind::Checkpoint);
    static std::shared_ptr<const MappedFile> fromBuffer(std::string name, std::vector<uint8_t> bytes);

    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const std::string& path() const { return m_path; }
    Bytes bytes() const { return { m_data, m_size }; }
    uint64_t size() const { return m_size; }
    // True when the bytes are the mapped file at path(), false for in-memory inputs (whose path() only
    // names them): a reader that hands the file to another process needs to know which.
    bool isMapped() const { return m_mapped; }

private:
    MappedFile() = default;
    std::string m_path;
    const uint8_t* m_data = nullptr;
    size_t m_size = 0;
    bool m_mapped = false;
    std::vector<uint8_t> m_owned;
};

} // namespace sl
