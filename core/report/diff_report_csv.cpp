// The CSV diff report (RFC 4180, CRLF): a header row, then one line per diff row.

#include "diff_report.h"
#include "diff_report_escape.h"
#include "diff_report_parts.h"

#include <optional>

namespace sl {

using namespace diff_report;

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
        if (row.rule.valid())
            appendNumber(out, row.rule.number());
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

} // namespace sl
