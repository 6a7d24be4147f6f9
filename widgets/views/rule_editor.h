#pragma once
// The rule editor dock: the rules as a table (edit in place, drag to reorder, checkboxes for enabled and
// drop), the actions that change them (all undoable through the RuleDocument), the rule checks of the last
// diff, and a preview of what the selected rule does to A's keys.
//
// The preview runs the chain up to and including the selected rule over A's names: it is compiled once per
// rule set and selected rule (not per key, not per repaint) and computed only for that rule; it keeps
// counting past the first 200 examples, so 100,000 keys cost one pass through the compiled chain.

#include "diff/rule_checks.h"
#include "model/source.h"
#include "rules/rule_engine.h"

#include <QString>
#include <QWidget>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

class QAction;
class QLabel;
class QListWidget;
class QListWidgetItem;
class QTableView;
class QTimer;

namespace sl::gui {

class RuleDocument;
class RuleListModel;

class RuleEditor : public QWidget {
    Q_OBJECT
public:
    explicit RuleEditor(RuleDocument* doc, QWidget* parent = nullptr);
    ~RuleEditor() override;

    // The checkpoint whose entry names the preview maps (A); null clears the preview.
    void setPreviewKeys(std::shared_ptr<const Source> a);
    // Rule checks and per-rule hits of the last diff (checkRules, DiffResult); both mark the table rows.
    void setIssues(std::vector<RuleIssue> issues);
    void setHits(std::vector<uint32_t> hits);

    QTableView* table() const { return m_table; }
    RuleListModel* model() const { return m_model; }
    QListWidget* warningList() const { return m_warnings; }
    QListWidget* previewList() const { return m_preview; }
    // "Rule 2 touches 3 of 5 keys", or why there is no preview.
    QString previewSummary() const;

    QAction* addRuleAction() const { return m_add; }
    QAction* removeRulesAction() const { return m_remove; }
    QAction* moveUpAction() const { return m_up; }
    QAction* moveDownAction() const { return m_down; }
    QAction* undoAction() const { return m_undo; }
    QAction* redoAction() const { return m_redo; }

    // Selects rule `row` (0-based) and makes it current; the window's "show rule" links end here.
    void selectRule(int row);
    // The preview is refreshed once per event-loop turn after a change; this computes it now.
    void refreshPreview();

    static constexpr int MaxPreviewExamples = 200;

private:
    void addRule();
    void removeSelected();
    void moveSelected(int delta);
    std::vector<int> selectedRows() const;
    void updateActions();
    void schedulePreview();
    void onRulesChanged();
    void onWarningActivated(QListWidgetItem* item);

    RuleDocument* m_doc;
    RuleListModel* m_model;
    QTableView* m_table;
    QListWidget* m_warnings;
    QLabel* m_warningsLabel;
    QListWidget* m_preview;
    QLabel* m_previewLabel;
    QTimer* m_previewTimer;
    QAction* m_add;
    QAction* m_remove;
    QAction* m_up;
    QAction* m_down;
    QAction* m_undo;
    QAction* m_redo;

    std::shared_ptr<const Source> m_keys;
    // The chain up to the previewed rule, compiled for the current rule set; dropped when the rules change.
    struct Prefix {
        int rule = -1;
        RuleSet rules; // rules 0..rule; the compiled chain points into it
        CompiledRules compiled;
        std::vector<PatternError> errors;
    };
    std::optional<Prefix> m_prefix;
};

} // namespace sl::gui
