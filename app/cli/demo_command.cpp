// statelens demo DIR: writes the embedded demo pair, so a newcomer can try every command on it.

#include "cli/commands.h"

#include "embedded_files.h"
#include "util/atomic_file.h"

#include <cstdio>
#include <filesystem>
#include <memory>

namespace sl::cli {

Runner addDemoCommand(CLI::App& app)
{
    auto dir = std::make_shared<std::string>();
    CLI::App* demo = app.add_subcommand("demo", "Write the bundled demo pair (checkpoint.pt, model.pt) into a folder");
    demo->add_option("dir", *dir, "Folder to write into (created if needed)")->required();
    return [dir] {
        std::filesystem::create_directories(*dir);
        for (const auto& f : sl::demo::files()) {
            std::string path = (std::filesystem::path(*dir) / f.name).string();
            writeFileAtomically(path, { reinterpret_cast<const char*>(f.bytes.data()), f.bytes.size() });
            std::printf("%s\n", path.c_str());
        }
        return 0;
    };
}

} // namespace sl::cli
