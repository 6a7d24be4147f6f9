// The GUI half of statelens, built as libstatelens-gui.so: `statelens [A [B]]`, or the demo pair when no
// file is given; A and B are written as for `statelens diff` (formats/rank_sets.h: several rank files per
// side). Hidden options serve the screenshot script and the benchmark:
//   --screenshot FILE   render the window once both sides are compared (first difference selected), exit
//   --measure           print time to first paint and per-keystroke filter times as JSON, exit
//   --dock NAME         raise the details, rules or suggestions dock
//   --size WxH          the window's size for --screenshot and --measure (default 1500x950)

#include "main_window.h"

#include "formats/rank_sets.h"
#include "formats/torchscript_reader.h"
#include "models/aligned_tree_model.h"
#include "util/error.h"
#include "views/diff_view.h"
#include "views/summary_bar.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QLineEdit>
#include <QPixmap>
#include <QTimer>
#include <QTreeView>

#include <algorithm>
#include <cstdio>
#include <string>
#include <ctime>
#include <unistd.h>

namespace sl::gui {

namespace {

// Per keystroke: set the filter (the model rebuilds when the rows change) and repaint both trees, as typing
// would. Once with layers folded (the default) and once with every row its own leaf.
std::vector<double> typeFilter(MainWindow& window)
{
    const QString typed = QStringLiteral("layers.1.mlp");
    std::vector<double> times;
    QLineEdit* edit = window.summaryBar()->filterEdit();
    edit->clear();
    for (int i = 1; i <= typed.size(); ++i) {
        QElapsedTimer t;
        t.start();
        edit->setText(typed.left(i));
        window.diffView()->viewA()->viewport()->repaint();
        window.diffView()->viewB()->viewport()->repaint();
        times.push_back(static_cast<double>(t.nsecsElapsed()) / 1e6);
    }
    edit->clear();
    return times;
}

void printSeries(const char* name, std::vector<double> times)
{
    std::printf("\"%s_ms\": [", name);
    for (size_t i = 0; i < times.size(); ++i)
        std::printf("%s%.2f", i ? ", " : "", times[i]);
    std::sort(times.begin(), times.end());
    std::printf("], \"%s_median_ms\": %.2f, \"%s_max_ms\": %.2f", name, times[times.size() / 2], name, times.back());
}

void measureFilter(MainWindow& window, double firstPaint, double diffMs)
{
    std::printf("{\"first_paint_ms\": %.1f, \"diff_ms\": %.1f, \"rows\": %zu, ", firstPaint, diffMs,
        window.comparison()->snapshot()->diff.rows.size());
    printSeries("filter_folded", typeFilter(window));
    window.model()->setFolding(false);
    std::printf(", ");
    printSeries("filter_unfolded", typeFilter(window));
    std::printf("}\n");
    std::fflush(stdout);
}

} // namespace

static int run(int argc, char** argv)
{
    QElapsedTimer sinceStart;
    sinceStart.start();
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("StateLens"));
    QApplication::setOrganizationName(QStringLiteral("StateLens"));
    QApplication::setApplicationVersion(QStringLiteral(STATELENS_VERSION));
#ifdef STATELENS_APP_ID
    // The installed desktop entry's name (resources/packaging/CMakeLists.txt): Wayland shells match the window to
    // the menu entry and its icon by it.
    QGuiApplication::setDesktopFileName(QStringLiteral(STATELENS_APP_ID));
#endif

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("Shows why a checkpoint will not load into a model."));
    parser.addHelpOption();
    parser.addPositionalArgument(QStringLiteral("A"),
        QStringLiteral("Checkpoint (what is loaded): a file, a folder or a quoted pattern ('ckpt/model_rank*.pt')"));
    parser.addPositionalArgument(QStringLiteral("B"),
        QStringLiteral("Model or second checkpoint (what receives it); more than two paths are grouped into A and B "
                       "by rank set, as `statelens diff` does"));
    QCommandLineOption rulesOption(QStringLiteral("rules"), QStringLiteral("A rule file to start with"), QStringLiteral("FILE"));
    QCommandLineOption screenshot(QStringLiteral("screenshot"), QStringLiteral("Save a PNG of the window and exit"), QStringLiteral("FILE"));
    QCommandLineOption measure(QStringLiteral("measure"), QStringLiteral("Print time to first paint and filter times, and exit"));
    QCommandLineOption dock(QStringLiteral("dock"), QStringLiteral("Raise this dock: details, rules or suggestions"), QStringLiteral("NAME"));
    dock.setFlags(QCommandLineOption::HiddenFromHelp);
    screenshot.setFlags(QCommandLineOption::HiddenFromHelp);
    measure.setFlags(QCommandLineOption::HiddenFromHelp);
    QCommandLineOption size(QStringLiteral("size"), QStringLiteral("Window size for --screenshot"), QStringLiteral("WxH"));
    size.setFlags(QCommandLineOption::HiddenFromHelp);
    parser.addOptions({ rulesOption, screenshot, measure, dock, size });
    parser.process(app);
    const bool scripted = parser.isSet(screenshot) || parser.isSet(measure);

    MainWindow window;
    if (scripted) { // the same picture on every machine: no remembered layout
        const QStringList wh = parser.value(size).split(QLatin1Char('x'));
        const int w = wh.size() == 2 ? wh[0].toInt() : 0, h = wh.size() == 2 ? wh[1].toInt() : 0;
        window.resize(w > 0 ? w : 1500, h > 0 ? h : 950);
    }
    if (parser.isSet(rulesOption)) {
        QString error;
        if (!window.loadRules(parser.value(rulesOption), &error)) {
            std::fprintf(stderr, "statelens: %s\n", error.toLocal8Bit().constData());
            return 2;
        }
    }
    std::vector<std::string> arguments;
    for (const QString& a : parser.positionalArguments())
        arguments.push_back(a.toStdString());
    std::vector<std::vector<std::string>> sides;
    try {
        if (!arguments.empty())
            sides = splitIntoSides(arguments, 1, 2, "the window");
    } catch (const LoadError& e) {
        std::fprintf(stderr, "statelens: %s\n", e.what());
        return 2;
    }
    if (sides.empty())
        window.openDemo();
    for (size_t i = 0; i < sides.size(); ++i) {
        QStringList paths;
        for (const std::string& p : sides[i])
            paths << QString::fromStdString(p);
        window.open(i == 0 ? Side::A : Side::B, paths);
    }
    window.show();
    if (parser.isSet(dock))
        if (auto* d = window.findChild<QDockWidget*>(parser.value(dock)))
            d->raise();

    if (parser.isSet(measure)) {
        QObject::connect(window.comparison(), &Comparison::snapshotChanged, &window, [&] {
            auto snap = window.comparison()->snapshot();
            if (!snap->complete())
                return;
            window.diffView()->viewA()->viewport()->repaint();
            window.diffView()->viewB()->viewport()->repaint();
            // From the launch when the caller says when that was (the benchmark sets it just before exec),
            // else from this module's entry.
            double firstPaint = static_cast<double>(sinceStart.nsecsElapsed()) / 1e6;
            bool given = false;
            const double launch = qEnvironmentVariable("STATELENS_LAUNCH_EPOCH").toDouble(&given);
            if (given) {
                timespec now {};
                clock_gettime(CLOCK_REALTIME, &now);
                firstPaint = (static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9 - launch) * 1e3;
            }
            QObject::disconnect(window.comparison(), &Comparison::snapshotChanged, &window, nullptr);
            QTimer::singleShot(0, &window, [&window, firstPaint, snap] {
                measureFilter(window, firstPaint, snap->milliseconds);
                QApplication::exit(0);
            });
        });
    } else if (parser.isSet(screenshot)) {
        const QString out = parser.value(screenshot);
        QObject::connect(&window, &MainWindow::idle, &window, [&window, out] {
            if (!window.comparison()->snapshot()->complete())
                return;
            window.gotoDifference(true);
            // Let the layout settle and paint before grabbing.
            QTimer::singleShot(300, &window, [&window, out] {
                const bool ok = window.grab().save(out);
                std::fprintf(stderr, "statelens: screenshot %s %s\n", out.toLocal8Bit().constData(), ok ? "written" : "failed");
                QApplication::exit(ok ? 0 : 2);
            });
        });
    } else {
        QTimer::singleShot(0, &window, [&window] { window.offerRecovery(); });
    }
    if (scripted)
        QTimer::singleShot(120000, &app, [] {
            std::fprintf(stderr, "statelens: gave up waiting for the comparison\n");
            QApplication::exit(3);
        });
    return app.exec();
}

} // namespace sl::gui

// The module's one export, looked up by main() with dlsym.
extern "C" __attribute__((visibility("default"))) int statelens_gui_main(int argc, char** argv)
{
    // This module holds its own copy of the core, so it sets the TorchScript worker too: this process's
    // executable (statelens), whose hidden subcommand loads TorchScript archives in a child process.
    char exe[4096];
    ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0)
        sl::setTorchScriptWorker(sl::torchScriptWorkerFor(std::string(exe, static_cast<size_t>(n))));
    return sl::gui::run(argc, argv);
}
