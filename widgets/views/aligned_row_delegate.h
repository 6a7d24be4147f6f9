#pragma once
// One row height for both halves of the DiffView. The trees use uniform row heights (100,000-row trees stay
// cheap), and Qt takes that height from the first row; a gap has no status icon, so a half that starts with
// one would get shorter rows than the other and drift a little more per row. Every row here is as tall as a
// name with its icon, in the view's font or bold italic (wrapper names), whatever the row holds.
//
// It also draws a pair's word diff (AlignedTreeModel::HighlightRole): the segments of A's name that go
// (_orig_mod., attention.wq.) and of B's that come, each on a tinted background inside the name.

#include <QStyledItemDelegate>

namespace sl::gui {

class AlignedRowDelegate : public QStyledItemDelegate {
    Q_OBJECT
public:
    using QStyledItemDelegate::QStyledItemDelegate;

    QSize sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const override;
    void paint(QPainter* painter, const QStyleOptionViewItem& option, const QModelIndex& index) const override;

protected:
    // Statuses read from the left ("pending: suggestion 3 · wrapper prefix"): cut at the right end, where
    // names (elided in the middle) keep both ends.
    void initStyleOption(QStyleOptionViewItem* option, const QModelIndex& index) const override;
    // The height of every row of a view whose options (font, icon size, style) are `viewOption`'s.
    static int rowHeight(const QStyleOptionViewItem& viewOption);
};

} // namespace sl::gui
