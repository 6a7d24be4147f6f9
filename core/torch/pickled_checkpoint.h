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
    std::vector<uint8_t> ownedPickle; // data.pkl, read (and inflated when the archive was re-zipped)
    std::vector<std::shared_ptr<const Region>> regions; // other pickles' bytes, which the graph points into
    pickle::Arena arena;
    TorchSemantics semantics;
    pickle::Value* root = nullptr;
    ContainerScan scan;
    EntryContext context;
    LoadSafety safety; // every pickle torch.load would run, scanned by the reader before the unpickler runs
};

// Scans containers, selects `container` (or picks one when null), builds entries and adds the findings
// about globals and rebuild problems. Throws LoadError when `container` names nothing.
void finishSource(const std::shared_ptr<PickledCheckpoint>& ckpt, Source& out, const std::string* container,
    Timings* timings = nullptr);

} // namespace sl::torch
