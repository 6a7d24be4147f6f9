#pragma once
// What one side of the window has open, and the load that is replacing it: the source, the last load's
// error, and a load in flight with its progress. Loading runs off the UI thread (latest_job.h); a load started
// while another runs replaces it, and a cancelled one leaves the side as it was. The window reads its sources
// from here and views/source_pane.h shows one; neither loads anything itself.

#include "formats/open_options.h"
#include "model/source.h"
#include "session/latest_job.h"

#include <QObject>
#include <QString>
#include <QStringList>

#include <functional>
#include <memory>

namespace sl::gui {

class SideLoader : public QObject {
    Q_OBJECT
public:
    explicit SideLoader(QObject* parent = nullptr);

    // `load` runs on a worker thread with options carrying this load's progress and cancellation
    // (util/load_control.h), to pass on to the core; `label` names what is being opened.
    void load(const QString& label, std::function<Source(const OpenOptions&)> load);
    // One path, or several files opened together as one per-rank source (formats/rank_sets.h).
    void loadPaths(const QStringList& paths);
    // Another container of the open source (the optimizer state, an EMA copy), without reading the file again.
    void selectContainer(const QString& container);
    // Stops the running load: readers stop at their next checkpoint (between index shards or rank files,
    // every 65,536 pickle opcodes) and the result, if any, is discarded. The side keeps what it had.
    void cancel();

    std::shared_ptr<const Source> source() const { return m_source; }
    bool isLoading() const { return m_loading; }
    QString error() const { return m_error; } // why the last load failed; empty when it did not
    QString label() const { return m_label; } // what is open, or being opened
    // The running load's progress in [0, 1]; negative while the reader has not counted its work.
    double progress() const;

signals:
    void loadStarted(const QString& label);
    void loadingChanged(bool loading);
    // After a load ends: the new source, or null with error() set. Not emitted when a load is cancelled.
    void sourceChanged(std::shared_ptr<const Source> source);
    void loadCancelled();

private:
    struct Result {
        std::shared_ptr<const Source> source;
        QString error;
    };
    void finished(Result result);

    QString m_label;
    std::shared_ptr<const Source> m_source;
    QString m_error;
    bool m_loading = false;
    LatestJob<Result> m_job { this }; // declared last: its destructor waits for a load still reading
};

} // namespace sl::gui
