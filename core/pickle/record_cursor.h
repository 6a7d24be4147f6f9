#pragma once
// The opcode reads shared by the one-step record matchers (pickle/tensor_record.h, pickle/dataclass_record.h):
// GETs, string literals, ints and int tuples, decoded exactly as the opcode loop decodes them. Any surprise,
// a short read included, fails the match rather than throwing; the opcode loop then reports it. What a
// record memoises (PUT or MEMOIZE) is the record's own, so each matcher adds that on top.
//
// Checked, every read is checked against the bytes that remain. Unchecked, the caller has made sure more
// bytes remain than the record can span, so only a string's length is checked: one longer than
// kUncheckedString ends the match with `tooLong` set, for the checked cursor to take again. Every method is
// inlined into its matcher: as calls they took a third of the tensor matcher's time.

#include "io/bytes.h"

#include <cstdint>
#include <string_view>

namespace sl::pickle {

template <bool Checked> class RecordCursor {
public:
    static constexpr size_t kUncheckedString = 256;
    // What an unchecked int tuple of MaxRank ints and its closing opcodes can span at most (LONG1 of 8 bytes).
    static constexpr size_t spanOfInts(size_t maxRank) { return maxRank * 10 + 8; }

    RecordCursor(Bytes data, size_t pos)
        : m_data(data)
        , m_pos(pos)
    {
    }

    [[gnu::always_inline]] bool op(uint8_t want)
    {
        if ((Checked && m_pos >= m_data.size()) || m_data[m_pos] != want)
            return false;
        ++m_pos;
        return true;
    }
    [[gnu::always_inline]] uint8_t peek() const { return !Checked || m_pos < m_data.size() ? m_data[m_pos] : 0; }
    [[gnu::always_inline]] static bool isGet(uint8_t o) { return o == 'h' || o == 'j'; }
    [[gnu::always_inline]] static bool isLiteral(uint8_t o) { return o == 'X' || o == 0x8c; }
    size_t pos() const { return m_pos; }

    // BINGET or LONG_BINGET.
    [[gnu::always_inline]] bool get(uint64_t& slot)
    {
        const uint8_t o = peek();
        if (!isGet(o))
            return false;
        ++m_pos;
        return unsignedArg(o == 'h' ? 1 : 4, slot);
    }
    // SHORT_BINUNICODE or BINUNICODE: a view of the pickle's bytes.
    [[gnu::always_inline]] bool literal(std::string_view& text)
    {
        const uint8_t o = peek();
        if (!isLiteral(o))
            return false;
        ++m_pos;
        uint64_t n = 0;
        if (!unsignedArg(o == 'X' ? 4 : 1, n))
            return false;
        if (!Checked && n > kUncheckedString) {
            tooLong = true;
            return false;
        }
        if (Checked && n > m_data.size() - m_pos)
            return false;
        text = std::string_view(reinterpret_cast<const char*>(m_data.data() + m_pos), n);
        m_pos += n;
        return true;
    }
    // BININT1, BININT2, BININT or LONG1 (little-endian two's complement of up to 8 bytes).
    [[gnu::always_inline]] bool integer(int64_t& out)
    {
        const uint8_t o = peek();
        uint64_t v = 0;
        switch (o) {
        case 'K':
            return ++m_pos, unsignedArg(1, v) && (out = static_cast<int64_t>(v), true);
        case 'M':
            return ++m_pos, unsignedArg(2, v) && (out = static_cast<int64_t>(v), true);
        case 'J':
            return ++m_pos, unsignedArg(4, v) && (out = static_cast<int32_t>(static_cast<uint32_t>(v)), true);
        case 0x8a: {
            uint64_t n = 0;
            ++m_pos;
            if (!unsignedArg(1, n) || n == 0 || n > 8 || !unsignedArg(static_cast<unsigned>(n), v))
                return false;
            if (n < 8 && (v >> (8 * n - 1)) & 1)
                v |= ~uint64_t(0) << (8 * n);
            out = static_cast<int64_t>(v);
            return true;
        }
        default:
            return false;
        }
    }
    // A tuple of at most MaxRank ints: EMPTY_TUPLE, TUPLE1-3 or MARK ... TUPLE. Longer ones fail the match.
    template <size_t MaxRank> [[gnu::always_inline]] bool ints(int64_t* dims, uint8_t& rankOut)
    {
        static_assert(MaxRank < 256);
        rankOut = 0;
        if (op(')'))
            return true;
        const bool marked = op('(');
        // Counted here, not in the caller's record: a store to dims[] may alias a uint8_t there, which kept
        // the count in memory (an eighth of the tensor matcher's time).
        size_t rank = 0;
        while (true) {
            const uint8_t o = peek();
            if (o != 'K' && o != 'M' && o != 'J' && o != 0x8a)
                break;
            if (rank == MaxRank || !integer(dims[rank]))
                return false;
            ++rank;
        }
        if (marked ? !op('t') : (rank < 1 || rank > 3 || !op(static_cast<uint8_t>(0x84 + rank))))
            return false;
        rankOut = static_cast<uint8_t>(rank);
        return true;
    }

    bool tooLong = false; // unchecked: a string longer than kUncheckedString

protected:
    // Reads an n-byte little-endian argument.
    [[gnu::always_inline]] bool unsignedArg(unsigned n, uint64_t& v)
    {
        if (Checked && n > m_data.size() - m_pos)
            return false;
        v = 0;
        for (unsigned i = 0; i < n; ++i)
            v |= uint64_t(m_data[m_pos + i]) << (8 * i);
        m_pos += n;
        return true;
    }

    Bytes m_data;
    size_t m_pos;
};

// Runs `match(cursor, record)` with the unchecked Cursor<false> where at least `span` bytes remain, and with
// the checked Cursor<true> where fewer do or the unchecked one met a string too long for it.
template <template <bool> class Cursor, typename Record, typename Match>
bool matchRecord(Bytes data, size_t pos, size_t span, Record& r, Match match)
{
    if (pos <= data.size() && data.size() - pos >= span) {
        Cursor<false> fast(data, pos, r);
        const bool matched = match(fast, r);
        if (matched || !fast.tooLong)
            return matched;
    }
    Cursor<true> c(data, pos, r);
    return match(c, r);
}

} // namespace sl::pickle
