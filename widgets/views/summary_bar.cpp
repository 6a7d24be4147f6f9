#include "summary_bar.h"

#include "style/status_style.h"

#include <QCheckBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QToolButton>
#include <QToolTip>
#include <QVBoxLayout>

namespace sl::gui {

namespace {
// Buttons in the order people scan for trouble: failures first.
constexpr RowStatus kButtonOrder[] = { RowStatus::ShapeMismatch, RowStatus::CopyError, RowStatus::Missing,
    RowStatus::Unexpected, RowStatus::DtypeMismatch, RowStatus::Renamed, RowStatus::Dropped, RowStatus::Match };
static_assert(std::size(kButtonOrder) == kRowStatusCount, "a button for every status");
}

SummaryBar::SummaryBar(QWidget* parent)
    : QWidget(parent)
    , m_text(new QLineEdit(this))
    , m_regex(new QCheckBox(tr("Regex"), this))
    , m_fold(new QCheckBox(tr("Fold layers"), this))
    , m_hideMatches(new QCheckBox(tr("Hide matches"), this))
    , m_verdict(new QLabel(this))
{
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(4, 4, 4, 2);
    outer->setSpacing(2);
    auto* row1 = new QHBoxLayout;
    m_text->setPlaceholderText(tr("Filter names (Ctrl+F)…"));
    m_text->setClearButtonEnabled(true);
    m_text->setObjectName(QStringLiteral("filter"));
    row1->addWidget(m_text, 1);
    m_regex->setToolTip(tr("Read the filter as a regular expression (case-insensitive)"));
    m_fold->setToolTip(tr("Fold rows that differ only by layer or expert index into one row: layers.{0..31}"));
    m_fold->setChecked(true);
    m_hideMatches->setToolTip(tr("Show only the rows that differ"));
    row1->addWidget(m_regex);
    row1->addWidget(m_fold);
    row1->addWidget(m_hideMatches);
    auto* legend = new QToolButton(this);
    legend->setText(tr("Legend"));
    legend->setToolTip(tr("What the colours and icons mean"));
    connect(legend, &QToolButton::clicked, this, [this, legend] {
        QToolTip::showText(legend->mapToGlobal(QPoint(0, legend->height())), legendHtml(palette()), legend);
    });
    row1->addWidget(legend);
    outer->addLayout(row1);

    auto* row2 = new QHBoxLayout;
    row2->setSpacing(2);
    for (RowStatus s : kButtonOrder) {
        auto* b = new QToolButton(this);
        b->setCheckable(true);
        b->setAutoRaise(true);
        b->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
        b->setIcon(StatusStyle::icon(s, palette()));
        b->setToolTip(StatusStyle::description(s) + QStringLiteral("\n") + tr("Click to show only these rows (combine several)."));
        b->setObjectName(QStringLiteral("status-") + QString::fromLatin1(rowStatusName(s).data()));
        connect(b, &QToolButton::toggled, this, &SummaryBar::filterChanged);
        m_buttons[static_cast<size_t>(s)] = b;
        row2->addWidget(b);
    }
    row2->addStretch(1);
    m_verdict->setTextFormat(Qt::RichText);
    m_verdict->setWordWrap(true); // a long verdict wraps rather than widening the window
    m_verdict->setAlignment(Qt::AlignRight | Qt::AlignVCenter);
    row2->addWidget(m_verdict);
    outer->addLayout(row2);

    connect(m_text, &QLineEdit::textChanged, this, &SummaryBar::filterChanged);
    connect(m_regex, &QCheckBox::toggled, this, &SummaryBar::filterChanged);
    connect(m_hideMatches, &QCheckBox::toggled, this, &SummaryBar::filterChanged);
    connect(m_fold, &QCheckBox::toggled, this, &SummaryBar::foldingChanged);
    setSummary({}, false);
}

void SummaryBar::setSummary(const DiffSummary& summary, bool complete, const QStringList& executes)
{
    for (RowStatus s : kButtonOrder) {
        QToolButton* b = m_buttons[static_cast<size_t>(s)];
        // Zero counts stay visible but quiet and narrow (the icon and "0"; the name is in the tooltip), so the
        // bar fits a 1280-pixel screen.
        const bool zero = summary.count(s) == 0 && !b->isChecked();
        b->setText(zero ? QStringLiteral("0") : QStringLiteral("%1 %2").arg(summary.count(s)).arg(StatusStyle::label(s)));
        b->setToolTip(StatusStyle::label(s) + QStringLiteral(": ") + StatusStyle::description(s) + QStringLiteral("\n")
            + tr("Click to show only these rows (combine several)."));
        b->setEnabled(summary.count(s) > 0 || b->isChecked());
    }
    if (!complete) {
        m_verdict->setText(tr("Open a checkpoint and a model to compare them."));
        return;
    }
    const bool ok = summary.loadSucceeds();
    const QColor c = StatusStyle::color(ok ? RowStatus::Match : RowStatus::ShapeMismatch, palette());
    const size_t failing = summary.count(RowStatus::Missing) + summary.count(RowStatus::Unexpected)
        + summary.count(RowStatus::ShapeMismatch) + summary.count(RowStatus::CopyError);
    QString verdict = ok ? QStringLiteral("<b style='color:%1'>%2</b>").arg(c.name(), tr("load_state_dict(strict=True) succeeds"))
                         : QStringLiteral("<b style='color:%1'>%2</b>").arg(c.name(), tr("load_state_dict(strict=True) fails: %n row(s)", nullptr, static_cast<int>(failing)));
    // Never a bare "succeeds" when loading a side would run code.
    if (!executes.isEmpty())
        verdict = QStringLiteral("<b style='color:%1'>%2</b> · ")
                      .arg(StatusStyle::color(RowStatus::ShapeMismatch, palette()).name(),
                          tr("DANGER: loading %1 would run code").arg(executes.join(tr(" and "))))
            + verdict;
    m_verdict->setText(verdict);
}

AlignedTreeModel::Filter SummaryBar::filter() const
{
    AlignedTreeModel::Filter f;
    f.text = m_text->text();
    f.regex = m_regex->isChecked();
    uint32_t chosen = 0;
    for (size_t s = 0; s < kRowStatusCount; ++s)
        if (m_buttons[s]->isChecked())
            chosen |= 1u << s;
    f.statuses = chosen ? chosen : AlignedTreeModel::kAllStatuses;
    if (m_hideMatches->isChecked())
        f.statuses &= ~(1u << static_cast<unsigned>(RowStatus::Match));
    return f;
}

void SummaryBar::setFilterError(const QString& error)
{
    m_text->setToolTip(error.isEmpty() ? QString() : tr("Invalid regular expression: %1").arg(error));
    QPalette p = palette();
    if (!error.isEmpty())
        p.setColor(QPalette::Base, StatusStyle::tint(RowStatus::ShapeMismatch, p).lighter(100));
    m_text->setPalette(p);
}

QString SummaryBar::legendHtml(const QPalette& palette)
{
    QString html = QStringLiteral("<table cellspacing='4'>");
    for (RowStatus s : kButtonOrder)
        html += QStringLiteral("<tr><td><b style='color:%1'>%2</b></td><td>%3</td></tr>")
                    .arg(StatusStyle::color(s, palette).name(), StatusStyle::label(s).toHtmlEscaped(),
                        StatusStyle::description(s).toHtmlEscaped());
    html += QStringLiteral("<tr><td colspan='2'><hr/><b>%1</b></td></tr>").arg(tr("Reasons (Status column)"));
    for (int r = 1; r <= static_cast<int>(kLastReason); ++r)
        html += QStringLiteral("<tr><td>%1</td><td>%2</td></tr>")
                    .arg(StatusStyle::label(static_cast<Reason>(r)).toHtmlEscaped(),
                        StatusStyle::description(static_cast<Reason>(r)).toHtmlEscaped());
    html += QStringLiteral("<tr><td><b><i style='color:%1'>_orig_mod</i></b></td><td>%2</td></tr>")
                .arg(StatusStyle::wrapperColor(palette).name(), tr("a wrapper's segment inside a name"));
    html += QStringLiteral("</table>");
    return html;
}

} // namespace sl::gui
