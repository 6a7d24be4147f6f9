#pragma once
// JSON's whitespace (RFC 8259: space, tab, line feed, carriage return), for every reader that skips it by
// hand before or between tokens: the loader's sniffing, the safetensors header scanner and its reader.

namespace sl {

inline bool isJsonSpace(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

} // namespace sl
