// bitsandbytes: 4-bit (NF4/FP4 with absmax, quant_map and the quant_state JSON) and 8-bit (SCB) weights.

#include "quant/grouper.h"

namespace sl::quant::grouping {

void Grouper::bitsandbytes4()
{
    if (!m_has.bnb4)
        return;
    std::vector<Bnb4> found;
    std::unordered_map<std::string_view, size_t> byBase;
    for (size_t i = 0; i < m_e.size(); ++i) {
        if (!isFree(i))
            continue;
        const std::string_view name = m_e[i].name;
        const std::string_view last = lastComponent(name);
        std::string_view base;
        size_t Bnb4::*field = nullptr;
        std::string_view quantType;
        if (last == "absmax")
            field = &Bnb4::absmax;
        else if (last == "quant_map")
            field = &Bnb4::quantMap;
        else if (last == "nested_absmax")
            field = &Bnb4::nestedAbsmax;
        else if (last == "nested_quant_map")
            field = &Bnb4::nestedQuantMap;
        else if (last.starts_with("bitsandbytes__") && std::string_view(prefixOf(name, last)).ends_with(".quant_state")) {
            field = &Bnb4::state;
            quantType = last.substr(14);
        } else
            continue;
        base = prefixOf(name, last);
        if (field == &Bnb4::state)
            base = prefixOf(base, "quant_state");
        if (base.empty())
            continue;
        auto [it, inserted] = byBase.emplace(base, found.size());
        if (inserted) {
            Bnb4 b;
            b.base = base;
            b.first = i;
            found.push_back(b);
        }
        Bnb4& b = found[it->second];
        if (b.*field == npos)
            b.*field = i;
        if (!quantType.empty())
            b.quantType = quantType;
    }
    for (const Bnb4& b : found)
        bnb4Group(b);
    m_bnb4Groups += static_cast<size_t>(std::count_if(m_e.begin(), m_e.end(), [](const Entry& e) {
        return e.quantization && e.quantization->scheme.starts_with("bitsandbytes.") && e.quantization->scheme != "bitsandbytes.int8";
    }));
    if (m_bnb4Groups == 0)
        return;
    // Packed uint8 weights ([n, 1]) with none of their state, in a file whose other layers have it.
    for (size_t i = 0; i < m_e.size(); ++i) {
        const Entry& e = m_e[i];
        if (isFree(i) && e.kind == EntryKind::Tensor && lastComponent(e.name) == "weight" && e.dtype == DType::UInt8
            && e.shape.size() == 2 && e.shape[1] == 1)
            report(Concern::MissingPart, Severity::Warning,
                "uint8 [n, 1] weight like the bitsandbytes 4-bit layers of this file, but without absmax, quant_map "
                "or quant_state: it cannot be dequantized",
                e.name);
    }
}

void Grouper::bnb4Group(const Bnb4& b)
{
    const size_t w = find(b.base);
    if (w == npos) {
        report(Concern::Orphan, Severity::Warning,
            "bitsandbytes 4-bit state (absmax/quant_map/quant_state) without its weight '" + std::string(b.base)
                + "': the quantized weight is missing",
            m_e[b.first].name);
        return;
    }
    if (!isFree(w))
        return;
    const Entry& weight = m_e[w];
    Plan plan;
    plan.anchor = w;
    plan.name = std::string(b.base);
    plan.parts.push_back({ "weight", w });
    std::vector<std::string> missing;
    auto part = [&](std::string_view partRole, size_t idx) {
        if (idx != npos)
            plan.parts.push_back({ partRole, idx });
    };
    part("absmax", b.absmax);
    part("quant_map", b.quantMap);
    part("nested_absmax", b.nestedAbsmax);
    part("nested_quant_map", b.nestedQuantMap);
    const std::string stateRole = "quant_state.bitsandbytes__" + std::string(b.quantType.empty() ? "nf4" : b.quantType);
    part(role(stateRole), b.state);
    if (b.absmax == npos)
        missing.push_back("absmax");
    if (b.quantMap == npos)
        missing.push_back("quant_map");
    if (b.state == npos)
        missing.push_back("quant_state");

    Quantization q;
    q.storageDType = weight.dtype;
    std::string type(b.quantType);
    std::optional<QuantState> qs;
    std::string why = "absent";
    if (b.state != npos) {
        const Entry& st = m_e[b.state];
        const auto& loc = st.location;
        if (loc.kind == TensorLocation::Kind::Mapped) {
            if (auto bytes = m_reads.read(loc.file, loc.offset, loc.length, why)) {
                qs = parseQuantState(m_parser, *bytes, why);
                if (!qs)
                    report(Concern::Inconsistent, Severity::Warning,
                        "bitsandbytes quant_state is not the JSON bitsandbytes writes (" + why
                            + "): the original shape and dtype are lost and bitsandbytes cannot load it",
                        std::string(b.base));
            }
        } else if (loc.kind == TensorLocation::Kind::Compressed) {
            why = "inside a compressed record; not read";
        } else if (loc.kind == TensorLocation::Kind::Unavailable) {
            why = "in a shard that is not available";
        } else {
            why = "its bytes are not in a file";
        }
    }
    if (qs) {
        if (type.empty())
            type = qs->quantType;
        plan.dtype = qs->dtype;
        plan.shape = qs->shape;
        q.params.emplace_back("quant_type", qs->quantType);
        q.params.emplace_back("blocksize", std::to_string(qs->blocksize));
        if (qs->dtype == DType::Unknown && !qs->dtypeText.empty())
            q.params.emplace_back("dtype", qs->dtypeText);
        if (qs->nested) {
            q.params.emplace_back("double_quant", "true");
            q.params.emplace_back("nested_blocksize", std::to_string(qs->nestedBlocksize));
            if (!qs->nestedDtype.empty())
                q.params.emplace_back("nested_dtype", qs->nestedDtype);
            if (qs->nestedOffset) {
                char buf[32]; // shortest text that reads back as the same double
                const auto r = std::to_chars(buf, buf + sizeof buf, *qs->nestedOffset);
                q.params.emplace_back("nested_offset", std::string(buf, r.ptr));
            }
            if (b.nestedAbsmax == npos)
                missing.push_back("nested_absmax");
            if (b.nestedQuantMap == npos)
                missing.push_back("nested_quant_map");
        }
        checkBnb4Sizes(plan.name, *qs, weight, b.absmax);
    } else {
        plan.shapeKnown = false;
        q.logicalShapeKnown = false;
        q.params.emplace_back("quant_state", "original shape and dtype not known: quant_state " + why);
        if (b.nestedAbsmax != npos || b.nestedQuantMap != npos)
            q.params.emplace_back("double_quant", "true");
    }
    if (b.nestedAbsmax != npos && b.nestedQuantMap == npos)
        missing.push_back("nested_quant_map");
    if (b.nestedQuantMap != npos && b.nestedAbsmax == npos)
        missing.push_back("nested_absmax");
    q.scheme = "bitsandbytes." + (type.empty() ? std::string("4bit") : type);
    q.params.emplace_back("quant_storage", std::string(dtypeName(weight.dtype)));
    plan.q = std::make_shared<const Quantization>(std::move(q));
    const std::string name = plan.name;
    if (!addPlan(plan))
        return;
    ++m_bnb4Groups;
    if (!missing.empty()) {
        std::string list;
        for (const auto& m : missing)
            list += (list.empty() ? "" : ", ") + m;
        report(Concern::MissingPart, Severity::Warning,
            "bitsandbytes 4-bit weight stored without its " + list
                + ": it cannot be dequantized (Linear4bit loaded with strict=False computes garbage)",
            name);
    }
}

void Grouper::checkBnb4Sizes(const std::string& name, const QuantState& qs, const Entry& weight, size_t absmax)
{
    uint64_t n = 1;
    for (int64_t d : qs.shape)
        n *= static_cast<uint64_t>(d);
    // Params4bit packs two values per byte into ((n + 1) // (itemsize * 2), 1) elements of quant_storage.
    const unsigned item = dtypeItemSize(weight.dtype);
    if (weight.shapeKnown && item) {
        const uint64_t want = (n + 1) / (2 * item);
        if (weight.numel() != want)
            report(Concern::Inconsistent, Severity::Warning,
                "bitsandbytes quant_state says shape " + shapeText(qs.shape) + " (" + std::to_string(n)
                    + " values), which packs into " + std::to_string(want) + " " + std::string(dtypeName(weight.dtype))
                    + " elements, but the stored weight has " + std::to_string(weight.numel())
                    + ": the state belongs to another tensor",
                name);
    }
    if (absmax != npos && qs.blocksize > 0 && m_e[absmax].shapeKnown) {
        const uint64_t blocks = (n + static_cast<uint64_t>(qs.blocksize) - 1) / static_cast<uint64_t>(qs.blocksize);
        if (m_e[absmax].numel() != blocks)
            report(Concern::Inconsistent, Severity::Warning,
                "bitsandbytes absmax has " + std::to_string(m_e[absmax].numel()) + " values, but "
                    + std::to_string(n) + " values in blocks of " + std::to_string(qs.blocksize) + " need "
                    + std::to_string(blocks),
                name);
    }
}

void Grouper::bitsandbytes8()
{
    if (!m_has.bnb8)
        return;
    struct Bnb8 {
        std::string_view prefix;
        size_t scb = npos, format = npos;
    };
    std::vector<Bnb8> found;
    std::unordered_map<std::string_view, size_t> byPrefix;
    for (size_t i = 0; i < m_e.size(); ++i) {
        const std::string_view last = lastComponent(m_e[i].name);
        if (!isFree(i) || (last != "SCB" && last != "weight_format"))
            continue;
        const std::string_view prefix = prefixOf(m_e[i].name, last);
        auto [it, inserted] = byPrefix.emplace(prefix, found.size());
        if (inserted)
            found.push_back(Bnb8 { prefix });
        (last == "SCB" ? found[it->second].scb : found[it->second].format) = i;
    }
    size_t groups = 0;
    for (const Bnb8& b : found) {
        const std::string weightName = join(b.prefix, "weight");
        const size_t w = find(weightName);
        const size_t first = b.scb != npos ? b.scb : b.format;
        if (w == npos) {
            report(Concern::Orphan, Severity::Warning,
                "bitsandbytes 8-bit " + std::string(b.scb != npos ? "row scales (SCB)" : "weight_format")
                    + " without the int8 weight '" + weightName + "': the quantized weight is missing",
                m_e[first].name);
            continue;
        }
        if (!isFree(w))
            continue;
        const Entry& weight = m_e[w];
        if (weight.dtype != DType::Int8 && weight.dtype != DType::Unknown) {
            if (b.scb != npos)
                report(Concern::Inconsistent, Severity::Warning,
                    "bitsandbytes 8-bit row scales (SCB) beside a " + std::string(dtypeName(weight.dtype))
                        + " weight: the weight is not int8 (dequantized, or replaced) and SCB no longer applies",
                    m_e[b.scb].name);
            continue;
        }
        Plan plan;
        plan.anchor = w;
        plan.name = weightName;
        plan.parts.push_back({ "weight", w });
        if (b.scb != npos)
            plan.parts.push_back({ "SCB", b.scb });
        if (b.format != npos)
            plan.parts.push_back({ "weight_format", b.format });
        plan.shape = weight.shape;
        plan.shapeKnown = weight.shapeKnown;
        plan.dtype = weight.dtype; // the original dtype is not stored: show the key's own, as torch does
        Quantization q;
        q.scheme = "bitsandbytes.int8";
        q.storageDType = DType::Int8;
        q.params.emplace_back("layout", "row-major int8, per-row absmax scales (SCB)");
        q.params.emplace_back("original_dtype", "not stored");
        plan.q = std::make_shared<const Quantization>(std::move(q));
        if (addPlan(plan)) {
            ++groups;
            if (b.scb == npos)
                report(Concern::MissingPart, Severity::Warning,
                    "bitsandbytes 8-bit weight stored without its row scales (SCB): it cannot be dequantized",
                    weightName);
        }
    }
    groups += static_cast<size_t>(std::count_if(m_e.begin(), m_e.end(), [](const Entry& e) {
        return e.quantization && e.quantization->scheme == "bitsandbytes.int8";
    }));
    if (!groups)
        return;
    for (size_t i = 0; i < m_e.size(); ++i) {
        const Entry& e = m_e[i];
        if (isFree(i) && e.kind == EntryKind::Tensor && e.dtype == DType::Int8 && lastComponent(e.name) == "weight")
            report(Concern::MissingPart, Severity::Warning,
                "int8 weight like the bitsandbytes 8-bit layers of this file, but without SCB: it cannot be "
                "dequantized",
                e.name);
    }
}

} // namespace sl::quant::grouping
