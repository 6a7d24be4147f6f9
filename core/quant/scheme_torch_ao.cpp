// torch.ao eager quantization: qint8/quint8 tensors and packed params, already described by the
// pickle reader, here given their Quantization.

#include "quant/grouper.h"

namespace sl::quant::grouping {

Quantization Grouper::torchAoQuantization(const Entry& t)
{
    Quantization q;
    const std::string* qscheme = t.attribute("qscheme");
    q.scheme = "torch.ao." + (qscheme ? *qscheme : std::string("per_tensor_affine"));
    q.storageDType = t.dtype;
    if (const std::string* axis = t.attribute("axis")) {
        q.params.emplace_back("axis", *axis);
    } else {
        if (const std::string* scale = t.attribute("scale"))
            q.params.emplace_back("scale", *scale);
        if (const std::string* zp = t.attribute("zero_point"))
            q.params.emplace_back("zero_point", *zp);
    }
    return q;
}

void Grouper::torchAo()
{
    if (!m_has.torchAo)
        return;
    bool quantizedModules = false;
    for (Entry& e : m_e) {
        if (e.quantization) {
            quantizedModules |= e.quantization->scheme.starts_with("torch.ao.");
            continue;
        }
        if (e.kind == EntryKind::Tensor && dtypeIsQuantized(e.dtype)) {
            e.quantization = std::make_shared<const Quantization>(torchAoQuantization(e));
            quantizedModules = true;
        } else if (e.kind == EntryKind::Group && e.typeName == "tuple" && !e.parts.empty()) {
            // Packed params: (weight, bias) of a quantized or dynamically quantized Linear.
            const Entry& w = e.parts.front();
            Quantization q;
            if (dtypeIsQuantized(w.dtype)) {
                q = torchAoQuantization(w);
            } else if (w.dtype == DType::Float16 && e.name.ends_with("_packed_params._packed_params")) {
                q.scheme = "torch.ao.dynamic_float16";
                q.storageDType = DType::Float16;
            } else {
                continue;
            }
            q.params.emplace_back("packed_params", "(weight, bias)");
            e.quantization = std::make_shared<const Quantization>(std::move(q));
            quantizedModules = true;
        }
    }
    if (!quantizedModules)
        return;
    // A quantized module's output (or QuantStub's input) qparams: P.scale and P.zero_point, 0-d or [1].
    for (size_t i = 0; i < m_e.size(); ++i) {
        Entry& e = m_e[i];
        if (lastComponent(e.name) != "scale" || !dtypeIsFloatingPoint(e.dtype) || e.numel() != 1
            || e.shape.size() > 1 || e.attribute("quant_role"))
            continue;
        const size_t zp = find(join(prefixOf(e.name, "scale"), "zero_point"));
        if (zp == npos || e.kind != EntryKind::Tensor || m_e[zp].numel() != 1 || dtypeIsFloatingPoint(m_e[zp].dtype)
            || m_e[zp].attribute("quant_role"))
            continue;
        e.attributes.emplace_back("quant_role", "activation scale (torch.ao)");
        m_e[zp].attributes.emplace_back("quant_role", "activation zero_point (torch.ao)");
    }
}

} // namespace sl::quant::grouping
