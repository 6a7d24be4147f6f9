// torchao: its flattened safetensors layout (`M._P_<inner>`, `N:<inner>` with __metadata__ tensor_names)
// and the findings on its tensor subclasses in torch.save files.

#include "quant/grouper.h"

namespace sl::quant::grouping {

void Grouper::loadTorchaoMetadata()
{
    for (const auto& [k, v] : m_s.metadata)
        m_meta.emplace(k, v);
    if (m_meta.count("tensor_names") || m_s.format != SourceFormat::SafetensorsIndex)
        return;
    // An index keeps only total_size; torchao's metadata is in each shard's own header (transformers
    // writes the whole model's into every shard). Read the headers of shards holding torchao-style
    // keys until one has tensor_names, within a byte budget.
    std::vector<bool> tried(m_s.files.size(), false);
    uint64_t budget = kMaxHeaderBytes;
    size_t shards = 0;
    for (const Entry& e : m_e) {
        const std::string_view last = lastComponent(e.name);
        const bool torchaoKey = e.name.find(':') != std::string::npos || isUnderscoreQdata(last);
        const int32_t f = e.location.file;
        if (!torchaoKey || f < 0 || static_cast<size_t>(f) >= tried.size() || tried[static_cast<size_t>(f)])
            continue;
        tried[static_cast<size_t>(f)] = true;
        auto more = readSafetensorsMetadata(m_s.files[static_cast<size_t>(f)], m_parser, budget);
        bool found = false;
        for (auto& kv : more) {
            found |= kv.first == "tensor_names";
            m_shardMeta.push_back(std::move(kv));
        }
        if (found || ++shards >= kMaxShardHeaders || budget == 0)
            break;
    }
    for (const auto& [k, v] : m_shardMeta)
        m_meta.emplace(k, v);
}

std::optional<std::string_view> Grouper::meta(std::string_view key) const
{
    auto it = m_meta.find(key);
    if (it == m_meta.end())
        return std::nullopt;
    return it->second;
}

void Grouper::indexColonNames()
{
    for (size_t i = 0; i < m_e.size(); ++i) {
        const std::string_view name = m_e[i].name;
        const size_t colon = name.rfind(':');
        if (colon != std::string_view::npos && colon > 0 && isFree(i))
            m_colon[name.substr(0, colon)].push_back(i);
    }
}

DType Grouper::dtypeOfJson(simdjson::dom::element v)
{
    std::string_view s;
    if (!v.get_string().get(s))
        return dtypeFromText(s);
    simdjson::dom::object o;
    if (!v.get_object().get(o) && !o["_data"].get_string().get(s))
        return dtypeFromText(s); // {"_type": "torch.dtype", "_data": "bfloat16"}
    return DType::Unknown;
}

bool Grouper::shapeOfJson(simdjson::dom::element v, Shape& out)
{
    simdjson::dom::array a;
    if (v.get_array().get(a) || a.size() > 64)
        return false;
    out.clear();
    for (auto d : a) {
        int64_t i = 0;
        if (d.get_int64().get(i) || i < 0)
            return false;
        out.push_back(i);
    }
    return true;
}

Grouper::TorchaoInfo Grouper::torchaoInfo(const std::string& name)
{
    TorchaoInfo info;
    simdjson::dom::element doc;
    simdjson::dom::object obj;
    if (auto m = meta(name)) {
        // {"_type": "Float8Tensor", "_data": {...}, "_tensor_data_names": [...]}
        const std::string text(*m);
        if (!m_parser.parse(text.data(), text.size(), true).get(doc) && !doc.get_object().get(obj)) {
            std::string_view type;
            if (!obj["_type"].get_string().get(type)) {
                info.type = std::string(type.substr(0, 80));
                info.described = true;
            }
            simdjson::dom::array names;
            if (!obj["_tensor_data_names"].get_array().get(names))
                for (auto n : names) {
                    std::string_view s;
                    if (!n.get_string().get(s) && info.dataNames.size() < 32)
                        info.dataNames.emplace_back(s);
                }
            simdjson::dom::object data;
            if (!obj["_data"].get_object().get(data))
                for (auto [k, v] : data) {
                    if (k == "dtype" || k == "orig_dtype" || k == "_orig_dtype") {
                        if (DType d = dtypeOfJson(v); d != DType::Unknown)
                            info.dtype = d;
                    } else if (k == "shape") {
                        info.haveShape = shapeOfJson(v, info.shape);
                    } else if (info.params.size() < kMaxParams && !v.is_null()) {
                        info.params.emplace_back(std::string(k), clip(simdjson::to_string(v)));
                    }
                }
        }
        return info;
    }
    // The earlier spelling: one metadata key per attribute, "<name>:tensor_type", "<name>:block_size", ...
    const std::string prefix = name + ":";
    if (auto t = meta(prefix + "tensor_type")) {
        const std::string_view qualified = classFromTypeText(*t);
        info.qualified = std::string(qualified.substr(0, 120));
        info.type = std::string(qualified.substr(qualified.rfind('.') + 1));
        info.described = true;
        for (std::string_view attr : { "dtype", "orig_dtype", "_orig_dtype" })
            if (auto d = meta(prefix + std::string(attr)))
                if (DType dt = dtypeFromText(unquoted(m_parser, *d)); dt != DType::Unknown)
                    info.dtype = dt;
        for (std::string_view attr : { "block_size", "mm_config", "kernel_preference", "act_quant_kwargs",
                 "input_quant_func", "quant_kwargs", "elem_dtype", "target_dtype" })
            if (auto v = meta(prefix + std::string(attr)))
                info.params.emplace_back(std::string(attr), clip(std::string(*v)));
        if (auto v = meta(prefix + "shape")) {
            const std::string text(*v);
            if (!m_parser.parse(text.data(), text.size(), true).get(doc))
                info.haveShape = shapeOfJson(doc, info.shape);
        }
    }
    return info;
}

bool Grouper::logicalShapeFromData(std::string_view type, const Entry& primary, Shape& out)
{
    if (!primary.shapeKnown || primary.shape.empty())
        return false;
    out = primary.shape;
    if (type == "Float8Tensor" || type == "Int8Tensor" || type == "IntxUnpackedToInt8Tensor"
        || type == "Float8TrainingTensor" || type == "LinearActivationQuantizedTensor")
        return true;
    if (type == "NVFP4Tensor" || (type == "MXTensor" && (primary.dtype == DType::UInt8 || primary.dtype == DType::Float4_e2m1fn_x2))) {
        out.back() *= 2; // two fp4 values per byte
        return true;
    }
    if (type == "MXTensor")
        return true;
    return false;
}

void Grouper::torchaoFlattened()
{
    if (!m_has.colon && !m_has.underscore && !m_has.tensorNames)
        return;
    loadTorchaoMetadata();
    if (m_has.colon)
        indexColonNames();
    std::vector<std::string> names;
    if (auto tn = meta("tensor_names")) {
        const std::string text = unquoted(m_parser, *tn);
        simdjson::dom::element doc;
        simdjson::dom::array arr;
        if (!m_parser.parse(text.data(), text.size(), true).get(doc) && !doc.get_array().get(arr))
            for (auto n : arr) {
                std::string_view s;
                if (!n.get_string().get(s) && names.size() <= m_e.size())
                    names.emplace_back(s);
            }
    }
    std::unordered_set<std::string> described;
    for (const std::string& name : names)
        if (described.insert(name).second)
            torchaoGroup(name, torchaoInfo(name));
    // No metadata (or not for these keys): the spelling alone, class unknown.
    for (auto& [base, members] : m_colon) {
        const std::string name(base);
        if (described.count(name) || find(name) != npos)
            continue;
        bool known = false;
        for (size_t i : members)
            known |= isTorchaoInner(m_e[i].name.substr(base.size() + 1));
        if (known)
            torchaoGroup(name, TorchaoInfo {});
    }
    if (m_has.underscore)
        for (size_t i = 0; i < m_e.size(); ++i) {
            // "M._P_qdata" -> "M.P"
            const std::string_view last = lastComponent(m_e[i].name);
            if (!isFree(i) || !isUnderscoreQdata(last))
                continue;
            const std::string name = join(prefixOf(m_e[i].name, last), last.substr(1, last.size() - 7));
            if (!described.count(name) && find(name) == npos)
                torchaoGroup(name, TorchaoInfo {});
        }
}

void Grouper::torchaoGroup(const std::string& name, const TorchaoInfo& info)
{
    const std::string_view nameView = name;
    const std::string_view param = lastComponent(nameView);
    const std::string underscorePrefix = join(prefixOf(nameView, param), "_" + std::string(param) + "_");
    std::vector<Part> parts;
    std::vector<std::string> missing;
    auto take = [&](std::string_view inner) -> bool {
        for (const Part& p : parts)
            if (p.role == inner)
                return true;
        size_t i = findFree(name + ":" + std::string(inner));
        if (i == npos && param.size() < nameView.size())
            i = findFree(underscorePrefix + std::string(inner));
        if (i == npos)
            return false;
        parts.push_back({ role(inner), i });
        return true;
    };
    const bool plain = info.type == "Tensor" || info.type == "torch.Tensor";
    if (plain) {
        // A plain tensor: under its own name (nothing to do), or "<name>:data" in the colon spelling.
        if (find(name) != npos)
            return;
        if (!take("data") && !take("_data"))
            return;
    } else {
        for (const std::string& inner : info.dataNames)
            if (!take(inner))
                missing.push_back(inner);
        auto colon = m_colon.find(nameView);
        if (colon != m_colon.end())
            for (size_t i : colon->second)
                if (isFree(i))
                    take(std::string_view(m_e[i].name).substr(name.size() + 1));
        if (info.dataNames.empty())
            for (std::string_view inner : kTorchaoInner)
                take(inner);
    }
    if (parts.empty() || find(name) != npos)
        return;
    size_t primary = npos;
    for (std::string_view role : kTorchaoPrimary)
        for (const Part& p : parts)
            if (primary == npos && p.role == role)
                primary = p.index;
    if (primary == npos)
        primary = parts.front().index;
    // The data first, then the scales in file order (the colon spelling has no declared order).
    if (info.dataNames.empty())
        std::stable_partition(parts.begin(), parts.end(), [&](const Part& p) { return p.index == primary; });

    Plan plan;
    plan.anchor = primary;
    plan.name = name;
    plan.typeName = role(info.qualified.empty() ? info.type : info.qualified);
    const Entry& data = m_e[primary];
    if (plain) {
        plan.dtype = data.dtype;
        plan.shape = data.shape;
        plan.shapeKnown = data.shapeKnown;
        plan.typeName = "torch.Tensor";
    } else {
        Quantization q;
        q.scheme = info.type.empty() ? std::string("torchao") : "torchao." + info.type;
        q.storageDType = data.dtype;
        plan.dtype = info.dtype;
        if (info.type == "LinearActivationQuantizedTensor" && info.dtype == DType::Unknown)
            plan.dtype = data.dtype; // a float weight with quantized activations
        plan.shape = info.shape;
        if (!info.haveShape && !logicalShapeFromData(info.type, data, plan.shape)) {
            plan.shapeKnown = false;
            plan.shape.clear();
            q.logicalShapeKnown = false;
        }
        if (info.type.empty())
            q.params.emplace_back("class", "not recorded (no torchao __metadata__ for this tensor)");
        q.params.emplace_back("layout", "torchao flattened safetensors");
        for (const auto& kv : info.params)
            q.params.push_back(kv);
        plan.q = std::make_shared<const Quantization>(std::move(q));
    }
    for (Part& p : parts)
        plan.parts.push_back(std::move(p));
    const std::string typeLabel = info.type.empty() ? std::string("torchao tensor") : "torchao " + info.type;
    if (addPlan(plan) && !missing.empty()) {
        std::string list;
        for (const auto& m : missing)
            list += (list.empty() ? "" : ", ") + m;
        report(Concern::MissingPart, Severity::Warning,
            typeLabel + " is stored without its " + list + " (its __metadata__ lists them); torchao cannot "
                + "rebuild it and the weight is lost or loads unscaled",
            name);
    }
}

void Grouper::subclassFindings()
{
    for (const Entry& e : m_e) {
        if (!e.quantization)
            continue;
        if (const std::string* missing = e.attribute(kMissingPartsAttribute))
            report(Concern::MissingPart, Severity::Warning,
                e.quantization->scheme + " is stored without its " + *missing
                    + " (torchao fills missing fields with None): it cannot be dequantized",
                e.name);
    }
}

} // namespace sl::quant::grouping
