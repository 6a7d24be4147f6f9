#include "rule_document.h"

#include "io/file_trust.h"
#include "rules/rule_import.h"
#include "rules/rule_io.h"
#include "util/atomic_file.h"

#include <QFile>
#include <QFileInfo>
#include <QUndoCommand>
#include <QUndoStack>

#include <algorithm>

namespace sl::gui {

// One undoable step: the set before and after.
class RuleSetCommand : public QUndoCommand {
public:
    RuleSetCommand(RuleDocument* doc, RuleSet before, RuleSet after, const QString& text, int mergeKey)
        : QUndoCommand(text)
        , m_doc(doc)
        , m_before(std::move(before))
        , m_after(std::move(after))
        , m_mergeKey(mergeKey)
    {
    }
    void undo() override { m_doc->set(m_before); }
    void redo() override { m_doc->set(m_after); }
    int id() const override { return m_mergeKey < 0 ? -1 : 1; }
    bool mergeWith(const QUndoCommand* other) override
    {
        auto* o = static_cast<const RuleSetCommand*>(other);
        if (o->m_mergeKey != m_mergeKey)
            return false;
        m_after = o->m_after;
        return true;
    }

private:
    RuleDocument* m_doc;
    RuleSet m_before;
    RuleSet m_after;
    int m_mergeKey;
};

RuleDocument::RuleDocument(QObject* parent)
    : QObject(parent)
    , m_undo(new QUndoStack(this))
{
    connect(m_undo, &QUndoStack::cleanChanged, this, [this](bool clean) {
        writeRecovery();
        emit modifiedChanged(!clean);
    });
}

RuleDocument::~RuleDocument() = default;

void RuleDocument::change(RuleSet after, const QString& description, int mergeKey)
{
    m_undo->push(new RuleSetCommand(this, m_rules, std::move(after), description, mergeKey));
}

void RuleDocument::appendRules(const std::vector<Rule>& rules, const QString& description)
{
    RuleSet after = m_rules;
    after.rules.insert(after.rules.end(), rules.begin(), rules.end());
    change(std::move(after), description);
}

void RuleDocument::replaceRule(int index, const Rule& rule, const QString& description, int mergeKey)
{
    if (index < 0 || static_cast<size_t>(index) >= m_rules.rules.size())
        return;
    RuleSet after = m_rules;
    after.rules[static_cast<size_t>(index)] = rule;
    change(std::move(after), description, mergeKey);
}

void RuleDocument::removeRules(std::vector<int> indices)
{
    std::sort(indices.begin(), indices.end());
    indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
    RuleSet after = m_rules;
    for (auto it = indices.rbegin(); it != indices.rend(); ++it)
        if (*it >= 0 && static_cast<size_t>(*it) < after.rules.size())
            after.rules.erase(after.rules.begin() + *it);
    if (after.rules.size() == m_rules.rules.size())
        return;
    change(std::move(after), indices.size() == 1 ? tr("Remove rule %1").arg(indices[0] + 1) : tr("Remove %1 rules").arg(indices.size()));
}

void RuleDocument::moveRule(int from, int to)
{
    const int n = static_cast<int>(m_rules.rules.size());
    if (from < 0 || from >= n || to < 0 || to >= n || from == to)
        return;
    RuleSet after = m_rules;
    Rule r = std::move(after.rules[static_cast<size_t>(from)]);
    after.rules.erase(after.rules.begin() + from);
    after.rules.insert(after.rules.begin() + to, std::move(r));
    change(std::move(after), tr("Move rule %1 to %2").arg(from + 1).arg(to + 1));
}

void RuleDocument::setEnabled(int index, bool enabled)
{
    if (index < 0 || static_cast<size_t>(index) >= m_rules.rules.size()
        || m_rules.rules[static_cast<size_t>(index)].enabled == enabled)
        return;
    Rule r = m_rules.rules[static_cast<size_t>(index)];
    r.enabled = enabled;
    replaceRule(index, r, enabled ? tr("Enable rule %1").arg(index + 1) : tr("Disable rule %1").arg(index + 1));
}

bool RuleDocument::load(const QString& path, QString* error)
{
    try {
        RuleSet loaded = importRulesFile(path.toStdString());
        // Loading is a change like any other: undo brings the previous set back.
        change(std::move(loaded), tr("Open %1").arg(QFileInfo(path).fileName()));
        m_path = path;
        m_undo->setClean();
        emit pathChanged(m_path);
        return true;
    } catch (const std::exception& e) {
        if (error)
            *error = QString::fromStdString(e.what());
        return false;
    }
}

bool RuleDocument::save(const QString& path, QString* error)
{
    try {
        const bool json = path.endsWith(QStringLiteral(".json"), Qt::CaseInsensitive);
        // A rule file may be saved over the one it came from, never over a checkpoint or model read.
        refuseOutputOntoInput(path.toStdString(), static_cast<unsigned>(InputKind::Checkpoint));
        writeFileAtomically(path.toStdString(), json ? rulesToJson(m_rules) : rulesToYaml(m_rules));
    } catch (const std::exception& e) {
        if (error)
            *error = QString::fromStdString(e.what());
        return false;
    }
    m_path = path;
    m_undo->setClean();
    emit pathChanged(m_path);
    return true;
}

bool RuleDocument::isModified() const { return !m_undo->isClean(); }

void RuleDocument::reset()
{
    m_undo->clear();
    m_path.clear();
    set(RuleSet {});
    emit pathChanged(m_path);
    writeRecovery();
}

void RuleDocument::setRecoveryFile(const QString& path)
{
    m_recovery = path;
    writeRecovery();
}

std::optional<RuleSet> RuleDocument::readRecovery(const QString& path)
{
    if (path.isEmpty() || !QFileInfo::exists(path))
        return std::nullopt;
    try {
        RuleSet r = loadRules(path.toStdString());
        if (r.rules.empty())
            return std::nullopt;
        return r;
    } catch (const std::exception&) {
        return std::nullopt; // a torn or foreign file is not worth a dialog
    }
}

void RuleDocument::restore(RuleSet recovered)
{
    change(std::move(recovered), tr("Recover unsaved rules"));
}

void RuleDocument::discardRecovery()
{
    if (!m_recovery.isEmpty())
        QFile::remove(m_recovery);
}

void RuleDocument::set(const RuleSet& rules)
{
    m_rules = rules;
    writeRecovery();
    emit rulesChanged();
}

void RuleDocument::writeRecovery()
{
    if (m_recovery.isEmpty())
        return;
    if (!isModified()) {
        QFile::remove(m_recovery);
        return;
    }
    try {
        writeFileAtomically(m_recovery.toStdString(), rulesToYaml(m_rules));
    } catch (const std::exception&) {
        // Recovery is best effort: a read-only config folder must not break editing.
    }
}

} // namespace sl::gui
