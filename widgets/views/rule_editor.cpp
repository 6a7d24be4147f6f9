#include "rule_editor.h"

#include "models/rule_list_model.h"
#include "session/rule_document.h"
#include "util/error.h"

#include <QAbstractItemDelegate>
#include <QAction>
#include <QApplication>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QListWidget>
#include <QSplitter>
#include <QStyle>
#include <QTableView>
#include <QTimer>
#include <QToolButton>
#include <QUndoStack>
#include <QVBoxLayout>

#include <algorithm>

namespace sl::gui {

namespace {

QIcon severityIcon(Severity s)
{
    const QStyle::StandardPixmap p = s == Severity::Danger ? QStyle::SP_MessageBoxCritical
        : s == Severity::Warning                          ? QStyle::SP_MessageBoxWarning
                                                          : QStyle::SP_MessageBoxInformation;
    return QApplication::style()->standardIcon(p);
}

QToolButton* toolButton(QAction* action, QWidget* parent, Qt::ToolButtonStyle style)
{
    auto* b = new QToolButton(parent);
    b->setDefaultAction(action);
    b->setToolButtonStyle(style);
    b->setAutoRaise(true);
    return b;
}

// A list with a heading above it, for the lower parts of the splitter.
QWidget* titled(QLabel* label, QWidget* body, QWidget* parent)
{
    auto* w = new QWidget(parent);
    auto* l = new QVBoxLayout(w);
    l->setContentsMargins(0, 4, 0, 0);
    l->setSpacing(2);
    l->addWidget(label);
    l->addWidget(body);
    return w;
}

} // namespace

RuleEditor::RuleEditor(RuleDocument* doc, QWidget* parent)
    : QWidget(parent)
    , m_doc(doc)
    , m_model(new RuleListModel(doc, this))
    , m_table(new QTableView(this))
    , m_warnings(new QListWidget(this))
    , m_warningsLabel(new QLabel(tr("No warnings"), this))
    , m_preview(new QListWidget(this))
    , m_previewLabel(new QLabel(this))
    , m_previewTimer(new QTimer(this))
{
    m_model->setSeverityIcons({ severityIcon(Severity::Info), severityIcon(Severity::Warning), severityIcon(Severity::Danger) });
    m_table->setObjectName(QStringLiteral("ruleTable"));
    m_warnings->setObjectName(QStringLiteral("ruleWarnings"));
    m_preview->setObjectName(QStringLiteral("rulePreview"));
    m_previewLabel->setObjectName(QStringLiteral("rulePreviewSummary"));

    m_table->setModel(m_model);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::ExtendedSelection);
    m_table->setEditTriggers(QAbstractItemView::DoubleClicked | QAbstractItemView::EditKeyPressed
        | QAbstractItemView::AnyKeyPressed | QAbstractItemView::SelectedClicked);
    // Reordering is a move inside the table; the model turns the drop into one RuleDocument change.
    m_table->setDragEnabled(true);
    m_table->setAcceptDrops(true);
    m_table->setDropIndicatorShown(true);
    m_table->setDragDropMode(QAbstractItemView::InternalMove);
    m_table->setDefaultDropAction(Qt::MoveAction);
    m_table->setDragDropOverwriteMode(false);
    m_table->setWordWrap(false);
    m_table->verticalHeader()->hide();
    m_table->verticalHeader()->setDefaultSectionSize(m_table->fontMetrics().height() + 6);
    // Fixed starting widths: ResizeToContents would measure every row of a 100,000-rule CSV import.
    QHeaderView* header = m_table->horizontalHeader();
    const int em = m_table->fontMetrics().horizontalAdvance(QLatin1Char('M'));
    header->setSectionResizeMode(QHeaderView::Interactive);
    header->setStretchLastSection(false);
    // The number column holds a checkbox, a warning icon and up to six digits.
    const int widths[RuleListModel::ColumnCount] = { em * 6, em * 16, em * 10, em * 3, em * 12, em * 5 };
    for (int c = 0; c < RuleListModel::ColumnCount; ++c)
        header->resizeSection(c, std::max(widths[c], header->sectionSizeHint(c)));

    // Actions: WidgetWithChildrenShortcut so Delete in the diff view does not remove rules.
    auto makeAction = [this](const QString& text, const QString& tip, const QKeySequence& key, const QString& themeIcon) {
        auto* a = new QAction(QIcon::fromTheme(themeIcon), text, this);
        a->setToolTip(tip);
        if (!key.isEmpty())
            a->setShortcut(key);
        a->setShortcutContext(Qt::WidgetWithChildrenShortcut);
        QWidget::addAction(a);
        return a;
    };
    m_add = makeAction(tr("Add rule"), tr("Add a rule after the selected one (Insert)"), QKeySequence(Qt::Key_Insert),
        QStringLiteral("list-add"));
    m_remove = makeAction(tr("Remove"), tr("Remove the selected rules (Delete)"), QKeySequence::Delete,
        QStringLiteral("list-remove"));
    m_up = makeAction(tr("Move up"), tr("Apply the selected rules earlier in the chain (Alt+Up)"),
        QKeySequence(Qt::ALT | Qt::Key_Up), QStringLiteral("go-up"));
    m_down = makeAction(tr("Move down"), tr("Apply the selected rules later in the chain (Alt+Down)"),
        QKeySequence(Qt::ALT | Qt::Key_Down), QStringLiteral("go-down"));
    // No shortcuts on undo and redo: the window's Edit menu owns Ctrl+Z, and two would be ambiguous.
    m_undo = doc->undoStack()->createUndoAction(this, tr("Undo"));
    m_redo = doc->undoStack()->createRedoAction(this, tr("Redo"));
    m_undo->setIcon(style()->standardIcon(QStyle::SP_ArrowBack));
    m_redo->setIcon(style()->standardIcon(QStyle::SP_ArrowForward));
    connect(m_add, &QAction::triggered, this, &RuleEditor::addRule);
    connect(m_remove, &QAction::triggered, this, &RuleEditor::removeSelected);
    connect(m_up, &QAction::triggered, this, [this] { moveSelected(-1); });
    connect(m_down, &QAction::triggered, this, [this] { moveSelected(+1); });

    // Undo and redo show only their icons: their text names the step ("Undo Edit pattern of rule 3").
    auto* buttons = new QHBoxLayout;
    buttons->setContentsMargins(0, 0, 0, 0);
    buttons->setSpacing(2);
    for (QAction* a : { m_add, m_remove, m_up, m_down })
        buttons->addWidget(toolButton(a, this, Qt::ToolButtonTextBesideIcon));
    buttons->addStretch(1);
    buttons->addWidget(toolButton(m_undo, this, Qt::ToolButtonIconOnly));
    buttons->addWidget(toolButton(m_redo, this, Qt::ToolButtonIconOnly));

    m_warnings->setAlternatingRowColors(true);
    m_warnings->setIconSize(QSize(16, 16));
    m_warnings->setWordWrap(true);
    m_preview->setUniformItemSizes(true); // 200 lines of text: no per-item size queries
    m_preview->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    m_previewLabel->setWordWrap(true);
    m_previewLabel->setTextInteractionFlags(Qt::TextSelectableByMouse);

    // The dock is wide and short: the rules on the left, what the core says about them beside.
    auto* side = new QSplitter(Qt::Vertical, this);
    side->addWidget(titled(m_warningsLabel, m_warnings, side));
    side->addWidget(titled(m_previewLabel, m_preview, side));
    side->setStretchFactor(0, 1);
    side->setStretchFactor(1, 2);
    side->setChildrenCollapsible(false);
    auto* split = new QSplitter(Qt::Horizontal, this);
    split->addWidget(m_table);
    split->addWidget(side);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 2);
    split->setChildrenCollapsible(false);

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(2, 2, 2, 2);
    layout->setSpacing(2);
    layout->addLayout(buttons);
    layout->addWidget(split, 1);

    // The preview is computed once per event-loop turn, however many changes (rules, selection) came in it.
    m_previewTimer->setSingleShot(true);
    m_previewTimer->setInterval(0);
    connect(m_previewTimer, &QTimer::timeout, this, &RuleEditor::refreshPreview);

    // After the model's own connection (made in its constructor), so the table is up to date here.
    connect(doc, &RuleDocument::rulesChanged, this, &RuleEditor::onRulesChanged);
    connect(m_model, &QAbstractItemModel::modelReset, this, &RuleEditor::updateActions);
    connect(m_model, &RuleListModel::rulesMoved, this, [this](int first, int count) {
        QItemSelection sel(m_model->index(first, 0), m_model->index(first + count - 1, RuleListModel::ColumnCount - 1));
        m_table->selectionModel()->setCurrentIndex(m_model->index(first, RuleListModel::PatternColumn), QItemSelectionModel::NoUpdate);
        m_table->selectionModel()->select(sel, QItemSelectionModel::ClearAndSelect);
    });
    connect(m_table->selectionModel(), &QItemSelectionModel::selectionChanged, this, [this] {
        updateActions();
        schedulePreview();
    });
    connect(m_table->selectionModel(), &QItemSelectionModel::currentChanged, this, &RuleEditor::schedulePreview);
    connect(m_warnings, &QListWidget::itemActivated, this, &RuleEditor::onWarningActivated);
    connect(m_warnings, &QListWidget::itemClicked, this, &RuleEditor::onWarningActivated);

    updateActions();
    refreshPreview();
}

RuleEditor::~RuleEditor() = default;

void RuleEditor::setPreviewKeys(std::shared_ptr<const Source> a)
{
    m_keys = std::move(a);
    schedulePreview();
}

void RuleEditor::setIssues(std::vector<RuleIssue> issues)
{
    m_warnings->clear();
    for (const RuleIssue& issue : issues) {
        auto* item = new QListWidgetItem(severityIcon(issue.severity), QString::fromStdString(issue.message));
        QStringList tip { QString::fromStdString(issue.message) };
        for (const std::string& e : issue.examples)
            tip << QStringLiteral("  ") + QString::fromStdString(e);
        item->setToolTip(tip.join(QLatin1Char('\n')));
        item->setData(Qt::UserRole, static_cast<int>(issue.rule.number())); // -1: the whole set
        m_warnings->addItem(item);
    }
    m_warningsLabel->setText(issues.empty() ? tr("No warnings") : tr("Warnings (%1)").arg(issues.size()));
    m_model->setIssues(std::move(issues));
}

void RuleEditor::setHits(std::vector<uint32_t> hits) { m_model->setHits(std::move(hits)); }

QString RuleEditor::previewSummary() const { return m_previewLabel->text(); }

void RuleEditor::selectRule(int row)
{
    if (row < 0 || row >= m_model->rowCount())
        return;
    const QModelIndex index = m_model->index(row, RuleListModel::PatternColumn);
    m_table->selectionModel()->setCurrentIndex(index, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    m_table->scrollTo(index);
}

std::vector<int> RuleEditor::selectedRows() const
{
    std::vector<int> rows;
    for (const QModelIndex& i : m_table->selectionModel()->selectedRows())
        rows.push_back(i.row());
    std::sort(rows.begin(), rows.end());
    return rows;
}

void RuleEditor::updateActions()
{
    const std::vector<int> rows = selectedRows();
    const int n = m_model->rowCount();
    m_remove->setEnabled(!rows.empty());
    m_up->setEnabled(!rows.empty() && rows.front() > 0);
    m_down->setEnabled(!rows.empty() && rows.back() < n - 1);
}

void RuleEditor::addRule()
{
    const std::vector<int> rows = selectedRows();
    RuleSet after = m_doc->rules();
    const int at = rows.empty() ? static_cast<int>(after.rules.size()) : rows.back() + 1;
    after.rules.insert(after.rules.begin() + at, Rule {});
    m_doc->change(std::move(after), tr("Add rule %1").arg(at + 1));
    selectRule(at);
    // Straight into the pattern: an empty rule is only a placeholder.
    if (isVisible())
        m_table->edit(m_model->index(at, RuleListModel::PatternColumn));
}

void RuleEditor::removeSelected()
{
    const std::vector<int> rows = selectedRows();
    if (rows.empty())
        return;
    m_doc->removeRules(rows);
    selectRule(std::min(rows.front(), m_model->rowCount() - 1));
}

void RuleEditor::moveSelected(int delta)
{
    const std::vector<int> rows = selectedRows();
    if (rows.empty())
        return;
    // The model selects the moved rules again (rulesMoved).
    m_model->moveRulesBefore(rows, delta < 0 ? rows.front() - 1 : rows.back() + 2);
}

void RuleEditor::onRulesChanged()
{
    m_prefix.reset();
    // An editor left open across an undo or a move would later write its stale text into whatever rule now
    // stands in its row: show it the rule's current value instead.
    const QModelIndex current = m_table->currentIndex();
    if (current.isValid()) {
        if (QWidget* editor = m_table->indexWidget(current)) // the open editor, if any
            m_table->itemDelegateForIndex(current)->setEditorData(editor, current);
    }
    updateActions();
    schedulePreview();
}

void RuleEditor::onWarningActivated(QListWidgetItem* item)
{
    if (item)
        selectRule(item->data(Qt::UserRole).toInt());
}

void RuleEditor::schedulePreview() { m_previewTimer->start(); }

void RuleEditor::refreshPreview()
{
    m_previewTimer->stop();
    m_preview->clear();
    const RuleSet& rules = m_doc->rules();
    int k = m_table->currentIndex().isValid() ? m_table->currentIndex().row() : -1;
    if (k < 0) {
        const std::vector<int> rows = selectedRows();
        k = rows.empty() ? -1 : rows.front();
    }
    if (!m_keys) {
        m_previewLabel->setText(tr("Preview: open a checkpoint (A) to see the keys a rule touches"));
        return;
    }
    const size_t total = m_keys->entries.size();
    if (k < 0 || static_cast<size_t>(k) >= rules.rules.size()) {
        m_previewLabel->setText(tr("Preview: select a rule to see which of A's %1 keys it touches").arg(total));
        return;
    }
    if (!rules.rules[static_cast<size_t>(k)].enabled) {
        m_previewLabel->setText(tr("Rule %1 is disabled: it touches none of A's keys").arg(k + 1));
        return;
    }
    if (!m_prefix || m_prefix->rule != k) {
        // The chain up to and including rule k. CompiledRules points into the set it was compiled from, so the
        // set lives in the cache beside it.
        m_prefix.emplace();
        m_prefix->rule = k;
        m_prefix->rules.version = rules.version;
        m_prefix->rules.mode = rules.mode;
        m_prefix->rules.rules.assign(rules.rules.begin(), rules.rules.begin() + k + 1);
        m_prefix->compiled = CompiledRules::compile(m_prefix->rules, &m_prefix->errors);
    }
    const CompiledRules& chain = m_prefix->compiled;
    if (!chain.usable(static_cast<size_t>(k))) {
        QString why;
        for (const PatternError& e : m_prefix->errors)
            if (e.rule == static_cast<size_t>(k))
                why = !e.positioned ? QString::fromStdString(e.message)
                                    : tr("%1 at position %2: %3")
                                          .arg(e.inReplacement ? tr("replacement") : tr("pattern"))
                                          .arg(e.offset)
                                          .arg(QString::fromStdString(e.message));
        m_previewLabel->setText(tr("Rule %1 does not compile (%2): it is skipped").arg(k + 1).arg(why));
        return;
    }
    // Rule k is the last of the chain, so when it matched a key it is the last index in `matched`.
    std::vector<uint32_t> matched;
    QStringList examples;
    size_t touched = 0;
    const QString arrow = QStringLiteral(" -> ");
    try {
        for (const Entry& e : m_keys->entries) {
            matched.clear();
            CompiledRules::Result r = chain.apply(e.name, &matched);
            if (matched.empty() || matched.back() != static_cast<uint32_t>(k))
                continue;
            ++touched;
            if (examples.size() < MaxPreviewExamples)
                examples << QString::fromStdString(e.name) + arrow
                        + (r.dropped ? tr("(dropped)") : QString::fromStdString(r.name));
        }
    } catch (const RuleMatchError& e) {
        // A rule of the chain reached a match limit: what it would touch is unknown, not "nothing".
        m_previewLabel->setText(
            tr("Rule %1 cannot be previewed: %2").arg(k + 1).arg(QString::fromStdString(oneLineMessage(e.what()))));
        return;
    }
    m_preview->addItems(examples);
    QString summary = tr("Rule %1 touches %2 of %3 keys").arg(k + 1).arg(touched).arg(total);
    if (touched > static_cast<size_t>(MaxPreviewExamples))
        summary += tr(" (the first %1 shown)").arg(MaxPreviewExamples);
    m_previewLabel->setText(summary);
}

} // namespace sl::gui
