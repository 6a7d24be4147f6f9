#pragma once
// An index into one kind of array, or none (-1). Each kind is its own type, so an index into A's entries
// cannot be used for B's entries, the rules or the rows by mistake: a diff row holds seven indices into six
// kinds of array (diff/diff.h), and they used to be seven int32_t.

#include <compare>
#include <cstddef>
#include <cstdint>

namespace sl {

template <typename Kind>
class TypedIndex {
public:
    constexpr TypedIndex() = default;
    constexpr explicit TypedIndex(size_t i)
        : m_i(static_cast<int32_t>(i))
    {
    }
    constexpr bool valid() const { return m_i >= 0; }
    constexpr size_t get() const { return static_cast<size_t>(m_i); } // only when valid()
    constexpr int64_t number() const { return m_i; } // as written to reports: -1 when none
    friend constexpr bool operator==(TypedIndex, TypedIndex) = default;
    friend constexpr auto operator<=>(TypedIndex, TypedIndex) = default;

private:
    int32_t m_i = -1; // 32 bits: a diff holds millions of rows, each with seven indices
};

} // namespace sl
