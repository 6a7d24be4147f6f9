#include "dcp_metadata.h"

#include "io/arriving_bytes.h"
#include "pickle/global_policy.h"
#include "pickle/opcode_scan.h"
#include "pickle/value_repr.h"
#include "torch/load_safety.h"
#include "pickle/unpickler.h"
#include "pickle/value.h"
#include "util/error.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <future>
#include <map>
#include <stdexcept>

namespace sl::dcp {

using namespace sl::pickle;

namespace {

constexpr size_t kMaxDims = 64;
constexpr size_t kMaxPathElems = 256;
constexpr size_t kMaxProblemsPerItem = 4;

// Only what the VM cannot leave inert: torch.Size(tuple) is the tuple itself, so shapes read as tuples.
// Every global is recorded; torch reads .metadata with plain pickle.load, which imports each of them.
class DcpSemantics : public InertSemantics {
public:
    Value* global(Unpickler& u, std::string_view module, std::string_view name) override
    {
        auto [m, n] = mapLegacyName(module, name, u.protocol());
        auto* g = u.arena().make<GlobalValue>(m, n, knownGlobal(m, n));
        if (m == "torch")
            if (auto d = dtypeFromName(n))
                g->dtype = *d;
        ++globals[std::string(m) + "." + std::string(n)];
        return g;
    }

    Value* call(Unpickler& u, Value* callable, SeqValue* args) override
    {
        const GlobalValue* g = asGlobal(callable);
        if (g && g->id == KnownGlobal::TorchSize && args && args->items.size() == 1
            && asSeq(args->items[0]))
            return args->items[0];
        return InertSemantics::call(u, callable, args);
    }

    // The globals the reader gives meaning to, named once here and told apart by id after (every record
    // asks what its class is): torch.Size, and the dataclasses a .metadata holds one of per chunk, each
    // record of which the dataclass lane (pickle/dataclass_record.h) takes whole where its fields are
    // exactly what torch writes; anything else is left to the opcodes, which build the object as it is.
    static KnownGlobal knownGlobal(std::string_view module, std::string_view name)
    {
        if (module == "torch")
            return name == "Size" ? KnownGlobal::TorchSize : KnownGlobal::Unknown;
        if (module == "torch.distributed.checkpoint.metadata")
            return name == "ChunkStorageMetadata" ? KnownGlobal::DcpChunkStorageMetadata
                : name == "MetadataIndex"         ? KnownGlobal::DcpMetadataIndex
                                                  : KnownGlobal::Unknown;
        return module == "torch.distributed.checkpoint.filesystem" && name == "_StorageInfo" ? KnownGlobal::DcpStorageInfo
                                                                                             : KnownGlobal::Unknown;
    }
    static KnownGlobal idOf(const Value* v)
    {
        const GlobalValue* g = asGlobal(v);
        return g ? g->id : KnownGlobal::Unknown;
    }
    bool dataclassClass(const Value* cls) override
    {
        const KnownGlobal id = idOf(cls);
        return id == KnownGlobal::DcpChunkStorageMetadata || id == KnownGlobal::DcpMetadataIndex || id == KnownGlobal::DcpStorageInfo;
    }
    Value* dataclassRecord(Unpickler& u, const DataclassCall& c) override
    {
        switch (idOf(c.cls)) {
        case KnownGlobal::DcpChunkStorageMetadata: return chunk(u, c);
        case KnownGlobal::DcpMetadataIndex: return index(u, c);
        case KnownGlobal::DcpStorageInfo: return storageInfo(u, c);
        default: return nullptr;
        }
    }

    std::map<std::string, size_t> globals;

private:
    using Field = DataclassCall::Field;
    using Form = DataclassRecord::Form;

    // The record's fields by name, each of `names` at most once and no other; false otherwise.
    template <size_t N>
    static bool byName(const DataclassCall& c, const std::array<std::string_view, N>& names, std::array<const Field*, N>& out)
    {
        out.fill(nullptr);
        for (const Field& f : c.fields) {
            const StrValue* k = asStr(f.key);
            if (!k)
                return false;
            const size_t i = static_cast<size_t>(std::find(names.begin(), names.end(), k->s) - names.begin());
            if (i == N || out[i])
                return false;
            out[i] = &f;
        }
        return true;
    }
    // torch.Size(ints): the Size form with torch.Size as its callable.
    static bool isSize(const Field* f) { return f && f->form == Form::Size && idOf(f->sizeCallable) == KnownGlobal::TorchSize; }
    static bool isNone(const Field* f) { return !f || f->form == Form::None; }
    static const StrValue* str(const Field* f)
    {
        return f && (f->form == Form::Str || f->form == Form::Fetched) ? asStr(f->value) : nullptr;
    }

    // ChunkStorageMetadata(offsets=torch.Size(...), sizes=torch.Size(...))
    Value* chunk(Unpickler& u, const DataclassCall& c)
    {
        std::array<const Field*, 2> f;
        if (!byName<2>(c, { "offsets", "sizes" }, f) || !isSize(f[0]) || !isSize(f[1]))
            return nullptr;
        auto* v = u.arena().make<DcpChunkValue>();
        v->cls = asGlobal(c.cls);
        v->rank = static_cast<uint8_t>(f[0]->dims.size());
        v->sizesRank = static_cast<uint8_t>(f[1]->dims.size());
        std::copy(f[0]->dims.begin(), f[0]->dims.end(), v->offsets);
        std::copy(f[1]->dims.begin(), f[1]->dims.end(), v->sizes);
        return v;
    }
    // MetadataIndex(fqn=str, offset=torch.Size(...) or None, index=int or None)
    Value* index(Unpickler& u, const DataclassCall& c)
    {
        std::array<const Field*, 3> f;
        if (!byName<3>(c, { "fqn", "offset", "index" }, f) || !str(f[0]) || !(isNone(f[1]) || isSize(f[1]))
            || !(isNone(f[2]) || f[2]->form == Form::Int))
            return nullptr;
        auto* v = u.arena().make<DcpIndexValue>();
        v->cls = asGlobal(c.cls);
        v->fqn = str(f[0])->s;
        if (!isNone(f[1])) {
            v->hasOffset = true;
            v->rank = static_cast<uint8_t>(f[1]->dims.size());
            std::copy(f[1]->dims.begin(), f[1]->dims.end(), v->offset);
        }
        return v;
    }
    // _StorageInfo(relative_path=str, offset=int, length=int), transform_descriptors None or absent
    Value* storageInfo(Unpickler& u, const DataclassCall& c)
    {
        std::array<const Field*, 4> f;
        if (!byName<4>(c, { "relative_path", "offset", "length", "transform_descriptors" }, f) || !str(f[0]) || !f[1]
            || f[1]->form != Form::Int || !f[2] || f[2]->form != Form::Int || !isNone(f[3]))
            return nullptr;
        auto* v = u.arena().make<DcpStorageInfoValue>();
        v->cls = asGlobal(c.cls);
        v->relativePath = str(f[0])->s;
        v->offset = f[1]->integer;
        v->length = f[2]->integer;
        return v;
    }
};

// What reading the graph may copy. The memo lets a small pickle name one big list or string many times
// (10,000 tensors sharing one 100,000-chunk list, one long key repeated), so copies are charged against a
// multiple of the input size; real files use about one unit per byte.
class Budget {
public:
    Budget(const std::string& name, size_t inputSize)
        : m_name(name)
        , m_left(16 * inputSize + (1u << 20))
    {
    }
    void charge(size_t units)
    {
        if (units > m_left)
            throw LoadError(m_name,
                "the .metadata pickle refers to the same objects too many times (a memo-amplified pickle); not read");
        m_left -= units;
    }

private:
    const std::string& m_name;
    size_t m_left;
};

// A value the dataclass lane built whole (pickle/dataclass_record.h) stands for the object the opcodes would
// have built: it is named as that object, and read by readTensorMeta's chunk loop and readStorageData only.
// Its fields read anywhere else (a hostile pickle that puts it where an object of fields belongs) make the
// whole .metadata read again without the lane, which builds the object itself.
const DcpRecordValue* asLaneRecord(const Value* v)
{
    return v && isDcpRecord(v->kind) ? static_cast<const DcpRecordValue*>(v) : nullptr;
}
template <typename T, Kind K> const T* asLane(const Value* v)
{
    return v && v->kind == K ? static_cast<const T*>(v) : nullptr;
}

std::string_view shortName(const Value* v)
{
    if (const DcpRecordValue* r = asLaneRecord(v))
        return r->cls->name;
    const ObjectValue* o = asObject(v);
    const GlobalValue* c = o ? o->cls() : nullptr;
    return c ? c->name : std::string_view();
}

std::string className(const Value* v)
{
    if (const DcpRecordValue* r = asLaneRecord(v))
        return qualifiedName(*r->cls);
    if (const ObjectValue* o = asObject(v))
        if (const GlobalValue* c = o->cls())
            return qualifiedName(*c);
    switch (v ? v->kind : Kind::None) {
    case Kind::None: return "None";
    case Kind::Dict: return "dict";
    case Kind::List: return "list";
    case Kind::Tuple: return "tuple";
    case Kind::Str: return "str";
    case Kind::Int: return "int";
    default: return "a " + shortRepr(v, 40);
    }
}

// A dataclass's fields: BUILD stores its __dict__, or (dict, slots) when it has __slots__.
const DictValue* fieldsOf(const Value* v)
{
    if (asLaneRecord(v))
        throw TensorLaneRestart {};
    const ObjectValue* o = asObject(v);
    if (!o)
        return nullptr;
    if (const DictValue* d = asDict(o->state))
        return d;
    if (const SeqValue* t = asSeq(o->state); t && t->kind == Kind::Tuple && t->items.size() == 2) {
        if (const DictValue* d = asDict(t->items[0]))
            return d;
        return asDict(t->items[1]);
    }
    return nullptr;
}

const Value* field(const DictValue* d, std::string_view key) { return d ? d->lookup(key) : nullptr; }

// A shape or an offset: at most kMaxDims ints, none negative.
bool readDims(const int64_t* dims, size_t n, Shape& out)
{
    if (n > kMaxDims || std::any_of(dims, dims + n, [](int64_t d) { return d < 0; }))
        return false;
    out.assign(dims, dims + n);
    return true;
}

// The same from a tuple (torch.Size reads as one).
bool readDims(const Value* v, Shape& out)
{
    const SeqValue* s = asSeq(v);
    if (!s || s->kind == Kind::Set || s->items.size() > kMaxDims)
        return false;
    int64_t dims[kMaxDims];
    size_t n = 0;
    for (const Value* x : s->items)
        if (!x || x->kind != Kind::Int || !toInt(x, dims[n++]))
            return false;
    return readDims(dims, n, out);
}

bool readU64(int64_t i, uint64_t& out)
{
    if (i < 0)
        return false;
    out = static_cast<uint64_t>(i);
    return true;
}

bool readU64(const Value* v, uint64_t& out)
{
    int64_t i = 0;
    return v && v->kind == Kind::Int && toInt(v, i) && readU64(i, out);
}

std::string text(const Value* v)
{
    if (const StrValue* s = asStr(v))
        return std::string(s->s);
    return shortRepr(v, 200);
}

void addProblem(ItemMeta& item, std::string p)
{
    if (item.problems.size() < kMaxProblemsPerItem)
        item.problems.push_back(std::move(p));
}

// TensorProperties: the __getstate__ tuple (dtype, layout, requires_grad, memory_format, pin_memory), or
// a plain __dict__ from writers that pickle the dataclass as it is.
void readProperties(const Value* v, ItemMeta& item)
{
    const Value* dtype = nullptr;
    const Value* requiresGrad = nullptr;
    if (const ObjectValue* o = asObject(v)) {
        if (const SeqValue* t = asSeq(o->state); t && t->kind == Kind::Tuple && !t->items.empty()) {
            dtype = t->items[0];
            if (t->items.size() > 2)
                requiresGrad = t->items[2];
        } else if (const DictValue* d = fieldsOf(v)) {
            dtype = d->lookup("dtype");
            requiresGrad = d->lookup("requires_grad");
        }
    }
    if (!dtype) {
        addProblem(item, "its TensorProperties are missing or malformed (" + className(v) + "); dtype unknown");
        return;
    }
    const GlobalValue* g = asGlobal(dtype);
    if (g && g->module == "torch" && g->dtype != DType::Unknown) {
        item.dtype = g->dtype;
    } else {
        item.dtypeText = g ? qualifiedName(*g) : shortRepr(dtype, 60);
        addProblem(item, "unknown dtype " + item.dtypeText);
    }
    if (requiresGrad && requiresGrad->kind == Kind::Bool)
        item.requiresGrad = static_cast<const BoolValue*>(requiresGrad)->v;
}

void readTensorMeta(const DictValue* f, ItemMeta& item, Budget& budget)
{
    item.kind = ItemMeta::Kind::Tensor;
    readProperties(field(f, "properties"), item);
    const Value* size = field(f, "size");
    if (readDims(size, item.size))
        item.sizeKnown = true;
    else
        addProblem(item, "its size is not a torch.Size of non-negative ints (" + shortRepr(size, 60) + ")");
    const SeqValue* chunks = asSeq(field(f, "chunks"));
    if (!chunks || chunks->kind == Kind::Set) {
        addProblem(item, "its chunk list is missing or malformed");
        return;
    }
    budget.charge(chunks->items.size());
    item.chunks.reserve(chunks->items.size());
    size_t bad = 0;
    for (const Value* c : chunks->items) {
        ChunkMeta m;
        bool read = false;
        if (const DcpChunkValue* lc = asLane<DcpChunkValue, Kind::DcpChunk>(c)) {
            read = lc->rank == lc->sizesRank && readDims(lc->offsets, lc->rank, m.offsets)
                && readDims(lc->sizes, lc->sizesRank, m.sizes);
        } else {
            const DictValue* cf = fieldsOf(c);
            read = cf && readDims(field(cf, "offsets"), m.offsets) && readDims(field(cf, "sizes"), m.sizes)
                && m.offsets.size() == m.sizes.size();
        }
        if (!read) {
            ++bad;
            continue;
        }
        budget.charge(2 * m.offsets.size());
        item.chunks.push_back(std::move(m));
    }
    if (bad)
        addProblem(item, std::to_string(bad) + " of its chunks are malformed (offsets and sizes must be torch.Size of "
                "equal length); they are left out");
}

void readStorageData(const Value* v, MetadataFile& out, Budget& budget)
{
    if (!v || v->kind == Kind::None)
        return;
    const DictValue* d = asDict(v);
    if (!d) {
        out.findings.push_back({ Severity::Warning, "storage_data is " + className(v) + ", not a dict; no bytes can be located", {} });
        return;
    }
    out.storage.reserve(d->items.size());
    size_t bad = 0;
    for (const auto& [key, value] : d->items) {
        StorageRef r;
        // Each side is the lane's value (pickle/dataclass_record.h) or the opcodes' object, independently.
        const DcpIndexValue* li = asLane<DcpIndexValue, Kind::DcpIndex>(key);
        const DcpStorageInfoValue* ls = asLane<DcpStorageInfoValue, Kind::DcpStorageInfo>(value);
        const DictValue* kf = li ? nullptr : fieldsOf(key);
        const StrValue* fqnValue = li ? nullptr : asStr(field(kf, "fqn"));
        const DictValue* vf = ls ? nullptr : fieldsOf(value);
        if (!(li || fqnValue) || !(ls || vf)) {
            ++bad;
            continue;
        }
        const std::string_view fqn = li ? li->fqn : fqnValue->s;
        budget.charge(1 + fqn.size());
        r.fqn = out.fqns.intern(fqn);
        if (li) {
            if (li->hasOffset && !readDims(li->offset, li->rank, r.offset)) {
                ++bad;
                continue;
            }
            r.hasOffset = li->hasOffset;
        } else if (const Value* off = field(kf, "offset"); off && off->kind != Kind::None) {
            if (!readDims(off, r.offset)) {
                ++bad;
                continue;
            }
            r.hasOffset = true;
        }
        if (ls) {
            budget.charge(ls->relativePath.size() + r.offset.size());
            r.pathIsText = true;
            r.path = out.paths.intern(ls->relativePath);
            r.rangeKnown = readU64(ls->offset, r.itemOffset) && readU64(ls->length, r.itemLength);
            out.storage.push_back(std::move(r));
            continue;
        }
        const Value* path = field(vf, "relative_path");
        if (const StrValue* p = asStr(path)) {
            budget.charge(p->s.size() + r.offset.size());
            r.pathIsText = true;
            r.path = out.paths.intern(p->s);
        } else {
            r.path = out.paths.intern(shortRepr(path, 60));
        }
        r.rangeKnown = readU64(field(vf, "offset"), r.itemOffset) && readU64(field(vf, "length"), r.itemLength);
        if (const SeqValue* t = asSeq(field(vf, "transform_descriptors")); t && !t->items.empty()) {
            if (out.transformLists.size() >= UINT32_MAX - 1)
                throw std::length_error("more than 4 billion transform lists");
            std::vector<std::string>& list = out.transformLists.emplace_back();
            for (const Value* x : t->items)
                if (list.size() < 16)
                    list.push_back(text(x));
            r.transformList = static_cast<uint32_t>(out.transformLists.size());
        }
        out.storage.push_back(std::move(r));
    }
    if (bad)
        out.findings.push_back({ Severity::Warning,
            std::to_string(bad) + " storage_data entries are malformed (not MetadataIndex -> _StorageInfo) and were left out",
            {} });
}

void readPlannerData(const Value* v, MetadataFile& out, Budget& budget)
{
    const DictValue* d = asDict(v);
    if (!d)
        return; // None, or a custom planner's own data: keys are then taken as they are
    out.hasPlannerData = true;
    out.plannerData.reserve(d->items.size());
    for (const auto& [key, value] : d->items) {
        const StrValue* k = asStr(key);
        const SeqValue* path = asSeq(value);
        if (!k || !path || path->kind == Kind::Set || path->items.empty() || path->items.size() > kMaxPathElems)
            continue;
        budget.charge(1 + k->s.size() + path->items.size());
        // Flattening joins the path with "."; a path that cannot be its key is not copied at all.
        size_t joined = path->items.size() - 1;
        for (const Value* x : path->items)
            joined += asStr(x) ? asStr(x)->s.size() : 1;
        if (joined > k->s.size() + 20 * path->items.size())
            continue;
        const size_t first = out.plannerElems.size();
        bool ok = true;
        for (const Value* x : path->items) {
            if (const StrValue* s = asStr(x)) {
                out.plannerElems.push_back({ out.plannerText.store(s->s), false });
            } else if (x && x->kind == Kind::Int) {
                int64_t i = 0;
                toInt(x, i);
                char digits[24];
                const auto end = std::to_chars(digits, digits + sizeof digits, i).ptr;
                out.plannerElems.push_back({ out.plannerText.store({ digits, size_t(end - digits) }), true });
            } else {
                ok = false;
                break;
            }
        }
        if (ok)
            out.plannerData.push_back({ out.fqns[out.fqns.intern(k->s)], static_cast<uint32_t>(first),
                static_cast<uint32_t>(out.plannerElems.size() - first) });
        else
            out.plannerElems.resize(first); // their text stays in plannerText, unused
    }
}

void readStorageMeta(const Value* v, MetadataFile& out)
{
    const DictValue* f = fieldsOf(v);
    if (!f)
        return;
    for (const char* key : { "checkpoint_id", "save_id", "load_id" }) {
        const Value* x = f->lookup(key);
        if (!x || x->kind == Kind::None)
            continue;
        std::string shown = text(x);
        // checkpoint_id is often a pathlib path: show its parts joined, not the constructor call.
        if (const ObjectValue* o = asObject(x); o && shortName(x).ends_with("Path"))
            if (const SeqValue* parts = asSeq(o->args)) {
                shown.clear();
                for (const Value* p : parts->items) {
                    std::string part = text(p);
                    if (!shown.empty() && shown.back() != '/')
                        shown += '/';
                    shown += part;
                }
            }
        out.info.emplace_back(std::string("storage_meta.") + key, std::move(shown));
    }
    if (const SeqValue* modules = asSeq(f->lookup("modules")); modules && !modules->items.empty())
        out.info.emplace_back("storage_meta.modules", shortRepr(modules, 200));
}

// Globals a .metadata normally references; pickle.load imports each, so anything else is reported.
bool expectedGlobal(std::string_view module, std::string_view name)
{
    if (module == "torch")
        return name == "Size" || dtypeFromName(name).has_value();
    if (module.starts_with("torch.distributed."))
        return true;
    if (module == "torch.serialization")
        return name == "_get_layout";
    if (module == "builtins")
        return name == "getattr";
    if (module == "collections")
        return name == "OrderedDict";
    if (module == "pathlib" || module == "pathlib._local")
        return name.ends_with("Path");
    return false;
}

constexpr std::string_view kMetadataLoader = "DCP's pickle.load of .metadata";

// Dangers from the opcode scan (every import, however reached); then classes a DCP save does not use.
void reportGlobals(const DcpSemantics& sem, const torch::LoadSafety& safety, MetadataFile& out)
{
    std::vector<Finding> verdict;
    WeightsOnlyLoad load;
    safety.report(verdict, load, kMetadataLoader);
    out.executes = load.executes;
    for (auto& f : verdict)
        if (f.severity == Severity::Danger)
            out.findings.push_back(std::move(f));
    std::string others;
    size_t otherCount = 0;
    for (const auto& [qualified, count] : sem.globals) {
        size_t dot = qualified.rfind('.');
        std::string_view module(qualified.data(), dot);
        std::string_view name(qualified.data() + dot + 1, qualified.size() - dot - 1);
        if (classifyGlobal(module, name, pickle::kUsedAsValue).risk == GlobalRisk::Dangerous)
            continue; // named above
        if (!expectedGlobal(module, name)) {
            if (otherCount++ < 8)
                others += (others.empty() ? "" : ", ") + qualified;
        }
    }
    if (otherCount)
        out.findings.push_back({ Severity::Warning,
            "the .metadata pickle references classes a DCP checkpoint does not use (" + others
                + (otherCount > 8 ? ", ... (" + std::to_string(otherCount) + " in all)" : std::string())
                + "); torch reads .metadata with pickle.load, which imports them",
            {} });
}

} // namespace

std::string dimsText(const Shape& s) { return shapeToString(s); }

std::string dumpMetadata(const MetadataFile& md)
{
    std::string out = "protocol " + std::to_string(md.protocol) + "\n";
    for (const ItemMeta& i : md.items) {
        out += std::string(md.fqnOf(i)) + " kind " + std::to_string(int(i.kind)) + " " + i.className + " dtype " + std::string(dtypeName(i.dtype)) + " "
            + i.dtypeText + " size " + (i.sizeKnown ? dimsText(i.size) : "?") + (i.requiresGrad ? " grad" : "")
            + "\n";
        for (const ChunkMeta& c : i.chunks)
            out += "  chunk " + dimsText(c.offsets) + " " + dimsText(c.sizes) + "\n";
        for (const std::string& p : i.problems)
            out += "  problem " + p + "\n";
    }
    for (const StorageRef& r : md.storage) {
        out += "storage " + std::string(md.fqns[r.fqn]) + (r.hasOffset ? " " + dimsText(r.offset) : "") + " " + std::string(md.paths[r.path])
            + (r.pathIsText ? "" : " (not a str)") + " " + std::to_string(r.itemOffset) + "+" + std::to_string(r.itemLength)
            + (r.rangeKnown ? "" : " (range unknown)");
        if (r.transformed())
            for (const std::string& t : md.transformsOf(r))
                out += " transform " + t;
        out += "\n";
    }
    for (const MetadataFile::PlannerPath& p : md.plannerData)
        out += "planner " + std::string(p.key) + " " + std::to_string(p.count) + "\n";
    for (const auto& [k, v] : md.info)
        out += "info " + k + "=" + v + "\n";
    for (const Finding& f : md.findings)
        out += "finding " + std::to_string(int(f.severity)) + " " + f.message + "\n";
    for (const std::string& e : md.executes)
        out += "executes " + e + "\n";
    return out;
}

uint32_t StringTable::intern(std::string_view s)
{
    if (m_strings.size() >= UINT32_MAX - 1)
        throw std::length_error("more than 4 billion distinct strings");
    const auto nameOf = [this](size_t i) { return m_strings[i]; };
    if (const size_t found = m_index.find(s, nameOf); found != NameIndex::npos)
        return static_cast<uint32_t>(found);
    m_strings.push_back(m_text.store(s));
    m_index.insert(m_strings.size() - 1, nameOf);
    return static_cast<uint32_t>(m_strings.size() - 1);
}

std::string_view TextStore::store(std::string_view s)
{
    constexpr size_t kBlock = 64 << 10;
    if (s.empty())
        return {};
    char* at = nullptr;
    if (s.size() > kBlock / 4) { // a long string gets a block of its own; the current one stays current
        at = m_long.emplace_back(std::make_unique_for_overwrite<char[]>(s.size())).get();
    } else {
        if (s.size() > m_free) {
            m_next = m_blocks.emplace_back(std::make_unique_for_overwrite<char[]>(kBlock)).get();
            m_free = kBlock;
        }
        at = m_next;
        m_next += s.size();
        m_free -= s.size();
    }
    std::memcpy(at, s.data(), s.size());
    return { at, s.size() };
}

namespace {

// `arriving`, when given, holds `pickle` still unread: it is read on the scan's thread, first, and the
// unpickler follows the read.
MetadataFile parseMetadataOnce(
    const std::string& name, Bytes pickle, ArrivingBytes* arriving, const LoadControl* control, bool lane)
{
    MetadataFile out;
    Arena arena;
    DcpSemantics sem;
    Value* root = nullptr;
    if (pickle.empty())
        throw LoadError(name, "the .metadata file is empty");
    // The opcode scan sees every import however it is reached, and an error that stops the unpickler still
    // names the dangers it saw. It is an independent pass over the same bytes (a fifth of the work on a
    // 100 MB .metadata), so it runs on a second thread while the unpickler runs here. Bytes still arriving
    // are read there first: the unpickler follows the read, the scan starts once it is done.
    torch::LoadSafety safety;
    std::future<PickleScan> scan = std::async(std::launch::async, [pickle, arriving] {
        if (arriving) {
            arriving->read();
            if (arriving->failed())
                return PickleScan {}; // the unpickler's wait throws the reader's error
        }
        return scanPickle(pickle);
    });
    auto scanned = [&] {
        if (scan.valid())
            safety.add("the .metadata pickle", scan.get());
    };
    auto fail = [&](const std::string& problem) {
        scanned();
        return LoadError(name, safety.withDangers(problem, kMetadataLoader));
    };
    if (arriving)
        arriving->waitFor(1);
    if (pickle[0] != 0x80)
        throw fail("is not a torch.distributed.checkpoint .metadata file (not a pickle of protocol 2 or later)");
    try {
        Unpickler u = arriving ? Unpickler(*arriving, arena, sem) : Unpickler(pickle, arena, sem);
        u.setControl(control);
        u.setDataclassLane(lane);
        root = u.load();
        out.protocol = u.protocol();
        out.laneRecords = u.dataclassRecords();
    } catch (const FormatError& e) {
        throw fail(std::string("corrupt .metadata pickle: ") + e.what());
    }

    scanned();
    // A Metadata by role: an object whose fields hold a state_dict_metadata dict (subclasses and
    // Megatron's additions included).
    const DictValue* fields = fieldsOf(root);
    const DictValue* sdm = asDict(field(fields, "state_dict_metadata"));
    if (!sdm)
        throw fail("is not a torch.distributed.checkpoint .metadata file: the pickle holds " + className(root)
            + ", not a Metadata object with state_dict_metadata");
    reportGlobals(sem, safety, out);
    if (const GlobalValue* c = asObject(root)->cls(); c && c->name != "Metadata")
        out.findings.push_back({ Severity::Info, "the metadata object is a " + qualifiedName(*c) + "; read as a DCP Metadata", {} });

    if (const GlobalValue* c = asObject(root)->cls()) {
        std::string_view m = c->module;
        if (m.ends_with(".metadata"))
            m.remove_suffix(9);
        out.info.emplace_back("classes", std::string(m));
    }
    out.info.emplace_back("pickle_protocol", std::to_string(out.protocol));
    out.pickleBytes = pickle.size();

    Budget budget(name, pickle.size());
    out.items.reserve(sdm->items.size());
    for (const auto& [key, value] : sdm->items) {
        ItemMeta item;
        if (const StrValue* k = asStr(key)) {
            budget.charge(1 + k->s.size());
            item.fqnId = out.fqns.intern(k->s);
        } else {
            out.findings.push_back({ Severity::Warning, "state_dict_metadata has a key that is not a str (" + shortRepr(key, 60)
                    + "); left out",
                {} });
            continue;
        }
        std::string_view role = shortName(value);
        const DictValue* f = fieldsOf(value);
        if (role == "BytesStorageMetadata") {
            item.kind = ItemMeta::Kind::Bytes;
        } else if (role == "TensorStorageMetadata" || (f && f->lookup("chunks") && f->lookup("size"))) {
            readTensorMeta(f, item, budget);
        } else {
            item.kind = ItemMeta::Kind::Unknown;
            item.className = className(value);
        }
        out.items.push_back(std::move(item));
    }

    readPlannerData(field(fields, "planner_data"), out, budget);
    readStorageData(field(fields, "storage_data"), out, budget);
    readStorageMeta(field(fields, "storage_meta"), out);
    if (const StrValue* v = asStr(field(fields, "version")))
        out.info.emplace_back("version", std::string(v->s));

    std::string extra;
    for (const auto& [k, v] : fields->items) {
        const StrValue* ks = asStr(k);
        if (!ks)
            continue;
        std::string_view n = ks->s;
        if (n == "state_dict_metadata" || n == "planner_data" || n == "storage_data" || n == "storage_meta"
            || n == "version")
            continue;
        if (extra.size() < 200)
            extra += (extra.empty() ? "" : ", ") + std::string(n);
    }
    if (!extra.empty())
        out.info.emplace_back("extra_fields", extra);
    return out;
}

} // namespace

MetadataFile parseMetadata(const std::string& name, Bytes pickle, const LoadControl* control, bool lane)
{
    // The dataclass lane builds each chunk and storage record whole; a pickle that fetches what it did not
    // build, changes what it built, or puts one where fields are read, is read again without it.
    try {
        return parseMetadataOnce(name, pickle, nullptr, control, lane);
    } catch (const TensorLaneRestart&) {
        return parseMetadataOnce(name, pickle, nullptr, control, false);
    }
}

MetadataFile parseMetadata(const std::string& name, ArrivingBytes& pickle, const LoadControl* control, bool lane)
{
    try {
        return parseMetadataOnce(name, pickle.all(), &pickle, control, lane);
    } catch (const TensorLaneRestart&) {
        pickle.waitFor(pickle.size()); // the first run's scan thread read it all, or failed: then this throws
        return parseMetadataOnce(name, pickle.all(), nullptr, control, false);
    }
}

} // namespace sl::dcp
