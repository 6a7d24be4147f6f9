// The JSON diff report (docs/json-output.md, "diff"): small parts through JsonWriter, the rows written
// straight into the output and streamed to the sink in pieces.

#include "diff_report.h"
#include "diff_report_escape.h"
#include "diff_report_parts.h"

#include "io/json_writer.h"
#include "report/source_report.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <future>
#include <memory>
#include <optional>

namespace sl {

using namespace diff_report;

namespace {

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
    // Folding the rows for the "folded" part takes about as long as writing the rows (100,000 rows: 12 ms
    // and 9 ms), and the parts before it need no folding: it runs on a second core meanwhile.
    auto folding = std::async(std::launch::async, [&in] { return std::make_unique<const ReportContext>(in, true); });
    const ReportContext ctx(in, false);
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
            row.rule.valid() ? raw.number(row.rule.number()) : raw.null();
            raw.put(",\"partner\":");
            row.partner.valid() ? raw.number(row.partner.number()) : raw.null();
            raw.put(",\"suggestion\":");
            row.suggestion.valid() ? raw.number(row.suggestion.number()) : raw.null();
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
        const std::unique_ptr<const ReportContext> foldedCtx = folding.get();
        for (const FoldedRow& f : foldedCtx->folded) {
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
            issue.rule.valid() ? w.integer(issue.rule.number()) : w.null();
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

} // namespace sl
