#include "rule_list_model.h"

#include "rules/rule_engine.h"
#include "session/rule_document.h"

#include <QColor>
#include <QDataStream>
#include <QFontDatabase>
#include <QGuiApplication>
#include <QIODevice>
#include <QLocale>
#include <QMimeData>
#include <QPalette>

#include <algorithm>

namespace sl::gui {

namespace {

// Rows dragged inside one view; the model's address keeps a drag from another editor from moving rules here.
QString rowsMimeType() { return QStringLiteral("application/x-statelens-rule-rows"); }

bool darkPalette()
{
    return QGuiApplication::palette().color(QPalette::Base).lightness() < 128;
}

QColor errorForeground() { return darkPalette() ? QColor(255, 140, 140) : QColor(176, 0, 32); }
QColor errorBackground() { return darkPalette() ? QColor(96, 32, 36) : QColor(255, 226, 226); }
QColor warningBackground() { return darkPalette() ? QColor(92, 76, 24) : QColor(255, 244, 204); }

// Tooltips are rich text on purpose: a pattern such as `(?P<b>x)` would otherwise be taken for HTML.
QString htmlLines(const QStringList& lines)
{
    QStringList escaped;
    escaped.reserve(lines.size());
    for (const QString& l : lines)
        escaped << l.toHtmlEscaped();
    return QStringLiteral("<qt>") + escaped.join(QStringLiteral("<br>")) + QStringLiteral("</qt>");
}

} // namespace

RuleListModel::RuleListModel(RuleDocument* doc, QObject* parent)
    : QAbstractTableModel(parent)
    , m_doc(doc)
{
    m_rows = static_cast<int>(doc->rules().rules.size());
    m_checks.assign(static_cast<size_t>(m_rows), {});
    connect(doc, &RuleDocument::rulesChanged, this, &RuleListModel::onRulesChanged);
}

void RuleListModel::onRulesChanged()
{
    const int n = static_cast<int>(m_doc->rules().rules.size());
    if (n == m_rows) {
        // Same rows (an edit, a move, an undo of either): keep the view's selection and current cell.
        m_checks.assign(static_cast<size_t>(n), {});
        if (n > 0)
            emit dataChanged(index(0, 0), index(n - 1, ColumnCount - 1));
        return;
    }
    beginResetModel();
    m_rows = n;
    m_checks.assign(static_cast<size_t>(n), {});
    endResetModel();
}

void RuleListModel::setHits(std::vector<uint32_t> hits)
{
    m_hits = std::move(hits);
    if (m_rows > 0)
        emit dataChanged(index(0, HitsColumn), index(m_rows - 1, HitsColumn));
}

void RuleListModel::setIssues(std::vector<RuleIssue> issues)
{
    m_issues = std::move(issues);
    m_issuesOf.clear();
    for (size_t i = 0; i < m_issues.size(); ++i) {
        const RuleIndex r = m_issues[i].rule;
        if (!r.valid())
            continue; // about the whole set: the editor's warning list shows it
        if (r.get() >= m_issuesOf.size())
            m_issuesOf.resize(r.get() + 1);
        m_issuesOf[r.get()].push_back(static_cast<int>(i));
    }
    if (m_rows > 0)
        emit dataChanged(index(0, 0), index(m_rows - 1, ColumnCount - 1),
            { Qt::DecorationRole, Qt::BackgroundRole, Qt::ToolTipRole, IssueCountRole });
}

const Rule* RuleListModel::rule(int row) const
{
    const auto& rules = m_doc->rules().rules;
    if (row < 0 || row >= m_rows || static_cast<size_t>(row) >= rules.size())
        return nullptr;
    return &rules[static_cast<size_t>(row)];
}

const RuleListModel::Check& RuleListModel::check(int row) const
{
    static const Check none;
    const Rule* r = rule(row);
    if (!r || static_cast<size_t>(row) >= m_checks.size())
        return none;
    Check& c = m_checks[static_cast<size_t>(row)];
    if (c.done)
        return c;
    c.done = true;
    if (auto e = validatePattern(r->pattern)) {
        c.pattern = tr("rule %1: pattern, position %2: %3")
                        .arg(row + 1)
                        .arg(e->offset)
                        .arg(QString::fromStdString(e->message));
    } else if (auto e2 = validateReplacement(r->replacement, r->pattern)) {
        // Only against a valid pattern: group references cannot be judged against one that does not compile.
        c.replacement = tr("rule %1: replacement, position %2: %3")
                            .arg(row + 1)
                            .arg(e2->offset)
                            .arg(QString::fromStdString(e2->message));
    }
    return c;
}

QString RuleListModel::patternError(int row) const { return check(row).pattern; }
QString RuleListModel::replacementError(int row) const { return check(row).replacement; }

Severity RuleListModel::worstIssue(int row, bool* any) const
{
    Severity worst = Severity::Info;
    *any = false;
    if (row >= 0 && static_cast<size_t>(row) < m_issuesOf.size()) {
        for (int i : m_issuesOf[static_cast<size_t>(row)]) {
            *any = true;
            worst = std::max(worst, m_issues[static_cast<size_t>(i)].severity);
        }
    }
    return worst;
}

void RuleListModel::setSeverityIcons(std::array<QIcon, 3> icons)
{
    m_icons = std::move(icons);
    if (m_rows > 0)
        emit dataChanged(index(0, NumberColumn), index(m_rows - 1, NumberColumn), { Qt::DecorationRole });
}

QVariant RuleListModel::icon(Severity s) const
{
    const QIcon& i = m_icons[static_cast<size_t>(s)];
    return i.isNull() ? QVariant() : QVariant(i);
}

QString RuleListModel::toolTip(int row, int column) const
{
    const Rule* r = rule(row);
    if (!r)
        return {};
    const Check& c = check(row);
    QStringList lines;
    switch (column) {
    case NumberColumn:
        lines << (r->enabled ? tr("Rule %1").arg(row + 1) : tr("Rule %1 (disabled)").arg(row + 1));
        if (!c.pattern.isEmpty())
            lines << c.pattern;
        if (!c.replacement.isEmpty())
            lines << c.replacement;
        break;
    case PatternColumn:
        lines << (c.pattern.isEmpty() ? QString::fromStdString(r->pattern) : c.pattern);
        break;
    case ReplacementColumn:
        if (!c.replacement.isEmpty())
            lines << c.replacement;
        else if (r->drop)
            lines << tr("A drop rule removes the keys it matches; the replacement is not used");
        else
            lines << QString::fromStdString(r->replacement);
        break;
    case DropColumn:
        lines << tr("Drop: remove the keys this rule matches (they are expected to be absent on the other side)");
        break;
    case NoteColumn:
        lines << QString::fromStdString(r->note);
        break;
    case HitsColumn:
        if (static_cast<size_t>(row) < m_hits.size())
            lines << tr("Matched %1 of A's keys along the chain").arg(m_hits[static_cast<size_t>(row)]);
        break;
    default:
        break;
    }
    if (static_cast<size_t>(row) < m_issuesOf.size())
        for (int i : m_issuesOf[static_cast<size_t>(row)])
            lines << QString::fromStdString(m_issues[static_cast<size_t>(i)].message);
    lines.removeAll(QString());
    return lines.isEmpty() ? QString() : htmlLines(lines);
}

int RuleListModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : m_rows; }
int RuleListModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant RuleListModel::data(const QModelIndex& index, int role) const
{
    const Rule* r = index.isValid() ? rule(index.row()) : nullptr;
    if (!r)
        return {};
    const int row = index.row();
    const int column = index.column();
    switch (role) {
    case Qt::DisplayRole:
    case Qt::EditRole:
        switch (column) {
        case NumberColumn:
            return role == Qt::DisplayRole ? QVariant(row + 1) : QVariant();
        case PatternColumn:
            return QString::fromStdString(r->pattern);
        case ReplacementColumn:
            return QString::fromStdString(r->replacement);
        case NoteColumn:
            return QString::fromStdString(r->note);
        case HitsColumn:
            if (role == Qt::DisplayRole && static_cast<size_t>(row) < m_hits.size())
                return QLocale().toString(m_hits[static_cast<size_t>(row)]);
            return {};
        default:
            return {};
        }
    case Qt::CheckStateRole:
        if (column == NumberColumn)
            return static_cast<int>(r->enabled ? Qt::Checked : Qt::Unchecked);
        if (column == DropColumn)
            return static_cast<int>(r->drop ? Qt::Checked : Qt::Unchecked);
        return {};
    case Qt::TextAlignmentRole:
        if (column == HitsColumn || column == NumberColumn)
            return static_cast<int>(Qt::AlignRight | Qt::AlignVCenter);
        return {};
    case Qt::FontRole:
        if (column == PatternColumn || column == ReplacementColumn)
            return QFontDatabase::systemFont(QFontDatabase::FixedFont);
        return {};
    case Qt::ForegroundRole: {
        const Check& c = check(row);
        if ((column == PatternColumn && !c.pattern.isEmpty()) || (column == ReplacementColumn && !c.replacement.isEmpty()))
            return errorForeground();
        // Disabled rules, and the replacement of a drop rule, take no part in the mapping.
        if (!r->enabled || (column == ReplacementColumn && r->drop))
            return QGuiApplication::palette().color(QPalette::Disabled, QPalette::Text);
        return {};
    }
    case Qt::BackgroundRole: {
        const Check& c = check(row);
        if ((column == PatternColumn && !c.pattern.isEmpty()) || (column == ReplacementColumn && !c.replacement.isEmpty()))
            return errorBackground();
        if (column == NumberColumn) {
            bool any = false;
            const Severity worst = worstIssue(row, &any);
            if (!c.pattern.isEmpty() || !c.replacement.isEmpty() || (any && worst == Severity::Danger))
                return errorBackground();
            if (any)
                return warningBackground();
        }
        return {};
    }
    case Qt::DecorationRole: {
        if (column != NumberColumn)
            return {};
        const Check& c = check(row);
        if (!c.pattern.isEmpty() || !c.replacement.isEmpty())
            return icon(Severity::Danger);
        bool any = false;
        const Severity worst = worstIssue(row, &any);
        return any ? icon(worst) : QVariant();
    }
    case Qt::ToolTipRole:
        return toolTip(row, column);
    case ErrorRole: {
        const Check& c = check(row);
        if (column == PatternColumn)
            return c.pattern;
        if (column == ReplacementColumn)
            return c.replacement;
        if (column == NumberColumn)
            return c.pattern.isEmpty() ? c.replacement : c.pattern;
        return QString();
    }
    case IssueCountRole:
        return static_cast<size_t>(row) < m_issuesOf.size() ? static_cast<int>(m_issuesOf[static_cast<size_t>(row)].size()) : 0;
    default:
        return {};
    }
}

bool RuleListModel::setData(const QModelIndex& index, const QVariant& value, int role)
{
    const Rule* current = index.isValid() ? rule(index.row()) : nullptr;
    if (!current)
        return false;
    const int row = index.row();
    const int column = index.column();
    if (role == Qt::CheckStateRole) {
        const bool on = value.toInt() == static_cast<int>(Qt::Checked);
        if (column == NumberColumn) {
            m_doc->setEnabled(row, on); // a no-op when unchanged
            return true;
        }
        if (column == DropColumn) {
            if (current->drop == on)
                return true;
            Rule r = *current;
            r.drop = on;
            m_doc->replaceRule(row, r, on ? tr("Drop with rule %1").arg(row + 1) : tr("Rename with rule %1").arg(row + 1));
            return true;
        }
        return false;
    }
    if (role != Qt::EditRole)
        return false;
    std::string text = value.toString().toStdString();
    Rule r = *current;
    QString what;
    switch (column) {
    case PatternColumn:
        if (r.pattern == text)
            return true; // no empty undo steps for an edit that changed nothing
        r.pattern = std::move(text);
        what = tr("Edit pattern of rule %1").arg(row + 1);
        break;
    case ReplacementColumn:
        if (r.replacement == text)
            return true;
        r.replacement = std::move(text);
        what = tr("Edit replacement of rule %1").arg(row + 1);
        break;
    case NoteColumn:
        if (r.note == text)
            return true;
        r.note = std::move(text);
        what = tr("Edit note of rule %1").arg(row + 1);
        break;
    default:
        return false;
    }
    // Typing into one cell again and again is one undo step.
    m_doc->replaceRule(row, r, what, row * 8 + column);
    return true;
}

Qt::ItemFlags RuleListModel::flags(const QModelIndex& index) const
{
    if (!index.isValid())
        return Qt::ItemIsDropEnabled; // drops land between rows, never on one
    Qt::ItemFlags f = Qt::ItemIsEnabled | Qt::ItemIsSelectable | Qt::ItemIsDragEnabled | Qt::ItemNeverHasChildren;
    switch (index.column()) {
    case NumberColumn:
    case DropColumn:
        f |= Qt::ItemIsUserCheckable;
        break;
    case PatternColumn:
    case ReplacementColumn:
    case NoteColumn:
        f |= Qt::ItemIsEditable;
        break;
    default:
        break;
    }
    return f;
}

QVariant RuleListModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal)
        return QAbstractTableModel::headerData(section, orientation, role);
    if (role == Qt::DisplayRole) {
        switch (section) {
        case NumberColumn: return tr("#");
        case PatternColumn: return tr("Pattern");
        case ReplacementColumn: return tr("Replacement");
        case DropColumn: return tr("Drop");
        case NoteColumn: return tr("Note");
        case HitsColumn: return tr("Hits");
        default: return {};
        }
    }
    if (role == Qt::ToolTipRole) {
        switch (section) {
        case NumberColumn: return tr("Order in the chain; the checkbox enables the rule");
        case PatternColumn: return tr("Regular expression (the subset Python's re and PCRE2 read alike)");
        case ReplacementColumn: return tr("Replacement: \\1, \\g<1> and \\g<name> refer to groups");
        case DropColumn: return tr("Remove the keys the rule matches instead of renaming them");
        case NoteColumn: return tr("Why the rule exists");
        case HitsColumn: return tr("How many of A's keys the rule matched along the chain");
        default: return {};
        }
    }
    return {};
}

Qt::DropActions RuleListModel::supportedDragActions() const { return Qt::MoveAction; }
Qt::DropActions RuleListModel::supportedDropActions() const { return Qt::MoveAction; }
QStringList RuleListModel::mimeTypes() const { return { rowsMimeType() }; }

QMimeData* RuleListModel::mimeData(const QModelIndexList& indexes) const
{
    QList<int> rows;
    for (const QModelIndex& i : indexes)
        if (i.isValid() && i.model() == this && !rows.contains(i.row()))
            rows << i.row();
    if (rows.isEmpty())
        return nullptr;
    std::sort(rows.begin(), rows.end());
    QByteArray bytes;
    QDataStream out(&bytes, QIODevice::WriteOnly);
    out << static_cast<quint64>(reinterpret_cast<quintptr>(this)) << rows;
    auto* mime = new QMimeData;
    mime->setData(rowsMimeType(), bytes);
    return mime;
}

namespace {

bool decodeRows(const QMimeData* data, const void* model, QList<int>* rows)
{
    if (!data || !data->hasFormat(rowsMimeType()))
        return false;
    QDataStream in(data->data(rowsMimeType()));
    quint64 from = 0;
    in >> from >> *rows;
    return in.status() == QDataStream::Ok && from == static_cast<quint64>(reinterpret_cast<quintptr>(model)) && !rows->isEmpty();
}

} // namespace

bool RuleListModel::canDropMimeData(const QMimeData* data, Qt::DropAction action, int, int, const QModelIndex&) const
{
    QList<int> rows;
    return action == Qt::MoveAction && decodeRows(data, this, &rows);
}

bool RuleListModel::dropMimeData(const QMimeData* data, Qt::DropAction action, int row, int column, const QModelIndex& parent)
{
    if (action == Qt::IgnoreAction)
        return true;
    QList<int> rows;
    if (action != Qt::MoveAction || !decodeRows(data, this, &rows))
        return false;
    (void)column;
    // Between rows the view passes the row; on one (or on the empty area below) it passes that item or none.
    int before = row;
    if (before < 0)
        before = parent.isValid() ? parent.row() : m_rows;
    return moveRulesBefore(std::vector<int>(rows.begin(), rows.end()), before);
}

bool RuleListModel::moveRows(const QModelIndex& sourceParent, int sourceRow, int count,
    const QModelIndex& destinationParent, int destinationChild)
{
    if (sourceParent.isValid() || destinationParent.isValid() || count <= 0 || sourceRow < 0
        || sourceRow + count > m_rows || destinationChild < 0 || destinationChild > m_rows)
        return false;
    // Qt's convention: moving a block onto itself or just below itself is not a move.
    if (destinationChild >= sourceRow && destinationChild <= sourceRow + count)
        return false;
    std::vector<int> rows;
    for (int i = 0; i < count; ++i)
        rows.push_back(sourceRow + i);
    return moveRulesBefore(std::move(rows), destinationChild);
}

bool RuleListModel::moveRulesBefore(std::vector<int> rows, int before)
{
    const int n = static_cast<int>(m_doc->rules().rules.size());
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    rows.erase(std::remove_if(rows.begin(), rows.end(), [n](int r) { return r < 0 || r >= n; }), rows.end());
    if (rows.empty())
        return false;
    before = std::clamp(before, 0, n);
    const int count = static_cast<int>(rows.size());
    const int insertAt = before - static_cast<int>(std::lower_bound(rows.begin(), rows.end(), before) - rows.begin());
    if (count == 1) {
        if (insertAt == rows.front())
            return false;
        m_doc->moveRule(rows.front(), insertAt);
    } else {
        // The new order: the others with the block inserted; several rules move as one undo step.
        std::vector<int> order;
        order.reserve(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i)
            if (!std::binary_search(rows.begin(), rows.end(), i))
                order.push_back(i);
        order.insert(order.begin() + insertAt, rows.begin(), rows.end());
        bool same = true;
        for (int i = 0; i < n && same; ++i)
            same = order[static_cast<size_t>(i)] == i;
        if (same)
            return false;
        const RuleSet& current = m_doc->rules();
        RuleSet after = current;
        for (int i = 0; i < n; ++i)
            after.rules[static_cast<size_t>(i)] = current.rules[static_cast<size_t>(order[static_cast<size_t>(i)])];
        m_doc->change(std::move(after), tr("Move %1 rules").arg(count));
    }
    emit rulesMoved(insertAt, count);
    return true;
}

} // namespace sl::gui
