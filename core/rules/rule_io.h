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

#include <string>
#include <string_view>

namespace sl {

// By content: a leading '{' is JSON, anything else YAML. Throws LoadError naming `name` and the line.
RuleSet parseRules(std::string_view text, const std::string& name);
RuleSet loadRules(const std::string& path);

std::string rulesToYaml(const RuleSet& rules);
std::string rulesToJson(const RuleSet& rules);

} // namespace sl
