#pragma once
// One side of the window: what is loaded there (path, format, container), its entry tree, and what the
// reader found. Loading happens off the UI thread; an error shows in the pane, not in a dialog.

#include "model/source.h"

#include <QFutureWatcher>
#include <QWidget>

#include <functional>
#include <memory>

class QLabel;
class QListWidget;
class QTreeView;

namespace sl::gui {

class SourceTreeModel;

struct LoadResult {
    std::shared_ptr<const Source> source;
    QString error;
};

class SourcePane : public QWidget {
    Q_OBJECT
public:
    SourcePane(const QString& role, QWidget* parent = nullptr);

    // Loads in the background; `load` runs on a worker thread and must not touch widgets.
    void load(const QString& label, std::function<Source()> load);
    void loadPath(const QString& path);
    const Source* source() const;
    bool isLoading() const;
    QTreeView* view() const { return m_view; }

signals:
    void loaded();

private:
    void finished();

    QString m_role;
    QLabel* m_title;
    QLabel* m_summary;
    QTreeView* m_view;
    QListWidget* m_findings;
    SourceTreeModel* m_model;
    QFutureWatcher<LoadResult> m_watcher;
};

} // namespace sl::gui
