#include "zip_archive.h"

#include "io/byte_reader.h"
#include "io/miniz_lookup.h"

#include <sys/mman.h>
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

uint32_t readU32At(Bytes d, size_t pos)
{
    return static_cast<uint32_t>(d[pos]) | static_cast<uint32_t>(d[pos + 1]) << 8
        | static_cast<uint32_t>(d[pos + 2]) << 16 | static_cast<uint32_t>(d[pos + 3]) << 24;
}

bool hasUpper(std::string_view s)
{
    return std::any_of(s.begin(), s.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
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

ZipArchive::ZipArchive(Bytes data, uint64_t baseOffset)
    : m_data(data)
    , m_base(baseOffset)
{
    if (data.size() < kEndSize)
        throw FormatError("too small to be a zip archive (" + std::to_string(data.size()) + " bytes)");

    // Step 1: find the end record, scanning back over at most a maximal comment.
    size_t lowest = data.size() > kEndSize + kMaxCommentSize ? data.size() - kEndSize - kMaxCommentSize : 0;
    size_t endPos = SIZE_MAX;
    for (size_t pos = data.size() - kEndSize + 1; pos-- > lowest;) {
        if (readU32At(data, pos) != kEndSig)
            continue;
        size_t commentLen = static_cast<size_t>(data[pos + 20]) | static_cast<size_t>(data[pos + 21]) << 8;
        if (pos + kEndSize + commentLen <= data.size()) {
            endPos = pos;
            break;
        }
    }
    if (endPos == SIZE_MAX)
        throw FormatError("zip end-of-central-directory record not found (truncated or not a zip archive)");

    ByteReader end(data.subspan(endPos), baseOffset + endPos);
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
    if (endPos >= kZip64LocatorSize && readU32At(data, endPos - kZip64LocatorSize) == kZip64LocatorSig) {
        ByteReader loc(data.subspan(endPos - kZip64LocatorSize, kZip64LocatorSize));
        loc.skip(8, "zip64 locator");
        uint64_t z64Offset = loc.u64le();
        if (z64Offset > endPos - kZip64LocatorSize || endPos - kZip64LocatorSize - z64Offset < 56)
            throw FormatError("zip64 end record offset " + std::to_string(z64Offset) + " is out of range");
        ByteReader z(data.subspan(z64Offset, endPos - kZip64LocatorSize - z64Offset), baseOffset + z64Offset);
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
    parseCentralDirectory(cdOffset, cdSize, count);
    // miniz compares names ignoring ASCII case. Two names can only differ in case when one has an
    // upper-case letter; only then are names hashed lower-cased, to find such pairs and lookups that
    // match a record only ignoring case.
    const bool upper = std::any_of(m_entries.begin(), m_entries.end(), [](const ZipEntry& e) { return hasUpper(e.name); });
    if (upper)
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

void ZipArchive::parseCentralDirectory(uint64_t cdOffset, uint64_t cdSize, uint64_t count)
{
    ByteReader r(m_data.subspan(cdOffset, cdSize), m_base + cdOffset);
    m_entries.reserve(count);
    m_byName.reserve(count);
    auto nameAt = [this](size_t i) { return m_entries[i].name; };
    for (uint64_t i = 0; i < count; ++i) {
        if (r.u32le("central directory header") != kCentralHeaderSig)
            r.fail("zip central directory entry " + std::to_string(i) + " has a bad signature");
        ZipEntry e;
        r.skip(4, "central directory header"); // versions
        e.flags = r.u16le();
        e.method = r.u16le();
        r.skip(4, "central directory header"); // time, date
        e.crc32 = r.u32le();
        e.compressedSize = r.u32le();
        e.size = r.u32le();
        uint16_t nameLen = r.u16le();
        uint16_t extraLen = r.u16le();
        uint16_t commentLen = r.u16le();
        uint16_t diskStart = r.u16le();
        r.skip(6, "central directory header"); // attributes
        e.localHeaderOffset = r.u32le();
        e.name = r.takeString(nameLen, "zip entry name");
        ByteReader extra(r.take(extraLen, "zip extra field"));
        r.skip(commentLen, "zip entry comment");

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
            if (diskStart == 0xFFFF)
                field.u32le("zip64 disk number");
        }
        if (e.localHeaderOffset > m_data.size() || e.compressedSize > m_data.size())
            r.fail("zip entry '" + std::string(e.name) + "' points outside the archive");
        // find() takes the first occurrence; duplicates stay visible in entries() (findAsTorch: torch's pick).
        m_entries.push_back(e);
        if (m_byName.insert(m_entries.size() - 1, nameAt) != m_entries.size() - 1)
            m_duplicates.push_back(m_entries.size() - 1);
    }
}

const ZipEntry* ZipArchive::find(std::string_view name) const
{
    size_t i = m_byName.find(name, [this](size_t k) { return m_entries[k].name; });
    return i == NameIndex::npos ? nullptr : &m_entries[i];
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
    if (e.localHeaderOffset > m_data.size() || m_data.size() - e.localHeaderOffset < kLocalHeaderSize)
        throw FormatError("zip record '" + name() + "': local header at " + std::to_string(e.localHeaderOffset)
            + " is past the end");
    if (readU32At(m_data, e.localHeaderOffset) != kLocalHeaderSig)
        throw FormatError("zip record '" + name() + "': bad local header signature at "
            + std::to_string(m_base + e.localHeaderOffset));
    size_t p = e.localHeaderOffset + 26;
    uint64_t nameLen = m_data[p] | m_data[p + 1] << 8;
    uint64_t extraLen = m_data[p + 2] | m_data[p + 3] << 8;
    uint64_t start = e.localHeaderOffset + kLocalHeaderSize + nameLen + extraLen;
    if (start > m_data.size() || e.compressedSize > m_data.size() - start)
        throw FormatError("zip record '" + name() + "': data (" + std::to_string(e.compressedSize)
            + " bytes at " + std::to_string(m_base + start) + ") runs past the end of the archive");
    return start;
}

Bytes ZipArchive::storedData(const ZipEntry& e) const
{
    if (e.method != 0)
        throw FormatError("zip record '" + std::string(e.name) + "' is compressed (method "
            + std::to_string(e.method) + ")");
    if (e.flags & 1)
        throw FormatError("zip record '" + std::string(e.name) + "' is encrypted");
    if (e.size != e.compressedSize)
        throw FormatError("zip record '" + std::string(e.name) + "' is stored but its sizes disagree ("
            + std::to_string(e.size) + " vs " + std::to_string(e.compressedSize) + ")");
    return m_data.subspan(dataOffset(e), e.size);
}

Bytes ZipArchive::contents(const ZipEntry& e, std::vector<uint8_t>& buffer, uint64_t maxSize) const
{
    if (e.method == 0)
        return storedData(e);
    const std::string name(e.name);
    if (e.method != 8)
        throw FormatError("zip record '" + name + "' uses unsupported compression method " + std::to_string(e.method));
    if (e.flags & 1)
        throw FormatError("zip record '" + name + "' is encrypted");
    if (e.size > maxSize)
        throw FormatError("zip record '" + name + "' inflates to " + std::to_string(e.size) + " bytes, more than the "
            + std::to_string(maxSize) + "-byte limit");
    // Deflate expands at most 1032:1, so a larger declared size is a lie; refuse it before allocating.
    if (e.size / 1032 > e.compressedSize + 1)
        throw FormatError("zip record '" + name + "' claims " + std::to_string(e.size) + " bytes inflated from "
            + std::to_string(e.compressedSize) + ", more than deflate can expand");
    Bytes in = m_data.subspan(dataOffset(e), e.compressedSize);
    // Grow the buffer as output arrives instead of trusting the declared size up front.
    buffer.clear();
    buffer.resize(static_cast<size_t>(std::min<uint64_t>(e.size, std::max<uint64_t>(4 * in.size(), 1 << 16))));

    z_stream zs {};
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK)
        throw FormatError("zlib initialisation failed");
    uint64_t inPos = 0;
    uint64_t outPos = 0;
    int rc = Z_OK;
    // zlib counts in uInt; feed and drain in chunks so records over 4 GiB work too.
    while (rc == Z_OK) {
        if (outPos == buffer.size() && buffer.size() < e.size)
            buffer.resize(static_cast<size_t>(std::min<uint64_t>(e.size, 2 * buffer.size())));
        constexpr uint64_t kChunk = 1u << 30;
        zs.next_in = const_cast<Bytef*>(in.data() + inPos);
        zs.avail_in = static_cast<uInt>(std::min<uint64_t>(kChunk, in.size() - inPos));
        zs.next_out = buffer.data() + outPos;
        zs.avail_out = static_cast<uInt>(std::min<uint64_t>(kChunk, buffer.size() - outPos));
        uInt inBefore = zs.avail_in;
        uInt outBefore = zs.avail_out;
        rc = inflate(&zs, Z_NO_FLUSH);
        inPos += inBefore - zs.avail_in;
        outPos += outBefore - zs.avail_out;
        if (rc == Z_BUF_ERROR && outPos == e.size) {
            rc = Z_DATA_ERROR; // more output than the declared size
            break;
        }
        if (rc == Z_BUF_ERROR && (inPos == in.size() || (inBefore == zs.avail_in && outBefore == zs.avail_out)))
            break; // input exhausted before the stream ended, or no progress at all
        if (rc == Z_BUF_ERROR)
            rc = Z_OK;
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
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    // Headers closer than this share one request: reading the gap costs less than another round trip.
    const uintptr_t maxGap = 16 * page;
    const uintptr_t base = reinterpret_cast<uintptr_t>(m_data.data());
    uintptr_t begin = 0;
    uintptr_t end = 0;
    auto flush = [&] {
        if (end > begin)
            // WILLNEED starts read-ahead for every range at once and returns; populating them one by one
            // would turn a cold file's scattered headers into serial disk reads (1 s instead of 30 ms).
            ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED); // a hint: errors do not matter
    };
    for (const ZipEntry& e : m_entries) {
        if (e.localHeaderOffset >= m_data.size())
            continue;
        uint64_t headerEnd = std::min<uint64_t>(e.localHeaderOffset + kLocalHeaderSize, m_data.size());
        uintptr_t first = (base + e.localHeaderOffset) & ~(page - 1);
        uintptr_t last = (base + headerEnd - 1) & ~(page - 1);
        if (end > begin && first >= begin && first <= end + maxGap) {
            end = std::max(end, last + page);
            continue;
        }
        flush();
        begin = first;
        end = last + page;
    }
    flush();
}

} // namespace sl
