#pragma once
// The local files a drag carries. Several dropped together open as one source on that side: the rank
// files of one per-rank save.

#include <QMimeData>
#include <QStringList>
#include <QUrl>

namespace sl::gui {

inline QStringList droppedPaths(const QMimeData* mime)
{
    QStringList paths;
    for (const QUrl& url : mime->urls())
        if (url.isLocalFile())
            paths << url.toLocalFile();
    return paths;
}

} // namespace sl::gui
