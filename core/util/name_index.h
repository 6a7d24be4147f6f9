#pragma once
// An insert-only index from names to positions in a caller's sequence (zip records, storages, entries).
//
// std::unordered_map<std::string_view, size_t> allocates a node per name and chases pointers on every
// lookup; on archives with 76,800 records its maps took about a fifth of `statelens ls`. This is one flat
// array of 64-bit slots, open addressing with linear probing, at most half full: a slot holds the position
// + 1 (0 = empty) and 32 bits of the name's hash, so most probes never touch a name. The array is sized to
// the names it is reserved for, not to a power of two (a name's first slot is its hash scaled to the size):
// rounded up, 76,800 zip records took 2.1 MB of slots a quarter full, all of it new memory, which a
// virtual machine like the benchmark's charges by the megabyte. Names are not stored:
// each call takes `nameOf(position)`, which gives them back from the caller's own sequence (so the index
// holds no pointer into it and survives the owner being moved). The first position inserted under a name
// keeps it, as unordered_map::emplace does.

#include "name_hash.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace sl {

class NameIndex {
public:
    static constexpr size_t npos = SIZE_MAX;

    size_t size() const { return m_size; }
    size_t slotCount() const { return m_slots.size(); } // 8 bytes each

    void reserve(size_t n)
    {
        if (const size_t want = std::max<size_t>(16, 2 * n); want > m_slots.size())
            rehash(want);
    }

    // The position stored under `name`, or npos.
    template <typename NameOf> size_t find(std::string_view name, const NameOf& nameOf) const
    {
        if (m_slots.empty())
            return npos;
        const uint32_t tag = hashOf(name);
        for (size_t i = home(tag);; i = next(i)) {
            const uint64_t slot = m_slots[i];
            if (slot == 0)
                return npos;
            const size_t pos = static_cast<size_t>(slot >> 32) - 1;
            if (static_cast<uint32_t>(slot) == tag && std::string_view(nameOf(pos)) == name)
                return pos;
        }
    }

    // Indexes `pos` under nameOf(pos) unless that name is there already. Returns the position the name
    // maps to afterwards: `pos` when it was inserted, the earlier one otherwise.
    template <typename NameOf> size_t insert(size_t pos, const NameOf& nameOf)
    {
        if (pos >= UINT32_MAX)
            throw std::length_error("NameIndex: more than 4 billion names");
        if (2 * (m_size + 1) > m_slots.size())
            rehash(m_slots.empty() ? 16 : 2 * m_slots.size());
        return place(pos, hashOf(std::string_view(nameOf(pos))), nameOf);
    }

    // insert(0..n-1) in order, with the same result, faster for many names: each name's slot is fetched
    // from memory a few names ahead of its insert. (An index over 90,000 names is 2 MB of slots; one
    // cache miss per insert was most of building it.) Returns how many names were already present, and
    // calls onRepeat(pos) for each such position, in order.
    template <typename NameOf, typename OnRepeat = void (*)(size_t)>
    size_t insertAll(size_t n, const NameOf& nameOf, const OnRepeat& onRepeat = [](size_t) {})
    {
        if (n >= UINT32_MAX)
            throw std::length_error("NameIndex: more than 4 billion names");
        reserve(m_size + n);
        constexpr size_t kAhead = 8;
        uint32_t tags[kAhead];
        size_t repeated = 0;
        for (size_t i = 0; i < n + kAhead; ++i) {
            // Name `pos` is placed, then name `i` (kAhead later) takes its tag's place and is fetched.
            if (i >= kAhead) {
                const size_t pos = i - kAhead;
                if (place(pos, tags[pos % kAhead], nameOf) != pos) {
                    ++repeated;
                    onRepeat(pos);
                }
            }
            if (i < n) {
                tags[i % kAhead] = hashOf(std::string_view(nameOf(i)));
                __builtin_prefetch(&m_slots[home(tags[i % kAhead])], 1);
            }
        }
        return repeated;
    }

private:
    // insert()'s probe, for a table with room and the name's tag known.
    template <typename NameOf> size_t place(size_t pos, uint32_t tag, const NameOf& nameOf)
    {
        std::string_view name;
        for (size_t i = home(tag);; i = next(i)) {
            const uint64_t slot = m_slots[i];
            if (slot == 0) {
                m_slots[i] = (static_cast<uint64_t>(pos) + 1) << 32 | tag;
                ++m_size;
                return pos;
            }
            const size_t other = static_cast<size_t>(slot >> 32) - 1;
            if (static_cast<uint32_t>(slot) == tag) {
                if (name.empty())
                    name = nameOf(pos);
                if (std::string_view(nameOf(other)) == name)
                    return other;
            }
        }
    }

    static uint32_t hashOf(std::string_view name)
    {
        const uint64_t h = nameHash64(name);
        return static_cast<uint32_t>(h ^ (h >> 32));
    }

    // A tag's first slot: the tag scaled from [0, 2^32) to [0, size), tag * size / 2^32 (a multiply, not
    // a modulo), taken in two halves of the size so that no product overflows 64 bits.
    size_t home(uint32_t tag) const
    {
        const uint64_t size = m_slots.size();
        return static_cast<size_t>(((tag * (size & 0xffffffffu)) >> 32) + tag * (size >> 32));
    }
    size_t next(size_t i) const { return i + 1 == m_slots.size() ? 0 : i + 1; }

    // Slots keep their hash, so growing needs no names.
    void rehash(size_t capacity)
    {
        std::vector<uint64_t> old = std::move(m_slots);
        m_slots.assign(capacity, 0);
        for (uint64_t slot : old) {
            if (slot == 0)
                continue;
            size_t i = home(static_cast<uint32_t>(slot));
            while (m_slots[i] != 0)
                i = next(i);
            m_slots[i] = slot;
        }
    }

    std::vector<uint64_t> m_slots; // empty, or at least 16 slots and at most half full
    size_t m_size = 0;
};

} // namespace sl
