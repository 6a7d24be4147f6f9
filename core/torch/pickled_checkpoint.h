#pragma once
// What the torch readers (zip, legacy) share once the pickle has run: the parsed object graph, kept
// alive inside the Source so another container can be selected without reading the file again, and the
// step that turns it into containers, entries and findings.

#include "model/source.h"
#include "pickle/value.h"
#include "torch/state_dict_tree.h"
#include "torch/load_safety.h"
#include "torch/torch_semantics.h"
#include "io/input_file.h"

#include <future>
#include <memory>

namespace sl {
struct Timings;
}

namespace sl::torch {

struct PickledCheckpoint : SourceBacking {
    explicit PickledCheckpoint(TorchSemantics::PersistentIds mode)
        : semantics(mode)
    {
    }
    void selectContainer(Source& s, const std::string& container) const override;

    uint64_t fileSize = 0; // bounds the walk over the object graph (finishSource)
    std::vector<uint8_t> ownedPickle; // data.pkl inflated, when the archive was re-zipped
    // Pickles' bytes the graph points into: a stored data.pkl, and other pickles read whole.
    std::vector<std::shared_ptr<const Region>> regions;
    pickle::Arena arena;
    TorchSemantics semantics;
    pickle::Value* root = nullptr;
    ContainerScan scan;
    EntryContext context;
    LoadSafety safety; // every pickle torch.load would run, scanned by the reader before the unpickler runs
};

// The walk that lists the graph's containers (scanContainers), started on a second thread once the graph is
// built, for a reader that has more to do before finishSource (the zip reader resolves its storages). The
// walk reads only the graph, which nothing writes meanwhile.
std::future<ContainerScan> startContainerScan(const std::shared_ptr<PickledCheckpoint>& ckpt);

// Scans containers (or takes the scan `started`), selects `container` (or picks one when null), builds
// entries and adds the findings about globals and rebuild problems. Throws LoadError when `container` names
// nothing. `deferEntries`: a container of plain tensors may be handed over as rows (OpenOptions::deferEntries).
void finishSource(const std::shared_ptr<PickledCheckpoint>& ckpt, Source& out, const std::string* container,
    Timings* timings, bool deferEntries, std::future<ContainerScan> started = {});

} // namespace sl::torch
