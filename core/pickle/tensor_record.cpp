#include "tensor_record.h"

#include <algorithm>

namespace sl::pickle {

namespace {

// Reads the record's opcodes; any surprise (a short read included) fails the match rather than throwing:
// the opcode loop then reports it. Every method is inlined into the one matcher: as calls they took a third
// of its time. Checked, every read is checked against the bytes that remain. Unchecked, where more bytes
// remain than any record it takes can span (kUncheckedSpan), only a string's length is: one longer than
// kUncheckedString ends the match with `tooLong` set, for the checked cursor to take again.
constexpr size_t kUncheckedString = 256;
// Three strings of kUncheckedString, two tuples of TensorRecord::kMaxRank LONG1s and the rest, with room.
constexpr size_t kUncheckedSpan = 4096;
static_assert(3 * (kUncheckedString + 10) + 2 * (TensorRecord::kMaxRank * 10 + 8) + 128 <= kUncheckedSpan);

template <bool Checked> class Cursor {
public:
    Cursor(Bytes data, size_t pos, TensorRecord& r)
        : m_data(data)
        , m_pos(pos)
        , m_r(r)
    {
    }

    [[gnu::always_inline]] bool op(uint8_t want)
    {
        if ((Checked && m_pos >= m_data.size()) || m_data[m_pos] != want)
            return false;
        ++m_pos;
        return true;
    }
    [[gnu::always_inline]] bool get(TensorRecord::Ref& out)
    {
        uint8_t o = peek();
        if (o != 'h' && o != 'j')
            return false;
        out.literal = false;
        if (!skipOpcode() || !unsignedArg(o == 'h' ? 1 : 4, out.slot))
            return false;
        m_highestRead = std::max(m_highestRead, out.slot);
        return true;
    }
    // A string: GET, or a literal with an optional PUT.
    [[gnu::always_inline]] bool str(TensorRecord::Ref& out, TensorRecord::Part part)
    {
        uint8_t o = peek();
        if (o == 'h' || o == 'j')
            return get(out);
        if (o != 'X' && o != 0x8c)
            return false;
        uint64_t n = 0;
        if (!skipOpcode() || !unsignedArg(o == 'X' ? 4 : 1, n))
            return false;
        if (!Checked && n > kUncheckedString) {
            tooLong = true;
            return false;
        }
        if (Checked && n > m_data.size() - m_pos)
            return false;
        out.literal = true;
        out.text = std::string_view(reinterpret_cast<const char*>(m_data.data() + m_pos), n);
        m_pos += n;
        return optionalPut(part);
    }
    [[gnu::always_inline]] bool integer(int64_t& out)
    {
        uint8_t o = peek();
        uint64_t v = 0;
        switch (o) {
        case 'K':
            return skipOpcode() && unsignedArg(1, v) && (out = static_cast<int64_t>(v), true);
        case 'M':
            return skipOpcode() && unsignedArg(2, v) && (out = static_cast<int64_t>(v), true);
        case 'J':
            return skipOpcode() && unsignedArg(4, v) && (out = static_cast<int32_t>(static_cast<uint32_t>(v)), true);
        case 0x8a: { // LONG1: little-endian two's complement, as the opcode loop decodes it
            uint64_t n = 0;
            if (!skipOpcode() || !unsignedArg(1, n) || n == 0 || n > 8 || !unsignedArg(static_cast<unsigned>(n), v))
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
    // A tuple of integers, with its optional PUT (an empty tuple has none: picklers never memoise it).
    [[gnu::always_inline]] bool ints(int64_t* dims, uint8_t& rankOut, TensorRecord::Part part)
    {
        rankOut = 0;
        if (op(')'))
            return true;
        const bool marked = op('(');
        // Counted here, not in the record: a store to dims[] may alias a uint8_t there, which kept the
        // count in memory (an eighth of the match's time).
        size_t rank = 0;
        while (true) {
            uint8_t o = peek();
            if (o != 'K' && o != 'M' && o != 'J' && o != 0x8a)
                break;
            if (rank == TensorRecord::kMaxRank || !integer(dims[rank]))
                return false;
            ++rank;
        }
        if (marked ? !op('t') : (rank < 1 || rank > 3 || !op(static_cast<uint8_t>(0x84 + rank))))
            return false;
        rankOut = static_cast<uint8_t>(rank);
        return optionalPut(part);
    }
    [[gnu::always_inline]] bool optionalPut(TensorRecord::Part part)
    {
        uint8_t o = peek();
        if (o != 'q' && o != 'r')
            return true;
        if (m_r.putCount == TensorRecord::kMaxPuts)
            return false;
        uint64_t slot = 0;
        if (!skipOpcode() || !unsignedArg(o == 'q' ? 1 : 4, slot))
            return false;
        m_putsAscend = m_putsAscend && (m_r.putCount ? slot > m_r.puts[m_r.putCount - 1].slot : true);
        m_r.puts[m_r.putCount++] = { slot, part };
        return true;
    }
    // Picklers number new slots upwards, past every slot read before: then no slot is both read and
    // written, nor written twice, and slotsApart need not compare pairs. Known as the record is read.
    bool putsPastReads() const { return m_putsAscend && (m_r.putCount == 0 || m_r.puts[0].slot > m_highestRead); }
    [[gnu::always_inline]] uint8_t peek() const { return !Checked || m_pos < m_data.size() ? m_data[m_pos] : 0; }
    size_t pos() const { return m_pos; }
    bool tooLong = false; // unchecked: a string longer than kUncheckedString

private:
    // Past an opcode byte peek() has seen.
    [[gnu::always_inline]] bool skipOpcode()
    {
        ++m_pos;
        return true;
    }
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
    TensorRecord& m_r;
    uint64_t m_highestRead = 0; // of the slots the record's GETs read
    bool m_putsAscend = true; // each PUT's slot past the one before
};

// No slot both read and written by the record, and none written twice: compared pair by pair where the
// cursor did not see its PUTs numbered past its reads.
bool slotsApart(const TensorRecord& r)
{
    const TensorRecord::Ref* reads[] = { &r.callable, &r.tag, &r.storageClass, &r.key, &r.location, &r.hooksCallable };
    for (uint8_t i = 0; i < r.putCount; ++i) {
        for (const auto* ref : reads)
            if (!ref->literal && ref->slot == r.puts[i].slot)
                return false;
        for (uint8_t j = 0; j < i; ++j)
            if (r.puts[j].slot == r.puts[i].slot)
                return false;
    }
    return true;
}

template <bool Checked> bool match(Cursor<Checked>& c, TensorRecord& r)
{
    using Part = TensorRecord::Part;
    r.putCount = 0;
    // The rebuild function and its arguments' tuple, then the persistent id's tuple.
    if (!c.get(r.callable) || !c.op('(') || !c.op('('))
        return false;
    if (!c.str(r.tag, Part::Tag) || !c.get(r.storageClass) || !c.str(r.key, Part::Key)
        || !c.str(r.location, Part::Location) || !c.integer(r.numel) || !c.op('t') || !c.optionalPut(Part::PersistentId)
        || !c.op('Q'))
        return false;
    if (!c.integer(r.offset) || !c.ints(r.size, r.rank, Part::Size) || !c.ints(r.stride, r.strideRank, Part::Stride))
        return false;
    if (c.op(0x88))
        r.requiresGrad = true;
    else if (c.op(0x89))
        r.requiresGrad = false;
    else
        return false;
    // backward_hooks: OrderedDict(), then the arguments' tuple and the call.
    if (!c.get(r.hooksCallable) || !c.op(')') || !c.op('R') || !c.optionalPut(Part::Hooks) || !c.op('t')
        || !c.optionalPut(Part::Args))
        return false;
    const size_t reduceAt = c.pos();
    if (!c.op('R'))
        return false;
    const size_t putAt = c.pos();
    if (!c.optionalPut(Part::Result))
        return false;
    r.end = c.pos();
    r.lastOpcode = r.end > putAt ? putAt : reduceAt;
    return c.putsPastReads() || slotsApart(r);
}

} // namespace

bool matchTensorRecord(Bytes data, size_t pos, TensorRecord& r)
{
    if (pos <= data.size() && data.size() - pos >= kUncheckedSpan) {
        Cursor<false> fast(data, pos, r);
        const bool matched = match(fast, r);
        if (matched || !fast.tooLong)
            return matched;
    }
    Cursor<true> c(data, pos, r);
    return match(c, r);
}

} // namespace sl::pickle
