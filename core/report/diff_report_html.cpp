// The HTML diff report: one self-contained page with its inline style and script (resources/report), which
// its Content-Security-Policy allows by hash.

#include "diff_report.h"
#include "diff_report_escape.h"
#include "diff_report_parts.h"
#include "generated/diff_report_assets.h"

#include <algorithm>

namespace sl {

using namespace diff_report;

namespace {

// In HTML groups, more rows than this are summarised: the JSON and CSV reports list them all.
constexpr size_t kHtmlRowsPerGroup = 1000;

// The page's only style and script, kHtmlStyle and kHtmlScript, are resources/report/diff_report.css and .js,
// embedded by the build with their SHA-256 (base64), kHtmlStyleHash and kHtmlScriptHash, which the
// Content-Security-Policy names: a browser runs these two and nothing else. Each file is the element's text
// byte for byte, written between the tags with nothing added. Neither may hold '<' or '&' (the generator
// refuses them), so the page stays well-formed XML.

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
            if (rowA.rule.valid())
                appendNumber(out, static_cast<int64_t>(rowA.rule.get() + 1));
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
            if (issue.rule.valid())
                appendNumber(out, static_cast<int64_t>(issue.rule.get() + 1));
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

} // namespace sl
