#pragma once
// Rule files. The native format is YAML (JSON with the same fields is accepted too):
//
//   # comments before the rules are kept
//   version: 1
//   rules:
//     # comments before a rule stay with that rule
//     - pattern: '^_orig_mod\.'
//       replace: ''
//       note: strip torch.compile's _orig_mod. prefix
//     - pattern: '\.rotary_emb\.inv_freq$'
//       drop: true
//       enabled: false
//
// Top level: version (1), mode (chain, the default, or first_match as Hugging Face's key_mapping), rules.
// Fields: pattern (required), replace (default ''), drop (default false), enabled (default true), note.
// yaml-cpp drops comments when it parses, so they are picked up from the text beside it: the lines
// starting with '#' before `rules:` and before each `- ` item.

#include "rules/rule.h"

#include <cstddef>
#include <string>
#include <string_view>

namespace sl {

// Bounds on a rule file (docs/command-line.md, "Rules"), so a hostile one is refused in bounded time and
// memory: its size; its rule count (a CSV import of a 100,000-tensor model's explicit pairs fits twice); YAML
// nodes (yaml-cpp keeps about 500 bytes per node); and no YAML aliases at all (rule files never need them,
// and each alias of a large anchored string is another copy of it: "billion laughs"). The rules that run a
// regex are capped by the engine (kMaxPatternRules, rule_engine.h).
inline constexpr size_t kMaxRuleFileBytes = size_t(64) << 20;
inline constexpr size_t kMaxRules = 200'000;
inline constexpr size_t kMaxYamlNodes = 12 * kMaxRules; // a rule with every field is 11 nodes

// By content: a leading '{' is JSON, anything else YAML. Throws LoadError naming `name` and the line.
RuleSet parseRules(std::string_view text, const std::string& name);
// Throws LoadError naming `name` when a set read from a file is over kMaxRules or the engine's cap on
// pattern rules. Every reader of rule files (this one, rule_import.h) calls it.
void checkRuleCount(const RuleSet& rules, const std::string& name);
RuleSet loadRules(const std::string& path);

std::string rulesToYaml(const RuleSet& rules);
std::string rulesToJson(const RuleSet& rules);

} // namespace sl
