#pragma once
// Everything the core knows about the selected row or pair: both entries (shape, dtype, bytes, where the
// bytes live, storage offset and strides, tied storage, DTensor placements and mesh, DCP chunks and files,
// quantization scheme and parts), the status with its explanation, and the rule that renamed it.

#include <QTextBrowser>

namespace sl::gui {

class AlignedTreeModel;

class DetailsPanel : public QTextBrowser {
    Q_OBJECT
public:
    explicit DetailsPanel(QWidget* parent = nullptr);
    void showIndex(const AlignedTreeModel* model, const QModelIndex& index);

signals:
    // The "Accept suggestion N" link of a row that a pending suggestion resolves: the diff row.
    void acceptRequested(size_t diffRow);
};

} // namespace sl::gui
