#include "status_style.h"

#include "torch/wrapper_prefixes.h"

#include <QObject>
#include <QPainter>
#include <QPainterPath>
#include <QPixmap>
#include <QStringList>

namespace sl::gui {

int statusSeverity(RowStatus s)
{
    switch (s) {
    case RowStatus::Match:
        return 0;
    case RowStatus::Renamed:
        return 1;
    case RowStatus::Dropped:
        return 2;
    case RowStatus::DtypeMismatch:
        return 3;
    case RowStatus::Unexpected:
        return 4;
    case RowStatus::Missing:
        return 5;
    case RowStatus::CopyError:
        return 6;
    case RowStatus::ShapeMismatch:
        return 7;
    }
    return 0;
}

bool StatusStyle::isDark(const QPalette& palette) { return palette.color(QPalette::Base).lightness() < 128; }

QColor StatusStyle::color(RowStatus s, const QPalette& palette)
{
    const bool dark = isDark(palette);
    switch (s) {
    case RowStatus::Match:
        return dark ? QColor(0x81, 0xc7, 0x84) : QColor(0x2e, 0x7d, 0x32);
    case RowStatus::Renamed:
        return dark ? QColor(0x64, 0xb5, 0xf6) : QColor(0x15, 0x65, 0xc0);
    case RowStatus::ShapeMismatch:
        return dark ? QColor(0xef, 0x9a, 0x9a) : QColor(0xc6, 0x28, 0x28);
    case RowStatus::DtypeMismatch:
        return dark ? QColor(0xff, 0xd5, 0x4f) : QColor(0x9e, 0x6a, 0x00);
    case RowStatus::Missing:
        return dark ? QColor(0xce, 0x93, 0xd8) : QColor(0x8e, 0x24, 0xaa);
    case RowStatus::Unexpected:
        return dark ? QColor(0xff, 0xab, 0x91) : QColor(0xd8, 0x43, 0x15);
    case RowStatus::Dropped:
        return dark ? QColor(0xb0, 0xbe, 0xc5) : QColor(0x60, 0x7d, 0x8b);
    case RowStatus::CopyError:
        return dark ? QColor(0xf4, 0x8f, 0xb1) : QColor(0xad, 0x14, 0x57);
    }
    return palette.color(QPalette::Text);
}

QColor StatusStyle::tint(RowStatus s, const QPalette& palette)
{
    if (s == RowStatus::Match)
        return {};
    QColor c = color(s, palette);
    c.setAlpha(isDark(palette) ? 40 : 28);
    return c;
}

QIcon StatusStyle::icon(RowStatus s, const QPalette& palette)
{
    // One shape per status as well as one colour, so the legend still reads without colour vision.
    const QColor c = color(s, palette);
    QIcon icon;
    for (int size : { 16, 32 }) {
        QPixmap pm(size, size);
        pm.fill(Qt::transparent);
        QPainter p(&pm);
        p.setRenderHint(QPainter::Antialiasing);
        p.scale(size / 16.0, size / 16.0);
        p.setPen(QPen(c, 1.6, Qt::SolidLine, Qt::RoundCap, Qt::RoundJoin));
        p.setBrush(Qt::NoBrush);
        switch (s) {
        case RowStatus::Match: // a tick
            p.drawPolyline(QPolygonF({ QPointF(3, 8.5), QPointF(6.5, 12), QPointF(13, 4.5) }));
            break;
        case RowStatus::Renamed: { // an arrow
            p.drawLine(QPointF(2.5, 8), QPointF(13, 8));
            p.drawPolyline(QPolygonF({ QPointF(9.5, 4.5), QPointF(13, 8), QPointF(9.5, 11.5) }));
            break;
        }
        case RowStatus::ShapeMismatch: // a filled square with a cross: fatal
            p.setBrush(c);
            p.drawRoundedRect(QRectF(2, 2, 12, 12), 2, 2);
            p.setPen(QPen(palette.color(QPalette::Base), 1.6));
            p.drawLine(QPointF(5, 5), QPointF(11, 11));
            p.drawLine(QPointF(11, 5), QPointF(5, 11));
            break;
        case RowStatus::DtypeMismatch: // a triangle: a cast, not a failure
            p.drawPolygon(QPolygonF({ QPointF(8, 2.5), QPointF(14, 13.5), QPointF(2, 13.5) }));
            p.drawLine(QPointF(8, 6.5), QPointF(8, 9.5));
            break;
        case RowStatus::Missing: // a hollow circle: something should be here
            p.drawEllipse(QRectF(3, 3, 10, 10));
            break;
        case RowStatus::Unexpected: // a filled circle with a plus: extra
            p.setBrush(c);
            p.drawEllipse(QRectF(2.5, 2.5, 11, 11));
            p.setPen(QPen(palette.color(QPalette::Base), 1.6));
            p.drawLine(QPointF(8, 5), QPointF(8, 11));
            p.drawLine(QPointF(5, 8), QPointF(11, 8));
            break;
        case RowStatus::Dropped: // a struck-out dash
            p.drawLine(QPointF(3, 8), QPointF(13, 8));
            p.drawLine(QPointF(4, 12), QPointF(12, 4));
            break;
        case RowStatus::CopyError: // a filled diamond with a bar: fatal, though the shapes agree
            p.setBrush(c);
            p.drawPolygon(QPolygonF({ QPointF(8, 1.5), QPointF(14.5, 8), QPointF(8, 14.5), QPointF(1.5, 8) }));
            p.setPen(QPen(palette.color(QPalette::Base), 1.6));
            p.drawLine(QPointF(5, 8), QPointF(11, 8));
            break;
        }
        p.end();
        icon.addPixmap(pm);
    }
    return icon;
}

QString StatusStyle::label(RowStatus s)
{
    switch (s) {
    case RowStatus::Match:
        return QObject::tr("match");
    case RowStatus::Renamed:
        return QObject::tr("renamed");
    case RowStatus::ShapeMismatch:
        return QObject::tr("shape mismatch");
    case RowStatus::DtypeMismatch:
        return QObject::tr("dtype mismatch");
    case RowStatus::Missing:
        return QObject::tr("missing");
    case RowStatus::Unexpected:
        return QObject::tr("unexpected");
    case RowStatus::Dropped:
        return QObject::tr("dropped");
    case RowStatus::CopyError:
        return QObject::tr("copy error");
    }
    return {};
}

QString StatusStyle::description(RowStatus s)
{
    switch (s) {
    case RowStatus::Match:
        return QObject::tr("Same name, shape and dtype: loads as is.");
    case RowStatus::Renamed:
        return QObject::tr("Matches only through a rename rule.");
    case RowStatus::ShapeMismatch:
        return QObject::tr("Both sides have the key with different shapes: a strict load fails.");
    case RowStatus::DtypeMismatch:
        return QObject::tr("Different dtypes: load_state_dict casts, so the load does not fail.");
    case RowStatus::Missing:
        return QObject::tr("The model expects the key and the checkpoint lacks it: a strict load fails.");
    case RowStatus::Unexpected:
        return QObject::tr("The checkpoint has the key and the model does not: a strict load fails.");
    case RowStatus::Dropped:
        return QObject::tr("Removed from the checkpoint by a drop rule.");
    case RowStatus::CopyError:
        return QObject::tr("Same shape, but copying the checkpoint's tensor into the model's raises (a torchao or "
                           "torch.ao quantized tensor, or a DTensor, on one side only): a strict load fails.");
    }
    return {};
}

QString StatusStyle::label(Reason r)
{
    switch (r) {
    case Reason::None:
        return {};
    case Reason::WrapperPrefix:
        return QObject::tr("wrapper prefix");
    case Reason::FlatParam:
        return QObject::tr("FSDP flat parameter");
    case Reason::QuantizedCounterpart:
        return QObject::tr("quantized counterpart");
    case Reason::ShardedCounterpart:
        return QObject::tr("sharded counterpart");
    case Reason::TiedWeight:
        return QObject::tr("tied weight");
    case Reason::Transposed:
        return QObject::tr("transposed");
    case Reason::PaddedVocabulary:
        return QObject::tr("padded vocabulary");
    case Reason::FusedProjection:
        return QObject::tr("fused projection");
    case Reason::StackedExperts:
        return QObject::tr("stacked experts");
    case Reason::NonPersistentBuffer:
        return QObject::tr("non-persistent buffer");
    case Reason::DtypeCast:
        return QObject::tr("dtype cast");
    case Reason::SuggestedRename:
        return QObject::tr("suggested rename");
    }
    return {};
}

QString StatusStyle::description(Reason r)
{
    switch (r) {
    case Reason::None:
        return {};
    case Reason::WrapperPrefix: {
        QStringList known; // from the one wrapper table the diff and the suggestions use
        for (const WrapperPrefix& w : kWrapperPrefixes)
            known << QStringLiteral("%1 (%2)").arg(QLatin1String(w.prefix.data(), qsizetype(w.prefix.size())),
                QLatin1String(w.origin.data(), qsizetype(w.origin.size())));
        return QObject::tr("A wrapper's segment in the name: %1.").arg(known.join(QStringLiteral(", ")));
    }
    case Reason::FlatParam:
        return QObject::tr("FSDP1 flattened the unit's parameters: the original names are not in the file.");
    case Reason::QuantizedCounterpart:
        return QObject::tr("One side holds the quantized group (data and scales) of the other's float weight.");
    case Reason::ShardedCounterpart:
        return QObject::tr("A local shard on one side against the global shape on the other.");
    case Reason::TiedWeight:
        return QObject::tr("Shares storage with a present key (lm_head tied to the embedding): not saved twice.");
    case Reason::Transposed:
        return QObject::tr("The same dimensions in the other order (Conv1D vs Linear).");
    case Reason::PaddedVocabulary:
        return QObject::tr("Dimension 0 padded to a multiple (vocabulary padding).");
    case Reason::FusedProjection:
        return QObject::tr("qkv or gate_up fused on one side, separate projections on the other.");
    case Reason::StackedExperts:
        return QObject::tr("Per-expert MoE weights on one side, one stacked tensor on the other.");
    case Reason::NonPersistentBuffer:
        return QObject::tr("A buffer the model does not save (rotary inv_freq, position_ids).");
    case Reason::DtypeCast:
        return QObject::tr("A different dtype that a strict load casts.");
    case Reason::SuggestedRename:
        return QObject::tr("A pending suggestion renames the checkpoint's key onto the model's: accept it to resolve both.");
    }
    return {};
}

QColor StatusStyle::wrapperColor(const QPalette& palette)
{
    return isDark(palette) ? QColor(0xff, 0xb7, 0x4d) : QColor(0xe6, 0x51, 0x00);
}

} // namespace sl::gui
