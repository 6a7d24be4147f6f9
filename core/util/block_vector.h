#pragma once
// Growing arrays for a reader's per-tensor records, which take memory a block at a time and never move what
// they hold. Vectors reserved from a header's length (its upper bound on tensors) left untouched tails, and
// a huge page under each tail's start was touched all the same: listing a 100,000-tensor header took 30 MB
// of heap for 18 MB of records. Grown by doubling instead, each vector touches about twice what it keeps, and
// copies it. Blocks are allocated one after another as the last fills, so the records lie packed, and on the
// benchmark's virtual machine each megabyte not touched saves about 2 ms.

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string_view>
#include <type_traits>
#include <vector>

namespace sl {

// A vector of trivially copyable T in blocks of kBlock items (a power of two): O(1) access, stable addresses.
template <typename T, size_t kBlock> class BlockVector {
    static_assert(std::is_trivially_copyable_v<T> && (kBlock & (kBlock - 1)) == 0);

public:
    size_t size() const { return m_size; }
    bool empty() const { return m_size == 0; }
    void push_back(const T& v)
    {
        if (m_size == m_blocks.size() * kBlock)
            m_blocks.push_back(std::make_unique_for_overwrite<T[]>(kBlock));
        m_blocks[m_size / kBlock][m_size % kBlock] = v;
        ++m_size;
    }
    const T& operator[](size_t i) const { return m_blocks[i / kBlock][i % kBlock]; }
    T& operator[](size_t i) { return m_blocks[i / kBlock][i % kBlock]; }
    void clear()
    {
        m_blocks.clear();
        m_size = 0;
    }

private:
    std::vector<std::unique_ptr<T[]>> m_blocks;
    size_t m_size = 0;
};

// Bytes kept in blocks of about kBlock bytes: each append is contiguous and stays where it is put. An append
// larger than a block gets a block of its own.
class ByteBlocks {
public:
    static constexpr size_t kBlock = 256 << 10;
    // Room for `n` bytes at an 8-byte boundary, to be filled by the caller.
    char* allocate(size_t n)
    {
        m_used = (m_used + 7) & ~size_t(7);
        if (m_blocks.empty() || n > m_room - std::min(m_used, m_room)) {
            m_room = std::max(n, kBlock);
            m_blocks.push_back(std::make_unique_for_overwrite<char[]>(m_room));
            m_used = 0;
        }
        char* p = m_blocks.back().get() + m_used;
        m_used += n;
        return p;
    }

private:
    std::vector<std::unique_ptr<char[]>> m_blocks;
    size_t m_used = 0; // in the last block
    size_t m_room = 0; // the last block's size
};

} // namespace sl
