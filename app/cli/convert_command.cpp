// statelens convert SOURCE... -o OUT [--rules R] [--container C] [--to safetensors] [--shard-size SIZE]
//                  [--dtype keep|bf16|fp16|fp32] [--only REGEX]
//
// Writes the source's tensors as safetensors with the rules' renames and drops applied: the fixed checkpoint,
// streamed through a bounded buffer (core/convert). Progress goes to stderr, what was written to stdout.
// Exit codes: 0 written and verified, 2 nothing written (a collision, an unreadable tensor, a cancel, ...).

#include "cli/commands.h"

#include "convert/convert_plan.h"
#include "convert/safetensors_writer.h"
#include "io/file_trust.h"
#include "rules/rule_engine.h"
#include "rules/rule_io.h"
#include "util/error.h"
#include "util/load_control.h"
#include "util/terminal_text.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <unistd.h>

namespace sl::cli {

namespace {

struct ConvertOptionsCli {
    SideOption source;
    std::string output;
    std::string rules;
    std::string to = "safetensors";
    std::string shardSize;
    std::string dtype = "keep";
    std::string only;
};

// Ctrl-C and SIGTERM cancel the write: the temporary folder is removed and nothing is left (a store to a
// lock-free atomic is safe in a signal handler).
LoadControl* g_control = nullptr;
extern "C" void cancelConversion(int)
{
    if (g_control)
        g_control->cancel();
}

std::string humanBytes(uint64_t b)
{
    char text[32];
    if (b >= 1000000000ull)
        std::snprintf(text, sizeof text, "%.2f GB", double(b) / 1e9);
    else if (b >= 1000000ull)
        std::snprintf(text, sizeof text, "%.1f MB", double(b) / 1e6);
    else if (b >= 1000ull)
        std::snprintf(text, sizeof text, "%.1f kB", double(b) / 1e3);
    else
        std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(b));
    return text;
}

int runConvert(const ConvertOptionsCli& o)
{
    convert::ConvertOptions options;
    if (!o.rules.empty()) {
        options.rules = loadRules(o.rules);
        std::vector<PatternError> errors;
        CompiledRules::compile(options.rules, &errors);
        if (!errors.empty())
            throw LoadError(o.rules, describePatternError(errors.front()) + "; nothing was written");
    }
    options.only = o.only;
    options.dtype = *convert::targetDTypeFromName(o.dtype); // CLI11 checked the name
    uint64_t shardBytes = 0;
    if (!o.shardSize.empty()) {
        const auto size = convert::parseByteSize(o.shardSize);
        if (!size)
            throw LoadError("--shard-size", "'" + o.shardSize + "' is not a size (5GB, 500MB, 2GiB or a number of bytes)");
        shardBytes = *size;
    }

    const Source& source = openSide(o.source);
    const convert::ConvertPlan plan = convert::planConversion(source, options);
    // Inputs are never written over: the output (one file) may not be any file this run read.
    refuseOutputOntoInput(o.output);

    LoadControl control;
    g_control = &control;
    struct sigaction action { };
    action.sa_handler = cancelConversion;
    sigemptyset(&action.sa_mask);
    struct sigaction oldInt { }, oldTerm { };
    sigaction(SIGINT, &action, &oldInt);
    sigaction(SIGTERM, &action, &oldTerm);
    struct Restore {
        struct sigaction i, t;
        ~Restore()
        {
            sigaction(SIGINT, &i, nullptr);
            sigaction(SIGTERM, &t, nullptr);
            g_control = nullptr;
        }
    } restore { oldInt, oldTerm };

    convert::WriteOptions write;
    write.output = o.output;
    write.shardBytes = shardBytes;
    write.control = &control;
    const bool terminal = ::isatty(STDERR_FILENO);
    auto last = std::chrono::steady_clock::now();
    bool printed = false;
    write.progress = [&](uint64_t done, uint64_t total, const std::string& name) {
        const auto now = std::chrono::steady_clock::now();
        // A terminal sees one line rewritten; a log gets a line every few seconds.
        if (now - last < (terminal ? std::chrono::milliseconds(200) : std::chrono::seconds(5)) && done != total)
            return;
        last = now;
        printed = true;
        std::fprintf(stderr, "%sconverting: %3.0f%% (%s of %s) %s%s", terminal ? "\r\x1b[K" : "",
            total ? 100.0 * double(done) / double(total) : 100.0, humanBytes(done).c_str(), humanBytes(total).c_str(),
            terminalText(name).substr(0, 60).c_str(), terminal ? "" : "\n");
        std::fflush(stderr);
    };
    convert::WriteReport report;
    try {
        report = convert::writeSafetensors(source, plan, write);
    } catch (...) {
        if (printed && terminal)
            std::fputc('\n', stderr);
        throw;
    }
    if (printed && terminal)
        std::fputc('\n', stderr);

    for (const Finding& f : plan.findings)
        std::printf("%s: %s%s\n", std::string(severityName(f.severity)).c_str(),
            f.entry.empty() ? "" : ("'" + terminalText(f.entry) + "': ").c_str(), terminalText(f.message).c_str());
    std::printf("wrote %zu tensors (%s, %llu bytes) in %zu file%s to %s\n", report.tensorsWritten,
        humanBytes(report.bytesWritten).c_str(), static_cast<unsigned long long>(report.bytesWritten), report.shards,
        report.shards == 1 ? "" : "s", terminalText(o.output).c_str());
    if (plan.leftOutByOnly)
        std::printf("left out by --only: %zu keys\n", plan.leftOutByOnly);
    std::printf("verified: every key, dtype, shape and byte range of the written header%s as planned\n",
        report.shards == 1 ? "" : "s and the index");
    return 0;
}

} // namespace

Runner addConvertCommand(CLI::App& app)
{
    auto o = std::make_shared<ConvertOptionsCli>();
    CLI::App* cmd = app.add_subcommand("convert",
        "Write the checkpoint's tensors as safetensors, with the rules' renames and drops applied (streamed, atomic, verified)");
    cmd->add_option("source", o->source.paths,
           "The checkpoint to convert: a file, a folder (index, DCP, rank files) or a quoted pattern; several files "
           "of one sharded save are one source")
        ->required();
    cmd->add_option("-o,--output", o->output,
           "A .safetensors file, or a folder (new or empty) for model.safetensors or, with --shard-size, the shards "
           "and model.safetensors.index.json")
        ->required();
    cmd->add_option("--rules", o->rules, "Rename rules (YAML or JSON) applied to every key; drop rules leave keys out");
    cmd->add_option("--container", o->source.container, "Convert this container instead of the picked one (see `ls --containers`)")
        ->each([o](const std::string&) { o->source.containerGiven = true; });
    cmd->add_option("--to", o->to, "Output format")->check(CLI::IsMember({ "safetensors" }));
    cmd->add_option("--shard-size", o->shardSize,
        "Cut the output into shards of at most this size, as Hugging Face does (5GB, 500MB, 2GiB)");
    cmd->add_option("--dtype", o->dtype, "Cast floating tensors (float16/bfloat16/float32/float64) as torch's .to() does")
        ->check(CLI::IsMember({ "keep", "bf16", "fp16", "fp32" }));
    cmd->add_option("--only", o->only, "Only keys of the source that this regular expression matches (searched anywhere)");
    return [o] { return namingRuleFile(o->rules.empty() ? std::string("--rules") : o->rules, [&] { return runConvert(*o); }); };
}

} // namespace sl::cli
