#include "zip_archive.h"

#include "io/byte_reader.h"
#include "io/miniz_lookup.h"
#include "util/decimal_key.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>

namespace sl {

namespace {

constexpr uint32_t kLocalHeaderSig = 0x04034b50;
constexpr uint32_t kCentralHeaderSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr size_t kEndSize = 22;
constexpr size_t kZip64LocatorSize = 20;
constexpr size_t kCentralHeaderSize = 46;
constexpr size_t kLocalHeaderSize = 30;
constexpr size_t kMaxCommentSize = 0xFFFF;

uint32_t readU32At(Bytes d, size_t pos) { return static_cast<uint32_t>(littleEndianAt(d, pos, 4)); }
uint16_t readU16At(Bytes d, size_t pos) { return static_cast<uint16_t>(littleEndianAt(d, pos, 2)); }

// Whether a byte is an ASCII upper-case letter, eight at a time: every record's name is looked at.
bool hasUpper(std::string_view s)
{
    constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
        uint64_t w;
        std::memcpy(&w, s.data() + i, 8);
        // With each byte's high bit cleared, adding 0x80 - 'A' sets it from 'A' up and 0x80 - 'Z' - 1 from
        // past 'Z'; no byte carries into the next. Bytes from 0x80 up are left out by ~w.
        const uint64_t low = w & ~kHigh;
        if ((low + (0x80 - 'A') * kOnes) & ~(low + (0x80 - 'Z' - 1) * kOnes) & ~w & kHigh)
            return true;
    }
    for (; i < s.size(); ++i)
        if (s[i] >= 'A' && s[i] <= 'Z')
            return true;
    return false;
}

// FNV-1a over the ASCII-lower-cased bytes (miniz's MZ_TOLOWER).
uint64_t foldedHash(std::string_view s)
{
    uint64_t h = 1469598103934665603ull;
    for (char c : s) {
        uint8_t b = static_cast<uint8_t>(c);
        if (b >= 'A' && b <= 'Z')
            b = static_cast<uint8_t>(b - 'A' + 'a');
        h = (h ^ b) * 1099511628211ull;
    }
    return h;
}

} // namespace

bool looksLikeZip(Bytes data) { return data.size() >= 4 && readU32At(data, 0) == kLocalHeaderSig; }

ZipArchive::ZipArchive(const InputFile& file, uint64_t start, uint64_t length, ZipDirectory when)
    : m_file(file)
    , m_base(start)
    , m_size(start > file.size() ? 0 : std::min(length, file.size() - start))
{
    if (m_size < kEndSize)
        throw FormatError("too small to be a zip archive (" + std::to_string(m_size) + " bytes)");

    // Step 1: find the end record, scanning back over at most a maximal comment (and the ZIP64 locator
    // before it), in the archive's last bytes.
    const uint64_t tailSize = std::min<uint64_t>(m_size, kEndSize + kMaxCommentSize + kZip64LocatorSize);
    const uint64_t tailStart = m_size - tailSize;
    std::vector<uint8_t> tailBuffer;
    const Bytes tail = read(tailStart, tailSize, tailBuffer);
    const size_t lowest = tail.size() > kEndSize + kMaxCommentSize ? tail.size() - kEndSize - kMaxCommentSize : 0;
    size_t endAt = SIZE_MAX;
    for (size_t pos = tail.size() - kEndSize + 1; pos-- > lowest;) {
        if (readU32At(tail, pos) != kEndSig)
            continue;
        size_t commentLen = static_cast<size_t>(tail[pos + 20]) | static_cast<size_t>(tail[pos + 21]) << 8;
        if (pos + kEndSize + commentLen <= tail.size()) {
            endAt = pos;
            break;
        }
    }
    if (endAt == SIZE_MAX)
        throw FormatError("zip end-of-central-directory record not found (truncated or not a zip archive)");
    const uint64_t endPos = tailStart + endAt;

    ByteReader end(tail.subspan(endAt), m_base + endPos);
    end.skip(4, "end record");
    uint16_t diskNumber = end.u16le();
    uint16_t cdDisk = end.u16le();
    end.u16le(); // entries on this disk
    uint64_t count = end.u16le();
    uint64_t cdSize = end.u32le();
    uint64_t cdOffset = end.u32le();
    if (diskNumber != 0 || cdDisk != 0)
        throw FormatError("multi-disk zip archives are not supported");

    // Step 2: the ZIP64 records, when present, hold the real counts and offsets.
    if (endAt >= kZip64LocatorSize && readU32At(tail, endAt - kZip64LocatorSize) == kZip64LocatorSig) {
        ByteReader loc(tail.subspan(endAt - kZip64LocatorSize, kZip64LocatorSize));
        loc.skip(8, "zip64 locator");
        uint64_t z64Offset = loc.u64le();
        const uint64_t locatorPos = endPos - kZip64LocatorSize;
        if (z64Offset > locatorPos || locatorPos - z64Offset < 56)
            throw FormatError("zip64 end record offset " + std::to_string(z64Offset) + " is out of range");
        std::vector<uint8_t> z64Buffer;
        ByteReader z(read(z64Offset, 56, z64Buffer), m_base + z64Offset);
        if (z.u32le("zip64 end record") != kZip64EndSig)
            z.fail("zip64 end record signature missing");
        z.skip(8 + 2 + 2 + 4 + 4 + 8, "zip64 end record");
        count = z.u64le();
        cdSize = z.u64le();
        cdOffset = z.u64le();
    } else if (count == 0xFFFF || cdSize == 0xFFFFFFFF || cdOffset == 0xFFFFFFFF) {
        throw FormatError("zip end record needs ZIP64 values but the ZIP64 locator is missing");
    }

    if (cdOffset > endPos || cdSize > endPos - cdOffset)
        throw FormatError("zip central directory (offset " + std::to_string(cdOffset) + ", size "
            + std::to_string(cdSize) + ") lies outside the archive");
    if (count > cdSize / kCentralHeaderSize)
        throw FormatError("zip claims " + std::to_string(count) + " entries but its central directory has room for "
            + std::to_string(cdSize / kCentralHeaderSize));
    m_cdOffset = cdOffset;
    m_cdSize = cdSize;
    m_count = count;
    if (when == ZipDirectory::Now)
        readDirectory();
}

std::optional<ZipEntry> ZipArchive::firstRecord()
{
    if (m_count == 0)
        return std::nullopt;
    std::vector<uint8_t> buffer;
    ByteReader r(read(m_cdOffset, kCentralHeaderSize, buffer), m_base + m_cdOffset);
    CentralHeader h = parseCentralHeader(r, 0);
    const uint64_t rest = uint64_t(h.nameLen) + h.extraLen + h.commentLen;
    if (rest > m_cdSize - kCentralHeaderSize)
        throw FormatError("zip central directory entry at " + std::to_string(m_base + m_cdOffset)
            + " runs past the end of the directory");
    std::vector<uint8_t> restBuffer;
    finishCentralHeader(h,
        ByteReader(read(m_cdOffset + kCentralHeaderSize, rest, restBuffer), m_base + m_cdOffset + kCentralHeaderSize), r);
    return h.entry;
}

void ZipArchive::readDirectory()
{
    if (m_directoryRead)
        return;
    m_directoryRead = true;
    parseCentralDirectory(m_cdOffset, m_cdSize, m_count);
    // miniz compares names ignoring ASCII case. Two names can only differ in case when one has an
    // upper-case letter; only then are names hashed lower-cased, to find such pairs and lookups that
    // match a record only ignoring case.
    if (m_anyUpper)
        indexFolded();
    // torch's lookup only differs from find() when a name repeats; archives torch writes have none, so
    // the sorted index (n log n name comparisons) is built only for those that do.
    if (!m_duplicates.empty() || !m_caseVariants.empty()) {
        m_torchLookup = std::make_shared<const MinizLookup>(m_entries);
        m_folded = {};
    }
}

void ZipArchive::indexFolded()
{
    if (m_entries.size() >= UINT32_MAX)
        return;
    m_folded.reserve(m_entries.size());
    for (size_t i = 0; i < m_entries.size(); ++i)
        m_folded.emplace_back(foldedHash(m_entries[i].name), static_cast<uint32_t>(i));
    std::sort(m_folded.begin(), m_folded.end());
    // Within a run of equal hashes, group the names equal ignoring case, then the exactly equal ones
    // (sorted, so a run of 100,000 copies of one name costs n log n, not n^2). The first record of each
    // exact name, other than the group's first record, is a case variant (later copies of an exact name are
    // in m_duplicates already).
    std::vector<uint32_t> run;
    auto nameOf = [this](uint32_t i) { return m_entries[i].name; };
    for (size_t begin = 0; begin < m_folded.size();) {
        size_t end = begin + 1;
        while (end < m_folded.size() && m_folded[end].first == m_folded[begin].first)
            ++end;
        if (end - begin > 1) {
            run.clear();
            for (size_t j = begin; j < end; ++j)
                run.push_back(m_folded[j].second);
            std::sort(run.begin(), run.end(), [&](uint32_t a, uint32_t b) {
                if (int c = MinizLookup::compare(nameOf(a), nameOf(b)); c != 0)
                    return c < 0;
                if (nameOf(a) != nameOf(b))
                    return nameOf(a) < nameOf(b);
                return a < b;
            });
            for (size_t g = 0; g < run.size();) {
                size_t gEnd = g + 1;
                while (gEnd < run.size() && MinizLookup::compare(nameOf(run[g]), nameOf(run[gEnd])) == 0)
                    ++gEnd;
                std::vector<uint32_t> firsts; // the first record of each exact name in this group
                for (size_t k = g; k < gEnd; ++k)
                    if (k == g || nameOf(run[k]) != nameOf(run[k - 1]))
                        firsts.push_back(run[k]);
                const uint32_t groupFirst = *std::min_element(firsts.begin(), firsts.end());
                for (uint32_t f : firsts)
                    if (f != groupFirst)
                        m_caseVariants.push_back(f);
                g = gEnd;
            }
        }
        begin = end;
    }
    std::sort(m_caseVariants.begin(), m_caseVariants.end());
}

void ZipArchive::checkInside(uint64_t offset, uint64_t length) const
{
    if (offset > m_size || length > m_size - offset)
        throw FormatError("bytes " + std::to_string(m_base + offset) + " to " + std::to_string(m_base + offset + length)
            + " lie past the end of the archive");
}

Bytes ZipArchive::read(uint64_t offset, uint64_t length, std::vector<uint8_t>& buffer) const
{
    checkInside(offset, length);
    return m_file.read(m_base + offset, length, buffer);
}

std::string_view ZipArchive::keepName(Bytes name)
{
    constexpr size_t kBlock = size_t(1) << 18; // names are at most 65,535 bytes
    if (m_nameBlocks.empty() || kBlock - m_nameBlockUsed < name.size()) {
        m_nameBlocks.push_back(std::make_unique<char[]>(kBlock));
        m_nameBlockUsed = 0;
    }
    char* at = m_nameBlocks.back().get() + m_nameBlockUsed;
    if (!name.empty())
        std::memcpy(at, name.data(), name.size());
    m_nameBlockUsed += name.size();
    return { at, name.size() };
}

ZipArchive::CentralHeader ZipArchive::parseCentralHeader(ByteReader& r, uint64_t index) const
{
    // The fixed part, taken at once and read at its fields' offsets: a torch archive has a header per tensor.
    const Bytes b = r.take(kCentralHeaderSize, "central directory header");
    if (readU32At(b, 0) != kCentralHeaderSig)
        r.fail("zip central directory entry " + std::to_string(index) + " has a bad signature");
    CentralHeader h;
    ZipEntry& e = h.entry;
    e.flags = readU16At(b, 8); // after the signature and two versions
    e.method = readU16At(b, 10);
    e.crc32 = readU32At(b, 16); // after time and date
    e.compressedSize = readU32At(b, 20);
    e.size = readU32At(b, 24);
    h.nameLen = readU16At(b, 28);
    h.extraLen = readU16At(b, 30);
    h.commentLen = readU16At(b, 32);
    h.diskStart = readU16At(b, 34);
    e.localHeaderOffset = readU32At(b, 42); // after the attributes
    return h;
}

void ZipArchive::finishCentralHeader(CentralHeader& h, ByteReader rest, const ByteReader& header)
{
    ZipEntry& e = h.entry;
    e.name = keepName(rest.take(h.nameLen, "zip entry name"));
    m_anyUpper = m_anyUpper || hasUpper(e.name); // while the name is in the cache
    ByteReader extra(rest.take(h.extraLen, "zip extra field"));
    // ZIP64 extended information: only the fields whose 32-bit value overflowed, in this order.
    while (extra.remaining() >= 4) {
        uint16_t id = extra.u16le();
        uint16_t len = extra.u16le();
        ByteReader field(extra.take(len, "zip extra field"));
        if (id != 0x0001)
            continue;
        if (e.size == 0xFFFFFFFF)
            e.size = field.u64le("zip64 size");
        if (e.compressedSize == 0xFFFFFFFF)
            e.compressedSize = field.u64le("zip64 compressed size");
        if (e.localHeaderOffset == 0xFFFFFFFF)
            e.localHeaderOffset = field.u64le("zip64 header offset");
        if (h.diskStart == 0xFFFF)
            field.u32le("zip64 disk number");
    }
    if (e.localHeaderOffset > m_size || e.compressedSize > m_size)
        header.fail("zip entry '" + std::string(e.name) + "' points outside the archive");
}

void ZipArchive::parseCentralDirectory(uint64_t cdOffset, uint64_t cdSize, uint64_t count)
{
    // Read in windows as the parse goes: a directory that claims gigabytes of a sparse file fails at its
    // first bad header, not after reading all of it.
    constexpr uint64_t kWindow = uint64_t(1) << 20;
    std::vector<uint8_t> window;
    uint64_t windowStart = 0; // relative to cdOffset
    Bytes have;
    uint64_t pos = 0; // relative to cdOffset
    auto need = [&](uint64_t n) -> ByteReader {
        if (pos < windowStart || pos + n > windowStart + have.size()) {
            if (n > cdSize - std::min(pos, cdSize))
                throw FormatError("zip central directory entry at " + std::to_string(m_base + cdOffset + pos)
                    + " runs past the end of the directory");
            windowStart = pos;
            have = read(cdOffset + pos, std::min(std::max(n, kWindow), cdSize - pos), window);
        }
        return ByteReader(have.subspan(static_cast<size_t>(pos - windowStart), static_cast<size_t>(n)), m_base + cdOffset + pos);
    };
    m_entries.reserve(static_cast<size_t>(std::min<uint64_t>(count, cdSize / kCentralHeaderSize)));
    for (uint64_t i = 0; i < count; ++i) {
        ByteReader r = need(kCentralHeaderSize);
        CentralHeader h = parseCentralHeader(r, i);
        pos += kCentralHeaderSize;
        finishCentralHeader(h, need(uint64_t(h.nameLen) + h.extraLen + h.commentLen), r);
        pos += uint64_t(h.nameLen) + h.extraLen + h.commentLen;
        m_entries.push_back(h.entry);
    }
    // find() takes the first occurrence; duplicates stay visible in entries() (findAsTorch: torch's pick).
    // Indexed in bulk, after the parse: each name's slot is fetched ahead (io/name_index.h).
    m_byName.insertAll(
        m_entries.size(), [this](size_t i) { return m_entries[i].name; },
        [this](size_t i) { m_duplicates.push_back(i); });
}

const ZipEntry* ZipArchive::find(std::string_view name) const
{
    size_t i = m_byName.find(name, [this](size_t k) { return m_entries[k].name; });
    return i == NameIndex::npos ? nullptr : &m_entries[i];
}

std::vector<uint32_t> ZipArchive::numberedRecords(std::string_view dir, size_t count) const
{
    std::vector<uint32_t> out;
    if (m_torchLookup || m_entries.size() >= UINT32_MAX)
        return out;
    out.assign(count, 0);
    for (size_t i = 0; i < m_entries.size(); ++i) {
        std::string_view name = m_entries[i].name;
        size_t n = 0;
        if (name.size() > dir.size() && name.compare(0, dir.size(), dir) == 0
            && decimalKey(name.substr(dir.size()), n) && n < count && out[n] == 0)
            out[n] = static_cast<uint32_t>(i + 1); // the first record of a name is find()'s
    }
    return out;
}

const ZipEntry* ZipArchive::findAsTorch(std::string_view name) const
{
    if (m_torchLookup) {
        size_t i = m_torchLookup->locate(m_entries, name);
        return i == MinizLookup::npos ? nullptr : &m_entries[i];
    }
    if (const ZipEntry* e = find(name))
        return e;
    // No name repeats, even ignoring case, so at most one record matches `name` ignoring case.
    if (!m_folded.empty()) {
        const uint64_t h = foldedHash(name);
        auto it = std::lower_bound(m_folded.begin(), m_folded.end(), std::make_pair(h, uint32_t(0)));
        for (; it != m_folded.end() && it->first == h; ++it) {
            std::string_view other = m_entries[it->second].name;
            if (other.size() == name.size() && MinizLookup::compare(other, name) == 0)
                return &m_entries[it->second];
        }
        return nullptr;
    }
    // No name has an upper-case letter: the only candidate is `name` lower-cased.
    if (!hasUpper(name))
        return nullptr;
    std::string lower(name);
    for (char& c : lower)
        if (c >= 'A' && c <= 'Z')
            c = static_cast<char>(c - 'A' + 'a');
    return find(lower);
}

uint64_t ZipArchive::dataOffset(const ZipEntry& e) const
{
    // Called once per storage record: the name is only copied when there is an error to report.
    auto name = [&] { return std::string(e.name); };
    if (e.localHeaderOffset > m_size || m_size - e.localHeaderOffset < kLocalHeaderSize)
        throw FormatError("zip record '" + name() + "': local header at " + std::to_string(e.localHeaderOffset)
            + " is past the end");
    uint8_t header[kLocalHeaderSize];
    m_file.readInto(m_base + e.localHeaderOffset, header);
    const Bytes h(header);
    if (readU32At(h, 0) != kLocalHeaderSig)
        throw FormatError("zip record '" + name() + "': bad local header signature at "
            + std::to_string(m_base + e.localHeaderOffset));
    uint64_t nameLen = h[26] | h[27] << 8;
    uint64_t extraLen = h[28] | h[29] << 8;
    uint64_t start = e.localHeaderOffset + kLocalHeaderSize + nameLen + extraLen;
    if (start > m_size || e.compressedSize > m_size - start)
        throw FormatError("zip record '" + name() + "': data (" + std::to_string(e.compressedSize)
            + " bytes at " + std::to_string(m_base + start) + ") runs past the end of the archive");
    return start;
}

namespace {

// What contents() checks before it reads a record.
void checkReadable(const ZipEntry& e, uint64_t maxSize)
{
    const std::string name(e.name);
    if (e.flags & 1)
        throw FormatError("zip record '" + name + "' is encrypted");
    if (e.size > maxSize)
        throw FormatError("zip record '" + name + "' inflates to " + std::to_string(e.size) + " bytes, more than the "
            + std::to_string(maxSize) + "-byte limit");
    if (e.method == 0 && e.size != e.compressedSize)
        throw FormatError("zip record '" + name + "' is stored but its sizes disagree (" + std::to_string(e.size) + " vs "
            + std::to_string(e.compressedSize) + ")");
}

} // namespace

std::shared_ptr<const Region> ZipArchive::storedContents(const ZipEntry& e, uint64_t maxSize) const
{
    if (e.method != 0)
        return nullptr;
    checkReadable(e, maxSize);
    const uint64_t offset = dataOffset(e);
    checkInside(offset, e.size);
    return m_file.region(m_base + offset, e.size);
}

Bytes ZipArchive::contents(const ZipEntry& e, std::vector<uint8_t>& buffer, uint64_t maxSize) const
{
    checkReadable(e, maxSize);
    const std::string name(e.name);
    if (e.method == 0)
        return read(dataOffset(e), e.size, buffer);
    if (e.method != 8)
        throw FormatError("zip record '" + name + "' uses unsupported compression method " + std::to_string(e.method));
    // Deflate expands at most 1032:1, so a larger declared size is a lie; refuse it before allocating.
    if (e.size / 1032 > e.compressedSize + 1)
        throw FormatError("zip record '" + name + "' claims " + std::to_string(e.size) + " bytes inflated from "
            + std::to_string(e.compressedSize) + ", more than deflate can expand");
    const uint64_t inStart = dataOffset(e);
    // Grow the buffer as output arrives instead of trusting the declared size up front; the input is read
    // in windows as zlib takes it.
    buffer.clear();
    buffer.resize(static_cast<size_t>(std::min<uint64_t>(e.size, std::max<uint64_t>(4 * std::min<uint64_t>(e.compressedSize, 1 << 20), 1 << 16))));
    std::vector<uint8_t> inWindow;
    constexpr uint64_t kWindow = uint64_t(1) << 20;

    z_stream zs {};
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK)
        throw FormatError("zlib initialisation failed");
    uint64_t inPos = 0;
    uint64_t outPos = 0;
    int rc = Z_OK;
    Bytes in;
    size_t inUsed = 0;
    try {
        while (rc == Z_OK) {
            if (outPos == buffer.size() && buffer.size() < e.size)
                buffer.resize(static_cast<size_t>(std::min<uint64_t>(e.size, 2 * buffer.size())));
            if (inUsed == in.size() && inPos < e.compressedSize) {
                in = read(inStart + inPos, std::min(kWindow, e.compressedSize - inPos), inWindow);
                inUsed = 0;
            }
            constexpr uint64_t kChunk = 1u << 30;
            zs.next_in = const_cast<Bytef*>(in.data() + inUsed);
            zs.avail_in = static_cast<uInt>(in.size() - inUsed);
            zs.next_out = buffer.data() + outPos;
            zs.avail_out = static_cast<uInt>(std::min<uint64_t>(kChunk, buffer.size() - outPos));
            uInt inBefore = zs.avail_in;
            uInt outBefore = zs.avail_out;
            rc = inflate(&zs, Z_NO_FLUSH);
            inUsed += inBefore - zs.avail_in;
            inPos += inBefore - zs.avail_in;
            outPos += outBefore - zs.avail_out;
            if (rc == Z_BUF_ERROR && outPos == e.size) {
                rc = Z_DATA_ERROR; // more output than the declared size
                break;
            }
            if (rc == Z_BUF_ERROR && (inPos == e.compressedSize || (inBefore == zs.avail_in && outBefore == zs.avail_out)))
                break; // input exhausted before the stream ended, or no progress at all
            if (rc == Z_BUF_ERROR)
                rc = Z_OK;
        }
    } catch (...) {
        inflateEnd(&zs);
        throw;
    }
    inflateEnd(&zs);
    if (rc != Z_STREAM_END || outPos != e.size)
        throw FormatError("zip record '" + name + "': corrupt deflate data (inflated " + std::to_string(outPos)
            + " of " + std::to_string(e.size) + " bytes)");
    return { buffer.data(), buffer.size() };
}

uint64_t ZipArchive::torchDataOffset(const ZipEntry& e, uint64_t alignment) const
{
    uint64_t start = e.localHeaderOffset + kLocalHeaderSize + e.name.size() + 4; // "FB" id + length
    if (e.size >= 0xFFFFFFFF || e.localHeaderOffset >= 0xFFFFFFFF) {
        start += 4; // the ZIP64 extra's id + length
        if (e.size >= 0xFFFFFFFF)
            start += 16;
        if (e.localHeaderOffset >= 0xFFFFFFFF)
            start += 8;
    }
    const uint64_t mod = start % alignment;
    return mod == 0 ? start : start + alignment - mod;
}

bool ZipArchive::torchLayoutHolds(uint64_t alignment, size_t samples) const
{
    if (alignment == 0 || m_entries.empty())
        return false;
    const size_t n = m_entries.size();
    const size_t step = std::max<size_t>(1, n / std::max<size_t>(1, samples));
    for (size_t i = 0;; i += step) {
        const size_t at = std::min(i, n - 1);
        const ZipEntry& e = m_entries[at];
        try {
            if (e.method != 0 || dataOffset(e) != torchDataOffset(e, alignment))
                return false;
        } catch (const FormatError&) {
            return false;
        }
        if (at == n - 1)
            return true;
    }
}

void ZipArchive::prefetchLocalHeaders() const
{
    if (!m_file.onDisk())
        return;
    constexpr uint64_t kPage = 4096;
    // Headers closer than this share one request: reading the gap costs less than another round trip.
    constexpr uint64_t kMaxGap = 16 * kPage;
    uint64_t begin = 0, end = 0;
    auto flush = [&] {
        if (end > begin)
            // WILLNEED starts read-ahead for every range at once and returns; reading them one by one would
            // turn a cold file's scattered headers into serial disk reads (1 s instead of 30 ms).
            ::posix_fadvise(m_file.descriptor(), static_cast<off_t>(m_base + begin), static_cast<off_t>(end - begin), POSIX_FADV_WILLNEED);
    };
    for (const ZipEntry& e : m_entries) {
        if (e.localHeaderOffset >= m_size)
            continue;
        const uint64_t first = e.localHeaderOffset & ~(kPage - 1);
        const uint64_t last = std::min<uint64_t>(e.localHeaderOffset + kLocalHeaderSize, m_size) + kPage - 1;
        if (end > begin && first >= begin && first <= end + kMaxGap) {
            end = std::max(end, last & ~(kPage - 1));
            continue;
        }
        flush();
        begin = first;
        end = last & ~(kPage - 1);
    }
    flush();
}

} // namespace sl
