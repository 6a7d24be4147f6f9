#pragma once
// The strip above the trees: the filter box (substring or regex), fold and hide-matches toggles, one
// button per status with its count (click to show only that status; several can be combined), the
// verdict of a strict load, and the legend.

#include "diff/diff.h"
#include "models/aligned_tree_model.h"

#include <QStringList>
#include <QWidget>

#include <array>

class QCheckBox;
class QLabel;
class QLineEdit;
class QToolButton;

namespace sl::gui {

class SummaryBar : public QWidget {
    Q_OBJECT
public:
    explicit SummaryBar(QWidget* parent = nullptr);

    // `executes`: the sides whose loading would run code ("A", "B"); a dangerous side leads the verdict.
    void setSummary(const DiffSummary& summary, bool complete, const QStringList& executes = {});
    AlignedTreeModel::Filter filter() const;
    void setFilterError(const QString& error); // empty clears
    QLineEdit* filterEdit() const { return m_text; }
    QToolButton* statusButton(RowStatus s) const { return m_buttons[static_cast<size_t>(s)]; }
    QCheckBox* foldToggle() const { return m_fold; }
    QCheckBox* hideMatchesToggle() const { return m_hideMatches; }
    QLabel* verdict() const { return m_verdict; }
    static QString legendHtml(const QPalette& palette);

signals:
    void filterChanged();
    void foldingChanged(bool fold);

private:
    QLineEdit* m_text;
    QCheckBox* m_regex;
    QCheckBox* m_fold;
    QCheckBox* m_hideMatches;
    std::array<QToolButton*, kRowStatusCount> m_buttons {};
    QLabel* m_verdict;
};

} // namespace sl::gui
