#pragma once
// Rule sets read from other tools' formats: Hugging Face key mappings (a JSON object, or the Python dict
// literal of a modeling file's `_checkpoint_conversion_mapping`) and old,new CSV mappings. Python source
// is read by a small tokenizer, never evaluated. Every problem throws LoadError naming the input and the
// line.

#include "rules/rule.h"

#include <string>
#include <string_view>

namespace sl {

// `{"regex": "replacement", ...}` as JSON, or a Python dict literal, optionally assigned
// (`_checkpoint_conversion_mapping = {r"^language_model.model": "model.language_model", ...}`): r/u
// prefixes, either quote, triple quotes, adjacent literals joined, comments (kept with the entry they
// precede) and a trailing comma. Entries keep their order; a repeated pattern keeps its first place and
// its last value, as a Python dict does. Mode FirstMatch. Patterns and replacements are validated.
RuleSet importHfKeyMapping(std::string_view text, const std::string& name);

// `old,new` rows (RFC 4180 quoting; an `old,new`-like header line is optional; CRLF or LF): one exact rule
// `^<old>$` -> `<new>` per row, a drop rule when new is empty. Mode Chain, unless a row renames a key
// onto the old name of a later row (a shift or a swap: a chain would rename that key twice), in which
// case FirstMatch, said in a header comment. A name listed twice with different new names is an error.
RuleSet importCsvMapping(std::string_view text, const std::string& name);

// A rule file of any of the formats, by extension and content: .csv -> CSV; .py, or a Python dict
// assignment -> Hugging Face; a JSON object whose values are all strings -> Hugging Face; anything else
// (YAML, the native JSON with "version"/"rules") -> the native format (rule_io.h). At most 64 MiB.
RuleSet importRulesFile(const std::string& path);

} // namespace sl
