#include "rank_files_reader.h"

#include "distributed/chunk_tiling.h"
#include "distributed/distributed_tensors.h"
#include "formats/loader.h"
#include "formats/rank_sets.h"
#include "model/file_indices.h"
#include "model/shape_volume.h"
#include "util/error.h"
#include "util/load_control.h"
#include "util/parallel.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

namespace sl {

namespace {

namespace fs = std::filesystem;

// Per-key warnings beyond this are summed up in one line.
constexpr size_t kMaxKeyFindings = 20;
constexpr size_t kMaxFiles = 65536;

struct RankFile {
    std::string path;
    size_t given = 0; // position among the paths as given
    int64_t rank = -1; // the rank this file stands for (see rank_files_reader.h)
    std::optional<Source> source;
    std::string error;
    int32_t fileBase = 0; // where its Source::files start in the merged source
};

int64_t attributeNumber(const Entry& e, const std::string& key)
{
    const std::string* v = e.attribute(key);
    int64_t x = -1;
    if (!v || std::from_chars(v->data(), v->data() + v->size(), x).ec != std::errc())
        return -1;
    return x;
}

// The rank a file's distributed tensors say saved them (ShardedTensor pg_state, DTensor mesh), or -1.
int64_t contentRank(const Source& s)
{
    for (const Entry& e : s.entries)
        if (e.sharding)
            if (int64_t r = attributeNumber(e, "rank"); r >= 0)
                return r;
    return -1;
}

// The save's world size as its ShardedTensors record it, or -1. (A DTensor's mesh can be a submesh of the
// world, so it does not say.)
int64_t contentWorldSize(const Source& s)
{
    for (const Entry& e : s.entries)
        if (e.sharding)
            if (int64_t w = attributeNumber(e, "world_size"); w > 0)
                return w;
    return -1;
}

std::string joinRanks(const std::vector<int64_t>& ranks)
{
    std::string out;
    for (size_t i = 0; i < ranks.size(); ++i) {
        if (i == 8) {
            out += ", ... (" + std::to_string(ranks.size()) + " in all)";
            break;
        }
        out += (i ? ", " : "") + std::to_string(ranks[i]);
    }
    return out;
}

bool isDistributed(const Entry* e)
{
    return e && e->sharding
        && (e->sharding->kind == Sharding::Kind::DTensor || e->sharding->kind == Sharding::Kind::ShardedTensor
            || e->sharding->kind == Sharding::Kind::FlatParameter);
}

// Warnings about keys, at most kMaxKeyFindings of each kind, then one line with the rest's count.
class KeyFindings {
public:
    explicit KeyFindings(Source& s)
        : m_s(s)
    {
    }
    void add(const std::string& kind, std::string message, const std::string& entry)
    {
        if (m_counts[kind]++ < kMaxKeyFindings)
            m_s.addFinding(Severity::Warning, std::move(message), entry);
    }
    void summarise(const std::string& firstEntry)
    {
        for (const auto& [kind, n] : m_counts)
            if (n > kMaxKeyFindings)
                m_s.addFinding(Severity::Warning,
                    std::to_string(n - kMaxKeyFindings) + " more keys " + kind + " (see their attributes)", firstEntry);
    }

private:
    Source& m_s;
    std::map<std::string, size_t> m_counts;
};

struct MergeInput {
    const std::vector<RankFile>* files; // in rank order
    const std::vector<Source>* sources; // one per file, same order
};

// Whether this key's pieces cover its global tensor: identical boxes (replicas) counted once, and only when
// they do not overlap otherwise.
void checkCoverage(const Entry& m, KeyFindings& warn)
{
    if (!m.shapeKnown || !m.sharding)
        return;
    const auto& chunks = m.sharding->chunks;
    for (const ShardChunk& c : chunks)
        if (c.offsets.size() != m.shape.size() || c.sizes.size() != m.shape.size())
            return; // a piece whose place is unknown
    auto box = [&](size_t i) { return distributed::ChunkBox { chunks[i].offsets, chunks[i].sizes }; };
    const std::vector<size_t> distinct = distributed::distinctBoxes(chunks.size(), box);
    const auto tiling
        = distributed::ChunkTiling::check(m.shape, distinct.size(), [&](size_t i) { return box(distinct[i]); });
    using V = distributed::ChunkTiling::Verdict;
    if (tiling.verdict() == V::Overlap || (tiling.verdict() == V::Irregular && tiling.covered() > m.numel())) {
        warn.add("have overlapping pieces", "tensor " + m.name + ": the files' pieces overlap", m.name);
    } else if (tiling.verdict() == V::Gap || (tiling.verdict() == V::Irregular && tiling.covered() < m.numel())) {
        warn.add("are not fully covered",
            "tensor " + m.name + ": the files hold " + std::to_string(tiling.covered()) + " of its "
                + std::to_string(m.numel()) + " elements (is a rank's file missing?)",
            m.name);
    }
}

// Fills out.entries and the key-level findings from the per-rank sources.
void mergeEntries(const MergeInput& in, Source& out)
{
    const auto& files = *in.files;
    const auto& sources = *in.sources;
    const size_t n = sources.size();

    // Key order: rank 0's, and a key only a later file holds right after its predecessor there.
    struct Slot {
        std::vector<const Entry*> at; // per file, null when the file lacks the key
        std::list<std::string_view>::iterator pos;
    };
    std::list<std::string_view> order;
    std::unordered_map<std::string_view, Slot> byName;
    for (size_t r = 0; r < n; ++r) {
        std::list<std::string_view>::iterator after = order.end();
        bool havePrev = false;
        for (const Entry& e : sources[r].entries) {
            auto [it, inserted] = byName.try_emplace(e.name);
            Slot& slot = it->second;
            if (inserted) {
                slot.at.assign(n, nullptr);
                slot.pos = order.insert(havePrev ? std::next(after) : order.begin(), it->first);
            }
            if (!slot.at[r])
                slot.at[r] = &e;
            after = slot.pos;
            havePrev = true;
        }
    }

    // DTensor-based parallelism (FSDP2, tensor parallel) writes every sharded tensor as a DTensor, so a plain
    // tensor beside DTensors is one it left whole on every rank: a buffer, or an optimizer step count.
    const bool dtensorSave = std::any_of(sources.begin(), sources.end(), [](const Source& s) {
        return std::any_of(s.entries.begin(), s.entries.end(),
            [](const Entry& e) { return e.sharding && e.sharding->kind == Sharding::Kind::DTensor; });
    });
    KeyFindings warn(out);
    size_t ambiguous = 0;
    std::string firstAmbiguous;
    size_t replicas = 0;
    std::string firstReplica;
    bool rowMajorUsed = false;
    out.entries.reserve(byName.size());
    for (std::string_view name : order) {
        const std::vector<const Entry*>& at = byName[name].at;
        std::vector<int64_t> missing;
        const Entry* first = nullptr;
        size_t firstRank = 0;
        for (size_t r = 0; r < n; ++r) {
            if (!at[r])
                missing.push_back(files[r].rank);
            else if (!first) {
                first = at[r];
                firstRank = r;
            }
        }
        if (!missing.empty())
            warn.add("are missing in some files",
                "key " + std::string(name) + " is missing in rank" + (missing.size() > 1 ? "s " : " ")
                    + joinRanks(missing),
                std::string(name));

        Entry m;
        if (first->kind != EntryKind::Tensor) {
            // Objects and groups: the first file's, as it is.
            m = *first;
            shiftFileIndices(m, files[firstRank].fileBase);
            if (!missing.empty())
                m.attributes.emplace_back("missing_in_ranks", joinRanks(missing));
            out.entries.push_back(std::move(m));
            continue;
        }
        m.name = first->name;
        m.kind = EntryKind::Tensor;
        m.dtype = first->dtype;
        m.device = first->device;
        m.typeName = first->typeName;
        m.requiresGrad = first->requiresGrad;
        m.isParameter = first->isParameter;
        auto sh = std::make_shared<Sharding>();
        sh->kind = Sharding::Kind::PerRankFiles;

        const Entry* firstDistributed = nullptr;
        bool anyPlain = false;
        std::set<DType> dtypes;
        for (size_t r = 0; r < n; ++r) {
            if (!at[r])
                continue;
            dtypes.insert(at[r]->dtype);
            if (isDistributed(at[r]) && !firstDistributed)
                firstDistributed = at[r];
            anyPlain |= !isDistributed(at[r]);
        }
        if (dtypes.size() > 1) {
            std::string list;
            for (size_t r = 0; r < n; ++r)
                if (at[r])
                    list += (list.empty() ? "" : ", ") + std::string("rank ") + std::to_string(files[r].rank) + " "
                        + std::string(dtypeName(at[r]->dtype));
            warn.add(
                "have different dtypes in different files", "key " + m.name + " has different dtypes: " + list, m.name);
            m.attributes.emplace_back("dtype_disagreement", list);
        }
        if (firstDistributed && anyPlain)
            warn.add("are stored differently in different files",
                "key " + m.name + " is a distributed tensor in some files and a plain tensor in others", m.name);

        if (firstDistributed) {
            // The global shape is in every file; they must agree.
            m.shape = firstDistributed->shape;
            m.typeName = firstDistributed->typeName;
            m.attributes.emplace_back("rank_sharding", std::string(shardingKindName(firstDistributed->sharding->kind)));
            const Sharding& fs0 = *firstDistributed->sharding;
            sh->placements = fs0.placements;
            sh->meshShape = fs0.meshShape;
            sh->meshDimNames = fs0.meshDimNames;
            for (size_t r = 0; r < n; ++r)
                if (isDistributed(at[r]) && at[r]->shape != m.shape) {
                    warn.add("have different global shapes in different files",
                        "key " + m.name + " has global shape " + shapeToString(m.shape) + " in rank "
                            + std::to_string(files[firstRank].rank) + " but " + shapeToString(at[r]->shape)
                            + " in rank " + std::to_string(files[r].rank),
                        m.name);
                    m.attributes.emplace_back("shape_disagreement",
                        "rank " + std::to_string(files[r].rank) + ": " + shapeToString(at[r]->shape));
                    break;
                } else if (isDistributed(at[r]) && at[r]->sharding->kind == Sharding::Kind::DTensor
                    && (at[r]->sharding->placements != fs0.placements || at[r]->sharding->meshShape != fs0.meshShape)) {
                    warn.add("have different placements in different files",
                        "key " + m.name + " has different placements or mesh in rank " + std::to_string(files[r].rank),
                        m.name);
                    break;
                }
        }

        // One chunk per piece a file holds.
        for (size_t r = 0; r < n; ++r) {
            const Entry* e = at[r];
            if (!e)
                continue;
            const int32_t base = files[r].fileBase;
            const std::string label = "rank " + std::to_string(files[r].rank);
            if (isDistributed(e)) {
                const bool dtensor = e->sharding->kind == Sharding::Kind::DTensor;
                bool added = false;
                for (const ShardChunk& c : e->sharding->chunks)
                    // A DTensor lists only its own piece, located or not (a subclass local tensor such as NF4
                    // has no plain bytes); a ShardedTensor lists every rank's, this file's being the located ones.
                    if (dtensor || c.file >= 0) {
                        ShardChunk copy = c;
                        copy.file = c.file >= 0 ? c.file + base : -1;
                        copy.label = label;
                        sh->chunks.push_back(std::move(copy));
                        added = true;
                    }
                if (!added && dtensor
                    && (e->location.kind != TensorLocation::Kind::None
                        || e->sharding->localShape.size() == e->shape.size())) {
                    // No mesh coordinate in the file: place rank r at its row-major mesh position.
                    ShardChunk c;
                    c.sizes = e->sharding->localShape;
                    c.file = e->location.kind != TensorLocation::Kind::None && e->location.file >= 0
                        ? e->location.file + base
                        : -1;
                    if (e->location.kind == TensorLocation::Kind::Mapped) {
                        c.byteOffset = e->location.offset;
                        c.byteLength = e->location.length;
                    }
                    c.strides = e->location.strides;
                    c.label = label;
                    const Shape& mesh = e->sharding->meshShape;
                    const uint64_t meshSize = shapeVolume(mesh);
                    if (!mesh.empty() && meshSize > 0 && files[r].rank >= 0
                        && static_cast<uint64_t>(files[r].rank) < meshSize) {
                        Shape coord;
                        int64_t rest = files[r].rank;
                        for (size_t i = mesh.size(); i-- > 0;) {
                            coord.push_back(rest % mesh[i]);
                            rest /= mesh[i];
                        }
                        std::reverse(coord.begin(), coord.end());
                        Shape local;
                        Shape offsets;
                        if (distributed::dtensorPiece(e->shape, e->sharding->placements, mesh, coord, local, offsets)
                            && local == e->sharding->localShape) {
                            c.offsets = offsets;
                            rowMajorUsed = true;
                        } else if (local != e->sharding->localShape) {
                            warn.add("do not sit where their rank number puts them",
                                "key " + m.name + ": rank " + std::to_string(files[r].rank) + " holds "
                                    + shapeToString(e->sharding->localShape) + ", not the " + shapeToString(local)
                                    + " its row-major mesh position " + shapeToString(coord) + " gets",
                                m.name);
                        }
                    }
                    sh->chunks.push_back(std::move(c));
                }
            } else {
                ShardChunk c;
                c.sizes = e->shape;
                c.file = e->location.file >= 0 ? e->location.file + base : -1;
                if (e->location.kind == TensorLocation::Kind::Mapped) {
                    c.byteOffset = e->location.offset;
                    c.byteLength = e->location.length;
                }
                c.strides = e->location.strides;
                c.label = label;
                sh->chunks.push_back(std::move(c));
            }
        }

        if (!firstDistributed) {
            // Plain tensors: what the shapes imply, conservatively (rank_files_reader.h).
            std::vector<const Entry*> held;
            for (size_t r = 0; r < n; ++r)
                if (at[r])
                    held.push_back(at[r]);
            const Shape& s0 = held.front()->shape;
            const bool same = std::all_of(held.begin(), held.end(), [&](const Entry* e) { return e->shape == s0; });
            int differingDim = -1;
            bool oneDim = missing.empty() && !s0.empty();
            for (const Entry* e : held) {
                if (!oneDim)
                    break;
                if (e->shape.size() != s0.size()) {
                    oneDim = false;
                    break;
                }
                for (size_t d = 0; d < s0.size(); ++d)
                    if (e->shape[d] != s0[d]) {
                        if (differingDim >= 0 && differingDim != static_cast<int>(d))
                            oneDim = false;
                        differingDim = static_cast<int>(d);
                    }
            }
            if (same && s0.empty() && missing.empty()) {
                m.shape = {};
                for (auto& c : sh->chunks)
                    c.offsets = {};
                m.attributes.emplace_back("global_shape", "0-d in every file: a replica");
            } else if (same && missing.empty() && dtensorSave) {
                m.shape = s0;
                for (auto& c : sh->chunks) {
                    c.offsets.clear();
                    c.offsets.resize(s0.size());
                }
                m.attributes.emplace_back("global_shape",
                    "a replica: a plain tensor of the same shape in every file of a save that holds DTensors (FSDP2 "
                    "and tensor parallelism keep buffers whole on every rank)");
                if (replicas++ == 0)
                    firstReplica = m.name;
            } else if (!same && oneDim && differingDim >= 0) {
                const auto d = static_cast<size_t>(differingDim);
                m.shape = s0;
                int64_t total = 0;
                for (auto& c : sh->chunks) {
                    c.offsets.clear();
                    for (size_t k = 0; k < s0.size(); ++k)
                        c.offsets.push_back(k == d ? total : 0);
                    if (__builtin_add_overflow(total, c.sizes[d], &total))
                        total = INT64_MAX;
                }
                m.shape[d] = total;
                m.attributes.emplace_back("global_shape",
                    "inferred: the files' pieces concatenated along dim " + std::to_string(d) + " in rank order");
            } else {
                m.shape.clear();
                m.shapeKnown = false;
                if (same && missing.empty()) {
                    m.attributes.emplace_back("global_shape",
                        "unknown: every file holds " + shapeToString(s0)
                            + " (a replica or an even shard; the files do not say which)");
                    if (ambiguous++ == 0)
                        firstAmbiguous = m.name;
                } else if (!missing.empty()) {
                    m.attributes.emplace_back("global_shape", "unknown: not every file holds it");
                } else {
                    m.attributes.emplace_back("global_shape", "unknown: the files' pieces differ in more than one dim");
                    warn.add("have pieces that do not fit together",
                        "key " + m.name + ": the files hold pieces of different ranks or several differing dims",
                        m.name);
                }
            }
        }
        if (!missing.empty())
            m.attributes.emplace_back("missing_in_ranks", joinRanks(missing));
        m.sharding = std::move(sh);
        if (firstDistributed && missing.empty())
            checkCoverage(m, warn);
        out.entries.push_back(std::move(m));
    }
    if (ambiguous)
        out.addFinding(Severity::Info,
            std::to_string(ambiguous)
                + " plain tensor(s) have the same shape in every file: each is a replica or an even shard, which the "
                  "files do not say, so its global shape is shown as unknown (the chunks list each file's piece)",
            firstAmbiguous);
    if (replicas)
        out.addFinding(Severity::Info,
            std::to_string(replicas)
                + " plain tensor(s) have the same shape in every file of this DTensor save: each is taken as a replica "
                  "(its global shape is the shape every file holds)",
            firstReplica);
    if (rowMajorUsed)
        out.addFinding(Severity::Info,
            "some DTensor files do not record their mesh coordinate: their pieces are placed by the file's rank "
            "number, row-major in the device mesh (init_device_mesh's layout; the mesh's rank tensor is not read)",
            out.entries.empty() ? std::string() : out.entries.front().name);
    warn.summarise(out.entries.empty() ? std::string() : out.entries.front().name);
}

// Each file's findings once: unchanged when every file has it, else naming the ranks that do.
void mergeFindings(const std::vector<RankFile>& files, const std::vector<Source>& sources, Source& out)
{
    std::vector<std::pair<const Finding*, std::vector<int64_t>>> merged;
    std::map<std::tuple<Severity, std::string, std::string>, size_t> index;
    for (size_t r = 0; r < sources.size(); ++r)
        for (const Finding& f : sources[r].findings) {
            auto [it, inserted] = index.try_emplace({ f.severity, f.message, f.entry }, merged.size());
            if (inserted)
                merged.emplace_back(&f, std::vector<int64_t> {});
            merged[it->second].second.push_back(files[r].rank);
        }
    for (const auto& [f, ranks] : merged) {
        if (ranks.size() == sources.size() || sources.size() == 1)
            out.addFinding(f->severity, f->message, f->entry);
        else
            out.addFinding(f->severity,
                std::string(ranks.size() > 1 ? "ranks " : "rank ") + joinRanks(ranks) + ": " + f->message, f->entry);
    }
}

// File-level checks: do these look like the files of one save?
void checkSave(const std::vector<RankFile>& files, const std::vector<Source>& sources, Source& out)
{
    const size_t n = sources.size();
    // Key sets.
    std::vector<std::set<std::string_view>> keys(n);
    for (size_t r = 0; r < n; ++r)
        for (const Entry& e : sources[r].entries)
            keys[r].insert(e.name);
    for (size_t r = 1; r < n; ++r) {
        size_t common = 0;
        for (std::string_view k : keys[r])
            common += keys[0].count(k);
        const size_t larger = std::max(keys[0].size(), keys[r].size());
        if (larger > 0 && common * 2 < larger)
            out.addFinding(Severity::Warning,
                fs::path(files[0].path).filename().string() + " and " + fs::path(files[r].path).filename().string()
                    + " have only " + std::to_string(common) + " of " + std::to_string(larger)
                    + " keys in common: they look like files of different saves");
    }
    // Containers.
    for (size_t r = 1; r < n; ++r)
        if (sources[r].container != sources[0].container)
            out.addFinding(Severity::Warning,
                "rank " + std::to_string(files[r].rank) + " shows container '" + sources[r].container + "', rank "
                    + std::to_string(files[0].rank) + " '" + sources[0].container + "'");
    // Who saved each file, and how many ranks the save had.
    std::map<int64_t, size_t> savedBy;
    std::set<int64_t> worlds;
    for (size_t r = 0; r < n; ++r) {
        const int64_t who = contentRank(sources[r]);
        const std::string name = fs::path(files[r].path).filename().string();
        if (who >= 0) {
            if (who != files[r].rank)
                out.addFinding(Severity::Warning,
                    name + " stands for rank " + std::to_string(files[r].rank) + " but its tensors were saved by rank "
                        + std::to_string(who));
            auto [it, inserted] = savedBy.emplace(who, r);
            if (!inserted)
                out.addFinding(Severity::Warning,
                    fs::path(files[it->second].path).filename().string() + " and " + name + " were both saved by rank "
                        + std::to_string(who) + ": they look like files of different saves (or copies)");
        }
        if (int64_t w = contentWorldSize(sources[r]); w > 0)
            worlds.insert(w);
    }
    if (worlds.size() > 1) {
        std::string list;
        for (int64_t w : worlds)
            list += (list.empty() ? "" : ", ") + std::to_string(w);
        out.addFinding(Severity::Warning,
            "the files come from saves with different numbers of ranks (" + list + "): they look like different saves");
    } else if (worlds.size() == 1) {
        const int64_t w = *worlds.begin();
        std::vector<int64_t> absent;
        std::set<int64_t> have;
        for (const auto& f : files)
            have.insert(f.rank);
        for (int64_t r = 0; r < w && absent.size() < 64; ++r)
            if (!have.count(r))
                absent.push_back(r);
        if (!absent.empty())
            out.addFinding(Severity::Warning,
                "the save had " + std::to_string(w) + " ranks; no file for rank" + (absent.size() > 1 ? "s " : " ")
                    + joinRanks(absent));
        if (static_cast<int64_t>(n) > w)
            out.addFinding(
                Severity::Warning, std::to_string(n) + " files for a save of " + std::to_string(w) + " ranks");
    }
    // Writers.
    auto record = [](const Source& s, const char* key) -> std::string {
        for (const auto& [k, v] : s.metadata)
            if (k == key)
                return v;
        return {};
    };
    for (size_t r = 1; r < n; ++r)
        if (sources[r].format != sources[0].format || record(sources[r], "version") != record(sources[0], "version")
            || record(sources[r], "byteorder") != record(sources[0], "byteorder")) {
            out.addFinding(Severity::Info,
                "rank " + std::to_string(files[r].rank) + " was written differently (" + std::string(formatId(sources[r].format))
                    + ", version " + record(sources[r], "version") + ") from rank " + std::to_string(files[0].rank)
                    + " (" + std::string(formatId(sources[0].format)) + ", version " + record(sources[0], "version") + ")");
            break;
        }
}

// torch.load(weights_only=True) of every file: the imports any file needs, the globals any file has refused.
void mergeWeightsOnly(const std::vector<Source>& sources, Source& out)
{
    out.weightsOnly = WeightsOnlyLoad {};
    out.weightsOnly.checked = true;
    for (const Source& s : sources)
        for (auto [from, into] : { std::pair { &s.weightsOnly.imports, &out.weightsOnly.imports },
                 std::pair { &s.weightsOnly.refused, &out.weightsOnly.refused },
                 std::pair { &s.weightsOnly.executes, &out.weightsOnly.executes } })
            for (const auto& name : *from)
                if (std::find(into->begin(), into->end(), name) == into->end())
                    into->push_back(name);
}

// The merged source from per-rank sources (files and sources in rank order); `early` are findings about the
// set of files made before merging.
void merge(const std::vector<RankFile>& files, const std::vector<Source>& sources, const std::vector<Finding>& early,
    Source& out)
{
    out.entries.clear();
    out.findings = early;
    out.container = sources.front().container;
    out.containers = sources.front().containers;
    mergeFindings(files, sources, out);
    mergeWeightsOnly(sources, out);
    checkSave(files, sources, out);
    mergeEntries({ &files, &sources }, out);
}

class RankFilesBacking : public SourceBacking {
public:
    std::vector<RankFile> files; // rank order; each keeps its source (entries dropped) for re-selection
    std::vector<Finding> early;
    void selectContainer(Source& s, const std::string& container) const override
    {
        std::vector<Source> selected;
        selected.reserve(files.size());
        for (const RankFile& f : files)
            selected.push_back(f.source->withContainer(container));
        merge(files, selected, early, s);
    }
};

} // namespace

Source openRankFiles(const std::vector<std::string>& paths, const OpenOptions& options)
{
    if (paths.empty())
        throw LoadError("(no files)", "no per-rank files given");
    if (paths.size() > kMaxFiles)
        throw LoadError(paths.front(), "too many per-rank files (" + std::to_string(paths.size()) + ")");
    std::vector<RankFile> files(paths.size());
    {
        std::set<std::string> seen;
        for (size_t i = 0; i < paths.size(); ++i) {
            files[i].path = paths[i];
            files[i].given = i;
            std::error_code ec;
            fs::path canonical = fs::weakly_canonical(paths[i], ec);
            if (!seen.insert(ec ? paths[i] : canonical.string()).second)
                throw LoadError(paths[i], "is given twice");
        }
    }

    // Open every file (in parallel: each reader is independent). Each file's problem is kept with it, so
    // no job throws.
    LoadControl* control = options.control;
    if (control)
        control->addTotal(files.size());
    parallelFor(files.size(), threadsFor(options.threads), [&](size_t i) {
        RankFile& f = files[i];
        if (control && control->cancelled())
            return;
        try {
            std::error_code ec;
            if (fs::is_directory(f.path, ec))
                throw LoadError(f.path, "is a folder; per-rank files are torch.save files, listed one by one");
            OpenOptions one;
            one.threads = 1;
            one.container = options.container;
            one.control = control;
            Source s = openSource(f.path, one);
            if (!isTorchSave(s.format))
                throw LoadError(f.path,
                    "is a " + std::string(formatId(s.format))
                        + " file, not a torch.save file; only torch.save files of one sharded "
                          "save (one per rank) can be listed together");
            f.source = std::move(s);
            if (control)
                control->advance();
        } catch (const LoadError& e) {
            f.error = e.what();
        } catch (const std::exception& e) {
            f.error = f.path + ": " + oneLineMessage(e.what());
        }
    });
    if (control)
        control->checkpoint(files.front().path);
    for (const RankFile& f : files)
        if (!f.source) {
            // e.what() is already "path: problem"; keep it one line and naming the file.
            const std::string prefix = f.path + ": ";
            throw LoadError(f.path, f.error.rfind(prefix, 0) == 0 ? f.error.substr(prefix.size()) : f.error);
        }

    // Ranks: from the names, else from the tensors, else the order given.
    Source out;
    out.format = SourceFormat::PerRank;
    std::string rankRule;
    auto assign = [&](auto rankOf) {
        std::set<int64_t> distinct;
        for (const RankFile& f : files) {
            int64_t r = rankOf(f);
            if (r < 0 || !distinct.insert(r).second)
                return false;
        }
        for (RankFile& f : files)
            f.rank = rankOf(f);
        return true;
    };
    if (assign([](const RankFile& f) { return rankInName(fs::path(f.path).filename().string()); }))
        rankRule = "the number after 'rank' in each file name";
    else if (assign([](const RankFile& f) { return lastNumberInName(fs::path(f.path).filename().string()); }))
        rankRule = "the last number in each file name";
    else if (assign([](const RankFile& f) { return contentRank(*f.source); }))
        rankRule = "the rank that saved each file's distributed tensors";
    else {
        for (RankFile& f : files)
            f.rank = static_cast<int64_t>(f.given);
        rankRule = "the order the files were given";
        if (files.size() > 1)
            out.addFinding(Severity::Info,
                "the file names carry no distinct rank numbers: the files are taken as ranks 0 to "
                    + std::to_string(files.size() - 1) + " in the order given");
    }
    std::stable_sort(files.begin(), files.end(), [](const RankFile& a, const RankFile& b) { return a.rank < b.rank; });

    out.path = files.front().path;
    std::vector<Source> sources;
    sources.reserve(files.size());
    for (RankFile& f : files) {
        f.fileBase = static_cast<int32_t>(out.files.size());
        for (const std::string& file : f.source->files)
            out.files.push_back(file);
        sources.push_back(std::move(*f.source));
    }
    // A file whose pick differs is shown with rank 0's container, when it has one.
    for (size_t r = 1; r < files.size(); ++r)
        if (!options.container && sources[r].container != sources[0].container) {
            try {
                sources[r] = sources[r].withContainer(sources[0].container);
            } catch (const LoadError&) {
                // checkSave reports the difference.
            }
        }
    auto backing = std::make_shared<RankFilesBacking>();
    backing->early = std::move(out.findings);
    merge(files, sources, backing->early, out);
    out.metadata = sources.front().metadata;
    out.metadata.emplace_back("rank_files", std::to_string(files.size()));
    out.metadata.emplace_back("ranks_from", rankRule);

    for (size_t i = 0; i < files.size(); ++i) {
        files[i].source = std::move(sources[i]);
        files[i].source->entries.clear(); // re-selection rebuilds them from the file's parsed graph
        files[i].source->entries.shrink_to_fit();
    }
    backing->files = std::move(files);
    out.backing = std::move(backing);
    return out;
}

} // namespace sl
