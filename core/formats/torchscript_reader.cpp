// TorchScript archives through the LibTorch worker (design in torchscript_reader.h).
//
// What this file does itself, without LibTorch:
//   - the zip: version records (`version`, `.data/version`, `byteorder`, `.data/serialization_id`, ...) as
//     metadata, and the layout (pre-1.4 model.json, mobile bytecode.pkl);
//   - data.pkl through the safe pickle VM (nothing is imported or run): the module objects' attribute
//     dicts name each tensor, which gives its storage record, byte offset and the device it was saved on.
//     LibTorch is asked with map_location=cpu (a CPU build cannot place tensors on CUDA), so only the
//     pickle still knows the original device;
//   - runs the worker (util/child_process.h), turns every way it can fail into one LoadError line, and
//     builds the entries from its JSON (simdjson).

#include "torchscript_reader.h"

#include "formats/torch_zip_reader.h"
#include "io/zip_archive.h"
#include "pickle/unpickler.h"
#include "torch/state_dict_tree.h"
#include "torch/tensor_entries.h"
#include "torch/torch_semantics.h"
#include "util/terminal_text.h"
#include "util/child_process.h"
#include "util/error.h"
#include "util/timings.h"

#include <spdlog/spdlog.h>
#include <simdjson.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <sys/mman.h>
#include <unistd.h>
#include <unordered_map>

namespace sl {

namespace {

namespace fs = std::filesystem;

constexpr uint64_t kGiB = uint64_t(1) << 30;
constexpr uint64_t kMiB = uint64_t(1) << 20;
// data.pkl deflated by a re-zipping tool is inflated into memory; beyond this it is not read.
constexpr uint64_t kMaxInflatedPickle = uint64_t(1) << 30;
constexpr int kMaxPickleDepth = 64;

std::mutex g_workerMutex;
TorchScriptWorker g_worker;

std::string trimmed(std::string s)
{
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t'))
        s.pop_back();
    size_t a = s.find_first_not_of(" \t\r\n");
    return a == std::string::npos ? std::string() : s.substr(a);
}

// The last non-empty line a failed worker wrote to stderr (LibTorch's abort message, a sanitizer report).
std::string lastLine(const std::string& text)
{
    std::string t = trimmed(text);
    size_t nl = t.rfind('\n');
    std::string line = trimmed(nl == std::string::npos ? t : t.substr(nl + 1));
    return line.size() > 300 ? line.substr(0, 300) + "..." : line;
}

// "1 buffer", "3 buffers".
std::string count(uint64_t n, const std::string& noun, const std::string& plural = {})
{
    return std::to_string(n) + " " + (n == 1 ? noun : plural.empty() ? noun + "s" : plural);
}

std::string gib(uint64_t bytes)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / static_cast<double>(kGiB));
    return buf;
}

// ---------------------------------------------------------------------------------------------------
// What the archive says without running it.

struct ArchiveFacts {
    bool legacyLayout = false; // model.json: TorchScript before torch 1.4
    bool mobile = false; // bytecode.pkl: saved for the lite interpreter
    // Tensors named by their attribute path in data.pkl ("encoder.0.weight"), as entries with a location.
    std::unordered_map<std::string, Entry> pickled;
    std::string pickleProblem; // why data.pkl could not be read, when it could not
};

// Module objects in data.pkl are `__torch__.<Class>` instances whose BUILD state is their attribute dict;
// packed params and other classes with __setstate__ have a tuple state, which is not followed.
void collectTensors(const pickle::Value* v, std::string& path, int depth, const torch::EntryContext& ctx,
    std::unordered_map<std::string, Entry>& out, size_t& budget)
{
    const pickle::ObjectValue* obj = pickle::asObject(v);
    if (!obj || depth > kMaxPickleDepth || budget == 0)
        return;
    const pickle::DictValue* attrs = pickle::asDict(obj->state);
    if (!attrs)
        return;
    const size_t base = path.size();
    for (const auto& [k, value] : attrs->items) {
        if (budget == 0)
            return;
        --budget;
        const pickle::StrValue* key = pickle::asStr(k);
        if (!key)
            continue;
        path.resize(base);
        path += key->s;
        if (const pickle::TensorValue* t = pickle::asTensor(value)) {
            if (!out.count(path))
                out.emplace(path, torch::tensorEntry(*t, path, ctx));
        } else if (pickle::asObject(value)) {
            path += '.';
            collectTensors(value, path, depth + 1, ctx, out, budget);
        }
    }
    path.resize(base);
}

void readPickledTensors(const ZipArchive& zip, const std::string& prefix, ArchiveFacts& facts)
{
    const ZipEntry* pkl = zip.findAsTorch(prefix + "data.pkl");
    if (!pkl)
        return;
    pickle::Arena arena;
    torch::TorchSemantics semantics(torch::TorchSemantics::PersistentIds::Zip);
    std::vector<uint8_t> inflated;
    Bytes bytes = zip.contents(*pkl, inflated, kMaxInflatedPickle);
    pickle::Unpickler unpickler(bytes, arena, semantics, pkl->method == 0 ? zip.dataOffset(*pkl) : 0);
    const pickle::Value* root = unpickler.load();
    // Storages to their records under data/ (TorchScript writes them as torch.save does).
    const std::string dataPrefix = prefix + "data/";
    for (pickle::StorageValue* s : semantics.storages()) {
        if (s->viewOf() || s->key.empty())
            continue;
        const ZipEntry* rec = zip.findAsTorch(dataPrefix + std::string(s->key));
        if (!rec)
            continue;
        try {
            s->fileOffset = static_cast<int64_t>(zip.dataOffset(*rec));
        } catch (const FormatError&) {
            continue; // LibTorch read it; only the location is unknown
        }
        s->compressed = rec->method != 0;
    }
    torch::EntryContext ctx;
    std::string path;
    size_t budget = std::max<size_t>(100'000, arena.bytesAllocated() / 8);
    collectTensors(root, path, 0, ctx, facts.pickled, budget);
}

ArchiveFacts inspectArchive(const InputFile& file, Source& out, Timings* timings)
{
    PhaseTimer timer(timings, "zip central directory");
    ArchiveFacts facts;
    ZipArchive zip(file);
    if (zip.entries().empty())
        throw FormatError("the zip archive is empty");
    std::string_view first = zip.entries().front().name;
    const std::string prefix(first.substr(0, first.find('/') + 1));
    readTorchTextRecords(zip, prefix, out.metadata);
    facts.legacyLayout = zip.find(prefix + "model.json") != nullptr;
    facts.mobile = zip.find(prefix + "bytecode.pkl") != nullptr;
    timer.stop();
    PhaseTimer pickleTimer(timings, "data.pkl (locations)");
    try {
        readPickledTensors(zip, prefix, facts);
    } catch (const FormatError& e) {
        facts.pickled.clear();
        facts.pickleProblem = e.what();
    } catch (const std::bad_alloc&) {
        facts.pickled.clear();
        facts.pickleProblem = "out of memory";
    }
    return facts;
}

// ---------------------------------------------------------------------------------------------------
// The worker.

struct WorkerRun {
    ChildResult result;
    unsigned timeoutMs = 0;
    uint64_t memoryLimit = 0;
};

WorkerRun runWorker(const InputFile& file, const TorchScriptWorker& worker)
{
    WorkerRun run;
    const uint64_t size = file.size();
    run.timeoutMs = worker.timeoutMs ? worker.timeoutMs
                                     : static_cast<unsigned>(std::min<uint64_t>(60'000 + 20'000 * (size / kGiB + 1),
                                           24u * 3600 * 1000));
    run.memoryLimit = worker.memoryLimitBytes ? worker.memoryLimitBytes : 4 * kGiB + 4 * size;
    ChildLimits limits;
    limits.timeoutMs = run.timeoutMs;
    limits.addressSpaceBytes = run.memoryLimit;
    limits.maxStdout = 512 * kMiB;

    std::vector<std::string> argv = worker.command;
    int fd = -1;
    if (file.onDisk()) {
        // Absolute, so that a name starting with '-' is not taken for an option.
        std::error_code ec;
        fs::path abs = fs::absolute(file.path(), ec);
        argv.push_back(ec ? file.path() : abs.string());
    } else {
        // In-memory bytes (embedded files, fuzzers): handed over as an anonymous file, descriptor 3.
        fd = ::memfd_create("statelens-torchscript", MFD_CLOEXEC);
        if (fd < 0) {
            run.result.startError = std::string("memfd_create failed: ") + std::strerror(errno);
            return run;
        }
        std::vector<uint8_t> unused;
        const Bytes b = file.read(0, file.size(), unused); // a view: the file is in memory
        for (size_t done = 0; done < b.size();) {
            ssize_t n = ::write(fd, b.data() + done, b.size() - done);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                run.result.startError = std::string("cannot copy the archive for the worker: ") + std::strerror(errno);
                ::close(fd);
                return run;
            }
            done += static_cast<size_t>(n);
        }
        argv.push_back("/dev/fd/3");
    }
    spdlog::debug("{}: TorchScript archive, loaded by the worker process {}", terminalText(file.path()), terminalText(argv[0]));
    run.result = runChild(argv, limits, fd);
    if (fd >= 0)
        ::close(fd);
    return run;
}

// ---------------------------------------------------------------------------------------------------
// The worker's JSON to entries.

std::string jsonString(simdjson::dom::element e, std::string_view key)
{
    std::string_view s;
    if (e[key].get_string().get(s) == simdjson::SUCCESS)
        return std::string(s);
    return {};
}

struct Built {
    bool originalDeviceDiffers = false;
    std::string originalDevice;
    size_t buffers = 0;
};

Entry tensorFromJson(simdjson::dom::element j, std::string name)
{
    Entry e;
    e.name = std::move(name);
    e.kind = EntryKind::Tensor;
    std::string dtype = jsonString(j, "dtype");
    if (auto d = dtypeFromName(dtype))
        e.dtype = *d;
    else
        e.attributes.emplace_back("dtype", dtype);
    simdjson::dom::array arr;
    if (j["shape"].get_array().get(arr) == simdjson::SUCCESS)
        for (auto d : arr) {
            int64_t v = 0;
            if (d.get_int64().get(v) == simdjson::SUCCESS)
                e.shape.push_back(v);
        }
    bool flag = false;
    if (j["requires_grad"].get_bool().get(flag) == simdjson::SUCCESS)
        e.requiresGrad = flag;
    if (j["is_parameter"].get_bool().get(flag) == simdjson::SUCCESS)
        e.isParameter = flag;
    e.device = jsonString(j, "device");
    if (std::string layout = jsonString(j, "layout"); !layout.empty())
        e.attributes.emplace_back("layout", layout);
    if (j["strides"].get_array().get(arr) == simdjson::SUCCESS)
        for (auto d : arr) {
            int64_t v = 0;
            if (d.get_int64().get(v) == simdjson::SUCCESS)
                e.location.strides.push_back(v);
        }
    int64_t i = 0;
    if (j["storage_offset"].get_int64().get(i) == simdjson::SUCCESS)
        e.location.storageOffset = i;
    if (j["storage"].get_int64().get(i) == simdjson::SUCCESS)
        e.location.storageId = "libtorch:" + std::to_string(i);
    uint64_t u = 0;
    if (j["storage_nbytes"].get_uint64().get(u) == simdjson::SUCCESS)
        e.location.storageNbytes = u;
    simdjson::dom::element q;
    if (j["quant"].get(q) == simdjson::SUCCESS) {
        e.attributes.emplace_back("qscheme", jsonString(q, "qscheme"));
        double scale = 0;
        simdjson::dom::element part;
        if (q["scale"].get_double().get(scale) == simdjson::SUCCESS) {
            char buf[64];
            std::snprintf(buf, sizeof buf, "%.9g", scale);
            e.attributes.emplace_back("scale", buf);
            if (q["zero_point"].get_int64().get(i) == simdjson::SUCCESS)
                e.attributes.emplace_back("zero_point", std::to_string(i));
        } else {
            if (q["axis"].get_int64().get(i) == simdjson::SUCCESS)
                e.attributes.emplace_back("axis", std::to_string(i));
            for (const char* role : { "scales", "zero_points" })
                if (q[role].get(part) == simdjson::SUCCESS) {
                    Entry p = tensorFromJson(part, role);
                    p.location = {};
                    e.parts.push_back(std::move(p));
                }
        }
    }
    if (std::string value = jsonString(j, "value"); !value.empty())
        e.attributes.emplace_back("value", value);
    return e;
}

// Location, storage record and original device from data.pkl, when it names the same tensor.
void placeFromPickle(Entry& e, const ArchiveFacts& facts, Built& built)
{
    auto it = facts.pickled.find(e.name);
    if (it == facts.pickled.end())
        return;
    const Entry& p = it->second;
    if (p.dtype != e.dtype || p.shape != e.shape)
        return; // not the tensor LibTorch ended up with (a __setstate__ replaced it): keep LibTorch's view
    const std::string loaded = e.device.str();
    e.location = p.location;
    if (!p.device.empty() && p.device != e.device) {
        e.attributes.emplace_back("loaded_on", loaded);
        e.device = p.device;
        built.originalDeviceDiffers = true;
        built.originalDevice = p.device;
    }
}

Entry entryFromJson(simdjson::dom::element j, const ArchiveFacts& facts, Built& built)
{
    std::string name = jsonString(j, "name");
    std::string kind = jsonString(j, "kind");
    std::string role = jsonString(j, "role");
    Entry e;
    if (kind == "group") {
        e.name = std::move(name);
        e.kind = EntryKind::Group;
        simdjson::dom::array parts;
        if (j["parts"].get_array().get(parts) == simdjson::SUCCESS)
            for (auto p : parts)
                e.parts.push_back(tensorFromJson(p, jsonString(p, "name")));
        if (!e.parts.empty()) {
            e.dtype = e.parts.front().dtype;
            e.shape = e.parts.front().shape;
            e.device = e.parts.front().device;
        }
    } else if (kind == "object") {
        e.name = std::move(name);
        e.kind = EntryKind::Object;
        e.value = jsonString(j, "value");
    } else {
        e = tensorFromJson(j, std::move(name));
        placeFromPickle(e, facts, built);
    }
    if (kind != "tensor")
        e.typeName = jsonString(j, "type");
    if (role == "buffer")
        ++built.buffers;
    e.attributes.emplace_back("kind", role);
    if (std::string module = jsonString(j, "module"); !module.empty())
        e.attributes.emplace_back("module", module);
    return e;
}

std::string listOf(simdjson::dom::element doc, std::string_view key, size_t& count)
{
    std::string out;
    count = 0;
    simdjson::dom::array arr;
    if (doc[key].get_array().get(arr) != simdjson::SUCCESS)
        return out;
    for (auto v : arr) {
        std::string_view s;
        if (v.get_string().get(s) != simdjson::SUCCESS)
            continue;
        if (count < 6)
            out += (out.empty() ? "" : ", ") + std::string(s);
        ++count;
    }
    if (count > 6)
        out += ", ...";
    return out;
}

// Tied weights and views: entries whose tensors share a storage.
void reportSharedStorage(Source& out)
{
    std::map<std::string, std::vector<size_t>> byStorage;
    for (size_t i = 0; i < out.entries.size(); ++i)
        if (out.entries[i].kind == EntryKind::Tensor && !out.entries[i].location.storageId.empty())
            byStorage[out.entries[i].location.storageId.str()].push_back(i);
    for (const auto& [storage, members] : byStorage) {
        if (members.size() < 2)
            continue;
        out.addFinding(Severity::Info, torch::sharedStorageMessage(out.entries, storage, members), out.entries[members[0]].name);
        for (size_t a : members) {
            const Entry& ea = out.entries[a];
            std::string partners;
            size_t listed = 0;
            for (size_t b : members) {
                const Entry& eb = out.entries[b];
                if (a == b || eb.shape != ea.shape || eb.dtype != ea.dtype
                    || eb.location.storageOffset != ea.location.storageOffset
                    || eb.location.strides != ea.location.strides || listed == 8)
                    continue;
                partners += (partners.empty() ? "" : ", ") + eb.name;
                ++listed;
            }
            if (!partners.empty())
                out.entries[a].attributes.emplace_back("tied_with", partners);
        }
    }
}

[[noreturn]] void failFromWorker(const std::string& path, const WorkerRun& run, const ArchiveFacts& facts)
{
    const ChildResult& r = run.result;
    const std::string what = "is a TorchScript archive, ";
    const std::string stderrLine = lastLine(r.err);
    const std::string tail = stderrLine.empty() ? std::string() : " (worker said: " + stderrLine + ")";
    switch (r.end) {
    case ChildResult::End::StartFailed:
        throw LoadError(path, what + "and the TorchScript worker could not be started: " + r.startError);
    case ChildResult::End::TimedOut:
        throw LoadError(path,
            what + "and loading it with LibTorch did not finish within the " + std::to_string(run.timeoutMs / 1000)
                + " s timeout; the worker process was killed");
    case ChildResult::End::OutputTooLarge:
        throw LoadError(path, what + "and the TorchScript worker's answer grew past its size limit; it was stopped");
    case ChildResult::End::Signaled:
        throw LoadError(path,
            what + "and LibTorch crashed while loading it (" + signalDescription(r.signal)
                + ", in the separate worker process, limited to " + gib(run.memoryLimit)
                + " of address space); the archive is probably malformed" + tail);
    case ChildResult::End::Exited:
        break;
    }
    std::string legacy = facts.legacyLayout
        ? " (it has the pre-1.4 model.json layout, which LibTorch no longer reads; re-save it with torch < 1.4 "
          "or export its weights)"
        : std::string();
    if (r.exitCode == 0)
        throw LoadError(path, what + "and the TorchScript worker's answer is not one StateLens understands" + tail);
    throw LoadError(path, what + "and the TorchScript worker failed (exit code " + std::to_string(r.exitCode) + ")" + tail + legacy);
}

} // namespace

void setTorchScriptWorker(TorchScriptWorker worker)
{
    std::lock_guard lock(g_workerMutex);
    g_worker = std::move(worker);
}

TorchScriptWorker torchScriptWorker()
{
    {
        std::lock_guard lock(g_workerMutex);
        if (!g_worker.command.empty())
            return g_worker;
    }
    if (const char* exe = std::getenv("STATELENS_TORCHSCRIPT_WORKER"); exe && *exe)
        return torchScriptWorkerFor(exe);
    return {};
}

TorchScriptWorker torchScriptWorkerFor(const std::string& statelensExecutable)
{
    TorchScriptWorker w;
    w.command = { statelensExecutable, "__torchscript-worker" };
    return w;
}

Source readTorchScript(const std::shared_ptr<const InputFile>& file, const OpenOptions& options)
{
    const std::string& path = file->path();
    if (options.container && !options.container->empty())
        throw LoadError(path, "no container '" + *options.container + "' (this format has only one)");
    Source out;
    out.path = path;
    out.format = SourceFormat::TorchScript;
    out.files.push_back(path);

    ArchiveFacts facts;
    try {
        facts = inspectArchive(*file, out, options.timings);
    } catch (const FormatError& e) {
        throw LoadError(path, e.what());
    }

    const TorchScriptWorker worker = options.torchScriptWorker ? *options.torchScriptWorker : torchScriptWorker();
    if (worker.command.empty())
        throw LoadError(path,
            "is a TorchScript archive (torch.jit.save); reading one takes the statelens executable's TorchScript "
            "worker, and this program set none up (setTorchScriptWorker or STATELENS_TORCHSCRIPT_WORKER)");
    PhaseTimer workerTimer(options.timings, "TorchScript worker");
    const WorkerRun run = runWorker(*file, worker);
    workerTimer.stop();

    // The answer, when there is one: a description or an error document.
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    bool parsed = run.result.end == ChildResult::End::Exited && !run.result.out.empty()
        && parser.parse(simdjson::padded_string(run.result.out)).get(doc) == simdjson::SUCCESS && doc.is_object();
    int64_t protocol = 0;
    if (parsed && (doc["statelens_torchscript"].get_int64().get(protocol) != simdjson::SUCCESS || protocol != 1))
        parsed = false;
    if (!parsed)
        failFromWorker(path, run, facts);
    const std::string libtorch = jsonString(doc, "libtorch");
    if (std::string error = jsonString(doc, "error"); !error.empty() || run.result.exitCode != 0) {
        const std::string kind = jsonString(doc, "error_kind");
        const std::string plugin = jsonString(doc, "plugin");
        if (kind == "plugin_missing")
            throw LoadError(path,
                "is a TorchScript archive; reading one needs StateLens's LibTorch plugin, and " + plugin
                    + " is missing: install libtorch-dev, then rebuild StateLens with -DSTATELENS_WITH_TORCH=ON "
                      "(the default; the plugin is built when CMake finds LibTorch)");
        if (kind == "plugin_load" || kind == "plugin_abi")
            throw LoadError(path, "is a TorchScript archive, and the LibTorch plugin " + plugin + " could not be used: " + error);
        std::string hint;
        if (error.find("bad_alloc") != std::string::npos)
            hint = " (out of memory: the worker may use " + gib(run.memoryLimit) + " of address space)";
        if (facts.legacyLayout)
            hint += " (it has the pre-1.4 model.json layout, which LibTorch no longer reads)";
        throw LoadError(path,
            "is a TorchScript archive that LibTorch " + libtorch + " could not load: "
                + (error.empty() ? "the worker failed without saying why" : error) + hint);
    }

    // Entries.
    Built built;
    simdjson::dom::array entries;
    if (doc["entries"].get_array().get(entries) != simdjson::SUCCESS)
        throw LoadError(path, "is a TorchScript archive, and the TorchScript worker's answer has no entries");
    for (auto j : entries)
        out.entries.push_back(entryFromJson(j, facts, built));
    out.container = "";
    size_t tensors = 0;
    for (const auto& e : out.entries)
        tensors += e.kind == EntryKind::Tensor ? 1 : e.kind == EntryKind::Group ? e.parts.size() : 0;
    out.containers.push_back(ContainerInfo { "", ContainerInfo::Role::Model, tensors });

    const std::string cls = jsonString(doc, "class");
    out.metadata.emplace_back("class", cls);
    out.metadata.emplace_back("loaded_with", "LibTorch " + libtorch);
    if (facts.mobile)
        out.metadata.emplace_back("mobile_bytecode", "bytecode.pkl");

    // Findings: the safety note first.
    out.addFinding(Severity::Warning,
        "TorchScript archives run code when loaded (torch.jit.load compiles the archive's code/ and runs its "
        "__setstate__ methods); StateLens loaded this one with LibTorch "
            + libtorch + " in a separate worker process (limits: " + std::to_string(run.timeoutMs / 1000) + " s, "
            + gib(run.memoryLimit) + " of address space), never in its own");
    uint64_t stateDict = 0, unpacked = 0;
    if (doc["state_dict_entries"].get_uint64().get(stateDict) != simdjson::SUCCESS)
        stateDict = 0;
    if (doc["unpacked_entries"].get_uint64().get(unpacked) != simdjson::SUCCESS)
        unpacked = 0;
    if (unpacked)
        out.addFinding(Severity::Info,
            count(unpacked, "entry", "entries") + " unpacked from quantized packed-params attributes, named as torch.ao's "
                "eager state_dict() names them; torch.jit.load(...).state_dict() lists only the other "
                + std::to_string(stateDict));
    if (built.buffers)
        out.addFinding(Severity::Info,
            "TorchScript does not record which buffers are persistent: torch.jit.load(...).state_dict() lists "
            "every buffer (" + count(built.buffers, "buffer") + " here), non-persistent ones included, and so does StateLens");
    size_t n = 0;
    if (std::string list = listOf(doc, "opaque", n); n)
        out.addFinding(Severity::Warning,
            count(n, "attribute") + " hold packed objects StateLens cannot list (no state_dict() lists them "
                "either): " + list);
    if (std::string list = listOf(doc, "tensor_attributes", n); n)
        out.addFinding(Severity::Info,
            count(n, "tensor") + " held as plain module attributes, neither parameters nor buffers, so no "
                "state_dict() lists them: " + list);
    bool truncated = false;
    if (doc["truncated"].get_bool().get(truncated) == simdjson::SUCCESS && truncated)
        out.addFinding(Severity::Warning, "the module tree is too large; the listing stops at 10,000,000 entries");
    simdjson::dom::array warnings;
    if (doc["warnings"].get_array().get(warnings) == simdjson::SUCCESS) {
        size_t shown = 0;
        for (auto w : warnings) {
            std::string_view s;
            if (w.get_string().get(s) == simdjson::SUCCESS && shown++ < 5)
                out.addFinding(Severity::Warning, "LibTorch warned while loading: " + std::string(s));
        }
    }
    if (built.originalDeviceDiffers)
        out.addFinding(Severity::Info,
            "tensors were saved on " + built.originalDevice
                + " (data.pkl); LibTorch loaded them on the CPU, and each keeps its saved device here");
    if (!facts.pickleProblem.empty())
        out.addFinding(Severity::Info,
            "data.pkl could not be read by StateLens's own pickle VM (" + facts.pickleProblem
                + "), so byte locations are not shown; LibTorch read it");
    if (facts.mobile)
        out.addFinding(Severity::Info, "the archive also holds mobile (lite interpreter) bytecode (bytecode.pkl)");
    reportSharedStorage(out);
    return out;
}

} // namespace sl
