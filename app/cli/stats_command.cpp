// statelens stats PATH... [--filter REGEX] [--format table|json] [--bins N] [--stored] [--container C] [-o FILE]
//
// Reads the values of the source's tensors (only now: every other command leaves tensor bytes alone) and
// prints, per tensor, min, max, mean, std, NaN/Inf/zero counts, a histogram and a content hash. See
// core/values/tensor_stats.h for the definitions.

#include "cli/commands.h"

#include "report/json_writer.h"
#include "report/source_report.h"
#include "rules/rule_engine.h"
#include "util/error.h"
#include "util/terminal_text.h"
#include "values/init_hints.h"
#include "values/tensor_stats.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>

namespace sl::cli {

namespace {

struct StatsOptionsCli {
    SideOption source;
    std::string filter;
    std::string format = "table";
    unsigned bins = 16;
    bool stored = false; // quantized tensors by their stored integers, not dequantized
    std::string output;
};

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

std::string table(const Source& s, const std::vector<values::TensorStatsResult>& results, const std::vector<std::string>& hints)
{
    std::vector<std::vector<std::string>> rows;
    rows.push_back({ "NAME", "DTYPE", "SHAPE", "MIN", "MAX", "MEAN", "STD", "NAN", "INF", "ZEROS", "XXH3", "HINT" });
    std::vector<std::string> skipped, notes;
    for (size_t i = 0; i < results.size(); ++i) {
        const auto& r = results[i];
        const Entry& e = s.entries[r.entry];
        // Names (and what readers say about them) come from the file: shown terminal-safe.
        if (!r.stats) {
            skipped.push_back(terminalText(e.name + ": " + r.skipped));
            continue;
        }
        const auto& t = *r.stats;
        if (!t.note.empty())
            notes.push_back(terminalText(e.name + ": " + t.note));
        const bool any = t.finite > 0;
        const auto sd = t.std();
        rows.push_back(
            { terminalText(e.name), std::string(dtypeName(e.dtype)), shapeToString(e.shape), any ? num(t.min) : "-",
                any ? num(t.max) : "-", any ? num(t.mean) : "-", sd ? num(*sd) : "-", std::to_string(t.nan),
                std::to_string(t.posInf + t.negInf), std::to_string(t.zeros), hex(t.hash), terminalText(hints[i]) });
    }
    std::vector<size_t> width(rows[0].size(), 0);
    for (const auto& row : rows)
        for (size_t c = 0; c < row.size(); ++c)
            width[c] = std::max(width[c], terminalColumns(row[c]));
    std::string out;
    for (const auto& row : rows) {
        for (size_t c = 0; c < row.size(); ++c) {
            out += row[c];
            if (c + 1 < row.size())
                out += std::string(width[c] - terminalColumns(row[c]) + 2, ' ');
        }
        out += '\n';
    }
    if (!notes.empty()) {
        out += "\nhow values were read (" + std::to_string(notes.size()) + "):\n";
        for (const auto& line : notes)
            out += "  " + line + '\n';
    }
    if (!skipped.empty()) {
        out += "\nnot summarised (" + std::to_string(skipped.size()) + "):\n";
        for (const auto& line : skipped)
            out += "  " + line + '\n';
    }
    return out;
}

std::string json(const Source& s, const std::vector<values::TensorStatsResult>& results, const std::vector<std::string>& hints, unsigned bins)
{
    JsonWriter w;
    w.beginObject();
    w.key("source");
    writeSourceJson(w, s);
    w.key("bins");
    w.unsignedInteger(bins);
    w.key("tensors");
    w.beginArray();
    for (size_t i = 0; i < results.size(); ++i) {
        const auto& r = results[i];
        if (!r.stats)
            continue;
        const Entry& e = s.entries[r.entry];
        const auto& t = *r.stats;
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
        if (t.histogram.empty()) {
            w.null();
        } else {
            w.beginObject();
            w.field("bins", static_cast<uint64_t>(t.histogram.size()));
            w.key("min");
            w.number(t.min);
            w.key("max");
            w.number(t.max);
            w.key("counts");
            w.beginArray();
            for (uint64_t c : t.histogram)
                w.unsignedInteger(c);
            w.endArray();
            w.endObject();
        }
        w.field("xxh3", hex(t.hash));
        w.key("hint"); // "untouched since init" (values/init_hints.h), or null
        hints[i].empty() ? w.null() : w.string(hints[i]);
        w.key("note"); // how quantized values were read, or null
        t.note.empty() ? w.null() : w.string(t.note);
        w.endObject();
    }
    w.endArray();
    w.key("skipped");
    w.beginArray();
    for (const auto& r : results) {
        if (r.stats)
            continue;
        w.beginObject();
        w.field("name", s.entries[r.entry].name);
        w.field("why", r.skipped);
        w.endObject();
    }
    w.endArray();
    w.endObject();
    return std::string(w.text()) + "\n";
}

int runStats(const StatsOptionsCli& o)
{
    const Source& s = openSide(o.source);
    std::vector<size_t> entries;
    if (o.filter.empty()) {
        for (size_t i = 0; i < s.entries.size(); ++i)
            entries.push_back(i);
    } else {
        // The rule engine's regex dialect (Python's `re` subset), searched anywhere in the name.
        RuleSet one;
        one.rules.push_back(Rule { o.filter, "", false, true, {}, {} });
        std::vector<PatternError> errors;
        const CompiledRules re = CompiledRules::compile(one, &errors);
        if (!errors.empty())
            throw LoadError("--filter", "position " + std::to_string(errors[0].offset) + ": " + errors[0].message);
        try {
            for (size_t i = 0; i < s.entries.size(); ++i)
                if (re.matches(0, s.entries[i].name))
                    entries.push_back(i);
        } catch (const RuleMatchError& e) {
            throw LoadError("--filter", "the pattern " + e.problem());
        }
    }
    values::StatsOptions options;
    options.bins = o.bins;
    options.dequantize = !o.stored;
    const auto results = values::computeStats(s, entries, options);
    const auto hints = values::initHints(s, results);
    emit(o.format == "json" ? json(s, results, hints, o.bins) : table(s, results, hints), o.output);
    return 0;
}

} // namespace

Runner addStatsCommand(CLI::App& app)
{
    auto o = std::make_shared<StatsOptionsCli>();
    CLI::App* cmd = app.add_subcommand("stats", "Read tensor values: min, max, mean, std, NaN/Inf/zero counts, histogram, content hash");
    cmd->add_option("path", o->source.paths,
           "The checkpoint whose values to summarise: a file, a folder or a quoted pattern; several files of one "
           "sharded save are one source")
        ->required();
    cmd->add_option("--container", o->source.container, "Select this container instead of the picked one (see `ls --containers`)")
        ->each([o](const std::string&) { o->source.containerGiven = true; });
    cmd->add_option("--filter", o->filter, "Only tensors whose name matches this regular expression (searched anywhere)");
    cmd->add_option("--format", o->format, "Output format")->check(CLI::IsMember({ "table", "json" }));
    cmd->add_option("--bins", o->bins, "Histogram bins (0: no histogram)")->check(CLI::Range(0u, 4096u));
    cmd->add_flag("--stored", o->stored, "Summarise quantized tensors by their stored integers (a group by its main part) instead of dequantizing");
    cmd->add_option("-o,--output", o->output, "Write the output here (atomically) instead of stdout");
    return [o] { return runStats(*o); };
}

} // namespace sl::cli
