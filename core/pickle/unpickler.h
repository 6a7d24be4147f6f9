#pragma once
// A pickle virtual machine (protocols 0-5) that never imports or executes anything.
//
// The VM handles the opcodes; what GLOBAL, REDUCE, NEWOBJ, BUILD and persistent ids *mean* is decided
// by a Semantics object. The default one (InertSemantics) turns every global into a GlobalValue and every
// call into an ObjectValue holding its arguments; the torch layer subclasses it to rebuild tensors.
//
// Safety: every length prefix is checked against the bytes that remain before anything is allocated;
// each opcode consumes at least one byte, so stack, mark stack and memo are bounded by the input size;
// semantic work that copies (e.g. OrderedDict(list)) is charged against a budget proportional to the
// input, so GET-amplified pickles cannot make the VM run for long. Malformed input throws FormatError
// naming the opcode and its byte offset.

#include "pickle/pickle_memo.h"
#include "pickle/dataclass_record.h"
#include "pickle/tensor_record.h"
#include "pickle/value.h"
#include "io/bytes.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sl {
class ArrivingBytes;
class LoadControl;
}

namespace sl::pickle {

class Unpickler;

// A tensor record (pickle/tensor_record.h) with its GETs and literals resolved: what the opcode loop would
// hand REDUCE and BINPERSID, without the tuples it would build for them.
struct TensorCall {
    const Value* callable = nullptr; // the rebuild function
    const Value* tag = nullptr; // the persistent id: ('storage', class, key, location, numel)
    const Value* storageClass = nullptr;
    const Value* key = nullptr;
    const Value* location = nullptr;
    int64_t numel = 0;
    int64_t offset = 0;
    std::span<const int64_t> size, stride; // valid during the call only
    bool requiresGrad = false;
    const Value* hooksCallable = nullptr; // called with no arguments for backward_hooks
};

// What a dataclass record fetched and said, for Semantics::dataclassRecord: its class, and per field its key
// (what the GET fetched, or the literal) and its value in the form the record gave it.
struct DataclassCall {
    struct Field {
        const Value* key = nullptr;
        DataclassRecord::Form form = DataclassRecord::Form::None;
        int64_t integer = 0; // Int
        const Value* value = nullptr; // Str (the literal) and Fetched (what the GET fetched)
        const Value* sizeCallable = nullptr; // Size: what torch.Size's GET fetched
        std::span<const int64_t> dims; // Size
    };
    const Value* cls = nullptr;
    std::span<const Field> fields; // valid during the call only
};

class Semantics {
public:
    virtual ~Semantics() = default;
    virtual Value* global(Unpickler& u, std::string_view module, std::string_view name) = 0;
    virtual Value* call(Unpickler& u, Value* callable, SeqValue* args) = 0; // REDUCE
    virtual Value* instantiate(Unpickler& u, Value* cls, SeqValue* args, Value* kwargs) = 0; // NEWOBJ, INST, OBJ
    virtual void build(Unpickler& u, Value* obj, Value* state) = 0; // BUILD
    virtual Value* persistentLoad(Unpickler& u, Value* pid) = 0; // PERSID, BINPERSID
    // The tensor a whole tensor record builds, exactly as the opcodes would have; or null, having changed
    // nothing, to leave the record to the opcode loop (anything it does not know to be a plain tensor).
    virtual Value* tensorRecord(Unpickler&, const TensorCall&) { return nullptr; }
    // The value a whole dataclass record (pickle/dataclass_record.h) stands for, made as the opcodes would
    // have made it but whole; or null, having changed nothing, to leave it to the opcode loop. Asked only
    // for a class dataclassClass took.
    virtual Value* dataclassRecord(Unpickler&, const DataclassCall&) { return nullptr; }
    // Whether a record instantiating `cls` may be one dataclassRecord takes: asked first, so the records of
    // other classes are not matched in vain.
    virtual bool dataclassClass(const Value*) { return false; }
};

// Thrown by an Unpickler in its tensor or dataclass lane when the pickle fetches a value the lane did not build,
// or changes one the lane built whole; the caller runs the pickle again with the lanes off.
struct TensorLaneRestart { };

// Globals stay references, calls become ObjectValues, BUILD stores the state, persistent ids are refused.
class InertSemantics : public Semantics {
public:
    Value* global(Unpickler& u, std::string_view module, std::string_view name) override;
    Value* call(Unpickler& u, Value* callable, SeqValue* args) override;
    Value* instantiate(Unpickler& u, Value* cls, SeqValue* args, Value* kwargs) override;
    void build(Unpickler& u, Value* obj, Value* state) override;
    Value* persistentLoad(Unpickler& u, Value* pid) override;
};

// Protocol 0's text literals as Python decodes them (the unpickler and the opcode scan both need them):
// STRING's quoted body through codecs.escape_decode (nullopt on a malformed \x escape, which Python refuses),
// UNICODE's argument through raw-unicode-escape (Latin-1 bytes plus \uXXXX and \UXXXXXXXX), as UTF-8.
std::optional<std::string> decodeEscapedString(std::string_view body);
std::string decodeRawUnicodeEscape(std::string_view raw);
// A protocol 0 GET or PUT index as CPython reads it: PyLong_FromString(line, NULL, 10) on the line as a C
// string, so it ends at a NUL byte ("1\x002" is 1), with spaces around it, a sign and single underscores
// between digits allowed. Nullopt where Python raises, and for a negative index or one no memo can hold.
std::optional<uint64_t> parseMemoIndexLine(std::string_view line);

// What torch.load does with an opcode that reads past the end of its FRAME: it reads the rest from after
// the frame (io.BytesIO input), skipping the frame's last bytes, which no pickler writes and which neither
// the unpickler nor the opcode scan follows (tests/fixtures/hostile/zip/frame_crossing.pt).
inline constexpr const char* kFrameCrossing = "an opcode reads past the end of its FRAME, where torch.load reads other bytes than these";

// Where the last FRAME ends: the rule both readers check opcodes against, kept in one place.
struct FrameBound {
    size_t end = 0;
    // Whether the opcode that started at `opStart` and read up to `pos` crossed the frame's end.
    bool crossed(size_t opStart, size_t pos) const { return opStart < end && pos > end; }
    // A FRAME of `len` bytes starting at `pos`, in bytes that end at `size`. A frame inside a frame is read
    // from the outer frame's bytes, whose end still bounds every read: false when it runs past that end.
    bool begin(size_t pos, uint64_t len, size_t size)
    {
        if (pos < end)
            return len <= end - pos;
        end = len <= size - pos ? pos + len : size;
        return true;
    }
};

// The VM's stack. In load(), a large function, GCC left std::vector's push_back out of line: a call for
// most opcodes, 5% of listing a DCP .metadata. Here a push is a compare and a store, growth out of line.
class ValueStack {
public:
    size_t size() const { return m_size; }
    Value** begin() { return m_data.get(); }
    Value** end() { return m_data.get() + m_size; }
    Value*& operator[](size_t i) { return m_data[i]; }
    Value* back() const { return m_data[m_size - 1]; }
    [[gnu::always_inline]] void push_back(Value* v)
    {
        if (m_size == m_capacity) [[unlikely]]
            grow(m_size + 1);
        m_data[m_size++] = v;
    }
    void pop_back() { --m_size; }
    // Shrinks, or grows with nulls (as std::vector's resize would).
    void resize(size_t n)
    {
        if (n > m_capacity)
            grow(n);
        for (size_t i = m_size; i < n; ++i)
            m_data[i] = nullptr;
        m_size = n;
    }

private:
    [[gnu::noinline]] void grow(size_t atLeast);
    std::unique_ptr<Value*[]> m_data;
    size_t m_size = 0;
    size_t m_capacity = 0;
};

class Unpickler {
public:
    // `baseOffset` is where `data` starts in its file, used in error messages.
    Unpickler(Bytes data, Arena& arena, Semantics& semantics, uint64_t baseOffset = 0);
    // Bytes still being read on another thread (io/arriving_bytes.h): the unpickler keeps input.ahead()
    // bytes arrived past where it reads, waiting where they have not arrived yet. The reader's error ends a
    // wait.
    Unpickler(const ArrivingBytes& input, Arena& arena, Semantics& semantics, uint64_t baseOffset = 0);

    // Checked every 65,536 opcodes: a cancelled load stops with LoadCancelled (util/load_control.h).
    void setControl(const LoadControl* control) { m_control = control; }
    // The tensor lane: each tensor record (pickle/tensor_record.h) the semantics accepts is built in one
    // step, and the tuples the opcodes would build for its arguments are not built. Their memo slots hold a
    // placeholder that nothing torch writes fetches again; a pickle that does makes load() throw
    // TensorLaneRestart, and must be run again with the lane off.
    void setTensorLane(bool on) { m_tensorLane = on; }
    // Records the lane built.
    size_t tensorRecords() const { return m_tensorRecords; }
    // The dataclass lane: each dataclass record (pickle/dataclass_record.h) the semantics accepts, as a DCP
    // .metadata's chunks and storage entries, is built whole, as one value, and the state dict and tuples
    // the opcodes would build are not. Their memo slots hold the placeholder, and the value is never changed
    // after: a pickle that fetches one of those slots, or changes the value (BUILD, SETITEMS, APPENDS),
    // makes load() throw TensorLaneRestart, and must be run again with the lane off.
    void setDataclassLane(bool on) { m_dataclassLane = on; }
    size_t dataclassRecords() const { return m_dataclassRecords; }

    // Runs until STOP and returns the top of the stack. Throws FormatError.
    Value* load();
    // Bytes consumed by load(), STOP included (legacy files hold several pickles back to back).
    size_t consumed() const { return m_pos; }
    int protocol() const { return m_protocol; }

    Arena& arena() { return m_arena; }
    Value* makeInt(int64_t v);
    Value* makeStr(std::string_view s) { return m_arena.make<StrValue>(Kind::Str, s); }
    SeqValue* makeSeq(Kind k) { return m_arena.make<SeqValue>(k); }
    // Semantics call this for work beyond the opcode itself (copies, conversions). Throws when the
    // total exceeds the budget derived from the input size.
    void charge(size_t units);
    [[noreturn]] void fail(const std::string& message) const;

private:
    // The top of the stack above the innermost MARK, taken off or left on; "stack underflow" when none.
    [[gnu::always_inline]] Value* pop()
    {
        Value* v = top();
        m_stack.pop_back();
        return v;
    }
    [[gnu::always_inline]] Value* top()
    {
        if (m_stack.size() <= (m_marks.empty() ? 0 : m_marks.back())) [[unlikely]]
            fail("stack underflow");
        return m_stack.back();
    }
    [[gnu::always_inline]] void push(Value* v) { m_stack.push_back(v); }
    size_t popMark(); // returns the stack index where the marked items start
    SeqValue* popMarkedSeq(Kind k);
    std::string_view readLine();
    std::string_view readBytes(uint64_t n);
    // Arriving input: waits until at least `need` bytes (or all there are) have arrived, and ahead() past
    // m_pos where there are that many. False when nothing more can come.
    [[gnu::noinline]] bool arrive(uint64_t need);
    // readBytes' error, kept out of line so the hot reads stay small.
    [[noreturn, gnu::noinline, gnu::cold]] void failTruncated(uint64_t n) const;
    uint64_t readUInt(unsigned n);
    [[gnu::always_inline]] void memoPut(uint64_t index, Value* v)
    {
        if (!m_memo.put(index, v)) [[unlikely]]
            fail("memo larger than the pickle");
    }
    Value* memoGet(uint64_t index);
    // The slot's value, or null when it was never stored; a string the lane left unbuilt is built now.
    Value* memoSlot(uint64_t index);
    // The slot's value, or null when it is empty or the lane's placeholder.
    const Value* memoPeek(uint64_t index);
    // A string literal of a tensor record kept in its memo slot unbuilt (lazyLiteral), built when fetched.
    Value* lazyLiteral(std::string_view text) const;
    Value* buildLiteral(Value*& slot);
    // At a GET (of `callableSlot`) followed by MARK: takes the tensor record starting at m_opStart, if there is one.
    bool takeTensorRecord(uint64_t callableSlot);
    // At a GET (of `classSlot`) followed by EMPTY_TUPLE: takes the dataclass record starting at m_opStart,
    // if there is one.
    bool takeDataclassRecord(uint64_t classSlot);
    Value* parseTextInt(std::string_view line, bool isLongOpcode);
    Value* decodeTextString(std::string_view quoted); // STRING
    Value* decodeRawUnicodeEscape(std::string_view raw); // UNICODE
    void appendTo(Value* target, Value* item);
    void setItem(Value* target, Value* key, Value* value);

    Bytes m_data; // what has arrived of the input (all of it, unless m_arriving)
    const ArrivingBytes* m_arriving = nullptr;
    size_t m_extendAt = SIZE_MAX; // arriving input: the position from which arrive() is asked for more
    Arena& m_arena;
    Semantics& m_semantics;
    uint64_t m_base = 0;
    size_t m_pos = 0;
    const LoadControl* m_control = nullptr;
    uint32_t m_untilCheck = 1; // opcodes until the next cancellation check
    size_t m_opStart = 0;
    FrameBound m_frame;
    uint8_t m_op = 0;
    int m_protocol = 0;
    ValueStack m_stack;
    std::vector<size_t> m_marks;
    PickleMemo m_memo;
    size_t m_work = 0;
    size_t m_workBudget = 0;
    bool m_tensorLane = false;
    size_t m_tensorRecords = 0;
    TensorRecord m_record; // the lane's, kept here: it is a kilobyte
    bool m_dataclassLane = false;
    size_t m_dataclassRecords = 0;
    DataclassRecord m_dataclass; // the lane's, kept here: it is over 300 bytes
};

// The name pickletools gives an opcode, for messages ("BINUNICODE").
const char* opcodeName(uint8_t op);

} // namespace sl::pickle
