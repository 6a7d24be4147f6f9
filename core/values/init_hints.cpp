#include "init_hints.h"

#include "diff/diff.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace sl::values {

std::vector<std::string> initHints(const Source& s, const std::vector<TensorStatsResult>& stats)
{
    std::vector<std::string> hints(stats.size());
    std::map<std::string, std::vector<size_t>> byTemplate; // result indices per folded template
    for (size_t i = 0; i < stats.size(); ++i) {
        const auto& r = stats[i];
        if (!r.stats || r.stats->numel == 0)
            continue;
        const TensorStats& t = *r.stats;
        if (t.finite == t.numel && t.zeros == t.numel)
            hints[i] = "all zeros";
        else if (t.finite == t.numel && t.min == 1 && t.max == 1)
            hints[i] = "all ones";
        if (t.std())
            byTemplate[foldIndices(s.entries[r.entry].name)].push_back(i);
    }
    for (const auto& [key, members] : byTemplate) {
        if (members.size() < 3 || key.find("{}") == std::string::npos)
            continue;
        std::vector<double> stds;
        for (size_t i : members)
            stds.push_back(*stats[i].stats->std());
        std::nth_element(stds.begin(), stds.begin() + static_cast<long>(stds.size() / 2), stds.end());
        const double median = stds[stds.size() / 2];
        if (median <= 0)
            continue;
        for (size_t i : members) {
            const double sd = *stats[i].stats->std();
            if (hints[i].empty() && (sd > 10 * median || sd < median / 10)) {
                char buf[160];
                std::snprintf(buf, sizeof buf, "std %.3g far from its peers' median %.3g (%s)", sd, median, key.c_str());
                hints[i] = buf;
            }
        }
    }
    return hints;
}

} // namespace sl::values
