#include "torch/tensor_entries.h"

#include "distributed/distributed_tensors.h"
#include "pickle/value_repr.h"
#include "quant/quantized_tensors.h"
#include "model/shape_volume.h"
#include "util/error.h"

#include <algorithm>

namespace sl::torch {

using namespace sl::pickle;

std::string keyString(const Value* k)
{
    if (auto* s = asStr(k))
        return std::string(s->s);
    int64_t i = 0;
    if (toInt(k, i) && k->kind == Kind::Int)
        return std::to_string(i);
    if (k && k->kind == Kind::Bytes)
        return std::string(static_cast<const StrValue*>(k)->s);
    return shortRepr(k, 60);
}

namespace {

bool mulOverflow(uint64_t a, uint64_t b, uint64_t& out) { return __builtin_mul_overflow(a, b, &out); }
bool addOverflow(uint64_t a, uint64_t b, uint64_t& out) { return __builtin_add_overflow(a, b, &out); }

unsigned storageItemSize(const StorageValue& s) { return s.untyped ? 1 : std::max(1u, dtypeItemSize(s.dtype)); }

// A storage's bytes as its persistent id gives them, saturating.
uint64_t storageBytes(const StorageValue& s)
{
    uint64_t nbytes = 0;
    if (mulOverflow(static_cast<uint64_t>(s.numel), storageItemSize(s), nbytes))
        nbytes = UINT64_MAX;
    return nbytes;
}

// The bytes [start, end) a view of `item`-byte elements covers in its storage: from its offset to the element
// offset + sum((size_i - 1) * stride_i), inclusive. `storageOffset` is not negative.
struct ViewBytes {
    uint64_t start = 0, end = 0;
    int64_t negativeStride = 0; // the first one, when there is one: nothing else is computed then
    bool overflow = false;
};
ViewBytes viewBytes(const TensorValue& t, unsigned item)
{
    ViewBytes v;
    uint64_t lastElement = static_cast<uint64_t>(t.storageOffset);
    const auto size = t.size(), stride = t.stride();
    for (size_t i = 0; i < size.size() && i < stride.size(); ++i) {
        if (stride[i] < 0) {
            v.negativeStride = stride[i];
            return v;
        }
        uint64_t step = 0;
        v.overflow |= mulOverflow(static_cast<uint64_t>(size[i] - 1), static_cast<uint64_t>(stride[i]), step);
        v.overflow |= addOverflow(lastElement, step, lastElement);
    }
    v.overflow |= mulOverflow(static_cast<uint64_t>(t.storageOffset), item, v.start);
    v.overflow |= addOverflow(lastElement, 1, lastElement);
    v.overflow |= mulOverflow(lastElement, item, v.end);
    return v;
}

// Storage bytes and where they start, following legacy storage views to their root.
void locateStorage(const StorageValue& s, Entry& e, const EntryContext& ctx)
{
    auto& loc = e.location;
    const StorageValue* root = s.root();
    loc.storageId = root->key;
    loc.file = ctx.fileIndex;
    const unsigned storageItem = storageItemSize(s);
    loc.storageNbytes = storageBytes(s);
    if (s.viewOf()) {
        // A legacy view must lie inside its root storage, else torch.load fails (or reads another's bytes).
        uint64_t end = 0;
        if (s.viewOffset() < 0 || s.numel < 0
            || addOverflow(static_cast<uint64_t>(s.viewOffset()), static_cast<uint64_t>(s.numel), end)
            || end > static_cast<uint64_t>(std::max<int64_t>(root->numel, 0)))
            e.attributes.emplace_back("invalid_view",
                "storage view of " + std::to_string(s.numel) + " elements at " + std::to_string(s.viewOffset())
                    + " lies outside its " + std::to_string(root->numel) + "-element root storage");
    }
    if (root->fileOffset < 0) {
        loc.kind = TensorLocation::Kind::Unavailable;
        return;
    }
    uint64_t viewBytes = static_cast<uint64_t>(s.viewOffset()) * storageItem;
    loc.storageByteOffset = static_cast<uint64_t>(root->fileOffset) + viewBytes;
    loc.kind = root->compressed ? TensorLocation::Kind::Compressed : TensorLocation::Kind::Mapped;
}

void describeQuant(const TensorValue& t, Entry& e, int depth, WalkBudget& budget)
{
    if (!t.extras().quant)
        return;
    const QuantParams& q = *t.extras().quant;
    if (q.scheme)
        e.attributes.emplace_back("qscheme", std::string(q.scheme->name));
    if (q.scales) {
        e.attributes.emplace_back("axis", std::to_string(q.axis));
        EntryContext none;
        if (auto* s = asTensor(q.scales))
            e.parts.push_back(tensorEntryAt(*s, "scales", none, depth + 1, budget));
        if (auto* z = asTensor(q.zeroPoints))
            e.parts.push_back(tensorEntryAt(*z, "zero_points", none, depth + 1, budget));
    } else {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.9g", q.scale);
        e.attributes.emplace_back("scale", buf);
        e.attributes.emplace_back("zero_point", std::to_string(q.zeroPoint));
    }
}

void describeSubclassState(const TensorValue& t, Entry& e, const EntryContext& ctx, int depth, WalkBudget& budget)
{
    // Subclass state: a __dict__ (torchao), (None, slots) (DTensor), or a plain dict of extra attributes.
    const DictValue* attrs = asDict(t.extras().state);
    const DictValue* slots = nullptr;
    if (auto* tup = asSeq(t.extras().state); tup && tup->kind == Kind::Tuple && tup->items.size() == 2) {
        attrs = asDict(tup->items[0]);
        slots = asDict(tup->items[1]);
    }
    for (const DictValue* d : { attrs, slots }) {
        if (!d)
            continue;
        for (const auto& [k, v] : d->items) {
            std::string key = keyString(k);
            if (auto* inner = asTensor(v))
                e.parts.push_back(tensorEntryAt(*inner, key, ctx, depth + 1, budget));
            else if (e.attributes.size() < 32)
                e.attributes.emplace_back(key, shortRepr(v, 120));
        }
    }
}

} // namespace

Entry tensorEntry(const TensorValue& t, std::string name, const EntryContext& ctx)
{
    WalkBudget budget { 100'000 };
    return tensorEntryAt(t, std::move(name), ctx, 0, budget);
}

Entry tensorEntryAt(const TensorValue& t, std::string name, const EntryContext& ctx, int depth, WalkBudget& budget)
{
    Entry e;
    fillTensorEntry(e, t, name, ctx, depth, budget);
    return e;
}

void fillTensorEntry(Entry& e, const TensorValue& t, std::string_view name, const EntryContext& ctx, int depth,
    WalkBudget& budget)
{
    budget.charge(entryUnits(name));
    e.name = name;
    e.kind = EntryKind::Tensor;
    e.dtype = t.dtype;
    e.shape.assign(t.size().begin(), t.size().end());
    e.requiresGrad = t.requiresGrad;
    e.isParameter = t.isParameter;
    e.device = t.device();
    if (t.extras().subclass)
        e.typeName = qualifiedName(*t.extras().subclass);
    auto& loc = e.location;
    loc.storageOffset = t.storageOffset;
    if (t.hasStride)
        loc.strides.assign(t.stride().begin(), t.stride().end());

    switch (t.origin) {
    case TensorOrigin::Dense:
    case TensorOrigin::Quantized:
        break;
    case TensorOrigin::Meta:
        e.attributes.emplace_back("storage", "meta (no data)");
        break;
    case TensorOrigin::WrapperSubclass:
        e.attributes.emplace_back("storage", "none (wrapper subclass; data in its inner tensors)");
        break;
    case TensorOrigin::Sparse:
    case TensorOrigin::Nested: {
        e.attributes.emplace_back("layout", std::string(t.extras().layout));
        static constexpr const char* kSparseRoles[] = { "indices", "values", "", "" };
        static constexpr const char* kCompressedRoles[] = { "compressed_indices", "plain_indices", "values", "" };
        static constexpr const char* kNestedRoles[] = { "buffer", "sizes", "strides", "offsets" };
        const std::span<Value* const> components = t.extras().components;
        const char* const* roles = t.origin == TensorOrigin::Nested ? kNestedRoles
            : components.size() == 2                                ? kSparseRoles
                                                                    : kCompressedRoles;
        for (size_t i = 0; i < components.size() && i < 4 && depth < kMaxPartDepth; ++i)
            if (auto* c = asTensor(components[i]))
                e.parts.push_back(tensorEntryAt(*c, roles[i], ctx, depth + 1, budget));
        break;
    }
    case TensorOrigin::Numpy:
        if (e.typeName.empty())
            e.typeName = "numpy.ndarray";
        if (!t.extras().inlineBytes.empty()) {
            loc.kind = TensorLocation::Kind::Inline;
            loc.length = t.extras().inlineBytes.size();
        }
        break;
    }
    if (depth < kMaxPartDepth) {
        describeQuant(t, e, depth, budget);
        describeSubclassState(t, e, ctx, depth, budget);
        // The specific describers refine the generic one: they find the inner tensors in e.parts.
        if (t.extras().subclass) {
            // The distributed describer builds entries for inner tensors the generic walk does not reach
            // (ShardedTensor's local shards) and charges its own work, both to this walk.
            const distributed::DescribeContext dctx {
                [&](const TensorValue& inner, std::string role) {
                    return tensorEntryAt(inner, std::move(role), ctx, depth + 1, budget);
                },
                [&](size_t units) { budget.charge(units); },
                [&](const void* object) { return budget.seen.insert(object).second; },
            };
            if (!distributed::describeDistributedTensor(t, e, dctx))
                quant::describeQuantizedSubclass(t, e);
        }
    } else {
        e.attributes.emplace_back("parts", "not shown: nested too deeply (a tensor state that holds itself?)");
    }

    if (!t.storage)
        return;
    locateStorage(*t.storage, e, ctx);
    if (t.storageOffset < 0) { // the tar layout reads it raw; the rebuild functions refuse it already
        e.attributes.emplace_back("invalid_view", "negative storage offset " + std::to_string(t.storageOffset));
        return;
    }

    // The byte span this view covers: [offset, offset + sum((size_i - 1) * stride_i) + 1) elements.
    unsigned item = dtypeItemSize(t.dtype);
    uint64_t numel = e.numel();
    // Bytes inside a deflated record have no file address: a compressed view points at the record.
    const bool compressed = loc.kind == TensorLocation::Kind::Compressed;
    if (item == 0 || numel == 0) {
        loc.length = 0;
        loc.offset = loc.storageByteOffset + (compressed ? 0 : static_cast<uint64_t>(t.storageOffset) * item);
        return;
    }
    const ViewBytes view = viewBytes(t, item);
    if (view.negativeStride) {
        e.attributes.emplace_back("invalid_view", "negative stride " + std::to_string(view.negativeStride));
        return;
    }
    if (view.overflow) {
        e.attributes.emplace_back("invalid_view", "size/stride arithmetic overflows");
        return;
    }
    if (view.end > loc.storageNbytes)
        e.attributes.emplace_back("invalid_view",
            "views bytes [" + std::to_string(view.start) + ", " + std::to_string(view.end) + ") of a "
                + std::to_string(loc.storageNbytes) + "-byte storage");
    loc.offset = loc.storageByteOffset + (compressed ? 0 : view.start);
    loc.length = view.end - view.start;
}

bool isPlainTensor(const TensorValue& t, std::string_view name)
{
    // What fillTensorEntry adds beyond a row's fields comes from the origin, the extras, a legacy view, a flat
    // parameter's name or a view that leaves its storage: each sends the tensor the long way.
    if (t.origin != TensorOrigin::Dense || t.hasExtras() || !t.storage || t.storage->viewOf() || t.storageOffset < 0)
        return false;
    if (t.size().size() == 1 && distributed::isFlatParamName(name))
        return false;
    const unsigned item = dtypeItemSize(t.dtype);
    if (item == 0 || shapeVolume(t.size()) == 0)
        return true;
    const ViewBytes view = viewBytes(t, item);
    return !view.negativeStride && !view.overflow && view.end <= storageBytes(*t.storage);
}

TensorRows::TensorRows(std::shared_ptr<const void> graph, const EntryContext& ctx, size_t expected)
    : m_graph(std::move(graph))
    , m_ctx(ctx)
    , m_expected(expected)
{
    m_rows.reserve(expected);
}

bool TensorRows::add(std::string_view name, const TensorValue& t, std::string_view held)
{
    if (name.size() > UINT32_MAX)
        return false;
    if (!held.empty() && held.size() == name.size()) {
        m_rows.push_back({ held.data(), &t, 0, static_cast<uint32_t>(name.size()) });
        return true;
    }
    if (m_names.size() + name.size() > UINT32_MAX)
        return false;
    if (m_names.capacity() == 0)
        m_names.reserve(m_expected * 48); // about a name's length in a large state dict; the buffer grows if not
    m_rows.push_back({ nullptr, &t, static_cast<uint32_t>(m_names.size()), static_cast<uint32_t>(name.size()) });
    m_names.append(name);
    return true;
}

EntryRow TensorRows::row(size_t i) const
{
    const Row& r = m_rows[i];
    const TensorValue& t = *r.tensor;
    EntryRow out;
    out.name = nameOf(r);
    out.dtype = t.dtype;
    out.shape = t.size();
    if (t.storage) // as locateStorage names it
        out.storageId = t.storage->root()->key;
    return out;
}

void TensorRows::build(std::vector<Entry>& out) const
{
    // The walk that made the rows charged its budget for each already.
    WalkBudget budget { SIZE_MAX };
    for (const Row& r : m_rows)
        fillTensorEntry(out.emplace_back(), *r.tensor, nameOf(r), m_ctx, 0, budget);
}

void TensorRows::forEachBuilt(size_t from, size_t to, const std::function<void(const Entry&)>& visit) const
{
    WalkBudget budget { SIZE_MAX };
    Entry e;
    for (size_t i = from; i < to; ++i) {
        const Row& r = m_rows[i];
        // A fresh entry each time, but the name's buffer kept: names are past the short-string size, and an
        // allocation and a free for each was most of the allocator's share of writing them.
        std::string name = std::move(e.name);
        e = Entry {};
        e.name = std::move(name);
        fillTensorEntry(e, *r.tensor, nameOf(r), m_ctx, 0, budget);
        visit(e);
    }
}

std::string sharedStorageMessage(const std::vector<Entry>& entries, std::string_view storage,
    const std::vector<size_t>& members)
{
    std::string names;
    for (size_t k = 0; k < members.size() && k < 6; ++k)
        names += (k ? ", " : "") + entries[members[k]].name;
    if (members.size() > 6)
        names += ", ...";
    return std::to_string(members.size()) + " entries share storage " + std::string(storage) + ": " + names;
}

} // namespace sl::torch
