#include "source_pane.h"

#include "models/source_tree_model.h"
#include "formats/loader.h"
#include "report/source_report.h"
#include "util/error.h"

#include <QHeaderView>
#include <QLabel>
#include <QListWidget>
#include <QTreeView>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

namespace sl::gui {

SourcePane::SourcePane(const QString& role, QWidget* parent)
    : QWidget(parent)
    , m_role(role)
    , m_title(new QLabel(this))
    , m_summary(new QLabel(this))
    , m_view(new QTreeView(this))
    , m_findings(new QListWidget(this))
    , m_model(new SourceTreeModel(this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    m_title->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_title->setText(QStringLiteral("<b>%1</b>: %2").arg(m_role, tr("nothing opened")));
    m_summary->setWordWrap(true);
    layout->addWidget(m_title);
    layout->addWidget(m_summary);
    m_view->setModel(m_model);
    m_view->setUniformRowHeights(true); // keeps 100,000-row trees cheap to lay out
    m_view->setAlternatingRowColors(true);
    m_view->header()->setSectionResizeMode(SourceTreeModel::NameColumn, QHeaderView::Stretch);
    m_view->header()->setStretchLastSection(false);
    layout->addWidget(m_view, 1);
    m_findings->setMaximumHeight(110);
    m_findings->setWordWrap(true);
    layout->addWidget(m_findings);
    connect(&m_watcher, &QFutureWatcher<LoadResult>::finished, this, &SourcePane::finished);
}

void SourcePane::load(const QString& label, std::function<Source()> loadFn)
{
    m_title->setText(QStringLiteral("<b>%1</b>: %2").arg(m_role, label.toHtmlEscaped()));
    m_summary->setText(tr("Loading…"));
    m_findings->clear();
    m_watcher.setFuture(QtConcurrent::run([loadFn = std::move(loadFn)]() -> LoadResult {
        try {
            return { std::make_shared<const Source>(loadFn()), {} };
        } catch (const std::exception& e) {
            return { nullptr, QString::fromStdString(e.what()) };
        }
    }));
}

void SourcePane::loadPath(const QString& path)
{
    const std::string p = path.toStdString();
    load(path, [p] { return openSource(p); });
}

const Source* SourcePane::source() const { return m_model->source(); }

bool SourcePane::isLoading() const { return m_watcher.isRunning(); }

void SourcePane::finished()
{
    LoadResult r = m_watcher.result();
    if (!r.source) {
        m_summary->setText(QStringLiteral("<span style='color:#c62828'>%1</span>").arg(r.error.toHtmlEscaped()));
        m_model->setSource(nullptr);
        emit loaded();
        return;
    }
    const Source& s = *r.source;
    m_summary->setText(tr("%1 · container %2 · %3 entries · %4 parameters · %5")
                           .arg(QString::fromStdString(s.format),
                               s.container.empty() ? tr("(top level)") : QString::fromStdString(s.container))
                           .arg(s.entries.size())
                           .arg(QString::fromStdString(humanCount(s.totalParameters())),
                               QString::fromStdString(humanBytes(s.totalBytes()))));
    for (const auto& f : s.findings) {
        QString text = QStringLiteral("[%1] ").arg(QString::fromLatin1(severityName(f.severity).data()));
        if (!f.entry.empty())
            text += QString::fromStdString(f.entry) + QStringLiteral(": ");
        m_findings->addItem(text + QString::fromStdString(f.message));
    }
    m_findings->setVisible(!s.findings.empty());
    m_model->setSource(r.source);
    m_view->expandToDepth(0);
    m_view->resizeColumnToContents(SourceTreeModel::ShapeColumn);
    m_view->resizeColumnToContents(SourceTreeModel::DTypeColumn);
    m_view->resizeColumnToContents(SourceTreeModel::SizeColumn);
    emit loaded();
}

} // namespace sl::gui
