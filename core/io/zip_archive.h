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
// Every offset and length is checked against the bytes present before use. Only the end records and the
// central directory are read when the archive is opened (with pread, io/input_file.h); a record's local
// header and contents only when a caller asks for them.

#include "io/byte_reader.h"
#include "io/input_file.h"
#include "util/name_index.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sl {

class MinizLookup;

struct ZipEntry {
    std::string_view name; // points into the archive's copy of the central directory's names
    uint64_t localHeaderOffset = 0;
    uint64_t compressedSize = 0;
    uint64_t size = 0;
    uint16_t method = 0; // 0 stored, 8 deflated
    uint16_t flags = 0;
    uint32_t crc32 = 0;
};

// When the archive's central directory is read: as it is opened, or when the owner calls readDirectory().
enum class ZipDirectory { Now, Later };

class ZipArchive {
public:
    // Reads the end records and the central directory of the archive at [start, start + length) of `file`
    // (the whole file by default; a DCP item's torch.save zip inside its .distcp otherwise). Offsets the
    // archive reports are relative to `start`; baseOffset() gives it. `file` must outlive the archive.
    // Throws FormatError (LoadError when the file changes while it is read).
    // With ZipDirectory::Later, only the end records: entries() is empty until readDirectory().
    explicit ZipArchive(const InputFile& file, uint64_t start = 0, uint64_t length = UINT64_MAX,
        ZipDirectory when = ZipDirectory::Now);
    // Reads the central directory (ZipDirectory::Later), once. While it runs on one thread, another may use
    // firstRecord()'s result with dataOffset() and contents(), which read only the file.
    void readDirectory();
    // The central directory's first record, parsed on its own (nothing when the directory is empty): torch
    // writes data.pkl first, so a reader can start on it before the whole directory is read. Call it
    // before readDirectory(), from one thread.
    std::optional<ZipEntry> firstRecord();
    ZipArchive(const ZipArchive&) = delete;
    ZipArchive& operator=(const ZipArchive&) = delete;

    const std::vector<ZipEntry>& entries() const { return m_entries; }
    // The first record of `name` (exact bytes).
    const ZipEntry* find(std::string_view name) const;
    // The record torch.load reads for `name` (PyTorchStreamReader's miniz lookup, io/miniz_lookup.h;
    // torch 1.13 and 2.6 alike). Without duplicate names that is find()'s; with them, miniz's sorted
    // lookup, whose choice depends on the archive's layout (and which ignores ASCII case).
    const ZipEntry* findAsTorch(std::string_view name) const;
    // For dir + "0" .. dir + (count - 1): the record findAsTorch() gives, as its position in entries() + 1,
    // or 0 where it would have to look further (no record of exactly that name). Empty when names repeat,
    // where torch's lookup is miniz's. One pass over the records instead of a hashed lookup per name: a
    // torch.save archive's storages are data/0, data/1, ... (76,800 lookups took 8 ms).
    std::vector<uint32_t> numberedRecords(std::string_view dir, size_t count) const;
    // Records whose name an earlier record already has, by position in entries(). Readers differ in which
    // of them they take (torch: findAsTorch(); Python's zipfile: the last), so they are reported.
    const std::vector<size_t>& duplicates() const { return m_duplicates; }
    // Records whose name matches an earlier record's only ignoring ASCII case ('a/DATA.PKL' after
    // 'a/data.pkl'), by position in entries(). miniz, and so torch, treats such names as one.
    const std::vector<size_t>& caseVariants() const { return m_caseVariants; }
    // Position of `e` (a reference into entries()) in entries().
    size_t indexOf(const ZipEntry& e) const { return static_cast<size_t>(&e - m_entries.data()); }

    // Offset of the record's first data byte, relative to the archive's start (add baseOffset() for the file
    // offset). Reads the local header; throws FormatError when it is malformed or the data runs past the end.
    uint64_t dataOffset(const ZipEntry& e) const;
    // The record's contents, read (and inflated, for deflated records) into `buffer`, at most `maxSize`
    // bytes. Throws FormatError on corrupt data
    // or when the record is larger than maxSize.
    Bytes contents(const ZipEntry& e, std::vector<uint8_t>& buffer, uint64_t maxSize) const;
    // A stored (not deflated) record's contents, with contents()' checks, in a region of their own: read
    // without clearing the memory first (a vector zeroes what it grows into, and a 76,800-tensor data.pkl
    // is 10 MB). Null for a deflated record.
    std::shared_ptr<const Region> storedContents(const ZipEntry& e, uint64_t maxSize) const;
    // A hint for archives on disk: asks the kernel to start reading every record's local header now. With a
    // cold page cache each dataOffset() is otherwise a random read, one after another (0.7 s for the 174
    // records of a 2 GB checkpoint here); requested together they overlap (30 ms). Changes nothing else.
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
    uint64_t size() const { return m_size; }

private:
    // One central-directory header: its 46 fixed bytes, then its name and ZIP64 fields (`rest`).
    struct CentralHeader {
        ZipEntry entry;
        uint16_t nameLen = 0, extraLen = 0, commentLen = 0, diskStart = 0;
    };
    CentralHeader parseCentralHeader(ByteReader& r, uint64_t index) const;
    void finishCentralHeader(CentralHeader& h, ByteReader rest, const ByteReader& header);
    void parseCentralDirectory(uint64_t cdOffset, uint64_t cdSize, uint64_t count);
    void indexFolded();
    // Throws FormatError unless [offset, offset + length) lies inside the archive.
    void checkInside(uint64_t offset, uint64_t length) const;
    // [offset, offset + length) of the archive, into `buffer`.
    Bytes read(uint64_t offset, uint64_t length, std::vector<uint8_t>& buffer) const;
    std::string_view keepName(Bytes name);

    const InputFile& m_file;
    uint64_t m_base = 0; // where the archive starts in the file
    uint64_t m_size = 0;
    uint64_t m_cdOffset = 0, m_cdSize = 0, m_count = 0; // the central directory, from the end records
    bool m_directoryRead = false;
    std::vector<std::unique_ptr<char[]>> m_nameBlocks; // the records' names (entries point into them)
    size_t m_nameBlockUsed = 0;
    bool m_anyUpper = false; // a name with an ASCII upper-case letter: only then can names differ in case alone
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
