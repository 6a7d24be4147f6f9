#include "tensor_compare.h"

#include "util/error.h"
#include "util/load_control.h"
#include "util/parallel.h"
#include "values/element_decode.h"
#include "values/tensor_bytes.h"
#include "values/value_reader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>
#include <unordered_map>

namespace sl::values {

namespace {

constexpr size_t kBlock = 4096;

struct PairPartial {
    bool equalBytes = true;
    bool equalValues = true;
    uint64_t finite = 0;
    uint64_t nanMismatch = 0;
    double maxAbs = -1; // negative: none yet
    double maxRel = -1;
    double dot = 0, normA = 0, normB = 0;
};

void mergePair(PairPartial& into, const PairPartial& p)
{
    into.equalBytes = into.equalBytes && p.equalBytes;
    into.equalValues = into.equalValues && p.equalValues;
    into.finite += p.finite;
    into.nanMismatch += p.nanMismatch;
    into.maxAbs = std::max(into.maxAbs, p.maxAbs);
    into.maxRel = std::max(into.maxRel, p.maxRel);
    into.dot += p.dot;
    into.normA += p.normA;
    into.normB += p.normB;
}

void accumulate(const double* va, const double* vb, size_t n, PairPartial& s)
{
    for (size_t k = 0; k < n; ++k) {
        const double x = va[k], y = vb[k];
        s.nanMismatch += std::isnan(x) != std::isnan(y);
        if (!std::isfinite(x) || !std::isfinite(y))
            continue;
        ++s.finite;
        const double d = std::fabs(x - y);
        s.maxAbs = std::max(s.maxAbs, d);
        const double m = std::max(std::fabs(x), std::fabs(y));
        if (m > 0)
            s.maxRel = std::max(s.maxRel, d / m);
        s.dot += x * y;
        s.normA += x * x;
        s.normB += y * y;
    }
}

// Whether two tensors of one dtype hold the same elements byte for byte (logical order), read in pieces.
bool sameBytes(const TensorBytes& a, const TensorBytes& b, uint64_t pieceBytes)
{
    std::vector<uint8_t> bufA, bufB;
    const uint64_t per = std::max<uint64_t>(pieceBytes / a.itemSize(), 1);
    for (uint64_t first = 0; first < a.numel(); first += per) {
        const uint64_t n = std::min(per, a.numel() - first);
        if (std::memcmp(a.read(first, n, bufA), b.read(first, n, bufB), n * a.itemSize()) != 0)
            return false;
    }
    return true;
}

struct PairWork {
    std::optional<TensorBytes> a, b;
    // Or, when either side is a quantized group or decodes through a reader (complex, float4): both sides'
    // values; `a` and `b` then only serve the byte comparison of two plain tensors of one dtype.
    std::unique_ptr<const ValueReader> ra, rb;
    bool sameDtype = false;
    size_t firstPiece = 0, pieces = 0;
};

struct PairPiece {
    size_t pair = 0;
    uint64_t first = 0, count = 0;
    PairPartial partial;
};

} // namespace

std::vector<ValueComparison> compareValues(const Source& a, const Source& b, const std::vector<std::pair<size_t, size_t>>& pairs, const StatsOptions& options)
{
    FileCache filesA, filesB;
    std::vector<ValueComparison> out(pairs.size());
    std::vector<PairWork> work(pairs.size());
    std::vector<PairPiece> pieces;
    for (size_t i = 0; i < pairs.size(); ++i) {
        const Entry& ea = storedTensorOf(a.entries.at(pairs[i].first));
        const Entry& eb = storedTensorOf(b.entries.at(pairs[i].second));
        ValueComparison& r = out[i];
        std::string why;
        PairWork& w = work[i];
        if (ValueReader::needsReader(ea) || ValueReader::needsReader(eb)) {
            if (!ea.shapeKnown || !eb.shapeKnown || !(ea.shape == eb.shape)) {
                r.why = "shapes differ (" + shapeToString(ea.shape) + " vs " + shapeToString(eb.shape) + ")";
                continue;
            }
            try {
                w.ra = ValueReader::open(a, ea, filesA, why);
                if (w.ra)
                    w.rb = ValueReader::open(b, eb, filesB, why);
            } catch (const LoadError& err) {
                why = err.problem();
                w.ra.reset();
                w.rb.reset();
            }
            if (!w.ra || !w.rb || w.ra->numel() != w.rb->numel()) {
                r.why = why.empty() ? std::string("different numbers of values") : why;
                w.ra.reset();
                w.rb.reset();
                continue;
            }
            // Two plain tensors of one dtype that only decode through a reader (complex, float4) still have
            // bytes to compare: equal bytes are equal bytes whatever the values mean.
            if (ea.kind == EntryKind::Tensor && eb.kind == EntryKind::Tensor && !ea.quantization && !eb.quantization
                && ea.dtype == eb.dtype) {
                try {
                    w.a = TensorBytes::open(a, ea, filesA);
                    w.b = TensorBytes::open(b, eb, filesB);
                    w.sameDtype = w.a->numel() == w.b->numel();
                } catch (const LoadError&) {
                    w.a.reset();
                    w.b.reset();
                }
            }
            for (const auto* rd : { w.ra.get(), w.rb.get() })
                if (!rd->note().empty())
                    r.note += (r.note.empty() ? "" : "; ") + std::string(rd == w.ra.get() ? "A " : "B ") + rd->note();
            const uint64_t perPiece = std::max<uint64_t>(options.pieceBytes / sizeof(double), 1);
            w.firstPiece = pieces.size();
            for (uint64_t first = 0; first < w.ra->numel(); first += perPiece)
                pieces.push_back({ i, first, std::min(perPiece, w.ra->numel() - first), {} });
            w.pieces = pieces.size() - w.firstPiece;
            r.compared = true;
            continue;
        }
        if (!decodable(ea.dtype, &why) || !decodable(eb.dtype, &why)) {
            r.why = why;
            continue;
        }
        if (!ea.shapeKnown || !eb.shapeKnown || !(ea.shape == eb.shape)) {
            r.why = "shapes differ (" + shapeToString(ea.shape) + " vs " + shapeToString(eb.shape) + ")";
            continue;
        }
        try {
            w.a = TensorBytes::open(a, ea, filesA);
            w.b = TensorBytes::open(b, eb, filesB);
        } catch (const LoadError& err) {
            r.why = err.problem();
            w.a.reset();
            w.b.reset();
            continue;
        }
        w.sameDtype = ea.dtype == eb.dtype;
        const uint64_t perPiece = std::max<uint64_t>(options.pieceBytes / std::max(w.a->itemSize(), w.b->itemSize()), 1);
        w.firstPiece = pieces.size();
        for (uint64_t first = 0; first < w.a->numel(); first += perPiece)
            pieces.push_back({ i, first, std::min(perPiece, w.a->numel() - first), {} });
        w.pieces = pieces.size() - w.firstPiece;
        r.compared = true;
    }
    LoadControl* progress = const_cast<LoadControl*>(options.control);
    if (progress)
        progress->addTotal(pieces.size());
    parallelFor(pieces.size(), threadsFor(options.threads), [&](size_t i) {
        if (options.control)
            options.control->checkpoint(a.path);
        PairPiece& p = pieces[i];
        const PairWork& w = work[p.pair];
        double va[kBlock], vb[kBlock];
        if (w.ra) {
            p.partial.equalBytes = false; // values made from several stored tensors: no single bytes to compare
            for (uint64_t off = 0; off < p.count; off += kBlock) {
                const size_t n = static_cast<size_t>(std::min<uint64_t>(kBlock, p.count - off));
                w.ra->read(p.first + off, n, va);
                w.rb->read(p.first + off, n, vb);
                p.partial.equalValues = p.partial.equalValues && std::memcmp(va, vb, n * sizeof(double)) == 0;
                accumulate(va, vb, n, p.partial);
            }
            if (progress)
                progress->advance();
            return;
        }
        thread_local std::vector<uint8_t> bufA, bufB;
        const uint8_t* pa = w.a->read(p.first, p.count, bufA);
        const uint8_t* pb = w.b->read(p.first, p.count, bufB);
        PairPartial& s = p.partial;
        s.equalBytes = w.sameDtype && std::memcmp(pa, pb, p.count * w.a->itemSize()) == 0;
        s.equalValues = s.equalBytes;
        for (uint64_t off = 0; off < p.count; off += kBlock) {
            const size_t n = static_cast<size_t>(std::min<uint64_t>(kBlock, p.count - off));
            decode(w.a->dtype(), pa + off * w.a->itemSize(), n, va);
            decode(w.b->dtype(), pb + off * w.b->itemSize(), n, vb);
            accumulate(va, vb, n, s);
        }
        if (progress)
            progress->advance();
    });
    for (size_t i = 0; i < pairs.size(); ++i) {
        ValueComparison& r = out[i];
        if (!r.compared)
            continue;
        const PairWork& w = work[i];
        PairPartial total;
        total.equalBytes = w.sameDtype && !w.ra;
        for (size_t k = 0; k < w.pieces; ++k)
            mergePair(total, pieces[w.firstPiece + k].partial);
        if (w.ra && w.sameDtype && w.a && w.b)
            total.equalBytes = sameBytes(*w.a, *w.b, options.pieceBytes);
        r.equalBytes = total.equalBytes;
        r.equalValues = total.equalValues;
        r.finiteCompared = total.finite;
        r.nanMismatch = total.nanMismatch;
        if (total.maxAbs >= 0)
            r.maxAbsDiff = total.maxAbs;
        if (total.maxRel >= 0)
            r.maxRelDiff = total.maxRel;
        if (total.normA > 0 && total.normB > 0)
            r.cosine = total.dot / (std::sqrt(total.normA) * std::sqrt(total.normB));
    }
    return out;
}

std::vector<ValueComparison> compareDiffRows(const Source& a, const Source& b, const DiffResult& diff, const StatsOptions& options)
{
    std::vector<std::pair<size_t, size_t>> pairs;
    std::vector<size_t> rowOf;
    // A row that is one key of a keyed group compares the whole group's values when the key is the group's
    // weight itself (an FP8 or bitsandbytes weight against a float one); its scales and codes are not weights.
    auto mainKey = [](const Source& s, auto entry, PartIndex part) {
        return !part.valid() || s.entries[entry.get()].parts[part.get()].name == "weight";
    };
    // A weight whose counterpart is a keyed group stored under other keys (GPTQ's `P.weight` is qweight,
    // qzeros and scales): the load sees an unexpected and missing keys, but the values still compare, and the
    // comparison goes on the weight's row.
    auto groupsByName = [](const Source& s) {
        std::unordered_map<std::string_view, size_t> out;
        for (size_t i = 0; i < s.entries.size(); ++i)
            if (isKeyedGroup(s.entries[i])
                && std::none_of(s.entries[i].parts.begin(), s.entries[i].parts.end(),
                    [&](const Entry& p) { return *p.attribute("key") == s.entries[i].name; }))
                out.emplace(s.entries[i].name, i);
        return out;
    };
    const auto groupsA = groupsByName(a), groupsB = groupsByName(b);
    for (size_t i = 0; i < diff.rows.size(); ++i) {
        const DiffRow& row = diff.rows[i];
        if (row.a.valid() && row.b.valid() && mainKey(a, row.a, row.aPart) && mainKey(b, row.b, row.bPart)) {
            pairs.emplace_back(row.a.get(), row.b.get());
            rowOf.push_back(i);
        } else if (row.status == RowStatus::Unexpected && !row.aPart.valid()) {
            if (auto it = groupsB.find(rowName(row, a, b)); it != groupsB.end()) {
                pairs.emplace_back(row.a.get(), it->second);
                rowOf.push_back(i);
            }
        } else if (row.status == RowStatus::Missing && !row.bPart.valid()) {
            if (auto it = groupsA.find(rowName(row, a, b)); it != groupsA.end()) {
                pairs.emplace_back(it->second, row.b.get());
                rowOf.push_back(i);
            }
        }
    }
    auto compared = compareValues(a, b, pairs, options);
    std::vector<ValueComparison> perRow(diff.rows.size());
    for (size_t k = 0; k < compared.size(); ++k)
        perRow[rowOf[k]] = std::move(compared[k]);
    return perRow;
}

namespace {

// Content hashes of the entries (no histograms), keyed so only same-dtype, same-shape tensors can meet.
using ContentKey = std::tuple<DType, std::string, uint64_t>;

std::vector<std::optional<ContentKey>> contentKeys(const Source& s, const std::vector<size_t>& entries, const StatsOptions& options)
{
    StatsOptions o = options;
    o.bins = 0;
    std::vector<std::optional<ContentKey>> keys(entries.size());
    const auto stats = computeStats(s, entries, o);
    for (size_t i = 0; i < entries.size(); ++i)
        if (stats[i].stats) {
            const Entry& e = s.entries[entries[i]];
            keys[i] = ContentKey { e.dtype, shapeToString(e.shape), stats[i].stats->hash };
        }
    return keys;
}

} // namespace

std::vector<ContentMatch> matchByContent(const Source& a, const std::vector<size_t>& aEntries, const Source& b,
    const std::vector<size_t>& bEntries, const StatsOptions& options)
{
    const auto keysA = contentKeys(a, aEntries, options);
    const auto keysB = contentKeys(b, bEntries, options);
    std::map<ContentKey, std::vector<size_t>> byKey;
    for (size_t j = 0; j < bEntries.size(); ++j)
        if (keysB[j])
            byKey[*keysB[j]].push_back(bEntries[j]);
    // Candidates by hash; every candidate pair is then confirmed byte by byte.
    std::vector<std::pair<size_t, size_t>> candidates;
    std::vector<size_t> owner;
    for (size_t i = 0; i < aEntries.size(); ++i) {
        if (!keysA[i])
            continue;
        auto it = byKey.find(*keysA[i]);
        if (it == byKey.end())
            continue;
        for (size_t bj : it->second) {
            candidates.emplace_back(aEntries[i], bj);
            owner.push_back(i);
        }
    }
    const auto confirmed = compareValues(a, b, candidates, options);
    std::vector<ContentMatch> out;
    for (size_t k = 0; k < candidates.size(); ++k) {
        // Groups (quantized weights) have no single bytes: equal dequantized values stand in for them.
        if (!confirmed[k].compared || !(confirmed[k].equalBytes || (confirmed[k].equalValues && a.entries[candidates[k].first].kind == EntryKind::Group)))
            continue;
        if (out.empty() || out.back().a != candidates[k].first)
            out.push_back({ candidates[k].first, {} });
        out.back().b.push_back(candidates[k].second);
    }
    return out;
}

std::vector<DuplicateGroup> findDuplicates(const Source& s, const std::vector<size_t>& entries, const StatsOptions& options)
{
    const auto keys = contentKeys(s, entries, options);
    std::map<ContentKey, std::vector<size_t>> byKey;
    for (size_t i = 0; i < entries.size(); ++i)
        if (keys[i])
            byKey[*keys[i]].push_back(entries[i]);
    std::vector<DuplicateGroup> out;
    for (auto& [key, members] : byKey) {
        if (members.size() < 2)
            continue;
        // Confirm against the first member; members that differ despite the hash (never seen) drop out.
        std::vector<std::pair<size_t, size_t>> pairs;
        for (size_t k = 1; k < members.size(); ++k)
            pairs.emplace_back(members[0], members[k]);
        const auto same = compareValues(s, s, pairs, options);
        DuplicateGroup g;
        g.entries.push_back(members[0]);
        for (size_t k = 0; k < pairs.size(); ++k)
            if (same[k].equalBytes || (same[k].equalValues && s.entries[members[0]].kind == EntryKind::Group))
                g.entries.push_back(pairs[k].second);
        if (g.entries.size() < 2)
            continue;
        const TensorLocation& first = s.entries[g.entries[0]].location;
        g.tied = std::all_of(g.entries.begin(), g.entries.end(),
            [&](size_t e) { return s.entries[e].location.sharesStorageWith(first); });
        out.push_back(std::move(g));
    }
    std::sort(out.begin(), out.end(), [](const DuplicateGroup& x, const DuplicateGroup& y) { return x.entries.front() < y.entries.front(); });
    return out;
}

} // namespace sl::values
