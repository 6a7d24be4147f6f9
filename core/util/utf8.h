#pragma once
// UTF-8 in one place: encoding one code point (the readers that decode escapes: pickle's raw-unicode-escape,
// Python string literals in imported key mappings; callers check the range, <= U+10FFFF, first) and the
// strict check of one sequence that keys, JSON output, imports and terminal text share.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace sl {

// Length of the valid UTF-8 sequence at s[i] (1 to 4), or 0 when it is not one: a stray or missing
// continuation byte, an overlong form, a surrogate or a code point past U+10FFFF (Python's strict reading).
inline size_t utf8SequenceLength(std::string_view s, size_t i)
{
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80)
        return 1;
    const size_t n = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || i + n > s.size())
        return 0;
    uint32_t cp = c & (0x7Fu >> n);
    for (size_t k = 1; k < n; ++k) {
        const auto d = static_cast<unsigned char>(s[i + k]);
        if ((d & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (d & 0x3F);
    }
    static constexpr uint32_t kMin[] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

// Length of the pure-ASCII prefix of s. Names and paths are nearly always ASCII; checking eight bytes at a
// time keeps per-character decoding off the hot path of large listings and reports.
inline size_t asciiPrefix(std::string_view s)
{
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
        uint64_t w;
        std::memcpy(&w, s.data() + i, 8);
        if (w & 0x8080808080808080ull)
            break;
    }
    while (i < s.size() && static_cast<uint8_t>(s[i]) < 0x80)
        ++i;
    return i;
}

// Whether the byte is printable ASCII (0x20..0x7E): a terminal shows it as it is, in one column.
inline bool printableAsciiByte(char c)
{
    return static_cast<uint8_t>(c) >= 0x20 && static_cast<uint8_t>(c) < 0x7F;
}

// Whether all eight bytes of w are printable ASCII (0x20..0x7E).
inline bool printableAsciiWord(uint64_t w)
{
    constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
    // A byte below 0x20 (bytes with the high bit set are left out by ~w), or one from 0x7F up.
    return !((w - 0x20 * kOnes) & ~w & kHigh) && !(((w + kOnes) | w) & kHigh);
}

// Length of the prefix of s made of printable ASCII (0x20..0x7E), eight bytes at a time: text a terminal
// shows as it is, one column per byte.
inline size_t printableAsciiPrefix(std::string_view s)
{
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
        uint64_t w;
        std::memcpy(&w, s.data() + i, 8);
        if (!printableAsciiWord(w))
            break;
    }
    while (i < s.size() && printableAsciiByte(s[i]))
        ++i;
    return i;
}

inline void appendUtf8(std::string& out, uint32_t cp)
{
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// The bytes Python's s.encode("latin-1") gives (each code point up to U+00FF as one byte), or nullopt when
// a code point is past U+00FF or a sequence is not UTF-8. Protocol 2 pickles bytes as
// _codecs.encode(text, "latin1").
inline std::optional<std::string> latin1FromUtf8(std::string_view s)
{
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        const auto c = static_cast<uint8_t>(s[i]);
        if (c < 0x80)
            out += static_cast<char>(c);
        else if ((c == 0xC2 || c == 0xC3) && i + 1 < s.size() && (static_cast<uint8_t>(s[i + 1]) & 0xC0) == 0x80)
            out += static_cast<char>(((c & 0x1F) << 6) | (static_cast<uint8_t>(s[++i]) & 0x3F));
        else
            return std::nullopt;
    }
    return out;
}

// Whether every byte of s is part of a valid UTF-8 sequence (utf8SequenceLength).
inline bool isValidUtf8(std::string_view s)
{
    for (size_t i = asciiPrefix(s); i < s.size();) {
        size_t n = utf8SequenceLength(s, i);
        if (!n)
            return false;
        i += n;
    }
    return true;
}

// s with each invalid UTF-8 sequence replaced by U+FFFD; unchanged when it is valid.
inline std::string sanitizeUtf8(std::string_view s)
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

} // namespace sl
