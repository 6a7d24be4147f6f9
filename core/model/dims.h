#pragma once
// Shapes and strides: a vector of int64 that keeps up to four dimensions inline, in 40 bytes. Almost every
// tensor has at most four (a Conv3d weight's five take one heap block), and a state dict has one shape and
// one stride list per entry (and a DCP chunk three), so the heap allocations a std::vector costs here were a
// measurable part of listing a 100,000-entry checkpoint, and the size of this class is a large part of a
// 555,000-chunk listing's memory (five inline took 23 MB more there, 6 MB more for a 90,427-tensor index).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <stdexcept>

namespace sl {

class Dims {
public:
    using value_type = int64_t;
    using iterator = int64_t*;
    using const_iterator = const int64_t*;
    static constexpr size_t kInline = 4;

    Dims() = default;
    Dims(std::initializer_list<int64_t> init) { assign(init.begin(), init.end()); }
    template <typename It> Dims(It first, It last) { assign(first, last); }
    Dims(const Dims& other) { assign(other.begin(), other.end()); }
    Dims(Dims&& other) noexcept { moveFrom(other); }
    ~Dims() { release(); }
    Dims& operator=(const Dims& other)
    {
        if (this != &other)
            assign(other.begin(), other.end());
        return *this;
    }
    Dims& operator=(Dims&& other) noexcept
    {
        if (this != &other) {
            release();
            moveFrom(other);
        }
        return *this;
    }
    Dims& operator=(std::initializer_list<int64_t> init)
    {
        assign(init.begin(), init.end());
        return *this;
    }

    template <typename It> void assign(It first, It last)
    {
        const size_t n = static_cast<size_t>(std::distance(first, last));
        reserve(n);
        std::copy(first, last, data());
        m_size = static_cast<uint32_t>(n);
    }
    void push_back(int64_t v)
    {
        if (m_size == capacity())
            reserve(size_t(m_size) * 2);
        data()[m_size++] = v;
    }
    void pop_back() { --m_size; }
    void clear() { m_size = 0; }
    void resize(size_t n, int64_t fill = 0)
    {
        reserve(n);
        for (size_t i = m_size; i < n; ++i)
            data()[i] = fill;
        m_size = static_cast<uint32_t>(n);
    }
    void reserve(size_t n)
    {
        if (n <= capacity())
            return;
        if (n > UINT32_MAX)
            throw std::length_error("Dims: too many dimensions");
        auto* grown = new int64_t[n];
        std::copy(begin(), end(), grown);
        release();
        m_heap = grown;
        m_capacity = static_cast<uint32_t>(n);
    }

    size_t size() const { return m_size; }
    bool empty() const { return m_size == 0; }
    int64_t* data() { return m_capacity ? m_heap : m_inline; }
    const int64_t* data() const { return m_capacity ? m_heap : m_inline; }
    int64_t& operator[](size_t i) { return data()[i]; }
    int64_t operator[](size_t i) const { return data()[i]; }
    int64_t& back() { return data()[m_size - 1]; }
    int64_t back() const { return data()[m_size - 1]; }
    int64_t& front() { return data()[0]; }
    int64_t front() const { return data()[0]; }
    iterator begin() { return data(); }
    iterator end() { return data() + m_size; }
    const_iterator begin() const { return data(); }
    const_iterator end() const { return data() + m_size; }

    friend bool operator==(const Dims& a, const Dims& b)
    {
        return a.m_size == b.m_size && std::equal(a.begin(), a.end(), b.begin());
    }
    friend bool operator<(const Dims& a, const Dims& b)
    {
        return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
    }

private:
    size_t capacity() const { return m_capacity ? m_capacity : kInline; }
    void release() noexcept
    {
        if (m_capacity)
            delete[] m_heap;
        m_capacity = 0;
    }
    void moveFrom(Dims& other) noexcept
    {
        m_size = other.m_size;
        m_capacity = other.m_capacity;
        std::memcpy(m_inline, other.m_inline, sizeof m_inline); // the heap pointer too, when there is one
        other.m_size = 0;
        other.m_capacity = 0;
    }

    // Inline values, or (m_capacity > 0) a heap array of m_capacity values.
    union {
        int64_t m_inline[kInline] = {};
        int64_t* m_heap;
    };
    uint32_t m_size = 0;
    uint32_t m_capacity = 0; // 0: inline
};

} // namespace sl
