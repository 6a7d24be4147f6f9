#pragma once
// The object graph a pickle describes, built without importing or running anything.
//
// Values live in an Arena and are never freed one by one: the whole graph goes away with the arena.
// Strings are views: into the pickle bytes themselves (which the caller keeps mapped) or into the arena.
// Nodes are shared by pointer exactly as the pickle's memo shares them, so mutations after memoisation
// (APPENDS/SETITEMS/BUILD on a memoised object) are visible everywhere, and cycles are possible: every
// traversal must bound its depth.

#include "model/dtype.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <memory>
#include <memory_resource>
#include <new>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace sl::pickle {

enum class Kind : uint8_t {
    None,
    Bool,
    Int, // fits in int64
    BigInt, // larger LONG1/LONG4 values, kept as little-endian two's complement bytes
    Float,
    Str,
    Bytes,
    Tuple,
    List,
    Set,
    Dict,
    Global, // a reference to module.name; never imported
    Object, // the inert result of calling or instantiating something we do not model
    Storage, // a torch storage reference from persistent_load
    Tensor, // a tensor rebuilt from torch's reduce functions
    // torch.distributed.checkpoint dataclass objects the dataclass lane built whole (pickle/dataclass_record.h)
    DcpChunk, // ChunkStorageMetadata
    DcpIndex, // MetadataIndex
    DcpStorageInfo, // _StorageInfo
};

// Globals the torch layer gives meaning to. Everything else is Unknown and stays inert.
enum class KnownGlobal : uint16_t {
    Unknown,
    OrderedDict,
    DefaultDict,
    BuiltinSet,
    BuiltinFrozenSet,
    BuiltinBytearray,
    BuiltinGetattr,
    CodecsEncode,
    CopyregReconstructor,
    RebuildTensor,
    RebuildTensorV2,
    RebuildTensorV3,
    RebuildParameter,
    RebuildParameterWithState,
    RebuildFromTypeV2,
    RebuildWrapperSubclass,
    RebuildQTensor,
    RebuildMetaTensorNoStorage,
    RebuildSparseTensor,
    RebuildSparseCsrTensor,
    RebuildNestedTensor,
    RebuildDeviceTensorFromCpuTensor,
    RebuildDeviceTensorFromNumpy,
    TypedStorageClass, // torch.FloatStorage etc.; dtype in GlobalValue::dtype
    UntypedStorage,
    TorchDType, // torch.float32 etc.; dtype in GlobalValue::dtype
    TorchSize,
    TorchDevice,
    GetLayout,
    TorchLayout, // torch.strided, torch.sparse_coo, ...
    QScheme, // torch.per_tensor_affine, ...
    NumpyReconstruct,
    NumpyDType,
    NumpyScalar,
    NumpyNDArray,
    // torch.distributed.checkpoint's, which the DCP reader's dataclass lane builds whole
    DcpChunkStorageMetadata,
    DcpMetadataIndex,
    DcpStorageInfo,
};

struct Value {
    explicit Value(Kind k)
        : kind(k)
    {
    }
    Kind kind;
};

struct BoolValue : Value {
    explicit BoolValue(bool b)
        : Value(Kind::Bool)
        , v(b)
    {
    }
    bool v;
};

struct IntValue : Value {
    explicit IntValue(int64_t i)
        : Value(Kind::Int)
        , v(i)
    {
    }
    int64_t v;
};

struct BigIntValue : Value {
    BigIntValue(std::string_view digits, bool decimal)
        : Value(Kind::BigInt)
        , bytes(digits)
        , decimal(decimal)
    {
    }
    std::string_view bytes; // little-endian two's complement (LONG1/LONG4), or decimal text (INT/LONG)
    bool decimal;
};

struct FloatValue : Value {
    explicit FloatValue(double d)
        : Value(Kind::Float)
        , v(d)
    {
    }
    double v;
};

// Str holds UTF-8 as written (Python's surrogatepass encoding); Bytes holds raw bytes.
struct StrValue : Value {
    StrValue(Kind k, std::string_view s)
        : Value(k)
        , s(s)
    {
    }
    std::string_view s;
};

// The items of a container node: a vector in the graph's arena, 16 bytes (a std::pmr::vector takes 32, and
// a 100 MB DCP .metadata makes millions of containers). Growth is given the arena, and the old block is
// handed back to it for later values (Arena::do_deallocate), so a vector is never copied: two copies would
// share the block one of them gives back. T is a pointer or a pair of pointers.
template <typename T> class ArenaVec {
public:
    using value_type = T;
    ArenaVec() = default;
    ArenaVec(const ArenaVec&) = delete;
    ArenaVec& operator=(const ArenaVec&) = delete;
    size_t size() const { return m_size; }
    bool empty() const { return m_size == 0; }
    size_t capacity() const { return m_capacity; }
    T* data() { return m_data; }
    const T* data() const { return m_data; }
    T* begin() { return m_data; }
    T* end() { return m_data + m_size; }
    const T* begin() const { return m_data; }
    const T* end() const { return m_data + m_size; }
    T& operator[](size_t i) { return m_data[i]; }
    const T& operator[](size_t i) const { return m_data[i]; }
    const T& front() const { return m_data[0]; }
    const T& back() const { return m_data[m_size - 1]; }

    void reserve(std::pmr::memory_resource* arena, size_t n)
    {
        if (n <= m_capacity)
            return;
        if (n > UINT32_MAX)
            throw std::length_error("a pickled container with more than 4 billion items");
        T* grown = static_cast<T*>(arena->allocate(n * sizeof(T), alignof(T)));
        std::copy(begin(), end(), grown);
        if (m_data)
            arena->deallocate(m_data, m_capacity * sizeof(T), alignof(T));
        m_data = grown;
        m_capacity = static_cast<uint32_t>(n);
    }
    void push_back(std::pmr::memory_resource* arena, const T& v)
    {
        if (m_size == m_capacity)
            reserve(arena, m_capacity ? 2 * size_t(m_capacity) : 4);
        m_data[m_size++] = v;
    }
    // Appends [first, last), growing geometrically.
    template <typename It> void append(std::pmr::memory_resource* arena, It first, It last)
    {
        const size_t n = static_cast<size_t>(std::distance(first, last));
        if (m_size + n > m_capacity)
            reserve(arena, std::max(size_t(m_size) + n, 2 * size_t(m_capacity)));
        std::copy(first, last, end());
        m_size += static_cast<uint32_t>(n);
    }
    // Replaces the items with [first, last), in a block of exactly that size when it must grow.
    template <typename It> void assign(std::pmr::memory_resource* arena, It first, It last)
    {
        m_size = 0;
        reserve(arena, static_cast<size_t>(std::distance(first, last)));
        append(arena, first, last);
    }

private:
    T* m_data = nullptr;
    uint32_t m_size = 0;
    uint32_t m_capacity = 0;
};

using ValueList = ArenaVec<Value*>;
using ValuePairs = ArenaVec<std::pair<Value*, Value*>>;

// Tuple, List and Set.
struct SeqValue : Value {
    explicit SeqValue(Kind k)
        : Value(k)
    {
    }
    ValueList items;
};

struct GlobalValue;

struct DictValue : Value {
    DictValue()
        : Value(Kind::Dict)
    {
    }
    // Insertion order as pickled. A key set twice appears twice; lookups take the last (Python's result).
    ValuePairs items;
    const GlobalValue* cls = nullptr; // OrderedDict/defaultdict/...; null for a plain dict
    Value* state = nullptr; // BUILD state: OrderedDict's `_metadata` lives here
    Value* lookup(std::string_view key) const;
};

struct GlobalValue : Value {
    GlobalValue(std::string_view module, std::string_view name, KnownGlobal id)
        : Value(Kind::Global)
        , module(module)
        , name(name)
        , id(id)
    {
    }
    std::string_view module;
    std::string_view name;
    KnownGlobal id;
    DType dtype = DType::Unknown; // for TypedStorageClass and TorchDType
    Value* owner = nullptr; // for getattr(owner, name) results: the object it was taken from
};

// Items appended or set onto an object of a list or dict subclass: rare, so kept apart (a DCP .metadata
// holds over a million plain objects, and two empty vectors in each took a sixth of its graph).
struct ObjectItems {
    ValueList list;
    ValuePairs dict;
};

// What REDUCE/NEWOBJ/INST/OBJ produced for something we do not model. `callable` is usually a GlobalValue.
struct ObjectValue : Value {
    ObjectValue()
        : Value(Kind::Object)
    {
    }
    Value* callable = nullptr;
    Value* args = nullptr; // usually a Tuple
    Value* kwargs = nullptr; // NEWOBJ_EX only
    Value* state = nullptr; // from BUILD
    ObjectItems* items = nullptr;
    bool viaNewObj = false; // cls.__new__(cls, *args) rather than callable(*args)
    // APPEND(S) onto a list subclass, SETITEM(S) onto a dict subclass.
    std::span<Value* const> listItems() const
    {
        return items ? std::span<Value* const>(items->list.data(), items->list.size()) : std::span<Value* const> {};
    }
    std::span<const std::pair<Value*, Value*>> dictItems() const
    {
        return items ? std::span<const std::pair<Value*, Value*>>(items->dict.data(), items->dict.size())
                     : std::span<const std::pair<Value*, Value*>> {};
    }
    // `items`, made in the graph's arena when the first one arrives.
    ObjectItems& itemsToAdd(std::pmr::memory_resource* arena)
    {
        if (!items) {
            void* p = arena->allocate(sizeof(ObjectItems), alignof(ObjectItems));
            items = new (p) ObjectItems();
        }
        return *items;
    }
    const GlobalValue* cls() const;
};

// A torch.distributed.checkpoint dataclass object taken whole by the dataclass lane
// (pickle/dataclass_record.h): what its object, state dict and tuples said, in one small value instead of
// some 300 bytes of graph. It stands for the object the opcodes would have built, of class `cls`, and is
// never changed after (BUILD, SETITEM or APPEND onto it make the pickle run again without the lane).
struct DcpRecordValue : Value {
    static constexpr size_t kMaxRank = 4;
    // The records' small fields are declared here, before `cls`, so that they sit in the padding after `kind`:
    // 8 bytes less per chunk and per index (a 256-rank save holds 555,000 of each).
    uint8_t rank = 0; // DcpChunk: of its offsets; DcpIndex: of its offset
    uint8_t sizesRank = 0; // DcpChunk
    bool hasOffset = false; // DcpIndex: offset is not None
    const GlobalValue* cls = nullptr;

protected:
    using Value::Value;
};
inline bool isDcpRecord(Kind k) { return k == Kind::DcpChunk || k == Kind::DcpIndex || k == Kind::DcpStorageInfo; }

// ChunkStorageMetadata(offsets=torch.Size(...), sizes=torch.Size(...)), with `rank` and `sizesRank`.
struct DcpChunkValue : DcpRecordValue {
    DcpChunkValue()
        : DcpRecordValue(Kind::DcpChunk)
    {
    }
    int64_t offsets[kMaxRank] = {};
    int64_t sizes[kMaxRank] = {};
};
static_assert(sizeof(DcpChunkValue) == 80);

// MetadataIndex(fqn=str, offset=torch.Size(...) or None, index=int or None), with `hasOffset` and `rank`.
struct DcpIndexValue : DcpRecordValue {
    DcpIndexValue()
        : DcpRecordValue(Kind::DcpIndex)
    {
    }
    std::string_view fqn; // a view of the pickle's bytes, or of a string value's
    int64_t offset[kMaxRank] = {};
};
static_assert(sizeof(DcpIndexValue) == 64);

// _StorageInfo(relative_path=str, offset=int, length=int), with transform_descriptors None where newer torch
// writes it.
struct DcpStorageInfoValue : DcpRecordValue {
    DcpStorageInfoValue()
        : DcpRecordValue(Kind::DcpStorageInfo)
    {
    }
    std::string_view relativePath;
    int64_t offset = 0;
    int64_t length = 0;
};
static_assert(sizeof(DcpStorageInfoValue) == 48);

struct StorageValue : Value {
    StorageValue()
        : Value(Kind::Storage)
    {
    }
    // The small fields first, beside `kind`: 56 bytes rather than 96, for a checkpoint's every storage.
    DType dtype = DType::Unknown;
    bool untyped : 1 = false; // UntypedStorage: numel counts bytes
    bool compressed : 1 = false; // filled by the reader: the record is deflated
protected:
    bool m_isView : 1 = false; // a StorageView
public:
    uint32_t index = 0; // order of first appearance
    std::string_view key; // "0", "1", ... (zip) or a pointer-like number (legacy)
    std::string_view location; // "cpu", "cuda:0", ...
    int64_t numel = 0; // elements (bytes when untyped) as written in the persistent id
    // Filled by the reader: where the bytes are, or -1 when not found.
    int64_t fileOffset = -1;

    // Legacy view_metadata: the storage this one is a range of (null when it is not a view), and where the
    // range starts in it, in elements.
    inline StorageValue* viewOf() const;
    inline int64_t viewOffset() const;
    // The storage whose bytes these are: the one this is a view of, else this one.
    const StorageValue* root() const { return viewOf() ? viewOf() : this; }
    StorageValue* root() { return viewOf() ? viewOf() : this; }
};
static_assert(sizeof(void*) != 8 || sizeof(StorageValue) == 56, "a storage's fields have grown or lost their packing");

// A legacy storage view, kept apart: only torch's legacy format writes them, and a zip checkpoint's every
// storage took 16 bytes more for these two fields.
struct StorageView : StorageValue {
    // A copy of `root`'s fields, as a view of `of` from `offset`.
    StorageView(const StorageValue& root, StorageValue* of, int64_t offset)
        : StorageValue(root)
        , of(of)
        , offset(offset)
    {
        m_isView = true;
    }
    StorageValue* of;
    int64_t offset;
};

StorageValue* StorageValue::viewOf() const
{
    return m_isView ? static_cast<const StorageView*>(this)->of : nullptr;
}
int64_t StorageValue::viewOffset() const
{
    return m_isView ? static_cast<const StorageView*>(this)->offset : 0;
}

// The kinds of tensor a rebuild function can produce.
enum class TensorOrigin : uint8_t {
    Dense, // _rebuild_tensor(_v2/_v3)
    Quantized, // _rebuild_qtensor
    Meta, // _rebuild_meta_tensor_no_storage
    WrapperSubclass, // _rebuild_wrapper_subclass: no storage of its own
    Sparse,
    Nested,
    Numpy, // numpy ndarray (inline bytes) or a device tensor rebuilt from one
};

struct QuantParams {
    const GlobalValue* scheme = nullptr;
    double scale = 0; // per-tensor
    int64_t zeroPoint = 0;
    Value* scales = nullptr; // per-channel: tensors
    Value* zeroPoints = nullptr;
    int64_t axis = 0;
};

// What only some tensors have (subclasses, quantized, sparse, nested and numpy tensors, and a device other
// than the storage's, cpu or meta), kept apart: a plain state dict's tensors have none of it, and a large
// checkpoint rebuilds millions of tensors.
struct TensorExtras {
    std::string_view layout;
    const GlobalValue* subclass = nullptr; // _rebuild_from_type_v2 / _rebuild_wrapper_subclass class
    Value* state = nullptr; // subclass or parameter state
    QuantParams* quant = nullptr;
    std::span<Value* const> components; // sparse/nested: the tensors it is built from
    std::string_view inlineBytes; // numpy payloads
    std::string_view device; // one that is not the storage's, "cpu" or "meta" (TensorValue::setDevice)
};

struct TensorValue : Value {
    TensorValue()
        : Value(Kind::Tensor)
    {
    }
    TensorOrigin origin = TensorOrigin::Dense;
    DType dtype = DType::Unknown;
    // Bits, so that the header's free bytes also hold the rank and where the device comes from.
    bool hasStride : 1 = true;
    bool requiresGrad : 1 = false;
    bool isParameter : 1 = false;

private:
    // size() and stride(): a rank in the header and one pointer, not two spans; device(): a byte, not a
    // string. 40 bytes a tensor rather than 80, for a checkpoint's every tensor.
    bool m_strided : 1 = false;
    uint8_t m_rank = 0;
    enum class DeviceFrom : uint8_t { Storage, None, Cpu, Meta, Extras };
    DeviceFrom m_device = DeviceFrom::Storage;
    const int64_t* m_dims = nullptr;

public:
    int64_t storageOffset = 0;
    StorageValue* storage = nullptr;

    // The storage's location ("cpu", "cuda:0", ...) unless another was set: a rebuilt tensor lives where
    // its storage does.
    std::string_view device() const
    {
        switch (m_device) {
        case DeviceFrom::Storage:
            return storage ? storage->location : std::string_view {};
        case DeviceFrom::None:
            return {};
        case DeviceFrom::Cpu:
            return "cpu";
        case DeviceFrom::Meta:
            return "meta";
        case DeviceFrom::Extras:
            break;
        }
        return extras().device;
    }
    // For a tensor without a storage of its own, or moved off it: any other than "cpu" or "meta" is kept
    // in the extras, made in `arena` when needed.
    void setDevice(std::string_view device, std::pmr::memory_resource* arena)
    {
        if (device.empty())
            m_device = DeviceFrom::None;
        else if (device == "cpu")
            m_device = DeviceFrom::Cpu;
        else if (device == "meta")
            m_device = DeviceFrom::Meta;
        else {
            m_device = DeviceFrom::Extras;
            extrasToSet(arena).device = device;
        }
    }

    std::span<const int64_t> size() const { return { m_dims, m_rank }; }
    // Empty when none was written (or hasStride is false), else as long as size().
    std::span<const int64_t> stride() const
    {
        return m_strided ? std::span<const int64_t>(m_dims + m_rank, m_rank) : std::span<const int64_t> {};
    }
    // `dims`: `rank` sizes, then as many strides when `strided`. Not copied: the graph's arena holds them,
    // and tensors of one shape may share them (nothing writes them).
    void setDims(const int64_t* dims, uint8_t rank, bool strided)
    {
        m_dims = dims;
        m_rank = rank;
        m_strided = strided;
    }

    // The rarer fields: empty ones when none was set.
    const TensorExtras& extras() const { return m_extras.get() ? *m_extras.get() : noExtras(); }
    // The same, to set: made in `arena` on first use, and copied there first when shared with the tensor
    // this one was copied from (a Parameter rebuilt from its data).
    TensorExtras& extrasToSet(std::pmr::memory_resource* arena) { return m_extras.own(arena); }
    // Whether any were set (even to nothing): a plain tensor of a state dict has none.
    bool hasExtras() const { return m_extras.get() != nullptr; }

private:
    static const TensorExtras& noExtras()
    {
        static const TensorExtras none;
        return none;
    }
    // A pointer whose copies share the pointee until one of them writes: the low bit marks it shared.
    class ExtrasRef {
    public:
        ExtrasRef() = default;
        ExtrasRef(const ExtrasRef& o)
            : m_bits(o.share())
        {
        }
        ExtrasRef& operator=(const ExtrasRef& o)
        {
            m_bits = o.share();
            return *this;
        }
        TensorExtras* get() const { return reinterpret_cast<TensorExtras*>(m_bits & ~uintptr_t(1)); }
        TensorExtras& own(std::pmr::memory_resource* arena)
        {
            if (!m_bits || (m_bits & 1)) {
                void* p = arena->allocate(sizeof(TensorExtras), alignof(TensorExtras));
                m_bits = reinterpret_cast<uintptr_t>(m_bits ? new (p) TensorExtras(*get()) : new (p) TensorExtras());
            }
            return *get();
        }

    private:
        // Both sides of a copy copy before they write.
        uintptr_t share() const { return m_bits ? (m_bits |= 1) : 0; }
        mutable uintptr_t m_bits = 0;
    };
    ExtrasRef m_extras;
};
static_assert(sizeof(void*) != 8 || sizeof(TensorValue) == 40, "a tensor's fields have grown or lost their packing");

// The arena every Value of one graph lives in. Values are trivially destructible or own only
// arena memory, so nothing is destroyed individually. Allocation is a pointer bump, inline: a 76,800-tensor
// state dict makes a million values, and std::pmr::monotonic_buffer_resource's virtual calls and std::align
// took a twentieth of unpickling it.
class Arena : private std::pmr::memory_resource {
public:
    explicit Arena(size_t initialBytes = 1 << 16)
        : m_nextBlock(std::max<size_t>(initialBytes, 64))
    {
    }
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;
    std::pmr::memory_resource* resource() { return this; }
    template <typename T, typename... Args> T* make(Args&&... args)
    {
        void* p = bump(sizeof(T), alignof(T));
        return new (p) T(std::forward<Args>(args)...);
    }
    template <typename T> std::span<T> array(size_t n)
    {
        if (n == 0)
            return {};
        if (n > SIZE_MAX / sizeof(T))
            throw std::bad_alloc();
        T* p = static_cast<T*>(bump(n * sizeof(T), alignof(T)));
        for (size_t i = 0; i < n; ++i)
            new (p + i) T();
        return { p, n };
    }
    std::string_view copy(std::string_view s);
    // Frees every value at once, for a graph built again from the start.
    void release()
    {
        m_blocks.clear();
        m_spares.clear();
        m_next = m_end = 0;
        m_bytes = 0;
        m_reserved = 0;
    }
    // Bytes handed out so far: an upper bound on the graph's nodes and references (8 bytes each), which
    // sizes the budgets of the walks over it without walking it first.
    size_t bytesAllocated() const { return m_bytes; }
    // Bytes of the blocks taken from the heap: what the graph costs in memory, slack included.
    size_t bytesReserved() const { return m_reserved; }

private:
    void* bump(size_t bytes, size_t align)
    {
        m_bytes += bytes;
        bytes = std::max<size_t>(bytes, 1); // a distinct address, never the empty arena's 0
        const uintptr_t at = alignedNext(align);
        if (at >= m_next && at <= m_end && bytes <= m_end - at) [[likely]] {
            m_next = at + bytes;
            return reinterpret_cast<void*>(at);
        }
        return fromNewBlock(bytes, align); // out of line: inlined into every make(), unpickling was 2-3% slower
    }
    uintptr_t alignedNext(size_t align) const { return (m_next + (align - 1)) & ~uintptr_t(align - 1); }
    // `bytes` at `align` from a spare block that fits them, else from a new block twice the size of the last
    // (as monotonic_buffer_resource grows) up to kMaxBlock, or one that fits them.
    void* fromNewBlock(size_t bytes, size_t align);
    void* do_allocate(size_t bytes, size_t align) override { return bump(bytes, align); }
    // A block a growing container left (ArenaVec): kept to serve later values before a new block is taken.
    // A state dict's items double per batch of 1000 and leave as much behind as they finally take (2 MB of
    // case a's 21 MB graph), in memory already touched. Small ones are not worth keeping. Nothing is written
    // to the block here: the container may still read it to finish its own copy.
    void do_deallocate(void* p, size_t bytes, size_t) override
    {
        if (bytes >= kMinSpare)
            m_spares.push_back({ reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + bytes });
    }
    bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }

    static constexpr size_t kMinSpare = 4096;
    // Blocks stop doubling here. Past it, a graph's last block was on average a quarter unused, and the
    // block's end, where the heap's next header goes, touched one more huge page: case a's 13 MB graph took
    // 16.7 MB of blocks, the last of 8 MB half empty, and the whole run 1-2 huge pages of new memory more.
    static constexpr size_t kMaxBlock = size_t(2) << 20;
    struct Spare {
        uintptr_t begin, end;
    };
    std::vector<std::unique_ptr<std::byte[]>> m_blocks;
    std::vector<Spare> m_spares;
    uintptr_t m_next = 0; // the free part of the last block (or of the spare in use)
    uintptr_t m_end = 0;
    size_t m_nextBlock; // bytes of the next block
    size_t m_bytes = 0;
    size_t m_reserved = 0;
};

// Shared immutable singletons: None, True, False and small ints, as CPython caches them.
Value* noneValue();
// The empty tuple, which is immutable in Python too: every NEWOBJ of a plain class pickles one as its
// arguments, a million of them in a large DCP .metadata.
SeqValue* emptyTupleValue();
Value* boolValue(bool b);

// Helpers for reading a graph.
const GlobalValue* asGlobal(const Value* v);
const StrValue* asStr(const Value* v); // Str only
const SeqValue* asSeq(const Value* v); // Tuple, List or Set
const DictValue* asDict(const Value* v);
const TensorValue* asTensor(const Value* v);
const ObjectValue* asObject(const Value* v);
bool toInt(const Value* v, int64_t& out); // Int or Bool
bool toDouble(const Value* v, double& out); // Float, Int or Bool
// "module.name" of a global (for display).
std::string qualifiedName(const GlobalValue& g);

} // namespace sl::pickle
