// The statelens executable as a CI job or a user at a terminal meets it: output formats, the JSON
// schema docs/json-output.md documents, container selection, exit codes and error lines.

#include "common/handwritten_safetensors.h"
#include "common/test_files.h"
#include "common/test_paths.h"

#include <QHash>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMap>
#include <QTemporaryDir>
#include <QTest>
#include <QtEndian>

#include <QCryptographicHash>
#include <QDirIterator>
#include <QElapsedTimer>

#include <cmath>
#include <fcntl.h>
#include <map>
#include <poll.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <spawn.h>
#include <linux/perf_event.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

using sl::test::runStatelens;

namespace {

using sl::test::readJson;
using sl::test::readAll;

QString torch2()
{
    return sl::test::fixturesDir() + QStringLiteral("/torch2");
}


QStringList strings(const QJsonArray& a)
{
    QStringList out;
    for (const auto& v : a)
        out << v.toString();
    return out;
}

QStringList names(const QJsonArray& objects, const char* key)
{
    QStringList out;
    for (const auto& v : objects)
        out << v.toObject()[QLatin1String(key)].toString();
    return out;
}

QStringList truthNames(const QString& file)
{
    return names(readJson(torch2() + "/" + file)["entries"].toArray(), "name");
}

QStringList sorted(QStringList l)
{
    l.sort();
    return l;
}


bool writeFile(const QString& path, const QByteArray& bytes)
{
    QFile f(path);
    return f.open(QIODevice::WriteOnly) && f.write(bytes) == bytes.size();
}

// The files directly in `from`, copied into `to` (created).
bool copyFolder(const QString& from, const QString& to)
{
    if (!QDir().mkpath(to))
        return false;
    for (const QString& name : QDir(from).entryList(QDir::Files | QDir::Hidden))
        if (!QFile::copy(from + "/" + name, to + "/" + name))
            return false;
    return true;
}

// Every plain file under `root` (symlinks not followed) with the sha256 of its bytes; symlinks by their target.
QMap<QString, QByteArray> snapshot(const QString& root)
{
    QMap<QString, QByteArray> out;
    QDirIterator it(
        root, QDir::Files | QDir::Hidden | QDir::System | QDir::NoDotAndDotDot, QDirIterator::Subdirectories);
    while (it.hasNext()) {
        const QString path = it.next();
        const QFileInfo info(path);
        out[path] = info.isSymLink() ? "-> " + info.symLinkTarget().toUtf8()
                                     : QCryptographicHash::hash(readAll(path), QCryptographicHash::Sha256).toHex();
    }
    return out;
}

bool isCharDevice(const QString& path, dev_t rdev)
{
    struct stat st { };
    return ::lstat(path.toLocal8Bit().constData(), &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == rdev;
}

// Runs statelens with `env` (NAME=value entries) added to this environment, stdout to `out`; the child's
// minor page faults (getrusage through wait4), or -1 when it did not exit 0.
long minorFaultsOfRun(const QStringList& args, const QStringList& env, const QString& out)
{
    // A null-terminated array of C strings, pointing into `strings`.
    const auto pointersTo = [](std::vector<std::string>& strings) {
        std::vector<char*> out;
        for (auto& s : strings)
            out.push_back(s.data());
        out.push_back(nullptr);
        return out;
    };
    std::vector<std::string> argStrings { sl::test::statelensBinary().toStdString() };
    for (const QString& a : args)
        argStrings.push_back(a.toStdString());
    std::vector<std::string> envStrings;
    for (char** e = environ; *e; ++e)
        if (std::strncmp(*e, "GLIBC_TUNABLES=", 15) != 0)
            envStrings.emplace_back(*e);
    for (const QString& e : env)
        envStrings.push_back(e.toStdString());
    std::vector<char*> argv = pointersTo(argStrings);
    std::vector<char*> envp = pointersTo(envStrings);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out.toLocal8Bit().constData(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = -1;
    const int err = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (err != 0)
        return -1;
    int status = 0;
    rusage usage {};
    if (::wait4(pid, &status, 0, &usage) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return -1;
    return usage.ru_minflt;
}

// The page faults a run of statelens takes, as the kernel's software event counts them, or -1 where this
// process may not open the event or the run failed. The counter is inherited by the child and read once it has exited.
long pageFaultsOfRun(const QStringList& args, const QString& out)
{
    perf_event_attr attr {};
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_PAGE_FAULTS;
    attr.inherit = 1;
    const int fd = static_cast<int>(::syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC));
    if (fd < 0)
        return -1;
    uint64_t before = 0, after = 0;
    const bool ran = ::read(fd, &before, sizeof before) == sizeof before && minorFaultsOfRun(args, {}, out) >= 0
        && ::read(fd, &after, sizeof after) == sizeof after;
    ::close(fd);
    return ran ? static_cast<long>(after - before) : -1;
}

} // namespace

class TestCli : public QObject {
    Q_OBJECT
private:
    QTemporaryDir m_dir;
    QString m_checkpoint;
    QString m_model;

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        auto r = runStatelens({ QStringLiteral("demo"), m_dir.path() });
        QCOMPARE(r.exitCode, 0);
        m_checkpoint = m_dir.filePath(QStringLiteral("checkpoint.pt"));
        m_model = m_dir.filePath(QStringLiteral("model.pt"));
        QVERIFY(QFileInfo::exists(m_checkpoint));
        QVERIFY(QFileInfo::exists(m_model));
    }

    void demoFilesAreTheBundledOnes()
    {
        for (const QString& name : { QStringLiteral("checkpoint.pt"), QStringLiteral("model.pt") }) {
            QFile written(m_dir.filePath(name));
            QFile bundled(sl::test::sourceDir() + QStringLiteral("/resources/demo/") + name);
            QVERIFY(written.open(QIODevice::ReadOnly) && bundled.open(QIODevice::ReadOnly));
            QCOMPARE(written.readAll(), bundled.readAll());
        }
    }

    // `stats` reads values: its JSON agrees with what torch computed for the fixture (tests/fixtures/values).
    // A float checkpoint against its quantized copy: every pair compared by dequantized value, as torch
    // computes |original - dequantized| and the cosine (quantized_groups.safetensors.expected.json).
    void diffValuesAgainstQuantizedCopy()
    {
        const QString dir = sl::test::fixturesDir() + QStringLiteral("/values");
        const auto r = runStatelens({ QStringLiteral("diff"), dir + QStringLiteral("/quantized_groups.original.safetensors"),
            dir + QStringLiteral("/quantized_groups.safetensors"), QStringLiteral("--values"), QStringLiteral("--format"), QStringLiteral("json") });
        QCOMPARE(r.exitCode, 1); // quantized weights do not load into a float model by name alone
        QFile f(dir + QStringLiteral("/quantized_groups.safetensors.expected.json"));
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QJsonObject truth = QJsonDocument::fromJson(f.readAll()).object().value(QStringLiteral("tensors")).toObject();
        int checked = 0;
        for (const QJsonValue& v : QJsonDocument::fromJson(r.out).object().value(QStringLiteral("rows")).toArray()) {
            const QJsonObject row = v.toObject();
            const QJsonObject want = truth.value(row.value(QStringLiteral("a")).toString()).toObject().value(QStringLiteral("vs_original")).toObject();
            if (want.isEmpty())
                continue;
            const QByteArray name = row.value(QStringLiteral("a")).toString().toUtf8();
            QVERIFY2(row.value(QStringLiteral("equal_bytes")) == QJsonValue(false), name);
            QVERIFY2(row.value(QStringLiteral("max_abs_diff")).toDouble() == want.value(QStringLiteral("max_abs_diff")).toDouble(), name);
            QVERIFY2(std::fabs(row.value(QStringLiteral("cosine")).toDouble() - want.value(QStringLiteral("cosine")).toDouble()) < 1e-12, name);
            QVERIFY2(row.value(QStringLiteral("value_note")).toString().startsWith(QStringLiteral("B dequantized: ")), name);
            ++checked;
        }
        QCOMPARE(checked, truth.size());
        // --stored: the packed weight's integers instead, and the note says so.
        const auto st = runStatelens({ QStringLiteral("stats"), dir + QStringLiteral("/quantized_groups.safetensors"), QStringLiteral("--format"),
            QStringLiteral("json"), QStringLiteral("--stored"), QStringLiteral("--filter"), QStringLiteral("o_proj.weight$") });
        QCOMPARE(st.exitCode, 0);
        const QJsonArray rows = QJsonDocument::fromJson(st.out).object().value(QStringLiteral("tensors")).toArray();
        QCOMPARE(rows.size(), 1);
        QCOMPARE(rows[0].toObject().value(QStringLiteral("note")).toString(), QStringLiteral("stored values of its qweight part (dequantizing is off)"));
    }

    // Issue 11 end to end: `diff float_bf16.pt int8wo.pt --values` compares the bfloat16 weights with torchao's
    // dequantization of their int8 copies (torch 2.6 / torchao 0.9 files and the generator's against_float),
    // and `stats` of a per-rank FSDP2 save reads the tensors assembled from both ranks' pieces.
    void torchaoValuesAndPerRankStats()
    {
        const QString dir = sl::test::fixturesDir() + QStringLiteral("/torch2");
        const auto r = runStatelens({ QStringLiteral("diff"), dir + QStringLiteral("/torchao/float_bf16.pt"),
            dir + QStringLiteral("/torchao/int8wo.pt"), QStringLiteral("--values"), QStringLiteral("--format"),
            QStringLiteral("json") });
        QFile f(dir + QStringLiteral("/torchao/int8wo.pt.truth.json"));
        QVERIFY(f.open(QIODevice::ReadOnly));
        QMap<QString, QJsonObject> truth;
        for (const QJsonValue& v :
            QJsonDocument::fromJson(f.readAll()).object().value(QStringLiteral("entries")).toArray())
            truth[v.toObject().value(QStringLiteral("name")).toString()]
                = v.toObject().value(QStringLiteral("against_float")).toObject();
        const QJsonArray rows = QJsonDocument::fromJson(r.out).object().value(QStringLiteral("rows")).toArray();
        QCOMPARE(rows.size(), 4);
        for (const QJsonValue& v : rows) {
            const QJsonObject row = v.toObject();
            const QString name = row.value(QStringLiteral("b")).toString();
            QVERIFY2(row.value(QStringLiteral("max_abs_diff")).toDouble()
                    == truth[name].value(QStringLiteral("max_abs_diff")).toDouble(),
                qPrintable(name));
            QVERIFY2(std::fabs(row.value(QStringLiteral("cosine")).toDouble()
                         - truth[name].value(QStringLiteral("cosine")).toDouble())
                    < 1e-12,
                qPrintable(name));
            if (name.endsWith(QStringLiteral(".weight")))
                QVERIFY2(row.value(QStringLiteral("value_note"))
                             .toString()
                             .startsWith(QStringLiteral("B dequantized: torchao dequantize_affine")),
                    qPrintable(name));
        }
        const auto st = runStatelens({ QStringLiteral("stats"), dir + QStringLiteral("/fsdp2/model_rank0.pt"),
            dir + QStringLiteral("/fsdp2/model_rank1.pt"), QStringLiteral("--format"), QStringLiteral("json"),
            QStringLiteral("--filter"), QStringLiteral("^tok_embeddings") });
        QCOMPARE(st.exitCode, 0);
        const QJsonArray tensors = QJsonDocument::fromJson(st.out).object().value(QStringLiteral("tensors")).toArray();
        QCOMPARE(tensors.size(), 1);
        QFile pr(dir + QStringLiteral("/fsdp2/model.per-rank.truth.json"));
        QVERIFY(pr.open(QIODevice::ReadOnly));
        for (const QJsonValue& v :
            QJsonDocument::fromJson(pr.readAll()).object().value(QStringLiteral("entries")).toArray())
            if (v.toObject().value(QStringLiteral("name")).toString() == QStringLiteral("tok_embeddings.weight")) {
                const QJsonObject want = v.toObject().value(QStringLiteral("values")).toObject();
                QCOMPARE(tensors[0].toObject().value(QStringLiteral("numel")).toInteger(),
                    want.value(QStringLiteral("numel")).toInteger());
                QCOMPARE(tensors[0].toObject().value(QStringLiteral("min")).toDouble(),
                    want.value(QStringLiteral("min")).toDouble());
                QCOMPARE(tensors[0].toObject().value(QStringLiteral("max")).toDouble(),
                    want.value(QStringLiteral("max")).toDouble());
            }
    }

    // A mistyped command gets one line saying so, not the window (or Qt's abort without a display).
    void mistypedCommand()
    {
        const auto r = runStatelens({ QStringLiteral("list"), QStringLiteral("model.safetensors") });
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("'list' is neither a command nor a file"), r.err.constData());
    }

    void statsJsonAgreesWithTorch()
    {
        const QString dir = sl::test::fixturesDir() + QStringLiteral("/values");
        auto r = runStatelens({ QStringLiteral("stats"), dir + QStringLiteral("/dtypes.pt"), QStringLiteral("--format"), QStringLiteral("json"),
            QStringLiteral("--filter"), QStringLiteral("^(f32|i8|bool)$") });
        QCOMPARE(r.exitCode, 0);
        const QJsonObject doc = QJsonDocument::fromJson(r.out).object();
        QFile f(dir + QStringLiteral("/dtypes.pt.expected.json"));
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QJsonObject truth = QJsonDocument::fromJson(f.readAll()).object().value(QStringLiteral("tensors")).toObject();
        const QJsonArray tensors = doc.value(QStringLiteral("tensors")).toArray();
        QCOMPARE(tensors.size(), 3); // the filter kept three
        for (const QJsonValue& v : tensors) {
            const QJsonObject t = v.toObject();
            const QJsonObject want = truth.value(t.value(QStringLiteral("name")).toString()).toObject();
            QVERIFY(!want.isEmpty());
            QCOMPARE(t.value(QStringLiteral("min")).toDouble(), want.value(QStringLiteral("min")).toDouble());
            QCOMPARE(t.value(QStringLiteral("max")).toDouble(), want.value(QStringLiteral("max")).toDouble());
            QCOMPARE(t.value(QStringLiteral("nan")).toInteger(), want.value(QStringLiteral("nan")).toInteger());
            QCOMPARE(t.value(QStringLiteral("zeros")).toInteger(), want.value(QStringLiteral("zeros")).toInteger());
            QCOMPARE(t.value(QStringLiteral("histogram")).toObject().value(QStringLiteral("counts")).toArray(),
                want.value(QStringLiteral("histogram")).toObject().value(QStringLiteral("counts")).toArray());
            QCOMPARE(t.value(QStringLiteral("xxh3")).toString().size(), 16);
        }
        // The table names what it could not summarise and why.
        r = runStatelens({ QStringLiteral("stats"), m_checkpoint });
        QCOMPARE(r.exitCode, 0);
        QVERIFY(r.out.startsWith("NAME"));
        QVERIFY(r.out.contains("_orig_mod.embed.weight"));
        r = runStatelens({ QStringLiteral("stats"), m_checkpoint, QStringLiteral("--filter"), QStringLiteral("(") });
        QCOMPARE(r.exitCode, 2);
        QVERIFY(r.err.contains("--filter"));
    }

    // diff --values and --match-content: value fields on every JSON row, CSV columns, content matches
    // and the rules they suggest (tests/fixtures/values/compare_*.pt; core/values is checked against torch
    // in tst_values).
    void diffValuesAndContentMatches()
    {
        const QString dir = sl::test::fixturesDir() + QStringLiteral("/values");
        const QString a = dir + QStringLiteral("/compare_a.pt"), b = dir + QStringLiteral("/compare_b.pt");
        auto r = runStatelens({ QStringLiteral("diff"), a, b, QStringLiteral("--values"), QStringLiteral("--match-content"),
            QStringLiteral("--format"), QStringLiteral("json") });
        QCOMPARE(r.exitCode, 1); // 5 missing, 5 unexpected
        const QJsonObject doc = QJsonDocument::fromJson(r.out).object();
        QHash<QString, QJsonObject> rows;
        for (const QJsonValue& v : doc.value(QStringLiteral("rows")).toArray())
            rows.insert(v.toObject().value(QStringLiteral("a")).toString() + QLatin1Char('|') + v.toObject().value(QStringLiteral("b")).toString(), v.toObject());
        const QJsonObject same = rows.value(QStringLiteral("same.weight|same.weight"));
        QCOMPARE(same.value(QStringLiteral("equal_bytes")).toBool(), true);
        QCOMPARE(same.value(QStringLiteral("max_abs_diff")).toDouble(), 0.0);
        const QJsonObject negated = rows.value(QStringLiteral("negated.bias|negated.bias"));
        QCOMPARE(negated.value(QStringLiteral("equal_bytes")).toBool(), false);
        QVERIFY(std::fabs(negated.value(QStringLiteral("cosine")).toDouble() + 1.0) < 1e-9);
        // A row with one side has nulls.
        const QJsonObject onlyA = rows.value(QStringLiteral("view_base|"));
        QVERIFY(onlyA.contains(QStringLiteral("equal_bytes")) && onlyA.value(QStringLiteral("equal_bytes")).isNull());
        const QJsonArray matches = doc.value(QStringLiteral("content_matches")).toArray();
        QCOMPARE(matches.size(), 4);
        bool suggested = false;
        for (const QJsonValue& s : doc.value(QStringLiteral("suggestions")).toArray())
            for (const QJsonValue& rule : s.toObject().value(QStringLiteral("rules")).toArray())
                suggested = suggested || rule.toObject().value(QStringLiteral("pattern")).toString().contains(QStringLiteral("attn\\.q"));
        QVERIFY(suggested);
        // Every other format carries the values too.
        r = runStatelens({ QStringLiteral("diff"), a, b, QStringLiteral("--values"), QStringLiteral("--format"), QStringLiteral("csv") });
        QVERIFY(r.out.startsWith("status,a,b,reason,rule,a_shape,b_shape,a_dtype,b_dtype,explanation,equal_bytes,max_abs_diff,max_rel_diff,cosine\r\n"));
        for (const char* format : { "text", "md", "html", "junit" }) {
            r = runStatelens({ QStringLiteral("diff"), a, b, QStringLiteral("--values"), QStringLiteral("--format"), QString::fromLatin1(format) });
            QVERIFY2(r.out.contains("negated.bias") && r.out.contains("0.5"), format); // scaled.weight's max rel diff
        }
    }

    void lsTable()
    {
        auto r = runStatelens({ QStringLiteral("ls"), m_checkpoint });
        QCOMPARE(r.exitCode, 0);
        QVERIFY(r.err.isEmpty());
        QVERIFY(r.out.contains("format:    torch-zip"));
        QVERIFY(r.out.contains("container: model"));
        QVERIFY(r.out.contains("_orig_mod.embed.weight"));
        QVERIFY(r.out.contains("[104, 32]"));
        QVERIFY(r.out.contains("19 entries"));
    }

    void verboseLogsToStderr()
    {
        // --verbose says on stderr what the readers did; stdout (the listing) is the same with or without it.
        const auto plain = runStatelens({ QStringLiteral("ls"), m_checkpoint, QStringLiteral("--format"), QStringLiteral("json") });
        QCOMPARE(plain.exitCode, 0);
        QVERIFY(plain.err.isEmpty());
        for (const QStringList& args :
            { QStringList { QStringLiteral("-v"), QStringLiteral("ls"), m_checkpoint, QStringLiteral("--format"), QStringLiteral("json") },
                QStringList { QStringLiteral("ls"), m_checkpoint, QStringLiteral("--format"), QStringLiteral("json"),
                    QStringLiteral("--verbose") } }) {
            const auto r = runStatelens(args);
            QCOMPARE(r.exitCode, 0);
            QCOMPARE(r.out, plain.out);
            const QByteArray path = m_checkpoint.toUtf8();
            QVERIFY2(r.err.contains("statelens: " + path + ": " + QByteArray::number(QFileInfo(m_checkpoint).size())
                         + " bytes, read as torch-zip\n"),
                r.err.constData());
            QVERIFY2(r.err.contains("statelens: " + path + ": 19 entries (torch-zip)"), r.err.constData());
        }
        // A folder says how it was opened (a DCP save here: its data files are named, not read).
        const QString dcp = sl::test::fixturesDir() + QStringLiteral("/dcp/t113_two_ranks");
        const auto r = runStatelens({ QStringLiteral("-v"), QStringLiteral("ls"), dcp });
        QCOMPARE(r.exitCode, 0);
        QVERIFY2(r.err.contains("statelens: " + dcp.toUtf8() + ": a torch.distributed.checkpoint folder\n"), r.err.constData());
        QVERIFY2(r.err.contains("over 2 data files (their bytes are not read)"), r.err.constData());
    }

    void lsJsonFollowsTheSchema()
    {
        auto r = runStatelens({ QStringLiteral("ls"), m_checkpoint, QStringLiteral("--format"), QStringLiteral("json") });
        QCOMPARE(r.exitCode, 0);
        QJsonParseError err;
        QJsonObject doc = QJsonDocument::fromJson(r.out, &err).object();
        QCOMPARE(err.error, QJsonParseError::NoError);
        QJsonObject source = doc.value(QStringLiteral("source")).toObject();
        QCOMPARE(source.value(QStringLiteral("path")).toString(), m_checkpoint);
        QCOMPARE(source.value(QStringLiteral("format")).toString(), QStringLiteral("torch-zip"));
        QCOMPARE(source.value(QStringLiteral("container")).toString(), QStringLiteral("model"));
        QJsonArray entries = doc.value(QStringLiteral("entries")).toArray();
        QCOMPARE(entries.size(), 19);
        QJsonObject first = entries.at(0).toObject();
        QCOMPARE(first.value(QStringLiteral("name")).toString(), QStringLiteral("_orig_mod.embed.weight"));
        QCOMPARE(first.value(QStringLiteral("dtype")).toString(), QStringLiteral("float32"));
        QCOMPARE(first.value(QStringLiteral("shape")).toArray(), (QJsonArray { 104, 32 }));
        QJsonObject loc = first.value(QStringLiteral("location")).toObject();
        QCOMPARE(loc.value(QStringLiteral("length")).toInt(), 104 * 32 * 4);
        QVERIFY(loc.value(QStringLiteral("offset")).toInteger() % 64 == 0); // torch aligns records to 64 bytes
        for (const auto& f : doc.value(QStringLiteral("findings")).toArray()) {
            QString sev = f.toObject().value(QStringLiteral("severity")).toString();
            QVERIFY(sev == QStringLiteral("info") || sev == QStringLiteral("warning") || sev == QStringLiteral("danger"));
            QVERIFY(!f.toObject().value(QStringLiteral("message")).toString().isEmpty());
        }
    }

    void tiedWeightsAreVisible()
    {
        auto r = runStatelens({ QStringLiteral("ls"), m_model, QStringLiteral("--format"), QStringLiteral("json") });
        QCOMPARE(r.exitCode, 0);
        QJsonArray entries = QJsonDocument::fromJson(r.out).object().value(QStringLiteral("entries")).toArray();
        QString embedStorage;
        QString headStorage;
        for (const auto& v : entries) {
            QJsonObject e = v.toObject();
            QString storage = e.value(QStringLiteral("location")).toObject().value(QStringLiteral("storage")).toString();
            if (e.value(QStringLiteral("name")).toString() == QStringLiteral("embed.weight"))
                embedStorage = storage;
            if (e.value(QStringLiteral("name")).toString() == QStringLiteral("lm_head.weight")) {
                headStorage = storage;
                QCOMPARE(e.value(QStringLiteral("attributes")).toObject().value(QStringLiteral("tied_with")).toString(),
                    QStringLiteral("embed.weight"));
            }
        }
        QVERIFY(!embedStorage.isEmpty());
        QCOMPARE(headStorage, embedStorage);
    }

    void containers()
    {
        auto r = runStatelens({ QStringLiteral("ls"), m_checkpoint, QStringLiteral("--containers") });
        QCOMPARE(r.exitCode, 0);
        QVERIFY(r.out.contains("* model"));
        QVERIFY(r.out.contains("optimizer  [optimizer"));

        r = runStatelens({ QStringLiteral("ls"), m_checkpoint, QStringLiteral("--container"), QStringLiteral("optimizer"),
            QStringLiteral("--format"), QStringLiteral("json") });
        QCOMPARE(r.exitCode, 0);
        QJsonObject doc = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(doc.value(QStringLiteral("source")).toObject().value(QStringLiteral("container")).toString(),
            QStringLiteral("optimizer"));
        QCOMPARE(doc.value(QStringLiteral("entries")).toArray().at(0).toObject().value(QStringLiteral("name")).toString(),
            QStringLiteral("state.0.step"));
    }

    void errorsAreOneLineWithExitCode2_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("needle");
        QTest::addRow("missing file") << QStringList { QStringLiteral("ls"), QStringLiteral("/nonexistent/x.pt") }
                                      << QStringLiteral("/nonexistent/x.pt: cannot open");
        QTest::addRow("unknown container")
            << QStringList { QStringLiteral("ls"), QStringLiteral("@checkpoint"), QStringLiteral("--container"), QStringLiteral("nope") }
            << QStringLiteral("no container 'nope'");
        QTest::addRow("directory without checkpoint") << QStringList { QStringLiteral("ls"), QStringLiteral("@dir") }
                                                      << QStringLiteral("holds no checkpoint");
        QTest::addRow("bad format option")
            << QStringList { QStringLiteral("ls"), QStringLiteral("@checkpoint"), QStringLiteral("--format"), QStringLiteral("xml") }
            << QStringLiteral("xml");
    }

    void errorsAreOneLineWithExitCode2()
    {
        QFETCH(QStringList, args);
        QFETCH(QString, needle);
        QTemporaryDir empty;
        for (QString& a : args) {
            if (a == QStringLiteral("@checkpoint"))
                a = m_checkpoint;
            if (a == QStringLiteral("@dir"))
                a = empty.path();
        }
        auto r = runStatelens(args);
        QCOMPARE(r.exitCode, 2);
        QVERIFY(r.out.isEmpty());
        QVERIFY2(QString::fromUtf8(r.err).contains(needle), r.err.constData());
    }

    void corruptFileIsOneLine()
    {
        QTemporaryDir dir;
        QFile f(dir.filePath(QStringLiteral("cut.pt")));
        QFile src(m_checkpoint);
        QVERIFY(src.open(QIODevice::ReadOnly) && f.open(QIODevice::WriteOnly));
        f.write(src.read(5000)); // a zip cut short: no central directory
        f.close();
        auto r = runStatelens({ QStringLiteral("ls"), f.fileName() });
        QCOMPARE(r.exitCode, 2);
        QCOMPARE(r.err.count('\n'), 1);
        QVERIFY2(r.err.startsWith("statelens: " + f.fileName().toUtf8() + ": "), r.err.constData());
    }

    void failOn()
    {
        QTemporaryDir dir;
        // A legacy file would be nicer; a safetensors file with trailing bytes is simplest to build.
        QByteArray header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
        while ((header.size() + 8) % 8)
            header += ' ';
        QByteArray file;
        quint64 n = static_cast<quint64>(header.size());
        for (int i = 0; i < 8; ++i)
            file += static_cast<char>((n >> (8 * i)) & 0xff);
        file += header + QByteArray(4, '\0') + QByteArray("junk");
        QFile f(dir.filePath(QStringLiteral("t.safetensors")));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(file);
        f.close();
        QCOMPARE(runStatelens({ QStringLiteral("ls"), f.fileName() }).exitCode, 0);
        QCOMPARE(runStatelens({ QStringLiteral("ls"), f.fileName(), QStringLiteral("--fail-on"), QStringLiteral("danger") }).exitCode, 1);
        QCOMPARE(runStatelens({ QStringLiteral("ls"), m_model, QStringLiteral("--fail-on"), QStringLiteral("warning") }).exitCode, 0);
    }

    void outputFileIsWrittenAtomically()
    {
        QTemporaryDir dir;
        QString out = dir.filePath(QStringLiteral("report.json"));
        auto r = runStatelens({ QStringLiteral("ls"), m_checkpoint, QStringLiteral("--format"), QStringLiteral("json"),
            QStringLiteral("-o"), out });
        QCOMPARE(r.exitCode, 0);
        QVERIFY(r.out.isEmpty());
        QFile f(out);
        QVERIFY(f.open(QIODevice::ReadOnly));
        auto stdoutRun = runStatelens({ QStringLiteral("ls"), m_checkpoint, QStringLiteral("--format"), QStringLiteral("json") });
        QCOMPARE(f.readAll(), stdoutRun.out);
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files).size(), 1); // no temporary left behind
    }

    // diff: 0 when a strict load would succeed, 1 when it would not, 2 on errors, one line each.
    // Inputs are never written over: an -o that reaches a file the command reads, by its name, a symlink or
    // a hard link, is one line and exit 2, and no file changes (nor is a temporary one left behind).
    void outputOntoAnInputIsRefused_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("output");
        const QStringList json { "--format", "json" };
        QTest::newRow("ls A -o A") << QStringList { "ls", "@/A.pt", "--format", "json" } << "@/A.pt";
        QTest::newRow("ls --containers") << QStringList { "ls", "@/A.pt", "--containers" } << "@/A.pt";
        QTest::newRow("diff A B -o B") << QStringList { "diff", "@/A.pt", "@/B.pt" } << "@/B.pt";
        QTest::newRow("diff A B -o A, json")
            << QStringList { "diff", "@/A.pt", "@/B.pt", "--format", "json" } << "@/A.pt";
        QTest::newRow("hard link to A") << QStringList { "ls", "@/A.pt" } << "@/hardlink.json";
        QTest::newRow("symlink to A") << QStringList { "ls", "@/A.pt" } << "@/symlink.json";
        QTest::newRow("symlink to B, diff") << QStringList { "diff", "@/A.pt", "@/B.pt" } << "@/symlink-b.json";
        QTest::newRow("stats A -o A") << QStringList { "stats", "@/A.pt" } << "@/A.pt";
        QTest::newRow("suggest A B -o A") << QStringList { "suggest", "@/A.pt", "@/B.pt" } << "@/A.pt";
        QTest::newRow("DCP .metadata") << QStringList { "ls", "@/dcp" } << "@/dcp/.metadata";
        QTest::newRow("DCP data file") << QStringList { "ls", "@/dcp" } << "@/dcp/__1_0.distcp";
        QTest::newRow("DCP named by a symlink") << QStringList { "ls", "@/dcp-link" } << "@/dcp/__0_0.distcp";
        QTest::newRow("DCP stats into .metadata") << QStringList { "stats", "@/dcp/.metadata" } << "@/dcp/.metadata";
        QTest::newRow("a shard") << QStringList { "ls", "@/index/model.safetensors.index.json" }
                                 << "@/index/model-00002-of-00003.safetensors";
        QTest::newRow("the index") << QStringList { "ls", "@/index" } << "@/index/model.safetensors.index.json";
        QTest::newRow("a shard, diff") << QStringList { "diff", "@/index", "@/A.pt" }
                                       << "@/index/model-00003-of-00003.safetensors";
        QTest::newRow("a rank file") << QStringList { "ls", "@/ranks/model_rank0.pt", "@/ranks/model_rank1.pt" }
                                     << "@/ranks/model_rank1.pt";
        QTest::newRow("a rank file of a folder") << QStringList { "ls", "@/ranks" } << "@/ranks/model_rank0.pt";
        QTest::newRow("--rules of diff") << QStringList { "diff", "@/A.pt", "@/B.pt", "--rules", "@/rules.yaml" }
                                         << "@/rules.yaml";
        QTest::newRow("--rules of suggest")
            << QStringList { "suggest", "@/A.pt", "@/B.pt", "--rules", "@/rules.yaml" } << "@/rules.yaml";
        QTest::newRow("rules export") << QStringList { "rules", "export", "@/rules.yaml", "--to", "yaml" }
                                      << "@/rules.yaml";
        QTest::newRow("rules export --keys")
            << QStringList { "rules", "export", "@/rules.yaml", "--to", "csv", "--keys", "@/A.pt" } << "@/A.pt";
        QTest::newRow("rules import") << QStringList { "rules", "import", "@/key_mapping.json" }
                                      << "@/key_mapping.json";
    }

    void outputOntoAnInputIsRefused()
    {
        QFETCH(QStringList, args);
        QFETCH(QString, output);
        QTemporaryDir tmp;
        const QString d = tmp.path();
        QVERIFY(QFile::copy(m_checkpoint, d + "/A.pt") && QFile::copy(m_model, d + "/B.pt"));
        QCOMPARE(
            ::link(QFile::encodeName(d + "/A.pt").constData(), QFile::encodeName(d + "/hardlink.json").constData()), 0);
        QVERIFY(QFile::link("A.pt", d + "/symlink.json") && QFile::link(d + "/B.pt", d + "/symlink-b.json"));
        QVERIFY(copyFolder(sl::test::fixturesDir() + "/dcp/t113_two_ranks", d + "/dcp"));
        QVERIFY(QFile::link("dcp", d + "/dcp-link"));
        QVERIFY(copyFolder(sl::test::fixturesDir() + "/index/st_sharded", d + "/index"));
        QVERIFY(QDir().mkpath(d + "/ranks"));
        for (const char* rank : { "model_rank0.pt", "model_rank1.pt" })
            QVERIFY(QFile::copy(torch2() + "/fsdp2/" + rank, d + "/ranks/" + rank));
        QVERIFY(writeFile(d + "/rules.yaml", "version: 1\nrules:\n  - pattern: '^_orig_mod\\.'\n    replace: ''\n"));
        QVERIFY(writeFile(d + "/key_mapping.json", R"({"^_orig_mod\\.": ""})"));
        for (QString& a : args)
            a.replace("@", d);
        output.replace("@", d);

        const QMap<QString, QByteArray> before = snapshot(d);
        QVERIFY(before.contains(d + "/dcp/.metadata") && before.contains(d + "/symlink.json"));
        auto r = runStatelens(args + QStringList { "-o", output });
        QCOMPARE(r.exitCode, 2);
        QVERIFY(r.out.isEmpty());
        QCOMPARE(r.err.count('\n'), 1);
        QVERIFY2(r.err.startsWith("statelens: " + output.toUtf8() + ": ") && r.err.contains("input")
                && r.err.contains("nothing was written"),
            r.err.constData());
        QCOMPARE(snapshot(d), before);
        // The command itself works: the same run writes elsewhere.
        auto ok = runStatelens(args + QStringList { "-o", d + "/elsewhere.out" });
        QVERIFY2(ok.exitCode == 0 || ok.exitCode == 1, ok.err.constData());
        QVERIFY(QFileInfo(d + "/elsewhere.out").size() > 0);
    }

    // -o onto a symlink writes the file it points to (atomically, beside it) and leaves the link; an existing
    // file keeps its permissions; a dangling link's target is created.
    void outputThroughASymlinkWritesItsTarget()
    {
        QTemporaryDir tmp;
        const QString d = tmp.path();
        QVERIFY(QDir().mkpath(d + "/real") && QDir().mkpath(d + "/links"));
        QVERIFY(writeFile(d + "/real/report.json", "old"));
        QCOMPARE(::chmod(QFile::encodeName(d + "/real/report.json").constData(), 0640), 0);
        QVERIFY(QFile::link("../real/report.json", d + "/links/report.json"));
        QVERIFY(QFile::link("../real/new.json", d + "/links/new.json")); // dangling
        const QByteArray expected = runStatelens({ "ls", m_checkpoint, "--format", "json" }).out;
        QVERIFY(!expected.isEmpty());
        for (const char* name : { "report.json", "new.json" }) {
            const QString link = d + "/links/" + name;
            auto r = runStatelens({ "ls", m_checkpoint, "--format", "json", "-o", link });
            QVERIFY2(r.exitCode == 0, r.err.constData());
            QVERIFY2(QFileInfo(link).isSymLink(), name);
            QCOMPARE(readAll(d + "/real/" + name), expected);
        }
        struct stat st { };
        QVERIFY(::stat(QFile::encodeName(d + "/real/report.json").constData(), &st) == 0);
        QCOMPARE(st.st_mode & 07777, mode_t(0640));
        QCOMPARE(sorted(QDir(d + "/real").entryList(QDir::Files | QDir::Hidden)),
            QStringList({ "new.json", "report.json" }));
        QCOMPARE(QDir(d + "/links").entryList(QDir::Files | QDir::Hidden | QDir::System).size(), 2);
        // A folder is no place to write.
        auto dir = runStatelens({ "ls", m_checkpoint, "-o", d + "/real" });
        QCOMPARE(dir.exitCode, 2);
        QVERIFY2(dir.err.contains("is a directory"), dir.err.constData());
    }

    // -o onto a FIFO writes into it: the reader gets the output, and the FIFO stays a FIFO. Bounded: a run
    // that replaced the FIFO instead would leave this reader waiting until the deadline.
    void outputIntoAFifo()
    {
        QTemporaryDir tmp;
        const QString fifo = tmp.filePath("out.fifo");
        QCOMPARE(::mkfifo(QFile::encodeName(fifo).constData(), 0600), 0);
        const QByteArray expected = runStatelens({ "ls", m_checkpoint, "--format", "json" }).out;
        const int fd = ::open(QFile::encodeName(fifo).constData(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        QVERIFY(fd >= 0);
        QProcess p;
        p.start(sl::test::statelensBinary(), { "ls", m_checkpoint, "--format", "json", "-o", fifo });
        QByteArray got;
        QElapsedTimer timer;
        timer.start();
        bool eof = false;
        while (!eof && timer.elapsed() < 30000) {
            pollfd pfd { fd, POLLIN, 0 };
            // Before a writer comes, Linux reports nothing on the FIFO; afterwards data, then the hang-up.
            if (::poll(&pfd, 1, 100) <= 0)
                continue;
            char buf[65536];
            const ssize_t n = ::read(fd, buf, sizeof buf);
            if (n > 0)
                got.append(buf, n);
            else if (n == 0)
                eof = true;
        }
        ::close(fd);
        QVERIFY(p.waitForFinished(30000));
        QVERIFY2(eof, "the FIFO's reader got no end of file");
        QCOMPARE(p.exitCode(), 0);
        QCOMPARE(got, expected);
        struct stat st { };
        QVERIFY(::lstat(QFile::encodeName(fifo).constData(), &st) == 0 && S_ISFIFO(st.st_mode));
    }

    // -o onto a character device writes into it and leaves it a device. As root this is a /dev/null of the
    // test's own (mknod c 1 3): a regression must not replace the system's /dev/null. As anyone else it is
    // /dev/null itself, which replacing would need a temporary file in /dev.
    void outputIntoACharacterDevice()
    {
        QTemporaryDir tmp;
        QString device = QStringLiteral("/dev/null");
        if (::geteuid() == 0) {
            device = tmp.filePath("null");
            QCOMPARE(::mknod(QFile::encodeName(device).constData(), S_IFCHR | 0666, makedev(1, 3)), 0);
        }
        QVERIFY(isCharDevice(device, makedev(1, 3)));
        auto r = runStatelens({ "ls", m_checkpoint, "--format", "json", "-o", device });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY(r.out.isEmpty());
        QVERIFY(isCharDevice(device, makedev(1, 3)));
        QCOMPARE(QDir(tmp.path()).entryList(QDir::Files | QDir::System | QDir::Hidden).size(),
            device.startsWith(tmp.path()) ? 1 : 0);
    }

    // A FIFO (or a device) given as an input is one line and exit 2 at once: opening it for reading would
    // wait for a writer forever. The deadline turns a regression into a failure rather than a hang.
    void fifoInputsExitAtOnce_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("needle");
        const QString fifo = "is a FIFO, not a regular file";
        QTest::newRow("ls") << QStringList { "ls", "@fifo" } << fifo;
        QTest::newRow("ls, json") << QStringList { "ls", "@fifo", "--format", "json" } << fifo;
        QTest::newRow("ls through a symlink") << QStringList { "ls", "@link" } << fifo;
        QTest::newRow("stats") << QStringList { "stats", "@fifo" } << fifo;
        QTest::newRow("diff B") << QStringList { "diff", "@A", "@fifo" } << fifo;
        QTest::newRow("diff --rules") << QStringList { "diff", "@A", "@B", "--rules", "@fifo" } << fifo;
        QTest::newRow("suggest --rules") << QStringList { "suggest", "@A", "@B", "--rules", "@fifo" } << fifo;
        QTest::newRow("rules export") << QStringList { "rules", "export", "@fifo", "--to", "yaml" } << fifo;
        QTest::newRow("rules import") << QStringList { "rules", "import", "@fifo" } << fifo;
        QTest::newRow("rules export --keys")
            << QStringList { "rules", "export", "@rules", "--to", "csv", "--keys", "@fifo" } << fifo;
        QTest::newRow("device") << QStringList { "ls", "/dev/zero" } << "is a character device, not a regular file";
        QTest::newRow("device as rules") << QStringList { "rules", "import", "/dev/zero" } << "is a character device";
    }

    void fifoInputsExitAtOnce()
    {
        QFETCH(QStringList, args);
        QFETCH(QString, needle);
        QTemporaryDir tmp;
        const QString fifo = tmp.filePath("input.pt");
        QCOMPARE(::mkfifo(QFile::encodeName(fifo).constData(), 0600), 0);
        QVERIFY(QFile::link(fifo, tmp.filePath("link.pt")));
        QVERIFY(writeFile(tmp.filePath("rules.yaml"), "version: 1\nrules: []\n"));
        for (QString& a : args)
            a = a == "@fifo"    ? fifo
                : a == "@link"  ? tmp.filePath("link.pt")
                : a == "@A"     ? m_checkpoint
                : a == "@B"     ? m_model
                : a == "@rules" ? tmp.filePath("rules.yaml")
                                : a;
        QElapsedTimer timer;
        timer.start();
        auto r = runStatelens(args, 10000);
        QVERIFY2(r.exitCode == 2, r.err.constData());
        QVERIFY2(timer.elapsed() < 5000, qPrintable(QString::number(timer.elapsed())));
        QCOMPARE(r.err.count('\n'), 1);
        QVERIFY2(QString::fromUtf8(r.err).contains(needle), r.err.constData());
    }

    void diffExitCodes()
    {
        QCOMPARE(runStatelens({ "diff", m_checkpoint, m_model }).exitCode, 1);
        QCOMPARE(runStatelens({ "diff", m_model, m_model }).exitCode, 0);
        auto missing = runStatelens({ "diff", m_dir.filePath("absent.pt"), m_model });
        QCOMPARE(missing.exitCode, 2);
        QCOMPARE(missing.err.trimmed().count('\n'), 0);
        QTemporaryDir dir;
        QFile bad(dir.filePath("bad.yaml"));
        QVERIFY(bad.open(QIODevice::WriteOnly));
        bad.write("version: 1\nrules:\n  - pattern: '^model\\.(layers'\n    replace: x\n");
        bad.close();
        auto badRules = runStatelens({ "diff", m_checkpoint, m_model, "--rules", bad.fileName() });
        QCOMPARE(badRules.exitCode, 2);
        QVERIFY2(badRules.err.contains("rule 1") && badRules.err.contains("position"), badRules.err.constData());
        QCOMPARE(badRules.err.trimmed().count('\n'), 0);
    }

    // The JSON report follows the schema in docs/json-output.md, and its summary counts its rows.
    void diffJsonSchema()
    {
        auto r = runStatelens({ "diff", m_checkpoint, m_model, "--format", "json" });
        QCOMPARE(r.exitCode, 1);
        const QJsonObject o = QJsonDocument::fromJson(r.out).object();
        for (const char* k : { "a", "b", "rules", "summary", "rows" })
            QVERIFY2(o.contains(k), k);
        QCOMPARE(o["a"].toObject()["path"].toString(), m_checkpoint);
        std::map<QString, int> counted;
        for (const auto& v : o["rows"].toArray()) {
            const QJsonObject row = v.toObject();
            for (const char* k : { "status", "a", "b", "reason", "explanation", "rule" })
                QVERIFY2(row.contains(k), k);
            ++counted[row["status"].toString()];
            if (row["status"].toString() == "missing")
                QVERIFY(row["a"].isNull() && row["b"].isString());
            if (row["status"].toString() == "unexpected")
                QVERIFY(row["b"].isNull() && row["a"].isString());
        }
        const QJsonObject summary = o["summary"].toObject();
        for (const char* k : { "match", "renamed", "shape_mismatch", "dtype_mismatch", "missing", "unexpected" })
            QCOMPARE(summary[k].toInt(), counted[k]);
        QVERIFY(counted["unexpected"] > 0 && counted["missing"] > 0);
        QVERIFY(!summary["load_succeeds"].toBool());
        // Picking the optimizer state on A's side is one flag, and the report says so.
        auto opt = runStatelens({ "diff", m_checkpoint, m_model, "--container-a", "optimizer", "--format", "json" });
        QCOMPARE(QJsonDocument::fromJson(opt.out).object()["a"].toObject()["container"].toString(), QStringLiteral("optimizer"));
    }

    // suggest writes rules that a follow-up diff applies: what remains is what no rename can fix.
    void suggestThenDiff()
    {
        QTemporaryDir dir;
        const QString rules = dir.filePath("rules.yaml");
        auto s = runStatelens({ "suggest", m_checkpoint, m_model, "-o", rules });
        QCOMPARE(s.exitCode, 0);
        QVERIFY2(s.err.contains("_orig_mod."), s.err.constData());
        QFile f(rules);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray text = f.readAll();
        QVERIFY2(text.contains("# strip"), text.constData()); // the title as a comment
        QVERIFY(text.contains("version: 1"));
        auto before = QJsonDocument::fromJson(runStatelens({ "diff", m_checkpoint, m_model, "--format", "json" }).out).object();
        auto d = runStatelens({ "diff", m_checkpoint, m_model, "--rules", rules, "--format", "json" });
        auto after = QJsonDocument::fromJson(d.out).object();
        QVERIFY(after["summary"].toObject()["renamed"].toInt() > 0);
        QVERIFY(after["summary"].toObject()["unexpected"].toInt() < before["summary"].toObject()["unexpected"].toInt());
        QVERIFY(after["summary"].toObject()["missing"].toInt() < before["summary"].toObject()["missing"].toInt());
        for (const auto& v : after["rows"].toArray())
            if (v.toObject()["status"].toString() == "renamed")
                QVERIFY(v.toObject()["rule"].isDouble());
    }

    void diffFormats_data()
    {
        QTest::addColumn<QString>("format");
        QTest::addColumn<QByteArray>("marker");
        QTest::newRow("text") << "text" << QByteArray("load_state_dict");
        QTest::newRow("json") << "json" << QByteArray("\"summary\"");
        QTest::newRow("md") << "md" << QByteArray("|");
        QTest::newRow("csv") << "csv" << QByteArray("status,a,b");
        QTest::newRow("html") << "html" << QByteArray("<html");
        QTest::newRow("junit") << "junit" << QByteArray("<testsuite");
    }

    // Every format goes to a file atomically (nothing else left in the folder) and equals stdout.
    void diffFormats()
    {
        QFETCH(QString, format);
        QFETCH(QByteArray, marker);
        QTemporaryDir dir;
        const QString out = dir.filePath("report");
        auto r = runStatelens({ "diff", m_checkpoint, m_model, "--format", format, "-o", out });
        QCOMPARE(r.exitCode, 1);
        QFile f(out);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray written = f.readAll();
        QVERIFY2(written.contains(marker), written.left(200).constData());
        QCOMPARE(written, runStatelens({ "diff", m_checkpoint, m_model, "--format", format }).out);
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files).size(), 1);
        if (format == "html")
            QVERIFY(!written.contains("http://") && !written.contains("https://") && !written.contains("src="));
    }

    // Suggested rules export to every format; the HF key_mapping round-trips through import.
    void rulesExportImport()
    {
        QTemporaryDir dir;
        const QString rules = dir.filePath("rules.yaml");
        QCOMPARE(runStatelens({ "suggest", m_checkpoint, m_model, "-o", rules }).exitCode, 0);
        for (const char* to : { "python", "yaml", "json" }) {
            auto r = runStatelens({ "rules", "export", rules, "--to", to });
            QVERIFY2(r.exitCode == 0 && !r.out.isEmpty(), r.err.constData());
        }
        auto py = runStatelens({ "rules", "export", rules, "--to", "python" });
        QVERIFY(py.out.contains("def remap_state_dict"));
        const QString hf = dir.filePath("key_mapping.json");
        auto h = runStatelens({ "rules", "export", rules, "--to", "hf-key-mapping", "--keys", m_checkpoint, "-o", hf });
        QVERIFY2(h.exitCode == 0 || h.exitCode == 1, h.err.constData());
        QVERIFY(QJsonDocument::fromJson([&] { QFile f(hf); f.open(QIODevice::ReadOnly); return f.readAll(); }()).isObject());
        auto back = runStatelens({ "rules", "import", hf });
        QCOMPARE(back.exitCode, 0);
        QVERIFY2(back.out.contains("mode: first_match"), back.out.constData());
        auto csv = runStatelens({ "rules", "export", rules, "--to", "csv", "--keys", m_checkpoint });
        QCOMPARE(csv.exitCode, 0);
        QVERIFY(csv.out.contains("_orig_mod."));
        auto noKeys = runStatelens({ "rules", "export", rules, "--to", "torchtitan" });
        QCOMPARE(noKeys.exitCode, 2);
    }

    // A folder of rank files lists like a checkpoint with containers: one per set, the model set picked.
    void lsFolderOfRankFiles()
    {
        const QString folder = torch2() + QStringLiteral("/fsdp2");
        auto t = runStatelens({ "ls", folder });
        QVERIFY2(t.exitCode == 0, t.err.constData());
        QVERIFY2(t.out.contains("format:    per-rank") && t.out.contains("container: model"), t.out.constData());
        QVERIFY(t.out.contains("mask") && !t.out.contains("_orig_mod."));

        auto c = runStatelens({ "ls", folder, "--containers" });
        QCOMPARE(c.exitCode, 0);
        QStringList lines = QString::fromUtf8(c.out).split('\n', Qt::SkipEmptyParts);
        lines.removeFirst(); // "containers in ..."
        QCOMPARE(lines,
            QStringList({ "  compiled_model  [model, 23 tensors]", "* model  [model, 23 tensors]",
                "  optim  [optimizer, 63 tensors]", "  optim_fqn  [optimizer, 63 tensors]" }));

        for (const QString& args : { QStringLiteral("@folder --container optim"), QStringLiteral("@pattern") }) {
            QStringList argv { "ls", "--format", "json" };
            for (const QString& a : args.split(' '))
                argv << (a == "@folder" ? folder : a == "@pattern" ? folder + "/optim_rank*.pt" : a);
            auto j = runStatelens(argv);
            QVERIFY2(j.exitCode == 0, j.err.constData());
            const QJsonObject doc = QJsonDocument::fromJson(j.out).object();
            QCOMPARE(doc["source"].toObject()["format"].toString(), QStringLiteral("per-rank"));
            QCOMPARE(names(doc["entries"].toArray(), "name"), truthNames("fsdp2/optim.per-rank.truth.json"));
        }
    }

    // The workflow of a torch.compile'd FSDP2 run: its rank files as A, the plain model's live dump as B.
    // What the diff says and what the suggested rule does are held to torch's own strict load.
    void rankFilesAsOneSideOfDiffAndSuggest()
    {
        const QJsonObject cases = readJson(torch2() + "/loads.truth.json");
        QJsonObject failing;
        QJsonObject fixed;
        QJsonObject plain;
        for (const auto& v : cases["cases"].toArray()) {
            const QJsonObject c = v.toObject();
            if (c["case"] == QLatin1String("fsdp2_compiled_ranks_into_plain"))
                failing = c;
            else if (c["case"] == QLatin1String("fsdp2_compiled_ranks_into_plain_fixed"))
                fixed = c;
            else if (c["case"] == QLatin1String("fsdp2_ranks_into_plain"))
                plain = c;
        }
        QVERIFY(!failing.isEmpty() && !fixed.isEmpty() && !plain.isEmpty());
        QVERIFY(!failing["ok"].toBool() && fixed["ok"].toBool() && plain["ok"].toBool());
        const QString r0 = torch2() + "/fsdp2/compiled_model_rank0.pt";
        const QString r1 = torch2() + "/fsdp2/compiled_model_rank1.pt";
        const QString model = torch2() + "/models/titan.sldump.json";

        // As the shell expands fsdp2/compiled_model_rank*.pt: torch's missing and unexpected keys.
        auto before = runStatelens({ "diff", r0, r1, model, "--format", "json" });
        QCOMPARE(before.exitCode, 1);
        const QJsonObject b = QJsonDocument::fromJson(before.out).object();
        QCOMPARE(b["a"].toObject()["format"].toString(), QStringLiteral("per-rank"));
        QStringList unexpected;
        QStringList missing;
        for (const auto& v : b["rows"].toArray()) {
            const QJsonObject row = v.toObject();
            if (row["status"] == QLatin1String("unexpected"))
                unexpected << row["a"].toString();
            if (row["status"] == QLatin1String("missing"))
                missing << row["b"].toString();
        }
        QCOMPARE(sorted(unexpected), sorted(strings(failing["unexpected"].toArray())));
        QCOMPARE(sorted(missing), sorted(strings(failing["missing"].toArray())));
        QVERIFY(failing["size_mismatch"].toArray().isEmpty());
        QCOMPARE(b["summary"].toObject()["shape_mismatch"].toInt(), 0);

        QTemporaryDir dir;
        const QString rules = dir.filePath("r.yaml");
        auto s = runStatelens({ "suggest", r0, r1, model, "-o", rules });
        QVERIFY2(s.exitCode == 0, s.err.constData());
        QVERIFY2(s.err.contains("_orig_mod."), s.err.constData());
        // The rule maps every key as torch's fixed load did, and the load succeeds.
        for (const QStringList& a :
            { QStringList { r0, r1 }, QStringList { torch2() + "/fsdp2/compiled_model_rank*.pt" } }) {
            auto after = runStatelens(QStringList { "diff" } << a << model << "--rules" << rules << "--format"
                                                             << "json");
            QVERIFY2(after.exitCode == 0, after.out.left(2000).constData());
            QMap<QString, QString> mapping;
            for (const auto& v : QJsonDocument::fromJson(after.out).object()["rows"].toArray()) {
                const QJsonObject row = v.toObject();
                mapping.insert(row["a"].toString(), row["b"].toString());
                // torch loaded every tensor as it is: the rank files' global shapes are the model's.
                QVERIFY2(row["a_shape"] == row["b_shape"], qPrintable(row["a"].toString()));
            }
            QMap<QString, QString> truth;
            const QJsonObject m = fixed["mapping"].toObject();
            for (auto it = m.begin(); it != m.end(); ++it)
                truth.insert(it.key(), it.value().toString());
            QCOMPARE(mapping, truth);
        }
        // The uncompiled set loads as it is: from its folder (the model set is picked) or a quoted pattern.
        for (const QString& a : { torch2() + "/fsdp2", torch2() + "/fsdp2/model_rank*.pt" }) {
            auto ok = runStatelens({ "diff", a, model });
            QVERIFY2(ok.exitCode == 0, (a.toUtf8() + ": " + ok.out.right(500)).constData());
        }
        auto fromFolder
            = runStatelens({ "diff", torch2() + "/fsdp2", model, "--container-a", "compiled_model", "--rules", rules });
        QCOMPARE(fromFolder.exitCode, 0);
    }

    // Paths that do not make two sides: one line saying how to write them, exit 2.
    void wrongGroupingsAreOneLine_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("blamed");
        const QString d = torch2() + "/fsdp2/";
        const QString m = torch2() + "/models/titan.sldump.json";
        QTest::addRow("three sets") << QStringList { "diff", d + "model_rank0.pt", d + "model_rank1.pt",
            d + "optim_rank0.pt", m }
                                    << m;
        const QString tp = torch2() + "/fsdp2_tp/";
        QTest::addRow("one set") << QStringList { "diff", tp + "model_rank0.pt", tp + "model_rank1.pt",
            tp + "model_rank2.pt" }
                                 << tp + "model_rank0.pt";
        QTest::addRow("one side only") << QStringList { "suggest", d + "model_rank0.pt", d + "model_rank1.pt",
            d + "model_rank1.pt" } << d + "model_rank0.pt";
        QTest::addRow("pattern matches nothing")
            << QStringList { "diff", d + "nothing_rank*.pt", m } << d + "nothing_rank*.pt";
    }

    void wrongGroupingsAreOneLine()
    {
        QFETCH(QStringList, args);
        QFETCH(QString, blamed);
        auto r = runStatelens(args);
        QCOMPARE(r.exitCode, 2);
        QVERIFY(r.out.isEmpty());
        const QString err = QString::fromUtf8(r.err);
        QVERIFY2(err.startsWith("statelens: " + blamed + ": "), qPrintable(err));
        QCOMPARE(err.trimmed().count('\n'), 0);
        if (!blamed.contains('*'))
            QVERIFY2(err.contains("a quoted pattern such as 'ckpt/model_rank*.pt'"), qPrintable(err));
    }

    // Headless commands run with their heap in transparent huge pages where the kernel offers them
    // (app/heap_tuning.h): the same output in far fewer page faults; a user's own choice of the glibc tunable
    // is kept. Both ways are checked: `ls` (one arena, its heap advised in place, one start of the process)
    // and `diff` (an arena per side, a fresh copy started with glibc's tunable). 40,000 tensors make about
    // 40 MB of entries, ~10,000 faults in 4 KiB pages.
    void headlessHeapInHugePages()
    {
        QByteArray header = "{";
        const int n = 40000;
        for (int i = 0; i < n; ++i)
            header += QStringLiteral("\"model.layers.%1.mlp.experts.%2.down_proj.weight\":{\"dtype\":\"BF16\",\"shape\":[2,2],"
                                     "\"data_offsets\":[%3,%4]},")
                          .arg(i / 256)
                          .arg(i % 256)
                          .arg(8 * i)
                          .arg(8 * i + 8)
                          .toUtf8();
        header.back() = '}';
        QByteArray file(8, 0);
        qToLittleEndian<quint64>(header.size(), file.data());
        file += header + QByteArray(8 * n, 0);
        const QString path = m_dir.filePath(QStringLiteral("hugepages.safetensors"));
        QVERIFY(writeFile(path, file));
        const QStringList ls { QStringLiteral("ls"), path, QStringLiteral("--format"), QStringLiteral("json") };
        const QStringList diff { QStringLiteral("diff"), path, path, QStringLiteral("--format"), QStringLiteral("json") };
        for (const QStringList& args : { ls, diff }) {
            const QString tuned = m_dir.filePath(args[0] + QStringLiteral("-tuned.json"));
            const QString plain = m_dir.filePath(args[0] + QStringLiteral("-plain.json"));
            const long tunedFaults = minorFaultsOfRun(args, {}, tuned);
            const long plainFaults
                = minorFaultsOfRun(args, { QStringLiteral("GLIBC_TUNABLES=glibc.malloc.hugetlb=0") }, plain);
            QVERIFY2(tunedFaults > 0 && plainFaults > 0, qPrintable(args[0]));
            QCOMPARE(readAll(tuned), readAll(plain));
            if (args[0] == QStringLiteral("ls"))
                QCOMPARE(readJson(tuned)["entries"].toArray().size(), n);
            else
                QCOMPARE(readJson(tuned)["summary"].toObject()["match"].toInt(), n);
            if (sl::test::sanitized())
                QSKIP("a sanitizer's allocator serves malloc in this build");
            QFile thp(QStringLiteral("/sys/kernel/mm/transparent_hugepage/enabled"));
            if (!thp.open(QIODevice::ReadOnly) || thp.readAll().contains("[never]"))
                QSKIP("the kernel offers no transparent huge pages");
            qInfo("%s: minor page faults: %ld in huge pages, %ld with the user's hugetlb=0", qPrintable(args[0]),
                tunedFaults, plainFaults);
            QVERIFY2(tunedFaults * 3 < plainFaults * 2,
                qPrintable(QStringLiteral("%1: %2 vs %3").arg(args[0]).arg(tunedFaults).arg(plainFaults)));
        }

        // Start-up aside, the heap itself takes a few dozen faults, where a fault can cost 12-16 us (the
        // benchmark's virtual machine): allocation starts at the heap's first huge page, past the 2 MiB range
        // it starts in (which is shared with what lies below it, so in 4 KiB pages), nothing in the advised
        // range is touched before the advice, and each thread's arena is advised whole (app/heap_tuning.cpp).
        // Before, ls took 130-500 faults more for this file than for a one-tensor file (its first 2 MiB in
        // 4 KiB pages, as many more for a page touched before the advice) and diff 3,700-4,100 (thread arenas
        // in 4 KiB pages); now 17-18 each. Medians of three runs.
        const QString tiny = m_dir.filePath(QStringLiteral("tiny.safetensors"));
        QVERIFY(sl::test::writeSafetensorsFile(
            tiny, R"({"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})", QByteArray(8, 0)));
        for (const QStringList& args : { ls, diff }) {
            QStringList small = args;
            small.replaceInStrings(path, tiny);
            std::vector<long> faults[2]; // the large file's runs, the tiny one's
            const QString out = m_dir.filePath(QStringLiteral("faults.json"));
            for (int run = 0; run < 3; ++run)
                for (int which = 0; which < 2; ++which) {
                    faults[which].push_back(pageFaultsOfRun(which ? small : args, out));
                    if (faults[which].back() < 0)
                        QSKIP("no page-fault event for this process (perf_event_open)");
                }
            for (auto& f : faults)
                std::sort(f.begin(), f.end());
            qInfo("%s: page faults: %ld for 40,000 tensors, %ld for one (medians)", qPrintable(args[0]), faults[0][1],
                faults[1][1]);
            QVERIFY2(faults[0][1] - faults[1][1] < 60,
                qPrintable(QStringLiteral("%1: %2 vs %3").arg(args[0]).arg(faults[0][1]).arg(faults[1][1])));
        }
    }

    void versionAndHelp()
    {
        auto v = runStatelens({ QStringLiteral("--version") });
        QCOMPARE(v.exitCode, 0);
        QVERIFY(v.out.startsWith("statelens "));
        auto h = runStatelens({ QStringLiteral("--help") });
        QCOMPARE(h.exitCode, 0);
        QVERIFY(h.out.contains("ls"));
    }
};

QTEST_GUILESS_MAIN(TestCli)
#include "tst_cli.moc"
