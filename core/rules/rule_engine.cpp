#include "rule_engine.h"

#include "util/utf8.h"
#include "util/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>

namespace sl {

namespace {

bool isDigit(char c) { return c >= '0' && c <= '9'; }
bool isAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

PatternError error(size_t offset, std::string message, bool inReplacement = false)
{
    PatternError e;
    e.offset = offset;
    e.message = std::move(message);
    e.inReplacement = inReplacement;
    return e;
}

// Walks a pattern and refuses what Python's `re` and PCRE2 read differently. Returns the pattern PCRE2
// should compile (Python's \Z becomes PCRE2's \z, which means the same), or an error.
struct Checked {
    std::string pcre;
    std::optional<PatternError> problem;
    std::vector<std::string> groupNames;
    unsigned groupCount = 0;
};

Checked checkPattern(std::string_view p)
{
    Checked out;
    out.pcre.reserve(p.size() + 4);
    bool inClass = false;
    for (size_t i = 0; i < p.size(); ++i) {
        char c = p[i];
        if (c == '\\') {
            if (i + 1 >= p.size()) {
                out.problem = error(i, "the pattern ends with a lone backslash");
                return out;
            }
            char n = p[i + 1];
            static constexpr std::string_view kRefused = "KRhHvVNpPXCzGEQecokg";
            if (n == 'Z' && !inClass) {
                out.pcre += "\\z"; // Python's \Z is the absolute end, which PCRE2 spells \z
                ++i;
                continue;
            }
            if (kRefused.find(n) != std::string_view::npos) {
                out.problem = error(i, std::string("\\") + n + " means different things in Python and PCRE2 (or exists in one only)");
                return out;
            }
            if (n == 'x' && i + 2 < p.size() && p[i + 2] == '{') {
                out.problem = error(i, "\\x{...} is PCRE2 only; use \\xHH");
                return out;
            }
            if (n == '0' || (isDigit(n) && inClass)) {
                out.problem = error(i, "octal escapes are read differently by Python and PCRE2");
                return out;
            }
            out.pcre += c;
            out.pcre += n;
            ++i;
            continue;
        }
        if (inClass) {
            if (c == '[' && i + 1 < p.size() && (p[i + 1] == ':' || p[i + 1] == '.' || p[i + 1] == '=')) {
                out.problem = error(i, "POSIX classes like [:alpha:] are PCRE2 only (Python reads them literally)");
                return out;
            }
            if (c == ']')
                inClass = false;
            out.pcre += c;
            continue;
        }
        switch (c) {
        case '[':
            inClass = true;
            out.pcre += c;
            // A ']' right after '[' or '[^' is a literal in both.
            if (i + 1 < p.size() && p[i + 1] == '^') {
                out.pcre += '^';
                ++i;
            }
            if (i + 1 < p.size() && p[i + 1] == ']') {
                out.pcre += ']';
                ++i;
            }
            continue;
        case '{':
            if (i + 1 < p.size() && p[i + 1] == ',') {
                out.problem = error(i, "{,n} is {0,n} in Python but a literal in PCRE2; write {0,n}");
                return out;
            }
            break;
        case '*':
        case '+':
        case '?':
        case '}':
            if (i + 1 < p.size() && p[i + 1] == '+') {
                out.problem = error(i + 1, "possessive quantifiers need Python 3.11; they are not accepted in rules");
                return out;
            }
            break;
        case '(': {
            if (i + 1 < p.size() && p[i + 1] == '*') {
                out.problem = error(i, "(*VERB) controls are PCRE2 only");
                return out;
            }
            if (i + 1 >= p.size() || p[i + 1] != '?') {
                ++out.groupCount;
                break;
            }
            std::string_view rest = p.substr(i + 2);
            auto starts = [&](std::string_view s) { return rest.substr(0, s.size()) == s; };
            if (starts(":") || starts("=") || starts("!") || starts("<=") || starts("<!") || starts("#")
                || starts("P=")) {
                break;
            }
            if (starts("P<")) {
                size_t close = rest.find('>');
                if (close == std::string_view::npos) {
                    out.problem = error(i, "unterminated group name");
                    return out;
                }
                out.groupNames.emplace_back(rest.substr(2, close - 2));
                ++out.groupCount;
                break;
            }
            if (starts("(")) {
                // (?(1)yes|no) conditionals: both engines know them by number or name.
                break;
            }
            // Inline flags: (?imsx) at the start, or scoped (?i:...). Python's a/L/u flags have no PCRE2 twin.
            size_t j = 0;
            while (j < rest.size() && (rest[j] == 'i' || rest[j] == 'm' || rest[j] == 's' || rest[j] == 'x' || rest[j] == '-'))
                ++j;
            if (j > 0 && j < rest.size() && rest[j] == ':')
                break;
            if (j > 0 && j < rest.size() && rest[j] == ')') {
                if (i != 0) {
                    out.problem = error(i, "global flags must come first in the pattern (Python refuses them elsewhere)");
                    return out;
                }
                break;
            }
            out.problem = error(i, "this group syntax is not read the same way by Python and PCRE2 "
                                   "(use (?:...), (?P<name>...), (?=...), (?!...), (?<=...), (?<!...))");
            return out;
        }
        default:
            break;
        }
        out.pcre += c;
    }
    if (inClass)
        out.problem = error(p.size(), "unterminated character class");
    return out;
}

// A replacement, parsed once: literal text and group references.
struct ReplacementPart {
    std::string literal;
    int group = -1; // -1: literal only
};

std::optional<PatternError> parseReplacement(std::string_view r, const Checked& pattern, std::vector<ReplacementPart>& parts)
{
    std::string literal;
    auto flush = [&] {
        if (!literal.empty()) {
            parts.push_back({ literal, -1 });
            literal.clear();
        }
    };
    for (size_t i = 0; i < r.size(); ++i) {
        if (r[i] != '\\') {
            literal += r[i];
            continue;
        }
        if (i + 1 >= r.size())
            return error(i, "the replacement ends with a lone backslash", true);
        char n = r[i + 1];
        int group = -1;
        size_t consumed = 2;
        if (n == 'g') {
            size_t open = i + 2;
            size_t close = r.find('>', open);
            if (open >= r.size() || r[open] != '<' || close == std::string_view::npos)
                return error(i, "\\g must be written \\g<name> or \\g<number>", true);
            std::string_view ref = r.substr(open + 1, close - open - 1);
            if (!ref.empty() && std::all_of(ref.begin(), ref.end(), isDigit)) {
                group = std::stoi(std::string(ref.substr(0, 6)));
            } else {
                auto it = std::find(pattern.groupNames.begin(), pattern.groupNames.end(), ref);
                if (it == pattern.groupNames.end())
                    return error(i, "unknown group name '" + std::string(ref) + "'", true);
                group = -2 - static_cast<int>(it - pattern.groupNames.begin()); // resolved below
            }
            consumed = close - i + 1;
        } else if (isDigit(n)) {
            if (n == '0')
                return error(i, "\\0 is an octal escape in Python; not accepted in rules", true);
            group = n - '0';
            if (i + 2 < r.size() && isDigit(r[i + 2]) && static_cast<unsigned>(group * 10 + (r[i + 2] - '0')) <= pattern.groupCount) {
                group = group * 10 + (r[i + 2] - '0');
                consumed = 3;
            }
        } else {
            static constexpr std::string_view kEscapes = "ntrfvab\\";
            static constexpr std::string_view kValues = "\n\t\r\f\v\a\b\\";
            size_t at = kEscapes.find(n);
            if (at != std::string_view::npos) {
                literal += kValues[at];
                ++i;
                continue;
            }
            if (isAsciiLetter(n))
                return error(i, std::string("bad escape \\") + n + " (Python refuses it)", true);
            literal += '\\'; // Python keeps other escapes as they are
            literal += n;
            ++i;
            continue;
        }
        if (group >= 0 && static_cast<unsigned>(group) > pattern.groupCount)
            return error(i, "group " + std::to_string(group) + " does not exist in the pattern", true);
        flush();
        parts.push_back({ {}, group });
        i += consumed - 1;
    }
    flush();
    return std::nullopt;
}

struct CompiledRule {
    size_t index = 0; // in the RuleSet
    // What is needed of the Rule, copied: a compiled set may outlive the RuleSet it was made from.
    bool drop = false;
    std::string pattern; // for error messages (rules that run a regex only)
    pcre2_code* code = nullptr;
    bool jit = false; // compiled to machine code: matched through pcre2_jit_match
    std::vector<ReplacementPart> replacement;
    std::string anchoredPrefix; // a '^literal' start: keys without it cannot match
    // Patterns of plain text, '^text' or 'text', are matched by comparison and search, not PCRE2: real rule
    // files are mostly prefixes ('^_orig_mod\\.', '^module\\.'), and their inverses insert one ('^').
    enum class Plain : uint8_t { No, Prefix, Anywhere };
    Plain plain = Plain::No;
    std::string plainText;
    // Set for '^literal$' patterns: no PCRE2 code at all, a hash lookup (see Step).
    bool exact = false;
    std::string literal; // the key it matches
    std::string literalReplacement;
};

// Punctuation a pattern may escape to mean the character itself.
constexpr std::string_view kEscapedPlain = ".-_/[](){}*+?|^$\\#&~ ,:;<>=!@%'\"`";

// The text of a pattern part made only of plain characters (escaped punctuation allowed); nullopt for
// anything a regex reads differently.
std::optional<std::string> plainText(std::string_view body)
{
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
        const char c = body[i];
        if (c == '\\') {
            if (i + 1 >= body.size() || kEscapedPlain.find(body[i + 1]) == std::string_view::npos)
                return std::nullopt; // \d, \w, \b, ... or a trailing backslash
            out += body[++i];
            continue;
        }
        if (std::string_view(".[](){}*+?|^$").find(c) != std::string_view::npos)
            return std::nullopt;
        out += c;
    }
    return out;
}

// A pattern that matches exactly one key: '^' + literal (escaped punctuation allowed) + '$'.
std::optional<std::string> exactLiteral(std::string_view p)
{
    if (p.size() < 2 || p.front() != '^' || p.back() != '$')
        return std::nullopt;
    return plainText(p.substr(1, p.size() - 2)); // an escaped '$' leaves a trailing backslash: not plain
}

// '^' followed by plain characters (escaped dots count) gives a prefix every match starts with, unless an
// alternative elsewhere ('^a|b') can match without it.
std::string anchoredLiteralPrefix(std::string_view p)
{
    if (p.empty() || p[0] != '^')
        return {};
    bool inClass = false;
    for (size_t i = 0; i < p.size(); ++i) {
        if (p[i] == '\\') {
            ++i;
        } else if (inClass) {
            inClass = p[i] != ']';
        } else if (p[i] == '[') {
            inClass = true;
        } else if (p[i] == '|') {
            return {};
        }
    }
    std::string out;
    for (size_t i = 1; i < p.size(); ++i) {
        char c = p[i];
        if (c == '\\' && i + 1 < p.size() && std::string_view(".-_/[](){}*+?|^$").find(p[i + 1]) != std::string_view::npos) {
            out += p[++i];
            continue;
        }
        if (std::string_view(".[](){}*+?|^$\\").find(c) != std::string_view::npos) {
            // A quantifier makes the last character optional or repeated: it is not part of the prefix.
            if ((c == '*' || c == '?' || c == '{') && !out.empty())
                out.pop_back();
            break;
        }
        out += c;
    }
    return out;
}

// Whether `s` starts with `prefix`, compared inline eight bytes at a time: every key meets every rule's
// prefix, most differ within the first eight bytes, and a call to memcmp for each cost more than the test.
inline bool startsWith(std::string_view s, std::string_view prefix)
{
    if (s.size() < prefix.size())
        return false;
    const char* a = s.data();
    const char* b = prefix.data();
    size_t n = prefix.size();
    for (; n >= 8; a += 8, b += 8, n -= 8) {
        uint64_t x, y;
        std::memcpy(&x, a, 8);
        std::memcpy(&y, b, 8);
        if (x != y)
            return false;
    }
    for (; n > 0; --n)
        if (*a++ != *b++)
            return false;
    return true;
}

// PCRE2 runs with PCRE2_NO_UTF_CHECK, so a key must be strict UTF-8 (no overlong forms, surrogates or
// code points past U+10FFFF) before it is matched; anything else stays unchanged, as no Python str can
// hold it. The JSON writer's check is that strict one.
bool validUtf8(std::string_view s) { return isValidUtf8(s); }

} // namespace

// Not thread-safe: the match data is shared between calls. Use one CompiledRules per thread.
struct CompiledRules::Impl {
    std::vector<CompiledRule> rules;
    std::vector<bool> usable; // by RuleSet index
    RuleMode mode = RuleMode::Chain;
    // The rules in order, with each run of exact-literal rules merged into one hash table: key -> the
    // positions (in `rules`, ascending) of the rules that match it.
    struct Step {
        size_t first = 0; // position in `rules`
        size_t last = 0; // one past
        std::unordered_map<std::string_view, std::vector<uint32_t>> exact; // empty for a regex rule
    };
    std::vector<Step> steps;
    std::vector<int32_t> position; // by RuleSet index: its position in `rules`, or -1
    pcre2_match_data* match = nullptr;
    pcre2_match_context* context = nullptr; // the limits (see rule_engine.h)
    pcre2_jit_stack* jitStack = nullptr;
    ~Impl()
    {
        for (auto& r : rules)
            if (r.code)
                pcre2_code_free(r.code);
        pcre2_match_data_free(match);
        pcre2_match_context_free(context);
        pcre2_jit_stack_free(jitStack);
    }

    // One pcre2_match under the limits. Returns its rc when it matched or found no match; anything else
    // (a limit reached, or an internal error) throws, so a key is never mapped on a guess.
    int run(const CompiledRule& r, std::string_view subject, size_t start, uint32_t options) const
    {
        // pcre2_jit_match skips pcre2_match's checks of its arguments, which cost as much as matching a
        // short key: a diff with 20 rules makes millions of calls. It honours the context's match limit and
        // JIT stack; keys are UTF-8 already (validUtf8).
        const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
        const int rc = r.jit ? pcre2_jit_match(r.code, text, subject.size(), start, options, match, context)
                             : pcre2_match(r.code, text, subject.size(), start, options | PCRE2_NO_UTF_CHECK, match, context);
        if (rc >= 0 || rc == PCRE2_ERROR_NOMATCH)
            return rc;
        // Pattern and key can be long or hold control characters: short, escaped excerpts of both.
        throw RuleMatchError(r.index,
            "rule " + std::to_string(r.index + 1) + " ('" + oneLineMessage(r.pattern, 60) + "')",
            limitProblem(subject, rc));
    }

    static std::string limitProblem(std::string_view key, int rc)
    {
        std::string what;
        bool limit = true;
        switch (rc) {
        case PCRE2_ERROR_MATCHLIMIT:
            what = "took more than " + std::to_string(kRuleMatchLimit) + " backtracking steps (PCRE2's match limit)";
            break;
        case PCRE2_ERROR_DEPTHLIMIT:
            what = "nested more than " + std::to_string(kRuleDepthLimit) + " backtracking points (PCRE2's depth limit)";
            break;
        case PCRE2_ERROR_HEAPLIMIT:
            what = "needed more than " + std::to_string(kRuleHeapLimitKiB / 1024)
                + " MiB to backtrack (PCRE2's heap limit)";
            break;
        case PCRE2_ERROR_JIT_STACKLIMIT:
            what = "needed more than " + std::to_string(kRuleJitStackBytes >> 20) + " MiB of JIT stack";
            break;
        default: {
            PCRE2_UCHAR message[256];
            pcre2_get_error_message(rc, message, sizeof message);
            what = std::string("failed (") + reinterpret_cast<const char*>(message) + ")";
            limit = false;
        }
        }
        return what + " on the key '" + oneLineMessage(std::string(key), 80) + "'"
            + (limit ? ": nested repeats such as (a+)+ backtrack exponentially; write the pattern without them" : "");
    }

    // re.sub of a plain-text pattern: the prefix once, or every occurrence left to right (they cannot
    // overlap, as Python's scan resumes after each match). Only group 0 can be referred to: the text itself.
    static bool substitutePlain(const CompiledRule& r, std::string_view subject, std::string& out)
    {
        size_t at = plainMatch(r, subject);
        if (at == std::string_view::npos)
            return false;
        out.clear();
        if (r.drop)
            return true;
        size_t last = 0;
        while (at != std::string_view::npos) {
            out.append(subject.substr(last, at - last));
            for (const auto& part : r.replacement)
                out += part.group < 0 ? std::string_view(part.literal) : std::string_view(r.plainText);
            last = at + r.plainText.size();
            // A prefix matches once (an empty one would match again where it ended); other text is not empty.
            at = r.plain == CompiledRule::Plain::Prefix ? std::string_view::npos : plainMatch(r, subject, last);
        }
        out.append(subject.substr(last));
        return true;
    }
    // Where a plain-text pattern matches `s` first from `from`, or npos.
    static size_t plainMatch(const CompiledRule& r, std::string_view s, size_t from = 0)
    {
        if (r.plain == CompiledRule::Plain::Prefix)
            return from == 0 && startsWith(s, r.plainText) ? 0 : std::string_view::npos;
        return s.find(r.plainText, from);
    }

    // False when the key lacks the rule's literal prefix: no regex run can match it.
    static bool mayMatch(const CompiledRule& r, std::string_view key) { return startsWith(key, r.anchoredPrefix); }

    // An exact rule on one key: Python's '$' also matches before a final newline, so "k\n" becomes
    // replacement + "\n".
    static bool substituteExact(const CompiledRule& r, std::string_view subject, std::string& out)
    {
        if (subject == r.literal) {
            out = r.literalReplacement;
            return true;
        }
        if (subject.size() == r.literal.size() + 1 && subject.back() == '\n' && subject.substr(0, r.literal.size()) == r.literal) {
            out = r.literalReplacement + "\n";
            return true;
        }
        return false;
    }

    // Python's re.sub over the whole key: every non-overlapping match replaced; an empty match right
    // after another match is allowed, but not two at the same position (must_advance in _sre).
    bool substitute(const CompiledRule& r, std::string_view subject, std::string& out) const
    {
        if (r.plain != CompiledRule::Plain::No)
            return substitutePlain(r, subject, out);
        if (!mayMatch(r, subject))
            return false;
        size_t pos = 0;
        size_t last = 0;
        bool mustAdvance = false;
        bool any = false;
        out.clear();
        while (pos <= subject.size()) {
            const int rc = run(r, subject, pos, mustAdvance ? PCRE2_NOTEMPTY_ATSTART : 0u);
            if (rc < 0)
                break; // no (more) matches
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
            const size_t b = ov[0];
            const size_t e = ov[1];
            any = true;
            out.append(subject.substr(last, b - last));
            if (!r.drop) {
                for (const auto& part : r.replacement) {
                    if (part.group < 0) {
                        out += part.literal;
                    } else if (part.group < rc && ov[2 * part.group] != PCRE2_UNSET) {
                        out.append(subject.substr(ov[2 * part.group], ov[2 * part.group + 1] - ov[2 * part.group]));
                    } // an unmatched group is empty, as in Python 3.5+
                }
            }
            last = e;
            mustAdvance = b == e;
            pos = e;
            if (r.drop)
                break;
        }
        if (any)
            out.append(subject.substr(last));
        return any;
    }
};

CompiledRules::CompiledRules()
    : m_impl(std::make_unique<Impl>())
{
}
CompiledRules::~CompiledRules() = default;
CompiledRules::CompiledRules(CompiledRules&&) noexcept = default;
CompiledRules& CompiledRules::operator=(CompiledRules&&) noexcept = default;

std::optional<PatternError> validatePattern(std::string_view pattern)
{
    Checked c = checkPattern(pattern);
    if (c.problem)
        return c.problem;
    int code = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* compiled = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(c.pcre.data()), c.pcre.size(),
        PCRE2_UTF | PCRE2_UCP, &code, &offset, nullptr);
    if (!compiled) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(code, message, sizeof message);
        // Offsets past a \Z rewrite shift by nothing: \Z and \z have the same length.
        return error(offset, reinterpret_cast<const char*>(message));
    }
    pcre2_code_free(compiled);
    return std::nullopt;
}

std::optional<PatternError> validateReplacement(std::string_view replacement, std::string_view pattern)
{
    Checked c = checkPattern(pattern);
    std::vector<ReplacementPart> parts;
    return parseReplacement(replacement, c, parts);
}

bool isWholeKeyLiteral(std::string_view pattern)
{
    return exactLiteral(pattern).has_value();
}

std::optional<PatternError> patternRuleCapError(const RuleSet& rules)
{
    size_t patterns = 0;
    for (size_t i = 0; i < rules.rules.size(); ++i) {
        const Rule& r = rules.rules[i];
        if (!r.enabled || isWholeKeyLiteral(r.pattern) || ++patterns <= kMaxPatternRules)
            continue;
        size_t total = patterns;
        for (size_t k = i + 1; k < rules.rules.size(); ++k)
            total += rules.rules[k].enabled && !isWholeKeyLiteral(rules.rules[k].pattern);
        PatternError e = error(0,
            "the set has " + std::to_string(total) + " rules that run a regex; at most "
                + std::to_string(kMaxPatternRules) + " are run, since each is tried on every key (rules of one whole "
                + "literal key, ^name$, are looked up instead and do not count)");
        e.rule = i;
        e.positioned = false;
        return e;
    }
    return std::nullopt;
}

std::string describePatternError(const PatternError& e)
{
    std::string out = "rule " + std::to_string(e.rule + 1) + ": ";
    if (e.positioned)
        out += std::string(e.inReplacement ? "replacement" : "pattern") + " at position " + std::to_string(e.offset)
            + ": ";
    return out + e.message;
}

CompiledRules CompiledRules::compile(const RuleSet& set, std::vector<PatternError>* errors)
{
    CompiledRules out;
    auto& impl = *out.m_impl;
    impl.usable.assign(set.rules.size(), false);
    impl.position.assign(set.rules.size(), -1);
    const std::optional<PatternError> overCap = patternRuleCapError(set);
    for (size_t i = 0; i < set.rules.size(); ++i) {
        const Rule& rule = set.rules[i];
        if (!rule.enabled)
            continue;
        Checked checked = checkPattern(rule.pattern);
        auto report = [&](PatternError e) {
            e.rule = i;
            if (errors)
                errors->push_back(std::move(e));
        };
        if (checked.problem) {
            report(*checked.problem);
            continue;
        }
        std::optional<std::string> literal = exactLiteral(rule.pattern);
        if (!literal && overCap && i >= overCap->rule) {
            if (i == overCap->rule)
                report(*overCap); // once: the rules past it are left out with it
            continue;
        }
        if (literal) {
            CompiledRule cr;
            cr.index = i;
            cr.drop = rule.drop;
            cr.exact = true;
            cr.literal = std::move(*literal);
            if (auto e = parseReplacement(rule.replacement, checked, cr.replacement)) {
                report(*e);
                continue;
            }
            for (const auto& part : cr.replacement)
                cr.literalReplacement += part.group < 0 ? part.literal : cr.literal; // only \g<0> can refer to anything
            impl.usable[i] = true;
            impl.rules.push_back(std::move(cr));
            continue;
        }
        int code = 0;
        PCRE2_SIZE offset = 0;
        pcre2_code* compiled = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(checked.pcre.data()), checked.pcre.size(),
            PCRE2_UTF | PCRE2_UCP, &code, &offset, nullptr);
        if (!compiled) {
            PCRE2_UCHAR message[256];
            pcre2_get_error_message(code, message, sizeof message);
            report(error(offset, reinterpret_cast<const char*>(message)));
            continue;
        }
        // Named groups resolve to numbers now.
        CompiledRule cr;
        cr.index = i;
        cr.drop = rule.drop;
        cr.pattern = rule.pattern;
        cr.code = compiled;
        if (auto e = parseReplacement(rule.replacement, checked, cr.replacement)) {
            pcre2_code_free(compiled);
            report(*e);
            continue;
        }
        for (auto& part : cr.replacement) {
            if (part.group <= -2) {
                const std::string& name = checked.groupNames[static_cast<size_t>(-2 - part.group)];
                int number = pcre2_substring_number_from_name(compiled, reinterpret_cast<PCRE2_SPTR>(name.c_str()));
                part.group = number > 0 ? number : -1;
            }
        }
        // When JIT is missing, matching falls back to the interpreter.
        cr.jit = pcre2_jit_compile(compiled, PCRE2_JIT_COMPLETE) == 0;
        cr.anchoredPrefix = anchoredLiteralPrefix(rule.pattern);
        if (auto text = rule.pattern.starts_with('^') ? plainText(std::string_view(rule.pattern).substr(1)) : std::nullopt) {
            cr.plain = CompiledRule::Plain::Prefix;
            cr.plainText = std::move(*text);
        } else if (auto anywhere = plainText(rule.pattern); anywhere && !anywhere->empty()) {
            // (The empty pattern, which matches between every two characters, stays PCRE2's.)
            cr.plain = CompiledRule::Plain::Anywhere;
            cr.plainText = std::move(*anywhere);
        }
        impl.usable[i] = true;
        impl.rules.push_back(std::move(cr));
    }
    impl.mode = set.mode;
    for (size_t k = 0; k < impl.rules.size(); ++k) {
        impl.position[impl.rules[k].index] = static_cast<int32_t>(k);
        const bool exact = impl.rules[k].exact;
        if (!exact || impl.steps.empty() || impl.steps.back().exact.empty()) {
            impl.steps.emplace_back();
            impl.steps.back().first = k;
        }
        Impl::Step& step = impl.steps.back();
        step.last = k + 1;
        if (exact)
            step.exact[impl.rules[k].literal].push_back(static_cast<uint32_t>(k));
    }
    uint32_t maxGroups = 1;
    for (const auto& r : impl.rules) {
        if (!r.code)
            continue;
        uint32_t n = 0;
        pcre2_pattern_info(r.code, PCRE2_INFO_CAPTURECOUNT, &n);
        maxGroups = std::max(maxGroups, n + 1);
    }
    impl.match = pcre2_match_data_create(maxGroups, nullptr);
    impl.context = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(impl.context, kRuleMatchLimit);
    pcre2_set_depth_limit(impl.context, kRuleDepthLimit);
    pcre2_set_heap_limit(impl.context, kRuleHeapLimitKiB);
    if (std::any_of(impl.rules.begin(), impl.rules.end(), [](const CompiledRule& r) { return r.code != nullptr; })) {
        // JIT's default is 32 KiB of machine stack; a pattern that needs more would fail on long keys.
        impl.jitStack = pcre2_jit_stack_create(32 * 1024, kRuleJitStackBytes, nullptr);
        pcre2_jit_stack_assign(impl.context, nullptr, impl.jitStack);
    }
    return out;
}

CompiledRules::Result CompiledRules::apply(std::string_view name, std::vector<uint32_t>* matchedRules) const
{
    Result result;
    std::string scratch;
    applyInto(name, result, scratch, matchedRules);
    return result;
}

void CompiledRules::applyInto(std::string_view name, Result& result, std::string& next,
    std::vector<uint32_t>* matchedRules) const
{
    result.name.assign(name);
    result.dropped = false;
    result.lastRule = result.firstRule = -1;
    result.matchedCount = 0;
    if (m_impl->rules.empty() || !validUtf8(name))
        return; // keys that are not UTF-8 text cannot be matched like Python str keys
    const bool firstMatch = m_impl->mode == RuleMode::FirstMatch;
    // One rule matched the current name and produced `next`; returns false when the chain stops there.
    auto took = [&](const CompiledRule& r) {
        ++result.matchedCount;
        if (matchedRules)
            matchedRules->push_back(static_cast<uint32_t>(r.index));
        if (result.firstRule < 0)
            result.firstRule = static_cast<int>(r.index);
        if (r.drop) {
            result.dropped = true;
            result.lastRule = static_cast<int>(r.index);
            return false;
        }
        if (next != result.name) {
            result.name.swap(next);
            result.lastRule = static_cast<int>(r.index);
        }
        return !firstMatch;
    };
    for (const auto& step : m_impl->steps) {
        if (step.exact.empty()) {
            const CompiledRule& r = m_impl->rules[step.first];
            if (!m_impl->substitute(r, result.name, next))
                continue;
            if (!took(r))
                return;
            continue;
        }
        if (!result.name.empty() && result.name.back() == '\n') {
            // Python's '$' before a final newline: rare enough to take the slow path, rule by rule.
            for (size_t k = step.first; k < step.last; ++k)
                if (Impl::substituteExact(m_impl->rules[k], result.name, next) && !took(m_impl->rules[k]))
                    return;
            continue;
        }
        // A run of exact rules: follow the key through the table, each hit after the one before.
        size_t cursor = 0;
        for (;;) {
            auto it = step.exact.find(result.name);
            if (it == step.exact.end())
                break;
            auto pos = std::lower_bound(it->second.begin(), it->second.end(), static_cast<uint32_t>(cursor));
            if (pos == it->second.end())
                break;
            const CompiledRule& r = m_impl->rules[*pos];
            next = r.literalReplacement;
            cursor = *pos + 1;
            if (!took(r))
                return;
        }
    }
}

bool CompiledRules::matches(size_t index, std::string_view name) const
{
    if (index >= m_impl->position.size() || m_impl->position[index] < 0 || !validUtf8(name))
        return false;
    const CompiledRule& r = m_impl->rules[static_cast<size_t>(m_impl->position[index])];
    if (r.exact) {
        std::string ignored;
        return Impl::substituteExact(r, name, ignored);
    }
    if (r.plain != CompiledRule::Plain::No)
        return Impl::plainMatch(r, name) != std::string_view::npos;
    return Impl::mayMatch(r, name) && m_impl->run(r, name, 0, 0) >= 0;
}

std::optional<std::string_view> CompiledRules::literalKey(size_t index) const
{
    if (index >= m_impl->position.size() || m_impl->position[index] < 0)
        return std::nullopt;
    const CompiledRule& r = m_impl->rules[static_cast<size_t>(m_impl->position[index])];
    if (!r.exact)
        return std::nullopt;
    return std::string_view(r.literal);
}

size_t CompiledRules::ruleCount() const { return m_impl->usable.size(); }
bool CompiledRules::empty() const { return m_impl->rules.empty(); }
bool CompiledRules::usable(size_t index) const { return index < m_impl->usable.size() && m_impl->usable[index]; }

} // namespace sl
