// `statelens dump-helper [DIR]`: the helper it writes is byte for byte resources/python/statelens_dump.py,
// imports and dumps a real model with Debian's Python (the dump read back by `statelens ls`), is written
// atomically, is left alone when already there, and a different file in its place is never replaced
// without --force and a message. Without DIR, a build tree's statelens says the helper is not installed.

#include "common/test_files.h"
#include "common/test_paths.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <sys/stat.h>

using sl::test::readAll;
using sl::test::runStatelens;

namespace {

QString helperSource()
{
    return sl::test::sourceDir() + QStringLiteral("/resources/python/statelens_dump.py");
}

struct FileId {
    ino_t inode = 0;
    timespec mtime {};
    bool operator==(const FileId& o) const
    {
        return inode == o.inode && mtime.tv_sec == o.mtime.tv_sec && mtime.tv_nsec == o.mtime.tv_nsec;
    }
};

FileId fileId(const QString& path)
{
    struct stat st { };
    if (::stat(path.toLocal8Bit().constData(), &st) != 0)
        return {};
    return { st.st_ino, st.st_mtim };
}

bool writeFile(const QString& path, const QByteArray& bytes)
{
    QFile f(path);
    return f.open(QIODevice::WriteOnly) && f.write(bytes) == bytes.size();
}

} // namespace

class TestDumpHelper : public QObject {
    Q_OBJECT

private slots:
    void writesTheHelperByteForByte()
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString dir = tmp.filePath(QStringLiteral("env/lib/site-packages")); // created as needed
        const auto r = runStatelens({ QStringLiteral("dump-helper"), dir });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const QString written = dir + QStringLiteral("/statelens_dump.py");
        QCOMPARE(QString::fromLocal8Bit(r.out), written + QLatin1Char('\n'));
        const QByteArray expected = readAll(helperSource());
        QVERIFY(expected.size() > 1000);
        QVERIFY(readAll(written) == expected);
        // Written through a temporary file and renamed: nothing else is left in the folder.
        QCOMPARE(QDir(dir).entryList(QDir::AllEntries | QDir::Hidden | QDir::NoDotAndDotDot),
            QStringList { QStringLiteral("statelens_dump.py") });
        QVERIFY(QFileInfo(written).permissions() & QFileDevice::ReadOther);
    }

    void theWrittenHelperImportsAndDumps()
    {
        if (!sl::test::haveTorchPython())
            QSKIP("Debian's torch (/usr/bin/python3) is not installed");
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString dir = tmp.filePath(QStringLiteral("site"));
        const auto w = runStatelens({ QStringLiteral("dump-helper"), dir });
        QVERIFY2(w.exitCode == 0, w.err.constData());

        // The module must come from DIR (not an installed copy), and dump a real model.
        const QString dump = tmp.filePath(QStringLiteral("model.sldump.json"));
        QProcess python;
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert(QStringLiteral("PYTHONPATH"), dir);
        env.insert(QStringLiteral("PYTHONDONTWRITEBYTECODE"), QStringLiteral("1"));
        python.setProcessEnvironment(env);
        python.start(sl::test::torchPython(),
            { QStringLiteral("-c"),
                QStringLiteral("import os, sys, torch, statelens_dump\n"
                               "assert os.path.dirname(os.path.abspath(statelens_dump.__file__)) == os.path.abspath(sys.argv[1]), statelens_dump.__file__\n"
                               "statelens_dump.dump(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4)), sys.argv[2])\n"),
                dir, dump });
        QVERIFY(python.waitForFinished(120000));
        QVERIFY2(python.exitStatus() == QProcess::NormalExit && python.exitCode() == 0,
            python.readAllStandardError().constData());

        const auto ls = runStatelens({ QStringLiteral("ls"), dump, QStringLiteral("--format"), QStringLiteral("json") });
        QVERIFY2(ls.exitCode == 0, ls.err.constData());
        const QJsonObject doc = QJsonDocument::fromJson(ls.out).object();
        QCOMPARE(doc[QStringLiteral("source")].toObject()[QStringLiteral("format")].toString(), QStringLiteral("live-dump"));
        QMap<QString, QJsonArray> shapes;
        for (const auto& e : doc[QStringLiteral("entries")].toArray())
            shapes[e.toObject()[QStringLiteral("name")].toString()] = e.toObject()[QStringLiteral("shape")].toArray();
        QCOMPARE(shapes.keys(),
            (QStringList { QStringLiteral("0.bias"), QStringLiteral("0.weight"), QStringLiteral("1.bias"), QStringLiteral("1.weight") }));
        QCOMPARE(shapes[QStringLiteral("0.weight")], (QJsonArray { 4, 3 }));
        QCOMPARE(shapes[QStringLiteral("1.weight")], (QJsonArray { 4 }));
    }

    void anIdenticalHelperIsLeftAlone()
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString written = tmp.filePath(QStringLiteral("statelens_dump.py"));
        QVERIFY(runStatelens({ QStringLiteral("dump-helper"), tmp.path() }).exitCode == 0);
        QVERIFY(QFile::setPermissions(written, QFileDevice::ReadOwner | QFileDevice::ReadOther));
        const FileId before = fileId(written);
        QTest::qWait(20); // a rewrite would show in the modification time
        const auto r = runStatelens({ QStringLiteral("dump-helper"), tmp.path() });
        QVERIFY2(r.exitCode == 0, r.err.constData()); // read-only, yet no error: it is not written
        QVERIFY2(r.err.contains("already"), r.err.constData());
        QCOMPARE(QString::fromLocal8Bit(r.out), written + QLatin1Char('\n'));
        QVERIFY(fileId(written) == before);
    }

    void aDifferentFileIsReplacedOnlyWithForce()
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString written = tmp.filePath(QStringLiteral("statelens_dump.py"));
        const QByteArray mine = "# my own statelens_dump.py\nprint('mine')\n";
        QVERIFY(writeFile(written, mine));

        const auto refused = runStatelens({ QStringLiteral("dump-helper"), tmp.path() });
        QCOMPARE(refused.exitCode, 2);
        QVERIFY(refused.out.isEmpty());
        QCOMPARE(refused.err.count('\n'), 1); // one line
        QVERIFY2(refused.err.contains("differs") && refused.err.contains("--force"), refused.err.constData());
        QCOMPARE(readAll(written), mine);

        const auto forced = runStatelens({ QStringLiteral("dump-helper"), tmp.path(), QStringLiteral("--force") });
        QVERIFY2(forced.exitCode == 0, forced.err.constData());
        QVERIFY2(forced.err.contains("replaced"), forced.err.constData());
        QVERIFY(readAll(written) == readAll(helperSource()));
        QCOMPARE(QDir(tmp.path()).entryList(QDir::AllEntries | QDir::Hidden | QDir::NoDotAndDotDot),
            QStringList { QStringLiteral("statelens_dump.py") });
    }

    void wrongTargetsAreRefused()
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        // DIR is a file.
        const QString file = tmp.filePath(QStringLiteral("notes.txt"));
        QVERIFY(writeFile(file, "notes\n"));
        auto r = runStatelens({ QStringLiteral("dump-helper"), file });
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("not a folder"), r.err.constData());
        QCOMPARE(readAll(file), QByteArray("notes\n"));
        // The helper's own file name given as DIR: no folder of that name is made.
        const QString py = tmp.filePath(QStringLiteral("statelens_dump.py"));
        r = runStatelens({ QStringLiteral("dump-helper"), py });
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("folder"), r.err.constData());
        QVERIFY(!QFileInfo::exists(py));
        // A folder where the helper would go.
        QVERIFY(QDir().mkpath(tmp.filePath(QStringLiteral("site/statelens_dump.py"))));
        r = runStatelens({ QStringLiteral("dump-helper"), tmp.filePath(QStringLiteral("site")), QStringLiteral("--force") });
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("not a regular file"), r.err.constData());
    }

    void withoutDirABuildTreeSaysHowToGetIt()
    {
        // The build tree has no installed helper beside the executable (tst_install_tree checks an install).
        const auto r = runStatelens({ QStringLiteral("dump-helper") });
        QCOMPARE(r.exitCode, 1);
        QVERIFY(r.out.isEmpty());
        QVERIFY2(r.err.contains("statelens dump-helper DIR"), r.err.constData());
        // And --help lists the command.
        const auto help = runStatelens({ QStringLiteral("--help") });
        QVERIFY(help.out.contains("dump-helper"));
    }
};

QTEST_GUILESS_MAIN(TestDumpHelper)
#include "tst_dump_helper.moc"
