// The sources a command reads: one path, the rank files of one set, or (diff, suggest) two sides split from
// the positional paths, each with an optional container (--container, --container-a, --container-b).

#include "cli/commands.h"

#include "formats/rank_sets.h"
#include "io/file_trust.h"

#include <future>

namespace sl::cli {

void addTwoSides(CLI::App* cmd, TwoSides& sides)
{
    cmd->add_option("paths", sides.arguments,
           "A (the checkpoint, what is loaded) then B (the model, what receives it: a live dump, load-error text or "
           "checkpoint). Each is a file, a folder or a quoted pattern ('ckpt/model_rank*.pt'); more than two paths "
           "are grouped into the two sides by rank set (model_rank0.pt model_rank1.pt model.sldump.json)")
        ->required();
    // A plain pair, not a structured binding: clang 14 cannot capture those in lambdas.
    for (const auto& option : { std::pair { &sides.a, "a" }, std::pair { &sides.b, "b" } }) {
        auto* side = option.first;
        const char* letter = option.second;
        cmd->add_option(std::string("--container-") + letter, side->container,
               std::string("Select this container of ") + (*letter == 'a' ? "A" : "B")
                   + " instead of the picked one (see `ls --containers`)")
            ->each([side](const std::string&) { side->containerGiven = true; });
    }
}

void splitTwoSides(TwoSides& sides, const std::string& command)
{
    auto split = splitIntoSides(sides.arguments, 2, 2, command);
    sides.a.paths = std::move(split[0]);
    sides.b.paths = std::move(split[1]);
}

std::string shellWords(const std::vector<std::string>& arguments)
{
    std::string out;
    for (const std::string& a : arguments) {
        const bool plain = !a.empty()
            && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:+,@%")
                == std::string::npos;
        std::string word = "'";
        for (char c : a)
            word += c == '\'' ? std::string("'\\''") : std::string(1, c);
        out += (out.empty() ? "" : " ") + (plain ? a : word + "'");
    }
    return out;
}

const Source& openSide(const SideOption& side, OpenOptions options)
{
    if (side.containerGiven)
        options.container = side.container;
    std::vector<std::string> paths;
    for (const std::string& p : side.paths)
        for (std::string& found : expandPattern(p))
            paths.push_back(std::move(found));
    const Source& s = keepUntilExit(openPaths(paths, options));
    // What the source names is an input even where its reader has not opened it (yet): -o may not reach it.
    recordInput(s.path);
    for (const std::string& f : s.files)
        recordInput(f);
    return s;
}

std::pair<const Source&, const Source&> openBoth(const SideOption& a, const SideOption& b)
{
    // Each side on a core of its own: neither reads its header on the other's core too.
    OpenOptions options;
    options.parallelHeader = false;
    options.shardPrefetchFrom = SIZE_MAX;
    auto second = std::async(std::launch::async, [&b, options]() -> const Source& { return openSide(b, options); });
    const Source& first = openSide(a, options);
    return { first, second.get() };
}

} // namespace sl::cli
