#pragma once
// Streaming JSON output over rapidjson's Writer. Strings from checkpoints are not guaranteed to be valid
// UTF-8 (pickled names may carry lone surrogates), so every string goes through `sanitizeUtf8` first and
// the output is always valid JSON.

#include "util/utf8.h"

#include <cstring>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace sl {


// Length of the longest prefix of `s` that JSON writes as it is: no '"', '\\' or byte below 0x20, and with
// `AsciiOnly` no byte from 0x80 up either. Eight bytes at a time (a byte below 0x20, or equal to 0x22 or
// 0x5C, sets its high bit in the test; bytes from 0x80 up never do, so AsciiOnly adds their own high bits),
// then byte by byte: names, paths and reasons are almost always all prefix.
template <bool AsciiOnly> inline size_t jsonPlainSpan(std::string_view s)
{
    constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
    const auto hasZero = [](uint64_t v) { return (v - kOnes) & ~v & kHigh; };
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
        uint64_t w;
        std::memcpy(&w, s.data() + i, 8);
        if ((AsciiOnly ? w & kHigh : 0) | ((w - 0x20 * kOnes) & ~w & kHigh) | hasZero(w ^ (0x22 * kOnes))
            | hasZero(w ^ (0x5C * kOnes)))
            break;
    }
    for (; i < s.size(); ++i) {
        const auto c = static_cast<uint8_t>(s[i]);
        if (c < 0x20 || (AsciiOnly && c >= 0x80) || c == '"' || c == '\\')
            break;
    }
    return i;
}

inline size_t jsonPlainPrefix(std::string_view s) { return jsonPlainSpan<false>(s); }

// Whether `s` is all printable ASCII other than '"' and '\\': valid UTF-8 that JSON writes as it is, found
// in one pass. JsonWriter::string checked UTF-8 and then escapes in two passes, a fifth of listing a
// DeepSeek-V3-sized index as JSON (its keys go through it too).
inline bool jsonPlainAscii(std::string_view s) { return jsonPlainSpan<true>(s) == s.size(); }

namespace detail {
// rapidjson's Writer, plus strings that need no escaping written in one copy: its own loop escapes byte by
// byte, and names and paths are almost always plain. (Its SSE2 path, RAPIDJSON_SSE2, lets the control bytes
// 0x1A-0x1F through unescaped in the Debian 12 version, which a test caught.)
class PlainWriter : public rapidjson::Writer<rapidjson::StringBuffer> {
public:
    using rapidjson::Writer<rapidjson::StringBuffer>::Writer;
    // A key or a string value whose bytes are all valid UTF-8 and none of '"', '\\' or below 0x20.
    void plainString(const char* s, size_t n)
    {
        Prefix(rapidjson::kStringType);
        char* out = os_->Push(n + 2);
        out[0] = '"';
        std::memcpy(out + 1, s, n);
        out[n + 1] = '"';
        EndValue(true);
    }
    // A whole value whose text the caller writes: `write(out)` fills at most `most` bytes from `out` and
    // returns where it stopped.
    template <typename Write> void rawValue(size_t most, Write&& write)
    {
        Prefix(rapidjson::kObjectType);
        char* const out = os_->Push(most);
        char* const end = write(out);
        os_->Pop(most - static_cast<size_t>(end - out));
        EndValue(true);
    }
};
} // namespace detail

class JsonWriter {
public:
    JsonWriter()
        : m_writer(m_buffer)
    {
    }
    void beginObject() { m_writer.StartObject(); }
    void endObject() { m_writer.EndObject(); }
    void beginArray() { m_writer.StartArray(); }
    void endArray() { m_writer.EndArray(); }
    void key(std::string_view k);
    void string(std::string_view s);
    void integer(int64_t v) { m_writer.Int64(v); }
    void unsignedInteger(uint64_t v) { m_writer.Uint64(v); }
    void number(double v);
    void boolean(bool b) { m_writer.Bool(b); }
    void null() { m_writer.Null(); }
    // A value as JSON text the caller writes itself (see detail::PlainWriter::rawValue), in place of the
    // calls that would write it: for the same bytes at a fraction of the cost, where every one is known.
    template <typename Write> void rawValue(size_t most, Write&& write) { m_writer.rawValue(most, write); }

    // Convenience: "k": value.
    void field(std::string_view k, std::string_view v)
    {
        key(k);
        string(v);
    }
    void field(std::string_view k, const char* v)
    {
        key(k);
        string(v);
    }
    void field(std::string_view k, int64_t v)
    {
        key(k);
        integer(v);
    }
    void field(std::string_view k, uint64_t v)
    {
        key(k);
        unsignedInteger(v);
    }
    void field(std::string_view k, bool v)
    {
        key(k);
        boolean(v);
    }
    // "k": [1, 2, 3] from any range of integers (a Shape, strides).
    template <typename Ints> void integers(std::string_view k, const Ints& values)
    {
        key(k);
        beginArray();
        for (int64_t v : values)
            integer(v);
        endArray();
    }

    std::string_view text() const { return { m_buffer.GetString(), m_buffer.GetSize() }; }
    // Forgets the text written so far (after it was handed on), keeping the writer's place in the document:
    // a long document is streamed out in parts.
    void clearText() { m_buffer.Clear(); }
    // Starts a new document in the emptied buffer (rapidjson's writer takes one root value per document),
    // keeping the buffer's room: a writer reused for many small documents.
    void restart()
    {
        m_buffer.Clear();
        m_writer.Reset(m_buffer);
    }

private:
    rapidjson::StringBuffer m_buffer;
    detail::PlainWriter m_writer;
};

} // namespace sl
