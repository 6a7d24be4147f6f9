#include "suggestions_panel.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QVBoxLayout>

namespace sl::gui {

SuggestionsPanel::SuggestionsPanel(QWidget* parent)
    : QWidget(parent)
    , m_status(new QLabel(this))
    , m_list(new QListWidget(this))
    , m_apply(new QPushButton(tr("Apply"), this))
    , m_applyAll(new QPushButton(tr("Apply All"), this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(2, 2, 2, 2);
    m_status->setWordWrap(true);
    layout->addWidget(m_status);
    m_list->setWordWrap(true);
    m_list->setAlternatingRowColors(true);
    m_list->setObjectName(QStringLiteral("suggestions"));
    layout->addWidget(m_list, 1);
    auto* buttons = new QHBoxLayout;
    buttons->addStretch(1);
    m_apply->setToolTip(tr("Add this suggestion's rules to the rule set (Ctrl+Return applies the first)"));
    m_apply->setEnabled(false);
    buttons->addWidget(m_apply);
    m_applyAll->setObjectName(QStringLiteral("applyAll"));
    m_applyAll->setToolTip(tr("Add every suggestion's rules, in order, as one step (Ctrl+Shift+Return)"));
    m_applyAll->setEnabled(false);
    buttons->addWidget(m_applyAll);
    layout->addLayout(buttons);
    connect(m_applyAll, &QPushButton::clicked, this, &SuggestionsPanel::applyAllRequested);
    connect(m_apply, &QPushButton::clicked, this, [this] {
        if (m_list->currentRow() >= 0)
            emit applyRequested(m_list->currentRow());
    });
    connect(m_list, &QListWidget::itemActivated, this, [this](QListWidgetItem* item) { emit applyRequested(m_list->row(item)); });
    connect(m_list, &QListWidget::currentRowChanged, this, [this](int row) { m_apply->setEnabled(row >= 0); });
    setSuggestions({}, true);
}

int SuggestionsPanel::count() const { return m_list->count(); }

void SuggestionsPanel::setSuggestions(const std::vector<Suggestion>& suggestions, bool current)
{
    m_list->clear();
    m_applyAll->setEnabled(current && !suggestions.empty());
    if (!current) {
        m_status->setText(tr("Looking for rules…"));
        return;
    }
    m_status->setText(suggestions.empty() ? tr("No suggestions: nothing left that a known pattern explains.")
                                          : tr("%n suggestion(s). Nothing is applied until you click Apply.", nullptr, static_cast<int>(suggestions.size())));
    for (size_t i = 0; i < suggestions.size(); ++i) {
        const Suggestion& s = suggestions[i];
        QString rules;
        for (const Rule& r : s.rules)
            rules += QStringLiteral("\n    %1  →  %2").arg(QString::fromStdString(r.pattern),
                r.drop ? tr("(drop)") : r.replacement.empty() ? QStringLiteral("''") : QString::fromStdString(r.replacement));
        // Numbered as the rows' "pending: suggestion N" name them.
        QString text = QStringLiteral("%1. ").arg(i + 1) + QString::fromStdString(s.title) + rules;
        if (s.collisions)
            text += QStringLiteral("\n    ") + tr("⚠ %n collision(s)", nullptr, static_cast<int>(s.collisions));
        auto* item = new QListWidgetItem(text, m_list);
        QString tip;
        for (const auto& ex : s.examples)
            tip += QString::fromStdString(ex) + QLatin1Char('\n');
        item->setToolTip(tip.trimmed());
    }
    if (m_list->count())
        m_list->setCurrentRow(0);
}

} // namespace sl::gui
