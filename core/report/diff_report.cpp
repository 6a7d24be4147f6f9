#include "diff_report.h"

#include "io/json_writer.h"
#include "report/source_report.h"
#include "util/name_list.h"
#include "util/terminal_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <array>
#include <cctype>
#include <charconv>
#include <cstring>

namespace sl {

namespace {

// The order people read differences in: what breaks the load first.
constexpr std::array<RowStatus, kRowStatusCount - 1> kDifferenceOrder = {
    RowStatus::ShapeMismatch, RowStatus::CopyError, RowStatus::Missing, RowStatus::Unexpected,
    RowStatus::DtypeMismatch, RowStatus::Renamed, RowStatus::Dropped,
};

// In HTML groups, more rows than this are summarised: the JSON and CSV reports list them all.
constexpr size_t kHtmlRowsPerGroup = 1000;
constexpr size_t kTextExamples = 3;

// ---- small appenders (no temporaries on the per-row paths) ----------------------------------------------

void appendNumber(std::string& out, uint64_t v)
{
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, end);
}

void appendNumber(std::string& out, int64_t v)
{
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, end);
}

// "[2, 3]", as torch.Size prints inside brackets (same text as shapeToString).
void appendShape(std::string& out, const Shape& s)
{
    out += '[';
    for (size_t i = 0; i < s.size(); ++i) {
        if (i)
            out += ", ";
        appendNumber(out, s[i]);
    }
    out += ']';
}

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

// XML and HTML text or attribute values. Names keep no raw whitespace controls (they become pictures);
// free text (`keepLineBreaks`) keeps tabs and line breaks, as character references inside attributes so
// attribute-value normalisation keeps them too.
void appendXml(std::string& out, std::string_view raw, bool attribute, bool keepLineBreaks = false)
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

void appendXmlText(std::string& out, std::string_view raw) { appendXml(out, raw, false); }
void appendXmlAttr(std::string& out, std::string_view raw) { appendXml(out, raw, true); }

// A Markdown code span that shows `raw` literally inside a GFM table: the fence is one backtick longer
// than any run inside, pipes are escaped (GFM splits cells before it parses code spans).
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

// Markdown prose (explanations, messages): backslash-escape what could start markup, HTML or a cell break.
// An underscore between letters or digits cannot open or close emphasis, so `load_state_dict` stays as is.
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

// One RFC 4180 cell. A leading = + - @ would make a spreadsheet evaluate the cell as a formula, so such a
// cell gets a leading apostrophe (the usual OWASP mitigation). CSV reports are printed to terminals as
// often as they are opened in spreadsheets: control characters are shown escaped, as in the text report.
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

// ---- what the renderers share ----------------------------------------------------------------------------

std::string_view entryDtypeName(const Entry& e)
{
    return e.kind == EntryKind::Object ? std::string_view("object") : dtypeName(e.dtype);
}

// "[4096, 11008] bfloat16", or "? bfloat16" when the shape is not known.
void appendShapeAndDtype(std::string& out, const Entry& e)
{
    if (e.shapeKnown)
        appendShape(out, e.shape);
    else
        out += '?';
    out += ' ';
    out += entryDtypeName(e);
}

// The rule set's compile errors as issues, for reports made without checkRules.
std::vector<RuleIssue> issuesFromRuleErrors(const std::vector<PatternError>& errors)
{
    std::vector<RuleIssue> out;
    for (const auto& e : errors) {
        RuleIssue issue;
        issue.kind = RuleIssue::Kind::Invalid;
        issue.severity = Severity::Danger;
        issue.rule = static_cast<int>(e.rule);
        issue.message = describePatternError(e);
        out.push_back(std::move(issue));
    }
    return out;
}


// Value fields: "%.9g" keeps the numbers readable and stable; JSON gets them as numbers or null.
void appendDouble(std::string& out, double v)
{
    char buf[40];
    const int n = std::snprintf(buf, sizeof buf, "%.9g", v);
    out.append(buf, static_cast<size_t>(std::max(n, 0)));
}

// JSON is read by programs: the shortest text that reads back as the same double.
void appendOptionalJson(std::string& out, const std::optional<double>& v)
{
    if (v && std::isfinite(*v)) {
        char buf[32];
        const auto r = std::to_chars(buf, buf + sizeof buf, *v);
        out.append(buf, r.ptr);
    } else {
        out += "null";
    }
}

// The rows whose values were compared and differ, for the sections of the readable formats.
struct ValueLine {
    const DiffRow* row;
    const values::ValueComparison* cmp;
};

struct ValueSummary {
    size_t compared = 0, equal = 0, notCompared = 0;
    std::vector<ValueLine> differ;
};

ValueSummary summariseValues(const DiffReportInput& in)
{
    ValueSummary v;
    if (!in.values)
        return v;
    for (size_t i = 0; i < in.diff.rows.size() && i < in.values->size(); ++i) {
        const DiffRow& row = in.diff.rows[i];
        const values::ValueComparison& c = (*in.values)[i];
        if ((row.a < 0 || row.b < 0) && !c.compared) // a one-sided row compared only against a group stored otherwise
            continue;
        if (!c.compared) {
            ++v.notCompared;
            continue;
        }
        ++v.compared;
        if (c.equalBytes || c.equalValues) // quantized groups have no single bytes: equal values count
            ++v.equal;
        else
            v.differ.push_back({ &row, &c });
    }
    return v;
}

// "27 pair(s) compared, 16 equal, 11 differ, 0 not compared"
std::string valueCounts(const ValueSummary& v)
{
    std::string out;
    appendNumber(out, static_cast<uint64_t>(v.compared));
    out += " pair(s) compared, ";
    appendNumber(out, static_cast<uint64_t>(v.equal));
    out += " equal, ";
    appendNumber(out, static_cast<uint64_t>(v.differ.size()));
    out += " differ, ";
    appendNumber(out, static_cast<uint64_t>(v.notCompared));
    out += " not compared";
    return out;
}

std::string valueNumbers(const values::ValueComparison& c)
{
    std::string out = "max |a-b| ";
    c.maxAbsDiff ? appendDouble(out, *c.maxAbsDiff) : void(out += "-");
    out += ", max rel ";
    c.maxRelDiff ? appendDouble(out, *c.maxRelDiff) : void(out += "-");
    out += ", cosine ";
    c.cosine ? appendDouble(out, *c.cosine) : void(out += "-");
    if (c.nanMismatch) {
        out += ", NaN on one side only at ";
        appendNumber(out, c.nanMismatch);
    }
    return out;
}

struct ReportContext {
    const DiffReportInput& in;
    std::vector<RuleIssue> ownIssues; // when the caller passed none
    const std::vector<RuleIssue>* issues = nullptr;
    RowLines lines; // which rows share a line (pairs, many-to-one counterparts)
    std::vector<FoldedRow> folded; // every row, in the diff's order (only when asked for)
    std::vector<const FoldedRow*> differences; // the folded rows that are not matches or pairs, failures first
    // Unexpected and missing keys that correspond (a wrapper prefix, a pending suggestion, a quantized key
    // and its weight): one line each, A's names beside B's, listed apart from the unpaired differences.
    std::vector<const FoldedRow*> pairs;

    ReportContext(const DiffReportInput& input, bool fold)
        : in(input)
    {
        if (in.ruleIssues) {
            issues = in.ruleIssues;
        } else {
            ownIssues = issuesFromRuleErrors(in.diff.ruleErrors);
            issues = &ownIssues;
        }
        if (!fold)
            return;
        lines = rowLines(in.diff);
        folded = foldRows(in.diff, in.a, in.b, lines);
        for (RowStatus status : kDifferenceOrder)
            for (const FoldedRow& f : folded)
                if (f.status == status)
                    (f.partnerName.empty() ? differences : pairs).push_back(&f);
    }
    const std::vector<Suggestion>& suggestions() const
    {
        static const std::vector<Suggestion> none;
        return in.suggestions ? *in.suggestions : none;
    }
    const std::string& name(const DiffRow& row) const { return rowName(row, in.a, in.b); }
    // A line's names on A's side and on B's: the head's own, and the folded names of the rows shown with it.
    std::pair<const std::string&, const std::string&> pairNames(const FoldedRow& f) const
    {
        const bool headOnA = in.diff.rows[f.rows.front()].a >= 0;
        return headOnA ? std::pair<const std::string&, const std::string&> { f.name, f.partnerName }
                       : std::pair<const std::string&, const std::string&> { f.partnerName, f.name };
    }
    // How many rows of a status the pair lines hold (their heads' and the rows shown with them).
    size_t pairedRows(RowStatus status) const
    {
        size_t n = 0;
        for (const FoldedRow* f : pairs) {
            for (size_t r : f->rows)
                n += in.diff.rows[r].status == status;
            for (size_t r : f->partnerRows)
                n += in.diff.rows[r].status == status;
        }
        return n;
    }
    // "(2 pairs)", or "(1 + 256 rows)" for a many-to-one line; empty for a single pair.
    std::string lineCount(const FoldedRow& f) const
    {
        if (f.partnerRows.size() == f.rows.size())
            return f.rows.size() > 1 ? "(" + std::to_string(f.rows.size()) + " pairs)" : std::string();
        return "(" + std::to_string(f.rows.size()) + " + " + std::to_string(f.partnerRows.size()) + " rows)";
    }
    // The explanation a line shows: A's side first.
    const std::string& lineExplanation(const FoldedRow& f) const
    {
        const DiffRow& head = in.diff.rows[f.rows.front()];
        const DiffRow& other = in.diff.rows[f.partnerRows.front()];
        const DiffRow& a = head.a >= 0 ? head : other;
        return a.explanation.empty() ? (head.a >= 0 ? other : head).explanation : a.explanation;
    }
    // The pending suggestion behind a pair's rows, numbered from 1 as people read them; 0 when none.
    size_t suggestionNumber(const FoldedRow& f) const
    {
        const int32_t s = in.diff.rows[f.rows.front()].suggestion;
        return s >= 0 ? static_cast<size_t>(s) + 1 : 0;
    }
    bool loadSucceeds() const { return in.diff.summary.loadSucceeds(in.failOnDtype); }

    // A capacity for a document with a line per row: the names and explanations plus `perRow` bytes of
    // markup, so building a large report does not copy itself over and over while it grows.
    size_t estimate(size_t perRow, size_t fixed = 16384) const
    {
        size_t bytes = fixed;
        for (const DiffRow& row : in.diff.rows) {
            bytes += perRow + row.explanation.size();
            if (row.a >= 0)
                bytes += rowKeyA(row, in.a).size();
            if (row.b >= 0)
                bytes += rowKeyB(row, in.b).size();
        }
        return bytes + bytes / 16;
    }
};

// What a JUnit failure or a listing says about a row without a known cause.
std::string rowMessage(const DiffRow& row, const Source& a, const Source& b)
{
    if (!row.explanation.empty())
        return row.explanation;
    const Entry* ea = rowEntryA(row, a);
    const Entry* eb = rowEntryB(row, b);
    std::string out;
    switch (row.status) {
    case RowStatus::Match: return "present on both sides with the same shape and dtype";
    case RowStatus::Renamed: return "matched through the rules";
    case RowStatus::Missing: return "the model expects this key and the checkpoint has none (Missing key(s) in a strict load)";
    case RowStatus::Unexpected: return "the checkpoint has this key and the model does not (Unexpected key(s) in a strict load)";
    case RowStatus::Dropped: return "dropped by a rule";
    case RowStatus::CopyError: return "same shape, but copying the checkpoint's tensor into the model's raises (a tensor subclass on one side)";
    case RowStatus::ShapeMismatch:
    case RowStatus::DtypeMismatch:
        out = row.status == RowStatus::ShapeMismatch ? "size mismatch: " : "dtype mismatch: ";
        if (ea && eb) {
            out += "checkpoint ";
            appendShapeAndDtype(out, *ea);
            out += ", model ";
            appendShapeAndDtype(out, *eb);
        }
        return out;
    }
    return out;
}

std::string countsText(const DiffSummary& s, const std::vector<RowStatus>& statuses)
{
    std::string out;
    for (RowStatus st : statuses) {
        if (s.count(st) == 0)
            continue;
        if (!out.empty())
            out += ", ";
        appendNumber(out, static_cast<uint64_t>(s.count(st)));
        out += ' ';
        out += rowStatusName(st);
    }
    return out;
}

size_t totalRows(const DiffSummary& s)
{
    size_t n = 0;
    for (size_t c : s.counts)
        n += c;
    return n;
}

std::string sourceLine(const Source& s)
{
    std::string out = s.format.empty() ? std::string("in memory") : s.format;
    if (!s.container.empty())
        out += ", container '" + s.container + "'";
    out += ", ";
    appendNumber(out, static_cast<uint64_t>(s.entries.size()));
    out += s.entries.size() == 1 ? " entry, " : " entries, ";
    out += humanBytes(s.totalBytes());
    return out;
}

// ---- JSON ------------------------------------------------------------------------------------------------

void writeRuleJson(JsonWriter& w, const Rule& r)
{
    w.beginObject();
    w.field("pattern", r.pattern);
    w.field("replace", r.replacement);
    w.field("drop", r.drop);
    w.field("enabled", r.enabled);
    w.field("note", r.note);
    w.endObject();
}

void writeStringsJson(JsonWriter& w, const std::vector<std::string>& items)
{
    w.beginArray();
    for (const auto& s : items)
        w.string(s);
    w.endArray();
}

// Writes into a std::string through a raw pointer. Room for an item's worst case is made once, so the many
// small appends of a row are plain stores (std::string's per-append checks made the rows about 40% slower
// at 100,000 rows). Leaves `out` at the written size when it goes.
class RawWriter {
public:
    explicit RawWriter(std::string& out)
        : m_out(out)
        , m_used(out.size())
    {
        m_out.resize(std::max(m_out.capacity(), m_used + 256));
        m_p = m_out.data();
    }
    ~RawWriter() { m_out.resize(m_used); }
    RawWriter(const RawWriter&) = delete;
    RawWriter& operator=(const RawWriter&) = delete;

    void makeRoom(size_t n)
    {
        if (m_used + n <= m_out.size())
            return;
        m_out.resize(std::max(m_out.size() * 2, m_used + n));
        m_p = m_out.data();
    }
    // Hands what is written so far to `sink` once it reaches `limit` bytes, and starts over in the same room:
    // a large report streams out in pieces instead of being held whole (its pages cost time to fault in).
    void drainAt(size_t limit, const TextSink& sink)
    {
        if (m_used < limit)
            return;
        sink(std::string_view(m_p, m_used));
        m_used = 0;
    }
    void put(char c) { m_p[m_used++] = c; }
    void put(std::string_view s)
    {
        std::memcpy(m_p + m_used, s.data(), s.size());
        m_used += s.size();
    }
    void number(int64_t v) // needs 20 bytes of room
    {
        m_used = static_cast<size_t>(std::to_chars(m_p + m_used, m_p + m_used + 24, v).ptr - m_p);
    }
    void null() { put("null"); }
    // Worst case: 6 bytes per input byte (\u00XX; an invalid byte becomes 3), plus the quotes.
    static size_t stringRoom(std::string_view s) { return 6 * s.size() + 2; }
    // A JSON string as rapidjson writes it (the rest of the document comes from JsonWriter): invalid UTF-8
    // replaced, '"' and '\\' escaped, control characters as \n-style or \u00XX escapes.
    void string(std::string_view raw)
    {
        withValidUtf8(raw, [&](std::string_view s) {
            static constexpr char kHex[] = "0123456789ABCDEF";
            put('"');
            size_t run = 0;
            // From one byte that needs an escape to the next.
            for (size_t i = jsonPlainPrefix(s); i < s.size(); i += 1 + jsonPlainPrefix(s.substr(i + 1))) {
                const auto c = static_cast<unsigned char>(s[i]);
                put(s.substr(run, i - run));
                run = i + 1;
                put('\\');
                switch (c) {
                case '"': put('"'); break;
                case '\\': put('\\'); break;
                case '\n': put('n'); break;
                case '\r': put('r'); break;
                case '\t': put('t'); break;
                case '\b': put('b'); break;
                case '\f': put('f'); break;
                default:
                    put("u00");
                    put(kHex[c >> 4]);
                    put(kHex[c & 0xF]);
                }
            }
            put(s.substr(run));
            put('"');
        });
    }
    // `"a_shape": [..]|null` and `"a_dtype": str|null` for one side of a row.
    static size_t sideRoom(const Entry* e) { return 64 + (e ? 21 * e->shape.size() : 0); }
    void shape(const Entry* e, std::string_view key)
    {
        put(key);
        if (!e || !e->shapeKnown) {
            null();
            return;
        }
        put('[');
        for (size_t i = 0; i < e->shape.size(); ++i) {
            if (i)
                put(',');
            number(e->shape[i]);
        }
        put(']');
    }
    void dtype(const Entry* e, std::string_view key)
    {
        put(key);
        if (!e) {
            null();
            return;
        }
        put('"');
        put(entryDtypeName(*e)); // plain ASCII names
        put('"');
    }

private:
    std::string& m_out;
    size_t m_used = 0;
    char* m_p = nullptr;
};

} // namespace

bool rowFails(RowStatus status, bool failOnDtype)
{
    switch (status) {
    case RowStatus::ShapeMismatch:
    case RowStatus::CopyError:
    case RowStatus::Missing:
    case RowStatus::Unexpected: return true;
    case RowStatus::DtypeMismatch: return failOnDtype;
    case RowStatus::Match:
    case RowStatus::Renamed:
    case RowStatus::Dropped: return false;
    }
    return false;
}

std::string diffVerdict(const DiffSummary& s, bool failOnDtype)
{
    std::string failing = countsText(s, { RowStatus::ShapeMismatch, RowStatus::CopyError, RowStatus::Missing, RowStatus::Unexpected });
    const size_t casts = s.count(RowStatus::DtypeMismatch);
    if (!failing.empty()) {
        std::string out = "a strict load_state_dict would fail: " + failing;
        if (casts) {
            out += "; ";
            appendNumber(out, static_cast<uint64_t>(casts));
            out += failOnDtype ? " dtype_mismatch (failures here: fail on dtype)" : " dtype_mismatch (cast on load)";
        }
        return out;
    }
    if (failOnDtype && casts) {
        std::string out = "a strict load_state_dict would fail the dtype check: ";
        appendNumber(out, static_cast<uint64_t>(casts));
        out += " dtype_mismatch (torch itself would cast them; failures here: fail on dtype)";
        return out;
    }
    const size_t modelKeys = s.count(RowStatus::Match) + s.count(RowStatus::Renamed) + casts;
    std::string out = "a strict load_state_dict would succeed: all ";
    appendNumber(out, static_cast<uint64_t>(modelKeys));
    out += modelKeys == 1 ? " model key found" : " model keys found";
    if (s.count(RowStatus::Renamed)) {
        out += ", ";
        appendNumber(out, static_cast<uint64_t>(s.count(RowStatus::Renamed)));
        out += " through the rules";
    }
    if (casts) {
        out += ", ";
        appendNumber(out, static_cast<uint64_t>(casts));
        out += " cast to the model's dtype";
    }
    if (s.count(RowStatus::Dropped)) {
        out += ", ";
        appendNumber(out, static_cast<uint64_t>(s.count(RowStatus::Dropped)));
        out += " checkpoint keys dropped by rules";
    }
    return out;
}

namespace {

// The sources' findings worth a reader's attention in a diff (dangers and warnings), side by side.
struct SideFinding {
    const char* side; // "A (checkpoint)" or "B (model)"
    const Finding* finding;
};
std::vector<SideFinding> sourceFindings(const DiffReportInput& in, bool includeWarnings = true)
{
    std::vector<SideFinding> out;
    for (int side = 0; side < 2; ++side)
        for (const Finding& f : (side == 0 ? in.a : in.b).findings)
            if (f.severity == Severity::Danger || (includeWarnings && f.severity == Severity::Warning))
                out.push_back({ side == 0 ? "A (checkpoint)" : "B (model)", &f });
    return out;
}

// The verdict, led by the danger when loading a side would run code: never a bare "would succeed" then.
std::string verdictWithSafety(const DiffReportInput& in)
{
    std::string out;
    for (int side = 0; side < 2; ++side) {
        const Source& src = side == 0 ? in.a : in.b;
        if (src.weightsOnly.executes.empty())
            continue;
        out += std::string("DANGER: loading ") + (side == 0 ? "the checkpoint" : "the model") + " would run code ("
            + listNames(src.weightsOnly.executes, 3) + "); ";
    }
    return out + diffVerdict(in.diff.summary, in.failOnDtype);
}

} // namespace

std::string_view diffReportFormatName(DiffReportFormat f)
{
    switch (f) {
    case DiffReportFormat::Text: return "text";
    case DiffReportFormat::Json: return "json";
    case DiffReportFormat::Markdown: return "markdown";
    case DiffReportFormat::Csv: return "csv";
    case DiffReportFormat::Html: return "html";
    case DiffReportFormat::Junit: return "junit";
    }
    return "text";
}

std::optional<DiffReportFormat> parseDiffReportFormat(std::string_view name)
{
    if (name == "text" || name == "txt")
        return DiffReportFormat::Text;
    if (name == "json")
        return DiffReportFormat::Json;
    if (name == "markdown" || name == "md")
        return DiffReportFormat::Markdown;
    if (name == "csv")
        return DiffReportFormat::Csv;
    if (name == "html")
        return DiffReportFormat::Html;
    if (name == "junit" || name == "xml")
        return DiffReportFormat::Junit;
    return std::nullopt;
}

void renderDiffReport(const DiffReportInput& in, DiffReportFormat format, const TextSink& sink)
{
    if (format == DiffReportFormat::Json)
        diffToJson(in, sink);
    else
        sink(renderDiffReport(in, format));
}

std::string renderDiffReport(const DiffReportInput& in, DiffReportFormat format)
{
    switch (format) {
    case DiffReportFormat::Text: return diffToText(in);
    case DiffReportFormat::Json: return diffToJson(in);
    case DiffReportFormat::Markdown: return diffToMarkdown(in);
    case DiffReportFormat::Csv: return diffToCsv(in);
    case DiffReportFormat::Html: return diffToHtml(in);
    case DiffReportFormat::Junit: return diffToJunit(in);
    }
    return diffToText(in);
}

std::string diffToJson(const DiffReportInput& in)
{
    std::string out;
    diffToJson(in, [&out](std::string_view part) { out.append(part); });
    return out;
}

void diffToJson(const DiffReportInput& in, const TextSink& sink)
{
    // Written in pieces of about a megabyte: the rows of a large diff are tens of megabytes of JSON.
    constexpr size_t kPiece = size_t(1) << 20;
    const ReportContext ctx(in, true);
    std::string out;
    out.reserve(kPiece + 4096);
    // The small parts go through JsonWriter (one root value each); rows and folded rows, which can be
    // hundreds of thousands, are written straight into the reserved output.
    auto append = [&out](const JsonWriter& w) { out.append(w.text()); };
    out += "{\"a\":";
    {
        JsonWriter w;
        writeSourceJson(w, in.a);
        append(w);
    }
    out += ",\"b\":";
    {
        JsonWriter w;
        writeSourceJson(w, in.b);
        append(w);
    }
    // Both sources' findings (every severity), so a CI gate on the diff sees what `ls` would show.
    out += ",\"source_findings\":";
    {
        JsonWriter w;
        w.beginObject();
        w.key("a");
        writeFindingsJson(w, in.a.findings);
        w.key("b");
        writeFindingsJson(w, in.b.findings);
        w.endObject();
        append(w);
    }
    out += ",\"rules\":";
    {
        JsonWriter w;
        w.beginArray();
        for (const auto& r : in.rules.rules)
            writeRuleJson(w, r);
        w.endArray();
        append(w);
    }
    out += ",\"summary\":{";
    for (RowStatus st : kAllRowStatuses) {
        out += '"';
        out += rowStatusName(st);
        out += "\":";
        appendNumber(out, static_cast<uint64_t>(in.diff.summary.count(st)));
        out += ',';
    }
    out += ctx.loadSucceeds() ? "\"load_succeeds\":true}" : "\"load_succeeds\":false}";

    out += ",\"rows\":[";
    {
        RawWriter raw(out);
        bool firstItem = true;
        for (const DiffRow& row : in.diff.rows) {
            const Entry* ea = rowEntryA(row, in.a);
            const Entry* eb = rowEntryB(row, in.b);
            const std::string_view reason = reasonName(row.reason);
            raw.makeRoom(240 + (ea ? RawWriter::stringRoom(rowKeyA(row, in.a)) : 0) + (eb ? RawWriter::stringRoom(rowKeyB(row, in.b)) : 0)
                + RawWriter::stringRoom(reason) + RawWriter::stringRoom(row.explanation) + RawWriter::sideRoom(ea) + RawWriter::sideRoom(eb));
            raw.put(firstItem ? "{\"status\":\"" : ",{\"status\":\"");
            firstItem = false;
            raw.put(rowStatusName(row.status));
            raw.put("\",\"a\":");
            ea ? raw.string(rowKeyA(row, in.a)) : raw.null();
            raw.put(",\"b\":");
            eb ? raw.string(rowKeyB(row, in.b)) : raw.null();
            raw.put(",\"reason\":");
            row.reason != Reason::None ? raw.string(reason) : raw.null();
            raw.put(",\"explanation\":");
            !row.explanation.empty() ? raw.string(row.explanation) : raw.null();
            raw.put(",\"rule\":");
            row.rule >= 0 ? raw.number(row.rule) : raw.null();
            raw.put(",\"partner\":");
            row.partner >= 0 ? raw.number(row.partner) : raw.null();
            raw.put(",\"suggestion\":");
            row.suggestion >= 0 ? raw.number(row.suggestion) : raw.null();
            raw.shape(ea, ",\"a_shape\":");
            raw.shape(eb, ",\"b_shape\":");
            raw.dtype(ea, ",\"a_dtype\":");
            raw.dtype(eb, ",\"b_dtype\":");
            if (in.values) {
                const size_t index = static_cast<size_t>(&row - in.diff.rows.data());
                const values::ValueComparison* c = index < in.values->size() && (*in.values)[index].compared ? &(*in.values)[index] : nullptr;
                raw.makeRoom(160);
                std::string fields;
                fields += c ? (c->equalBytes ? ",\"equal_bytes\":true" : ",\"equal_bytes\":false") : ",\"equal_bytes\":null";
                fields += ",\"max_abs_diff\":";
                appendOptionalJson(fields, c ? c->maxAbsDiff : std::nullopt);
                fields += ",\"max_rel_diff\":";
                appendOptionalJson(fields, c ? c->maxRelDiff : std::nullopt);
                fields += ",\"cosine\":";
                appendOptionalJson(fields, c ? c->cosine : std::nullopt);
                raw.put(fields);
                if (c && !c->note.empty()) { // how a quantized side's values were made
                    raw.makeRoom(24 + RawWriter::stringRoom(c->note));
                    raw.put(",\"value_note\":");
                    raw.string(c->note);
                }
            }
            raw.put('}');
            raw.drainAt(kPiece, sink);
        }
        raw.makeRoom(16);
        raw.put("],\"folded\":[");
        firstItem = true;
        for (const FoldedRow& f : ctx.folded) {
            const std::string_view reason = reasonName(f.reason);
            raw.makeRoom(120 + RawWriter::stringRoom(f.name) + RawWriter::stringRoom(f.partnerName) + RawWriter::stringRoom(reason));
            raw.put(firstItem ? "{\"name\":" : ",{\"name\":");
            firstItem = false;
            raw.string(f.name);
            raw.put(",\"status\":\"");
            raw.put(rowStatusName(f.status));
            raw.put("\",\"reason\":");
            f.reason != Reason::None ? raw.string(reason) : raw.null();
            raw.put(",\"count\":");
            raw.number(static_cast<int64_t>(f.rows.size()));
            raw.put(",\"partner_name\":");
            !f.partnerName.empty() ? raw.string(f.partnerName) : raw.null();
            raw.put(",\"partner_count\":");
            raw.number(static_cast<int64_t>(f.partnerRows.size()));
            raw.put('}');
            raw.drainAt(kPiece, sink);
        }
    }
    out += "],\"rule_issues\":";
    {
        JsonWriter w;
        w.beginArray();
        for (const RuleIssue& issue : *ctx.issues) {
            w.beginObject();
            w.field("kind", ruleIssueKindName(issue.kind));
            w.field("severity", severityName(issue.severity));
            w.key("rule");
            issue.rule >= 0 ? w.integer(issue.rule) : w.null();
            w.field("message", issue.message);
            w.key("examples");
            writeStringsJson(w, issue.examples);
            w.endObject();
        }
        w.endArray();
        append(w);
    }
    if (in.contentMatches) {
        out += ",\"content_matches\":";
        JsonWriter w;
        w.beginArray();
        for (const values::ContentMatch& m : *in.contentMatches) {
            w.beginObject();
            w.field("a", in.a.entries[m.a].name);
            w.key("b");
            w.beginArray();
            for (size_t b : m.b)
                w.string(in.b.entries[b].name);
            w.endArray();
            w.endObject();
        }
        w.endArray();
        append(w);
    }
    out += ",\"suggestions\":";
    {
        JsonWriter w;
        w.beginArray();
        for (const Suggestion& s : ctx.suggestions()) {
            w.beginObject();
            w.field("kind", suggestionKindName(s.kind));
            w.field("title", s.title);
            w.field("resolves", static_cast<uint64_t>(s.resolves));
            w.field("collisions", static_cast<uint64_t>(s.collisions));
            w.key("rules");
            w.beginArray();
            for (const auto& r : s.rules)
                writeRuleJson(w, r);
            w.endArray();
            w.key("examples");
            writeStringsJson(w, s.examples);
            w.endObject();
        }
        w.endArray();
        append(w);
    }
    out += "}\n";
    sink(out);
}

// ---- text ------------------------------------------------------------------------------------------------

std::string diffToText(const DiffReportInput& in)
{
    const ReportContext ctx(in, true);
    const DiffSummary& s = in.diff.summary;
    std::string out;
    out.reserve(4096);

    std::vector<RowStatus> all(kAllRowStatuses.begin(), kAllRowStatuses.end());
    std::string counts = countsText(s, all);
    out += counts.empty() ? std::string("no keys on either side") : counts;
    out += " (";
    appendNumber(out, static_cast<uint64_t>(totalRows(s)));
    out += " rows)\n";
    out += "A (checkpoint): ";
    appendTerminalText(out, in.a.path);
    out += "  [";
    appendTerminalText(out, sourceLine(in.a));
    out += "]\n";
    out += "B (model):      ";
    appendTerminalText(out, in.b.path);
    out += "  [";
    appendTerminalText(out, sourceLine(in.b));
    out += "]\n";
    if (!in.rules.rules.empty()) {
        out += "rules: ";
        appendNumber(out, static_cast<uint64_t>(in.rules.rules.size()));
        out += in.rules.mode == RuleMode::FirstMatch ? " (first match)\n" : " (chained)\n";
    }

    const size_t pairedMissing = ctx.pairedRows(RowStatus::Missing), pairedUnexpected = ctx.pairedRows(RowStatus::Unexpected);
    if (!ctx.pairs.empty()) {
        out += "\npairs (";
        appendNumber(out, static_cast<uint64_t>(pairedUnexpected + pairedMissing));
        out += " rows: the checkpoint's unexpected keys  ->  the model's missing keys they correspond to; both fail the load until renamed)\n";
        for (const FoldedRow* group : ctx.pairs) {
            const FoldedRow& f = *group;
            const auto [nameA, nameB] = ctx.pairNames(f);
            out += "  ";
            appendTerminalText(out, nameA);
            out += "  ->  ";
            appendTerminalText(out, nameB);
            if (const std::string count = ctx.lineCount(f); !count.empty()) {
                out += "  ";
                out += count;
            }
            if (f.reason != Reason::None) {
                out += "  [";
                out += reasonName(f.reason);
                out += ']';
            }
            if (const size_t n = ctx.suggestionNumber(f)) {
                out += "  pending: suggestion ";
                appendNumber(out, static_cast<uint64_t>(n));
            }
            out += '\n';
            const std::string& why = ctx.lineExplanation(f);
            if (!why.empty()) {
                out += "      ";
                appendTerminalText(out, why);
                out += '\n';
            }
        }
    }

    RowStatus current = RowStatus::Match;
    for (const FoldedRow* group : ctx.differences) {
        const FoldedRow& f = *group;
        if (f.status != current) {
            current = f.status;
            out += '\n';
            out += rowStatusName(f.status);
            out += " (";
            appendNumber(out, static_cast<uint64_t>(s.count(f.status)));
            out += rowFails(f.status, in.failOnDtype) ? ", fails the load" : "";
            const size_t paired = f.status == RowStatus::Missing ? pairedMissing : f.status == RowStatus::Unexpected ? pairedUnexpected : 0;
            if (paired) {
                out += "; ";
                appendNumber(out, static_cast<uint64_t>(paired));
                out += " of them in the pairs above";
            }
            out += ")\n";
        }
        const DiffRow& first = in.diff.rows[f.rows.front()];
        out += "  ";
        appendTerminalText(out, f.name);
        if (f.rows.size() > 1) {
            out += "  (";
            appendNumber(out, static_cast<uint64_t>(f.rows.size()));
            out += " rows)";
        }
        if (f.reason != Reason::None) {
            out += "  [";
            out += reasonName(f.reason);
            out += ']';
        }
        out += '\n';
        const Entry* ea = rowEntryA(first, in.a);
        const Entry* eb = rowEntryB(first, in.b);
        if ((f.status == RowStatus::ShapeMismatch || f.status == RowStatus::DtypeMismatch || f.status == RowStatus::CopyError) && ea && eb) {
            out += "      checkpoint ";
            appendShapeAndDtype(out, *ea);
            out += ", model ";
            appendShapeAndDtype(out, *eb);
            out += '\n';
        }
        if (!first.explanation.empty()) {
            out += "      ";
            if (f.rows.size() > 1) {
                out += "e.g. ";
                appendTerminalText(out, ctx.name(first));
                out += ": ";
            }
            appendTerminalText(out, first.explanation);
            out += '\n';
        }
    }

    if (!ctx.issues->empty()) {
        out += "\nrule issues (";
        appendNumber(out, static_cast<uint64_t>(ctx.issues->size()));
        out += ")\n";
        for (const RuleIssue& issue : *ctx.issues) {
            out += "  ";
            out += severityName(issue.severity);
            out += "  ";
            out += ruleIssueKindName(issue.kind);
            out += ": ";
            appendTerminalText(out, issue.message);
            out += '\n';
            for (size_t k = 0; k < issue.examples.size() && k < kTextExamples; ++k) {
                out += "      ";
                appendTerminalText(out, issue.examples[k]);
                out += '\n';
            }
        }
    }

    if (in.values) {
        const ValueSummary v = summariseValues(in);
        out += "\nvalues: ";
        out += valueCounts(v);
        out += '\n';
        for (const ValueLine& l : v.differ) {
            out += "  ";
            appendTerminalText(out, ctx.name(*l.row));
            out += "  ";
            out += valueNumbers(*l.cmp);
            out += '\n';
        }
    }
    if (in.contentMatches && !in.contentMatches->empty()) {
        out += "\nsame bytes under other names (";
        appendNumber(out, static_cast<uint64_t>(in.contentMatches->size()));
        out += ")\n";
        for (const values::ContentMatch& m : *in.contentMatches) {
            out += "  ";
            appendTerminalText(out, in.a.entries[m.a].name);
            out += "  =  ";
            for (size_t k = 0; k < m.b.size(); ++k) {
                if (k)
                    out += ", ";
                appendTerminalText(out, in.b.entries[m.b[k]].name);
            }
            out += m.b.size() > 1 ? "  (ambiguous: B holds duplicates)\n" : "\n";
        }
    }

    if (!ctx.suggestions().empty()) {
        out += "\nsuggestions (";
        appendNumber(out, static_cast<uint64_t>(ctx.suggestions().size()));
        out += ")\n";
        for (const Suggestion& sg : ctx.suggestions()) {
            out += "  ";
            appendTerminalText(out, sg.title);
            out += '\n';
            for (const Rule& r : sg.rules) {
                out += "      ";
                out += r.drop ? "drop " : "";
                appendTerminalText(out, r.pattern);
                if (!r.drop) {
                    out += "  ->  ";
                    appendTerminalText(out, r.replacement);
                }
                out += '\n';
            }
        }
    }

    if (auto found = sourceFindings(in); !found.empty()) {
        out += "\nsource findings:\n";
        for (const auto& f : found) {
            out += "  ";
            out += f.side;
            out += " [";
            out += severityName(f.finding->severity);
            out += "] ";
            appendTerminalText(out, f.finding->message);
            out += '\n';
        }
    }
    out += '\n';
    appendTerminalText(out, verdictWithSafety(in)); // names what would run, from the pickle
    out += '\n';
    return out;
}

// ---- Markdown --------------------------------------------------------------------------------------------

std::string diffToMarkdown(const DiffReportInput& in)
{
    const ReportContext ctx(in, true);
    const DiffSummary& s = in.diff.summary;
    std::string out;
    out.reserve(4096);
    out += "# StateLens diff\n\n";
    out += "| side | path | source |\n|---|---|---|\n";
    for (int side = 0; side < 2; ++side) {
        const Source& src = side == 0 ? in.a : in.b;
        out += side == 0 ? "| A (checkpoint) | " : "| B (model) | ";
        appendMarkdownCode(out, src.path);
        out += " | ";
        appendMarkdownText(out, sourceLine(src));
        out += " |\n";
    }
    out += "\n**";
    appendMarkdownText(out, verdictWithSafety(in));
    out += "**\n\n";
    if (auto found = sourceFindings(in); !found.empty()) {
        out += "## Source findings\n\n| side | severity | finding |\n|---|---|---|\n";
        for (const auto& f : found) {
            out += "| ";
            out += f.side;
            out += " | ";
            out += severityName(f.finding->severity);
            out += " | ";
            appendMarkdownText(out, f.finding->message);
            out += " |\n";
        }
        out += '\n';
    }

    out += "| status | rows |\n|---|---:|\n";
    for (RowStatus st : kAllRowStatuses) {
        out += "| ";
        out += rowStatusName(st);
        out += " | ";
        appendNumber(out, static_cast<uint64_t>(s.count(st)));
        out += " |\n";
    }

    if (!ctx.pairs.empty()) {
        out += "\n## Pairs\n\nThe checkpoint's unexpected keys beside the model's missing keys they correspond to.\n\n";
        out += "| checkpoint (A) | model (B) | rows | reason | pending | explanation |\n|---|---|---:|---|---|---|\n";
        for (const FoldedRow* group : ctx.pairs) {
            const FoldedRow& f = *group;
            const auto [nameA, nameB] = ctx.pairNames(f);
            out += "| ";
            appendMarkdownCode(out, nameA);
            out += " | ";
            appendMarkdownCode(out, nameB);
            out += " | ";
            appendNumber(out, static_cast<uint64_t>(f.rows.size() + f.partnerRows.size()));
            out += " | ";
            out += reasonName(f.reason);
            out += " | ";
            if (const size_t n = ctx.suggestionNumber(f)) {
                out += "suggestion ";
                appendNumber(out, static_cast<uint64_t>(n));
            }
            out += " | ";
            appendMarkdownText(out, ctx.lineExplanation(f));
            out += " |\n";
        }
    }

    if (!ctx.differences.empty()) {
        out += "\n## Differences\n\n";
        out += "| status | name | rows | reason | explanation |\n|---|---|---:|---|---|\n";
        for (const FoldedRow* group : ctx.differences) {
            const FoldedRow& f = *group;
            const DiffRow& first = in.diff.rows[f.rows.front()];
            out += "| ";
            out += rowStatusName(f.status);
            out += " | ";
            appendMarkdownCode(out, f.name);
            out += " | ";
            appendNumber(out, static_cast<uint64_t>(f.rows.size()));
            out += " | ";
            out += reasonName(f.reason);
            out += " | ";
            if (f.rows.size() > 1 && !first.explanation.empty()) {
                out += "e.g. ";
                appendMarkdownCode(out, ctx.name(first));
                out += ": ";
            }
            appendMarkdownText(out, rowMessage(first, in.a, in.b));
            out += " |\n";
        }
    }

    if (!in.rules.rules.empty()) {
        out += "\n## Rules\n\n| # | pattern | replacement | note |\n|---:|---|---|---|\n";
        for (size_t i = 0; i < in.rules.rules.size(); ++i) {
            const Rule& r = in.rules.rules[i];
            out += "| ";
            appendNumber(out, static_cast<uint64_t>(i + 1));
            out += " | ";
            appendMarkdownCode(out, r.pattern);
            out += " | ";
            if (r.drop)
                out += "(drop)";
            else if (r.replacement.empty())
                out += "(empty)";
            else
                appendMarkdownCode(out, r.replacement);
            out += " | ";
            if (!r.enabled)
                out += "(disabled) ";
            appendMarkdownText(out, r.note);
            out += " |\n";
        }
    }

    if (!ctx.issues->empty()) {
        out += "\n## Rule issues\n\n| severity | kind | rule | message |\n|---|---|---:|---|\n";
        for (const RuleIssue& issue : *ctx.issues) {
            out += "| ";
            out += severityName(issue.severity);
            out += " | ";
            out += ruleIssueKindName(issue.kind);
            out += " | ";
            if (issue.rule >= 0)
                appendNumber(out, static_cast<int64_t>(issue.rule + 1));
            out += " | ";
            appendMarkdownText(out, issue.message);
            out += " |\n";
        }
    }

    if (in.values) {
        const ValueSummary v = summariseValues(in);
        out += "\n## Values\n\n";
        out += valueCounts(v);
        out += ".\n";
        if (!v.differ.empty()) {
            out += "\n| name | max abs diff | max rel diff | cosine |\n|---|---:|---:|---:|\n";
            for (const ValueLine& l : v.differ) {
                out += "| ";
                appendMarkdownCode(out, ctx.name(*l.row));
                for (const auto& x : { l.cmp->maxAbsDiff, l.cmp->maxRelDiff, l.cmp->cosine }) {
                    out += " | ";
                    x ? appendDouble(out, *x) : void(out += "-");
                }
                out += " |\n";
            }
        }
    }
    if (in.contentMatches && !in.contentMatches->empty()) {
        out += "\n## Same bytes under other names\n\n| checkpoint (A) | model (B) |\n|---|---|\n";
        for (const values::ContentMatch& m : *in.contentMatches) {
            out += "| ";
            appendMarkdownCode(out, in.a.entries[m.a].name);
            out += " | ";
            for (size_t k = 0; k < m.b.size(); ++k) {
                if (k)
                    out += "<br>";
                appendMarkdownCode(out, in.b.entries[m.b[k]].name);
            }
            out += " |\n";
        }
    }

    if (!ctx.suggestions().empty()) {
        out += "\n## Suggestions\n\n| resolves | suggestion | rules |\n|---:|---|---|\n";
        for (const Suggestion& sg : ctx.suggestions()) {
            out += "| ";
            appendNumber(out, static_cast<uint64_t>(sg.resolves));
            out += " | ";
            appendMarkdownText(out, sg.title);
            out += " | ";
            for (size_t k = 0; k < sg.rules.size(); ++k) {
                if (k)
                    out += "<br>";
                appendMarkdownCode(out, sg.rules[k].pattern);
                out += sg.rules[k].drop ? " (drop)" : " → ";
                if (!sg.rules[k].drop)
                    appendMarkdownCode(out, sg.rules[k].replacement);
            }
            out += " |\n";
        }
    }
    return out;
}

// ---- CSV -------------------------------------------------------------------------------------------------

std::string diffToCsv(const DiffReportInput& in)
{
    const ReportContext ctx(in, false);
    std::string out;
    out.reserve(ctx.estimate(90, 256));
    out += in.values ? "status,a,b,reason,rule,a_shape,b_shape,a_dtype,b_dtype,explanation,equal_bytes,max_abs_diff,max_rel_diff,cosine\r\n"
                     : "status,a,b,reason,rule,a_shape,b_shape,a_dtype,b_dtype,explanation\r\n";
    std::string shape;
    for (const DiffRow& row : in.diff.rows) {
        const Entry* ea = rowEntryA(row, in.a);
        const Entry* eb = rowEntryB(row, in.b);
        out += rowStatusName(row.status);
        out += ',';
        if (ea)
            appendCsvCell(out, rowKeyA(row, in.a));
        out += ',';
        if (eb)
            appendCsvCell(out, rowKeyB(row, in.b));
        out += ',';
        out += reasonName(row.reason);
        out += ',';
        if (row.rule >= 0)
            appendNumber(out, static_cast<int64_t>(row.rule));
        for (const Entry* e : { ea, eb }) {
            out += ',';
            if (e && e->shapeKnown) {
                shape.clear();
                appendShape(shape, e->shape);
                appendCsvCell(out, shape);
            }
        }
        for (const Entry* e : { ea, eb }) {
            out += ',';
            if (e)
                out += entryDtypeName(*e);
        }
        out += ',';
        appendCsvCell(out, row.explanation);
        if (in.values) {
            const size_t index = static_cast<size_t>(&row - in.diff.rows.data());
            const values::ValueComparison* c = index < in.values->size() && (*in.values)[index].compared ? &(*in.values)[index] : nullptr;
            out += ',';
            if (c)
                out += c->equalBytes ? "true" : "false";
            for (const auto& x : { c ? c->maxAbsDiff : std::nullopt, c ? c->maxRelDiff : std::nullopt, c ? c->cosine : std::nullopt }) {
                out += ',';
                if (x)
                    appendDouble(out, *x);
            }
        }
        out += "\r\n";
    }
    return out;
}

// ---- HTML ------------------------------------------------------------------------------------------------

namespace {

// The page's only style and script. Their SHA-256 (base64) is in the Content-Security-Policy, so a browser
// runs these two and nothing else: change either and update its hash (tst_diff_report fails with the hash
// it expects).
// Both avoid '<' and '&' so the page stays well-formed XML.
constexpr std::string_view kHtmlStyle = R"CSS(
:root { color-scheme: light dark; --bg: #ffffff; --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --panel: #f6f8fa;
  --match: #1a7f37; --renamed: #0969da; --shape_mismatch: #cf222e; --dtype_mismatch: #9a6700;
  --missing: #bc4c00; --unexpected: #8250df; --dropped: #6e7781; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #0d1117; --fg: #e6edf3; --muted: #9198a1; --line: #3d444d; --panel: #151b23;
    --match: #3fb950; --renamed: #4493f8; --shape_mismatch: #f85149; --dtype_mismatch: #d29922;
    --missing: #db6d28; --unexpected: #ab7df8; --dropped: #9198a1; }
}
body { background: var(--bg); color: var(--fg); font: 14px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 80em; padding: 0 1em; }
h1 { font-size: 1.4em; margin: 0 0 0.4em; }
h2 { font-size: 1.15em; margin: 1.4em 0 0.5em; }
code, .name, td.mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; word-break: break-all; }
table { border-collapse: collapse; margin: 0.3em 0; }
th, td { border: 1px solid var(--line); padding: 0.2em 0.5em; text-align: left; vertical-align: top; }
th { background: var(--panel); }
.verdict { font-weight: 600; padding: 0.5em 0.8em; border-left: 4px solid var(--match); background: var(--panel); }
.verdict.fail { border-left-color: var(--shape_mismatch); }
.controls { display: flex; flex-wrap: wrap; gap: 0.4em 1em; align-items: center; margin: 1em 0; }
.controls label { white-space: nowrap; }
#filter { flex: 1 1 16em; padding: 0.3em 0.5em; background: var(--bg); color: var(--fg); border: 1px solid var(--line); border-radius: 4px; }
.badge { display: inline-block; min-width: 8.5em; font-weight: 600; }
details.group { border-bottom: 1px solid var(--line); padding: 0.25em 0; }
details.group summary { cursor: pointer; }
details.group table { margin-left: 1.5em; font-size: 0.92em; }
.count, .reason, .why, .more { color: var(--muted); }
.why { display: block; margin-left: 10.2em; }
.st-match { color: var(--match); }
.st-renamed { color: var(--renamed); }
.st-shape_mismatch { color: var(--shape_mismatch); }
.st-dtype_mismatch { color: var(--dtype_mismatch); }
.st-missing { color: var(--missing); }
.st-unexpected { color: var(--unexpected); }
.st-dropped { color: var(--dropped); }
.sev-danger { color: var(--shape_mismatch); font-weight: 600; }
.sev-warning { color: var(--dtype_mismatch); }
)CSS";

constexpr std::string_view kHtmlScript = R"JS(
(function () {
  "use strict";
  var filter = document.getElementById("filter");
  var toggles = Array.prototype.slice.call(document.querySelectorAll("input[data-status]"));
  var groups = Array.prototype.slice.call(document.querySelectorAll("details.group"));
  var texts = null;
  function apply() {
    var query = filter.value.trim().toLowerCase();
    if (query !== "" ? texts === null : false) {
      texts = groups.map(function (g) { return g.textContent.toLowerCase(); });
    }
    var shown = {};
    toggles.forEach(function (t) { shown[t.getAttribute("data-status")] = t.checked; });
    groups.forEach(function (g, i) {
      var visible = shown[g.getAttribute("data-status")] === true;
      if (visible ? query !== "" : false) { visible = texts[i].indexOf(query) !== -1; }
      g.hidden = !visible;
    });
  }
  filter.addEventListener("input", apply);
  toggles.forEach(function (t) { t.addEventListener("change", apply); });
  apply();
})();
)JS";

// base64(SHA-256) of kHtmlStyle and kHtmlScript.
constexpr std::string_view kHtmlStyleHash = "sha256-KbvrHXNTsL5zQ6Ouk1gUd3hIDL98no4bALiBXi1JFrE=";
constexpr std::string_view kHtmlScriptHash = "sha256-rAWJHEtfG/BA1vK04Hq7Z3YVkCbvOF2Ub9yBwzBEZEQ=";

void appendSideCells(std::string& out, const Entry* e)
{
    out += "<td class=\"mono\">";
    if (e && e->shapeKnown)
        appendShape(out, e->shape);
    else if (e)
        out += '?';
    out += "</td><td>";
    if (e)
        out += entryDtypeName(*e);
    out += "</td>";
}

} // namespace

std::string diffToHtml(const DiffReportInput& in)
{
    const ReportContext ctx(in, true);
    const DiffSummary& s = in.diff.summary;
    size_t listedRows = 0;
    for (const FoldedRow& f : ctx.folded)
        listedRows += std::min(f.rows.size(), kHtmlRowsPerGroup);
    std::string out;
    out.reserve(16384 + listedRows * 400 + ctx.folded.size() * 400);

    out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n";
    out += "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src '";
    out += kHtmlStyleHash;
    out += "'; script-src '";
    out += kHtmlScriptHash;
    out += "'; base-uri 'none'; form-action 'none'\"/>\n";
    out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n";
    out += "<meta name=\"generator\" content=\"StateLens\"/>\n<title>StateLens diff: ";
    appendXmlText(out, in.a.path);
    out += " vs ";
    appendXmlText(out, in.b.path);
    out += "</title>\n<style>";
    out += kHtmlStyle;
    out += "</style>\n</head>\n<body>\n<h1>StateLens diff</h1>\n";

    out += "<table class=\"sources\">\n";
    for (int side = 0; side < 2; ++side) {
        const Source& src = side == 0 ? in.a : in.b;
        out += side == 0 ? "<tr><th>A (checkpoint)</th><td><code>" : "<tr><th>B (model)</th><td><code>";
        appendXmlText(out, src.path);
        out += "</code></td><td>";
        appendXmlText(out, sourceLine(src));
        out += "</td></tr>\n";
    }
    out += "</table>\n";
    const bool dangerous = !in.a.weightsOnly.executes.empty() || !in.b.weightsOnly.executes.empty();
    out += ctx.loadSucceeds() && !dangerous ? "<p class=\"verdict\">" : "<p class=\"verdict fail\">";
    appendXmlText(out, verdictWithSafety(in));
    out += "</p>\n";
    if (auto found = sourceFindings(in); !found.empty()) {
        out += "<h2>Source findings</h2>\n<table class=\"sources\">\n";
        for (const auto& f : found) {
            out += "<tr><th>";
            out += f.side;
            out += "</th><td>";
            out += severityName(f.finding->severity);
            out += "</td><td>";
            appendXmlText(out, f.finding->message);
            out += "</td></tr>\n";
        }
        out += "</table>\n";
    }

    // Status toggles with the counts; matches start hidden (the script applies this; without it all show).
    out += "<div class=\"controls\">\n";
    for (RowStatus st : kAllRowStatuses) {
        out += "<label class=\"st-";
        out += rowStatusName(st);
        out += "\"><input type=\"checkbox\" data-status=\"";
        out += rowStatusName(st);
        out += st == RowStatus::Match ? "\"/> " : "\" checked=\"checked\"/> ";
        out += rowStatusName(st);
        out += " <b class=\"summary-count\" data-status=\"";
        out += rowStatusName(st);
        out += "\">";
        appendNumber(out, static_cast<uint64_t>(s.count(st)));
        out += "</b></label>\n";
    }
    out += "<input id=\"filter\" type=\"search\" placeholder=\"filter by name or text\" aria-label=\"filter\"/>\n</div>\n";

    // Pairs first (the unexpected key beside the missing one it corresponds to), then the other differences
    // (failures first), then the matches.
    std::vector<const FoldedRow*> groups = ctx.pairs;
    groups.insert(groups.end(), ctx.differences.begin(), ctx.differences.end());
    for (const FoldedRow& f : ctx.folded)
        if (f.status == RowStatus::Match)
            groups.push_back(&f);
    out += "<div id=\"rows\">\n";
    for (const FoldedRow* group : groups) {
        const FoldedRow& f = *group;
        const DiffRow& first = in.diff.rows[f.rows.front()];
        const std::string_view status = rowStatusName(f.status);
        const bool paired = !f.partnerName.empty();
        out += "<details class=\"group\" data-status=\"";
        out += status;
        out += "\"><summary><span class=\"badge st-";
        out += status;
        out += "\">";
        out += paired ? std::string_view("pair") : status;
        out += "</span> <span class=\"name\">";
        if (paired) {
            const auto [nameA, nameB] = ctx.pairNames(f);
            appendXmlText(out, nameA);
            out += "</span> \u2192 <span class=\"name\">";
            appendXmlText(out, nameB);
        } else {
            appendXmlText(out, f.name);
        }
        out += "</span>";
        if (const std::string count = paired ? ctx.lineCount(f) : std::string(); !count.empty()) {
            out += " <span class=\"count\">";
            out += count;
            out += "</span>";
        } else if (!paired && f.rows.size() > 1) {
            out += " <span class=\"count\">(";
            appendNumber(out, static_cast<uint64_t>(f.rows.size()));
            out += " rows)</span>";
        }
        if (const size_t n = ctx.suggestionNumber(f)) {
            out += " <span class=\"reason\">pending: suggestion ";
            appendNumber(out, static_cast<uint64_t>(n));
            out += "</span>";
        }
        if (f.reason != Reason::None) {
            out += " <span class=\"reason\">";
            out += reasonName(f.reason);
            out += "</span>";
        }
        if (f.status != RowStatus::Match) {
            out += "<span class=\"why\">";
            appendXml(out, rowMessage(first, in.a, in.b), false, true);
            out += "</span>";
        }
        out += "</summary>\n<table><thead><tr><th>A</th><th>B</th><th>A shape</th><th>A dtype</th><th>B shape</th><th>B dtype</th>"
               "<th>rule</th><th>explanation</th></tr></thead><tbody>\n";
        // Table lines: a one-to-one pair on one line; a many-to-one line's head, then each of its many.
        std::vector<std::pair<size_t, size_t>> items; // (row for A's cells, row for B's cells)
        for (size_t head : f.rows) {
            const size_t count = ctx.lines.count(head);
            if (count == 1)
                items.push_back({ ctx.lines.rowA(in.diff, head), ctx.lines.rowB(in.diff, head) });
            else
                items.push_back({ head, head });
            if (count > 1)
                for (uint32_t r : ctx.lines.on(head))
                    items.push_back({ r, r });
        }
        const size_t shown = std::min(items.size(), kHtmlRowsPerGroup);
        for (size_t k = 0; k < shown; ++k) {
            const DiffRow& rowA = in.diff.rows[items[k].first];
            const DiffRow& row = in.diff.rows[items[k].second];
            const Entry* ea = rowEntryA(rowA, in.a);
            const Entry* eb = rowEntryB(row, in.b);
            out += "<tr><td class=\"mono\">";
            if (ea)
                appendXmlText(out, rowKeyA(rowA, in.a));
            out += "</td><td class=\"mono\">";
            if (eb)
                appendXmlText(out, rowKeyB(row, in.b));
            out += "</td>";
            appendSideCells(out, ea);
            appendSideCells(out, eb);
            out += "<td>";
            if (rowA.rule >= 0)
                appendNumber(out, static_cast<int64_t>(rowA.rule + 1));
            out += "</td><td>";
            appendXml(out, (rowA.explanation.empty() ? row : rowA).explanation, false, true); // A's side reads first
            out += "</td></tr>\n";
        }
        out += "</tbody></table>\n";
        if (shown < items.size()) {
            out += "<p class=\"more\">";
            appendNumber(out, static_cast<uint64_t>(items.size() - shown));
            out += " more rows: the JSON and CSV reports list every row.</p>\n";
        }
        out += "</details>\n";
    }
    out += "</div>\n";

    if (!in.rules.rules.empty()) {
        out += "<h2>Rules</h2>\n<table><thead><tr><th>#</th><th>pattern</th><th>replacement</th><th>note</th></tr></thead><tbody>\n";
        for (size_t i = 0; i < in.rules.rules.size(); ++i) {
            const Rule& r = in.rules.rules[i];
            out += "<tr><td>";
            appendNumber(out, static_cast<uint64_t>(i + 1));
            out += "</td><td><code>";
            appendXmlText(out, r.pattern);
            out += "</code></td><td>";
            if (r.drop) {
                out += "(drop)";
            } else {
                out += "<code>";
                appendXmlText(out, r.replacement);
                out += "</code>";
            }
            out += "</td><td>";
            if (!r.enabled)
                out += "(disabled) ";
            appendXml(out, r.note, false, true);
            out += "</td></tr>\n";
        }
        out += "</tbody></table>\n";
    }

    if (!ctx.issues->empty()) {
        out += "<h2>Rule issues</h2>\n<table><thead><tr><th>severity</th><th>kind</th><th>rule</th><th>message</th></tr></thead><tbody>\n";
        for (const RuleIssue& issue : *ctx.issues) {
            out += "<tr><td class=\"sev-";
            out += severityName(issue.severity);
            out += "\">";
            out += severityName(issue.severity);
            out += "</td><td>";
            out += ruleIssueKindName(issue.kind);
            out += "</td><td>";
            if (issue.rule >= 0)
                appendNumber(out, static_cast<int64_t>(issue.rule + 1));
            out += "</td><td>";
            appendXml(out, issue.message, false, true);
            for (const auto& ex : issue.examples) {
                out += "<br/><code>";
                appendXmlText(out, ex);
                out += "</code>";
            }
            out += "</td></tr>\n";
        }
        out += "</tbody></table>\n";
    }

    if (in.values) {
        const ValueSummary v = summariseValues(in);
        out += "<h2>Values</h2>\n<p>";
        out += valueCounts(v);
        out += ".</p>\n";
        if (!v.differ.empty()) {
            out += "<table><thead><tr><th>name</th><th>max abs diff</th><th>max rel diff</th><th>cosine</th></tr></thead><tbody>\n";
            for (const ValueLine& l : v.differ) {
                out += "<tr><td><code>";
                appendXmlText(out, ctx.name(*l.row));
                out += "</code></td>";
                for (const auto& x : { l.cmp->maxAbsDiff, l.cmp->maxRelDiff, l.cmp->cosine }) {
                    out += "<td>";
                    x ? appendDouble(out, *x) : void(out += "-");
                    out += "</td>";
                }
                out += "</tr>\n";
            }
            out += "</tbody></table>\n";
        }
    }
    if (in.contentMatches && !in.contentMatches->empty()) {
        out += "<h2>Same bytes under other names</h2>\n<table><thead><tr><th>checkpoint (A)</th><th>model (B)</th></tr></thead><tbody>\n";
        for (const values::ContentMatch& m : *in.contentMatches) {
            out += "<tr><td><code>";
            appendXmlText(out, in.a.entries[m.a].name);
            out += "</code></td><td>";
            for (size_t k = 0; k < m.b.size(); ++k) {
                out += k ? "<br/><code>" : "<code>";
                appendXmlText(out, in.b.entries[m.b[k]].name);
                out += "</code>";
            }
            out += "</td></tr>\n";
        }
        out += "</tbody></table>\n";
    }

    if (!ctx.suggestions().empty()) {
        out += "<h2>Suggestions</h2>\n<table><thead><tr><th>resolves</th><th>suggestion</th><th>rules</th></tr></thead><tbody>\n";
        for (const Suggestion& sg : ctx.suggestions()) {
            out += "<tr><td>";
            appendNumber(out, static_cast<uint64_t>(sg.resolves));
            out += "</td><td>";
            appendXml(out, sg.title, false, true);
            out += "</td><td>";
            for (size_t k = 0; k < sg.rules.size(); ++k) {
                if (k)
                    out += "<br/>";
                out += "<code>";
                appendXmlText(out, sg.rules[k].pattern);
                out += "</code>";
                if (sg.rules[k].drop) {
                    out += " (drop)";
                } else {
                    out += " → <code>";
                    appendXmlText(out, sg.rules[k].replacement);
                    out += "</code>";
                }
            }
            out += "</td></tr>\n";
        }
        out += "</tbody></table>\n";
    }

    out += "<script>";
    out += kHtmlScript;
    out += "</script>\n</body>\n</html>\n";
    return out;
}

// ---- JUnit XML -------------------------------------------------------------------------------------------

std::string diffToJunit(const DiffReportInput& in)
{
    const ReportContext ctx(in, false);
    const DiffSummary& s = in.diff.summary;
    const bool loadOk = ctx.loadSucceeds();

    size_t rowTests = 1; // the strict load as a whole
    size_t rowFailures = loadOk ? 0 : 1;
    // One case per source for its load safety: a failure when it holds danger findings.
    const auto dangers = sourceFindings(in, false);
    rowTests += 2;
    for (int side = 0; side < 2; ++side)
        rowFailures += (side == 0 ? in.a : in.b).countFindings(Severity::Danger) ? 1 : 0;
    for (RowStatus st : kAllRowStatuses) {
        if (st == RowStatus::Match)
            continue;
        rowTests += s.count(st);
        if (rowFails(st, in.failOnDtype))
            rowFailures += s.count(st);
    }
    size_t ruleFailures = 0;
    for (const RuleIssue& issue : *ctx.issues)
        ruleFailures += issue.severity == Severity::Danger ? 1 : 0;
    const size_t ruleTests = ctx.issues->size();
    // With --values, a suite of passing cases (one per pair whose values differ) carries the numbers.
    const ValueSummary values = summariseValues(in);
    const size_t valueTests = values.differ.size();

    std::string out;
    out.reserve(ctx.estimate(360));
    auto counts = [&](size_t tests, size_t failures) {
        out += " tests=\"";
        appendNumber(out, static_cast<uint64_t>(tests));
        out += "\" failures=\"";
        appendNumber(out, static_cast<uint64_t>(failures));
        out += "\" errors=\"0\" skipped=\"0\"";
    };
    out += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"statelens diff\"";
    counts(rowTests + ruleTests + valueTests, rowFailures + ruleFailures);
    out += ">\n<testsuite name=\"load_state_dict\"";
    counts(rowTests, rowFailures);
    out += ">\n<properties>\n<property name=\"checkpoint\" value=\"";
    appendXmlAttr(out, in.a.path);
    out += "\"/>\n<property name=\"model\" value=\"";
    appendXmlAttr(out, in.b.path);
    out += "\"/>\n<property name=\"fail_on_dtype\" value=\"";
    out += in.failOnDtype ? "true" : "false";
    out += "\"/>\n</properties>\n";

    const std::string verdict = verdictWithSafety(in);
    for (int side = 0; side < 2; ++side) {
        const char* label = side == 0 ? "A (checkpoint)" : "B (model)";
        out += "<testcase classname=\"source_findings\" name=\"";
        out += label;
        out += "\">";
        std::string message;
        for (const auto& f : dangers)
            if (std::string_view(f.side) == label)
                message += (message.empty() ? "" : "; ") + f.finding->message;
        if (!message.empty()) {
            out += "<failure type=\"danger\" message=\"";
            appendXmlAttr(out, message);
            out += "\"/>";
        }
        out += "</testcase>\n";
    }
    out += "<testcase classname=\"load_state_dict\" name=\"strict=True\">";
    if (!loadOk) {
        out += "<failure type=\"load_state_dict\" message=\"";
        appendXmlAttr(out, verdict);
        out += "\"/>";
    } else {
        out += "<system-out>";
        appendXmlText(out, verdict);
        out += "</system-out>";
    }
    out += "</testcase>\n";

    for (const DiffRow& row : in.diff.rows) {
        if (row.status == RowStatus::Match)
            continue;
        const std::string_view status = rowStatusName(row.status);
        const Entry* ea = rowEntryA(row, in.a);
        const Entry* eb = rowEntryB(row, in.b);
        out += "<testcase classname=\"";
        out += status;
        out += "\" name=\"";
        appendXmlAttr(out, ctx.name(row));
        out += "\">";
        const bool fails = rowFails(row.status, in.failOnDtype);
        const std::string message = rowMessage(row, in.a, in.b);
        if (fails) {
            out += "<failure type=\"";
            out += status;
            out += "\" message=\"";
            appendXml(out, message, true, true);
            out += "\">";
        } else {
            out += "<system-out>";
            appendXml(out, message, false, true);
            out += '\n';
        }
        // The details a CI log should show without opening another report.
        if (ea) {
            out += "checkpoint: ";
            appendXmlText(out, rowKeyA(row, in.a));
            out += ' ';
            if (ea->shapeKnown)
                appendShape(out, ea->shape);
            out += ' ';
            out += entryDtypeName(*ea);
            out += '\n';
        }
        if (eb) {
            out += "model: ";
            appendXmlText(out, rowKeyB(row, in.b));
            out += ' ';
            if (eb->shapeKnown)
                appendShape(out, eb->shape);
            out += ' ';
            out += entryDtypeName(*eb);
            out += '\n';
        }
        if (row.reason != Reason::None) {
            out += "reason: ";
            out += reasonName(row.reason);
            out += '\n';
        }
        out += fails ? "</failure>" : "</system-out>";
        out += "</testcase>\n";
    }
    out += "</testsuite>\n<testsuite name=\"rules\"";
    counts(ruleTests, ruleFailures);
    out += ">\n";
    for (const RuleIssue& issue : *ctx.issues) {
        out += "<testcase classname=\"";
        out += ruleIssueKindName(issue.kind);
        out += "\" name=\"";
        if (issue.rule >= 0) {
            out += "rule ";
            appendNumber(out, static_cast<int64_t>(issue.rule + 1));
        } else {
            out += "rule set";
        }
        out += "\">";
        const bool fails = issue.severity == Severity::Danger;
        out += fails ? "<failure type=\"" : "<system-out>";
        if (fails) {
            out += ruleIssueKindName(issue.kind);
            out += "\" message=\"";
            appendXml(out, issue.message, true, true);
            out += "\">";
        } else {
            appendXml(out, issue.message, false, true);
            out += '\n';
        }
        for (const auto& ex : issue.examples) {
            appendXmlText(out, ex);
            out += '\n';
        }
        out += fails ? "</failure>" : "</system-out>";
        out += "</testcase>\n";
    }
    if (in.values) {
        out += "</testsuite>\n<testsuite name=\"values\"";
        counts(valueTests, 0);
        out += ">\n";
        for (const ValueLine& l : values.differ) {
            out += "<testcase classname=\"values_differ\" name=\"";
            appendXmlAttr(out, ctx.name(*l.row));
            out += "\"><system-out>";
            appendXmlText(out, valueNumbers(*l.cmp));
            out += "</system-out></testcase>\n";
        }
    }
    out += "</testsuite>\n</testsuites>\n";
    return out;
}

} // namespace sl
