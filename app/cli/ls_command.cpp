// statelens ls PATH [--format table|json] [--container PATH] [--containers] [--fail-on LEVEL] [--inspect-items] [-o FILE]

#include "cli/commands.h"

#include "report/source_report.h"
#include "util/terminal_text.h"
#include "util/timings.h"

#include <cstdio>

#include <memory>

namespace sl::cli {

namespace {

struct LsOptions {
    SideOption source;
    std::string format = "table";
    bool listContainers = false;
    std::string failOn = "none";
    std::string output;
    bool timings = false;
    bool inspectItems = false; // DCP: read tensor items while listing
};

std::string containersTable(const Source& s)
{
    std::string out = "containers in " + terminalText(s.path) + " (* = selected):\n";
    for (const auto& c : s.containers) {
        out += (c.path == s.container ? "* " : "  ");
        out += c.path.empty() ? std::string("(top level)") : terminalText(c.path);
        out += "  [" + std::string(containerRoleName(c.role)) + ", " + std::to_string(c.tensorCount) + " tensors]\n";
    }
    if (s.containers.empty())
        out += "  (none: the file holds one state dict)\n";
    return out;
}

int runLs(const LsOptions& o)
{
    Timings timings;
    OpenOptions options;
    if (o.timings)
        options.timings = &timings;
    options.inspectDcpItems = o.inspectItems;
    options.deferEntries = true; // the table lists rows as they are; JSON builds one entry at a time
    Timings* t = o.timings ? &timings : nullptr;
    const Source& s = openSide(o.source, options);
    if (o.listContainers) {
        emit(containersTable(s), o.output);
        return 0;
    }
    // Written as it is made: the text of a large checkpoint is never held whole.
    PhaseTimer formatTimer(t, o.format == "json" ? "format + write json" : "format + write table");
    const auto out = openOutput(o.output);
    const TextSink sink = [&out](std::string_view part) { out->write(part); };
    if (o.format == "json")
        sourceToJson(s, sink);
    else
        sourceToTable(s, sink);
    out->commit();
    formatTimer.stop();
    if (t)
        printTimings(timings);
    if (o.failOn == "danger" && s.countFindings(Severity::Danger))
        return 1;
    if (o.failOn == "warning" && (s.countFindings(Severity::Danger) || s.countFindings(Severity::Warning)))
        return 1;
    return 0;
}

} // namespace

Runner addLsCommand(CLI::App& app)
{
    auto o = std::make_shared<LsOptions>();
    CLI::App* ls = app.add_subcommand("ls", "List the entries of a checkpoint's state dict (metadata only)");
    ls->add_option("path", o->source.paths,
          "Checkpoint file, index file or checkpoint folder (DCP, Hugging Face, per-rank files), or a quoted pattern "
          "('ckpt/model_rank*.pt'); several files of one sharded save (model_rank0.pt model_rank1.pt ...) are listed "
          "together as one source")
        ->required();
    ls->add_option("--format", o->format, "Output format")->check(CLI::IsMember({ "table", "json" }));
    ls->add_option(
          "--container", o->source.container, "Select this container instead of the picked one (see --containers)")
        ->each([o](const std::string&) { o->source.containerGiven = true; });
    ls->add_flag("--containers", o->listContainers, "List the containers (state dicts) the file holds");
    ls->add_option("--fail-on", o->failOn, "Exit 1 when a finding of this severity or worse exists")
        ->check(CLI::IsMember({ "none", "warning", "danger" }));
    ls->add_option("-o,--output", o->output, "Write to this file (atomically) instead of stdout");
    ls->add_flag("--timings", o->timings, "Print how long each phase took (to stderr)");
    ls->add_flag("--inspect-items", o->inspectItems,
        "DCP: read every item, to place each chunk's data, show bytes items' values and scan their pickles, and "
        "report what only the items show (listing otherwise reads no byte of a data file)");
    return [o] { return runLs(*o); };
}

} // namespace sl::cli
