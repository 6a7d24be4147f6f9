#pragma once
// A Source's entries as a tree of dotted names (model > layers > 0 > attn > qkv > weight). A real
// QAbstractItemModel over a flat node array built once per source: no item objects, nothing per row
// beyond one Node, so 100,000-entry sources stay cheap. Inner nodes carry entry counts and parameter totals.

#include "model/source.h"

#include <QAbstractItemModel>

#include <memory>
#include <vector>

namespace sl::gui {

class SourceTreeModel : public QAbstractItemModel {
    Q_OBJECT
public:
    enum Column { NameColumn, ShapeColumn, DTypeColumn, SizeColumn, ColumnCount };
    enum Role { EntryIndexRole = Qt::UserRole + 1, SortRole };

    explicit SourceTreeModel(QObject* parent = nullptr);

    void setSource(std::shared_ptr<const Source> source);
    const Source* source() const { return m_source.get(); }
    // The entry behind an index, or null for inner nodes.
    const Entry* entry(const QModelIndex& index) const;

    QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
    QModelIndex parent(const QModelIndex& child) const override;
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    struct Node {
        QString segment;
        int parent = -1;
        int row = 0; // position among the parent's children
        int entry = -1; // index into source entries; -1 for inner nodes
        std::vector<int> children;
        uint64_t entries = 0; // entries at or below
        uint64_t params = 0;
        uint64_t bytes = 0;
    };
    void rebuild();
    int nodeOf(const QModelIndex& index) const { return index.isValid() ? static_cast<int>(index.internalId()) : 0; }

    std::shared_ptr<const Source> m_source;
    std::vector<Node> m_nodes; // m_nodes[0] is the invisible root
};

} // namespace sl::gui
