// libFuzzer target: rule files and imports, which users exchange and CI jobs load (YAML/JSON rule files,
// Hugging Face key_mapping dicts as JSON or Python literals, old,new CSV). Whatever parses is compiled and
// run over a few keys, then exported and inverted: only LoadError may leave (or, from matching, a
// RuleMatchError: one line naming the rule), the engine must not crash or hang, and an accepted rule set
// must survive a YAML round trip.

#include "fuzz_common.h"

#include "rules/rule_engine.h"
#include "rules/rule_export.h"
#include "rules/rule_import.h"
#include "rules/rule_inverse.h"
#include "rules/rule_io.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace {

void exerciseRules(const sl::RuleSet& rules, std::string_view input)
{
    const sl::CompiledRules compiled = sl::CompiledRules::compile(rules);
    const std::string_view keys[] = { "model.layers.0.self_attn.q_proj.weight", "_orig_mod.module.embed.weight", input.substr(0, 256) };
    std::vector<std::string> list;
    for (auto k : keys)
        list.emplace_back(k);
    try {
        for (auto k : keys)
            (void)compiled.apply(k);
        (void)sl::rulesToHfKeyMapping(rules, &list);
        (void)sl::rulesToTorchtitan(rules, list);
    } catch (const sl::RuleMatchError& e) {
        // A pattern that backtracks past the limits on one of the keys: refused, never taken as no match.
        const std::string_view w = e.what();
        if (w.substr(0, 5) != "rule " || w.find_first_of("\n\r") != std::string_view::npos
            || e.rule() >= rules.rules.size())
            sl::fuzz::die("a RuleMatchError is not one line naming its rule", e.what());
    }
    (void)sl::rulesToPython(rules);
    (void)sl::invertRules(rules);
    const sl::RuleSet again = sl::parseRules(sl::rulesToYaml(rules), "fuzz/again.yaml");
    if (again.rules.size() != rules.rules.size())
        sl::fuzz::die("a rule set did not survive its own YAML", std::to_string(rules.rules.size()).c_str());
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    sl::fuzz::expectOnlyLoadError("fuzz/rules.yaml", [&] { exerciseRules(sl::parseRules(text, "fuzz/rules.yaml"), text); });
    sl::fuzz::expectOnlyLoadError("fuzz/key_mapping.json", [&] { exerciseRules(sl::importHfKeyMapping(text, "fuzz/key_mapping.json"), text); });
    sl::fuzz::expectOnlyLoadError("fuzz/mapping.csv", [&] { exerciseRules(sl::importCsvMapping(text, "fuzz/mapping.csv"), text); });
    return 0;
}
