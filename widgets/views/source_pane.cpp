#include "source_pane.h"

#include "report/source_report.h"
#include "session/side_loader.h"
#include "views/dropped_paths.h"

#include <QComboBox>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QMimeData>
#include <QProgressBar>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>

namespace sl::gui {

SourcePane::SourcePane(const QString& role, SideLoader* side, QWidget* parent)
    : QWidget(parent)
    , m_role(role)
    , m_title(new QLabel(this))
    , m_summary(new QLabel(this))
    , m_containers(new QComboBox(this))
    , m_progress(new QProgressBar(this))
    , m_cancel(new QToolButton(this))
    , m_findings(new QListWidget(this))
    , m_side(side)
    , m_poll(new QTimer(this))
{
    setAcceptDrops(true);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(2, 2, 2, 2);
    layout->setSpacing(2);
    auto* top = new QHBoxLayout;
    m_title->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_title->setText(QStringLiteral("<b>%1</b>: %2").arg(m_role, tr("nothing open (drop a file here)")));
    m_title->setTextFormat(Qt::RichText);
    m_title->setMinimumWidth(50);
    top->addWidget(m_title, 1);
    m_containers->setToolTip(tr("The state dict shown from this file: the model, the optimizer state, an EMA copy…"));
    m_containers->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    m_containers->hide();
    top->addWidget(m_containers);
    m_progress->setRange(0, 0); // busy until a reader announces countable work (shards, rank files)
    m_progress->setMaximumWidth(120);
    m_progress->setMaximumHeight(14);
    m_progress->setTextVisible(false);
    m_progress->hide();
    top->addWidget(m_progress);
    m_cancel->setText(tr("Cancel"));
    m_cancel->hide();
    top->addWidget(m_cancel);
    layout->addLayout(top);
    m_summary->setWordWrap(true);
    m_summary->setTextFormat(Qt::RichText);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_summary);
    m_findings->setMaximumHeight(46); // a few lines; the details panel has room for more
    m_findings->setWordWrap(true);
    m_findings->hide();
    layout->addWidget(m_findings);
    connect(m_cancel, &QToolButton::clicked, m_side, &SideLoader::cancel);
    m_poll->setInterval(100);
    connect(m_poll, &QTimer::timeout, this, [this] {
        const double f = m_side->progress();
        if (f < 0) {
            m_progress->setRange(0, 0);
        } else {
            m_progress->setRange(0, 1000);
            m_progress->setValue(static_cast<int>(f * 1000));
        }
    });
    connect(m_containers, &QComboBox::activated, this,
        [this](int i) { m_side->selectContainer(m_containers->itemData(i).toString()); });
    connect(m_side, &SideLoader::loadStarted, this, &SourcePane::loadStarted);
    connect(m_side, &SideLoader::sourceChanged, this, [this] {
        loadEnded();
        showSource();
    });
    connect(m_side, &SideLoader::loadCancelled, this, [this] {
        loadEnded();
        showSource();
        if (!m_side->source())
            m_summary->setText(tr("Loading cancelled."));
    });
}

void SourcePane::loadStarted(const QString& label)
{
    m_title->setText(QStringLiteral("<b>%1</b>: %2").arg(m_role, label.toHtmlEscaped()));
    m_summary->setText(tr("Loading…"));
    m_progress->setRange(0, 0);
    m_progress->show();
    m_cancel->show();
    m_poll->start();
}

void SourcePane::loadEnded()
{
    m_poll->stop();
    m_progress->hide();
    m_cancel->hide();
}

void SourcePane::showSource()
{
    m_findings->clear();
    m_containers->clear();
    const std::shared_ptr<const Source> source = m_side->source();
    if (!source) {
        m_containers->hide();
        m_findings->hide();
        if (!m_side->error().isEmpty())
            m_summary->setText(
                QStringLiteral("<span style='color:#c62828'>%1</span>").arg(m_side->error().toHtmlEscaped()));
        return;
    }
    const Source& s = *source;
    QString summary = tr("%1 · %2 entries · %3 parameters · %4")
                          .arg(QString::fromUtf8(formatId(s.format)))
                          .arg(s.entries.size())
                          .arg(QString::fromStdString(humanCount(s.totalParameters())),
                              QString::fromStdString(humanBytes(s.totalBytes())))
                          .toHtmlEscaped();
    // The load-safety verdict (model/source.h), coloured like the findings it sums up.
    if (s.weightsOnly.checked || !s.weightsOnly.executes.empty()) {
        const std::string_view verdict = s.weightsOnly.verdict();
        const char* colour = verdict == "executes" ? "#c62828" : verdict == "imports" ? "#b26a00" : "#2e7d32";
        summary += QStringLiteral(" · %1 <b style='color:%2'>%3</b>")
                       .arg(tr("load safety:"), QLatin1String(colour), QString::fromLatin1(verdict.data(), qsizetype(verdict.size())));
    }
    m_summary->setText(summary);
    for (const auto& c : s.containers) {
        const QString path = QString::fromStdString(c.path);
        m_containers->addItem(QStringLiteral("%1 (%2, %3 tensors)")
                                  .arg(path.isEmpty() ? tr("top level") : path,
                                      QString::fromLatin1(containerRoleName(c.role).data()))
                                  .arg(c.tensorCount),
            path);
        if (c.path == s.container)
            m_containers->setCurrentIndex(m_containers->count() - 1);
    }
    m_containers->setVisible(s.containers.size() > 1);
    for (const auto& f : s.findings) {
        QString text = QStringLiteral("[%1] ").arg(QString::fromLatin1(severityName(f.severity).data()));
        if (!f.entry.empty())
            text += QString::fromStdString(f.entry) + QStringLiteral(": ");
        m_findings->addItem(text + QString::fromStdString(f.message));
    }
    m_findings->setVisible(!s.findings.empty());
}

void SourcePane::dragEnterEvent(QDragEnterEvent* event)
{
    if (event->mimeData()->hasUrls())
        event->acceptProposedAction();
}

void SourcePane::dropEvent(QDropEvent* event)
{
    const QStringList paths = droppedPaths(event->mimeData());
    if (!paths.isEmpty()) {
        event->acceptProposedAction();
        emit filesDropped(paths);
    }
}

} // namespace sl::gui
