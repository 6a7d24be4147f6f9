#include "torch_zip_reader.h"

#include "formats/torchscript_reader.h"
#include "io/miniz_lookup.h"
#include "io/zip_archive.h"
#include "pickle/opcode_scan.h"
#include "pickle/unpickler.h"
#include "torch/pickled_checkpoint.h"
#include "util/decimal_key.h"
#include "util/error.h"
#include "util/timings.h"

#include <algorithm>
#include <charconv>
#include <future>
#include <optional>
#include <unordered_map>

namespace sl {

namespace {

// torch's kMaxSupportedFileFormatVersion (caffe2/serialize/versions.h) at the time of writing.
constexpr int64_t kNewestKnownVersion = 10;
// data.pkl deflated by a re-zipping tool is inflated into memory; beyond this it is refused.
// 1 GiB holds the pickle of ~8 million tensors, and bounds what a small deflate bomb can make us allocate.
constexpr uint64_t kMaxInflatedPickle = uint64_t(1) << 30;

std::string_view asText(Bytes b) { return { reinterpret_cast<const char*>(b.data()), b.size() }; }

std::string ordinal(size_t n)
{
    const char* suffix = (n % 100 >= 11 && n % 100 <= 13) ? "th"
        : n % 10 == 1                                    ? "st"
        : n % 10 == 2                                    ? "nd"
        : n % 10 == 3                                    ? "rd"
                                                         : "th";
    return std::to_string(n) + suffix;
}

bool sameIgnoringCase(std::string_view a, std::string_view b)
{
    return a.size() == b.size() && MinizLookup::compare(a, b) == 0;
}

// "the archive holds 3 records named 'a/data/0'; torch 1.13 and 2.6 both read the 2nd of them ...": which
// copy torch takes (ZipArchive::findAsTorch; miniz 2.1.0 in torch 1.13 and 3.0.2 in 2.6 sort and search
// alike, tested against both), in central-directory order. miniz ignores ASCII case, so 'a/DATA/0' is a
// copy of 'a/data/0'.
std::string duplicateFinding(const ZipArchive& zip, std::string_view name)
{
    size_t copies = 0, copy = 0;
    bool caseDiffers = false;
    const ZipEntry* pick = zip.findAsTorch(name);
    for (const ZipEntry& e : zip.entries())
        if (sameIgnoringCase(e.name, name)) {
            ++copies;
            caseDiffers = caseDiffers || e.name != name;
            if (&e == pick)
                copy = copies;
        }
    std::string what = copy ? "the " + ordinal(copy) + " of them (in central-directory order)" : "none of them";
    if (copy && caseDiffers)
        what += ", '" + std::string(pick->name) + "'";
    return "the archive holds " + std::to_string(copies) + " records named '" + std::string(name) + "'"
        + (caseDiffers ? " ignoring case (as torch's miniz compares names)" : "") + "; torch 1.13 and 2.6 both read "
        + what + ", as StateLens does; other zip readers may take another";
}

} // namespace

bool isTorchScriptArchive(const ZipArchive& zip, const std::string& prefix)
{
    // model.json is the pre-1.4 TorchScript layout.
    if (zip.find(prefix + "constants.pkl") || zip.find(prefix + "bytecode.pkl") || zip.find(prefix + "model.json"))
        return true;
    const std::string code = prefix + "code/";
    for (const auto& e : zip.entries())
        if (e.name.compare(0, code.size(), code) == 0)
            return true;
    return false;
}

bool loadsAsTorchScript(const ZipArchive& zip, const std::string& prefix)
{
    return isTorchScriptArchive(zip, prefix) && (!zip.findAsTorch(prefix + "data.pkl") || zip.find(prefix + "constants.pkl"));
}

namespace {

// An early start on the pickle (below).
struct Early {
    bool started = false; // the directory is being read on the second thread
    bool read = false; // the pickle's bytes were read
    bool succeeded = false; // the pickle was unpickled without an error
    ZipEntry record; // the archive's first record, which the pickle was read from
    Bytes bytes; // its contents (in a region the checkpoint keeps)
    uint64_t offset = 0;
    pickle::Value* root = nullptr;
    std::future<void> directoryRead; // ready when the second thread has read the directory (or failed to)
};

bool sameRecord(const ZipEntry& a, const ZipEntry& b)
{
    return a.name == b.name && a.localHeaderOffset == b.localHeaderOffset && a.compressedSize == b.compressedSize
        && a.size == b.size && a.method == b.method && a.flags == b.flags;
}

// torch writes data.pkl as an archive's first record, and reading the central directory of an archive with
// 76,800 records takes half as long as unpickling its data.pkl. So when the first record is a stored
// "<folder>/data.pkl", a second thread reads the directory while this one reads the record's bytes and
// unpickles them, and then it runs the load-safety scan over them (`mainScan`). What the directory then says
// decides: when torch would read another record, or hand the archive to torch.jit.load, the early work is
// dropped and done again in order (readTorchZip). Any error in the early work drops it too, so every error
// comes from the in-order path, in its order.
Early startEarly(ZipArchive& zip, torch::PickledCheckpoint& ck, std::future<pickle::PickleScan>& mainScan, bool lanes)
{
    Early early;
    std::optional<ZipEntry> first;
    try {
        first = zip.firstRecord();
    } catch (const FormatError&) {
        return early; // the in-order read reports it
    }
    const std::string_view name = first ? first->name : std::string_view();
    if (!first || first->method != 0 || !name.ends_with("/data.pkl") || name.find('/') != name.size() - 9)
        return early;
    early.record = *first;
    // The bytes are handed over once read; an empty view (they could not be) leaves the scan out.
    struct Pickle {
        Bytes bytes;
        uint64_t offset = 0;
    };
    std::promise<Pickle> pickleRead;
    auto directoryRead = std::make_shared<std::promise<void>>();
    early.directoryRead = directoryRead->get_future();
    // The directory is read while this thread reads the record: neither touches what the other writes (the
    // record's name lies in a block of names the directory only adds to).
    mainScan = std::async(std::launch::async, [&zip, directoryRead, pickle = pickleRead.get_future(), lanes]() mutable {
        try {
            zip.readDirectory();
            directoryRead->set_value();
        } catch (...) {
            directoryRead->set_exception(std::current_exception());
            return pickle::PickleScan {};
        }
        const Pickle p = pickle.get();
        return p.bytes.empty() ? pickle::PickleScan {} : pickle::scanPickle(p.bytes, p.offset, 2, lanes);
    });
    early.started = true;
    try {
        ck.regions.push_back(zip.storedContents(early.record, kMaxInflatedPickle)); // stored: checked above
        early.bytes = ck.regions.back()->bytes();
        early.offset = zip.dataOffset(early.record);
        early.read = !early.bytes.empty();
    } catch (const FormatError&) {
        // The in-order read reports it.
    } catch (...) {
        pickleRead.set_value({});
        mainScan.wait(); // the thread reads `zip`, which the caller's unwinding destroys
        throw;
    }
    pickleRead.set_value(early.read ? Pickle { early.bytes, early.offset } : Pickle {});
    return early;
}

// Runs data.pkl into `ck`'s graph. The tensor lane (pickle/unpickler.h) builds the tensor records torch
// writes in one step; a pickle that fetches what the lane did not build is run again without it.
pickle::Value* unpickleData(Bytes bytes, uint64_t offset, torch::PickledCheckpoint& ck, const OpenOptions& options)
{
    auto run = [&](bool lane) {
        pickle::Unpickler unpickler(bytes, ck.arena, ck.semantics, offset);
        unpickler.setControl(options.control);
        unpickler.setTensorLane(lane);
        return unpickler.load();
    };
    if (options.tensorLanes) {
        try {
            return run(true);
        } catch (const pickle::TensorLaneRestart&) {
            ck.arena.release();
            ck.semantics = torch::TorchSemantics(torch::TorchSemantics::PersistentIds::Zip);
        }
    }
    return run(false);
}

void unpickleEarly(Early& early, torch::PickledCheckpoint& ck, const OpenOptions& options)
{
    try {
        early.root = unpickleData(early.bytes, early.offset, ck, options);
        early.succeeded = true;
    } catch (...) {
        // Done again in order, which reports it.
    }
}

} // namespace

Source readTorchZip(const std::shared_ptr<const InputFile>& file, const OpenOptions& options)
{
    Source out;
    out.path = file->path();
    out.format = SourceFormat::TorchZip;
    out.files.push_back(file->path());
    // Every data.pkl candidate is scanned at the opcode level, so an error that stops the unpickler still
    // names the dangers seen. The scan of the pickle torch reads is an independent pass over the bytes the
    // unpickler reads, so it runs on a second thread meanwhile; the others are rare and scanned here.
    torch::LoadSafety safety;
    struct Scanned {
        std::string what;
        std::optional<pickle::PickleScan> scan; // empty: the one running on the second thread
    };
    std::vector<Scanned> scans;
    // Declared before the scan thread: it holds the bytes that thread reads, so it is destroyed after it.
    auto ck = std::make_shared<torch::PickledCheckpoint>(torch::TorchSemantics::PersistentIds::Zip);
    std::future<pickle::PickleScan> mainScan;
    auto scanned = [&] {
        for (Scanned& s : scans)
            safety.add(s.what, s.scan ? std::move(*s.scan) : mainScan.get());
        scans.clear();
    };
    try {
        std::optional<PhaseTimer> directoryTimer(std::in_place, options.timings, "zip central directory");
        ZipArchive zip(*file, 0, UINT64_MAX, ZipDirectory::Later);
        Early early = startEarly(zip, *ck, mainScan, options.tensorLanes);
        if (early.started) {
            directoryTimer->rename("zip end records + data.pkl");
            directoryTimer.reset();
            if (early.read) {
                PhaseTimer pickleTimer(options.timings, "pickle");
                unpickleEarly(early, *ck, options);
            }
            directoryTimer.emplace(options.timings, "zip directory (meanwhile)");
            early.directoryRead.get(); // the directory's own errors, as if read first
        } else {
            zip.readDirectory();
        }
        if (zip.entries().empty())
            throw FormatError("the zip archive is empty");
        std::string_view first = zip.entries().front().name;
        size_t slash = first.find('/');
        if (slash == std::string_view::npos)
            throw FormatError("first zip record '" + std::string(first) + "' is not inside a folder; not a torch.save archive");
        const std::string prefix(first.substr(0, slash + 1));

        // The loader sends every zip here (it does not parse the central directory twice to tell them apart).
        // torch.load hands an archive to torch.jit.load only when it has constants.pkl; any other archive
        // with a data.pkl is unpickled as torch.save wrote it, whatever else it holds (a code/ folder).
        // With duplicate names, the record torch's own lookup takes (io/miniz_lookup.h).
        const std::string pklName = prefix + "data.pkl";
        const ZipEntry* pkl = zip.findAsTorch(pklName);
        // The early start holds only when it read the record torch reads.
        const bool reuse = early.succeeded && pkl == &zip.entries().front() && sameRecord(*pkl, early.record);
        if (early.started && !reuse) {
            mainScan.get(); // its thread reads ck's bytes
            mainScan = {};
            ck = std::make_shared<torch::PickledCheckpoint>(torch::TorchSemantics::PersistentIds::Zip);
        }
        if (loadsAsTorchScript(zip, prefix))
            return readTorchScript(file, options);
        if (!pkl)
            throw FormatError("no " + prefix + "data.pkl record; not a torch.save archive");
        if (pkl->name != pklName)
            out.addFinding(Severity::Warning,
                "torch reads '" + std::string(pkl->name) + "' as " + pklName
                    + " (its miniz matches record names ignoring case); tools that match names exactly do not");
        if (isTorchScriptArchive(zip, prefix))
            out.addFinding(Severity::Warning,
                "the archive has TorchScript records but no constants.pkl, so torch.load unpickles its data.pkl as a "
                "torch.save file");

        // Every data.pkl candidate, at the opcode level: of duplicate names torch reads one that depends on the
        // archive's layout, other readers another, and a second data.pkl is a place to hide a payload from
        // other tools. miniz matches names ignoring ASCII case, so "DATA.PKL" is a candidate too.
        Bytes pickleBytes = early.bytes;
        if (!reuse) {
            if (auto stored = zip.storedContents(*pkl, kMaxInflatedPickle)) {
                pickleBytes = stored->bytes();
                ck->regions.push_back(std::move(stored));
            } else {
                pickleBytes = zip.contents(*pkl, ck->ownedPickle, kMaxInflatedPickle);
            }
        }
        const uint64_t pickleOffset = reuse ? early.offset : pkl->method == 0 ? zip.dataOffset(*pkl) : 0;
        for (const ZipEntry& e : zip.entries()) {
            if (!sameIgnoringCase(e.name, pklName))
                continue;
            if (&e == pkl) {
                if (!reuse) // else the early start's thread scans them, after the directory
                    mainScan = std::async(std::launch::async,
                        [pickleBytes, pickleOffset, lanes = options.tensorLanes] {
                            return pickle::scanPickle(pickleBytes, pickleOffset, 2, lanes);
                        });
                scans.push_back({ prefix + "data.pkl", std::nullopt });
                continue;
            }
            std::vector<uint8_t> inflated;
            Bytes bytes = zip.contents(e, inflated, kMaxInflatedPickle);
            scans.push_back({ prefix + "data.pkl", pickle::scanPickle(bytes, e.method == 0 ? zip.dataOffset(e) : 0) });
        }
        {
            // One finding per duplicated name (the first five), naming the copy torch reads.
            std::vector<size_t> repeated(zip.duplicates());
            repeated.insert(repeated.end(), zip.caseVariants().begin(), zip.caseVariants().end());
            std::sort(repeated.begin(), repeated.end());
            std::vector<std::string_view> names; // the first record's name of each group, for five groups
            for (size_t i : repeated) {
                std::string_view n = zip.entries()[i].name;
                if (names.size() == 5)
                    break;
                if (std::none_of(names.begin(), names.end(), [&](std::string_view m) { return sameIgnoringCase(m, n); }))
                    for (const ZipEntry& e : zip.entries())
                        if (sameIgnoringCase(e.name, n)) {
                            names.push_back(e.name);
                            break;
                        }
            }
            for (std::string_view n : names)
                out.addFinding(Severity::Danger, duplicateFinding(zip, n));
            // All groups: distinct names ignoring case among the repeated records (sorted, n log n).
            std::vector<std::string_view> all;
            for (size_t i : repeated)
                all.push_back(zip.entries()[i].name);
            std::sort(all.begin(), all.end(), [](std::string_view a, std::string_view b) { return MinizLookup::compare(a, b) < 0; });
            size_t groups = all.empty() ? 0 : 1;
            for (size_t k = 1; k < all.size(); ++k)
                groups += MinizLookup::compare(all[k - 1], all[k]) != 0;
            if (groups > 5)
                out.addFinding(Severity::Danger, std::to_string(groups) + " duplicated record names in all");
        }

        readTorchTextRecords(zip, prefix, out.metadata);
        auto meta = [&](const char* key) -> const std::string* {
            for (const auto& [k, v] : out.metadata)
                if (k == key)
                    return &v;
            return nullptr;
        };
        const std::string* version = meta(".data/version") ? meta(".data/version") : meta("version");
        if (!version) {
            out.addFinding(Severity::Warning, "no version record; torch.load refuses archives without one");
        } else {
            int64_t v = 0;
            auto [p, ec] = std::from_chars(version->data(), version->data() + version->size(), v);
            if (ec != std::errc() || v < 1)
                out.addFinding(Severity::Warning, "version record '" + *version + "' is not a positive number");
            else if (v > kNewestKnownVersion)
                out.addFinding(Severity::Info, "archive version " + *version + " is newer than StateLens knows");
        }
        ck->fileSize = file->size();
        if (const std::string* order = meta("byteorder"); order && *order == "big") {
            ck->context.bigEndian = true;
            out.addFinding(Severity::Info, "tensor data is big-endian (byteorder record)");
        }

        directoryTimer.reset();
        // Run the pickle over its bytes, read (and inflated if the archive was re-compressed) into the checkpoint.
        PhaseTimer pickleTimer(options.timings, reuse ? "load-safety scan (wait)" : "pickle");
        if (reuse) {
            ck->root = early.root;
        } else {
            ck->root = unpickleData(pickleBytes, pickleOffset, *ck, options);
        }
        scanned();
        ck->safety = safety;
        pickleTimer.stop();
        if (options.timings)
            options.timings->phases.push_back(
                { "  (object graph " + std::to_string(ck->arena.bytesAllocated() >> 20) + " MB)", 0.0, 0 });
        // The containers are listed on the second core while the storages are resolved here.
        std::future<torch::ContainerScan> containerScan = torch::startContainerScan(ck);
        PhaseTimer storageTimer(options.timings, "resolve storages");

        // Resolve each storage to its record without reading it: the record torch reads (the archive's own
        // name index, or miniz's sorted lookup when names repeat); `recordName` is reused so lookups do not
        // allocate.
        const std::string dataPrefix = prefix + "data/";
        std::string recordName = dataPrefix;
        size_t missing = 0, caseMatched = 0;
        // Large archives written by torch follow its alignment rule; a sample of local headers proves that,
        // and the rest are computed instead of read (reading them touched every page of the file).
        uint64_t alignment = 64;
        if (const std::string* a = meta(".storage_alignment")) {
            uint64_t v = 0;
            auto [p, ec] = std::from_chars(a->data(), a->data() + a->size(), v);
            if (ec == std::errc() && v > 0 && v <= (1u << 20))
                alignment = v;
        }
        constexpr size_t kComputedLayoutFrom = 256;
        const bool computed = zip.entries().size() > kComputedLayoutFrom && zip.torchLayoutHolds(alignment, 64);
        if (!computed)
            zip.prefetchLocalHeaders(); // dataOffset() reads each one below
        const std::vector<uint32_t> numbered = zip.numberedRecords(dataPrefix, ck->semantics.storages().size());
        for (pickle::StorageValue* s : ck->semantics.storages()) {
            if (s->viewOf())
                continue;
            // A record found by number is named exactly data/<key>: both are the number's decimal digits.
            size_t number = 0;
            const ZipEntry* found = nullptr;
            const bool byNumber = decimalKey(s->key, number) && number < numbered.size() && numbered[number];
            if (byNumber) {
                found = &zip.entries()[numbered[number] - 1];
            } else {
                recordName.resize(dataPrefix.size());
                recordName += s->key;
                if (!s->key.empty())
                    found = zip.findAsTorch(recordName);
            }
            if (!found) {
                if (++missing <= 5)
                    out.addFinding(Severity::Danger,
                        "storage " + std::string(s->key) + " has no " + dataPrefix + std::string(s->key)
                            + " record; torch.load would fail");
                continue;
            }
            const ZipEntry& rec = *found;
            if (!byNumber && rec.name != recordName)
                ++caseMatched;
            try {
                uint64_t offset = computed ? zip.torchDataOffset(rec, alignment) : zip.dataOffset(rec);
                if (computed && (offset > zip.size() || rec.compressedSize > zip.size() - offset))
                    offset = zip.dataOffset(rec); // throws the precise reason
                s->fileOffset = static_cast<int64_t>(offset);
            } catch (const FormatError& e) {
                out.addFinding(Severity::Danger, e.what());
                continue;
            }
            s->compressed = rec.method != 0;
            unsigned item = s->untyped ? 1 : std::max(1u, dtypeItemSize(s->dtype));
            uint64_t need = static_cast<uint64_t>(s->numel) * item;
            if (s->numel > 0 && (need / item != static_cast<uint64_t>(s->numel) || need > rec.size))
                out.addFinding(Severity::Danger,
                    "storage " + std::string(s->key) + " needs " + std::to_string(need) + " bytes but its record holds "
                        + std::to_string(rec.size) + "; torch.load would fail");
        }
        if (missing > 5)
            out.addFinding(Severity::Danger, std::to_string(missing) + " storages have no record in all");
        if (caseMatched)
            out.addFinding(Severity::Warning,
                std::to_string(caseMatched) + (caseMatched == 1 ? " storage is" : " storages are")
                    + " read from records whose names differ from " + dataPrefix
                    + "<key> in case (torch's miniz matches names ignoring case); tools that match names exactly do not");
        // Distinct record names under data/ (first occurrence of each) that are compressed.
        size_t compressed = 0;
        for (const auto& e : zip.entries())
            if (e.method != 0 && e.name.size() > dataPrefix.size()
                && e.name.compare(0, dataPrefix.size(), dataPrefix) == 0 && zip.find(e.name) == &e)
                ++compressed;
        if (compressed)
            out.addFinding(Severity::Info,
                std::to_string(compressed)
                    + " storage records are compressed (the archive was re-zipped); their bytes cannot be mapped");

        storageTimer.stop();
        const std::string* container = options.container ? &*options.container : nullptr;
        torch::finishSource(ck, out, container, options.timings, options.deferEntries, std::move(containerScan));
    } catch (const FormatError& e) {
        scanned();
        throw LoadError(file->path(), safety.withDangers(e.what()));
    }
    return out;
}

void readTorchTextRecords(const ZipArchive& zip, const std::string& prefix,
    std::vector<std::pair<std::string, std::string>>& out)
{
    for (const char* rec : { "version", ".data/version", "byteorder", ".format_version", ".storage_alignment",
             ".data/serialization_id" }) {
        const ZipEntry* e = zip.findAsTorch(prefix + rec);
        if (!e || e->size > 64)
            continue;
        // Re-zipped archives deflate these too, and torch.load still reads them.
        std::vector<uint8_t> inflated;
        Bytes bytes;
        try {
            bytes = zip.contents(*e, inflated, 64);
        } catch (const FormatError&) {
            continue;
        }
        std::string text(asText(bytes));
        while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' '))
            text.pop_back();
        out.emplace_back(rec, text);
    }
}

} // namespace sl
