#include "pickled_checkpoint.h"

#include "util/error.h"

#include <unordered_map>

namespace sl::torch {

namespace {

void reportGlobals(const TorchSemantics& sem, Source& out)
{
    std::vector<std::string> unknown;
    for (const auto& [name, use] : sem.globals()) {
        if (use.risk == GlobalRisk::Dangerous)
            out.addFinding(Severity::Danger,
                "pickle references " + name + ", which " + use.reason
                    + "; torch.load would import it (StateLens did not run anything)");
        else if (use.risk == GlobalRisk::Unknown)
            unknown.push_back(name);
    }
    if (!unknown.empty()) {
        std::string list;
        for (size_t i = 0; i < unknown.size() && i < 8; ++i)
            list += (i ? ", " : "") + unknown[i];
        if (unknown.size() > 8)
            list += ", ... (" + std::to_string(unknown.size()) + " in all)";
        out.addFinding(Severity::Warning,
            "pickle references classes outside torch's weights-only allowlist (" + list
                + "); torch.load(weights_only=True) refuses this file and weights_only=False imports them");
    }
    for (const auto& p : sem.problems())
        out.addFinding(Severity::Warning, p);
}

// Entries that share a storage: identical views are tied weights (lm_head/embed), others are views
// (slices of one buffer). Each entry learns its partners through the "tied_with" attribute.
void reportSharedStorage(Source& out)
{
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
    for (const auto& members : groups) {
        if (members.size() < 2)
            continue;
        for (size_t i : members) {
            const Entry& a = out.entries[i];
            std::string partners;
            for (size_t j : members) {
                const Entry& b = out.entries[j];
                if (i == j || a.shape != b.shape || a.dtype != b.dtype || a.location.offset != b.location.offset
                    || a.location.strides != b.location.strides)
                    continue;
                partners += (partners.empty() ? "" : ", ") + b.name;
            }
            if (!partners.empty())
                tied.emplace_back(i, partners);
        }
        if (reported++ < 20) {
            std::string names;
            for (size_t k = 0; k < members.size() && k < 6; ++k)
                names += (k ? ", " : "") + out.entries[members[k]].name;
            if (members.size() > 6)
                names += ", ...";
            // Attached to the first member so that selecting another container drops it.
            out.addFinding(Severity::Info,
                std::to_string(members.size()) + " entries share storage "
                    + out.entries[members[0]].location.storageId + ": " + names,
                out.entries[members[0]].name);
        }
    }
    for (auto& [i, partners] : tied)
        out.entries[i].attributes.emplace_back("tied_with", std::move(partners));
}

void fillEntries(const PickledCheckpoint& ck, Source& out, const std::string* container)
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
    buildEntries(ck.scan, c, ck.context, out);
    reportSharedStorage(out);
    if (!container && ck.scan.containers.size() > 1)
        out.addFinding(Severity::Info,
            "picked container '" + c.info.path + "' (" + reason + "); " + std::to_string(ck.scan.containers.size() - 1)
                + " other container(s) can be selected");
}

} // namespace

void finishSource(const std::shared_ptr<PickledCheckpoint>& ckpt, Source& out, const std::string* container)
{
    ckpt->scan = scanContainers(ckpt->root);
    reportGlobals(ckpt->semantics, out);
    fillEntries(*ckpt, out, container);
    out.backing = ckpt;
}

void PickledCheckpoint::selectContainer(Source& s, const std::string& container) const
{
    // Entry-level findings belong to the old selection; file-level ones stay.
    std::erase_if(s.findings,
        [](const Finding& f) { return !f.entry.empty() || f.message.rfind("picked container", 0) == 0; });
    fillEntries(*this, s, &container);
}

} // namespace sl::torch
