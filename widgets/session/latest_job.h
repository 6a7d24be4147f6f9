#pragma once
// Work off the UI thread of which only the latest run counts: opening a source, reading the values of the
// selected tensors, comparing the values of every pair. start() cancels the run it replaces (through that
// run's LoadControl, which the core's readers check) and a replaced or cancelled run's result is never
// delivered, so no view has to compare ids or snapshots to drop a stale answer. The owner's destructor
// waits for what is still running, so no run outlives the data it was given.
//
// The work runs on Qt's thread pool and gets its LoadControl (progress, cancellation); `done` runs on the
// owner's thread with the result. Hold the work's inputs by value (shared pointers): the run may finish
// after the owner has moved on.

#include "util/load_control.h"

#include <QFuture>
#include <QFutureWatcher>
#include <QObject>
#include <QtConcurrent/QtConcurrentRun>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace sl::gui {

template <typename Result>
class LatestJob {
public:
    explicit LatestJob(QObject* owner)
        : m_owner(owner)
    {
    }
    ~LatestJob()
    {
        cancel();
        for (QFuture<Result>& f : m_runs)
            f.waitForFinished();
    }
    LatestJob(const LatestJob&) = delete;
    LatestJob& operator=(const LatestJob&) = delete;

    template <typename Work>
    void start(Work work, std::function<void(Result)> done)
    {
        cancel();
        std::erase_if(m_runs, [](const QFuture<Result>& f) { return f.isFinished(); });
        auto control = std::make_shared<LoadControl>();
        m_control = control;
        m_running = true;
        const uint64_t id = ++m_id;
        auto* watcher = new QFutureWatcher<Result>(m_owner);
        QObject::connect(watcher, &QFutureWatcherBase::finished, m_owner, [this, watcher, id, done = std::move(done)] {
            watcher->deleteLater();
            if (id != m_id)
                return; // replaced or cancelled meanwhile
            m_running = false;
            done(watcher->result());
        });
        m_runs.push_back(QtConcurrent::run([work = std::move(work), control]() -> Result { return work(*control); }));
        watcher->setFuture(m_runs.back());
    }

    // The current run stops at its next check and its result is dropped.
    void cancel()
    {
        if (m_control)
            m_control->cancel();
        ++m_id;
        m_running = false;
    }

    // Asks the current run to stop (its LoadControl is cancelled) and still delivers its result: for work
    // that must say how it ended, such as a write that reports a cancel only once its temporary files are gone.
    void stop()
    {
        if (m_control)
            m_control->cancel();
    }

    bool running() const { return m_running; }
    // The current run's progress (LoadControl::fraction); null before the first run.
    const LoadControl* control() const { return m_control.get(); }

private:
    QObject* m_owner;
    std::shared_ptr<LoadControl> m_control;
    std::vector<QFuture<Result>> m_runs; // unfinished runs, waited for at destruction
    uint64_t m_id = 0;
    bool m_running = false;
};

} // namespace sl::gui
