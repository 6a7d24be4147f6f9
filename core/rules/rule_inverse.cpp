#include "rules/rule_inverse.h"

#include <algorithm>
#include <optional>

namespace sl {

namespace {

bool isAlnum(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

struct Piece {
    bool group = false;
    std::string text; // literal text, or the group's inner regex
    std::string name; // a named group's name
};

struct ParsedPattern {
    bool start = false;
    bool end = false;
    std::vector<Piece> pieces;
};

// The pattern as literals and flat groups, or why it is not that.
std::variant<ParsedPattern, std::string> parsePattern(std::string_view p)
{
    ParsedPattern out;
    if (!p.empty() && p.front() == '^') {
        out.start = true;
        p.remove_prefix(1);
    }
    if (!p.empty() && p.back() == '$') {
        size_t backslashes = 0;
        for (size_t k = p.size() - 1; k > 0 && p[k - 1] == '\\'; --k)
            ++backslashes;
        if (backslashes % 2 == 0) {
            out.end = true;
            p.remove_suffix(1);
        }
    }
    auto literal = [&](char c) {
        if (out.pieces.empty() || out.pieces.back().group)
            out.pieces.emplace_back();
        out.pieces.back().text += c;
    };
    for (size_t i = 0; i < p.size(); ++i) {
        const char c = p[i];
        if (c == '\\') {
            if (i + 1 >= p.size() || isAlnum(p[i + 1]))
                return std::string("the pattern has a class escape (\\") + (i + 1 < p.size() ? p[i + 1] : ' ') + ") outside a group";
            literal(p[++i]);
            continue;
        }
        if (c == '(') {
            Piece g;
            g.group = true;
            size_t j = i + 1;
            if (p.substr(j, 3) == "?P<" || (p.substr(j, 2) == "?<" && p.substr(j, 3) != "?<=" && p.substr(j, 3) != "?<!")) {
                const size_t nameStart = p.find('<', j) + 1;
                const size_t close = p.find('>', nameStart);
                if (close == std::string_view::npos)
                    return std::string("unterminated group name");
                g.name = std::string(p.substr(nameStart, close - nameStart));
                j = close + 1;
            } else if (j < p.size() && p[j] == '?') {
                return std::string("the pattern has a non-capturing or lookaround group");
            }
            // The inside: anything but parentheses (escapes and classes skipped over).
            bool inClass = false;
            size_t k = j;
            for (; k < p.size(); ++k) {
                if (p[k] == '\\') {
                    ++k;
                    continue;
                }
                if (inClass) {
                    inClass = p[k] != ']';
                    continue;
                }
                if (p[k] == '[')
                    inClass = true;
                else if (p[k] == '(')
                    return std::string("the pattern has nested groups");
                else if (p[k] == ')')
                    break;
            }
            if (k >= p.size())
                return std::string("unbalanced parenthesis");
            g.text = std::string(p.substr(j, k - j));
            if (g.text.find('|') != std::string::npos)
                return std::string("a group holds alternatives");
            out.pieces.push_back(std::move(g));
            i = k;
            continue;
        }
        if (std::string_view(".[]{}*+?|^$)").find(c) != std::string_view::npos)
            return std::string("the pattern has '") + c + "' outside a group";
        literal(c);
    }
    return out;
}

struct ReplacementPiece {
    int group = -1; // 1-based group number, or -1 for literal text
    std::string text;
};

std::variant<std::vector<ReplacementPiece>, std::string> parseReplacementText(std::string_view r, const ParsedPattern& pattern)
{
    std::vector<ReplacementPiece> out;
    auto literal = [&](char c) {
        if (out.empty() || out.back().group >= 0)
            out.emplace_back();
        out.back().text += c;
    };
    size_t groupCount = 0;
    for (const auto& p : pattern.pieces)
        groupCount += p.group;
    for (size_t i = 0; i < r.size(); ++i) {
        if (r[i] != '\\') {
            literal(r[i]);
            continue;
        }
        if (i + 1 >= r.size())
            return std::string("the replacement ends with a backslash");
        const char n = r[i + 1];
        int group = -1;
        if (n == '\\') {
            literal('\\');
            ++i;
            continue;
        }
        if (n == 'g') {
            const size_t close = r.find('>', i);
            if (i + 2 >= r.size() || r[i + 2] != '<' || close == std::string_view::npos)
                return std::string("bad \\g reference");
            const std::string ref(r.substr(i + 3, close - i - 3));
            if (!ref.empty() && std::all_of(ref.begin(), ref.end(), [](char c) { return c >= '0' && c <= '9'; })) {
                group = std::stoi(ref.substr(0, 6));
            } else {
                int number = 0;
                for (const auto& p : pattern.pieces)
                    if (p.group) {
                        ++number;
                        if (p.name == ref)
                            group = number;
                    }
            }
            i = close;
        } else if (n >= '1' && n <= '9') {
            group = n - '0';
            if (i + 2 < r.size() && r[i + 2] >= '0' && r[i + 2] <= '9' && static_cast<size_t>(group * 10 + (r[i + 2] - '0')) <= groupCount) {
                group = group * 10 + (r[i + 2] - '0');
                ++i;
            }
            ++i;
        } else {
            return std::string("the replacement has an escape (\\") + n + ")";
        }
        if (group < 1 || static_cast<size_t>(group) > groupCount)
            return std::string("the replacement refers to a group the pattern does not have");
        out.push_back({ group, {} });
    }
    return out;
}

} // namespace

std::string escapePattern(std::string_view literal)
{
    std::string out;
    out.reserve(literal.size() + 8);
    for (char c : literal) {
        if (std::string_view(".^$*+?{}[]\\|()#").find(c) != std::string_view::npos)
            out += '\\';
        out += c;
    }
    return out;
}

std::string escapeReplacement(std::string_view literal)
{
    std::string out;
    out.reserve(literal.size());
    for (char c : literal) {
        if (c == '\\')
            out += '\\';
        out += c;
    }
    return out;
}

std::variant<Rule, std::string> invertRule(const Rule& rule)
{
    if (rule.drop)
        return std::string("a drop rule has no inverse");
    auto parsed = parsePattern(rule.pattern);
    if (auto* why = std::get_if<std::string>(&parsed))
        return *why;
    const ParsedPattern& p = std::get<ParsedPattern>(parsed);
    auto parsedReplacement = parseReplacementText(rule.replacement, p);
    if (auto* why = std::get_if<std::string>(&parsedReplacement))
        return *why;
    const auto& r = std::get<std::vector<ReplacementPiece>>(parsedReplacement);

    std::vector<const Piece*> groups;
    for (const auto& piece : p.pieces)
        if (piece.group)
            groups.push_back(&piece);
    std::vector<int> uses(groups.size() + 1, 0);
    std::vector<int> newNumber(groups.size() + 1, 0);
    int next = 0;
    Rule inverse;
    if (p.start)
        inverse.pattern += '^';
    for (const auto& piece : r) {
        if (piece.group < 0) {
            inverse.pattern += escapePattern(piece.text);
            continue;
        }
        if (++uses[static_cast<size_t>(piece.group)] > 1)
            return "group " + std::to_string(piece.group) + " is used twice in the replacement";
        newNumber[static_cast<size_t>(piece.group)] = ++next;
        inverse.pattern += "(" + groups[static_cast<size_t>(piece.group - 1)]->text + ")";
    }
    for (size_t g = 1; g < uses.size(); ++g)
        if (uses[g] == 0)
            return "group " + std::to_string(g) + " is not used in the replacement, so what it matched is lost";
    const bool emptyBody = inverse.pattern.empty() || inverse.pattern == "^";
    if (p.end)
        inverse.pattern += '$';
    if (emptyBody && !p.start && !p.end)
        return std::string("the replacement is empty and the pattern is not anchored: nothing marks where to put the text back");
    int number = 0;
    for (const auto& piece : p.pieces) {
        if (!piece.group) {
            inverse.replacement += escapeReplacement(piece.text);
            continue;
        }
        ++number;
        inverse.replacement += "\\g<" + std::to_string(newNumber[static_cast<size_t>(number)]) + ">";
    }
    inverse.note = rule.note.empty() ? std::string("inverse") : "inverse of: " + rule.note;
    inverse.enabled = rule.enabled;
    return inverse;
}

InvertedRules invertRules(const RuleSet& rules)
{
    InvertedRules out;
    out.rules.version = rules.version;
    for (size_t i = rules.rules.size(); i-- > 0;) {
        const Rule& rule = rules.rules[i];
        if (rule.drop || !rule.enabled)
            continue;
        auto inverse = invertRule(rule);
        if (auto* why = std::get_if<std::string>(&inverse))
            out.problems.push_back("rule " + std::to_string(i + 1) + ": " + *why);
        else
            out.rules.rules.push_back(std::move(std::get<Rule>(inverse)));
    }
    return out;
}

} // namespace sl
