#pragma once
// Values > Compare Values of All Pairs: every aligned pair's bytes read and compared in the background
// (core/values/tensor_compare.h) for one diff snapshot, with progress and Cancel. The result names the
// snapshot it was computed for: a newer diff has other rows, and the window drops a result for an older one.

#include "session/diff_snapshot.h"
#include "session/latest_job.h"
#include "values/tensor_compare.h"

#include <QObject>

#include <memory>
#include <vector>

namespace sl::gui {

class PairValues : public QObject {
    Q_OBJECT
public:
    using PerRow = std::shared_ptr<const std::vector<values::ValueComparison>>; // per diff row

    explicit PairValues(QObject* parent = nullptr);

    // Starts comparing; false (and nothing starts) while a run is going or the snapshot lacks a side.
    bool start(std::shared_ptr<const DiffSnapshot> snapshot);
    // Stops the run at its next check; its result is dropped.
    void cancel();
    bool isRunning() const { return m_job.running(); }
    double progress() const; // [0, 1], negative before the run has counted its work

signals:
    void compared(std::shared_ptr<const DiffSnapshot> snapshot, PerRow perRow);
    void failed(); // the bytes could not be read
    void cancelled();

private:
    LatestJob<PerRow> m_job { this }; // its destructor waits for a run still reading
};

} // namespace sl::gui
