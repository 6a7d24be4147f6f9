// The JUnit XML diff report: a testsuite for the load (a case per row that is not a match), one for the
// rules' issues and, with --values, one for the pairs whose values differ.

#include "diff_report.h"
#include "diff_report_escape.h"
#include "diff_report_parts.h"

namespace sl {

using namespace diff_report;

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
        if (issue.rule.valid()) {
            out += "rule ";
            appendNumber(out, static_cast<int64_t>(issue.rule.get() + 1));
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
