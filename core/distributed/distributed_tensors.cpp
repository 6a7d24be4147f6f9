#include "distributed_tensors.h"

#include "model/shape_volume.h"
#include "pickle/value_repr.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

namespace sl::distributed {

using namespace sl::pickle;

namespace {

constexpr size_t kMaxDims = 64;
// Metadata shards turned into chunks; a real ShardedTensor has one or a few per rank.
constexpr size_t kMaxShards = size_t(1) << 16;
// Walk-budget units one metadata shard costs (see describeShardedTensor).
constexpr size_t kShardCost = 32;
// Pairwise overlap checks stay quadratic in the shard count: only for small lists.
constexpr size_t kMaxOverlapCheck = 512;
// Mesh coordinates enumerated to learn which local sizes a dim can have.
constexpr int64_t kMaxEnumerate = 4096;
// Index lists simulated to place a _StridedShard piece in the global tensor.
constexpr int64_t kMaxSimulate = int64_t(1) << 16;
constexpr size_t kMaxNames = 64;

// The attributes of a pickled object: its BUILD dict, or the dict and slots of a (dict-or-None, slots) pair
// (classes with __slots__), looked up slots first.
struct Fields {
    const DictValue* dict = nullptr;
    const DictValue* slots = nullptr;
    const Value* get(std::string_view key) const
    {
        if (slots)
            if (const Value* v = slots->lookup(key))
                return v;
        return dict ? dict->lookup(key) : nullptr;
    }
    const Value* get(std::string_view key, std::string_view alias) const
    {
        const Value* v = get(key);
        return v ? v : get(alias);
    }
    bool empty() const { return !dict && !slots; }
};

Fields fieldsOfState(const Value* state)
{
    Fields f;
    if (auto* d = asDict(state)) {
        f.dict = d;
    } else if (auto* t = asSeq(state); t && t->kind == Kind::Tuple && t->items.size() == 2) {
        f.dict = asDict(t->items[0]);
        f.slots = asDict(t->items[1]);
    }
    return f;
}

Fields fieldsOf(const Value* v)
{
    if (auto* o = asObject(v))
        return fieldsOfState(o->state);
    Fields f;
    f.dict = asDict(v);
    return f;
}

const SeqValue* argsOf(const Value* v)
{
    auto* o = asObject(v);
    return o ? asSeq(o->args) : nullptr;
}

const Value* argAt(const SeqValue* s, size_t i) { return s && i < s->items.size() ? s->items[i] : nullptr; }

std::string_view strOf(const Value* v)
{
    if (v && (v->kind == Kind::Str || v->kind == Kind::Bytes))
        return static_cast<const StrValue*>(v)->s;
    return {};
}

bool intList(const Value* v, Shape& out)
{
    auto* s = asSeq(v);
    if (!s || s->kind == Kind::Set || s->items.size() > kMaxDims)
        return false;
    Shape r;
    for (const Value* item : s->items) {
        int64_t x = 0;
        if (!item || item->kind != Kind::Int || !toInt(item, x))
            return false;
        r.push_back(x);
    }
    out = std::move(r);
    return true;
}

std::string listText(const Shape& s) { return shapeToString(s); }

std::string_view lastComponent(std::string_view name)
{
    size_t dot = name.rfind('.');
    return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

Shape zeros(size_t n)
{
    Shape s;
    for (size_t i = 0; i < n; ++i)
        s.push_back(0);
    return s;
}

void addProblem(std::vector<std::string>& problems, std::string p)
{
    if (problems.size() < 8)
        problems.push_back(std::move(p));
}

void eraseAttributes(Entry& e, std::initializer_list<std::string_view> keys)
{
    erase_if(e.attributes, [&](const auto& kv) {
        return std::find(keys.begin(), keys.end(), std::string_view(kv.first)) != keys.end();
    });
}

// Takes the named part out of e.parts.
std::optional<Entry> takePart(Entry& e, std::string_view role)
{
    for (auto it = e.parts.begin(); it != e.parts.end(); ++it)
        if (it->name == role) {
            Entry p = std::move(*it);
            e.parts.erase(it);
            return p;
        }
    return std::nullopt;
}

// The local piece's bytes become the entry's: it is the only data of this tensor in the file.
void adoptLocation(Entry& e, const Entry& local)
{
    e.location = local.location;
    if (const std::string* bad = local.attribute("invalid_view"))
        e.attributes.emplace_back("invalid_view", *bad);
}

void setChunkBytes(ShardChunk& c, const Entry& local)
{
    c.file = local.location.file;
    c.strides = local.location.strides;
    if (local.location.kind == TensorLocation::Kind::Mapped) {
        c.byteOffset = local.location.offset;
        c.byteLength = local.location.length;
    }
}

void finishProblems(Entry& e, const std::vector<std::string>& problems)
{
    if (problems.empty())
        return;
    std::string text;
    for (const auto& p : problems)
        text += (text.empty() ? "" : "; ") + p;
    e.attributes.emplace_back("sharding_problem", std::move(text));
}

// ---------------------------------------------------------------------------------------------------
// DTensor

struct Placement {
    enum class Kind : uint8_t { Shard, StridedShard, Replicate, Partial, Other } kind = Kind::Other;
    int64_t dim = 0;
    int64_t splitFactor = 1;
    std::string text;
    bool shards() const { return kind == Kind::Shard || kind == Kind::StridedShard; }
};

std::string reduceOpName(const Value* v, int depth = 0)
{
    static constexpr const char* kOps[] = { "sum", "avg", "product", "min", "max", "band", "bor", "bxor",
        "premul_sum" };
    if (!v || depth > 3)
        return "?";
    if (auto* s = asStr(v))
        return std::string(s->s.substr(0, 40));
    int64_t i = 0;
    if (v->kind == Kind::Int && toInt(v, i))
        return i >= 0 && i < int64_t(std::size(kOps)) ? kOps[i] : std::to_string(i);
    if (auto* g = asGlobal(v)) { // getattr(ReduceOp, 'SUM')
        std::string name(g->name.substr(0, 40));
        for (char& c : name)
            c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return name;
    }
    if (auto* o = asObject(v)) { // an old c10d ReduceOp object: its value in the args or the state
        if (auto* a = asSeq(o->args); a && !a->items.empty())
            return reduceOpName(a->items[0], depth + 1);
        if (o->state)
            return reduceOpName(o->state, depth + 1);
    }
    if (auto* s = asSeq(v); s && !s->items.empty())
        return reduceOpName(s->items[0], depth + 1);
    return "?";
}

Placement parsePlacement(const Value* v, std::vector<std::string>& problems)
{
    Placement p;
    auto* o = asObject(v);
    const GlobalValue* cls = o ? o->cls() : nullptr;
    if (!cls) {
        p.text = shortRepr(v, 60);
        addProblem(problems, "placement " + p.text + " is not a placement object");
        return p;
    }
    const std::string_view name = cls->name;
    const Fields f = fieldsOf(v);
    const SeqValue* args = asSeq(o->args);
    auto intField = [&](std::string_view key, size_t argIndex, int64_t& out) {
        const Value* x = f.get(key);
        if (!x)
            x = argAt(args, argIndex);
        return x && x->kind == Kind::Int && toInt(x, out);
    };
    if (name == "Shard" || name == "_StridedShard") {
        p.kind = name == "Shard" ? Placement::Kind::Shard : Placement::Kind::StridedShard;
        if (!intField("dim", 0, p.dim))
            addProblem(problems, std::string(name) + " placement without an integer dim");
        if (p.kind == Placement::Kind::StridedShard) {
            if (!intField("split_factor", 1, p.splitFactor) || p.splitFactor < 1) {
                addProblem(problems, "_StridedShard placement without a positive split_factor");
                p.splitFactor = 1;
            }
            p.text = "_StridedShard(dim=" + std::to_string(p.dim) + ", sf=" + std::to_string(p.splitFactor) + ")";
        } else {
            p.text = "Shard(dim=" + std::to_string(p.dim) + ")";
        }
    } else if (name == "Replicate") {
        p.kind = Placement::Kind::Replicate;
        p.text = "Replicate()";
    } else if (name == "Partial" || name == "_Partial") {
        p.kind = Placement::Kind::Partial;
        const Value* op = f.get("reduce_op");
        p.text = std::string(name) + "(" + (op || args ? reduceOpName(op ? op : argAt(args, 0)) : "sum") + ")";
    } else if (name == "_MaskPartial" || name == "MaskPartial") {
        // An embedding lookup's pending masked sum: the local tensor has the global shape, like Partial.
        p.kind = Placement::Kind::Partial;
        p.text = std::string(name) + "(";
        Shape s;
        int64_t dim = 0;
        if (intList(f.get("offset_shape"), s))
            p.text += "offset_shape=" + listText(s);
        if (const Value* d = f.get("offset_dim"); d && toInt(d, dim))
            p.text += std::string(s.empty() ? "" : ", ") + "offset_dim=" + std::to_string(dim);
        p.text += ")";
    } else {
        p.text = qualifiedName(*cls).substr(0, 80) + "(...)";
        addProblem(problems, "unknown placement type " + qualifiedName(*cls).substr(0, 80));
    }
    return p;
}

struct Mesh {
    Shape shape;
    bool shapeKnown = false;
    std::vector<std::string> names;
    std::string deviceType;
    Shape coordinate;
    bool hasCoordinate = false;
    const SeqValue* ranks = nullptr; // row-major ranks, when the mesh lists them
};

// The size one mode of a CuTe layout stands for: an int, or the product of a nested tuple.
bool layoutModeSize(const Value* v, int64_t& out, int depth = 0)
{
    int64_t i = 0;
    if (v && v->kind == Kind::Int && toInt(v, i) && i >= 0) {
        out = i;
        return true;
    }
    auto* s = asSeq(v);
    if (!s || depth > 4 || s->items.size() > kMaxDims)
        return false;
    int64_t p = 1;
    for (const Value* item : s->items) {
        int64_t x = 0;
        if (!layoutModeSize(item, x, depth + 1) || __builtin_mul_overflow(p, x, &p))
            return false;
    }
    out = p;
    return true;
}

Mesh parseMesh(const Value* v)
{
    Mesh m;
    const Fields f = fieldsOf(v);
    if (auto* t = asTensor(f.get("mesh"))) {
        m.shape.assign(t->size().begin(), t->size().end());
        m.shapeKnown = true;
    } else if (const Value* layout = f.get("_layout")) {
        // torch 2.9+: a CuTe layout (shape, stride); the mesh shape is its top-level sizes.
        const Fields lf = fieldsOf(layout);
        const Value* shape = lf.get("shape", "sizes");
        if (!shape)
            shape = argAt(argsOf(layout), 0);
        if (auto* s = asSeq(shape); s && s->items.size() <= kMaxDims) {
            m.shapeKnown = true;
            for (const Value* mode : s->items) {
                int64_t size = 0;
                if (!layoutModeSize(mode, size)) {
                    m.shapeKnown = false;
                    break;
                }
                m.shape.push_back(size);
            }
            if (!m.shapeKnown)
                m.shape.clear();
        }
    }
    if (auto* names = asSeq(f.get("mesh_dim_names", "_mesh_dim_names")))
        for (size_t i = 0; i < names->items.size() && i < kMaxNames; ++i)
            m.names.emplace_back(strOf(names->items[i]).substr(0, 80));
    m.deviceType = std::string(strOf(f.get("device_type", "_device_type")).substr(0, 40));
    m.hasCoordinate = intList(f.get("_coordinate_on_dim"), m.coordinate);
    m.ranks = asSeq(f.get("_flatten_mesh_list", "_flatten_rank_map"));
    if (m.ranks && m.ranks->kind == Kind::Set)
        m.ranks = nullptr;
    return m;
}

// Row-major index of a coordinate, or -1 when it is outside the mesh.
int64_t ravel(const Shape& coord, const Shape& shape)
{
    if (coord.size() != shape.size())
        return -1;
    int64_t idx = 0;
    for (size_t i = 0; i < shape.size(); ++i) {
        if (coord[i] < 0 || coord[i] >= shape[i] || __builtin_mul_overflow(idx, shape[i], &idx))
            return -1;
        idx += coord[i];
    }
    return idx;
}

// The size a mesh coordinate keeps along a dim after one placement on it.
int64_t pieceSize(int64_t size, const Placement& p, int64_t n, int64_t c)
{
    if (p.kind == Placement::Kind::Shard)
        return chunkPiece(size, n, c).first;
    // _StridedShard: torch.chunk into split_factor pieces, then each piece into n; coordinate c keeps the
    // c-th chunk of every piece (placement_types.py _StridedShard._split_tensor).
    int64_t total = 0;
    for (int64_t j = 0; j < p.splitFactor; ++j)
        total += chunkPiece(chunkPiece(size, p.splitFactor, j).first, n, c).first;
    return total;
}

// The global indices a coordinate's piece holds along one dim of `size`, placement by placement; empty
// when too large to list.
std::vector<int64_t> simulateDim(int64_t size, size_t dim, const std::vector<Placement>& pl, const Shape& mesh,
    const Shape& coord)
{
    std::vector<int64_t> idx(static_cast<size_t>(size));
    std::iota(idx.begin(), idx.end(), 0);
    for (size_t i = 0; i < pl.size(); ++i) {
        const Placement& p = pl[i];
        if (!p.shards() || static_cast<size_t>(p.dim) != dim)
            continue;
        const int64_t len = static_cast<int64_t>(idx.size());
        std::vector<int64_t> next;
        if (p.kind == Placement::Kind::Shard) {
            auto [sz, off] = chunkPiece(len, mesh[i], coord[i]);
            next.assign(idx.begin() + off, idx.begin() + off + sz);
        } else {
            for (int64_t j = 0; j < p.splitFactor; ++j) {
                auto [psz, poff] = chunkPiece(len, p.splitFactor, j);
                auto [csz, coff] = chunkPiece(psz, mesh[i], coord[i]);
                next.insert(next.end(), idx.begin() + poff + coff, idx.begin() + poff + coff + csz);
            }
        }
        idx = std::move(next);
    }
    return idx;
}

// Where the piece of mesh coordinate `coord` sits: torch's compute_local_shape_and_global_offset, placement
// by placement. Returns false when the offsets are not one box (a _StridedShard piece made of several runs,
// or a dim too long to list); `local` is right either way.
bool pieceFor(const Shape& global, const std::vector<Placement>& placements, const Shape& mesh, const Shape& coord,
    Shape& local, Shape& offsets, const std::function<void(size_t)>& charge)
{
    local = global;
    offsets = zeros(global.size());
    bool strided = false;
    for (size_t i = 0; i < placements.size(); ++i) {
        const Placement& p = placements[i];
        if (!p.shards())
            continue;
        const auto d = static_cast<size_t>(p.dim);
        if (p.kind == Placement::Kind::StridedShard) {
            strided = true;
            local[d] = pieceSize(local[d], p, mesh[i], coord[i]);
        } else {
            auto [sz, off] = chunkPiece(local[d], mesh[i], coord[i]);
            local[d] = sz;
            offsets[d] += off;
        }
    }
    if (!strided)
        return true;
    // A _StridedShard piece is one box only for some layouts (FSDP2 + TP): list its indices.
    for (size_t d = 0; d < global.size(); ++d) {
        if (std::none_of(placements.begin(), placements.end(),
                [&](const Placement& p) { return p.kind == Placement::Kind::StridedShard && size_t(p.dim) == d; }))
            continue;
        if (global[d] > kMaxSimulate)
            return false;
        if (charge)
            charge(1 + static_cast<size_t>(global[d]) / 64);
        const std::vector<int64_t> idx = simulateDim(global[d], d, placements, mesh, coord);
        for (size_t k = 1; k < idx.size(); ++k)
            if (idx[k] != idx[0] + static_cast<int64_t>(k))
                return false;
        offsets[d] = idx.empty() ? global[d] : idx[0];
    }
    return true;
}

struct DTensorParts {
    const TensorValue* local = nullptr;
    const Value* spec = nullptr;
};

DTensorParts dtensorState(const TensorValue& t)
{
    const Fields f = fieldsOfState(t.extras().state);
    return { asTensor(f.get("_local_tensor")), f.get("_spec") };
}

bool describeDTensor(const TensorValue& t, Entry& e, const DescribeContext& ctx)
{
    std::vector<std::string> problems;
    auto sh = std::make_shared<Sharding>();
    sh->kind = Sharding::Kind::DTensor;
    const Shape global(t.size().begin(), t.size().end());
    const DTensorParts state = dtensorState(t);

    // The local tensor: the generic description made it a part; take it out and make its bytes ours.
    std::optional<Entry> local = takePart(e, "_local_tensor");
    if (!local && state.local)
        local = ctx.tensorEntry(*state.local, "_local_tensor");
    if (local) {
        adoptLocation(e, *local);
        sh->localShape = local->shape;
        if (e.dtype == DType::Unknown)
            e.dtype = local->dtype;
        else if (local->dtype != DType::Unknown && local->dtype != e.dtype)
            addProblem(problems,
                "the local tensor is " + std::string(dtypeName(local->dtype)) + ", the DTensor "
                    + std::string(dtypeName(e.dtype)));
    } else {
        addProblem(problems, "no _local_tensor in the DTensor state");
    }

    // The spec: mesh, placements, tensor_meta.
    const Fields spec = fieldsOf(state.spec);
    if (!state.spec)
        addProblem(problems, "no _spec in the DTensor state");
    else if (spec.empty())
        addProblem(problems, "_spec is not a DTensorSpec object");
    Mesh mesh = parseMesh(spec.get("mesh"));
    std::vector<Placement> placements;
    if (const Value* pv = spec.get("placements")) {
        auto* seq = asSeq(pv);
        if (!seq || seq->kind == Kind::Set) {
            addProblem(problems, "placements are not a tuple");
        } else if (seq->items.size() > kMaxDims) {
            addProblem(problems, "more placements than mesh dims can be");
        } else {
            ctx.charge(seq->items.size());
            for (const Value* item : seq->items)
                placements.push_back(parsePlacement(item, problems));
        }
    } else if (!spec.empty()) {
        addProblem(problems, "the DTensorSpec has no placements");
    }
    for (const auto& p : placements)
        sh->placements.push_back(p.text);
    // A 1-D mesh that lists its ranks but not its tensor (newer layouts) still has a known shape.
    if (!mesh.shapeKnown && mesh.ranks && placements.size() == 1) {
        mesh.shape = { static_cast<int64_t>(mesh.ranks->items.size()) };
        mesh.shapeKnown = true;
    }
    if (mesh.shapeKnown)
        sh->meshShape = mesh.shape;
    sh->meshDimNames = mesh.names;

    // tensor_meta repeats the global geometry: (shape, stride, dtype) as NEWOBJ args, or a dict.
    if (const Value* tm = spec.get("tensor_meta"); tm && tm->kind != Kind::None) {
        Shape metaShape;
        const Fields mf = fieldsOf(tm);
        const Value* shapeValue = mf.get("shape");
        if (!shapeValue)
            shapeValue = argAt(argsOf(tm), 0);
        if (!shapeValue)
            shapeValue = argAt(asSeq(tm), 0);
        if (intList(shapeValue, metaShape) && metaShape != global)
            addProblem(problems, "tensor_meta says shape " + listText(metaShape) + ", the DTensor " + listText(global));
    }

    // Checks that need a usable mesh and placements.
    bool usable = mesh.shapeKnown && !placements.empty() && local;
    if (mesh.shapeKnown && !placements.empty() && placements.size() != mesh.shape.size()) {
        addProblem(problems,
            std::to_string(placements.size()) + " placements for a " + std::to_string(mesh.shape.size())
                + "-D mesh");
        usable = false;
    }
    for (int64_t s : mesh.shape)
        if (s < 1) {
            addProblem(problems, "mesh shape " + listText(mesh.shape) + " has an empty dim");
            usable = false;
            break;
        }
    for (auto& p : placements) {
        if (!p.shards())
            continue;
        if (p.dim < 0 && p.dim + static_cast<int64_t>(global.size()) >= 0)
            p.dim += static_cast<int64_t>(global.size()); // torch normalises Shard(-1) when it builds one
        if (p.dim < 0 || p.dim >= static_cast<int64_t>(global.size())) {
            addProblem(problems, p.text + " on a " + std::to_string(global.size()) + "-D tensor");
            usable = false;
        }
    }
    if (std::any_of(placements.begin(), placements.end(), [](const Placement& p) { return p.kind == Placement::Kind::Other; }))
        usable = false;
    if (local && local->shape.size() != global.size()) {
        addProblem(problems,
            "the local tensor has " + std::to_string(local->shape.size()) + " dims, the DTensor "
                + std::to_string(global.size()));
        usable = false;
    }
    for (int64_t d : global)
        if (d < 0)
            usable = false;

    const bool coordinateValid = mesh.hasCoordinate && usable && ravel(mesh.coordinate, mesh.shape) >= 0;
    if (mesh.hasCoordinate && usable && !coordinateValid)
        addProblem(problems, "mesh coordinate " + listText(mesh.coordinate) + " lies outside mesh " + listText(mesh.shape));
    if (usable && coordinateValid) {
        Shape expect;
        Shape offsets;
        const bool offsetsKnown = pieceFor(global, placements, mesh.shape, mesh.coordinate, expect, offsets, ctx.charge);
        if (expect != local->shape)
            addProblem(problems,
                "local shape " + listText(local->shape) + " is not the piece mesh coordinate "
                    + listText(mesh.coordinate) + " gets under " + listText(global) + " (" + listText(expect) + ")");
        ShardChunk c;
        if (offsetsKnown)
            c.offsets = offsets;
        c.sizes = local->shape;
        setChunkBytes(c, *local);
        const int64_t at = ravel(mesh.coordinate, mesh.shape);
        int64_t rank = -1;
        if (mesh.ranks && mesh.ranks->items.size() == shapeVolume(mesh.shape) && at >= 0
            && toInt(mesh.ranks->items[static_cast<size_t>(at)], rank) && rank >= 0) {
            c.label = "rank " + std::to_string(rank);
            e.attributes.emplace_back("rank", std::to_string(rank));
        } else {
            c.label = "mesh coordinate " + listText(mesh.coordinate);
        }
        e.attributes.emplace_back("mesh_coordinate", listText(mesh.coordinate));
        sh->chunks.push_back(std::move(c));
    } else if (usable) {
        // The saving rank is not recorded: the local size along each dim must be one some coordinate gets.
        for (size_t d = 0; d < global.size(); ++d) {
            std::vector<size_t> dims; // mesh dims that cut tensor dim d, in placement order
            int64_t combos = 1;
            for (size_t i = 0; i < placements.size(); ++i)
                if (placements[i].shards() && static_cast<size_t>(placements[i].dim) == d) {
                    dims.push_back(i);
                    if (__builtin_mul_overflow(combos, mesh.shape[i], &combos) || combos > kMaxEnumerate)
                        combos = kMaxEnumerate + 1;
                }
            if (dims.empty()) {
                if (local->shape[d] != global[d])
                    addProblem(problems,
                        "local size " + std::to_string(local->shape[d]) + " along dim " + std::to_string(d)
                            + " differs from the global " + std::to_string(global[d]) + ", which no placement shards");
                continue;
            }
            if (combos > kMaxEnumerate)
                continue;
            ctx.charge(static_cast<size_t>(combos));
            Shape coord = zeros(placements.size());
            bool found = false;
            for (int64_t k = 0; k < combos && !found; ++k) {
                int64_t rest = k;
                for (size_t j = dims.size(); j-- > 0;) {
                    coord[dims[j]] = rest % mesh.shape[dims[j]];
                    rest /= mesh.shape[dims[j]];
                }
                int64_t size = global[d];
                for (size_t i : dims)
                    size = pieceSize(size, placements[i], mesh.shape[i], coord[i]);
                found = size == local->shape[d];
            }
            if (!found)
                addProblem(problems,
                    "local size " + std::to_string(local->shape[d]) + " along dim " + std::to_string(d)
                        + " is not a torch.chunk piece of " + std::to_string(global[d]) + " under "
                        + [&] {
                              std::string s;
                              for (size_t i : dims)
                                  s += (s.empty() ? "" : ", ") + placements[i].text + " over "
                                      + std::to_string(mesh.shape[i]);
                              return s;
                          }());
        }
    }
    if (!mesh.deviceType.empty())
        e.attributes.emplace_back("mesh_device_type", mesh.deviceType);
    if (!mesh.shapeKnown && state.spec)
        e.attributes.emplace_back("mesh_shape", "unknown (the device mesh has no rank tensor or layout)");

    eraseAttributes(e, { "storage", "_spec", "_local_tensor" });
    finishProblems(e, problems);
    e.sharding = std::move(sh);
    return true;
}

// ---------------------------------------------------------------------------------------------------
// ShardedTensor

struct ShardMeta {
    Shape offsets;
    Shape sizes;
    int64_t rank = -1;
    std::string label;
    bool valid = false;
};

ShardMeta parseShardMetadata(const Value* v, size_t index)
{
    ShardMeta m;
    const Fields f = fieldsOf(v);
    m.valid = intList(f.get("shard_offsets"), m.offsets) && intList(f.get("shard_sizes"), m.sizes);
    const Value* placement = f.get("placement");
    if (std::string_view text = strOf(placement); !text.empty()) {
        // "rank:1/cuda:1" as a string (before __post_init__ turned it into a _remote_device).
        if (text.starts_with("rank:")) {
            int64_t r = 0;
            size_t i = 5;
            for (; i < text.size() && i < 20 && std::isdigit(static_cast<unsigned char>(text[i])); ++i)
                r = r * 10 + (text[i] - '0');
            if (i > 5)
                m.rank = r;
        }
    } else if (!fieldsOf(placement).empty()) {
        const Fields pf = fieldsOf(placement);
        int64_t r = -1;
        if (const Value* rv = pf.get("_rank"); rv && rv->kind == Kind::Int && toInt(rv, r) && r >= 0)
            m.rank = r;
        else if (std::string_view worker = strOf(pf.get("_worker_name")); !worker.empty())
            m.label = "worker " + std::string(worker.substr(0, 60));
    }
    if (m.rank >= 0)
        m.label = "rank " + std::to_string(m.rank);
    else if (m.label.empty())
        m.label = "shard " + std::to_string(index);
    return m;
}

std::string shardingSpecText(const Value* v)
{
    auto* o = asObject(v);
    const GlobalValue* cls = o ? o->cls() : nullptr;
    if (!cls)
        return {};
    const Fields f = fieldsOf(v);
    std::string name(cls->name.substr(0, 60));
    int64_t dim = 0;
    if (const Value* d = f.get("dim"); d && toInt(d, dim))
        return name + "(dim=" + std::to_string(dim) + ")";
    if (auto* shards = asSeq(f.get("shards")))
        return name + "(" + std::to_string(shards->items.size()) + " shards)";
    return name;
}

bool boxesOverlap(const ShardMeta& a, const ShardMeta& b)
{
    for (size_t d = 0; d < a.offsets.size(); ++d) {
        if (a.sizes[d] == 0 || b.sizes[d] == 0)
            return false;
        if (a.offsets[d] + a.sizes[d] <= b.offsets[d] || b.offsets[d] + b.sizes[d] <= a.offsets[d])
            return false;
    }
    return true;
}

bool describeShardedTensor(const TensorValue& t, Entry& e, const DescribeContext& ctx)
{
    std::vector<std::string> problems;
    auto sh = std::make_shared<Sharding>();
    const Shape global(t.size().begin(), t.size().end());
    sh->kind = global.size() == 1 && isFlatParamName(e.name) ? Sharding::Kind::FlatParameter
                                                             : Sharding::Kind::ShardedTensor;

    // (local_shards, metadata, pg_state, sharding_spec, init_rrefs); a dict state is read by attribute name.
    const Value* localShards = nullptr;
    const Value* metadata = nullptr;
    const Value* pgState = nullptr;
    const Value* spec = nullptr;
    if (auto* s = asSeq(t.extras().state);
        s && s->kind == Kind::Tuple && s->items.size() >= 2 && s->items.size() <= 6) {
        localShards = s->items[0];
        metadata = s->items[1];
        pgState = argAt(s, 2);
        spec = argAt(s, 3);
    } else {
        const Fields f = fieldsOfState(t.extras().state);
        localShards = f.get("_local_shards");
        metadata = f.get("_metadata");
        spec = f.get("_sharding_spec");
    }
    if (!localShards && !metadata)
        addProblem(problems, "the ShardedTensor state is not (local_shards, metadata, ...)");

    // Every rank's shard, from the metadata.
    const Fields md = fieldsOf(metadata);
    if (metadata && md.empty())
        addProblem(problems, "the ShardedTensor metadata is not a ShardedTensorMetadata object");
    Shape metaSize;
    if (intList(md.get("size"), metaSize) && metaSize != global)
        addProblem(problems, "its metadata says size " + listText(metaSize) + ", the wrapper " + listText(global));
    // TensorProperties: the dtype of the data as the metadata records it.
    if (const Value* props = md.get("tensor_properties")) {
        const Value* dt = fieldsOf(props).get("dtype");
        if (!dt)
            dt = argAt(asSeq(asObject(props) ? asObject(props)->state : nullptr), 0);
        if (auto* g = asGlobal(dt); g && g->id == KnownGlobal::TorchDType && g->dtype != e.dtype) {
            if (e.dtype == DType::Unknown)
                e.dtype = g->dtype;
            else
                addProblem(problems,
                    "its metadata says " + std::string(dtypeName(g->dtype)) + ", the wrapper "
                        + std::string(dtypeName(e.dtype)));
        }
    }
    std::vector<ShardMeta> shards;
    if (auto* list = asSeq(md.get("shards_metadata"))) {
        if (list->items.size() > kMaxShards) {
            e.attributes.emplace_back("shards", std::to_string(list->items.size()) + " in the metadata (not listed)");
        } else if (list->items.size() > kMaxOverlapCheck && ctx.firstUse && !ctx.firstUse(list)) {
            e.attributes.emplace_back("shards", std::to_string(list->items.size()) + " in the metadata (not listed again)");
            addProblem(problems, "its shard list is the same object as another tensor's (a hostile or broken file)");
        } else {
            // A shard costs about as much as walking a few dozen nodes (its metadata object, lists and
            // placement, then a chunk); one list shared by many tensors must exhaust the walk's budget.
            ctx.charge(list->items.size() * kShardCost);
            shards.reserve(list->items.size());
            for (size_t i = 0; i < list->items.size(); ++i)
                shards.push_back(parseShardMetadata(list->items[i], i));
        }
    } else if (!md.empty()) {
        addProblem(problems, "the metadata lists no shards");
    }

    // Checks over the metadata: every shard inside the tensor, together covering it once.
    bool boxesValid = true;
    uint64_t covered = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
        const ShardMeta& s = shards[i];
        bool ok = s.valid && s.offsets.size() == global.size() && s.sizes.size() == global.size();
        for (size_t d = 0; ok && d < global.size(); ++d) {
            int64_t end = 0;
            ok = s.offsets[d] >= 0 && s.sizes[d] >= 0 && !__builtin_add_overflow(s.offsets[d], s.sizes[d], &end)
                && end <= global[d];
        }
        if (!ok) {
            boxesValid = false;
            addProblem(problems,
                "metadata shard " + std::to_string(i) + " (" + s.label + ", offsets " + listText(s.offsets)
                    + ", sizes " + listText(s.sizes) + ") does not lie inside " + listText(global));
            continue;
        }
        if (__builtin_add_overflow(covered, shapeVolume(s.sizes), &covered))
            covered = UINT64_MAX;
    }
    if (boxesValid && !shards.empty()) {
        bool overlap = false;
        if (shards.size() <= kMaxOverlapCheck) {
            ctx.charge(shards.size() * shards.size() / 64 + 1);
            for (size_t i = 0; i < shards.size() && !overlap; ++i)
                for (size_t j = i + 1; j < shards.size() && !overlap; ++j)
                    if (boxesOverlap(shards[i], shards[j])) {
                        overlap = true;
                        addProblem(problems, "metadata shards " + std::to_string(i) + " and " + std::to_string(j) + " overlap");
                    }
        }
        if (!overlap && covered != shapeVolume(global))
            addProblem(problems,
                "the metadata shards cover " + std::to_string(covered) + " of " + std::to_string(shapeVolume(global))
                    + " elements");
    }
    sh->chunks.reserve(shards.size());
    for (const ShardMeta& s : shards) {
        ShardChunk c;
        c.offsets = s.offsets;
        c.sizes = s.sizes;
        c.label = s.label;
        sh->chunks.push_back(std::move(c));
    }

    // The process group at save time: which rank wrote this file.
    const Fields pg = fieldsOf(pgState);
    int64_t rank = -1;
    int64_t world = -1;
    if (const Value* r = pg.get("global_rank"); r && r->kind == Kind::Int)
        toInt(r, rank);
    if (const Value* w = pg.get("global_world_size"); w && w->kind == Kind::Int)
        toInt(w, world);
    if (rank >= 0)
        e.attributes.emplace_back("rank", std::to_string(rank));
    if (world >= 0)
        e.attributes.emplace_back("world_size", std::to_string(world));
    if (std::string text = shardingSpecText(spec); !text.empty())
        e.attributes.emplace_back("sharding_spec", std::move(text));

    // This rank's shards: tensors whose bytes are in this file.
    std::vector<Entry> locals;
    if (auto* list = asSeq(localShards)) {
        ctx.charge(list->items.size());
        for (size_t i = 0; i < list->items.size() && i < kMaxShards; ++i) {
            const Fields sf = fieldsOf(list->items[i]);
            auto* tensor = asTensor(sf.get("tensor"));
            if (!tensor) {
                addProblem(problems, "local shard " + std::to_string(i) + " holds no tensor");
                continue;
            }
            Entry le = ctx.tensorEntry(*tensor, "local_shards." + std::to_string(i));
            const ShardMeta own = parseShardMetadata(sf.get("metadata"), i);
            if (own.valid && own.sizes != le.shape)
                addProblem(problems,
                    "local shard " + std::to_string(i) + " is " + listText(le.shape) + " but its metadata says "
                        + listText(own.sizes));
            if (own.valid && rank >= 0 && own.rank >= 0 && own.rank != rank)
                addProblem(problems,
                    "local shard " + std::to_string(i) + " is placed on rank " + std::to_string(own.rank)
                        + " but rank " + std::to_string(rank) + " saved it");
            if (le.dtype != DType::Unknown && e.dtype != DType::Unknown && le.dtype != e.dtype)
                addProblem(problems,
                    "local shard " + std::to_string(i) + " is " + std::string(dtypeName(le.dtype)) + ", the tensor "
                        + std::string(dtypeName(e.dtype)));
            bool matched = false;
            for (auto& c : sh->chunks)
                if (own.valid && c.file < 0 && c.offsets == own.offsets && c.sizes == own.sizes) {
                    setChunkBytes(c, le);
                    matched = true;
                    break;
                }
            if (own.valid && !matched && !shards.empty())
                addProblem(problems, "local shard " + std::to_string(i) + " is not among the metadata's shards");
            locals.push_back(std::move(le));
        }
    } else if (localShards) {
        addProblem(problems, "local_shards is not a list");
    }
    if (locals.size() == 1) {
        adoptLocation(e, locals.front());
        sh->localShape = locals.front().shape;
    } else {
        // None: this rank holds no piece (a dim smaller than the world). Several: each keeps its bytes.
        e.attributes.emplace_back("local_shards",
            std::to_string(locals.size()) + (locals.empty() ? " (this rank holds no piece of it)" : ""));
        for (auto& le : locals)
            e.parts.push_back(std::move(le));
    }

    eraseAttributes(e, { "storage" });
    finishProblems(e, problems);
    e.sharding = std::move(sh);
    return true;
}

} // namespace

std::pair<int64_t, int64_t> chunkPiece(int64_t size, int64_t pieces, int64_t index)
{
    if (pieces <= 0 || size < 0 || index < 0 || index >= pieces)
        return { 0, std::max<int64_t>(size, 0) };
    if (size % pieces == 0) {
        const int64_t full = size / pieces;
        return { full, full * index };
    }
    const int64_t full = size / pieces + 1;
    int64_t start = 0;
    if (__builtin_mul_overflow(full, index, &start) || start > size)
        return { 0, size };
    return { std::min(size - start, full), start };
}

bool dtensorPiece(const Shape& global, const std::vector<std::string>& placements, const Shape& meshShape,
    const Shape& coord, Shape& local, Shape& offsets)
{
    if (placements.size() != meshShape.size() || ravel(coord, meshShape) < 0)
        return false;
    // Back from the texts describeDTensor wrote: "Shard(dim=N)", "_StridedShard(dim=N, sf=M)"; the others
    // leave the local shape alone.
    std::vector<Placement> pl;
    for (const std::string& text : placements) {
        Placement p;
        long long dim = 0;
        long long sf = 0;
        if (std::sscanf(text.c_str(), "Shard(dim=%lld)", &dim) == 1) {
            p.kind = Placement::Kind::Shard;
        } else if (std::sscanf(text.c_str(), "_StridedShard(dim=%lld, sf=%lld)", &dim, &sf) == 2 && sf >= 1) {
            p.kind = Placement::Kind::StridedShard;
            p.splitFactor = sf;
        } else if (text == "Replicate()" || text.find("Partial(") != std::string::npos) {
            p.kind = Placement::Kind::Replicate;
        } else {
            return false;
        }
        if (p.shards() && (dim < 0 || dim >= static_cast<long long>(global.size())))
            return false;
        p.dim = dim;
        pl.push_back(p);
    }
    for (int64_t d : global)
        if (d < 0)
            return false;
    return pieceFor(global, pl, meshShape, coord, local, offsets, {});
}

bool isFlatParamName(std::string_view name)
{
    const std::string_view last = lastComponent(name);
    return last == "flat_param" || last == "_flat_param";
}

bool isDTensorClass(const GlobalValue* cls)
{
    return cls && cls->name == "DTensor" && std::string_view(cls->module).starts_with("torch.distributed.");
}

bool isShardedTensorClass(const GlobalValue* cls)
{
    return cls && cls->name == "ShardedTensor" && std::string_view(cls->module).starts_with("torch.distributed.");
}

bool describeDistributedTensor(const TensorValue& t, Entry& e, const DescribeContext& ctx)
{
    if (isDTensorClass(t.extras().subclass))
        return describeDTensor(t, e, ctx);
    if (isShardedTensorClass(t.extras().subclass))
        return describeShardedTensor(t, e, ctx);
    return false;
}

void reportDistributedFindings(Source& s, std::span<const size_t> candidates)
{
    constexpr size_t kMaxProblemFindings = 50;
    size_t problems = 0;
    std::vector<std::string> flat;
    std::string firstFlat;
    for (size_t i : candidates) {
        Entry& e = s.entries[i];
        // A plain 1-D tensor under a flat_param key: an FSDP flat parameter without its ShardedTensor
        // wrapper. Its global (unsharded) size is not in the file.
        if (!e.sharding && e.kind == EntryKind::Tensor && e.typeName.empty() && e.shape.size() == 1
            && isFlatParamName(e.name)) {
            auto sh = std::make_shared<Sharding>();
            sh->kind = Sharding::Kind::FlatParameter;
            sh->localShape = e.shape;
            e.sharding = std::move(sh);
            e.attributes.emplace_back("global_shape", "unknown (a plain flat parameter: this rank's slice only)");
            e.shape.clear();
            e.shapeKnown = false;
        }
        if (e.sharding && e.sharding->kind == Sharding::Kind::FlatParameter) {
            if (flat.empty())
                firstFlat = e.name;
            if (flat.size() < 4)
                flat.push_back(e.name);
            else if (flat.size() == 4)
                flat.emplace_back("...");
        }
        if (const std::string* p = e.attribute("sharding_problem")) {
            if (problems++ < kMaxProblemFindings)
                s.addFinding(Severity::Warning, "tensor " + e.name + ": " + *p, e.name);
        }
    }
    if (problems > kMaxProblemFindings)
        s.addFinding(Severity::Warning,
            std::to_string(problems - kMaxProblemFindings) + " more tensors have sharding problems (see their "
                                                            "sharding_problem attribute)",
            s.entries.empty() ? std::string() : s.entries.front().name);
    if (!flat.empty()) {
        std::string names;
        for (const auto& n : flat)
            names += (names.empty() ? "" : ", ") + n;
        s.addFinding(Severity::Warning,
            "FSDP LOCAL_STATE_DICT flat parameters (" + names
                + "): each holds this rank's 1-D slice of an FSDP unit's flattened parameters, and the original "
                  "parameter names and shapes are not in this file, so it cannot be matched with a model or "
                  "another checkpoint key by key; save a FULL_STATE_DICT or SHARDED_STATE_DICT (or use "
                  "torch.distributed.checkpoint) instead",
            firstFlat);
    }
}

} // namespace sl::distributed
