// The two sides of diff and suggest: a path each and an optional container (--container-a/--container-b).

#include "cli/commands.h"

#include "formats/loader.h"

#include <future>

namespace sl::cli {

void addSideOptions(CLI::App* cmd, SideOption& side, const std::string& positional, const std::string& letter,
    const std::string& description)
{
    cmd->add_option(positional, side.path, description)->required();
    cmd->add_option("--container-" + letter, side.container,
           "Select this container of " + positional + " instead of the picked one (see `ls --containers`)")
        ->each([&side](const std::string&) { side.containerGiven = true; });
}

const Source& openSide(const SideOption& side)
{
    OpenOptions options;
    if (side.containerGiven)
        options.container = side.container;
    return keepUntilExit(openSource(side.path, options));
}

std::pair<const Source&, const Source&> openBoth(const SideOption& a, const SideOption& b)
{
    auto second = std::async(std::launch::async, [&b]() -> const Source& { return openSide(b); });
    const Source& first = openSide(a);
    return { first, second.get() };
}

} // namespace sl::cli
