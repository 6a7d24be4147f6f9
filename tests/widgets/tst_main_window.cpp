// The real main window, driven as a user would under QT_QPA_PLATFORM=offscreen: open two files, read the
// summary, apply a suggestion, make a rule from a pair, filter, export rules and reports, undo. What the
// window shows is compared with what the core computes for the same inputs (the core's own suites compare
// it with torch), so these tests check the wiring, not the diff again.

#include "common/test_files.h"
#include "common/test_paths.h"
#include "main_window.h"

#include "diff/diff.h"
#include "formats/loader.h"
#include "formats/rank_files_reader.h"
#include "models/aligned_tree_model.h"
#include "report/diff_report.h"
#include "rules/rule_export.h"
#include "rules/rule_io.h"
#include "session/rule_document.h"
#include "suggest/suggestions.h"
#include "values/tensor_stats.h"
#include "views/details_panel.h"
#include "views/diff_view.h"
#include "views/source_pane.h"
#include "views/suggestions_panel.h"
#include "views/summary_bar.h"
#include "views/values_panel.h"

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QClipboard>
#include <QDragEnterEvent>
#include <QMessageBox>
#include <QMimeData>
#include <QProcess>
#include <QScrollBar>
#include <QSettings>
#include <QSignalSpy>
#include <QUrl>
#include <QCheckBox>
#include <QDir>
#include <QLabel>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLineEdit>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>
#include <QToolButton>
#include <QTreeView>
#include <QUndoStack>

#include <set>

using namespace sl;
using namespace sl::gui;

namespace {

using sl::test::readAll;

const QString kCheckpoint = QStringLiteral(STATELENS_SOURCE_DIR "/resources/demo/checkpoint.pt");
const QString kModel = QStringLiteral(STATELENS_SOURCE_DIR "/resources/demo/model.pt");
// A torch.compile'd FSDP2 run saved one file per rank (real torch 2.6 files), and the plain model it feeds.
const QString kTorch2 = QStringLiteral(STATELENS_SOURCE_DIR "/tests/fixtures/torch2");
const QStringList kCompiledRanks { kTorch2 + "/fsdp2/compiled_model_rank0.pt",
    kTorch2 + "/fsdp2/compiled_model_rank1.pt" };
const QString kTitan = kTorch2 + "/models/titan.sldump.json";
// make_torch2_fixtures.py's TITAN_TO_HF: the renames a user would write in Python ("PATTERN REPLACEMENT").
const QStringList kTitanToHf { QStringLiteral("^tok_embeddings\\. model.embed_tokens."),
    QStringLiteral("^layers\\.(\\d+)\\.attention\\.wq\\. model.layers.\\1.self_attn.q_proj."),
    QStringLiteral("^layers\\.(\\d+)\\.attention\\.wk\\. model.layers.\\1.self_attn.k_proj."),
    QStringLiteral("^layers\\.(\\d+)\\.attention\\.wv\\. model.layers.\\1.self_attn.v_proj."),
    QStringLiteral("^layers\\.(\\d+)\\.attention\\.wo\\. model.layers.\\1.self_attn.o_proj."),
    QStringLiteral("^layers\\.(\\d+)\\.feed_forward\\.w1\\. model.layers.\\1.mlp.gate_proj."),
    QStringLiteral("^layers\\.(\\d+)\\.feed_forward\\.w2\\. model.layers.\\1.mlp.down_proj."),
    QStringLiteral("^layers\\.(\\d+)\\.feed_forward\\.w3\\. model.layers.\\1.mlp.up_proj."),
    QStringLiteral("^layers\\.(\\d+)\\.attention_norm\\. model.layers.\\1.input_layernorm."),
    QStringLiteral("^layers\\.(\\d+)\\.ffn_norm\\. model.layers.\\1.post_attention_layernorm."),
    QStringLiteral("^norm\\. model.norm."), QStringLiteral("^output\\. lm_head."), QStringLiteral("^mask$ model.mask"),
    QStringLiteral("^freqs_cis$ model.freqs_cis") };


// The count a status button shows ("20 missing" -> 20).
size_t shown(const MainWindow& w, RowStatus s) { return w.summaryBar()->statusButton(s)->text().section(QLatin1Char(' '), 0, 0).toULongLong(); }

void expectCounts(const MainWindow& w, const DiffSummary& truth)
{
    for (size_t s = 0; s < kRowStatusCount; ++s)
        QCOMPARE(shown(w, static_cast<RowStatus>(s)), truth.counts[s]);
}

// The core's answer for the demo pair under `rules`, computed here from the files.
DiffSummary coreSummary(const RuleSet& rules)
{
    const Source a = openSource(kCheckpoint.toStdString());
    const Source b = openSource(kModel.toStdString());
    return diffSources(a, b, rules).summary;
}

// The core's diff of the compiled rank files (one per-rank source) against the plain model.
DiffSummary coreRankSummary()
{
    std::vector<std::string> paths;
    for (const QString& p : kCompiledRanks)
        paths.push_back(p.toStdString());
    return diffSources(openRankFiles(paths, {}), openSource(kTitan.toStdString()), RuleSet {}).summary;
}

void dropFiles(QWidget* target, const QStringList& paths)
{
    QMimeData mime;
    QList<QUrl> urls;
    for (const QString& p : paths)
        urls << QUrl::fromLocalFile(p);
    mime.setUrls(urls);
    QDragEnterEvent enter(QPoint(5, 5), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(target, &enter);
    QVERIFY(enter.isAccepted());
    QDropEvent dropEvent(QPointF(5, 5), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(target, &dropEvent);
    QVERIFY(dropEvent.isAccepted());
}

} // namespace

class TestMainWindow : public QObject {
    Q_OBJECT
    QTemporaryDir m_home;

private:
    // Opens the demo pair from its files and waits for the diff and the suggestions.
    void openPair(MainWindow& w)
    {
        w.openA(kCheckpoint);
        w.openB(kModel);
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle() && w.comparison()->snapshot()->complete(), 60000);
    }

private slots:

    void initTestCase()
    {
        // Settings, recent files and recovery files go to a folder of this run, not the user's.
        QVERIFY(m_home.isValid());
        qputenv("XDG_DATA_HOME", m_home.filePath(QStringLiteral("data")).toLocal8Bit());
        qputenv("XDG_CONFIG_HOME", m_home.filePath(QStringLiteral("config")).toLocal8Bit());
    }

    void opensTwoFilesAndShowsTheCoreCounts()
    {
        MainWindow w;
        QAbstractItemModelTester tester(w.model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
        w.show();
        openPair(w);
        const DiffSummary truth = coreSummary({});
        // Without rules every key of model.pt is missing: resources/demo/make_demo.py's TinyLM has 20 (embed,
        // 8 per block x 2 blocks, norm's weight and bias, the tied lm_head; rope_inv_freq is not persistent),
        // and the checkpoint's keys all carry '_orig_mod.' (and it has no lm_head.weight).
        QCOMPARE(truth.count(RowStatus::Missing), size_t(20));
        expectCounts(w, truth);
        QVERIFY(w.summaryBar()->verdict()->text().contains(QStringLiteral("fails")));
        // Before any rule, each '_orig_mod.' key of the checkpoint sits on the line of the model's key: no
        // subtree of A's alone. The tied lm_head.weight has no counterpart and keeps its gap.
        QVERIFY(!w.model()->findPath(QStringLiteral("_orig_mod")).isValid());
        const QModelIndex embed = w.model()->findPath(QStringLiteral("embed.weight"));
        QVERIFY(embed.data(AlignedTreeModel::PairRole).toBool());
        QCOMPARE(embed.siblingAtColumn(AlignedTreeModel::NameA).data().toString(), QStringLiteral("_orig_mod.embed.weight"));
        QCOMPARE(embed.siblingAtColumn(AlignedTreeModel::NameB).data().toString(), QStringLiteral("embed.weight"));
        const QModelIndex head = w.model()->findPath(QStringLiteral("lm_head.weight"));
        QVERIFY(head.siblingAtColumn(AlignedTreeModel::NameA).data(AlignedTreeModel::GapRole).toBool());
        QVERIFY(!head.data(AlignedTreeModel::PairRole).toBool());
        // Both panes know their sources; A's container picker offers the optimizer state too.
        QCOMPARE(w.loader(Side::A)->source()->container, std::string("model"));
        QVERIFY(w.loader(Side::A)->source()->containers.size() > 1);
    }

    void applyingASuggestionChangesTheCountsAsTheCoreSays()
    {
        MainWindow w;
        openPair(w);
        QTRY_VERIFY_WITH_TIMEOUT(w.comparison()->suggestionsCurrent() && w.suggestionsPanel()->count() > 0, 60000);
        const Suggestion first = w.comparison()->suggestions().front();
        QVERIFY2(first.title.find("_orig_mod") != std::string::npos, first.title.c_str());
        RuleSet expected;
        expected.rules = first.rules;
        const DiffSummary truth = coreSummary(expected);
        w.applySuggestion(0);
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle(), 60000);
        QCOMPARE(w.ruleDocument()->rules().rules.size(), first.rules.size());
        expectCounts(w, truth);
        QVERIFY(shown(w, RowStatus::Renamed) > 0);
        // Undo brings back the raw diff, redo the rules.
        w.ruleDocument()->undoStack()->undo();
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle(), 60000);
        expectCounts(w, coreSummary({}));
        w.ruleDocument()->undoStack()->redo();
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle(), 60000);
        expectCounts(w, truth);
    }

    // The torchtitan DCP against the HF-named model (both written by torch 2.6, the same weights): once the
    // suggestions are in, every titan key sits on the line of its HF key, output.weight beside lm_head.weight
    // (not "probably tied" to the embedding); accepting that line takes the suggestions it needs as one step,
    // and Apply All resolves everything as one more.
    void titanPairsAcceptAndApplyAll()
    {
        MainWindow w;
        w.openA(kTorch2 + QStringLiteral("/dcp/dcp_titan"));
        w.openB(kTorch2 + QStringLiteral("/models/hf.sldump.json"));
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle() && w.comparison()->snapshot()->complete() && w.comparison()->suggestionsCurrent(), 60000);
        QCOMPARE(shown(w, RowStatus::Missing), size_t(23));
        QCOMPARE(shown(w, RowStatus::Unexpected), size_t(23));
        w.model()->setFolding(false);
        const QModelIndex head = w.model()->findPath(QStringLiteral("lm_head.weight"));
        QVERIFY(head.isValid());
        QVERIFY(head.data(AlignedTreeModel::PairRole).toBool());
        QCOMPARE(head.siblingAtColumn(AlignedTreeModel::NameA).data().toString(), QStringLiteral("output.weight"));
        QCOMPARE(head.data(AlignedTreeModel::ReasonRole).toInt(), static_cast<int>(Reason::SuggestedRename));
        const int suggestion = head.data(AlignedTreeModel::SuggestionRole).toInt();
        QVERIFY(suggestion >= 0);
        QVERIFY(head.siblingAtColumn(AlignedTreeModel::StatusColumn).data().toString().startsWith(QStringLiteral("pending: suggestion %1").arg(suggestion + 1)));
        // Every titan key is on a line with its HF key.
        size_t pairs = 0;
        const auto& diff = w.comparison()->snapshot()->diff;
        for (size_t i = 0; i < diff.rows.size(); ++i)
            pairs += diff.rows[i].status == RowStatus::Missing && pairedRow(diff, i).valid();
        QCOMPARE(pairs, size_t(23));

        const int steps = w.ruleDocument()->undoStack()->count();
        w.acceptPending(w.model()->diffRows(head).front());
        QCOMPARE(w.ruleDocument()->undoStack()->count(), steps + 1);
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle(), 60000);
        const QModelIndex accepted = w.model()->findPath(QStringLiteral("lm_head.weight"));
        QCOMPARE(accepted.data(AlignedTreeModel::StatusRole).toInt(), static_cast<int>(RowStatus::Renamed));
        // output.weight needs the 'model.' prefix first, so the line took that suggestion too: it also
        // resolves the three top-level keys (mask, freqs_cis, norm.weight).
        QCOMPARE(w.ruleDocument()->rules().rules.size(), size_t(2));
        QCOMPARE(shown(w, RowStatus::Missing), size_t(19));

        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle() && w.comparison()->suggestionsCurrent(), 60000);
        w.applyAllSuggestions();
        QCOMPARE(w.ruleDocument()->undoStack()->count(), steps + 2);
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle(), 60000);
        QCOMPARE(shown(w, RowStatus::Missing), size_t(0));
        QCOMPARE(shown(w, RowStatus::Unexpected), size_t(0));
        QCOMPARE(shown(w, RowStatus::Renamed), size_t(23));
        w.ruleDocument()->undoStack()->undo(); // Apply All is one step
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle(), 60000);
        QCOMPARE(shown(w, RowStatus::Missing), size_t(19));
    }

    void makesARuleFromASelectedPair()
    {
        MainWindow w;
        openPair(w);
        AlignedTreeModel* m = w.model();
        m->setFolding(false);
        // The unexpected key and the missing one share a line already (a wrapper prefix): selecting it is
        // selecting the pair.
        const QModelIndex pair = m->findPath(QStringLiteral("layers.1.mlp.up.weight"));
        QVERIFY(pair.isValid() && pair.data(AlignedTreeModel::PairRole).toBool());
        QVERIFY(!w.inferFromSelection()); // nothing selected yet
        auto* selection = w.diffView()->viewA()->selectionModel();
        selection->select(pair, QItemSelectionModel::Select | QItemSelectionModel::Rows);
        auto s = w.inferFromSelection();
        QVERIFY(s.has_value());
        // The same as the core infers from the two names.
        const Source a = openSource(kCheckpoint.toStdString());
        const Source b = openSource(kModel.toStdString());
        auto truth = inferRule("_orig_mod.layers.1.mlp.up.weight", "layers.1.mlp.up.weight", a, b);
        QVERIFY(truth.has_value());
        QCOMPARE(s->rules.size(), truth->rules.size());
        QCOMPARE(s->rules.front().pattern, truth->rules.front().pattern);
        QCOMPARE(s->resolves, truth->resolves);
        w.addInferredRule(*s);
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle(), 60000);
        RuleSet expected;
        expected.rules = truth->rules;
        expectCounts(w, coreSummary(expected));
    }

    void filterBoxAndStatusButtonsNarrowTheTree()
    {
        MainWindow w;
        openPair(w);
        w.summaryBar()->foldToggle()->setChecked(false);
        w.summaryBar()->filterEdit()->setText(QStringLiteral("norm1"));
        // norm1.weight and norm1.bias of 2 layers, on each side.
        QCOMPARE(w.model()->leafCount(), size_t(8));
        w.summaryBar()->filterEdit()->clear();
        // A pair is a missing and an unexpected row on one line: either status shows both.
        const auto& diff = w.comparison()->snapshot()->diff;
        size_t pairs = 0;
        for (size_t i = 0; i < diff.rows.size(); ++i)
            pairs += diff.rows[i].status == RowStatus::Missing && pairedRow(diff, i).valid();
        QCOMPARE(pairs, size_t(19)); // every key of the compiled checkpoint
        w.summaryBar()->statusButton(RowStatus::Missing)->click();
        QCOMPARE(w.model()->leafCount(), shown(w, RowStatus::Missing) + pairs);
        w.summaryBar()->statusButton(RowStatus::Unexpected)->click();
        QCOMPARE(w.model()->leafCount(), shown(w, RowStatus::Missing) + shown(w, RowStatus::Unexpected));
        w.summaryBar()->statusButton(RowStatus::Missing)->click();
        w.summaryBar()->statusButton(RowStatus::Unexpected)->click();
        QCOMPARE(w.model()->leafCount(), w.comparison()->snapshot()->diff.rows.size());
        // F3 goes to a difference.
        w.gotoDifference(true);
        QVERIFY(w.diffView()->currentIndex().data(AlignedTreeModel::DifferenceRole).toBool());
    }

    void exportsRulesAndReportsAsTheCoreWritesThem()
    {
        MainWindow w;
        openPair(w);
        QTRY_VERIFY_WITH_TIMEOUT(w.comparison()->suggestionsCurrent() && w.suggestionsPanel()->count() > 0, 60000);
        QTemporaryDir dir;
        QString error;
        // Before any rule: the report carries the suggestions, as the command line's `diff --suggest` does.
        QVERIFY2(w.exportReport(DiffReportFormat::Json, dir.filePath(QStringLiteral("before.json")), &error), qPrintable(error));
        const auto before = sl::test::runStatelens({ QStringLiteral("diff"), kCheckpoint, kModel, QStringLiteral("--suggest"),
            QStringLiteral("--format"), QStringLiteral("json"), QStringLiteral("-o"), dir.filePath(QStringLiteral("cli-before.json")) });
        QCOMPARE(before.exitCode, 1); // the compiled checkpoint does not load as it is
        QVERIFY(!sl::test::readJson(dir.filePath(QStringLiteral("before.json"))).value(QStringLiteral("suggestions")).toArray().isEmpty());
        QVERIFY(readAll(dir.filePath(QStringLiteral("before.json"))) == readAll(dir.filePath(QStringLiteral("cli-before.json"))));
        w.applySuggestion(0);
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle(), 60000);
        const RuleSet& rules = w.ruleDocument()->rules();
        // The suggestion the window applied strips torch.compile's prefix: Python runs the exported script over
        // the checkpoint's keys, and each comes out without '_orig_mod.'.
        QVERIFY2(w.exportRules(RuleExportFormat::Python, dir.filePath(QStringLiteral("remap.py")), &error), qPrintable(error));
        const Source checkpoint = openSource(kCheckpoint.toStdString());
        QByteArray keys, expected;
        for (const Entry& e : checkpoint.entries) {
            const QByteArray key = QByteArray::fromStdString(e.name);
            QVERIFY(key.startsWith("_orig_mod."));
            keys += key + '\n';
            expected += key + '\t' + key.mid(10) + '\n';
        }
        QProcess python;
        python.start(sl::test::torchPython(), { dir.filePath(QStringLiteral("remap.py")) });
        if (python.waitForStarted()) {
            python.write(keys);
            python.closeWriteChannel();
            QVERIFY(python.waitForFinished(60000));
            QCOMPARE(python.exitCode(), 0);
            QCOMPARE(python.readAllStandardOutput(), expected);
        }
        QVERIFY(w.exportRules(RuleExportFormat::Yaml, dir.filePath(QStringLiteral("rules.yaml")), &error));
        QCOMPARE(loadRules(dir.filePath(QStringLiteral("rules.yaml")).toStdString()).rules.size(), rules.rules.size());
        QStringList problems;
        QVERIFY(w.exportRules(RuleExportFormat::HfKeyMapping, dir.filePath(QStringLiteral("km.json")), &error, &problems));
        const QJsonObject km = QJsonDocument::fromJson(readAll(dir.filePath(QStringLiteral("km.json")))).object();
        QCOMPARE(km.size(), static_cast<qsizetype>(rules.rules.size()));
        QVERIFY(problems.isEmpty());
        QVERIFY(w.exportRules(RuleExportFormat::Json, dir.filePath(QStringLiteral("rules.json")), &error));
        const QJsonArray jsonRules = sl::test::readJson(dir.filePath(QStringLiteral("rules.json"))).value(QStringLiteral("rules")).toArray();
        QCOMPARE(jsonRules.size(), 1);
        QCOMPARE(jsonRules[0].toObject().value(QStringLiteral("pattern")).toString(), QStringLiteral("^_orig_mod\\."));
        QCOMPARE(jsonRules[0].toObject().value(QStringLiteral("replace")).toString(), QString());
        QVERIFY(w.exportRules(RuleExportFormat::Torchtitan, dir.filePath(QStringLiteral("tt.py")), &error, &problems));
        QVERIFY(readAll(dir.filePath(QStringLiteral("tt.py"))).contains("layers.{}.mlp.up.weight"));
        QVERIFY(w.exportRules(RuleExportFormat::Csv, dir.filePath(QStringLiteral("map.csv")), &error));
        QVERIFY(readAll(dir.filePath(QStringLiteral("map.csv"))).contains("_orig_mod.norm.weight,norm.weight"));

        QVERIFY2(w.exportReport(DiffReportFormat::Json, dir.filePath(QStringLiteral("report.json")), &error), qPrintable(error));
        const QJsonObject report = QJsonDocument::fromJson(readAll(dir.filePath(QStringLiteral("report.json")))).object();
        const DiffSummary truth = coreSummary(rules);
        QCOMPARE(static_cast<size_t>(report.value(QStringLiteral("summary")).toObject().value(QStringLiteral("missing")).toInt()), truth.count(RowStatus::Missing));
        QCOMPARE(static_cast<size_t>(report.value(QStringLiteral("rows")).toArray().size()), w.comparison()->snapshot()->diff.rows.size());
        // Every report is what the command line writes for the same files and rules (run on its own: it
        // loads, diffs, checks and suggests by itself), so the window hands its renderer the whole comparison.
        for (DiffReportFormat f : { DiffReportFormat::Json, DiffReportFormat::Html, DiffReportFormat::Markdown,
                 DiffReportFormat::Csv, DiffReportFormat::Junit, DiffReportFormat::Text }) {
            const QString format = QString::fromLatin1(diffReportFormatName(f).data());
            const QString path = dir.filePath(QStringLiteral("report.") + format);
            QVERIFY(w.exportReport(f, path, &error));
            const QString cliPath = dir.filePath(QStringLiteral("cli-report.") + format);
            const auto cli = sl::test::runStatelens({ QStringLiteral("diff"), kCheckpoint, kModel, QStringLiteral("--rules"),
                dir.filePath(QStringLiteral("rules.yaml")), QStringLiteral("--suggest"), QStringLiteral("--format"), format,
                QStringLiteral("-o"), cliPath });
            QVERIFY2(cli.exitCode == 0 || cli.exitCode == 1, cli.err.constData());
            QVERIFY2(readAll(path) == readAll(cliPath), qPrintable(format));
        }
        // Nothing half-written is left beside the outputs.
        for (const QString& name : QDir(dir.path()).entryList(QDir::Files))
            QVERIFY2(!name.contains(QStringLiteral(".tmp")), qPrintable(name));
    }

    // Exports and saves never write over a checkpoint or model the window has read, by its name or through a
    // symlink; a rule file is saved over the one it came from.
    void exportsNeverOverwriteAnOpenInput()
    {
        QTemporaryDir dir;
        const QString a = dir.filePath(QStringLiteral("a.pt"));
        const QString b = dir.filePath(QStringLiteral("b.pt"));
        const QString link = dir.filePath(QStringLiteral("link.json"));
        QVERIFY(QFile::copy(kCheckpoint, a) && QFile::copy(kModel, b) && QFile::link(a, link));
        const QByteArray bytesA = readAll(a);
        const QByteArray bytesB = readAll(b);
        MainWindow w;
        w.openA(a);
        w.openB(b);
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle() && w.comparison()->snapshot()->complete(), 60000);
        QString error;
        QVERIFY(!w.exportReport(DiffReportFormat::Json, a, &error));
        QVERIFY2(error.contains(QStringLiteral("is an input")), qPrintable(error));
        QVERIFY(!w.exportReport(DiffReportFormat::Html, link, &error));
        QVERIFY2(error.contains(QStringLiteral("would overwrite the input")), qPrintable(error));
        QVERIFY(!w.exportRules(RuleExportFormat::Yaml, b, &error));
        QVERIFY(!w.saveRules(b, &error));
        QCOMPARE(readAll(a), bytesA);
        QCOMPARE(readAll(b), bytesB);
        QVERIFY(QFileInfo(link).isSymLink());
        const QString rules = dir.filePath(QStringLiteral("rules.yaml"));
        QVERIFY2(w.saveRules(rules, &error), qPrintable(error));
        QVERIFY2(w.loadRules(rules, &error), qPrintable(error));
        QVERIFY2(w.saveRules(rules, &error), qPrintable(error));
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle(), 60000);
    }

    void rulesSaveLoadAndRecoverAfterACrash()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("rules.yaml"));
        {
            MainWindow w;
            QVERIFY(!w.hasPendingRecovery());
            openPair(w);
            QTRY_VERIFY_WITH_TIMEOUT(w.comparison()->suggestionsCurrent() && w.suggestionsPanel()->count() > 0, 60000);
            w.applySuggestion(0);
            QVERIFY(w.ruleDocument()->isModified());
            QVERIFY(w.isWindowModified());
            QTRY_VERIFY_WITH_TIMEOUT(w.isIdle(), 60000);
            // Unsaved rules are mirrored to this window's recovery file. A crash leaves it behind, named by
            // a process that is gone: copied here under a PID above Linux's maximum.
            const QString own = w.ruleDocument()->recoveryFile();
            QVERIFY(QFile::exists(own));
            QCOMPARE(RuleDocument::readRecovery(own)->rules.size(), w.ruleDocument()->rules().rules.size());
            QVERIFY(QFile::copy(own, QFileInfo(own).dir().filePath(QStringLiteral("unsaved-rules-4194999.yaml"))));
            // Undo back to the saved (empty) state: nothing left to recover from this window.
            w.ruleDocument()->undoStack()->undo();
            QVERIFY(!QFile::exists(own));
            w.ruleDocument()->undoStack()->redo();
            QVERIFY(QFile::exists(own));
            QTRY_VERIFY_WITH_TIMEOUT(w.isIdle(), 60000);
        }
        {
            MainWindow w;
            QVERIFY(w.hasPendingRecovery());
            w.restorePendingRecovery();
            QVERIFY(!w.ruleDocument()->rules().rules.empty());
            QVERIFY(w.ruleDocument()->isModified());
            QString error;
            QVERIFY2(w.saveRules(path, &error), qPrintable(error));
            QVERIFY(!w.ruleDocument()->isModified());
            QVERIFY(!QFile::exists(w.ruleDocument()->recoveryFile())); // saved: nothing to recover
            QTRY_VERIFY_WITH_TIMEOUT(w.isIdle(), 60000);
        }
        MainWindow w;
        QVERIFY(!w.hasPendingRecovery()); // the crashed run's file went when it was restored
        QString error;
        QVERIFY2(w.loadRules(path, &error), qPrintable(error));
        QCOMPARE(w.ruleDocument()->rules().rules.size(), size_t(1));
        QVERIFY(!w.loadRules(dir.filePath(QStringLiteral("absent.yaml")), &error));
        QVERIFY(error.contains(QStringLiteral("absent.yaml")));
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle(), 60000);
    }

    void dropOpensTheFileOnThatSide()
    {
        MainWindow w;
        w.show();
        dropFiles(w.pane(Side::A), { kCheckpoint }); // onto A's header
        dropFiles(w.diffView()->viewB()->viewport(), { kModel }); // onto B's tree
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle() && w.comparison()->snapshot()->complete(), 60000);
        QCOMPARE(QString::fromStdString(w.loader(Side::A)->source()->path), kCheckpoint);
        QCOMPARE(QString::fromStdString(w.loader(Side::B)->source()->path), kModel);
        // Both went to the recent files, newest first.
        const QStringList recent = QSettings().value(QStringLiteral("recentFiles")).toStringList();
        QVERIFY(recent.size() >= 2);
        QCOMPARE(recent.at(0), QFileInfo(kModel).absoluteFilePath());
        QCOMPARE(recent.at(1), QFileInfo(kCheckpoint).absoluteFilePath());
    }

    // Several rank files on one side are one per-rank source: what the window counts is the core's diff of
    // that source, whether they were opened by a call (File > Open Rank Files) or dropped together.
    void opensSeveralRankFilesAsOneSide()
    {
        const DiffSummary truth = coreRankSummary();
        QCOMPARE(truth.count(RowStatus::Unexpected), size_t(23)); // torch's verdict: every key carries _orig_mod.
        QCOMPARE(truth.count(RowStatus::Missing), size_t(23));
        for (int how = 0; how < 3; ++how) {
            MainWindow w;
            w.show();
            if (how == 0)
                w.open(Side::A, kCompiledRanks);
            else if (how == 1)
                dropFiles(w.pane(Side::A), kCompiledRanks); // onto A's header
            else
                dropFiles(w.diffView()->viewA()->viewport(), kCompiledRanks); // onto A's tree
            w.openB(kTitan);
            QTRY_VERIFY_WITH_TIMEOUT(w.isIdle() && w.comparison()->snapshot()->complete(), 60000);
            const auto a = w.loader(Side::A)->source();
            QVERIFY2(a, qPrintable(w.loader(Side::A)->error()));
            QCOMPARE(std::string(formatId(a->format)), std::string("per-rank"));
            QCOMPARE(a->files.size(), size_t(2));
            QVERIFY2(w.loader(Side::A)->label().endsWith(QStringLiteral("compiled_model_rank*.pt (2 files)")),
                qPrintable(w.loader(Side::A)->label()));
            expectCounts(w, truth);
            // The replicated buffers have their shape, so the suggested rule fixes the load entirely.
            QCOMPARE(w.comparison()->suggestions().size(), size_t(1));
            w.applySuggestion(0);
            QTRY_VERIFY_WITH_TIMEOUT(w.isIdle() && w.comparison()->snapshot()->complete(), 60000);
            QCOMPARE(shown(w, RowStatus::Renamed), size_t(23));
            QVERIFY(w.summaryBar()->verdict()->text().contains(QStringLiteral("succeeds")));
        }
        // The set is one recent entry.
        const QStringList recent = QSettings().value(QStringLiteral("recentFiles")).toStringList();
        QVERIFY(recent.size() >= 2);
        QCOMPARE(recent.at(1).split(QLatin1Char('\n')), kCompiledRanks);
    }

    // A folder of rank files opens as File > Open Folder opens any folder: its sets are containers.
    void folderOfRankFilesOpensWithItsSets()
    {
        MainWindow w;
        w.open(Side::A, kTorch2 + "/fsdp2");
        w.openB(kTitan);
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle() && w.comparison()->snapshot()->complete(), 60000);
        QVERIFY2(w.loader(Side::A)->source(), qPrintable(w.loader(Side::A)->error()));
        QCOMPARE(w.loader(Side::A)->source()->container, std::string("model"));
        QCOMPARE(w.loader(Side::A)->source()->containers.size(), size_t(4));
        QVERIFY(w.summaryBar()->verdict()->text().contains(
            QStringLiteral("succeeds"))); // torch: fsdp2_ranks_into_plain loads
        w.loader(Side::A)->selectContainer(QStringLiteral("compiled_model"));
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle() && w.comparison()->snapshot()->complete(), 60000);
        QCOMPARE(w.loader(Side::A)->source()->container, std::string("compiled_model"));
        expectCounts(w, coreRankSummary());
    }

    // File > Save Fixed Checkpoint As… after Apply All on the torchtitan DCP save and the HF-named model: the
    // window writes A's container with its own rules, the keys written are the model's, the result message
    // says so, and torch (convert_truth.py) loads the file strictly into the HF model with the values torch
    // 2.6 saved, renamed by the rules a user would write in Python.
    void savesTheFixedCheckpointWithTheWindowsRules()
    {
        QTemporaryDir dir;
        MainWindow w;
        w.openA(kTorch2 + QStringLiteral("/dcp/dcp_titan"));
        w.openB(kTorch2 + QStringLiteral("/models/hf.sldump.json"));
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle() && w.comparison()->snapshot()->complete() && w.comparison()->suggestionsCurrent(), 60000);
        QString error;
        QVERIFY(!w.startFixedCheckpoint(QString(), 0, &error));
        QVERIFY(!error.isEmpty());
        w.applyAllSuggestions();
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle(), 60000);
        QCOMPARE(shown(w, RowStatus::Renamed), size_t(23));
        QSignalSpy finished(&w, &MainWindow::fixedCheckpointFinished);
        const QString out = dir.filePath(QStringLiteral("hf.safetensors"));
        QVERIFY2(w.startFixedCheckpoint(out, 0, &error), qPrintable(error));
        QVERIFY(!w.isIdle());
        QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 60000);
        QVERIFY(w.isIdle());
        const auto* box = w.findChild<QMessageBox*>(QStringLiteral("fixedCheckpointResult"));
        QVERIFY(box && box->isVisible());
        QVERIFY2(box->text() == QStringLiteral("Wrote 23 tensors (%1) in 1 file to %2.").arg(box->text().section(QLatin1Char('('), 1).section(QLatin1Char(')'), 0, 0), out),
            qPrintable(box->text()));
        QVERIFY2(box->informativeText().contains(QStringLiteral("Verified")), qPrintable(box->informativeText()));
        const_cast<QMessageBox*>(box)->accept();

        std::set<std::string> written, model;
        for (const Entry& e : openSource(out.toStdString()).entries)
            written.insert(e.name);
        for (const Entry& e : openSource((kTorch2 + QStringLiteral("/models/hf.sldump.json")).toStdString()).entries)
            model.insert(e.name);
        QCOMPARE(written, model);

        if (!test::haveTorchPython())
            QSKIP("no /usr/bin/python3 with torch for the strict load");
        QStringList args { test::sourceDir() + QStringLiteral("/tests/tools/convert_truth.py"), QStringLiteral("check"),
            QStringLiteral("--out"), out, QStringLiteral("--source"), kTorch2 + QStringLiteral("/dcp/dcp_titan.truth.json"),
            QStringLiteral("--kind"), QStringLiteral("per-rank-truth"), QStringLiteral("--container"), QStringLiteral("model"),
            QStringLiteral("--model"), QStringLiteral("hf") };
        for (const QString& rule : kTitanToHf)
            args << QStringLiteral("--sub") << rule.section(QLatin1Char(' '), 0, 0) << rule.section(QLatin1Char(' '), 1);
        const auto r = test::run(test::torchPython(), args);
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const QJsonObject c = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(c.value(QStringLiteral("checked")).toInt(), 23);
        QCOMPARE(c.value(QStringLiteral("strict_load")).toBool(), true);
    }

    void anotherContainerIsOneSelectionAway()
    {
        MainWindow w;
        openPair(w);
        const size_t before = w.comparison()->snapshot()->diff.rows.size();
        w.loader(Side::A)->selectContainer(QStringLiteral("optimizer"));
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle(), 60000);
        QCOMPARE(w.loader(Side::A)->source()->container, std::string("optimizer"));
        const Source truthA = openSource(kCheckpoint.toStdString(), OpenOptions { .container = std::string("optimizer") });
        QCOMPARE(w.comparison()->snapshot()->a->entries.size(), truthA.entries.size());
        QVERIFY(w.comparison()->snapshot()->diff.rows.size() != before);
        expectCounts(w, diffSources(truthA, openSource(kModel.toStdString()), RuleSet {}).summary);
    }

    void theTwoTreesExpandScrollAndSelectTogether()
    {
        MainWindow w;
        w.resize(900, 500);
        w.show();
        openPair(w);
        QTreeView* a = w.diffView()->viewA();
        QTreeView* b = w.diffView()->viewB();
        QCOMPARE(a->model(), b->model());
        QCOMPARE(a->selectionModel(), b->selectionModel());
        const QModelIndex layers = w.model()->findPath(QStringLiteral("layers"));
        a->collapse(layers);
        QVERIFY(!b->isExpanded(layers));
        b->expand(layers);
        QVERIFY(a->isExpanded(layers));
        a->expandAll();
        QTRY_VERIFY(a->verticalScrollBar()->maximum() > 0);
        b->verticalScrollBar()->setValue(b->verticalScrollBar()->maximum());
        QCOMPARE(a->verticalScrollBar()->value(), b->verticalScrollBar()->value());
        QVERIFY(a->verticalScrollBar()->value() > 0);
        // Copying the selected row gives both names.
        w.diffView()->select(w.model()->findPath(QStringLiteral("embed.weight")));
        // The details panel shows what the core knows: B's embedding is tied to lm_head (one storage).
        const QString details = w.detailsPanel()->toPlainText();
        QVERIFY2(details.contains(QStringLiteral("shares storage with")) && details.contains(QStringLiteral("lm_head.weight")), qPrintable(details));
        QVERIFY(details.contains(QStringLiteral("strides")));
        w.copySelection(false);
        QCOMPARE(QApplication::clipboard()->text(), QStringLiteral("_orig_mod.embed.weight -> embed.weight")); // a pair
    }

    void cancelLeavesTheSideAsItWas()
    {
        MainWindow w;
        openPair(w);
        SideLoader* a = w.loader(Side::A);
        const auto before = a->source();
        QSignalSpy changed(a, &SideLoader::sourceChanged);
        w.openA(QStringLiteral(STATELENS_SOURCE_DIR "/tests/fixtures/index/st_sharded/model.safetensors.index.json"));
        QVERIFY(a->isLoading());
        a->cancel();
        QVERIFY(!a->isLoading());
        QTest::qWait(500); // whatever the cancelled worker returns arrives nowhere
        QCOMPARE(changed.count(), 0);
        QCOMPARE(a->source(), before);
        QVERIFY(w.isIdle());
    }

    void foldersOpenLikeFiles()
    {
        MainWindow w;
        w.openA(QStringLiteral(STATELENS_SOURCE_DIR "/tests/fixtures/index/st_sharded")); // an index's folder
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle(), 60000);
        QVERIFY2(w.loader(Side::A)->source(), qPrintable(w.loader(Side::A)->error()));
        QCOMPARE(std::string(formatId(w.loader(Side::A)->source()->format)), std::string("safetensors-index"));
        QVERIFY(!w.comparison()->snapshot()->a->entries.empty());
    }

    void selectingARowShowsItsValues()
    {
        MainWindow w;
        openPair(w);
        const QModelIndex embed = w.model()->findPath(QStringLiteral("embed.weight")); // the pair's line
        QVERIFY(embed.isValid());
        QSignalSpy computed(w.valuesPanel(), &ValuesPanel::computed);
        w.diffView()->select(embed);
        QTRY_VERIFY_WITH_TIMEOUT(computed.count() >= 1 && !w.entryValues()->isBusy(), 60000);
        // The numbers are the core's (tst_values holds the core to torch).
        const Source a = openSource(kCheckpoint.toStdString());
        size_t index = 0;
        while (a.entries[index].name != "_orig_mod.embed.weight")
            ++index;
        const auto truth = values::computeStats(a, { index }, {});
        const QString text = w.valuesPanel()->summaryText();
        QVERIFY2(text.contains(QString::number(truth[0].stats->min, 'g', 6)), qPrintable(text));
        QVERIFY2(text.contains(QString::number(truth[0].stats->max, 'g', 6)), qPrintable(text));
        // The pair's line shows both sides' values: A's wrapped key and the model's own.
        QCOMPARE(w.valuesPanel()->histogram()->series().size(), size_t(2));
        QCOMPARE(w.valuesPanel()->histogram()->series()[0].label, QStringLiteral("A"));
        QCOMPARE(w.valuesPanel()->histogram()->series()[1].label, QStringLiteral("B"));
    }

    void compareValuesFillsTheValuesColumn()
    {
        const QString dir = QStringLiteral(STATELENS_SOURCE_DIR "/tests/fixtures/values");
        MainWindow w;
        w.openA(dir + QStringLiteral("/compare_a.pt"));
        w.openB(dir + QStringLiteral("/compare_b.pt"));
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle() && w.comparison()->snapshot()->complete(), 60000);
        QVERIFY(!w.model()->hasValueComparisons());
        w.compareValues();
        QVERIFY(w.comparingValues());
        QTRY_VERIFY_WITH_TIMEOUT(!w.comparingValues(), 60000);
        QVERIFY(w.model()->hasValueComparisons());
        auto cell = [&](const char* path) {
            return w.model()->findPath(QString::fromLatin1(path)).siblingAtColumn(AlignedTreeModel::ValuesColumn).data().toString();
        };
        QCOMPARE(cell("same.weight"), QStringLiteral("= same bytes"));
        QVERIFY2(cell("negated.bias").contains(QStringLiteral("cos -1.000000")), qPrintable(cell("negated.bias")));
        QVERIFY2(cell("noisy.weight").startsWith(QStringLiteral("max|Δ|")), qPrintable(cell("noisy.weight")));
        // A new diff drops them: its rows are other rows.
        w.ruleDocument()->appendRules({ Rule { "^lm_head\\.", "output.", false, true, {}, {} } }, QStringLiteral("test"));
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle(), 60000);
        QVERIFY(!w.model()->hasValueComparisons());
    }

    // A float checkpoint against its quantized copy: the panel shows B dequantized (and says so), the
    // Values column compares the dequantized values with A's floats.
    void quantizedWeightsShowDequantizedValues()
    {
        const QString dir = QStringLiteral(STATELENS_SOURCE_DIR "/tests/fixtures/values");
        MainWindow w;
        w.openA(dir + QStringLiteral("/quantized_groups.original.safetensors"));
        w.openB(dir + QStringLiteral("/quantized_groups.safetensors"));
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle() && w.comparison()->snapshot()->complete(), 60000);
        // The load sees the NF4 weight's keys one by one (weight, weight.absmax, ...): the `weight` leaf is the
        // row of the packed weight itself, beside the inner node that holds the other keys.
        const QModelIndex proj = w.model()->findPath(QStringLiteral("model.layers.2.mlp.gate_proj"));
        QModelIndex nf4;
        for (int r = 0; r < w.model()->rowCount(proj); ++r) {
            const QModelIndex c = w.model()->index(r, 0, proj);
            if (c.data().toString() == QStringLiteral("weight") && w.model()->kind(c) == AlignedTreeModel::NodeKind::Leaf)
                nf4 = c;
        }
        QVERIFY(nf4.isValid());
        QSignalSpy computed(w.valuesPanel(), &ValuesPanel::computed);
        w.diffView()->select(nf4);
        QTRY_VERIFY_WITH_TIMEOUT(computed.count() >= 1 && !w.entryValues()->isBusy(), 60000);
        const Source b = openSource((dir + QStringLiteral("/quantized_groups.safetensors")).toStdString());
        size_t index = 0;
        while (b.entries[index].name != "model.layers.2.mlp.gate_proj.weight")
            ++index;
        const auto truth = values::computeStats(b, { index }, {}); // tst_values holds these to bitsandbytes' recipe
        const QString text = w.valuesPanel()->summaryText();
        QVERIFY2(text.contains(QString::number(truth[0].stats->std().value(), 'g', 6)), qPrintable(text));
        QVERIFY2(text.contains(QStringLiteral("B: dequantized: bitsandbytes nf4")), qPrintable(text));
        QCOMPARE(w.valuesPanel()->histogram()->series().size(), size_t(2)); // both sides overlaid
        w.compareValues();
        QTRY_VERIFY_WITH_TIMEOUT(!w.comparingValues(), 60000);
        const QString cell = nf4.siblingAtColumn(AlignedTreeModel::ValuesColumn).data().toString();
        QVERIFY2(cell.startsWith(QStringLiteral("max|Δ|")) && cell.contains(QStringLiteral("cos 0.99")), qPrintable(cell));
        QVERIFY2(nf4.siblingAtColumn(AlignedTreeModel::ValuesColumn).data(Qt::ToolTipRole).toString().contains(QStringLiteral("B dequantized")),
            "the tooltip says how B's values were made");
    }

    void pastedLoadErrorBecomesTheModelSide()
    {
        MainWindow w;
        w.openA(kCheckpoint);
        w.openLoadErrorText(QStringLiteral(
            "RuntimeError: Error(s) in loading state_dict for Net:\n"
            "\tMissing key(s) in state_dict: \"embed.weight\", \"norm.weight\". \n"
            "\tUnexpected key(s) in state_dict: \"_orig_mod.embed.weight\". \n"));
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle() && w.comparison()->snapshot()->complete(), 60000);
        QVERIFY(w.loader(Side::B)->source());
        QVERIFY(w.model()->findPath(QStringLiteral("embed.weight")).isValid());
    }

    void unreadableFileShowsAnErrorOnItsSide()
    {
        QTemporaryDir dir;
        const QString bad = dir.filePath(QStringLiteral("broken.pt"));
        QFile f(bad);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("PK\x03\x04 not really a zip");
        f.close();
        MainWindow w;
        w.openA(bad);
        w.openB(kModel);
        QTRY_VERIFY_WITH_TIMEOUT(w.isIdle(), 60000);
        QVERIFY(!w.loader(Side::A)->source());
        QVERIFY2(w.loader(Side::A)->error().contains(QStringLiteral("broken.pt")), qPrintable(w.loader(Side::A)->error()));
        QVERIFY(w.loader(Side::B)->source());
    }
};

QTEST_MAIN(TestMainWindow)
#include "tst_main_window.moc"
