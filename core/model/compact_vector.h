#pragma once
// A vector in 8 bytes, for an entry's attributes and parts: both are empty for nearly every entry of a
// large checkpoint (a safetensors tensor has neither), and std::vector takes 24 bytes each. Size, capacity
// and elements share one heap block, so a non-empty list costs the same one allocation std::vector's does.
//
// The subset of std::vector the model uses: iteration, indexing, push/emplace at the end, erase, insert of a
// range, reserve, clear; copies are deep, moves steal the block.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace sl {

template <typename T> class CompactVector {
public:
    using value_type = T;
    using iterator = T*;
    using const_iterator = const T*;
    using size_type = size_t;
    using reference = T&;
    using const_reference = const T&;

    CompactVector() = default;
    CompactVector(std::initializer_list<T> init)
    {
        reserve(init.size());
        for (const T& v : init)
            push_back(v);
    }
    CompactVector(const CompactVector& other)
    {
        reserve(other.size());
        for (const T& v : other)
            push_back(v);
    }
    CompactVector(CompactVector&& other) noexcept
        : m_block(std::exchange(other.m_block, nullptr))
    {
    }
    ~CompactVector() { release(); }
    CompactVector& operator=(const CompactVector& other)
    {
        if (this != &other) {
            CompactVector copy(other);
            swap(copy);
        }
        return *this;
    }
    CompactVector& operator=(CompactVector&& other) noexcept
    {
        if (this != &other) {
            release();
            m_block = std::exchange(other.m_block, nullptr);
        }
        return *this;
    }
    CompactVector& operator=(std::initializer_list<T> init)
    {
        CompactVector fresh(init);
        swap(fresh);
        return *this;
    }
    void swap(CompactVector& other) noexcept { std::swap(m_block, other.m_block); }

    size_t size() const { return m_block ? m_block->size : 0; }
    size_t capacity() const { return m_block ? m_block->capacity : 0; }
    bool empty() const { return size() == 0; }
    T* data() { return m_block ? elements(m_block) : nullptr; }
    const T* data() const { return m_block ? elements(m_block) : nullptr; }
    iterator begin() { return data(); }
    iterator end() { return data() + size(); }
    const_iterator begin() const { return data(); }
    const_iterator end() const { return data() + size(); }
    T& operator[](size_t i) { return data()[i]; }
    const T& operator[](size_t i) const { return data()[i]; }
    T& at(size_t i)
    {
        if (i >= size())
            throw std::out_of_range("CompactVector::at");
        return data()[i];
    }
    const T& at(size_t i) const { return const_cast<CompactVector*>(this)->at(i); }
    T& front() { return data()[0]; }
    const T& front() const { return data()[0]; }
    T& back() { return data()[size() - 1]; }
    const T& back() const { return data()[size() - 1]; }

    void reserve(size_t n)
    {
        if (n > capacity())
            regrow(n, nullptr);
    }
    template <typename... Args> T& emplace_back(Args&&... args)
    {
        if (size() == capacity()) {
            // The new element is built first: args may refer to an element that the move below relocates.
            regrow(std::max<size_t>(1, capacity() * 2), [&](T* at) { ::new (static_cast<void*>(at)) T(std::forward<Args>(args)...); });
            return back();
        }
        T* at = data() + size();
        ::new (static_cast<void*>(at)) T(std::forward<Args>(args)...);
        ++m_block->size;
        return *at;
    }
    void push_back(const T& v) { emplace_back(v); }
    void push_back(T&& v) { emplace_back(std::move(v)); }
    void pop_back()
    {
        back().~T();
        --m_block->size;
    }
    void clear()
    {
        if (!m_block)
            return;
        std::destroy_n(data(), size());
        m_block->size = 0;
    }
    iterator erase(const_iterator first, const_iterator last)
    {
        T* f = const_cast<T*>(first);
        T* l = const_cast<T*>(last);
        if (f == l)
            return f;
        T* newEnd = std::move(l, end(), f);
        std::destroy(newEnd, end());
        m_block->size = static_cast<uint32_t>(newEnd - data());
        return f;
    }
    iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
    template <typename It> iterator insert(const_iterator pos, It first, It last)
    {
        const size_t at = static_cast<size_t>(pos - begin());
        CompactVector out;
        out.reserve(size() + static_cast<size_t>(std::distance(first, last)));
        for (size_t i = 0; i < at; ++i)
            out.push_back(std::move((*this)[i]));
        for (; first != last; ++first)
            out.push_back(*first);
        for (size_t i = at; i < size(); ++i)
            out.push_back(std::move((*this)[i]));
        swap(out);
        return begin() + at;
    }

    friend bool operator==(const CompactVector& a, const CompactVector& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

private:
    struct Block {
        uint32_t size;
        uint32_t capacity;
    };
    // Where the elements start in a block (a function: T may still be incomplete where the class is used,
    // as Entry is inside Entry).
    static constexpr size_t offset() { return (sizeof(Block) + alignof(T) - 1) / alignof(T) * alignof(T); }
    static T* elements(Block* b) { return std::launder(reinterpret_cast<T*>(reinterpret_cast<char*>(b) + offset())); }
    static const T* elements(const Block* b)
    {
        return std::launder(reinterpret_cast<const T*>(reinterpret_cast<const char*>(b) + offset()));
    }

    // A block for `n` elements, the current ones moved in; `place` (when given) builds one more at the end.
    template <typename Place> void regrow(size_t n, Place place)
    {
        if (n > UINT32_MAX)
            throw std::length_error("CompactVector: too many elements");
        static_assert(alignof(T) <= alignof(std::max_align_t));
        auto* block = static_cast<Block*>(::operator new(offset() + n * sizeof(T)));
        block->capacity = static_cast<uint32_t>(n);
        block->size = static_cast<uint32_t>(size());
        T* to = elements(block);
        if constexpr (!std::is_same_v<Place, std::nullptr_t>) {
            try {
                place(to + size());
            } catch (...) {
                ::operator delete(block);
                throw;
            }
            ++block->size;
        }
        std::uninitialized_move_n(data(), size(), to);
        release();
        m_block = block;
    }
    void release()
    {
        if (!m_block)
            return;
        std::destroy_n(data(), size());
        ::operator delete(m_block);
        m_block = nullptr;
    }

    Block* m_block = nullptr;
};

// std::erase_if for a CompactVector.
template <typename T, typename Pred> size_t erase_if(CompactVector<T>& v, Pred pred)
{
    const auto newEnd = std::remove_if(v.begin(), v.end(), pred);
    const size_t removed = static_cast<size_t>(v.end() - newEnd);
    v.erase(newEnd, v.end());
    return removed;
}

} // namespace sl
