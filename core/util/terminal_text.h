#pragma once
// Text from a checkpoint or rule file (tensor names, storage keys, paths, messages) on its way to a person:
// tables, text and Markdown reports, suggestion comments, error lines. A name can hold ESC ("\x1b[2J"
// clears the screen, "\x1b[1A\x1b[2K" rewrites the line above), other C0 controls, DEL or C1 controls
// (U+009B is CSI to terminals that obey C1), so each is shown escaped the way Python's repr() shows it:
//   \t \n \r for those three, \xNN for every other C0 control, DEL and C1 control (U+0080..U+009F);
//   \xNN for each byte that is not part of valid UTF-8 (an 8-bit terminal would read 0x9B as CSI).
// Everything else, valid UTF-8 included, is kept as it is; backslashes are not doubled, so the shown form
// is for reading, not for reversing. Newlines a table or report writes itself are its own, raw.

#include "util/utf8.h"

#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>

namespace sl {

// Where the next character that needs escaping starts at or after `from` (text.size() when none), and
// through `length` how many bytes it takes: 1, or 2 for a C1 control.
inline size_t nextTerminalUnsafe(std::string_view text, size_t from, size_t& length)
{
    for (size_t i = from + printableAsciiPrefix(text.substr(from)); i < text.size();) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c >= 0x20 && c < 0x7F) {
            ++i;
            continue;
        }
        const size_t n = c < 0x80 ? 1 : utf8SequenceLength(text, i);
        if (n > 1 && !(c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0)) {
            i += n; // printable beyond ASCII
            continue;
        }
        length = n == 2 ? 2 : 1; // a C1 control, or one C0/DEL byte or one byte that is not UTF-8
        return i;
    }
    length = 0;
    return text.size();
}

inline bool isTerminalSafe(std::string_view text)
{
    size_t length = 0;
    return nextTerminalUnsafe(text, 0, length) == text.size();
}

// The escape of one byte (a C1 control's code point is its second byte) at `out`; returns its end.
inline char* writeTerminalEscape(char* out, unsigned char c)
{
    static constexpr char kHex[] = "0123456789abcdef";
    *out++ = '\\';
    switch (c) {
    case '\t': *out++ = 't'; break;
    case '\n': *out++ = 'n'; break;
    case '\r': *out++ = 'r'; break;
    default:
        *out++ = 'x';
        *out++ = kHex[c >> 4];
        *out++ = kHex[c & 15];
    }
    return out;
}

// Walks `text` as terminalText shows it: keep(run) for each run shown as it is, escape(byte) for each
// character shown escaped (a C1 control by its second byte, its code point).
template <typename Keep, typename Escape> void walkTerminalText(std::string_view text, Keep&& keep, Escape&& escape)
{
    size_t run = 0; // start of the pending run that needs nothing
    size_t length = 0;
    for (size_t i = nextTerminalUnsafe(text, 0, length); i < text.size(); i = nextTerminalUnsafe(text, run, length)) {
        keep(text.substr(run, i - run));
        escape(static_cast<unsigned char>(text[i + length - 1]));
        run = i + length;
    }
    keep(text.substr(run));
}

inline void appendTerminalText(std::string& out, std::string_view text)
{
    walkTerminalText(
        text, [&](std::string_view kept) { out.append(kept); },
        [&](unsigned char c) {
            char escaped[4];
            out.append(escaped, writeTerminalEscape(escaped, c));
        });
}

// At most the bytes terminalText(text) takes for text.size() bytes: an escape is at most 4 bytes for 1.
constexpr size_t kTerminalTextGrowth = 4;

// `text` copied to `out`; returns its end. (memcpy is not given an empty view's null pointer.)
inline char* copyBytes(char* out, std::string_view text)
{
    if (!text.empty())
        std::memcpy(out, text.data(), text.size());
    return out + text.size();
}

// terminalText(text) written at `out`, which has room for kTerminalTextGrowth * text.size() bytes; returns
// its end. For writers that lay a line out in place (the ls table's rows).
inline char* writeTerminalText(char* out, std::string_view text)
{
    walkTerminalText(
        text, [&](std::string_view kept) { out = copyBytes(out, kept); },
        [&](unsigned char c) { out = writeTerminalEscape(out, c); });
    return out;
}

inline std::string terminalText(std::string_view text)
{
    std::string out;
    out.reserve(text.size());
    appendTerminalText(out, text);
    return out;
}

// The columns terminalText(text) takes on a terminal: one per code point (wide CJK characters are not told
// apart), so table columns line up whatever a name holds.
inline size_t terminalColumns(std::string_view text)
{
    auto codePoints = [](std::string_view s) {
        size_t n = 0;
        for (unsigned char c : s)
            n += (c & 0xC0) != 0x80;
        return n;
    };
    if (printableAsciiPrefix(text) == text.size())
        return text.size();
    return isTerminalSafe(text) ? codePoints(text) : codePoints(terminalText(text));
}

} // namespace sl
