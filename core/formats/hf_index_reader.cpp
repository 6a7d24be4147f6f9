#include "hf_index_reader.h"

#include "formats/loader.h"
#include "io/file_trust.h"
#include "io/input_file.h"
#include "util/error.h"
#include "util/load_control.h"
#include "util/name_index.h"
#include "util/parallel.h"
#include "util/timings.h"

#include <simdjson.h>

#include <algorithm>
#include <filesystem>
#include <unordered_map>

namespace sl {

namespace {

namespace fs = std::filesystem;

struct Shard {
    std::string name; // as written in weight_map
    std::string path; // resolved; empty when the name is refused
    std::string outside; // where it leads when it is a symlink out of the index folder (never opened then)
    std::optional<Source> source;
    std::string error;
    NameIndex byName; // positions in source->entries
    std::vector<bool> used;
    int32_t fileIndex = -1; // in Source::files
};

// Keeps every shard's backing alive.
struct IndexBacking : SourceBacking {
    std::vector<std::shared_ptr<const SourceBacking>> shards;
};

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

HfIndexFile parseHfIndex(const std::string& name, Bytes json)
{
    HfIndexFile index;
    simdjson::dom::parser parser;
    simdjson::dom::element root;
    if (auto err = parser.parse(reinterpret_cast<const char*>(json.data()), json.size(), true).get(root))
        throw LoadError(name, std::string("corrupt index JSON: ") + simdjson::error_message(err));
    simdjson::dom::object weightMap;
    if (root["weight_map"].get_object().get(weightMap))
        throw LoadError(name, "the index has no \"weight_map\" object");
    simdjson::dom::object metadata;
    if (!root["metadata"].get_object().get(metadata)) {
        for (auto [k, v] : metadata) {
            if (k == "total_size") {
                double d = 0;
                uint64_t u = 0;
                if (!v.get_uint64().get(u)) {
                    index.totalSize = u;
                } else if (!v.get_double().get(d) && d >= 0 && d < 18446744073709551616.0) {
                    // Checked range first: casting a double past UINT64_MAX to an integer is undefined.
                    index.totalSize = static_cast<uint64_t>(d);
                }
            }
            index.metadata.emplace_back(std::string(k), simdjson::to_string(v));
        }
    }

    // The shards, in order of first mention, and each tensor's shard (90,427 lookups among 163 names for
    // DeepSeek-V3, made without building a string each).
    NameIndex shardIndex;
    const auto shardName = [&index](size_t i) -> std::string_view { return index.shards[i]; };
    index.weightMap.reserve(weightMap.size());
    for (auto [tensor, value] : weightMap) {
        std::string_view shard;
        if (value.get_string().get(shard))
            throw LoadError(name, "weight_map value for '" + std::string(tensor) + "' is not a file name");
        size_t at = shardIndex.find(shard, shardName);
        if (at == NameIndex::npos) {
            index.shards.emplace_back(shard);
            at = shardIndex.insert(index.shards.size() - 1, shardName);
        }
        index.weightMap.emplace_back(std::string(tensor), at);
    }
    return index;
}

Source readHfIndex(const std::string& indexPath, const OpenOptions& options)
{
    Source out;
    out.path = indexPath;
    out.format = indexPath.find(".bin.index") != std::string::npos ? "torch-bin-index" : "safetensors-index";

    // An index lists names and shards: DeepSeek-V3's 90,427 tensors take 9 MB.
    PhaseTimer indexTimer(options.timings, "read index");
    const auto text = InputFile::open(indexPath)->whole(uint64_t(1) << 30, "shard index");
    HfIndexFile index = parseHfIndex(indexPath, text->bytes());
    indexTimer.stop();
    out.metadata = std::move(index.metadata);
    const uint64_t declaredTotal = index.totalSize.value_or(0);
    const bool hasTotal = index.totalSize.has_value();

    // Spellings of one file ("a", "./a", "x/../a", symlinks to it in the folder) are one shard: opened once
    // per spelling, a small index could multiply a large shard's entries in memory.
    std::vector<Shard> shards;
    std::unordered_map<std::string, size_t> shardByPath;
    std::vector<size_t> shardOfName(index.shards.size());
    const fs::path dir = fs::path(indexPath).parent_path();
    // Shard names are looked up beside the index as named (a hub cache's index is itself a symlink to a blob),
    // and must resolve inside that folder.
    const CheckpointFolder folder(dir.string());
    for (size_t n = 0; n < index.shards.size(); ++n) {
        Shard s;
        s.name = std::move(index.shards[n]);
        if (isSafeShardName(s.name)) {
            s.path = (dir / s.name).lexically_normal().string();
            s.outside = folder.leadsOutside(s.path);
        }
        if (!s.path.empty()) {
            std::string key = s.path;
            std::error_code ec;
            if (fs::path real = fs::canonical(s.path, ec); !ec && s.outside.empty())
                key = real.string();
            auto [it, inserted] = shardByPath.emplace(key, shards.size());
            if (!inserted) {
                shardOfName[n] = it->second;
                continue;
            }
        }
        shardOfName[n] = shards.size();
        shards.push_back(std::move(s));
    }
    std::vector<std::pair<std::string, size_t>>& mapping = index.weightMap;
    for (auto& [tensor, shard] : mapping)
        shard = shardOfName[shard];

    // Open the shards in parallel; each reader is independent.
    PhaseTimer shardTimer(options.timings, "open shards");
    LoadControl* control = options.control;
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
        try {
            if (!fs::exists(s.path)) {
                s.error = "missing";
                return;
            }
            // A folder or an index (this one, or one naming it) would be read as an index again and recurse
            // without end: folders are refused here, indexes where the shard is sniffed (indexAllowed).
            if (!fs::is_regular_file(s.path))
                throw LoadError(s.path, "is not a regular file");
            OpenOptions shardOptions;
            shardOptions.indexAllowed = false;
            shardOptions.threads = 1;
            shardOptions.groupQuantized = false; // grouped once, over the merged state dict
            shardOptions.control = control; // a big pickle shard stops on cancel too
            s.source = openSource(s.path, shardOptions);
        } catch (const LoadError& e) {
            s.error = e.problem();
        } catch (const std::exception& e) {
            s.error = e.what();
        }
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
        if (!s.source) {
            if (s.error == "missing")
                out.addFinding(Severity::Warning, "shard " + s.name + " is missing");
            else
                out.addFinding(Severity::Warning, "shard " + s.name + " cannot be read: " + s.error);
            continue;
        }
        backing->shards.push_back(s.source->backing);
        for (const auto& f : s.source->findings)
            out.addFinding(f.severity, "shard " + s.name + ": " + f.message, f.entry);
        const auto& entries = s.source->entries;
        s.byName.reserve(entries.size());
        for (size_t i = 0; i < entries.size(); ++i)
            s.byName.insert(i, [&entries](size_t k) -> std::string_view { return entries[k].name; });
        s.used.assign(entries.size(), false);
    }

    // One state dict, in weight_map order. Every key is resolved first, while the shards' entries are still
    // in place to be looked up by name; then each is moved (not copied) into the merged list.
    struct Pick {
        size_t shard; // where it is read from, or (unavailable) the shard the index names
        size_t at = NameIndex::npos; // its position in that shard's entries; npos: unavailable
        const std::string* name = nullptr; // the index's key, for an unavailable entry
    };
    std::vector<Pick> picks;
    picks.reserve(mapping.size());
    auto positionIn = [](const Shard& s, std::string_view name) {
        if (!s.source)
            return NameIndex::npos;
        const auto& entries = s.source->entries;
        return s.byName.find(name, [&entries](size_t k) -> std::string_view { return entries[k].name; });
    };
    std::unordered_map<size_t, size_t> unavailable;
    size_t misplaced = 0;
    for (const auto& [name, si] : mapping) {
        Shard& s = shards[si];
        if (!s.source) {
            picks.push_back({ si, NameIndex::npos, &name });
            ++unavailable[si];
            continue;
        }
        const size_t at = positionIn(s, name);
        if (at != NameIndex::npos) {
            if (!s.used[at]) {
                s.used[at] = true;
                picks.push_back({ si, at });
            }
            continue;
        }
        // Is it in another shard? (Shards that did not load hold nothing.)
        size_t holder = shards.size(), holderAt = NameIndex::npos;
        for (size_t o = 0; o < shards.size() && holder == shards.size(); ++o)
            if ((holderAt = positionIn(shards[o], name)) != NameIndex::npos)
                holder = o;
        if (misplaced++ < 20)
            out.addFinding(Severity::Warning,
                "the index puts this tensor in " + s.name + ", which does not hold it"
                    + (holder < shards.size() ? " (it is in " + shards[holder].name + ")" : std::string()),
                name);
        // Loaded from where it is (transformers reads every shard the index names), and listed once:
        // otherwise it would also come back below as a tensor the index does not list.
        if (holder < shards.size()) {
            if (!shards[holder].used[holderAt]) {
                shards[holder].used[holderAt] = true;
                picks.push_back({ holder, holderAt });
            }
            continue;
        }
        picks.push_back({ si, NameIndex::npos, &name });
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
        if (!s.source)
            continue;
        for (size_t i = 0; i < s.source->entries.size(); ++i) {
            if (s.used[i])
                continue;
            if (unlisted++ < 20)
                out.addFinding(Severity::Warning, "shard " + s.name + " holds this tensor but the index does not list it",
                    s.source->entries[i].name);
            picks.push_back({ si, i });
        }
    }
    if (unlisted > 20)
        out.addFinding(Severity::Warning, std::to_string(unlisted) + " shard tensors in all are missing from the index");

    out.entries.reserve(picks.size());
    for (const Pick& p : picks) {
        Shard& s = shards[p.shard];
        if (p.at == NameIndex::npos) {
            Entry e;
            e.name = *p.name;
            e.location.kind = TensorLocation::Kind::Unavailable;
            e.shapeKnown = false;
            e.attributes.emplace_back("shard", s.name);
            out.entries.push_back(std::move(e));
            continue;
        }
        Entry& e = out.entries.emplace_back(std::move(s.source->entries[p.at]));
        e.location.file = s.fileIndex;
        e.attributes.emplace_back("shard", s.name);
    }

    if (hasTotal) {
        uint64_t sum = 0;
        for (const auto& e : out.entries)
            sum += e.nbytes();
        if (sum != declaredTotal && unavailable.empty())
            out.addFinding(Severity::Info,
                "metadata.total_size is " + std::to_string(declaredTotal) + " but the tensors hold " + std::to_string(sum)
                    + " bytes");
    }
    out.backing = backing;
    return out;
}

} // namespace sl
