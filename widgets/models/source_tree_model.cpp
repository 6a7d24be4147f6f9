#include "source_tree_model.h"

#include "report/source_report.h"

#include <QHash>
#include <QLocale>

namespace sl::gui {

SourceTreeModel::SourceTreeModel(QObject* parent)
    : QAbstractItemModel(parent)
{
    m_nodes.resize(1);
}

void SourceTreeModel::setSource(std::shared_ptr<const Source> source)
{
    beginResetModel();
    m_source = std::move(source);
    rebuild();
    endResetModel();
}

void SourceTreeModel::rebuild()
{
    m_nodes.clear();
    m_nodes.emplace_back();
    if (!m_source)
        return;
    // Children found by (parent, segment); names share prefixes, so most lookups hit.
    QHash<QPair<int, QString>, int> childOf;
    const auto& entries = m_source->entries;
    for (size_t i = 0; i < entries.size(); ++i) {
        const QString name = QString::fromStdString(entries[i].name);
        const QStringList parts = name.isEmpty() ? QStringList { QStringLiteral("(tensor)") } : name.split(QLatin1Char('.'));
        int node = 0;
        for (int p = 0; p < parts.size(); ++p) {
            const bool leaf = p == parts.size() - 1;
            const auto key = qMakePair(node, parts[p]);
            auto it = leaf ? childOf.end() : childOf.find(key);
            if (it == childOf.end()) {
                Node n;
                n.segment = parts[p];
                n.parent = node;
                n.row = static_cast<int>(m_nodes[static_cast<size_t>(node)].children.size());
                int id = static_cast<int>(m_nodes.size());
                m_nodes[static_cast<size_t>(node)].children.push_back(id);
                m_nodes.push_back(std::move(n));
                if (!leaf)
                    childOf.insert(key, id);
                node = id;
            } else {
                node = *it;
            }
        }
        Node& leafNode = m_nodes[static_cast<size_t>(node)];
        leafNode.entry = static_cast<int>(i);
        const uint64_t params = entries[i].kind == EntryKind::Object ? 0 : entries[i].numel();
        const uint64_t bytes = entries[i].nbytes();
        for (int n = node; n >= 0; n = m_nodes[static_cast<size_t>(n)].parent) {
            m_nodes[static_cast<size_t>(n)].entries += 1;
            m_nodes[static_cast<size_t>(n)].params += params;
            m_nodes[static_cast<size_t>(n)].bytes += bytes;
        }
    }
}

const Entry* SourceTreeModel::entry(const QModelIndex& index) const
{
    if (!m_source || !index.isValid())
        return nullptr;
    int e = m_nodes[static_cast<size_t>(nodeOf(index))].entry;
    return e >= 0 ? &m_source->entries[static_cast<size_t>(e)] : nullptr;
}

QModelIndex SourceTreeModel::index(int row, int column, const QModelIndex& parent) const
{
    if (!hasIndex(row, column, parent))
        return {};
    const Node& p = m_nodes[static_cast<size_t>(nodeOf(parent))];
    return createIndex(row, column, static_cast<quintptr>(p.children[static_cast<size_t>(row)]));
}

QModelIndex SourceTreeModel::parent(const QModelIndex& child) const
{
    if (!child.isValid())
        return {};
    int p = m_nodes[static_cast<size_t>(nodeOf(child))].parent;
    if (p <= 0)
        return {};
    return createIndex(m_nodes[static_cast<size_t>(p)].row, 0, static_cast<quintptr>(p));
}

int SourceTreeModel::rowCount(const QModelIndex& parent) const
{
    if (parent.column() > 0)
        return 0;
    return static_cast<int>(m_nodes[static_cast<size_t>(nodeOf(parent))].children.size());
}

int SourceTreeModel::columnCount(const QModelIndex&) const { return ColumnCount; }

QVariant SourceTreeModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid())
        return {};
    const Node& n = m_nodes[static_cast<size_t>(nodeOf(index))];
    const Entry* e = n.entry >= 0 ? &m_source->entries[static_cast<size_t>(n.entry)] : nullptr;
    if (role == EntryIndexRole)
        return n.entry;
    if (role == SortRole) {
        switch (index.column()) {
        case NameColumn:
            return n.segment;
        case SizeColumn:
            return QVariant::fromValue<qulonglong>(n.bytes);
        default:
            return data(index, Qt::DisplayRole);
        }
    }
    if (role == Qt::ToolTipRole && index.column() == NameColumn && e)
        return QString::fromStdString(e->name);
    if (role == Qt::TextAlignmentRole && index.column() == SizeColumn)
        return QVariant(Qt::AlignRight | Qt::AlignVCenter);
    if (role != Qt::DisplayRole)
        return {};
    switch (index.column()) {
    case NameColumn:
        return n.segment;
    case ShapeColumn:
        if (!e)
            return n.entries == 1 ? tr("1 entry") : tr("%1 entries").arg(n.entries);
        if (e->kind == EntryKind::Object)
            return QString::fromStdString(e->value);
        return QString::fromStdString(shapeToString(e->shape));
    case DTypeColumn:
        if (!e)
            return {};
        if (e->kind == EntryKind::Object)
            return QString::fromStdString(e->typeName);
        return QString::fromLatin1(dtypeName(e->dtype).data(), static_cast<int>(dtypeName(e->dtype).size()));
    case SizeColumn:
        if (e && e->kind == EntryKind::Object)
            return {};
        return QStringLiteral("%1 · %2").arg(QString::fromStdString(humanCount(n.params)),
            QString::fromStdString(humanBytes(n.bytes)));
    default:
        return {};
    }
}

QVariant SourceTreeModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case NameColumn:
        return tr("Name");
    case ShapeColumn:
        return tr("Shape");
    case DTypeColumn:
        return tr("DType");
    case SizeColumn:
        return tr("Params · Bytes");
    default:
        return {};
    }
}

} // namespace sl::gui
