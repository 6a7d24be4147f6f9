#include "diff.h"

#include "diff/copy_compat.h"
#include "diff/reasons.h"
#include "util/name_index.h"

#include <algorithm>
#include <charconv>
#include <future>
#include <map>
#include <thread>

namespace sl {

namespace {

// True for the enum's own values. -Wswitch (an error in this build) makes a new status land in this switch,
// and the assertion below then asks for it in kAllRowStatuses, in order.
constexpr bool isRowStatus(RowStatus s)
{
    switch (s) {
    case RowStatus::Match:
    case RowStatus::Renamed:
    case RowStatus::ShapeMismatch:
    case RowStatus::DtypeMismatch:
    case RowStatus::Missing:
    case RowStatus::Unexpected:
    case RowStatus::Dropped:
    case RowStatus::CopyError: return true;
    }
    return false;
}

constexpr bool allRowStatusesListed()
{
    size_t n = 0;
    while (n < 256 && isRowStatus(static_cast<RowStatus>(n)))
        ++n;
    if (n != kAllRowStatuses.size())
        return false;
    for (size_t i = 0; i < n; ++i)
        if (static_cast<size_t>(kAllRowStatuses[i]) != i)
            return false;
    return true;
}
static_assert(allRowStatusesListed(), "kAllRowStatuses (diff.h) must list every RowStatus, in order");

} // namespace

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
    case RowStatus::CopyError: return "copy_error";
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
    case Reason::SuggestedRename: return "suggested_rename";
    }
    return "";
}

bool DiffSummary::loadSucceeds(bool failOnDtype) const
{
    return count(RowStatus::Missing) == 0 && count(RowStatus::Unexpected) == 0 && count(RowStatus::ShapeMismatch) == 0
        && count(RowStatus::CopyError) == 0 && !(failOnDtype && count(RowStatus::DtypeMismatch) != 0);
}

bool isKeyedGroup(const Entry& e)
{
    return e.kind == EntryKind::Group && !e.parts.empty()
        && std::all_of(e.parts.begin(), e.parts.end(), [](const Entry& p) { return p.attribute("key") != nullptr; });
}

namespace {

template <typename EntryIndex> const Entry* sideEntry(const Source& s, EntryIndex index, PartIndex part)
{
    if (!index.valid())
        return nullptr;
    const Entry& e = s.entries[index.get()];
    return part.valid() ? &e.parts[part.get()] : &e;
}

template <typename EntryIndex> const std::string& sideKey(const Source& s, EntryIndex index, PartIndex part)
{
    const Entry& e = s.entries[index.get()];
    return part.valid() ? *e.parts[part.get()].attribute("key") : e.name;
}

} // namespace

const Entry* rowEntryA(const DiffRow& row, const Source& a) { return sideEntry(a, row.a, row.aPart); }
const Entry* rowEntryB(const DiffRow& row, const Source& b) { return sideEntry(b, row.b, row.bPart); }
const std::string& rowKeyA(const DiffRow& row, const Source& a) { return sideKey(a, row.a, row.aPart); }
const std::string& rowKeyB(const DiffRow& row, const Source& b) { return sideKey(b, row.b, row.bPart); }

RowIndex pairedRow(const DiffResult& diff, size_t row)
{
    const DiffRow& r = diff.rows[row];
    if (!r.partner.valid() || r.partner.get() >= diff.rows.size())
        return {};
    const DiffRow& p = diff.rows[r.partner.get()];
    const bool oneOfEach = (r.status == RowStatus::Missing && p.status == RowStatus::Unexpected)
        || (r.status == RowStatus::Unexpected && p.status == RowStatus::Missing);
    // Fused projections and stacked experts point back at the first of their many: not one to one.
    const bool manyToOne = r.reason == Reason::FusedProjection || r.reason == Reason::StackedExperts;
    return oneOfEach && !manyToOne && p.partner == RowIndex(row) ? r.partner : RowIndex();
}

namespace {
bool oneOfEachSide(const DiffRow& x, const DiffRow& y)
{
    return (x.status == RowStatus::Missing && y.status == RowStatus::Unexpected)
        || (x.status == RowStatus::Unexpected && y.status == RowStatus::Missing);
}
} // namespace

RowLines rowLines(const DiffResult& diff)
{
    const size_t n = diff.rows.size();
    auto partnerOf = [&](size_t r) -> int32_t {
        const RowIndex p = diff.rows[r].partner;
        return p.valid() && p.get() < n && oneOfEachSide(diff.rows[r], diff.rows[p.get()]) ? static_cast<int32_t>(p.get()) : -1;
    };
    std::vector<uint32_t> pointedAt(n, 0);
    for (size_t r = 0; r < n; ++r)
        if (const int32_t p = partnerOf(r); p >= 0)
            ++pointedAt[static_cast<size_t>(p)];
    RowLines out;
    out.shownWith.assign(n, -1);
    for (size_t r = 0; r < n; ++r) {
        const int32_t p = partnerOf(r);
        if (p < 0)
            continue;
        const auto head = static_cast<size_t>(p);
        if (pointedAt[head] >= 2) // one of the many, on the line of the one
            out.shownWith[r] = p;
        else if (diff.rows[head].partner == RowIndex(r) && pointedAt[r] <= 1 && diff.rows[r].status == RowStatus::Unexpected)
            out.shownWith[r] = p; // a pair: on its missing row's line
    }
    // A head is never shown on another line (the reasons give each row one counterpart; this keeps it so).
    for (size_t r = 0; r < n; ++r)
        if (out.shownWith[r] >= 0 && out.shownWith[static_cast<size_t>(out.shownWith[r])] >= 0)
            out.shownWith[r] = -1;
    out.begin.assign(n + 1, 0);
    for (size_t r = 0; r < n; ++r)
        if (out.shownWith[r] >= 0)
            ++out.begin[static_cast<size_t>(out.shownWith[r]) + 1];
    for (size_t h = 0; h < n; ++h)
        out.begin[h + 1] += out.begin[h];
    out.rows.resize(out.begin[n]);
    std::vector<uint32_t> fill(out.begin.begin(), out.begin.end() - 1);
    for (size_t r = 0; r < n; ++r)
        if (out.shownWith[r] >= 0)
            out.rows[fill[static_cast<size_t>(out.shownWith[r])]++] = static_cast<uint32_t>(r);
    return out;
}

size_t RowLines::rowA(const DiffResult& diff, size_t head) const
{
    return diff.rows[head].a.valid() || count(head) == 0 ? head : rows[begin[head]];
}

size_t RowLines::rowB(const DiffResult& diff, size_t head) const
{
    return diff.rows[head].b.valid() || count(head) == 0 ? head : rows[begin[head]];
}

const std::string& rowName(const DiffRow& row, const Source& a, const Source& b)
{
    if (row.b.valid())
        return rowKeyB(row, b);
    if (!row.mapped.empty() || !row.a.valid())
        return row.mapped;
    return rowKeyA(row, a);
}

namespace {

// How a pair of entries with the same (mapped) key compares under a strict load.
RowStatus classify(const Entry& ea, const Entry& eb, bool renamed)
{
    const RowStatus same = renamed ? RowStatus::Renamed : RowStatus::Match;
    if (ea.kind == EntryKind::Object || eb.kind == EntryKind::Object)
        return same; // non-tensor values (extra state) load through set_extra_state: nothing to compare
    // load_state_dict checks the shape first, then copies; tensor subclasses answer the copy themselves.
    if (ea.shapeKnown && eb.shapeKnown && !(ea.shape == eb.shape))
        return RowStatus::ShapeMismatch;
    if (copyCompatibility(ea, eb).fails)
        return RowStatus::CopyError;
    if (ea.dtype != DType::Unknown && eb.dtype != DType::Unknown && ea.dtype != eb.dtype)
        return RowStatus::DtypeMismatch;
    return same;
}

// Two keyed groups that the load sees as the same keys: one scheme, and every part of A's (after the rules)
// the key of the part with the same role in B's, with the same shape.
bool sameKeys(const Entry& ga, const std::vector<CompiledRules::Result>& mappedParts, const Entry& gb)
{
    if (!ga.quantization || !gb.quantization || ga.quantization->scheme != gb.quantization->scheme
        || ga.parts.size() != gb.parts.size() || mappedParts.size() != ga.parts.size())
        return false;
    for (size_t p = 0; p < ga.parts.size(); ++p) {
        const Entry* other = gb.part(ga.parts[p].name);
        if (!other || mappedParts[p].dropped || mappedParts[p].name != *other->attribute("key"))
            return false;
        if (ga.parts[p].shapeKnown && other->shapeKnown && !(ga.parts[p].shape == other->shape))
            return false;
    }
    return true;
}

} // namespace

namespace {

// One of A's keys through the rules, and which rules matched it; a keyed group's parts each have their own.
struct MappedKey {
    CompiledRules::Result result;
    std::vector<uint32_t> matched;
    std::vector<CompiledRules::Result> parts;
    std::vector<std::vector<uint32_t>> partsMatched;
    bool keyed = false; // isKeyedGroup(the entry): its parts are mapped one by one
};

void mapKeys(const Source& a, const CompiledRules& rules, size_t begin, size_t end, std::vector<MappedKey>& out)
{
    auto apply = [&](const std::string& key, std::vector<uint32_t>* matched) {
        return rules.empty() ? CompiledRules::Result { key, false, -1, -1, 0 } : rules.apply(key, matched);
    };
    std::string scratch; // the names along each chain, in one buffer for the whole range
    for (size_t i = begin; i < end; ++i) {
        const Entry& ea = a.entries[i];
        if (rules.empty())
            out[i].result = apply(ea.name, nullptr);
        else
            rules.applyInto(ea.name, out[i].result, scratch, &out[i].matched);
        if (!isKeyedGroup(ea))
            continue;
        out[i].keyed = true;
        out[i].parts.reserve(ea.parts.size());
        out[i].partsMatched.resize(ea.parts.size());
        for (size_t p = 0; p < ea.parts.size(); ++p)
            out[i].parts.push_back(apply(*ea.parts[p].attribute("key"), &out[i].partsMatched[p]));
    }
}

// B's keys as the load sees them: entries, and the parts of keyed groups no A group pairs with as a whole.
struct KeyOfB {
    EntryOfB entry;
    PartIndex part;
};

// Steps 2 to 4 on keys already mapped.
DiffResult diffMapped(const Source& a, const Source& b, std::vector<MappedKey> mappedKeys, size_t ruleCount, const DiffOptions& options)
{
    DiffResult result;
    result.ruleHits.assign(ruleCount, 0);
    auto countHits = [&](const std::vector<uint32_t>& matched) {
        for (uint32_t k : matched)
            if (k < result.ruleHits.size())
                ++result.ruleHits[k];
    };

    // Keyed groups of A that meet the same group in B are one row; find those pairs first (by B's names).
    std::vector<EntryOfB> unitOf(a.entries.size());
    std::vector<char> unitClaimed(b.entries.size(), 0);
    // Whether each entry is a keyed group, found once (it walks the entry's parts and their attributes).
    std::vector<char> keyedB(b.entries.size());
    for (size_t j = 0; j < b.entries.size(); ++j)
        keyedB[j] = isKeyedGroup(b.entries[j]);
    {
        const bool anyKeyed = std::any_of(mappedKeys.begin(), mappedKeys.end(), [](const MappedKey& m) { return m.keyed; });
        if (anyKeyed) {
            NameIndex byEntryName;
            byEntryName.reserve(b.entries.size());
            auto nameOfEntry = [&](size_t i) -> std::string_view { return b.entries[i].name; };
            for (size_t j = 0; j < b.entries.size(); ++j)
                byEntryName.insert(j, nameOfEntry);
            for (size_t i = 0; i < a.entries.size(); ++i) {
                if (!mappedKeys[i].keyed || mappedKeys[i].result.dropped)
                    continue;
                const size_t j = byEntryName.find(mappedKeys[i].result.name, nameOfEntry);
                if (j != NameIndex::npos && !unitClaimed[j] && keyedB[j]
                    && sameKeys(a.entries[i], mappedKeys[i].parts, b.entries[j])) {
                    unitOf[i] = EntryOfB(j);
                    unitClaimed[j] = 1;
                }
            }
        }
    }

    // Step 2's index over B's keys (first of a name wins, as a dict would keep one).
    std::vector<KeyOfB> keysB;
    keysB.reserve(b.entries.size());
    for (size_t j = 0; j < b.entries.size(); ++j) {
        const Entry& e = b.entries[j];
        if (!unitClaimed[j] && keyedB[j])
            for (size_t p = 0; p < e.parts.size(); ++p)
                keysB.push_back({ EntryOfB(j), PartIndex(p) });
        else
            keysB.push_back({ EntryOfB(j), PartIndex() });
    }
    auto keyOfB = [&](size_t k) -> std::string_view { return sideKey(b, keysB[k].entry, keysB[k].part); };
    NameIndex byName;
    byName.reserve(keysB.size());
    for (size_t k = 0; k < keysB.size(); ++k)
        byName.insert(k, keyOfB);

    std::vector<int32_t> claimedBy(keysB.size(), -1); // the row that matched each key of B
    result.rows.reserve(a.entries.size() + b.entries.size() / 8);
    // One of A's keys (an entry, or part `part` of a keyed group) through the join.
    auto addKey = [&](size_t i, PartIndex part, CompiledRules::Result& mapped) {
        const Entry* ea = part.valid() ? &a.entries[i].parts[part.get()] : &a.entries[i];
        DiffRow row;
        row.a = EntryOfA(i);
        row.aPart = part;
        row.rule = ruleIndex(mapped.lastRule);
        if (mapped.dropped) {
            row.status = RowStatus::Dropped;
            result.rows.push_back(std::move(row));
            return;
        }
        const std::string& key = part.valid() ? *ea->attribute("key") : ea->name;
        const bool renamed = mapped.name != key;
        const size_t k = byName.find(mapped.name, keyOfB);
        if (k != NameIndex::npos && claimedBy[k] < 0) {
            row.b = keysB[k].entry;
            row.bPart = keysB[k].part;
            row.status = classify(*ea, *rowEntryB(row, b), renamed);
            claimedBy[k] = static_cast<int32_t>(result.rows.size());
        } else {
            // No such key in B, or another A key took it already (a rule collision; the checks report it).
            row.status = RowStatus::Unexpected;
        }
        if (renamed || row.status == RowStatus::Unexpected)
            row.mapped = std::move(mapped.name);
        result.rows.push_back(std::move(row));
    };
    for (size_t i = 0; i < a.entries.size(); ++i) {
        MappedKey& m = mappedKeys[i];
        const Entry& ea = a.entries[i];
        if (unitOf[i].valid()) {
            countHits(m.matched);
            const size_t k = byName.find(m.result.name, keyOfB);
            DiffRow row;
            row.a = EntryOfA(i);
            row.b = unitOf[i];
            row.rule = ruleIndex(m.result.lastRule);
            const bool renamed = m.result.name != ea.name;
            row.status = classify(ea, b.entries[unitOf[i].get()], renamed);
            if (k != NameIndex::npos)
                claimedBy[k] = static_cast<int32_t>(result.rows.size());
            if (renamed)
                row.mapped = std::move(m.result.name);
            result.rows.push_back(std::move(row));
        } else if (m.keyed) {
            for (size_t p = 0; p < ea.parts.size(); ++p) {
                countHits(m.partsMatched[p]);
                addKey(i, PartIndex(p), m.parts[p]);
            }
        } else {
            countHits(m.matched);
            addKey(i, PartIndex(), m.result);
        }
    }
    for (size_t k = 0; k < keysB.size(); ++k) {
        if (claimedBy[k] >= 0)
            continue;
        DiffRow row;
        row.b = keysB[k].entry;
        row.bPart = keysB[k].part;
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
    if (values.size() == 1)
        return std::to_string(values.front()); // the same in every row: nothing folded there
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

namespace {

// Each "{}" of a template filled with the range of values seen there.
std::string fillTemplate(const std::string& templ, const std::vector<std::vector<int64_t>>& values)
{
    std::string name;
    size_t k = 0;
    for (size_t p = 0; p < templ.size(); ++p) {
        if (templ.compare(p, 2, "{}") == 0 && k < values.size()) {
            name += rangesText(values[k++]);
            ++p;
        } else {
            name += templ[p];
        }
    }
    return name;
}

} // namespace

std::string foldedNames(const DiffResult& diff, const Source& a, const Source& b, std::span<const uint32_t> rows)
{
    if (rows.size() == 1)
        return rowName(diff.rows[rows.front()], a, b);
    std::vector<std::pair<std::string, std::vector<std::vector<int64_t>>>> templates; // in order of first appearance
    std::vector<int64_t> numbers;
    for (uint32_t r : rows) {
        numbers.clear();
        std::string key = foldIndices(rowName(diff.rows[r], a, b), &numbers);
        auto it = std::find_if(templates.begin(), templates.end(), [&](const auto& t) { return t.first == key; });
        if (it == templates.end()) {
            templates.push_back({ std::move(key), std::vector<std::vector<int64_t>>(numbers.size()) });
            it = templates.end() - 1;
        }
        for (size_t k = 0; k < numbers.size() && k < it->second.size(); ++k)
            it->second[k].push_back(numbers[k]);
    }
    std::string out;
    for (const auto& [templ, values] : templates) {
        if (!out.empty())
            out += " + ";
        out += fillTemplate(templ, values);
    }
    return out;
}

std::vector<FoldedRow> foldRows(const DiffResult& diff, const Source& a, const Source& b)
{
    return foldRows(diff, a, b, rowLines(diff));
}

std::vector<FoldedRow> foldRows(const DiffResult& diff, const Source& a, const Source& b, const RowLines& lines)
{
    // Key: template (with the names the line shows from the other side, for pairs) + status + reason.
    // Values: rows, and the numbers at each folded position of the row's name and of the other side's.
    struct Group {
        FoldedRow row;
        std::string partnerTemplate;
        std::string single; // the other side's names when the group holds one line
        std::vector<std::vector<int64_t>> values; // per folded position
        std::vector<std::vector<int64_t>> partnerValues;
    };
    std::vector<Group> groups;
    std::map<std::tuple<std::string, std::string, bool, RowStatus, Reason>, size_t> index;
    std::vector<int64_t> numbers, partnerNumbers;
    for (size_t i = 0; i < diff.rows.size(); ++i) {
        const DiffRow& row = diff.rows[i];
        if (lines.shownWith[i] >= 0)
            continue; // on another row's line
        const std::span<const uint32_t> shown = lines.on(i);
        numbers.clear();
        partnerNumbers.clear();
        std::string key = foldIndices(rowName(row, a, b), &numbers);
        std::string partnerString = shown.empty() ? std::string() : foldedNames(diff, a, b, shown);
        std::string partnerKey = shown.empty() ? std::string() : foldIndices(partnerString, &partnerNumbers);
        auto [it, inserted] = index.try_emplace({ key, partnerKey, !shown.empty(), row.status, row.reason }, groups.size());
        if (inserted) {
            Group g;
            g.row.templateKey = key;
            g.row.status = row.status;
            g.row.reason = row.reason;
            g.partnerTemplate = std::move(partnerKey);
            g.single = std::move(partnerString);
            g.values.resize(numbers.size());
            g.partnerValues.resize(partnerNumbers.size());
            groups.push_back(std::move(g));
        }
        Group& g = groups[it->second];
        g.row.rows.push_back(i);
        g.row.partnerRows.insert(g.row.partnerRows.end(), shown.begin(), shown.end());
        for (size_t k = 0; k < numbers.size() && k < g.values.size(); ++k)
            g.values[k].push_back(numbers[k]);
        for (size_t k = 0; k < partnerNumbers.size() && k < g.partnerValues.size(); ++k)
            g.partnerValues[k].push_back(partnerNumbers[k]);
    }
    std::vector<FoldedRow> out;
    out.reserve(groups.size());
    for (auto& g : groups) {
        const bool paired = !g.row.partnerRows.empty();
        if (g.row.rows.size() == 1) {
            g.row.name = rowName(diff.rows[g.row.rows.front()], a, b);
            if (paired)
                g.row.partnerName = std::move(g.single);
        } else {
            g.row.name = fillTemplate(g.row.templateKey, g.values);
            if (paired)
                g.row.partnerName = fillTemplate(g.partnerTemplate, g.partnerValues);
        }
        out.push_back(std::move(g.row));
    }
    return out;
}

} // namespace sl
