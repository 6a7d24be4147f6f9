#include "rank_sets.h"

#include "formats/loader.h"
#include "formats/rank_files_reader.h"
#include "util/error.h"

#include <glob.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <optional>

namespace sl {

namespace {

namespace fs = std::filesystem;

// Matches beyond this are refused: a pattern is one side of a save, not a file system walk.
constexpr size_t kMaxMatches = 65536;

bool isSeparator(char c)
{
    return c == '_' || c == '-' || c == '.';
}
bool isDigit(char c)
{
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
}

// Where the rank number sits in `stem`: [begin, end) covers "rank", one separator and the digits when
// `fromRankWord`, else the last run of digits. Digits are read up to 9 (a rank, not an id).
struct RankSpan {
    size_t begin = 0;
    size_t end = 0;
    int64_t rank = -1;
    bool fromRankWord = false;
};

std::optional<RankSpan> rankWordSpan(const std::string& name)
{
    std::string l(name);
    for (char& c : l)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::optional<RankSpan> found;
    for (size_t at = l.find("rank"); at != std::string::npos; at = l.find("rank", at + 1)) {
        size_t i = at + 4;
        if (i < l.size() && isSeparator(l[i]))
            ++i;
        int64_t r = 0;
        size_t digits = 0;
        for (; i < l.size() && isDigit(l[i]) && digits < 9; ++i, ++digits)
            r = r * 10 + (l[i] - '0');
        if (digits)
            found = RankSpan { at, i, r, true };
    }
    return found;
}

std::optional<RankSpan> lastNumberSpan(const std::string& stem)
{
    const size_t last = stem.find_last_of("0123456789");
    if (last == std::string::npos)
        return std::nullopt;
    size_t begin = last;
    while (begin > 0 && isDigit(stem[begin - 1]) && last - begin < 8)
        --begin;
    return RankSpan { begin, last + 1, std::stoll(stem.substr(begin, last - begin + 1)), false };
}

std::string stemOf(const std::string& filename)
{
    return fs::path(filename).stem().string();
}

// `stem` without [begin, end), the separators on either side of the cut merged into one.
std::string cutOut(const std::string& stem, size_t begin, size_t end)
{
    std::string left = stem.substr(0, begin);
    std::string right = stem.substr(end);
    while (!left.empty() && isSeparator(left.back()) && (right.empty() || isSeparator(right.front())))
        left.pop_back();
    if (left.empty())
        while (!right.empty() && isSeparator(right.front()))
            right.erase(0, 1);
    return left + right;
}

std::string setKey(const std::string& path, const std::string& set)
{
    const fs::path p(path);
    return p.parent_path().string() + '/' + set + '\n' + p.extension().string();
}

} // namespace

int64_t rankInName(const std::string& filename)
{
    auto span = rankWordSpan(filename);
    return span ? span->rank : -1;
}

int64_t lastNumberInName(const std::string& filename)
{
    auto span = lastNumberSpan(stemOf(filename));
    return span ? span->rank : -1;
}

RankSetName rankSetName(const std::string& filename)
{
    const std::string stem = stemOf(filename);
    std::optional<RankSpan> span = rankWordSpan(stem);
    if (!span)
        span = lastNumberSpan(stem);
    if (!span)
        return {};
    RankSetName out;
    out.rank = span->rank;
    out.fromRankWord = span->fromRankWord;
    out.set = cutOut(stem, span->begin, span->end);
    if (out.set.empty())
        out.set = span->fromRankWord ? "rank" : "ranks";
    return out;
}

std::vector<std::vector<std::string>> groupBySet(const std::vector<std::string>& paths)
{
    std::vector<std::vector<std::string>> groups;
    std::map<std::string, size_t> byKey;
    for (const std::string& p : paths) {
        std::error_code ec;
        const RankSetName name
            = fs::is_directory(p, ec) ? RankSetName {} : rankSetName(fs::path(p).filename().string());
        if (name.set.empty()) {
            groups.push_back({ p });
            continue;
        }
        auto [it, inserted] = byKey.try_emplace(setKey(p, name.set), groups.size());
        if (inserted)
            groups.emplace_back();
        groups[it->second].push_back(p);
    }
    return groups;
}

bool isPattern(const std::string& argument)
{
    std::error_code ec;
    return argument.find_first_of("*?[") != std::string::npos && !fs::exists(argument, ec);
}

std::vector<std::string> expandPattern(const std::string& argument)
{
    if (!isPattern(argument))
        return { argument };
    glob_t g {};
    const int rc = ::glob(argument.c_str(), 0, nullptr, &g);
    std::vector<std::string> out;
    if (rc == 0)
        for (size_t i = 0; i < g.gl_pathc && out.size() <= kMaxMatches; ++i)
            out.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    if (rc == GLOB_NOSPACE)
        throw LoadError(argument, "out of memory while expanding the pattern");
    if (out.empty())
        throw LoadError(argument, "the pattern matches no file");
    if (out.size() > kMaxMatches)
        throw LoadError(argument, "the pattern matches more than " + std::to_string(kMaxMatches) + " files");
    std::sort(out.begin(), out.end()); // byte order, whatever the locale
    return out;
}

std::string describePaths(const std::vector<std::string>& paths)
{
    if (paths.size() == 1)
        return paths.front();
    if (paths.empty())
        return "(no files)";
    const fs::path first(paths.front());
    const std::string stem = stemOf(first.filename().string());
    std::optional<RankSpan> span = rankWordSpan(stem);
    if (!span)
        span = lastNumberSpan(stem);
    const std::string count = " (" + std::to_string(paths.size()) + " files)";
    if (!span || groupBySet(paths).size() != 1)
        return paths.front() + " and " + std::to_string(paths.size() - 1) + " more";
    // The digits become '*', as the user would write the set as a pattern.
    size_t digits = span->end;
    while (digits > span->begin && isDigit(stem[digits - 1]))
        --digits;
    const std::string pattern = stem.substr(0, digits) + "*" + stem.substr(span->end) + first.extension().string();
    return (first.parent_path() / pattern).string() + count;
}

std::vector<std::vector<std::string>> splitIntoSides(
    const std::vector<std::string>& arguments, size_t minSides, size_t maxSides, const std::string& command)
{
    std::vector<std::vector<std::string>> sides;
    if (arguments.size() <= maxSides) {
        for (const std::string& a : arguments)
            sides.push_back(expandPattern(a));
    } else {
        // Plain paths grouped by set in order of first appearance; each pattern stays one side of its own.
        std::vector<std::string> plain;
        std::vector<std::pair<size_t, std::vector<std::string>>> patterns; // at the place of its argument
        for (const std::string& a : arguments) {
            if (isPattern(a))
                patterns.emplace_back(plain.size(), expandPattern(a));
            else
                plain.push_back(a);
        }
        std::vector<size_t> firstArgument; // per group of plain paths: where its first path stood
        for (auto& g : groupBySet(plain)) {
            firstArgument.push_back(
                static_cast<size_t>(std::find(plain.begin(), plain.end(), g.front()) - plain.begin()));
            sides.push_back(std::move(g));
        }
        for (auto it = patterns.rbegin(); it != patterns.rend(); ++it) {
            const size_t at = static_cast<size_t>(
                std::lower_bound(firstArgument.begin(), firstArgument.end(), it->first) - firstArgument.begin());
            sides.insert(sides.begin() + static_cast<std::ptrdiff_t>(at), std::move(it->second));
            firstArgument.insert(firstArgument.begin() + static_cast<std::ptrdiff_t>(at), it->first);
        }
    }
    if (sides.size() >= minSides && sides.size() <= maxSides)
        return sides;
    std::string listed;
    for (size_t i = 0; i < sides.size() && i < 4; ++i)
        listed += (i ? ", " : "") + describePaths(sides[i]);
    if (sides.size() > 4)
        listed += ", ...";
    const std::string how = "give each side as one path (a file, a folder of rank files, or a quoted pattern such as "
                            "'ckpt/model_rank*.pt') or as the rank files of one set (model_rank0.pt model_rank1.pt)";
    const std::string wanted = minSides == maxSides ? std::to_string(maxSides)
                                                    : std::to_string(minSides) + " or " + std::to_string(maxSides);
    const std::string& blamed = sides.size() > maxSides ? sides[maxSides].front()
        : arguments.empty()                             ? command
                                                        : arguments.front();
    throw LoadError(blamed,
        std::to_string(arguments.size()) + " paths make " + std::to_string(sides.size()) + " side(s) (" + listed + "); "
            + command + " takes " + wanted + ": " + how);
}

Source openPaths(const std::vector<std::string>& paths, const OpenOptions& options)
{
    if (paths.size() == 1)
        return openSource(paths.front(), options);
    return openRankFiles(paths, options);
}

} // namespace sl
