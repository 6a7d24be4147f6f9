// statelens dump-helper [DIR]: the live-dump helper, statelens_dump.py, for the Python environments a
// package cannot reach (conda, a venv, a cluster's image).
//
// With DIR it writes the helper into DIR from the bytes embedded in this binary (resources/CMakeLists.txt),
// so a build tree and an install write the same file, the one this statelens reads the dumps of. Without
// DIR it prints where this statelens's install put it (the .deb: a module of the system Python).

#include "cli/commands.h"

#include "embedded_files.h"
#include "install_layout.h"
#include "util/atomic_file.h"
#include "util/error.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>

namespace sl::cli {

namespace {

namespace fs = std::filesystem;

constexpr const char* kHelperName = "statelens_dump.py";

std::string_view helperBytes()
{
    const auto& file = sl::helper::files().front();
    return { reinterpret_cast<const char*>(file.bytes.data()), file.bytes.size() };
}

// Whether the regular file at `path` holds exactly `bytes` (read only when the sizes agree).
bool holdsExactly(const fs::path& path, std::string_view bytes)
{
    std::error_code ec;
    if (fs::file_size(path, ec) != bytes.size() || ec)
        return false;
    std::ifstream in(path, std::ios::binary);
    const std::string existing((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return in.good() || in.eof() ? existing == bytes : false;
}

int writeHelper(const std::string& dirArgument, bool force)
{
    const fs::path dir(dirArgument);
    std::error_code ec;
    // `dump-helper env/statelens_dump.py` would otherwise make a folder of that name.
    if (dir.extension() == ".py" && !fs::is_directory(dir, ec))
        throw LoadError(dirArgument, std::string("give the folder to write into; the file it gets is named ") + kHelperName);
    if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
        throw LoadError(dirArgument, "is not a folder");
    fs::create_directories(dir);

    const fs::path target = dir / kHelperName;
    const std::string_view bytes = helperBytes();
    const fs::file_status st = fs::status(target, ec); // through a symlink, as the write would go
    bool replacing = false;
    if (fs::exists(st)) {
        if (!fs::is_regular_file(st))
            throw LoadError(target.string(), "exists and is not a regular file; left as it is");
        if (holdsExactly(target, bytes)) {
            // Not rewritten: its timestamps stay, and a read-only copy is no error.
            std::fprintf(stderr, "statelens: %s is already this statelens's helper; left as it is\n",
                terminalText(target.string()).c_str());
            std::printf("%s\n", target.c_str());
            return 0;
        }
        if (!force)
            throw LoadError(target.string(),
                "exists and differs from this statelens's helper (another version, or a different file); left "
                "as it is. Pass --force to replace it");
        replacing = true;
    }
    writeFileAtomically(target.string(), bytes); // a temporary file beside it, renamed over it
    if (replacing)
        std::fprintf(stderr, "statelens: replaced %s, which differed from this statelens's helper\n",
            terminalText(target.string()).c_str());
    std::printf("%s\n", target.c_str());
    return 0;
}

int printInstalledHelper()
{
    const std::string installed = sl::app::installedDumpHelper();
    if (installed.empty()) {
        std::fprintf(stderr,
            "statelens: this statelens (%s) has no installed %s beside it; write one into a Python environment "
            "with `statelens dump-helper DIR`, DIR being a folder on its sys.path (a venv's or conda env's "
            "site-packages) or your project's folder\n",
            terminalText(sl::app::selfExecutable()).c_str(), kHelperName);
        return 1;
    }
    // stdout holds the path only, for scripts: cp "$(statelens dump-helper)" ...
    std::printf("%s\n", installed.c_str());
    std::fprintf(stderr,
        "statelens: `import statelens_dump` works in the Python that path belongs to; for another environment "
        "(conda, venv): statelens dump-helper DIR\n");
    return 0;
}

} // namespace

Runner addDumpHelperCommand(CLI::App& app)
{
    struct Options {
        std::string dir;
        bool force = false;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("dump-helper",
        "Write the live-dump helper statelens_dump.py into a folder (a venv's or conda env's site-packages), or "
        "print where it is installed");
    cmd->add_option("dir", o->dir, "Folder to write statelens_dump.py into (created if needed)");
    cmd->add_flag("--force", o->force, "Replace a statelens_dump.py there that differs from this statelens's helper");
    return [o]() -> int { return o->dir.empty() ? printInstalledHelper() : writeHelper(o->dir, o->force); };
}

} // namespace sl::cli
