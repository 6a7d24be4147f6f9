#include "pickled_checkpoint.h"

#include "util/error.h"

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
