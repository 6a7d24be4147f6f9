#include "main_window.h"

#include "source_pane.h"
#include "embedded_files.h"
#include "formats/loader.h"

#include <QAction>
#include <QApplication>
#include <QFileDialog>
#include <QKeySequence>
#include <QMenuBar>
#include <QMessageBox>
#include <QSplitter>
#include <QStatusBar>

namespace sl::gui {

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent)
    , m_a(new SourcePane(tr("A · checkpoint")))
    , m_b(new SourcePane(tr("B · model")))
{
    setWindowTitle(tr("StateLens"));
    auto* split = new QSplitter(Qt::Horizontal, this);
    split->addWidget(m_a);
    split->addWidget(m_b);
    split->setChildrenCollapsible(false);
    setCentralWidget(split);

    QMenu* file = menuBar()->addMenu(tr("&File"));
    QAction* openA = file->addAction(tr("Open &Checkpoint (A)…"), this, [this] { chooseFile(m_a); });
    openA->setShortcut(QKeySequence::Open);
    file->addAction(tr("Open &Model (B)…"), this, [this] { chooseFile(m_b); })
        ->setShortcut(QKeySequence(tr("Ctrl+Shift+O")));
    file->addAction(tr("Open &Demo Pair"), this, &MainWindow::openDemo);
    file->addSeparator();
    file->addAction(tr("&Quit"), qApp, &QApplication::quit)->setShortcut(QKeySequence::Quit);
    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&About StateLens"), this, [this] {
        QMessageBox::about(this, tr("About StateLens"),
            tr("StateLens shows why a checkpoint will not load into a model.\n"
               "Headless: statelens --help"));
    });
    connect(m_a, &SourcePane::loaded, this, [this] { statusBar()->showMessage(tr("Checkpoint loaded"), 3000); });
    connect(m_b, &SourcePane::loaded, this, [this] { statusBar()->showMessage(tr("Model loaded"), 3000); });
    resize(1280, 800);
}

void MainWindow::openA(const QString& path) { m_a->loadPath(path); }
void MainWindow::openB(const QString& path) { m_b->loadPath(path); }

void MainWindow::openDemo()
{
    const auto& files = sl::demo::files();
    SourcePane* panes[] = { m_a, m_b };
    for (size_t i = 0; i < files.size() && i < 2; ++i) {
        const auto& f = files[i];
        const std::string name = "demo/" + std::string(f.name);
        panes[i]->load(QString::fromStdString(name) + tr(" (bundled demo)"), [name, bytes = f.bytes] {
            return openSourceFromMemory(name, std::vector<uint8_t>(bytes.begin(), bytes.end()));
        });
    }
}

void MainWindow::chooseFile(SourcePane* pane)
{
    QString path = QFileDialog::getOpenFileName(this, tr("Open checkpoint"), {},
        tr("Checkpoints (*.pt *.pth *.bin *.ckpt *.safetensors *.json *.tar);;All files (*)"));
    if (!path.isEmpty())
        pane->loadPath(path);
}

} // namespace sl::gui
