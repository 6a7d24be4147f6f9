#include "diff_view.h"

#include "models/aligned_tree_model.h"
#include "views/aligned_row_delegate.h"
#include "views/dropped_paths.h"
#include "views/source_pane.h"

#include <QDragEnterEvent>
#include <QDropEvent>
#include <QHeaderView>
#include <QMimeData>
#include <QScrollBar>
#include <QSplitter>
#include <QTreeView>
#include <QVBoxLayout>

namespace sl::gui {

namespace {

// One half. The current index is shared with the other half and often lies in that half's columns, hidden
// here, and Qt scrolls sideways toward where a hidden column would be (B's Status column): this half scrolls
// up and down to a row only; sideways is the user's.
class HalfTree : public QTreeView {
public:
    explicit HalfTree(int nameColumn)
        : m_nameColumn(nameColumn)
    {
    }

    void scrollTo(const QModelIndex& index, ScrollHint hint = EnsureVisible) override
    {
        const int x = horizontalScrollBar()->value();
        QTreeView::scrollTo(index.isValid() ? index.siblingAtColumn(m_nameColumn) : index, hint);
        horizontalScrollBar()->setValue(x);
    }

private:
    int m_nameColumn;
};

// Scrolls `view` sideways only if its name column starts off screen.
void revealName(QTreeView* view, int nameColumn)
{
    const int x = view->header()->sectionViewportPosition(nameColumn);
    if (x < 0 || x >= view->viewport()->width())
        view->horizontalScrollBar()->setValue(view->header()->sectionPosition(nameColumn));
}

QTreeView* makeTree(AlignedTreeModel* model, std::initializer_list<int> columns, int nameColumn)
{
    auto* view = new HalfTree(nameColumn);
    view->setModel(model);
    view->setUniformRowHeights(true); // keeps 100,000-row trees cheap to lay out; AlignedRowDelegate sets the height
    view->setSelectionMode(QAbstractItemView::ExtendedSelection); // an unexpected and a missing row: a pair
    view->setSelectionBehavior(QAbstractItemView::SelectRows);
    view->setAllColumnsShowFocus(true);
    view->setContextMenuPolicy(Qt::CustomContextMenu);
    view->setExpandsOnDoubleClick(true);
    view->setTextElideMode(Qt::ElideMiddle);
    for (int c = 0; c < AlignedTreeModel::ColumnCount; ++c)
        view->setColumnHidden(c, std::find(columns.begin(), columns.end(), c) == columns.end());
    view->setTreePosition(nameColumn);
    // Put the name column first on screen, the others in the given order.
    int visual = 0;
    for (int c : columns)
        view->header()->moveSection(view->header()->visualIndex(c), visual++);
    view->header()->setSectionResizeMode(QHeaderView::Interactive);
    // Names first: a pair's line shows both full names, deep in the tree. The rest is read at a glance.
    view->header()->resizeSection(nameColumn, 330);
    for (int c : columns)
        if (c == AlignedTreeModel::SizeA || c == AlignedTreeModel::SizeB)
            view->header()->resizeSection(c, 120);
        else if (c == AlignedTreeModel::StatusColumn)
            view->header()->resizeSection(c, 190);
        else if (c != nameColumn)
            view->header()->resizeSection(c, 85);
    view->header()->setStretchLastSection(true);
    return view;
}

} // namespace

DiffView::DiffView(AlignedTreeModel* model, SourcePane* paneA, SourcePane* paneB, QWidget* parent)
    : QWidget(parent)
    , m_model(model)
    , m_a(makeTree(model, { AlignedTreeModel::NameA, AlignedTreeModel::ShapeA, AlignedTreeModel::DTypeA, AlignedTreeModel::SizeA }, AlignedTreeModel::NameA))
    // The status beside B's names: it says what each line is ("pending: suggestion 3") without scrolling.
    , m_b(makeTree(model, { AlignedTreeModel::NameB, AlignedTreeModel::StatusColumn, AlignedTreeModel::ShapeB, AlignedTreeModel::DTypeB, AlignedTreeModel::SizeB, AlignedTreeModel::ValuesColumn }, AlignedTreeModel::NameB))
{
    m_a->setObjectName(QStringLiteral("treeA"));
    m_b->setObjectName(QStringLiteral("treeB"));
    m_b->setSelectionModel(m_a->selectionModel()); // one selection for both halves
    auto* rows = new AlignedRowDelegate(this);
    for (QTreeView* v : { m_a, m_b }) {
        v->setItemDelegate(rows);
        // Equal viewport heights, or the half whose columns fit would stop a row short of the other at the bottom.
        v->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOn);
    }
    // One vertical scroll bar is enough: B's, on the right, scrolls both.
    m_a->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    // The panes sit in their own row so both trees start at the same height whatever each pane shows;
    // the two splitters move together.
    auto* panes = new QSplitter(Qt::Horizontal, this);
    panes->addWidget(paneA);
    panes->addWidget(paneB);
    auto* trees = new QSplitter(Qt::Horizontal, this);
    trees->addWidget(m_a);
    trees->addWidget(m_b);
    for (QSplitter* s : { panes, trees })
        s->setChildrenCollapsible(false);
    connect(trees, &QSplitter::splitterMoved, panes, [panes, trees] { panes->setSizes(trees->sizes()); });
    connect(panes, &QSplitter::splitterMoved, trees, [panes, trees] { trees->setSizes(panes->sizes()); });
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(0);
    layout->addWidget(panes);
    layout->addWidget(trees, 1);

    sync(m_a, m_b);
    sync(m_b, m_a);
    // Expansion survives every reset (a new diff, a filter that changes the rows, folding) by path.
    connect(m_model, &QAbstractItemModel::modelAboutToBeReset, this, &DiffView::rememberExpansion);
    connect(m_model, &QAbstractItemModel::modelReset, this, &DiffView::restoreExpansion);
    for (QTreeView* v : { m_a, m_b }) {
        v->viewport()->setAcceptDrops(true);
        v->viewport()->installEventFilter(this);
        connect(v, &QTreeView::customContextMenuRequested, this, [this, v](const QPoint& pos) {
            emit contextMenuRequested(v->indexAt(pos), v->viewport()->mapToGlobal(pos));
        });
    }
}

void DiffView::sync(QTreeView* from, QTreeView* to)
{
    connect(from, &QTreeView::expanded, this, [this, to](const QModelIndex& i) {
        if (!m_syncing) {
            m_syncing = true;
            to->expand(i);
            m_syncing = false;
        }
    });
    connect(from, &QTreeView::collapsed, this, [this, to](const QModelIndex& i) {
        if (!m_syncing) {
            m_syncing = true;
            to->collapse(i);
            m_syncing = false;
        }
    });
    connect(from->verticalScrollBar(), &QScrollBar::valueChanged, to->verticalScrollBar(), [to](int v) {
        if (to->verticalScrollBar()->value() != v)
            to->verticalScrollBar()->setValue(v);
    });
}

QModelIndex DiffView::currentIndex() const { return m_a->currentIndex(); }

void DiffView::select(const QModelIndex& index)
{
    if (!index.isValid())
        return;
    for (QModelIndex p = index.parent(); p.isValid(); p = p.parent()) {
        m_a->expand(p);
        m_b->expand(p);
    }
    m_a->selectionModel()->setCurrentIndex(index, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    m_a->scrollTo(index);
    m_b->scrollTo(index);
    revealName(m_a, AlignedTreeModel::NameA);
    revealName(m_b, AlignedTreeModel::NameB);
}

void DiffView::rememberExpansion()
{
    m_expanded.clear();
    // Only expanded nodes are visited: collapsed subtrees are never walked.
    std::vector<QModelIndex> stack { QModelIndex() };
    while (!stack.empty()) {
        QModelIndex p = stack.back();
        stack.pop_back();
        const int rows = m_model->rowCount(p);
        for (int r = 0; r < rows; ++r) {
            QModelIndex c = m_model->index(r, 0, p);
            if (m_a->isExpanded(c)) {
                m_expanded << m_model->path(c);
                stack.push_back(c);
            }
        }
    }
}

void DiffView::restoreExpansion()
{
    m_syncing = true;
    for (const QString& path : std::as_const(m_expanded)) {
        QModelIndex i = m_model->findPath(path);
        if (i.isValid()) {
            m_a->expand(i);
            m_b->expand(i);
        }
    }
    m_syncing = false;
}

void DiffView::expandDefault()
{
    m_syncing = true;
    m_a->expandToDepth(0);
    m_b->expandToDepth(0);
    // Lead the eye to the differences when there are few of them: open every path to one.
    std::vector<QModelIndex> stack { QModelIndex() };
    int opened = 0;
    while (!stack.empty() && opened < 300) {
        QModelIndex p = stack.back();
        stack.pop_back();
        const int rows = m_model->rowCount(p);
        if (rows > 200)
            continue;
        for (int r = 0; r < rows; ++r) {
            QModelIndex c = m_model->index(r, 0, p);
            if (m_model->kind(c) == AlignedTreeModel::NodeKind::Inner && c.data(AlignedTreeModel::DifferenceRole).toBool()) {
                m_a->expand(c);
                m_b->expand(c);
                ++opened;
                stack.push_back(c);
            }
        }
    }
    m_syncing = false;
}

bool DiffView::eventFilter(QObject* watched, QEvent* event)
{
    const bool sideA = watched == m_a->viewport();
    if (event->type() == QEvent::DragEnter || event->type() == QEvent::DragMove) {
        auto* e = static_cast<QDropEvent*>(event);
        if (e->mimeData()->hasUrls()) {
            e->acceptProposedAction();
            return true;
        }
    } else if (event->type() == QEvent::Drop) {
        auto* e = static_cast<QDropEvent*>(event);
        const QStringList paths = droppedPaths(e->mimeData());
        if (!paths.isEmpty()) {
            e->acceptProposedAction();
            emit filesDropped(sideA, paths);
            return true;
        }
    }
    return QWidget::eventFilter(watched, event);
}

} // namespace sl::gui
