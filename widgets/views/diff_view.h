#pragma once
// The two trees side by side: A's half of the aligned model on the left, B's on the right, each under its
// SourcePane. Both views share the model and one selection model; expanding, collapsing and scrolling one
// does the same to the other, so a row and its counterpart (or the gap where it is missing) always sit on
// the same line: both use one row height (AlignedRowDelegate) and equally tall viewports. Selecting a row
// scrolls each half up or down only; sideways scrolling is each half's own.

#include <QWidget>

class QTreeView;
class QModelIndex;

namespace sl::gui {

class AlignedTreeModel;
class SourcePane;

class DiffView : public QWidget {
    Q_OBJECT
public:
    DiffView(AlignedTreeModel* model, SourcePane* paneA, SourcePane* paneB, QWidget* parent = nullptr);

    QTreeView* viewA() const { return m_a; }
    QTreeView* viewB() const { return m_b; }
    QModelIndex currentIndex() const;
    void select(const QModelIndex& index); // selects, scrolls to and reveals a node (and each half's names)
    // Expansion survives model resets (a new diff, a filter keystroke) by path.
    void rememberExpansion();
    void restoreExpansion();
    void expandDefault(); // the first levels, and every path to a difference when there are few

signals:
    void filesDropped(bool sideA, const QStringList& paths);
    void contextMenuRequested(const QModelIndex& index, const QPoint& globalPos);

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void sync(QTreeView* from, QTreeView* to);

    AlignedTreeModel* m_model;
    QTreeView* m_a;
    QTreeView* m_b;
    QStringList m_expanded;
    bool m_syncing = false;
};

} // namespace sl::gui
