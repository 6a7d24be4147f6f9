// The escaping of untrusted text for the diff report's XML/HTML, Markdown and CSV (diff_report_escape.h).

#include "diff_report_escape.h"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace sl::diff_report {

namespace {

// U+2400 + c for C0 controls, U+2421 for DEL: visible, and harmless to terminals and XML alike.
void appendControlPicture(std::string& out, unsigned char c)
{
    if (c == 0x7f) {
        out += "\xE2\x90\xA1";
        return;
    }
    out += '\xE2';
    out += '\x90';
    out += static_cast<char>(0x80 + c);
}

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// Whether the valid UTF-8 sequence at s[i] is a C1 control (U+0080..U+009F) or U+FFFE/U+FFFF: legal UTF-8,
// but a parse error in HTML, obeyed by some terminals (C1) or not allowed in XML 1.0 (the noncharacters).
// Returns its length, or 0.
size_t unwantedSequence(std::string_view s, size_t i)
{
    const auto c0 = static_cast<unsigned char>(s[i]);
    if (c0 == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) <= 0x9F)
        return 2;
    if (c0 == 0xEF && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0xBF
        && (static_cast<unsigned char>(s[i + 2]) == 0xBE || static_cast<unsigned char>(s[i + 2]) == 0xBF))
        return 3;
    return 0;
}

} // namespace

void appendXml(std::string& out, std::string_view raw, bool attribute, bool keepLineBreaks)
{
    withValidUtf8(raw, [&](std::string_view s) {
        size_t run = 0; // start of the pending run of bytes that need nothing
        auto flush = [&](size_t i) { out.append(s.substr(run, i - run)); };
        for (size_t i = 0; i < s.size(); ++i) {
            const auto c = static_cast<unsigned char>(s[i]);
            const char* entity = nullptr;
            switch (c) {
            case '&': entity = "&amp;"; break;
            case '<': entity = "&lt;"; break;
            case '>': entity = "&gt;"; break;
            case '"': entity = "&quot;"; break;
            case '\'': entity = "&#39;"; break;
            case '\t': entity = "&#9;"; break;
            case '\n': entity = "&#10;"; break;
            case '\r': entity = "&#13;"; break;
            default: break;
            }
            const bool whitespace = c == '\t' || c == '\n' || c == '\r';
            if (whitespace && !keepLineBreaks) {
                entity = nullptr; // a name: show it
            } else if (whitespace && !attribute) {
                continue; // literal in text
            }
            if (entity) {
                flush(i);
                out += entity;
                run = i + 1;
            } else if (c < 0x20 || c == 0x7f) {
                flush(i);
                appendControlPicture(out, c);
                run = i + 1;
            } else if (size_t n = c >= 0xC2 ? unwantedSequence(s, i) : 0) {
                flush(i);
                out += kReplacementChar;
                i += n - 1;
                run = i + 1;
            }
        }
        flush(s.size());
    });
}

void appendMarkdownCode(std::string& out, std::string_view raw)
{
    const std::string visible = terminalText(raw);
    size_t longest = 0;
    for (size_t i = 0, run = 0; i < visible.size(); ++i) {
        run = visible[i] == '`' ? run + 1 : 0;
        longest = std::max(longest, run);
    }
    const std::string fence(longest + 1, '`');
    // A code span strips one space at each end, and cannot start or end next to its fence's backticks.
    const bool pad = visible.empty() || visible.front() == '`' || visible.back() == '`' || (visible.front() == ' ' && visible.back() == ' ');
    out += fence;
    if (pad)
        out += ' ';
    for (char c : visible) {
        if (c == '|')
            out += '\\';
        out += c;
    }
    if (pad)
        out += ' ';
    out += fence;
}

void appendMarkdownText(std::string& out, std::string_view raw)
{
    const std::string visible = terminalText(raw);
    auto alnum = [&](size_t i) { return i < visible.size() && std::isalnum(static_cast<unsigned char>(visible[i])); };
    for (size_t i = 0; i < visible.size(); ++i) {
        const char c = visible[i];
        const bool inertUnderscore = c == '_' && i > 0 && alnum(i - 1) && alnum(i + 1);
        if (c != '\0' && !inertUnderscore && std::strchr("\\`*_[]<>|&~#!", c))
            out += '\\';
        out += c;
    }
}

void appendCsvCell(std::string& out, std::string_view raw)
{
    withTerminalText(raw, [&](std::string_view s) {
        const bool formula = !s.empty() && std::strchr("=+-@", s.front()) != nullptr;
        bool quote = false;
        for (char c : s)
            quote |= c == ',' || c == '"';
        if (quote)
            out += '"';
        if (formula)
            out += '\'';
        if (quote) {
            size_t run = 0;
            for (size_t i = s.find('"'); i != std::string_view::npos; i = s.find('"', i + 1)) {
                out.append(s.substr(run, i + 1 - run));
                out += '"';
                run = i + 1;
            }
            out.append(s.substr(run));
            out += '"';
        } else {
            out.append(s);
        }
    });
}

} // namespace sl::diff_report
