#pragma once
// From the object a torch.save pickle holds to the entries of one state dict.
//
// Training checkpoints nest the state dict ({"model": sd, "optimizer": ..., "epoch": 3}, Lightning's
// {"state_dict": ..., "optimizer_states": [...]}, DeepSpeed's {"module": ...}, EMA copies) or pickle whole
// nn.Modules. The whole tree is kept; `scanContainers` lists every place that holds a state dict, and
// `pickContainer` chooses the model state dict:
//   1. the top object, when it holds tensors itself;
//   2. else follow well-known wrapper keys down from the top (kPreferredKeys: "state_dict",
//      "model_state_dict", "model", "module", "net", "network", "model_state", "weights", "params"),
//      as long as they lead to a candidate;
//   3. else the model-role candidate (not optimizer, not EMA) with the most tensors, the shallowest first;
//   4. else the candidate with the most tensors, preferring an EMA copy, then other state, then an optimizer
//      state (a file that holds only an optimizer state).
// Candidates: dicts with tensors among their values (directly or in a tuple, like packed params),
// optimizer state dicts ({"state", "param_groups"}), pickled nn.Module objects, and nested module trees
// (a dict whose values include two or more dicts of model weights, {"encoder": {...}, "decoder": {...}}).
// The dicts inside an optimizer state or a module are parts of it; inside a nested module tree only the
// model dicts are, so an optimizer or EMA copy beside them stays selectable.
// Each tensor the walk meets becomes an Entry in torch/tensor_entries.h.

#include "model/source.h"
#include "pickle/value.h"

#include <memory>
#include <string>
#include <vector>

namespace sl::torch {

struct Container {
    ContainerInfo info;
    const pickle::Value* node = nullptr;
    enum class Shape : uint8_t { Dict, Optimizer, Module, Sequence } shape = Shape::Dict;
};

struct ContainerScan {
    std::vector<Container> containers;
    size_t totalTensors = 0; // every tensor anywhere in the tree
    // What one buildEntries may spend walking: a multiple of the object graph's size (see WalkBudget).
    size_t walkBudget = 100'000;
};

// `graphSize` bounds the graph's nodes, references and string bytes / 64 (see graphWeight); the walks'
// budget is a multiple of it. Readers pass what their arena allocated; 0 measures the graph first.
ContainerScan scanContainers(const pickle::Value* root, size_t graphSize = 0);

// Index into scan.containers of the pick, or -1 when nothing holds tensors. `reason` says which rule won.
int pickContainer(const ContainerScan& scan, std::string* reason = nullptr);

// The role a key names: split into tokens at '_', '.' and '-', the first token that names one decides
// ("optim*" an optimizer, "ema"/"swa"/"shadow" an EMA copy, "scheduler"/"rng"/... other state); else Model.
ContainerInfo::Role roleForKey(std::string_view key);
// Where `key` stands among rule 2's well-known names of a model state dict ("state_dict", "model", ...),
// or -1.
int preferredKeyRank(std::string_view key);

// Where storages' bytes are, for turning TensorValues into entries.
struct EntryContext {
    int32_t fileIndex = 0;
    bool bigEndian = false;
};

// Appends the flattened entries of `c` to `out.entries` and entry-level findings to `out.findings`.
// Other containers of a different role nested inside `c` are left out (they are selectable on their own).
// Returns whether any storage is used by more than one emitted tensor (tied weights or views).
// With `graph` (what keeps the pickled graph alive), a container whose entries are all plain tensors is
// handed over as rows (model/entry_list.h), its entries built when first needed.
bool buildEntries(const ContainerScan& scan, const Container& c, const EntryContext& ctx, Source& out,
    const std::shared_ptr<const void>& graph = nullptr);

} // namespace sl::torch
