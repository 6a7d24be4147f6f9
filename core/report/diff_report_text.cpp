// The text diff report: counts, pairs, differences folded by index template, issues, values, suggestions,
// findings, then the verdict; untrusted text shown terminal-safe (util/terminal_text.h).

#include "diff_report.h"
#include "diff_report_parts.h"

#include "util/terminal_text.h"

namespace sl {

using namespace diff_report;

namespace {

constexpr size_t kTextExamples = 3;

size_t totalRows(const DiffSummary& s)
{
    size_t n = 0;
    for (size_t c : s.counts)
        n += c;
    return n;
}

} // namespace

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

} // namespace sl
