// The Grouper itself: which patterns occur, the name index, plans and their claims, and the plans turned
// into groups in place of their anchors (grouper.h).

#include "quant/grouper.h"

#include "util/parallel.h"

#include <algorithm>
#include <stdexcept>

namespace sl::quant::grouping {

Grouper::Grouper(Source& s)
    : m_s(s)
    , m_e(s.entries)
    , m_reads(s)
{
}

void Grouper::run()
{
    const bool triggered = scan();
    confirmProvisionalGroups();
    if (!triggered)
        return;
    torchAo();
    torchaoFlattened();
    bitsandbytes4();
    bitsandbytes8();
    gptq();
    fp8();
    subclassFindings();
    apply();
    flushFindings();
}

void Grouper::Patterns::note(std::string_view name, DType dtype, bool isGroup, bool quantizedEntry)
{
    const std::string_view last = lastComponent(name);
    // (An FP8 group, formed early or by an earlier run, is nothing torchAo() would describe.)
    if (quantizedEntry || dtypeIsQuantized(dtype))
        torchAo = true;
    if (name.find(':') != std::string_view::npos)
        colon = true;
    // (A group's float8 dtype is its weight's, already paired: fp8() has nothing to do for it.)
    if (isFloat8(dtype) && !isGroup)
        fp8 = true;
    if (isUnderscoreQdata(last))
        underscore = true;
    if (last == "absmax" || last == "quant_map" || last == "nested_absmax" || last == "nested_quant_map"
        || last.starts_with("bitsandbytes__"))
        bnb4 = true;
    else if (last == "SCB" || last == "weight_format")
        bnb8 = true;
    else if (last == "qweight" || last == "qzeros" || last == "g_idx")
        gptq = true;
    else if (last.ends_with(kScaleInvSuffix) || last.ends_with("weight_scale"))
        fp8 = true;
    else if (last == "input_scale")
        fp8 = inputScale = true;
}

void Grouper::Patterns::noteMetadata(const Source& s)
{
    for (const auto& [k, v] : s.metadata)
        if (k == "tensor_names")
            tensorNames = true;
}

Grouper::Patterns& Grouper::Patterns::operator|=(const Patterns& o)
{
    torchAo |= o.torchAo;
    colon |= o.colon;
    fp8 |= o.fp8;
    underscore |= o.underscore;
    bnb4 |= o.bnb4;
    bnb8 |= o.bnb8;
    gptq |= o.gptq;
    tensorNames |= o.tensorNames;
    inputScale |= o.inputScale;
    return *this;
}

Grouper::Patterns Grouper::patternsIn(const DeferredEntries& rows, const Source& s)
{
    // A row is a plain tensor, or an FP8 pair's group (which scan() notes as no quantized entry). Each half on a core of its own where there are rows
    // enough to pay for the thread (as the table measures its columns): the scan is on the listing's path.
    const size_t n = rows.size(), half = n / 2;
    Patterns halves[2];
    parallelFor(2, n >= 8192 ? 2 : 1, [&](size_t j) {
        for (size_t i = j ? half : 0, end = j ? n : half; i < end; ++i) {
            const EntryRow r = rows.row(i);
            halves[j].note(r.name, r.dtype, r.parts > 0, false);
        }
    });
    halves[0] |= halves[1];
    halves[0].noteMetadata(s);
    return halves[0];
}

bool Grouper::scan()
{
    // Whether the names strictly increase (an index's weight_map is sorted): find() then searches by
    // bisection. Checked here, where each name is read anyway; a pass of its own cost 0.7 ms of cache
    // misses over a DeepSeek-V3 index.
    bool sorted = true;
    std::string_view previous;
    for (const Entry& e : m_e) {
        const std::string_view name = e.name;
        sorted = sorted && (&e == m_e.data() || previous < name);
        previous = name;
        const bool isGroup = e.kind == EntryKind::Group;
        m_has.note(name, e.dtype, isGroup, (e.quantization && !isFp8Group(e)) || (isGroup && e.typeName == "tuple"));
    }
    m_sortedNames = sorted;
    m_sortedKnown = true;
    m_has.noteMetadata(m_s);
    return m_has.any();
}

void Grouper::confirmProvisionalGroups()
{
    if (!m_s.provisionalFp8Groups)
        return;
    m_s.provisionalFp8Groups = false;
    // The early groups pair each FP8 weight with the `_scale_inv` right after it, as fp8() would when no other
    // scheme runs first and no input_scale joins a group (the index reader forms them only where names are
    // unique, so the one beside is the one fp8() takes). Their parts' names cannot trigger another scheme.
    if (!m_has.beyondFp8Pairs())
        return;
    std::vector<Entry> split;
    split.reserve(m_e.size());
    for (Entry& e : m_e) {
        if (!isFp8Group(e)) {
            split.push_back(std::move(e));
            continue;
        }
        for (Entry& part : e.parts) {
            // nameByRole put the key last.
            if (!part.attributes.empty() && part.attributes.back().first == kPartKeyAttribute) {
                part.name = std::move(part.attributes.back().second);
                part.attributes.pop_back();
            }
            split.push_back(std::move(part));
        }
    }
    m_e = std::move(split);
    scan(); // the parts are top-level names again
}

size_t Grouper::find(std::string_view name)
{
    if (!m_indexed) {
        // Names in strictly increasing order (an index's weight_map is sorted) are found by binary search:
        // a few hundred lookups then cost less than hashing 90,000 names into an index.
        if (!m_sortedKnown)
            m_sortedNames = std::adjacent_find(m_e.begin(), m_e.end(), [](const Entry& a, const Entry& b) {
                return !(a.name < b.name);
            }) == m_e.end();
        m_sortedKnown = true;
        if (!m_sortedNames)
            m_index.insertAll(m_e.size(), nameOf());
        m_indexed = true;
    }
    if (m_sortedNames) {
        const auto it = std::lower_bound(m_e.begin(), m_e.end(), name,
            [](const Entry& e, std::string_view n) { return std::string_view(e.name) < n; });
        return it != m_e.end() && it->name == name ? static_cast<size_t>(it - m_e.begin()) : npos;
    }
    return m_index.find(name, nameOf());
}

size_t Grouper::findFree(std::string_view name)
{
    const size_t i = find(name);
    return isFree(i) ? i : npos;
}

size_t Grouper::findFreeBeside(size_t beside, std::string_view name)
{
    if (beside < m_e.size() && isFree(beside) && m_e[beside].name == name)
        return beside;
    return findFree(name);
}

std::string_view Grouper::role(std::string_view text)
{
    return *m_roles.emplace(text).first;
}

bool Grouper::claimPlanName()
{
    const auto planName = [this](size_t i) -> std::string_view { return m_plans[i].name; };
    const size_t pos = m_plans.size() - 1;
    const Planned& p = m_plans[pos];
    if (!m_sortedNames || !m_sortedKnown)
        return m_planNames.insert(pos, planName) == pos;
    // Unique names: a plan named after its own anchor (FP8's 45,000 in DeepSeek-V3) shares its name only with
    // a plan named otherwise, so it is marked on its anchor instead of hashed into m_planNames.
    if (p.name == m_e[p.anchor].name) {
        if (m_planNames.find(p.name, planName) != NameIndex::npos)
            return false;
        if (m_namedAfterAnchor.empty())
            m_namedAfterAnchor.assign(m_e.size(), false);
        m_namedAfterAnchor[p.anchor] = true;
        return true;
    }
    if (const size_t entry = find(p.name); entry != npos && !m_namedAfterAnchor.empty() && m_namedAfterAnchor[entry])
        return false;
    return m_planNames.insert(pos, planName) == pos;
}

bool Grouper::addPlan(Plan& p)
{
    if (p.anchor >= UINT32_MAX || m_parts.size() >= UINT32_MAX || m_planShapes.size() >= UINT32_MAX)
        throw std::length_error("more than 4 billion quantized groups");
    const bool anchorShape = p.shape == m_e[p.anchor].shape;
    m_plans.push_back(Planned { std::move(p.name), std::move(p.q), p.typeName, static_cast<uint32_t>(p.anchor),
        static_cast<uint32_t>(m_parts.size()), static_cast<uint32_t>(p.parts.size()),
        anchorShape ? kAnchorShape : static_cast<uint32_t>(m_planShapes.size()), p.dtype, p.shapeKnown });
    const bool kept = claimPlanName();
    if (!kept) {
        m_plans.pop_back(); // two schemes claim one logical name: keep the first
    } else {
        if (!anchorShape)
            m_planShapes.push_back(std::move(p.shape));
        if (m_claimed.empty()) {
            m_claimed.assign(m_e.size(), false);
            // Each entry is claimed once, so neither list outgrows the state dict. Reserved, they never copy
            // themselves as they grow: the growth's freed copies were 12 MB of a DeepSeek-V3 listing's peak.
            // Capacity not reached is never touched, so costs no memory.
            m_plans.reserve(m_e.size());
            m_parts.reserve(m_e.size());
        }
        for (const Part& part : p.parts) {
            m_claimed[part.index] = true;
            m_parts.push_back(part);
        }
    }
    p.name.clear();
    p.parts.clear();
    p.q.reset();
    p.shape.clear();
    p.typeName = {};
    p.dtype = DType::Unknown;
    p.shapeKnown = true;
    p.anchor = npos;
    return kept;
}

void Grouper::report(Concern c, Severity s, std::string message, std::string entry)
{
    // A load_state_dict error lists only the keys that failed: absent partners are not missing.
    if (m_s.format == SourceFormat::LoadErrorText)
        return;
    auto& n = m_counts[static_cast<size_t>(c)];
    if (n++ < kMaxFindingsPerKind)
        m_findings.push_back(Finding { s, std::move(message), std::move(entry) });
    else if (n == kMaxFindingsPerKind + 1)
        m_firstOver[static_cast<size_t>(c)] = entry;
}

void Grouper::apply()
{
    if (m_plans.empty())
        return;
    // The name indexes are done with: the groups' parts reuse their memory.
    m_index = NameIndex();
    m_indexed = false;
    m_sortedKnown = false; // the groups take their anchors' places and the parts leave
    m_planNames = NameIndex();
    // Each group is built where its anchor was (the anchor is one of its parts, so its slot is free once
    // the parts have moved out), then one in-place compaction: unclaimed entries keep their order.
    std::vector<bool> isGroup(m_e.size());
    for (Planned& plan : m_plans) {
        Entry group = buildGroup(plan);
        m_e[plan.anchor] = std::move(group);
        isGroup[plan.anchor] = true;
    }
    size_t w = 0;
    for (size_t i = 0; i < m_e.size(); ++i) {
        if ((isGroup[i] || !m_claimed[i]) && w++ != i)
            m_e[w - 1] = std::move(m_e[i]); // never onto itself: a self-moved vector empties
    }
    m_e.erase(m_e.begin() + static_cast<std::ptrdiff_t>(w), m_e.end());
}

void describeGroup(Entry& g, std::string name, const Entry& anchor, DType dtype, Shape shape, bool shapeKnown,
    std::string_view typeName, std::shared_ptr<const Quantization> q)
{
    g.name = std::move(name);
    g.kind = EntryKind::Group;
    g.dtype = dtype;
    g.shape = std::move(shape);
    g.shapeKnown = shapeKnown;
    g.typeName = typeName;
    g.isParameter = anchor.isParameter;
    g.requiresGrad = anchor.requiresGrad;
    g.device = anchor.device;
    g.quantization = std::move(q);
}

void nameByRole(Entry& part, std::string_view role)
{
    part.attributes.emplace_back(kPartKeyAttribute, std::move(part.name));
    part.name = std::string(role);
}

Entry Grouper::buildGroup(Planned& plan)
{
    Entry g;
    const Entry& anchor = m_e[plan.anchor];
    describeGroup(g, std::move(plan.name), anchor, plan.dtype,
        plan.shape == kAnchorShape ? anchor.shape : std::move(m_planShapes[plan.shape]), plan.shapeKnown, plan.typeName,
        std::move(plan.q));
    g.parts.reserve(plan.partCount);
    for (uint32_t k = 0; k < plan.partCount; ++k) {
        const Part& part = m_parts[plan.firstPart + k];
        nameByRole(g.parts.emplace_back(std::move(m_e[part.index])), part.role);
    }
    return g;
}

void Grouper::flushFindings()
{
    static constexpr const char* kWhat[] = { "quantized weights stored without their scales or state",
        "scales or quantization state without their weight", "inconsistent quantization state",
        "float8 weights without scales" };
    for (size_t c = 0; c < static_cast<size_t>(Concern::Count_); ++c)
        if (m_counts[c] > kMaxFindingsPerKind)
            m_findings.push_back(Finding { Severity::Warning,
                std::to_string(m_counts[c] - kMaxFindingsPerKind) + " more " + kWhat[c] + " (" + std::to_string(m_counts[c])
                    + " in all)",
                m_firstOver[c] });
    if (m_findings.empty())
        return;
    std::unordered_set<std::string> have;
    for (const Finding& f : m_s.findings)
        if (!f.entry.empty())
            have.insert(f.entry + '\n' + f.message);
    for (Finding& f : m_findings)
        if (have.insert(f.entry + '\n' + f.message).second)
            m_s.findings.push_back(std::move(f));
}

} // namespace sl::quant::grouping

namespace sl::quant {

void groupQuantizedEntries(Source& s)
{
    if (s.entries.empty())
        return;
    // Without a pattern among the rows, nothing is grouped, and FP8 pairs grouped early stand (what run() does
    // then, after scan() and confirmProvisionalGroups(): beyondFp8Pairs() implies any()).
    if (const DeferredEntries* rows = s.entries.deferred(); rows && !grouping::Grouper::patternsIn(*rows, s).any()) {
        s.provisionalFp8Groups = false;
        return;
    }
    grouping::Grouper(s).run();
}

} // namespace sl::quant
