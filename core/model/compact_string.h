#pragma once
// A string in 8 bytes, for entry fields that are usually empty or short: a device ("cpu", "cuda:0"), a type
// name, a storage key ("0" .. "9999999"), an object's repr. Up to 7 bytes are kept inline; longer text takes
// one heap block. std::string takes 32 bytes, and an entry had four of them: a state dict holds hundreds of
// thousands of entries, and listing time follows the memory they touch (padding each entry with 96 bytes
// made a 90,427-tensor index 14% slower).
//
// It reads as a std::string_view. Construction from text is explicit, so comparisons with std::string
// are never ambiguous; assignment from text is not.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <utility>

namespace sl {

class CompactString {
public:
    CompactString() = default;
    explicit CompactString(std::string_view s) { set(s); }
    CompactString(const CompactString& other) { set(other.view()); }
    CompactString(CompactString&& other) noexcept
        : m_bits(std::exchange(other.m_bits, 0))
    {
    }
    ~CompactString() { release(); }

    CompactString& operator=(const CompactString& other)
    {
        if (this != &other)
            assign(other.view());
        return *this;
    }
    CompactString& operator=(CompactString&& other) noexcept
    {
        if (this != &other) {
            release();
            m_bits = std::exchange(other.m_bits, 0);
        }
        return *this;
    }
    CompactString& operator=(std::string_view s) { return assign(s); }

    std::string_view view() const
    {
        if (m_bits & 1)
            return { reinterpret_cast<const char*>(&m_bits) + 1, static_cast<size_t>((m_bits >> 1) & 7) };
        if (m_bits == 0)
            return {};
        const auto* block = reinterpret_cast<const Block*>(m_bits);
        return { block->text, block->size };
    }
    operator std::string_view() const { return view(); }
    std::string str() const { return std::string(view()); }
    bool empty() const { return m_bits == 0; }
    size_t size() const { return view().size(); }
    const char* data() const { return view().data(); }

    friend bool operator==(const CompactString& a, const CompactString& b) { return a.view() == b.view(); }
    friend bool operator==(const CompactString& a, std::string_view b) { return a.view() == b; }
    friend std::string operator+(std::string a, const CompactString& b) { return a.append(b.view()); }
    friend std::string operator+(const CompactString& a, std::string_view b) { return a.str().append(b); }
    friend std::string operator+(const char* a, const CompactString& b) { return std::string(a).append(b.view()); }

private:
    static_assert(std::endian::native == std::endian::little, "inline text sits in the upper bytes of m_bits");
    struct Block {
        size_t size;
        char text[1]; // size bytes, then a NUL
    };

    CompactString& assign(std::string_view s)
    {
        CompactString fresh(s); // s may point into this string
        release();
        m_bits = std::exchange(fresh.m_bits, 0);
        return *this;
    }
    void set(std::string_view s)
    {
        if (s.empty()) {
            m_bits = 0;
        } else if (s.size() <= 7) {
            // Bit 0 marks inline text (a heap block's address is even), bits 1-3 hold the length.
            uint64_t bits = 1 | (static_cast<uint64_t>(s.size()) << 1);
            std::memcpy(reinterpret_cast<char*>(&bits) + 1, s.data(), s.size());
            m_bits = bits;
        } else {
            auto* block = static_cast<Block*>(::operator new(offsetof(Block, text) + s.size() + 1));
            block->size = s.size();
            std::memcpy(block->text, s.data(), s.size());
            block->text[s.size()] = '\0';
            m_bits = reinterpret_cast<uint64_t>(block);
        }
    }
    void release()
    {
        if (m_bits != 0 && !(m_bits & 1))
            ::operator delete(reinterpret_cast<Block*>(m_bits));
        m_bits = 0;
    }

    uint64_t m_bits = 0; // 0: empty; odd: inline text; else a Block*
};

} // namespace sl
