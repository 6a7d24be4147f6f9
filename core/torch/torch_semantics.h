#pragma once
// What torch.load's unpickler would build, reproduced without importing anything: torch's rebuild
// functions (torch/_utils.py, torch/_tensor.py) become TensorValues, persistent ids become
// StorageValues, and the handful of Python builtins torch checkpoints use (OrderedDict, set,
// _codecs.encode, getattr for enums, numpy arrays) become plain values. Every other global stays an inert
// GlobalValue and every call on it an ObjectValue; the globals are recorded so the reader can report the
// ones torch.load would import or execute.

#include "pickle/global_policy.h"
#include "pickle/unpickler.h"
#include "util/name_index.h"

#include <array>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace sl::torch {

using namespace sl::pickle;

class TorchSemantics : public InertSemantics {
public:
    enum class PersistentIds {
        Zip, // ('storage', cls, key, location, numel)
        Legacy, // ('storage', cls, key, location, numel, view_metadata) and ('module', cls, file, source)
        Tar, // pre-0.1.10 tar layout: a key of a tensor or storage built from the tar's other members
    };
    explicit TorchSemantics(PersistentIds mode)
        : m_mode(mode)
    {
    }

    Value* global(Unpickler& u, std::string_view module, std::string_view name) override;
    Value* call(Unpickler& u, Value* callable, SeqValue* args) override;
    Value* instantiate(Unpickler& u, Value* cls, SeqValue* args, Value* kwargs) override;
    void build(Unpickler& u, Value* obj, Value* state) override;
    Value* persistentLoad(Unpickler& u, Value* pid) override;
    // A plain tensor of a torch.save zip (_rebuild_tensor_v2 of a storage with an empty OrderedDict of
    // hooks), built as persistentLoad and call would; null for anything they would build otherwise or
    // complain about.
    Value* tensorRecord(Unpickler& u, const TensorCall& c) override;

    struct GlobalUse {
        GlobalRisk risk = GlobalRisk::Unknown;
        std::string reason;
        size_t count = 0;
        std::string allowedByImport; // the import that allow-lists it for weights_only=True, if any
    };
    // A storage (creating it on first use) for a storage class, key, location and element count.
    StorageValue* storage(Unpickler& u, Value* cls, std::string_view key, std::string_view location, int64_t numel);
    // A slice of `root` (in elements) under its own key, as legacy view_metadata and tar storage views make.
    StorageValue* view(Unpickler& u, StorageValue* root, std::string_view viewKey, int64_t offset, int64_t size);
    StorageValue* storagesByKey(std::string_view key) const;
    // Tar layout: objects the main pickle refers to by key.
    void addPrebuilt(std::string key, Value* v) { m_prebuilt.emplace(std::move(key), v); }

    // Every distinct global the pickle referenced, by "module.name".
    const std::map<std::string, GlobalUse>& globals() const { return m_globals; }
    // Storages in order of first reference.
    const std::vector<StorageValue*>& storages() const { return m_storages; }
    // Problems found while rebuilding (malformed arguments to rebuild functions, ...): not fatal.
    const std::vector<std::string>& problems() const { return m_problems; }
    // The hash sharedDims files a shape under (public so that a test can build two shapes that collide).
    static uint64_t dimsHash(std::span<const int64_t> size, std::span<const int64_t> stride);

private:
    // Each takes the callable so a malformed call still shows what was called.
    Value* rebuildTensor(Unpickler& u, GlobalValue* fn, SeqValue* args);
    Value* rebuildQTensor(Unpickler& u, GlobalValue* fn, SeqValue* args);
    Value* rebuildWrapperSubclass(Unpickler& u, GlobalValue* fn, SeqValue* args);
    Value* rebuildFromType(Unpickler& u, GlobalValue* fn, SeqValue* args);
    Value* rebuildSparse(Unpickler& u, GlobalValue* fn, SeqValue* args);
    Value* rebuildNested(Unpickler& u, GlobalValue* fn, SeqValue* args);
    Value* numpyReconstruct(Unpickler& u);
    void buildNumpyArray(Unpickler& u, TensorValue* t, Value* state);
    Value* inert(Unpickler& u, Value* callable, SeqValue* args, const char* problem = nullptr);
    // A torch.Size read off the pickle, before it is kept: on the stack, so that tensors of one shape can
    // share one array (setDims).
    static constexpr size_t kMaxDims = 64; // a longer shape is malformed here, as in the other readers
    struct Shape {
        std::array<int64_t, kMaxDims> dims;
        size_t rank = 0;
        std::span<const int64_t> span() const { return { dims.data(), rank }; }
    };
    static bool readShape(Value* v, Shape& out);
    void setDims(Unpickler& u, TensorValue& t, std::span<const int64_t> size, std::span<const int64_t> stride);
    // The size, and the stride where one as long as the size was written (wrapper subclasses and meta tensors
    // may carry none: then hasStride is false). False when the size is not a tuple of integers.
    bool setSizeAndOptionalStride(Unpickler& u, TensorValue& t, Value* sizeArg, Value* strideArg);

    PersistentIds m_mode;
    std::map<std::string, GlobalUse> m_globals;
    // Appends a storage whose key no other has.
    void addStorage(StorageValue* s);
    // storage() for a key no storage has yet.
    StorageValue* newStorage(Unpickler& u, const GlobalValue* cls, std::string_view key, std::string_view location,
        int64_t numel);
    // Positions in m_storages by key (a flat index: one lookup per tensor on files with 100k storages).
    // torch keys storages "0", "1", ... in order of first use: a storage keyed as its own position is
    // found there (storagesByKey) and is left out of the index, so files torch wrote never hash a key.
    struct StorageKey {
        const std::vector<StorageValue*>* storages;
        std::string_view operator()(size_t i) const { return (*storages)[i]->key; }
    };
    StorageKey storageKey() const { return { &m_storages }; }
    NameIndex m_storageByKey;
    std::vector<StorageValue*> m_storages;
    std::vector<std::string> m_problems;
    int m_rebuildDepth = 0;
    std::unordered_map<std::string, Value*> m_prebuilt;
    bool m_inlineStorageNoted = false;
    // Tensors' size and stride arrays (setDims), shared between tensors of one shape: a state dict's layers
    // repeat their shapes, and each tensor would otherwise copy 16 bytes per dimension into the arena. A
    // fixed table of the last pair per hash, so a pickle of ever new shapes costs what it did.
    struct DimsSlot {
        uint64_t hash = 0;
        size_t rank = 0;
        const int64_t* dims = nullptr;
    };
    std::array<DimsSlot, 256> m_dims {};
    const int64_t* sharedDims(Unpickler& u, std::span<const int64_t> size, std::span<const int64_t> stride);
};

} // namespace sl::torch
