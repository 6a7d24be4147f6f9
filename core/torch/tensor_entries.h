#pragma once
// From a pickled tensor to an Entry: dtype, shape, strides and where its bytes are (its storage, followed
// through legacy views), plus what torch's rebuild functions say about it (sharding, quantization, subclass
// state). The container walk (state_dict_tree.cpp) calls these for every tensor it meets; readers that meet
// tensors outside a walk call tensorEntry.

#include "torch/state_dict_tree.h"
#include "util/error.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>

namespace sl::torch {

// What a walk of the pickled graph may spend, in units of one visit, one entry part or 64 bytes of a built name. The
// memo lets a tiny pickle share subtrees (n nodes, 2^n paths) or reuse one long key at every level, so a
// fixed visit cap is not enough: the budget is a multiple of the graph's own size (graphWeight).
struct WalkBudget {
    size_t left;
    std::unordered_set<const void*> seen = {}; // objects described once per walk (shared shard lists)
    void charge(size_t units)
    {
        if (units > left)
            throw FormatError("the pickled object graph is too large to walk (shared subtrees?)");
        left -= units;
    }
};

// What building one entry named `name` charges a walk's budget.
inline size_t entryUnits(std::string_view name) { return 1 + name.size() / 64; }

// Real subclass states nest two or three tensors deep; a tensor's state can also hold the tensor itself.
constexpr int kMaxPartDepth = 8;

// Entry for one tensor value (for readers that meet tensors outside a container walk).
Entry tensorEntry(const pickle::TensorValue& t, std::string name, const EntryContext& ctx);

// A dict key as text: str and bytes as they are, ints in decimal, anything else by its repr.
std::string keyString(const pickle::Value* k);

// tensorEntry for a part nested `depth` levels inside an entry, charged to the walk that asked for it.
// fillTensorEntry writes into a fresh Entry in place (the entries of a large state dict are built straight
// into their vector instead of being moved there).
void fillTensorEntry(Entry& e, const pickle::TensorValue& t, std::string_view name, const EntryContext& ctx, int depth,
    WalkBudget& budget);
Entry tensorEntryAt(const pickle::TensorValue& t, std::string name, const EntryContext& ctx, int depth, WalkBudget& budget);

// Whether fillTensorEntry, for a tensor named `name` at the top of a walk, would build an entry that a row
// holds all of: a dense tensor with no extras, its view inside its storage, and no entry-level finding.
// False where it cannot tell cheaply; the caller then builds the entry to see.
bool isPlainTensor(const pickle::TensorValue& t, std::string_view name);

// The plain tensors of a walk kept as rows (model/entry_list.h): each name in one buffer and each tensor's
// node, whose graph `graph` keeps alive. Built into entries by fillTensorEntry, as the walk would have.
class TensorRows final : public DeferredEntries {
public:
    TensorRows(std::shared_ptr<const void> graph, const EntryContext& ctx, size_t expected);
    // False when the names outgrow 32-bit offsets: then the walk builds entries instead. `held`: the same
    // name as bytes the graph holds (a top-level key), kept as a view rather than copied, or empty.
    bool add(std::string_view name, const pickle::TensorValue& t, std::string_view held = {});

    size_t size() const override { return m_rows.size(); }
    EntryRow row(size_t i) const override;
    void build(std::vector<Entry>& out) const override;
    void forEachBuilt(size_t from, size_t to, const std::function<void(const Entry&)>& visit) const override;

private:
    // 24 bytes: a listing reads the rest from the tensor's node (copying it here was no faster). A flat state
    // dict's names are its keys, which the graph holds: viewed there, not copied into m_names (3.7 MB of fresh
    // memory for 76,800 tensors).
    struct Row {
        const char* heldName; // the name's bytes in the graph, or null: then at nameOffset in m_names
        const pickle::TensorValue* tensor;
        uint32_t nameOffset;
        uint32_t nameLength;
    };
    std::string_view nameOf(const Row& r) const
    {
        return { r.heldName ? r.heldName : m_names.data() + r.nameOffset, r.nameLength };
    }
    std::shared_ptr<const void> m_graph;
    EntryContext m_ctx;
    std::string m_names;
    std::vector<Row> m_rows;
    size_t m_expected; // rows the scan counted: sizes m_names when the first name is copied
};

// The finding on entries that share one storage (tied weights, views): "3 entries share storage 0: a, b, c",
// naming the first six members.
std::string sharedStorageMessage(const std::vector<Entry>& entries, std::string_view storage,
    const std::vector<size_t>& members);

} // namespace sl::torch
