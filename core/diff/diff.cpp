#include "diff.h"

#include "diff/reasons.h"
#include "util/name_index.h"

#include <algorithm>
#include <charconv>
#include <future>
#include <map>
#include <thread>

namespace sl {

std::string_view rowStatusName(RowStatus s)
{
    switch (s) {
    case RowStatus::Match: return "match";
    case RowStatus::Renamed: return "renamed";
    case RowStatus::ShapeMismatch: return "shape_mismatch";
    case RowStatus::DtypeMismatch: return "dtype_mismatch";
    case RowStatus::Missing: return "missing";
    case RowStatus::Unexpected: return "unexpected";
    case RowStatus::Dropped: return "dropped";
    }
    return "match";
}

std::string_view reasonName(Reason r)
{
    switch (r) {
    case Reason::None: return "";
    case Reason::WrapperPrefix: return "wrapper_prefix";
    case Reason::FlatParam: return "flat_param";
    case Reason::QuantizedCounterpart: return "quantized_counterpart";
    case Reason::ShardedCounterpart: return "sharded_counterpart";
    case Reason::TiedWeight: return "tied_weight";
    case Reason::Transposed: return "transposed";
    case Reason::PaddedVocabulary: return "padded_vocabulary";
    case Reason::FusedProjection: return "fused_projection";
    case Reason::StackedExperts: return "stacked_experts";
    case Reason::NonPersistentBuffer: return "non_persistent_buffer";
    case Reason::DtypeCast: return "dtype_cast";
    }
    return "";
}

bool DiffSummary::loadSucceeds(bool failOnDtype) const
{
    return count(RowStatus::Missing) == 0 && count(RowStatus::Unexpected) == 0 && count(RowStatus::ShapeMismatch) == 0
        && !(failOnDtype && count(RowStatus::DtypeMismatch) != 0);
}

const std::string& rowName(const DiffRow& row, const Source& a, const Source& b)
{
    if (row.b >= 0)
        return b.entries[static_cast<size_t>(row.b)].name;
    if (!row.mapped.empty() || row.a < 0)
        return row.mapped;
    return a.entries[static_cast<size_t>(row.a)].name;
}

namespace {

// How a pair of entries with the same (mapped) name compares under a strict load.
RowStatus classify(const Entry& ea, const Entry& eb, bool renamed)
{
    const RowStatus same = renamed ? RowStatus::Renamed : RowStatus::Match;
    if (ea.kind == EntryKind::Object || eb.kind == EntryKind::Object)
        return same; // non-tensor values (extra state) load through set_extra_state: nothing to compare
    if (static_cast<bool>(ea.quantization) != static_cast<bool>(eb.quantization)) {
        // A quantized group against a float tensor: a strict load copies the stored tensor (packed qdata,
        // the group's first part), not the logical one, so compare that.
        const Entry& q = ea.quantization ? ea : eb;
        const Entry& f = ea.quantization ? eb : ea;
        const Entry& stored = q.parts.empty() ? q : q.parts.front();
        if (stored.shapeKnown && f.shapeKnown && !(stored.shape == f.shape))
            return RowStatus::ShapeMismatch;
        return RowStatus::DtypeMismatch;
    }
    if (ea.shapeKnown && eb.shapeKnown && !(ea.shape == eb.shape))
        return RowStatus::ShapeMismatch;
    if (ea.dtype != DType::Unknown && eb.dtype != DType::Unknown && ea.dtype != eb.dtype)
        return RowStatus::DtypeMismatch;
    return same;
}

} // namespace

namespace {

// One of A's keys through the rules, and which rules matched it.
struct MappedKey {
    CompiledRules::Result result;
    std::vector<uint32_t> matched;
};

void mapKeys(const Source& a, const CompiledRules& rules, size_t begin, size_t end, std::vector<MappedKey>& out)
{
    for (size_t i = begin; i < end; ++i) {
        const Entry& ea = a.entries[i];
        out[i].result = rules.empty() ? CompiledRules::Result { ea.name, false, -1, -1, 0 } : rules.apply(ea.name, &out[i].matched);
    }
}

// Steps 2 to 4 on keys already mapped.
DiffResult diffMapped(const Source& a, const Source& b, std::vector<MappedKey> mappedKeys, size_t ruleCount, const DiffOptions& options)
{
    DiffResult result;
    // Step 2's index over B's names (first entry of a name wins, as a dict would keep one).
    NameIndex byName;
    byName.reserve(b.entries.size());
    auto nameOfB = [&](size_t i) -> std::string_view { return b.entries[i].name; };
    for (size_t i = 0; i < b.entries.size(); ++i)
        byName.insert(i, nameOfB);

    std::vector<int32_t> claimedBy(b.entries.size(), -1); // the row that matched each B entry
    result.ruleHits.assign(ruleCount, 0);
    result.rows.reserve(a.entries.size() + b.entries.size() / 8);
    for (size_t i = 0; i < a.entries.size(); ++i) {
        const Entry& ea = a.entries[i];
        DiffRow row;
        row.a = static_cast<int32_t>(i);
        CompiledRules::Result& mapped = mappedKeys[i].result;
        for (uint32_t k : mappedKeys[i].matched)
            if (k < result.ruleHits.size())
                ++result.ruleHits[k];
        row.rule = mapped.lastRule;
        if (mapped.dropped) {
            row.status = RowStatus::Dropped;
            result.rows.push_back(std::move(row));
            continue;
        }
        const bool renamed = mapped.name != ea.name;
        size_t j = byName.find(mapped.name, nameOfB);
        if (j != NameIndex::npos && claimedBy[j] < 0) {
            row.b = static_cast<int32_t>(j);
            row.status = classify(ea, b.entries[j], renamed);
            claimedBy[j] = static_cast<int32_t>(result.rows.size());
        } else {
            // No such key in B, or another A key took it already (a rule collision; the checks report it).
            row.status = RowStatus::Unexpected;
        }
        if (renamed || row.status == RowStatus::Unexpected)
            row.mapped = std::move(mapped.name);
        result.rows.push_back(std::move(row));
    }
    for (size_t j = 0; j < b.entries.size(); ++j) {
        if (claimedBy[j] >= 0)
            continue;
        DiffRow row;
        row.b = static_cast<int32_t>(j);
        row.status = RowStatus::Missing;
        result.rows.push_back(std::move(row));
    }
    for (const auto& row : result.rows)
        ++result.summary.counts[static_cast<size_t>(row.status)];
    if (options.explain)
        explainRows(result, a, b);
    return result;
}

} // namespace

DiffResult diffSources(const Source& a, const Source& b, const RuleSet& rules, const DiffOptions& options)
{
    std::vector<PatternError> errors;
    CompiledRules compiled = CompiledRules::compile(rules, &errors);
    // Step 1 on two threads for large sources: each needs its own compiled copy (match data is per
    // instance), and mapping A's keys through the rules is most of a diff's time.
    std::vector<MappedKey> mapped(a.entries.size());
    const size_t middle = a.entries.size() >= 20000 && !compiled.empty() && std::thread::hardware_concurrency() > 1
        ? a.entries.size() / 2
        : a.entries.size();
    std::future<void> second;
    if (middle < a.entries.size())
        second = std::async(std::launch::async, [&] {
            const CompiledRules copy = CompiledRules::compile(rules);
            mapKeys(a, copy, middle, a.entries.size(), mapped);
        });
    mapKeys(a, compiled, 0, middle, mapped);
    if (second.valid())
        second.get();
    DiffResult result = diffMapped(a, b, std::move(mapped), compiled.ruleCount(), options);
    result.ruleErrors = std::move(errors);
    return result;
}

DiffResult diffSources(const Source& a, const Source& b, const CompiledRules& rules, const DiffOptions& options)
{
    std::vector<MappedKey> mapped(a.entries.size());
    mapKeys(a, rules, 0, a.entries.size(), mapped);
    return diffMapped(a, b, std::move(mapped), rules.ruleCount(), options);
}

std::string foldIndices(std::string_view name, std::vector<int64_t>* numbers)
{
    std::string out;
    out.reserve(name.size());
    size_t start = 0;
    while (start <= name.size()) {
        size_t end = name.find('.', start);
        if (end == std::string_view::npos)
            end = name.size();
        std::string_view seg = name.substr(start, end - start);
        bool numeric = !seg.empty() && seg.size() <= 18 && std::all_of(seg.begin(), seg.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (numeric) {
            out += "{}";
            if (numbers) {
                int64_t v = 0;
                std::from_chars(seg.data(), seg.data() + seg.size(), v);
                numbers->push_back(v);
            }
        } else {
            out += seg;
        }
        if (end == name.size())
            break;
        out += '.';
        start = end + 1;
    }
    return out;
}

namespace {

// {0..31} or {0,2,5..9}
std::string rangesText(std::vector<int64_t> values)
{
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    std::string out = "{";
    for (size_t i = 0; i < values.size();) {
        size_t j = i;
        while (j + 1 < values.size() && values[j + 1] == values[j] + 1)
            ++j;
        if (i)
            out += ',';
        out += std::to_string(values[i]);
        if (j > i + 1)
            out += ".." + std::to_string(values[j]);
        else if (j == i + 1)
            out += "," + std::to_string(values[j]);
        i = j + 1;
    }
    out += '}';
    return out;
}

} // namespace

std::vector<FoldedRow> foldRows(const DiffResult& diff, const Source& a, const Source& b)
{
    // Key: template + status + reason. Values: rows, and the numbers at each folded position.
    struct Group {
        FoldedRow row;
        std::vector<std::vector<int64_t>> values; // per folded position
    };
    std::vector<Group> groups;
    std::map<std::tuple<std::string, RowStatus, Reason>, size_t> index;
    std::vector<int64_t> numbers;
    for (size_t i = 0; i < diff.rows.size(); ++i) {
        const DiffRow& row = diff.rows[i];
        numbers.clear();
        std::string key = foldIndices(rowName(row, a, b), &numbers);
        auto [it, inserted] = index.try_emplace({ key, row.status, row.reason }, groups.size());
        if (inserted) {
            Group g;
            g.row.templateKey = key;
            g.row.status = row.status;
            g.row.reason = row.reason;
            g.values.resize(numbers.size());
            groups.push_back(std::move(g));
        }
        Group& g = groups[it->second];
        g.row.rows.push_back(i);
        for (size_t k = 0; k < numbers.size() && k < g.values.size(); ++k)
            g.values[k].push_back(numbers[k]);
    }
    std::vector<FoldedRow> out;
    out.reserve(groups.size());
    for (auto& g : groups) {
        if (g.row.rows.size() == 1) {
            g.row.name = rowName(diff.rows[g.row.rows.front()], a, b);
        } else {
            // Fill each "{}" with the range of values seen there.
            std::string name;
            size_t k = 0;
            for (size_t p = 0; p < g.row.templateKey.size(); ++p) {
                if (g.row.templateKey.compare(p, 2, "{}") == 0 && k < g.values.size()) {
                    name += rangesText(g.values[k++]);
                    ++p;
                } else {
                    name += g.row.templateKey[p];
                }
            }
            g.row.name = std::move(name);
        }
        out.push_back(std::move(g.row));
    }
    return out;
}

} // namespace sl
