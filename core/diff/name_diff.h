#pragma once
// A word diff of two dotted names: which segments of one are not in the other, in order (the longest
// common subsequence of segments). "_orig_mod.layers.0.attn.weight" against "layers.0.attn.weight" marks
// "_orig_mod."; "layers.0.attention.wq.weight" against "model.layers.0.self_attn.q_proj.weight" marks
// "attention.wq." on one side and "model." and "self_attn.q_proj." on the other. A folded range such as
// "{0..31}" is one segment.

#include <cstddef>
#include <string_view>
#include <vector>

namespace sl {

// Calls f with each dotted segment of `name`, in order; a folded range ("{0..31}", "{0,2..5}") is one
// segment. Shared by the word diff and the window's tree, which split names the same way.
template <typename F>
void forEachNameSegment(std::string_view name, F&& f)
{
    size_t start = 0;
    int depth = 0;
    for (size_t i = 0; i < name.size(); ++i) {
        const char c = name[i];
        if (c == '{')
            ++depth;
        else if (c == '}' && depth > 0)
            --depth;
        else if (c == '.' && depth == 0) {
            f(name.substr(start, i - start));
            start = i + 1;
        }
    }
    f(name.substr(start));
}

struct NameSpan {
    size_t start = 0; // byte offset in the name
    size_t length = 0;
    bool operator==(const NameSpan&) const = default;
};

// The spans of `name` whose segments `other` does not share, each with the dot that joins it to the next
// segment (or the one before, for a last segment); adjacent spans merged.
std::vector<NameSpan> differingSegments(std::string_view name, std::string_view other);

} // namespace sl
