#include "stats_report.h"

#include "io/json_writer.h"
#include "report/source_report.h"
#include "util/terminal_text.h"
#include "values/init_hints.h"

#include <array>
#include <cinttypes>
#include <cstdio>

namespace sl {

namespace {

std::string num(double v)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
}

std::string hex(uint64_t h)
{
    char buf[20];
    std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
    return buf;
}

constexpr size_t kColumns = 12;
using Row = std::array<std::string, kColumns>;

// A summarised tensor's table row. Names (and what readers say about them) come from the file: shown
// terminal-safe.
Row tableRow(const Entry& e, const values::TensorStats& t, const std::string& hint)
{
    const bool any = t.finite > 0;
    const auto sd = t.std();
    return { terminalText(e.name), std::string(dtypeName(e.dtype)), shapeToString(e.shape), any ? num(t.min) : "-",
        any ? num(t.max) : "-", any ? num(t.mean) : "-", sd ? num(*sd) : "-", std::to_string(t.nan),
        std::to_string(t.posInf + t.negInf), std::to_string(t.zeros), hex(t.hash), terminalText(hint) };
}

} // namespace

StatsReport::StatsReport(const Source& source, Format format, unsigned bins)
    : m_source(source)
    , m_format(format)
    , m_bins(bins)
{
}

void StatsReport::reserve(size_t tensors)
{
    m_results.reserve(tensors);
    if (m_format == Format::Json) {
        m_histogramBins.reserve(tensors);
        m_histograms.reserve(tensors * m_bins); // pages untouched until a histogram fills them
    }
}

void StatsReport::add(std::vector<values::TensorStatsResult>& batch)
{
    for (auto& r : batch) {
        if (r.stats) {
            auto& h = r.stats->histogram;
            if (m_format == Format::Json) {
                m_histogramBins.push_back(static_cast<uint32_t>(h.size()));
                m_histograms.insert(m_histograms.end(), h.begin(), h.end());
            }
            std::vector<uint64_t>().swap(h);
        }
        m_results.push_back(std::move(r));
    }
}

void StatsReport::write(OutputFile& out) const
{
    const auto hints = values::initHints(m_source, m_results);
    if (m_format == Format::Json)
        writeJson(out, hints);
    else
        writeTable(out, hints);
}

void StatsReport::writeTable(OutputFile& out, const std::vector<std::string>& hints) const
{
    // Two passes over the rows, each made and dropped one at a time: the widths, then the text.
    const Row header { "NAME", "DTYPE", "SHAPE", "MIN", "MAX", "MEAN", "STD", "NAN", "INF", "ZEROS", "XXH3", "HINT" };
    std::array<size_t, kColumns> width {};
    auto measure = [&](const Row& row) {
        for (size_t c = 0; c < kColumns; ++c)
            width[c] = std::max(width[c], terminalColumns(row[c]));
    };
    measure(header);
    size_t notes = 0, skipped = 0;
    for (size_t i = 0; i < m_results.size(); ++i) {
        const auto& r = m_results[i];
        if (!r.stats) {
            ++skipped;
            continue;
        }
        notes += !r.stats->note.empty();
        measure(tableRow(m_source.entries[r.entry], *r.stats, hints[i]));
    }
    std::string line;
    auto emitRow = [&](const Row& row) {
        line.clear();
        for (size_t c = 0; c < kColumns; ++c) {
            line += row[c];
            if (c + 1 < kColumns)
                line.append(width[c] - terminalColumns(row[c]) + 2, ' ');
        }
        line += '\n';
        out.write(line);
    };
    emitRow(header);
    for (size_t i = 0; i < m_results.size(); ++i)
        if (const auto& r = m_results[i]; r.stats)
            emitRow(tableRow(m_source.entries[r.entry], *r.stats, hints[i]));
    if (notes) {
        out.write("\nhow values were read (" + std::to_string(notes) + "):\n");
        for (const auto& r : m_results)
            if (r.stats && !r.stats->note.empty())
                out.write("  " + terminalText(m_source.entries[r.entry].name + ": " + r.stats->note) + '\n');
    }
    if (skipped) {
        out.write("\nnot summarised (" + std::to_string(skipped) + "):\n");
        for (const auto& r : m_results)
            if (!r.stats)
                out.write("  " + terminalText(m_source.entries[r.entry].name + ": " + r.skipped) + '\n');
    }
}

void StatsReport::writeJson(OutputFile& out, const std::vector<std::string>& hints) const
{
    // One writer for the whole document; its text is handed to the output every few hundred tensors.
    JsonWriter w;
    auto drain = [&] {
        out.write(w.text());
        w.clearText();
    };
    w.beginObject();
    w.key("source");
    writeSourceJson(w, m_source);
    w.key("bins");
    w.unsignedInteger(m_bins);
    w.key("tensors");
    w.beginArray();
    size_t summarised = 0;
    const uint64_t* histogram = m_histograms.data();
    for (size_t i = 0; i < m_results.size(); ++i) {
        const auto& r = m_results[i];
        if (!r.stats)
            continue;
        const Entry& e = m_source.entries[r.entry];
        const auto& t = *r.stats;
        const uint32_t bins = m_histogramBins[summarised++];
        w.beginObject();
        w.field("name", e.name);
        w.field("dtype", dtypeName(e.dtype));
        w.integers("shape", e.shape);
        w.field("numel", t.numel);
        auto optional = [&](std::string_view k, bool has, double v) {
            w.key(k);
            if (has)
                w.number(v);
            else
                w.null();
        };
        optional("min", t.finite > 0, t.min);
        optional("max", t.finite > 0, t.max);
        optional("mean", t.finite > 0, t.mean);
        const auto sd = t.std();
        optional("std", sd.has_value(), sd.value_or(0));
        w.field("finite", t.finite);
        w.field("nan", t.nan);
        w.field("posinf", t.posInf);
        w.field("neginf", t.negInf);
        w.field("zeros", t.zeros);
        w.key("histogram");
        if (bins == 0) {
            w.null();
        } else {
            w.beginObject();
            w.field("bins", static_cast<uint64_t>(bins));
            w.key("min");
            w.number(t.min);
            w.key("max");
            w.number(t.max);
            w.key("counts");
            w.beginArray();
            for (uint32_t b = 0; b < bins; ++b)
                w.unsignedInteger(histogram[b]);
            w.endArray();
            w.endObject();
        }
        histogram += bins;
        w.field("xxh3", hex(t.hash));
        w.key("hint"); // "untouched since init" (values/init_hints.h), or null
        hints[i].empty() ? w.null() : w.string(hints[i]);
        w.key("note"); // how quantized values were read, or null
        t.note.empty() ? w.null() : w.string(t.note);
        w.endObject();
        if (summarised % 256 == 0)
            drain();
    }
    w.endArray();
    w.key("skipped");
    w.beginArray();
    for (const auto& r : m_results) {
        if (r.stats)
            continue;
        w.beginObject();
        w.field("name", m_source.entries[r.entry].name);
        w.field("why", r.skipped);
        w.endObject();
    }
    w.endArray();
    w.endObject();
    drain();
    out.write("\n");
}

} // namespace sl
