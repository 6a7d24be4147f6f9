#pragma once
// Keys that are plain decimal numbers ("0", "1", ... "76799"): torch names storages so, in order of first
// use, and their zip records data/0, data/1, ... Readers find such keys by position instead of by hash.

#include <cstddef>
#include <string_view>

namespace sl {

// The number `s` spells when it is written exactly as std::to_string would (no sign, no leading zero, at
// most 9 digits, so it fits anywhere): "12" -> 12; "012", "+1", "" and "1e3" are not.
inline bool decimalKey(std::string_view s, size_t& n)
{
    if (s.empty() || s.size() > 9 || (s[0] == '0' && s.size() > 1))
        return false;
    size_t v = 0;
    for (char c : s) {
        if (c < '0' || c > '9')
            return false;
        v = v * 10 + static_cast<size_t>(c - '0');
    }
    n = v;
    return true;
}

} // namespace sl
