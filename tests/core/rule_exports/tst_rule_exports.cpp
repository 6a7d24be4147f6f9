// Rule exports and imports checked against real Python: the exported module, transformers' key_mapping
// loop and torchtitan's template lookup are run by /usr/bin/python3 on a few hundred realistic keys and
// must map every key as the engine does; imports must read literals as Python's ast/json/csv read them.

#include "common/test_paths.h"
#include "rules/rule.h"
#include "rules/rule_engine.h"
#include "rules/rule_export.h"
#include "rules/rule_import.h"
#include "util/error.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QElapsedTimer>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <optional>
#include <random>
#include <set>

using namespace sl;

namespace {

// The reference semantics and the tools' own loops, in Python. Nothing here comes from our exports
// except the artefact under test, which is read as data.
const char* const kHelper = R"PY(
import ast, csv, json, re, sys

def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)

def reference(spec_path, keys_path):
    # StateLens's documented semantics: chain = a loop of re.sub, first_match = key_mapping's loop;
    # a drop rule that matches removes the key. Rules Python cannot compile are left out (StateLens
    # refuses them too).
    spec = load(spec_path)
    rules = []
    for pattern, replacement, drop, enabled in spec["rules"]:
        if not enabled:
            continue
        try:
            rx = re.compile(pattern)
        except re.error:
            continue
        rules.append((rx, replacement, drop))
    def chain(key):
        for rx, replacement, drop in rules:
            if drop:
                if rx.search(key):
                    return None
                continue
            key = rx.sub(replacement, key)
        return key
    def first_match(key):
        for rx, replacement, drop in rules:
            if drop:
                if rx.search(key):
                    return None
                continue
            new_key, n = rx.subn(replacement, key)
            if n > 0:
                return new_key
        return key
    f = first_match if spec["mode"] == "first_match" else chain
    return [f(k) for k in load(keys_path)]

def hf(mapping_path, keys_path):
    mapping = load(mapping_path)
    def rename(key):
        # transformers, modeling_utils.py, PreTrainedModel._get_key_renaming_mapping
        new_key = key
        for pattern, replacement in mapping.items():
            new_key, n_replace = re.subn(pattern, replacement, new_key)
            if n_replace > 0:
                break
        return new_key
    return [rename(k) for k in load(keys_path)]

def titan(map_path, keys_path):
    ns = {}
    with open(map_path, encoding="utf-8") as f:
        exec(f.read(), ns)
    from_hf_map = ns["from_hf_map"]
    out = []
    for key in load(keys_path):
        # torchtitan/models/llama3/model/state_dict_adapter.py, from_hf, without the weight permutes
        try:
            if "layers" in key:
                abstract_key = re.sub(r"(\d+)", "{}", key, count=1)
                layer_num = re.search(r"\d+", key).group(0)
                new_key = from_hf_map[abstract_key]
                if new_key is None:
                    out.append({"dropped": True})
                    continue
                new_key = new_key.format(layer_num)
            else:
                new_key = from_hf_map[key]
            out.append({"name": new_key})
        except Exception as e:
            out.append({"error": repr(e)})
    return out

def literal(path):
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    node = tree.body[-1]
    return list(ast.literal_eval(node.value).items())

def json_pairs(path):
    return list(load(path).items())

def csv_rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))

def collision(module_dir, module_name):
    sys.path.insert(0, module_dir)
    module = __import__(module_name)
    try:
        module.remap_state_dict({"_orig_mod.a": 1, "a": 2, "keep": 3})
    except ValueError as e:
        return {"raised": str(e)}
    return {"raised": None}

command = sys.argv[1]
result = globals()[command](*sys.argv[2:])
sys.stdout.write(json.dumps(result))
)PY";

Rule rule(std::string pattern, std::string replacement, bool drop = false)
{
    Rule r;
    r.pattern = std::move(pattern);
    r.replacement = std::move(replacement);
    r.drop = drop;
    return r;
}

Rule dropRule(std::string pattern) { return rule(std::move(pattern), {}, true); }

RuleSet makeSet(RuleMode mode, std::vector<Rule> rules)
{
    RuleSet s;
    s.mode = mode;
    s.rules = std::move(rules);
    return s;
}

using Outcome = std::optional<std::string>; // nullopt: dropped

std::vector<Outcome> engineMap(const RuleSet& set, const std::vector<std::string>& keys)
{
    const CompiledRules compiled = CompiledRules::compile(set);
    std::vector<Outcome> out;
    for (const auto& k : keys) {
        auto r = compiled.apply(k);
        out.push_back(r.dropped ? Outcome() : Outcome(r.name));
    }
    return out;
}

QString show(const Outcome& o) { return o ? QStringLiteral("'") + QString::fromStdString(*o) + QStringLiteral("'") : QStringLiteral("(dropped)"); }

// Llama-like names with the wrappers and oddities real checkpoints carry.
std::vector<std::string> realisticKeys()
{
    std::vector<std::string> keys = { "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight" };
    for (int layer = 0; layer < 12; ++layer) {
        const std::string p = "model.layers." + std::to_string(layer) + ".";
        for (const char* proj : { "q", "k", "v", "o" })
            keys.push_back(p + "self_attn." + proj + "_proj.weight");
        for (const char* proj : { "gate", "up", "down" })
            keys.push_back(p + "mlp." + proj + "_proj.weight");
        keys.push_back(p + "input_layernorm.weight");
        keys.push_back(p + "post_attention_layernorm.weight");
        keys.push_back(p + "self_attn.rotary_emb.inv_freq");
    }
    for (int layer = 0; layer < 3; ++layer) {
        for (const char* prefix : { "_orig_mod.", "module.", "module._orig_mod." }) {
            keys.push_back(std::string(prefix) + "model.layers." + std::to_string(layer) + ".self_attn.q_proj.weight");
            keys.push_back(std::string(prefix) + "model.layers." + std::to_string(layer) + ".mlp.down_proj.weight");
        }
    }
    for (int layer = 0; layer < 2; ++layer)
        for (int expert = 0; expert < 8; ++expert)
            for (const char* w : { "w1", "w2", "w3" })
                keys.push_back("model.layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(expert) + "." + w + ".weight");
    for (int layer = 0; layer < 4; ++layer) {
        keys.push_back("language_model.model.layers." + std::to_string(layer) + ".self_attn.q_proj.weight");
        keys.push_back("vision_tower.blocks." + std::to_string(layer) + ".attn.qkv.weight");
    }
    const char* const odd[] = { "language_model.lm_head.weight", "multi_modal_projector.linear_1.weight", "transformer.h.3.attn.c_attn.weight",
        "модель.слой.0.вес", "model.layers.0.ü_proj.weight", "emoji.🔥.bias", "model.名前.weight", "model.layers.٣.mlp.gate_proj.weight",
        "weird\"quote'name\\back.weight", "with space.weight", "dots..double", "trailing.", "x", "xxx.yx", "", "layers", "caf\u00e9.weight",
        "a{}b.layers.4.x", "encoder.LayerNorm.gamma", "UPPER.Model.Weight", "model.layers.10.self_attn.q_proj.bias" };
    for (const char* k : odd)
        keys.emplace_back(k);
    return keys;
}

} // namespace

class TestRuleExports : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_helper;
    bool m_python = false;

    QString path(const QString& name) const { return m_dir.filePath(name); }

    static void writeFile(const QString& file, const std::string& bytes)
    {
        QFile f(file);
        QVERIFY2(f.open(QIODevice::WriteOnly | QIODevice::Truncate), qPrintable(file));
        QCOMPARE(f.write(bytes.data(), static_cast<qint64>(bytes.size())), static_cast<qint64>(bytes.size()));
    }

    void writeKeys(const QString& file, const std::vector<std::string>& keys)
    {
        QJsonArray a;
        for (const auto& k : keys)
            a.append(QString::fromStdString(k));
        writeFile(file, QJsonDocument(a).toJson(QJsonDocument::Compact).toStdString());
    }

    // Runs the helper's `command`; its JSON answer, or a failed check.
    QJsonDocument helper(const QStringList& args)
    {
        auto r = sl::test::run(sl::test::torchPython(), QStringList { m_helper } + args);
        if (r.exitCode != 0) {
            qWarning("python failed: %s", r.err.constData());
            return {};
        }
        QJsonParseError error;
        QJsonDocument doc = QJsonDocument::fromJson(r.out, &error);
        if (error.error != QJsonParseError::NoError)
            qWarning("python answered no JSON: %s", r.out.left(500).constData());
        return doc;
    }

    static std::vector<Outcome> outcomes(const QJsonArray& a)
    {
        std::vector<Outcome> out;
        for (const auto& v : a)
            out.push_back(v.isNull() ? Outcome() : Outcome(v.toString().toStdString()));
        return out;
    }

    QJsonObject spec(const RuleSet& set)
    {
        QJsonArray rules;
        for (const auto& r : set.rules)
            rules.append(QJsonArray { QString::fromStdString(r.pattern), QString::fromStdString(r.replacement), r.drop, r.enabled });
        return QJsonObject { { "mode", set.mode == RuleMode::FirstMatch ? "first_match" : "chain" }, { "rules", rules } };
    }

    // Every key, three ways: the engine, the exported module under python3, and the reference loop.
    void checkPythonExport(const QString& name, const RuleSet& set, const std::vector<std::string>& keys)
    {
        const QString module = path(name + QStringLiteral(".py"));
        const QString keysText = path(name + QStringLiteral(".keys.txt"));
        const QString keysJson = path(name + QStringLiteral(".keys.json"));
        const QString specFile = path(name + QStringLiteral(".spec.json"));
        writeFile(module, rulesToPython(set));
        std::string lines;
        for (const auto& k : keys)
            lines += k + "\n";
        writeFile(keysText, lines);
        writeKeys(keysJson, keys);
        writeFile(specFile, QJsonDocument(spec(set)).toJson().toStdString());

        const std::vector<Outcome> engine = engineMap(set, keys);

        QProcess p;
        p.setStandardInputFile(keysText);
        p.start(sl::test::torchPython(), { module });
        QVERIFY(p.waitForFinished(120000));
        QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
        const QByteArray out = p.readAllStandardOutput();
        QList<QByteArray> got = out.split('\n');
        QCOMPARE(got.size(), static_cast<qsizetype>(keys.size() + 1));
        QVERIFY(got.last().isEmpty());
        for (size_t i = 0; i < keys.size(); ++i) {
            const std::string want = keys[i] + "\t" + (engine[i] ? *engine[i] : std::string("<dropped>"));
            QVERIFY2(engine[i] != Outcome("<dropped>"), "a name equal to the marker would make the check ambiguous");
            QVERIFY2(got[static_cast<qsizetype>(i)].toStdString() == want,
                qPrintable(QStringLiteral("key '%1': engine gives %2, the exported module printed '%3'")
                               .arg(QString::fromStdString(keys[i]), show(engine[i]), QString::fromUtf8(got[static_cast<qsizetype>(i)]))));
        }

        const std::vector<Outcome> reference = outcomes(helper({ QStringLiteral("reference"), specFile, keysJson }).array());
        QCOMPARE(reference.size(), keys.size());
        for (size_t i = 0; i < keys.size(); ++i)
            QVERIFY2(reference[i] == engine[i],
                qPrintable(QStringLiteral("key '%1': engine gives %2, Python's re gives %3").arg(QString::fromStdString(keys[i]), show(engine[i]), show(reference[i]))));
    }

    // Runs torchtitan's lookup in Python over `keys`; with `problems` null every key must match the engine,
    // otherwise every key named in a problem must really differ, and every differing key must be named
    // when there are few.
    void checkTitan(const QString& name, const TemplateExport& exported, const RuleSet& set, const std::vector<std::string>& keys,
        const std::vector<std::string>* problems, std::set<std::string>* differingOut = nullptr)
    {
        writeFile(path(name + QStringLiteral(".py")), exported.text);
        writeKeys(path(name + QStringLiteral(".keys.json")), keys);
        const QJsonArray python = helper({ QStringLiteral("titan"), path(name + QStringLiteral(".py")), path(name + QStringLiteral(".keys.json")) }).array();
        QCOMPARE(static_cast<size_t>(python.size()), keys.size());
        const auto engine = engineMap(set, keys);
        std::set<std::string> differing;
        for (size_t i = 0; i < keys.size(); ++i) {
            const QJsonObject o = python[static_cast<qsizetype>(i)].toObject();
            Outcome got;
            bool same = false;
            if (o.contains(QStringLiteral("dropped"))) {
                same = !engine[i];
            } else if (o.contains(QStringLiteral("name")) && o.value(QStringLiteral("name")).isString()) {
                got = o.value(QStringLiteral("name")).toString().toStdString();
                same = got == engine[i];
            }
            if (!same) {
                differing.insert(keys[i]);
                if (!problems)
                    QFAIL(qPrintable(QStringLiteral("key '%1': engine %2, torchtitan's lookup %3")
                                         .arg(QString::fromStdString(keys[i]), show(engine[i]), QString::fromUtf8(QJsonDocument(o).toJson(QJsonDocument::Compact)))));
            }
        }
        if (differingOut)
            *differingOut = differing;
        if (!problems)
            return;
        QVERIFY(!differing.empty());
        size_t named = 0;
        for (const auto& p : *problems) {
            if (p.rfind("key '", 0) != 0)
                continue;
            const std::string key = p.substr(5, p.find('\'', 5) - 5);
            if (p.find("holds for this layer only") != std::string::npos)
                continue; // right for this key; other layers would not be
            QVERIFY2(differing.count(key), p.c_str());
            QVERIFY2(key.find("experts") == std::string::npos, p.c_str()); // experts keep literal numbers and map right
            ++named;
        }
        QVERIFY(named > 0);
        if (differing.size() <= 10)
            QCOMPARE(named, differing.size());
    }

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        m_python = QFileInfo(sl::test::torchPython()).isExecutable();
        m_helper = path(QStringLiteral("helper.py"));
        writeFile(m_helper, kHelper);
    }

    // ---------------------------------------------------------------------------------------------
    // Python module

    void pythonFidelity_data()
    {
        QTest::addColumn<int>("which");
        const char* names[] = { "wrappers", "captures", "drops", "chained", "empty_matches", "unicode", "quotes_backslashes", "first_match",
            "disabled_and_refused" };
        for (int i = 0; i < 9; ++i)
            QTest::newRow(names[i]) << i;
    }

    void pythonFidelity()
    {
        if (!m_python)
            QSKIP("/usr/bin/python3 is not installed");
        QFETCH(int, which);
        RuleSet set;
        switch (which) {
        case 0:
            set = makeSet(RuleMode::Chain, { rule(R"(^module\.)", ""), rule(R"(^_orig_mod\.)", ""), rule(R"((^|\.)_orig_mod\.)", R"(\1)") });
            break;
        case 1:
            set = makeSet(RuleMode::Chain,
                { rule(R"(^model\.layers\.(\d+)\.self_attn\.([qkvo])_proj\.(weight|bias)$)", R"(layers.\1.attention.w\2.\3)"),
                    rule(R"(^model\.layers\.(?P<n>\d+)\.mlp\.(?P<kind>gate|up|down)_proj)", R"(blocks.\g<n>.ffn.\g<kind>)"),
                    rule(R"(^lm_head)", R"(out_\g<0>)"), rule(R"(experts\.(\d)\.(w\d))", R"(e\g<1>0.\2)"),
                    rule(R"((?P<first>\w+)\.(?P<second>\w+)$)", R"(\g<second>.\g<first>)") });
            break;
        case 2:
            set = makeSet(RuleMode::Chain,
                { rule(R"(^model\.)", ""), dropRule(R"(\.rotary_emb\.inv_freq$)"), dropRule(R"(^vision_tower\.)"),
                    rule(R"(^layers\.(\d+)\.)", R"(blocks.\1.)"), dropRule(R"(^blocks\.1[01]\.)") });
            break;
        case 3:
            set = makeSet(RuleMode::Chain,
                { rule(R"(^(?:module\.)?(?:_orig_mod\.)?model\.)", ""), rule(R"(^layers\.(\d+)\.)", R"(blocks.\1.)"),
                    rule(R"(^blocks\.0\.)", "first_block."), rule(R"(\.weight$)", ".w"), rule(R"(\.w$)", ".W"),
                    rule(R"(self_attn)", "attn"), rule(R"(attn\.(\w)_proj)", R"(attn.\1)") });
            break;
        case 4:
            set = makeSet(RuleMode::Chain,
                { rule(R"((?=\.))", ":"), rule("x*", "-"), rule("^", "pre."), rule("$", ".post"), rule(R"(\b)", "|") });
            break;
        case 5:
            set = makeSet(RuleMode::Chain,
                { rule(R"(^модель\.)", "model."), rule("ü", "ue"), rule("🔥", "fire"), rule(R"((?i)^upper\.MODEL)", "lower.model"),
                    rule(R"(名前)", "名"), rule(R"(\.(\w)(\w*)$)", R"(.\2\1)"), rule(R"(caf\xe9)", "cafe"), rule(R"([^\x00-\x7f])", "?"),
                    rule(R"(\d+)", R"(<\g<0>>)") });
            break;
        case 6: // plain literals where a raw one would hold a quote: moc misreads those
            set = makeSet(RuleMode::Chain,
                { rule("\"quote'", "_q\"'_"), rule(R"(\\)", R"(\\\\)"), rule(R"(\x41|\.back)", "\\'back"), rule("[\\\"']", "\\\\\""),
                    rule(R"(with space)", R"(with\ space\a)"), rule(R"(\.\.)", R"(.\\.)") });
            break;
        case 7:
            set = makeSet(RuleMode::FirstMatch,
                { rule(R"(^language_model\.model)", "model.language_model"), dropRule(R"(\.rotary_emb\.inv_freq$)"),
                    rule(R"(^language_model\.lm_head)", "lm_head"), rule(R"(^model\.layers\.(\d+)\.)", R"(model.layers.\1.inner.)"),
                    rule(R"(\.weight$)", ".w"), rule(R"(^_orig_mod\.)", "") });
            break;
        default: {
            set = makeSet(RuleMode::Chain, { rule(R"(^model\.)", "m."), rule(R"(\K)", "k"), rule("(", "x"), rule(R"(\p{L})", "L"), rule(R"(^_orig_mod\.)", "") });
            set.rules[0].enabled = false;
            set.rules[4].note = "strip torch.compile's prefix\nsecond line\r\"quoted\" ]) # not code\x0c";
            set.rules[4].comments = { "a comment with a ''' and a \"\"\"", "\xff not UTF-8" };
            set.headerComments = { "header\rwith a carriage return" };
            const std::string text = rulesToPython(set);
            QVERIFY(text.find("# disabled: (\"^model\\\\.\", \"m.\", False),") != std::string::npos);
            QVERIFY(text.find("left out, as StateLens refuses it") != std::string::npos);
            break;
        }
        }
        checkPythonExport(QString::fromLatin1(QTest::currentDataTag()), set, realisticKeys());
    }

    void pythonStateDictCollision()
    {
        if (!m_python)
            QSKIP("/usr/bin/python3 is not installed");
        const RuleSet set = makeSet(RuleMode::Chain, { rule(R"(^_orig_mod\.)", "") });
        writeFile(path(QStringLiteral("collide.py")), rulesToPython(set));
        const QJsonObject answer = helper({ QStringLiteral("collision"), m_dir.path(), QStringLiteral("collide") }).object();
        const QString message = answer.value(QStringLiteral("raised")).toString();
        QVERIFY2(message.contains(QStringLiteral("'_orig_mod.a'")) && message.contains(QStringLiteral("'a'")), qPrintable(message));
    }

    // ---------------------------------------------------------------------------------------------
    // Hugging Face key_mapping

    void hfKeyMapping()
    {
        if (!m_python)
            QSKIP("/usr/bin/python3 is not installed");
        // transformers renames LayerNorm.gamma before key_mapping sees it: kept out here, checked below.
        std::vector<std::string> keys = realisticKeys();
        std::erase_if(keys, [](const std::string& k) { return k.find("LayerNorm.gamma") != std::string::npos; });
        writeKeys(path(QStringLiteral("hf.keys.json")), keys);

        // Rules that never meet on one key: the chain and key_mapping agree, and the export says so.
        const RuleSet disjoint = makeSet(RuleMode::Chain,
            { rule(R"(^language_model\.model\.)", "model.language_model."), rule(R"(^language_model\.lm_head\.)", "lm_head."),
                rule(R"(^vision_tower\.blocks\.(\d+)\.)", R"(model.vision_tower.layers.\1.)"), rule(R"(^emoji\.🔥)", "emoji.fire") });
        HfExport agree = rulesToHfKeyMapping(disjoint, &keys);
        QVERIFY2(agree.problems.empty(), agree.problems.empty() ? "" : agree.problems.front().c_str());
        writeFile(path(QStringLiteral("agree.json")), agree.json);
        const auto python = outcomes(helper({ QStringLiteral("hf"), path(QStringLiteral("agree.json")), path(QStringLiteral("hf.keys.json")) }).array());
        const auto chain = engineMap(disjoint, keys);
        QCOMPARE(python.size(), keys.size());
        for (size_t i = 0; i < keys.size(); ++i)
            QVERIFY2(python[i] == chain[i], qPrintable(QString::fromStdString(keys[i])));
        // Read back, our first-match engine maps as transformers does.
        const auto imported = engineMap(importHfKeyMapping(agree.json, "agree.json"), keys);
        QVERIFY(imported == python);

        // A chain where a later rule rewrites an earlier one's output: key_mapping stops early.
        const RuleSet chained = makeSet(RuleMode::Chain,
            { rule(R"(^model\.)", ""), rule(R"(^layers\.(\d+)\.)", R"(blocks.\1.)"), rule(R"(^language_model\.lm_head\.)", "lm_head.") });
        HfExport diverge = rulesToHfKeyMapping(chained, &keys);
        writeFile(path(QStringLiteral("diverge.json")), diverge.json);
        const auto python2 = outcomes(helper({ QStringLiteral("hf"), path(QStringLiteral("diverge.json")), path(QStringLiteral("hf.keys.json")) }).array());
        const auto chain2 = engineMap(chained, keys);
        std::set<std::string> differing;
        for (size_t i = 0; i < keys.size(); ++i)
            if (python2[i] != chain2[i])
                differing.insert(keys[i]);
        QVERIFY(!differing.empty());
        QVERIFY(!diverge.problems.empty());
        size_t named = 0;
        for (const auto& p : diverge.problems) {
            if (p.rfind("key '", 0) != 0)
                continue;
            const std::string key = p.substr(5, p.find("': the rules give") - 5);
            QVERIFY2(differing.count(key), p.c_str());
            ++named;
        }
        QVERIFY(named > 0);
        const std::string total = std::to_string(differing.size()) + " of " + std::to_string(keys.size());
        QVERIFY2(differing.size() <= 10 ? named == differing.size() : diverge.problems.back().find(total) != std::string::npos,
            diverge.problems.back().c_str());
        // Our first-match engine on the exported dict still agrees with transformers' loop.
        QVERIFY(engineMap(importHfKeyMapping(diverge.json, "diverge.json"), keys) == python2);

        // Without keys, a chain cannot be vouched for; a first-match set can.
        auto unchecked = rulesToHfKeyMapping(chained);
        QVERIFY(unchecked.problems.size() == 1 && unchecked.problems[0].find("not checked") != std::string::npos);
        RuleSet firstMatch = chained;
        firstMatch.mode = RuleMode::FirstMatch;
        QVERIFY(rulesToHfKeyMapping(firstMatch).problems.empty());

        // Drop rules and repeated patterns cannot be dict entries.
        const RuleSet withDrop = makeSet(RuleMode::FirstMatch,
            { dropRule(R"(\.inv_freq$)"), rule(R"(^model\.)", ""), rule(R"(^model\.)", "again."), rule("(", "") });
        const std::vector<std::string> allKeys = realisticKeys();
        auto dropped = rulesToHfKeyMapping(withDrop, &allKeys);
        auto mentions = [&](const std::string& what) {
            return std::any_of(dropped.problems.begin(), dropped.problems.end(), [&](const std::string& p) { return p.find(what) != std::string::npos; });
        };
        QVERIFY(mentions("rule 1 ") && mentions("drops keys"));
        QVERIFY(mentions("rule 3 ") && mentions("pattern of rule 2"));
        QVERIFY(mentions("rule 4 ") && mentions("refuses"));
        QVERIFY(mentions("inv_freq")); // the keys it would have dropped are named as divergences
        QVERIFY(mentions("LayerNorm.gamma"));
        const QJsonObject json = QJsonDocument::fromJson(QByteArray::fromStdString(dropped.json)).object();
        QCOMPARE(json.size(), 1);
        QCOMPARE(json.value(QStringLiteral("^model\\.")).toString(), QStringLiteral(""));
    }

    // ---------------------------------------------------------------------------------------------
    // Imports

    void importPythonLiteral()
    {
        if (!m_python)
            QSKIP("/usr/bin/python3 is not installed");
        const std::string text = R"PY(# Conversion map for a VLM
_checkpoint_conversion_mapping = {
    # the language model moved
    r"^language_model.model": "model.language_model",
    '^language_model.lm_head': 'lm_head',   # single quotes
    r'^vision_tower\.(\w+)': r"model.vision_tower.\1",
    "^multi_modal_projector" "\\." : "model.multi_modal_projector.",  # adjacent literals are joined
    R"^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.": r"model.layers.\1.moe.e\2.",
    u"^caf\u00e9\.": "cafe.",
    """^emoji\.""" '\U0001F525': '''emoji.fire''',
    ("^paren\\.thesized"
     "\\.x"): "px",
    r"\.gamma$": ".weight",
    r"it's": 'it"s',
    "\x5emodel\\.name\101": "octal\101",
    r"^dup": "first",
    r"\\": "\\\\",
    r"^dup": "second",
}
)PY";
        writeFile(path(QStringLiteral("literal.py")), text);
        const RuleSet set = importHfKeyMapping(text, "literal.py");
        QVERIFY(set.mode == RuleMode::FirstMatch);
        const QJsonArray truth = helper({ QStringLiteral("literal"), path(QStringLiteral("literal.py")) }).array();
        QCOMPARE(static_cast<size_t>(truth.size()), set.rules.size());
        for (qsizetype i = 0; i < truth.size(); ++i) {
            const QJsonArray pair = truth[i].toArray();
            QCOMPARE(QString::fromStdString(set.rules[static_cast<size_t>(i)].pattern), pair[0].toString());
            QCOMPARE(QString::fromStdString(set.rules[static_cast<size_t>(i)].replacement), pair[1].toString());
        }
        QCOMPARE(set.headerComments, std::vector<std::string> { "Conversion map for a VLM" });
        QCOMPARE(set.rules[0].comments, std::vector<std::string> { "the language model moved" });
        QVERIFY(importRulesFile(path(QStringLiteral("literal.py")).toStdString()).rules.size() == set.rules.size());

        // The same entries as JSON, with JSON's own escapes (\/, \u surrogate pairs).
        const std::string json = "{\n  \"^language_model.model\": \"model.language_model\",\n  \"^emoji\\\\.\\ud83d\\udd25\": \"emoji.fire\",\n"
                                 "  \"a\\/b\": \"c\",\n  \"^caf\\u00e9\\\\.\": \"cafe.\",\n  \"^dup\": \"first\",\n  \"^dup\": \"second\"\n}\n";
        writeFile(path(QStringLiteral("mapping.json")), json);
        const RuleSet fromJson = importRulesFile(path(QStringLiteral("mapping.json")).toStdString());
        QVERIFY(fromJson.mode == RuleMode::FirstMatch);
        const QJsonArray jsonTruth = helper({ QStringLiteral("json_pairs"), path(QStringLiteral("mapping.json")) }).array();
        QCOMPARE(static_cast<size_t>(jsonTruth.size()), fromJson.rules.size());
        for (qsizetype i = 0; i < jsonTruth.size(); ++i) {
            QCOMPARE(QString::fromStdString(fromJson.rules[static_cast<size_t>(i)].pattern), jsonTruth[i].toArray()[0].toString());
            QCOMPARE(QString::fromStdString(fromJson.rules[static_cast<size_t>(i)].replacement), jsonTruth[i].toArray()[1].toString());
        }

        // Applied by transformers' loop in Python, both map keys as our engine does.
        std::vector<std::string> keys = realisticKeys();
        for (const char* k : { "multi_modal_projector.linear_1.weight", "paren.thesized.x.y", "it's.here", "model.nameA", "dup.x", "a/b", "back\\slash" })
            keys.emplace_back(k);
        writeKeys(path(QStringLiteral("import.keys.json")), keys);
        for (const auto& [file, rules] : { std::pair { QStringLiteral("literal"), set }, std::pair { QStringLiteral("json"), fromJson } }) {
            // Python's dict from the literal, as JSON, is what transformers would be given.
            const QJsonArray pairs = file == QStringLiteral("literal") ? truth : jsonTruth;
            // QJsonObject sorts its keys; the order matters here, so the object is written by hand.
            auto encoded = [](const QJsonValue& v) {
                const QByteArray one = QJsonDocument(QJsonArray { v }).toJson(QJsonDocument::Compact); // ["..."]
                return one.mid(1, one.size() - 2).toStdString();
            };
            std::string mapping = "{";
            for (qsizetype i = 0; i < pairs.size(); ++i)
                mapping += (i ? "," : "") + encoded(pairs[i].toArray()[0]) + ":" + encoded(pairs[i].toArray()[1]);
            mapping += "}";
            writeFile(path(file + QStringLiteral(".dict.json")), mapping);
            const auto python = outcomes(helper({ QStringLiteral("hf"), path(file + QStringLiteral(".dict.json")), path(QStringLiteral("import.keys.json")) }).array());
            const auto engine = engineMap(rules, keys);
            QCOMPARE(python.size(), keys.size());
            for (size_t i = 0; i < keys.size(); ++i)
                QVERIFY2(python[i] == engine[i], qPrintable(QStringLiteral("%1: key '%2': engine %3, Python %4").arg(file, QString::fromStdString(keys[i]), show(engine[i]), show(python[i]))));
        }
    }

    void importCsv()
    {
        if (!m_python)
            QSKIP("/usr/bin/python3 is not installed");
        const std::string text = "\xEF\xBB\xBFold,new\r\n"
                                 "\"a,b.weight\",\"x \"\"q\"\" y\"\r\n"
                                 "model.layers.0.attn.weight,layers.0.attention.weight\r\n"
                                 "\"multi\nline\",one line\r\n"
                                 "model.rotary.inv_freq,\r\n"
                                 "\r\n"
                                 "back\\slash.(x)+$,b\\1\\g<0>\r\n"
                                 "\" lead\",trail \n"
                                 "café.weight,\"caf\u00e9,w\"";
        writeFile(path(QStringLiteral("mapping.csv")), text);
        const RuleSet set = importRulesFile(path(QStringLiteral("mapping.csv")).toStdString());
        QVERIFY(set.mode == RuleMode::Chain);
        const QJsonArray rows = helper({ QStringLiteral("csv_rows"), path(QStringLiteral("mapping.csv")) }).array();
        QVERIFY(rows.size() > 2);
        const CompiledRules compiled = CompiledRules::compile(set);
        size_t checked = 0;
        for (qsizetype i = 1; i < rows.size(); ++i) { // row 0 is the header
            const QJsonArray row = rows[i].toArray();
            if (row.isEmpty())
                continue;
            QCOMPARE(row.size(), 2);
            const std::string oldName = row[0].toString().toStdString();
            const std::string newName = row[1].toString().toStdString();
            const auto r = compiled.apply(oldName);
            QVERIFY2(r.dropped == newName.empty(), oldName.c_str());
            if (!newName.empty())
                QCOMPARE(QString::fromStdString(r.name), QString::fromStdString(newName));
            ++checked;
        }
        QCOMPARE(checked, set.rules.size());

        // A shift: a chain would rename a.0 twice, so the import switches to first-match.
        const RuleSet shift = importCsvMapping("layers.1,layers.2\nlayers.2,layers.3\nlayers.3,\n", "shift.csv");
        QVERIFY(shift.mode == RuleMode::FirstMatch);
        QVERIFY(!shift.headerComments.empty());
        const auto mapped = engineMap(shift, { "layers.1", "layers.2", "layers.3", "layers.4" });
        QVERIFY((mapped == std::vector<Outcome> { Outcome("layers.2"), Outcome("layers.3"), Outcome(), Outcome("layers.4") }));
    }

    void csvRoundTrip()
    {
        if (!m_python)
            QSKIP("/usr/bin/python3 is not installed");
        const std::vector<std::pair<std::string, std::string>> pairs = { { "plain.weight", "renamed.weight" }, { "with,comma", "new,\"quoted\"" },
            { "\"starts quoted", "ends quoted\"" }, { "line\r\nbreak", "lf\nonly" }, { " padded ", "x" }, { "dropped.key", "" },
            { "ünïcödé.🔥", "unicode" }, { "regex.chars[0]*+?{}()|^$\\", "\\1 \\g<0>" } };
        const std::string csv = mappingToCsv(pairs);
        QVERIFY(csv.rfind("old,new\r\n", 0) == 0);
        writeFile(path(QStringLiteral("roundtrip.csv")), csv);
        const QJsonArray rows = helper({ QStringLiteral("csv_rows"), path(QStringLiteral("roundtrip.csv")) }).array();
        QCOMPARE(static_cast<size_t>(rows.size()), pairs.size() + 1);
        for (size_t i = 0; i < pairs.size(); ++i) {
            QCOMPARE(rows[static_cast<qsizetype>(i + 1)].toArray()[0].toString().toStdString(), pairs[i].first);
            QCOMPARE(rows[static_cast<qsizetype>(i + 1)].toArray()[1].toString().toStdString(), pairs[i].second);
        }
        const RuleSet back = importCsvMapping(csv, "roundtrip.csv");
        QCOMPARE(back.rules.size(), pairs.size());
        const CompiledRules compiled = CompiledRules::compile(back);
        for (const auto& [oldName, newName] : pairs) {
            const auto r = compiled.apply(oldName);
            QVERIFY2(r.dropped == newName.empty(), oldName.c_str());
            if (!newName.empty())
                QCOMPARE(r.name, newName);
        }
    }

    // ---------------------------------------------------------------------------------------------
    // torchtitan

    void torchtitanTemplates()
    {
        if (!m_python)
            QSKIP("/usr/bin/python3 is not installed");
        std::vector<std::string> keys;
        for (const auto& k : realisticKeys())
            if (k.rfind("model.", 0) == 0 && k.find("experts") == std::string::npos && k != "model.名前.weight")
                keys.push_back(k);
        keys.push_back("lm_head.weight");
        // torchtitan's llama3 from_hf_map, written as rules.
        const RuleSet llama = makeSet(RuleMode::Chain,
            { rule(R"(^model\.embed_tokens\.weight$)", "tok_embeddings.weight"),
                rule(R"(^model\.layers\.(\d+)\.self_attn\.([qkvo])_proj\.weight$)", R"(layers.\1.attention.w\2.weight)"),
                dropRule(R"(^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$)"),
                rule(R"(^model\.layers\.(\d+)\.mlp\.gate_proj\.)", R"(layers.\1.feed_forward.w1.)"),
                rule(R"(^model\.layers\.(\d+)\.mlp\.up_proj\.)", R"(layers.\1.feed_forward.w3.)"),
                rule(R"(^model\.layers\.(\d+)\.mlp\.down_proj\.)", R"(layers.\1.feed_forward.w2.)"),
                rule(R"(^model\.layers\.(\d+)\.input_layernorm\.)", R"(layers.\1.attention_norm.)"),
                rule(R"(^model\.layers\.(\d+)\.post_attention_layernorm\.)", R"(layers.\1.ffn_norm.)"),
                rule(R"(^model\.norm\.weight$)", "norm.weight"), rule(R"(^lm_head\.weight$)", "output.weight") });
        const TemplateExport faithful = rulesToTorchtitan(llama, keys);
        QVERIFY2(faithful.problems.empty(), faithful.problems.empty() ? "" : faithful.problems.front().c_str());
        QVERIFY(faithful.text.find("\"model.layers.{}.self_attn.q_proj.weight\": \"layers.{}.attention.wq.weight\",") != std::string::npos);
        QVERIFY(faithful.text.find("\"model.layers.{}.self_attn.rotary_emb.inv_freq\": None,") != std::string::npos);
        checkTitan(QStringLiteral("titan_ok"), faithful, llama, keys, nullptr);

        // Layer-specific renames, a number that is dropped, experts moved around, a dropped non-layer key.
        std::vector<std::string> moeKeys = keys;
        for (const auto& k : realisticKeys())
            if (k.find("experts") != std::string::npos)
                moeKeys.push_back(k);
        RuleSet odd = llama;
        odd.rules.insert(odd.rules.begin(), rule(R"(^model\.layers\.0\.input_layernorm\.)", "first_norm."));
        odd.rules.push_back(rule(R"(^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(w\d)\.)", R"(experts.\2.layers.\1.\3.)"));
        odd.rules.push_back(dropRule(R"(^output\.weight$)"));
        odd.rules.push_back(rule(R"(^model\.layers\.10\.self_attn\.q_proj\.bias$)", "q_bias_of_layer_ten"));
        const TemplateExport unfaithful = rulesToTorchtitan(odd, moeKeys);
        QVERIFY(!unfaithful.problems.empty());
        QVERIFY(std::any_of(unfaithful.problems.begin(), unfaithful.problems.end(),
            [](const std::string& p) { return p.find("q_bias_of_layer_ten") != std::string::npos && p.find("this layer only") != std::string::npos; }));
        std::set<std::string> differing;
        checkTitan(QStringLiteral("titan_odd"), unfaithful, odd, moeKeys, &unfaithful.problems, &differing);
        // The rename special to layer 0 costs layer 0 only: the template serves the other layers.
        QVERIFY(differing.count("model.layers.0.input_layernorm.weight"));
        QVERIFY(!differing.count("model.layers.5.input_layernorm.weight"));
    }

    // ---------------------------------------------------------------------------------------------
    // Hostile inputs: a LoadError, never a crash or another exception.

    void hostileHf_data()
    {
        QTest::addColumn<QByteArray>("text");
        QTest::newRow("unterminated") << QByteArray("{'a': 'b");
        QTest::newRow("unterminated raw") << QByteArray("{r'a\\': 'b'}");
        QTest::newRow("unterminated triple") << QByteArray("{\n'''a\n\n: 'b'}");
        QTest::newRow("line break in string") << QByteArray("{'a\n': 'b'}");
        QTest::newRow("number value") << QByteArray("{\"a\": 1}");
        QTest::newRow("None value") << QByteArray("{'a': None}");
        QTest::newRow("unpacking") << QByteArray("{**other, 'a': 'b'}");
        QTest::newRow("f-string") << QByteArray("{f'a': 'b'}");
        QTest::newRow("bytes") << QByteArray("{b'a': 'b'}");
        QTest::newRow("bad prefix") << QByteArray("{xr'a': 'b'}");
        QTest::newRow("invalid regex") << QByteArray("{\n  'ok': 'x',\n  '(': 'y'\n}");
        QTest::newRow("refused regex") << QByteArray("{'\\\\K': 'y'}");
        QTest::newRow("bad group") << QByteArray("{'(a)': '\\\\9'}");
        QTest::newRow("bad replacement escape") << QByteArray("{'a': r'\\q'}");
        QTest::newRow("named escape") << QByteArray("{'\\N{DASH}': 'b'}");
        QTest::newRow("surrogate") << QByteArray("{'\\ud800': 'b'}");
        QTest::newRow("past unicode") << QByteArray("{'\\U00110000': 'b'}");
        QTest::newRow("short hex") << QByteArray("{'\\x4': 'b'}");
        QTest::newRow("missing colon") << QByteArray("{'a' 'b'}");
        QTest::newRow("missing comma") << QByteArray("{'a': 'b' 'c': 'd'}");
        QTest::newRow("text after") << QByteArray("{'a': 'b'} extra");
        QTest::newRow("not a dict") << QByteArray("['a', 'b']");
        QTest::newRow("empty") << QByteArray("");
        QTest::newRow("nul") << QByteArray("{'a': 'b'}\0", 11);
        QTest::newRow("not utf8") << QByteArray("{'\xff': 'b'}");
        QTest::newRow("assignment without dict") << QByteArray("mapping = 3");
        QTest::newRow("comparison") << QByteArray("mapping == {'a': 'b'}");
        QTest::newRow("deep parentheses") << QByteArray("{") + QByteArray(1 << 20, '(');
        QTest::newRow("deep braces") << QByteArray(1 << 20, '{');
        QTest::newRow("deep json") << QByteArray("{\"a\": ") + QByteArray(1 << 20, '[');
        QTest::newRow("unclosed parenthesis") << QByteArray("{('a': 'b'}");
    }

    void hostileHf()
    {
        QFETCH(QByteArray, text);
        try {
            importHfKeyMapping(std::string_view(text.constData(), static_cast<size_t>(text.size())), "hostile.py");
            QFAIL("accepted");
        } catch (const LoadError& e) {
            QVERIFY2(QByteArray(e.what()).startsWith("hostile.py: "), e.what());
            if (!text.isEmpty() && text.size() < 100 && !QByteArray(QTest::currentDataTag()).startsWith("not utf8"))
                QVERIFY2(QByteArray(e.what()).contains("line "), e.what());
        }
    }

    void hostileLineNumbers()
    {
        try {
            importHfKeyMapping("m = {\n    'a': 'b',\n    # comment\n    'c': 'd',\n    '[': 'e',\n}\n", "n.py");
            QFAIL("accepted");
        } catch (const LoadError& e) {
            QVERIFY2(e.problem().rfind("line 5: ", 0) == 0, e.what());
        }
        try {
            importHfKeyMapping("{\n  \"a\": \"b\",\n  \"x(\": \"e\"\n}", "n.json");
            QFAIL("accepted");
        } catch (const LoadError& e) {
            QVERIFY2(e.problem().rfind("line 3: ", 0) == 0, e.what());
        }
        try {
            importCsvMapping("a,b\nc,d\n\"e,f\n", "n.csv");
            QFAIL("accepted");
        } catch (const LoadError& e) {
            QVERIFY2(e.problem().rfind("line 3: ", 0) == 0, e.what());
        }
    }

    void hostileCsv_data()
    {
        QTest::addColumn<QByteArray>("text");
        QTest::newRow("unterminated quote") << QByteArray("old,new\n\"a,b\n");
        QTest::newRow("three fields") << QByteArray("a,b,c\n");
        QTest::newRow("one field") << QByteArray("a\n");
        QTest::newRow("empty old") << QByteArray(",b\n");
        QTest::newRow("text after quote") << QByteArray("\"a\"x,b\n");
        QTest::newRow("conflicting duplicate") << QByteArray("a,b\na,c\n");
        QTest::newRow("not utf8") << QByteArray("\xff,b\n");
    }

    void hostileCsv()
    {
        QFETCH(QByteArray, text);
        QVERIFY_THROWS_EXCEPTION(LoadError, importCsvMapping(std::string_view(text.constData(), static_cast<size_t>(text.size())), "hostile.csv"));
    }

    void hugeInputs()
    {
        constexpr int kEntries = 100000;
        std::string python = "m = {\n";
        std::string json = "{";
        std::string csv = "old,new\n";
        for (int i = 0; i < kEntries; ++i) {
            const std::string n = std::to_string(i);
            python += "    r'^key\\." + n + "$': 'new." + n + "',  # entry " + n + "\n";
            json += (i ? ",\"^key\\\\." : "\"^key\\\\.") + n + "$\":\"new." + n + "\"";
            csv += "key." + n + ",new." + n + "\n";
        }
        python += "}\n";
        json += "}";
        QElapsedTimer timer;
        timer.start();
        QCOMPARE(importHfKeyMapping(python, "huge.py").rules.size(), size_t(kEntries));
        const qint64 pythonMs = timer.restart();
        QCOMPARE(importHfKeyMapping(json, "huge.json").rules.size(), size_t(kEntries));
        const qint64 jsonMs = timer.restart();
        const RuleSet fromCsv = importCsvMapping(csv, "huge.csv");
        QCOMPARE(fromCsv.rules.size(), size_t(kEntries));
        QCOMPARE(CompiledRules::compile(fromCsv).apply("key.99999").name, std::string("new.99999"));
        const qint64 csvMs = timer.elapsed();
        qInfo("%d entries: Python literal %lld ms, JSON %lld ms, CSV %lld ms", kEntries, static_cast<long long>(pythonMs),
            static_cast<long long>(jsonMs), static_cast<long long>(csvMs));
        // Linear work (no rescans of the text per entry); generous for sanitizer builds on a busy machine.
        QVERIFY(pythonMs + jsonMs + csvMs < 60000);
    }

    void hostileFiles()
    {
        QVERIFY_THROWS_EXCEPTION(LoadError, importRulesFile(path(QStringLiteral("does-not-exist.yaml")).toStdString()));
        QVERIFY_THROWS_EXCEPTION(LoadError, importRulesFile(m_dir.path().toStdString()));
        {
            QFile big(path(QStringLiteral("big.json")));
            QVERIFY(big.open(QIODevice::WriteOnly));
            QVERIFY(big.resize(qint64(65) << 20)); // sparse: costs no disk
        }
        try {
            importRulesFile(path(QStringLiteral("big.json")).toStdString());
            QFAIL("accepted");
        } catch (const LoadError& e) {
            QVERIFY2(QByteArray(e.what()).contains("64 MiB"), e.what());
        }
        // Dispatch by content: native YAML and JSON stay native; dict assignments are Hugging Face.
        writeFile(path(QStringLiteral("native.yaml")), "version: 1\nrules:\n  - pattern: '^a'\n    replace: b\n");
        QVERIFY(importRulesFile(path(QStringLiteral("native.yaml")).toStdString()).mode == RuleMode::Chain);
        writeFile(path(QStringLiteral("native.json")), "{\"version\": 1, \"mode\": \"first_match\", \"rules\": [{\"pattern\": \"^a\"}]}");
        QCOMPARE(importRulesFile(path(QStringLiteral("native.json")).toStdString()).rules.size(), size_t(1));
        writeFile(path(QStringLiteral("mode-only.json")), "{\"mode\": \"chain\"}");
        QVERIFY(importRulesFile(path(QStringLiteral("mode-only.json")).toStdString()).rules.empty());
        writeFile(path(QStringLiteral("assigned.txt")), "# from modeling_x.py\n_checkpoint_conversion_mapping = {r'^a': 'b'}\n");
        QVERIFY(importRulesFile(path(QStringLiteral("assigned.txt")).toStdString()).mode == RuleMode::FirstMatch);
        writeFile(path(QStringLiteral("annotated.txt")), "class X:\n    pass\n");
        QVERIFY_THROWS_EXCEPTION(LoadError, importRulesFile(path(QStringLiteral("annotated.txt")).toStdString()));
        writeFile(path(QStringLiteral("annotated.txt")), "    mapping: dict[str, str] = {\n        r'^a': 'b',\n    }\n");
        QCOMPARE(importRulesFile(path(QStringLiteral("annotated.txt")).toStdString()).rules.size(), size_t(1));
        writeFile(path(QStringLiteral("dict.rules")), "{r'^a': 'b', }");
        QVERIFY(importRulesFile(path(QStringLiteral("dict.rules")).toStdString()).mode == RuleMode::FirstMatch);
    }

    // Seeded byte mutations of valid inputs: each import either succeeds with usable rules or throws LoadError.
    void mutations()
    {
        const std::string hf = "m = {\n    r'^a\\.(\\d+)': r'b.\\1',  # c\n    \"x\" 'y': '''z''',\n    u'\\u00e9\\x41\\101': \"\\t\",\n}\n";
        const std::string json = "{\"^a\\\\.(\\\\d+)\": \"b.\\\\1\", \"\\u00e9\": \"e\"}";
        const std::string csv = "old,new\r\n\"a,\"\"b\",c\r\nd,\r\n";
        std::mt19937 rng(20240611);
        const char alphabet[] = "'\"\\{}():,#\nru\r\x01\xff\xc3()[]*+?0123456789abc ";
        int accepted = 0;
        for (int round = 0; round < 3000; ++round) {
            for (int which = 0; which < 3; ++which) {
                std::string text = which == 0 ? hf : which == 1 ? json : csv;
                const int edits = 1 + static_cast<int>(rng() % 4);
                for (int e = 0; e < edits && !text.empty(); ++e) {
                    const size_t at = rng() % text.size();
                    const char c = alphabet[rng() % (sizeof alphabet - 1)];
                    switch (rng() % 3) {
                    case 0:
                        text[at] = c;
                        break;
                    case 1:
                        text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), c);
                        break;
                    default:
                        text.erase(at, 1);
                    }
                }
                try {
                    const RuleSet set = which == 2 ? importCsvMapping(text, "m.csv") : importHfKeyMapping(text, "m.py");
                    std::vector<PatternError> errors;
                    CompiledRules::compile(set, &errors);
                    QVERIFY2(errors.empty(), text.c_str());
                    ++accepted;
                } catch (const LoadError&) {
                }
            }
        }
        QVERIFY(accepted > 0);
    }
};

QTEST_GUILESS_MAIN(TestRuleExports)
#include "tst_rule_exports.moc"
