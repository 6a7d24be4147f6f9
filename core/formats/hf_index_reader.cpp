#include "hf_index_reader.h"

#include "formats/index_rows.h"
#include "formats/json_keys.h"
#include "formats/loader.h"
#include "quant/quantized_tensors.h"
#include "io/file_trust.h"
#include "io/input_file.h"
#include "model/file_indices.h"
#include "util/terminal_text.h"
#include "util/error.h"
#include "util/load_control.h"
#include "util/name_index.h"
#include "util/emplace_built.h"
#include "util/parallel.h"
#include "util/timings.h"

#include <spdlog/spdlog.h>
#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace sl {

namespace {

namespace fs = std::filesystem;

struct Shard {
    std::string name; // as written in weight_map
    std::string path; // resolved; empty when the name is refused
    std::string outside; // where it leads when it is a symlink out of the index folder (never opened then)
    // Once opened: a safetensors shard as its header (its entries are built once, in merged order), any other
    // as a Source whose entries are moved.
    ShardContents opened;
    std::string error;
    int32_t fileIndex = -1; // in Source::files

    bool loaded() const { return opened.header || opened.source; }
    // Its i-th tensor as its header lists it (a shard read as a Source has none).
    const SafetensorsTensor* record(size_t i) const { return opened.header ? &opened.tensors[i] : nullptr; }
    size_t size() const { return opened.header ? opened.tensors.size() : opened.source ? opened.source->entries.size() : 0; }
    std::string_view nameAt(size_t i) const { return opened.header ? opened.tensors[i].name : opened.source->entries[i].name; }
    Entry take(size_t i)
    {
        if (opened.header)
            return safetensorsEntry(opened.header->bufferStart, opened.tensors[i], fileIndex);
        Entry e = std::move(opened.source->entries[i]);
        shiftFileIndices(e, fileIndex); // a shard read as a Source lists its one file as 0
        return e;
    }
};

// Keeps every shard's backing alive.
struct IndexBacking : SourceBacking {
    std::vector<std::shared_ptr<const SourceBacking>> shards;
};

// metadata.total_size against the bytes of the tensors listed, when every one is available.
void checkTotalSize(Source& out, bool hasTotal, uint64_t declaredTotal, uint64_t sum, bool allAvailable)
{
    if (hasTotal && sum != declaredTotal && allAvailable)
        out.addFinding(Severity::Info,
            "metadata.total_size is " + std::to_string(declaredTotal) + " but the tensors hold " + std::to_string(sum)
                + " bytes");
}

} // namespace

// A shard name must stay inside the index's folder: relative, no "..", no NUL.
bool isSafeShardName(std::string_view name)
{
    if (name.empty() || name.front() == '/' || name.find('\0') != std::string_view::npos
        || name.find('\\') != std::string_view::npos)
        return false;
    for (const auto& part : fs::path(std::string(name)))
        if (part == "..")
            return false;
    return true;
}

namespace {

// The raw text of an On-Demand value (consumed), for a metadata member kept as JSON.
simdjson::error_code rawJson(simdjson::ondemand::value v, std::string_view& out)
{
    simdjson::ondemand::json_type type;
    if (auto err = v.type().get(type))
        return err;
    if (type == simdjson::ondemand::json_type::object) {
        simdjson::ondemand::object o;
        if (auto err = v.get_object().get(o))
            return err;
        return o.raw_json().get(out);
    }
    if (type == simdjson::ondemand::json_type::array) {
        simdjson::ondemand::array a;
        if (auto err = v.get_array().get(a))
            return err;
        return a.raw_json().get(out);
    }
    out = v.raw_json_token();
    return simdjson::SUCCESS;
}

// `index.text` holds `size` bytes of JSON and simdjson's padding.
// `onShard` (when given) hears each shard name the first time weight_map names it, while the parse goes on.
void parseIndexText(const std::string& name, HfIndexFile& index, size_t size,
    const std::function<void(std::string_view)>& onShard = {})
{
    const auto corrupt = [&name](simdjson::error_code err) {
        return LoadError(name, std::string("corrupt index JSON: ") + simdjson::error_message(err));
    };
    // On-Demand: one pass, no document tape (the DOM parser reserved 105 MB for DeepSeek-V3's 9 MB index).
    simdjson::ondemand::parser parser;
    simdjson::ondemand::document doc;
    if (auto err = parser.iterate(index.text.get(), size, size + simdjson::SIMDJSON_PADDING).get(doc))
        throw corrupt(err);
    simdjson::ondemand::object root;
    if (auto err = doc.get_object().get(root))
        throw err == simdjson::INCORRECT_TYPE ? LoadError(name, "the index has no \"weight_map\" object") : corrupt(err);

    const char* const textEnd = index.text.get() + size;
    bool haveMap = false;
    for (auto member : root) {
        simdjson::ondemand::field field;
        std::string_view key;
        if (auto err = std::move(member).get(field))
            throw corrupt(err);
        if (auto err = field.unescaped_key().get(key))
            throw corrupt(err);
        if (key == "metadata") {
            simdjson::ondemand::object metadata;
            if (field.value().get_object().get(metadata))
                continue; // not an object: ignored, as before
            index.metadata.clear();
            index.totalSize.reset();
            simdjson::dom::parser small; // each member once more, as a DOM, for its minified text
            for (auto m : metadata) {
                simdjson::ondemand::field mf;
                std::string_view k, raw;
                if (auto err = std::move(m).get(mf))
                    throw corrupt(err);
                if (auto err = mf.unescaped_key().get(k))
                    throw corrupt(err);
                std::string kept(k);
                if (auto err = rawJson(mf.value(), raw))
                    throw corrupt(err);
                simdjson::dom::element v;
                if (auto err = small.parse(raw.data(), raw.size(), true).get(v))
                    throw corrupt(err);
                if (kept == "total_size") {
                    double d = 0;
                    uint64_t u = 0;
                    if (!v.get_uint64().get(u)) {
                        index.totalSize = u;
                    } else if (!v.get_double().get(d) && d >= 0 && d < 18446744073709551616.0) {
                        // Checked range first: casting a double past UINT64_MAX to an integer is undefined.
                        index.totalSize = static_cast<uint64_t>(d);
                    }
                }
                index.metadata.emplace_back(std::move(kept), simdjson::to_string(v));
            }
            continue;
        }
        if (key != "weight_map")
            continue;
        simdjson::ondemand::object weightMap;
        if (auto err = field.value().get_object().get(weightMap))
            throw err == simdjson::INCORRECT_TYPE ? LoadError(name, "the index has no \"weight_map\" object") : corrupt(err);
        // A repeated "weight_map" replaces the earlier one, as Python's json keeps the last.
        haveMap = true;
        index.weightMap.clear();
        // A weight_map member takes more than 64 bytes of text in practice (DeepSeek-V3: 100): reserved,
        // the list never copies itself as it grows (6 MB of fresh memory touched for 90,427 names before).
        index.weightMap.reserve(size / 64);
        index.shards.clear();
        index.unescaped.clear();
        // The shards, in order of first mention, and each tensor's shard (90,427 lookups among 163 names for
        // DeepSeek-V3, most of them the previous tensor's shard).
        NameIndex shardIndex;
        const auto shardName = [&index](size_t i) -> std::string_view { return index.shards[i]; };
        size_t lastShard = NameIndex::npos;
        for (auto member2 : weightMap) {
            simdjson::ondemand::field f;
            if (auto err = std::move(member2).get(f))
                throw corrupt(err);
            std::string_view tensor;
            if (auto err = jsonKey(f, textEnd, index.unescaped, tensor))
                throw corrupt(err);
            std::string_view shard;
            if (f.value().get_string().get(shard))
                throw LoadError(name, "weight_map value for '" + std::string(tensor) + "' is not a file name");
            size_t at = lastShard != NameIndex::npos && index.shards[lastShard] == shard ? lastShard
                                                                                         : shardIndex.find(shard, shardName);
            if (at == NameIndex::npos) {
                if (index.shards.size() >= UINT32_MAX)
                    throw LoadError(name, "more than 4 billion shards");
                index.shards.emplace_back(shard);
                at = shardIndex.insert(index.shards.size() - 1, shardName);
                if (onShard)
                    onShard(index.shards.back());
            }
            lastShard = at;
            index.weightMap.emplace_back(tensor, static_cast<uint32_t>(at));
        }
    }
    // On-Demand stops at the end of the object; anything after it (a second value) is malformed JSON.
    if (const char* at = nullptr; !doc.current_location().get(at))
        throw corrupt(simdjson::TRAILING_CONTENT);
    if (!haveMap)
        throw LoadError(name, "the index has no \"weight_map\" object");
}

// Where a shard name leads: its path beside the index as named (empty when the name is refused), that path
// with symlinks followed, and where it leads when that is outside the index folder (never opened then).
struct ShardPlace {
    std::string path, real, outside;
    // Spellings of one file ("a", "./a", "x/../a", symlinks to it in the folder) share this key.
    std::string key() const { return !real.empty() && outside.empty() ? real : path; }
};

ShardPlace placeShard(const fs::path& dir, const CheckpointFolder& folder, const std::string& name)
{
    ShardPlace p;
    if (!isSafeShardName(name))
        return p;
    p.path = (dir / name).lexically_normal().string();
    p.real = folder.resolve(p.path);
    if (!p.real.empty() && !folder.holds(p.real))
        p.outside = p.real;
    return p;
}

// How a shard is opened, from the index's own options.
OpenOptions shardOptionsFor(const OpenOptions& index)
{
    OpenOptions shard;
    shard.indexAllowed = false;
    shard.threads = 1;
    shard.groupQuantized = false; // grouped once, over the merged state dict
    shard.control = index.control; // a big pickle shard stops on cancel too
    shard.headerScanBatch = index.headerScanBatch;
    return shard;
}

// Opens the shard at `path` (inside the folder) with `shardOptions` (shardOptionsFor): its contents, or its
// problem in `error` (a finding, not an exception, so that no job of the parallel loop throws).
void openShardAt(const std::string& path, const OpenOptions& shardOptions, ShardContents& opened, std::string& error)
{
    try {
        if (!fs::exists(path)) {
            error = "missing";
            return;
        }
        // A folder or an index (this one, or one naming it) would be read as an index again and recurse
        // without end: folders are refused here, indexes where the shard is sniffed (indexAllowed).
        if (!fs::is_regular_file(path))
            throw LoadError(path, "is not a regular file");
        opened = openShard(path, shardOptions);
    } catch (const LoadError& e) {
        error = e.problem();
    } catch (const std::exception& e) {
        error = e.what();
    }
}

// Shards opened on a second core while the index is still being parsed: DeepSeek-V3's 9 MB index keeps one
// core busy for 7 ms, and the other was idle then. Each shard name weight_map names is placed and opened
// here as the opening loop would (placeShard, openShardAt), in order of first mention; the loop takes each
// result whose path is its shard's, and opens the rest itself. stop() ends it once the parse is over: the
// shard it is opening is finished, the others are left to the loop.
class ShardPrefetch {
public:
    ShardPrefetch(const fs::path& dir, const CheckpointFolder& folder, const OpenOptions& shardOptions)
        : m_dir(dir)
        , m_folder(folder)
        , m_shardOptions(shardOptions)
        , m_worker([this] { run(); })
    {
    }
    ~ShardPrefetch() { stop(); }
    ShardPrefetch(const ShardPrefetch&) = delete;
    ShardPrefetch& operator=(const ShardPrefetch&) = delete;

    void announce(std::string_view name)
    {
        {
            std::lock_guard lock(m_mutex);
            m_names.emplace_back(name);
        }
        m_wake.notify_one();
    }
    // `finish`: open every shard named so far first (tests).
    void stop(bool finish = false)
    {
        {
            std::lock_guard lock(m_mutex);
            (finish ? m_finishing : m_stopping) = true;
        }
        m_wake.notify_one();
        if (m_worker.joinable())
            m_worker.join();
    }
    // The shard at `path` as opened here, if it was (after stop()). The opening loop's threads call this at
    // once, each for shards of its own: lookups only, no erase.
    bool take(const std::string& path, ShardContents& opened, std::string& error)
    {
        const auto it = m_opened.find(path);
        if (it == m_opened.end())
            return false;
        opened = std::move(it->second.first);
        error = std::move(it->second.second);
        return true;
    }

private:
    void run()
    {
        // Whatever goes wrong here (out of memory) only ends the prefetch: the loop opens the rest, and reports.
        try {
            prefetch();
        } catch (...) {
        }
    }
    void prefetch()
    {
        std::unordered_set<std::string> keys; // spellings of one file are opened once, as the loop does
        for (size_t next = 0;; ++next) {
            std::string name;
            {
                std::unique_lock lock(m_mutex);
                m_wake.wait(lock, [&] { return m_stopping || m_finishing || next < m_names.size(); });
                if (m_stopping || next == m_names.size())
                    return;
                name = m_names[next];
            }
            if (m_shardOptions.control && m_shardOptions.control->cancelled())
                return;
            const ShardPlace place = placeShard(m_dir, m_folder, name);
            // One path has one key: a spelling seen before is skipped here.
            if (place.path.empty() || !place.outside.empty() || !keys.insert(place.key()).second)
                continue;
            ShardContents opened;
            std::string error;
            openShardAt(place.path, m_shardOptions, opened, error);
            m_opened.emplace(place.path, std::pair(std::move(opened), std::move(error)));
        }
    }

    const fs::path& m_dir;
    const CheckpointFolder& m_folder;
    const OpenOptions m_shardOptions; // its control is watched for cancel too
    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::vector<std::string> m_names; // announced, in order (a repeated weight_map announces names again)
    bool m_stopping = false;
    bool m_finishing = false; // stop once every name announced is done
    std::unordered_map<std::string, std::pair<ShardContents, std::string>> m_opened; // by path; the worker's until stop()
    std::thread m_worker; // last: starts once the members above exist
};

HfIndexFile withText(uint64_t size)
{
    HfIndexFile index;
    index.text = paddedJsonBuffer(static_cast<size_t>(size));
    return index;
}

} // namespace

HfIndexFile parseHfIndex(const std::string& name, Bytes json)
{
    HfIndexFile index = withText(json.size());
    std::copy(json.begin(), json.end(), index.text.get());
    parseIndexText(name, index, json.size());
    return index;
}

SourceFormat indexFormat(const std::string& indexPath)
{
    return indexPath.find(".bin.index") != std::string::npos ? SourceFormat::TorchBinIndex
                                                              : SourceFormat::SafetensorsIndex;
}

Source readHfIndex(const std::string& indexPath, const OpenOptions& options)
{
    Source out;
    out.path = indexPath;
    out.format = indexFormat(indexPath);

    // An index lists names and shards: DeepSeek-V3's 90,427 tensors take 9 MB.
    PhaseTimer indexTimer(options.timings, "read index");
    // Read straight into the padded buffer the parse needs (its names stay views into it).
    const auto file = InputFile::open(indexPath);
    if (file->size() > (uint64_t(1) << 30))
        file->whole(uint64_t(1) << 30, "shard index"); // refuses it, with the reason
    HfIndexFile index = withText(file->size());
    file->readInto(0, std::span(reinterpret_cast<uint8_t*>(index.text.get()), static_cast<size_t>(file->size())));
    const fs::path dir = fs::path(indexPath).parent_path();
    // Shard names are looked up beside the index as named (a hub cache's index is itself a symlink to a blob),
    // and must resolve inside that folder.
    const CheckpointFolder folder(dir.string());
    LoadControl* control = options.control;
    const OpenOptions shardOptions = shardOptionsFor(options);
    std::optional<ShardPrefetch> prefetch;
    if (file->size() >= options.shardPrefetchFrom && threadsFor(options.threads) > 1)
        prefetch.emplace(dir, folder, shardOptions);
    parseIndexText(indexPath, index, static_cast<size_t>(file->size()),
        prefetch ? [&prefetch](std::string_view shard) { prefetch->announce(shard); }
                 : std::function<void(std::string_view)>());
    if (prefetch)
        prefetch->stop(options.shardPrefetchFinishes);
    indexTimer.stop();
    out.metadata = std::move(index.metadata);
    const uint64_t declaredTotal = index.totalSize.value_or(0);
    const bool hasTotal = index.totalSize.has_value();

    // Spellings of one file ("a", "./a", "x/../a", symlinks to it in the folder) are one shard: opened once
    // per spelling, a small index could multiply a large shard's entries in memory.
    PhaseTimer resolveTimer(options.timings, "resolve shard paths");
    std::vector<Shard> shards;
    std::unordered_map<std::string, size_t> shardByPath;
    std::vector<size_t> shardOfName(index.shards.size());
    for (size_t n = 0; n < index.shards.size(); ++n) {
        Shard s;
        s.name = std::move(index.shards[n]);
        ShardPlace place = placeShard(dir, folder, s.name);
        const std::string key = place.key();
        s.path = std::move(place.path);
        s.outside = std::move(place.outside);
        if (!s.path.empty()) {
            auto [it, inserted] = shardByPath.emplace(key, shards.size());
            if (!inserted) {
                shardOfName[n] = it->second;
                continue;
            }
        }
        shardOfName[n] = shards.size();
        shards.push_back(std::move(s));
    }
    auto& mapping = index.weightMap;
    for (auto& [tensor, shard] : mapping)
        shard = static_cast<uint32_t>(shardOfName[shard]);
    resolveTimer.stop();

    spdlog::debug("{}: index names {} tensors in {} shard files", terminalText(indexPath), mapping.size(), shards.size());
    // Open the shards in parallel; each reader is independent.
    PhaseTimer shardTimer(options.timings, "open shards");
    if (control)
        control->addTotal(shards.size());
    // Each shard's problems are kept with it (a finding, not an exception), so no job throws.
    parallelFor(shards.size(), threadsFor(options.threads), [&](size_t i) {
        Shard& s = shards[i];
        // Counted whatever happens to the shard, so the bar reaches the end.
        struct Advance {
            LoadControl* c;
            ~Advance()
            {
                if (c)
                    c->advance();
            }
        } advance { control };
        if (s.path.empty() || !s.outside.empty() || (control && control->cancelled()))
            return;
        if (!prefetch || !prefetch->take(s.path, s.opened, s.error))
            openShardAt(s.path, shardOptions, s.opened, s.error);
    });
    if (control)
        control->checkpoint(indexPath);
    shardTimer.stop();

    PhaseTimer mergeTimer(options.timings, "merge shards"); // to the end
    auto backing = std::make_shared<IndexBacking>();
    for (Shard& s : shards) {
        if (s.path.empty()) {
            out.addFinding(Severity::Danger, "shard name '" + s.name + "' points outside the index folder; not opened");
            continue;
        }
        // A danger like an escaping name: it is the same read outside the checkpoint, by a symlink instead.
        if (!s.outside.empty()) {
            out.addFinding(Severity::Danger,
                "shard " + s.name + " is a symlink that points outside the index folder (to " + s.outside
                    + "); not opened");
            continue;
        }
        s.fileIndex = static_cast<int32_t>(out.files.size());
        out.files.push_back(s.path);
        if (!s.loaded()) {
            if (s.error == "missing")
                out.addFinding(Severity::Warning, "shard " + s.name + " is missing");
            else
                out.addFinding(Severity::Warning, "shard " + s.name + " cannot be read: " + s.error);
            continue;
        }
        if (s.opened.source)
            backing->shards.push_back(s.opened.source->backing);
        for (const auto& f : s.opened.header ? s.opened.header->findings : s.opened.source->findings)
            out.addFinding(f.severity, "shard " + s.name + ": " + f.message, f.entry);
    }

    // Where each key is in its shard. A shard lists its tensors in runs sorted by name (a safetensors header is
    // in data order: by dtype, then name) and weight_map is sorted by name, so the next key is usually right
    // after an earlier hit in one of the shard's runs: a few name comparisons find it, and a shard's name
    // index is built only on its first miss (DeepSeek-V3's index then hashes no name twice). A shard that
    // repeats a name always takes the index, which gives its first copy.
    constexpr size_t kRuns = 4;
    struct Cursors {
        std::array<uint32_t, kRuns> next {}; // positions after recent hits
        uint8_t count = 0;
        uint8_t replace = 0; // round robin once all are in use
        bool indexOnly = false;
    };
    std::vector<NameIndex> byName(shards.size());
    std::vector<std::vector<bool>> used(shards.size());
    std::vector<Cursors> cursors(shards.size());
    for (size_t si = 0; si < shards.size(); ++si) {
        const Shard& s = shards[si];
        if (!s.loaded())
            continue;
        used[si].assign(s.size(), false);
        cursors[si].indexOnly = !s.opened.header || s.opened.header->duplicateNames;
    }
    const auto positionIn = [&](size_t si, std::string_view name) {
        const Shard& s = shards[si];
        if (!s.loaded())
            return NameIndex::npos;
        Cursors& c = cursors[si];
        if (!c.indexOnly)
            for (size_t k = 0; k < c.count; ++k)
                if (const size_t at = c.next[k]; at < s.size() && s.nameAt(at) == name) {
                    c.next[k] = static_cast<uint32_t>(at + 1);
                    return at;
                }
        const auto nameOf = [&s](size_t k) { return s.nameAt(k); };
        if (byName[si].size() == 0 && s.size() != 0)
            byName[si].insertAll(s.size(), nameOf);
        const size_t at = byName[si].find(name, nameOf);
        if (at != NameIndex::npos && !c.indexOnly)
            c.next[c.count < kRuns ? c.count++ : c.replace++ % kRuns] = static_cast<uint32_t>(at + 1);
        return at;
    };

    // One state dict, in weight_map order. Every key is resolved first; then each entry is built (from a
    // header) or moved (from a Source) once, into its place in the merged list.
    struct Pick {
        uint32_t shard; // where it is read from, or (unavailable) the shard the index names
        uint32_t at; // its position in that shard; kUnavailable: none
        std::string_view name; // the index's key, for an unavailable entry
    };
    constexpr uint32_t kUnavailable = UINT32_MAX;
    std::vector<Pick> picks;
    picks.reserve(mapping.size());
    std::unordered_map<size_t, size_t> unavailable;
    size_t misplaced = 0;
    bool increasing = true; // weight_map's keys strictly increase, so each is unique
    std::string_view previousKey;
    const auto pick = [&](size_t si, size_t at) {
        if (used[si][at])
            return;
        used[si][at] = true;
        picks.push_back({ static_cast<uint32_t>(si), static_cast<uint32_t>(at), {} });
    };
    for (const auto& [name, si] : mapping) {
        increasing = increasing && (&name == &mapping.front().first || previousKey < name);
        previousKey = name;
        Shard& s = shards[si];
        if (!s.loaded()) {
            picks.push_back({ si, kUnavailable, name });
            ++unavailable[si];
            continue;
        }
        if (const size_t at = positionIn(si, name); at != NameIndex::npos) {
            pick(si, at);
            continue;
        }
        // Is it in another shard? (Shards that did not load hold nothing.)
        size_t holder = shards.size(), holderAt = NameIndex::npos;
        for (size_t o = 0; o < shards.size() && holder == shards.size(); ++o)
            if ((holderAt = positionIn(o, name)) != NameIndex::npos)
                holder = o;
        if (misplaced++ < 20)
            out.addFinding(Severity::Warning,
                "the index puts this tensor in " + s.name + ", which does not hold it"
                    + (holder < shards.size() ? " (it is in " + shards[holder].name + ")" : std::string()),
                std::string(name));
        // Loaded from where it is (transformers reads every shard the index names), and listed once:
        // otherwise it would also come back below as a tensor the index does not list.
        if (holder < shards.size())
            pick(holder, holderAt);
        else
            picks.push_back({ si, kUnavailable, name });
    }
    if (misplaced > 20)
        out.addFinding(Severity::Warning, std::to_string(misplaced) + " tensors in all are not where the index says");
    for (const auto& [si, count] : unavailable)
        out.addFinding(Severity::Warning,
            std::to_string(count) + " tensors listed in the index are unavailable because shard " + shards[si].name
                + (shards[si].path.empty()            ? " was not opened (its name leaves the index folder)"
                        : !shards[si].outside.empty() ? " was not opened (it is a symlink out of the index folder)"
                                                      : " could not be read"));

    // Tensors a shard holds that the index never mentions still load (transformers reads whole shards).
    size_t unlisted = 0;
    for (size_t si = 0; si < shards.size(); ++si) {
        const Shard& s = shards[si];
        for (size_t i = 0; i < s.size(); ++i) {
            if (used[si][i])
                continue;
            if (unlisted++ < 20)
                out.addFinding(Severity::Warning, "shard " + s.name + " holds this tensor but the index does not list it",
                    std::string(s.nameAt(i)));
            picks.push_back({ static_cast<uint32_t>(si), static_cast<uint32_t>(i), {} });
        }
    }
    if (unlisted > 20)
        out.addFinding(Severity::Warning, std::to_string(unlisted) + " shard tensors in all are missing from the index");

    // The entry's file says its shard (Source::files). The bytes are summed while each entry is in cache.
    // A shard's header and name index are let go once its last entry is built: the entries' names reuse
    // that memory, and the peak is not every header plus every entry (DeepSeek-V3: 22 MB of headers).
    std::vector<uint32_t> picksLeft(shards.size());
    for (const Pick& p : picks)
        if (p.at != kUnavailable)
            ++picksLeft[p.shard];
    byName.clear(); // lookups are done
    used.clear();
    // An FP8 weight and the block scale after it are built as their group at once (quant::Fp8PairGrouper),
    // where every key is unique: weight_map's keys increase and no shard holds others. DeepSeek-V3 has 45,000
    // pairs: the grouping pass took 19 ms, now 1, for 11 ms more here. The pairs are found first and the
    // groups' names copied then, one after another: among each group's other blocks, the names the table and
    // the grouping pass read cost them 3 ms more.
    const bool groupPairs = options.groupQuantized && options.earlyFp8Groups && increasing && unlisted == 0;
    // A listing takes rows instead (formats/index_rows.h) where each entry would be a header's tensor as it is
    // written, or such a pair: every tensor listed is available, in a safetensors shard, with a dtype and
    // shape torch reads as written (no attribute says otherwise).
    const bool rows = options.deferEntries && std::all_of(picks.begin(), picks.end(), [&](const Pick& p) {
        const SafetensorsTensor* t = p.at == kUnavailable ? nullptr : shards[p.shard].record(p.at);
        return t && safetensorsEntryIsPlain(*t);
    });
    quant::Fp8PairGrouper pairs;
    std::vector<bool> pairAt(picks.size()); // the pick is a weight paired with the next
    std::vector<std::string> groupNames;
    for (size_t k = 0; groupPairs && k + 1 < picks.size(); ++k) {
        const Pick& p = picks[k];
        const Pick& next = picks[k + 1];
        if (p.at == kUnavailable || next.at == kUnavailable)
            continue;
        const SafetensorsTensor* weight = shards[p.shard].record(p.at);
        const SafetensorsTensor* scale = shards[next.shard].record(next.at);
        if (weight && scale && quant::Fp8PairGrouper::pairs(weight->name, weight->dtype, scale->name)) {
            pairAt[k++] = true;
            if (!rows)
                groupNames.emplace_back(weight->name);
        }
    }
    if (rows) {
        std::vector<ShardContents> contents(shards.size());
        std::vector<int32_t> fileIndex(shards.size());
        for (size_t si = 0; si < shards.size(); ++si) {
            contents[si] = std::move(shards[si].opened);
            fileIndex[si] = shards[si].fileIndex;
        }
        auto listed = std::make_shared<IndexRows>(std::move(contents), std::move(fileIndex), picks.size());
        uint64_t sum = 0; // as Entry::nbytes sums them, a group's over its parts
        for (size_t k = 0; k < picks.size(); ++k) {
            const IndexRows::Ref tensor { picks[k].shard, picks[k].at };
            sum += listed->bytesOf(tensor);
            if (!pairAt[k]) {
                listed->add(tensor);
                continue;
            }
            const IndexRows::Ref scale { picks[k + 1].shard, picks[k + 1].at };
            ++k;
            sum += listed->bytesOf(scale);
            listed->addPair(tensor, scale);
            out.provisionalFp8Groups = true;
        }
        out.entries.defer(std::move(listed));
        checkTotalSize(out, hasTotal, declaredTotal, sum, true);
        out.backing = backing;
        return out;
    }
    const auto taken = [&](const Pick& p) {
        if (--picksLeft[p.shard] == 0)
            shards[p.shard].opened = {};
    };
    size_t nextName = 0;
    out.entries.reserve(picks.size());
    uint64_t sum = 0;
    for (size_t k = 0; k < picks.size(); ++k) {
        const Pick& p = picks[k];
        Shard& s = shards[p.shard];
        if (pairAt[k]) {
            const Pick& next = picks[++k];
            sum += emplaceBuilt(out.entries, [&] {
                return pairs.group(std::move(groupNames[nextName++]), [&] { return s.take(p.at); },
                    [&] { return shards[next.shard].take(next.at); });
            }).nbytes();
            out.provisionalFp8Groups = true;
            taken(p);
            taken(next);
            continue;
        }
        if (p.at != kUnavailable) {
            sum += emplaceBuilt(out.entries, [&] { return s.take(p.at); }).nbytes();
            taken(p);
            continue;
        }
        Entry& e = out.entries.emplace_back();
        e.name = std::string(p.name);
        e.location.kind = TensorLocation::Kind::Unavailable;
        e.location.file = s.fileIndex;
        e.shapeKnown = false;
        if (e.location.file < 0) // never opened, so not among the files: the entry names its shard
            e.attributes.emplace_back("shard", s.name);
    }

    checkTotalSize(out, hasTotal, declaredTotal, sum, unavailable.empty());
    out.backing = backing;
    return out;
}

} // namespace sl
