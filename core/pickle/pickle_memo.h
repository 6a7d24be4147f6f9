#pragma once
// A pickle's memo: slot index -> value, with the counting MEMOIZE relies on. One class for both passes over a
// pickle: the unpickler's (PickleMemo, Value pointers) and the load-safety scan's (4-byte handles).
//
// Picklers number slots in order, so most slots are dense: for them the memo keeps the values it holds in
// one array, and per block of 64 slots a mask of which slots hold one and where the block's first value
// is (a slot's value is found by counting the bits below it). The tensor lane (pickle/tensor_record.h)
// leaves five of a tensor record's eight slots as placeholders it never builds; a placeholder is a bit in
// a second mask rather than a pointer, so a 76,800-tensor state dict's memo is 2 MB rather than 4.9 MB
// of new memory, which this machine charges by the megabyte. The load-safety scan keeps the slots of the
// values it does not track as placeholders: six of a tensor record's eight (its memo took 2.5 MB of case
// a as a handle per slot).
//
// A slot far past the dense ones goes to a hash map (a hostile pickle's LONG_BINPUT 4,000,000,000 costs
// one entry), as does a later store into a dense slot that held no value (which the array cannot take
// without moving the values after it). Both are rare in real pickles.
//
// Counting: MEMOIZE stores at Python's len(memo), the number of slots stored, so storing into a stored
// slot, or reaching a far slot from the dense side, must not count again (tests/core/pickle_vm,
// memo_*; the scan counts with the same class, so both read the same slot for every GET).

#include "pickle/value.h"

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace sl::pickle {

// T is what a slot holds: trivially copyable, with a placeholder value given at construction that is
// never a real value.
template <typename T> class SlotMemo {
public:
    // Far slots are ones this far past the dense part. Dense slots are numbered up to `maxDense` (callers
    // pass their input's size: each store takes a byte of pickle at least), and there are never more far
    // ones.
    static constexpr uint64_t kDenseSlack = 1 << 16;

    SlotMemo(uint64_t maxDense, T placeholder)
        : m_maxDense(maxDense)
        , m_placeholder(placeholder)
        , m_placeholderSlot(placeholder)
    {
        // Picklers memoise about one object per 8 bytes of pickle (a DCP .metadata: 13 million in 100 MB);
        // growing by doubling copied them over and over. Only address space until it is used.
        m_values.reserve(maxDense / 8);
        m_blocks.reserve(maxDense / 8 / 64 + 1);
    }

    // Stores `v` (or the placeholder) in slot `index`. Returns false when the memo is larger than its
    // input allows (a hostile pickle).
    // Inline for the usual case, the next slot inside the last block (a 76,800-tensor state dict stores
    // 614,000); the rest, a new block included, out of line.
    [[gnu::always_inline]] bool put(uint64_t index, T v)
    {
        if (index == m_size && (index & 63) != 0 && m_far.empty() && index <= m_maxDense) [[likely]] {
            appendInBlock(v);
            ++m_count;
            return true;
        }
        return putElsewhere(index, v);
    }

    // The slot's value (a placeholder included), or null when it was never stored. A pointer into the memo,
    // valid until the next put: callers may replace a value other than the placeholder in place.
    T* slot(uint64_t index)
    {
        if (index < m_heldPrefix) [[likely]] // the slots torch's pickles fetch again come first
            return &m_values[index];
        if (index < m_size) {
            const Block& b = m_blocks[index >> 6];
            const uint64_t bit = uint64_t(1) << (index & 63);
            if (b.held & bit)
                return &m_values[b.first + heldBelow(b.held, bit)];
            if (b.placeholders & bit)
                return &m_placeholderSlot;
        }
        auto it = m_far.find(index);
        return it == m_far.end() ? nullptr : &it->second;
    }

    // Python's len(memo): the next MEMOIZE's slot.
    uint64_t count() const { return m_count; }
    // Whether every slot stored is below count(): then MEMOIZE stores into new slots only, never into one
    // a GET may still fetch (as picklers write; a BINPUT far ahead, or into a gap, makes it false).
    bool countIsNext() const { return m_count == m_size && m_far.empty(); }

private:
    // The slots below `bit` in `mask` that hold a value. Inline arithmetic: std::popcount is a call into
    // libgcc on the x86-64 baseline Debian builds for (no POPCNT instruction), and GET does this per fetch.
    static uint32_t heldBelow(uint64_t mask, uint64_t bit)
    {
        uint64_t x = mask & (bit - 1);
        x -= (x >> 1) & 0x5555555555555555u;
        x = (x & 0x3333333333333333u) + ((x >> 2) & 0x3333333333333333u);
        x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fu;
        return static_cast<uint32_t>((x * 0x0101010101010101u) >> 56);
    }

    struct Block {
        uint64_t held = 0; // slots with a value in m_values
        uint64_t placeholders = 0; // slots holding the lane's placeholder
        uint64_t first = 0; // m_values index of the block's first held value
    };

    // Slot m_size, opening its block when it is the block's first.
    void append(T v)
    {
        openBlockIfFirst();
        appendInBlock(v);
    }
    // Slot m_size, left empty.
    void appendEmpty()
    {
        openBlockIfFirst();
        ++m_size;
    }
    void openBlockIfFirst()
    {
        if ((m_size & 63) == 0)
            m_blocks.push_back({ 0, 0, m_values.size() });
    }
    // Slot m_size, which is in the last block.
    [[gnu::always_inline]] void appendInBlock(T v)
    {
        Block& b = m_blocks.back();
        const uint64_t bit = uint64_t(1) << (m_size & 63);
        if (v == m_placeholder) {
            b.placeholders |= bit;
        } else {
            b.held |= bit;
            m_heldPrefix += m_heldPrefix == m_size;
            m_values.push_back(v);
        }
        ++m_size;
    }

    bool putElsewhere(uint64_t index, T v);

    uint64_t m_maxDense;
    T m_placeholder;
    T m_placeholderSlot; // slot() of a placeholder bit points here
    std::vector<T> m_values;
    std::vector<Block> m_blocks;
    uint64_t m_size = 0; // slots [0, m_size) are dense: in a block, held, a placeholder or empty
    uint64_t m_heldPrefix = 0; // slots [0, m_heldPrefix) all hold a value: slot i's is m_values[i]
    std::unordered_map<uint64_t, T> m_far; // far slots, and later stores into empty dense slots
    uint64_t m_count = 0;
};

extern template class SlotMemo<Value*>;
extern template class SlotMemo<uint32_t>;

// The unpickler's memo. The tensor lane's placeholder is a value of its own, never one a pickle builds.
class PickleMemo : public SlotMemo<Value*> {
public:
    explicit PickleMemo(uint64_t maxDense)
        : SlotMemo(maxDense, placeholder())
    {
    }
    static Value* placeholder() { return &s_placeholder; }

private:
    static inline Value s_placeholder { Kind::None };
};

} // namespace sl::pickle
