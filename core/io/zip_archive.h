#pragma once
// A bounded, read-only ZIP reader for torch.save archives (torch >= 1.6), TorchScript archives and the
// zips embedded in DCP .distcp files.
//
// Layout it relies on (APPNOTE 6.3.x; what PyTorchStreamWriter writes):
//  1. Records, each "local file header" (PK\3\4, 30 bytes + name + extra) followed by the record data.
//     torch writes every record stored (method 0), pads the extra field ("FB" + 'Z' filler) so the data
//     starts on a 64-byte boundary, and puts CRC and sizes in a trailing data descriptor, leaving zeros in
//     the local header. So sizes come from the central directory; only name and extra lengths from the
//     local header.
//  2. The central directory: one PK\1\2 header (46 bytes + name + extra + comment) per record, with the
//     local header offset and sizes, widened by a ZIP64 extra field (id 0x0001) when they overflow 32 bits.
//  3. End records: optional ZIP64 end-of-central-directory (PK\6\6) and its locator (PK\6\7), then the
//     classic end record (PK\5\6, 22 bytes + comment) in the last 64 KiB of the file. torch always writes
//     the ZIP64 records.
//
// Every offset and length is checked against the bytes present before use; nothing is decompressed or
// copied unless a caller asks for a record's contents.

#include "io/mapped_file.h"
#include "util/name_index.h"

#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sl {

class MinizLookup;

struct ZipEntry {
    std::string_view name; // points into the archive bytes
    uint64_t localHeaderOffset = 0;
    uint64_t compressedSize = 0;
    uint64_t size = 0;
    uint16_t method = 0; // 0 stored, 8 deflated
    uint16_t flags = 0;
    uint32_t crc32 = 0;
};

class ZipArchive {
public:
    // Parses the end records and the central directory of `data`. `baseOffset` is where `data` starts in
    // its file (for embedded zips), added to reported offsets. Throws FormatError.
    explicit ZipArchive(Bytes data, uint64_t baseOffset = 0);

    const std::vector<ZipEntry>& entries() const { return m_entries; }
    // The first record of `name` (exact bytes).
    const ZipEntry* find(std::string_view name) const;
    // The record torch.load reads for `name` (PyTorchStreamReader's miniz lookup, io/miniz_lookup.h;
    // torch 1.13 and 2.6 alike). Without duplicate names that is find()'s; with them, miniz's sorted
    // lookup, whose choice depends on the archive's layout (and which ignores ASCII case).
    const ZipEntry* findAsTorch(std::string_view name) const;
    // Records whose name an earlier record already has, by position in entries(). Readers differ in which
    // of them they take (torch: findAsTorch(); Python's zipfile: the last), so they are reported.
    const std::vector<size_t>& duplicates() const { return m_duplicates; }
    // Records whose name matches an earlier record's only ignoring ASCII case ('a/DATA.PKL' after
    // 'a/data.pkl'), by position in entries(). miniz, and so torch, treats such names as one.
    const std::vector<size_t>& caseVariants() const { return m_caseVariants; }
    // Position of `e` (a reference into entries()) in entries().
    size_t indexOf(const ZipEntry& e) const { return static_cast<size_t>(&e - m_entries.data()); }

    // Offset of the record's first data byte, relative to `data` (add baseOffset() for the file offset).
    // Reads the local header; throws FormatError when it is malformed or the data runs past the end.
    uint64_t dataOffset(const ZipEntry& e) const;
    // The stored bytes of a method-0 record (a view into `data`). Throws for other methods.
    Bytes storedData(const ZipEntry& e) const;
    // The record's contents: a view for stored records, or inflated into `buffer` (at most `maxSize` bytes)
    // for deflated ones. Throws FormatError on corrupt data or when the record is larger than maxSize.
    Bytes contents(const ZipEntry& e, std::vector<uint8_t>& buffer, uint64_t maxSize) const;
    // A hint for archives mapped from a file: asks the kernel to start reading every record's local header
    // now. With a cold page cache each dataOffset() is otherwise a random read served by its own page fault,
    // one after another (0.7 s for the 174 records of a 2 GB checkpoint here); requested together they
    // overlap (30 ms). Changes nothing else.
    void prefetchLocalHeaders() const;

    // Where PyTorchStreamWriter puts a record's data: right after the local header, its name and the "FB"
    // padding field (plus ZIP64 fields for offsets or sizes past 4 GiB), rounded up to `alignment`
    // (caffe2/serialize/inline_container.cc getPadding). Only valid for archives torch wrote itself.
    uint64_t torchDataOffset(const ZipEntry& e, uint64_t alignment) const;
    // Whether torchDataOffset() agrees with the local headers of up to `samples` records spread evenly over
    // the archive (the first and last included). Reading every local header of a 76,800-record archive
    // touches every page of the file; when torch wrote it, a sample proves the rule holds.
    bool torchLayoutHolds(uint64_t alignment, size_t samples) const;

    uint64_t baseOffset() const { return m_base; }
    Bytes data() const { return m_data; }

private:
    void parseCentralDirectory(uint64_t cdOffset, uint64_t cdSize, uint64_t count);
    void indexFolded();

    Bytes m_data;
    uint64_t m_base = 0;
    std::vector<ZipEntry> m_entries;
    std::vector<size_t> m_duplicates;
    NameIndex m_byName; // positions in m_entries
    std::vector<size_t> m_caseVariants;
    // Only when names repeat (exactly or ignoring case): torch's lookup.
    std::shared_ptr<const MinizLookup> m_torchLookup;
    // Only when some name has an upper-case ASCII letter: (hash of the lower-cased name, position), sorted;
    // finds the record torch matches ignoring case when find() misses.
    std::vector<std::pair<uint64_t, uint32_t>> m_folded;
};

// True when the bytes start like a zip archive (what torch.load itself checks).
bool looksLikeZip(Bytes data);

} // namespace sl
