#pragma once
// What every quantization scheme's grouping shares: limits, and the small name and text helpers its key
// patterns are matched with. Private to quant/ (grouper.h).

#include "quantized_tensors.h"

#include "io/open_files.h"
#include "util/error.h"
#include "util/name_index.h"
#include <simdjson.h>
#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace sl::quant::grouping {

constexpr size_t npos = SIZE_MAX;
constexpr size_t kMaxFindingsPerKind = 20;
constexpr size_t kMaxShardHeaders = 64; // shards whose __metadata__ is read for torchao's layout
constexpr uint64_t kMaxHeaderBytes = 100'000'000; // all shard headers read, together (one reader limit)
constexpr size_t kMaxParams = 16;
constexpr size_t kMaxParamChars = 160;

inline std::string_view lastComponent(std::string_view name)
{
    const size_t dot = name.rfind('.');
    return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

// "a.b.c" without ".c"; "c" without "c" is "".
inline std::string_view prefixOf(std::string_view name, std::string_view last)
{
    std::string_view p = name.substr(0, name.size() - last.size());
    if (!p.empty() && p.back() == '.')
        p.remove_suffix(1);
    return p;
}

// "prefix.key" ("key" when the prefix is empty), written into `out`.
inline void assignJoined(std::string& out, std::string_view prefix, std::string_view key)
{
    out.clear();
    out.reserve(prefix.size() + key.size() + 1);
    out += prefix;
    if (!prefix.empty())
        out += '.';
    out += key;
}

inline std::string join(std::string_view prefix, std::string_view key)
{
    std::string out;
    assignJoined(out, prefix, key);
    return out;
}

inline bool isFloat8(DType t)
{
    return t == DType::Float8_e4m3fn || t == DType::Float8_e5m2 || t == DType::Float8_e4m3fnuz
        || t == DType::Float8_e5m2fnuz;
}

// The suffix that names a block-FP8 weight's scale (DeepSeek-V3's `weight_scale_inv`).
inline constexpr std::string_view kScaleInvSuffix = "_scale_inv";

// A group the FP8 scheme formed: by fp8(), by the index reader's early pairs, or by an earlier run.
inline bool isFp8Group(const Entry& e)
{
    return e.kind == EntryKind::Group && e.quantization && e.quantization->scheme.starts_with("fp8.");
}

inline std::string shapeText(const Shape& s) { return shapeToString(s); }

inline std::string clip(std::string s)
{
    if (s.size() > kMaxParamChars) {
        s.resize(kMaxParamChars);
        s += "...";
    }
    return s;
}

inline int64_t ceilDiv(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; }

} // namespace sl::quant::grouping
