// The GUI half of statelens, built as libstatelens-gui.so: `statelens [A [B]]`, or the demo pair when no
// file is given.

#include "main_window.h"

#include "formats/torchscript_reader.h"

#include <QApplication>
#include <QCommandLineParser>

#include <string>
#include <unistd.h>

namespace sl::gui {

static int run(int argc, char** argv)
{
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("StateLens"));
    QApplication::setOrganizationName(QStringLiteral("StateLens"));
    QApplication::setApplicationVersion(QStringLiteral(STATELENS_VERSION));

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("Shows why a checkpoint will not load into a model."));
    parser.addHelpOption();
    parser.addPositionalArgument(QStringLiteral("A"), QStringLiteral("Checkpoint (what is loaded)"));
    parser.addPositionalArgument(QStringLiteral("B"), QStringLiteral("Model or second checkpoint (what receives it)"));
    parser.process(app);

    MainWindow window;
    const QStringList files = parser.positionalArguments();
    if (files.isEmpty()) {
        window.openDemo();
    } else {
        window.openA(files.value(0));
        if (files.size() > 1)
            window.openB(files.value(1));
    }
    window.show();
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
