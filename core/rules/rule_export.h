#pragma once
// Rule sets written out for other tools: a standalone Python module, Hugging Face's `key_mapping`, a
// torchtitan-style `{}` template map, and a plain old,new CSV of a finished mapping.
//
// Every export says what it could not express in `problems` instead of writing something that maps keys
// differently from StateLens. Rules the engine refuses (see rule_engine.h) and disabled rules are left
// out, as the engine leaves them out.

#include "rules/rule.h"

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sl {

// Every format a rule set is written in, for the command line (`rules export --to NAME`) and the window's
// Export menu alike: one dispatch, renderRuleExport below.
enum class RuleExportFormat : uint8_t { Yaml, Json, Python, HfKeyMapping, Torchtitan, Csv };
std::string_view ruleExportFormatName(RuleExportFormat f); // "yaml", "json", "python", "hf-key-mapping", ...
std::optional<RuleExportFormat> ruleExportFormatNamed(std::string_view name);
const std::vector<std::string>& ruleExportFormatNames(); // every format's name, for the command line's check
// Whether the format lists the mapped names of a source's keys (torchtitan, csv), so needs them.
bool ruleExportNeedsKeys(RuleExportFormat f);

struct RuleExport {
    std::string text;
    std::vector<std::string> problems; // what the format cannot express (see each exporter below)
};
// `rules` written in `format`. `keys`: the names of the source the rules rename (A's keys), or nullptr
// when there is none; the formats that need them (ruleExportNeedsKeys) throw std::invalid_argument without.
RuleExport renderRuleExport(RuleExportFormat format, const RuleSet& rules, const std::vector<std::string>* keys);

// A Python 3.7+ module using only `re`: RULES (pattern, replacement, drop) tuples, MODE, remap_key(key)
// (None when dropped), remap_state_dict(sd) (ValueError when two keys land on one name), and a __main__
// that reads keys one per line on stdin and prints `old<TAB>new`, or `old<TAB><dropped>` for a dropped
// key (the marker is DROPPED_MARKER; `--marker TEXT` chooses another).
std::string rulesToPython(const RuleSet& rules);

// The `{regex: replacement}` dict that transformers' `from_pretrained(key_mapping=...)` takes, as JSON.
// transformers tries the entries in order and stops at the first one that matches (re.subn count > 0),
// so a chain of rules is only expressible when no key meets two of them: with `keys`, every key is run
// through both and each divergence is a problem; without, a chain of two or more rules is reported as
// unchecked. Drop rules and repeated patterns cannot be dict entries: left out, reported.
struct HfExport {
    std::string json;
    std::vector<std::string> problems;
};
HfExport rulesToHfKeyMapping(const RuleSet& rules, const std::vector<std::string>* keys = nullptr);

// A Python `from_hf_map = {...}` dict in the form torchtitan's state-dict adapters use (e.g.
// torchtitan/models/llama3/model/state_dict_adapter.py): a key containing "layers" is looked up with its
// first number replaced by `{}` (`re.sub(r"(\d+)", "{}", key, count=1)`) and that number is put back into
// the value with str.format; other keys are looked up as they are; None skips a key. Built from `keys`
// mapped through the rules; every key is then run through torchtitan's lookup, and each key whose result
// differs from the rules' (layer-specific renames, numbers moved or dropped) is a problem.
struct TemplateExport {
    std::string text;
    std::vector<std::string> problems;
};
TemplateExport rulesToTorchtitan(const RuleSet& rules, const std::vector<std::string>& keys);

// `old,new` with a header line, RFC 4180 quoting and CRLF line ends; an empty new name means dropped.
std::string mappingToCsv(const std::vector<std::pair<std::string, std::string>>& oldNew);
// `keys` mapped through the rules, as mappingToCsv writes them.
std::string rulesToCsv(const RuleSet& rules, const std::vector<std::string>& keys);

} // namespace sl
