#include "main_window.h"

#include "embedded_files.h"
#include "formats/load_error_reader.h"
#include "formats/loader.h"
#include "formats/rank_sets.h"
#include "io/file_trust.h"
#include "models/aligned_tree_model.h"
#include "rules/rule_export.h"
#include "rules/rule_io.h"
#include "session/rule_document.h"
#include "suggest/pending_pairs.h"
#include "suggest/suggestions.h"
#include "util/atomic_file.h"
#include "views/details_panel.h"
#include "views/diff_view.h"
#include "views/fixed_checkpoint_dialog.h"
#include "views/rule_editor.h"
#include "views/source_pane.h"
#include "views/suggestions_panel.h"
#include "views/summary_bar.h"
#include "views/values_panel.h"

#include <QAction>
#include <QCheckBox>
#include <QApplication>
#include <QClipboard>
#include <QCloseEvent>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDateTime>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QInputDialog>
#include <QItemSelectionModel>
#include <QKeySequence>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QProgressDialog>
#include <QSplitter>
#include <QTimer>
#include <QToolButton>
#include <QScrollArea>
#include <QSettings>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QTreeView>
#include <QUndoStack>
#include <QVBoxLayout>

#include <algorithm>

namespace sl::gui {

namespace {

constexpr int kMaxRecent = 10;

// Unsaved rules are mirrored to a file per running window (recovery/unsaved-rules-PID.yaml). One whose
// process is gone was left by a crash and is offered at the next start.
QString recoveryDir()
{
    const QString dir = QStandardPaths::writableLocation(QStandardPaths::AppLocalDataLocation);
    return dir.isEmpty() ? QString() : dir + QStringLiteral("/recovery");
}

QString ownRecoveryPath()
{
    const QString dir = recoveryDir();
    return dir.isEmpty() ? QString() : dir + QStringLiteral("/unsaved-rules-%1.yaml").arg(QCoreApplication::applicationPid());
}

QString orphanedRecoveryFile()
{
    const QString dir = recoveryDir();
    if (dir.isEmpty())
        return {};
    QString newest;
    QDateTime newestTime;
    const auto files = QDir(dir).entryInfoList({ QStringLiteral("unsaved-rules-*.yaml") }, QDir::Files);
    for (const QFileInfo& f : files) {
        bool ok = false;
        const qint64 pid = f.completeBaseName().section(QLatin1Char('-'), 2).toLongLong(&ok);
        if (!ok || pid == QCoreApplication::applicationPid() || QFileInfo::exists(QStringLiteral("/proc/%1").arg(pid)))
            continue; // our own, or a window that is still open
        if (newest.isEmpty() || f.lastModified() > newestTime) {
            newest = f.absoluteFilePath();
            newestTime = f.lastModified();
        }
    }
    return newest;
}

} // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent)
    , m_rules(new RuleDocument(this))
    , m_comparison(new Comparison(m_rules, this))
    , m_model(new AlignedTreeModel(this))
    , m_sideA(new SideLoader(this))
    , m_sideB(new SideLoader(this))
    , m_paneA(new SourcePane(tr("A · checkpoint"), m_sideA))
    , m_paneB(new SourcePane(tr("B · model"), m_sideB))
    , m_view(new DiffView(m_model, m_paneA, m_paneB))
    , m_summary(new SummaryBar)
    , m_details(new DetailsPanel)
    , m_suggestions(new SuggestionsPanel)
    , m_editor(new RuleEditor(m_rules))
    , m_entryValues(new EntryValues(this))
    , m_pairValues(new PairValues(this))
    , m_valuesPanel(new ValuesPanel(m_entryValues))
    , m_writer(new CheckpointWriter(this))
{
    setWindowIcon(QIcon(QStringLiteral(":/statelens/statelens.png")));
    setObjectName(QStringLiteral("MainWindow"));
    auto* central = new QWidget(this);
    auto* layout = new QVBoxLayout(central);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(0);
    layout->addWidget(m_summary);
    layout->addWidget(m_view, 1);
    setCentralWidget(central);

    auto dock = [this](QWidget* w, const QString& title, const QString& name, Qt::DockWidgetArea area) {
        auto* d = new QDockWidget(title, this);
        d->setObjectName(name); // saveState needs names
        d->setWidget(w);
        addDockWidget(area, d);
        return d;
    };
    // Details: what the core knows about the row, and beside it the values (read when a row is selected).
    auto* detailsSplit = new QSplitter(Qt::Horizontal);
    detailsSplit->addWidget(m_details);
    // In a scroll area: the histogram and heat maps would otherwise set the dock's least height, and on a
    // 720-pixel screen take the trees' room.
    auto* valuesScroll = new QScrollArea;
    valuesScroll->setWidget(m_valuesPanel);
    valuesScroll->setWidgetResizable(true);
    valuesScroll->setFrameShape(QFrame::NoFrame);
    detailsSplit->addWidget(valuesScroll);
    detailsSplit->setStretchFactor(0, 3);
    detailsSplit->setStretchFactor(1, 2);
    QDockWidget* detailsDock = dock(detailsSplit, tr("Details"), QStringLiteral("details"), Qt::BottomDockWidgetArea);
    QDockWidget* rulesDock = dock(m_editor, tr("Rules"), QStringLiteral("rules"), Qt::BottomDockWidgetArea);
    QDockWidget* suggestionsDock = dock(m_suggestions, tr("Suggestions"), QStringLiteral("suggestions"), Qt::RightDockWidgetArea);
    tabifyDockWidget(detailsDock, rulesDock);
    detailsDock->raise();
    // The trees get most of the window; the docks start small.
    resizeDocks({ detailsDock }, { 260 }, Qt::Vertical);
    resizeDocks({ suggestionsDock }, { 340 }, Qt::Horizontal);

    buildMenus();

    // Sources -> comparison -> views.
    for (Side side : { Side::A, Side::B }) {
        SideLoader* l = loader(side);
        connect(l, &SideLoader::sourceChanged, this, [this, side](std::shared_ptr<const Source> s) {
            m_comparison->setSource(side, std::move(s));
            if (side == Side::A)
                m_editor->setPreviewKeys(m_comparison->source(Side::A));
            updateTitle();
        });
        connect(pane(side), &SourcePane::filesDropped, this, [this, side](const QStringList& paths) { open(side, paths); });
        connect(l, &SideLoader::loadingChanged, this, &MainWindow::checkIdle);
    }
    connect(m_view, &DiffView::filesDropped, this,
        [this](bool a, const QStringList& paths) { open(a ? Side::A : Side::B, paths); });
    connect(m_view, &DiffView::contextMenuRequested, this, &MainWindow::showContextMenu);
    connect(m_comparison, &Comparison::snapshotChanged, this, &MainWindow::snapshotChanged);
    connect(m_pairValues, &PairValues::compared, this, &MainWindow::valuesCompared);
    connect(m_pairValues, &PairValues::failed, this, [this] {
        endCompareValues();
        statusBar()->showMessage(tr("The values could not be compared."), 5000);
        checkIdle();
    });
    connect(m_pairValues, &PairValues::cancelled, this, [this] {
        endCompareValues();
        statusBar()->showMessage(tr("Comparing values cancelled."), 5000);
        checkIdle();
    });
    connect(m_comparison, &Comparison::suggestionsChanged, this, [this] {
        m_suggestions->setSuggestions(m_comparison->suggestions(), m_comparison->suggestionsCurrent());
    });
    connect(m_comparison, &Comparison::busyChanged, this, [this](bool busy) {
        if (busy)
            m_suggestions->setSuggestions({}, false);
        checkIdle();
    });
    connect(m_suggestions, &SuggestionsPanel::applyRequested, this, &MainWindow::applySuggestion);
    connect(m_suggestions, &SuggestionsPanel::applyAllRequested, this, &MainWindow::applyAllSuggestions);
    connect(m_details, &DetailsPanel::acceptRequested, this, &MainWindow::acceptPending);
    connect(m_summary, &SummaryBar::filterChanged, this, &MainWindow::applyFilter);
    connect(m_summary, &SummaryBar::foldingChanged, m_model, &AlignedTreeModel::setFolding);
    connect(m_view->viewA()->selectionModel(), &QItemSelectionModel::currentChanged, this, &MainWindow::updateDetails);
    connect(m_rules, &RuleDocument::modifiedChanged, this, &MainWindow::updateTitle);
    connect(m_rules, &RuleDocument::pathChanged, this, &MainWindow::updateTitle);

    if (!recoveryDir().isEmpty()) {
        QDir().mkpath(recoveryDir());
        m_pendingRecoveryFile = orphanedRecoveryFile();
        m_pendingRecovery = RuleDocument::readRecovery(m_pendingRecoveryFile);
        if (!m_pendingRecovery && !m_pendingRecoveryFile.isEmpty())
            QFile::remove(m_pendingRecoveryFile); // empty or unreadable: nothing to offer
        m_rules->setRecoveryFile(ownRecoveryPath());
    }

    statusBar()->showMessage(tr("Open a checkpoint (Ctrl+O) and a model (Ctrl+Shift+O), or drop files on either side."));
    QSettings settings;
    resize(1400, 900);
    restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
    m_layoutRestored = restoreState(settings.value(QStringLiteral("window/state")).toByteArray());
    updateTitle();
}

void MainWindow::showEvent(QShowEvent* event)
{
    QMainWindow::showEvent(event);
    if (m_shownOnce || m_layoutRestored)
        return;
    m_shownOnce = true;
    // The trees get most of the height whatever the screen: the bottom docks start at a quarter of it.
    if (auto* details = findChild<QDockWidget*>(QStringLiteral("details")))
        resizeDocks({ details }, { std::max(160, height() / 4) }, Qt::Vertical);
}

MainWindow::~MainWindow()
{
    m_rules->discardRecovery(); // an orderly end; only a crash leaves the file behind
}

void MainWindow::buildMenus()
{
    QMenu* file = menuBar()->addMenu(tr("&File"));
    file->addAction(tr("Open &Checkpoint (A)…"), QKeySequence::Open, this, [this] { chooseFile(Side::A, false); });
    file->addAction(tr("Open &Model (B)…"), QKeySequence(tr("Ctrl+Shift+O")), this, [this] { chooseFile(Side::B, false); });
    file->addAction(tr("Open Checkpoint &Folder (A)…"), this, [this] { chooseFile(Side::A, true); });
    file->addAction(tr("Open Model F&older (B)…"), this, [this] { chooseFile(Side::B, true); });
    file->addAction(tr("Open Rank &Files as Checkpoint (A)…"), this, [this] { chooseRankFiles(Side::A); });
    file->addAction(tr("Open Rank F&iles as Model (B)…"), this, [this] { chooseRankFiles(Side::B); });
    m_recentMenu = file->addMenu(tr("Open &Recent"));
    rebuildRecentMenu();
    file->addAction(tr("&Paste load_state_dict Error as Model…"), QKeySequence(tr("Ctrl+Shift+V")), this, &MainWindow::pasteLoadError);
    file->addAction(tr("Open &Demo Pair"), this, &MainWindow::openDemo);
    file->addSeparator();
    file->addAction(tr("Open &Rules…"), this, [this] {
        if (!maybeSaveRules())
            return;
        const QString path = QFileDialog::getOpenFileName(this, tr("Open rules"), {},
            tr("Rule files (*.yaml *.yml *.json *.csv *.py *.txt);;All files (*)"));
        QString error;
        if (!path.isEmpty() && !loadRules(path, &error))
            QMessageBox::warning(this, tr("Open rules"), error);
    });
    file->addAction(tr("&Save Rules"), QKeySequence::Save, this, [this] {
        QString path = m_rules->path();
        if (path.isEmpty() || !(path.endsWith(QStringLiteral(".yaml")) || path.endsWith(QStringLiteral(".yml")) || path.endsWith(QStringLiteral(".json"))))
            path = QFileDialog::getSaveFileName(this, tr("Save rules"), QStringLiteral("rules.yaml"), tr("Rule files (*.yaml *.json)"));
        QString error;
        if (!path.isEmpty() && !saveRules(path, &error))
            QMessageBox::warning(this, tr("Save rules"), error);
    });
    file->addAction(tr("Save Rules &As…"), QKeySequence::SaveAs, this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, tr("Save rules"), QStringLiteral("rules.yaml"), tr("Rule files (*.yaml *.json)"));
        QString error;
        if (!path.isEmpty() && !saveRules(path, &error))
            QMessageBox::warning(this, tr("Save rules"), error);
    });
    file->addSeparator();
    file->addAction(tr("Save &Fixed Checkpoint As…"), QKeySequence(tr("Ctrl+Shift+E")), this, &MainWindow::saveFixedCheckpoint);
    file->addSeparator();
    QMenu* exportRules = file->addMenu(tr("&Export Rules"));
    const std::pair<QString, RuleExportFormat> ruleFormats[] = {
        { tr("Python (remap_state_dict)…"), RuleExportFormat::Python },
        { tr("Hugging Face key_mapping (JSON)…"), RuleExportFormat::HfKeyMapping },
        { tr("torchtitan template map…"), RuleExportFormat::Torchtitan },
        { tr("YAML…"), RuleExportFormat::Yaml },
        { tr("JSON…"), RuleExportFormat::Json },
        { tr("CSV of old,new names for A…"), RuleExportFormat::Csv },
    };
    for (const auto& [label, format] : ruleFormats) {
        const RuleExportFormat f = format;
        exportRules->addAction(label, this, [this, f] { chooseExportRules(f); });
    }
    QMenu* exportReport = file->addMenu(tr("Export Diff &Report"));
    for (DiffReportFormat f : { DiffReportFormat::Html, DiffReportFormat::Markdown, DiffReportFormat::Json,
             DiffReportFormat::Csv, DiffReportFormat::Junit, DiffReportFormat::Text })
        exportReport->addAction(QString::fromLatin1(diffReportFormatName(f).data()) + QStringLiteral("…"), this, [this, f] { chooseExportReport(f); });
    file->addSeparator();
    file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

    QMenu* edit = menuBar()->addMenu(tr("&Edit"));
    QAction* undo = m_rules->undoStack()->createUndoAction(this, tr("&Undo"));
    undo->setShortcut(QKeySequence::Undo);
    QAction* redo = m_rules->undoStack()->createRedoAction(this, tr("&Redo"));
    redo->setShortcut(QKeySequence::Redo);
    edit->addAction(undo);
    edit->addAction(redo);
    edit->addSeparator();
    edit->addAction(tr("&Copy Name"), QKeySequence::Copy, this, [this] { copySelection(false); });
    edit->addAction(tr("Copy &Row"), QKeySequence(tr("Ctrl+Shift+C")), this, [this] { copySelection(true); });
    edit->addAction(tr("&Find…"), QKeySequence::Find, this, [this] {
        m_summary->filterEdit()->setFocus();
        m_summary->filterEdit()->selectAll();
    });

    QMenu* view = menuBar()->addMenu(tr("&View"));
    view->addAction(tr("&Next Difference"), QKeySequence(Qt::Key_F3), this, [this] { gotoDifference(true); });
    view->addAction(tr("&Previous Difference"), QKeySequence(Qt::SHIFT | Qt::Key_F3), this, [this] { gotoDifference(false); });
    QAction* fold = view->addAction(tr("&Fold Layers"));
    fold->setCheckable(true);
    fold->setChecked(true);
    connect(fold, &QAction::toggled, m_summary->foldToggle(), &QAbstractButton::setChecked);
    connect(m_summary->foldToggle(), &QAbstractButton::toggled, fold, &QAction::setChecked);
    QAction* hide = view->addAction(tr("&Hide Matches"), QKeySequence(tr("Ctrl+H")));
    hide->setCheckable(true);
    connect(hide, &QAction::toggled, m_summary->hideMatchesToggle(), &QAbstractButton::setChecked);
    connect(m_summary->hideMatchesToggle(), &QAbstractButton::toggled, hide, &QAction::setChecked);
    view->addSeparator();
    for (QDockWidget* d : findChildren<QDockWidget*>())
        view->addAction(d->toggleViewAction());

    QMenu* valuesMenu = menuBar()->addMenu(tr("Val&ues"));
    valuesMenu->addAction(tr("&Compare Values of All Pairs"), QKeySequence(tr("Ctrl+Shift+K")), this, &MainWindow::compareValues);
    valuesMenu->addAction(tr("C&ancel Comparing"), this, &MainWindow::cancelCompareValues);

    QMenu* rules = menuBar()->addMenu(tr("&Rules"));
    rules->addAction(tr("&Apply First Suggestion"), QKeySequence(tr("Ctrl+Return")), this, [this] { applySuggestion(0); });
    rules->addAction(tr("Apply A&ll Suggestions"), QKeySequence(tr("Ctrl+Shift+Return")), this, &MainWindow::applyAllSuggestions);
    rules->addAction(tr("&Make Rule from Selected Pair…"), QKeySequence(tr("Ctrl+R")), this, [this] {
        QString why;
        if (auto s = inferFromSelection(&why))
            confirmAndAdd(*s);
        else
            QMessageBox::information(this, tr("Make rule from pair"), why);
    });
    rules->addAction(tr("&New Rule Set"), this, [this] {
        if (maybeSaveRules())
            m_rules->reset();
    });

    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&Legend"), this, [this] {
        QMessageBox box(this);
        box.setWindowTitle(tr("Legend"));
        box.setTextFormat(Qt::RichText);
        box.setText(SummaryBar::legendHtml(palette()));
        box.exec();
    });
    help->addAction(tr("&About StateLens"), this, [this] {
        QMessageBox::about(this, tr("About StateLens"),
            tr("StateLens shows why a checkpoint will not load into a model, and turns the differences into "
               "rename rules.\nHeadless: statelens --help"));
    });
}

// --- opening ---------------------------------------------------------------------------------------------

void MainWindow::open(Side side, const QString& path)
{
    open(side, QStringList { path });
}

void MainWindow::open(Side side, const QStringList& paths)
{
    if (paths.isEmpty())
        return;
    loader(side)->loadPaths(paths);
    rememberRecent(paths);
}

void MainWindow::openA(const QString& path) { open(Side::A, path); }
void MainWindow::openB(const QString& path) { open(Side::B, path); }

void MainWindow::openDemo()
{
    // Written to a folder of this window first, so the demo's values can be read like any file's.
    if (!m_demoDir)
        m_demoDir = std::make_unique<QTemporaryDir>();
    const auto& files = sl::demo::files();
    for (size_t i = 0; i < files.size() && i < 2; ++i) {
        const auto& f = files[i];
        const std::string name = "demo/" + std::string(f.name);
        const std::string path = m_demoDir->isValid() ? m_demoDir->filePath(QString::fromUtf8(f.name.data(), static_cast<qsizetype>(f.name.size()))).toStdString() : std::string();
        loader(i == 0 ? Side::A : Side::B)->load(QString::fromStdString(name) + tr(" (bundled demo)"), [name, path, bytes = f.bytes](const OpenOptions& o) {
            try {
                if (!path.empty()) {
                    writeFileAtomically(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
                    return openSource(path, o);
                }
            } catch (const std::exception&) {
                // an unwritable temp folder: the demo still opens, from memory
            }
            return openSourceFromMemory(name, std::vector<uint8_t>(bytes.begin(), bytes.end()), o);
        });
    }
}

void MainWindow::openLoadErrorText(const QString& text)
{
    const std::string t = text.toStdString();
    m_sideB->load(tr("pasted load_state_dict error"), [t](const OpenOptions& o) { return parseLoadErrorText("pasted error", t, o); });
}

void MainWindow::chooseFile(Side side, bool folder)
{
    const QString title = side == Side::A ? tr("Open checkpoint (A)") : tr("Open model (B)");
    const QString path = folder
        ? QFileDialog::getExistingDirectory(this, title)
        : QFileDialog::getOpenFileName(this, title, {},
            tr("Checkpoints and models (*.pt *.pth *.bin *.ckpt *.safetensors *.json *.tar *.distcp *.txt *.log);;All files (*)"));
    if (!path.isEmpty())
        open(side, path);
}

// The rank files of one save (model_rank0.pt, model_rank1.pt, ...) picked together, as one source.
void MainWindow::chooseRankFiles(Side side)
{
    const QString title
        = side == Side::A ? tr("Open rank files as the checkpoint (A)") : tr("Open rank files as the model (B)");
    const QStringList paths = QFileDialog::getOpenFileNames(
        this, title, {}, tr("torch.save files (*.pt *.pth *.bin *.ckpt *.tar);;All files (*)"));
    if (!paths.isEmpty())
        open(side, paths);
}

void MainWindow::pasteLoadError()
{
    QDialog dialog(this);
    dialog.setWindowTitle(tr("Paste load_state_dict error"));
    auto* layout = new QVBoxLayout(&dialog);
    layout->addWidget(new QLabel(tr("The RuntimeError text from load_state_dict (Missing key(s)… Unexpected key(s)… size mismatch…). "
                                    "Its keys become the model side."),
        &dialog));
    auto* text = new QPlainTextEdit(&dialog);
    text->setPlainText(QApplication::clipboard()->text());
    layout->addWidget(text, 1);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dialog);
    connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
    layout->addWidget(buttons);
    dialog.resize(700, 400);
    if (dialog.exec() == QDialog::Accepted && !text->toPlainText().trimmed().isEmpty())
        openLoadErrorText(text->toPlainText());
}

// A recent entry is one path, or the files of a per-rank set joined by newlines (no file name holds one here).
void MainWindow::rememberRecent(const QStringList& paths)
{
    QSettings settings;
    QStringList recent = settings.value(QStringLiteral("recentFiles")).toStringList();
    QStringList absolute;
    for (const QString& p : paths)
        absolute << QFileInfo(p).absoluteFilePath();
    const QString entry = absolute.join(QLatin1Char('\n'));
    recent.removeAll(entry);
    recent.prepend(entry);
    while (recent.size() > kMaxRecent)
        recent.removeLast();
    settings.setValue(QStringLiteral("recentFiles"), recent);
    rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu()
{
    if (!m_recentMenu)
        return;
    m_recentMenu->clear();
    const QStringList recent = QSettings().value(QStringLiteral("recentFiles")).toStringList();
    for (const QString& entry : recent) {
        const QStringList paths = entry.split(QLatin1Char('\n'), Qt::SkipEmptyParts);
        std::vector<std::string> p;
        for (const QString& path : paths)
            p.push_back(path.toStdString());
        QMenu* m = m_recentMenu->addMenu(QFileInfo(QString::fromStdString(describePaths(p))).fileName());
        m->setToolTip(paths.join(QLatin1Char('\n')));
        m->addAction(tr("as Checkpoint (A)"), this, [this, paths] { open(Side::A, paths); });
        m->addAction(tr("as Model (B)"), this, [this, paths] { open(Side::B, paths); });
    }
    m_recentMenu->setEnabled(!recent.isEmpty());
}

// --- showing the diff ------------------------------------------------------------------------------------

void MainWindow::snapshotChanged()
{
    auto snap = m_comparison->snapshot();
    const QString current = m_model->path(m_view->currentIndex());
    const auto currentRows = m_model->diffRows(m_view->currentIndex());
    const bool sameDiff = m_model->snapshot() && m_model->snapshot()->generation == snap->generation;
    m_model->setSnapshot(snap); // the view keeps what was expanded
    if (!m_expandedOnce && snap->complete()) {
        m_view->expandDefault();
        m_expandedOnce = true;
    }
    // The pairs arrive with the suggestions, in a tree of another shape: lead the eye to them once.
    if (!m_expandedPairs && !snap->suggestions.empty()) {
        m_view->expandDefault();
        m_expandedPairs = true;
    }
    if (!current.isEmpty()) {
        QModelIndex again = m_model->findPath(current);
        // The same diff with its pairs marked: the row moved to its partner's line.
        if (!again.isValid() && sameDiff && currentRows.size() == 1)
            again = m_model->findRow(currentRows.front());
        m_view->select(again);
    }
    QStringList executes;
    if (!snap->a->weightsOnly.executes.empty())
        executes << QStringLiteral("A");
    if (!snap->b->weightsOnly.executes.empty())
        executes << QStringLiteral("B");
    m_summary->setSummary(snap->diff.summary, snap->complete(), executes);
    m_editor->setHits(snap->diff.ruleHits);
    m_editor->setIssues(snap->issues);
    updateDetails();
    if (snap->complete())
        statusBar()->showMessage(tr("%1 vs %2 entries, %3 rule(s): compared in %4 ms")
                                     .arg(snap->a->entries.size())
                                     .arg(snap->b->entries.size())
                                     .arg(snap->rules.rules.size())
                                     .arg(snap->milliseconds, 0, 'f', 0));
    checkIdle();
}

void MainWindow::applyFilter()
{
    if (!m_model->setFilter(m_summary->filter())) {
        m_summary->setFilterError(m_model->filterError());
        return;
    }
    m_summary->setFilterError({});
    // A narrow filter shows its hits opened up.
    if (!m_model->filter().text.isEmpty() && m_model->leafCount() <= 500) {
        m_view->viewA()->expandAll();
        m_view->viewB()->expandAll();
    }
}

void MainWindow::updateDetails()
{
    const QModelIndex index = m_view->currentIndex();
    m_details->showIndex(m_model, index);
    // The values of what is selected: a part, or the (first) row's two entries.
    auto snap = m_model->snapshot();
    const Entry* a = nullptr;
    const Entry* b = nullptr;
    if (const Entry* part = m_model->partEntry(index)) {
        (m_model->kind(index) == AlignedTreeModel::NodeKind::PartA ? a : b) = part;
    } else if (const auto rows = m_model->diffRows(index); !rows.empty() && snap) {
        // A pair's line: each side's row (the head, or the row shown with it).
        const DiffRow& rowA = snap->diff.rows[snap->lines.rowA(snap->diff, rows.front())];
        const DiffRow& rowB = snap->diff.rows[snap->lines.rowB(snap->diff, rows.front())];
        // One key of a quantized group: its values are the group's (the key alone is codes or scales).
        a = rowA.a.valid() ? &snap->a->entries[rowA.a.get()] : nullptr;
        b = rowB.b.valid() ? &snap->b->entries[rowB.b.get()] : nullptr;
    }
    m_entryValues->select({ snap, a, b });
}

void MainWindow::compareValues()
{
    if (!m_pairValues->start(m_comparison->snapshot()))
        return;
    if (!m_valuesProgress) {
        m_valuesProgress = new QProgressBar(this);
        m_valuesProgress->setMaximumWidth(160);
        m_valuesProgress->setRange(0, 1000);
        m_valuesCancel = new QToolButton(this);
        m_valuesCancel->setText(tr("Cancel"));
        connect(m_valuesCancel, &QToolButton::clicked, this, &MainWindow::cancelCompareValues);
        statusBar()->addPermanentWidget(m_valuesProgress);
        statusBar()->addPermanentWidget(m_valuesCancel);
        m_valuesPoll = new QTimer(this);
        connect(m_valuesPoll, &QTimer::timeout, this, [this] {
            const double f = m_pairValues->progress();
            m_valuesProgress->setValue(f < 0 ? 0 : static_cast<int>(f * 1000));
        });
    }
    m_valuesProgress->setValue(0);
    m_valuesProgress->show();
    m_valuesCancel->show();
    m_valuesPoll->start(100);
}

void MainWindow::valuesCompared(const std::shared_ptr<const DiffSnapshot>& snap, const PairValues::PerRow& perRow)
{
    endCompareValues();
    if (snap == m_model->snapshot()) { // a newer diff has other rows: then this result is dropped
        m_model->setValueComparisons(perRow);
        m_view->viewA()->viewport()->update();
        m_view->viewB()->viewport()->update();
        size_t same = 0, compared = 0;
        for (const auto& c : *perRow)
            if (c.compared) {
                ++compared;
                same += c.equalBytes ? 1 : 0;
            }
        statusBar()->showMessage(tr("Values compared: %1 pair(s), %2 with the same bytes, %3 differ.").arg(compared).arg(same).arg(compared - same));
    }
    checkIdle();
}

void MainWindow::cancelCompareValues()
{
    m_pairValues->cancel();
}

void MainWindow::endCompareValues()
{
    m_valuesPoll->stop();
    m_valuesProgress->hide();
    m_valuesCancel->hide();
}

void MainWindow::updateTitle()
{
    auto name = [](SideLoader* l) { return l->source() ? QFileInfo(l->label()).fileName() : QStringLiteral("—"); };
    QString title = QStringLiteral("%1 → %2").arg(name(m_sideA), name(m_sideB));
    const QString rules = m_rules->path().isEmpty() ? tr("unsaved rules") : QFileInfo(m_rules->path()).fileName();
    title += QStringLiteral(" · %1[*] — StateLens").arg(rules);
    setWindowTitle(title);
    setWindowModified(m_rules->isModified());
}

void MainWindow::gotoDifference(bool forward)
{
    const QModelIndex next = m_model->nextDifference(m_view->currentIndex(), forward);
    if (next.isValid())
        m_view->select(next);
    else
        statusBar()->showMessage(tr("No differences shown."), 3000);
}

void MainWindow::copySelection(bool wholeRow)
{
    QStringList lines;
    const auto rows = m_view->viewA()->selectionModel()->selectedRows(AlignedTreeModel::NameA);
    for (const QModelIndex& i : rows) {
        if (!wholeRow) {
            lines << i.data(AlignedTreeModel::CopyTextRole).toString();
            continue;
        }
        QStringList cells;
        for (int c = 0; c < AlignedTreeModel::ColumnCount; ++c)
            cells << i.siblingAtColumn(c).data().toString();
        lines << cells.join(QLatin1Char('\t'));
    }
    QApplication::clipboard()->setText(lines.join(QLatin1Char('\n')));
}

void MainWindow::showContextMenu(const QModelIndex& index, const QPoint& pos)
{
    QMenu menu(this);
    menu.addAction(tr("Copy Name"), this, [this] { copySelection(false); });
    menu.addAction(tr("Copy Row"), this, [this] { copySelection(true); });
    const auto rows = m_model->diffRows(index);
    if (const int suggestion = index.data(AlignedTreeModel::SuggestionRole).toInt(); suggestion >= 0 && !rows.empty()) {
        // Accepting a pending row takes the suggestion(s) that resolve it (a folded row: its first row's).
        menu.addAction(tr("Accept Suggestion %1").arg(suggestion + 1), this, [this, row = rows.front()] { acceptPending(row); });
        menu.addSeparator();
    }
    if (rows.size() == 1 && !index.data(AlignedTreeModel::PairRole).toBool()) {
        const RowStatus s = m_model->snapshot()->diff.rows[rows[0]].status;
        if (s == RowStatus::Unexpected)
            menu.addAction(tr("Pair with a Missing Row…"), this, [this, index] { pickPartner(index); });
        else if (s == RowStatus::Missing)
            menu.addAction(tr("Pair with an Unexpected Row…"), this, [this, index] { pickPartner(index); });
    }
    QString why;
    if (inferFromSelection(&why))
        menu.addAction(tr("Make Rule from This Pair…"), this, [this] {
            if (auto s = inferFromSelection())
                confirmAndAdd(*s);
        });
    menu.exec(pos);
}

void MainWindow::pickPartner(const QModelIndex& index)
{
    auto snap = m_model->snapshot();
    const auto rows = m_model->diffRows(index);
    if (rows.size() != 1)
        return;
    const DiffRow& row = snap->diff.rows[rows[0]];
    const bool fromUnexpected = row.status == RowStatus::Unexpected;
    const std::string selfName = rowName(row, *snap->a, *snap->b);
    const QString self = QString::fromStdString(selfName);
    std::vector<std::string> names;
    for (const DiffRow& r : snap->diff.rows)
        if (r.status == (fromUnexpected ? RowStatus::Missing : RowStatus::Unexpected))
            names.push_back(rowName(r, *snap->a, *snap->b));
    if (names.empty()) {
        QMessageBox::information(this, tr("Pair"), tr("There is no %1 row to pair with.").arg(fromUnexpected ? tr("missing") : tr("unexpected")));
        return;
    }
    // Ranked as the suggester scores a pair (suggest/suggestions.h), the first 500 offered.
    const std::vector<size_t> ranked = rankPartners(selfName, std::vector<std::string_view>(names.begin(), names.end()));
    QStringList candidates;
    for (size_t k = 0; k < ranked.size() && k < 500; ++k)
        candidates << QString::fromStdString(names[ranked[k]]);
    bool ok = false;
    const QString partner = QInputDialog::getItem(this, tr("Pair %1 with").arg(self), tr("The most similar names first:"), candidates, 0, false, &ok);
    if (!ok)
        return;
    auto s = fromUnexpected ? inferFromPair(self, partner) : inferFromPair(partner, self);
    if (!s) {
        QMessageBox::information(this, tr("Make rule from pair"), tr("These two names cannot be related by one rule."));
        return;
    }
    confirmAndAdd(*s);
}

// --- rules -----------------------------------------------------------------------------------------------

void MainWindow::applySuggestion(int index)
{
    const auto& list = m_comparison->suggestions();
    if (index < 0 || static_cast<size_t>(index) >= list.size())
        return;
    applySuggestions({ static_cast<size_t>(index) }, tr("Apply suggestion: %1").arg(QString::fromStdString(list[static_cast<size_t>(index)].title)));
}

void MainWindow::applySuggestions(const std::vector<size_t>& indices, const QString& description)
{
    const auto& list = m_comparison->suggestions();
    if (indices.empty() || !m_comparison->suggestionsCurrent())
        return;
    std::vector<Rule> rules;
    for (size_t index : indices) {
        if (index >= list.size())
            return;
        for (Rule r : list[index].rules) {
            if (r.note.empty())
                r.note = list[index].title;
            rules.push_back(std::move(r));
        }
    }
    m_rules->appendRules(rules, description);
    statusBar()->showMessage(tr("Applied: %1").arg(description), 5000);
}

void MainWindow::applyAllSuggestions()
{
    const auto& list = m_comparison->suggestions();
    std::vector<size_t> all(list.size());
    for (size_t i = 0; i < all.size(); ++i)
        all[i] = i;
    applySuggestions(all, tr("Apply all %n suggestion(s)", nullptr, static_cast<int>(all.size())));
}

void MainWindow::acceptPending(size_t diffRow)
{
    auto snap = m_model->snapshot();
    if (!snap || diffRow >= snap->diff.rows.size() || snap->suggestions.empty())
        return;
    // The key may need earlier suggestions too (a prefix added, then a module renamed): the whole chain.
    const auto chain = suggestionChain(snap->diff, diffRow, snap->rules.mode, snap->suggestions);
    if (chain.empty())
        return;
    QStringList numbers;
    for (size_t i : chain)
        numbers << QString::number(i + 1);
    applySuggestions(chain, tr("Accept suggestion %1").arg(numbers.join(QStringLiteral(" + "))));
}

std::optional<Suggestion> MainWindow::inferFromPair(const QString& unexpectedMappedName, const QString& missingName) const
{
    auto snap = m_comparison->snapshot();
    if (!snap->complete())
        return std::nullopt;
    try {
        return inferRule(
            unexpectedMappedName.toStdString(), missingName.toStdString(), *snap->a, *snap->b, snap->rules);
    } catch (const RuleMatchError&) {
        return std::nullopt; // a rule reached a match limit on some key: nothing can be inferred on a guess
    }
}

std::optional<Suggestion> MainWindow::inferFromSelection(QString* why) const
{
    auto snap = m_model->snapshot();
    const DiffRow* unexpected = nullptr;
    const DiffRow* missing = nullptr;
    if (snap) {
        for (const QModelIndex& i : m_view->viewA()->selectionModel()->selectedRows(AlignedTreeModel::NameA)) {
            const auto rows = m_model->diffRows(i);
            if (rows.size() != 1)
                continue;
            const DiffRow& r = snap->diff.rows[rows[0]];
            if (const RowIndex partner = pairedRow(snap->diff, rows[0]); partner.valid()) {
                // One line holds a pair already: its two rows.
                missing = &r;
                unexpected = &snap->diff.rows[partner.get()];
            } else if (r.status == RowStatus::Unexpected) {
                unexpected = &r;
            } else if (r.status == RowStatus::Missing) {
                missing = &r;
            }
        }
    }
    if (!unexpected || !missing) {
        if (why)
            *why = tr("Select a pair, or one unexpected row and one missing row (Ctrl+click), or right-click a row and pick its partner.");
        return std::nullopt;
    }
    auto s = inferFromPair(QString::fromStdString(unexpected->mapped), QString::fromStdString(rowKeyB(*missing, *snap->b)));
    if (!s && why)
        *why = tr("These two names cannot be related by one rule.");
    return s;
}

void MainWindow::confirmAndAdd(const Suggestion& s)
{
    QString rules;
    for (const Rule& r : s.rules)
        rules += QStringLiteral("<br/><code>%1</code> → <code>%2</code>")
                     .arg(QString::fromStdString(r.pattern).toHtmlEscaped(), QString::fromStdString(r.replacement).toHtmlEscaped());
    QString text = QStringLiteral("<p>%1</p><p>%2</p>").arg(QString::fromStdString(s.title).toHtmlEscaped(), rules);
    if (s.collisions)
        text += QStringLiteral("<p><b>%1</b></p>").arg(tr("It maps %n key(s) onto names already taken.", nullptr, static_cast<int>(s.collisions)));
    if (QMessageBox::question(this, tr("Add rule?"), text, QMessageBox::Yes | QMessageBox::No, QMessageBox::Yes) == QMessageBox::Yes)
        addInferredRule(s);
}

void MainWindow::addInferredRule(const Suggestion& s)
{
    std::vector<Rule> rules = s.rules;
    for (Rule& r : rules)
        if (r.note.empty())
            r.note = s.title;
    m_rules->appendRules(rules, tr("Rule from pair"));
}

bool MainWindow::loadRules(const QString& path, QString* error) { return m_rules->load(path, error); }

bool MainWindow::saveRules(const QString& path, QString* error)
{
    const bool ok = m_rules->save(path, error);
    if (ok)
        statusBar()->showMessage(tr("Saved %1").arg(path), 5000);
    return ok;
}

bool MainWindow::maybeSaveRules()
{
    if (!m_rules->isModified() || m_rules->rules().rules.empty())
        return true;
    const auto answer = QMessageBox::question(this, tr("Unsaved rules"),
        tr("The rule set has unsaved changes. Save them?"), QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel, QMessageBox::Save);
    if (answer == QMessageBox::Cancel)
        return false;
    if (answer == QMessageBox::Discard)
        return true;
    QString path = m_rules->path();
    if (path.isEmpty())
        path = QFileDialog::getSaveFileName(this, tr("Save rules"), QStringLiteral("rules.yaml"), tr("Rule files (*.yaml *.json)"));
    if (path.isEmpty())
        return false;
    QString error;
    if (!saveRules(path, &error)) {
        QMessageBox::warning(this, tr("Save rules"), error);
        return false;
    }
    return true;
}

void MainWindow::restorePendingRecovery()
{
    if (!m_pendingRecovery)
        return;
    RuleSet recovered = std::move(*m_pendingRecovery);
    m_pendingRecovery.reset();
    m_rules->restore(std::move(recovered)); // now mirrored to this window's own recovery file
    QFile::remove(m_pendingRecoveryFile);
}

void MainWindow::offerRecovery()
{
    if (!m_pendingRecovery)
        return;
    const auto answer = QMessageBox::question(this, tr("Recover rules"),
        tr("StateLens closed without saving a rule set of %n rule(s). Recover it?", nullptr, static_cast<int>(m_pendingRecovery->rules.size())),
        QMessageBox::Yes | QMessageBox::No, QMessageBox::Yes);
    if (answer == QMessageBox::Yes) {
        restorePendingRecovery();
    } else {
        m_pendingRecovery.reset();
        QFile::remove(m_pendingRecoveryFile);
    }
}

// --- exports ---------------------------------------------------------------------------------------------

bool MainWindow::exportRules(RuleExportFormat format, const QString& path, QString* error, QStringList* problems)
{
    const RuleSet& rules = m_rules->rules();
    auto a = m_comparison->source(Side::A);
    std::vector<std::string> keys;
    if (a) {
        keys.reserve(a->entries.size());
        for (const Entry& e : a->entries)
            keys.push_back(e.name);
    }
    if (ruleExportNeedsKeys(format) && !a) {
        if (error)
            *error = tr("Open a checkpoint (A) first: this export lists its keys.");
        return false;
    }
    RuleExport out;
    try {
        out = renderRuleExport(format, rules, a ? &keys : nullptr);
        // Never over a checkpoint or model this window has read (io/file_trust.h).
        refuseOutputOntoInput(path.toStdString(), static_cast<unsigned>(InputKind::Checkpoint));
        writeFileAtomically(path.toStdString(), out.text);
    } catch (const std::exception& e) {
        if (error)
            *error = QString::fromStdString(e.what());
        return false;
    }
    if (problems)
        for (const auto& p : out.problems)
            *problems << QString::fromStdString(p);
    return true;
}

bool MainWindow::exportReport(DiffReportFormat format, const QString& path, QString* error)
{
    auto snap = m_comparison->snapshot();
    if (!snap->complete()) {
        if (error)
            *error = tr("Open a checkpoint and a model first.");
        return false;
    }
    try {
        const std::vector<Suggestion>* suggestions = m_comparison->suggestionsCurrent() ? &m_comparison->suggestions() : nullptr;
        DiffReportInput in { *snap->a, *snap->b, snap->rules, snap->diff, &snap->issues, suggestions };
        refuseOutputOntoInput(path.toStdString(), static_cast<unsigned>(InputKind::Checkpoint));
        writeFileAtomically(path.toStdString(), renderDiffReport(in, format));
    } catch (const std::exception& e) {
        if (error)
            *error = QString::fromStdString(e.what());
        return false;
    }
    return true;
}

void MainWindow::chooseExportRules(RuleExportFormat format)
{
    static const char* const names[] = { "rules.yaml", "rules.json", "remap_state_dict.py", "key_mapping.json", "torchtitan_map.py", "mapping.csv" };
    const QString path = QFileDialog::getSaveFileName(this, tr("Export rules"), QString::fromLatin1(names[static_cast<int>(format)]));
    if (path.isEmpty())
        return;
    QString error;
    QStringList problems;
    if (!exportRules(format, path, &error, &problems)) {
        QMessageBox::warning(this, tr("Export rules"), error);
        return;
    }
    if (!problems.isEmpty())
        QMessageBox::warning(this, tr("Export rules"),
            tr("Written, but this format cannot express everything the rules do:\n\n%1").arg(problems.mid(0, 20).join(QLatin1Char('\n'))));
    statusBar()->showMessage(tr("Exported %1").arg(path), 5000);
}

void MainWindow::chooseExportReport(DiffReportFormat format)
{
    static const char* const ext[] = { "txt", "json", "md", "csv", "html", "xml" };
    const QString path = QFileDialog::getSaveFileName(this, tr("Export diff report"),
        QStringLiteral("diff-report.") + QString::fromLatin1(ext[static_cast<int>(format)]));
    if (path.isEmpty())
        return;
    QString error;
    if (!exportReport(format, path, &error))
        QMessageBox::warning(this, tr("Export diff report"), error);
    else
        statusBar()->showMessage(tr("Exported %1").arg(path), 5000);
}

// --- the fixed checkpoint --------------------------------------------------------------------------------

void MainWindow::saveFixedCheckpoint()
{
    auto a = m_sideA->source();
    if (!a || m_sideA->isLoading()) {
        QMessageBox::information(this, tr("Save Fixed Checkpoint"),
            m_sideA->isLoading() ? tr("The checkpoint (A) is still loading.") : tr("Open a checkpoint (A) first: it is what is written."));
        return;
    }
    if (m_writer->isRunning())
        return;
    const size_t rules = m_rules->rules().rules.size();
    const QFileInfo label(m_sideA->label());
    QString what = tr("Writes the checkpoint (A) %1").arg(label.fileName());
    if (!a->container.empty())
        what += tr(", container '%1',").arg(QString::fromStdString(a->container));
    what += rules == 0 ? tr(" without rules (names as stored)")
        : rules == 1   ? tr(" with the rule of this window applied")
                       : tr(" with the %1 rules of this window applied").arg(rules);
    what += tr(" as safetensors: the same conversion as `statelens convert`. The checkpoint itself is not modified.");
    // Beside the checkpoint, named after it.
    QString base = label.isDir() ? label.absoluteFilePath() : label.absolutePath() + QLatin1Char('/') + label.completeBaseName();
    if (!label.exists())
        base = QDir::homePath() + QStringLiteral("/fixed");
    FixedCheckpointDialog dialog(what, base + QStringLiteral("-fixed.safetensors"), this);
    if (dialog.exec() != QDialog::Accepted)
        return;
    QString error;
    if (!startFixedCheckpoint(dialog.output(), dialog.shardBytes().value_or(0), &error))
        QMessageBox::warning(this, tr("Save Fixed Checkpoint"), error);
}

bool MainWindow::startFixedCheckpoint(const QString& output, uint64_t shardBytes, QString* error)
{
    auto fail = [&](const QString& why) {
        if (error)
            *error = why;
        return false;
    };
    auto a = m_sideA->source();
    if (!a)
        return fail(tr("Open a checkpoint (A) first: it is what is written."));
    if (output.isEmpty())
        return fail(tr("Name the output: a .safetensors file or a folder."));
    if (!m_writer->start({ a, m_rules->rules(), output, shardBytes }))
        return fail(tr("A checkpoint is being written already."));
    if (!m_writeProgress) {
        m_writeProgress = new QProgressDialog(this);
        m_writeProgress->setWindowTitle(tr("Save Fixed Checkpoint"));
        m_writeProgress->setRange(0, 1000);
        m_writeProgress->setMinimumDuration(0);
        m_writeProgress->setAutoClose(false);
        m_writeProgress->setAutoReset(false);
        m_writeProgress->setWindowModality(Qt::WindowModal);
        m_writeProgress->setMinimumWidth(520);
        connect(m_writeProgress, &QProgressDialog::canceled, this, &MainWindow::cancelFixedCheckpoint);
        connect(m_writer, &CheckpointWriter::finished, this, &MainWindow::fixedCheckpointWritten);
        m_writePoll = new QTimer(this);
        connect(m_writePoll, &QTimer::timeout, this, [this] {
            const double f = m_writer->progress();
            m_writeProgress->setValue(f < 0 ? 0 : static_cast<int>(f * 1000));
            const QString name = m_writer->currentTensor();
            const LoadControl* c = m_writer->control();
            const QLocale locale = QLocale::c();
            auto size = [&](uint64_t b) { return locale.formattedDataSize(static_cast<qint64>(b), 1, QLocale::DataSizeSIFormat); };
            if (!m_writeProgress->wasCanceled())
                m_writeProgress->setLabelText(name.isEmpty() || !c
                        ? tr("Planning…")
                        : tr("Writing %1\n%2 of %3").arg(name.left(80), size(c->done()), size(c->total())));
        });
    }
    m_writeProgress->reset();
    m_writeProgress->setLabelText(tr("Planning…"));
    m_writeProgress->setCancelButtonText(tr("Cancel"));
    m_writeProgress->setValue(0);
    m_writeProgress->show();
    m_writePoll->start(100);
    m_wasIdle = false;
    statusBar()->showMessage(tr("Writing the fixed checkpoint to %1…").arg(output));
    return true;
}

void MainWindow::cancelFixedCheckpoint()
{
    if (!m_writer->isRunning())
        return;
    m_writer->cancel();
    // The dialog stays until the write has removed its temporary files; finished() closes it.
    if (m_writeProgress) {
        m_writeProgress->show();
        m_writeProgress->setLabelText(tr("Cancelling: removing what was written…"));
    }
}

void MainWindow::fixedCheckpointWritten(const CheckpointWriter::Outcome& outcome)
{
    m_writePoll->stop();
    m_writeProgress->hide();
    const QString title = tr("Save Fixed Checkpoint");
    QMessageBox* box = nullptr;
    switch (outcome.kind) {
    case CheckpointWriter::Outcome::Kind::Written:
        box = new QMessageBox(QMessageBox::Information, title, outcome.summary().section(QLatin1Char('\n'), 0, 0), QMessageBox::Ok, this);
        box->setInformativeText(outcome.summary().section(QLatin1Char('\n'), 1));
        statusBar()->showMessage(tr("Fixed checkpoint written to %1").arg(outcome.output), 8000);
        break;
    case CheckpointWriter::Outcome::Kind::Failed:
        box = new QMessageBox(QMessageBox::Warning, title, outcome.summary(), QMessageBox::Ok, this); // says nothing was written
        statusBar()->showMessage(tr("The fixed checkpoint could not be written."), 8000);
        break;
    case CheckpointWriter::Outcome::Kind::Cancelled:
        statusBar()->showMessage(outcome.summary(), 8000);
        break;
    }
    if (box) {
        box->setTextFormat(Qt::PlainText);
        box->setAttribute(Qt::WA_DeleteOnClose);
        box->setObjectName(QStringLiteral("fixedCheckpointResult"));
        box->open(); // not exec(): the window (and a test driving it) goes on
    }
    emit fixedCheckpointFinished(outcome);
    checkIdle();
}

// --- state -----------------------------------------------------------------------------------------------

bool MainWindow::isIdle() const
{
    return !m_sideA->isLoading() && !m_sideB->isLoading() && !m_comparison->isBusy() && !m_pairValues->isRunning()
        && !m_writer->isRunning();
}

void MainWindow::checkIdle()
{
    const bool now = isIdle();
    if (now && !m_wasIdle)
        emit idle();
    m_wasIdle = now;
}

void MainWindow::closeEvent(QCloseEvent* event)
{
    if (!maybeSaveRules()) {
        event->ignore();
        return;
    }
    QSettings settings;
    settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
    settings.setValue(QStringLiteral("window/state"), saveState());
    m_rules->discardRecovery();
    event->accept();
}

} // namespace sl::gui
