// Hostile rules held to bounds (issue 12). A catastrophic pattern such as (a+)+$ is an error naming the
// rule and the key, never "no match", and it ends fast through every command that runs patterns (diff
// --rules, stats --filter, suggest, rules export --keys); rule files over the documented caps are refused
// by count; YAML aliases ("billion laughs") are refused in bounded memory; a field that is not UTF-8 names
// the file and the rule. Honest patterns are unaffected on long keys and on 100,000 keys.
//
// The time and memory bounds guard against hangs and blow-ups, sized for an ASan build on a slow 2-core
// machine: the unbounded versions took one to several minutes and up to 2 GB.

#include "common/handwritten_safetensors.h"
#include "common/test_paths.h"

#include "diff/rule_checks.h"
#include "rules/rule_engine.h"
#include "rules/rule_io.h"
#include "util/error.h"

#include <QElapsedTimer>
#include <QTemporaryDir>
#include <QTest>

using sl::test::RunResult;
using sl::test::runMeasured;

namespace {

// Whatever ran, how long it may take: generous for ASan on a loaded machine, far below the minutes the
// unbounded versions took.
constexpr double kFastSeconds = 20;
constexpr int kGuardSeconds = 110; // the child is killed past this, so a regression fails instead of hanging

QByteArray key40(int i)
{
    return QByteArray(40, 'a') + '!' + QByteArray::number(i);
}

bool writeFile(const QString& path, const QByteArray& bytes)
{
    QFile f(path);
    return f.open(QIODevice::WriteOnly) && f.write(bytes) == bytes.size();
}

QByteArray oneRule(const QByteArray& pattern)
{
    return "version: 1\nrules:\n  - pattern: '" + pattern + "'\n    replace: 'x'\n";
}

// The one error line a limit gives: exit 2, names the file, the rule, its pattern, the limit and the key.
void checkLimitError(const RunResult& r, const QByteArray& file, const QByteArray& pattern)
{
    QVERIFY2(!r.timedOut, "the run did not end");
    QCOMPARE(r.exitCode, 2);
    QCOMPARE(r.err.count('\n'), 1);
    QVERIFY2(r.err.startsWith("statelens: " + file + ": rule 1 ('" + pattern + "') "), r.err.constData());
    QVERIFY2(r.err.contains("PCRE2's match limit") && r.err.contains(" on the key 'aaaaaaaaaa"), r.err.constData());
    QVERIFY2(r.seconds < kFastSeconds, qPrintable(QString::number(r.seconds)));
}

} // namespace

class TestRuleBounds : public QObject {
    Q_OBJECT
private:
    QTemporaryDir m_dir;
    QString m_a; // 2,000 keys 'aaaa...a!N': (a+)+$ backtracks 2^40 times on each
    QString m_b;

    QString path(const char* name) const { return m_dir.filePath(QString::fromLatin1(name)); }
    RunResult statelens(const QStringList& args) const
    {
        return runMeasured(sl::test::statelensBinary(), args, kGuardSeconds * 1000);
    }

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        QList<QByteArray> a, b;
        for (int i = 0; i < 2000; ++i) {
            a << key40(i);
            b << "b." + QByteArray::number(i);
        }
        m_a = path("a.safetensors");
        m_b = path("b.safetensors");
        QVERIFY(sl::test::writeSafetensors(m_a, a));
        QVERIFY(sl::test::writeSafetensors(m_b, b));
    }

    // The engine itself: a key that reaches the match limit is a RuleMatchError naming the rule and the key,
    // from apply() and matches() alike; other keys still map.
    void engineThrowsOnLimit()
    {
        sl::RuleSet set;
        set.rules.push_back({ "^model\\.", "m.", false, true, {}, {} });
        set.rules.push_back({ "(a+)+$", "x", false, true, {}, {} });
        const sl::CompiledRules compiled = sl::CompiledRules::compile(set);
        QCOMPARE(compiled.apply("model.b").name, std::string("m.b"));
        QCOMPARE(compiled.apply("aaa").name, std::string("x"));
        const std::string hostile = key40(7).toStdString();
        for (int how = 0; how < 2; ++how) {
            try {
                if (how == 0)
                    (void)compiled.apply(hostile);
                else
                    (void)compiled.matches(1, hostile);
                QFAIL("a key past the match limit was taken as no match");
            } catch (const sl::RuleMatchError& e) {
                QCOMPARE(e.rule(), size_t(1));
                const std::string w = e.what();
                QVERIFY2(w.rfind("rule 2 ('(a+)+$') took more than 1000000 backtracking steps", 0) == 0, w.c_str());
                QVERIFY2(w.find("aaaaaaaaaa") != std::string::npos, w.c_str());
            }
        }
        // 21 a's take (a+)+$ about 4 million steps: PCRE2's default limit (10 million) lets that run, ours not.
        QVERIFY_THROWS_EXCEPTION(sl::RuleMatchError, (void)compiled.apply(std::string(21, 'a') + "!"));
        QCOMPARE(
            compiled.apply(std::string(17, 'a') + "!").name, std::string(17, 'a') + "!"); // 260,000 steps: no match
    }

    // The budget leaves honest patterns alone: the patterns of real rule files on 100,000 keys, and on keys
    // of 10,000 characters, map without an error.
    void honestPatternsUnaffected()
    {
        sl::RuleSet set;
        set.rules.push_back({ "^_orig_mod\\.", "", false, true, {}, {} });
        // Patterns of real rule files; each rewrites what it matches by itself, so only the first changes a name.
        const std::pair<const char*, bool> patterns[]
            = { { "^model\\.layers\\.(\\d+)\\.self_attn\\.(q|k|v)_proj\\.", true }, { "(.*)\\.weight$", true },
                  { "^(?:module\\.)?(.*)$", true }, { "^(.*)\\.(\\d+)\\.(.*)$", true }, { ".*layers.*mlp.*", false },
                  { "^(.*?)(\\.weight|\\.bias)$", true }, { "experts\\.(\\d+)\\.(w1|w2|w3)\\.", false },
                  { "(\\w+)\\.(\\w+)", true },
                  { "((?:\\w|\\.)+)$", true } }; // the last needs more than JIT's default 32 KiB stack on long keys
        for (const auto& [p, matchesLong] : patterns)
            set.rules.push_back({ p, "\\g<0>", false, true, {}, {} });
        const sl::CompiledRules compiled = sl::CompiledRules::compile(set);
        std::string longKey = "model.layers.12.self_attn.q_proj.";
        while (longKey.size() < 10000)
            longKey += "sub.module_" + std::to_string(longKey.size()) + ".";
        longKey += "weight";
        QElapsedTimer timer;
        timer.start();
        for (size_t k = 0; k < std::size(patterns); ++k)
            QVERIFY2(compiled.matches(k + 1, longKey) == patterns[k].second, patterns[k].first);
        QCOMPARE(compiled.apply(longKey).name, longKey);
        for (int i = 0; i < 100000; ++i) {
            const std::string k = "_orig_mod.model.layers." + std::to_string(i / 100) + ".mlp.experts."
                + std::to_string(i % 100) + ".w1.weight";
            QCOMPARE(compiled.apply(k).name, k.substr(10));
        }
        qInfo("10 honest rules: a 10,000-character key and 100,000 keys in %lld ms", timer.elapsed());
    }

    void diffRulesEndsFast()
    {
        const QString rules = path("redos.yaml");
        QVERIFY(writeFile(rules, oneRule("(a+)+$")));
        const RunResult r = statelens({ "diff", m_a, m_b, "--rules", rules });
        checkLimitError(r, rules.toUtf8(), "(a+)+$");
        qInfo("diff --rules (a+)+$ over 2,000 keys: %.2f s, %lld KB", r.seconds, r.peakKb);
    }

    // Nested repeats and alternations of the same shape, and the pattern as the third rule of a chain.
    void nestedVariantsEndFast()
    {
        for (const char* p :
            { "((a+)+)+$", "(a|aa)+$", "(a|a)*$", "(.*a){12}$", "(?:a+){2,}$", "^(a+|b)+$", "(\\w+)*$" }) {
            const QString rules = path("nested.yaml");
            QVERIFY(writeFile(rules, oneRule(p)));
            const RunResult r = statelens({ "diff", m_a, m_b, "--rules", rules });
            checkLimitError(r, rules.toUtf8(), p);
        }
        const QString chain = path("chain.yaml");
        QVERIFY(writeFile(chain,
            "version: 1\nrules:\n  - pattern: '^b\\.'\n    replace: 'c.'\n  - pattern: '!'\n    replace: '!'\n"
            "  - pattern: '(a+)+$'\n    replace: x\n"));
        const RunResult r = statelens({ "diff", m_a, m_b, "--rules", chain });
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains(": rule 3 ('(a+)+$') took more than"), r.err.constData());
        QVERIFY(r.seconds < kFastSeconds);
    }

    void statsFilterEndsFast()
    {
        const RunResult r = statelens({ "stats", m_a, "--filter", "(a+)+$" });
        QVERIFY(!r.timedOut);
        QCOMPARE(r.exitCode, 2);
        QCOMPARE(r.err.count('\n'), 1);
        QVERIFY2(r.err.startsWith("statelens: --filter: the pattern took more than 1000000 backtracking steps"),
            r.err.constData());
        QVERIFY2(r.err.contains(" on the key 'aaaaaaaaaa"), r.err.constData());
        QVERIFY(r.seconds < kFastSeconds);
        qInfo("stats --filter (a+)+$ over 2,000 keys: %.2f s", r.seconds);
    }

    void suggestAndExportEndFast()
    {
        const QString rules = path("redos.yaml");
        QVERIFY(writeFile(rules, oneRule("(a+)+$")));
        const RunResult s = statelens({ "suggest", m_a, m_b, "--rules", rules });
        checkLimitError(s, rules.toUtf8(), "(a+)+$");
        qInfo("suggest --rules (a+)+$ over 2,000 keys: %.2f s", s.seconds);
        const RunResult e = statelens({ "rules", "export", rules, "--to", "hf-key-mapping", "--keys", m_a });
        checkLimitError(e, rules.toUtf8(), "(a+)+$");
    }

    // 100,000 rules over 100,000 keys. Whole-key literal rules (a CSV import's) are hash lookups, checks
    // included, so they run; more than 1,000 rules that run a regex are refused by count, at once.
    void hundredThousandRules()
    {
        QList<QByteArray> a, b;
        for (int i = 0; i < 100000; ++i) {
            a << "model.layers." + QByteArray::number(i / 100) + ".experts." + QByteArray::number(i % 100) + ".weight";
            b << "layers." + QByteArray::number(i / 100) + ".experts." + QByteArray::number(i % 100) + ".weight";
        }
        const QString bigA = path("big_a.safetensors");
        const QString bigB = path("big_b.safetensors");
        QVERIFY(sl::test::writeSafetensors(bigA, a));
        QVERIFY(sl::test::writeSafetensors(bigB, b));
        QByteArray literal = "{\"version\": 1, \"rules\": [";
        QByteArray patterns = literal;
        for (int i = 0; i < 100000; ++i) {
            const QByteArray sep = i ? "," : "";
            literal += sep + "{\"pattern\": \"^nowhere\\\\." + QByteArray::number(i)
                + "\\\\.weight$\", \"replace\": \"x." + QByteArray::number(i) + "\"}";
            patterns += sep + "{\"pattern\": \"experts\\\\." + QByteArray::number(i)
                + "\\\\.w(\\\\d)\", \"replace\": \"e.\\\\1\"}";
        }
        literal += "]}";
        patterns += "]}";
        QVERIFY(writeFile(path("literal.json"), literal));
        QVERIFY(writeFile(path("patterns.json"), patterns));

        const RunResult lit = statelens({ "diff", bigA, bigB, "--rules", path("literal.json") });
        QVERIFY2(!lit.timedOut, "100,000 literal rules over 100,000 keys did not end");
        QCOMPARE(lit.exitCode, 1); // the keys still differ by their prefix; every rule is reported unused
        QVERIFY2(lit.out.contains("rule issues (100000)"), lit.out.left(2000).constData());
        QVERIFY(lit.seconds < 2 * kFastSeconds);
        qInfo("100,000 literal rules over 100,000 keys: %.2f s, %lld KB", lit.seconds, lit.peakKb);

        const RunResult pat = statelens({ "diff", bigA, bigB, "--rules", path("patterns.json") });
        QVERIFY(!pat.timedOut);
        QCOMPARE(pat.exitCode, 2);
        QCOMPARE(pat.err.count('\n'), 1);
        QVERIFY2(pat.err.contains("patterns.json: rule 1001: the set has 100000 rules that run a regex; at most 1000"),
            pat.err.constData());
        QVERIFY(pat.seconds < kFastSeconds);
        qInfo("100,000 pattern rules: refused in %.2f s", pat.seconds);

        // The cap on rules of any kind, before any is converted.
        QByteArray many = "{\"version\": 1, \"rules\": [";
        for (size_t i = 0; i <= sl::kMaxRules; ++i)
            many += QByteArray(i ? "," : "") + "{\"pattern\": \"^k$\"}";
        many += "]}";
        QVERIFY(writeFile(path("many.json"), many));
        const RunResult over = statelens({ "rules", "export", path("many.json"), "--to", "json" });
        QCOMPARE(over.exitCode, 2);
        QVERIFY2(over.err.contains("many.json: 200001 rules: a rule file holds at most 200000"), over.err.constData());
    }

    // A file with 1,000 pattern rules (the cap) still runs; one more is refused, naming the first over it.
    void patternRuleCap()
    {
        sl::RuleSet set;
        for (size_t i = 0; i < sl::kMaxPatternRules; ++i)
            set.rules.push_back({ "x" + std::to_string(i) + "\\.(\\d)", "y", false, true, {}, {} });
        set.rules.push_back({ "^literal\\.key$", "z", false, true, {}, {} }); // not counted
        set.rules.push_back({ "off(\\d)", "z", false, false, {}, {} }); // disabled: not counted
        QVERIFY(!sl::patternRuleCapError(set));
        std::vector<sl::PatternError> errors;
        (void)sl::CompiledRules::compile(set, &errors);
        QVERIFY(errors.empty());
        set.rules.push_back({ "one(\\d)more", "z", false, true, {}, {} });
        const auto e = sl::patternRuleCapError(set);
        QVERIFY(e);
        QCOMPARE(e->rule, set.rules.size() - 1);
        const sl::CompiledRules compiled = sl::CompiledRules::compile(set, &errors);
        QCOMPARE(errors.size(), size_t(1));
        QVERIFY(!compiled.usable(set.rules.size() - 1));
        QVERIFY2(
            sl::describePatternError(errors[0]).rfind("rule 1003: the set has 1001 rules that run a regex", 0) == 0,
            sl::describePatternError(errors[0]).c_str());
    }

    // Billion laughs. An anchored 1 MB pattern named by 2,000 aliases peaked at 2 GB (each alias became
    // another copy); nested sequences of aliases are the classic shape. Both are refused at the first
    // alias, in bounded memory.
    void yamlAliasesRefused()
    {
        QByteArray scalar
            = "version: 1\nrules:\n  - pattern: &p \"" + QByteArray(1 << 20, 'x') + "\"\n    replace: ''\n";
        for (int i = 0; i < 2000; ++i)
            scalar += "  - {pattern: *p}\n";
        QByteArray laughs
            = "version: 1\nrules:\n  - pattern: a\n    note: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
        for (int level = 1; level < 9; ++level) {
            laughs += "  - pattern: a\n    note: &l" + QByteArray::number(level) + " [";
            for (int k = 0; k < 9; ++k)
                laughs += (k ? ", *l" : "*l") + QByteArray::number(level - 1);
            laughs += "]\n";
        }
        for (const auto& [name, text] : { std::pair { "scalar.yaml", scalar }, { "laughs.yaml", laughs } }) {
            QVERIFY(writeFile(path(name), text));
            const RunResult r = statelens({ "diff", m_b, m_b, "--rules", path(name) });
            QVERIFY(!r.timedOut);
            QCOMPARE(r.exitCode, 2);
            QCOMPARE(r.err.count('\n'), 1);
            QVERIFY2(r.err.contains(QByteArray(name) + ": a YAML alias (*name) at line ")
                    && r.err.contains("rule files do not use anchors and aliases"),
                r.err.constData());
            QVERIFY2(r.peakKb > 0 && r.peakKb < 256 * 1024, qPrintable(QString::number(r.peakKb)));
            QVERIFY(r.seconds < kFastSeconds);
            qInfo("%s: exit 2 in %.2f s, peak %lld KB", name, r.seconds, r.peakKb);
        }
        // An anchor that nothing refers to is harmless and accepted.
        QVERIFY(writeFile(path("anchor.yaml"), "version: 1\nrules:\n  - pattern: &p '^b\\.'\n    replace: c.\n"));
        QCOMPARE(statelens({ "diff", m_b, m_b, "--rules", path("anchor.yaml") }).exitCode, 1);
    }

    // More YAML nodes than kMaxRules rules could need are refused before yaml-cpp builds its tree.
    void yamlNodeBudget()
    {
        QByteArray text = "version: 1\nrules:\n- pattern: a\n  note: [";
        text.reserve(static_cast<qsizetype>(3 * sl::kMaxYamlNodes));
        for (size_t i = 0; i < sl::kMaxYamlNodes; ++i)
            text += i ? ",0" : "0";
        text += "]\n";
        QVERIFY(writeFile(path("nodes.yaml"), text));
        const RunResult r = statelens({ "rules", "export", path("nodes.yaml"), "--to", "json" });
        QVERIFY(!r.timedOut);
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("nodes.yaml: more than 2400000 YAML nodes (at line 4)"), r.err.constData());
        // The refusal peaks at ~21 MB. Under ASan (~525 MB) the peak is the sanitizer's: its quarantine keeps
        // up to 256 MB of the small blocks the YAML scanner freed, and each live block carries redzones
        // (~180 MB with the quarantine off).
        const qint64 boundKb = sl::test::sanitized() ? 768 * 1024 : 64 * 1024;
        QVERIFY2(r.peakKb > 0 && r.peakKb < boundKb, qPrintable(QString::number(r.peakKb)));
        qInfo("2.4M YAML nodes: refused in %.2f s, peak %lld KB", r.seconds, r.peakKb);
    }

    // Regression (fuzz_rules): a replacement that is not UTF-8 let a raw C++ exception message out. Now
    // the file and the rule are named, in one line.
    void nonUtf8FieldNamesTheRule()
    {
        for (const auto& [field, text] :
            { std::pair { "replace", QByteArray("version: 1\nrules:\n  - pattern: '^a'\n    replace: \"x\xff\"\n") },
                { "pattern",
                    QByteArray("version: 1\nrules:\n  - pattern: '^b'\n    replace: c\n  - pattern: '\xc3('\n") },
                { "note", QByteArray("version: 1\nrules:\n  - pattern: a\n    note: \xed\xa0\x80\n") } }) {
            QVERIFY(writeFile(path("bytes.yaml"), text));
            for (const char* to : { "yaml", "python", "json" }) {
                const RunResult r = statelens({ "rules", "export", path("bytes.yaml"), "--to", to });
                QCOMPARE(r.exitCode, 2);
                QCOMPARE(r.err.count('\n'), 1);
                QVERIFY2(
                    r.err.startsWith("statelens: " + path("bytes.yaml").toUtf8() + ": field '" + field + "' of rule "),
                    r.err.constData());
                QVERIFY2(r.err.contains(" is not UTF-8 text (line "), r.err.constData());
            }
            try {
                (void)sl::parseRules(
                    std::string_view(text.constData(), static_cast<size_t>(text.size())), "bytes.yaml");
                QFAIL("a field that is not UTF-8 was accepted");
            } catch (const sl::LoadError& e) {
                QVERIFY(std::string(e.what()).rfind("bytes.yaml: field '", 0) == 0);
            }
        }
    }
};

QTEST_GUILESS_MAIN(TestRuleBounds)
#include "tst_rule_bounds.moc"
