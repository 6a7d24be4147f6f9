#include "opcode_scan.h"

#include "pickle/dataclass_record.h"
#include "pickle/global_policy.h"
#include "pickle/tensor_record.h"
#include "pickle/unpickler.h"
#include "util/utf8.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <string_view>
#include <unordered_map>

namespace sl::pickle {

namespace {

// What the shadow stack knows about a value: enough to name STACK_GLOBAL's operands and getattr lookups.
// 16 bytes: a large checkpoint's pickle pushes and memoises millions of them.
struct Item {
    enum Kind : uint8_t { Other, Str, Global, Pair, Mark };
    Kind kind = Other;
    bool decoded = false; // Str: `first` indexes the decoded strings rather than the pickle's bytes
    uint32_t global = 0; // Global: index into the scan's globals; Str: the length
    uint32_t first = 0, second = 0; // Pair: indices into the pair pool; Str: the offset (first)
};

// STACK_GLOBAL's two string items by where they come from: the same memoised strings always name the
// same import.
struct SiteKey {
    SiteKey(const Item& a, const Item& b, int protocol)
        : a0(a.first), a1(a.global), b0(b.first), b1(b.global)
        , flags(static_cast<uint32_t>(a.kind) | uint32_t(a.decoded) << 4 | uint32_t(b.kind) << 8 | uint32_t(b.decoded) << 12
              | static_cast<uint32_t>(protocol + 1) << 16)
    {
    }
    uint32_t a0, a1, b0, b1, flags;
    bool operator==(const SiteKey&) const = default;
};
struct SiteKeyHash {
    size_t operator()(const SiteKey& k) const
    {
        uint64_t h = (uint64_t(k.a0) << 32 | k.a1) * 0x9E3779B97F4A7C15ull;
        h ^= (uint64_t(k.b0) << 32 | k.b1) + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
        h ^= uint64_t(k.flags) * 0xC2B2AE3D27D4EB4Full;
        return static_cast<size_t>(h ^ (h >> 29));
    }
};

class Scanner {
public:
    Scanner(Bytes data, uint64_t base, uint32_t nested, bool tensorLane, PickleScan& out)
        : m_data(data)
        , m_base(base)
        , m_nested(nested)
        , m_tensorLane(tensorLane)
        , m_out(out)
        , m_memo(data.size(), kUntracked)
    {
    }

    void run()
    {
        while (m_pos < m_data.size()) {
            m_opStart = m_pos;
            uint8_t op = m_data[m_pos++];
            if (!step(op))
                return;
            if (m_frame.crossed(m_opStart, m_pos)) [[unlikely]] {
                frameCrossed();
                return;
            }
        }
        m_out.ranOut = true;
        problem("ends without STOP");
    }

private:
    // torch.load reads what follows from elsewhere (kFrameCrossing): an import nobody can name.
    bool frameCrossed()
    {
        markUse(globalItem(addGlobal("?", "?", "FRAME")), kUsesUnknown);
        return problem(kFrameCrossing);
    }
    // The bytes end before the pickle does: a reader that gave only a prefix can give more.
    bool ranOut(const std::string& what)
    {
        m_out.ranOut = true;
        return problem(what);
    }
    bool problem(const std::string& what)
    {
        if (m_out.problems.size() < 20)
            m_out.problems.push_back("at offset " + std::to_string(m_base + m_opStart) + ": " + what);
        return false;
    }
    bool need(uint64_t n) { return n <= m_data.size() - m_pos; }
    uint64_t readUInt(unsigned n)
    {
        uint64_t v = 0;
        for (unsigned i = 0; i < n; ++i)
            v |= uint64_t(m_data[m_pos + i]) << (8 * i);
        m_pos += n;
        return v;
    }
    std::string_view bytesAt(uint64_t n)
    {
        std::string_view v(reinterpret_cast<const char*>(m_data.data() + m_pos), n);
        m_pos += n;
        return v;
    }
    bool line(std::string_view& out)
    {
        const void* nl = std::memchr(m_data.data() + m_pos, '\n', m_data.size() - m_pos);
        if (!nl)
            return ranOut("line without a newline");
        size_t len = static_cast<size_t>(static_cast<const uint8_t*>(nl) - (m_data.data() + m_pos));
        out = bytesAt(len);
        ++m_pos;
        if (!out.empty() && out.back() == '\r')
            out.remove_suffix(1);
        return true;
    }

    void push(Item i)
    {
        if (m_size == m_stack.size())
            m_stack.resize(std::max<size_t>(64, m_stack.size() * 2));
        m_stack[m_size++] = i;
    }
    Item pop()
    {
        if (m_size == 0 || (!m_marks.empty() && m_size == m_marks.back()))
            return {}; // underflow: the real unpickler fails here; the scan keeps what it has seen
        return m_stack[--m_size];
    }
    // Pops everything above the last MARK; keeps the first two popped items (all OBJ and TUPLE need).
    struct Popped {
        size_t count = 0;
        Item first, second;
    };
    Popped popMark()
    {
        Popped out;
        if (m_marks.empty())
            return out;
        size_t at = std::min(m_marks.back(), m_size);
        out.count = m_size - at;
        if (out.count > 0)
            out.first = m_stack[at];
        if (out.count > 1)
            out.second = m_stack[at + 1];
        m_size = at;
        m_marks.pop_back();
        return out;
    }

    // `attribute`: the result of getattr(<import>, "NAME"), kept apart from a real import of the same
    // dotted name, which the lookup must not hide (load_safety.cpp skips uncalled attributes).
    uint32_t addGlobal(std::string_view module, std::string_view name, const char* opcode, bool attribute = false)
    {
        auto mapped = mapLegacyName(module, name, m_protocol);
        std::string m(mapped.first), n(mapped.second);
        std::string key = m + '\n' + n + (attribute ? "\n@" : "");
        auto it = m_globalIndex.find(key);
        if (it == m_globalIndex.end()) {
            ScannedGlobal g;
            g.module = std::move(m);
            g.name = std::move(n);
            g.opcode = opcode;
            g.offset = m_base + m_opStart;
            g.nestedDepth = m_depth;
            g.attribute = attribute;
            m_out.globals.push_back(std::move(g));
            it = m_globalIndex.emplace(std::move(key), static_cast<uint32_t>(m_out.globals.size() - 1)).first;
        }
        ++m_out.globals[it->second].count;
        return it->second;
    }
    void markUse(const Item& i, uint8_t use)
    {
        if (i.kind == Item::Global)
            m_out.globals[i.global].uses |= use;
    }

    // The memo (pickle/pickle_memo.h) holds a handle per slot, so the hundreds of thousands of slots a
    // large checkpoint's pickle fills cost 4 bytes each at most: a string of the pickle's bytes as where it
    // starts (inlineStr), else 1 + the item's position in m_memoItems, or the memo's placeholder
    // (kUntracked) for a value the scan does not track, which takes a bit. MEMOIZE stores at Python's
    // len(memo), which counts slots, not stores: a scan that counted a PUT over a stored slot would look up
    // other strings than Python for every later MEMOIZE, and could read a safe name where torch.load
    // imports os.system (tests/fixtures/hostile/zip/memoize_after_*.pt). The memo counts as Python does.
    bool memoPut(uint64_t index, const Item& item)
    {
        uint32_t handle = inlineStr(item);
        if (!handle && item.kind != Item::Other && item.kind != Item::Mark && m_memoItems.size() < kUntracked - 1) {
            m_memoItems.push_back(item); // past 2^31 items untracked: a STACK_GLOBAL over one reads as unknown
            handle = static_cast<uint32_t>(m_memoItems.size());
        }
        return m_memo.put(index, handle ? handle : kUntracked) || problem("memo larger than the pickle");
    }
    Item memoGet(uint64_t index)
    {
        const uint32_t* slot = m_memo.slot(index);
        const uint32_t handle = slot ? *slot : 0;
        if (handle & kInlineStr)
            return inlineItem(handle);
        return handle && handle != kUntracked ? m_memoItems[handle - 1] : Item {};
    }
    // A state dict memoises two strings per tensor (its key and its storage's), and as items, 16 bytes each
    // in a vector that doubles, they were most of the scan's memory (case a's peak fell by 2.8 of the 7 MB
    // the whole scan adds to it). A string
    // of the pickle's own bytes is instead kept in its slot as where its bytes start, with the width of the
    // length prefix right before them (1, 4 or 8 bytes), from which memoGet reads its length again.
    static constexpr uint32_t kInlineStr = 0x80000000u;
    static constexpr uint32_t kUntracked = kInlineStr - 1;
    static constexpr unsigned kInlineOffsetBits = 29; // strings starting in the pickle's first 512 MiB
    static constexpr unsigned kPrefixWidths[3] = { 1, 4, 8 };
    uint64_t readPrefix(size_t at, unsigned width) const { return littleEndianAt(m_data, at - width, width); }
    uint32_t inlineStr(const Item& i) const
    {
        if (i.kind != Item::Str || i.decoded || i.first >= (1u << kInlineOffsetBits))
            return 0;
        for (uint32_t w = 0; w < 3; ++w)
            if (i.first >= kPrefixWidths[w] && readPrefix(i.first, kPrefixWidths[w]) == i.global)
                return kInlineStr | w << kInlineOffsetBits | i.first;
        return 0; // a string whose bytes have no length prefix: kept as an item
    }
    Item inlineItem(uint32_t handle) const
    {
        Item i;
        i.kind = Item::Str;
        i.first = handle & ((1u << kInlineOffsetBits) - 1);
        i.global = static_cast<uint32_t>(readPrefix(i.first, kPrefixWidths[(handle >> kInlineOffsetBits) & 3]));
        return i;
    }
    Item top() const { return m_size == 0 ? Item {} : m_stack[m_size - 1]; }

    // A literal that may hold a pickle: what a nested loader (torch.load of BytesIO, pickle.loads) runs.
    // A PROTO 2-5 header makes bytes a pickle. Without one (protocol 0 and 1, or a binary pickle whose
    // PROTO was left out) they count only when they scan cleanly and end at their STOP, which data (a numpy
    // payload) all but never does; bytes that go on past the STOP stay unopened, under the loader's danger.
    void nestedBytes(std::string_view b, uint64_t offset)
    {
        if (m_nested == 0 || b.size() < 2)
            return;
        Bytes inner(reinterpret_cast<const uint8_t*>(b.data()), b.size());
        const bool headed = looksLikeBinaryPickle(inner);
        if (!headed && b.back() != '.')
            return;
        PickleScan sub = scanPickle(inner, offset, m_nested - 1, m_tensorLane);
        if (!headed && !(sub.complete && sub.consumed == inner.size() && sub.problems.empty()))
            return;
        for (auto& g : sub.globals) {
            g.nestedDepth += 1;
            m_out.globals.push_back(std::move(g));
        }
    }

    // A string literal as bytes: _codecs.encode(s, "latin1") is how protocol 2 pickles bytes, so a nested
    // pickle can arrive as text. Only text that ends like a pickle is decoded.
    void nestedText(std::string_view s, uint64_t offset)
    {
        if (m_nested == 0 || s.size() < 2 || s.back() != '.')
            return;
        if (std::optional<std::string> bytes = latin1FromUtf8(s))
            nestedBytes(*bytes, offset);
    }

    void callOn(Item callable, Item args)
    {
        // getattr(<imported class>, "NAME") with a plain public name reads an attribute (an enum member)
        // and calls nothing; its result is tracked as an import of its own so calling it is seen.
        if (callable.kind == Item::Global && args.kind == Item::Pair) {
            const ScannedGlobal& g = m_out.globals[callable.global];
            Item a = m_pairs[args.first], b = m_pairs[args.second];
            std::string_view bs = text(b);
            bool plain = b.kind == Item::Str && !bs.empty() && bs[0] != '_' && bs.find('.') == std::string_view::npos;
            if (g.module == "builtins" && g.name == "getattr" && a.kind == Item::Global && plain) {
                m_out.globals[callable.global].uses |= kAttributeLookup;
                m_getattr = callable.global;
                // Keyed by the owner's index and the attribute's text (which each reference carries in the
                // pickle's bytes), so a huge owner name is not copied again at every lookup.
                std::string site = std::to_string(a.global) + '\n' + std::string(bs);
                if (auto known = m_attributeGlobals.find(site); known != m_attributeGlobals.end()) {
                    ++m_out.globals[known->second].count;
                    push(globalItem(known->second));
                    return;
                }
                const ScannedGlobal& owner = m_out.globals[a.global];
                std::string attr = owner.name + "." + std::string(bs);
                std::string module = owner.module;
                int saved = m_protocol;
                m_protocol = 5; // the names are already mapped
                Item r = globalItem(addGlobal(module, attr, "REDUCE", true));
                m_protocol = saved;
                m_attributeGlobals.emplace(std::move(site), r.global);
                push(r);
                return;
            }
        }
        called(callable);
        push({});
    }
    void called(const Item& callable)
    {
        markUse(callable, kCalled);
        // Calling what a getattr lookup returned makes getattr the gadget it is.
        if (callable.kind == Item::Global && m_out.globals[callable.global].attribute)
            m_out.globals[m_getattr].uses |= kCalled;
    }

    // A tensor record in one step, with the opcodes' effects on the scan: its two REDUCEs call what its
    // GETs fetched with arguments the scan does not track, its string literals are memoised as strings and
    // everything else it memoises as untracked values, and one untracked value (the tensor) is left pushed.
    bool takeTensorRecord()
    {
        if (!matchTensorRecord(m_data, m_opStart, m_record))
            return false;
        const TensorRecord& r = m_record;
        if (m_frame.crossed(m_opStart, r.end))
            return false; // the opcode loop finds where
        const Item hooks = memoGet(r.hooksCallable.slot), callable = memoGet(r.callable.slot);
        for (uint8_t i = 0; i < r.putCount; ++i) {
            const TensorRecord::Part part = r.puts[i].part;
            // Never refused: a record's PUTs are bytes of the pickle, which bounds the memo.
            (void)memoPut(r.puts[i].slot, TensorRecord::isLiteral(part) ? strItem(r.literalOf(part)) : Item {});
        }
        called(hooks);
        called(callable);
        push({});
        m_pos = r.end;
        m_opStart = r.lastOpcode; // as the opcode loop leaves it, for a pickle that ends here
        ++m_out.tensorRecords;
        return true;
    }

    // A dataclass record (pickle/dataclass_record.h) in one step, with the opcodes' effects on the scan: NEWOBJ
    // instantiates the class its first GET fetched, each Size's REDUCE calls what its GET fetched with an
    // untracked tuple, its key and string literals are memoised as strings and everything else as untracked
    // values (int tuples are never a (global, str) pair), and one untracked value (the object) is left pushed:
    // what its GETs fetch goes into the state dict, which the scan does not track. Only where every MEMOIZE
    // stores into a new slot, so the GETs read what they would have read in order.
    bool takeDataclassRecord(uint64_t classSlot)
    {
        // Tried only where the GET fetches an import of a class the lane is for: the records of other
        // classes are not matched in vain (the effects below do not depend on the class).
        const Item cls = memoGet(classSlot);
        if (cls.kind != Item::Global || !isLaneDataclass(m_out.globals[cls.global].name) || !m_memo.countIsNext()
            || !matchDataclassRecord(m_data, m_opStart, m_dataclass))
            return false;
        const DataclassRecord& r = m_dataclass;
        if (m_frame.crossed(m_opStart, r.end))
            return false; // the opcode loop finds where
        Item sizes[DataclassRecord::kMaxFields];
        for (uint8_t i = 0; i < r.fieldCount; ++i)
            if (r.fields[i].form == DataclassRecord::Form::Size)
                sizes[i] = memoGet(r.fields[i].sizeSlot);
        for (uint8_t i = 0; i < r.memoizedCount; ++i) {
            const DataclassRecord::Memoized m = r.memoized[i];
            (void)memoPut(m_memo.count(), DataclassRecord::isLiteral(m.part) ? strItem(r.literalOf(m)) : Item {});
        }
        markUse(cls, kInstantiated);
        for (uint8_t i = 0; i < r.fieldCount; ++i)
            if (r.fields[i].form == DataclassRecord::Form::Size)
                called(sizes[i]);
        push({});
        m_pos = r.end;
        m_opStart = r.end - 1; // its BUILD, as the opcode loop leaves it, for a pickle that ends here
        ++m_out.dataclassRecords;
        return true;
    }

    [[gnu::always_inline]] inline bool step(uint8_t op)
    {
        switch (op) {
        case '(': // MARK
            m_marks.push_back(m_size);
            return true;
        case '.': // STOP
            m_out.consumed = m_pos;
            m_out.complete = true;
            return false;
        case '0': // POP
            if (!m_marks.empty() && m_size == m_marks.back())
                m_marks.pop_back();
            else
                pop();
            return true;
        case '1': // POP_MARK
            popMark();
            return true;
        case '2': // DUP
            push(top());
            return true;
        case 'N': case 0x88: case 0x89: case '}': case ']': case ')': case 0x8f: // constants, empty containers
            push({});
            return true;
        case 0x80: // PROTO
            if (!need(1))
                return ranOut("truncated");
            m_protocol = m_data[m_pos++];
            return true;
        case 0x95: { // FRAME
            if (!need(8))
                return ranOut("truncated");
            const uint64_t len = readUInt(8);
            return m_frame.begin(m_pos, len, m_data.size()) || frameCrossed();
        }
        case 'K': case 'h': case 'q': case 0x82: // 1-byte argument
        case 'M': case 0x83: // 2-byte
        case 'J': case 'j': case 'r': case 0x84: // 4-byte
        case 'G': { // 8-byte float
            unsigned n = (op == 'K' || op == 'h' || op == 'q' || op == 0x82) ? 1 : (op == 'M' || op == 0x83) ? 2 : op == 'G' ? 8 : 4;
            if (!need(n))
                return ranOut("truncated");
            uint64_t v = readUInt(n);
            if (op == 'h' || op == 'j') {
                // A GET followed by MARK may start a tensor record, one followed by EMPTY_TUPLE a dataclass record.
                const uint8_t next = m_pos < m_data.size() ? m_data[m_pos] : 0;
                if (!(m_tensorLane && ((next == '(' && takeTensorRecord()) || (next == ')' && takeDataclassRecord(v)))))
                    push(memoGet(v));
            } else if (op == 'q' || op == 'r') {
                return memoPut(v, top());
            } else {
                push({});
            }
            return true;
        }
        case 0x94: // MEMOIZE
            return memoPut(m_memo.count(), top());
        case 'I': case 'L': case 'F': case 'P': case 'S': case 'V': case 'g': case 'p': { // text argument
            std::string_view l;
            if (!line(l))
                return false;
            if (op == 'g' || op == 'p') {
                std::optional<uint64_t> v = parseMemoIndexLine(l);
                if (!v)
                    return problem("malformed memo index"); // Python stops here too: nothing after it runs
                if (op == 'g')
                    push(memoGet(*v));
                else if (!memoPut(*v, top()))
                    return false;
            } else if (op == 'S' && l.size() >= 2 && (l.front() == '\'' || l.front() == '"')) {
                std::optional<std::string> text = decodeEscapedString(l.substr(1, l.size() - 2));
                if (text)
                    nestedText(*text, m_base + m_opStart + 1);
                push(text ? decoded(std::move(*text)) : Item {}); // Python refuses a bad \x escape: nothing after it runs
            } else if (op == 'V') {
                std::string text = decodeRawUnicodeEscape(l);
                nestedText(text, m_base + m_opStart + 1);
                push(decoded(std::move(text)));
            } else {
                push({});
            }
            return true;
        }
        case 'U': case 0x8c: case 'C': case 0x8a: // 1-byte length
        case 'T': case 'X': case 'B': case 0x8b: // 4-byte length
        case 0x8d: case 0x8e: case 0x96: { // 8-byte length
            unsigned w = (op == 'U' || op == 0x8c || op == 'C' || op == 0x8a) ? 1 : (op == 0x8d || op == 0x8e || op == 0x96) ? 8 : 4;
            if (!need(w))
                return ranOut("truncated");
            uint64_t n = readUInt(w);
            if (!need(n))
                return ranOut("a length of " + std::to_string(n) + " runs past the end");
            std::string_view b = bytesAt(n);
            const uint64_t offset = m_base + (m_pos - b.size());
            if (op == 'U' || op == 0x8c || op == 'T' || op == 'X' || op == 0x8d) {
                push(strItem(b));
                nestedText(b, offset);
            } else {
                push({});
                if (op != 0x8a && op != 0x8b) // LONG1 and LONG4 are integers
                    nestedBytes(b, offset);
            }
            return true;
        }
        case 'c': // GLOBAL
        case 'i': { // INST
            std::string_view module, name;
            if (!line(module) || !line(name))
                return false;
            uint32_t g = addGlobal(module, name, op == 'c' ? "GLOBAL" : "INST");
            if (op == 'c') {
                push(globalItem(g));
            } else {
                m_out.globals[g].uses |= kCalled;
                popMark();
                push({});
            }
            return true;
        }
        case 0x93: { // STACK_GLOBAL
            Item name = pop();
            Item module = pop();
            if (module.kind != Item::Str || name.kind != Item::Str) {
                // A module or name the scan cannot read is still an import; report it rather than guess.
                push(globalItem(addGlobal("?", "?", "STACK_GLOBAL")));
                problem("STACK_GLOBAL whose module and name are not literal strings");
                return true;
            }
            // One memoised string pair named again and again resolves once, not once per reference.
            const SiteKey site { module, name, m_protocol };
            auto known = m_siteGlobals.find(site);
            uint32_t g = known != m_siteGlobals.end() ? known->second : addGlobal(text(module), text(name), "STACK_GLOBAL");
            if (known == m_siteGlobals.end())
                m_siteGlobals.emplace(site, g);
            else
                ++m_out.globals[g].count;
            push(globalItem(g));
            return true;
        }
        case 'R': { // REDUCE
            Item args = pop();
            Item callable = pop();
            callOn(callable, args);
            return true;
        }
        case 0x81: { // NEWOBJ
            pop();
            markUse(pop(), kInstantiated);
            push({});
            return true;
        }
        case 0x92: { // NEWOBJ_EX
            pop();
            pop();
            markUse(pop(), kInstantiated);
            push({});
            return true;
        }
        case 'o': { // OBJ: MARK cls args... OBJ calls cls(*args)
            Popped items = popMark();
            if (items.count > 0)
                markUse(items.first, kCalled);
            push({});
            return true;
        }
        case 'b': // BUILD: the object stays, its state goes
            pop();
            return true;
        case 'Q': // BINPERSID
            pop();
            push({});
            return true;
        case 0x85: case 0x86: case 0x87: { // TUPLE1-3
            unsigned n = op - 0x84;
            Item items[3];
            for (unsigned i = n; i-- > 0;)
                items[i] = pop();
            pushTuple(items, n);
            return true;
        }
        case 't': { // TUPLE
            Popped items = popMark();
            Item two[2] = { items.first, items.second };
            pushTuple(two, items.count);
            return true;
        }
        case 'l': case 'd': case 0x91: // LIST, DICT, FROZENSET
            popMark();
            push({});
            return true;
        case 'a': // APPEND
            pop();
            return true;
        case 's': // SETITEM
            pop();
            pop();
            return true;
        case 'e': case 'u': case 0x90: // APPENDS, SETITEMS, ADDITEMS
            popMark();
            return true;
        case 0x97: // NEXT_BUFFER
            push({});
            return true;
        case 0x98: // READONLY_BUFFER
            return true;
        default:
            return problem("unknown opcode 0x" + hex(op));
        }
    }

    // Protocol 0's text strings carry escapes that Python decodes before it looks a name up, so `o\x73`
    // and `o\u0073` are "os" to it and must be to the scan.
    Item decoded(std::string value)
    {
        m_decoded.push_back(std::move(value));
        Item i;
        i.kind = Item::Str;
        i.decoded = true;
        i.first = static_cast<uint32_t>(m_decoded.size() - 1);
        return i;
    }
    // A string of the pickle's own bytes; one past 4 GiB into it is not tracked (a STACK_GLOBAL over it is
    // reported as unreadable, which is the safe side).
    Item strItem(std::string_view b) const
    {
        Item i;
        uint64_t offset = static_cast<uint64_t>(reinterpret_cast<const uint8_t*>(b.data()) - m_data.data());
        if (offset > UINT32_MAX || b.size() > UINT32_MAX)
            return i;
        i.kind = Item::Str;
        i.first = static_cast<uint32_t>(offset);
        i.global = static_cast<uint32_t>(b.size());
        return i;
    }
    static Item globalItem(uint32_t g)
    {
        Item i;
        i.kind = Item::Global;
        i.global = g;
        return i;
    }
    std::string_view text(const Item& i) const
    {
        if (i.kind != Item::Str)
            return {};
        if (i.decoded)
            return m_decoded[i.first];
        return { reinterpret_cast<const char*>(m_data.data()) + i.first, i.global };
    }
    static std::string hex(uint8_t b)
    {
        const char* d = "0123456789abcdef";
        return { d[b >> 4], d[b & 15] };
    }

    // Only the pair a getattr lookup needs, (<import>, "NAME"), is kept; any other tuple is just a value.
    void pushTuple(const Item* items, size_t n)
    {
        if (n == 2 && items[0].kind == Item::Global && items[1].kind == Item::Str) {
            m_pairs.push_back(items[0]);
            m_pairs.push_back(items[1]);
            Item pair;
            pair.kind = Item::Pair;
            pair.first = static_cast<uint32_t>(m_pairs.size() - 2);
            pair.second = static_cast<uint32_t>(m_pairs.size() - 1);
            push(pair);
        } else {
            push({});
        }
    }

    Bytes m_data;
    uint64_t m_base;
    uint32_t m_nested;
    bool m_tensorLane;
    TensorRecord m_record; // the lane's, kept here: it is a kilobyte
    DataclassRecord m_dataclass;
    uint32_t m_depth = 0;
    PickleScan& m_out;
    size_t m_pos = 0;
    size_t m_opStart = 0;
    FrameBound m_frame;
    int m_protocol = 0;
    std::vector<Item> m_stack; // the first m_size are live
    size_t m_size = 0;
    std::vector<size_t> m_marks;
    SlotMemo<uint32_t> m_memo;
    std::vector<Item> m_memoItems;
    std::vector<Item> m_pairs;
    std::deque<std::string> m_decoded; // protocol 0 strings after their escapes (Items point into them)
    uint32_t m_getattr = 0; // builtins.getattr's index, once a lookup has used it
    std::unordered_map<std::string, uint32_t> m_globalIndex;
    std::unordered_map<SiteKey, uint32_t, SiteKeyHash> m_siteGlobals;
    std::unordered_map<std::string, uint32_t> m_attributeGlobals; // "<owner index>\n<attribute>"
};

} // namespace

bool looksLikeBinaryPickle(Bytes data)
{
    return data.size() >= 3 && data[0] == 0x80 && data[1] >= 2 && data[1] <= 5;
}

PickleScan scanPickle(Bytes data, uint64_t baseOffset, uint32_t nestedDepth, bool tensorLane)
{
    PickleScan out;
    Scanner(data, baseOffset, nestedDepth, tensorLane, out).run();
    return out;
}

} // namespace sl::pickle
