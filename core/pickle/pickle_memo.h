#pragma once
// The unpickler's memo: slot index -> value, with the counting MEMOIZE relies on.
//
// Picklers number slots in order, so most slots are dense: for them the memo keeps the values it holds in
// one array, and per block of 64 slots a mask of which slots hold one and where the block's first value
// is (a slot's value is found by counting the bits below it). The tensor lane (pickle/tensor_record.h)
// leaves five of a tensor record's eight slots as placeholders it never builds; a placeholder is a bit in
// a second mask rather than a pointer, so a 76,800-tensor state dict's memo is 2 MB rather than 4.9 MB
// of new memory, which this machine charges by the megabyte.
//
// A slot far past the dense ones goes to a hash map (a hostile pickle's LONG_BINPUT 4,000,000,000 costs
// one entry), as does a later store into a dense slot that held no value (which the array cannot take
// without moving the values after it). Both are rare in real pickles.
//
// Counting: MEMOIZE stores at Python's len(memo), the number of slots stored, so storing into a stored
// slot, or reaching a far slot from the dense side, must not count again (tests/core/pickle_vm,
// memo_*; the opcode scan keeps its own memo and counts alike).

#include "pickle/value.h"

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace sl::pickle {

class PickleMemo {
public:
    // Far slots are ones this far past the dense part. Dense slots are numbered up to `maxDense` (the
    // unpickler passes its input's size: each store takes a byte of pickle at least), and there are never
    // more far ones.
    static constexpr uint64_t kDenseSlack = 1 << 16;

    explicit PickleMemo(uint64_t maxDense)
        : m_maxDense(maxDense)
    {
        // Picklers memoise about one object per 8 bytes of pickle (a DCP .metadata: 13 million in 100 MB);
        // growing by doubling copied them over and over. Only address space until it is used.
        m_values.reserve(maxDense / 8);
        m_blocks.reserve(maxDense / 8 / 64 + 1);
    }

    // What a placeholder slot holds; never a real value.
    static Value* placeholder() { return &s_placeholder; }

    // Stores `v` (or the placeholder) in slot `index`. Returns false when the memo is larger than its
    // input allows (a hostile pickle).
    // Inline for the usual case, the next slot inside the last block (a 76,800-tensor state dict stores
    // 614,000); the rest, a new block included, out of line.
    [[gnu::always_inline]] bool put(uint64_t index, Value* v)
    {
        if (index == m_size && (index & 63) != 0 && m_far.empty() && index <= m_maxDense) [[likely]] {
            appendInBlock(v);
            ++m_count;
            return true;
        }
        return putElsewhere(index, v);
    }

    // The slot's value (a placeholder included), or null when it was never stored. A pointer into the memo,
    // valid until the next put: callers may replace the value in place.
    Value** slot(uint64_t index)
    {
        if (index < m_heldPrefix) [[likely]] // the slots torch's pickles fetch again come first
            return &m_values[index];
        if (index < m_size) {
            const Block& b = m_blocks[index >> 6];
            const uint64_t bit = uint64_t(1) << (index & 63);
            if (b.held & bit)
                return &m_values[b.first + heldBelow(b.held, bit)];
            if (b.placeholders & bit)
                return &s_placeholderSlot;
        }
        auto it = m_far.find(index);
        return it == m_far.end() ? nullptr : &it->second;
    }

    // Python's len(memo): the next MEMOIZE's slot.
    uint64_t count() const { return m_count; }

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
    void append(Value* v)
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
    [[gnu::always_inline]] void appendInBlock(Value* v)
    {
        Block& b = m_blocks.back();
        const uint64_t bit = uint64_t(1) << (m_size & 63);
        if (v == &s_placeholder) {
            b.placeholders |= bit;
        } else {
            b.held |= bit;
            m_heldPrefix += m_heldPrefix == m_size;
            m_values.push_back(v);
        }
        ++m_size;
    }

    bool putElsewhere(uint64_t index, Value* v);

    static inline Value s_placeholder { Kind::None };
    static inline Value* s_placeholderSlot = &s_placeholder; // slot() of a placeholder bit points here

    uint64_t m_maxDense;
    std::vector<Value*> m_values;
    std::vector<Block> m_blocks;
    uint64_t m_size = 0; // slots [0, m_size) are dense: in a block, held, a placeholder or empty
    uint64_t m_heldPrefix = 0; // slots [0, m_heldPrefix) all hold a value: slot i's is m_values[i]
    std::unordered_map<uint64_t, Value*> m_far; // far slots, and later stores into empty dense slots
    uint64_t m_count = 0;
};

} // namespace sl::pickle
