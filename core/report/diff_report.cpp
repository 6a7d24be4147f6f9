// diff_report.h's entry points: the format names, the dispatch to each format's renderer
// (diff_report_<format>.cpp), and the verdict and failure rule every format and the exit code share.

#include "diff_report.h"
#include "diff_report_parts.h"

namespace sl {

using namespace diff_report;

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

} // namespace sl
