#include "json_writer.h"

#include "util/utf8.h"

#include <cmath>
#include <cstring>

namespace sl {

namespace {

// Whether s needs no JSON escaping: no '"', '\\' or byte below 0x20, eight bytes at a time.
bool needsNoEscape(std::string_view s)
{
    constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
    const auto hasZero = [](uint64_t v) { return (v - kOnes) & ~v & kHigh; };
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
        uint64_t w;
        std::memcpy(&w, s.data() + i, 8);
        // Bytes below 0x20 (bytes from 0x80 up have their high bit set and are left out by ~w).
        if (((w - 0x2020202020202020ull) & ~w & kHigh) || hasZero(w ^ (0x22 * kOnes)) || hasZero(w ^ (0x5C * kOnes)))
            return false;
    }
    for (; i < s.size(); ++i) {
        const auto c = static_cast<uint8_t>(s[i]);
        if (c < 0x20 || c == '"' || c == '\\')
            return false;
    }
    return true;
}

} // namespace

bool isValidUtf8(std::string_view s)
{
    for (size_t i = asciiPrefix(s); i < s.size();) {
        size_t n = utf8SequenceLength(s, i);
        if (!n)
            return false;
        i += n;
    }
    return true;
}

std::string sanitizeUtf8(std::string_view s)
{
    size_t i = asciiPrefix(s);
    if (i == s.size())
        return std::string(s);
    std::string out;
    out.reserve(s.size());
    out.append(s.substr(0, i));
    while (i < s.size()) {
        size_t n = utf8SequenceLength(s, i);
        if (n) {
            out.append(s.substr(i, n));
            i += n;
        } else {
            out += "\xEF\xBF\xBD";
            ++i;
        }
    }
    return out;
}

void JsonWriter::key(std::string_view k)
{
    string(k); // rapidjson writes a key as a string; the writer's state tells them apart
}

void JsonWriter::string(std::string_view s)
{
    if (!isValidUtf8(s)) {
        const std::string clean = sanitizeUtf8(s);
        m_writer.String(clean.data(), static_cast<rapidjson::SizeType>(clean.size()));
    } else if (needsNoEscape(s)) {
        m_writer.plainString(s.data(), s.size());
    } else {
        m_writer.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
    }
}

void JsonWriter::number(double v)
{
    // JSON has no NaN or infinity; null keeps the document valid.
    if (std::isfinite(v))
        m_writer.Double(v);
    else
        m_writer.Null();
}

} // namespace sl
