// statelens_dump.py on real modules (run here with Debian's torch) and the live-dump reader, against what
// the live model itself says (make_dumps.py writes both).

#include "common/test_files.h"
#include "common/test_paths.h"
#include "formats/loader.h"
#include "util/error.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QTest>

using namespace sl;

namespace {

using sl::test::readJson;

QString attr(const Entry& e, const char* key)
{
    const std::string* v = e.attribute(key);
    return v ? QString::fromStdString(*v) : QString();
}

QJsonArray shapeJson(const Shape& s)
{
    QJsonArray a;
    for (int64_t d : s)
        a.append(static_cast<qint64>(d));
    return a;
}

} // namespace

class TestLiveDump : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

private slots:
    void initTestCase()
    {
        if (!sl::test::haveTorchPython())
            QSKIP("Debian's torch (/usr/bin/python3) is not installed");
        QVERIFY(m_dir.isValid());
        auto r = sl::test::run(sl::test::torchPython(),
            { sl::test::sourceDir() + QStringLiteral("/tests/core/live_dump/make_dumps.py"), m_dir.path() }, 300000);
        QVERIFY2(r.exitCode == 0, r.err.constData());
    }

    void dump_data()
    {
        QTest::addColumn<QString>("name");
        for (const char* c : { "plain", "data_parallel", "compiled", "compiled_ddp", "extra_state", "dtensor", "cli" })
            QTest::newRow(c) << QString::fromLatin1(c);
    }

    void dump()
    {
        QFETCH(QString, name);
        const QJsonObject truth = readJson(m_dir.filePath(name + QStringLiteral(".truth.json")));
        QVERIFY(!truth.isEmpty());
        const Source s = openSource(m_dir.filePath(name + QStringLiteral(".sldump.json")).toStdString());
        QCOMPARE(QString::fromUtf8(formatId(s.format)), QStringLiteral("live-dump"));
        QCOMPARE(QString::fromStdString(s.container), QStringLiteral("model"));

        // Every state_dict key, in order, with its shape, dtype, kind and requires_grad.
        const QJsonArray keys = truth.value(QStringLiteral("keys")).toArray();
        QCOMPARE(s.entries.size(), size_t(keys.size()));
        const QJsonObject tied = truth.value(QStringLiteral("tied")).toObject();
        const QJsonObject dtensor = truth.value(QStringLiteral("dtensor")).toObject();
        for (int i = 0; i < keys.size(); ++i) {
            const QJsonObject k = keys.at(i).toObject();
            const Entry& e = s.entries[static_cast<size_t>(i)];
            const QString key = k.value(QStringLiteral("name")).toString();
            QCOMPARE(QString::fromStdString(e.name), key);
            QCOMPARE(attr(e, "kind"), k.value(QStringLiteral("kind")).toString());
            if (!k.contains(QStringLiteral("shape"))) {
                QCOMPARE(int(e.kind), int(EntryKind::Object));
                continue;
            }
            QCOMPARE(shapeJson(e.shape), k.value(QStringLiteral("shape")).toArray());
            QCOMPARE(QString::fromLatin1(dtypeName(e.dtype).data()), k.value(QStringLiteral("dtype")).toString());
            QCOMPARE(e.requiresGrad, k.value(QStringLiteral("requires_grad")).toBool());
            QCOMPARE(e.isParameter, k.value(QStringLiteral("kind")).toString() == QStringLiteral("parameter"));
            // Tied keys name each other.
            QStringList partners;
            for (const auto& p : tied.value(key).toArray())
                partners << p.toString();
            QCOMPARE(attr(e, "tied_with"), partners.join(QStringLiteral(", ")));
            // DTensor layout.
            if (dtensor.contains(key)) {
                const QJsonObject d = dtensor.value(key).toObject();
                QVERIFY(e.sharding);
                QCOMPARE(int(e.sharding->kind), int(Sharding::Kind::DTensor));
                QCOMPARE(shapeJson(e.sharding->localShape), d.value(QStringLiteral("local_shape")).toArray());
                QCOMPARE(shapeJson(e.sharding->meshShape), d.value(QStringLiteral("mesh_shape")).toArray());
                QStringList placements;
                for (const auto& p : e.sharding->placements)
                    placements << QString::fromStdString(p);
                QStringList expected;
                for (const auto& p : d.value(QStringLiteral("placements")).toArray())
                    expected << p.toString();
                QCOMPARE(placements, expected);
            } else {
                QVERIFY(!e.sharding);
            }
        }
        // Non-persistent buffers: not expected in a checkpoint, but known.
        const Source np = s.withContainer("non_persistent_buffers");
        QStringList got;
        for (const auto& e : np.entries)
            got << QString::fromStdString(e.name);
        QStringList expected;
        for (const auto& n : truth.value(QStringLiteral("non_persistent")).toArray())
            expected << n.toString();
        got.sort();
        expected.sort();
        QCOMPARE(got, expected);
        for (const auto& [k, v] : s.metadata)
            if (k == "model_class")
                QCOMPARE(QString::fromStdString(v), truth.value(QStringLiteral("model_class")).toString());
    }

    void wrappersShowInKeys()
    {
        // The point of a live dump: what the wrapped model expects, wrappers included.
        auto first = [&](const char* c) {
            return openSource(m_dir.filePath(QString::fromLatin1(c) + QStringLiteral(".sldump.json")).toStdString())
                .entries.front()
                .name;
        };
        QCOMPARE(QString::fromStdString(first("data_parallel")), QStringLiteral("module.embed.weight"));
        QCOMPARE(QString::fromStdString(first("compiled")), QStringLiteral("_orig_mod.embed.weight"));
        QCOMPARE(QString::fromStdString(first("compiled_ddp")), QStringLiteral("_orig_mod.module.embed.weight"));
    }

    void malformedDumps_data()
    {
        QTest::addColumn<QByteArray>("json");
        QTest::addColumn<QString>("message");
        QTest::addRow("not json") << QByteArray("{\"format\": \"statelens-live-dump\", ") << QStringLiteral("corrupt");
        QTest::addRow("no version") << QByteArray(R"({"format": "statelens-live-dump", "entries": []})") << QStringLiteral("version");
        QTest::addRow("no entries") << QByteArray(R"({"format": "statelens-live-dump", "version": 1})") << QStringLiteral("entries");
        QTest::addRow("entry without name")
            << QByteArray(R"({"format": "statelens-live-dump", "version": 1, "entries": [{"shape": [1]}]})")
            << QStringLiteral("name");
        QTest::addRow("negative dim")
            << QByteArray(R"({"format": "statelens-live-dump", "version": 1, "entries": [{"name": "w", "shape": [-1], "dtype": "float32"}]})")
            << QStringLiteral("shape");
    }

    void malformedDumps()
    {
        QFETCH(QByteArray, json);
        QFETCH(QString, message);
        QTemporaryDir dir;
        QFile f(dir.filePath(QStringLiteral("bad.sldump.json")));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(json);
        f.close();
        try {
            openSource(f.fileName().toStdString());
            QFAIL("expected a LoadError");
        } catch (const LoadError& e) {
            QVERIFY2(QString::fromUtf8(e.what()).startsWith(f.fileName()), e.what());
            QVERIFY2(QString::fromUtf8(e.what()).contains(message), e.what());
        }
    }

    void newerVersionWarns()
    {
        QTemporaryDir dir;
        QFile f(dir.filePath(QStringLiteral("v9.sldump.json")));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(R"({"format": "statelens-live-dump", "version": 9, "entries": [{"name": "w", "shape": [2], "dtype": "float32"}]})");
        f.close();
        const Source s = openSource(f.fileName().toStdString());
        QCOMPARE(s.entries.size(), size_t(1));
        QCOMPARE(s.countFindings(Severity::Warning), size_t(1));
    }
};

QTEST_GUILESS_MAIN(TestLiveDump)
#include "tst_live_dump.moc"
