#include "pickle/value_repr.h"

#include "model/dtype.h"

#include <cstdio>
#include <string>

namespace sl::pickle {

namespace {

// None, True/False and ints read the same in both styles.
void appendScalar(std::string& out, const Value* v)
{
    if (v->kind == Kind::Bool)
        out += static_cast<const BoolValue*>(v)->v ? "True" : "False";
    else if (v->kind == Kind::Int)
        out += std::to_string(static_cast<const IntValue*>(v)->v);
    else
        out += "None";
}

void appendRepr(std::string& out, const Value* v, size_t maxLength, int depth)
{
    if (out.size() > maxLength)
        return;
    if (!v) {
        out += "?";
        return;
    }
    if (depth > 4) {
        out += "...";
        return;
    }
    switch (v->kind) {
    case Kind::None:
    case Kind::Bool:
    case Kind::Int:
        appendScalar(out, v);
        return;
    case Kind::BigInt:
        out += "<int of " + std::to_string(static_cast<const BigIntValue*>(v)->bytes.size()) + " bytes>";
        return;
    case Kind::Float: {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.17g", static_cast<const FloatValue*>(v)->v);
        out += buf;
        return;
    }
    case Kind::Str: {
        auto s = static_cast<const StrValue*>(v)->s;
        out += '\'';
        out.append(s.substr(0, maxLength));
        if (s.size() > maxLength)
            out += "...";
        out += '\'';
        return;
    }
    case Kind::Bytes:
        out += "<" + std::to_string(static_cast<const StrValue*>(v)->s.size()) + " bytes>";
        return;
    case Kind::Tuple:
    case Kind::List:
    case Kind::Set: {
        auto* s = static_cast<const SeqValue*>(v);
        const char* open = v->kind == Kind::Tuple ? "(" : v->kind == Kind::List ? "[" : "{";
        const char* close = v->kind == Kind::Tuple ? ")" : v->kind == Kind::List ? "]" : "}";
        out += open;
        for (size_t i = 0; i < s->items.size(); ++i) {
            if (i)
                out += ", ";
            if (out.size() > maxLength) {
                out += "...";
                break;
            }
            appendRepr(out, s->items[i], maxLength, depth + 1);
        }
        if (v->kind == Kind::Tuple && s->items.size() == 1)
            out += ",";
        out += close;
        return;
    }
    case Kind::Dict: {
        auto* d = static_cast<const DictValue*>(v);
        out += "{";
        for (size_t i = 0; i < d->items.size(); ++i) {
            if (i)
                out += ", ";
            if (out.size() > maxLength) {
                out += "...";
                break;
            }
            appendRepr(out, d->items[i].first, maxLength, depth + 1);
            out += ": ";
            appendRepr(out, d->items[i].second, maxLength, depth + 1);
        }
        out += "}";
        return;
    }
    case Kind::Global: {
        auto* g = static_cast<const GlobalValue*>(v);
        out += qualifiedName(*g);
        return;
    }
    case Kind::Object: {
        auto* o = static_cast<const ObjectValue*>(v);
        const GlobalValue* c = o->cls();
        out += c ? qualifiedName(*c) : std::string("object");
        out += "(...)";
        return;
    }
    case Kind::DcpChunk: // as the object the opcodes would have built
    case Kind::DcpIndex:
    case Kind::DcpStorageInfo:
        out += qualifiedName(*static_cast<const DcpRecordValue*>(v)->cls);
        out += "(...)";
        return;
    case Kind::Storage:
        out += "<storage " + std::string(static_cast<const StorageValue*>(v)->key) + ">";
        return;
    case Kind::Tensor: {
        auto* t = static_cast<const TensorValue*>(v);
        out += "tensor(";
        out += dtypeName(t->dtype);
        out += ", [";
        for (size_t i = 0; i < t->size().size(); ++i) {
            if (i)
                out += ", ";
            out += std::to_string(t->size()[i]);
        }
        out += "])";
        return;
    }
    }
}

constexpr size_t kMaxParamChars = 160;

// A compact, bounded rendering of a state value for Quantization::params: dtypes by name, enum members as
// Class.NAME, small objects as Class(field=value, ...).
void appendParam(std::string& out, const Value* v, int depth)
{
    if (out.size() > kMaxParamChars) {
        out += "...";
        return;
    }
    if (!v) {
        out += "None";
        return;
    }
    switch (v->kind) {
    case Kind::None:
    case Kind::Bool:
    case Kind::Int:
        appendScalar(out, v);
        return;
    case Kind::Float: {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.9g", static_cast<const FloatValue*>(v)->v);
        out += buf;
        return;
    }
    case Kind::Str:
        out += static_cast<const StrValue*>(v)->s.substr(0, kMaxParamChars);
        return;
    case Kind::Global: {
        auto* g = static_cast<const GlobalValue*>(v);
        if (g->id == KnownGlobal::TorchDType && g->dtype != DType::Unknown) {
            out += dtypeName(g->dtype);
        } else if (g->owner) { // getattr(EnumClass, 'NAME')
            std::string_view m = g->module;
            out += m.substr(m.rfind('.') + 1);
            out += '.';
            out += g->name;
        } else {
            out += qualifiedName(*g);
        }
        return;
    }
    case Kind::Tuple:
    case Kind::List: {
        auto* s = static_cast<const SeqValue*>(v);
        out += v->kind == Kind::Tuple ? '(' : '[';
        for (size_t i = 0; i < s->items.size() && out.size() <= kMaxParamChars; ++i) {
            if (i)
                out += ", ";
            if (depth < 4)
                appendParam(out, s->items[i], depth + 1);
            else
                out += "...";
        }
        if (v->kind == Kind::Tuple && s->items.size() == 1)
            out += ',';
        out += v->kind == Kind::Tuple ? ')' : ']';
        return;
    }
    case Kind::Object: {
        auto* o = static_cast<const ObjectValue*>(v);
        const GlobalValue* c = o->cls();
        out += c ? std::string(c->name) : std::string("object");
        out += '(';
        if (depth < 3) {
            const DictValue* fields = asDict(o->state);
            if (auto* tup = asSeq(o->state); !fields && tup && tup->kind == Kind::Tuple && tup->items.size() == 2)
                fields = asDict(tup->items[0]) ? asDict(tup->items[0]) : asDict(tup->items[1]);
            if (fields) {
                for (size_t i = 0; i < fields->items.size() && out.size() <= kMaxParamChars; ++i) {
                    if (i)
                        out += ", ";
                    appendParam(out, fields->items[i].first, depth + 1);
                    out += '=';
                    appendParam(out, fields->items[i].second, depth + 1);
                }
            } else if (auto* a = asSeq(o->args); a && !a->items.empty()) { // NamedTuples: NEWOBJ with fields
                for (size_t i = 0; i < a->items.size() && out.size() <= kMaxParamChars; ++i) {
                    if (i)
                        out += ", ";
                    appendParam(out, a->items[i], depth + 1);
                }
            }
        }
        out += ')';
        return;
    }
    default:
        out += shortRepr(v, 60);
        return;
    }
}

} // namespace

std::string shortRepr(const Value* v, size_t maxLength)
{
    std::string out;
    appendRepr(out, v, maxLength, 0);
    if (out.size() > maxLength + 3) {
        out.resize(maxLength);
        out += "...";
    }
    return out;
}

std::string paramText(const Value* v)
{
    std::string out;
    appendParam(out, v, 0);
    return out;
}

} // namespace sl::pickle
