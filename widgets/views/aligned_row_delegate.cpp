#include "aligned_row_delegate.h"

#include "models/aligned_tree_model.h"

#include <QApplication>
#include <QPainter>
#include <QStyle>
#include <QTextLayout>

#include <algorithm>
#include <vector>

namespace sl::gui {

namespace {

// A pair's name that does not fit its column, shortened so what differs stays readable: runs of segments
// both names share (never the last one) become "…", the longest run first; then marked segments from the
// left, keeping the last marked one. The marks move with the text. Empty when even that does not fit.
QString elideKeepingMarks(const QString& text, const QVariantList& spans, const QFontMetrics& fm, int width, QVariantList& marks)
{
    struct Segment {
        int start, length;
        bool marked;
    };
    std::vector<Segment> segs;
    int start = 0, depth = 0;
    for (int i = 0; i <= text.size(); ++i) {
        const QChar c = i < text.size() ? text[i] : QLatin1Char('.');
        if (c == QLatin1Char('{'))
            ++depth;
        else if (c == QLatin1Char('}') && depth > 0)
            --depth;
        else if (c == QLatin1Char('.') && (depth == 0 || i == text.size())) {
            bool marked = false;
            for (const QVariant& v : spans) {
                const QPoint p = v.toPoint();
                marked = marked || (p.x() < i && p.x() + p.y() > start);
            }
            segs.push_back({ start, i - start, marked });
            start = i + 1;
        }
    }
    std::vector<bool> elided(segs.size(), false);
    auto build = [&](QVariantList* outMarks) {
        QString out;
        for (size_t k = 0; k < segs.size(); ++k) {
            if (elided[k] && k > 0 && elided[k - 1])
                continue; // one "…" per run
            if (!out.isEmpty())
                out += QLatin1Char('.');
            if (elided[k]) {
                out += QChar(0x2026);
                continue;
            }
            const int at = static_cast<int>(out.size());
            out += text.mid(segs[k].start, segs[k].length);
            if (outMarks && segs[k].marked) {
                const bool last = k + 1 == segs.size();
                *outMarks << (last ? QPoint(std::max(at - 1, 0), segs[k].length + (at > 0 ? 1 : 0)) : QPoint(at, segs[k].length + 1));
            }
        }
        return out;
    };
    for (;;) {
        QString shown = build(nullptr);
        if (fm.horizontalAdvance(shown) <= width) {
            marks.clear();
            return build(&marks);
        }
        // The longest run of shared segments not elided yet (the last segment always stays).
        size_t bestStart = 0, bestLength = 0, bestChars = 0;
        for (size_t k = 0; k + 1 < segs.size();) {
            if (segs[k].marked || elided[k]) {
                ++k;
                continue;
            }
            size_t e = k, chars = 0;
            while (e + 1 < segs.size() && !segs[e].marked && !elided[e])
                chars += static_cast<size_t>(segs[e++].length);
            if (chars > bestChars) {
                bestStart = k;
                bestLength = e - k;
                bestChars = chars;
            }
            k = e;
        }
        if (!bestLength) {
            // Then marked segments from the left, keeping the last marked one: the most specific change
            // ("….self_attn.q_proj.weight").
            size_t lastMarked = 0; // past the end when no segment is marked
            for (size_t k = 0; k < segs.size(); ++k)
                if (segs[k].marked && !elided[k])
                    lastMarked = k;
            size_t k = 0;
            while (k < lastMarked && (!segs[k].marked || elided[k]))
                ++k;
            if (k >= lastMarked || k + 1 >= segs.size())
                return {};
            bestStart = k;
            bestLength = 1;
        }
        for (size_t k = bestStart; k < bestStart + bestLength; ++k)
            elided[k] = true;
    }
}

} // namespace

QSize AlignedRowDelegate::sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const
{
    // `option` comes from the view (its font, not the row's), so both halves get the same height.
    QSize size = QStyledItemDelegate::sizeHint(option, index);
    size.setHeight(rowHeight(option));
    return size;
}

void AlignedRowDelegate::paint(QPainter* painter, const QStyleOptionViewItem& option, const QModelIndex& index) const
{
    const QVariantList spans = index.data(AlignedTreeModel::HighlightRole).toList();
    if (spans.isEmpty()) {
        QStyledItemDelegate::paint(painter, option, index);
        return;
    }
    QStyleOptionViewItem opt = option;
    initStyleOption(&opt, index);
    const QWidget* widget = opt.widget;
    const QStyle* style = widget ? widget->style() : QApplication::style();
    const QString text = opt.text;
    // The whole name stays available as the tooltip (the model's), whatever is drawn.
    const QRect textRect = style->subElementRect(QStyle::SE_ItemViewItemText, &opt, widget);
    const int margin = style->pixelMetric(QStyle::PM_FocusFrameHMargin, nullptr, widget) + 1;
    QString shown = text;
    QVariantList marks = spans;
    if (opt.fontMetrics.horizontalAdvance(text) > textRect.width() - 2 * margin) {
        shown = elideKeepingMarks(text, spans, opt.fontMetrics, textRect.width() - 2 * margin, marks);
        if (shown.isEmpty()) { // not even the differing segments fit: the style's elided name, unmarked
            QStyledItemDelegate::paint(painter, option, index);
            return;
        }
    }
    opt.text.clear(); // the style draws background, selection and icon; the name is drawn below
    style->drawControl(QStyle::CE_ItemViewItem, &opt, painter, widget);

    // Red for what A's name has and B's lacks, green for what B's has: the colours of a text diff.
    const bool sideA = index.column() <= AlignedTreeModel::SizeA;
    const bool dark = opt.palette.color(QPalette::Base).lightness() < 128;
    QColor tint = sideA ? QColor(0xe5, 0x39, 0x35) : QColor(0x43, 0xa0, 0x47);
    tint.setAlpha(dark ? 110 : 70);
    QList<QTextLayout::FormatRange> formats;
    for (const QVariant& v : marks) {
        const QPoint span = v.toPoint();
        QTextLayout::FormatRange range;
        range.start = span.x();
        range.length = span.y();
        range.format.setBackground(tint);
        formats << range;
    }
    QTextLayout layout(shown, opt.font);
    layout.setFormats(formats);
    layout.beginLayout();
    QTextLine line = layout.createLine();
    line.setLineWidth(textRect.width());
    layout.endLayout();
    painter->save();
    const bool selected = opt.state & QStyle::State_Selected;
    painter->setPen(opt.palette.color(opt.state & QStyle::State_Enabled ? QPalette::Normal : QPalette::Disabled,
        selected ? QPalette::HighlightedText : QPalette::Text));
    const qreal y = textRect.top() + (textRect.height() - line.height()) / 2.0;
    layout.draw(painter, QPointF(textRect.left() + margin, y));
    painter->restore();
}

void AlignedRowDelegate::initStyleOption(QStyleOptionViewItem* option, const QModelIndex& index) const
{
    QStyledItemDelegate::initStyleOption(option, index);
    if (index.column() == AlignedTreeModel::StatusColumn)
        option->textElideMode = Qt::ElideRight;
}

int AlignedRowDelegate::rowHeight(const QStyleOptionViewItem& viewOption)
{
    const QWidget* widget = viewOption.widget;
    const QStyle* style = widget ? widget->style() : QApplication::style();
    QStyleOptionViewItem opt = viewOption;
    opt.features = QStyleOptionViewItem::HasDisplay | QStyleOptionViewItem::HasDecoration;
    opt.text = QStringLiteral("Mg");
    if (!opt.decorationSize.isValid()) {
        const int icon = style->pixelMetric(QStyle::PM_SmallIconSize, nullptr, widget);
        opt.decorationSize = QSize(icon, icon);
    }
    int height = style->sizeFromContents(QStyle::CT_ItemViewItem, &opt, QSize(), widget).height();
    opt.font.setBold(true);
    opt.font.setItalic(true);
    opt.fontMetrics = QFontMetrics(opt.font);
    height = std::max(height, style->sizeFromContents(QStyle::CT_ItemViewItem, &opt, QSize(), widget).height());
    return height;
}

} // namespace sl::gui
