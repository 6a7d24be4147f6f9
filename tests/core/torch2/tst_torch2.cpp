// Real torch 2.6 and torchao 0.9 files against what torch and torchao themselves report.
//
// tests/fixtures/torch2/ is written by tests/fixtures/make_torch2_fixtures.py, run by hand under torch 2.6
// (../shared/tools/torch2-env.sh): FSDP2 per-rank saves, FSDP2 + tensor parallel, torchtitan DCP saves (also
// after FP8 + compile), torch 2.6 dtypes and subclasses, torchao quantized weights and optimizer states, FP8
// safetensors written by the safetensors library. Each fixture's `.truth.json` holds what torch reported
// (class, dtype, global and local shapes, placements, DCP chunks, whether torch.load(weights_only=True)
// reads it), and loads.truth.json the verdict of every strict load_state_dict the generator ran, with
// torch's own error text. Nothing here is compared with StateLens's own earlier output.
//
// Values (dequantized as the libraries dequantize) are checked by tst_values against the same truth files.

#include "common/qt_text.h"
#include "common/test_files.h"
#include "common/test_paths.h"
#include "diff/diff.h"
#include "formats/loader.h"
#include "formats/rank_files_reader.h"
#include "model/source.h"
#include "pickle/global_policy.h"
#include "rules/rule.h"
#include "util/error.h"
#include "values/tensor_bytes.h"
#include "values/value_reader.h"

#include <QCryptographicHash>
#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <QSet>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

using namespace sl;

namespace {

using sl::test::readJson;

QString torch2Dir() { return test::fixturesDir() + QStringLiteral("/torch2"); }
using sl::test::q;


QString dimsText(const Shape& s)
{
    QStringList p;
    for (int64_t d : s)
        p << QString::number(d);
    return "[" + p.join(", ") + "]";
}

QString dimsText(const QJsonValue& v)
{
    QStringList p;
    for (const auto& d : v.toArray())
        p << QString::number(d.toInteger());
    return "[" + p.join(", ") + "]";
}

// A truth's `open`: one path (file or folder), several rank files, or a glob of rank files.
std::vector<std::string> pathsOf(const QJsonValue& open)
{
    std::vector<std::string> out;
    auto add = [&](const QString& rel) {
        if (rel.contains(QLatin1Char('*'))) {
            const QFileInfo fi(torch2Dir() + QLatin1Char('/') + rel);
            for (const QString& f : QDir(fi.path()).entryList({ fi.fileName() }, QDir::Files, QDir::Name))
                out.push_back((fi.path() + QLatin1Char('/') + f).toStdString());
        } else {
            out.push_back((torch2Dir() + QLatin1Char('/') + rel).toStdString());
        }
    };
    if (open.isArray())
        for (const auto& p : open.toArray())
            add(p.toString());
    else
        add(open.toString());
    return out;
}

Source openTruth(const QJsonValue& open, const OpenOptions& options = {})
{
    const std::vector<std::string> paths = pathsOf(open);
    return paths.size() == 1 ? openSource(paths.front(), options) : openRankFiles(paths, options);
}

// Every entry of every container, by its full key path (container path + "." + name), as torch nests them;
// flat-key quantized groups also under each part's original key.
struct Found {
    const Entry* entry = nullptr;
    const Entry* group = nullptr; // the group a part belongs to
    QString container;
};

struct AllEntries {
    std::vector<Source> sources; // one per container, kept alive
    std::map<QString, Found> byName;
};

AllEntries allEntries(const Source& s)
{
    AllEntries all;
    all.sources.reserve(s.containers.size() + 1);
    std::vector<std::string> paths;
    for (const auto& c : s.containers)
        paths.push_back(c.path);
    if (paths.empty())
        paths.push_back(s.container);
    for (const auto& path : paths)
        all.sources.push_back(path == s.container ? s : s.withContainer(path));
    for (const Source& src : all.sources) {
        const QString prefix = src.container.empty() ? QString() : q(src.container) + QLatin1Char('.');
        // A flat-key group's parts first: torch's key is the stored part (bitsandbytes' `weight` is its packed
        // uint8 tensor), the group under the same name is StateLens's logical view of it.
        for (const Entry& e : src.entries)
            for (const Entry& p : e.parts)
                if (const std::string* key = p.attribute("key"))
                    all.byName.try_emplace(prefix + q(*key), Found { &p, &e, q(src.container) });
        for (const Entry& e : src.entries)
            all.byName.try_emplace(prefix + q(e.name), Found { &e, nullptr, q(src.container) });
    }
    return all;
}

struct Checker {
    QStringList problems;
    void expect(bool ok, const QString& where, const QString& what)
    {
        if (!ok && problems.size() < 60)
            problems << where + ": " + what;
    }
    void equal(const QString& have, const QString& want, const QString& where, const char* field)
    {
        expect(have == want, where, QStringLiteral("%1 is %2, expected %3").arg(QLatin1String(field), have, want));
    }
    QString report() const { return "\n  " + problems.join("\n  "); }
};

QStringList truthFiles()
{
    QStringList out;
    QDirIterator it(torch2Dir(), { QStringLiteral("*.truth.json") }, QDir::Files, QDirIterator::Subdirectories);
    while (it.hasNext()) {
        const QString f = it.next();
        if (!f.endsWith(QStringLiteral("/loads.truth.json")))
            out << QDir(torch2Dir()).relativeFilePath(f);
    }
    out.sort();
    return out;
}

std::string listJoin(const std::vector<std::string>& v)
{
    std::string out;
    for (const auto& s : v)
        out += (out.empty() ? "" : ", ") + s;
    return out;
}

// Keys as one sorted line, so a mismatch shows both lists whole.
QString sorted(QStringList l)
{
    l.sort();
    return l.join(QStringLiteral(", "));
}

QString keyList(const QJsonValue& v)
{
    QStringList l;
    for (const auto& k : v.toArray())
        l << k.toString();
    return sorted(l);
}

bool isPlainTensorClass(const QString& cls)
{
    return cls == QStringLiteral("torch.Tensor") || cls == QStringLiteral("torch.nn.parameter.Parameter");
}

} // namespace

class TestTorch2 : public QObject {
    Q_OBJECT
private slots:
    void initTestCase()
    {
        QVERIFY2(QFileInfo(torch2Dir() + QStringLiteral("/loads.truth.json")).isFile(),
            "tests/fixtures/torch2 is missing: run make_torch2_fixtures.py under torch2-env.sh");
        QVERIFY2(truthFiles().size() >= 20, "too few truth files in tests/fixtures/torch2");
    }

    void listing_data()
    {
        QTest::addColumn<QString>("truthFile");
        for (const QString& f : truthFiles())
            QTest::newRow(qPrintable(f)) << f;
    }

    // Every key torch reported: present, with torch's dtype, global shape and (subclasses) class; sharded
    // tensors with their per-rank local shapes or DCP chunks and their placements.
    void listing()
    {
        QFETCH(QString, truthFile);
        const QJsonObject truth = readJson(torch2Dir() + QLatin1Char('/') + truthFile);
        QVERIFY(truth.value(QStringLiteral("real")).toBool());
        Source s;
        try {
            s = openTruth(truth.value(QStringLiteral("open")));
        } catch (const LoadError& e) {
            QFAIL(e.what());
        }
        const AllEntries all = allEntries(s);
        Checker c;
        for (const auto& v : truth.value(QStringLiteral("entries")).toArray()) {
            const QJsonObject t = v.toObject();
            const QString name = t.value(QStringLiteral("name")).toString();
            auto it = all.byName.find(name);
            if (it == all.byName.end()) {
                c.expect(false, name, QStringLiteral("not listed (%1 keys listed)").arg(all.byName.size()));
                continue;
            }
            const Entry& e = *it->second.entry;
            if (t.value(QStringLiteral("object")).toBool()) {
                c.expect(e.kind == EntryKind::Object, name, QStringLiteral("is a tensor, torch has a %1").arg(t.value(QStringLiteral("class")).toString()));
                continue;
            }
            c.expect(e.kind != EntryKind::Object, name, QStringLiteral("is an object, torch has a tensor"));
            c.equal(q(std::string(dtypeName(e.dtype))), t.value(QStringLiteral("dtype")).toString(), name, "dtype");
            c.expect(e.shapeKnown, name, QStringLiteral("shape unknown, torch says %1").arg(dimsText(t.value(QStringLiteral("shape")))));
            if (e.shapeKnown)
                c.equal(dimsText(e.shape), dimsText(t.value(QStringLiteral("shape"))), name, "shape");
            const QString cls = t.value(QStringLiteral("class")).toString();
            if (!isPlainTensorClass(cls) && !it->second.group)
                c.equal(q(e.typeName), cls, name, "class");
            // Views: strides and storage offset as torch reports them (elements); empty strides mean contiguous.
            if (t.contains(QStringLiteral("stride")) && e.kind == EntryKind::Tensor && !it->second.group) {
                if (!e.location.strides.empty())
                    c.equal(dimsText(e.location.strides), dimsText(t.value(QStringLiteral("stride"))), name, "strides");
                c.equal(QString::number(e.location.storageOffset), QString::number(t.value(QStringLiteral("storage_offset")).toInteger()), name,
                    "storage offset");
            }
            // A tensor subclass's inner tensors (torch's __tensor_flatten__, recursively) are the group's parts,
            // named by their last attribute.
            for (const auto& iv : t.value(QStringLiteral("inner")).toArray()) {
                const QJsonObject in = iv.toObject();
                const QString path = in.value(QStringLiteral("path")).toString();
                const Entry* part = e.part(path.section(QLatin1Char('.'), -1).toStdString());
                c.expect(part, name, QStringLiteral("no part for torch's inner tensor %1").arg(path));
                if (part) {
                    c.equal(q(std::string(dtypeName(part->dtype))), in.value(QStringLiteral("dtype")).toString(), name + QLatin1Char(' ') + path, "dtype");
                    c.equal(dimsText(part->shape), dimsText(in.value(QStringLiteral("shape"))), name + QLatin1Char(' ') + path, "shape");
                }
            }
            if (t.contains(QStringLiteral("parameter")))
                c.expect(e.isParameter, name, QStringLiteral("not marked a Parameter"));
            if (t.contains(QStringLiteral("layout")))
                c.expect(e.attribute("layout") && q(*e.attribute("layout")) == t.value(QStringLiteral("layout")).toString(), name,
                    QStringLiteral("layout attribute missing, torch says %1").arg(t.value(QStringLiteral("layout")).toString()));
            if (t.contains(QStringLiteral("placements"))) {
                QStringList want;
                for (const auto& p : t.value(QStringLiteral("placements")).toArray())
                    want << p.toString();
                QStringList have;
                if (e.sharding)
                    for (const auto& p : e.sharding->placements)
                        have << q(p);
                c.equal(have.join(QLatin1Char(',')), want.join(QLatin1Char(',')), name, "placements");
                c.equal(e.sharding ? dimsText(e.sharding->meshShape) : QString(), dimsText(t.value(QStringLiteral("mesh_shape"))), name, "mesh shape");
            }
            // Per-rank sets: each rank's piece, in rank order.
            if (t.contains(QStringLiteral("local_shapes")) && t.value(QStringLiteral("placements")).isArray()) {
                const QJsonArray want = t.value(QStringLiteral("local_shapes")).toArray();
                c.expect(e.sharding && e.sharding->chunks.size() == size_t(want.size()), name,
                    QStringLiteral("%1 pieces, torch has %2 ranks").arg(e.sharding ? e.sharding->chunks.size() : 0).arg(want.size()));
                if (e.sharding && e.sharding->chunks.size() == size_t(want.size()))
                    for (qsizetype r = 0; r < want.size(); ++r)
                        c.equal(dimsText(e.sharding->chunks[size_t(r)].sizes), dimsText(want[r]), name + QStringLiteral(" rank %1").arg(r), "local shape");
            }
            // DCP: the chunks .metadata lists (FileSystemReader.read_metadata()).
            if (t.contains(QStringLiteral("dcp")) && t.value(QStringLiteral("dcp")).toObject().contains(QStringLiteral("chunks"))) {
                const QJsonArray want = t.value(QStringLiteral("dcp")).toObject().value(QStringLiteral("chunks")).toArray();
                if (want.size() > 1) {
                    c.expect(e.sharding && e.sharding->chunks.size() == size_t(want.size()), name, QStringLiteral("chunk count"));
                    if (e.sharding && e.sharding->chunks.size() == size_t(want.size()))
                        for (qsizetype i = 0; i < want.size(); ++i) {
                            const QJsonObject w = want[i].toObject();
                            c.equal(dimsText(e.sharding->chunks[size_t(i)].offsets), dimsText(w.value(QStringLiteral("offsets"))), name, "chunk offsets");
                            c.equal(dimsText(e.sharding->chunks[size_t(i)].sizes), dimsText(w.value(QStringLiteral("sizes"))), name, "chunk sizes");
                        }
                }
            }
        }
        QVERIFY2(c.problems.isEmpty(), qPrintable(truthFile + c.report()));
    }

    void weightsOnly_data()
    {
        QTest::addColumn<QString>("truthFile");
        for (const QString& f : truthFiles())
            if (readJson(torch2Dir() + QLatin1Char('/') + f).contains(QStringLiteral("weights_only")))
                QTest::newRow(qPrintable(f)) << f;
    }

    // What torch.load(weights_only=True) did with the file in fresh processes (plainly, after importing
    // torch.distributed.tensor, after importing torchao) against what StateLens says it would do.
    void weightsOnly()
    {
        QFETCH(QString, truthFile);
        const QJsonObject truth = readJson(torch2Dir() + QLatin1Char('/') + truthFile);
        const Source s = openTruth(truth.value(QStringLiteral("open")));
        const WeightsOnlyLoad& wo = s.weightsOnly;
        QVERIFY(wo.checked);
        const QJsonObject want = truth.value(QStringLiteral("weights_only")).toObject();
        const std::vector<std::pair<QString, std::vector<std::string>>> runs {
            { QStringLiteral("plain"), {} },
            { QStringLiteral("after_import_torch_distributed_tensor"), { "torch.distributed.tensor" } },
            { QStringLiteral("after_import_torchao"), { "torchao" } },
        };
        const QString said = QStringLiteral(" (StateLens: imports [%1], refused [%2])")
                                 .arg(q(listJoin(wo.imports)), q(listJoin(wo.refused)));
        for (const auto& [label, imported] : runs) {
            if (!want.contains(label))
                continue;
            const QString torchSays = want.value(label).toString();
            const bool torchLoads = torchSays == QStringLiteral("ok");
            const bool predicted = wo.refused.empty() && pickle::importsCover(wo.imports, imported);
            QVERIFY2(predicted == torchLoads, qPrintable(label + QStringLiteral(": torch says ") + torchSays + said));
            // The global torch names is one StateLens says is refused, or needs an import not made.
            static const QRegularExpression global(QStringLiteral("GLOBAL (\\S+) was not"));
            const auto m = global.match(torchSays);
            if (m.hasMatch()) {
                const std::string name = m.captured(1).toStdString();
                const std::string module = name.substr(0, name.rfind('.'));
                const std::string cls = name.substr(name.rfind('.') + 1);
                const std::string_view import = pickle::allowlistingImport(module, cls);
                QVERIFY2(std::find(wo.refused.begin(), wo.refused.end(), name) != wo.refused.end()
                        || (!import.empty() && !pickle::importsCover({ std::string(import) }, imported)),
                    qPrintable(label + QStringLiteral(": torch refuses ") + m.captured(1) + said));
            }
        }
        // The finding says the same: a warning when torch refuses whatever is imported, info when imports do.
        bool warned = false, informed = false;
        for (const Finding& f : s.findings) {
            warned |= f.severity == Severity::Warning && f.message.find("weights_only=True) refuses") != std::string::npos;
            informed |= f.severity == Severity::Info && f.message.find("weights_only=True) reads this file only after") != std::string::npos;
        }
        QCOMPARE(warned, !wo.refused.empty());
        QCOMPARE(informed, wo.refused.empty() && !wo.imports.empty());
    }

    void loads_data()
    {
        QTest::addColumn<QJsonObject>("kase");
        const QJsonObject truth = readJson(torch2Dir() + QStringLiteral("/loads.truth.json"));
        const QJsonArray cases = truth.value(QStringLiteral("cases")).toArray();
        QVERIFY(cases.size() >= 40);
        for (const auto& c : cases)
            QTest::newRow(qPrintable(c.toObject().value(QStringLiteral("case")).toString())) << c.toObject();
    }

    // Every strict load_state_dict the generator ran under torch 2.6: StateLens's diff of the same checkpoint
    // and model (its live dump, written by statelens_dump.py under torch 2.6), through the same rules, must
    // say what torch did: whether the load succeeds, and key for key what is missing, unexpected, of another
    // size, or fails while copying. With rules, every key must map as it did for torch.
    void loads()
    {
        QFETCH(QJsonObject, kase);
        OpenOptions options;
        if (kase.contains(QStringLiteral("container")))
            options.container = kase.value(QStringLiteral("container")).toString().toStdString();
        const Source a = openTruth(kase.value(QStringLiteral("checkpoint")), options);
        const Source b = openSource((torch2Dir() + QLatin1Char('/') + kase.value(QStringLiteral("model")).toString()).toStdString());
        RuleSet rules;
        for (const auto& r : kase.value(QStringLiteral("rules")).toArray())
            rules.rules.push_back(Rule { r.toObject().value(QStringLiteral("pattern")).toString().toStdString(),
                r.toObject().value(QStringLiteral("replace")).toString().toStdString(), false, true, {}, {} });
        const DiffResult d = diffSources(a, b, rules);
        QVERIFY(d.ruleErrors.empty());

        std::map<RowStatus, QStringList> have;
        QStringList mapped;
        for (const DiffRow& row : d.rows) {
            have[row.status] << q(rowName(row, a, b));
            if (row.a.valid() && row.b.valid())
                mapped << q(rowKeyA(row, a)) + QStringLiteral(" -> ") + q(rowName(row, a, b));
        }
        auto list = [&](const char* key) { return keyList(kase.value(QLatin1String(key))); };
        const bool ok = kase.value(QStringLiteral("ok")).toBool();
        QCOMPARE(sorted(have[RowStatus::Unexpected]), ok ? QString() : list("unexpected"));
        QCOMPARE(sorted(have[RowStatus::Missing]), ok ? QString() : list("missing"));
        QCOMPARE(sorted(have[RowStatus::ShapeMismatch]), ok ? QString() : list("size_mismatch"));
        QCOMPARE(sorted(have[RowStatus::CopyError]), ok ? QString() : list("copy_error"));
        QCOMPARE(d.summary.loadSucceeds(), ok);
        if (kase.contains(QStringLiteral("mapping"))) {
            QStringList want;
            const QJsonObject m = kase.value(QStringLiteral("mapping")).toObject();
            for (auto it = m.begin(); it != m.end(); ++it)
                want << it.key() + QStringLiteral(" -> ") + it.value().toString();
            QCOMPARE(sorted(mapped), sorted(want));
        }
    }

    void loadErrorText_data() { loads_data(); }

    // torch 2.6's own message for each failed load, read as a load-error-text source: the keys it names.
    void loadErrorText()
    {
        QFETCH(QJsonObject, kase);
        if (kase.value(QStringLiteral("ok")).toBool())
            QSKIP("the load succeeded: no error text");
        const Source s = openSource((torch2Dir() + QLatin1Char('/') + kase.value(QStringLiteral("error_text")).toString()).toStdString());
        QCOMPARE(QString::fromUtf8(formatId(s.format)), QStringLiteral("load-error-text"));
        std::map<QString, QStringList> named; // by container and clause
        for (const char* container : { "model", "checkpoint" }) {
            const Source c = s.withContainer(container);
            for (const Entry& e : c.entries)
                named[QLatin1String(container) + QLatin1Char(':') + q(e.attribute("from") ? *e.attribute("from") : std::string())] << q(e.name);
        }
        auto list = [&](const char* key) { return keyList(kase.value(QLatin1String(key))); };
        QCOMPARE(sorted(named[QStringLiteral("model:missing")]), list("missing"));
        QCOMPARE(sorted(named[QStringLiteral("checkpoint:unexpected")]), list("unexpected"));
        QCOMPARE(sorted(named[QStringLiteral("model:size mismatch")]), list("size_mismatch"));
        QCOMPARE(sorted(named[QStringLiteral("checkpoint:size mismatch")]), list("size_mismatch"));
        QCOMPARE(sorted(named[QStringLiteral("model:copy error")]), list("copy_error"));
    }

    void seedWorkflows_data()
    {
        QTest::addColumn<QJsonObject>("kase");
        const QJsonObject truth = readJson(torch2Dir() + QStringLiteral("/loads.truth.json"));
        for (const auto& c : truth.value(QStringLiteral("cases")).toArray())
            if (c.toObject().contains(QStringLiteral("rules")))
                QTest::newRow(qPrintable(c.toObject().value(QStringLiteral("case")).toString())) << c.toObject();
    }

    // The users' workflow on real files, through the command line: `statelens suggest CKPT MODEL -o r.yaml`
    // finds rules on its own, then `statelens diff CKPT MODEL --rules r.yaml` exits 0, and every key maps
    // where the rules torch 2.6 loaded with (the case's `mapping`) map it.
    void seedWorkflows()
    {
        QFETCH(QJsonObject, kase);
        QTemporaryDir dir;
        QStringList sides;
        for (const std::string& p : pathsOf(kase.value(QStringLiteral("checkpoint"))))
            sides << q(p);
        sides << torch2Dir() + QLatin1Char('/') + kase.value(QStringLiteral("model")).toString();
        if (kase.contains(QStringLiteral("container")))
            sides << QStringLiteral("--container-a") << kase.value(QStringLiteral("container")).toString();
        const QString rules = dir.filePath(QStringLiteral("rules.yaml"));
        const auto suggested = test::runStatelens(QStringList { QStringLiteral("suggest") } + sides + QStringList { QStringLiteral("-o"), rules });
        QVERIFY2(suggested.exitCode == 0, suggested.err.constData());
        const auto diffed = test::runStatelens(QStringList { QStringLiteral("diff") } + sides
            + QStringList { QStringLiteral("--rules"), rules, QStringLiteral("--format"), QStringLiteral("json") });
        QVERIFY2(diffed.exitCode == 0, (diffed.err + "\n" + suggested.err).constData());
        const QJsonObject report = QJsonDocument::fromJson(diffed.out).object();
        QVERIFY(report.value(QStringLiteral("summary")).toObject().value(QStringLiteral("load_succeeds")).toBool());
        QStringList have, want;
        for (const auto& r : report.value(QStringLiteral("rows")).toArray()) {
            const QJsonObject row = r.toObject();
            if (row.value(QStringLiteral("a")).isString() && row.value(QStringLiteral("b")).isString())
                have << row.value(QStringLiteral("a")).toString() + QStringLiteral(" -> ") + row.value(QStringLiteral("b")).toString();
        }
        const QJsonObject mapping = kase.value(QStringLiteral("mapping")).toObject();
        for (auto it = mapping.begin(); it != mapping.end(); ++it)
            want << it.key() + QStringLiteral(" -> ") + it.value().toString();
        have.sort();
        want.sort();
        QCOMPARE(have, want);
    }

    void plainValues_data() { listing_data(); }

    // The values of every plain tensor torch saved (DCP tensors assembled from their chunks, views, the new
    // dtypes, complex as real and imaginary parts) against torch's own: every value as float64 (sha256), the
    // first ones, min, max and mean. Quantized and subclass values are tst_values' (dequantized as each
    // library does).
    void plainValues()
    {
        QFETCH(QString, truthFile);
        const QJsonObject truth = readJson(torch2Dir() + QLatin1Char('/') + truthFile);
        if (truth.value(QStringLiteral("format")).toString() == QStringLiteral("per-rank"))
            QSKIP("per-rank values are tst_values'");
        const Source s = openTruth(truth.value(QStringLiteral("open")));
        const AllEntries all = allEntries(s);
        int checked = 0;
        Checker c;
        for (const auto& v : truth.value(QStringLiteral("entries")).toArray()) {
            const QJsonObject t = v.toObject();
            const QString name = t.value(QStringLiteral("name")).toString();
            const QString cls = t.value(QStringLiteral("class")).toString();
            if (!t.contains(QStringLiteral("values")) || t.contains(QStringLiteral("layout")) || t.contains(QStringLiteral("parts"))
                || !(cls.isEmpty() || isPlainTensorClass(cls)))
                continue;
            auto it = all.byName.find(name);
            if (it == all.byName.end() || it->second.group)
                continue; // listing() reports what is missing; a group's parts are not plain tensors
            const auto& src = *std::find_if(all.sources.begin(), all.sources.end(),
                [&](const Source& x) { return q(x.container) == it->second.container; });
            std::vector<double> values;
            try {
                values::FileCache files;
                std::string why;
                if (values::ValueReader::needsReader(*it->second.entry)) {
                    const auto reader = values::ValueReader::open(src, *it->second.entry, files, why);
                    c.expect(reader != nullptr, name, q(why));
                    if (!reader)
                        continue;
                    values.resize(reader->numel());
                    reader->read(0, values.size(), values.data());
                } else {
                    values::TensorBytes::open(src, *it->second.entry, files).decodeTo(0, it->second.entry->numel(), values);
                }
            } catch (const LoadError& e) {
                c.expect(false, name, q(e.what()));
                continue;
            }
            const QJsonObject want = t.value(QStringLiteral("values")).toObject();
            c.equal(QString::number(values.size()), QString::number(want.value(QStringLiteral("numel")).toInteger()), name, "numel");
            const QByteArray sha = QCryptographicHash::hash(
                QByteArrayView(reinterpret_cast<const char*>(values.data()), qsizetype(values.size() * sizeof(double))), QCryptographicHash::Sha256)
                                       .toHex();
            c.equal(QString::fromLatin1(sha), want.value(QStringLiteral("sha256_values_f64")).toString(), name, "sha256 of the values");
            if (!values.empty() && want.value(QStringLiteral("min")).isDouble()) {
                c.equal(QString::number(*std::min_element(values.begin(), values.end()), 'g', 17),
                    QString::number(want.value(QStringLiteral("min")).toDouble(), 'g', 17), name, "min");
                c.equal(QString::number(*std::max_element(values.begin(), values.end()), 'g', 17),
                    QString::number(want.value(QStringLiteral("max")).toDouble(), 'g', 17), name, "max");
            }
            ++checked;
        }
        QVERIFY2(c.problems.isEmpty(), qPrintable(truthFile + c.report()));
        if (!checked)
            QSKIP("no plain tensor values in this file");
    }
};

QTEST_GUILESS_MAIN(TestTorch2)
#include "tst_torch2.moc"
