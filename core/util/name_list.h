#pragma once
// Names in one line of a finding: the first `most`, then how many there are in all.

#include <string>
#include <vector>

namespace sl {

inline std::string listNames(const std::vector<std::string>& names, size_t most = 8)
{
    std::string list;
    for (size_t i = 0; i < names.size() && i < most; ++i)
        list += (i ? ", " : "") + names[i];
    if (names.size() > most)
        list += ", ... (" + std::to_string(names.size()) + " in all)";
    return list;
}

} // namespace sl
