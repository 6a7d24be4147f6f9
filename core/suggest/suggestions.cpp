#include "suggest/suggestions.h"

#include "diff/diff.h"
#include "diff/reasons.h"
#include "rules/rule_engine.h"
#include "rules/rule_inverse.h"
#include "torch/wrapper_prefixes.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace sl {

std::string_view suggestionKindName(Suggestion::Kind k)
{
    switch (k) {
    case Suggestion::Kind::WrapperPrefix: return "wrapper_prefix";
    case Suggestion::Kind::DropBuffer: return "drop_buffer";
    case Suggestion::Kind::SystematicRename: return "systematic_rename";
    case Suggestion::Kind::FromPair: return "from_pair";
    }
    return "";
}

namespace {

constexpr size_t kExamples = 3;

std::vector<std::string> splitSegments(std::string_view name)
{
    std::vector<std::string> out;
    size_t start = 0;
    for (;;) {
        const size_t dot = name.find('.', start);
        out.emplace_back(name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
        if (dot == std::string_view::npos)
            return out;
        start = dot + 1;
    }
}

bool isNumber(std::string_view s)
{
    return !s.empty() && s.size() <= 18 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

// What a block of rules does to the keys that are still unexpected, measured.
struct Evaluation {
    size_t resolves = 0;
    size_t dropped = 0;
    size_t collisions = 0;
    size_t breaks = 0;
    size_t shapeMismatches = 0;
    std::vector<std::string> examples;
};

bool shapesAgree(const Entry& x, const Entry& y)
{
    return !x.shapeKnown || !y.shapeKnown || x.shape == y.shape;
}

// Whether a key can match a rule made from templates, decided once per index template: the rule written
// over templates (its (\d+) groups as {}) runs on the few distinct templates instead of on every key.
// Without such a rule every key may match.
class TemplateFilter {
public:
    explicit TemplateFilter(const Rule* onTemplates)
    {
        if (onTemplates) {
            RuleSet t;
            t.rules = { *onTemplates };
            m_rule = CompiledRules::compile(t);
        }
    }
    // `templ` must outlive the filter (the answers are cached by view).
    bool mayMatch(const std::string& templ)
    {
        if (!m_rule)
            return true;
        auto [it, inserted] = m_seen.try_emplace(templ, false);
        if (inserted)
            it->second = m_rule->matches(0, templ);
        return it->second;
    }

private:
    std::optional<CompiledRules> m_rule;
    std::unordered_map<std::string_view, bool> m_seen;
};

// The unexpected and missing keys left under the rules taken so far.
class Residual {
public:
    Residual(const Source& a, const Source& b, const RuleSet& rules)
    {
        DiffOptions options;
        options.explain = false;
        DiffResult diff = diffSources(a, b, rules, options);
        for (auto& row : diff.rows) {
            if (row.status == RowStatus::Unexpected)
                unexpected.push_back({ rowEntryA(row, a), row.mapped, row.reason });
            else if (row.status == RowStatus::Missing)
                missing.emplace(rowKeyB(row, b), rowEntryB(row, b));
            else if (row.status != RowStatus::Dropped)
                matched.push_back(rowName(row, a, b));
        }
        for (const auto& name : matched)
            taken.insert(name);
        refreshTemplates();
    }

    struct Key {
        const Entry* a; // A's entry (or the part, for one key of a keyed group)
        std::string name; // after the rules so far
        Reason reason;
    };
    std::vector<Key> unexpected;
    std::unordered_map<std::string, const Entry*> missing; // B's key -> its entry (or part)
    std::vector<std::string> matched; // names that load now
    std::unordered_set<std::string> taken;

    // Index templates ("layers.{}.attn.q.weight") of the unexpected and the matched names, so that a rule
    // made from templates is tried on the few distinct templates instead of on every key.
    std::vector<std::string> unexpectedTemplates, matchedTemplates;
    void refreshTemplates()
    {
        unexpectedTemplates.clear();
        for (const auto& k : unexpected)
            unexpectedTemplates.push_back(foldIndices(k.name));
        for (size_t i = matchedTemplates.size(); i < matched.size(); ++i)
            matchedTemplates.push_back(foldIndices(matched[i]));
    }

    const Entry& entryA(const Key& k) const { return *k.a; }
    const Entry& entryB(const Entry* e) const { return *e; }

    // `onTemplates`, when given, is the block's one rule written over templates (its (\d+) groups as {}): a
    // key can match the rule only if its template matches that, which is decided once per template.
    // A candidate that reaches a match limit on some key (rules/rule_engine.h) cannot be measured, so it
    // resolves nothing and is not suggested; its error would name a rule the user never wrote.
    Evaluation evaluate(const std::vector<Rule>& block, bool checkBreaks = true, const Rule* onTemplates = nullptr) const
    {
        try {
            return measure(block, checkBreaks, onTemplates);
        } catch (const RuleMatchError&) {
            return {};
        }
    }

    Evaluation measure(const std::vector<Rule>& block, bool checkBreaks, const Rule* onTemplates) const
    {
        Evaluation ev;
        RuleSet set;
        set.rules = block;
        const CompiledRules compiled = CompiledRules::compile(set);
        TemplateFilter filter(onTemplates);
        std::unordered_set<std::string_view> hit;
        for (size_t i = 0; i < unexpected.size(); ++i) {
            const Key& k = unexpected[i];
            if (!filter.mayMatch(unexpectedTemplates[i]))
                continue;
            CompiledRules::Result r = compiled.apply(k.name);
            if (r.dropped) {
                ++ev.dropped;
                continue;
            }
            if (r.name == k.name)
                continue;
            auto it = missing.find(r.name);
            if (it != missing.end() && !shapesAgree(*k.a, *it->second)) {
                ++ev.shapeMismatches; // the name lands, the tensor would not load
                continue;
            }
            if (it != missing.end() && hit.insert(it->first).second) {
                ++ev.resolves;
                if (ev.examples.size() < kExamples)
                    ev.examples.push_back(k.name + " -> " + r.name);
            } else if (it != missing.end() || taken.count(r.name)) {
                ++ev.collisions;
            }
        }
        if (checkBreaks && (ev.resolves || ev.dropped)) {
            for (size_t i = 0; i < matched.size(); ++i) {
                const std::string& name = matched[i];
                if (!filter.mayMatch(matchedTemplates[i]))
                    continue;
                CompiledRules::Result r = compiled.apply(name);
                if (r.dropped || r.name != name)
                    ++ev.breaks;
            }
        }
        return ev;
    }

    // Takes a block: its renames and drops become the new state.
    void accept(const std::vector<Rule>& block, const Rule* onTemplates = nullptr)
    {
        RuleSet set;
        set.rules = block;
        const CompiledRules compiled = CompiledRules::compile(set);
        TemplateFilter filter(onTemplates);
        std::vector<Key> still;
        still.reserve(unexpected.size());
        for (size_t i = 0; i < unexpected.size(); ++i) {
            Key& k = unexpected[i];
            if (!filter.mayMatch(unexpectedTemplates[i])) {
                still.push_back(std::move(k));
                continue;
            }
            CompiledRules::Result r = compiled.apply(k.name);
            if (r.dropped)
                continue;
            auto it = missing.find(r.name);
            if (it != missing.end()) {
                taken.insert(r.name);
                matched.push_back(r.name);
                missing.erase(it);
                continue;
            }
            k.name = std::move(r.name);
            still.push_back(std::move(k));
        }
        unexpected = std::move(still);
        refreshTemplates();
    }
};

Rule stripRule(const std::string& wrapper, bool leadingOnly)
{
    Rule r;
    r.pattern = (leadingOnly ? "^" : "") + escapePattern(wrapper);
    r.note = "strip " + std::string(wrapperOrigin(wrapper)) + "'s '" + wrapper + "'";
    return r;
}

// Ends a rule built segment by segment: anchored at the end when it covers the whole key, else followed by
// the dot before the segments it leaves alone (on a side that had segments before it).
void closeRule(Rule& r, bool whole, bool dotAfterA, bool dotAfterB)
{
    if (whole) {
        r.pattern += '$';
        return;
    }
    if (dotAfterA)
        r.pattern += "\\.";
    if (dotAfterB)
        r.replacement += '.';
}

// Module names that conventions rename into each other (Hugging Face <-> torchtitan, as in torchtitan's
// state-dict adapters): where shapes and indices cannot tell two candidates apart, these can.
// How many segments of x and y are such a pair.
size_t knownRenames(const std::string& x, const std::string& y)
{
    static const std::pair<std::string_view, std::string_view> kPairs[] = {
        { "embed_tokens", "tok_embeddings" }, { "lm_head", "output" }, { "self_attn", "attention" },
        { "q_proj", "wq" }, { "k_proj", "wk" }, { "v_proj", "wv" }, { "o_proj", "wo" },
        { "mlp", "feed_forward" }, { "gate_proj", "w1" }, { "down_proj", "w2" }, { "up_proj", "w3" },
        { "input_layernorm", "attention_norm" }, { "post_attention_layernorm", "ffn_norm" },
        { "block_sparse_moe", "moe" }, { "gate", "router" },
    };
    const auto xs = splitSegments(x), ys = splitSegments(y);
    size_t n = 0;
    for (const auto& [p, q] : kPairs)
        for (const auto& a : xs)
            for (const auto& b : ys)
                n += (a == p && b == q) || (a == q && b == p) ? 1 : 0;
    return n;
}

// 2 * LCS / (|x| + |y|) over the parts of two templates that differ.
double similarity(const std::string& x, const std::string& y)
{
    if (x.empty() && y.empty())
        return 1.0;
    std::vector<size_t> prev(y.size() + 1, 0), cur(y.size() + 1, 0);
    for (size_t i = 1; i <= x.size(); ++i) {
        for (size_t j = 1; j <= y.size(); ++j)
            cur[j] = x[i - 1] == y[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
        std::swap(prev, cur);
    }
    return 2.0 * static_cast<double>(prev[y.size()]) / static_cast<double>(x.size() + y.size());
}

// The differing middles of two templates, segment-wise (for similarity and for the rule).
struct Alignment {
    std::vector<std::string> a, b; // segments
    size_t prefix = 0, suffix = 0;
};
Alignment align(const std::string& ta, const std::string& tb)
{
    Alignment al { splitSegments(ta), splitSegments(tb), 0, 0 };
    const size_t n = std::min(al.a.size(), al.b.size());
    while (al.suffix < n && al.a[al.a.size() - 1 - al.suffix] == al.b[al.b.size() - 1 - al.suffix])
        ++al.suffix;
    while (al.prefix + al.suffix < n && al.a[al.prefix] == al.b[al.prefix])
        ++al.prefix;
    return al;
}
std::string joinSegments(const std::vector<std::string>& segs, size_t from, size_t to)
{
    std::string out;
    for (size_t i = from; i < to; ++i)
        out += (i > from ? "." : "") + segs[i];
    return out;
}

class Suggester {
public:
    Suggester(const Source& a, const Source& b, const RuleSet& existing, const SuggestOptions& options)
        : m_a(a)
        , m_b(b)
        , m_rules(existing)
        , m_options(options)
        , m_residual(a, b, existing)
    {
    }

    std::vector<Suggestion> run()
    {
        wrappers();
        drops();
        // A second round finds renames nested in what the first renamed (block_sparse_moe -> moe, then
        // moe.gate -> moe.router.gate); each round works on what the rules so far leave.
        for (int round = 0; round < 3; ++round) {
            const size_t before = m_out.size();
            systematic();
            if (m_out.size() == before)
                break;
        }
        return std::move(m_out);
    }

private:
    const Source& m_a;
    const Source& m_b;
    RuleSet m_rules;
    SuggestOptions m_options;
    Residual m_residual;
    std::vector<Suggestion> m_out;

    bool full() const { return m_out.size() >= m_options.maxSuggestions; }

    void take(Suggestion s, const Evaluation& ev)
    {
        s.resolves = s.kind == Suggestion::Kind::DropBuffer ? ev.dropped : ev.resolves;
        s.collisions = ev.collisions;
        s.examples = ev.examples;
        // A systematic rename is one rule made from templates: it is applied template by template.
        const std::optional<Rule> overTemplates
            = s.kind == Suggestion::Kind::SystematicRename && s.rules.size() == 1 ? std::optional<Rule>(templated(s.rules.front())) : std::nullopt;
        m_residual.accept(s.rules, overTemplates ? &*overTemplates : nullptr);
        for (const auto& r : s.rules)
            m_rules.rules.push_back(r);
        m_out.push_back(std::move(s));
    }

    // Step 1. Candidates from the wrapper segments on either side, as blocks (nested wrappers need all
    // their rules together); the best block first, until none resolves anything.
    void wrappers()
    {
        std::unordered_map<std::string, std::vector<std::string>> missingByUnwrapped; // unwrapped -> B names
        for (const auto& [name, index] : m_residual.missing)
            missingByUnwrapped[unwrapName(name).name].push_back(name);
        std::map<std::vector<std::string>, std::pair<std::vector<Rule>, std::string>> blocks; // key: wrappers on both sides
        for (const auto& k : m_residual.unexpected) {
            UnwrappedName u = unwrapName(k.name);
            auto it = missingByUnwrapped.find(u.name);
            if (it == missingByUnwrapped.end())
                continue;
            const std::string& target = it->second.front();
            UnwrappedName ub = unwrapName(target);
            if (u.removed.empty() && ub.removed.empty())
                continue;
            // The model's wrappers can be added only when they all lead its names.
            std::string leadB;
            for (const auto& w : ub.removed)
                leadB += w;
            if (!ub.removed.empty() && target.compare(0, leadB.size(), leadB) != 0)
                continue;
            std::vector<std::string> key = u.removed;
            key.push_back("|");
            key.insert(key.end(), ub.removed.begin(), ub.removed.end());
            if (blocks.count(key))
                continue;
            std::vector<Rule> rules;
            std::string title;
            std::string rest = k.name; // the key as the rules so far leave it
            for (const auto& w : u.removed) {
                // Anchored where the wrapper leads the key at that point (torch.compile, DDP, PEFT); FSDP and
                // activation-checkpoint wrappers sit at every level, so theirs match anywhere.
                const WrapperPrefix* known = wrapperPrefix(w);
                const bool leading = rest.compare(0, w.size(), w) == 0
                    && !(known && known->place == WrapperPrefix::Place::EveryLevel);
                if (leading)
                    rest.erase(0, w.size());
                rules.push_back(stripRule(w, leading));
                title += std::string(title.empty() ? "strip " : " and ") + quoted(w) + " (" + std::string(wrapperOrigin(w)) + ")";
            }
            if (!title.empty())
                title += " from the checkpoint's keys";
            if (!leadB.empty()) {
                Rule add;
                add.pattern = "^";
                add.replacement = escapeReplacement(leadB);
                std::string origins;
                for (const auto& w : ub.removed)
                    origins += std::string(origins.empty() ? "" : ", ") + std::string(wrapperOrigin(w));
                add.note = "add " + origins + "'s '" + leadB + "' that the model's keys carry";
                rules.push_back(add);
                title += std::string(title.empty() ? "" : ", then ") + "add " + quoted(leadB) + " (" + origins + ") that the model's keys carry";
            }
            blocks.emplace(std::move(key), std::make_pair(std::move(rules), std::move(title)));
        }
        std::vector<std::pair<std::vector<Rule>, std::string>> candidates;
        for (auto& [key, block] : blocks)
            candidates.push_back(std::move(block));
        universalWrappers();
        while (!candidates.empty() && !full()) {
            size_t best = SIZE_MAX;
            Evaluation bestEval;
            for (size_t i = 0; i < candidates.size(); ++i) {
                Evaluation ev = m_residual.evaluate(candidates[i].first);
                if (ev.breaks || ev.resolves == 0)
                    continue;
                if (best == SIZE_MAX || ev.resolves > bestEval.resolves) {
                    best = i;
                    bestEval = std::move(ev);
                }
            }
            if (best == SIZE_MAX)
                return;
            Suggestion s;
            s.kind = Suggestion::Kind::WrapperPrefix;
            s.rules = std::move(candidates[best].first);
            s.title = std::move(candidates[best].second);
            candidates.erase(candidates.begin() + static_cast<long>(best));
            s.title += ": resolves " + std::to_string(bestEval.resolves) + " unexpected/missing pairs";
            take(std::move(s), bestEval);
        }
    }

    // A wrapper that every unexpected key carries and none of the model's keys does: stripped first even
    // when the keys differ otherwise too, so the renames found later read without it.
    void universalWrappers()
    {
        if (m_residual.unexpected.empty() || full())
            return;
        std::vector<std::string> common;
        bool first = true;
        for (const auto& k : m_residual.unexpected) {
            std::vector<std::string> removed = unwrapName(k.name).removed;
            if (first) {
                common = removed;
                first = false;
            } else {
                common.erase(std::remove_if(common.begin(), common.end(),
                                 [&](const std::string& w) { return std::find(removed.begin(), removed.end(), w) == removed.end(); }),
                    common.end());
            }
            if (common.empty())
                return;
        }
        for (const Entry& e : m_b.entries)
            for (const auto& w : unwrapName(e.name).removed)
                common.erase(std::remove(common.begin(), common.end(), w), common.end());
        // Nested wrappers (DDP around torch.compile: module._orig_mod.) are one suggestion: neither rule
        // resolves anything without the other.
        std::vector<Rule> rules;
        std::string title;
        std::vector<std::string> rest;
        for (const auto& k : m_residual.unexpected)
            rest.push_back(k.name);
        for (const auto& w : common) {
            const WrapperPrefix* known = wrapperPrefix(w);
            const bool everywhere = known && known->place == WrapperPrefix::Place::EveryLevel;
            const bool leading = !everywhere
                && std::all_of(rest.begin(), rest.end(), [&](const std::string& n) { return n.compare(0, w.size(), w) == 0; });
            if (leading)
                for (auto& n : rest)
                    n.erase(0, w.size());
            rules.push_back(stripRule(w, leading));
            title += std::string(title.empty() ? "strip " : " and ") + quoted(w) + " (" + std::string(wrapperOrigin(w)) + ")";
        }
        Evaluation ev = m_residual.evaluate(rules);
        if (ev.breaks || ev.resolves == 0)
            return;
        Suggestion s;
        s.kind = Suggestion::Kind::WrapperPrefix;
        s.rules = std::move(rules);
        s.title = title + " from the checkpoint's keys: all " + std::to_string(m_residual.unexpected.size())
            + " unexpected keys carry " + (common.size() > 1 ? "them" : "it") + ", none of the model's; resolves "
            + std::to_string(ev.resolves) + " unexpected/missing pairs";
        take(std::move(s), ev);
    }

    // Step 2. Non-persistent buffers the checkpoint carries and the model does not save.
    void drops()
    {
        // Explaining the whole residual costs a full diff: only worth it when a key could be such a buffer.
        auto declaresBuffers = [](const Source& s) {
            return std::any_of(s.containers.begin(), s.containers.end(), [](const ContainerInfo& c) { return c.path == "non_persistent_buffers"; });
        };
        if (!declaresBuffers(m_a) && !declaresBuffers(m_b)
            && std::none_of(m_residual.unexpected.begin(), m_residual.unexpected.end(), [this](const Residual::Key& k) {
                   return looksLikeNonPersistentBufferName(k.name, &m_residual.entryA(k));
               }))
            return;
        // The reasons come from a fresh explanation of the residual under the rules taken so far.
        DiffResult diff = diffSources(m_a, m_b, m_rules);
        std::map<std::string, size_t> tails; // pattern -> keys
        for (const auto& row : diff.rows) {
            if (row.status != RowStatus::Unexpected || row.reason != Reason::NonPersistentBuffer)
                continue;
            const std::string& name = row.mapped;
            auto segs = splitSegments(name);
            // The last segment, with the one before it when that names the module kind (rotary_emb.inv_freq).
            std::string tail = segs.back();
            if (segs.size() >= 2 && !isNumber(segs[segs.size() - 2]))
                tail = segs[segs.size() - 2] + "." + tail;
            ++tails[tail];
        }
        for (const auto& [tail, count] : tails) {
            if (full())
                return;
            Rule r;
            r.pattern = "(?:^|\\.)" + escapePattern(tail) + "$";
            r.drop = true;
            r.note = "drop '" + tail + "': a non-persistent buffer the model does not save";
            Evaluation ev = m_residual.evaluate({ r });
            if (ev.dropped == 0 || ev.breaks)
                continue;
            Suggestion s;
            s.kind = Suggestion::Kind::DropBuffer;
            s.rules = { r };
            s.title = "drop " + quoted("*." + tail) + " (a non-persistent buffer in the model): resolves " + std::to_string(ev.dropped) + " unexpected keys";
            take(std::move(s), ev);
        }
    }

    // Step 3.
    struct Member {
        std::string name;
        std::vector<int64_t> numbers;
        const Entry* entry;
        std::string templ; // the name with its numbers folded, from the same foldIndices call
    };
    struct Cluster {
        std::string templ;
        std::vector<Member> members; // sorted by numbers
        size_t slots = 0; // how many index segments the template has
        bool taken = false;
    };

    static std::vector<Cluster> clusters(std::vector<Member> members)
    {
        std::unordered_map<std::string, Cluster> byTemplate;
        for (auto& m : members) {
            Cluster& c = byTemplate[m.templ];
            if (c.templ.empty())
                c.templ = m.templ;
            c.members.push_back(std::move(m));
        }
        std::vector<Cluster> out;
        for (auto& [t, c] : byTemplate) {
            std::sort(c.members.begin(), c.members.end(), [](const Member& x, const Member& y) { return x.numbers < y.numbers; });
            c.slots = c.members.front().numbers.size();
            out.push_back(std::move(c));
        }
        // Deterministic order (the map above is unordered): by template.
        std::sort(out.begin(), out.end(), [](const Cluster& x, const Cluster& y) { return x.templ < y.templ; });
        return out;
    }

    // How well two clusters line up: the share of members whose indices both have (a few keys may be
    // missing on one side, which is what the diff is about) and, among those, the share whose shapes agree
    // (a renamed key can still have another shape: padded vocabularies, one resized layer).
    struct Fit {
        double overlap = 0;
        double shapes = 0;
    };
    static Fit fit(const Cluster& u, const Cluster& m, size_t& budget)
    {
        Fit f;
        if (u.slots != m.slots)
            return f;
        const Cluster& small = u.members.size() <= m.members.size() ? u : m;
        const Cluster& large = &small == &u ? m : u;
        if (budget < small.members.size())
            return f;
        budget -= small.members.size();
        size_t common = 0, agree = 0;
        // Members are sorted by their indices: a binary search finds the partner.
        for (const auto& x : small.members) {
            auto it = std::lower_bound(large.members.begin(), large.members.end(), x.numbers,
                [](const Member& m, const std::vector<int64_t>& n) { return m.numbers < n; });
            if (it == large.members.end() || it->numbers != x.numbers)
                continue;
            ++common;
            const Entry* y = it->entry;
            if (!x.entry->shapeKnown || !y->shapeKnown || x.entry->shape == y->shape)
                ++agree;
        }
        f.overlap = static_cast<double>(common) / static_cast<double>(large.members.size());
        f.shapes = common ? static_cast<double>(agree) / static_cast<double>(common) : 0;
        return f;
    }


    // The rule for a template pair, covering `extra` of the common suffix segments too (0: stop before it).
    static std::optional<Rule> templateRule(const Alignment& al, size_t extra)
    {
        const size_t endA = al.a.size() - al.suffix + extra;
        const size_t endB = al.b.size() - al.suffix + extra;
        const bool whole = extra == al.suffix;
        Rule r;
        r.pattern = "^";
        int groups = 0;
        for (size_t i = 0; i < endA; ++i) {
            if (i)
                r.pattern += "\\.";
            if (al.a[i] == "{}") {
                r.pattern += "(\\d+)";
                ++groups;
            } else {
                r.pattern += escapePattern(al.a[i]);
            }
        }
        int refs = 0;
        for (size_t i = 0; i < endB; ++i) {
            if (i)
                r.replacement += '.';
            if (al.b[i] == "{}")
                r.replacement += "\\g<" + std::to_string(++refs) + ">";
            else
                r.replacement += escapeReplacement(al.b[i]);
        }
        if (refs != groups)
            return std::nullopt; // the indices do not line up
        closeRule(r, whole, endA > 0, endB > 0);
        // \g<1> reads better as \1 where no digit follows.
        return r;
    }

    // A template rule (literal segments and (\d+) groups) over index templates: each group becomes a
    // literal {}, which is what foldIndices puts where the key has a number.
    static Rule templated(const Rule& r)
    {
        Rule t;
        const std::string group = "(\\d+)";
        for (size_t i = 0; i < r.pattern.size();) {
            if (r.pattern.compare(i, group.size(), group) == 0) {
                t.pattern += "\\{\\}";
                i += group.size();
            } else {
                t.pattern += r.pattern[i++];
            }
        }
        return t;
    }

    void systematic()
    {
        if (full() || m_residual.unexpected.empty() || m_residual.missing.empty())
            return;
        std::vector<Member> um, mm;
        std::vector<int64_t> numbers;
        um.reserve(m_residual.unexpected.size());
        for (const auto& k : m_residual.unexpected) {
            numbers.clear();
            std::string t = foldIndices(k.name, &numbers);
            um.push_back({ k.name, numbers, &m_residual.entryA(k), std::move(t) });
        }
        mm.reserve(m_residual.missing.size());
        for (const auto& [name, index] : m_residual.missing) {
            numbers.clear();
            std::string t = foldIndices(name, &numbers);
            mm.push_back({ name, numbers, &m_residual.entryB(index), std::move(t) });
        }
        std::vector<Cluster> us = clusters(std::move(um)), ms = clusters(std::move(mm));

        // Candidate pairs: clusters with the same index slots whose members mostly line up by index and by
        // shape. A budget of member lookups keeps thousands of clusters from going quadratic.
        struct Pair {
            double score;
            size_t u, m;
        };
        std::vector<Pair> pairs;
        size_t budget = 20'000'000;
        for (size_t i = 0; i < us.size(); ++i) {
            for (size_t j = 0; j < ms.size(); ++j) {
                const size_t nu = us[i].members.size(), nm = ms[j].members.size();
                if (us[i].slots != ms[j].slots || std::min(nu, nm) * 10 < std::max(nu, nm) * 8)
                    continue;
                const Fit f = fit(us[i], ms[j], budget);
                if (f.overlap < 0.8 || f.shapes < 0.9)
                    continue;
                Alignment al = align(us[i].templ, ms[j].templ);
                const std::string from = joinSegments(al.a, al.prefix, al.a.size() - al.suffix);
                const std::string to = joinSegments(al.b, al.prefix, al.b.size() - al.suffix);
                // The share of segments the two templates have in common at their ends counts as much as
                // how alike the differing middles are: a pure prefix strip ('model.norm.bias' -> 'norm.bias')
                // has nothing alike in its middle, yet it is a better partner than 'norm.weight', whose
                // characters overlap more.
                const double shared = static_cast<double>(al.prefix + al.suffix) / static_cast<double>(std::max(al.a.size(), al.b.size()));
                const double score = similarity(from, to) + shared + f.overlap + f.shapes + (knownRenames(from, to) ? 1.0 : 0.0);
                pairs.push_back({ score, i, j });
            }
        }
        std::stable_sort(pairs.begin(), pairs.end(), [](const Pair& x, const Pair& y) { return x.score > y.score; });

        // Greedy one-to-one pairing, best score first. Any other candidate that fits the same cluster (by
        // indices and shapes) makes the suggestion "ambiguous": names decided it, so the user should look.
        std::vector<std::pair<size_t, size_t>> chosen;
        std::map<size_t, std::string> ambiguity;
        std::vector<bool> usedU(us.size()), usedM(ms.size());
        for (const Pair& p : pairs) {
            if (usedU[p.u] || usedM[p.m])
                continue;
            usedU[p.u] = usedM[p.m] = true;
            chosen.emplace_back(p.u, p.m);
            for (const Pair& q : pairs)
                if (q.u == p.u && q.m != p.m) {
                    ambiguity[p.u] = ms[q.m].templ;
                    break;
                }
        }

        // Rules, shortest first (stop before the common suffix); longer only where the short one would
        // rename keys that load already. Identical rules from several pairs (weight and bias) merge.
        struct Pending {
            Rule rule;
            std::string title;
            Evaluation ev; // measured on the residual as it was before this round took anything
        };
        std::map<std::pair<std::string, std::string>, Pending> rules;
        for (const auto& [ui, mi] : chosen) {
            Alignment al = align(us[ui].templ, ms[mi].templ);
            for (size_t extra = 0; extra <= al.suffix; ++extra) {
                std::optional<Rule> r = templateRule(al, extra);
                if (!r)
                    break;
                if (rules.count({ r->pattern, r->replacement }))
                    break; // the same rule from another pair (weight and bias, w1 and w2): measured already
                const Rule overTemplates = templated(*r);
                Evaluation ev = m_residual.evaluate({ *r }, true, &overTemplates);
                if (ev.resolves == 0)
                    break;
                if (ev.breaks)
                    continue;
                const std::string from = joinSegments(al.a, 0, al.a.size() - al.suffix + extra);
                const std::string to = joinSegments(al.b, 0, al.b.size() - al.suffix + extra);
                // A rule that only removes or adds leading segments says so.
                const std::string what = to.empty() ? "strip " + quoted(from + ".")
                    : from.empty()                  ? "prepend " + quoted(to + ".")
                                                    : "rename " + quoted(from) + " to " + quoted(to);
                r->note = what;
                if (auto amb = ambiguity.find(ui); amb != ambiguity.end())
                    r->note += " (ambiguous: '" + amb->second + "' fits the same indices and shapes; check it)";
                rules.try_emplace({ r->pattern, r->replacement }, Pending { *r, what, std::move(ev) });
                break;
            }
        }
        // Take them by what they resolve; after the first is taken, each is measured again on what is left.
        std::vector<Pending> pending;
        for (auto& [key, value] : rules)
            pending.push_back(std::move(value));
        std::stable_sort(pending.begin(), pending.end(), [](const Pending& x, const Pending& y) { return x.ev.resolves > y.ev.resolves; });
        bool changed = false;
        for (Pending& p : pending) {
            if (full())
                return;
            Evaluation ev;
            if (changed) {
                const Rule overTemplates = templated(p.rule);
                ev = m_residual.evaluate({ p.rule }, true, &overTemplates);
            } else {
                ev = std::move(p.ev);
            }
            if (ev.resolves == 0 || ev.breaks)
                continue;
            changed = true;
            Suggestion s;
            s.kind = Suggestion::Kind::SystematicRename;
            s.rules = { p.rule };
            s.title = p.title + ": resolves " + std::to_string(ev.resolves) + " unexpected/missing pairs";
            if (ev.collisions)
                s.title += " (" + std::to_string(ev.collisions) + " collide)";
            take(std::move(s), ev);
        }
    }
};

} // namespace

std::vector<Suggestion> suggestRules(const Source& a, const Source& b, const RuleSet& existing, const SuggestOptions& options)
{
    return Suggester(a, b, existing, options).run();
}

std::vector<size_t> rankPartners(std::string_view name, const std::vector<std::string_view>& candidates)
{
    struct Score {
        size_t suffix = 0;
        double middle = 0;
        size_t prefix = 0;
    };
    const std::string self(name);
    std::vector<Score> scores(candidates.size());
    for (size_t i = 0; i < candidates.size(); ++i) {
        const Alignment al = align(self, std::string(candidates[i]));
        const std::string from = joinSegments(al.a, al.prefix, al.a.size() - al.suffix);
        const std::string to = joinSegments(al.b, al.prefix, al.b.size() - al.suffix);
        scores[i] = { al.suffix, similarity(from, to) + static_cast<double>(knownRenames(from, to)), al.prefix };
    }
    std::vector<size_t> order(candidates.size());
    for (size_t i = 0; i < order.size(); ++i)
        order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
        const Score& p = scores[x];
        const Score& q = scores[y];
        if (p.suffix != q.suffix)
            return p.suffix > q.suffix;
        if (p.middle != q.middle)
            return p.middle > q.middle;
        return p.prefix > q.prefix;
    });
    return order;
}

std::optional<Suggestion> inferRule(std::string_view fromA, std::string_view toB, const Source& a, const Source& b, const RuleSet& existing)
{
    auto sa = splitSegments(fromA), sb = splitSegments(toB);
    const size_t n = std::min(sa.size(), sb.size());
    size_t suffix = 0, prefix = 0;
    while (suffix < n && sa[sa.size() - 1 - suffix] == sb[sb.size() - 1 - suffix])
        ++suffix;
    while (prefix + suffix < n && sa[prefix] == sb[prefix])
        ++prefix;
    if (prefix == sa.size() && prefix == sb.size())
        return std::nullopt; // the same name

    Residual residual(a, b, existing);
    for (size_t extra = 0; extra <= suffix; ++extra) {
        const size_t endA = sa.size() - suffix + extra;
        const size_t endB = sb.size() - suffix + extra;
        const bool whole = extra == suffix;
        Rule r;
        r.pattern = "^";
        std::vector<std::pair<std::string, bool>> captures; // value, used
        for (size_t i = 0; i < endA; ++i) {
            if (i)
                r.pattern += "\\.";
            if (isNumber(sa[i])) {
                r.pattern += "(\\d+)";
                captures.emplace_back(sa[i], false);
            } else {
                r.pattern += escapePattern(sa[i]);
            }
        }
        // B's numbers: the capture at the same place in the shared prefix, else the first unused capture with
        // the same value, else the literal number.
        size_t captureAtPrefix = 0;
        for (size_t i = 0; i < endB; ++i) {
            if (i)
                r.replacement += '.';
            if (!isNumber(sb[i])) {
                r.replacement += escapeReplacement(sb[i]);
                continue;
            }
            size_t use = SIZE_MAX;
            if (i < prefix || (i >= sb.size() - suffix)) {
                // shared segment: its own capture (the k-th number of A at the same position)
                size_t k = 0;
                const size_t posA = i < prefix ? i : i - (sb.size() - sa.size());
                for (size_t j = 0; j < posA; ++j)
                    k += isNumber(sa[j]);
                use = k;
                captureAtPrefix = std::max(captureAtPrefix, k + 1);
            } else {
                for (size_t k = 0; k < captures.size(); ++k)
                    if (!captures[k].second && captures[k].first == sb[i] && k >= captureAtPrefix) {
                        use = k;
                        break;
                    }
            }
            if (use < captures.size()) {
                captures[use].second = true;
                r.replacement += "\\g<" + std::to_string(use + 1) + ">";
            } else {
                r.replacement += sb[i];
            }
        }
        closeRule(r, whole, endA > 0, endB > 0);
        // The rule must turn the chosen key into the chosen target.
        RuleSet single;
        single.rules = { r };
        CompiledRules::Result check;
        try {
            check = CompiledRules::compile(single).apply(fromA);
        } catch (const RuleMatchError&) {
            continue; // a match limit on the chosen key itself: this shape of rule cannot be checked
        }
        if (check.dropped || check.name != toB)
            continue;
        Evaluation ev = residual.evaluate({ r });
        if (ev.breaks && !whole)
            continue;
        Suggestion s;
        s.kind = Suggestion::Kind::FromPair;
        r.note = "from the pair '" + std::string(fromA) + "' -> '" + std::string(toB) + "'";
        s.rules = { r };
        s.resolves = ev.resolves;
        s.collisions = ev.collisions;
        s.examples = ev.examples;
        s.title = "rename " + quoted(r.pattern) + " to " + quoted(r.replacement) + ": resolves " + std::to_string(ev.resolves)
            + " unexpected/missing pairs (" + std::to_string(ev.resolves > 0 ? ev.resolves - 1 : 0) + " besides the chosen one)"
            + (ev.collisions ? ", " + std::to_string(ev.collisions) + " collide" : "")
            + (ev.shapeMismatches ? ", " + std::to_string(ev.shapeMismatches) + " land on a key of another shape" : "")
            + (ev.breaks ? ", renames " + std::to_string(ev.breaks) + " keys that load now" : "");
        return s;
    }
    return std::nullopt;
}

RuleSet withSuggestions(const RuleSet& existing, const std::vector<Suggestion>& suggestions)
{
    RuleSet out = existing;
    for (const auto& s : suggestions)
        for (size_t i = 0; i < s.rules.size(); ++i) {
            Rule r = s.rules[i];
            if (i == 0) {
                r.comments.push_back(s.title);
                for (const auto& e : s.examples)
                    r.comments.push_back("  e.g. " + e);
            }
            out.rules.push_back(std::move(r));
        }
    return out;
}

} // namespace sl
