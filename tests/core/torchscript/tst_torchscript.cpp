// TorchScript archives (format "torchscript") against torch.jit.load itself.
//
// - Fixtures (tests/fixtures/torchscript, written by tests/fixtures/make_torchscript_fixtures.py): every
//   state-dict key with dtype, shape, requires_grad, parameter or buffer, strides, storage sharing and the
//   sha256 of its bytes at the file offset StateLens reports; the quantized ones also against the eager
//   torch.ao module's state_dict() (the names StateLens gives what it unpacks from packed params).
// - Real archives in ../shared/fixtures/real (MANIFEST kind "TorchScript"), against /usr/bin/python3
//   torch.jit.load run at test time (torchscript_truth.py); skipped without ../shared or torch.
// - Failure paths: truncated and bit-flipped archives, a worker that crashes, hangs, prints garbage or is
//   missing, the plugin missing or not a library, a memory limit LibTorch cannot live in: each is one
//   LoadError line naming the file, within the time limit, and never a crash of this process.
// - The sandbox itself (util/child_process.h) and the start-up promise: `statelens ls` on a safetensors
//   file loads no LibTorch.
//
// The worker is the statelens executable built with this suite (STATELENS_BINARY); its LibTorch plugin
// sits beside it. Without the plugin (STATELENS_WITH_TORCH=OFF, no libtorch-dev) the LibTorch comparisons
// skip and the plugin-missing error is checked instead.

#include "common/qt_text.h"
#include "common/test_paths.h"
#include "formats/loader.h"
#include "formats/torchscript_reader.h"
#include "io/input_file.h"
#include "model/dtype.h"
#include "model/source.h"
#include "util/child_process.h"
#include "util/error.h"

#include <QCryptographicHash>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMap>
#include <QProcess>
#include <QRandomGenerator>
#include <QSet>
#include <QTemporaryDir>
#include <QTest>

#include <csignal>
#include <future>

using namespace sl;

namespace {

using sl::test::q;
QString fixturesDir() { return test::fixturesDir() + QStringLiteral("/torchscript"); }
QString pluginPath() { return QFileInfo(test::statelensBinary()).absolutePath() + "/libstatelens-torch.so"; }
bool pluginBuilt() { return QFileInfo::exists(pluginPath()); }

QString attr(const Entry& e, const char* key)
{
    const std::string* v = e.attribute(key);
    return v ? q(*v) : QString();
}

QJsonArray shapeJson(const Shape& s)
{
    QJsonArray a;
    for (int64_t d : s)
        a.append(qint64(d));
    return a;
}

QString dtypeOf(const Entry& e) { return q(std::string(dtypeName(e.dtype))); }

// The worker of the statelens executable under test, with an optional time and memory limit.
TorchScriptWorker testWorker(unsigned timeoutMs = 0, uint64_t memory = 0)
{
    TorchScriptWorker w = torchScriptWorkerFor(test::statelensBinary().toStdString());
    w.timeoutMs = timeoutMs;
    w.memoryLimitBytes = memory;
    return w;
}

// A stand-in worker: a shell script that gets the archive's path as $1.
TorchScriptWorker shellWorker(const QString& script, unsigned timeoutMs = 0)
{
    TorchScriptWorker w;
    w.command = { "/bin/sh", "-c", script.toStdString(), "sh" };
    w.timeoutMs = timeoutMs;
    return w;
}

Source readWith(const QString& path, const TorchScriptWorker& worker)
{
    OpenOptions o;
    o.torchScriptWorker = &worker;
    return openSource(path.toStdString(), o);
}

// Runs `f`, which must throw a LoadError: one line, naming `path`, containing each of `needles`.
template <typename F> QString expectLoadError(const QString& path, F&& f, const QStringList& needles)
{
    try {
        Source s = f();
        return "opened (" + QString::number(s.entries.size()) + " entries); expected a LoadError";
    } catch (const LoadError& e) {
        const QString msg = QString::fromUtf8(e.what());
        if (q(e.file()) != path)
            return "LoadError::file() is '" + q(e.file()) + "', not '" + path + "': " + msg;
        if (!msg.startsWith(path + ": "))
            return "the message does not start with the file: " + msg;
        if (msg.contains('\n') || msg.contains('\r'))
            return "the message is not one line: " + msg;
        for (const QString& n : needles)
            if (!msg.contains(n, Qt::CaseInsensitive))
                return "the message does not say '" + n + "': " + msg;
        return {};
    } catch (const std::exception& e) {
        return "threw something other than LoadError: " + QString::fromUtf8(e.what());
    }
}

QByteArray readBytes(const QString& path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

} // namespace

class TestTorchScript : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();

    void fixture_data();
    void fixture();
    void inMemory();
    void concurrentLoads();

    void realFile_data();
    void realFile();

    void corrupt_data();
    void corrupt();
    void workerCrashes();
    void workerHangs();
    void workerHangsWithGrandchild();
    void workerGarbage();
    void workerMissing();
    void noWorkerConfigured();
    void pluginMissing();
    void pluginNotALibrary();
    void memoryLimit();
    void containerOption();

    void childProcess();
    void cliListsTorchScript();
    void startupLoadsNoLibTorch();

private:
    void compareFixture(const QString& file, const Source& s, const QJsonObject& exp, QStringList& problems);

    QJsonObject m_realTruth;
    QString m_realSkip;
    QMap<QString, QString> m_realFiles; // manifest file -> absolute path
};

void TestTorchScript::initTestCase()
{
    // What app/main.cpp does for statelens itself.
    setTorchScriptWorker(testWorker());
    qputenv("STATELENS_TORCH_PLUGIN", QByteArray());
    if (!pluginBuilt())
        qWarning("no TorchScript plugin at %s: LibTorch comparisons skip", qPrintable(pluginPath()));

    // Real archives and torch's truth about them (one Python run for all).
    const QString real = test::realFixturesDir();
    if (real.isEmpty()) {
        m_realSkip = "../shared/fixtures/real is not there (STATELENS_SHARED_DIR)";
        return;
    }
    QFile manifest(real + "/MANIFEST.tsv");
    QVERIFY(manifest.open(QIODevice::ReadOnly));
    const QStringList lines = QString::fromUtf8(manifest.readAll()).split('\n', Qt::SkipEmptyParts);
    for (qsizetype i = 1; i < lines.size(); ++i) {
        const QStringList f = lines[i].split('\t');
        if (f.size() == 8 && f[7].contains(QLatin1String("TorchScript")))
            m_realFiles.insert(f[0], real + "/" + f[0]);
    }
    QVERIFY2(!m_realFiles.isEmpty(), "MANIFEST.tsv lists no TorchScript archive");
    if (!test::haveTorchPython()) {
        m_realSkip = test::torchPython() + " cannot import torch";
        return;
    }
    QProcess p;
    p.start(test::torchPython(), { test::sourceDir() + "/tests/core/torchscript/torchscript_truth.py" });
    QVERIFY(p.waitForStarted());
    for (const QString& abs : std::as_const(m_realFiles))
        p.write(abs.toUtf8() + "\n");
    p.closeWriteChannel();
    if (!p.waitForFinished(180000)) {
        p.kill();
        p.waitForFinished();
        QFAIL("torchscript_truth.py took more than 180 s");
    }
    QVERIFY2(p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0,
        qPrintable("torchscript_truth.py failed: " + QString::fromUtf8(p.readAllStandardError())));
    m_realTruth = QJsonDocument::fromJson(p.readAllStandardOutput()).object().value("files").toObject();
    QCOMPARE(m_realTruth.size(), m_realFiles.size());
}

// ----------------------------------------------------------------------------------------------------
// Fixtures made by torch.

void TestTorchScript::fixture_data()
{
    QTest::addColumn<QString>("file");
    const QStringList files = QDir(fixturesDir()).entryList({ "*.expected.json" }, QDir::Files, QDir::Name);
    QVERIFY2(files.size() >= 7, "tests/fixtures/torchscript is missing (make_torchscript_fixtures.py)");
    for (const QString& f : files)
        QTest::newRow(qPrintable(f.chopped(14))) << f.chopped(14);
}

void TestTorchScript::fixture()
{
    QFETCH(QString, file);
    if (!pluginBuilt())
        QSKIP("the TorchScript plugin is not built");
    const QString path = fixturesDir() + "/" + file;
    const QJsonObject exp = QJsonDocument::fromJson(readBytes(path + ".expected.json")).object();
    QVERIFY(!exp.isEmpty());
    if (!exp.value("loads").toBool()) {
        const QString problem
            = expectLoadError(path, [&] { return openSource(path.toStdString()); }, { "TorchScript" });
        QVERIFY2(problem.isEmpty(), qPrintable(problem));
        return;
    }
    // The reader alone: what LibTorch and data.pkl say, before format-independent grouping.
    Source raw = readTorchScript(InputFile::open(path.toStdString()), OpenOptions {});
    QStringList problems;
    compareFixture(file, raw, exp, problems);
    // Through the loader, as the CLI and the GUI open it.
    Source opened = openSource(path.toStdString());
    if (formatId(opened.format) != "torchscript")
        problems << "openSource: format " + q(formatId(opened.format));
    QVERIFY2(problems.isEmpty(), qPrintable("\n  " + problems.join("\n  ")));
}

void TestTorchScript::compareFixture(const QString& file, const Source& s, const QJsonObject& exp, QStringList& problems)
{
    if (formatId(s.format) != "torchscript")
        problems << "format " + q(formatId(s.format));
    QMap<QString, QString> meta;
    for (const auto& [k, v] : s.metadata)
        meta.insert(q(k), q(v));
    if (meta.value("class") != exp.value("class").toString())
        problems << "class " + meta.value("class") + ", torch says " + exp.value("class").toString();
    const QJsonObject records = exp.value("records").toObject();
    for (auto it = records.begin(); it != records.end(); ++it)
        if (!it.key().startsWith('_') && meta.value(it.key()) != it.value().toString())
            problems << "record " + it.key() + " = '" + meta.value(it.key()) + "', zipfile says '"
                    + it.value().toString() + "'";
    if (records.value("_mobile").toBool() != meta.contains("mobile_bytecode"))
        problems << "mobile_bytecode metadata does not match the archive";

    // What torch.jit.load(...).state_dict() lists: the parameter and buffer entries, in order.
    std::vector<const Entry*> stateDict;
    std::vector<const Entry*> all;
    for (const Entry& e : s.entries) {
        all.push_back(&e);
        const QString kind = attr(e, "kind");
        if (kind == "parameter" || kind == "buffer")
            stateDict.push_back(&e);
        else if (kind != "packed_params")
            problems << q(e.name) + ": attribute kind is '" + kind + "'";
    }
    const QJsonArray sd = exp.value("state_dict").toArray();
    if (qsizetype(stateDict.size()) != sd.size())
        problems << QString("%1 parameter/buffer entries, torch's state_dict() has %2").arg(stateDict.size()).arg(sd.size());
    QMap<int, QString> storageOfGroup;
    QMap<QString, int> groupOfStorage;
    const QByteArray bytes = readBytes(fixturesDir() + "/" + file);
    for (qsizetype i = 0; i < std::min<qsizetype>(sd.size(), qsizetype(stateDict.size())); ++i) {
        const QJsonObject t = sd[i].toObject();
        const Entry& e = *stateDict[size_t(i)];
        const QString name = t.value("name").toString();
        auto bad = [&](const QString& what) { problems << name + ": " + what; };
        if (q(e.name) != name) {
            bad("StateLens has '" + q(e.name) + "' at position " + QString::number(i));
            continue;
        }
        if (e.kind != EntryKind::Tensor)
            bad("not a tensor entry");
        if (dtypeOf(e) != t.value("dtype").toString())
            bad("dtype " + dtypeOf(e) + ", torch says " + t.value("dtype").toString());
        if (shapeJson(e.shape) != t.value("shape").toArray())
            bad("shape " + q(shapeToString(e.shape)));
        if (e.requiresGrad != t.value("requires_grad").toBool())
            bad("requires_grad differs");
        if (q(e.device) != t.value("device").toString())
            bad("device " + q(e.device));
        const QString role = t.value("role").toString();
        if (attr(e, "kind") != role || e.isParameter != (role == "parameter"))
            bad("role " + attr(e, "kind") + ", torch says " + role);
        if (attr(e, "module").isEmpty())
            bad("no module class");
        if (t.contains("stride") && shapeJson(e.location.strides) != t.value("stride").toArray())
            bad("strides " + q(shapeToString(e.location.strides)));
        if (t.contains("storage_offset") && e.location.storageOffset != t.value("storage_offset").toInteger())
            bad("storage offset " + QString::number(e.location.storageOffset));
        // Storage sharing: a bijection between torch's storage groups and StateLens's storage ids.
        if (t.contains("storage_group")) {
            const int group = t.value("storage_group").toInt();
            const QString id = q(e.location.storageId);
            if (id.isEmpty())
                bad("no storage id");
            else if (storageOfGroup.contains(group) && storageOfGroup.value(group) != id)
                bad("shares torch's storage " + QString::number(group) + " but has storage id " + id);
            else if (groupOfStorage.contains(id) && groupOfStorage.value(id) != group)
                bad("storage id " + id + " is shared with a tensor torch keeps apart");
            storageOfGroup.insert(group, id);
            groupOfStorage.insert(id, group);
        }
        // The bytes at StateLens's file offset are the tensor's own (torch's sha256 of its contents).
        if (t.contains("sha256")) {
            if (e.location.kind != TensorLocation::Kind::Mapped) {
                bad("no mapped location");
            } else {
                const QByteArray span = bytes.mid(qsizetype(e.location.offset), qsizetype(e.nbytes()));
                const QString got = QString::fromLatin1(QCryptographicHash::hash(span, QCryptographicHash::Sha256).toHex());
                if (qsizetype(e.location.offset + e.nbytes()) > bytes.size() || got != t.value("sha256").toString())
                    bad(QString("the %1 bytes at offset %2 are not the tensor's").arg(e.nbytes()).arg(e.location.offset));
            }
        }
    }
    // torch's own named_parameters / named_buffers (named_parameters drops the tied duplicate).
    QSet<QString> params, buffers;
    for (const Entry* e : stateDict)
        (attr(*e, "kind") == "parameter" ? params : buffers).insert(q(e->name));
    for (const auto& v : exp.value("named_parameters").toArray())
        if (!params.contains(v.toString()))
            problems << v.toString() + ": torch's named_parameters() has it, StateLens has no such parameter";
    QSet<QString> torchBuffers;
    for (const auto& v : exp.value("named_buffers").toArray())
        torchBuffers.insert(v.toString());
    if (torchBuffers != buffers)
        problems << "buffers differ from torch's named_buffers()";

    // Tied weights are marked.
    for (const Entry* e : stateDict)
        if (e->name == "lm_head.weight" && attr(*e, "tied_with") != "embed.weight")
            problems << "lm_head.weight: tied_with is '" + attr(*e, "tied_with") + "'";

    // Quantized: every entry, packed-params ones included, against the eager module's state_dict().
    if (exp.contains("eager_state_dict")) {
        const QJsonArray eager = exp.value("eager_state_dict").toArray();
        if (qsizetype(all.size()) != eager.size())
            problems << QString("%1 entries, eager state_dict() has %2").arg(all.size()).arg(eager.size());
        for (qsizetype i = 0; i < std::min<qsizetype>(eager.size(), qsizetype(all.size())); ++i) {
            const QJsonObject t = eager[i].toObject();
            const Entry& e = *all[size_t(i)];
            const QString name = t.value("name").toString();
            auto bad = [&](const QString& what) { problems << "eager " + name + ": " + what; };
            if (q(e.name) != name) {
                bad("StateLens has '" + q(e.name) + "' at position " + QString::number(i));
                continue;
            }
            const QString kind = t.value("kind").toString();
            if (kind == "object") {
                if (e.kind != EntryKind::Object || q(e.value) != t.value("value").toString()
                    || q(e.typeName) != t.value("type").toString())
                    bad("object " + q(e.typeName) + " " + q(e.value));
                continue;
            }
            auto compareTensor = [&](const Entry& x, const QJsonObject& y, const QString& where) {
                if (dtypeOf(x) != y.value("dtype").toString())
                    bad(where + "dtype " + dtypeOf(x) + ", eager " + y.value("dtype").toString());
                if (shapeJson(x.shape) != y.value("shape").toArray())
                    bad(where + "shape " + q(shapeToString(x.shape)));
                if (y.contains("qscheme") && attr(x, "qscheme") != y.value("qscheme").toString())
                    bad(where + "qscheme " + attr(x, "qscheme"));
                if (y.contains("axis") && attr(x, "axis") != QString::number(y.value("axis").toInt()))
                    bad(where + "axis " + attr(x, "axis"));
                if (y.contains("scale") && std::abs(attr(x, "scale").toDouble() - y.value("scale").toDouble()) > 1e-9)
                    bad(where + "scale " + attr(x, "scale"));
                if (y.contains("scales_shape")) {
                    bool found = false;
                    for (const Entry& p : x.parts)
                        found |= p.name == "scales" && shapeJson(p.shape) == y.value("scales_shape").toArray();
                    if (!found)
                        bad(where + "no per-channel scales part");
                }
            };
            if (kind == "group") {
                const QJsonArray parts = t.value("parts").toArray();
                if (e.kind != EntryKind::Group || qsizetype(e.parts.size()) != parts.size()) {
                    bad(QString("group of %1 parts, eager %2").arg(e.parts.size()).arg(parts.size()));
                    continue;
                }
                for (qsizetype k = 0; k < parts.size(); ++k)
                    compareTensor(e.parts[size_t(k)], parts[k].toObject(), "part " + QString::number(k) + ": ");
            } else {
                if (e.kind != EntryKind::Tensor)
                    bad("not a tensor");
                compareTensor(e, t, QString());
            }
        }
    }

    // The safety note says what was done.
    bool noted = false;
    for (const Finding& f : s.findings)
        noted |= f.severity == Severity::Warning && q(f.message).contains("run code")
            && q(f.message).contains("separate worker process");
    if (!noted)
        problems << "no warning that TorchScript runs code and was loaded in a separate process";
}

void TestTorchScript::inMemory()
{
    if (!pluginBuilt())
        QSKIP("the TorchScript plugin is not built");
    // In-memory bytes reach the worker through an anonymous file (memfd), not a path.
    const QByteArray bytes = readBytes(fixturesDir() + "/nested.pt");
    QVERIFY(!bytes.isEmpty());
    Source s = openSourceFromMemory("memory/nested.pt", std::vector<uint8_t>(bytes.begin(), bytes.end()));
    QCOMPARE(q(formatId(s.format)), QString("torchscript"));
    QCOMPARE(q(s.path), QString("memory/nested.pt"));
    Source disk = openSource((fixturesDir() + "/nested.pt").toStdString());
    QCOMPARE(s.entries.size(), disk.entries.size());
    for (size_t i = 0; i < s.entries.size(); ++i)
        QCOMPARE(q(s.entries[i].name), q(disk.entries[i].name));
}

void TestTorchScript::concurrentLoads()
{
    if (!pluginBuilt())
        QSKIP("the TorchScript plugin is not built");
    // The GUI opens sources on worker threads: children started at the same time must not hold each
    // other's pipes (which would leave each waiting for the others' EOF until the timeout).
    QElapsedTimer timer;
    timer.start();
    std::vector<std::future<size_t>> runs;
    for (const char* f : { "nested.pt", "dtypes.pt", "traced_convnet.pt", "quantized_static.pt" })
        runs.push_back(std::async(std::launch::async, [f] {
            return openSource((fixturesDir() + "/" + f).toStdString()).entries.size();
        }));
    for (auto& r : runs)
        QVERIFY(r.get() > 0);
    QVERIFY2(timer.elapsed() < 60000, "concurrent loads waited on each other");
}

// ----------------------------------------------------------------------------------------------------
// Real archives against torch.jit.load.

void TestTorchScript::realFile_data()
{
    QTest::addColumn<QString>("file");
    if (m_realFiles.isEmpty())
        QTest::newRow("none") << QString();
    for (auto it = m_realFiles.cbegin(); it != m_realFiles.cend(); ++it)
        QTest::newRow(qPrintable(it.key())) << it.key();
}

void TestTorchScript::realFile()
{
    QFETCH(QString, file);
    if (!m_realSkip.isEmpty())
        QSKIP(qPrintable(m_realSkip));
    if (!pluginBuilt())
        QSKIP("the TorchScript plugin is not built");
    const QString abs = m_realFiles.value(file);
    const QJsonObject truth = m_realTruth.value(abs).toObject();
    QVERIFY2(!truth.isEmpty(), "torchscript_truth.py said nothing about it");
    if (!truth.value("loads").toBool()) {
        // torch cannot load it either (the pre-1.4 model.json layout): a clean, one-line refusal.
        const QString problem = expectLoadError(abs, [&] { return openSource(abs.toStdString()); }, { "TorchScript" });
        QVERIFY2(problem.isEmpty(), qPrintable(problem));
        qInfo("torch: %s", qPrintable(truth.value("error").toString()));
        return;
    }
    Source s;
    try {
        s = readTorchScript(InputFile::open(abs.toStdString()), OpenOptions {});
    } catch (const std::exception& e) {
        QFAIL(qPrintable("torch.jit.load opens it, StateLens does not: " + QString::fromUtf8(e.what())));
    }
    QStringList problems;
    QMap<QString, QString> meta;
    for (const auto& [k, v] : s.metadata)
        meta.insert(q(k), q(v));
    if (meta.value("class") != truth.value("class").toString())
        problems << "class " + meta.value("class") + ", torch says " + truth.value("class").toString();
    std::vector<const Entry*> stateDict;
    for (const Entry& e : s.entries)
        if (attr(e, "kind") != "packed_params")
            stateDict.push_back(&e);
    const QJsonArray sd = truth.value("state_dict").toArray();
    if (qsizetype(stateDict.size()) != sd.size())
        problems << QString("%1 parameter/buffer entries, torch's state_dict() has %2").arg(stateDict.size()).arg(sd.size());
    for (qsizetype i = 0; i < std::min<qsizetype>(sd.size(), qsizetype(stateDict.size())); ++i) {
        const QJsonObject t = sd[i].toObject();
        const Entry& e = *stateDict[size_t(i)];
        const QString name = t.value("name").toString();
        if (q(e.name) != name) {
            problems << name + ": StateLens has '" + q(e.name) + "' there";
            continue;
        }
        if (dtypeOf(e) != t.value("dtype").toString() || shapeJson(e.shape) != t.value("shape").toArray()
            || e.requiresGrad != t.value("requires_grad").toBool() || attr(e, "kind") != t.value("role").toString())
            problems << name + ": " + dtypeOf(e) + " " + q(shapeToString(e.shape)) + " " + attr(e, "kind")
                    + ", torch says " + QJsonDocument(t).toJson(QJsonDocument::Compact);
    }
    QVERIFY2(problems.isEmpty(), qPrintable("\n  " + problems.join("\n  ")));
    qInfo("%s: %zu entries (%lld in torch's state_dict())", qPrintable(meta.value("class")), s.entries.size(),
        qint64(sd.size()));
}

// ----------------------------------------------------------------------------------------------------
// Hostile and broken input.

void TestTorchScript::corrupt_data()
{
    QTest::addColumn<QString>("base");
    QTest::addColumn<QString>("how");
    QTest::addColumn<qint64>("at"); // byte offset (or length for truncation)
    const QByteArray nested = readBytes(fixturesDir() + "/nested.pt");
    const QByteArray quant = readBytes(fixturesDir() + "/quantized_static.pt");
    QVERIFY(!nested.isEmpty() && !quant.isEmpty());
    QTest::newRow("truncated to 8 bytes") << "nested.pt" << "truncate" << qint64(8);
    QTest::newRow("truncated to half") << "nested.pt" << "truncate" << qint64(nested.size() / 2);
    QTest::newRow("truncated by 1 byte") << "nested.pt" << "truncate" << qint64(nested.size() - 1);
    QTest::newRow("central directory cut") << "quantized_static.pt" << "truncate" << qint64(quant.size() - 200);
    // Flips inside records LibTorch parses: the pickle, the TorchScript code, the constants.
    auto offsetOf = [](const QByteArray& b, const char* needle, int skip) {
        qsizetype i = b.indexOf(needle);
        return qint64(i < 0 ? b.size() / 3 : i + skip);
    };
    QTest::newRow("flip in data.pkl opcode") << "nested.pt" << "flip" << offsetOf(nested, "\x80\x02", 0);
    QTest::newRow("flip in data.pkl class name") << "nested.pt" << "flip" << offsetOf(nested, "__torch__", 3);
    QTest::newRow("flip in code") << "nested.pt" << "flip" << offsetOf(nested, "def forward", 2);
    QTest::newRow("flip in quantized setstate code") << "quantized_static.pt" << "flip"
                                                     << offsetOf(quant, "__setstate__", 4);
    QTest::newRow("version record 99") << "nested.pt" << "version" << qint64(0);
    // Seeded random flips over the whole file.
    QRandomGenerator rng(20261121);
    for (int i = 0; i < 4; ++i) {
        qint64 at = qint64(rng.bounded(quint32(quant.size())));
        QTest::newRow(qPrintable("random flip " + QString::number(i))) << "quantized_static.pt" << "flip" << at;
    }
}

void TestTorchScript::corrupt()
{
    QFETCH(QString, base);
    QFETCH(QString, how);
    QFETCH(qint64, at);
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    QByteArray bytes = readBytes(fixturesDir() + "/" + base);
    if (how == "truncate") {
        bytes.truncate(qsizetype(at));
    } else if (how == "version") {
        // The record's data follows its name and torch's alignment padding: "3\n".
        const qsizetype i = bytes.indexOf(QByteArray("/version"));
        QVERIFY(i > 0);
        const qsizetype data = bytes.indexOf(QByteArray("3\n"), i);
        QVERIFY(data > 0);
        bytes[data] = '9'; // "99": a version newer than any LibTorch knows
        bytes[data + 1] = '9';
    } else {
        bytes[qsizetype(at)] = char(bytes[qsizetype(at)] ^ 0x5a);
    }
    const QString path = dir.path() + "/broken.pt";
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(bytes);
    f.close();
    QElapsedTimer timer;
    timer.start();
    // Either it still loads (a flip in tensor bytes or an unused field) or it fails in one line; never a
    // crash of this process, always within the worker's time limit.
    try {
        Source s = readWith(path, testWorker(30000));
        qInfo("still opens (%s, %zu entries)", qPrintable(q(formatId(s.format))), s.entries.size());
    } catch (const LoadError& e) {
        const QString msg = QString::fromUtf8(e.what());
        QCOMPARE(q(e.file()), path);
        QVERIFY2(msg.startsWith(path + ": ") && !msg.contains('\n'), qPrintable(msg));
        qInfo("%s", qPrintable(msg.mid(path.size() + 2).left(240)));
    } catch (const std::exception& e) {
        QFAIL(qPrintable("threw something other than LoadError: " + QString::fromUtf8(e.what())));
    }
    QVERIFY(timer.elapsed() < 45000);
}

void TestTorchScript::workerCrashes()
{
    const QString path = fixturesDir() + "/nested.pt";
    QString problem = expectLoadError(path, [&] { return readWith(path, shellWorker("kill -SEGV $$")); },
        { "TorchScript", "crashed", "SIGSEGV", "separate worker process" });
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
    problem = expectLoadError(path, [&] { return readWith(path, shellWorker("echo 'terminate called' >&2; kill -ABRT $$")); },
        { "SIGABRT", "terminate called" });
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
}

void TestTorchScript::workerHangs()
{
    const QString path = fixturesDir() + "/nested.pt";
    QElapsedTimer timer;
    timer.start();
    const QString problem = expectLoadError(path, [&] { return readWith(path, shellWorker("sleep 60", 1500)); },
        { "TorchScript", "timeout", "killed" });
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
    QVERIFY2(timer.elapsed() < 10000, qPrintable(QString::number(timer.elapsed()) + " ms"));
}

void TestTorchScript::workerHangsWithGrandchild()
{
    // A worker that exits but leaves a process holding the answer pipe open: the deadline still holds,
    // and the whole process group is killed.
    const QString path = fixturesDir() + "/nested.pt";
    QTemporaryDir dir;
    const QString pidFile = dir.path() + "/grandchild.pid";
    QElapsedTimer timer;
    timer.start();
    const QString problem = expectLoadError(path,
        [&] { return readWith(path, shellWorker("sleep 60 & echo $! > '" + pidFile + "'; exit 0", 1500)); },
        { "timeout" });
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
    QVERIFY(timer.elapsed() < 10000);
    const pid_t grandchild = readBytes(pidFile).trimmed().toInt();
    QVERIFY(grandchild > 0);
    bool gone = false;
    for (int i = 0; i < 100 && !gone; ++i) {
        gone = ::kill(grandchild, 0) != 0 || QFile::exists(QString("/proc/%1").arg(grandchild)) == false;
        // A zombie (reparented, not yet reaped) counts as gone: it runs nothing.
        if (!gone) {
            const QByteArray stat = readBytes(QString("/proc/%1/stat").arg(grandchild));
            gone = stat.contains(") Z ");
        }
        if (!gone)
            QTest::qWait(50);
    }
    QVERIFY2(gone, "the worker's child survived the timeout");
}

void TestTorchScript::workerGarbage()
{
    const QString path = fixturesDir() + "/nested.pt";
    QString problem
        = expectLoadError(path, [&] { return readWith(path, shellWorker("echo '{\"entries\": ['")); }, { "TorchScript", "worker" });
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
    problem = expectLoadError(path, [&] { return readWith(path, shellWorker("echo oops >&2; exit 7")); },
        { "exit code 7", "oops" });
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
    // A forged answer of another protocol version is not trusted either.
    problem = expectLoadError(path,
        [&] { return readWith(path, shellWorker("echo '{\"statelens_torchscript\": 2, \"entries\": []}'")); },
        { "worker" });
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
}

void TestTorchScript::workerMissing()
{
    const QString path = fixturesDir() + "/nested.pt";
    TorchScriptWorker w;
    w.command = { "/nonexistent/statelens", "__torchscript-worker" };
    const QString problem = expectLoadError(path, [&] { return readWith(path, w); },
        { "TorchScript", "could not be started", "/nonexistent/statelens" });
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
}

void TestTorchScript::noWorkerConfigured()
{
    const QString path = fixturesDir() + "/nested.pt";
    const QByteArray env = qgetenv("STATELENS_TORCHSCRIPT_WORKER");
    qunsetenv("STATELENS_TORCHSCRIPT_WORKER");
    setTorchScriptWorker({});
    const QString problem
        = expectLoadError(path, [&] { return openSource(path.toStdString()); }, { "TorchScript", "worker" });
    setTorchScriptWorker(testWorker());
    // The environment variable is the fallback for programs that set nothing.
    qputenv("STATELENS_TORCHSCRIPT_WORKER", "/nonexistent/statelens-from-env");
    TorchScriptWorker fromEnv = torchScriptWorker(); // the registry wins while set
    setTorchScriptWorker({});
    TorchScriptWorker envOnly = torchScriptWorker();
    setTorchScriptWorker(testWorker());
    if (env.isEmpty())
        qunsetenv("STATELENS_TORCHSCRIPT_WORKER");
    else
        qputenv("STATELENS_TORCHSCRIPT_WORKER", env);
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
    QCOMPARE(q(fromEnv.command.front()), test::statelensBinary());
    QCOMPARE(envOnly.command.size(), size_t(2));
    QCOMPARE(q(envOnly.command.front()), QString("/nonexistent/statelens-from-env"));
}

void TestTorchScript::pluginMissing()
{
    const QString path = fixturesDir() + "/nested.pt";
    qputenv("STATELENS_TORCH_PLUGIN", "/nonexistent/libstatelens-torch.so");
    const QString problem = expectLoadError(path, [&] { return openSource(path.toStdString()); },
        { "TorchScript", "plugin", "/nonexistent/libstatelens-torch.so", "libtorch-dev", "STATELENS_WITH_TORCH" });
    qputenv("STATELENS_TORCH_PLUGIN", QByteArray());
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
    if (!pluginBuilt()) {
        // Without the plugin, the default one is missing the same way.
        const QString p2 = expectLoadError(path, [&] { return openSource(path.toStdString()); }, { "libtorch-dev" });
        QVERIFY2(p2.isEmpty(), qPrintable(p2));
    }
}

void TestTorchScript::pluginNotALibrary()
{
    const QString path = fixturesDir() + "/nested.pt";
    const QString notLib = fixturesDir() + "/empty.pt.expected.json";
    qputenv("STATELENS_TORCH_PLUGIN", notLib.toUtf8());
    const QString problem = expectLoadError(path, [&] { return openSource(path.toStdString()); },
        { "TorchScript", "plugin", "could not be used" });
    qputenv("STATELENS_TORCH_PLUGIN", QByteArray());
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
}

void TestTorchScript::memoryLimit()
{
    if (test::sanitized())
        QSKIP("sanitizer builds run the worker without an address-space limit (ASan reserves terabytes)");
    if (!pluginBuilt())
        QSKIP("the TorchScript plugin is not built");
    // 200 MiB of address space cannot even hold LibTorch: the worker fails, the caller reports it.
    const QString path = fixturesDir() + "/nested.pt";
    const QString problem = expectLoadError(path, [&] { return readWith(path, testWorker(0, 200u << 20)); },
        { "TorchScript" });
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
}

void TestTorchScript::containerOption()
{
    const QString path = fixturesDir() + "/nested.pt";
    OpenOptions o;
    o.container = "optimizer";
    const QString problem
        = expectLoadError(path, [&] { return openSource(path.toStdString(), o); }, { "no container 'optimizer'" });
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
}

// ----------------------------------------------------------------------------------------------------
// The sandbox and the executable.

void TestTorchScript::childProcess()
{
    ChildLimits limits;
    limits.timeoutMs = 5000;
    ChildResult r = runChild({ "/bin/sh", "-c", "printf out; printf err >&2; exit 3" }, limits);
    QCOMPARE(int(r.end), int(ChildResult::End::Exited));
    QCOMPARE(r.exitCode, 3);
    QCOMPARE(QByteArray::fromStdString(r.out), QByteArray("out"));
    QCOMPARE(QByteArray::fromStdString(r.err), QByteArray("err"));

    r = runChild({ "/bin/sh", "-c", "kill -SEGV $$" }, limits);
    QCOMPARE(int(r.end), int(ChildResult::End::Signaled));
    QCOMPARE(r.signal, SIGSEGV);
    QVERIFY(q(signalDescription(r.signal)).contains("SIGSEGV"));

    limits.maxStdout = 1000;
    limits.maxStderr = 10;
    r = runChild({ "/bin/sh", "-c", "head -c 100000 /dev/zero >&2; head -c 100000 /dev/zero" }, limits);
    QCOMPARE(int(r.end), int(ChildResult::End::OutputTooLarge));
    QCOMPARE(r.err.size(), size_t(10));

    r = runChild({ "/nonexistent/program" }, limits);
    QCOMPARE(int(r.end), int(ChildResult::End::StartFailed));
    QVERIFY(q(r.startError).contains("No such file"));

    // Descriptor 3 is passed; nothing else of ours leaks into the child.
    QTemporaryDir dir;
    QFile f(dir.path() + "/x");
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("fd3");
    f.close();
    QVERIFY(f.open(QIODevice::ReadOnly));
    limits.maxStdout = 1 << 20;
    r = runChild({ "/bin/sh", "-c", "cat <&3; ls /proc/self/fd | wc -l" }, limits, f.handle());
    QCOMPARE(int(r.end), int(ChildResult::End::Exited));
    QVERIFY2(QByteArray::fromStdString(r.out).startsWith("fd3"), r.out.c_str());
    // 0, 1, 2, 3 and the descriptor `ls` opens on /proc/self/fd.
    QCOMPARE(QByteArray::fromStdString(r.out).mid(3).trimmed().toInt(), 5);

    if (!test::sanitized()) {
        // The address-space limit applies in the child.
        limits.addressSpaceBytes = 64u << 20;
        r = runChild({ "/bin/sh", "-c", "ulimit -v" }, limits);
        QCOMPARE(QByteArray::fromStdString(r.out).trimmed(), QByteArray::number(64 * 1024));
    }
}

void TestTorchScript::cliListsTorchScript()
{
    if (!pluginBuilt())
        QSKIP("the TorchScript plugin is not built");
    const QString path = fixturesDir() + "/quantized_static.pt";
    test::RunResult r = test::runStatelens({ "ls", path, "--format", "json" });
    QVERIFY2(r.exitCode == 0, r.err.constData());
    const QJsonObject doc = QJsonDocument::fromJson(r.out).object();
    QCOMPARE(doc.value("source").toObject().value("format").toString(), QString("torchscript"));
    QVERIFY(doc.value("entries").toArray().size() > 0);
    // A broken archive: exit code 2 and one line on stderr naming the file.
    QTemporaryDir dir;
    const QString broken = dir.path() + "/broken.pt";
    QFile f(broken);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(readBytes(path).left(4000));
    f.close();
    r = test::runStatelens({ "ls", broken });
    QCOMPARE(r.exitCode, 2);
    QCOMPARE(r.err.count('\n'), 1);
    QVERIFY(r.err.startsWith("statelens: " + broken.toUtf8() + ": "));
}

void TestTorchScript::startupLoadsNoLibTorch()
{
    // The promise of the design: listing anything but TorchScript never maps LibTorch.
    const QString st = test::fixturesDir() + "/safetensors";
    const QStringList files = QDir(st).entryList({ "*.safetensors" }, QDir::Files, QDir::Name);
    QVERIFY(!files.isEmpty());
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("LD_DEBUG", "files");
    p.setProcessEnvironment(env);
    p.start(test::statelensBinary(), { "ls", st + "/" + files.front() });
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitCode(), 0);
    const QByteArray trace = p.readAllStandardError();
    QVERIFY2(trace.contains("file="), "LD_DEBUG=files printed nothing (static binary?)");
    QVERIFY2(!trace.contains("libtorch") && !trace.contains("libc10"), "LibTorch was loaded");
    QVERIFY(!trace.contains("libstatelens-torch"));
    // Nor is it linked.
    QProcess ldd;
    ldd.start("ldd", { test::statelensBinary() });
    if (ldd.waitForFinished(30000) && ldd.exitCode() == 0)
        QVERIFY2(!ldd.readAllStandardOutput().contains("libtorch"), "statelens links LibTorch");
}

QTEST_GUILESS_MAIN(TestTorchScript)
#include "tst_torchscript.moc"
