#pragma once
// Strides in 8 bytes. Every entry (and every DCP chunk) has a stride list, but only torch.save files and
// per-rank pieces fill one, and nearly all of those are small: up to three strides that fit in 60, 30 or 20
// bits each are packed into the word itself, anything else takes one heap block. Dims keeps four values
// inline in 40 bytes; here that was a fifth of an Entry, paid by safetensors entries that never have strides
// (90,427 of them for a DeepSeek-V3 index, and two lists per 555,987 chunks of a 256-rank DCP save).
//
// Reads as a list of int64 (size, operator[], iteration, conversion to Dims); writes replace the whole list.

#include "dims.h"

#include <compare>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <type_traits>

namespace sl {

class CompactDims {
public:
    CompactDims() = default;
    CompactDims(std::initializer_list<int64_t> values) { set(values.begin(), values.size()); }
    CompactDims(const Dims& d) { set(d.begin(), d.size()); } // implicit: `strides = someDims` works
    CompactDims(const CompactDims& other) { copyFrom(other); }
    CompactDims(CompactDims&& other) noexcept
        : m_bits(other.m_bits)
    {
        other.m_bits = 0;
    }
    ~CompactDims() { release(); }
    CompactDims& operator=(const CompactDims& other)
    {
        if (this != &other) {
            release();
            copyFrom(other);
        }
        return *this;
    }
    CompactDims& operator=(CompactDims&& other) noexcept
    {
        if (this != &other) {
            release();
            m_bits = other.m_bits;
            other.m_bits = 0;
        }
        return *this;
    }
    CompactDims& operator=(std::initializer_list<int64_t> values)
    {
        release();
        set(values.begin(), values.size());
        return *this;
    }
    template <typename It> void assign(It first, It last)
    {
        if constexpr (std::contiguous_iterator<It> && std::is_same_v<std::iter_value_t<It>, int64_t>) {
            // Straight from the caller's array (a tensor's shape in the graph): every listed entry comes here.
            // The array cannot be this list's own block, which nothing outside it sees.
            release();
            set(std::to_address(first), static_cast<size_t>(last - first));
        } else {
            const Dims d(first, last);
            release();
            set(d.begin(), d.size());
        }
    }
    void push_back(int64_t v)
    {
        Dims d = dims();
        d.push_back(v);
        release();
        set(d.begin(), d.size());
    }
    void clear() { release(); }

    bool empty() const { return m_bits == 0; }
    size_t size() const
    {
        if (m_bits & 1)
            return static_cast<size_t>((m_bits >> 1) & 3);
        return m_bits ? static_cast<size_t>(heap()[0]) : 0;
    }
    int64_t operator[](size_t i) const
    {
        if (!(m_bits & 1))
            return heap()[1 + i];
        const unsigned width = widthFor(size());
        return static_cast<int64_t>((m_bits >> (3 + width * i)) & ((uint64_t(1) << width) - 1));
    }
    Dims dims() const
    {
        Dims d;
        d.resize(size());
        for (size_t i = 0; i < d.size(); ++i)
            d[i] = (*this)[i];
        return d;
    }
    operator Dims() const { return dims(); }

    class const_iterator {
    public:
        using iterator_category = std::forward_iterator_tag;
        using value_type = int64_t;
        using difference_type = std::ptrdiff_t;
        using pointer = void;
        using reference = int64_t;
        const_iterator() = default;
        const_iterator(const CompactDims* d, size_t i)
            : m_d(d)
            , m_i(i)
        {
        }
        int64_t operator*() const { return (*m_d)[m_i]; }
        const_iterator& operator++()
        {
            ++m_i;
            return *this;
        }
        const_iterator operator++(int)
        {
            const_iterator was = *this;
            ++m_i;
            return was;
        }
        friend bool operator==(const const_iterator& a, const const_iterator& b) { return a.m_i == b.m_i; }

    private:
        const CompactDims* m_d = nullptr;
        size_t m_i = 0;
    };
    const_iterator begin() const { return { this, 0 }; }
    const_iterator end() const { return { this, size() }; }

    friend bool operator==(const CompactDims& a, const CompactDims& b)
    {
        if (a.size() != b.size())
            return false;
        for (size_t i = 0; i < a.size(); ++i)
            if (a[i] != b[i])
                return false;
        return true;
    }
    friend std::strong_ordering operator<=>(const CompactDims& a, const CompactDims& b)
    {
        for (size_t i = 0; i < a.size() && i < b.size(); ++i)
            if (a[i] != b[i])
                return a[i] <=> b[i];
        return a.size() <=> b.size();
    }

private:
    // Bits per value when packed: one value in 60 bits, two in 30, three in 20.
    static unsigned widthFor(size_t n) { return n == 1 ? 60 : n == 2 ? 30 : 20; }
    const int64_t* heap() const { return reinterpret_cast<const int64_t*>(m_bits); }

    void set(const int64_t* values, size_t n)
    {
        m_bits = 0;
        if (n == 0)
            return;
        if (n <= 3) {
            const unsigned width = widthFor(n);
            bool fits = true;
            for (size_t i = 0; i < n; ++i)
                fits = fits && values[i] >= 0 && static_cast<uint64_t>(values[i]) < (uint64_t(1) << width);
            if (fits) {
                uint64_t bits = 1 | (static_cast<uint64_t>(n) << 1);
                for (size_t i = 0; i < n; ++i)
                    bits |= static_cast<uint64_t>(values[i]) << (3 + width * i);
                m_bits = bits;
                return;
            }
        }
        auto* block = new int64_t[1 + n]; // an even address: bit 0 tells it from packed values
        block[0] = static_cast<int64_t>(n);
        std::memcpy(block + 1, values, n * sizeof(int64_t));
        m_bits = reinterpret_cast<uint64_t>(block);
    }
    void copyFrom(const CompactDims& other)
    {
        if (other.m_bits & 1 || other.m_bits == 0)
            m_bits = other.m_bits;
        else
            set(other.heap() + 1, other.size());
    }
    void release()
    {
        if (m_bits && !(m_bits & 1))
            delete[] reinterpret_cast<int64_t*>(m_bits);
        m_bits = 0;
    }

    uint64_t m_bits = 0; // 0: empty; odd: packed values, bits 1-2 their count; even: a heap block [n, values...]
};

} // namespace sl
