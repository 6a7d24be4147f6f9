#pragma once
// Private to the diff report renderers (diff_report_<format>.cpp): what more than one of them uses. The
// small appenders, the folded view of a diff with its pairs and differences (ReportContext), row messages,
// counts, source lines, findings, the verdict and the value summary.
// Each renderer walks the sections itself: text, Markdown and HTML order and shape them differently, and
// JSON, CSV and JUnit list rows rather than sections, so a shared walk would be a hook per section per format.

#include "diff_report.h"

#include <array>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sl::diff_report {

// The order people read differences in: what breaks the load first.
constexpr std::array<RowStatus, kRowStatusCount - 1> kDifferenceOrder = {
    RowStatus::ShapeMismatch, RowStatus::CopyError, RowStatus::Missing, RowStatus::Unexpected,
    RowStatus::DtypeMismatch, RowStatus::Renamed, RowStatus::Dropped,
};

// ---- small appenders (no temporaries on the per-row paths) ----------------------------------------------

inline void appendNumber(std::string& out, uint64_t v)
{
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, end);
}

inline void appendNumber(std::string& out, int64_t v)
{
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, end);
}

// "[2, 3]", as torch.Size prints inside brackets (same text as shapeToString).
inline void appendShape(std::string& out, const Shape& s)
{
    out += '[';
    for (size_t i = 0; i < s.size(); ++i) {
        if (i)
            out += ", ";
        appendNumber(out, s[i]);
    }
    out += ']';
}

inline std::string_view entryDtypeName(const Entry& e)
{
    return e.kind == EntryKind::Object ? std::string_view("object") : dtypeName(e.dtype);
}

// "[4096, 11008] bfloat16", or "? bfloat16" when the shape is not known.
void appendShapeAndDtype(std::string& out, const Entry& e);

// Value fields: "%.9g" keeps the numbers readable and stable.
void appendDouble(std::string& out, double v);

// ---- what the renderers share ----------------------------------------------------------------------------

// The rows whose values were compared and differ, for the sections of the readable formats.
struct ValueLine {
    const DiffRow* row;
    const values::ValueComparison* cmp;
};

struct ValueSummary {
    size_t compared = 0, equal = 0, notCompared = 0;
    std::vector<ValueLine> differ;
};

ValueSummary summariseValues(const DiffReportInput& in);
// "27 pair(s) compared, 16 equal, 11 differ, 0 not compared"
std::string valueCounts(const ValueSummary& v);
// "max |a-b| 0.5, max rel 0.25, cosine 1", and where NaNs sit on one side only.
std::string valueNumbers(const values::ValueComparison& c);

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

    ReportContext(const DiffReportInput& input, bool fold);
    const std::vector<Suggestion>& suggestions() const;
    const std::string& name(const DiffRow& row) const { return rowName(row, in.a, in.b); }
    // A line's names on A's side and on B's: the head's own, and the folded names of the rows shown with it.
    std::pair<const std::string&, const std::string&> pairNames(const FoldedRow& f) const
    {
        const bool headOnA = in.diff.rows[f.rows.front()].a.valid();
        return headOnA ? std::pair<const std::string&, const std::string&> { f.name, f.partnerName }
                       : std::pair<const std::string&, const std::string&> { f.partnerName, f.name };
    }
    // How many rows of a status the pair lines hold (their heads' and the rows shown with them).
    size_t pairedRows(RowStatus status) const;
    // "(2 pairs)", or "(1 + 256 rows)" for a many-to-one line; empty for a single pair.
    std::string lineCount(const FoldedRow& f) const;
    // The explanation a line shows: A's side first.
    const std::string& lineExplanation(const FoldedRow& f) const;
    // The pending suggestion behind a pair's rows, numbered from 1 as people read them; 0 when none.
    size_t suggestionNumber(const FoldedRow& f) const
    {
        const SuggestionIndex s = in.diff.rows[f.rows.front()].suggestion;
        return s.valid() ? s.get() + 1 : 0;
    }
    bool loadSucceeds() const { return in.diff.summary.loadSucceeds(in.failOnDtype); }

    // A capacity for a document with a line per row: the names and explanations plus `perRow` bytes of
    // markup, so building a large report does not copy itself over and over while it grows.
    size_t estimate(size_t perRow, size_t fixed = 16384) const;
};

// What a JUnit failure or a listing says about a row without a known cause.
std::string rowMessage(const DiffRow& row, const Source& a, const Source& b);

// "2 missing, 1 unexpected": the statuses given, those with rows, in that order.
std::string countsText(const DiffSummary& s, const std::vector<RowStatus>& statuses);

// "torch-zip, container 'model', 32 entries, 43.8 KB"
std::string sourceLine(const Source& s);

// The sources' findings worth a reader's attention in a diff (dangers and warnings), side by side.
struct SideFinding {
    const char* side; // "A (checkpoint)" or "B (model)"
    const Finding* finding;
};
std::vector<SideFinding> sourceFindings(const DiffReportInput& in, bool includeWarnings = true);

// The verdict, led by the danger when loading a side would run code: never a bare "would succeed" then.
std::string verdictWithSafety(const DiffReportInput& in);

} // namespace sl::diff_report
