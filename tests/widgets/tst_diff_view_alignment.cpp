// The two halves of the DiffView on the demo pair (a torch.compile'd checkpoint against its model), with a
// step counter only the checkpoint has saved first, so B's half starts with a gap: every row sits at the same height and on the same line in both trees
// after expanding, collapsing, scrolling and filtering, at several window sizes; and selecting a row, by
// click, keyboard or DiffView::select, never scrolls a half sideways away from its names.

#include "formats/loader.h"
#include "models/aligned_tree_model.h"
#include "session/diff_snapshot.h"
#include "session/side_loader.h"
#include "views/diff_view.h"
#include "views/source_pane.h"

#include <QHeaderView>
#include <QScrollBar>
#include <QTest>
#include <QTreeView>

#include <memory>

using namespace sl;
using namespace sl::gui;

namespace {

const QString kCheckpoint = QStringLiteral(STATELENS_SOURCE_DIR "/resources/demo/checkpoint.pt");
const QString kModel = QStringLiteral(STATELENS_SOURCE_DIR "/resources/demo/model.pt");

// The model outlives the view that shows it.
struct Window {
    AlignedTreeModel model;
    SideLoader sideA, sideB; // declared before the view, whose panes show them
    std::unique_ptr<DiffView> view;
    QTreeView* a = nullptr;
    QTreeView* b = nullptr;
};

// Rows that are on screen in either half, each compared with its line in the other half. Empty when aligned.
QString misalignment(const Window& w)
{
    QStringList problems;
    int compared = 0;
    for (QTreeView* from : { w.a, w.b }) {
        const int bottom = from->viewport()->height();
        for (QModelIndex i = from->indexAt(QPoint(1, 1)); i.isValid(); i = from->indexBelow(i)) {
            const QRect ra = w.a->visualRect(i.siblingAtColumn(AlignedTreeModel::NameA));
            const QRect rb = w.b->visualRect(i.siblingAtColumn(AlignedTreeModel::NameB));
            const QRect& own = from == w.a ? ra : rb;
            if (own.top() >= bottom)
                break;
            ++compared;
            if (ra.top() != rb.top() || ra.height() != rb.height())
                problems << QStringLiteral("%1: A y=%2 h=%3, B y=%4 h=%5")
                                .arg(w.model.path(i))
                                .arg(ra.top())
                                .arg(ra.height())
                                .arg(rb.top())
                                .arg(rb.height());
        }
    }
    if (compared < 4)
        problems << QStringLiteral("only %1 rows on screen").arg(compared);
    if (problems.size() > 8)
        problems = problems.mid(0, 8) << QStringLiteral("...");
    return problems.join(QLatin1Char('\n'));
}

#define VERIFY_ALIGNED(w, when)                                                                                      \
    do {                                                                                                             \
        const QString problems = misalignment(w);                                                                    \
        QVERIFY2(problems.isEmpty(), qPrintable(QStringLiteral(when ":\n") + problems));                             \
    } while (false)

// The name column of `view` lies inside its viewport, from its first pixel.
bool nameVisible(QTreeView* view, int nameColumn)
{
    const int x = view->header()->sectionViewportPosition(nameColumn);
    return x >= 0 && x < view->viewport()->width() && !view->isColumnHidden(nameColumn);
}

} // namespace

class TestDiffViewAlignment : public QObject {
    Q_OBJECT
    std::shared_ptr<const DiffSnapshot> m_snapshot;

    std::unique_ptr<Window> show(QSize size)
    {
        auto w = std::make_unique<Window>();
        w->model.setSnapshot(m_snapshot);
        w->view = std::make_unique<DiffView>(&w->model, new SourcePane(QStringLiteral("A"), &w->sideA),
            new SourcePane(QStringLiteral("B"), &w->sideB));
        w->a = w->view->viewA();
        w->b = w->view->viewB();
        w->view->resize(size);
        w->view->show();
        if (!QTest::qWaitForWindowExposed(w->view.get()))
            return nullptr;
        w->view->expandDefault();
        QCoreApplication::processEvents();
        return w;
    }

private slots:
    void initTestCase()
    {
        Source a = openSource(kCheckpoint.toStdString());
        Entry step;
        step.name = "_step";
        step.dtype = *dtypeFromName("int64");
        a.entries.insert(a.entries.begin(), step);
        m_snapshot = buildSnapshot(std::make_shared<const Source>(std::move(a)),
            std::make_shared<const Source>(openSource(kModel.toStdString())), RuleSet {}, 1);
        QVERIFY(m_snapshot->complete());
        // What the issue is about: the first row is a gap on B's side, so it has no status icon there.
        AlignedTreeModel m;
        m.setSnapshot(m_snapshot);
        QVERIFY2(m.index(0, AlignedTreeModel::NameA).data(Qt::DecorationRole).isValid()
                && !m.index(0, AlignedTreeModel::NameB).data(Qt::DecorationRole).isValid(),
            "the first row should be A's only, a gap in B's half");
    }

    void rowsShareOneLine_data()
    {
        QTest::addColumn<QSize>("size");
        // The trees' share of a 1600x1000 and a 1280x720 window; low enough that the expanded tree scrolls.
        QTest::newRow("1600x460") << QSize(1600, 460);
        QTest::newRow("1280x300") << QSize(1280, 300);
        QTest::newRow("1360x400") << QSize(1360, 400); // A's columns fit, B's need a horizontal scroll bar
        QTest::newRow("800x300") << QSize(800, 300);
    }

    void rowsShareOneLine()
    {
        QFETCH(QSize, size);
        auto w = show(size);
        QVERIFY(w);
        QCOMPARE(w->a->indexAt(QPoint(1, 1)).row(), 0);
        VERIFY_ALIGNED(*w, "as opened");

        // One height for both halves, the height of a row that has its status icon.
        const QModelIndex first = w->model.index(0, 0);
        QCOMPARE(w->a->visualRect(first.siblingAtColumn(AlignedTreeModel::NameA)).height(),
            w->b->visualRect(first.siblingAtColumn(AlignedTreeModel::NameB)).height());
        QVERIFY(w->b->visualRect(first.siblingAtColumn(AlignedTreeModel::NameB)).height() >= w->b->iconSize().height());

        w->a->expandAll();
        w->b->expandAll();
        QCoreApplication::processEvents();
        VERIFY_ALIGNED(*w, "after expandAll");

        const QModelIndex layers = w->model.findPath(QStringLiteral("layers"));
        QVERIFY(layers.isValid());
        w->a->collapse(layers);
        QVERIFY(!w->b->isExpanded(layers));
        QCoreApplication::processEvents();
        VERIFY_ALIGNED(*w, "after collapsing layers");
        w->b->expand(layers);
        QCoreApplication::processEvents();
        VERIFY_ALIGNED(*w, "after expanding layers again");

        // B's scroll bar is the one on screen; its bottom is A's bottom too.
        QTRY_VERIFY(w->b->verticalScrollBar()->maximum() > 0);
        w->b->verticalScrollBar()->setValue(w->b->verticalScrollBar()->maximum());
        QCoreApplication::processEvents();
        QCOMPARE(w->a->verticalScrollBar()->value(), w->b->verticalScrollBar()->value());
        VERIFY_ALIGNED(*w, "at the bottom");
        w->b->verticalScrollBar()->setValue(w->b->verticalScrollBar()->maximum() / 2);
        QCoreApplication::processEvents();
        VERIFY_ALIGNED(*w, "half way down");

        AlignedTreeModel::Filter filter;
        filter.text = QStringLiteral("weight");
        QVERIFY(w->model.setFilter(filter));
        QCoreApplication::processEvents();
        VERIFY_ALIGNED(*w, "after filtering");
        w->a->expandAll();
        w->b->expandAll();
        w->b->verticalScrollBar()->setValue(w->b->verticalScrollBar()->maximum());
        QCoreApplication::processEvents();
        VERIFY_ALIGNED(*w, "filtered, expanded, at the bottom");
        QVERIFY(w->model.setFilter({}));
        QCoreApplication::processEvents();
        VERIFY_ALIGNED(*w, "filter cleared");
    }

    void selectingKeepsEachHalfsHorizontalScroll()
    {
        auto w = show(QSize(1280, 720));
        QVERIFY(w);
        QCOMPARE(w->b->horizontalScrollBar()->value(), 0);
        QVERIFY(nameVisible(w->b, AlignedTreeModel::NameB));

        // A click on a row of the left tree, in A's name and then in A's shape column.
        for (int column : { AlignedTreeModel::NameA, AlignedTreeModel::ShapeA }) {
            const QModelIndex row = w->a->indexAt(QPoint(1, w->a->viewport()->height() / 2)).siblingAtColumn(column);
            QVERIFY(row.isValid());
            QTest::mouseClick(w->a->viewport(), Qt::LeftButton, {}, w->a->visualRect(row).center());
            QCOMPARE(w->view->currentIndex().row(), row.row());
            QCOMPARE(w->view->currentIndex().internalId(), row.internalId());
            QCOMPARE(w->b->horizontalScrollBar()->value(), 0);
            QCOMPARE(w->a->horizontalScrollBar()->value(), 0);
            QVERIFY(nameVisible(w->b, AlignedTreeModel::NameB));
        }

        // Going to a row far down scrolls both halves to it, not sideways.
        w->a->expandAll();
        w->b->expandAll();
        QModelIndex last = w->model.index(w->model.rowCount() - 1, 0);
        while (w->model.rowCount(last) > 0)
            last = w->model.index(w->model.rowCount(last) - 1, 0, last);
        w->view->select(last);
        QCoreApplication::processEvents();
        QCOMPARE(w->b->horizontalScrollBar()->value(), 0);
        QVERIFY(nameVisible(w->a, AlignedTreeModel::NameA));
        QVERIFY(nameVisible(w->b, AlignedTreeModel::NameB));
        QVERIFY(w->a->viewport()->rect().contains(w->a->visualRect(last.siblingAtColumn(AlignedTreeModel::NameA))));
        QVERIFY(w->b->viewport()->rect().contains(w->b->visualRect(last.siblingAtColumn(AlignedTreeModel::NameB))));
        VERIFY_ALIGNED(*w, "after select");

        // The keyboard moves the current row: both halves follow it down, neither scrolls sideways.
        w->b->verticalScrollBar()->setValue(0);
        w->view->select(w->model.index(0, 0));
        w->a->setFocus();
        for (int i = 0; i < 60; ++i)
            QTest::keyClick(w->a, Qt::Key_Down);
        const QModelIndex current = w->view->currentIndex();
        QVERIFY(w->a->viewport()->rect().contains(w->a->visualRect(current.siblingAtColumn(AlignedTreeModel::NameA))));
        QVERIFY(w->b->viewport()->rect().contains(w->b->visualRect(current.siblingAtColumn(AlignedTreeModel::NameB))));
        QCOMPARE(w->b->horizontalScrollBar()->value(), 0);
        VERIFY_ALIGNED(*w, "after the keyboard moved down");

        // Each half's horizontal scroll is its own: a click on the left leaves where the right was scrolled.
        QScrollBar* hb = w->b->horizontalScrollBar();
        w->view->resize(900, 500); // so B's columns need scrolling
        QTRY_VERIFY(hb->maximum() > 0);
        hb->setValue(hb->maximum() / 2);
        const int scrolled = hb->value();
        const QModelIndex row = w->a->indexAt(QPoint(1, 20));
        QTest::mouseClick(w->a->viewport(), Qt::LeftButton, {}, w->a->visualRect(row).center());
        QCOMPARE(hb->value(), scrolled);
        QCOMPARE(w->a->horizontalScrollBar()->value(), 0);
        // and a click on the right leaves the left half where it was.
        const QModelIndex other = w->b->indexAt(QPoint(w->b->viewport()->width() / 2, 60));
        QVERIFY(other.isValid());
        QTest::mouseClick(w->b->viewport(), Qt::LeftButton, {}, w->b->visualRect(other).center());
        QCOMPARE(w->view->currentIndex().internalId(), other.internalId());
        QCOMPARE(w->a->horizontalScrollBar()->value(), 0);
        QCOMPARE(hb->value(), scrolled);
        VERIFY_ALIGNED(*w, "after clicks on both halves");
    }
};

QTEST_MAIN(TestDiffViewAlignment)
#include "tst_diff_view_alignment.moc"
