#include "tar_archive.h"

#include "util/error.h"

#include <algorithm>
#include <cstring>

namespace sl {

namespace {

constexpr size_t kBlock = 512;

uint64_t parseOctal(const uint8_t* p, size_t n)
{
    uint64_t v = 0;
    size_t i = 0;
    while (i < n && (p[i] == ' ' || p[i] == 0))
        ++i;
    for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i) {
        if (v > (UINT64_MAX >> 3))
            throw FormatError("tar member size overflows");
        v = v << 3 | static_cast<uint64_t>(p[i] - '0');
    }
    return v;
}

std::string cString(const uint8_t* p, size_t n)
{
    size_t len = 0;
    while (len < n && p[len])
        ++len;
    return { reinterpret_cast<const char*>(p), len };
}

bool allZero(const uint8_t* p) { return std::all_of(p, p + kBlock, [](uint8_t b) { return b == 0; }); }

} // namespace

bool looksLikeTar(Bytes data)
{
    return data.size() >= kBlock && (std::memcmp(data.data() + 257, "ustar", 5) == 0);
}

std::vector<TarMember> listTarMembers(const InputFile& file)
{
    // pax and GNU long names longer than this are not names torch wrote.
    constexpr uint64_t kMaxLongName = 1 << 16;
    std::vector<TarMember> out;
    std::string pendingName;
    uint64_t pos = 0;
    const uint64_t size = file.size();
    uint8_t h[kBlock];
    std::vector<uint8_t> buffer;
    while (pos + kBlock <= size) {
        file.readInto(pos, h);
        if (allZero(h))
            break;
        uint64_t memberSize = parseOctal(h + 124, 12);
        char type = static_cast<char>(h[156]);
        uint64_t dataStart = pos + kBlock;
        if (memberSize > size - dataStart)
            throw FormatError("tar member at " + std::to_string(pos) + " claims " + std::to_string(memberSize)
                + " bytes, past the end of the archive");
        std::string name = cString(h, 100);
        std::string prefix = cString(h + 345, 155);
        if (!prefix.empty() && std::memcmp(h + 257, "ustar", 5) == 0)
            name = prefix + "/" + name;
        if (type == 'L' || type == 'x') {
            const Bytes text = file.read(dataStart, std::min(memberSize, kMaxLongName), buffer);
            if (type == 'L') {
                pendingName = cString(text.data(), text.size());
            } else {
                // pax records: "<len> path=<name>\n"
                std::string recs(reinterpret_cast<const char*>(text.data()), text.size());
                size_t at = recs.find(" path=");
                if (at != std::string::npos) {
                    size_t end = recs.find('\n', at);
                    pendingName = recs.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6);
                }
            }
        } else if (type == '0' || type == '\0' || type == '7') {
            TarMember m;
            m.name = pendingName.empty() ? name : pendingName;
            m.offset = dataStart;
            m.size = memberSize;
            out.push_back(std::move(m));
            pendingName.clear();
        } else {
            pendingName.clear();
        }
        uint64_t padded = (memberSize + kBlock - 1) / kBlock * kBlock;
        if (padded < memberSize)
            break;
        pos = dataStart + padded;
    }
    return out;
}

} // namespace sl
