// The diff engine, rules and suggestions against real torch: every pair is saved by Debian's torch, and what
// a strict load_state_dict would do (missing, unexpected, size mismatches, dtype casts, success) is what torch
// itself reports for that pair (make_diff_cases.py). Rule semantics are checked against Python's `re`.

#include "common/test_files.h"
#include "common/test_paths.h"
#include "diff/diff.h"
#include "diff/name_diff.h"
#include "diff/rule_checks.h"
#include "formats/loader.h"
#include "rules/rule_engine.h"
#include "rules/rule_io.h"
#include "suggest/pending_pairs.h"
#include "suggest/suggestions.h"
#include "util/error.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QTest>

#include <set>

using namespace sl;

namespace {

using sl::test::readJson;

std::set<std::string> stringSet(const QJsonArray& a)
{
    std::set<std::string> out;
    for (const auto& v : a)
        out.insert(v.toString().toStdString());
    return out;
}


bool writeText(const QString& path, const std::string& text)
{
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate))
        return false;
    return f.write(text.data(), qint64(text.size())) == qint64(text.size());
}

struct Outcome {
    std::set<std::string> missing, unexpected, shapeMismatch, dtypeMismatch;
    std::map<std::string, std::string> mapped; // A key -> mapped name ("" when dropped)
};

Outcome outcomeOf(const DiffResult& d, const Source& a, const Source& b)
{
    Outcome o;
    for (const auto& row : d.rows) {
        // The name torch sees: B's for matched rows, else A's after the rules.
        const std::string& name = rowName(row, a, b);
        switch (row.status) {
        case RowStatus::Missing: o.missing.insert(name); break;
        case RowStatus::Unexpected: o.unexpected.insert(name); break;
        case RowStatus::ShapeMismatch: o.shapeMismatch.insert(name); break;
        case RowStatus::DtypeMismatch: o.dtypeMismatch.insert(name); break;
        default: break;
        }
        if (row.a.valid())
            o.mapped[a.entries[row.a.get()].name] = row.status == RowStatus::Dropped ? std::string() : name;
    }
    return o;
}

std::string joined(const std::set<std::string>& s)
{
    std::string out;
    for (const auto& k : s)
        out += (out.empty() ? "" : ", ") + k;
    return "{" + out + "}";
}

} // namespace

// In a test that reads the cases torch made: skips it where torch is not installed.
#define NEED_TORCH_CASES()                                                                                        \
    do {                                                                                                          \
        if (!m_haveCases)                                                                                         \
            QSKIP("Debian's torch (/usr/bin/python3) is not installed, so there are no torch-made cases");         \
    } while (false)

class TestDiff : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    QString m_script = sl::test::sourceDir() + QStringLiteral("/tests/core/diff/make_diff_cases.py");

    QString casePath(const QString& c, const char* file) const { return m_dir.path() + "/" + c + "/" + file; }
    Source open(const QString& c, const char* file) const { return openSource(casePath(c, file).toStdString()); }

    // Torch's verdict for case `c` with `rules` applied by Python's re.
    QJsonObject torchTruth(const QString& c, const RuleSet& rules)
    {
        const QString rulesPath = m_dir.path() + "/" + c + ".rules.json";
        const QString outPath = m_dir.path() + "/" + c + ".truth.json";
        if (!writeText(rulesPath, rulesToJson(rules)))
            return {};
        auto r = sl::test::run(sl::test::torchPython(), { m_script, "truth", m_dir.path(), c, rulesPath, outPath });
        if (r.exitCode != 0)
            qWarning() << r.err;
        return readJson(outPath);
    }

    // Our diff's sets and mapping must equal torch's, key by key.
    void compareWithTorch(const DiffResult& d, const Source& a, const Source& b, const QJsonObject& truth)
    {
        QVERIFY2(!truth.isEmpty(), "no truth from torch");
        const Outcome o = outcomeOf(d, a, b);
        auto check = [](const std::set<std::string>& ours, const QJsonValue& theirs, const char* what) {
            const auto t = stringSet(theirs.toArray());
            QVERIFY2(ours == t, qPrintable(QStringLiteral("%1: ours %2, torch %3").arg(what, QString::fromStdString(joined(ours)), QString::fromStdString(joined(t)))));
        };
        check(o.missing, truth["missing"], "missing");
        check(o.unexpected, truth["unexpected"], "unexpected");
        check(o.shapeMismatch, truth["shape_mismatch"], "shape_mismatch");
        check(o.dtypeMismatch, truth["dtype_mismatch"], "dtype_mismatch");
        const QJsonObject mapped = truth["mapped"].toObject();
        QCOMPARE(size_t(mapped.size()), a.entries.size());
        for (auto it = mapped.begin(); it != mapped.end(); ++it) {
            const std::string key = it.key().toStdString();
            const std::string want = it.value().isNull() ? std::string() : it.value().toString().toStdString();
            QVERIFY2(o.mapped.count(key), key.c_str());
            QCOMPARE(QString::fromStdString(o.mapped.at(key)), QString::fromStdString(want));
        }
        QCOMPARE(d.summary.loadSucceeds(), truth["load_succeeds"].toBool());
    }

    QStringList cases() const { return QDir(m_dir.path()).entryList(QDir::Dirs | QDir::NoDotAndDotDot); }
    bool m_haveCases = false; // made by real torch in initTestCase; the tests that need none run without it

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        if (!sl::test::haveTorchPython()) {
            qInfo("Debian's torch (/usr/bin/python3) is not installed: the tests on torch-made cases skip");
            return;
        }
        auto r = sl::test::run(sl::test::torchPython(), { m_script, "make", m_dir.path() });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY(cases().size() >= 10);
        m_haveCases = true;
    }

    void againstTorch_data()
    {
        QTest::addColumn<QString>("name");
        for (const QString& c : cases())
            QTest::newRow(qPrintable(c)) << c;
    }

    // The case's own rules (most have none): our rows are what torch reports.
    void againstTorch()
    {
        NEED_TORCH_CASES();
        QFETCH(QString, name);
        const Source a = open(name, "a.pt");
        const Source b = open(name, "b.pt");
        const RuleSet rules = loadRules(casePath(name, "rules.json").toStdString());
        const DiffResult d = diffSources(a, b, rules);
        QVERIFY(d.ruleErrors.empty());
        compareWithTorch(d, a, b, readJson(casePath(name, "truth.json")));
        // Every A entry and every B entry appears in exactly one row.
        std::vector<int> seenA(a.entries.size()), seenB(b.entries.size());
        for (const auto& row : d.rows) {
            if (row.a.valid())
                ++seenA[row.a.get()];
            if (row.b.valid())
                ++seenB[row.b.get()];
        }
        QVERIFY(std::all_of(seenA.begin(), seenA.end(), [](int n) { return n == 1; }));
        QVERIFY(std::all_of(seenB.begin(), seenB.end(), [](int n) { return n == 1; }));
    }

    void reasons_data()
    {
        QTest::addColumn<QString>("name");
        QTest::addColumn<QString>("key"); // a row name (B's name, else A's mapped name)
        QTest::addColumn<QString>("reason");
        for (const char* c : { "compiled", "compiled_model", "data_parallel", "nested_wrappers", "checkpoint_wrapper", "fsdp_wrapped", "peft" })
            QTest::newRow(c) << c << "*" << "wrapper_prefix";
        QTest::newRow("tied") << "tied" << "lm_head.weight" << "tied_weight";
        QTest::newRow("non_persistent") << "non_persistent" << "*" << "non_persistent_buffer";
        QTest::newRow("mixed_vocab") << "mixed" << "model.embed_tokens.weight" << "padded_vocabulary";
        QTest::newRow("mixed_head") << "mixed" << "lm_head.weight" << "padded_vocabulary";
        QTest::newRow("mixed_transposed") << "mixed" << "model.layers.1.mlp.down_proj.weight" << "transposed";
        QTest::newRow("mixed_dtype") << "mixed" << "model.norm.weight" << "dtype_cast";
        QTest::newRow("mixed_inv_freq") << "mixed" << "model.layers.0.self_attn.rotary_emb.inv_freq" << "non_persistent_buffer";
    }

    // Each case was built with one cause; the row (or every non-matching row, for "*") must name it.
    void reasons()
    {
        NEED_TORCH_CASES();
        QFETCH(QString, name);
        QFETCH(QString, key);
        QFETCH(QString, reason);
        const Source a = open(name, "a.pt");
        const Source b = open(name, "b.pt");
        const DiffResult d = diffSources(a, b, RuleSet {});
        int checked = 0;
        for (const auto& row : d.rows) {
            if (row.status == RowStatus::Match)
                continue;
            const QString rowKey = QString::fromStdString(rowName(row, a, b));
            if (key != "*" && rowKey != key)
                continue;
            ++checked;
            QVERIFY2(QString::fromUtf8(reasonName(row.reason).data(), int(reasonName(row.reason).size())) == reason,
                qPrintable(rowKey + ": " + QString::fromUtf8(reasonName(row.reason).data()) + " (" + QString::fromStdString(row.explanation) + ")"));
            QVERIFY(!row.explanation.empty());
        }
        QVERIFY(checked > 0);
    }

    void suggestionsLoadInTorch_data()
    {
        QTest::addColumn<QString>("name");
        for (const char* c : { "compiled", "compiled_model", "data_parallel", "nested_wrappers", "checkpoint_wrapper",
                 "fsdp_wrapped", "peft", "non_persistent", "hf_to_titan" })
            QTest::newRow(c) << c;
    }

    // Taking every suggestion must make torch's strict load succeed, and our diff under those rules must
    // still agree with torch key by key.
    void suggestionsLoadInTorch()
    {
        NEED_TORCH_CASES();
        QFETCH(QString, name);
        const Source a = open(name, "a.pt");
        const Source b = open(name, "b.pt");
        const auto suggestions = suggestRules(a, b);
        QVERIFY(!suggestions.empty());
        for (const auto& s : suggestions) {
            QVERIFY(s.resolves > 0);
            QVERIFY(!s.title.empty());
        }
        const RuleSet rules = withSuggestions(RuleSet {}, suggestions);
        const QJsonObject truth = torchTruth(name, rules);
        QVERIFY2(truth["load_succeeds"].toBool(), rulesToYaml(rules).c_str());
        compareWithTorch(diffSources(a, b, rules), a, b, truth);
    }

    // Before any rule, the rows the pending suggestions pair are exactly the keys Python's re maps onto a key
    // torch reports missing: truth from torch, with every suggestion applied.
    void pendingPairsAreWhatTorchLoads()
    {
        NEED_TORCH_CASES();
        QFETCH(QString, name);
        const Source a = open(name, "a.pt");
        const Source b = open(name, "b.pt");
        DiffResult d = diffSources(a, b, RuleSet {});
        const auto suggestions = suggestRules(a, b);
        markPendingSuggestions(d, a, b, RuleMode::Chain, suggestions);
        const QJsonObject before = readJson(casePath(name, "truth.json")); // these cases have no rules of their own
        const QJsonObject after = torchTruth(name, withSuggestions(RuleSet {}, suggestions));
        QVERIFY(!before.isEmpty() && !after.isEmpty());
        const auto missingBefore = stringSet(before["missing"].toArray());
        const auto unexpectedBefore = stringSet(before["unexpected"].toArray());
        std::set<std::pair<std::string, std::string>> expected, ours;
        std::set<std::string> dropped;
        const QJsonObject mapped = after["mapped"].toObject();
        for (auto it = mapped.begin(); it != mapped.end(); ++it) {
            const std::string key = it.key().toStdString();
            if (!unexpectedBefore.count(key))
                continue;
            if (it.value().isNull())
                dropped.insert(key);
            else if (missingBefore.count(it.value().toString().toStdString()))
                expected.insert({ key, it.value().toString().toStdString() });
        }
        for (size_t i = 0; i < d.rows.size(); ++i) {
            const DiffRow& row = d.rows[i];
            if (row.status != RowStatus::Unexpected)
                continue;
            const RowIndex p = pairedRow(d, i);
            if (p.valid()) {
                const DiffRow& m = d.rows[p.get()];
                ours.insert({ rowKeyA(row, a), rowKeyB(m, b) });
                // The pair's two rows agree: same reason, same suggestion, each explained.
                QCOMPARE(m.reason, row.reason);
                QVERIFY(row.suggestion.valid() && row.suggestion == m.suggestion);
                QVERIFY(!row.explanation.empty() && !m.explanation.empty());
            }
            if (dropped.count(rowKeyA(row, a)))
                QVERIFY2(row.suggestion.valid(), rowKeyA(row, a).c_str());
        }
        QVERIFY2(ours == expected, qPrintable(QString::number(ours.size()) + " pairs, torch " + QString::number(expected.size())));
        QVERIFY(!expected.empty() || !dropped.empty());
        // Folded, a pair is one row: A's names beside B's, the unexpected partners not listed again.
        size_t pairs = 0;
        for (const FoldedRow& f : foldRows(d, a, b)) {
            QVERIFY(f.partnerName.empty() || f.status == RowStatus::Missing);
            if (!f.partnerName.empty())
                pairs += f.rows.size();
            for (size_t r : f.rows)
                QVERIFY(d.rows[r].status != RowStatus::Unexpected || !pairedRow(d, r).valid());
        }
        QCOMPARE(pairs, expected.size());
    }
    void pendingPairsAreWhatTorchLoads_data() { suggestionsLoadInTorch_data(); }

    // Where the case's author wrote the rules (hf_to_titan_rules: the same checkpoint and model), the
    // suggestions must send every key where those rules send it, as torch applies both: a suggestion that
    // loads but swaps two same-shaped tensors (norm.weight and norm.bias) fails here.
    void suggestionsMapAsTheAuthorsRulesDo()
    {
        NEED_TORCH_CASES();
        const Source a = open("hf_to_titan", "a.pt");
        const Source b = open("hf_to_titan", "b.pt");
        const QJsonObject ours = torchTruth("hf_to_titan", withSuggestions(RuleSet {}, suggestRules(a, b)));
        const QJsonObject authors = readJson(casePath("hf_to_titan_rules", "truth.json"));
        QVERIFY(authors["load_succeeds"].toBool());
        const QJsonObject want = authors["mapped"].toObject();
        const QJsonObject got = ours["mapped"].toObject();
        QCOMPARE(got.size(), want.size());
        for (auto it = want.begin(); it != want.end(); ++it)
            QVERIFY2(got.value(it.key()) == it.value(),
                qPrintable(it.key() + " -> " + got.value(it.key()).toString() + ", the author's rules: " + it.value().toString()));
    }

    void partnersRankTorchsPairFirst_data() { suggestionsLoadInTorch_data(); }

    // The window offers a row's partners ranked by rankPartners: for every unexpected key that torch, with
    // all suggestions applied, loads into a key it first reported missing, that key is offered first.
    void partnersRankTorchsPairFirst()
    {
        NEED_TORCH_CASES();
        QFETCH(QString, name);
        const Source a = open(name, "a.pt");
        const Source b = open(name, "b.pt");
        const QJsonObject before = readJson(casePath(name, "truth.json"));
        const QJsonObject after = torchTruth(name, withSuggestions(RuleSet {}, suggestRules(a, b)));
        const auto missingBefore = stringSet(before["missing"].toArray());
        const auto unexpectedBefore = stringSet(before["unexpected"].toArray());
        const std::vector<std::string> missing(missingBefore.begin(), missingBefore.end());
        const std::vector<std::string_view> candidates(missing.begin(), missing.end());
        size_t checked = 0;
        const QJsonObject mapped = after["mapped"].toObject();
        for (auto it = mapped.begin(); it != mapped.end(); ++it) {
            const std::string key = it.key().toStdString();
            const std::string partner = it.value().toString().toStdString();
            if (!unexpectedBefore.count(key) || !missingBefore.count(partner))
                continue;
            const std::vector<size_t> ranked = rankPartners(key, candidates);
            QCOMPARE(ranked.size(), candidates.size());
            QVERIFY2(missing[ranked.front()] == partner, (key + " -> " + missing[ranked.front()] + ", torch: " + partner).c_str());
            ++checked;
        }
        if (!checked)
            QSKIP("no renamed pair in this case (its suggestions only drop keys)");
    }

    // Wrapper prefixes pair rows before any suggestion: torch.compile's '_orig_mod.' is the only difference.
    void wrapperPairsBeforeSuggestions()
    {
        NEED_TORCH_CASES();
        const Source a = open("compiled", "a.pt");
        const Source b = open("compiled", "b.pt");
        const DiffResult d = diffSources(a, b, RuleSet {});
        size_t paired = 0;
        for (size_t i = 0; i < d.rows.size(); ++i) {
            if (d.rows[i].status != RowStatus::Unexpected)
                continue;
            const RowIndex p = pairedRow(d, i);
            QVERIFY(p.valid());
            const std::string key = rowKeyA(d.rows[i], a);
            QVERIFY(key.rfind("_orig_mod.", 0) == 0);
            QCOMPARE(rowKeyB(d.rows[p.get()], b), key.substr(10));
            QCOMPARE(d.rows[i].reason, Reason::WrapperPrefix);
            ++paired;
        }
        QCOMPARE(paired, b.entries.size());
    }

    // A compiled set keeps what it needs of its rules: the pending suggestions compile a set that goes out of
    // scope (a pointer into it read a freed rule's drop flag, and every key after the first was "dropped").
    void compiledRulesOutliveTheirSet()
    {
        CompiledRules compiled;
        {
            RuleSet set;
            Rule rename;
            rename.pattern = "^encoder\\.blocks\\.";
            rename.replacement = "encoder.layers.";
            Rule drop;
            drop.pattern = "inv_freq$";
            drop.drop = true;
            set.rules = { rename, drop };
            compiled = CompiledRules::compile(set);
        }
        std::vector<std::string> reuse(64, std::string(sizeof(Rule), '\x01')); // take the freed memory
        for (int i = 0; i < 4; ++i) {
            const auto r = compiled.apply("encoder.blocks." + std::to_string(i) + ".fc.weight");
            QCOMPARE(r.name, "encoder.layers." + std::to_string(i) + ".fc.weight");
            QVERIFY(!r.dropped);
        }
        QVERIFY(compiled.apply("rotary.inv_freq").dropped);
        QVERIFY(!reuse.empty());
    }

    // The word diff marks the segments that go and come, with their dots.
    void nameSegmentsThatDiffer()
    {
        auto spans = [](std::string_view x, std::string_view y) {
            std::vector<std::string> out;
            for (const NameSpan& s : differingSegments(x, y))
                out.push_back(std::string(x.substr(s.start, s.length)));
            return out;
        };
        using V = std::vector<std::string>;
        QCOMPARE(spans("_orig_mod.layers.0.attn.weight", "layers.0.attn.weight"), (V { "_orig_mod." }));
        QCOMPARE(spans("layers.0.attn.weight", "_orig_mod.layers.0.attn.weight"), V {});
        QCOMPARE(spans("layers.0.attention.wq.weight", "model.layers.0.self_attn.q_proj.weight"), (V { "attention.wq." }));
        QCOMPARE(spans("model.layers.0.self_attn.q_proj.weight", "layers.0.attention.wq.weight"), (V { "model.", "self_attn.q_proj." }));
        QCOMPARE(spans("output.weight", "lm_head.weight"), (V { "output." }));
        QCOMPARE(spans("a.b.x", "a.b.y"), V { ".x" }); // a last segment takes the dot before it
        QCOMPARE(spans("layers.{0..31}.w1", "layers.{0..31}.gate"), (V { ".w1" }));
        QCOMPARE(spans("", "a"), V {});
    }

    // The issue's example: strip '_orig_mod.' resolves as many pairs as there are keys.
    void wrapperSuggestionCountsPairs()
    {
        NEED_TORCH_CASES();
        const Source a = open("compiled", "a.pt");
        const Source b = open("compiled", "b.pt");
        const auto suggestions = suggestRules(a, b);
        QCOMPARE(suggestions.size(), size_t(1));
        QCOMPARE(suggestions[0].kind, Suggestion::Kind::WrapperPrefix);
        QCOMPARE(suggestions[0].resolves, b.entries.size());
        QVERIFY(suggestions[0].title.find("_orig_mod.") != std::string::npos);
    }

    // One chosen pair generalises over the layer index.
    void inferFromPair()
    {
        NEED_TORCH_CASES();
        const Source a = open("hf_to_titan", "a.pt");
        const Source b = open("hf_to_titan", "b.pt");
        auto s = inferRule("model.layers.1.self_attn.q_proj.weight", "layers.1.attention.wq.weight", a, b);
        QVERIFY(s.has_value());
        QCOMPARE(s->collisions, size_t(0));
        // Truth: the rule applied by Python's re must take every layer's q_proj off torch's missing list.
        RuleSet rules;
        rules.rules = s->rules;
        const QJsonObject truth = torchTruth("hf_to_titan", rules);
        const auto missing = stringSet(truth["missing"].toArray());
        int layers = 0;
        for (const auto& e : b.entries)
            if (e.name.find(".attention.wq.weight") != std::string::npos) {
                ++layers;
                QVERIFY2(!missing.count(e.name), e.name.c_str());
            }
        QCOMPARE(s->resolves, size_t(layers));
        QVERIFY(layers >= 3);
    }

    void folding()
    {
        NEED_TORCH_CASES();
        const Source a = open("hf_to_titan", "a.pt");
        const Source b = open("hf_to_titan", "b.pt");
        const DiffResult d = diffSources(a, b, RuleSet {});
        const auto folded = foldRows(d, a, b);
        bool found = false;
        size_t rows = 0;
        for (const auto& f : folded) {
            rows += f.rows.size();
            if (f.name == "layers.{0..2}.attention.wq.weight") {
                found = true;
                QCOMPARE(f.status, RowStatus::Missing);
                QCOMPARE(f.rows.size(), size_t(3));
            }
        }
        QVERIFY(found);
        QCOMPARE(rows, d.rows.size());
        QCOMPARE(foldIndices("layers.12.experts.3.w1"), std::string("layers.{}.experts.{}.w1"));
    }

    void ruleChecks()
    {
        NEED_TORCH_CASES();
        const Source a = open("hf_to_titan", "a.pt");
        const Source b = open("hf_to_titan", "b.pt");
        auto has = [](const std::vector<RuleIssue>& issues, RuleIssue::Kind k, int rule) {
            return std::any_of(issues.begin(), issues.end(), [&](const RuleIssue& i) { return i.kind == k && (rule < 0 || i.rule == RuleIndex(size_t(rule))); });
        };
        {
            // Rules 1 and 2 both land on one name: a collision. Rule 3 matches nothing.
            RuleSet rs;
            rs.rules = { { R"(^model\.layers\.(\d+)\.self_attn\.[qk]_proj\.)", R"(layers.\1.attention.wqk.)" },
                { R"(^nothing\.here)", "x" } };
            const auto issues = checkRules(rs, a, b);
            QVERIFY(has(issues, RuleIssue::Kind::Collision, -1));
            QVERIFY(has(issues, RuleIssue::Kind::Unused, 1));
        }
        {
            // The second rule would match q_proj keys, but the first renamed them already.
            RuleSet rs;
            rs.rules = { { R"(^model\.layers\.(\d+)\.self_attn\.q_proj\.)", R"(layers.\1.attention.wq.)" },
                { R"(^model\.layers\.0\.self_attn\.q_proj\.weight$)", "x" } };
            QVERIFY(has(checkRules(rs, a, b), RuleIssue::Kind::Shadowed, 1));
        }
        {
            // An invalid pattern names its position; an unsupported construct is refused the same way.
            RuleSet rs;
            rs.rules = { { "^model\\.(layers", "x" }, { "^model\\Kfoo", "y" } };
            const auto issues = checkRules(rs, a, b);
            QVERIFY(has(issues, RuleIssue::Kind::Invalid, 0));
            QVERIFY(has(issues, RuleIssue::Kind::Invalid, 1));
            for (const auto& i : issues)
                if (i.kind == RuleIssue::Kind::Invalid)
                    QVERIFY2(i.message.find("position") != std::string::npos || i.message.find("offset") != std::string::npos, i.message.c_str());
        }
        {
            // The case's own rules are invertible (drop rules aside): B -> A -> B gives back every key.
            const RuleSet rs = loadRules(casePath("hf_to_titan_rules", "rules.json").toStdString());
            const auto issues = checkRules(rs, a, b);
            QVERIFY(!has(issues, RuleIssue::Kind::RoundTrip, -1));
            QVERIFY(!has(issues, RuleIssue::Kind::NotInvertible, -1));
            QVERIFY(!has(issues, RuleIssue::Kind::Collision, -1));
        }
        {
            // Two A keys folded onto one B name cannot round-trip, and an alternation is not invertible.
            RuleSet rs;
            rs.rules = { { R"(^model\.(embed_tokens|norm)\.)", "x." } };
            QVERIFY(has(checkRules(rs, a, b), RuleIssue::Kind::NotInvertible, -1) || has(checkRules(rs, a, b), RuleIssue::Kind::RoundTrip, -1));
        }
    }

    // The round trip's second leg reuses the diff's mapping of A's keys: a key that does not come back must
    // be found the same way with the diff as without it. Here 'b.x' -> 'a.x' (inverse of rule 1; rule 2's
    // inverse needs 'b.y') and 'a.x' -> 'b.x' -> 'b.y' forward.
    void roundTripThroughTheDiffsMapping()
    {
        const auto tensorSource = [](std::initializer_list<const char*> names) {
            Source s;
            s.path = "memory";
            for (const char* n : names) {
                Entry e;
                e.name = n;
                e.dtype = DType::Float32;
                e.shape = { 2 };
                s.entries.push_back(std::move(e));
            }
            return s;
        };
        const Source a = tensorSource({ "a.x", "a.z", "c.k" });
        const Source b = tensorSource({ "b.x", "b.z", "c.k" });
        RuleSet rs;
        rs.rules = { { R"(^a\.)", "b." }, { R"(^b\.x$)", "b.y" } };
        const DiffResult d = diffSources(a, b, rs);
        for (const DiffResult* with : { static_cast<const DiffResult*>(nullptr), &d }) {
            const auto issues = checkRules(rs, a, b, with);
            const auto it = std::find_if(issues.begin(), issues.end(), [](const RuleIssue& i) { return i.kind == RuleIssue::Kind::RoundTrip; });
            QVERIFY2(it != issues.end(), with ? "with the diff" : "without the diff");
            QVERIFY2(it->message.find("changes 1 of the model's keys") != std::string::npos, it->message.c_str());
            QCOMPARE(it->examples, std::vector<std::string> { "b.x -> a.x -> b.y" });
        }
    }

    void engineAgreesWithPythonRe_data()
    {
        QTest::addColumn<QString>("mode");
        QTest::newRow("chain") << "chain";
        QTest::newRow("first_match") << "first_match";
    }

    // Rules of every supported shape against Python's re, key by key, in both modes.
    void engineAgreesWithPythonRe()
    {
        if (!QFileInfo::exists(sl::test::torchPython()))
            QSKIP("no /usr/bin/python3 to run Python's re");
        QFETCH(QString, mode);
        RuleSet rs;
        rs.mode = mode == "chain" ? RuleMode::Chain : RuleMode::FirstMatch;
        rs.rules = {
            { R"(^_orig_mod\.)", "" },
            { R"(^module\.)", "" },
            { R"(^model\.layers\.(\d+)\.self_attn\.(q|k|v)_proj\.)", R"(layers.\1.attention.w\2.)" },
            { R"(^model\.layers\.(?P<n>\d+)\.mlp\.)", R"(layers.\g<n>.feed_forward.)" },
            { R"(\.weight$)", R"(.w)" },
            { R"(experts\.(\d+)\.)", R"(experts.E\g<1>0.)" },
            { R"(\bbias\b)", "b" },
            { R"((?i)NORM)", "ln" },
            { R"([^\x00-\x7f]+)", "u" },
            { R"(a{2,3}|z+)", "-" },
            { R"(\d(?=\.))", "#" },
            { R"((?<=\.)x(?!y))", "X" },
            { R"(^(?:encoder|decoder)\.block\.(\d+)\.layer\.(\d+)\.)", R"(blocks.\1_\2.)" },
            { R"(\.rotary_emb\.inv_freq$)", "", true },
            { "\\\\", "\\\\\\\\" },
            { "'", "\"" },
            // Shapes the required-text prefilter must read right (quantified, grouped and escaped literals).
            { R"(^blocks\.(\d+)\.attn\.qkv\.)", R"(b.\1.qkv.)" },
            { R"(layers?\.lin_x+ear\b)", "LIN" },
            { R"(\.ab{0}cde\.)", ".ACDE." },
            { R"(\.gam(?:ma)?_one)", ".G1" },
            { R"(post#?_no\-rm)", "pnorm" },
            { R"(\.d\d+xyz[.]tail)", ".T" },
            // Plain text, matched without PCRE2: a drop, a repeated occurrence with the match itself in the
            // replacement, and a bare '^' (an empty prefix, as inverted rules insert one) last.
            { R"(\.tmp\.)", "", true },
            { R"(o\.)", R"(\g<0>\g<0>)" },
            { "^", "pre." },
        };
        QStringList keys;
        for (int l : { 0, 7, 31 })
            for (const char* p : { "q", "k", "v", "o" })
                for (const char* pre : { "", "_orig_mod.", "module.", "module._orig_mod." })
                    keys << QStringLiteral("%1model.layers.%2.self_attn.%3_proj.weight").arg(pre).arg(l).arg(p);
        keys << "model.layers.3.mlp.up_proj.weight" << "model.experts.12.w1.weight" << "model.norm.bias" << "a.biased.Norm"
             << QString::fromUtf8("modèle.çà.weight") << "aaaa.zzz.aa" << "x.xy.x" << "encoder.block.3.layer.1.DenseReluDense.wi.weight"
             << "model.layers.0.self_attn.rotary_emb.inv_freq" << "odd\\name" << "quote'd" << "" << "1.2.3"
             << "blocks.4.attn.qkv.weight" << "blocks.x.attn.qkv.weight" << "layer.lin_xxear.w" << "layers.lin_ear.w"
             << "m.acde.w" << "m.abcde.w" << "m.gam_one" << "m.gamma_one" << "post_no-rm" << "post#_no-rm" << "pos_no-rm"
             << "a.d12xyz.tail" << "a.dxyz.tail" << "a.d1xyz_tail" << "a.tmp.b" << "a.tmp" << "foo.o.o.x" << "oo..o.";
        const CompiledRules compiled = CompiledRules::compile(rs);
        QVERIFY(!compiled.empty());

        QJsonArray jsonRules, jsonKeys;
        for (const auto& r : rs.rules)
            jsonRules.append(QJsonArray { QString::fromStdString(r.pattern), QString::fromStdString(r.replacement), r.drop });
        for (const auto& k : keys)
            jsonKeys.append(k);
        const QString input = m_dir.path() + "/re_input.json";
        QVERIFY(writeText(input, QJsonDocument(QJsonObject { { "rules", jsonRules }, { "keys", jsonKeys }, { "mode", mode } }).toJson().toStdString()));
        // Chain: re.sub in order, drop stops. First match: transformers' loop, re.subn and stop at the first hit.
        const QString py = QStringLiteral(R"(
import json, re, sys
d = json.load(open(sys.argv[1]))
out = []
for key in d['keys']:
    k = key
    for p, r, drop in d['rules']:
        if drop:
            if re.search(p, k):
                k = None
                break
            continue
        if d['mode'] == 'chain':
            k = re.sub(p, r, k)
        else:
            k, n = re.subn(p, r, k)
            if n:
                break
    out.append(k)
print(json.dumps(out))
)");
        auto r = sl::test::run(sl::test::torchPython(), { "-c", py, input });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const QJsonArray expected = QJsonDocument::fromJson(r.out).array();
        QCOMPARE(expected.size(), keys.size());
        for (int i = 0; i < keys.size(); ++i) {
            const auto got = compiled.apply(keys[i].toStdString());
            const QString ours = got.dropped ? QStringLiteral("<dropped>") : QString::fromStdString(got.name);
            const QString theirs = expected[i].isNull() ? QStringLiteral("<dropped>") : expected[i].toString();
            QVERIFY2(ours == theirs, qPrintable(keys[i] + ": ours " + ours + ", python " + theirs));
        }
    }

    // Constructs on which the engines disagree are refused, not run.
    void unsupportedSyntaxRefused_data()
    {
        QTest::addColumn<QString>("pattern");
        for (const char* p : { R"(a\Kb)", R"(a++)", R"((?>ab))", R"((?|a)|(b))", R"(\p{L})", R"(a\z)", R"(\Qa.b\E)", R"((?R))", "(abc" })
            QTest::newRow(p) << p;
    }
    void unsupportedSyntaxRefused()
    {
        QFETCH(QString, pattern);
        const auto err = validatePattern(pattern.toStdString());
        QVERIFY(err.has_value());
        QVERIFY(!err->message.empty());
        QVERIFY(err->offset <= size_t(pattern.size()));
    }

    void ruleFilesKeepComments()
    {
        const std::string yaml = "# header kept\nversion: 1\nrules:\n  # why this rule\n  - pattern: '^_orig_mod\\.'\n    replace: ''\n    note: torch.compile\n";
        const RuleSet rs = parseRules(yaml, "r.yaml");
        QCOMPARE(rs.rules.size(), size_t(1));
        QCOMPARE(rs.rules[0].pattern, std::string(R"(^_orig_mod\.)"));
        const std::string again = rulesToYaml(rs);
        QVERIFY(again.find("# header kept") != std::string::npos);
        QVERIFY(again.find("# why this rule") != std::string::npos);
        const RuleSet back = parseRules(again, "again.yaml");
        QCOMPARE(back.rules.size(), size_t(1));
        QCOMPARE(back.rules[0].pattern, rs.rules[0].pattern);
        QCOMPARE(back.rules[0].note, rs.rules[0].note);
        const RuleSet fromJson = parseRules(rulesToJson(rs), "r.json");
        QCOMPARE(fromJson.rules[0].pattern, rs.rules[0].pattern);
        // Found by fuzz_rules: a sequence used as a key made yaml-cpp throw its own exception.
        for (const char* bad : { "version: 2\nrules: []\n", "rules:\n  - replace: x\n", "rules: [\n", "{\"rules\": 3}",
                 "version: 1\n? - pattern: x\n: y\nrules: []\n" }) {
            try {
                parseRules(bad, "bad.yaml");
                QFAIL(bad);
            } catch (const LoadError& e) {
                QVERIFY2(std::string(e.what()).rfind("bad.yaml", 0) == 0, e.what());
            }
        }
    }
};

QTEST_GUILESS_MAIN(TestDiff)
#include "tst_diff.moc"
