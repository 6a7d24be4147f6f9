#include "optimizer_labels.h"

#include <algorithm>
#include <charconv>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace sl::torch {

using namespace sl::pickle;

namespace {

std::string keyText(const Value* v)
{
    if (auto* s = asStr(v))
        return std::string(s->s);
    int64_t i = 0;
    if (v && v->kind == Kind::Int && toInt(v, i))
        return std::to_string(i);
    return {};
}

bool isDecimal(std::string_view s)
{
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Buffers state_dict() interleaves with parameters, by the names torch and common models give them.
bool looksLikeBuffer(std::string_view name)
{
    std::string_view last = name.substr(name.rfind('.') + 1);
    static constexpr std::string_view kBuffers[] = { "running_mean", "running_var", "num_batches_tracked",
        "inv_freq", "position_ids", "token_type_ids", "attn_mask", "causal_mask", "relative_position_index",
        "masked_bias", "_float_tensor" };
    return std::find(std::begin(kBuffers), std::end(kBuffers), last) != std::end(kBuffers);
}

// "state.<id>.<field>" -> <id>
std::string_view stateId(std::string_view entry)
{
    if (entry.substr(0, 6) != "state.")
        return {};
    entry.remove_prefix(6);
    size_t dot = entry.rfind('.');
    return dot == std::string_view::npos ? std::string_view {} : entry.substr(0, dot);
}

} // namespace

OptimizerLabels labelOptimizerState(const Value* optimizer, std::vector<Entry>& entries, const std::vector<Entry>& model)
{
    OptimizerLabels result;
    auto* opt = asDict(optimizer);
    if (!opt)
        return result;

    // Ids in parameter order (param_groups), with names when the groups carry them.
    std::vector<std::string> ids;
    std::unordered_map<std::string, std::string> names;
    if (auto* groups = asSeq(opt->lookup("param_groups"))) {
        for (auto* g : groups->items) {
            auto* group = asDict(g);
            auto* params = group ? asSeq(group->lookup("params")) : nullptr;
            if (!params)
                continue;
            auto* paramNames = asSeq(group->lookup("param_names"));
            for (size_t i = 0; i < params->items.size(); ++i) {
                std::string id = keyText(params->items[i]);
                if (id.empty())
                    continue;
                ids.push_back(id);
                if (paramNames && i < paramNames->items.size())
                    if (auto* n = asStr(paramNames->items[i]))
                        names.emplace(id, std::string(n->s));
            }
        }
    }

    // The state entries of each id, and the shape of its first non-scalar state (exp_avg, momentum_buffer).
    std::unordered_map<std::string, std::vector<size_t>> byId;
    std::unordered_map<std::string, const Shape*> shapeOf;
    std::vector<std::string> stateOrder;
    for (size_t i = 0; i < entries.size(); ++i) {
        std::string id(stateId(entries[i].name));
        if (id.empty())
            continue;
        auto [it, inserted] = byId.try_emplace(id);
        if (inserted)
            stateOrder.push_back(id);
        it->second.push_back(i);
        if (!shapeOf.count(id) && entries[i].kind != EntryKind::Object && entries[i].shapeKnown
            && !entries[i].shape.empty())
            shapeOf.emplace(id, &entries[i].shape);
    }
    result.states = byId.size();
    if (ids.empty()) // no param_groups: the state's own (numeric) order
        for (const auto& id : stateOrder)
            if (isDecimal(id))
                ids.push_back(id);

    std::unordered_map<std::string, std::string> label;
    if (!names.empty()) {
        label = names;
        result.how = "param_names";
    } else if (!stateOrder.empty() && std::none_of(stateOrder.begin(), stateOrder.end(), [](const auto& id) { return isDecimal(id); })) {
        // FSDP optim_state_dict / DCP get_optimizer_state_dict key states by parameter name already.
        for (const auto& id : stateOrder)
            label.emplace(id, id);
        result.how = "keyed by parameter name";
    } else if (!model.empty()) {
        // Walk the model's parameters in order; skip buffers, second names of tied tensors, and entries
        // whose shape does not fit the next state. Stop at the first id without a shape to check against.
        std::unordered_set<std::string_view> seen;
        size_t m = 0;
        for (const auto& id : ids) {
            auto s = shapeOf.find(id);
            if (s == shapeOf.end())
                break;
            bool matched = false;
            for (; m < model.size(); ++m) {
                const Entry& p = model[m];
                seen.insert(p.name);
                if (p.kind == EntryKind::Object || looksLikeBuffer(p.name))
                    continue;
                if (const std::string* tied = p.attribute("tied_with"))
                    if (seen.count(std::string_view(*tied).substr(0, tied->find(", "))))
                        continue; // model.parameters() yields a tied tensor once, under its first name
                if (p.shape == *s->second) {
                    label.emplace(id, p.name);
                    matched = true;
                    ++m;
                    break;
                }
            }
            if (!matched)
                break;
        }
        if (!label.empty())
            result.how = "the model state dict's parameter order";
    }

    for (const auto& [id, indices] : byId) {
        auto it = label.find(id);
        if (it == label.end())
            continue;
        ++result.labelled;
        for (size_t i : indices) {
            entries[i].attributes.emplace_back("param", it->second);
            entries[i].attributes.emplace_back("param_source", result.how);
        }
    }
    return result;
}

} // namespace sl::torch
