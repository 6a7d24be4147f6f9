// FP8 (and int8) weights with their scales: block (weight_scale_inv), per-channel, per-tensor, and an
// optional input_scale.

#include "quant/grouper.h"

#include "util/emplace_built.h"

namespace sl::quant::grouping {

std::string Fp8Layouts::blockOf(const Shape& w, const Shape& s)
{
    // The block edge per dimension: the power of two whose ceil-division gives the scale's size.
    std::string out = "[";
    for (size_t d = 0; d < w.size() && d < s.size(); ++d) {
        int64_t b = 1;
        while (b < (int64_t(1) << 30) && ceilDiv(w[d], b) > s[d])
            b *= 2;
        if (ceilDiv(w[d], b) != s[d])
            b = s[d] > 0 ? ceilDiv(w[d], s[d]) : 0;
        out += (d ? ", " : "") + std::to_string(b);
    }
    return out + "]";
}

std::shared_ptr<const Quantization> Fp8Layouts::described(
    DType stored, std::string_view granularity, const std::string& block, bool inverse, bool input)
{
    std::string& key = m_key;
    key.assign(dtypeName(stored));
    key += '|';
    key += granularity;
    key += '|';
    key += block;
    key += inverse ? "|inv" : "|";
    key += input ? "|input" : "|";
    auto& cached = m_described[key];
    if (cached)
        return cached;
    Quantization q;
    q.storageDType = stored;
    if (!block.empty())
        q.params.emplace_back("block_size", block);
    if (inverse)
        q.params.emplace_back("scale", "weight_scale_inv (dequantized = weight * scale, per block)");
    if (input)
        q.params.emplace_back("activation_scale", "static (input_scale)");
    q.params.emplace_back("original_dtype", "not stored");
    q.scheme = std::string(stored == DType::Int8 ? "int8" : "fp8") + "." + std::string(granularity);
    cached = std::make_shared<const Quantization>(std::move(q));
    return cached;
}

std::shared_ptr<const Quantization> Fp8Layouts::describe(const Entry& e, const Entry& s, bool inverse, bool input)
{
    const auto same = [&](const Layout& l) {
        return l.q && l.dtype == e.dtype && l.weightKnown == e.shapeKnown && l.scaleKnown == s.shapeKnown
            && l.inverse == inverse && l.input == input && l.weight == e.shape && l.scale == s.shape;
    };
    if (auto hit = std::find_if(m_recent.begin(), m_recent.end(), same); hit != m_recent.end())
        return hit->q;
    std::string_view granularity = "scaled";
    std::string block;
    if (e.shapeKnown && s.shapeKnown) {
        const uint64_t sn = s.numel();
        if (sn == 1 && !inverse)
            granularity = "per_tensor";
        else if (!e.shape.empty() && !inverse && (s.shape == Shape { e.shape[0], 1 } || s.shape == Shape { e.shape[0] }))
            granularity = "per_channel";
        else if (s.shape.size() == e.shape.size() && sn < e.numel()) {
            granularity = "block";
            block = blockOf(e.shape, s.shape);
        }
    } else if (inverse) {
        granularity = "block";
    }
    auto q = described(e.dtype, granularity, block, inverse, input);
    m_recent[m_nextRecent++ % m_recent.size()] = Layout { e.dtype, e.shapeKnown, s.shapeKnown, inverse, input, e.shape, s.shape, q };
    return q;
}

std::string_view Grouper::withSuffix(std::string_view base, std::string_view suffix)
{
    m_key.assign(base);
    m_key += suffix;
    return m_key;
}

std::string_view Grouper::joinedKey(std::string_view prefix, std::string_view key)
{
    assignJoined(m_key, prefix, key);
    return m_key;
}

void Grouper::fp8()
{
    if (!m_has.fp8)
        return;
    // Groups formed by an earlier run count too (they are no longer top-level weights).
    size_t scaled = static_cast<size_t>(std::count_if(m_e.begin(), m_e.end(), [](const Entry& e) {
        return e.quantization && e.quantization->scheme.starts_with("fp8.");
    }));
    std::vector<size_t> unscaled;
    Plan plan;
    for (size_t i = 0; i < m_e.size(); ++i) {
        if (!isFree(i))
            continue;
        const Entry& e = m_e[i];
        const std::string_view last = lastComponent(e.name);
        if (!last.ends_with("weight") || e.kind != EntryKind::Tensor)
            continue;
        const bool f8 = isFloat8(e.dtype);
        const bool i8 = e.dtype == DType::Int8;
        const bool unknown = e.dtype == DType::Unknown;
        const size_t inv = findFreeBeside(i + 1, withSuffix(e.name, kScaleInvSuffix));
        // A plain `_scale` pairs only with an FP8 or int8 weight (a float weight beside one is no concern).
        const size_t sc = inv == npos && (f8 || i8) ? findFreeBeside(i + 1, withSuffix(e.name, "_scale")) : npos;
        if (!f8 && !(i8 && sc != npos) && !(unknown && inv != npos)) {
            if (inv != npos && dtypeIsFloatingPoint(e.dtype))
                report(Concern::Inconsistent, Severity::Warning,
                    "a " + std::string(dtypeName(e.dtype)) + " weight beside a block-FP8 scale (" + e.name
                        + "_scale_inv): the weight was dequantized (or never quantized) but the scale kept; an "
                          "FP8 model would apply it to the wrong values",
                    e.name);
            continue;
        }
        if (inv == npos && sc == npos) {
            if (f8)
                unscaled.push_back(i);
            continue;
        }
        // (A lookup that cannot succeed still costs a cache miss: 45,000 of them for DeepSeek-V3.)
        const size_t input = last == "weight" && m_has.inputScale ? findFree(joinedKey(prefixOf(e.name, last), "input_scale")) : npos;
        const size_t scale = inv != npos ? inv : sc;
        const Entry& s = m_e[scale];
        plan.anchor = i;
        plan.name = e.name;
        plan.parts.push_back({ "weight", i });
        plan.parts.push_back({ inv != npos ? "weight_scale_inv" : "weight_scale", scale });
        if (input != npos)
            plan.parts.push_back({ "input_scale", input });
        plan.shape = e.shape;
        plan.shapeKnown = e.shapeKnown;
        plan.dtype = e.dtype; // the original dtype is not stored: show the key's own, as torch does
        plan.q = m_fp8Layouts.describe(e, s, inv != npos, input != npos);
        if (addPlan(plan))
            ++scaled;
    }
    // Scales whose weight is gone.
    for (size_t i = 0; i < m_e.size(); ++i) {
        if (!isFree(i))
            continue;
        const std::string_view name = m_e[i].name;
        const std::string_view last = lastComponent(name);
        std::string_view weight;
        if (last.ends_with("weight_scale_inv"))
            weight = name.substr(0, name.size() - 10);
        else if (last.ends_with("weight_scale"))
            weight = name.substr(0, name.size() - 6);
        else if (last == "input_scale" && scaled)
            weight = {};
        else
            continue;
        const std::string weightName = weight.empty() ? join(prefixOf(name, last), "weight") : std::string(weight);
        if (find(weightName) == npos)
            report(Concern::Orphan, Severity::Warning,
                std::string(last) + " without its weight '" + weightName + "': the quantized weight is missing",
                std::string(name));
    }
    if (unscaled.empty())
        return;
    if (scaled) {
        for (size_t i : unscaled)
            report(Concern::Unscaled, Severity::Warning,
                std::string(dtypeName(m_e[i].dtype)) + " weight without a scale (no " + m_e[i].name + "_scale_inv or "
                    + m_e[i].name + "_scale), while the file's other FP8 weights have one: it would load unscaled, "
                    + "off by its missing scale factor",
                m_e[i].name);
    } else {
        report(Concern::Unscaled, Severity::Info,
            std::to_string(unscaled.size()) + " float8 weight(s) without scale tensors: plain casts (scale 1), or "
                + "their scales were dropped",
            m_e[unscaled.front()].name);
    }
}

} // namespace sl::quant::grouping

namespace sl::quant {

Fp8PairGrouper::Fp8PairGrouper()
    : m_layouts(std::make_unique<grouping::Fp8Layouts>())
{
}

Fp8PairGrouper::~Fp8PairGrouper() = default;

bool Fp8PairGrouper::pairs(std::string_view weight, DType dtype, std::string_view next)
{
    // As Grouper::fp8 pairs a weight with the `_scale_inv` right after it.
    using grouping::kScaleInvSuffix;
    return grouping::isFloat8(dtype) && weight.ends_with("weight")
        && next.size() == weight.size() + kScaleInvSuffix.size() && next.starts_with(weight)
        && next.ends_with(kScaleInvSuffix);
}

Entry Fp8PairGrouper::group(std::string name, const std::function<Entry()>& weight, const std::function<Entry()>& scale)
{
    // What Grouper::buildGroup makes of the plan Grouper::fp8 draws for the two. The parts are built in their
    // places: two entries fewer to move and destroy per pair.
    Entry g;
    g.parts.reserve(2);
    Entry& w = emplaceBuilt(g.parts, weight);
    Entry& s = emplaceBuilt(g.parts, scale);
    grouping::describeGroup(g, std::move(name), w, w.dtype, w.shape, w.shapeKnown, {}, m_layouts->describe(w, s, true, false));
    grouping::nameByRole(w, "weight");
    grouping::nameByRole(s, "weight_scale_inv");
    return g;
}

} // namespace sl::quant
