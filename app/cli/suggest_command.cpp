// statelens suggest A B [--rules FILE] [--pair A_KEY B_KEY] [-o rules.yaml]
//
// Writes the suggested rules (appended to --rules, when given) as a rule file, each with its title and
// examples as comments, so that `statelens diff A B --rules rules.yaml` shows what is left.

#include "cli/commands.h"

#include "rules/rule_io.h"
#include "suggest/suggestions.h"
#include "util/error.h"
#include "util/terminal_text.h"

#include <cstdio>

namespace sl::cli {

namespace {

struct SuggestOptionsCli {
    TwoSides sides;
    std::string rules;
    std::vector<std::string> pair;
    std::string output;
    std::string format = "yaml";
};

int runSuggest(const SuggestOptionsCli& o)
{
    // Plain references, not a structured binding: clang 14 cannot capture those in lambdas.
    const auto opened = openBoth(o.sides.a, o.sides.b);
    const Source& a = opened.first;
    const Source& b = opened.second;
    const RuleSet existing = o.rules.empty() ? RuleSet {} : loadRules(o.rules);
    std::vector<Suggestion> suggestions;
    if (!o.pair.empty()) {
        auto s = inferRule(o.pair[0], o.pair[1], a, b, existing);
        if (!s)
            throw LoadError(o.pair[0], "no single rule maps it onto '" + o.pair[1] + "'");
        suggestions.push_back(std::move(*s));
    } else {
        suggestions = suggestRules(a, b, existing);
    }
    const RuleSet out = withSuggestions(existing, suggestions);
    emit(o.format == "json" ? rulesToJson(out) : rulesToYaml(out), o.output);

    // What was found goes to stderr, so stdout stays a clean rule file.
    size_t resolves = 0;
    for (const auto& s : suggestions) {
        std::fprintf(stderr, "suggest: %s\n", terminalText(s.title).c_str()); // titles quote keys
        resolves += s.resolves;
    }
    if (suggestions.empty())
        std::fprintf(stderr, "suggest: nothing to suggest (no unexpected/missing pair follows a known pattern)\n");
    else
        std::fprintf(stderr,
            "suggest: %zu suggestion(s), resolving %zu row pair(s); check with `statelens diff %s --rules %s`\n",
            suggestions.size(), resolves, terminalText(shellWords(o.sides.arguments)).c_str(),
            o.output.empty() || o.output == "-" ? "RULES.yaml" : terminalText(o.output).c_str());
    return 0;
}

} // namespace

Runner addSuggestCommand(CLI::App& app)
{
    auto o = std::make_shared<SuggestOptionsCli>();
    CLI::App* cmd = app.add_subcommand("suggest", "Suggest rename rules that map A's keys onto B's (nothing is applied)");
    addTwoSides(cmd, o->sides);
    cmd->add_option("--rules", o->rules, "Existing rule file: suggestions are for what it leaves, appended to it");
    cmd->add_option("--pair", o->pair, "Infer one general rule from this unexpected key of A and missing key of B")
        ->expected(2);
    cmd->add_option("--format", o->format, "Rule file format")->check(CLI::IsMember({ "yaml", "json" }));
    cmd->add_option("-o,--output", o->output, "Write the rule file here (atomically) instead of stdout");
    return [o] {
        splitTwoSides(o->sides, "suggest");
        return namingRuleFile(o->rules, [&] { return runSuggest(*o); });
    };
}

} // namespace sl::cli
