#pragma once
// The two parameter trees of a comparison as one tree, aligned row by row through the diff: each leaf is a
// diff row (or, with folding, a group of rows that differ only by layer/expert index), placed by its name in
// B's namespace (A's name after the rules), so A's and B's halves of one key sit on the same line. Columns
// come in two halves, A's and B's; the window shows each half in its own QTreeView over this one model, so
// expansion, scrolling and selection line up for free. A side that lacks a row (or a whole subtree) shows a
// gap there.
//
// A real QAbstractItemModel over flat arrays rebuilt per snapshot and per filter change: no item objects,
// names are views into the snapshot's strings, and QStrings are made only for the cells Qt paints.

#include "session/diff_snapshot.h"
#include "values/tensor_compare.h"

#include <QAbstractItemModel>
#include <QRegularExpression>

#include <memory>
#include <string_view>
#include <vector>

namespace sl::gui {

class AlignedTreeModel : public QAbstractItemModel {
    Q_OBJECT
public:
    enum Column { NameA, ShapeA, DTypeA, SizeA, NameB, ShapeB, DTypeB, SizeB, StatusColumn, ValuesColumn, ColumnCount };
    enum Role {
        StatusRole = Qt::UserRole + 1, // int(RowStatus): the leaf's, or the worst below an inner node
        ReasonRole, // int(Reason) of a leaf
        KindRole, // int(NodeKind)
        PathRole, // the dotted path of the node in the aligned tree
        DifferenceRole, // bool: the node is or holds a row that is neither a match nor renamed
        CopyTextRole, // what "Copy name" puts on the clipboard: the full name(s) of a row
        // Name columns of a pair (an unexpected key of A shown with the missing key of B it corresponds to):
        // QVariantList of QPoint(start, length), the parts of the shown name that differ from the other
        // side's name (a word diff over dotted segments). Empty elsewhere.
        HighlightRole,
        PairRole, // bool: the leaf or member is such a pair
        SuggestionRole, // int: the pending suggestion that resolves the row (index), or -1
        GapRole, // bool: this half has nothing on this row (a name column on the side that lacks the key)
    };
    enum class NodeKind { Inner, Leaf, FoldedMember, PartA, PartB, ChunkA, ChunkB };
    static constexpr uint32_t kAllStatuses = (1u << kRowStatusCount) - 1;
    struct Filter {
        QString text; // substring (case-insensitive) or a regular expression over the names of both sides
        bool regex = false;
        uint32_t statuses = kAllStatuses; // bit (1 << RowStatus)
        bool operator==(const Filter&) const = default;
    };

    explicit AlignedTreeModel(QObject* parent = nullptr);

    void setSnapshot(std::shared_ptr<const DiffSnapshot> snapshot);
    std::shared_ptr<const DiffSnapshot> snapshot() const { return m_snap; }
    // "Compare values": one comparison per diff row of the current snapshot, shown in ValuesColumn.
    // A new snapshot drops them (its rows are other rows).
    void setValueComparisons(std::shared_ptr<const std::vector<values::ValueComparison>> perRow);
    bool hasValueComparisons() const { return m_values != nullptr; }
    void setFolding(bool fold);
    bool folding() const { return m_fold; }
    // False (and the previous filter kept) when the regular expression does not compile; see filterError().
    bool setFilter(const Filter& filter);
    const Filter& filter() const { return m_filter; }
    QString filterError() const { return m_filterError; }

    // The diff rows behind a node: one for a leaf or folded member, several for a folded leaf, none else.
    std::vector<size_t> diffRows(const QModelIndex& index) const;
    NodeKind kind(const QModelIndex& index) const;
    QString path(const QModelIndex& index) const;
    QModelIndex findPath(const QString& path) const; // column 0
    // The leaf or member that shows a diff row (as itself, or as a pair's partner), column 0; invalid when
    // the row is filtered out or folded away.
    QModelIndex findRow(size_t diffRow) const;
    size_t leafCount() const { return m_leafCount; } // diff rows that pass the filter
    // The next (or previous) leaf after `from` in display order whose row is a difference (neither a match nor
    // renamed); wraps around.
    QModelIndex nextDifference(const QModelIndex& from, bool forward) const;
    // The entry a part node shows (PartA/PartB), for the details panel.
    const Entry* partEntry(const QModelIndex& index) const;

    QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
    QModelIndex parent(const QModelIndex& child) const override;
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    struct Node {
        std::string_view segment;
        int32_t parent = -1;
        int32_t row = 0; // position among the parent's children
        int32_t ref = -1; // Leaf: into m_leaves; FoldedMember: the diff row; Part*: the part's index
        NodeKind kind = NodeKind::Inner;
        uint8_t worst = 0; // RowStatus with the highest severity at or below
        bool wrapper = false; // the segment is a wrapper's (_orig_mod, module, ...)
        std::vector<int32_t> children;
        uint32_t counts[kRowStatusCount] = {}; // diff rows at or below, per status
        uint32_t entriesA = 0;
        uint32_t entriesB = 0;
        uint64_t paramsA = 0;
        uint64_t paramsB = 0;
        uint64_t bytesA = 0;
        uint64_t bytesB = 0;
    };
    struct Leaf {
        std::string_view name; // display name (B's name, A's mapped name, or a folded template)
        int32_t folded = -1; // into snapshot->folded when the leaf folds several rows
        size_t row = 0; // the (first) diff row
    };

    void rebuild(); // leaves, filter and tree
    void collectLeaves();
    void buildTree(); // from the leaves that pass
    std::vector<bool> passing() const;
    bool passes(const Leaf& leaf) const;
    bool textMatches(std::string_view name) const;
    void addLeaf(const Leaf& leaf, int32_t leafIndex, int32_t parent, std::string_view lastSegment);
    int32_t addNode(int32_t parent, std::string_view segment, NodeKind kind, int32_t ref);
    void account(int32_t node, size_t diffRow);
    int nodeOf(const QModelIndex& index) const { return index.isValid() ? static_cast<int>(index.internalId()) : 0; }
    const DiffRow* rowOf(const Node& n) const; // the row a leaf or member shows (a folded leaf: its first)
    // The rows whose A and B sides a leaf or member shows: a line's head, or the first row shown with it
    // (a pair's partner, the first of a many-to-one line's many).
    const DiffRow* rowAOf(const Node& n) const;
    const DiffRow* rowBOf(const Node& n) const;
    size_t lineRows(const DiffRow& row) const; // rows of the other side shown on this row's line (0: none)
    const Entry* entryOf(const Node& n, bool sideA) const;
    QVariant display(const Node& n, int column) const;
    QString pairName(const Node& n, bool sideA) const;
    bool isGap(const Node& n, int column) const; // a cell of the half that has no key on this row // a pair's full name on one side (folded: the template)
    QString tooltip(const Node& n) const;
    const values::ValueComparison* comparisonOf(const DiffRow& row) const;
    QVariant valuesCell(const Node& n, int role) const;

    std::shared_ptr<const DiffSnapshot> m_snap;
    bool m_fold = true;
    Filter m_filter;
    QString m_filterError;
    QRegularExpression m_regex;
    std::string m_needle; // lower-cased substring filter
    std::vector<Leaf> m_leaves;
    std::vector<bool> m_pass; // per leaf: passes the filter
    std::shared_ptr<const std::vector<values::ValueComparison>> m_values;
    size_t m_chunkNodes = 0; // shard chunk nodes made so far in this build (capped)
    std::vector<Node> m_nodes; // m_nodes[0] is the invisible root
    size_t m_leafCount = 0;
};

} // namespace sl::gui
