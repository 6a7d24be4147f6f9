#pragma once
// A bounded cursor over bytes. Every read checks the bytes that remain first and throws FormatError
// with the offset and the shortfall, so readers never index past their input or trust a length field.

#include "io/bytes.h"
#include "util/error.h"

#include <cstring>
#include <string>
#include <string_view>

namespace sl {

class ByteReader {
public:
    explicit ByteReader(Bytes data, uint64_t baseOffset = 0)
        : m_data(data)
        , m_base(baseOffset)
    {
    }

    size_t position() const { return m_pos; }
    uint64_t absolutePosition() const { return m_base + m_pos; }
    size_t remaining() const { return m_data.size() - m_pos; }
    bool atEnd() const { return m_pos == m_data.size(); }
    bool has(size_t n) const { return n <= remaining(); }

    void seek(size_t pos)
    {
        if (pos > m_data.size())
            fail("seek to offset " + std::to_string(pos) + " past the end (" + std::to_string(m_data.size())
                + " bytes)");
        m_pos = pos;
    }
    void skip(size_t n, const char* what)
    {
        need(n, what);
        m_pos += n;
    }
    Bytes take(size_t n, const char* what)
    {
        need(n, what);
        Bytes out = m_data.subspan(m_pos, n);
        m_pos += n;
        return out;
    }
    std::string_view takeString(size_t n, const char* what)
    {
        Bytes b = take(n, what);
        return { reinterpret_cast<const char*>(b.data()), b.size() };
    }

    uint8_t u8(const char* what = "byte")
    {
        need(1, what);
        return m_data[m_pos++];
    }
    uint16_t u16le(const char* what = "u16") { return static_cast<uint16_t>(uintLE(2, what)); }
    uint32_t u32le(const char* what = "u32") { return static_cast<uint32_t>(uintLE(4, what)); }
    uint64_t u64le(const char* what = "u64") { return uintLE(8, what); }
    uint64_t u64(bool littleEndian, const char* what = "u64")
    {
        uint64_t v = uintLE(8, what);
        return littleEndian ? v : __builtin_bswap64(v);
    }

    [[noreturn]] void fail(const std::string& message) const
    {
        throw FormatError(message + " (at byte " + std::to_string(absolutePosition()) + ")");
    }

private:
    // The check stays small enough to inline into every read; building the message is kept out of line.
    void need(size_t n, const char* what) const
    {
        if (n > remaining()) [[unlikely]]
            truncated(n, what);
    }
    [[noreturn, gnu::noinline, gnu::cold]] void truncated(size_t n, const char* what) const
    {
        fail(std::string("truncated ") + what + ": needs " + std::to_string(n) + " bytes, "
            + std::to_string(remaining()) + " remain");
    }
    uint64_t uintLE(unsigned n, const char* what)
    {
        need(n, what);
        uint64_t v = 0;
        for (unsigned i = 0; i < n; ++i)
            v |= static_cast<uint64_t>(m_data[m_pos + i]) << (8 * i);
        m_pos += n;
        return v;
    }

    Bytes m_data;
    uint64_t m_base = 0;
    size_t m_pos = 0;
};

} // namespace sl
