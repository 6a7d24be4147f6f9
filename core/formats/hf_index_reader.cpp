#include "hf_index_reader.h"

#include "formats/loader.h"
#include "io/mapped_file.h"
#include "util/error.h"

#include <simdjson.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <thread>
#include <unordered_map>

namespace sl {

namespace {

namespace fs = std::filesystem;

struct Shard {
    std::string name; // as written in weight_map
    std::string path; // resolved; empty when the name is refused
    std::optional<Source> source;
    std::string error;
    std::unordered_map<std::string_view, size_t> byName;
    std::vector<bool> used;
};

// Keeps every shard's backing alive.
struct IndexBacking : SourceBacking {
    std::vector<std::shared_ptr<const SourceBacking>> shards;
};

// A shard name must stay inside the index's folder: relative, no "..", no NUL.
bool safeShardName(std::string_view name)
{
    if (name.empty() || name.front() == '/' || name.find('\0') != std::string_view::npos
        || name.find('\\') != std::string_view::npos)
        return false;
    for (const auto& part : fs::path(std::string(name)))
        if (part == "..")
            return false;
    return true;
}

} // namespace

Source readHfIndex(const std::string& indexPath, const OpenOptions& options)
{
    Source out;
    out.path = indexPath;
    out.format = indexPath.find(".bin.index") != std::string::npos ? "torch-bin-index" : "safetensors-index";

    auto file = MappedFile::open(indexPath);
    simdjson::dom::parser parser;
    simdjson::dom::element root;
    Bytes bytes = file->bytes();
    if (auto err = parser.parse(reinterpret_cast<const char*>(bytes.data()), bytes.size(), true).get(root))
        throw LoadError(indexPath, std::string("corrupt index JSON: ") + simdjson::error_message(err));
    simdjson::dom::object weightMap;
    if (root["weight_map"].get_object().get(weightMap))
        throw LoadError(indexPath, "the index has no \"weight_map\" object");
    simdjson::dom::object metadata;
    uint64_t declaredTotal = 0;
    bool hasTotal = false;
    if (!root["metadata"].get_object().get(metadata)) {
        for (auto [k, v] : metadata) {
            if (k == "total_size") {
                double d = 0;
                uint64_t u = 0;
                if (!v.get_uint64().get(u) || (!v.get_double().get(d) && d >= 0)) {
                    declaredTotal = u ? u : static_cast<uint64_t>(d);
                    hasTotal = true;
                }
            }
            out.metadata.emplace_back(std::string(k), simdjson::to_string(v));
        }
    }

    // The shards, in order of first mention, and each tensor's shard.
    std::vector<Shard> shards;
    std::unordered_map<std::string, size_t> shardIndex;
    std::vector<std::pair<std::string, size_t>> mapping;
    mapping.reserve(weightMap.size());
    const fs::path dir = fs::path(indexPath).parent_path();
    for (auto [name, value] : weightMap) {
        std::string_view shardName;
        if (value.get_string().get(shardName))
            throw LoadError(indexPath, "weight_map value for '" + std::string(name) + "' is not a file name");
        auto [it, inserted] = shardIndex.emplace(std::string(shardName), shards.size());
        if (inserted) {
            Shard s;
            s.name = std::string(shardName);
            if (safeShardName(shardName))
                s.path = (dir / s.name).lexically_normal().string();
            shards.push_back(std::move(s));
        }
        mapping.emplace_back(std::string(name), it->second);
    }

    // Open the shards in parallel; each reader is independent.
    unsigned threads = options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency());
    threads = std::min<unsigned>(threads, static_cast<unsigned>(shards.size()));
    std::atomic<size_t> next { 0 };
    auto worker = [&] {
        for (size_t i = next++; i < shards.size(); i = next++) {
            Shard& s = shards[i];
            if (s.path.empty())
                continue;
            try {
                if (!fs::exists(s.path)) {
                    s.error = "missing";
                    continue;
                }
                OpenOptions shardOptions;
                shardOptions.threads = 1;
                Source src = openSource(s.path, shardOptions);
                if (src.format == "safetensors-index" || src.format == "torch-bin-index")
                    throw LoadError(s.path, "a shard cannot itself be an index");
                s.source = std::move(src);
            } catch (const LoadError& e) {
                s.error = e.problem();
            } catch (const std::exception& e) {
                s.error = e.what();
            }
        }
    };
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads; ++t)
        pool.emplace_back(worker);
    worker();
    for (auto& t : pool)
        t.join();

    auto backing = std::make_shared<IndexBacking>();
    for (Shard& s : shards) {
        if (s.path.empty()) {
            out.addFinding(Severity::Danger, "shard name '" + s.name + "' points outside the index folder; not opened");
            continue;
        }
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
        s.byName.reserve(s.source->entries.size());
        for (size_t i = 0; i < s.source->entries.size(); ++i)
            s.byName.emplace(s.source->entries[i].name, i);
        s.used.assign(s.source->entries.size(), false);
    }
    auto fileIndexOf = [&](const Shard& s) {
        return static_cast<int32_t>(std::find(out.files.begin(), out.files.end(), s.path) - out.files.begin());
    };

    // One state dict, in weight_map order.
    out.entries.reserve(mapping.size());
    std::unordered_map<size_t, size_t> unavailable;
    size_t misplaced = 0;
    for (auto& [name, si] : mapping) {
        Shard& s = shards[si];
        if (!s.source) {
            Entry e;
            e.name = name;
            e.location.kind = TensorLocation::Kind::Unavailable;
            e.attributes.emplace_back("shard", s.name);
            out.entries.push_back(std::move(e));
            ++unavailable[si];
            continue;
        }
        auto it = s.byName.find(name);
        if (it == s.byName.end()) {
            // Is it in another shard?
            std::string elsewhere;
            for (const Shard& other : shards)
                if (other.source && other.byName.count(name))
                    elsewhere = other.name;
            if (misplaced++ < 20)
                out.addFinding(Severity::Warning,
                    "the index puts this tensor in " + s.name + ", which does not hold it"
                        + (elsewhere.empty() ? std::string() : " (it is in " + elsewhere + ")"),
                    name);
            Entry e;
            e.name = name;
            e.location.kind = TensorLocation::Kind::Unavailable;
            e.attributes.emplace_back("shard", s.name);
            out.entries.push_back(std::move(e));
            continue;
        }
        if (s.used[it->second])
            continue;
        s.used[it->second] = true;
        Entry e = s.source->entries[it->second];
        e.location.file = fileIndexOf(s);
        e.attributes.emplace_back("shard", s.name);
        out.entries.push_back(std::move(e));
    }
    if (misplaced > 20)
        out.addFinding(Severity::Warning, std::to_string(misplaced) + " tensors in all are not where the index says");
    for (const auto& [si, count] : unavailable)
        out.addFinding(Severity::Warning,
            std::to_string(count) + " tensors listed in the index are unavailable because shard " + shards[si].name
                + " could not be read");

    // Tensors a shard holds that the index never mentions still load (transformers reads whole shards).
    size_t unlisted = 0;
    for (Shard& s : shards) {
        if (!s.source)
            continue;
        for (size_t i = 0; i < s.source->entries.size(); ++i) {
            if (s.used[i])
                continue;
            if (unlisted++ < 20)
                out.addFinding(Severity::Warning, "shard " + s.name + " holds this tensor but the index does not list it",
                    s.source->entries[i].name);
            Entry e = s.source->entries[i];
            e.location.file = fileIndexOf(s);
            e.attributes.emplace_back("shard", s.name);
            out.entries.push_back(std::move(e));
        }
    }
    if (unlisted > 20)
        out.addFinding(Severity::Warning, std::to_string(unlisted) + " shard tensors in all are missing from the index");

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
