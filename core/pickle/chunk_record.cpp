#include "chunk_record.h"

namespace sl::pickle {

namespace {

// Reads the record's opcodes; any surprise, a read past the end included, ends the match (the opcode loop
// then reports it). Every read is checked against the bytes that remain.
class Cursor {
public:
    Cursor(Bytes data, size_t pos, ChunkRecord& r)
        : m_data(data)
        , m_pos(pos)
        , m_r(r)
    {
    }

    bool op(uint8_t want)
    {
        if (m_pos >= m_data.size() || m_data[m_pos] != want)
            return false;
        ++m_pos;
        return true;
    }
    bool get(uint64_t& slot)
    {
        const uint8_t o = peek();
        if (o != 'h' && o != 'j')
            return false;
        ++m_pos;
        return arg(o == 'h' ? 1 : 4, slot);
    }
    // A key: GET, or a literal with an optional MEMOIZE.
    bool key(ChunkRecord::Ref& out, ChunkRecord::Part part)
    {
        const uint8_t o = peek();
        if (o == 'h' || o == 'j') {
            out.literal = false;
            return get(out.slot);
        }
        if (o != 'X' && o != 0x8c)
            return false;
        ++m_pos;
        uint64_t n = 0;
        if (!arg(o == 'X' ? 4 : 1, n) || n > m_data.size() - m_pos)
            return false;
        out.literal = true;
        out.text = std::string_view(reinterpret_cast<const char*>(m_data.data() + m_pos), n);
        m_pos += n;
        return memoize(part);
    }
    bool integer(int64_t& out)
    {
        const uint8_t o = peek();
        uint64_t v = 0;
        switch (o) {
        case 'K':
            return ++m_pos, arg(1, v) && (out = static_cast<int64_t>(v), true);
        case 'M':
            return ++m_pos, arg(2, v) && (out = static_cast<int64_t>(v), true);
        case 'J':
            return ++m_pos, arg(4, v) && (out = static_cast<int32_t>(static_cast<uint32_t>(v)), true);
        case 0x8a: { // LONG1: little-endian two's complement, as the opcode loop decodes it
            uint64_t n = 0;
            ++m_pos;
            if (!arg(1, n) || n == 0 || n > 8 || !arg(static_cast<unsigned>(n), v))
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
    // A tuple of ints with its optional MEMOIZE (an empty tuple has none: picklers never memoise it).
    bool ints(int64_t* dims, uint8_t& rankOut, ChunkRecord::Part part)
    {
        rankOut = 0;
        if (op(')'))
            return true;
        const bool marked = op('(');
        size_t rank = 0;
        while (true) {
            const uint8_t o = peek();
            if (o != 'K' && o != 'M' && o != 'J' && o != 0x8a)
                break;
            if (rank == ChunkRecord::kMaxRank || !integer(dims[rank]))
                return false;
            ++rank;
        }
        if (marked ? !op('t') : (rank < 1 || rank > 3 || !op(static_cast<uint8_t>(0x84 + rank))))
            return false;
        rankOut = static_cast<uint8_t>(rank);
        return memoize(part);
    }
    bool memoize(ChunkRecord::Part part)
    {
        if (peek() != 0x94)
            return true;
        if (m_r.memoizedCount == ChunkRecord::kMaxMemoized)
            return false;
        ++m_pos;
        m_r.memoized[m_r.memoizedCount++] = part;
        return true;
    }
    uint8_t peek() const { return m_pos < m_data.size() ? m_data[m_pos] : 0; }
    size_t pos() const { return m_pos; }

private:
    bool arg(unsigned n, uint64_t& v)
    {
        if (n > m_data.size() - m_pos)
            return false;
        v = 0;
        for (unsigned i = 0; i < n; ++i)
            v |= uint64_t(m_data[m_pos + i]) << (8 * i);
        m_pos += n;
        return true;
    }

    Bytes m_data;
    size_t m_pos;
    ChunkRecord& m_r;
};

} // namespace

bool matchChunkRecord(Bytes data, size_t pos, ChunkRecord& r)
{
    using Part = ChunkRecord::Part;
    r.memoizedCount = 0;
    Cursor c(data, pos, r);
    if (!c.get(r.classSlot) || !c.op(')') || !c.op(0x81) || !c.memoize(Part::Object) || !c.op('}')
        || !c.memoize(Part::State) || !c.op('('))
        return false;
    for (int i = 0; i < 2; ++i) {
        const Part key = i == 0 ? Part::Key0 : Part::Key1, tuple = i == 0 ? Part::Tuple0 : Part::Tuple1,
                   args = i == 0 ? Part::Args0 : Part::Args1, size = i == 0 ? Part::Size0 : Part::Size1;
        if (!c.key(r.key[i], key) || !c.get(r.sizeSlot[i]) || !c.ints(r.dims[i], r.rank[i], tuple) || !c.op(0x85)
            || !c.memoize(args) || !c.op('R') || !c.memoize(size))
            return false;
    }
    if (!c.op('u') || !c.op('b'))
        return false;
    r.end = c.pos();
    return true;
}

} // namespace sl::pickle
