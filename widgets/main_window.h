#pragma once
// The StateLens window: the checkpoint (A, what is loaded) and the model (B, what receives it) side by side,
// aligned through the diff, with the summary and filter above, the details of the selected row below, and
// the suggestions and the rule editor docked beside. It wires core results to views; the core does the
// diffing, explaining, suggesting and exporting.

#include "rules/rule_export.h"
#include "report/diff_report.h"
#include "session/checkpoint_writer.h"
#include "session/comparison.h"
#include "session/entry_values.h"
#include "session/pair_values.h"
#include "session/side_loader.h"
#include "suggest/suggestions.h"

#include <QMainWindow>

#include <memory>
#include <optional>

class QMenu;
class QProgressBar;
class QProgressDialog;
class QTemporaryDir;
class QTimer;
class QToolButton;
class QModelIndex;

namespace sl {
class LoadControl;
}

namespace sl::gui {

class AlignedTreeModel;
class DetailsPanel;
class DiffView;
class RuleDocument;
class RuleEditor;
class SourcePane;
class SuggestionsPanel;
class SummaryBar;
class ValuesPanel;


class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    // Opening. Any source can stand on either side; folders (DCP, sharded indexes, per-rank files) open like
    // files, and several files at once open as one per-rank source (the rank files of one save).
    void openA(const QString& path);
    void openB(const QString& path);
    void open(Side side, const QString& path);
    void open(Side side, const QStringList& paths);
    // The embedded demo pair: a compiled training checkpoint and the model it fails to load into.
    void openDemo();
    // A `load_state_dict` error message as the model side (B): the keys it names.
    void openLoadErrorText(const QString& text);

    // Rules.
    void applySuggestion(int index); // from the current suggestions
    // Several suggestions' rules appended in order as one undoable step (Apply All, accepting a pair whose
    // key takes a chain of suggestions).
    void applySuggestions(const std::vector<size_t>& indices, const QString& description);
    void acceptPending(size_t diffRow); // the suggestions that resolve a pending row
    void applyAllSuggestions();
    // The rule inferred from the selected unexpected row and missing row (nullopt, with why, otherwise).
    std::optional<Suggestion> inferFromSelection(QString* why = nullptr) const;
    std::optional<Suggestion> inferFromPair(const QString& unexpectedMappedName, const QString& missingName) const;
    void addInferredRule(const Suggestion& s);
    bool loadRules(const QString& path, QString* error = nullptr);
    bool saveRules(const QString& path, QString* error = nullptr);

    // Exports; writes are atomic. `problems` receives what an export format could not express.
    bool exportRules(RuleExportFormat format, const QString& path, QString* error = nullptr, QStringList* problems = nullptr);
    bool exportReport(DiffReportFormat format, const QString& path, QString* error = nullptr);

    // Values: compares every aligned pair in the background (progress and Cancel in the status bar) and
    // fills the Values column; `comparingValues()` while it runs.
    void compareValues();
    void cancelCompareValues();
    bool comparingValues() const { return m_pairValues->isRunning(); }

    // File > Save Fixed Checkpoint As…: asks for the output, then writes A with the current rules (and its
    // current container) as `statelens convert` would, with a progress dialog and Cancel, and says what it
    // wrote or why it could not. startFixedCheckpoint() starts the same write without asking (false, with
    // why, when there is nothing to convert or a write is running); fixedCheckpointFinished() follows.
    void saveFixedCheckpoint();
    bool startFixedCheckpoint(const QString& output, uint64_t shardBytes, QString* error = nullptr);
    void cancelFixedCheckpoint();
    CheckpointWriter* checkpointWriter() const { return m_writer; }

    // Navigation and clipboard.
    void gotoDifference(bool forward);
    void copySelection(bool wholeRow);

    // Recovery of unsaved rules after a crash: what a run that died left, offered once at start.
    bool hasPendingRecovery() const { return m_pendingRecovery.has_value(); }
    void restorePendingRecovery();
    void offerRecovery(); // asks, then restores or discards

    // True when nothing is loading and the diff and suggestions are up to date (tests and screenshots).
    bool isIdle() const;

    Comparison* comparison() const { return m_comparison; }
    RuleDocument* ruleDocument() const { return m_rules; }
    AlignedTreeModel* model() const { return m_model; }
    DiffView* diffView() const { return m_view; }
    SummaryBar* summaryBar() const { return m_summary; }
    SuggestionsPanel* suggestionsPanel() const { return m_suggestions; }
    DetailsPanel* detailsPanel() const { return m_details; }
    ValuesPanel* valuesPanel() const { return m_valuesPanel; }
    EntryValues* entryValues() const { return m_entryValues; } // the selected row's values; the panel shows them
    RuleEditor* ruleEditor() const { return m_editor; }
    SourcePane* pane(Side side) const { return side == Side::A ? m_paneA : m_paneB; }
    // What each side has open and its loading; the panes only show it.
    SideLoader* loader(Side side) const { return side == Side::A ? m_sideA : m_sideB; }

signals:
    void idle(); // isIdle() became true
    void fixedCheckpointFinished(const sl::gui::CheckpointWriter::Outcome& outcome); // after its message is up

protected:
    void closeEvent(QCloseEvent* event) override;
    void showEvent(QShowEvent* event) override;

private:
    void valuesCompared(const std::shared_ptr<const DiffSnapshot>& snapshot, const PairValues::PerRow& perRow);
    void endCompareValues(); // hides the comparison's progress
    void fixedCheckpointWritten(const CheckpointWriter::Outcome& outcome);
    void buildMenus();
    void snapshotChanged();
    void applyFilter();
    void updateTitle();
    void updateDetails();
    void showContextMenu(const QModelIndex& index, const QPoint& pos);
    void pickPartner(const QModelIndex& index);
    void confirmAndAdd(const Suggestion& s);
    void chooseFile(Side side, bool folder);
    void chooseRankFiles(Side side);
    void pasteLoadError();
    void rememberRecent(const QStringList& paths);
    void rebuildRecentMenu();
    void chooseExportRules(RuleExportFormat format);
    void chooseExportReport(DiffReportFormat format);
    bool maybeSaveRules();
    void checkIdle();

    RuleDocument* m_rules;
    Comparison* m_comparison;
    AlignedTreeModel* m_model;
    SideLoader* m_sideA;
    SideLoader* m_sideB;
    SourcePane* m_paneA;
    SourcePane* m_paneB;
    DiffView* m_view;
    SummaryBar* m_summary;
    DetailsPanel* m_details;
    SuggestionsPanel* m_suggestions;
    RuleEditor* m_editor;
    EntryValues* m_entryValues;
    PairValues* m_pairValues; // Compare Values of All Pairs
    ValuesPanel* m_valuesPanel;
    CheckpointWriter* m_writer; // Save Fixed Checkpoint As…
    QProgressDialog* m_writeProgress = nullptr;
    QTimer* m_writePoll = nullptr; // reads the write's progress into the dialog
    QProgressBar* m_valuesProgress = nullptr;
    QToolButton* m_valuesCancel = nullptr;
    QTimer* m_valuesPoll = nullptr; // reads the comparison's progress into the bar
    std::unique_ptr<QTemporaryDir> m_demoDir; // the demo pair, written out so its values can be read
    QMenu* m_recentMenu = nullptr;
    bool m_expandedOnce = false;
    bool m_layoutRestored = false; // a saved layout was restored: keep its dock sizes
    bool m_shownOnce = false;
    bool m_expandedPairs = false;
    bool m_wasIdle = true;
    std::optional<RuleSet> m_pendingRecovery;
    QString m_pendingRecoveryFile;
};

} // namespace sl::gui
