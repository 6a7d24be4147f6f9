// statelens rules export RULES --to python|hf-key-mapping|torchtitan|yaml|json|csv [--keys SOURCE] [--invert] [-o FILE]
// statelens rules import FILE [-o rules.yaml]
//
// Exports write what people load with; where a format cannot say what the rules do (drop rules in a
// key_mapping dict, chains that first-match would read differently), the problems go to stderr and the exit
// code is 1, so a CI job cannot ship an unfaithful mapping by accident.

#include "cli/commands.h"

#include "formats/loader.h"
#include "rules/rule_engine.h"
#include "rules/rule_export.h"
#include "rules/rule_import.h"
#include "rules/rule_inverse.h"
#include "rules/rule_io.h"
#include "util/error.h"
#include "util/terminal_text.h"

#include <cstdio>

namespace sl::cli {

namespace {

struct RulesExportOptions {
    std::string rules;
    std::string to;
    SideOption keys;
    bool invert = false;
    std::string output;
};

struct RulesImportOptions {
    std::string input;
    std::string output;
    std::string format = "yaml";
};

std::vector<std::string> keysOf(const SideOption& side)
{
    std::vector<std::string> keys;
    if (side.paths.empty())
        return keys;
    const Source& s = openSide(side);
    keys.reserve(s.entries.size());
    for (const auto& e : s.entries)
        keys.push_back(e.name);
    return keys;
}

int reportProblems(const std::vector<std::string>& problems, const std::string& format)
{
    for (const auto& p : problems)
        std::fprintf(stderr, "rules export: %s\n", terminalText(p).c_str());
    if (problems.empty())
        return 0;
    std::fprintf(stderr, "rules export: the %s export does not reproduce the rules exactly (%zu problem(s) above)\n",
        format.c_str(), problems.size());
    return 1;
}

int runExport(const RulesExportOptions& o)
{
    RuleSet rules = loadRules(o.rules);
    std::vector<PatternError> errors;
    CompiledRules::compile(rules, &errors);
    if (!errors.empty())
        throw LoadError(o.rules, describePatternError(errors.front()));
    if (o.invert) {
        InvertedRules inv = invertRules(rules);
        if (!inv.problems.empty()) {
            for (const auto& p : inv.problems)
                std::fprintf(stderr, "rules export: %s\n", terminalText(p).c_str());
            throw LoadError(o.rules, "the rules have no inverse (see above)");
        }
        rules = std::move(inv.rules);
    }
    const std::optional<RuleExportFormat> named = ruleExportFormatNamed(o.to);
    if (!named)
        throw LoadError(o.rules, "no export format named " + o.to);
    const RuleExportFormat format = *named;
    const std::vector<std::string> keys = keysOf(o.keys);
    if (ruleExportNeedsKeys(format) && o.keys.paths.empty())
        throw LoadError(o.rules, "--to " + o.to + " lists explicit names: give the keys with --keys SOURCE");
    const RuleExport out = renderRuleExport(format, rules, o.keys.paths.empty() ? nullptr : &keys);
    emit(out.text, o.output);
    return reportProblems(out.problems, o.to);
}

int runImport(const RulesImportOptions& o)
{
    const RuleSet rules = importRulesFile(o.input);
    emit(o.format == "json" ? rulesToJson(rules) : rulesToYaml(rules), o.output);
    std::fprintf(stderr, "rules import: %zu rule(s), %s mode\n", rules.rules.size(),
        rules.mode == RuleMode::FirstMatch ? "first_match" : "chain");
    return 0;
}

} // namespace

Runner addRulesCommand(CLI::App& app)
{
    auto ex = std::make_shared<RulesExportOptions>();
    auto im = std::make_shared<RulesImportOptions>();
    CLI::App* rules = app.add_subcommand("rules", "Export rule files to the formats people load with, or import them");
    rules->require_subcommand(1);

    CLI::App* exportCmd = rules->add_subcommand("export", "Write a rule file as Python, a Hugging Face key_mapping, a torchtitan map, YAML, JSON or CSV");
    exportCmd->add_option("rules", ex->rules, "The rule file (YAML or JSON)")->required();
    exportCmd->add_option("--to", ex->to, "Target format")
        ->required()
        ->check(CLI::IsMember(ruleExportFormatNames()));
    exportCmd
        ->add_option("--keys", ex->keys.paths,
            "A source whose keys the export is built from (torchtitan, csv) or checked against (hf-key-mapping)")
        ->expected(1);
    exportCmd->add_option("--container", ex->keys.container, "Container of --keys to use")
        ->each([ex](const std::string&) { ex->keys.containerGiven = true; });
    exportCmd->add_flag("--invert", ex->invert, "Export the inverse rules (the model's names back to the checkpoint's)");
    exportCmd->add_option("-o,--output", ex->output, "Write here (atomically) instead of stdout");

    CLI::App* importCmd = rules->add_subcommand("import", "Read a Hugging Face key_mapping / _checkpoint_conversion_mapping dict (JSON or Python) or an old,new CSV as a rule file");
    importCmd->add_option("file", im->input, "The file to import")->required();
    importCmd->add_option("--format", im->format, "Rule file format")->check(CLI::IsMember({ "yaml", "json" }));
    importCmd->add_option("-o,--output", im->output, "Write the rule file here (atomically) instead of stdout");

    return [ex, im, exportCmd, importCmd]() -> int {
        if (exportCmd->parsed())
            return namingRuleFile(ex->rules, [&] { return runExport(*ex); });
        if (importCmd->parsed())
            return runImport(*im);
        return 2;
    };
}

} // namespace sl::cli
