#pragma once
// The rule set being edited in the window: its rules, the file it came from, and an undo stack that every
// change goes through (the rule editor, "Apply" on a suggestion, "Make rule from this pair", loading a file).
//
// A change replaces the whole RuleSet (rule sets are small), so undo and redo are exact snapshots and no
// command has to know how to reverse itself. While the set differs from what was last saved it is also
// written to a recovery file, so a crash never loses it; a clean close removes that file.

#include "rules/rule.h"

#include <QObject>
#include <QString>

#include <optional>

class QUndoStack;

namespace sl::gui {

class RuleDocument : public QObject {
    Q_OBJECT
public:
    explicit RuleDocument(QObject* parent = nullptr);
    ~RuleDocument() override;

    const RuleSet& rules() const { return m_rules; }
    QUndoStack* undoStack() const { return m_undo; }

    // Every edit ends here: an undoable step from the current set to `after`. Consecutive changes with the
    // same non-negative `mergeKey` (typing into one rule's pattern) merge into one undo step.
    void change(RuleSet after, const QString& description, int mergeKey = -1);
    void appendRules(const std::vector<Rule>& rules, const QString& description);
    void replaceRule(int index, const Rule& rule, const QString& description, int mergeKey = -1);
    void removeRules(std::vector<int> indices);
    void moveRule(int from, int to); // `to` is the index the rule ends up at
    void setEnabled(int index, bool enabled);

    // Files. Errors come back as one line naming the file; saving is atomic (util/atomic_file.h).
    bool load(const QString& path, QString* error); // YAML/JSON rule files, HF key_mapping, CSV
    bool save(const QString& path, QString* error);
    QString path() const { return m_path; }
    bool isModified() const;
    // Starts a new, empty, unnamed set (a clean undo stack).
    void reset();

    // Recovery: where unsaved rules are mirrored; empty disables it.
    void setRecoveryFile(const QString& path);
    QString recoveryFile() const { return m_recovery; }
    // What a previous run left in `path` (a crash), or nullopt when nothing usable is there.
    static std::optional<RuleSet> readRecovery(const QString& path);
    // Takes a recovered set as an unsaved change of an empty document.
    void restore(RuleSet recovered);
    // A clean close: the recovery file goes.
    void discardRecovery();

signals:
    void rulesChanged();
    void modifiedChanged(bool modified);
    void pathChanged(const QString& path);

private:
    friend class RuleSetCommand;
    void set(const RuleSet& rules); // from the undo commands
    void writeRecovery();

    RuleSet m_rules;
    QUndoStack* m_undo;
    QString m_path;
    QString m_recovery;
};

} // namespace sl::gui
