#include "state_dict_tree.h"

#include "torch/tensor_entries.h"
#include "distributed/distributed_tensors.h"
#include "pickle/value_repr.h"
#include "quant/quantized_tensors.h"
#include "util/error.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace sl::torch {

using namespace sl::pickle;


namespace {

constexpr int kMaxDepth = 64;
constexpr size_t kMaxVisits = 50'000'000;

constexpr std::string_view kPreferredKeys[] = { "state_dict", "model_state_dict", "model", "module", "net",
    "network", "model_state", "weights", "params" };

std::string joinPath(const std::string& prefix, const std::string& key)
{
    if (prefix.empty())
        return key;
    return prefix + "." + key;
}

// The attribute dict of an object: BUILD state as a dict, or the slots dict of a (dict, slots) pair.
const DictValue* objectAttributes(const ObjectValue* o, const DictValue** slots = nullptr)
{
    if (!o)
        return nullptr;
    if (auto* d = asDict(o->state))
        return d;
    if (auto* t = asSeq(o->state); t && t->kind == Kind::Tuple && t->items.size() == 2) {
        if (slots)
            *slots = asDict(t->items[1]);
        if (auto* d = asDict(t->items[0]))
            return d;
        return asDict(t->items[1]);
    }
    return nullptr;
}

bool isModuleObject(const Value* v)
{
    auto* attrs = objectAttributes(asObject(v));
    return attrs && attrs->lookup("_parameters") && attrs->lookup("_modules");
}

// A torch tensor. numpy arrays (rng states, metrics) are tensor-like values but never state-dict weights,
// so they do not make a dict a state dict.
bool isTorchTensor(const Value* v)
{
    return v && v->kind == Kind::Tensor && static_cast<const TensorValue*>(v)->origin != TensorOrigin::Numpy;
}

// Optimizer.state_dict(): {"state": {pid: {...}}, "param_groups": [...]}. Some writers drop param_groups;
// a "state" dict keyed by integer parameter ids is enough to recognise one.
bool isOptimizerDict(const Value* v)
{
    auto* d = asDict(v);
    if (!d)
        return false;
    auto* state = asDict(d->lookup("state"));
    if (!state)
        return false;
    auto* groups = d->lookup("param_groups");
    if (groups && (groups->kind == Kind::List || groups->kind == Kind::Tuple))
        return true;
    auto isParamId = [](const Value* k) {
        if (k->kind == Kind::Int)
            return true;
        auto* s = asStr(k);
        return s && !s->s.empty() && std::all_of(s->s.begin(), s->s.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    };
    return !state->items.empty() && std::all_of(state->items.begin(), state->items.end(), [&](const auto& kv) {
        return isParamId(kv.first) && kv.second->kind == Kind::Dict;
    });
}

bool tupleHoldsTensor(const Value* v)
{
    auto* s = asSeq(v);
    if (!s || v->kind != Kind::Tuple)
        return false;
    return std::any_of(s->items.begin(), s->items.end(), isTorchTensor);
}

// Tensors held directly: as values, or inside a tuple value (torch.ao packed params).
size_t directTensors(const DictValue* d)
{
    size_t n = 0;
    for (const auto& [k, v] : d->items)
        if (isTorchTensor(v) || tupleHoldsTensor(v))
            ++n;
    return n;
}

// Whether a subtree holds tensors, memoised per node (the graph is a DAG with possible cycles).
class TensorPresence {
public:
    bool operator()(const Value* v, int depth = 0)
    {
        if (!v || depth > kMaxDepth)
            return false;
        if (v->kind == Kind::Tensor)
            return isTorchTensor(v);
        auto memo = m_memo.find(v);
        if (memo != m_memo.end())
            return memo->second;
        m_memo[v] = false; // breaks cycles
        bool found = false;
        if (auto* d = asDict(v)) {
            for (const auto& [k, item] : d->items)
                if ((found = (*this)(item, depth + 1)))
                    break;
        } else if (auto* s = asSeq(v)) {
            for (auto* item : s->items)
                if ((found = (*this)(item, depth + 1)))
                    break;
        } else if (isModuleObject(v)) {
            found = true;
        }
        m_memo[v] = found;
        return found;
    }

private:
    std::unordered_map<const Value*, bool> m_memo;
};

// The role one token of a key names, if any, compared case-insensitively in place: keys can be long and
// come from the file, so tokens are not copied.
std::optional<ContainerInfo::Role> tokenRole(std::string_view tok)
{
    char low[11]; // the longest word below ("schedulers") and one more, so longer tokens cannot match it
    const size_t n = std::min(tok.size(), sizeof low);
    for (size_t i = 0; i < n; ++i)
        low[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(tok[i])));
    const std::string_view l(low, n);
    if (l.substr(0, 5) == "optim")
        return ContainerInfo::Role::Optimizer;
    if (tok.size() > sizeof low - 1)
        return std::nullopt;
    if (l == "ema" || l == "shadow" || l == "swa" || l == "averaged")
        return ContainerInfo::Role::Ema;
    if (l == "callbacks" || l == "loops" || l == "scaler" || l == "scheduler" || l == "schedulers" || l == "rng")
        return ContainerInfo::Role::Other;
    return std::nullopt;
}

// Children that can hold containers; everything else (tensors, scalars, strings) is a leaf for the scan.
bool canHoldContainers(const Value* v)
{
    switch (v->kind) {
    case Kind::Dict:
    case Kind::List:
    case Kind::Tuple:
    case Kind::Object:
        return true;
    default:
        return false;
    }
}

// Nodes, references and string bytes (in 64-byte units) reachable from root, each node counted once.
size_t graphWeight(const Value* root)
{
    std::unordered_set<const Value*> seen;
    std::vector<const Value*> todo;
    size_t weight = 0;
    auto push = [&](const Value* v) {
        ++weight;
        if (v && seen.insert(v).second)
            todo.push_back(v);
    };
    push(root);
    while (!todo.empty()) {
        const Value* v = todo.back();
        todo.pop_back();
        switch (v->kind) {
        case Kind::Str:
        case Kind::Bytes:
            weight += static_cast<const StrValue*>(v)->s.size() / 64;
            break;
        case Kind::Tuple:
        case Kind::List:
        case Kind::Set:
            for (auto* i : static_cast<const SeqValue*>(v)->items)
                push(i);
            break;
        case Kind::Dict: {
            auto* d = static_cast<const DictValue*>(v);
            for (const auto& [k, i] : d->items) {
                push(k);
                push(i);
            }
            push(d->state);
            break;
        }
        case Kind::Object: {
            auto* o = static_cast<const ObjectValue*>(v);
            for (const Value* i : { o->callable, o->args, o->kwargs, o->state })
                push(i);
            for (auto* i : o->listItems())
                push(i);
            for (const auto& [k, i] : o->dictItems()) {
                push(k);
                push(i);
            }
            break;
        }
        case Kind::Tensor: {
            const TensorExtras& x = static_cast<const TensorValue*>(v)->extras();
            push(x.state);
            for (auto* i : x.components)
                push(i);
            if (x.quant) {
                push(x.quant->scales);
                push(x.quant->zeroPoints);
            }
            break;
        }
        default:
            break;
        }
    }
    return weight;
}

std::string joinComponents(const std::vector<std::string>& path)
{
    std::string out;
    for (const auto& c : path) {
        if (!out.empty())
            out += '.';
        out += c;
    }
    return out;
}

class Scanner {
public:
    Scanner(ContainerScan& out, WalkBudget& budget)
        : m_out(out)
        , m_budget(budget)
    {
    }

    void visit(const Value* v)
    {
        if (!v || ++m_visits > kMaxVisits)
            throw FormatError("the pickled object graph is too large to walk (shared subtrees?)");
        m_budget.charge(1);
        if (v->kind == Kind::Tensor) {
            m_out.totalTensors += isTorchTensor(v);
            return;
        }
        if (m_path.size() >= kMaxDepth || !m_onPath.insert(v).second)
            return; // too deep, or a cycle back to an ancestor
        visitChildren(v);
        m_onPath.erase(v);
    }

private:
    // Optimizer states, pickled modules and nested module trees are one container each: the dicts inside
    // them are parts of it, not candidates of their own.
    bool addWhole(const Value* v, Container::Shape shape, ContainerInfo::Role role)
    {
        add(v, shape, role, 0);
        m_enclosing.emplace_back(shape, role);
        return true;
    }
    void leaveWhole(bool whole)
    {
        if (whole)
            m_enclosing.pop_back();
    }

    // A dict without tensors of its own whose values include two or more dicts of model weights:
    // {"encoder": {...}, "decoder": {...}} flattens to what the parent module's state_dict() would be.
    bool isNestedModuleTree(const DictValue* d)
    {
        if (directTensors(d))
            return false;
        size_t branches = 0;
        const bool pathIsModel = pathRole() == ContainerInfo::Role::Model;
        for (const auto& [k, item] : d->items) {
            if (!pathIsModel || item->kind != Kind::Dict || !m_hasTensors(item))
                continue;
            if (roleForKey(keyString(k)) == ContainerInfo::Role::Model && !isOptimizerDict(item))
                ++branches;
        }
        return branches >= 2;
    }

    void add(const Value* v, Container::Shape shape, ContainerInfo::Role role, size_t direct)
    {
        // Everything inside an optimizer state or a pickled module belongs to it. Inside a nested module
        // tree only the model dicts do: an optimizer, an EMA copy or a scaler beside them stays selectable.
        for (const auto& [outerShape, outerRole] : m_enclosing) {
            if (outerShape != Container::Shape::Dict)
                return;
            if (shape == Container::Shape::Dict && role == outerRole)
                return;
        }
        Container c;
        c.node = v;
        c.shape = shape;
        c.info.path = joinComponents(m_path);
        m_budget.charge(1 + c.info.path.size() / 64);
        c.info.role = role;
        c.info.tensorCount = direct; // replaced by the flattened count once every container is known
        m_out.containers.push_back(std::move(c));
    }

    // roleForPath(m_path), kept per level: the first component that names a role decides it, so a path's
    // role is its parent's unless that is Model, then the new key's. Re-tokenising the whole path on every
    // visit made deep paths quadratic.
    ContainerInfo::Role pathRole() const { return m_pathRoles.empty() ? ContainerInfo::Role::Model : m_pathRoles.back(); }

    // Leaves cost one visit and no key: a 100,000-tensor state dict would otherwise build 100,000 key
    // strings just to learn that tensors hold no containers.
    bool leaf(const Value* v)
    {
        if (canHoldContainers(v))
            return false;
        if (++m_visits > kMaxVisits)
            throw FormatError("the pickled object graph is too large to walk (shared subtrees?)");
        m_budget.charge(1);
        m_out.totalTensors += isTorchTensor(v);
        return true;
    }

    void child(const std::string& key, const Value* v)
    {
        m_budget.charge(key.size() / 64);
        ContainerInfo::Role parent = pathRole();
        m_pathRoles.push_back(parent != ContainerInfo::Role::Model ? parent : roleForKey(key));
        m_path.push_back(key);
        visit(v);
        m_path.pop_back();
        m_pathRoles.pop_back();
    }

    void visitChildren(const Value* v)
    {
        switch (v->kind) {
        case Kind::Dict: {
            auto* d = static_cast<const DictValue*>(v);
            bool whole = false;
            if (isOptimizerDict(v))
                whole = addWhole(v, Container::Shape::Optimizer, ContainerInfo::Role::Optimizer);
            else if (size_t direct = directTensors(d))
                add(v, Container::Shape::Dict, pathRole(), direct);
            else if (isNestedModuleTree(d))
                whole = addWhole(v, Container::Shape::Dict, pathRole());
            for (const auto& [k, item] : d->items)
                if (!leaf(item))
                    child(keyString(k), item);
            leaveWhole(whole);
            return;
        }
        case Kind::List:
        case Kind::Tuple: {
            auto* s = static_cast<const SeqValue*>(v);
            // A bare list or tuple of tensors at the top (torch.save([t1, t2])) is a container of its own.
            if (m_path.empty()
                && std::any_of(s->items.begin(), s->items.end(), isTorchTensor))
                add(v, Container::Shape::Sequence, ContainerInfo::Role::Model, s->items.size());
            for (size_t i = 0; i < s->items.size(); ++i)
                if (!leaf(s->items[i]))
                    child(std::to_string(i), s->items[i]);
            return;
        }
        case Kind::Object: {
            auto* o = static_cast<const ObjectValue*>(v);
            bool whole = isModuleObject(v) && addWhole(v, Container::Shape::Module, pathRole());
            const DictValue* slots = nullptr;
            if (auto* attrs = objectAttributes(o, &slots))
                for (const auto& [k, item] : attrs->items)
                    if (!leaf(item))
                        child(keyString(k), item);
            if (slots && slots != objectAttributes(o))
                for (const auto& [k, item] : slots->items)
                    if (!leaf(item))
                        child(keyString(k), item);
            for (const auto& [k, item] : o->dictItems())
                if (!leaf(item))
                    child(keyString(k), item);
            for (size_t i = 0; i < o->listItems().size(); ++i)
                if (!leaf(o->listItems()[i]))
                    child(std::to_string(i), o->listItems()[i]);
            leaveWhole(whole);
            return;
        }
        default:
            return;
        }
    }

    ContainerScan& m_out;
    WalkBudget& m_budget;
    TensorPresence m_hasTensors;
    std::vector<std::pair<Container::Shape, ContainerInfo::Role>> m_enclosing; // whole containers we are inside
    std::vector<std::string> m_path;
    std::vector<ContainerInfo::Role> m_pathRoles; // pathRole() of m_path's prefixes
    std::unordered_set<const Value*> m_onPath;
    size_t m_visits = 0;
};

// Appends a dict key as a name component: strings as they are, ints in decimal, anything else as a short
// repr (keyString without the temporary string).
void appendKey(std::string& out, const Value* k)
{
    if (k->kind == Kind::Str || k->kind == Kind::Bytes) {
        out += static_cast<const StrValue*>(k)->s;
    } else if (k->kind == Kind::Int) {
        char buf[24];
        auto [end, ec] = std::to_chars(buf, buf + sizeof buf, static_cast<const IntValue*>(k)->v);
        out.append(buf, end);
    } else {
        out += keyString(k);
    }
}

// Turns a container into entries. In counting mode it only counts the tensors it would emit.
// The name being built lives in one buffer that grows and shrinks as the walk descends and returns, so
// only an entry's own copy of its name is allocated.
class Flattener {
public:
    // `roles` maps every container's node to its role (containerRoles); built once per scan, not per
    // container, since a scan can hold as many containers as the graph has dicts.
    Flattener(const Container& self, const EntryContext& ctx, Source* out,
        const std::unordered_map<const Value*, ContainerInfo::Role>& roles, WalkBudget& budget)
        : m_self(self)
        , m_ctx(ctx)
        , m_out(out)
        , m_containerRole(roles)
        , m_budget(budget)
    {
    }

    size_t run()
    {
        const Value* v = m_self.node;
        m_name.clear();
        m_heldKey = {};
        switch (m_self.shape) {
        case Container::Shape::Module:
            flattenModule(static_cast<const ObjectValue*>(v), 0);
            break;
        case Container::Shape::Sequence: {
            if (v->kind == Kind::Tensor) { // torch.save(tensor)
                flattenValue(v, 1);
                break;
            }
            auto* s = static_cast<const SeqValue*>(v);
            flattenSequence(*s, 1);
            break;
        }
        case Container::Shape::Dict:
        case Container::Shape::Optimizer:
            flattenItems(static_cast<const DictValue*>(v)->items, 1);
            break;
        }
        return m_tensors;
    }

    // Storages that more than one emitted tensor uses (tied weights, views); empty when none is shared,
    // which lets the shared-storage report skip its work on ordinary state dicts.
    bool anyStorageShared() const { return m_anyShared; }
    // The entries emitted with attributes, sharding or a flat parameter's one dimension (mayHaveDistributedFinding),
    // ascending: the only ones the entry-level findings look at, picked while each entry is still in the cache.
    const std::vector<size_t>& flagged() const { return m_flagged; }

    // Emit rows into `rows` instead of entries; run() then throws NotPlain at the first entry that is not a
    // plain tensor.
    void emitRowsInto(TensorRows& rows) { m_rows = &rows; }
    struct NotPlain { };

private:
    bool excluded(const Value* v) const
    {
        // A nested container with another role (an optimizer inside a training dict) is selectable on its
        // own and stays out of this one. Only dicts, lists and objects can be containers.
        if (!canHoldContainers(v))
            return false;
        auto it = m_containerRole.find(v);
        return it != m_containerRole.end() && v != m_self.node && it->second != m_self.info.role;
    }

    bool hasTensors(const Value* v, int depth) { return m_hasTensors(v, depth); }

    // Name components: ".key" (or "key" at the top), undone by resize(base) after the child.
    size_t pushKey(const Value* k)
    {
        const size_t base = m_name.size();
        if (base)
            m_name += '.';
        else // a top-level key: its text is the whole name until something is appended to it
            m_heldKey = k->kind == Kind::Str || k->kind == Kind::Bytes ? static_cast<const StrValue*>(k)->s
                                                                       : std::string_view {};
        appendKey(m_name, k);
        return base;
    }
    size_t pushIndex(size_t i)
    {
        const size_t base = m_name.size();
        if (base)
            m_name += '.';
        else
            m_heldKey = {};
        char buf[24];
        auto [end, ec] = std::to_chars(buf, buf + sizeof buf, i);
        m_name.append(buf, end);
        return base;
    }

    void flattenItems(std::span<const std::pair<Value*, Value*>> items, int depth)
    {
        for (const auto& [k, v] : items) {
            if (!m_out && v->kind == Kind::Tensor && (k->kind == Kind::Str || k->kind == Kind::Bytes)) {
                // Counting a tensor under a text key: what flattenValue does for it, charged for the name's
                // length without writing the name (the scan counts every container of a 76,800-tensor file).
                const size_t key = static_cast<const StrValue*>(k)->s.size();
                countTensor(m_name.size() + (m_name.empty() ? 0 : 1) + key, depth);
                continue;
            }
            const size_t base = pushKey(k);
            flattenValue(v, depth);
            m_name.resize(base);
        }
    }

    void flattenSequence(const SeqValue& s, int depth)
    {
        for (size_t i = 0; i < s.items.size(); ++i) {
            const size_t base = pushIndex(i);
            flattenValue(s.items[i], depth);
            m_name.resize(base);
        }
    }

    // A tensor value under a name of `nameSize` bytes, in counting mode: flattenValue's visit, charge and
    // depth check (a tensor is never an excluded container).
    void countTensor(size_t nameSize, int depth)
    {
        if (++m_visits > kMaxVisits)
            throw FormatError("the state dict is too large to flatten (shared subtrees?)");
        m_budget.charge(1 + nameSize / 64);
        if (depth <= kMaxDepth)
            ++m_tensors;
    }

    void flattenValue(const Value* v, int depth)
    {
        if (!m_out && v->kind == Kind::Tensor) {
            countTensor(m_name.size(), depth);
            return;
        }
        if (++m_visits > kMaxVisits)
            throw FormatError("the state dict is too large to flatten (shared subtrees?)");
        m_budget.charge(1 + m_name.size() / 64);
        if (depth > kMaxDepth || excluded(v))
            return;
        switch (v->kind) {
        case Kind::Tensor:
            ++m_tensors;
            if (m_out)
                emitTensor(*static_cast<const TensorValue*>(v));
            return;
        case Kind::Dict:
            if (hasTensors(v, depth) && m_onPath.insert(v).second) {
                flattenItems(static_cast<const DictValue*>(v)->items, depth + 1);
                m_onPath.erase(v);
                return;
            }
            break;
        case Kind::Tuple:
            if (tupleHoldsTensor(v)) {
                emitGroup(*static_cast<const SeqValue*>(v));
                return;
            }
            [[fallthrough]];
        case Kind::List:
            if (hasTensors(v, depth) && m_onPath.insert(v).second) {
                flattenSequence(*static_cast<const SeqValue*>(v), depth + 1);
                m_onPath.erase(v);
                return;
            }
            break;
        case Kind::Object:
            if (isModuleObject(v) && m_onPath.insert(v).second) {
                flattenModule(static_cast<const ObjectValue*>(v), depth + 1);
                m_onPath.erase(v);
                return;
            }
            break;
        default:
            break;
        }
        emitObject(v);
    }

    void flattenModule(const ObjectValue* m, int depth)
    {
        // nn.Module.state_dict() order: parameters, persistent buffers, then submodules.
        auto* attrs = objectAttributes(m);
        if (!attrs || depth > kMaxDepth)
            return;
        m_budget.charge(1 + m_name.size() / 64); // submodules shared by many parents are walked once per path
        std::unordered_set<std::string_view> nonPersistent;
        if (auto* np = asSeq(attrs->lookup("_non_persistent_buffers_set")))
            for (auto* n : np->items)
                if (auto* s = asStr(n))
                    nonPersistent.insert(s->s);
        if (auto* params = asDict(attrs->lookup("_parameters")))
            for (const auto& [k, v] : params->items)
                if (v->kind != Kind::None) {
                    const size_t base = pushKey(k);
                    flattenValue(v, depth + 1);
                    m_name.resize(base);
                }
        if (auto* buffers = asDict(attrs->lookup("_buffers")))
            for (const auto& [k, v] : buffers->items) {
                auto* ks = asStr(k);
                if (v->kind != Kind::None && !(ks && nonPersistent.count(ks->s))) {
                    const size_t base = pushKey(k);
                    flattenValue(v, depth + 1);
                    m_name.resize(base);
                }
            }
        if (auto* modules = asDict(attrs->lookup("_modules")))
            for (const auto& [k, v] : modules->items)
                if (isModuleObject(v) && m_onPath.insert(v).second) {
                    const size_t base = pushKey(k);
                    flattenModule(static_cast<const ObjectValue*>(v), depth + 1);
                    m_name.resize(base);
                    m_onPath.erase(v);
                }
    }

    void noteStorage(const TensorValue& t)
    {
        if (!t.storage)
            return;
        const StorageValue* root = t.storage->root();
        if (root->index >= m_storageUses.size()) // grown geometrically: a state dict adds one storage a tensor
            m_storageUses.resize(std::max<size_t>(root->index + 1, 2 * m_storageUses.size()), 0);
        if (++m_storageUses[root->index] > 1)
            m_anyShared = true;
    }

    void emitTensor(const TensorValue& t)
    {
        noteStorage(t);
        if (m_rows) {
            emitRow(t);
            return;
        }
        fillTensorEntry(m_out->entries.emplace_back(), t, m_name, m_ctx, 0, m_budget);
        emitted();
    }

    // Rows mode: a row for each plain tensor (what a row holds is all it has) that no entry-level finding
    // looks at; anything else ends the mode. A tensor isPlainTensor cannot vouch for is built into one scratch
    // Entry, for its checks and its budget as always, and kept as a row when that entry is plain after all.
    void emitRow(const TensorValue& t)
    {
        if (isPlainTensor(t, m_name)) { // the usual case, told without building the entry
            m_budget.charge(entryUnits(m_name));
            if (!m_rows->add(m_name, t, heldName()))
                throw NotPlain {};
            return;
        }
        m_scratch.attributes.clear();
        fillTensorEntry(m_scratch, t, m_name, m_ctx, 0, m_budget);
        const Entry& e = m_scratch;
        if (!e.parts.empty() || e.quantization || !e.typeName.empty() || !e.value.empty()
            || distributed::mayHaveDistributedFinding(e)) // attributes (invalid views too), sharding, flat params
            throw NotPlain {};
        if (!m_rows->add(m_name, t, heldName()))
            throw NotPlain {};
    }

    // The name as bytes the graph holds, when it is one top-level key (a flat state dict's every name): a
    // nested name is longer than its top-level key, which it starts with.
    std::string_view heldName() const { return m_heldKey.size() == m_name.size() ? m_heldKey : std::string_view {}; }

    void emitted()
    {
        if (distributed::mayHaveDistributedFinding(m_out->entries.back()))
            m_flagged.push_back(m_out->entries.size() - 1);
    }

    void emitGroup(const SeqValue& s)
    {
        // torch.ao packed params: (weight, bias) under one key. The logical shape is the weight's.
        m_tensors += 1;
        if (!m_out)
            return;
        if (m_rows)
            throw NotPlain {};
        Entry e;
        e.name = m_name;
        e.kind = EntryKind::Group;
        e.typeName = "tuple";
        m_budget.charge(s.items.size());
        for (size_t i = 0; i < s.items.size(); ++i) {
            const Value* item = s.items[i];
            if (auto* t = asTensor(item)) {
                Entry part = tensorEntryAt(*t, std::to_string(i), m_ctx, 1, m_budget);
                if (e.dtype == DType::Unknown) {
                    e.dtype = part.dtype;
                    e.shape = part.shape;
                    e.device = part.device;
                }
                e.parts.push_back(std::move(part));
            } else {
                Entry part = objectEntry(item, std::to_string(i));
                part.value = shortRepr(item);
                e.parts.push_back(std::move(part));
            }
        }
        m_out->entries.push_back(std::move(e));
        emitted();
    }

    void emitObject(const Value* v)
    {
        if (!m_out)
            return;
        if (m_rows)
            throw NotPlain {};
        m_out->entries.push_back(objectEntry(v, m_name));
        emitted();
    }

    // A non-tensor value as an entry (also the non-tensor parts of a group, so they name their type too).
    static Entry objectEntry(const Value* v, const std::string& name)
    {
        Entry e;
        e.name = name;
        e.kind = EntryKind::Object;
        e.value = shortRepr(v, 120);
        switch (v->kind) {
        case Kind::None: e.typeName = "NoneType"; break;
        case Kind::Bool: e.typeName = "bool"; break;
        case Kind::Int:
        case Kind::BigInt: e.typeName = "int"; break;
        case Kind::Float: e.typeName = "float"; break;
        case Kind::Str: e.typeName = "str"; break;
        case Kind::Bytes: e.typeName = "bytes"; break;
        case Kind::Tuple: e.typeName = "tuple"; break;
        case Kind::List: e.typeName = "list"; break;
        case Kind::Set: e.typeName = "set"; break;
        case Kind::Dict: e.typeName = "dict"; break;
        case Kind::Global:
            e.typeName = static_cast<const GlobalValue*>(v)->id == KnownGlobal::TorchDType ? "torch.dtype" : "type";
            break;
        case Kind::Object: {
            const GlobalValue* cls = static_cast<const ObjectValue*>(v)->cls();
            e.typeName = cls ? qualifiedName(*cls) : "object";
            break;
        }
        case Kind::Storage: e.typeName = "torch.storage"; break;
        case Kind::Tensor: break;
        case Kind::DcpChunk:
        case Kind::DcpIndex:
        case Kind::DcpStorageInfo: e.typeName = qualifiedName(*static_cast<const DcpRecordValue*>(v)->cls); break;
        }
        return e;
    }

    const Container& m_self;
    const EntryContext& m_ctx;
    Source* m_out;
    const std::unordered_map<const Value*, ContainerInfo::Role>& m_containerRole;
    WalkBudget& m_budget;
    TensorPresence m_hasTensors;
    std::unordered_set<const Value*> m_onPath;
    std::string m_name;
    std::string_view m_heldKey; // the last top-level key pushed, where it is a string the graph holds
    std::vector<uint32_t> m_storageUses; // by StorageValue::index
    std::vector<size_t> m_flagged;
    TensorRows* m_rows = nullptr;
    Entry m_scratch;
    bool m_anyShared = false;
    size_t m_tensors = 0;
    size_t m_visits = 0;
};

} // namespace

namespace {

std::unordered_map<const Value*, ContainerInfo::Role> containerRoles(const ContainerScan& scan)
{
    std::unordered_map<const Value*, ContainerInfo::Role> roles;
    roles.reserve(scan.containers.size());
    for (const auto& c : scan.containers)
        roles.emplace(c.node, c.info.role);
    return roles;
}

} // namespace

ContainerScan scanContainers(const Value* root, size_t graphSize)
{
    ContainerScan scan;
    if (root && root->kind == Kind::Tensor) {
        // torch.save(tensor): one unnamed entry.
        Container c;
        c.node = root;
        c.shape = Container::Shape::Sequence;
        c.info.role = ContainerInfo::Role::Model;
        c.info.tensorCount = 1;
        scan.containers.push_back(c);
        scan.totalTensors = 1;
        return scan;
    }
    WalkBudget budget { 16 * (graphSize ? graphSize : graphWeight(root)) + 100'000 };
    scan.walkBudget = budget.left;
    Scanner(scan, budget).visit(root);
    // Direct counts served the scan; report what each container would list.
    EntryContext none;
    const auto roles = containerRoles(scan);
    for (auto& c : scan.containers)
        c.info.tensorCount = Flattener(c, none, nullptr, roles, budget).run();
    return scan;
}

ContainerInfo::Role roleForKey(std::string_view key)
{
    for (size_t start = 0; start <= key.size();) {
        size_t end = std::min(key.find_first_of("_.-", start), key.size());
        if (end > start)
            if (auto role = tokenRole(key.substr(start, end - start)))
                return *role;
        start = end + 1;
    }
    return ContainerInfo::Role::Model;
}

int preferredKeyRank(std::string_view key)
{
    const auto* it = std::find(std::begin(kPreferredKeys), std::end(kPreferredKeys), key);
    return it == std::end(kPreferredKeys) ? -1 : static_cast<int>(it - std::begin(kPreferredKeys));
}

int pickContainer(const ContainerScan& scan, std::string* reason)
{
    if (scan.containers.empty())
        return -1;
    auto byPath = [&](const std::string& p) -> int {
        for (size_t i = 0; i < scan.containers.size(); ++i)
            if (scan.containers[i].info.path == p)
                return static_cast<int>(i);
        return -1;
    };
    auto leadsToContainer = [&](const std::string& prefix) {
        for (const auto& c : scan.containers)
            if (c.info.path == prefix || c.info.path.rfind(prefix + ".", 0) == 0)
                return true;
        return false;
    };
    auto at = [&](int idx) -> const Container& { return scan.containers[static_cast<size_t>(idx)]; };
    auto directOf = [&](int idx) -> size_t {
        const Container& c = at(idx);
        return c.shape == Container::Shape::Dict ? directTensors(static_cast<const DictValue*>(c.node))
                                                 : c.info.tensorCount;
    };
    int top = byPath("");
    bool topIsModel = top >= 0 && at(top).info.role == ContainerInfo::Role::Model;

    // Rule 2: walk down through well-known wrapper keys ({"model": {"module": sd}} takes two steps).
    std::string path;
    int walked = -1;
    for (int step = 0; step < 8; ++step) {
        bool moved = false;
        for (std::string_view key : kPreferredKeys) {
            std::string next = joinPath(path, std::string(key));
            if (leadsToContainer(next)) {
                path = next;
                moved = true;
                break;
            }
        }
        if (!moved)
            break;
        if (int idx = byPath(path); idx >= 0 && at(idx).info.role != ContainerInfo::Role::Optimizer)
            walked = idx;
    }
    // Rule 1 wins over rule 2 only when the top holds more tensors itself (nanoGPT keeps a 0-d
    // best_val_loss tensor next to "model"; that must not make the top the state dict).
    if (walked >= 0 && (!topIsModel || directOf(walked) >= directOf(top))) {
        if (reason)
            *reason = "found under the well-known key path '" + at(walked).info.path + "'";
        return walked;
    }
    if (topIsModel) {
        if (reason)
            *reason = "the top object holds the tensors";
        return top;
    }

    // Rules 3 and 4: the largest model container, else the largest of any role; shallow first on ties.
    auto better = [&](size_t a, size_t b) {
        const auto& ca = scan.containers[a].info;
        const auto& cb = scan.containers[b].info;
        if (ca.tensorCount != cb.tensorCount)
            return ca.tensorCount > cb.tensorCount;
        return std::count(ca.path.begin(), ca.path.end(), '.') < std::count(cb.path.begin(), cb.path.end(), '.');
    };
    int best = -1;
    for (size_t i = 0; i < scan.containers.size(); ++i)
        if (scan.containers[i].info.role == ContainerInfo::Role::Model && scan.containers[i].info.tensorCount > 0
            && (best < 0 || better(i, static_cast<size_t>(best))))
            best = static_cast<int>(i);
    if (best >= 0) {
        if (reason)
            *reason = "the model state dict with the most tensors";
        return best;
    }
    // Rule 4: no plain model weights. An EMA copy is still model weights, so it comes before other
    // state, and optimizer state comes last.
    for (ContainerInfo::Role role : { ContainerInfo::Role::Ema, ContainerInfo::Role::Other, ContainerInfo::Role::Optimizer }) {
        for (size_t i = 0; i < scan.containers.size(); ++i)
            if (scan.containers[i].info.role == role && scan.containers[i].info.tensorCount > 0
                && (best < 0 || better(i, static_cast<size_t>(best))))
                best = static_cast<int>(i);
        if (best >= 0) {
            if (reason)
                *reason = std::string("no model state dict; the ") + std::string(containerRoleName(role))
                    + " container with the most tensors";
            return best;
        }
    }
    for (size_t i = 0; i < scan.containers.size(); ++i)
        if (best < 0 || better(i, static_cast<size_t>(best)))
            best = static_cast<int>(i);
    if (reason)
        *reason = "the container with the most tensors";
    return best;
}

bool buildEntries(const ContainerScan& scan, const Container& c, const EntryContext& ctx, Source& out,
    const std::shared_ptr<const void>& graph)
{
    const auto roles = containerRoles(scan); // the Flattener keeps a reference: it must outlive it
    if (graph && out.entries.empty()) {
        // Every entry a plain tensor: rows, and no entries until something needs them.
        auto rows = std::make_shared<TensorRows>(graph, ctx, c.info.tensorCount);
        WalkBudget budget { scan.walkBudget };
        Flattener flattener(c, ctx, &out, roles, budget);
        flattener.emitRowsInto(*rows);
        try {
            flattener.run();
            out.entries.defer(std::move(rows));
            return flattener.anyStorageShared();
        } catch (const Flattener::NotPlain&) {
            // Built as entries instead, from the start.
        }
    }
    // The scan counted what this container emits; growing the vector of (large) Entry values step by step
    // cost more than building them on 76,800-tensor files.
    out.entries.reserve(out.entries.size() + c.info.tensorCount);
    WalkBudget budget { scan.walkBudget };
    std::vector<size_t> flagged(out.entries.size()); // entries from before: looked at too
    std::iota(flagged.begin(), flagged.end(), size_t(0));
    Flattener flattener(c, ctx, &out, roles, budget);
    flattener.run();
    flagged.insert(flagged.end(), flattener.flagged().begin(), flattener.flagged().end());
    for (size_t i : flagged)
        if (const std::string* bad = out.entries[i].attribute("invalid_view"))
            out.addFinding(Severity::Danger, "tensor " + *bad + "; torch.load would fail or read garbage",
                out.entries[i].name);
    distributed::reportDistributedFindings(out, flagged);
    return flattener.anyStorageShared();
}

} // namespace sl::torch
