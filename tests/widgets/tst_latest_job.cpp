// LatestJob (widgets/session/latest_job.h), the one way the window runs work off the UI thread: only the
// latest run's result is delivered, a replaced or cancelled run is told to stop through its LoadControl,
// and the owner's destruction waits for what still runs. And SideLoader (session/side_loader.h), one side's
// source and its loading, built on it, and CheckpointWriter (session/checkpoint_writer.h), the window's Save
// Fixed Checkpoint As…: tested here without a widget.

#include "session/latest_job.h"
#include "common/handwritten_safetensors.h"
#include "common/test_files.h"
#include "common/test_paths.h"
#include "formats/loader.h"
#include "rules/rule_io.h"
#include "session/checkpoint_writer.h"
#include "session/entry_values.h"
#include "session/side_loader.h"
#include "util/error.h"

#include <QCryptographicHash>
#include <QDir>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSignalSpy>
#include <QTemporaryDir>

#include <QObject>
#include <QTest>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

using namespace sl;
using namespace sl::gui;

namespace {

// Waits (bounded) until the run is cancelled; returns whether it was.
bool waitForCancel(const LoadControl& control)
{
    for (int i = 0; i < 2000 && !control.cancelled(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return control.cancelled();
}

QStringList entries(const QString& folder)
{
    return QDir(folder).entryList(QDir::AllEntries | QDir::Hidden | QDir::NoDotAndDotDot, QDir::Name);
}

RuleSet stripCompile()
{
    RuleSet r;
    r.rules.push_back(Rule { "^_orig_mod\\.", "", false, true, {}, {} });
    return r;
}

// Runs one write to its end; the outcome it reported.
CheckpointWriter::Outcome writeOnce(CheckpointWriter& writer, CheckpointWriter::Request request)
{
    QSignalSpy finished(&writer, &CheckpointWriter::finished);
    if (!writer.start(std::move(request)))
        return {};
    if (!finished.wait(60000) && finished.isEmpty())
        return {};
    return finished.first().first().value<CheckpointWriter::Outcome>();
}

} // namespace

Q_DECLARE_METATYPE(sl::gui::CheckpointWriter::Outcome)

class TestLatestJob : public QObject {
    Q_OBJECT
private slots:
    void aReplacedRunIsCancelledAndNotDelivered()
    {
        QObject owner;
        LatestJob<int> job(&owner);
        std::vector<int> delivered;
        std::atomic<int> firstSawCancel { -1 };
        job.start([&](LoadControl& c) {
            firstSawCancel = waitForCancel(c) ? 1 : 0;
            return 1;
        }, [&](int v) { delivered.push_back(v); });
        QVERIFY(job.running());
        job.start([](LoadControl&) { return 2; }, [&](int v) { delivered.push_back(v); });
        QTRY_COMPARE(delivered.size(), size_t(1));
        QCOMPARE(delivered.front(), 2);
        QTRY_COMPARE(firstSawCancel.load(), 1);
        QTest::qWait(50); // the first run's finish reaches the event loop too: still not delivered
        QCOMPARE(delivered.size(), size_t(1));
        QVERIFY(!job.running());
    }

    void aCancelledRunIsNotDelivered()
    {
        QObject owner;
        LatestJob<int> job(&owner);
        int delivered = 0;
        std::atomic<bool> stopped { false };
        job.start([&](LoadControl& c) {
            stopped = waitForCancel(c);
            return 7;
        }, [&](int) { ++delivered; });
        job.cancel();
        QVERIFY(!job.running());
        QTRY_VERIFY(stopped.load());
        QTest::qWait(50);
        QCOMPARE(delivered, 0);
    }

    void theWorkReportsProgressThroughControl()
    {
        QObject owner;
        LatestJob<int> job(&owner);
        std::atomic<bool> release { false };
        job.start([&](LoadControl& c) {
            c.addTotal(4);
            c.advance(1);
            while (!release)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            return 0;
        }, [](int) {});
        QVERIFY(job.control());
        QTRY_COMPARE(job.control()->fraction(), 0.25);
        release = true;
        QTRY_VERIFY(!job.running());
    }

    void destructionWaitsForRunningWork()
    {
        std::atomic<bool> finished { false };
        {
            QObject owner;
            LatestJob<int> job(&owner);
            job.start([&](LoadControl&) {
                std::this_thread::sleep_for(std::chrono::milliseconds(200));
                finished = true;
                return 0;
            }, [](int) {});
        }
        QVERIFY(finished.load());
    }

    void aSideKeepsItsSourceWhenALoadIsCancelled()
    {
        SideLoader side;
        QSignalSpy changed(&side, &SideLoader::sourceChanged);
        side.load(QStringLiteral("first"), [](const OpenOptions&) {
            Source s;
            s.path = "first";
            return s;
        });
        QTRY_COMPARE(changed.count(), 1);
        const auto first = side.source();
        QVERIFY(first);
        QCOMPARE(first->path, std::string("first"));

        std::atomic<bool> stopped { false };
        side.load(QStringLiteral("slow"), [&stopped](const OpenOptions& o) {
            stopped = waitForCancel(*o.control);
            Source s;
            s.path = "slow";
            return s;
        });
        QVERIFY(side.isLoading());
        QCOMPARE(side.label(), QStringLiteral("slow"));
        side.cancel();
        QVERIFY(!side.isLoading());
        QTRY_VERIFY(stopped.load()); // the reader was told to stop
        QTest::qWait(50);
        QCOMPARE(changed.count(), 1); // and its result went nowhere
        QCOMPARE(side.source(), first);
    }

    void aFailedLoadEmptiesTheSideAndSaysWhy()
    {
        SideLoader side;
        QSignalSpy changed(&side, &SideLoader::sourceChanged);
        side.load(QStringLiteral("good"), [](const OpenOptions&) { return Source {}; });
        QTRY_COMPARE(changed.count(), 1);
        QVERIFY(side.source());
        side.load(QStringLiteral("bad"), [](const OpenOptions&) -> Source { throw LoadError("bad.pt", "truncated"); });
        QTRY_COMPARE(changed.count(), 2);
        QVERIFY(!side.source()); // a failed load does not leave the old source looking current
        QVERIFY2(side.error().contains(QStringLiteral("bad.pt")) && side.error().contains(QStringLiteral("truncated")),
            qPrintable(side.error()));
        QVERIFY(!side.isLoading());
    }

    // The selected row's values are read off the UI thread once; selecting the entry again answers from the
    // cache at once, without a read.
    void selectedValuesAreReadOnceThenCached()
    {
        auto snap = std::make_shared<DiffSnapshot>();
        snap->a = std::make_shared<const Source>(openSource(STATELENS_SOURCE_DIR "/tests/fixtures/values/compare_a.pt"));
        snap->b = std::make_shared<const Source>();
        const Entry* same = nullptr;
        for (const Entry& e : snap->a->entries)
            if (e.name == "same.weight")
                same = &e;
        QVERIFY(same);
        EntryValues values;
        QSignalSpy reading(&values, &EntryValues::reading);
        std::vector<std::shared_ptr<const EntryValues::Side>> answers;
        connect(&values, &EntryValues::ready, this,
            [&answers](const EntryValues::Selection&, std::shared_ptr<const EntryValues::Side> a,
                std::shared_ptr<const EntryValues::Side>) { answers.push_back(a); });
        values.select({ snap, same, nullptr });
        QCOMPARE(reading.count(), 1);
        QTRY_COMPARE(answers.size(), size_t(1));
        QVERIFY(answers[0]->stats);
        QCOMPARE(answers[0]->stats->numel, uint64_t(2048)); // torch: same.weight is [64, 32]
        QVERIFY(!values.isBusy());

        values.select({ snap, same, nullptr });
        QCOMPARE(answers.size(), size_t(2)); // at once, from the cache
        QCOMPARE(reading.count(), 1);
        QCOMPARE(answers[1], answers[0]);
        QSignalSpy cleared(&values, &EntryValues::cleared);
        values.select({});
        QCOMPARE(cleared.count(), 1);
    }

    // Save Fixed Checkpoint As… of a torch 2.6 torch.compile'd checkpoint with the rule that strips
    // `_orig_mod.`: the file equals what safetensors.torch.save_model wrote for the plain model
    // (tests/fixtures/convert; the header compared as JSON, as the library's metadata order is a hash map's).
    void aFixedCheckpointIsWrittenAsSaveModelWritesIt()
    {
        QTemporaryDir dir;
        const QString fixtures = test::fixturesDir() + QStringLiteral("/convert/");
        auto source = std::make_shared<const Source>(openSource((fixtures + QStringLiteral("t2_compiled_tied.pt")).toStdString()));
        CheckpointWriter writer;
        const QString out = dir.filePath(QStringLiteral("fixed.safetensors"));
        const auto o = writeOnce(writer, { source, stripCompile(), out, 0 });
        QVERIFY2(o.kind == CheckpointWriter::Outcome::Kind::Written, qPrintable(o.summary()));
        QVERIFY(!writer.isRunning());
        QCOMPARE(entries(dir.path()), QStringList { QStringLiteral("fixed.safetensors") });
        const QByteArray got = test::readAll(out);
        const QByteArray want = test::readAll(fixtures + QStringLiteral("t2_compiled_tied.expected.safetensors"));
        QCOMPARE(got.size(), want.size());
        quint64 n = 0;
        std::memcpy(&n, want.constData(), 8);
        QCOMPARE(QJsonDocument::fromJson(got.mid(8, qsizetype(n))).object(), QJsonDocument::fromJson(want.mid(8, qsizetype(n))).object());
        QVERIFY(got.mid(8 + qsizetype(n)) == want.mid(8 + qsizetype(n)));
        // What the window shows: the counts of the core's report, and the tied name's finding.
        QCOMPARE(o.report.shards, size_t(1));
        QCOMPARE(o.report.bytesWritten, quint64(want.size()) - 8 - n);
        const QString summary = o.summary();
        QVERIFY2(summary.startsWith(QStringLiteral("Wrote %1 tensors (").arg(o.report.tensorsWritten)), qPrintable(summary));
        QVERIFY2(summary.contains(QStringLiteral("in 1 file to ") + out) && summary.contains(QStringLiteral("'head.weight'")),
            qPrintable(summary));
    }

    // Shards into a folder, as `statelens convert --shard-size` cuts them: the same files byte for byte.
    void shardsAsTheCommandLineWritesThem()
    {
        QTemporaryDir dir;
        const QString input = test::fixturesDir() + QStringLiteral("/convert/t2_compiled_tied.pt");
        auto source = std::make_shared<const Source>(openSource(input.toStdString()));
        CheckpointWriter writer;
        const QString out = dir.filePath(QStringLiteral("window"));
        const auto o = writeOnce(writer, { source, stripCompile(), out, 300 });
        QVERIFY2(o.kind == CheckpointWriter::Outcome::Kind::Written, qPrintable(o.summary()));
        QVERIFY(o.report.shards > 1);
        QVERIFY2(o.summary().contains(QStringLiteral("and their index")), qPrintable(o.summary()));
        const QString rules = dir.filePath(QStringLiteral("strip.yaml"));
        QFile f(rules);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("rules:\n  - pattern: \"^_orig_mod\\\\.\"\n    replace: \"\"\n");
        f.close();
        const auto cli = test::runStatelens({ QStringLiteral("convert"), input, QStringLiteral("--rules"), rules,
            QStringLiteral("--shard-size"), QStringLiteral("300"), QStringLiteral("-o"), dir.filePath(QStringLiteral("cli")) });
        QVERIFY2(cli.exitCode == 0, cli.err.constData());
        QCOMPARE(entries(out), entries(dir.filePath(QStringLiteral("cli"))));
        for (const QString& name : entries(out))
            QVERIFY2(test::readAll(out + QLatin1Char('/') + name) == test::readAll(dir.filePath(QStringLiteral("cli/")) + name),
                qPrintable(name));
    }

    // A rule that maps two keys onto one name: refused with the core's one line, nothing written.
    void aCollisionFailsAndWritesNothing()
    {
        QTemporaryDir dir;
        auto source = std::make_shared<const Source>(
            openSource((test::fixturesDir() + QStringLiteral("/convert/t2_compiled_tied.pt")).toStdString()));
        RuleSet all;
        all.rules.push_back(Rule { "^.*$", "weight", false, true, {}, {} });
        CheckpointWriter writer;
        const auto o = writeOnce(writer, { source, all, dir.filePath(QStringLiteral("x.safetensors")), 0 });
        QCOMPARE(o.kind, CheckpointWriter::Outcome::Kind::Failed);
        QVERIFY2(o.error.contains(QStringLiteral("a rule collides")) && o.error.contains(QStringLiteral("nothing was written"))
                && !o.error.contains(QLatin1Char('\n')),
            qPrintable(o.error));
        QCOMPARE(entries(dir.path()), QStringList());
    }

    // The output onto the checkpoint being converted: refused, the input unchanged.
    void theInputIsNeverWrittenOver()
    {
        QTemporaryDir dir;
        const QString input = dir.filePath(QStringLiteral("in.safetensors"));
        QVERIFY(QFile::copy(test::fixturesDir() + QStringLiteral("/values/dtypes.safetensors"), input));
        const QByteArray before = test::readAll(input);
        auto source = std::make_shared<const Source>(openSource(input.toStdString()));
        CheckpointWriter writer;
        const auto o = writeOnce(writer, { source, {}, input, 0 });
        QCOMPARE(o.kind, CheckpointWriter::Outcome::Kind::Failed);
        QVERIFY2(o.error.contains(QStringLiteral("input")), qPrintable(o.error));
        QVERIFY(test::readAll(input) == before);
        QCOMPARE(entries(dir.path()), QStringList { QStringLiteral("in.safetensors") });
    }

    // Cancel during the copy of a 512 MB tensor: the outcome says Cancelled only once the temporary folder is
    // gone, so at that moment nothing of the write is left beside the output, for a file and for a folder.
    void aCancelledWriteLeavesNothing()
    {
        QTemporaryDir dir;
        const QString input = dir.filePath(QStringLiteral("big.safetensors"));
        const qint64 bytes = qint64(512) << 20;
        QVERIFY(test::writeSafetensorsFile(input,
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[" + QByteArray::number(bytes / 4) + "],\"data_offsets\":[0,"
                + QByteArray::number(bytes) + "]}}",
            {}, bytes));
        auto source = std::make_shared<const Source>(openSource(input.toStdString()));
        for (const char* name : { "out.safetensors", "folder" }) {
            CheckpointWriter writer;
            QSignalSpy finished(&writer, &CheckpointWriter::finished);
            QVERIFY(writer.start({ source, {}, dir.filePath(QLatin1String(name)), 0 }));
            QVERIFY(!writer.start({ source, {}, dir.filePath(QStringLiteral("second")), 0 })); // one at a time
            QTRY_VERIFY_WITH_TIMEOUT(writer.progress() > 0, 20000); // copying has begun
            QCOMPARE(writer.currentTensor(), QStringLiteral("w"));
            writer.cancel();
            QVERIFY(finished.wait(20000) || !finished.isEmpty());
            const auto o = finished.first().first().value<CheckpointWriter::Outcome>();
            QVERIFY2(o.kind == CheckpointWriter::Outcome::Kind::Cancelled, qPrintable(o.summary()));
            QCOMPARE(entries(dir.path()), QStringList { QStringLiteral("big.safetensors") });
            QVERIFY(!writer.isRunning());
        }
    }

    // Destroying the writer mid-copy (the window closing) stops the write and waits: nothing is left.
    void destroyingTheWriterStopsTheWrite()
    {
        QTemporaryDir dir;
        const QString input = dir.filePath(QStringLiteral("big.safetensors"));
        const qint64 bytes = qint64(512) << 20;
        QVERIFY(test::writeSafetensorsFile(input,
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[" + QByteArray::number(bytes / 4) + "],\"data_offsets\":[0,"
                + QByteArray::number(bytes) + "]}}",
            {}, bytes));
        auto source = std::make_shared<const Source>(openSource(input.toStdString()));
        {
            CheckpointWriter writer;
            QVERIFY(writer.start({ source, {}, dir.filePath(QStringLiteral("out.safetensors")), 0 }));
            QTRY_VERIFY_WITH_TIMEOUT(writer.progress() > 0, 20000);
        }
        QCOMPARE(entries(dir.path()), QStringList { QStringLiteral("big.safetensors") });
    }
};

QTEST_GUILESS_MAIN(TestLatestJob)
#include "tst_latest_job.moc"
