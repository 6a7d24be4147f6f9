// LatestJob (widgets/session/latest_job.h), the one way the window runs work off the UI thread: only the
// latest run's result is delivered, a replaced or cancelled run is told to stop through its LoadControl,
// and the owner's destruction waits for what still runs. And SideLoader (session/side_loader.h), one side's
// source and its loading, built on it: tested here without a widget.

#include "session/latest_job.h"
#include "formats/loader.h"
#include "session/entry_values.h"
#include "session/side_loader.h"
#include "util/error.h"

#include <QSignalSpy>

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

} // namespace

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
};

QTEST_GUILESS_MAIN(TestLatestJob)
#include "tst_latest_job.moc"
