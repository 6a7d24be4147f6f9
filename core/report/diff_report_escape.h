#pragma once
// Private to the diff report renderers: how untrusted text (names, paths, explanations, notes) is written
// into each format, so the escaping diff_report.h promises is reviewed in one place. JSON strings are
// escaped by JsonWriter and, on the row path, by the JSON renderer's RawWriter.

#include "util/terminal_text.h"
#include "util/utf8.h"

#include <string>
#include <string_view>

namespace sl::diff_report {

// Calls fn with a valid UTF-8 view of s (a cleaned copy only when s is not valid already).
template <typename Fn> void withValidUtf8(std::string_view s, Fn&& fn)
{
    if (isValidUtf8(s)) {
        fn(s);
    } else {
        const std::string clean = sanitizeUtf8(s);
        fn(std::string_view(clean));
    }
}

// Calls fn with the terminal-safe form of s (util/terminal_text.h; a copy only when s needs escaping).
template <typename Fn> void withTerminalText(std::string_view s, Fn&& fn)
{
    if (isTerminalSafe(s)) {
        fn(s);
    } else {
        const std::string shown = terminalText(s);
        fn(std::string_view(shown));
    }
}

// XML and HTML text or attribute values. Names keep no raw whitespace controls (they become pictures);
// free text (`keepLineBreaks`) keeps tabs and line breaks, as character references inside attributes so
// attribute-value normalisation keeps them too.
void appendXml(std::string& out, std::string_view raw, bool attribute, bool keepLineBreaks = false);
inline void appendXmlText(std::string& out, std::string_view raw) { appendXml(out, raw, false); }
inline void appendXmlAttr(std::string& out, std::string_view raw) { appendXml(out, raw, true); }

// A Markdown code span that shows `raw` literally inside a GFM table: the fence is one backtick longer
// than any run inside, pipes are escaped (GFM splits cells before it parses code spans).
void appendMarkdownCode(std::string& out, std::string_view raw);

// Markdown prose (explanations, messages): backslash-escape what could start markup, HTML or a cell break.
// An underscore between letters or digits cannot open or close emphasis, so `load_state_dict` stays as is.
void appendMarkdownText(std::string& out, std::string_view raw);

// One RFC 4180 cell. A leading = + - @ would make a spreadsheet evaluate the cell as a formula, so such a
// cell gets a leading apostrophe (the usual OWASP mitigation). CSV reports are printed to terminals as
// often as they are opened in spreadsheets: control characters are shown escaped, as in the text report.
void appendCsvCell(std::string& out, std::string_view raw);

} // namespace sl::diff_report
