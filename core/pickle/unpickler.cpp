#include "unpickler.h"

#include "io/arriving_bytes.h"
#include "util/error.h"
#include "util/load_control.h"
#include "util/utf8.h"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

namespace sl::pickle {

namespace {

// Opcodes, as named in CPython's Lib/pickle.py.
enum Op : uint8_t {
    MARK = '(',
    STOP = '.',
    POP = '0',
    POP_MARK = '1',
    DUP = '2',
    FLOAT = 'F',
    INT = 'I',
    BININT = 'J',
    BININT1 = 'K',
    LONG = 'L',
    BININT2 = 'M',
    NONE = 'N',
    PERSID = 'P',
    BINPERSID = 'Q',
    REDUCE = 'R',
    STRING = 'S',
    BINSTRING = 'T',
    SHORT_BINSTRING = 'U',
    UNICODE = 'V',
    BINUNICODE = 'X',
    APPEND = 'a',
    BUILD = 'b',
    GLOBAL = 'c',
    DICT = 'd',
    EMPTY_DICT = '}',
    APPENDS = 'e',
    GET = 'g',
    BINGET = 'h',
    INST = 'i',
    LONG_BINGET = 'j',
    LIST = 'l',
    EMPTY_LIST = ']',
    OBJ = 'o',
    PUT = 'p',
    BINPUT = 'q',
    LONG_BINPUT = 'r',
    SETITEM = 's',
    TUPLE = 't',
    EMPTY_TUPLE = ')',
    SETITEMS = 'u',
    BINFLOAT = 'G',
    PROTO = 0x80,
    NEWOBJ = 0x81,
    EXT1 = 0x82,
    EXT2 = 0x83,
    EXT4 = 0x84,
    TUPLE1 = 0x85,
    TUPLE2 = 0x86,
    TUPLE3 = 0x87,
    NEWTRUE = 0x88,
    NEWFALSE = 0x89,
    LONG1 = 0x8a,
    LONG4 = 0x8b,
    BINBYTES = 'B',
    SHORT_BINBYTES = 'C',
    SHORT_BINUNICODE = 0x8c,
    BINUNICODE8 = 0x8d,
    BINBYTES8 = 0x8e,
    EMPTY_SET = 0x8f,
    ADDITEMS = 0x90,
    FROZENSET = 0x91,
    NEWOBJ_EX = 0x92,
    STACK_GLOBAL = 0x93,
    MEMOIZE = 0x94,
    FRAME = 0x95,
    BYTEARRAY8 = 0x96,
    NEXT_BUFFER = 0x97,
    READONLY_BUFFER = 0x98,
};

constexpr int64_t kSmallIntMin = -5;
constexpr int64_t kSmallIntMax = 1024;

// Immutable shared ints, so the many offsets, sizes and strides of a state dict cost no allocation.
struct SmallInts {
    std::array<IntValue, kSmallIntMax - kSmallIntMin + 1> values = make();
    static std::array<IntValue, kSmallIntMax - kSmallIntMin + 1> make()
    {
        return [&]<size_t... I>(std::index_sequence<I...>) {
            return std::array<IntValue, sizeof...(I)> { IntValue(static_cast<int64_t>(I) + kSmallIntMin)... };
        }(std::make_index_sequence<kSmallIntMax - kSmallIntMin + 1>());
    }
};
SmallInts kSmallInts; // never written after construction

int hexDigit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

} // namespace

const char* opcodeName(uint8_t op)
{
    switch (op) {
    case MARK: return "MARK";
    case STOP: return "STOP";
    case POP: return "POP";
    case POP_MARK: return "POP_MARK";
    case DUP: return "DUP";
    case FLOAT: return "FLOAT";
    case INT: return "INT";
    case BININT: return "BININT";
    case BININT1: return "BININT1";
    case LONG: return "LONG";
    case BININT2: return "BININT2";
    case NONE: return "NONE";
    case PERSID: return "PERSID";
    case BINPERSID: return "BINPERSID";
    case REDUCE: return "REDUCE";
    case STRING: return "STRING";
    case BINSTRING: return "BINSTRING";
    case SHORT_BINSTRING: return "SHORT_BINSTRING";
    case UNICODE: return "UNICODE";
    case BINUNICODE: return "BINUNICODE";
    case APPEND: return "APPEND";
    case BUILD: return "BUILD";
    case GLOBAL: return "GLOBAL";
    case DICT: return "DICT";
    case EMPTY_DICT: return "EMPTY_DICT";
    case APPENDS: return "APPENDS";
    case GET: return "GET";
    case BINGET: return "BINGET";
    case INST: return "INST";
    case LONG_BINGET: return "LONG_BINGET";
    case LIST: return "LIST";
    case EMPTY_LIST: return "EMPTY_LIST";
    case OBJ: return "OBJ";
    case PUT: return "PUT";
    case BINPUT: return "BINPUT";
    case LONG_BINPUT: return "LONG_BINPUT";
    case SETITEM: return "SETITEM";
    case TUPLE: return "TUPLE";
    case EMPTY_TUPLE: return "EMPTY_TUPLE";
    case SETITEMS: return "SETITEMS";
    case BINFLOAT: return "BINFLOAT";
    case PROTO: return "PROTO";
    case NEWOBJ: return "NEWOBJ";
    case EXT1: return "EXT1";
    case EXT2: return "EXT2";
    case EXT4: return "EXT4";
    case TUPLE1: return "TUPLE1";
    case TUPLE2: return "TUPLE2";
    case TUPLE3: return "TUPLE3";
    case NEWTRUE: return "NEWTRUE";
    case NEWFALSE: return "NEWFALSE";
    case LONG1: return "LONG1";
    case LONG4: return "LONG4";
    case BINBYTES: return "BINBYTES";
    case SHORT_BINBYTES: return "SHORT_BINBYTES";
    case SHORT_BINUNICODE: return "SHORT_BINUNICODE";
    case BINUNICODE8: return "BINUNICODE8";
    case BINBYTES8: return "BINBYTES8";
    case EMPTY_SET: return "EMPTY_SET";
    case ADDITEMS: return "ADDITEMS";
    case FROZENSET: return "FROZENSET";
    case NEWOBJ_EX: return "NEWOBJ_EX";
    case STACK_GLOBAL: return "STACK_GLOBAL";
    case MEMOIZE: return "MEMOIZE";
    case FRAME: return "FRAME";
    case BYTEARRAY8: return "BYTEARRAY8";
    case NEXT_BUFFER: return "NEXT_BUFFER";
    case READONLY_BUFFER: return "READONLY_BUFFER";
    default: return nullptr;
    }
}

// ---- InertSemantics ----

Value* InertSemantics::global(Unpickler& u, std::string_view module, std::string_view name)
{
    return u.arena().make<GlobalValue>(module, name, KnownGlobal::Unknown);
}

Value* InertSemantics::call(Unpickler& u, Value* callable, SeqValue* args)
{
    auto* o = u.arena().make<ObjectValue>();
    o->callable = callable;
    o->args = args;
    return o;
}

Value* InertSemantics::instantiate(Unpickler& u, Value* cls, SeqValue* args, Value* kwargs)
{
    auto* o = u.arena().make<ObjectValue>();
    o->callable = cls;
    o->args = args;
    o->kwargs = kwargs;
    o->viaNewObj = true;
    return o;
}

void InertSemantics::build(Unpickler& u, Value* obj, Value* state)
{
    switch (obj->kind) {
    case Kind::Object:
        static_cast<ObjectValue*>(obj)->state = state;
        break;
    case Kind::Dict:
        static_cast<DictValue*>(obj)->state = state;
        break;
    case Kind::Tensor:
        static_cast<TensorValue*>(obj)->extrasToSet(u.arena().resource()).state = state;
        break;
    case Kind::DcpChunk:
    case Kind::DcpIndex:
    case Kind::DcpStorageInfo:
        throw TensorLaneRestart {}; // built whole by the dataclass lane: the opcodes' object would take the state
    default:
        break; // Python would call __setstate__ on it; there is nothing inert to record.
    }
}

Value* InertSemantics::persistentLoad(Unpickler& u, Value*)
{
    u.fail("persistent id found, but this pickle is not expected to reference external storage");
}

// ---- Unpickler ----

Unpickler::Unpickler(Bytes data, Arena& arena, Semantics& semantics, uint64_t baseOffset)
    : m_data(data)
    , m_arena(arena)
    , m_semantics(semantics)
    , m_base(baseOffset)
    , m_memo(data.size())
{
    // Real pickles copy each item about once (OrderedDict(pairs), set(list)); a few times the input
    // size is plenty, and it also bounds the arena memory those copies take.
    m_workBudget = 4 * data.size() + (1u << 20);
}

Unpickler::Unpickler(const ArrivingBytes& input, Arena& arena, Semantics& semantics, uint64_t baseOffset)
    : Unpickler(input.all(), arena, semantics, baseOffset)
{
    m_data = m_data.first(0);
    m_arriving = &input;
    m_extendAt = 0;
}

bool Unpickler::arrive(uint64_t need)
{
    if (!m_arriving || m_data.size() == m_arriving->size())
        return false;
    const size_t before = m_data.size();
    const size_t ahead = m_arriving->ahead();
    const size_t want = static_cast<size_t>(std::max<uint64_t>(need, m_pos + ahead)); // capped by waitFor
    const size_t got = m_arriving->waitFor(want);
    m_data = m_arriving->all().first(got);
    m_extendAt = got == m_arriving->size() ? SIZE_MAX : got - std::min(got, ahead / 2);
    return got > before;
}

std::optional<uint64_t> parseMemoIndexLine(std::string_view line)
{
    line = line.substr(0, line.find('\0'));
    auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; };
    auto digit = [](char c) { return c >= '0' && c <= '9'; };
    size_t i = 0;
    const size_t n = line.size();
    while (i < n && space(line[i]))
        ++i;
    const bool negative = i < n && line[i] == '-';
    i += i < n && (line[i] == '-' || line[i] == '+');
    uint64_t v = 0;
    bool digits = false;
    for (; i < n; ++i) {
        if (digit(line[i])) {
            if (v > (uint64_t(1) << 40))
                return std::nullopt; // no memo holds it: Python fails too (not found, or no memory for it)
            v = v * 10 + uint64_t(line[i] - '0');
            digits = true;
        } else if (!(line[i] == '_' && digits && i + 1 < n && digit(line[i + 1]))) {
            break;
        }
    }
    while (i < n && space(line[i]))
        ++i;
    if (!digits || i != n || (negative && v != 0))
        return std::nullopt;
    return v;
}

void Unpickler::fail(const std::string& message) const
{
    const char* name = opcodeName(m_op);
    std::string where = name ? std::string(name) : "opcode 0x" + [&] {
        char b[3];
        std::snprintf(b, sizeof b, "%02x", m_op);
        return std::string(b);
    }();
    throw FormatError("pickle: " + message + " (" + where + " at byte " + std::to_string(m_base + m_opStart) + ")");
}

void Unpickler::failTruncated(uint64_t n) const
{
    fail("truncated: needs " + std::to_string(n) + " bytes, " + std::to_string(m_data.size() - m_pos) + " remain");
}

void Unpickler::charge(size_t units)
{
    m_work += units;
    if (m_work > m_workBudget)
        fail("the pickle asks for far more work than its size justifies (a pickle bomb?)");
}

Value* Unpickler::makeInt(int64_t v)
{
    if (v >= kSmallIntMin && v <= kSmallIntMax)
        return const_cast<IntValue*>(&kSmallInts.values[static_cast<size_t>(v - kSmallIntMin)]);
    return m_arena.make<IntValue>(v);
}

void ValueStack::grow(size_t atLeast)
{
    const size_t capacity = std::max({ atLeast, 2 * m_capacity, size_t(64) });
    auto grown = std::make_unique_for_overwrite<Value*[]>(capacity);
    std::copy_n(m_data.get(), m_size, grown.get());
    m_data = std::move(grown);
    m_capacity = capacity;
}

size_t Unpickler::popMark()
{
    if (m_marks.empty())
        fail("no MARK on the stack");
    size_t start = m_marks.back();
    m_marks.pop_back();
    return start;
}

SeqValue* Unpickler::popMarkedSeq(Kind k)
{
    size_t start = popMark();
    auto* seq = makeSeq(k);
    seq->items.assign(m_arena.resource(), m_stack.begin() + static_cast<std::ptrdiff_t>(start), m_stack.end());
    m_stack.resize(start);
    return seq;
}

std::string_view Unpickler::readBytes(uint64_t n)
{
    if (n > m_data.size() - m_pos) [[unlikely]] {
        if (!arrive(m_pos + std::min<uint64_t>(n, SIZE_MAX - m_pos)) || n > m_data.size() - m_pos)
            failTruncated(n);
    }
    std::string_view s(reinterpret_cast<const char*>(m_data.data() + m_pos), static_cast<size_t>(n));
    m_pos += static_cast<size_t>(n);
    return s;
}

// Inlined into each opcode with a constant n, where it becomes one bounds check and a load.
[[gnu::always_inline]] inline uint64_t Unpickler::readUInt(unsigned n)
{
    std::string_view b = readBytes(n);
    uint64_t v = 0;
    for (unsigned i = 0; i < n; ++i)
        v |= static_cast<uint64_t>(static_cast<uint8_t>(b[i])) << (8 * i);
    return v;
}

std::string_view Unpickler::readLine()
{
    const uint8_t* start = m_data.data() + m_pos;
    const void* nl = std::memchr(start, '\n', m_data.size() - m_pos);
    while (!nl) {
        const size_t searched = m_data.size();
        if (!m_arriving || !arrive(searched + m_arriving->ahead()))
            fail("truncated: line without a newline");
        nl = std::memchr(m_data.data() + searched, '\n', m_data.size() - searched);
    }
    size_t len = static_cast<size_t>(static_cast<const uint8_t*>(nl) - start);
    m_pos += len + 1;
    std::string_view line(reinterpret_cast<const char*>(start), len);
    if (!line.empty() && line.back() == '\r')
        line.remove_suffix(1);
    return line;
}

// A tensor record's string literals go to the memo (its storage key, one per tensor), and are fetched again
// only for a storage another tensor shares. So the lane stores where the literal's bytes start, tagged in
// the pointer's low bits (values are 8-byte aligned), and the string is built on its first fetch: 24 bytes
// of graph a tensor less (1.8 MB for case a). The lane takes BINUNICODE (4-byte length) and
// SHORT_BINUNICODE (1-byte) literals; bit 1 says which, and the length is read again from the pickle.
constexpr uintptr_t kLazyLiteral = 1, kLazyWide = 2;

Value* Unpickler::lazyLiteral(std::string_view text) const
{
    const size_t at = static_cast<size_t>(reinterpret_cast<const uint8_t*>(text.data()) - m_data.data());
    if (at >= 2 && m_data[at - 2] == SHORT_BINUNICODE && m_data[at - 1] == text.size())
        return reinterpret_cast<Value*>(at << 2 | kLazyLiteral);
    if (at >= 5 && m_data[at - 5] == BINUNICODE && littleEndianAt(m_data, at - 4, 4) == text.size())
        return reinterpret_cast<Value*>(at << 2 | kLazyWide | kLazyLiteral);
    return nullptr; // built now by the caller
}

Value* Unpickler::buildLiteral(Value*& slot)
{
    const auto bits = reinterpret_cast<uintptr_t>(slot);
    const size_t at = bits >> 2;
    const size_t n = bits & kLazyWide ? littleEndianAt(m_data, at - 4, 4) : m_data[at - 1];
    slot = makeStr(std::string_view(reinterpret_cast<const char*>(m_data.data()) + at, n));
    return slot;
}

Value* Unpickler::memoSlot(uint64_t index)
{
    Value** slot = m_memo.slot(index);
    if (!slot)
        return nullptr;
    if (reinterpret_cast<uintptr_t>(*slot) & kLazyLiteral) [[unlikely]]
        return buildLiteral(*slot);
    return *slot;
}

Value* Unpickler::memoGet(uint64_t index)
{
    Value* v = memoSlot(index);
    if (!v)
        fail("memo key " + std::to_string(index) + " was never stored");
    if (v == PickleMemo::placeholder()) [[unlikely]]
        throw TensorLaneRestart {};
    return v;
}

const Value* Unpickler::memoPeek(uint64_t index)
{
    const Value* v = memoSlot(index);
    return v == PickleMemo::placeholder() ? nullptr : v;
}

bool Unpickler::takeTensorRecord(uint64_t callableSlot)
{
    // Only a global can be a rebuild function: anything else is not worth matching.
    const Value* fn = memoPeek(callableSlot);
    if (!fn || fn->kind != Kind::Global)
        return false;
    TensorRecord& r = m_record;
    if (!matchTensorRecord(m_data, m_opStart, r))
        return false;
    if (m_frame.crossed(m_opStart, r.end))
        return false; // the opcode loop finds where
    // Literals are handed over as values on the stack here; the memo gets arena copies of the ones it keeps.
    StrValue tag(Kind::Str, r.tag.text), key(Kind::Str, r.key.text), location(Kind::Str, r.location.text);
    auto resolve = [&](const TensorRecord::Ref& ref, const StrValue& literal) -> const Value* {
        return ref.literal ? &literal : memoPeek(ref.slot);
    };
    TensorCall call;
    call.callable = fn;
    call.tag = resolve(r.tag, tag);
    call.storageClass = memoPeek(r.storageClass.slot);
    call.key = resolve(r.key, key);
    call.location = resolve(r.location, location);
    call.hooksCallable = memoPeek(r.hooksCallable.slot);
    if (!call.tag || !call.storageClass || !call.key || !call.location || !call.hooksCallable)
        return false; // the opcode loop reports the empty slot, or restarts
    call.numel = r.numel;
    call.offset = r.offset;
    call.size = { r.size, r.rank };
    call.stride = { r.stride, r.strideRank };
    call.requiresGrad = r.requiresGrad;
    Value* tensor = m_semantics.tensorRecord(*this, call);
    if (!tensor)
        return false;
    for (uint8_t i = 0; i < r.putCount; ++i) {
        const TensorRecord::Put& put = r.puts[i];
        Value* v = put.part == TensorRecord::Part::Result ? tensor : PickleMemo::placeholder();
        if (TensorRecord::isLiteral(put.part) && !(v = lazyLiteral(r.literalOf(put.part))))
            v = makeStr(r.literalOf(put.part));
        memoPut(put.slot, v);
    }
    push(tensor);
    m_pos = r.end;
    ++m_tensorRecords; // counted as one opcode by the cancellation check: a check every 65,536 records
    return true;
}

bool Unpickler::takeDataclassRecord(uint64_t classSlot)
{
    // Only a class can be instantiated by one, and the record's MEMOIZEs must store into new slots.
    const Value* cls = memoPeek(classSlot);
    if (!cls || cls->kind != Kind::Global || !m_semantics.dataclassClass(cls) || !m_memo.countIsNext())
        return false;
    DataclassRecord& r = m_dataclass;
    if (!matchDataclassRecord(m_data, m_opStart, r))
        return false;
    if (m_frame.crossed(m_opStart, r.end))
        return false; // the opcode loop finds where
    using Form = DataclassRecord::Form;
    // Literals are handed over as values on the stack here; the memo gets arena copies of the ones it keeps.
    StrValue keys[DataclassRecord::kMaxFields] = { { Kind::Str, {} }, { Kind::Str, {} }, { Kind::Str, {} }, { Kind::Str, {} } };
    StrValue strs[DataclassRecord::kMaxFields] = { { Kind::Str, {} }, { Kind::Str, {} }, { Kind::Str, {} }, { Kind::Str, {} } };
    static_assert(DataclassRecord::kMaxFields == 4);
    DataclassCall::Field fields[DataclassRecord::kMaxFields];
    for (uint8_t i = 0; i < r.fieldCount; ++i) {
        const DataclassRecord::Field& rf = r.fields[i];
        DataclassCall::Field& f = fields[i];
        keys[i].s = rf.key.text;
        f.key = rf.key.literal ? &keys[i] : memoPeek(rf.key.slot);
        f.form = rf.form;
        switch (rf.form) {
        case Form::Int: f.integer = rf.integer; break;
        case Form::None: break;
        case Form::Str:
            strs[i].s = rf.str.text;
            f.value = &strs[i];
            break;
        case Form::Fetched: f.value = memoPeek(rf.str.slot); break;
        case Form::Size:
            f.sizeCallable = memoPeek(rf.sizeSlot);
            f.dims = { rf.dims, rf.rank };
            break;
        }
        if (!f.key || (rf.form == Form::Fetched && !f.value) || (rf.form == Form::Size && !f.sizeCallable))
            return false; // the opcode loop reports the empty slot, or restarts
    }
    DataclassCall call;
    call.cls = cls;
    call.fields = { fields, r.fieldCount };
    Value* object = m_semantics.dataclassRecord(*this, call);
    if (!object)
        return false;
    for (uint8_t i = 0; i < r.memoizedCount; ++i) {
        const DataclassRecord::Memoized m = r.memoized[i];
        Value* v = m.part == DataclassRecord::Part::Object ? object : PickleMemo::placeholder();
        if (DataclassRecord::isLiteral(m.part) && !(v = lazyLiteral(r.literalOf(m))))
            v = makeStr(r.literalOf(m));
        memoPut(m_memo.count(), v);
    }
    push(object);
    m_pos = r.end;
    ++m_dataclassRecords;
    return true;
}

Value* Unpickler::parseTextInt(std::string_view line, bool isLongOpcode)
{
    if (!isLongOpcode && line == "01")
        return boolValue(true);
    if (!isLongOpcode && line == "00")
        return boolValue(false);
    if (isLongOpcode && !line.empty() && line.back() == 'L')
        line.remove_suffix(1);
    if (line.empty())
        fail("empty integer literal");
    size_t i = (line[0] == '-' || line[0] == '+') ? 1 : 0;
    if (i == line.size())
        fail("malformed integer literal");
    for (size_t j = i; j < line.size(); ++j)
        if (line[j] < '0' || line[j] > '9')
            fail("malformed integer literal '" + std::string(line.substr(0, 40)) + "'");
    int64_t v = 0;
    const char* b = line.data() + (line[0] == '+' ? 1 : 0);
    auto [ptr, ec] = std::from_chars(b, line.data() + line.size(), v);
    if (ec == std::errc() && ptr == line.data() + line.size())
        return makeInt(v);
    return m_arena.make<BigIntValue>(line, true);
}

std::optional<std::string> decodeEscapedString(std::string_view q)
{
    std::string out;
    out.reserve(q.size());
    for (size_t i = 0; i < q.size(); ++i) {
        char c = q[i];
        if (c != '\\' || i + 1 == q.size()) {
            out += c;
            continue;
        }
        char e = q[++i];
        switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;
        case 'x': {
            int h1 = i + 1 < q.size() ? hexDigit(q[i + 1]) : -1;
            int h2 = i + 2 < q.size() ? hexDigit(q[i + 2]) : -1;
            if (h1 < 0 || h2 < 0)
                return std::nullopt;
            out += static_cast<char>(h1 * 16 + h2);
            i += 2;
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                int v = e - '0';
                for (int k = 0; k < 2 && i + 1 < q.size() && q[i + 1] >= '0' && q[i + 1] <= '7'; ++k)
                    v = v * 8 + (q[++i] - '0');
                out += static_cast<char>(v & 0xFF);
            } else {
                out += '\\';
                out += e;
            }
        }
    }
    return out;
}

std::string decodeRawUnicodeEscape(std::string_view raw)
{
    // Bytes are Latin-1 code points, except \uXXXX and \UXXXXXXXX.
    std::string out;
    out.reserve(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) {
        auto c = static_cast<uint8_t>(raw[i]);
        if (c == '\\' && i + 1 < raw.size() && (raw[i + 1] == 'u' || raw[i + 1] == 'U')) {
            size_t digits = raw[i + 1] == 'u' ? 4 : 8;
            if (i + 2 + digits <= raw.size()) {
                uint32_t cp = 0;
                bool ok = true;
                for (size_t k = 0; k < digits; ++k) {
                    int h = hexDigit(raw[i + 2 + k]);
                    if (h < 0) {
                        ok = false;
                        break;
                    }
                    cp = cp * 16 + static_cast<uint32_t>(h);
                }
                if (ok && cp <= 0x10FFFF) {
                    appendUtf8(out, cp);
                    i += 1 + digits;
                    continue;
                }
            }
        }
        appendUtf8(out, c);
    }
    return out;
}

Value* Unpickler::decodeTextString(std::string_view q)
{
    // Python 2 str repr: quoted with ' or ", backslash escapes. Decoded as UTF-8 text like torch.load does.
    if (q.size() < 2 || (q.front() != '\'' && q.front() != '"') || q.back() != q.front())
        fail("STRING argument is not a quoted string");
    q = q.substr(1, q.size() - 2);
    charge(q.size());
    std::optional<std::string> out = decodeEscapedString(q);
    if (!out)
        fail("invalid \\x escape in STRING");
    return makeStr(m_arena.copy(*out));
}

Value* Unpickler::decodeRawUnicodeEscape(std::string_view raw)
{
    charge(raw.size());
    return makeStr(m_arena.copy(pickle::decodeRawUnicodeEscape(raw)));
}

void Unpickler::appendTo(Value* target, Value* item)
{
    if (target->kind == Kind::List) {
        static_cast<SeqValue*>(target)->items.push_back(m_arena.resource(), item);
    } else if (target->kind == Kind::Object) {
        static_cast<ObjectValue*>(target)->itemsToAdd(m_arena.resource()).list.push_back(m_arena.resource(), item);
    } else if (isDcpRecord(target->kind)) {
        throw TensorLaneRestart {}; // the opcodes' object would take the item
    } else {
        fail("APPEND onto something that is not a list");
    }
}

void Unpickler::setItem(Value* target, Value* key, Value* value)
{
    if (target->kind == Kind::Dict) {
        static_cast<DictValue*>(target)->items.push_back(m_arena.resource(), { key, value });
    } else if (target->kind == Kind::Object) {
        static_cast<ObjectValue*>(target)->itemsToAdd(m_arena.resource()).dict.push_back(m_arena.resource(), { key, value });
    } else if (isDcpRecord(target->kind)) {
        throw TensorLaneRestart {}; // the opcodes' object would take the item
    } else {
        fail("SETITEM onto something that is not a dict");
    }
}

Value* Unpickler::load()
{
    while (true) {
        if (m_pos >= m_extendAt) [[unlikely]]
            arrive(m_pos + 1);
        if (m_pos >= m_data.size()) {
            m_opStart = m_pos;
            m_op = 0;
            throw FormatError("pickle: truncated: no STOP opcode before the end of the data (byte "
                + std::to_string(m_base + m_pos) + ")");
        }
        if (m_frame.crossed(m_opStart, m_pos)) [[unlikely]]
            fail(kFrameCrossing); // names the opcode that crossed
        m_opStart = m_pos;
        m_op = m_data[m_pos++];
        if (m_control && --m_untilCheck == 0) {
            m_untilCheck = 65536;
            m_control->checkpoint({});
        }
        switch (m_op) {
        case PROTO: {
            m_protocol = static_cast<int>(readUInt(1));
            if (m_protocol > 5)
                fail("unsupported pickle protocol " + std::to_string(m_protocol));
            break;
        }
        case FRAME: {
            uint64_t len = readUInt(8);
            if (len > m_data.size() - m_pos)
                arrive(m_pos + std::min<uint64_t>(len, SIZE_MAX - m_pos));
            if (len > m_data.size() - m_pos)
                fail("frame of " + std::to_string(len) + " bytes runs past the end");
            if (!m_frame.begin(m_pos, len, m_data.size()))
                fail(kFrameCrossing);
            break;
        }
        case STOP: {
            Value* v = pop();
            if (!m_marks.empty())
                fail("STOP with an unclosed MARK");
            return v;
        }
        case MARK:
            m_marks.push_back(m_stack.size());
            break;
        case POP: {
            size_t floor = m_marks.empty() ? 0 : m_marks.back();
            if (m_stack.size() > floor)
                m_stack.pop_back();
            else
                popMark();
            break;
        }
        case POP_MARK:
            m_stack.resize(popMark());
            break;
        case DUP:
            push(top());
            break;

        // --- scalars ---
        case NONE:
            push(noneValue());
            break;
        case NEWTRUE:
            push(boolValue(true));
            break;
        case NEWFALSE:
            push(boolValue(false));
            break;
        case BININT:
            push(makeInt(static_cast<int32_t>(static_cast<uint32_t>(readUInt(4)))));
            break;
        case BININT1:
            push(makeInt(static_cast<int64_t>(readUInt(1))));
            break;
        case BININT2:
            push(makeInt(static_cast<int64_t>(readUInt(2))));
            break;
        case INT:
            push(parseTextInt(readLine(), false));
            break;
        case LONG:
            push(parseTextInt(readLine(), true));
            break;
        case LONG1:
        case LONG4: {
            uint64_t n = m_op == LONG1 ? readUInt(1) : readUInt(4);
            if (m_op == LONG4 && n > 0x7FFFFFFF)
                fail("negative LONG4 byte count");
            std::string_view b = readBytes(n);
            if (n == 0) {
                push(makeInt(0));
            } else if (n <= 8) {
                uint64_t v = 0;
                for (size_t i = 0; i < n; ++i)
                    v |= static_cast<uint64_t>(static_cast<uint8_t>(b[i])) << (8 * i);
                if (n < 8 && (static_cast<uint8_t>(b[n - 1]) & 0x80))
                    v |= ~uint64_t(0) << (8 * n); // sign-extend
                push(makeInt(static_cast<int64_t>(v)));
            } else {
                push(m_arena.make<BigIntValue>(b, false));
            }
            break;
        }
        case FLOAT: {
            std::string line(readLine());
            char* end = nullptr;
            double d = std::strtod(line.c_str(), &end);
            if (line.empty() || end != line.c_str() + line.size())
                fail("malformed float literal");
            push(m_arena.make<FloatValue>(d));
            break;
        }
        case BINFLOAT: {
            uint64_t bits = 0;
            std::string_view b = readBytes(8);
            for (int i = 0; i < 8; ++i)
                bits = bits << 8 | static_cast<uint8_t>(b[i]); // big-endian
            push(m_arena.make<FloatValue>(std::bit_cast<double>(bits)));
            break;
        }

        // --- strings and bytes ---
        case STRING:
            push(decodeTextString(readLine()));
            break;
        case UNICODE:
            push(decodeRawUnicodeEscape(readLine()));
            break;
        case BINSTRING: {
            uint64_t n = readUInt(4);
            if (n > 0x7FFFFFFF)
                fail("negative BINSTRING length");
            push(makeStr(readBytes(n)));
            break;
        }
        case SHORT_BINSTRING:
            push(makeStr(readBytes(readUInt(1))));
            break;
        case BINUNICODE:
            push(makeStr(readBytes(readUInt(4))));
            break;
        case SHORT_BINUNICODE:
            push(makeStr(readBytes(readUInt(1))));
            break;
        case BINUNICODE8:
            push(makeStr(readBytes(readUInt(8))));
            break;
        case BINBYTES:
            push(m_arena.make<StrValue>(Kind::Bytes, readBytes(readUInt(4))));
            break;
        case SHORT_BINBYTES:
            push(m_arena.make<StrValue>(Kind::Bytes, readBytes(readUInt(1))));
            break;
        case BINBYTES8:
        case BYTEARRAY8:
            push(m_arena.make<StrValue>(Kind::Bytes, readBytes(readUInt(8))));
            break;

        // --- containers ---
        case EMPTY_TUPLE:
            push(emptyTupleValue());
            break;
        case TUPLE:
            push(popMarkedSeq(Kind::Tuple));
            break;
        case TUPLE1:
        case TUPLE2:
        case TUPLE3: {
            size_t n = m_op - TUPLE1 + 1;
            size_t floor = m_marks.empty() ? 0 : m_marks.back();
            if (m_stack.size() < floor + n)
                fail("stack underflow");
            auto* t = makeSeq(Kind::Tuple);
            t->items.assign(m_arena.resource(), m_stack.end() - static_cast<std::ptrdiff_t>(n), m_stack.end());
            m_stack.resize(m_stack.size() - n);
            push(t);
            break;
        }
        case EMPTY_LIST:
            push(makeSeq(Kind::List));
            break;
        case LIST:
            push(popMarkedSeq(Kind::List));
            break;
        case APPEND: {
            Value* item = pop();
            appendTo(top(), item);
            break;
        }
        case APPENDS: {
            size_t start = popMark();
            if (start == 0)
                fail("APPENDS without a list below the MARK");
            Value* target = m_stack[start - 1];
            if (target->kind == Kind::List) {
                auto& items = static_cast<SeqValue*>(target)->items;
                items.append(m_arena.resource(), m_stack.begin() + static_cast<std::ptrdiff_t>(start), m_stack.end());
            } else {
                for (size_t i = start; i < m_stack.size(); ++i)
                    appendTo(target, m_stack[i]);
            }
            m_stack.resize(start);
            break;
        }
        case EMPTY_DICT:
            push(m_arena.make<DictValue>());
            break;
        case DICT: {
            size_t start = popMark();
            if ((m_stack.size() - start) % 2)
                fail("odd number of items for DICT");
            auto* d = m_arena.make<DictValue>();
            d->items.reserve(m_arena.resource(), (m_stack.size() - start) / 2);
            for (size_t i = start; i < m_stack.size(); i += 2)
                d->items.push_back(m_arena.resource(), { m_stack[i], m_stack[i + 1] });
            m_stack.resize(start);
            push(d);
            break;
        }
        case SETITEM: {
            Value* v = pop();
            Value* k = pop();
            setItem(top(), k, v);
            break;
        }
        case SETITEMS: {
            size_t start = popMark();
            if (start == 0)
                fail("SETITEMS without a dict below the MARK");
            if ((m_stack.size() - start) % 2)
                fail("odd number of items for SETITEMS");
            Value* target = m_stack[start - 1];
            if (target->kind == Kind::Dict) {
                // Grow geometrically: pickles add 1000 items per SETITEMS, and reserving just enough each
                // time copied the whole dict per batch into fresh arena memory that is never reused.
                auto& items = static_cast<DictValue*>(target)->items;
                size_t need = items.size() + (m_stack.size() - start) / 2;
                if (need > items.capacity())
                    items.reserve(m_arena.resource(), std::max(need, 2 * items.capacity()));
            }
            for (size_t i = start; i < m_stack.size(); i += 2)
                setItem(target, m_stack[i], m_stack[i + 1]);
            m_stack.resize(start);
            break;
        }
        case EMPTY_SET:
            push(makeSeq(Kind::Set));
            break;
        case ADDITEMS: {
            size_t start = popMark();
            if (start == 0 || m_stack[start - 1]->kind != Kind::Set)
                fail("ADDITEMS without a set below the MARK");
            auto& items = static_cast<SeqValue*>(m_stack[start - 1])->items;
            items.append(m_arena.resource(), m_stack.begin() + static_cast<std::ptrdiff_t>(start), m_stack.end());
            m_stack.resize(start);
            break;
        }
        case FROZENSET:
            push(popMarkedSeq(Kind::Set));
            break;

        // --- objects ---
        case GLOBAL: {
            std::string_view module = readLine();
            std::string_view name = readLine();
            push(m_semantics.global(*this, module, name));
            break;
        }
        case STACK_GLOBAL: {
            Value* name = pop();
            Value* module = pop();
            auto* n = asStr(name);
            auto* m = asStr(module);
            if (!n || !m)
                fail("STACK_GLOBAL needs two strings");
            push(m_semantics.global(*this, m->s, n->s));
            break;
        }
        case REDUCE: {
            Value* args = pop();
            Value* callable = pop();
            if (args->kind != Kind::Tuple)
                fail("REDUCE arguments are not a tuple");
            push(m_semantics.call(*this, callable, static_cast<SeqValue*>(args)));
            break;
        }
        case BUILD: {
            Value* state = pop();
            m_semantics.build(*this, top(), state);
            break;
        }
        case NEWOBJ: {
            Value* args = pop();
            Value* cls = pop();
            if (args->kind != Kind::Tuple)
                fail("NEWOBJ arguments are not a tuple");
            push(m_semantics.instantiate(*this, cls, static_cast<SeqValue*>(args), nullptr));
            break;
        }
        case NEWOBJ_EX: {
            Value* kwargs = pop();
            Value* args = pop();
            Value* cls = pop();
            if (args->kind != Kind::Tuple)
                fail("NEWOBJ_EX arguments are not a tuple");
            push(m_semantics.instantiate(*this, cls, static_cast<SeqValue*>(args), kwargs));
            break;
        }
        case INST: {
            std::string_view module = readLine();
            std::string_view name = readLine();
            SeqValue* args = popMarkedSeq(Kind::Tuple);
            Value* cls = m_semantics.global(*this, module, name);
            push(m_semantics.instantiate(*this, cls, args, nullptr));
            break;
        }
        case OBJ: {
            SeqValue* all = popMarkedSeq(Kind::Tuple);
            if (all->items.empty())
                fail("OBJ without a class");
            Value* cls = all->items.front();
            auto* args = makeSeq(Kind::Tuple);
            args->items.assign(m_arena.resource(), all->items.begin() + 1, all->items.end());
            push(m_semantics.instantiate(*this, cls, args, nullptr));
            break;
        }
        case PERSID:
            push(m_semantics.persistentLoad(*this, makeStr(readLine())));
            break;
        case BINPERSID:
            push(m_semantics.persistentLoad(*this, pop()));
            break;

        // --- memo ---
        case PUT: {
            std::optional<uint64_t> index = parseMemoIndexLine(readLine());
            if (!index)
                fail("malformed PUT index");
            const uint64_t idx = *index;
            memoPut(idx, top());
            break;
        }
        case BINPUT:
            memoPut(readUInt(1), top());
            break;
        case LONG_BINPUT:
            memoPut(readUInt(4), top());
            break;
        case MEMOIZE:
            memoPut(m_memo.count(), top());
            break;
        case GET: {
            std::optional<uint64_t> index = parseMemoIndexLine(readLine());
            if (!index)
                fail("malformed GET index");
            const uint64_t idx = *index;
            push(memoGet(idx));
            break;
        }
        case BINGET:
        case LONG_BINGET: {
            uint64_t index = readUInt(m_op == BINGET ? 1 : 4);
            if (m_tensorLane && m_pos < m_data.size() && m_data[m_pos] == MARK && takeTensorRecord(index))
                break;
            if (m_dataclassLane && m_pos < m_data.size() && m_data[m_pos] == EMPTY_TUPLE && takeDataclassRecord(index))
                break;
            push(memoGet(index));
            break;
        }

        case EXT1:
        case EXT2:
        case EXT4:
            fail("extension registry codes are not supported");
        case NEXT_BUFFER:
        case READONLY_BUFFER:
            fail("out-of-band buffers are not supported (torch never writes them)");
        default:
            fail("unknown opcode");
        }
    }
}

} // namespace sl::pickle
