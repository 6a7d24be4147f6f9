#pragma once
// The header above one side of the window: what is open there (path, format, container), a container
// picker, the load's progress with Cancel, and what the reader found. Loading runs off the UI thread; an
// error shows here, on its side, never as a dialog. Files and folders dropped here open on this side; several
// files dropped at once open as one per-rank source.

#include "formats/open_options.h"
#include "model/source.h"
#include "session/latest_job.h"

#include <QWidget>

#include <functional>
#include <memory>

class QComboBox;
class QLabel;
class QListWidget;
class QProgressBar;
class QTimer;
class QToolButton;

namespace sl::gui {

struct LoadResult {
    std::shared_ptr<const Source> source;
    QString error;
};

class SourcePane : public QWidget {
    Q_OBJECT
public:
    SourcePane(const QString& role, QWidget* parent = nullptr);

    // Loads in the background; `load` runs on a worker thread and must not touch widgets. It gets options
    // carrying this load's progress and cancellation (util/load_control.h) to pass to the core. A load
    // started while another runs replaces it (the older one is cancelled and its result discarded).
    void load(const QString& label, std::function<Source(const OpenOptions&)> load);
    void loadPath(const QString& path);
    // One path, or several files opened together as one per-rank source (formats/rank_sets.h).
    void loadPaths(const QStringList& paths);
    // Picks another container of the open source (the optimizer state, an EMA copy).
    void selectContainer(const QString& container);
    // Cancels the running load: the side keeps what it had. Readers stop at their next checkpoint (between
    // index shards or rank files, every 65,536 pickle opcodes); the result, if any, is discarded.
    void cancel();

    std::shared_ptr<const Source> source() const { return m_source; }
    bool isLoading() const { return m_loading; }
    QString error() const { return m_error; }
    QString label() const { return m_label; }

signals:
    void sourceChanged(std::shared_ptr<const Source> source); // null when a load failed
    void loadingChanged(bool loading);
    void filesDropped(const QStringList& paths); // several: the rank files of one save

protected:
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private:
    void finished(LoadResult result);
    void showSource();

    QString m_role;
    QString m_label;
    QLabel* m_title;
    QLabel* m_summary;
    QComboBox* m_containers;
    QProgressBar* m_progress;
    QToolButton* m_cancel;
    QListWidget* m_findings;
    std::shared_ptr<const Source> m_source;
    QString m_error;
    bool m_loading = false;
    LatestJob<LoadResult> m_load { this };
    QTimer* m_poll; // reads the load's progress into the bar
};

} // namespace sl::gui
