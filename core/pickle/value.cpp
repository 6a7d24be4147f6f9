#include "value.h"

#include <cstring>
#include <string>

namespace sl::pickle {

Value* DictValue::lookup(std::string_view key) const
{
    for (size_t i = items.size(); i-- > 0;) {
        auto* k = asStr(items[i].first);
        if (k && k->s == key)
            return items[i].second;
    }
    return nullptr;
}

const GlobalValue* ObjectValue::cls() const
{
    // For NEWOBJ the class is the callable; for REDUCE of copyreg._reconstructor it is args[0].
    if (auto* g = asGlobal(callable)) {
        if (g->id == KnownGlobal::CopyregReconstructor) {
            auto* a = asSeq(args);
            if (a && !a->items.empty())
                return asGlobal(a->items[0]);
        }
        return g;
    }
    return nullptr;
}

void* Arena::fromNewBlock(size_t bytes, size_t align)
{
    if (bytes > SIZE_MAX / 2 - align)
        throw std::bad_alloc();
    // The latest few only: a hostile pickle could leave many that fit nothing, and each search is paid for
    // by one region used up.
    constexpr size_t kSearched = 16;
    for (size_t i = m_spares.size(), n = 0; i-- > 0 && n < kSearched; ++n) {
        const Spare s = m_spares[i];
        const uintptr_t at = (s.begin + (align - 1)) & ~uintptr_t(align - 1);
        if (at < s.begin || at > s.end || bytes > s.end - at)
            continue;
        m_spares[i] = m_spares.back();
        m_spares.pop_back();
        if (m_end - m_next >= kMinSpare) // what is left where allocation stood
            m_spares.push_back({ m_next, m_end });
        m_next = at + bytes;
        m_end = s.end;
        return reinterpret_cast<void*>(at);
    }
    if (m_end - m_next >= kMinSpare)
        m_spares.push_back({ m_next, m_end });
    const size_t size = std::max(m_nextBlock, bytes + align);
    auto block = std::make_unique_for_overwrite<std::byte[]>(size);
    m_next = reinterpret_cast<uintptr_t>(block.get());
    m_end = m_next + size;
    m_blocks.push_back(std::move(block));
    m_reserved += size;
    m_nextBlock = 2 * std::min(size, kMaxBlock / 2);
    const uintptr_t at = alignedNext(align);
    m_next = at + bytes;
    return reinterpret_cast<void*>(at);
}

std::string_view Arena::copy(std::string_view s)
{
    if (s.empty())
        return {};
    char* p = static_cast<char*>(bump(s.size(), 1));
    std::memcpy(p, s.data(), s.size());
    return { p, s.size() };
}

Value* noneValue()
{
    static Value none(Kind::None);
    return &none;
}

SeqValue* emptyTupleValue()
{
    static SeqValue empty(Kind::Tuple);
    return &empty;
}

Value* boolValue(bool b)
{
    static BoolValue t(true);
    static BoolValue f(false);
    return b ? &t : &f;
}

const GlobalValue* asGlobal(const Value* v)
{
    return v && v->kind == Kind::Global ? static_cast<const GlobalValue*>(v) : nullptr;
}
const StrValue* asStr(const Value* v) { return v && v->kind == Kind::Str ? static_cast<const StrValue*>(v) : nullptr; }
const SeqValue* asSeq(const Value* v)
{
    return v && (v->kind == Kind::Tuple || v->kind == Kind::List || v->kind == Kind::Set)
        ? static_cast<const SeqValue*>(v)
        : nullptr;
}
const DictValue* asDict(const Value* v)
{
    return v && v->kind == Kind::Dict ? static_cast<const DictValue*>(v) : nullptr;
}
const TensorValue* asTensor(const Value* v)
{
    return v && v->kind == Kind::Tensor ? static_cast<const TensorValue*>(v) : nullptr;
}
const ObjectValue* asObject(const Value* v)
{
    return v && v->kind == Kind::Object ? static_cast<const ObjectValue*>(v) : nullptr;
}

bool toInt(const Value* v, int64_t& out)
{
    if (!v)
        return false;
    if (v->kind == Kind::Int) {
        out = static_cast<const IntValue*>(v)->v;
        return true;
    }
    if (v->kind == Kind::Bool) {
        out = static_cast<const BoolValue*>(v)->v ? 1 : 0;
        return true;
    }
    return false;
}

bool toDouble(const Value* v, double& out)
{
    if (v && v->kind == Kind::Float) {
        out = static_cast<const FloatValue*>(v)->v;
        return true;
    }
    int64_t i = 0;
    if (toInt(v, i)) {
        out = static_cast<double>(i);
        return true;
    }
    return false;
}

std::string qualifiedName(const GlobalValue& g)
{
    std::string s(g.module);
    if (!s.empty())
        s += '.';
    s += g.name;
    return s;
}

} // namespace sl::pickle
