#pragma once
// The rule set of a RuleDocument as an editable table, one row per rule. The model stores nothing of its
// own but caches: every edit goes through the document (so it is undoable) and comes back as rulesChanged,
// which the model answers with dataChanged when the row count stays (so the view keeps its selection and
// current cell) and a reset otherwise; rule sets are small.
//
// Patterns and replacements are validated as they are shown, with the same checks the core compiles with:
// an invalid value is still stored (the core skips and reports such a rule) but painted red, with the
// position in its tooltip. Hits and rule checks (collision, unused, shadowed, ...) come from outside, where
// the diff runs; they describe the rules they were computed for until the owner sets new ones.

#include "diff/rule_checks.h"
#include "rules/rule.h"

#include <QAbstractTableModel>
#include <QIcon>
#include <QString>

#include <array>

#include <cstdint>
#include <vector>

namespace sl::gui {

class RuleDocument;

class RuleListModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { NumberColumn, PatternColumn, ReplacementColumn, DropColumn, NoteColumn, HitsColumn, ColumnCount };
    enum Role {
        ErrorRole = Qt::UserRole + 1, // the validation error of the cell (the row's, on NumberColumn); empty when valid
        IssueCountRole, // how many rule checks name this row
    };

    explicit RuleListModel(RuleDocument* doc, QObject* parent = nullptr);

    RuleDocument* document() const { return m_doc; }

    // Per rule, how many of A's keys it matched along the chain; empty (or shorter than the set) = unknown.
    void setHits(std::vector<uint32_t> hits);
    const std::vector<uint32_t>& hits() const { return m_hits; }
    // Rule checks from checkRules(); those with rule >= 0 mark their row.
    void setIssues(std::vector<RuleIssue> issues);
    const std::vector<RuleIssue>& issues() const { return m_issues; }
    // The icons that mark a row's worst issue (DecorationRole of NumberColumn), by Severity. Set by the view,
    // which knows the platform's style; without them rows carry no icon.
    void setSeverityIcons(std::array<QIcon, 3> icons);

    // "rule 3: pattern, position 5: ..." (and the same for the replacement), or empty when the rule is valid.
    QString patternError(int row) const;
    QString replacementError(int row) const;

    // Moves the rules `rows` (any order, not necessarily contiguous) so that they stand together, in their
    // current order, just before rule `before` (rowCount() = at the end). One undo step; false if nothing moves.
    bool moveRulesBefore(std::vector<int> rows, int before);

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

    // Drag and drop: internal moves only. removeRows is deliberately not implemented: after a drop with
    // MoveAction the view calls it on the dragged rows, which the drop has already moved.
    Qt::DropActions supportedDragActions() const override;
    Qt::DropActions supportedDropActions() const override;
    QStringList mimeTypes() const override;
    QMimeData* mimeData(const QModelIndexList& indexes) const override;
    bool canDropMimeData(const QMimeData* data, Qt::DropAction action, int row, int column,
        const QModelIndex& parent) const override;
    bool dropMimeData(const QMimeData* data, Qt::DropAction action, int row, int column, const QModelIndex& parent) override;
    bool moveRows(const QModelIndex& sourceParent, int sourceRow, int count, const QModelIndex& destinationParent,
        int destinationChild) override;

signals:
    // After a move made here (drop, moveRows, moveRulesBefore): where the moved rules stand now.
    void rulesMoved(int first, int count);

private:
    struct Check {
        bool done = false;
        QString pattern; // error texts, empty when valid
        QString replacement;
    };
    void onRulesChanged();
    const Rule* rule(int row) const;
    const Check& check(int row) const;
    Severity worstIssue(int row, bool* any) const;
    QString toolTip(int row, int column) const;
    QVariant icon(Severity s) const;

    RuleDocument* m_doc;
    int m_rows = 0; // what the views were told; the document may be ahead of it inside rulesChanged
    mutable std::vector<Check> m_checks; // validated lazily: only rows that are shown pay for PCRE2
    std::vector<uint32_t> m_hits;
    std::vector<RuleIssue> m_issues;
    std::vector<std::vector<int>> m_issuesOf; // per row, indices into m_issues
    std::array<QIcon, 3> m_icons; // by Severity
};

} // namespace sl::gui
