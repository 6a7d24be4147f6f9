#pragma once
// Object keys read by simdjson On-Demand without a copy each: the index's 90,427 tensor names and a
// safetensors header's names stay views into the text they were read from.

#include <simdjson.h>

#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <string_view>

namespace sl {

// `n` bytes of room plus the zeroed padding simdjson reads past the text (without interpreting it).
inline std::unique_ptr<char[]> paddedJsonBuffer(size_t n)
{
    auto buffer = std::make_unique_for_overwrite<char[]>(n + simdjson::SIMDJSON_PADDING);
    std::memset(buffer.get() + n, 0, simdjson::SIMDJSON_PADDING);
    return buffer;
}

// The key of `field`, in `out`: a view into the text (which ends at `textEnd`) when it is written without
// escapes, else unescaped into `store`, whose elements never move. Stage 1 has checked that every string is
// closed, so the closing quote is found before `textEnd`.
inline simdjson::error_code jsonKey(
    simdjson::ondemand::field& field, const char* textEnd, std::deque<std::string>& store, std::string_view& out)
{
    const char* raw = field.key().raw();
    const auto* close = static_cast<const char*>(std::memchr(raw, '"', static_cast<size_t>(textEnd - raw)));
    if (!close)
        return simdjson::UNCLOSED_STRING;
    out = std::string_view(raw, static_cast<size_t>(close - raw));
    if (out.find('\\') == std::string_view::npos)
        return simdjson::SUCCESS;
    std::string_view unescaped;
    if (auto err = field.unescaped_key().get(unescaped))
        return err;
    out = store.emplace_back(unescaped);
    return simdjson::SUCCESS;
}

} // namespace sl
