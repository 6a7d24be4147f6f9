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

struct NameSpan {
    size_t start = 0; // byte offset in the name
    size_t length = 0;
    bool operator==(const NameSpan&) const = default;
};

// The spans of `name` whose segments `other` does not share, each with the dot that joins it to the next
// segment (or the one before, for a last segment); adjacent spans merged.
std::vector<NameSpan> differingSegments(std::string_view name, std::string_view other);

} // namespace sl
