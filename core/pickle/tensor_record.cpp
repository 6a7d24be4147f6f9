#include "tensor_record.h"

#include "pickle/record_cursor.h"

#include <algorithm>

namespace sl::pickle {

namespace {

// Where more bytes remain than this, the matcher reads unchecked (pickle/record_cursor.h): three strings,
// two tuples of TensorRecord::kMaxRank LONG1s and the rest, with room.
constexpr size_t kUncheckedSpan = 4096;
static_assert(3 * (RecordCursor<false>::kUncheckedString + 10) + 2 * RecordCursor<false>::spanOfInts(TensorRecord::kMaxRank) + 128
    <= kUncheckedSpan);

// The shared reads, plus the record's PUTs and what it needs to tell they are apart from its GETs.
template <bool Checked> class Cursor : public RecordCursor<Checked> {
    using Base = RecordCursor<Checked>;

public:
    Cursor(Bytes data, size_t pos, TensorRecord& r)
        : Base(data, pos)
        , m_r(r)
    {
    }
    using Base::integer;
    using Base::op;
    using Base::peek;
    using Base::pos;

    [[gnu::always_inline]] bool get(TensorRecord::Ref& out)
    {
        out.literal = false;
        if (!Base::get(out.slot))
            return false;
        m_highestRead = std::max(m_highestRead, out.slot);
        return true;
    }
    // A string: GET, or a literal with an optional PUT.
    [[gnu::always_inline]] bool str(TensorRecord::Ref& out, TensorRecord::Part part)
    {
        if (Base::isGet(peek()))
            return get(out);
        if (!Base::literal(out.text))
            return false;
        out.literal = true;
        return optionalPut(part);
    }
    // A tuple of integers, with its optional PUT (an empty tuple has none: picklers never memoise it).
    [[gnu::always_inline]] bool ints(int64_t* dims, uint8_t& rankOut, TensorRecord::Part part)
    {
        if (op(')')) {
            rankOut = 0;
            return true;
        }
        return Base::template ints<TensorRecord::kMaxRank>(dims, rankOut) && optionalPut(part);
    }
    [[gnu::always_inline]] bool optionalPut(TensorRecord::Part part)
    {
        const uint8_t o = peek();
        if (o != 'q' && o != 'r')
            return true;
        if (m_r.putCount == TensorRecord::kMaxPuts)
            return false;
        uint64_t slot = 0;
        ++this->m_pos;
        if (!this->unsignedArg(o == 'q' ? 1 : 4, slot))
            return false;
        m_putsAscend = m_putsAscend && (m_r.putCount ? slot > m_r.puts[m_r.putCount - 1].slot : true);
        m_r.puts[m_r.putCount++] = { slot, part };
        return true;
    }
    // Picklers number new slots upwards, past every slot read before: then no slot is both read and
    // written, nor written twice, and slotsApart need not compare pairs. Known as the record is read.
    bool putsPastReads() const { return m_putsAscend && (m_r.putCount == 0 || m_r.puts[0].slot > m_highestRead); }

private:
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
    return matchRecord<Cursor>(data, pos, kUncheckedSpan, r, [](auto& c, TensorRecord& record) { return match(c, record); });
}

} // namespace sl::pickle
