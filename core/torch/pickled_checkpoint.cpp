#include "pickled_checkpoint.h"

#include "quant/quantized_tensors.h"
#include "torch/optimizer_labels.h"
#include "torch/tensor_entries.h"
#include "util/error.h"
#include "util/name_index.h"
#include "util/name_list.h"
#include "util/timings.h"

#include <algorithm>
#include <tuple>
#include <unordered_map>

namespace sl::torch {

namespace {

// The load-safety verdict from the reader's opcode scans, then what the unpickler could not rebuild.
void reportGlobals(const PickledCheckpoint& ck, Source& out)
{
    ck.safety.report(out);
    for (const auto& p : ck.semantics.problems())
        out.addFinding(Severity::Warning, p);
}

// Entries that share a storage: identical views are tied weights (lm_head/embed), others are views
// (slices of one buffer). Each entry learns its partners through the "tied_with" attribute.
void reportSharedStorage(Source& out)
{
    // Most checkpoints share no storage: check that with a flat index first, and group (one vector per
    // storage) only when some storage has two entries.
    {
        NameIndex firstWith; // positions in out.entries
        auto storageOf = [&](size_t i) -> std::string_view { return out.entries[i].location.storageId; };
        firstWith.reserve(out.entries.size());
        bool shared = false;
        for (size_t i = 0; i < out.entries.size() && !shared; ++i) {
            const auto& e = out.entries[i];
            if (e.kind == EntryKind::Tensor && !e.location.storageId.empty())
                shared = firstWith.insert(i, storageOf) != i;
        }
        if (!shared)
            return;
    }
    std::unordered_map<std::string_view, size_t> groupOf;
    std::vector<std::vector<size_t>> groups; // in order of first appearance, for stable output
    groupOf.reserve(out.entries.size());
    for (size_t i = 0; i < out.entries.size(); ++i) {
        const auto& e = out.entries[i];
        if (e.kind != EntryKind::Tensor || e.location.storageId.empty())
            continue;
        auto [it, inserted] = groupOf.emplace(e.location.storageId, groups.size());
        if (inserted)
            groups.emplace_back();
        groups[it->second].push_back(i);
    }
    size_t reported = 0;
    std::vector<std::pair<size_t, std::string>> tied;
    // Identical views are found by sorting a storage's members, not by comparing every pair: a pickle can
    // point thousands of keys at one tensor through its memo, and pairs (with every partner named on every
    // entry) grew as the square of that. Each entry names at most kMaxPartners of its partners.
    constexpr size_t kMaxPartners = 8;
    auto viewKey = [&](size_t i) {
        const Entry& e = out.entries[i];
        return std::tie(e.location.offset, e.dtype, e.shape, e.location.strides);
    };
    for (const auto& members : groups) {
        if (members.size() < 2)
            continue;
        std::vector<size_t> order = members;
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return viewKey(a) < viewKey(b); });
        for (size_t lo = 0, hi = 0; lo < order.size(); lo = hi) {
            for (hi = lo + 1; hi < order.size() && viewKey(order[hi]) == viewKey(order[lo]); ++hi) {
            }
            if (hi - lo < 2)
                continue;
            for (size_t k = lo; k < hi; ++k) {
                std::string partners;
                size_t listed = 0;
                for (size_t q = lo; q < hi && listed < kMaxPartners; ++q) {
                    if (q == k)
                        continue;
                    partners += (partners.empty() ? "" : ", ") + out.entries[order[q]].name;
                    ++listed;
                }
                if (hi - lo - 1 > listed)
                    partners += ", ... (" + std::to_string(hi - lo - 1) + " in all)";
                tied.emplace_back(order[k], std::move(partners));
            }
        }
        if (reported++ < 20) {
            // Attached to the first member so that selecting another container drops it.
            out.addFinding(Severity::Info,
                sharedStorageMessage(out.entries, out.entries[members[0]].location.storageId, members),
                out.entries[members[0]].name);
        }
    }
    for (auto& [i, partners] : tied)
        out.entries[i].attributes.emplace_back("tied_with", std::move(partners));
}

// Optimizer state entries get the parameter each belongs to, from the optimizer's own param_names or the
// parameter order of the file's model state dict.
void labelOptimizer(const PickledCheckpoint& ck, const Container& optimizer, Source& out)
{
    std::vector<Entry> model;
    int pick = pickContainer(ck.scan);
    if (pick >= 0 && ck.scan.containers[static_cast<size_t>(pick)].info.role == ContainerInfo::Role::Model) {
        Source tmp;
        buildEntries(ck.scan, ck.scan.containers[static_cast<size_t>(pick)], ck.context, tmp);
        model = std::move(tmp.entries);
    }
    OptimizerLabels labels = labelOptimizerState(optimizer.node, out.entries, model);
    if (labels.states && !out.entries.empty())
        out.addFinding(Severity::Info,
            labels.labelled ? "labelled " + std::to_string(labels.labelled) + " of " + std::to_string(labels.states)
                    + " optimizer states with their parameter (from " + labels.how + ")"
                            : "optimizer states are keyed by index and nothing in the file names their parameters; a "
                              "paired model (diff) can label them",
            out.entries.front().name);
}

// `graph`: what keeps ck alive, for entries handed over as rows (buildEntries); null builds them all.
void fillEntries(const PickledCheckpoint& ck, Source& out, const std::string* container, Timings* timings = nullptr,
    const std::shared_ptr<const void>& graph = nullptr)
{
    out.containers.clear();
    for (const auto& c : ck.scan.containers)
        out.containers.push_back(c.info);
    int idx = -1;
    std::string reason;
    if (container) {
        for (size_t i = 0; i < ck.scan.containers.size(); ++i)
            if (ck.scan.containers[i].info.path == *container)
                idx = static_cast<int>(i);
        if (idx < 0) {
            std::string known;
            for (size_t i = 0; i < ck.scan.containers.size() && i < 10; ++i)
                known += (i ? ", " : "") + std::string("'") + ck.scan.containers[i].info.path + "'";
            throw LoadError(out.path,
                "no container '" + *container + "' (available: " + (known.empty() ? "none" : known) + ")");
        }
    } else {
        idx = pickContainer(ck.scan, &reason);
    }
    out.entries.clear();
    if (idx < 0) {
        out.container.clear();
        out.addFinding(Severity::Info, "the file holds no tensors");
        return;
    }
    const Container& c = ck.scan.containers[static_cast<size_t>(idx)];
    out.container = c.info.path;
    PhaseTimer entriesTimer(timings, "build entries");
    const bool shared = buildEntries(ck.scan, c, ck.context, out, graph);
    entriesTimer.stop();
    if (c.shape == Container::Shape::Optimizer)
        labelOptimizer(ck, c, out);
    if (shared) {
        PhaseTimer sharedTimer(timings, "shared storages");
        reportSharedStorage(out);
    }
    if (!container && ck.scan.containers.size() > 1)
        out.addFinding(Severity::Info,
            "picked container '" + c.info.path + "' (" + reason + "); " + std::to_string(ck.scan.containers.size() - 1)
                + " other container(s) can be selected");
}

} // namespace

namespace {

ContainerScan scanGraph(const PickledCheckpoint& ckpt)
{
    // The graph lives in the arena (8 bytes per node or reference at least) and its strings in the file's
    // pickles: together an upper bound on its size, known without walking it.
    const size_t graphSize = ckpt.arena.bytesAllocated() / 8 + ckpt.fileSize / 64 + ckpt.ownedPickle.size() / 64 + 1;
    return scanContainers(ckpt.root, graphSize);
}

} // namespace

std::future<ContainerScan> startContainerScan(const std::shared_ptr<PickledCheckpoint>& ckpt)
{
    return std::async(std::launch::async, [ckpt] { return scanGraph(*ckpt); });
}

void finishSource(const std::shared_ptr<PickledCheckpoint>& ckpt, Source& out, const std::string* container,
    Timings* timings, bool deferEntries, std::future<ContainerScan> started)
{
    PhaseTimer scanTimer(timings, started.valid() ? "scan containers (wait)" : "scan containers");
    ckpt->scan = started.valid() ? started.get() : scanGraph(*ckpt);
    scanTimer.stop();
    reportGlobals(*ckpt, out);
    fillEntries(*ckpt, out, container, timings, deferEntries ? ckpt : nullptr);
    out.backing = ckpt;
}

void PickledCheckpoint::selectContainer(Source& s, const std::string& container) const
{
    // Entry-level findings belong to the old selection; file-level ones stay.
    std::erase_if(s.findings,
        [](const Finding& f) { return !f.entry.empty() || f.message.rfind("picked container", 0) == 0; });
    try {
        fillEntries(*this, s, &container);
        quant::groupQuantizedEntries(s);
    } catch (const FormatError& e) {
        // Another container can exceed the walk budget the first one fitted in; still only LoadErrors leave.
        throw LoadError(s.path, e.what());
    }
}

} // namespace sl::torch
