#include "dataclass_record.h"

#include "pickle/record_cursor.h"

namespace sl::pickle {

namespace {

// Where more bytes remain than this, the matcher reads unchecked (pickle/record_cursor.h): per field a key
// and a value of at most a string literal or a Size of kMaxRank LONG1s, and the rest, with room.
constexpr size_t kUncheckedSpan = 4096;
static_assert(DataclassRecord::kMaxFields * (2 * (RecordCursor<false>::kUncheckedString + 10)) + 64 <= kUncheckedSpan);
static_assert(RecordCursor<false>::spanOfInts(DataclassRecord::kMaxRank) + 16 <= RecordCursor<false>::kUncheckedString + 10);

// The shared reads, plus the record's MEMOIZEs.
template <bool Checked> class Cursor : public RecordCursor<Checked> {
    using Base = RecordCursor<Checked>;
    using Part = DataclassRecord::Part;

public:
    Cursor(Bytes data, size_t pos, DataclassRecord& r)
        : Base(data, pos)
        , m_r(r)
    {
    }
    using Base::get;
    using Base::op;
    using Base::peek;
    using Base::pos;

    // A key: GET, or a literal with an optional MEMOIZE.
    [[gnu::always_inline]] bool key(DataclassRecord::Ref& out, uint8_t field)
    {
        if (Base::isGet(peek())) {
            out.literal = false;
            return get(out.slot);
        }
        if (!Base::literal(out.text))
            return false;
        out.literal = true;
        return memoize(Part::Key, field);
    }
    [[gnu::always_inline]] bool value(DataclassRecord::Field& f, uint8_t field)
    {
        using Form = DataclassRecord::Form;
        const uint8_t o = peek();
        if (o == 'K' || o == 'M' || o == 'J' || o == 0x8a) {
            f.form = Form::Int;
            return Base::integer(f.integer);
        }
        if (o == 'N') {
            f.form = Form::None;
            return op('N');
        }
        if (Base::isLiteral(o)) {
            f.form = Form::Str;
            f.str.literal = true;
            return Base::literal(f.str.text) && memoize(Part::Str, field);
        }
        uint64_t slot = 0;
        if (!get(slot))
            return false;
        // A GET followed by an int tuple is torch.Size(...); followed by anything else, the value itself.
        const uint8_t next = peek();
        if (next != ')' && next != '(' && next != 'K' && next != 'M' && next != 'J' && next != 0x8a) {
            f.form = Form::Fetched;
            f.str.literal = false;
            f.str.slot = slot;
            return true;
        }
        f.form = Form::Size;
        f.sizeSlot = slot;
        f.rank = 0;
        // An empty tuple has no MEMOIZE: picklers never memoise it.
        if (!op(')') && !(Base::template ints<DataclassRecord::kMaxRank>(f.dims, f.rank) && memoize(Part::Tuple, field)))
            return false;
        return op(0x85) && memoize(Part::Args, field) && op('R') && memoize(Part::Size, field);
    }
    [[gnu::always_inline]] bool memoize(Part part, uint8_t field = 0)
    {
        if (peek() != 0x94)
            return true;
        if (m_r.memoizedCount == DataclassRecord::kMaxMemoized)
            return false;
        ++this->m_pos;
        m_r.memoized[m_r.memoizedCount++] = { part, field };
        return true;
    }

private:
    DataclassRecord& m_r;
};

template <bool Checked> bool match(Cursor<Checked>& c, DataclassRecord& r)
{
    using Part = DataclassRecord::Part;
    r.memoizedCount = 0;
    r.fieldCount = 0;
    if (!c.get(r.classSlot) || !c.op(')') || !c.op(0x81) || !c.memoize(Part::Object) || !c.op('}')
        || !c.memoize(Part::State) || !c.op('('))
        return false;
    while (!c.op('u')) {
        if (r.fieldCount == DataclassRecord::kMaxFields)
            return false;
        DataclassRecord::Field& f = r.fields[r.fieldCount];
        if (!c.key(f.key, r.fieldCount) || !c.value(f, r.fieldCount))
            return false;
        ++r.fieldCount;
    }
    if (r.fieldCount == 0 || !c.op('b'))
        return false;
    r.end = c.pos();
    return true;
}

} // namespace

bool isLaneDataclass(std::string_view name)
{
    return name == "ChunkStorageMetadata" || name == "MetadataIndex" || name == "_StorageInfo";
}

bool matchDataclassRecord(Bytes data, size_t pos, DataclassRecord& r)
{
    return matchRecord<Cursor>(data, pos, kUncheckedSpan, r, [](auto& c, DataclassRecord& record) { return match(c, record); });
}

} // namespace sl::pickle
