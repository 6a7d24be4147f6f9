#include "diff/reasons.h"

#include "diff/copy_compat.h"

#include "distributed/distributed_tensors.h"
#include "model/dtype.h"
#include "torch/wrapper_prefixes.h"
#include "util/name_index.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <unordered_map>

namespace sl {

namespace {

std::string_view lastSegment(std::string_view name)
{
    const size_t dot = name.rfind('.');
    return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

std::string_view parentOf(std::string_view name)
{
    const size_t dot = name.rfind('.');
    return dot == std::string_view::npos ? std::string_view() : name.substr(0, dot);
}

bool isNumber(std::string_view s)
{
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::vector<std::string_view> segments(std::string_view name)
{
    std::vector<std::string_view> out;
    size_t start = 0;
    for (;;) {
        const size_t dot = name.find('.', start);
        out.push_back(name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
        if (dot == std::string_view::npos)
            return out;
        start = dot + 1;
    }
}

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string describeWrappers(const std::vector<std::string>& removed)
{
    std::string out;
    for (size_t i = 0; i < removed.size(); ++i) {
        if (i)
            out += i + 1 == removed.size() ? " and " : ", ";
        out += std::string(wrapperOrigin(removed[i])) + "'s '" + removed[i] + "'";
    }
    return out;
}

// Tensors that quantization libraries store beside (or instead of) a float weight.
bool isQuantizationSuffix(std::string_view last)
{
    static constexpr std::array<std::string_view, 17> kSuffixes = { "absmax", "quant_map", "nested_absmax",
        "nested_quant_map", "quant_state", "SCB", "weight_format", "qweight", "qzeros", "scales", "g_idx",
        "weight_scale", "weight_scale_inv", "input_scale", "weight_zero_point", "qscale", "zero_point" };
    return std::find(kSuffixes.begin(), kSuffixes.end(), last) != kSuffixes.end();
}

// The float weight a quantization tensor belongs to: "x.weight.absmax" -> "x.weight", "x.qweight" ->
// "x.weight", "x.weight.quant_state.bitsandbytes__nf4" -> "x.weight".
std::string quantizedWeightOf(std::string_view name)
{
    auto segs = segments(name);
    for (size_t i = 0; i < segs.size(); ++i) {
        if (!isQuantizationSuffix(segs[i]))
            continue;
        std::string base;
        for (size_t k = 0; k < i; ++k)
            base += std::string(segs[k]) + ".";
        if (i > 0 && segs[i - 1] == "weight")
            return base.substr(0, base.size() - 1);
        return base + "weight";
    }
    return {};
}

bool looksLikeEmbedding(std::string_view name)
{
    for (std::string_view word : { "embed", "wte", "lm_head", "tok_embeddings", "word_embeddings", "shared.weight", "output.weight", "vocab" })
        if (name.find(word) != std::string_view::npos)
            return true;
    return false;
}

// A buffer that model code registers with persistent=False in one version and saved in another.
bool looksLikeNonPersistentBuffer(std::string_view name, const Entry* e)
{
    const std::string_view last = lastSegment(name);
    if (last == "inv_freq" || last == "position_ids" || last == "masked_bias" || last == "freqs_cis" || last == "cos_cached"
        || last == "sin_cached" || last == "_float_tensor" || last == "_cos_cached" || last == "_sin_cached")
        return true;
    // GPT-2's causal mask: attn.bias with shape [1, 1, n, n].
    return last == "bias" && lastSegment(parentOf(name)) == "attn" && e && e->shapeKnown && e->shape.size() == 4;
}

std::string pow2Divisor(int64_t n)
{
    int64_t d = 1;
    while (d < 4096 && n % (d * 2) == 0)
        d *= 2;
    return std::to_string(d);
}

// Known fused projections and the separate ones they concatenate along dim 0.
struct FusedSpec {
    std::vector<std::string_view> fused;
    std::vector<std::vector<std::string_view>> splits;
};
const std::vector<FusedSpec>& fusedSpecs()
{
    static const std::vector<FusedSpec> specs = {
        { { "qkv_proj", "qkv", "Wqkv", "wqkv", "query_key_value", "c_qkv", "in_proj" },
            { { "q_proj", "k_proj", "v_proj" }, { "q", "k", "v" }, { "query", "key", "value" }, { "wq", "wk", "wv" }, { "Wq", "Wk", "Wv" } } },
        { { "gate_up_proj", "gate_up", "w13", "w1_w3" }, { { "gate_proj", "up_proj" }, { "w1", "w3" }, { "gate", "up" } } },
        { { "kv_proj", "kv", "wkv" }, { { "k_proj", "v_proj" }, { "k", "v" }, { "wk", "wv" } } },
    };
    return specs;
}

class Explainer {
public:
    Explainer(DiffResult& diff, const Source& a, const Source& b)
        : m_diff(diff)
        , m_a(a)
        , m_b(b)
    {
        for (size_t i = 0; i < diff.rows.size(); ++i) {
            const DiffRow& row = diff.rows[i];
            if (row.status == RowStatus::Unexpected)
                m_unmatched[0].push_back(i);
            else if (row.status == RowStatus::Missing)
                m_unmatched[1].push_back(i);
        }
    }

    void run()
    {
        flatParams();
        wrapperPrefixes();
        quantized();
        shapes();
        fusedProjections();
        stackedExperts();
        quantizedKeys(false);
        tiedWeights();
        nonPersistentBuffers();
        dtypeCasts();
        ruleNotes();
    }

private:
    DiffResult& m_diff;
    const Source& m_a;
    const Source& m_b;
    std::array<std::vector<size_t>, 2> m_unmatched; // [0]: unexpected (A only), [1]: missing (B only)

    const std::string& nameOf(size_t row) const { return rowName(m_diff.rows[row], m_a, m_b); }
    const Entry* entryA(const DiffRow& r) const { return rowEntryA(r, m_a); }
    const Entry* entryB(const DiffRow& r) const { return rowEntryB(r, m_b); }
    // The keyed group a part row belongs to, on its side; nullptr for whole entries.
    const Entry* groupOfA(const DiffRow& r) const { return r.aPart.valid() ? &m_a.entries[r.a.get()] : nullptr; }
    const Entry* groupOfB(const DiffRow& r) const { return r.bPart.valid() ? &m_b.entries[r.b.get()] : nullptr; }
    const Entry* entryOf(size_t row) const
    {
        const DiffRow& r = m_diff.rows[row];
        return r.status == RowStatus::Missing ? entryB(r) : entryA(r);
    }
    bool explained(size_t row) const { return m_diff.rows[row].reason != Reason::None; }
    void set(size_t row, Reason reason, std::string text)
    {
        DiffRow& r = m_diff.rows[row];
        if (r.reason != Reason::None)
            return;
        r.reason = reason;
        r.explanation = std::move(text);
    }
    // `row`'s counterpart is `other` (reasons.h: DiffRow::partner); a row keeps the first one it is given.
    void point(size_t row, size_t other)
    {
        if (!m_diff.rows[row].partner.valid())
            m_diff.rows[row].partner = RowIndex(other);
    }
    void pair(size_t x, size_t y)
    {
        point(x, y);
        point(y, x);
    }
    static const char* sideName(int side) { return side == 0 ? "the checkpoint" : "the model"; }

    // FSDP1 LOCAL_STATE_DICT: flat parameters in A; the original names under their prefix are missing.
    void flatParams()
    {
        std::vector<std::string> prefixes;
        for (size_t row : m_unmatched[0]) {
            const std::string& name = nameOf(row);
            if (!distributed::isFlatParamName(name))
                continue;
            std::string prefix(parentOf(name));
            set(row, Reason::FlatParam,
                "an FSDP flat parameter (LOCAL_STATE_DICT): the parameters of " + (prefix.empty() ? std::string("the root module") : quoted(prefix))
                    + " flattened into one 1-D slice per rank; save with FULL_STATE_DICT or SHARDED_STATE_DICT to get their names back");
            prefixes.push_back(prefix);
        }
        if (prefixes.empty())
            return;
        for (size_t row : m_unmatched[1]) {
            const std::string& name = nameOf(row);
            for (const auto& prefix : prefixes)
                if (prefix.empty() || (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 && name[prefix.size()] == '.')) {
                    set(row, Reason::FlatParam,
                        "held inside the checkpoint's FSDP flat parameter " + quoted(prefix.empty() ? "flat_param" : prefix + "._flat_param")
                            + ", which does not keep parameter names");
                    break;
                }
        }
    }

    void wrapperPrefixes()
    {
        std::unordered_map<std::string, std::pair<size_t, std::vector<std::string>>> missing;
        for (size_t row : m_unmatched[1]) {
            UnwrappedName u = unwrapName(nameOf(row));
            missing.try_emplace(std::move(u.name), row, std::move(u.removed));
        }
        for (size_t row : m_unmatched[0]) {
            if (explained(row))
                continue;
            UnwrappedName u = unwrapName(nameOf(row));
            auto it = missing.find(u.name);
            if (it == missing.end() || (u.removed.empty() && it->second.second.empty()))
                continue;
            const size_t other = it->second.first;
            const auto& otherRemoved = it->second.second;
            std::string why;
            if (!u.removed.empty())
                why = "the checkpoint's key carries " + describeWrappers(u.removed);
            if (!otherRemoved.empty())
                why += (why.empty() ? "" : "; ") + std::string("the model's key carries ") + describeWrappers(otherRemoved);
            set(row, Reason::WrapperPrefix, why + "; the model expects " + quoted(nameOf(other)));
            set(other, Reason::WrapperPrefix, why + "; the checkpoint has " + quoted(nameOf(row)));
            pair(row, other);
            missing.erase(it);
        }
    }

    static std::string describe(const Entry& e)
    {
        if (!e.quantization)
            return std::string(dtypeName(e.dtype)) + " " + shapeToString(e.shape);
        std::string s = e.quantization->scheme;
        if (e.quantization->storageDType != DType::Unknown)
            s += " (stored as " + std::string(dtypeName(e.quantization->storageDType)) + ")";
        return s;
    }

    // describe(e) of a quantized group, kept per description object (groups of one layout share it).
    const std::string& describeShared(const Entry& e)
    {
        auto [it, fresh] = m_described.try_emplace(e.quantization.get());
        if (fresh)
            it->second = describe(e);
        return it->second;
    }

    void quantized()
    {
        for (size_t i = 0; i < m_diff.rows.size(); ++i) {
            DiffRow& r = m_diff.rows[i];
            if (!r.a.valid() || !r.b.valid())
                continue;
            const Entry& ea = *entryA(r);
            const Entry& eb = *entryB(r);
            // A copy that raises: a tensor subclass on one side (copy_compat.h says which and why).
            if (r.status == RowStatus::CopyError) {
                const CopyVerdict v = copyCompatibility(ea, eb);
                set(i, v.quantized ? Reason::QuantizedCounterpart : Reason::ShardedCounterpart, v.why);
                continue;
            }
            // One stored key of a quantized group against the other side's plain tensor (or another scheme's).
            const Entry* ga = groupOfA(r);
            const Entry* gb = groupOfB(r);
            if ((ga && ga->quantization) || (gb && gb->quantization)) {
                const Entry& q = ga ? *ga : *gb;
                const Entry& part = ga ? ea : eb;
                const bool scaleLost = r.status == RowStatus::DtypeMismatch && part.name == "weight"
                    && (q.part("weight_scale_inv") || q.part("weight_scale") || q.part("SCB"));
                // One text per part row (90,000 in a DeepSeek-V3 diff): built in place, the scheme's
                // description shared by the groups of one layout.
                const std::string_view tail = scaleLost
                    ? "; a plain load casts the stored values without their scale, so they would be wrong"
                    : "; a plain load_state_dict cannot convert it: load with the quantization library, or dequantize first";
                const std::string& scheme = describeShared(q);
                std::string text;
                text.reserve(64 + q.name.size() + scheme.size() + part.name.size() + tail.size());
                text.append(ga ? "the checkpoint" : "the model").append(" stores '").append(q.name).append("' as ");
                text.append(scheme).append(" and this key is its '").append(part.name).append("'").append(tail);
                set(i, Reason::QuantizedCounterpart, std::move(text));
                continue;
            }
            if (!ea.quantization && !eb.quantization)
                continue;
            if (ea.quantization && eb.quantization && ea.quantization->scheme == eb.quantization->scheme)
                continue;
            set(i, Reason::QuantizedCounterpart,
                "the checkpoint holds " + describe(ea) + ", the model " + describe(eb)
                    + (ea.quantization && eb.quantization ? "; the quantization schemes differ" : ""));
        }
        quantizedKeys(true);
    }

    // Keys of a quantized group that the other side lacks (absmax, qweight, weight_scale_inv). First only
    // where the other side holds the weight itself; the keys of a weight it has under no name at all wait
    // until the layouts (stacked experts, fused projections) have had their say, which pair them better.
    void quantizedKeys(bool withCounterpartOnly)
    {
        for (int side = 0; side < 2; ++side) {
            for (size_t row : m_unmatched[side]) {
                if (explained(row))
                    continue;
                const DiffRow& r = m_diff.rows[row];
                const Entry* group = side == 0 ? groupOfA(r) : groupOfB(r);
                const std::string& name = nameOf(row);
                const std::string derived = group ? std::string() : quantizedWeightOf(name);
                const std::string& weight = group ? group->name : derived;
                if (weight.empty())
                    continue;
                const size_t otherRow = unmatchedRowNamed(1 - side, weight);
                const bool otherHasWeight = otherRow != NameIndex::npos || hasName(1 - side, weight);
                if (withCounterpartOnly && !otherHasWeight)
                    continue;
                if (group && group->quantization) {
                    // Built in place: one per part row of every quantized group the other side lacks.
                    const Entry& part = side == 0 ? *entryA(r) : *entryB(r);
                    const std::string& scheme = describeShared(*group);
                    std::string text;
                    text.reserve(96 + part.name.size() + scheme.size() + group->name.size());
                    text.append("the '").append(part.name).append("' of ").append(sideName(side)).append("'s ");
                    text.append(scheme).append(" weight '").append(group->name).append("'; ").append(sideName(1 - side));
                    text.append(otherHasWeight ? " holds that weight unquantized" : " has no such key");
                    set(row, Reason::QuantizedCounterpart, std::move(text));
                } else if (otherHasWeight) {
                    set(row, Reason::QuantizedCounterpart,
                        "a quantization tensor (" + std::string(lastSegment(name)) + ") of " + quoted(weight) + ", which "
                            + sideName(1 - side) + " holds unquantized");
                } else {
                    continue;
                }
                if (otherRow != NameIndex::npos) {
                    set(otherRow, Reason::QuantizedCounterpart,
                        std::string(sideName(side)) + " stores this weight quantized (" + quoted(name) + ")");
                    pair(row, otherRow);
                }
            }
        }
    }

    bool hasName(int side, std::string_view name)
    {
        const Source& s = side == 0 ? m_a : m_b;
        const auto nameAt = [&s](size_t i) -> std::string_view { return s.entries[i].name; };
        if (!m_names[side]) {
            m_names[side].emplace();
            m_names[side]->insertAll(s.entries.size(), nameAt);
        }
        return m_names[side]->find(name, nameAt) != NameIndex::npos;
    }
    std::array<std::optional<NameIndex>, 2> m_names; // built on first use
    // The unexpected (0) or missing (1) row named `name` (the first), or NameIndex::npos; indexed once for both passes of
    // quantizedKeys. (Flat indexes: the node-based maps over 90,000 unmatched rows and names were about a
    // fifth of the s2 diff's reasons phase.)
    size_t unmatchedRowNamed(int side, std::string_view name)
    {
        const std::vector<size_t>& rows = m_unmatched[side];
        const auto nameAt = [this, &rows](size_t k) -> std::string_view { return nameOf(rows[k]); };
        if (!m_unmatchedNames[side]) {
            m_unmatchedNames[side].emplace();
            m_unmatchedNames[side]->insertAll(rows.size(), nameAt);
        }
        const size_t k = m_unmatchedNames[side]->find(name, nameAt);
        return k == NameIndex::npos ? NameIndex::npos : rows[k];
    }
    std::array<std::optional<NameIndex>, 2> m_unmatchedNames; // built on first use
    std::unordered_map<const Quantization*, std::string> m_described; // describeShared

    // Shape mismatches: a shard against the global tensor, a padded vocabulary, a transposed weight.
    void shapes()
    {
        for (size_t i = 0; i < m_diff.rows.size(); ++i) {
            DiffRow& r = m_diff.rows[i];
            if (r.status != RowStatus::ShapeMismatch || r.reason != Reason::None)
                continue;
            const Entry& ea = *entryA(r);
            const Entry& eb = *entryB(r);
            const std::string sa = shapeToString(ea.shape), sb = shapeToString(eb.shape);
            for (const Entry* e : { &ea, &eb }) {
                const Entry& other = e == &ea ? eb : ea;
                if (e->sharding && !e->sharding->localShape.empty() && e->sharding->localShape == other.shape) {
                    set(i, Reason::ShardedCounterpart,
                        std::string(e == &ea ? "the checkpoint" : "the model") + " holds " + shapeToString(e->shape) + " sharded ("
                            + std::string(shardingKindName(e->sharding->kind)) + "), the other side one local piece " + shapeToString(other.shape));
                }
            }
            if (r.reason != Reason::None)
                continue;
            if (ea.shape.size() != eb.shape.size() || ea.shape.empty())
                continue;
            std::vector<size_t> differing;
            for (size_t d = 0; d < ea.shape.size(); ++d)
                if (ea.shape[d] != eb.shape[d])
                    differing.push_back(d);
            if (differing.size() == 1) {
                const size_t d = differing.front();
                const int64_t x = ea.shape[d], y = eb.shape[d];
                const int64_t big = std::max(x, y), small = std::min(x, y);
                const std::string& name = rowName(r, m_a, m_b);
                if (d == 0 && looksLikeEmbedding(name) && small > 0 && big - small < std::max<int64_t>(small / 4, 1024)) {
                    set(i, Reason::PaddedVocabulary,
                        "vocabulary rows differ: " + std::string(x > y ? "the checkpoint" : "the model") + " has " + std::to_string(big)
                            + " (a multiple of " + pow2Divisor(big) + "), the other " + std::to_string(small)
                            + ": the embedding was padded or resized (resize_token_embeddings, or slice the first " + std::to_string(small) + " rows)");
                } else if (small > 0 && big % small == 0) {
                    set(i, Reason::ShardedCounterpart,
                        std::string(x < y ? "the checkpoint" : "the model") + " holds 1/" + std::to_string(big / small) + " of dim " + std::to_string(d)
                            + " (" + (x < y ? sa : sb) + " of " + (x < y ? sb : sa)
                            + "): a tensor-parallel or FSDP shard; gather it (torch.distributed.checkpoint, FULL_STATE_DICT) before loading");
                }
            } else if (ea.shape.size() == 2 && ea.shape[0] == eb.shape[1] && ea.shape[1] == eb.shape[0]) {
                set(i, Reason::Transposed,
                    "the same dimensions transposed (" + sa + " vs " + sb
                        + "): GPT-2's Conv1D stores [in, out] where nn.Linear stores [out, in]; transpose when converting");
            }
        }
    }

    struct Unmatched {
        size_t row;
        std::string_view proj; // the module's own name: "q_proj"
    };
    // (indices + enclosing module, tail) -> the unmatched rows of one side: "0,|attn" + "weight".
    using ByModule = std::map<std::pair<std::string, std::string>, std::vector<Unmatched>>;
    ByModule byModule(int side) const
    {
        ByModule out;
        for (size_t row : m_unmatched[side]) {
            if (explained(row))
                continue;
            const std::string& name = nameOf(row);
            const std::string_view tail = lastSegment(name);
            const std::string_view module = parentOf(name);
            if (module.empty())
                continue;
            // Keyed loosely (the indices in the name, the enclosing module's own name, the tensor's name) so
            // a fused projection is recognised even while the prefixes still differ (before the renames).
            std::vector<int64_t> numbers;
            foldIndices(name, &numbers);
            std::string key;
            for (int64_t n : numbers)
                key += std::to_string(n) + ",";
            key += "|";
            key += lastSegment(parentOf(module));
            out[{ std::move(key), std::string(tail) }].push_back({ row, lastSegment(module) });
        }
        return out;
    }

    void fusedProjections()
    {
        ByModule sides[2] = { byModule(0), byModule(1) };
        for (int side = 0; side < 2; ++side) {
            for (const auto& [key, rows] : sides[side]) {
                auto other = sides[1 - side].find(key);
                if (other == sides[1 - side].end())
                    continue;
                for (const Unmatched& fused : rows)
                    for (const FusedSpec& spec : fusedSpecs()) {
                        if (std::find(spec.fused.begin(), spec.fused.end(), fused.proj) == spec.fused.end())
                            continue;
                        for (const auto& split : spec.splits)
                            tryFused(side, fused, split, other->second, key);
                    }
            }
        }
    }

    void tryFused(int side, const Unmatched& fused, const std::vector<std::string_view>& split, const std::vector<Unmatched>& candidates,
        const std::pair<std::string, std::string>& key)
    {
        if (explained(fused.row))
            return;
        std::vector<size_t> parts;
        for (std::string_view want : split)
            for (const Unmatched& c : candidates)
                if (c.proj == want && !explained(c.row))
                    parts.push_back(c.row);
        if (parts.size() != split.size())
            return;
        // With shapes on both sides, the pieces must add up along dim 0 and agree on the rest.
        const Entry* f = entryOf(fused.row);
        if (f && f->shapeKnown && !f->shape.empty()) {
            int64_t sum = 0;
            for (size_t p : parts) {
                const Entry* e = entryOf(p);
                if (!e || !e->shapeKnown || e->shape.size() != f->shape.size())
                    return;
                for (size_t d = 1; d < f->shape.size(); ++d)
                    if (e->shape[d] != f->shape[d])
                        return;
                sum += e->shape[0];
            }
            if (sum != f->shape[0])
                return;
        }
        std::string names;
        for (size_t k = 0; k < parts.size(); ++k)
            names += (k ? " + " : "") + quoted(nameOf(parts[k]));
        set(fused.row, Reason::FusedProjection,
            std::string(sideName(side)) + "'s fused projection holds what " + sideName(1 - side) + " keeps as " + names
                + ", concatenated along dim 0: split it (or cat them) when converting");
        for (size_t p : parts) {
            set(p, Reason::FusedProjection,
                std::string("one slice of ") + sideName(side) + "'s fused " + quoted(nameOf(fused.row)) + " (dim 0)");
            point(p, fused.row);
        }
        point(fused.row, parts.front());
        (void)key;
    }

    // Of the stacked rows under `prefix` ("...experts"), the one a per-expert row goes into: the same
    // projection (experts.3.w1.weight -> experts.w1), or the fused one that holds it (experts.3.gate_proj
    // -> experts.gate_up_proj); the first one when none is named alike.
    size_t stackedCounterpart(std::string_view perExpert, std::string_view prefix, const std::vector<size_t>& stacked) const
    {
        auto projection = [](std::string_view rest) { return rest.substr(0, rest.find('.')); };
        std::string_view tail = perExpert.substr(std::min(perExpert.size(), prefix.size() + 1)); // "3.w1.weight"
        tail = tail.substr(std::min(tail.size(), tail.find('.') + 1)); // "w1.weight"
        const std::string_view own = projection(tail);
        std::string_view stem = own;
        if (stem.size() > 5 && stem.substr(stem.size() - 5) == "_proj")
            stem.remove_suffix(5);
        std::optional<size_t> alike;
        for (size_t row : stacked) {
            const std::string_view name = nameOf(row);
            const std::string_view theirs = projection(name.substr(std::min(name.size(), prefix.size() + 1)));
            if (theirs == own)
                return row;
            if (!alike && !stem.empty() && theirs.find(stem) != std::string_view::npos)
                alike = row;
        }
        return alike.value_or(stacked.front());
    }

    // Per-expert MoE weights (experts.3.w1.weight) on one side, stacked ones (experts.w1) on the other.
    void stackedExperts()
    {
        struct PerExpert {
            std::vector<size_t> rows;
            std::vector<int64_t> experts;
        };
        for (int side = 0; side < 2; ++side) {
            std::map<std::string, PerExpert> perExpert; // "...experts" -> rows
            for (size_t row : m_unmatched[side]) {
                if (explained(row))
                    continue;
                const std::string& name = nameOf(row);
                const size_t at = name.find("experts.");
                if (at == std::string::npos || (at > 0 && name[at - 1] != '.'))
                    continue;
                const size_t idxStart = at + 8;
                const size_t idxEnd = name.find('.', idxStart);
                if (idxEnd == std::string::npos || !isNumber(std::string_view(name).substr(idxStart, idxEnd - idxStart)))
                    continue;
                auto& g = perExpert[name.substr(0, at + 7)];
                g.rows.push_back(row);
                g.experts.push_back(std::stoll(name.substr(idxStart, idxEnd - idxStart)));
            }
            // The other side's rows by the "...experts" prefix they continue with a non-numeric segment
            // (experts.w1, experts.gate_up_proj): one pass instead of one per group.
            std::unordered_map<std::string_view, std::vector<size_t>> stackedByPrefix;
            if (!perExpert.empty())
                for (size_t row : m_unmatched[1 - side]) {
                    const std::string& name = nameOf(row);
                    for (size_t at = name.find("experts."); at != std::string::npos; at = name.find("experts.", at + 1)) {
                        if (at > 0 && name[at - 1] != '.')
                            continue;
                        const size_t segStart = at + 8;
                        const size_t next = name.find('.', segStart);
                        if (!isNumber(std::string_view(name).substr(segStart, next == std::string::npos ? std::string::npos : next - segStart)))
                            stackedByPrefix[std::string_view(name).substr(0, at + 7)].push_back(row);
                    }
                }
            for (auto& [prefix, g] : perExpert) {
                std::sort(g.experts.begin(), g.experts.end());
                const int64_t count = static_cast<int64_t>(std::unique(g.experts.begin(), g.experts.end()) - g.experts.begin());
                std::vector<size_t> stacked;
                bool shapesAgree = false, shapesKnown = false;
                if (auto it = stackedByPrefix.find(prefix); it != stackedByPrefix.end())
                    for (size_t row : it->second) {
                        stacked.push_back(row);
                        if (const Entry* e = entryOf(row); e && e->shapeKnown && !e->shape.empty()) {
                            shapesKnown = true;
                            shapesAgree = shapesAgree || e->shape[0] == count;
                        }
                    }
                if (stacked.empty() || (shapesKnown && !shapesAgree))
                    continue;
                std::unordered_map<size_t, size_t> firstInto; // stacked row -> the first per-expert row that goes into it
                const std::string separately = std::string(sideName(side)) + " stores " + std::to_string(count) + " experts separately under "
                    + quoted(prefix + ".{i}") + "; " + sideName(1 - side) + " stacks them in ";
                for (size_t row : g.rows) {
                    const size_t into = stackedCounterpart(nameOf(row), prefix, stacked);
                    std::string text = separately + quoted(nameOf(into)) + ": torch.stack when converting";
                    // A key of a quantized expert (FP8's weight and weight_scale_inv) says so: stack after dequantizing.
                    const DiffRow& r = m_diff.rows[row];
                    const Entry* group = side == 0 ? groupOfA(r) : groupOfB(r);
                    if (group && group->quantization)
                        text += "; this key is the '" + (side == 0 ? entryA(r) : entryB(r))->name + "' of a " + describeShared(*group)
                            + " weight: dequantize before stacking";
                    set(row, Reason::StackedExperts, std::move(text));
                    point(row, into);
                    firstInto.try_emplace(into, row);
                }
                for (size_t row : stacked) {
                    set(row, Reason::StackedExperts,
                        "the " + std::to_string(count) + " experts stacked along dim 0; " + sideName(side) + " keeps one tensor per expert under "
                            + quoted(prefix + ".{i}"));
                    // Back at one of its own experts (so each per-expert row has one counterpart).
                    auto it = firstInto.find(row);
                    point(row, it != firstInto.end() ? it->second : g.rows.front());
                }
            }
        }
    }

    // A missing key whose storage is shared with a loaded one, or an output projection missing beside an
    // embedding of the same shape (save_pretrained leaves tied copies out).
    void tiedWeights()
    {
        for (int side = 0; side < 2; ++side) {
            for (size_t row : m_unmatched[side]) {
                if (explained(row))
                    continue;
                const Entry* e = entryOf(row);
                if (!e)
                    continue;
                if (const std::string* tied = e->attribute("tied_with")) {
                    set(row, Reason::TiedWeight,
                        "shares storage with " + *tied + " in " + sideName(side) + " (tied weights): " + sideName(1 - side)
                            + " keeps one copy; harmless when the model ties them (tie_weights(), strict=False)");
                    continue;
                }
                const std::string& name = nameOf(row);
                const std::string_view module = parentOf(name);
                if (lastSegment(name) != "weight" || !(module == "lm_head" || lastSegment(module) == "lm_head" || module == "output" || module == "decoder"))
                    continue;
                const Source& other = side == 0 ? m_b : m_a;
                for (const Entry& cand : other.entries) {
                    std::string_view n = cand.name;
                    if (!looksLikeEmbedding(n) || n.find("lm_head") != std::string_view::npos || lastSegment(n) != "weight")
                        continue;
                    if (e->shapeKnown && cand.shapeKnown && !(cand.shape == e->shape))
                        continue;
                    set(row, Reason::TiedWeight,
                        "probably tied to " + quoted(n) + " (same shape " + shapeToString(cand.shape) + "): " + sideName(1 - side)
                            + " saved one copy of the tied weights; harmless when the model ties them (tie_word_embeddings)");
                    break;
                }
            }
        }
    }

    void nonPersistentBuffers()
    {
        // A live dump lists the model's non-persistent buffers exactly.
        std::unordered_map<std::string, bool> declared;
        for (const Source* s : { &m_b, &m_a })
            for (const auto& c : s->containers)
                if (c.path == "non_persistent_buffers" && s->container != c.path && s->backing) {
                    try {
                        for (const Entry& e : s->withContainer(c.path).entries)
                            declared.emplace(e.name, s == &m_b);
                    } catch (const std::exception&) {
                    }
                }
        // The heuristic below guesses from names; a live dump of the model knows exactly which buffers it does not
        // save, and a key whose last segment the other side holds under another name wants a rename, not a drop.
        std::array<std::unordered_map<std::string_view, size_t>, 2> tails;
        for (int side = 0; side < 2; ++side)
            for (size_t row : m_unmatched[side])
                ++tails[side][lastSegment(nameOf(row))];
        for (int side = 0; side < 2; ++side) {
            const bool exact = (side == 0 ? m_b : m_a).format == SourceFormat::LiveDump;
            for (size_t row : m_unmatched[side]) {
                if (explained(row))
                    continue;
                const std::string& name = nameOf(row);
                auto it = declared.find(name);
                if (it == declared.end() && (exact || tails[1 - side].count(lastSegment(name))))
                    continue;
                if (it != declared.end()) {
                    set(row, Reason::NonPersistentBuffer,
                        std::string(it->second ? "the model" : "the checkpoint's model")
                            + " registers this buffer with persistent=False, so its state dict leaves it out: drop the key (a drop rule) or load with strict=False");
                } else if (looksLikeNonPersistentBuffer(name, entryOf(row))) {
                    set(row, Reason::NonPersistentBuffer,
                        "a buffer model code usually registers with persistent=False (recomputed at init); one version of the code saved it: "
                        "drop the key (a drop rule) or load with strict=False");
                }
            }
        }
    }

    void dtypeCasts()
    {
        for (size_t i = 0; i < m_diff.rows.size(); ++i) {
            DiffRow& r = m_diff.rows[i];
            if (r.status != RowStatus::DtypeMismatch || r.reason != Reason::None)
                continue;
            const Entry& ea = *entryA(r);
            const Entry& eb = *entryB(r);
            const bool narrowing = dtypeBits(eb.dtype) < dtypeBits(ea.dtype) || (dtypeIsFloatingPoint(ea.dtype) && !dtypeIsFloatingPoint(eb.dtype));
            set(i, Reason::DtypeCast,
                "the checkpoint holds " + std::string(dtypeName(ea.dtype)) + ", the model " + std::string(dtypeName(eb.dtype))
                    + ": load_state_dict copies with a cast" + (narrowing ? ", losing precision" : ""));
        }
    }

    // Renamed and dropped rows say which rule did it.
    void ruleNotes()
    {
        for (auto& r : m_diff.rows) {
            if (!r.explanation.empty() || !r.rule.valid() || !r.a.valid())
                continue;
            const std::string& original = rowKeyA(r, m_a);
            const std::string rule = "rule " + std::to_string(r.rule.get() + 1);
            if (r.status == RowStatus::Dropped)
                r.explanation = "dropped by " + rule;
            else if (r.status == RowStatus::Unexpected && r.mapped != original)
                r.explanation = "'" + original + "' after the rules (last: " + rule + "); the model has no such key";
            else if (r.mapped != original)
                r.explanation = "'" + original + "' renamed by " + rule;
        }
    }
};

} // namespace

UnwrappedName unwrapName(std::string_view name)
{
    UnwrappedName out;
    auto note = [&](std::string_view w) {
        std::string s = std::string(w) + ".";
        if (std::find(out.removed.begin(), out.removed.end(), s) == out.removed.end())
            out.removed.push_back(std::move(s));
    };
    auto segs = segments(name);
    size_t first = 0;
    if (segs.size() > 2 && segs[0] == "base_model" && segs[1] == "model") {
        out.removed.push_back("base_model.model.");
        first = 2;
    }
    bool leading = true;
    out.name.reserve(name.size());
    for (size_t i = first; i < segs.size(); ++i) {
        const std::string_view s = segs[i];
        const bool last = i + 1 == segs.size();
        if (!last && isInnerWrapperSegment(s)) {
            note(s);
            continue;
        }
        if (!last && leading && s == "module") {
            note(s);
            continue;
        }
        leading = false;
        if (!out.name.empty())
            out.name += '.';
        out.name += s;
    }
    return out;
}

void explainRows(DiffResult& diff, const Source& a, const Source& b)
{
    Explainer(diff, a, b).run();
}

bool looksLikeNonPersistentBufferName(std::string_view name, const Entry* entry)
{
    return looksLikeNonPersistentBuffer(name, entry);
}

} // namespace sl
