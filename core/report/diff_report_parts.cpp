// What the diff report renderers share (diff_report_parts.h): the folded view, messages, counts, verdict.

#include "diff_report_parts.h"

#include "report/source_report.h"
#include "util/name_list.h"

#include <algorithm>
#include <cstdio>

namespace sl::diff_report {

void appendShapeAndDtype(std::string& out, const Entry& e)
{
    if (e.shapeKnown)
        appendShape(out, e.shape);
    else
        out += '?';
    out += ' ';
    out += entryDtypeName(e);
}

void appendDouble(std::string& out, double v)
{
    char buf[40];
    const int n = std::snprintf(buf, sizeof buf, "%.9g", v);
    out.append(buf, static_cast<size_t>(std::max(n, 0)));
}

ValueSummary summariseValues(const DiffReportInput& in)
{
    ValueSummary v;
    if (!in.values)
        return v;
    for (size_t i = 0; i < in.diff.rows.size() && i < in.values->size(); ++i) {
        const DiffRow& row = in.diff.rows[i];
        const values::ValueComparison& c = (*in.values)[i];
        if ((!row.a.valid() || !row.b.valid()) && !c.compared) // a one-sided row compared only against a group stored otherwise
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

// ---- ReportContext ---------------------------------------------------------------------------------------

ReportContext::ReportContext(const DiffReportInput& input, bool fold)
    : in(input)
{
    if (in.ruleIssues) {
        issues = in.ruleIssues;
    } else {
        ownIssues = invalidRuleIssues(in.diff.ruleErrors); // a report made without checkRules
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

const std::vector<Suggestion>& ReportContext::suggestions() const
{
    static const std::vector<Suggestion> none;
    return in.suggestions ? *in.suggestions : none;
}

size_t ReportContext::pairedRows(RowStatus status) const
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

std::string ReportContext::lineCount(const FoldedRow& f) const
{
    if (f.partnerRows.size() == f.rows.size())
        return f.rows.size() > 1 ? "(" + std::to_string(f.rows.size()) + " pairs)" : std::string();
    return "(" + std::to_string(f.rows.size()) + " + " + std::to_string(f.partnerRows.size()) + " rows)";
}

const std::string& ReportContext::lineExplanation(const FoldedRow& f) const
{
    const DiffRow& head = in.diff.rows[f.rows.front()];
    const DiffRow& other = in.diff.rows[f.partnerRows.front()];
    const DiffRow& a = head.a.valid() ? head : other;
    return a.explanation.empty() ? (head.a.valid() ? other : head).explanation : a.explanation;
}

size_t ReportContext::estimate(size_t perRow, size_t fixed) const
{
    size_t bytes = fixed;
    for (const DiffRow& row : in.diff.rows) {
        bytes += perRow + row.explanation.size();
        if (row.a.valid())
            bytes += rowKeyA(row, in.a).size();
        if (row.b.valid())
            bytes += rowKeyB(row, in.b).size();
    }
    return bytes + bytes / 16;
}

// ---- messages, counts, verdict ---------------------------------------------------------------------------

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

std::string sourceLine(const Source& s)
{
    std::string out = s.format == SourceFormat::InMemory ? std::string("in memory") : std::string(formatId(s.format));
    if (!s.container.empty())
        out += ", container '" + s.container + "'";
    out += ", ";
    appendNumber(out, static_cast<uint64_t>(s.entries.size()));
    out += s.entries.size() == 1 ? " entry, " : " entries, ";
    out += humanBytes(s.totalBytes());
    return out;
}

std::vector<SideFinding> sourceFindings(const DiffReportInput& in, bool includeWarnings)
{
    std::vector<SideFinding> out;
    for (int side = 0; side < 2; ++side)
        for (const Finding& f : (side == 0 ? in.a : in.b).findings)
            if (f.severity == Severity::Danger || (includeWarnings && f.severity == Severity::Warning))
                out.push_back({ side == 0 ? "A (checkpoint)" : "B (model)", &f });
    return out;
}

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

} // namespace sl::diff_report
