#include "rules/rule_import.h"

#include "io/file_trust.h"
#include "rules/rule_engine.h"
#include "rules/rule_inverse.h"
#include "rules/rule_io.h"
#include "util/error.h"
#include "util/utf8.h"

#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <unistd.h>
#include <unordered_map>
#include <vector>

namespace sl {

namespace {

constexpr size_t kMaxFileSize = kMaxRuleFileBytes;

std::string lineText(size_t line) { return "line " + std::to_string(line) + ": "; }

// A name inside an error message: quoted, one line, long ones elided.
std::string quotedName(std::string_view name)
{
    return "'" + oneLineMessage(std::string(name), 200) + "'";
}

std::string_view withoutBom(std::string_view text)
{
    return text.substr(0, 3) == "\xEF\xBB\xBF" ? text.substr(3) : text;
}

// Offset of the first byte that is not part of valid UTF-8, or npos.
size_t firstBadUtf8(std::string_view s)
{
    for (size_t i = 0; i < s.size();) {
        size_t n = utf8SequenceLength(s, i);
        if (!n)
            return i;
        i += n;
    }
    return std::string_view::npos;
}

size_t lineAt(std::string_view text, size_t offset)
{
    return 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(std::min(offset, text.size())), '\n'));
}

// One mapping entry as read, before it becomes a rule.
struct Entry {
    std::string pattern;
    std::string replacement;
    size_t line = 0;
    std::vector<std::string> comments;
};

// ---------------------------------------------------------------------------------------------------
// Python dict literal: a tokenizer for the few token kinds a literal dict of strings has.

class PythonDictReader {
public:
    PythonDictReader(std::string_view text, const std::string& name)
        : m_name(name)
    {
        // Python reads source with universal newlines: "\r\n" and a lone "\r" are both "\n", inside
        // triple-quoted strings too.
        m_text.reserve(text.size());
        for (size_t i = 0; i < text.size(); ++i) {
            if (text[i] == '\r') {
                m_text += '\n';
                if (i + 1 < text.size() && text[i + 1] == '\n')
                    ++i;
            } else {
                m_text += text[i];
            }
        }
    }

    std::vector<Entry> read(std::vector<std::string>& headerComments)
    {
        if (size_t bad = firstBadUtf8(m_text); bad != std::string::npos)
            fail(lineAt(m_text, bad), "the text is not UTF-8 (Python source must be)");
        if (size_t nul = m_text.find('\0'); nul != std::string::npos)
            fail(lineAt(m_text, nul), "a NUL byte (Python source cannot hold one)");
        std::vector<std::string> comments;
        skipBlank(&comments);
        headerComments = std::move(comments);
        comments.clear();
        skipAssignment();
        skipBlank(nullptr);
        if (peek() != '{')
            fail(m_line, "expected a dict literal '{ \"pattern\": \"replacement\", ... }'" + found());
        ++m_pos;
        std::vector<Entry> entries;
        for (;;) {
            skipBlank(&comments);
            if (peek() == '}') {
                ++m_pos;
                break;
            }
            Entry e;
            e.line = m_line;
            e.comments = std::move(comments);
            comments.clear();
            e.pattern = readStrings("a pattern (a string literal)");
            skipBlank(nullptr);
            if (peek() != ':')
                fail(m_line, "expected ':' after the pattern" + found());
            ++m_pos;
            skipBlank(nullptr);
            e.replacement = readStrings("a replacement (a string literal)");
            skipBlank(nullptr);
            const bool more = peek() == ',';
            if (more) {
                ++m_pos;
                skipTrailingComment(e.comments); // `'a': 'b',  # why`: about this entry, not the next
            }
            entries.push_back(std::move(e));
            if (more)
                continue;
            if (peek() == '}') {
                ++m_pos;
                break;
            }
            fail(m_line, "expected ',' or '}' after an entry" + found());
        }
        skipBlank(nullptr);
        if (peek() == ';') {
            ++m_pos;
            skipBlank(nullptr);
        }
        if (m_pos < m_text.size())
            fail(m_line, "unexpected text after the dict" + found());
        return entries;
    }

private:
    [[noreturn]] void fail(size_t line, const std::string& message) const { throw LoadError(m_name, lineText(line) + message); }

    char peek(size_t ahead = 0) const { return m_pos + ahead < m_text.size() ? m_text[m_pos + ahead] : '\0'; }
    bool atEnd() const { return m_pos >= m_text.size(); }

    std::string found() const
    {
        if (atEnd())
            return " (found the end of the text)";
        size_t n = utf8SequenceLength(m_text, m_pos);
        return " (found " + quotedName(std::string_view(m_text).substr(m_pos, std::max<size_t>(n, 1))) + ")";
    }

    // Spaces, line breaks, comments (collected when `comments` is given) and backslash line joins.
    void skipBlank(std::vector<std::string>* comments)
    {
        while (!atEnd()) {
            char c = m_text[m_pos];
            if (c == ' ' || c == '\t' || c == '\f') {
                ++m_pos;
            } else if (c == '\n') {
                ++m_line;
                ++m_pos;
            } else if (c == '\\' && peek(1) == '\n') {
                m_pos += 2;
                ++m_line;
            } else if (c == '#') {
                std::vector<std::string> ignored;
                skipCommentLine(comments ? *comments : ignored);
            } else {
                break;
            }
        }
    }

    // A comment on the rest of the current line.
    void skipTrailingComment(std::vector<std::string>& comments)
    {
        size_t p = m_pos;
        while (p < m_text.size() && (m_text[p] == ' ' || m_text[p] == '\t'))
            ++p;
        if (p < m_text.size() && m_text[p] == '#') {
            m_pos = p;
            std::vector<std::string> one;
            skipCommentLine(one);
            comments.insert(comments.end(), one.begin(), one.end());
        }
    }

    void skipCommentLine(std::vector<std::string>& comments)
    {
        size_t end = m_text.find('\n', m_pos);
        if (end == std::string::npos)
            end = m_text.size();
        std::string_view text = std::string_view(m_text).substr(m_pos + 1, end - m_pos - 1);
        if (!text.empty() && text.front() == ' ')
            text.remove_prefix(1);
        comments.emplace_back(text);
        m_pos = end;
    }

    static bool isIdentifierChar(char c)
    {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
    }

    // `name =` or `name: annotation =` before the dict, as a modeling file writes it.
    void skipAssignment()
    {
        size_t start = m_pos;
        while (!atEnd() && isIdentifierChar(m_text[m_pos]))
            ++m_pos;
        if (m_pos == start)
            return;
        // A string prefix (r"...") is not a name.
        if (peek() == '"' || peek() == '\'') {
            m_pos = start;
            return;
        }
        skipBlank(nullptr);
        if (peek() == ':') {
            // An annotation like dict[str, str]: names, brackets, commas and dots up to the '='.
            ++m_pos;
            while (!atEnd() && (isIdentifierChar(peek()) || std::strchr("[], \t|", peek())))
                ++m_pos;
        }
        skipBlank(nullptr);
        if (peek() != '=' || peek(1) == '=')
            fail(m_line, "expected '=' after " + quotedName(std::string_view(m_text).substr(start, m_pos - start)) + found());
        ++m_pos;
    }

    // One or more adjacent string literals (Python joins them), optionally in parentheses.
    std::string readStrings(const char* what)
    {
        size_t parentheses = 0; // counted, not recursed into: "((((..." cannot exhaust the stack
        while (peek() == '(') {
            ++m_pos;
            ++parentheses;
            skipBlank(nullptr);
        }
        std::string out;
        if (!readString(out))
            fail(m_line, std::string("expected ") + what + found());
        for (;;) {
            size_t pos = m_pos;
            size_t line = m_line;
            skipBlank(nullptr);
            if (!readString(out)) {
                m_pos = pos;
                m_line = line;
                break;
            }
        }
        for (; parentheses > 0; --parentheses) {
            skipBlank(nullptr);
            if (peek() != ')')
                fail(m_line, "expected ')'" + found());
            ++m_pos;
        }
        return out;
    }

    // A string literal at the current position appended to `out`; false (nothing consumed) when there is none.
    bool readString(std::string& out)
    {
        size_t p = m_pos;
        std::string prefix;
        while (p < m_text.size() && p - m_pos < 3 && std::isalpha(static_cast<unsigned char>(m_text[p])))
            prefix += static_cast<char>(std::tolower(static_cast<unsigned char>(m_text[p++])));
        if (p >= m_text.size() || (m_text[p] != '"' && m_text[p] != '\''))
            return false;
        if (prefix.find('b') != std::string::npos)
            fail(m_line, "a bytes literal; key_mapping takes str patterns");
        if (prefix.find('f') != std::string::npos)
            fail(m_line, "an f-string is computed, not a literal");
        if (!prefix.empty() && prefix != "r" && prefix != "u")
            fail(m_line, "invalid string prefix " + quotedName(prefix));
        const bool raw = prefix == "r";
        const char quote = m_text[p];
        const bool triple = p + 2 < m_text.size() && m_text[p + 1] == quote && m_text[p + 2] == quote;
        const size_t openedOn = m_line;
        m_pos = p + (triple ? 3 : 1);
        for (;;) {
            if (atEnd())
                fail(openedOn, triple ? "unterminated triple-quoted string" : "unterminated string");
            char c = m_text[m_pos];
            if (c == quote && (!triple || (peek(1) == quote && peek(2) == quote))) {
                m_pos += triple ? 3 : 1;
                return true;
            }
            if (c == '\n') {
                if (!triple)
                    fail(openedOn, "unterminated string (a line break inside a quoted string)");
                ++m_line;
                out += c;
                ++m_pos;
                continue;
            }
            if (c != '\\') {
                out += c;
                ++m_pos;
                continue;
            }
            if (m_pos + 1 >= m_text.size())
                fail(openedOn, "unterminated string");
            char n = m_text[m_pos + 1];
            if (raw) {
                // A raw string keeps the backslash and the character after it, which cannot end the string.
                out += c;
                out += n;
                if (n == '\n')
                    ++m_line;
                m_pos += 2;
                continue;
            }
            readEscape(out);
        }
    }

    // The escape at m_pos (a backslash) in a str literal that is not raw.
    void readEscape(std::string& out)
    {
        const char n = m_text[m_pos + 1];
        m_pos += 2;
        switch (n) {
        case '\n':
            ++m_line; // a line continuation inside the string: nothing
            return;
        case '\\':
        case '\'':
        case '"':
            out += n;
            return;
        case 'a':
            out += '\a';
            return;
        case 'b':
            out += '\b';
            return;
        case 'f':
            out += '\f';
            return;
        case 'n':
            out += '\n';
            return;
        case 'r':
            out += '\r';
            return;
        case 't':
            out += '\t';
            return;
        case 'v':
            out += '\v';
            return;
        case 'x':
            out += codePoint(readHex(2, "\\x"));
            return;
        case 'u':
            out += codePoint(readHex(4, "\\u"));
            return;
        case 'U':
            out += codePoint(readHex(8, "\\U"));
            return;
        case 'N':
            fail(m_line, "\\N{...} named escapes are not supported; write the character itself or \\u");
        default:
            break;
        }
        if (n >= '0' && n <= '7') {
            char32_t value = static_cast<char32_t>(n - '0');
            for (int k = 0; k < 2 && peek() >= '0' && peek() <= '7'; ++k)
                value = value * 8 + static_cast<char32_t>(m_text[m_pos++] - '0');
            out += codePoint(value);
            return;
        }
        // Python keeps an unknown escape as it is (with a warning): the backslash stays for `re` to read.
        out += '\\';
        out += n;
    }

    char32_t readHex(int digits, const char* escape)
    {
        char32_t value = 0;
        for (int k = 0; k < digits; ++k) {
            char c = peek();
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0)
                fail(m_line, std::string("truncated ") + escape + " escape (needs " + std::to_string(digits) + " hex digits)");
            value = value * 16 + static_cast<char32_t>(d);
            ++m_pos;
        }
        return value;
    }

    std::string codePoint(char32_t cp) const
    {
        if (cp > 0x10FFFF)
            fail(m_line, "an escape past U+10FFFF");
        if (cp >= 0xD800 && cp <= 0xDFFF)
            fail(m_line, "an escaped surrogate (U+D800..U+DFFF) cannot be part of UTF-8 text");
        std::string s;
        appendUtf8(s, cp);
        return s;
    }

    const std::string& m_name;
    std::string m_text;
    size_t m_pos = 0;
    size_t m_line = 1;
};

// ---------------------------------------------------------------------------------------------------
// JSON object of strings, by simdjson's On-Demand API, which keeps the order and repeats of the keys and
// says where each key stands (for line numbers). nullopt when the text is not such an object.

std::optional<std::vector<Entry>> readJsonStringObject(std::string_view text)
{
    simdjson::padded_string padded(text);
    // On-Demand reads lazily and would not notice text after the object: the DOM parser checks it all first.
    simdjson::dom::parser validator;
    if (validator.parse(padded).error())
        return std::nullopt;
    simdjson::ondemand::parser parser;
    simdjson::ondemand::document doc;
    if (parser.iterate(padded).get(doc))
        return std::nullopt;
    simdjson::ondemand::object object;
    if (doc.get_object().get(object))
        return std::nullopt;
    std::vector<Entry> entries;
    size_t countedTo = 0; // keys come in text order, so line numbers are counted on from the last one
    size_t line = 1;
    for (auto item : object) {
        simdjson::ondemand::field field;
        if (std::move(item).get(field))
            return std::nullopt;
        const size_t offset = static_cast<size_t>(field.key().raw() - padded.data());
        std::string_view key;
        std::string_view value;
        if (field.unescaped_key().get(key))
            return std::nullopt;
        Entry e;
        e.pattern = std::string(key);
        if (field.value().get_string().get(value))
            return std::nullopt;
        e.replacement = std::string(value);
        line += static_cast<size_t>(std::count(text.begin() + static_cast<std::ptrdiff_t>(countedTo),
            text.begin() + static_cast<std::ptrdiff_t>(std::max(countedTo, std::min(offset, text.size()))), '\n'));
        countedTo = std::max(countedTo, std::min(offset, text.size()));
        e.line = line;
        entries.push_back(std::move(e));
    }
    return entries;
}

// A Python dict's insertion order: a repeated key keeps its first place and takes its last value.
std::vector<Entry> asDict(std::vector<Entry> entries)
{
    std::unordered_map<std::string, size_t> at;
    std::vector<Entry> out;
    for (auto& e : entries) {
        auto [it, isNew] = at.try_emplace(e.pattern, out.size());
        if (isNew) {
            out.push_back(std::move(e));
            continue;
        }
        Entry& kept = out[it->second];
        kept.replacement = std::move(e.replacement);
        kept.comments.push_back("the source repeats this pattern on line " + std::to_string(e.line)
            + "; the last value is kept, as in a Python dict");
    }
    return out;
}

std::string describe(const PatternError& e, const Entry& entry)
{
    return lineText(entry.line) + (e.inReplacement ? "replacement " + quotedName(entry.replacement) : "pattern " + quotedName(entry.pattern))
        + " at offset " + std::to_string(e.offset) + ": " + e.message;
}

} // namespace

RuleSet importHfKeyMapping(std::string_view text, const std::string& name)
{
    text = withoutBom(text);
    RuleSet out;
    out.mode = RuleMode::FirstMatch;
    std::vector<Entry> entries;
    size_t first = text.find_first_not_of(" \t\r\n");
    std::optional<std::vector<Entry>> json;
    if (first != std::string_view::npos && text[first] == '{')
        json = readJsonStringObject(text);
    if (json) {
        entries = std::move(*json);
    } else {
        // Not a JSON object of strings: read it as Python, whose reader names the line of any problem.
        PythonDictReader reader(text, name);
        entries = reader.read(out.headerComments);
    }
    entries = asDict(std::move(entries));
    out.rules.reserve(entries.size());
    for (auto& e : entries) {
        if (firstBadUtf8(e.pattern) != std::string::npos || firstBadUtf8(e.replacement) != std::string::npos)
            throw LoadError(name, lineText(e.line) + "not UTF-8 text");
        if (auto problem = validatePattern(e.pattern))
            throw LoadError(name, describe(*problem, e));
        if (auto problem = validateReplacement(e.replacement, e.pattern))
            throw LoadError(name, describe(*problem, e));
        Rule r;
        r.pattern = std::move(e.pattern);
        r.replacement = std::move(e.replacement);
        r.comments = std::move(e.comments);
        out.rules.push_back(std::move(r));
    }
    checkRuleCount(out, name);
    return out;
}

// ---------------------------------------------------------------------------------------------------
// CSV

namespace {

struct CsvRow {
    std::vector<std::string> fields;
    size_t line = 0;
};

std::vector<CsvRow> readCsv(std::string_view text, const std::string& name)
{
    std::vector<CsvRow> rows;
    size_t pos = 0;
    size_t line = 1;
    while (pos < text.size()) {
        CsvRow row;
        row.line = line;
        for (;;) {
            std::string field;
            if (pos < text.size() && text[pos] == '"') {
                const size_t openedOn = line;
                ++pos;
                for (;;) {
                    if (pos >= text.size())
                        throw LoadError(name, lineText(openedOn) + "unterminated quoted field");
                    char c = text[pos++];
                    if (c == '"') {
                        if (pos < text.size() && text[pos] == '"') {
                            field += '"';
                            ++pos;
                            continue;
                        }
                        break;
                    }
                    if (c == '\n')
                        ++line;
                    field += c;
                }
                if (pos < text.size() && text[pos] != ',' && text[pos] != '\r' && text[pos] != '\n')
                    throw LoadError(name, lineText(line) + "text after the closing quote of a field (a quote inside a field is written \"\")");
            } else {
                size_t end = text.find_first_of(",\r\n", pos);
                if (end == std::string_view::npos)
                    end = text.size();
                field.assign(text.substr(pos, end - pos));
                pos = end;
            }
            row.fields.push_back(std::move(field));
            if (pos < text.size() && text[pos] == ',') {
                ++pos;
                continue;
            }
            break;
        }
        // The record ends at CRLF, LF, a lone CR or the end.
        if (pos < text.size() && text[pos] == '\r')
            ++pos;
        if (pos < text.size() && text[pos] == '\n')
            ++pos;
        ++line;
        const bool blank = row.fields.size() == 1 && row.fields[0].empty();
        if (!blank)
            rows.push_back(std::move(row));
    }
    return rows;
}

bool isHeaderWord(std::string s)
{
    s.erase(0, s.find_first_not_of(" \t"));
    s.erase(s.find_last_not_of(" \t") + 1);
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    static const char* const kWords[] = { "old", "new", "from", "to", "source", "target", "before", "after", "old_name",
        "new_name", "old name", "new name", "checkpoint", "model", "key", "new_key", "old_key" };
    return std::any_of(std::begin(kWords), std::end(kWords), [&](const char* w) { return s == w; });
}

} // namespace

RuleSet importCsvMapping(std::string_view text, const std::string& name)
{
    std::vector<CsvRow> rows = readCsv(withoutBom(text), name);
    if (!rows.empty() && rows[0].fields.size() == 2 && isHeaderWord(rows[0].fields[0]) && isHeaderWord(rows[0].fields[1]))
        rows.erase(rows.begin());

    RuleSet out;
    std::unordered_map<std::string_view, size_t> rowOf; // old name -> index in `kept`
    std::vector<const CsvRow*> kept;
    for (const auto& row : rows) {
        if (row.fields.size() != 2)
            throw LoadError(name, lineText(row.line) + "expected two fields, old,new; found " + std::to_string(row.fields.size()));
        const std::string& oldName = row.fields[0];
        const std::string& newName = row.fields[1];
        if (oldName.empty())
            throw LoadError(name, lineText(row.line) + "the old name is empty");
        if (firstBadUtf8(oldName) != std::string::npos || firstBadUtf8(newName) != std::string::npos)
            throw LoadError(name, lineText(row.line) + "not UTF-8 text");
        auto [it, isNew] = rowOf.try_emplace(oldName, kept.size());
        if (!isNew) {
            const CsvRow& earlier = *kept[it->second];
            if (earlier.fields[1] == newName)
                continue; // the same row again
            throw LoadError(name, lineText(row.line) + quotedName(oldName) + " is listed again with another new name (first on line "
                    + std::to_string(earlier.line) + ")");
        }
        kept.push_back(&row);
    }

    // A chain runs each rule on the output of the rules before it: a row whose new name is a later row's
    // old name would be renamed (or dropped) twice. First-match keeps each row to itself.
    for (size_t i = 0; i < kept.size() && out.mode == RuleMode::Chain; ++i) {
        auto later = rowOf.find(kept[i]->fields[1]);
        if (!kept[i]->fields[1].empty() && later != rowOf.end() && later->second > i) {
            out.mode = RuleMode::FirstMatch;
            out.headerComments.push_back("first_match: line " + std::to_string(kept[i]->line) + " renames "
                + oneLineMessage(kept[i]->fields[0], 200) + " onto the old name of line " + std::to_string(kept[later->second]->line)
                + ", which a chain would rename again");
        }
    }

    out.rules.reserve(kept.size());
    for (const CsvRow* row : kept) {
        Rule r;
        r.pattern = "^" + escapePattern(row->fields[0]) + "$";
        r.replacement = escapeReplacement(row->fields[1]);
        r.drop = row->fields[1].empty();
        out.rules.push_back(std::move(r));
    }
    checkRuleCount(out, name);
    return out;
}

// ---------------------------------------------------------------------------------------------------
// Any rule file

namespace {

std::string readCapped(const std::string& path)
{
    const ReadableFile file = openRegularFile(path, InputKind::Rules);
    if (file.size() > kMaxFileSize)
        throw LoadError(path, "a rule file larger than 64 MiB is not a rule file");
    std::string text;
    char buffer[1 << 16];
    for (;;) {
        const ssize_t n = ::read(file.fd(), buffer, sizeof buffer);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            throw LoadError(path, std::string("read error: ") + std::strerror(errno));
        if (n == 0)
            break;
        text.append(buffer, static_cast<size_t>(n));
        if (text.size() > kMaxFileSize) // it grew while read
            throw LoadError(path, "a rule file larger than 64 MiB is not a rule file");
    }
    return text;
}

std::string lowerExtension(const std::string& path)
{
    std::string ext = std::filesystem::path(path).extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return ext;
}

enum class JsonKind { NotJson, StringObject, Other };

JsonKind jsonKind(std::string_view text)
{
    simdjson::dom::parser parser;
    simdjson::dom::element root;
    if (parser.parse(text.data(), text.size(), true).get(root))
        return JsonKind::NotJson;
    simdjson::dom::object object;
    if (root.get_object().get(object))
        return JsonKind::Other;
    bool allStrings = true;
    bool onlyNativeFields = object.size() > 0;
    for (auto [key, value] : object) {
        allStrings = allStrings && value.is_string();
        onlyNativeFields = onlyNativeFields && (key == "version" || key == "mode" || key == "rules");
    }
    // {"mode": "chain"} has only string values but is a native file.
    return allStrings && !onlyNativeFields ? JsonKind::StringObject : JsonKind::Other;
}

// `name = {` or `name: annotation = {` as the first code line (after comments), as a modeling file has it.
bool looksLikePythonAssignment(std::string_view text)
{
    size_t pos = 0;
    for (;;) {
        pos = text.find_first_not_of(" \t\r\n", pos);
        if (pos == std::string_view::npos)
            return false;
        if (text[pos] != '#')
            break;
        pos = text.find('\n', pos);
        if (pos == std::string_view::npos)
            return false;
    }
    size_t end = text.find('\n', pos);
    std::string_view line = text.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
    size_t i = 0;
    auto identifier = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; };
    if (line.empty() || std::isdigit(static_cast<unsigned char>(line[0])))
        return false;
    while (i < line.size() && identifier(line[i]))
        ++i;
    if (i == 0)
        return false;
    size_t eq = line.find('=', i);
    if (eq == std::string_view::npos || (eq + 1 < line.size() && line[eq + 1] == '='))
        return false;
    std::string_view between = line.substr(i, eq - i);
    if (between.find_first_of("\"'#{") != std::string_view::npos)
        return false;
    if (between.find_first_not_of(" \t") != std::string_view::npos && between.substr(between.find_first_not_of(" \t"), 1) != ":")
        return false;
    size_t brace = line.find_first_not_of(" \t", eq + 1);
    return brace != std::string_view::npos && line[brace] == '{';
}

} // namespace

RuleSet importRulesFile(const std::string& path)
{
    const std::string content = readCapped(path);
    const std::string_view text = withoutBom(content);
    const std::string ext = lowerExtension(path);
    if (ext == ".csv")
        return importCsvMapping(text, path);
    if (ext == ".py")
        return importHfKeyMapping(text, path);
    if (ext == ".yaml" || ext == ".yml")
        return parseRules(text, path);
    size_t first = text.find_first_not_of(" \t\r\n");
    if (first != std::string_view::npos && text[first] == '{') {
        switch (jsonKind(text)) {
        case JsonKind::StringObject:
            return importHfKeyMapping(text, path);
        case JsonKind::Other:
            return parseRules(text, path);
        case JsonKind::NotJson:
            // Broken JSON, or a Python dict literal (r-strings, single quotes, comments).
            return ext == ".json" ? parseRules(text, path) : importHfKeyMapping(text, path);
        }
    }
    if (looksLikePythonAssignment(text))
        return importHfKeyMapping(text, path);
    return parseRules(text, path);
}

} // namespace sl
