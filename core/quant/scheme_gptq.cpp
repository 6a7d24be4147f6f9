// GPTQ and AWQ: qweight, qzeros, scales and g_idx packed int32 tensors, grouped as P.weight.

#include "quant/grouper.h"

namespace sl::quant::grouping {

Grouper::Packed Grouper::derivePacked(const Entry& qw, const Entry* qz, const Entry* sc, const Entry* gi)
{
    Packed p;
    if (!known2d(&qw) || !known2d(sc))
        return p;
    const int64_t q0 = qw.shape[0], q1 = qw.shape[1], s0 = sc->shape[0], s1 = sc->shape[1];
    auto goodBits = [](int64_t b) { return b == 2 || b == 3 || b == 4 || b == 8; };
    if (q1 == s1) {
        // GPTQ: qweight [in * bits / 32, out], qzeros [groups, out * bits / 32], scales [groups, out].
        p.layout = "gptq";
        p.out = s1;
        if (gi && gi->shapeKnown && gi->shape.size() == 1 && gi->shape[0] > 0 && (q0 * 32) % gi->shape[0] == 0) {
            p.in = gi->shape[0];
            p.bits = q0 * 32 / p.in;
        } else if (known2d(qz) && p.out > 0 && (qz->shape[1] * 32) % p.out == 0) {
            p.bits = qz->shape[1] * 32 / p.out;
            if (p.bits <= 0 || (q0 * 32) % p.bits)
                return p;
            p.in = q0 * 32 / p.bits;
        } else {
            return p;
        }
        if (!goodBits(p.bits) || (known2d(qz) && qz->shape[1] * 32 != p.out * p.bits))
            return p;
    } else if (q1 > 0 && s1 % q1 == 0 && 32 % (s1 / q1) == 0) {
        // AWQ GEMM: qweight [in, out / (32 / bits)], qzeros [in / group, out / (32 / bits)], scales [in / group, out].
        p.layout = "awq-gemm";
        p.bits = 32 / (s1 / q1);
        p.in = q0;
        p.out = s1;
        if (!goodBits(p.bits) || (known2d(qz) && qz->shape[1] != q1))
            return p;
    } else {
        return p;
    }
    p.groups = s0;
    p.ok = p.in > 0 && p.out > 0 && s0 > 0 && s0 <= p.in;
    return p;
}

void Grouper::gptq()
{
    if (!m_has.gptq)
        return;
    std::unordered_set<std::string_view> orphanPrefixes;
    for (size_t i = 0; i < m_e.size(); ++i) {
        const std::string_view last = lastComponent(m_e[i].name);
        if (!isFree(i))
            continue;
        if (last == "qzeros" || last == "g_idx") {
            const std::string_view prefix = prefixOf(m_e[i].name, last);
            if (find(join(prefix, "qweight")) == npos && orphanPrefixes.insert(prefix).second)
                report(Concern::Orphan, Severity::Warning,
                    "GPTQ/AWQ " + std::string(last) + " without its qweight '" + join(prefix, "qweight")
                        + "': the quantized weight is missing",
                    m_e[i].name);
            continue;
        }
        if (last != "qweight" || (m_e[i].dtype != DType::Int32 && m_e[i].dtype != DType::Unknown))
            continue;
        const std::string_view prefix = prefixOf(m_e[i].name, last);
        const size_t qz = findFree(join(prefix, "qzeros"));
        const size_t sc = findFree(join(prefix, "scales"));
        const size_t gi = findFree(join(prefix, "g_idx"));
        std::string name = join(prefix, "weight");
        if (find(name) != npos)
            name = m_e[i].name; // a real weight key beside it: keep qweight's own name
        const Entry& qw = m_e[i];
        const Packed p = derivePacked(qw, qz != npos ? &m_e[qz] : nullptr, sc != npos ? &m_e[sc] : nullptr,
            gi != npos ? &m_e[gi] : nullptr);
        Plan plan;
        plan.anchor = i;
        plan.name = name;
        plan.parts.push_back({ "qweight", i });
        if (qz != npos)
            plan.parts.push_back({ "qzeros", qz });
        if (sc != npos)
            plan.parts.push_back({ "scales", sc });
        if (gi != npos)
            plan.parts.push_back({ "g_idx", gi });
        Quantization q;
        q.storageDType = DType::Int32;
        plan.dtype = sc != npos ? m_e[sc].dtype : DType::Unknown;
        if (p.ok) {
            q.scheme = p.layout == "gptq" ? "gptq" : "awq";
            plan.shape = Shape { p.out, p.in };
            q.params.emplace_back("bits", std::to_string(p.bits));
            q.params.emplace_back("group_size",
                p.groups == 1 ? std::string("-1 (one group per output channel)")
                              : (p.in % p.groups == 0 ? "" : "about ") + std::to_string(p.in / p.groups));
            q.params.emplace_back("layout", p.layout);
        } else {
            q.scheme = gi != npos ? "gptq" : "gptq-or-awq";
            plan.shapeKnown = false;
            q.logicalShapeKnown = false;
            q.params.emplace_back("bits_and_group_size",
                "not determined by the tensors; quantize_config.json (or config.json's quantization_config) "
                "has them");
        }
        if (gi != npos)
            q.params.emplace_back("g_idx", "present (group of each input channel; act-order when permuted)");
        plan.q = std::make_shared<const Quantization>(std::move(q));
        if (!addPlan(plan))
            continue;
        std::string missing;
        if (sc == npos)
            missing = "scales";
        if (qz == npos)
            missing += std::string(missing.empty() ? "" : ", ") + "qzeros";
        if (!missing.empty())
            report(Concern::MissingPart, Severity::Warning,
                "GPTQ/AWQ qweight stored without its " + missing + ": it cannot be dequantized", name);
    }
}

} // namespace sl::quant::grouping
