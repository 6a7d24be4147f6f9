#include "torch_semantics.h"

#include "util/decimal_key.h"
#include "util/utf8.h"

#include <cstring>
#include <unordered_map>

namespace sl::torch {

namespace {

struct Known {
    KnownGlobal id = KnownGlobal::Unknown;
    DType dtype = DType::Unknown;
};

const std::unordered_map<std::string, Known>& knownTable()
{
    static const std::unordered_map<std::string, Known> table = [] {
        std::unordered_map<std::string, Known> t;
        auto add = [&](std::string q, KnownGlobal id, DType d = DType::Unknown) { t[std::move(q)] = Known { id, d }; };
        add("collections.OrderedDict", KnownGlobal::OrderedDict);
        add("collections.defaultdict", KnownGlobal::DefaultDict);
        add("builtins.set", KnownGlobal::BuiltinSet);
        add("builtins.frozenset", KnownGlobal::BuiltinFrozenSet);
        add("builtins.bytearray", KnownGlobal::BuiltinBytearray);
        add("builtins.bytes", KnownGlobal::BuiltinBytearray); // bytes() is how protocol < 3 spells b""
        add("builtins.getattr", KnownGlobal::BuiltinGetattr);
        add("_codecs.encode", KnownGlobal::CodecsEncode);
        add("copyreg._reconstructor", KnownGlobal::CopyregReconstructor);
        add("torch._utils._rebuild_tensor", KnownGlobal::RebuildTensor);
        add("torch._utils._rebuild_tensor_v2", KnownGlobal::RebuildTensorV2);
        add("torch._utils._rebuild_tensor_v3", KnownGlobal::RebuildTensorV3);
        add("torch._utils._rebuild_parameter", KnownGlobal::RebuildParameter);
        add("torch._utils._rebuild_parameter_with_state", KnownGlobal::RebuildParameterWithState);
        add("torch._tensor._rebuild_from_type_v2", KnownGlobal::RebuildFromTypeV2);
        add("torch._utils._rebuild_wrapper_subclass", KnownGlobal::RebuildWrapperSubclass);
        add("torch._utils._rebuild_qtensor", KnownGlobal::RebuildQTensor);
        add("torch._utils._rebuild_meta_tensor_no_storage", KnownGlobal::RebuildMetaTensorNoStorage);
        add("torch._utils._rebuild_sparse_tensor", KnownGlobal::RebuildSparseTensor);
        add("torch._utils._rebuild_sparse_csr_tensor", KnownGlobal::RebuildSparseCsrTensor);
        add("torch._utils._rebuild_nested_tensor", KnownGlobal::RebuildNestedTensor);
        add("torch._utils._rebuild_device_tensor_from_cpu_tensor", KnownGlobal::RebuildDeviceTensorFromCpuTensor);
        add("torch._utils._rebuild_device_tensor_from_numpy", KnownGlobal::RebuildDeviceTensorFromNumpy);
        add("torch._utils._rebuild_xla_tensor", KnownGlobal::RebuildDeviceTensorFromNumpy);
        add("torch._utils._rebuild_mtia_tensor", KnownGlobal::RebuildDeviceTensorFromNumpy);
        add("torch.storage.UntypedStorage", KnownGlobal::UntypedStorage, DType::UInt8);
        add("torch.storage._UntypedStorage", KnownGlobal::UntypedStorage, DType::UInt8);
        add("torch.UntypedStorage", KnownGlobal::UntypedStorage, DType::UInt8);
        add("torch.cuda.UntypedStorage", KnownGlobal::UntypedStorage, DType::UInt8);
        add("torch.Size", KnownGlobal::TorchSize);
        add("torch.device", KnownGlobal::TorchDevice);
        add("torch.serialization._get_layout", KnownGlobal::GetLayout);
        add("torch._utils._get_layout", KnownGlobal::GetLayout);
        for (const char* l : { "strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc",
                 "_mkldnn", "jagged" })
            add(std::string("torch.") + l, KnownGlobal::TorchLayout);
        for (const char* q : { "per_tensor_affine", "per_channel_affine", "per_tensor_symmetric",
                 "per_channel_symmetric", "per_channel_affine_float_qparams" })
            add(std::string("torch.") + q, KnownGlobal::QScheme);
        for (size_t i = 1; i < static_cast<size_t>(DType::Count_); ++i) {
            auto d = static_cast<DType>(i);
            add("torch." + std::string(dtypeName(d)), KnownGlobal::TorchDType, d);
        }
        for (const char* alias : { "float", "double", "half", "long", "int", "short", "cfloat", "cdouble", "chalf" })
            add(std::string("torch.") + alias, KnownGlobal::TorchDType, *dtypeFromName(alias));
        for (const char* cls : { "DoubleStorage", "FloatStorage", "HalfStorage", "BFloat16Storage", "LongStorage",
                 "IntStorage", "ShortStorage", "CharStorage", "ByteStorage", "BoolStorage", "ComplexDoubleStorage",
                 "ComplexFloatStorage", "QInt8Storage", "QUInt8Storage", "QInt32Storage", "QUInt4x2Storage",
                 "QUInt2x4Storage" }) {
            DType d = *dtypeFromStorageClass(cls);
            add(std::string("torch.") + cls, KnownGlobal::TypedStorageClass, d);
            add(std::string("torch.cuda.") + cls, KnownGlobal::TypedStorageClass, d);
        }
        for (const char* m : { "numpy.core.multiarray", "numpy._core.multiarray" }) {
            add(std::string(m) + "._reconstruct", KnownGlobal::NumpyReconstruct);
            add(std::string(m) + ".scalar", KnownGlobal::NumpyScalar);
        }
        add("numpy.dtype", KnownGlobal::NumpyDType);
        add("numpy.ndarray", KnownGlobal::NumpyNDArray);
        return t;
    }();
    return table;
}

Known lookupKnown(std::string_view module, std::string_view name)
{
    std::string q;
    q.reserve(module.size() + 1 + name.size());
    q.append(module).append(".").append(name);
    auto it = knownTable().find(q);
    return it == knownTable().end() ? Known {} : it->second;
}

Value* arg(SeqValue* args, size_t i) { return i < args->items.size() ? args->items[i] : nullptr; }

std::string_view strOf(const Value* v)
{
    if (v && (v->kind == Kind::Str || v->kind == Kind::Bytes))
        return static_cast<const StrValue*>(v)->s;
    return {};
}

bool isTorchTensorClass(const GlobalValue* g)
{
    return g && g->name == "Tensor" && (g->module == "torch" || g->module == "torch._tensor");
}

// torch.FloatStorage and the like, or UntypedStorage.
bool isStorageClass(const GlobalValue* g)
{
    return g && (g->id == KnownGlobal::TypedStorageClass || g->id == KnownGlobal::UntypedStorage);
}

bool isParameterClass(const GlobalValue* g)
{
    return g && g->name == "Parameter" && (g->module == "torch.nn.parameter" || g->module == "torch.nn");
}

// numpy array-protocol type strings ("f4", "<i8", "|b1") to dtypes.
DType numpyDType(std::string_view typestr)
{
    if (!typestr.empty() && (typestr[0] == '<' || typestr[0] == '>' || typestr[0] == '|' || typestr[0] == '='))
        typestr.remove_prefix(1);
    struct Row {
        std::string_view code;
        DType d;
    };
    static constexpr Row kRows[] = { { "b1", DType::Bool }, { "?", DType::Bool }, { "u1", DType::UInt8 },
        { "i1", DType::Int8 }, { "i2", DType::Int16 }, { "i4", DType::Int32 }, { "i8", DType::Int64 },
        { "u2", DType::UInt16 }, { "u4", DType::UInt32 }, { "u8", DType::UInt64 }, { "f2", DType::Float16 },
        { "f4", DType::Float32 }, { "f8", DType::Float64 }, { "c8", DType::Complex64 },
        { "c16", DType::Complex128 } };
    for (const auto& r : kRows)
        if (r.code == typestr)
            return r.d;
    return DType::Unknown;
}

} // namespace

Value* TorchSemantics::global(Unpickler& u, std::string_view rawModule, std::string_view rawName)
{
    // The names may be memoised strings pushed again by BINGET for a few bytes each; the lookups below
    // copy them, so that work counts against the pickle's budget (else a 1 MB pickle runs for minutes).
    u.charge(rawModule.size() + rawName.size());
    auto [module, name] = mapLegacyName(rawModule, rawName, u.protocol());
    Known k = lookupKnown(module, name);
    auto* g = u.arena().make<GlobalValue>(module, name, k.id);
    g->dtype = k.dtype;

    std::string q = qualifiedName(*g);
    auto it = m_globals.find(q);
    if (it == m_globals.end()) {
        // How the global is used is the opcode scan's to say (torch/load_safety.h); here only its name counts.
        GlobalVerdict v = classifyGlobal(module, name, kUsedAsValue);
        it = m_globals.emplace(std::move(q), GlobalUse { v.risk, std::move(v.reason), 0, std::string(allowlistingImport(module, name)) })
                 .first;
    }
    ++it->second.count;
    return g;
}

Value* TorchSemantics::inert(Unpickler& u, Value* callable, SeqValue* args, const char* problem)
{
    if (problem) {
        auto* g = asGlobal(callable);
        std::string who = g ? qualifiedName(*g) : "a call";
        if (m_problems.size() < 100)
            m_problems.push_back("cannot rebuild " + who + ": " + problem);
    }
    return InertSemantics::call(u, callable, args);
}

bool TorchSemantics::readShape(Value* v, Shape& out)
{
    auto* s = asSeq(v);
    if (!s) {
        // torch.Size reduced to something we did not model, or a malformed argument.
        return false;
    }
    if (s->items.size() > kMaxDims)
        return false;
    out.rank = s->items.size();
    for (size_t i = 0; i < out.rank; ++i)
        if (!toInt(s->items[i], out.dims[i]))
            return false;
    return true;
}

Value* TorchSemantics::rebuildTensor(Unpickler& u, GlobalValue* fn, SeqValue* args)
{
    // _rebuild_tensor(storage, offset, size, stride)
    // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, backward_hooks[, metadata])
    // _rebuild_tensor_v3(storage, offset, size, stride, requires_grad, backward_hooks, dtype[, metadata])
    KnownGlobal which = fn->id;
    Value* callable = fn;
    size_t minArgs = which == KnownGlobal::RebuildTensor ? 4 : which == KnownGlobal::RebuildTensorV2 ? 6 : 7;
    if (args->items.size() < minArgs)
        return inert(u, callable, args, "too few arguments");
    auto* storage = arg(args, 0);
    if (m_mode == PersistentIds::Tar && storage && storage->kind == Kind::Tuple) {
        // Hand-built tar imitations spell the storage reference inline instead of as a persistent id.
        auto* ref = asSeq(storage);
        if (ref->items.size() >= 3 && strOf(ref->items[0]) == "storage") {
            if (auto* known = storagesByKey(std::string(strOf(ref->items[2])))) {
                storage = known;
                if (!m_inlineStorageNoted) {
                    m_inlineStorageNoted = true;
                    m_problems.push_back("storages are referenced inline rather than as persistent ids; "
                                         "torch.load would fail on this file (shown as the writer meant it)");
                }
            }
        }
    }
    if (!storage || storage->kind != Kind::Storage)
        return inert(u, callable, args, "first argument is not a storage");
    auto* t = u.arena().make<TensorValue>();
    t->storage = static_cast<StorageValue*>(storage);
    t->dtype = t->storage->dtype;
    if (!toInt(arg(args, 1), t->storageOffset) || t->storageOffset < 0)
        return inert(u, callable, args, "storage offset is not a non-negative integer");
    Shape size, stride;
    if (!readShape(arg(args, 2), size))
        return inert(u, callable, args, "size is not a tuple of integers");
    if (!readShape(arg(args, 3), stride) || stride.rank != size.rank)
        return inert(u, callable, args, "stride does not match size");
    for (int64_t d : size.span())
        if (d < 0)
            return inert(u, callable, args, "negative dimension");
    setDims(u, *t, size.span(), stride.span());
    if (which != KnownGlobal::RebuildTensor) {
        int64_t rg = 0;
        toInt(arg(args, 4), rg);
        t->requiresGrad = rg != 0;
    }
    if (which == KnownGlobal::RebuildTensorV3) {
        auto* dt = asGlobal(arg(args, 6));
        if (!dt || dt->id != KnownGlobal::TorchDType)
            return inert(u, callable, args, "dtype argument is not a torch dtype");
        t->dtype = dt->dtype;
    }
    return t;
}

void TorchSemantics::setDims(Unpickler& u, TensorValue& t, std::span<const int64_t> size, std::span<const int64_t> stride)
{
    // Callers hold the rank to kMaxDims, and stride to size's length or none.
    t.setDims(sharedDims(u, size, stride), static_cast<uint8_t>(size.size()), !stride.empty());
}

bool TorchSemantics::setSizeAndOptionalStride(Unpickler& u, TensorValue& t, Value* sizeArg, Value* strideArg)
{
    Shape size, stride;
    if (!readShape(sizeArg, size))
        return false;
    if (!readShape(strideArg, stride) || stride.rank != size.rank) {
        stride.rank = 0;
        t.hasStride = false;
    }
    setDims(u, t, size.span(), stride.span());
    return true;
}

uint64_t TorchSemantics::dimsHash(std::span<const int64_t> size, std::span<const int64_t> stride)
{
    uint64_t hash = size.size();
    for (int64_t d : size)
        hash = (hash ^ static_cast<uint64_t>(d)) * 0x100000001b3u;
    for (int64_t d : stride)
        hash = (hash ^ static_cast<uint64_t>(d)) * 0x100000001b3u;
    return hash;
}

const int64_t* TorchSemantics::sharedDims(Unpickler& u, std::span<const int64_t> size, std::span<const int64_t> stride)
{
    const size_t rank = size.size();
    if (rank == 0)
        return nullptr; // a scalar's sizes and strides are empty spans: nothing to share
    // A slot is taken only on the same hash, rank, sizes and strides: hashes collide (tst_pickle_vm).
    const uint64_t hash = dimsHash(size, stride);
    DimsSlot& slot = m_dims[(hash ^ (hash >> 32)) % m_dims.size()];
    if (slot.dims && slot.hash == hash && slot.rank == rank && std::equal(size.begin(), size.end(), slot.dims)
        && std::equal(stride.begin(), stride.end(), slot.dims + rank))
        return slot.dims;
    // Room for the strides even when there are none (zeros), so a slot read as strided is never short.
    auto out = u.arena().array<int64_t>(2 * rank);
    std::copy(size.begin(), size.end(), out.begin());
    std::fill(std::copy(stride.begin(), stride.end(), out.begin() + rank), out.end(), 0);
    slot = { hash, rank, out.data() };
    return out.data();
}

Value* TorchSemantics::tensorRecord(Unpickler& u, const TensorCall& c)
{
    // Every check of persistentLoad, storage and rebuildTensor first: declining must leave nothing changed.
    auto* fn = asGlobal(c.callable);
    auto* hooks = asGlobal(c.hooksCallable);
    if (m_mode != PersistentIds::Zip || !fn || fn->id != KnownGlobal::RebuildTensorV2 || !hooks
        || hooks->id != KnownGlobal::OrderedDict || strOf(c.tag) != "storage")
        return nullptr;
    std::string_view key = strOf(c.key);
    if (key.empty() || c.numel < 0 || c.offset < 0 || c.size.size() != c.stride.size() || c.size.size() > kMaxDims)
        return nullptr;
    for (int64_t d : c.size)
        if (d < 0)
            return nullptr;
    StorageValue* known = storagesByKey(key);
    auto* cls = asGlobal(c.storageClass);
    if (!known && !isStorageClass(cls))
        return nullptr; // storage() would record the unknown class

    StorageValue* s = known ? known : newStorage(u, cls, key, strOf(c.location), c.numel);
    auto* t = u.arena().make<TensorValue>();
    t->storage = s;
    t->dtype = s->dtype;
    t->storageOffset = c.offset;
    setDims(u, *t, c.size, c.stride);
    t->requiresGrad = c.requiresGrad;
    return t;
}

Value* TorchSemantics::rebuildQTensor(Unpickler& u, GlobalValue* fn, SeqValue* args)
{
    // _rebuild_qtensor(storage, offset, size, stride, quantizer_params, requires_grad, backward_hooks)
    if (args->items.size() < 5)
        return inert(u, fn, args, "too few arguments for _rebuild_qtensor");
    auto* storage = arg(args, 0);
    if (!storage || storage->kind != Kind::Storage)
        return inert(u, fn, args, "first argument is not a storage");
    auto* t = u.arena().make<TensorValue>();
    t->origin = TensorOrigin::Quantized;
    t->storage = static_cast<StorageValue*>(storage);
    t->dtype = t->storage->dtype;
    Shape size, stride;
    if (!toInt(arg(args, 1), t->storageOffset) || t->storageOffset < 0 || !readShape(arg(args, 2), size)
        || !readShape(arg(args, 3), stride) || stride.rank != size.rank)
        return inert(u, fn, args, "malformed geometry in _rebuild_qtensor");
    setDims(u, *t, size.span(), stride.span());
    int64_t rg = 0;
    toInt(arg(args, 5), rg);
    t->requiresGrad = rg != 0;
    auto* q = u.arena().make<QuantParams>();
    if (auto* qp = asSeq(arg(args, 4)); qp && !qp->items.empty()) {
        q->scheme = asGlobal(qp->items[0]);
        if (q->scheme && q->scheme->name.find("per_tensor") != std::string_view::npos) {
            toDouble(arg(const_cast<SeqValue*>(qp), 1), q->scale);
            toInt(arg(const_cast<SeqValue*>(qp), 2), q->zeroPoint);
        } else {
            q->scales = arg(const_cast<SeqValue*>(qp), 1);
            q->zeroPoints = arg(const_cast<SeqValue*>(qp), 2);
            toInt(arg(const_cast<SeqValue*>(qp), 3), q->axis);
        }
    }
    t->extrasToSet(u.arena().resource()).quant = q;
    return t;
}

Value* TorchSemantics::rebuildWrapperSubclass(Unpickler& u, GlobalValue* fn, SeqValue* args)
{
    // _rebuild_wrapper_subclass(cls, dtype, size, stride, storage_offset, layout, device, requires_grad)
    if (args->items.size() < 8)
        return inert(u, fn, args, "too few arguments for _rebuild_wrapper_subclass");
    auto* t = u.arena().make<TensorValue>();
    t->origin = TensorOrigin::WrapperSubclass;
    t->extrasToSet(u.arena().resource()).subclass = asGlobal(arg(args, 0));
    auto* dt = asGlobal(arg(args, 1));
    t->dtype = dt && dt->id == KnownGlobal::TorchDType ? dt->dtype : DType::Unknown;
    if (!setSizeAndOptionalStride(u, *t, arg(args, 2), arg(args, 3)))
        return inert(u, fn, args, "size is not a tuple of integers");
    toInt(arg(args, 4), t->storageOffset);
    t->extrasToSet(u.arena().resource()).layout = strOf(arg(args, 5));
    t->setDevice(strOf(arg(args, 6)), u.arena().resource());
    int64_t rg = 0;
    toInt(arg(args, 7), rg);
    t->requiresGrad = rg != 0;
    return t;
}

Value* TorchSemantics::rebuildFromType(Unpickler& u, GlobalValue* fn, SeqValue* args)
{
    // _rebuild_from_type_v2(func, new_type, args, state): func(*args) re-typed to new_type, then state set.
    if (args->items.size() < 4)
        return inert(u, fn, args, "too few arguments for _rebuild_from_type_v2");
    Value* func = arg(args, 0);
    auto* cls = asGlobal(arg(args, 1));
    Value* innerArgs = arg(args, 2);
    Value* state = arg(args, 3);
    if (innerArgs->kind != Kind::Tuple)
        return inert(u, fn, args, "arguments are not a tuple");
    // Nested _rebuild_from_type_v2 calls recurse here; real files nest once or twice.
    if (m_rebuildDepth >= 16)
        return inert(u, fn, args, "rebuild calls nested too deeply");
    ++m_rebuildDepth;
    Value* inner = call(u, func, static_cast<SeqValue*>(innerArgs));
    --m_rebuildDepth;
    auto* base = asTensor(inner);
    if (!base) {
        auto* o = u.arena().make<ObjectValue>();
        o->callable = arg(args, 1);
        o->args = inner;
        o->state = state;
        return o;
    }
    auto* t = u.arena().make<TensorValue>(*base);
    if (isParameterClass(cls))
        t->isParameter = true;
    else if (!isTorchTensorClass(cls))
        t->extrasToSet(u.arena().resource()).subclass = cls;
    if (state && state->kind != Kind::None)
        t->extrasToSet(u.arena().resource()).state = state;
    return t;
}

Value* TorchSemantics::rebuildSparse(Unpickler& u, GlobalValue* fn, SeqValue* args)
{
    // _rebuild_sparse_tensor(layout, data); COO data = (indices, values, size[, coalesced]),
    // compressed layouts = (compressed_indices, plain_indices, values, size).
    if (args->items.size() < 2)
        return inert(u, fn, args, "too few arguments for a sparse tensor");
    auto* data = asSeq(arg(args, 1));
    if (!data || data->items.size() < 3)
        return inert(u, fn, args, "malformed sparse tensor data");
    auto* t = u.arena().make<TensorValue>();
    t->origin = TensorOrigin::Sparse;
    std::string_view layout = strOf(arg(args, 0));
    if (auto* g = asGlobal(arg(args, 0)))
        layout = g->name;
    // _get_layout('torch.sparse_coo') spells the name as str(layout); keep one spelling, like dtypes.
    if (layout.substr(0, 6) == "torch.")
        layout.remove_prefix(6);
    t->extrasToSet(u.arena().resource()).layout = layout;
    bool coo = layout.find("coo") != std::string_view::npos;
    size_t valuesAt = coo ? 1 : 2;
    size_t sizeAt = coo ? 2 : 3;
    if (auto* values = asTensor(arg(const_cast<SeqValue*>(data), valuesAt))) {
        t->dtype = values->dtype;
        t->setDevice(values->device(), u.arena().resource());
    }
    Shape size;
    if (!readShape(arg(const_cast<SeqValue*>(data), sizeAt), size))
        return inert(u, fn, args, "sparse tensor size is not a tuple of integers");
    setDims(u, *t, size.span(), {});
    t->hasStride = false;
    auto parts = u.arena().array<Value*>(coo ? 2 : 3);
    for (size_t i = 0; i < parts.size(); ++i)
        parts[i] = data->items[i];
    t->extrasToSet(u.arena().resource()).components = parts;
    return t;
}

Value* TorchSemantics::rebuildNested(Unpickler& u, GlobalValue* fn, SeqValue* args)
{
    // _rebuild_nested_tensor(buffer, sizes, strides, offsets): all tensors.
    if (args->items.size() < 4)
        return inert(u, fn, args, "too few arguments for a nested tensor");
    auto* buffer = asTensor(arg(args, 0));
    auto* sizes = asTensor(arg(args, 1));
    if (!buffer || !sizes)
        return inert(u, fn, args, "nested tensor parts are not tensors");
    auto* t = u.arena().make<TensorValue>();
    t->origin = TensorOrigin::Nested;
    t->dtype = buffer->dtype;
    t->setDevice(buffer->device(), u.arena().resource());
    t->extrasToSet(u.arena().resource()).layout = "nested";
    const int64_t count = sizes->size().empty() ? 0 : sizes->size()[0]; // number of component tensors
    setDims(u, *t, { &count, 1 }, {});
    t->hasStride = false;
    auto parts = u.arena().array<Value*>(4);
    for (size_t i = 0; i < 4; ++i)
        parts[i] = args->items[i];
    t->extrasToSet(u.arena().resource()).components = parts;
    return t;
}

Value* TorchSemantics::numpyReconstruct(Unpickler& u)
{
    // numpy.core.multiarray._reconstruct(ndarray, (0,), b'b'): an empty array that BUILD fills in.
    auto* t = u.arena().make<TensorValue>();
    t->origin = TensorOrigin::Numpy;
    t->setDevice("cpu", u.arena().resource());
    return t;
}

void TorchSemantics::buildNumpyArray(Unpickler& u, TensorValue* t, Value* state)
{
    // ndarray.__setstate__((version, shape, dtype, is_fortran, rawdata)); version is optional.
    auto* s = asSeq(state);
    if (!s)
        return;
    size_t base = s->items.size() == 5 ? 1 : 0;
    if (s->items.size() < base + 4)
        return;
    Shape shape;
    if (!readShape(s->items[base], shape))
        return;
    for (int64_t d : shape.span())
        if (d < 0)
            return;
    setDims(u, *t, shape.span(), {});
    if (auto* dt = asObject(s->items[base + 1])) {
        if (auto* a = asSeq(dt->args); a && !a->items.empty())
            t->dtype = numpyDType(strOf(a->items[0]));
    }
    int64_t fortran = 0;
    toInt(s->items[base + 2], fortran);
    t->hasStride = false;
    if (s->items[base + 3]->kind == Kind::Bytes || s->items[base + 3]->kind == Kind::Str)
        t->extrasToSet(u.arena().resource()).inlineBytes = static_cast<StrValue*>(s->items[base + 3])->s;
}

Value* TorchSemantics::call(Unpickler& u, Value* callable, SeqValue* args)
{
    auto* g = asGlobal(callable);
    if (!g)
        return InertSemantics::call(u, callable, args);
    switch (g->id) {
    case KnownGlobal::RebuildTensor:
    case KnownGlobal::RebuildTensorV2:
    case KnownGlobal::RebuildTensorV3:
        return rebuildTensor(u, const_cast<GlobalValue*>(g), args);
    case KnownGlobal::RebuildQTensor:
        return rebuildQTensor(u, const_cast<GlobalValue*>(g), args);
    case KnownGlobal::RebuildParameter:
    case KnownGlobal::RebuildParameterWithState: {
        // _rebuild_parameter(data, requires_grad, backward_hooks[, state])
        auto* data = asTensor(arg(args, 0));
        if (!data)
            return inert(u, callable, args, "parameter data is not a tensor");
        auto* t = u.arena().make<TensorValue>(*data);
        t->isParameter = true;
        int64_t rg = 0;
        if (toInt(arg(args, 1), rg))
            t->requiresGrad = rg != 0;
        if (g->id == KnownGlobal::RebuildParameterWithState && arg(args, 3) && arg(args, 3)->kind != Kind::None)
            t->extrasToSet(u.arena().resource()).state = arg(args, 3);
        return t;
    }
    case KnownGlobal::RebuildFromTypeV2:
        return rebuildFromType(u, const_cast<GlobalValue*>(g), args);
    case KnownGlobal::RebuildWrapperSubclass:
        return rebuildWrapperSubclass(u, const_cast<GlobalValue*>(g), args);
    case KnownGlobal::RebuildMetaTensorNoStorage: {
        // _rebuild_meta_tensor_no_storage(dtype, size, stride, requires_grad)
        auto* t = u.arena().make<TensorValue>();
        t->origin = TensorOrigin::Meta;
        t->setDevice("meta", u.arena().resource());
        auto* dt = asGlobal(arg(args, 0));
        t->dtype = dt && dt->id == KnownGlobal::TorchDType ? dt->dtype : DType::Unknown;
        if (!setSizeAndOptionalStride(u, *t, arg(args, 1), arg(args, 2)))
            return inert(u, callable, args, "size is not a tuple of integers");
        int64_t rg = 0;
        toInt(arg(args, 3), rg);
        t->requiresGrad = rg != 0;
        return t;
    }
    case KnownGlobal::RebuildSparseTensor:
    case KnownGlobal::RebuildSparseCsrTensor:
        return rebuildSparse(u, const_cast<GlobalValue*>(g), args);
    case KnownGlobal::RebuildNestedTensor:
        return rebuildNested(u, const_cast<GlobalValue*>(g), args);
    case KnownGlobal::RebuildDeviceTensorFromCpuTensor:
    case KnownGlobal::RebuildDeviceTensorFromNumpy: {
        // (tensor_or_ndarray, dtype, device, requires_grad)
        auto* src = asTensor(arg(args, 0));
        if (!src)
            return inert(u, callable, args, "first argument is not an array");
        auto* t = u.arena().make<TensorValue>(*src);
        if (auto* dt = asGlobal(arg(args, 1)); dt && dt->id == KnownGlobal::TorchDType)
            t->dtype = dt->dtype;
        if (auto dev = strOf(arg(args, 2)); !dev.empty())
            t->setDevice(dev, u.arena().resource());
        int64_t rg = 0;
        if (toInt(arg(args, 3), rg))
            t->requiresGrad = rg != 0;
        return t;
    }
    case KnownGlobal::OrderedDict:
    case KnownGlobal::DefaultDict: {
        auto* d = u.arena().make<DictValue>();
        d->cls = g;
        // OrderedDict(iterable_of_pairs); defaultdict(factory) carries no items.
        if (g->id == KnownGlobal::OrderedDict) {
            if (auto* pairs = asSeq(arg(args, 0))) {
                u.charge(pairs->items.size());
                d->items.reserve(u.arena().resource(), pairs->items.size()); // the arena never frees a grown vector's old block
                for (auto* p : pairs->items) {
                    auto* kv = asSeq(p);
                    if (kv && kv->items.size() == 2)
                        d->items.push_back(u.arena().resource(), { kv->items[0], kv->items[1] });
                }
            }
        }
        return d;
    }
    case KnownGlobal::BuiltinSet:
    case KnownGlobal::BuiltinFrozenSet: {
        auto* s = u.makeSeq(Kind::Set);
        if (auto* items = asSeq(arg(args, 0))) {
            u.charge(items->items.size());
            s->items.assign(u.arena().resource(), items->items.begin(), items->items.end());
        }
        return s;
    }
    case KnownGlobal::BuiltinBytearray:
    case KnownGlobal::CodecsEncode: {
        // _codecs.encode(str, 'latin1') is how protocol 2 spells bytes; the str holds code points < 256.
        Value* a0 = arg(args, 0);
        if (!a0)
            return u.arena().make<StrValue>(Kind::Bytes, std::string_view {});
        if (a0->kind == Kind::Bytes)
            return a0;
        auto* s = asStr(a0);
        std::string_view enc = strOf(arg(args, 1));
        if (!s)
            return inert(u, callable, args);
        u.charge(s->s.size());
        if (enc.empty() || enc == "utf-8" || enc == "utf8")
            return u.arena().make<StrValue>(Kind::Bytes, s->s);
        if (enc != "latin1" && enc != "latin-1" && enc != "iso-8859-1")
            return inert(u, callable, args);
        std::optional<std::string> out = latin1FromUtf8(s->s);
        if (!out)
            return inert(u, callable, args, "latin1 text outside Latin-1");
        return u.arena().make<StrValue>(Kind::Bytes, u.arena().copy(*out));
    }
    case KnownGlobal::BuiltinGetattr: {
        // getattr(owner, 'NAME'): how protocol 2 pickles enum members. Kept as a reference, not resolved.
        auto* owner = asGlobal(arg(args, 0));
        auto name = strOf(arg(args, 1));
        if (!owner || name.empty())
            return inert(u, callable, args);
        std::string module = qualifiedName(*owner);
        u.charge(module.size()); // copied into the arena on every call
        auto* ref = static_cast<GlobalValue*>(global(u, u.arena().copy(module), name));
        ref->owner = arg(args, 0);
        return ref;
    }
    case KnownGlobal::TorchSize: {
        auto* dims = asSeq(arg(args, 0));
        if (!dims)
            return inert(u, callable, args);
        auto* t = u.makeSeq(Kind::Tuple);
        u.charge(dims->items.size());
        t->items.assign(u.arena().resource(), dims->items.begin(), dims->items.end());
        return t;
    }
    case KnownGlobal::TorchDevice: {
        std::string dev(strOf(arg(args, 0)));
        u.charge(dev.size()); // copied into the arena on every call
        int64_t index = 0;
        if (toInt(arg(args, 1), index))
            dev += ":" + std::to_string(index);
        if (dev.empty())
            return inert(u, callable, args);
        return u.makeStr(u.arena().copy(dev));
    }
    case KnownGlobal::GetLayout: {
        auto name = strOf(arg(args, 0));
        return name.empty() ? inert(u, callable, args) : u.makeStr(name);
    }
    case KnownGlobal::NumpyReconstruct:
        return numpyReconstruct(u);
    default:
        return InertSemantics::call(u, callable, args);
    }
}

Value* TorchSemantics::instantiate(Unpickler& u, Value* cls, SeqValue* args, Value* kwargs)
{
    if (auto* g = asGlobal(cls); g && (g->id == KnownGlobal::OrderedDict || g->id == KnownGlobal::DefaultDict)) {
        auto* d = u.arena().make<DictValue>();
        d->cls = g;
        return d;
    }
    return InertSemantics::instantiate(u, cls, args, kwargs);
}

void TorchSemantics::build(Unpickler& u, Value* obj, Value* state)
{
    if (obj->kind == Kind::Tensor) {
        auto* t = static_cast<TensorValue*>(obj);
        if (t->origin == TensorOrigin::Numpy && t->size().empty() && t->extras().inlineBytes.empty()) {
            buildNumpyArray(u, t, state);
            return;
        }
    }
    InertSemantics::build(u, obj, state);
}

StorageValue* TorchSemantics::storage(Unpickler& u, Value* clsValue, std::string_view key, std::string_view location,
    int64_t numel)
{
    if (StorageValue* known = storagesByKey(key))
        return known;
    return newStorage(u, asGlobal(clsValue), key, location, numel);
}

StorageValue* TorchSemantics::newStorage(Unpickler& u, const GlobalValue* cls, std::string_view key,
    std::string_view location, int64_t numel)
{
    auto* s = u.arena().make<StorageValue>();
    s->key = key;
    s->location = location;
    if (isStorageClass(cls)) {
        s->dtype = cls->dtype;
        s->untyped = cls->id == KnownGlobal::UntypedStorage;
    } else if (m_problems.size() < 100) {
        m_problems.push_back("storage " + std::string(key) + " has an unknown storage class "
            + (cls ? qualifiedName(*cls) : std::string("(not a class)")));
    }
    s->numel = numel;
    addStorage(s);
    return s;
}

Value* TorchSemantics::persistentLoad(Unpickler& u, Value* pid)
{
    auto keyOf = [&](Value* v) {
        std::string_view key = strOf(v);
        int64_t intKey = 0;
        if (key.empty() && toInt(v, intKey))
            key = u.arena().copy(std::to_string(intKey));
        return key;
    };
    if (m_mode == PersistentIds::Tar && pid->kind != Kind::Tuple) {
        // The tar layout's main pickle names tensors and storages by key.
        std::string key(keyOf(pid));
        auto it = m_prebuilt.find(key);
        if (it == m_prebuilt.end())
            u.fail("persistent id " + key.substr(0, 40) + " names no tensor or storage of the archive");
        return it->second;
    }
    auto* t = asSeq(pid);
    if (!t || t->items.empty())
        u.fail("persistent id is not a tuple");
    std::string_view tag = strOf(t->items[0]);
    if (tag != "storage") {
        if (tag == "module" || m_mode == PersistentIds::Tar) {
            // Whole-module saves record each class's source: ('module', cls, source_file, source).
            size_t at = tag == "module" ? 1 : 0;
            return t->items.size() > at ? t->items[at] : noneValue();
        }
        u.fail("persistent id of unknown kind '" + std::string(tag.substr(0, 40)) + "'");
    }
    size_t want = m_mode == PersistentIds::Legacy ? 6 : 5;
    if (t->items.size() < want)
        u.fail("storage persistent id has " + std::to_string(t->items.size()) + " fields, expected "
            + std::to_string(want));
    std::string_view key = keyOf(t->items[2]);
    if (key.empty())
        u.fail(asStr(t->items[2]) ? "storage key is empty; torch.load cannot find its record"
                                  : "storage key is not a string");
    int64_t numel = 0;
    if (!toInt(t->items[4], numel) || numel < 0)
        u.fail("storage size is not a non-negative integer");
    StorageValue* root = storage(u, t->items[1], key, strOf(t->items[3]), numel);

    if (m_mode == PersistentIds::Legacy) {
        // view_metadata = (view_key, offset, view_size): a slice of the root storage, in elements.
        if (auto* vm = asSeq(t->items[5]); vm && vm->items.size() >= 3) {
            std::string_view viewKey = keyOf(vm->items[0]);
            int64_t offset = 0;
            int64_t size = 0;
            if (viewKey.empty() || !toInt(vm->items[1], offset) || !toInt(vm->items[2], size) || offset < 0 || size < 0)
                u.fail("malformed storage view metadata");
            return view(u, root, viewKey, offset, size);
        }
    }
    return root;
}

StorageValue* TorchSemantics::storagesByKey(std::string_view key) const
{
    // Keys are unique, and a storage keyed as its own position is found there and only there.
    if (size_t n = 0; decimalKey(key, n) && n < m_storages.size() && m_storages[n]->key == key)
        return m_storages[n];
    size_t i = m_storageByKey.find(key, storageKey());
    return i == NameIndex::npos ? nullptr : m_storages[i];
}

void TorchSemantics::addStorage(StorageValue* s)
{
    s->index = static_cast<uint32_t>(m_storages.size());
    m_storages.push_back(s);
    if (size_t n = 0; !decimalKey(s->key, n) || n != s->index)
        m_storageByKey.insert(s->index, storageKey());
}

StorageValue* TorchSemantics::view(Unpickler& u, StorageValue* root, std::string_view viewKey, int64_t offset, int64_t size)
{
    if (StorageValue* known = storagesByKey(viewKey))
        return known;
    auto* v = u.arena().make<StorageView>(*root, root->root(), offset + root->viewOffset());
    v->key = viewKey;
    v->numel = size;
    addStorage(v);
    return v;
}

} // namespace sl::torch
