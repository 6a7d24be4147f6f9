#pragma once
// Appends the value `build()` returns, constructed in its place in the vector: the conversion function's
// result initialises the element directly (C++17 copy elision, which GCC and Clang apply here), where
// emplace_back(build()) builds it aside and moves it in. For entries (216 bytes, a dozen members to move and
// then destroy) that move was 5% of reading a 100,000-tensor safetensors header.

#include <utility>
#include <vector>

namespace sl {

// `v`: a std::vector, or any container whose emplace_back constructs in place (CompactVector).
template <typename V, typename Build> typename V::value_type& emplaceBuilt(V& v, Build&& build)
{
    using T = typename V::value_type;
    struct Built {
        Build& build;
        operator T() const { return build(); }
    };
    return v.emplace_back(Built { build });
}

} // namespace sl
