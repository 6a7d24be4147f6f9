#pragma once
// How statuses and reasons look: one colour and one icon each, readable on light and dark palettes, and the
// words the legend and tooltips use. Icons are drawn here rather than shipped as files so they follow the
// palette and stay sharp at any scale.

#include "diff/diff.h"

#include <QColor>
#include <QIcon>
#include <QPalette>
#include <QString>

namespace sl::gui {

// Statuses from harmless to fatal: the order in which a subtree rolls up its worst row.
int statusSeverity(RowStatus s);

struct StatusStyle {
    // Text/icon colour for a status on this palette (darker on light backgrounds, lighter on dark ones).
    static QColor color(RowStatus s, const QPalette& palette);
    // A faint row tint for a status (none for match).
    static QColor tint(RowStatus s, const QPalette& palette);
    static QIcon icon(RowStatus s, const QPalette& palette);
    static QString label(RowStatus s); // "shape mismatch"
    static QString description(RowStatus s); // one sentence for the legend
    // Reasons: a short label ("wrapper prefix") and what it means.
    static QString label(Reason r);
    static QString description(Reason r);
    // The colour that marks wrapper segments (_orig_mod, module, ...) inside names.
    static QColor wrapperColor(const QPalette& palette);
    static bool isDark(const QPalette& palette);
};

} // namespace sl::gui
