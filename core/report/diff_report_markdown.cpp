// The Markdown diff report (GitHub-flavoured): sources, verdict and counts, then one table per section.

#include "diff_report.h"
#include "diff_report_escape.h"
#include "diff_report_parts.h"

namespace sl {

using namespace diff_report;

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
            if (issue.rule.valid())
                appendNumber(out, static_cast<int64_t>(issue.rule.get() + 1));
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

} // namespace sl
