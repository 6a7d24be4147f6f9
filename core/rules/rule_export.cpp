#include "rules/rule_export.h"

#include "rules/rule_engine.h"
#include "rules/rule_io.h"
#include "util/error.h"
#include "util/terminal_text.h"

#include <optional>
#include <stdexcept>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace sl {

namespace {

constexpr size_t kMaxExamples = 10; // divergent keys listed one by one; the rest are counted
constexpr size_t kTemplateProposers = 8; // keys of a torchtitan template group whose renames are tried as its template

// Strict UTF-8 (no overlongs, no surrogates, nothing past U+10FFFF), as Python's decoder reads it.
// Calls `each(codePoint)` per character; false on the first bad byte.
template <typename F>
bool decodeUtf8(std::string_view s, F&& each)
{
    for (size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c < 0x80) {
            each(static_cast<char32_t>(c));
            ++i;
            continue;
        }
        size_t n = 0;
        char32_t cp = 0;
        char32_t min = 0;
        if ((c & 0xE0) == 0xC0) {
            n = 2, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            n = 3, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            n = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (i + n > s.size())
            return false;
        for (size_t k = 1; k < n; ++k) {
            const auto d = static_cast<unsigned char>(s[i + k]);
            if ((d & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (d & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        each(cp);
        i += n;
    }
    return true;
}

bool isUtf8(std::string_view s)
{
    return decodeUtf8(s, [](char32_t) {});
}

void appendHex(std::string& out, uint32_t value, int digits)
{
    static constexpr char kHex[] = "0123456789abcdef";
    for (int shift = (digits - 1) * 4; shift >= 0; shift -= 4)
        out += kHex[(value >> shift) & 15];
}

// A Python str literal that reads back as `s`, in plain ASCII (non-ASCII as \u / \U escapes), so the
// file means the same whatever encoding an editor or a terminal assumes. nullopt: `s` is not UTF-8 text,
// which no Python str can hold.
std::optional<std::string> pythonString(std::string_view s)
{
    std::string out = "\"";
    const bool ok = decodeUtf8(s, [&](char32_t cp) {
        switch (cp) {
        case '\\':
            out += "\\\\";
            return;
        case '"':
            out += "\\\"";
            return;
        case '\n':
            out += "\\n";
            return;
        case '\r':
            out += "\\r";
            return;
        case '\t':
            out += "\\t";
            return;
        default:
            break;
        }
        if (cp < 0x20 || cp == 0x7F) {
            out += "\\x";
            appendHex(out, cp, 2);
        } else if (cp < 0x80) {
            out += static_cast<char>(cp);
        } else if (cp <= 0xFFFF) {
            out += "\\u";
            appendHex(out, cp, 4);
        } else {
            out += "\\U";
            appendHex(out, cp, 8);
        }
    });
    if (!ok)
        return std::nullopt;
    return out + "\"";
}

// A JSON string; non-ASCII stays UTF-8 (JSON text is UTF-8). nullopt when `s` is not UTF-8.
std::optional<std::string> jsonString(std::string_view s)
{
    if (!isUtf8(s))
        return std::nullopt;
    std::string out = "\"";
    for (char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (u < 0x20) {
            out += "\\u";
            appendHex(out, u, 4);
        } else {
            out += c;
        }
    }
    return out + "\"";
}

// Comment lines for a Python file: one per line of `text`. Control characters are shown escaped (a
// bare '\r' or form feed would end the comment for Python's tokenizer, and the file is printed to
// terminals) and bytes that are not UTF-8 as \xHH (Python refuses a source file that is not UTF-8).
void appendPythonComment(std::string& out, std::string_view indent, std::string_view text)
{
    size_t start = 0;
    for (;;) {
        size_t end = text.find('\n', start);
        std::string_view line = text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
        const std::string clean = terminalText(line);
        out += indent;
        out += clean.empty() ? "#" : "# " + clean;
        out += '\n';
        if (end == std::string_view::npos)
            break;
        start = end + 1;
    }
}

// A name inside a problem message: quoted, one line, long ones elided.
std::string quotedName(std::string_view name)
{
    return "'" + oneLineMessage(std::string(name), 200) + "'";
}

std::string ruleLabel(size_t index, const Rule& rule)
{
    return "rule " + std::to_string(index + 1) + " (" + quotedName(rule.pattern) + ")";
}

std::string outcome(const CompiledRules::Result& r)
{
    return r.dropped ? std::string("(dropped)") : quotedName(r.name);
}

bool sameOutcome(const CompiledRules::Result& a, const CompiledRules::Result& b)
{
    return a.dropped == b.dropped && (a.dropped || a.name == b.name);
}

// Why each rule the engine refuses was refused, by rule index.
std::unordered_map<size_t, std::string> refusedRules(const RuleSet& rules, CompiledRules& compiled)
{
    std::vector<PatternError> errors;
    compiled = CompiledRules::compile(rules, &errors);
    std::unordered_map<size_t, std::string> out;
    for (const auto& e : errors)
        out.emplace(e.rule, (e.inReplacement ? "replacement, offset " : "pattern, offset ") + std::to_string(e.offset) + ": " + e.message);
    return out;
}

// The runs of ASCII digits in a name, in order.
std::vector<std::string_view> digitRuns(std::string_view s)
{
    std::vector<std::string_view> out;
    for (size_t i = 0; i < s.size();) {
        if (s[i] < '0' || s[i] > '9') {
            ++i;
            continue;
        }
        size_t j = i;
        while (j < s.size() && s[j] >= '0' && s[j] <= '9')
            ++j;
        out.push_back(s.substr(i, j - i));
        i = j;
    }
    return out;
}

std::string joined(const std::vector<std::string_view>& parts)
{
    std::string out;
    for (const auto& p : parts)
        out += (out.empty() ? "" : ", ") + std::string(p);
    return out.empty() ? std::string("none") : out;
}

} // namespace

// ---------------------------------------------------------------------------------------------------
// Python

std::string rulesToPython(const RuleSet& set)
{
    CompiledRules compiled;
    const auto refused = refusedRules(set, compiled);
    const bool firstMatch = set.mode == RuleMode::FirstMatch;

    std::string out;
    out += "#!/usr/bin/env python3\n";
    out += "# Key renames exported by StateLens. Needs only the standard library (Python 3.7+).\n";
    out += "#\n";
    out += "#   python3 this.py < keys.txt     reads keys one per line, prints 'old<TAB>new', or\n";
    out += "#                                  'old<TAB><dropped>' for a key a drop rule removes\n";
    out += "#                                  (--marker TEXT prints TEXT instead of <dropped>)\n";
    out += "#   remap_key(key)                 the new name, or None when dropped\n";
    out += "#   remap_state_dict(sd)           a renamed copy; ValueError when two keys get one name\n";
    out += "#\n";
    if (firstMatch) {
        out += "# Mode first_match, as Hugging Face's key_mapping: the first rule that matches the key rewrites\n";
        out += "# it (re.subn count > 0) and the others are not tried.\n";
    } else {
        out += "# Mode chain: each rule rewrites the output of the one before (re.sub); a drop rule that matches\n";
        out += "# removes the key.\n";
    }
    if (!set.headerComments.empty()) {
        out += "#\n";
        for (const auto& c : set.headerComments)
            appendPythonComment(out, "", c);
    }
    out += "\nfrom __future__ import annotations\n\nimport re\nimport sys\n\n";
    out += "if sys.version_info < (3, 7):\n";
    out += "    raise RuntimeError(\"needs Python 3.7 or newer (re.sub's handling of empty matches changed in 3.7)\")\n\n";
    out += std::string("MODE = \"") + (firstMatch ? "first_match" : "chain") + "\"\n";
    out += "DROPPED_MARKER = \"<dropped>\"\n\n";
    out += "# (pattern, replacement, drop), in order. Replacements use re.sub's \\1 and \\g<name>.\n";
    out += "RULES = [\n";
    for (size_t i = 0; i < set.rules.size(); ++i) {
        const Rule& rule = set.rules[i];
        for (const auto& c : rule.comments)
            appendPythonComment(out, "    ", c);
        if (!rule.note.empty())
            appendPythonComment(out, "    ", rule.note);
        auto pattern = pythonString(rule.pattern);
        auto replacement = pythonString(rule.replacement);
        std::string tuple;
        if (pattern && replacement)
            tuple = "(" + *pattern + ", " + *replacement + ", " + (rule.drop ? "True" : "False") + "),";
        auto refusal = refused.find(i);
        if (!rule.enabled) {
            appendPythonComment(out, "    ", "disabled: " + (tuple.empty() ? std::string("rule ") + std::to_string(i + 1) : tuple));
        } else if (refusal != refused.end()) {
            // The engine leaves the rule out, so the module does too: both then map keys alike.
            appendPythonComment(out, "    ", "left out, as StateLens refuses it (" + refusal->second + "):");
            appendPythonComment(out, "    ", tuple.empty() ? std::string("rule ") + std::to_string(i + 1) : tuple);
        } else if (tuple.empty()) {
            appendPythonComment(out, "    ", "left out: rule " + std::to_string(i + 1) + " is not UTF-8 text");
        } else {
            out += "    " + tuple + "\n";
        }
    }
    out += "]\n\n";
    out += "_COMPILED = [(re.compile(pattern), replacement, drop) for pattern, replacement, drop in RULES]\n\n\n";

    out += "def remap_key(key: str) -> str | None:\n";
    out += "    \"\"\"The new name of `key`, or None when a drop rule removes it.\"\"\"\n";
    out += "    if MODE == \"first_match\":\n";
    out += "        for pattern, replacement, drop in _COMPILED:\n";
    out += "            if drop:\n";
    out += "                if pattern.search(key):\n";
    out += "                    return None\n";
    out += "                continue\n";
    out += "            new_key, count = pattern.subn(replacement, key)\n";
    out += "            if count > 0:\n";
    out += "                return new_key\n";
    out += "        return key\n";
    out += "    for pattern, replacement, drop in _COMPILED:\n";
    out += "        if drop:\n";
    out += "            if pattern.search(key):\n";
    out += "                return None\n";
    out += "            continue\n";
    out += "        key = pattern.sub(replacement, key)\n";
    out += "    return key\n\n\n";

    out += "def remap_state_dict(state_dict: dict) -> dict:\n";
    out += "    \"\"\"A copy with every key renamed and dropped keys left out. Raises ValueError when two keys\n";
    out += "    would get the same name, since one tensor would silently replace the other.\"\"\"\n";
    out += "    renamed = {}\n";
    out += "    source_of = {}\n";
    out += "    for key, value in state_dict.items():\n";
    out += "        new_key = remap_key(key)\n";
    out += "        if new_key is None:\n";
    out += "            continue\n";
    out += "        if new_key in renamed:\n";
    out += "            raise ValueError(\n";
    out += "                f\"rename collision: {source_of[new_key]!r} and {key!r} both map to {new_key!r}\")\n";
    out += "        renamed[new_key] = value\n";
    out += "        source_of[new_key] = key\n";
    out += "    return renamed\n\n\n";

    out += "def _main(argv: list) -> int:\n";
    out += "    marker = DROPPED_MARKER\n";
    out += "    if len(argv) == 3 and argv[1] == \"--marker\":\n";
    out += "        marker = argv[2]\n";
    out += "    elif len(argv) != 1:\n";
    out += "        sys.stderr.write(\"usage: python3 %s [--marker TEXT] < keys.txt\\n\" % argv[0])\n";
    out += "        return 2\n";
    out += "    out = sys.stdout.buffer\n";
    out += "    for line in sys.stdin.buffer:\n";
    out += "        if line.endswith(b\"\\n\"):\n";
    out += "            line = line[:-1]\n";
    out += "            if line.endswith(b\"\\r\"):\n";
    out += "                line = line[:-1]\n";
    out += "        try:\n";
    out += "            key = line.decode(\"utf-8\")\n";
    out += "        except UnicodeDecodeError:\n";
    out += "            out.write(line + b\"\\t\" + line + b\"\\n\")  # not text: StateLens leaves such keys as they are\n";
    out += "            continue\n";
    out += "        new_key = remap_key(key)\n";
    out += "        shown = marker if new_key is None else new_key\n";
    out += "        out.write((key + \"\\t\" + shown + \"\\n\").encode(\"utf-8\", \"surrogateescape\"))\n";
    out += "    out.flush()\n";
    out += "    return 0\n\n\n";
    out += "if __name__ == \"__main__\":\n";
    out += "    sys.exit(_main(sys.argv))\n";
    return out;
}

// ---------------------------------------------------------------------------------------------------
// Hugging Face key_mapping
//
// transformers applies it in PreTrainedModel._get_key_renaming_mapping (src/transformers/modeling_utils.py):
//     for pattern, replacement in key_mapping.items():
//         new_key, n_replace = re.subn(pattern, replacement, new_key)
//         if n_replace > 0:
//             break
// after _fix_state_dict_key_on_load's own legacy renames (LayerNorm.gamma/beta, weight_g/weight_v);
// the conversion scripts' map_old_key_to_new loops the same way.

HfExport rulesToHfKeyMapping(const RuleSet& set, const std::vector<std::string>* keys)
{
    HfExport out;
    CompiledRules truth;
    const auto refused = refusedRules(set, truth);

    RuleSet exported;
    exported.mode = RuleMode::FirstMatch;
    std::unordered_map<std::string_view, size_t> firstWithPattern;
    std::string body;
    for (size_t i = 0; i < set.rules.size(); ++i) {
        const Rule& rule = set.rules[i];
        if (!rule.enabled)
            continue;
        if (auto refusal = refused.find(i); refusal != refused.end()) {
            out.problems.push_back(ruleLabel(i, rule) + " is left out: StateLens refuses it (" + refusal->second + ")");
            continue;
        }
        if (rule.drop) {
            out.problems.push_back(ruleLabel(i, rule) + " drops keys; key_mapping can only rename, so it is left out");
            continue;
        }
        auto [seen, isNew] = firstWithPattern.emplace(rule.pattern, i);
        if (!isNew) {
            out.problems.push_back(ruleLabel(i, rule) + " has the pattern of rule " + std::to_string(seen->second + 1)
                + "; a dict holds each key once, so it is left out");
            continue;
        }
        auto pattern = jsonString(rule.pattern);
        auto replacement = jsonString(rule.replacement);
        if (!pattern || !replacement) {
            out.problems.push_back(ruleLabel(i, rule) + " is not UTF-8 text; left out");
            continue;
        }
        body += (body.empty() ? "  " : ",\n  ") + *pattern + ": " + *replacement;
        exported.rules.push_back(rule);
    }
    out.json = body.empty() ? "{}\n" : "{\n" + body + "\n}\n";

    if (!keys) {
        if (set.mode == RuleMode::Chain && exported.rules.size() >= 2) {
            out.problems.push_back("not checked: these " + std::to_string(exported.rules.size())
                + " rules run as a chain in StateLens, but key_mapping stops at the first rule that matches; "
                  "the two agree only if no key (nor an earlier rule's output) is matched by two rules, which "
                  "the patterns alone cannot decide; export with the checkpoint's keys to check it");
        }
        return out;
    }

    const CompiledRules asKeyMapping = CompiledRules::compile(exported);
    size_t differing = 0;
    size_t legacy = 0;
    std::string legacyExample;
    for (const auto& key : *keys) {
        const auto want = truth.apply(key);
        const auto got = asKeyMapping.apply(key);
        if (!sameOutcome(want, got)) {
            if (++differing <= kMaxExamples)
                out.problems.push_back("key " + quotedName(key) + ": the rules give " + outcome(want) + ", key_mapping gives " + outcome(got));
        }
        const std::string_view k = key;
        for (std::string_view suffix : { "LayerNorm.gamma", "LayerNorm.beta", "weight_g", "weight_v" }) {
            if (k.size() >= suffix.size() && k.substr(k.size() - suffix.size()) == suffix) {
                if (legacy++ == 0)
                    legacyExample = key;
                break;
            }
        }
    }
    if (differing > kMaxExamples)
        out.problems.push_back("... and " + std::to_string(differing - kMaxExamples) + " more keys (" + std::to_string(differing)
            + " of " + std::to_string(keys->size()) + ") map differently under key_mapping");
    if (legacy > 0)
        out.problems.push_back(std::to_string(legacy) + " keys (e.g. " + quotedName(legacyExample)
            + ") end in LayerNorm.gamma/beta or weight_g/weight_v, which transformers renames before key_mapping sees them");
    return out;
}

// ---------------------------------------------------------------------------------------------------
// torchtitan
//
// torchtitan/models/llama3/model/state_dict_adapter.py, from_hf:
//     if "layers" in key:
//         abstract_key = re.sub(r"(\d+)", "{}", key, count=1)
//         layer_num = re.search(r"\d+", key).group(0)
//         new_key = self.from_hf_map[abstract_key]
//         if new_key is None:
//             continue
//         new_key = new_key.format(layer_num)
//     else:
//         new_key = self.from_hf_map[key]
//     state_dict[new_key] = value

namespace {

// Python's str.format for the values we write: "{}" takes the number, "{{" and "}}" are braces.
std::string formatTemplate(std::string_view t, std::string_view number)
{
    std::string out;
    for (size_t i = 0; i < t.size(); ++i) {
        if (i + 1 < t.size() && ((t[i] == '{' && t[i + 1] == '{') || (t[i] == '}' && t[i + 1] == '}'))) {
            out += t[i++];
        } else if (i + 1 < t.size() && t[i] == '{' && t[i + 1] == '}') {
            out.append(number);
            ++i;
        } else {
            out += t[i];
        }
    }
    return out;
}

std::string escapeBraces(std::string_view s)
{
    std::string out;
    for (char c : s) {
        out += c;
        if (c == '{' || c == '}')
            out += c;
    }
    return out;
}

// Format strings that turn `number` back into `name`: `{}` at each place where `number` stands as a whole
// run of digits, first place first; the literal name (no number carried) last.
std::vector<std::string> templateCandidates(std::string_view name, std::string_view number)
{
    std::vector<std::string> out;
    auto isDigit = [](char c) { return c >= '0' && c <= '9'; };
    for (size_t at = name.find(number); !number.empty() && at != std::string_view::npos; at = name.find(number, at + 1)) {
        const bool wholeRun = (at == 0 || !isDigit(name[at - 1])) && (at + number.size() >= name.size() || !isDigit(name[at + number.size()]));
        if (wholeRun)
            out.push_back(escapeBraces(name.substr(0, at)) + "{}" + escapeBraces(name.substr(at + number.size())));
    }
    out.push_back(escapeBraces(name));
    return out;
}

struct TitanKey {
    std::string key;
    CompiledRules::Result mapped; // what the rules give
    bool templated = false; // contains "layers": looked up by its abstract key
    bool hasNumber = true;
    std::string lookup; // the abstract key, or the key itself
    std::string number; // the layer number torchtitan formats back in
};

} // namespace

TemplateExport rulesToTorchtitan(const RuleSet& set, const std::vector<std::string>& keys)
{
    TemplateExport out;
    CompiledRules truth;
    for (const auto& [index, why] : refusedRules(set, truth))
        out.problems.push_back(ruleLabel(index, set.rules[index]) + " is left out: StateLens refuses it (" + why + ")");

    // torchtitan's two regexes, run by the engine so that \d means what it means in Python (Unicode digits).
    auto oneRule = [](std::string pattern, std::string replacement) {
        RuleSet one;
        one.rules.emplace_back();
        one.rules.back().pattern = std::move(pattern);
        one.rules.back().replacement = std::move(replacement);
        return one;
    };
    const RuleSet abstractRule = oneRule(R"((?s)^(\D*)\d+)", R"(\1{})");
    const RuleSet numberRule = oneRule(R"((?s)^\D*(\d+).*)", R"(\1)");
    const CompiledRules abstractKey = CompiledRules::compile(abstractRule);
    const CompiledRules layerNumber = CompiledRules::compile(numberRule);

    std::vector<TitanKey> items;
    std::unordered_set<std::string_view> seenKeys;
    std::unordered_map<std::string, std::vector<size_t>> byLookup; // lookup key -> items
    std::vector<std::string> lookupOrder;
    size_t notText = 0;
    for (const auto& key : keys) {
        if (!seenKeys.insert(key).second)
            continue;
        if (!isUtf8(key)) {
            if (++notText == 1)
                out.problems.push_back("key " + quotedName(key) + " is not UTF-8 text, which a Python dict cannot hold; left out");
            continue;
        }
        TitanKey item;
        item.key = key;
        item.mapped = truth.apply(key);
        item.templated = key.find("layers") != std::string::npos;
        if (item.templated) {
            auto a = abstractKey.apply(key);
            item.hasNumber = a.matchedCount > 0;
            item.lookup = std::move(a.name);
            item.number = layerNumber.apply(key).name;
        } else {
            item.lookup = key;
        }
        if (!item.hasNumber) {
            out.problems.push_back("key " + quotedName(key) + " contains \"layers\" but no number: torchtitan's "
                                   "re.search(r\"\\d+\", key).group(0) fails on it; left out");
            continue;
        }
        auto [it, isNew] = byLookup.try_emplace(item.lookup);
        if (isNew)
            lookupOrder.push_back(item.lookup);
        it->second.push_back(items.size());
        items.push_back(std::move(item));
    }
    if (notText > 1)
        out.problems.push_back(std::to_string(notText) + " keys in all are not UTF-8 text");

    // One entry per lookup key. A template should serve every key that shares it: of the templates the
    // first few keys of the group suggest, take the one that gives the most keys what the rules give, so
    // a rename special to one layer costs that layer, not all the others.
    struct Entry {
        std::optional<std::string> value; // nullopt: None
        size_t from = 0; // the item it was made from
    };
    std::unordered_map<std::string, Entry> entries;
    auto lookupResult = [](const TitanKey& item, const Entry& e) {
        CompiledRules::Result r;
        r.dropped = !e.value;
        if (e.value)
            r.name = item.templated ? formatTemplate(*e.value, item.number) : *e.value;
        return r;
    };
    for (const auto& lookup : lookupOrder) {
        const auto& group = byLookup[lookup];
        std::vector<Entry> candidates;
        for (size_t n = 0; n < group.size() && n < kTemplateProposers; ++n) {
            const TitanKey& item = items[group[n]];
            if (item.mapped.dropped) {
                candidates.push_back({ std::nullopt, group[n] });
                continue;
            }
            for (auto& t : item.templated ? templateCandidates(item.mapped.name, item.number) : std::vector<std::string> { item.mapped.name })
                candidates.push_back({ std::move(t), group[n] });
        }
        // On a tie, a template that carries the number beats a literal name: it is right for layers the
        // key list does not show.
        auto carries = [](const Entry& e) { return e.value && e.value->find("{}") != std::string::npos; };
        size_t best = 0;
        size_t bestServed = 0;
        for (size_t c = 0; c < candidates.size(); ++c) {
            size_t served = 0;
            for (size_t k : group)
                served += sameOutcome(lookupResult(items[k], candidates[c]), items[k].mapped) ? 1 : 0;
            if (served > bestServed || (served == bestServed && carries(candidates[c]) && !carries(candidates[best]))) {
                best = c;
                bestServed = served;
            }
        }
        entries.emplace(lookup, std::move(candidates[best]));
    }

    // Every key through torchtitan's lookup.
    size_t differing = 0;
    size_t uncarried = 0;
    for (const auto& item : items) {
        const Entry& entry = entries.at(item.lookup);
        std::string problem;
        if (!item.templated && item.mapped.dropped) {
            problem = "key " + quotedName(item.key) + " is dropped by the rules, but torchtitan skips None only for keys "
                                                  "containing \"layers\" (it would store this one under the key None)";
        } else {
            const auto got = lookupResult(item, entry);
            if (!sameOutcome(got, item.mapped)) {
                problem = "key " + quotedName(item.key) + ": the rules give " + outcome(item.mapped) + ", the map gives " + outcome(got)
                    + " (via " + quotedName(item.lookup) + ", made from " + quotedName(items[entry.from].key) + ")";
                if (!item.mapped.dropped) {
                    const auto before = digitRuns(item.key);
                    const auto after = digitRuns(item.mapped.name);
                    if (before != after)
                        problem += "; the numbers are not carried over in the same order (" + joined(before) + " -> " + joined(after) + ")";
                }
            } else if (item.templated && entry.value && byLookup[item.lookup].size() == 1 && entry.value->find("{}") == std::string::npos) {
                // Right for this key, but the layer number is not carried: other layers would be renamed to
                // this layer's name.
                if (++uncarried <= kMaxExamples)
                    out.problems.push_back("key " + quotedName(item.key) + ": the rules do not carry its layer number "
                        + quotedName(item.number) + " into " + quotedName(item.mapped.name) + ", so the entry " + quotedName(item.lookup)
                        + " holds for this layer only");
            }
        }
        if (!problem.empty() && ++differing <= kMaxExamples)
            out.problems.push_back(std::move(problem));
    }
    if (differing > kMaxExamples)
        out.problems.push_back("... and " + std::to_string(differing - kMaxExamples) + " more keys (" + std::to_string(differing)
            + " of " + std::to_string(items.size()) + ") that the map renames differently from the rules");
    if (uncarried > kMaxExamples)
        out.problems.push_back("... and " + std::to_string(uncarried - kMaxExamples) + " more entries that hold for one layer only");

    out.text = "# torchtitan-style key map exported by StateLens from " + std::to_string(items.size()) + " keys (the\n"
               "# checkpoint's names -> the model's), for a state-dict adapter's from_hf_map: a key containing\n"
               "# \"layers\" is looked up with its first number replaced by {} and the number is put back with\n"
               "# .format(); other keys are looked up as they are; None drops the key.\n";
    if (!out.problems.empty())
        out.text += "# " + std::to_string(out.problems.size()) + " problems: some keys do not map as the rules map them.\n";
    out.text += "from_hf_map = {\n";
    for (const auto& lookup : lookupOrder) {
        const Entry& e = entries.at(lookup);
        auto k = pythonString(lookup);
        auto v = e.value ? pythonString(*e.value) : std::optional<std::string>("None");
        if (!k || !v) {
            out.problems.push_back("the entry for " + quotedName(lookup) + " is not UTF-8 text; left out");
            continue;
        }
        out.text += "    " + *k + ": " + *v + ",\n";
    }
    out.text += "}\n";
    return out;
}

// ---------------------------------------------------------------------------------------------------
// CSV

namespace {

void appendCsvField(std::string& out, std::string_view field)
{
    // RFC 4180 needs quotes around commas, quotes and line breaks; leading or trailing spaces are quoted
    // too, as spreadsheet programs trim them otherwise.
    const bool quote = field.find_first_of(",\"\r\n") != std::string_view::npos
        || (!field.empty() && (field.front() == ' ' || field.back() == ' '));
    if (!quote) {
        out.append(field);
        return;
    }
    out += '"';
    for (char c : field) {
        if (c == '"')
            out += '"';
        out += c;
    }
    out += '"';
}

} // namespace

std::string mappingToCsv(const std::vector<std::pair<std::string, std::string>>& oldNew)
{
    std::string out = "old,new\r\n";
    for (const auto& [oldName, newName] : oldNew) {
        appendCsvField(out, oldName);
        out += ',';
        appendCsvField(out, newName);
        out += "\r\n";
    }
    return out;
}

std::string rulesToCsv(const RuleSet& rules, const std::vector<std::string>& keys)
{
    const CompiledRules compiled = CompiledRules::compile(rules);
    std::vector<std::pair<std::string, std::string>> pairs;
    pairs.reserve(keys.size());
    for (const auto& k : keys) {
        auto r = compiled.apply(k);
        pairs.emplace_back(k, r.dropped ? std::string() : r.name);
    }
    return mappingToCsv(pairs);
}

namespace {
// In the order `rules export --help` lists them.
constexpr std::pair<RuleExportFormat, std::string_view> kRuleExportNames[] = {
    { RuleExportFormat::Python, "python" },
    { RuleExportFormat::HfKeyMapping, "hf-key-mapping" },
    { RuleExportFormat::Torchtitan, "torchtitan" },
    { RuleExportFormat::Yaml, "yaml" },
    { RuleExportFormat::Json, "json" },
    { RuleExportFormat::Csv, "csv" },
};
} // namespace

const std::vector<std::string>& ruleExportFormatNames()
{
    static const std::vector<std::string> names = [] {
        std::vector<std::string> out;
        for (const auto& [format, name] : kRuleExportNames)
            out.emplace_back(name);
        return out;
    }();
    return names;
}

std::string_view ruleExportFormatName(RuleExportFormat f)
{
    for (const auto& [format, name] : kRuleExportNames)
        if (format == f)
            return name;
    return {};
}

std::optional<RuleExportFormat> ruleExportFormatNamed(std::string_view name)
{
    for (const auto& [format, n] : kRuleExportNames)
        if (n == name)
            return format;
    return std::nullopt;
}

bool ruleExportNeedsKeys(RuleExportFormat f)
{
    return f == RuleExportFormat::Torchtitan || f == RuleExportFormat::Csv;
}

RuleExport renderRuleExport(RuleExportFormat format, const RuleSet& rules, const std::vector<std::string>* keys)
{
    if (ruleExportNeedsKeys(format) && !keys)
        throw std::invalid_argument(std::string(ruleExportFormatName(format)) + " export lists explicit names: it needs the keys");
    switch (format) {
    case RuleExportFormat::Yaml: return { rulesToYaml(rules), {} };
    case RuleExportFormat::Json: return { rulesToJson(rules), {} };
    case RuleExportFormat::Python: return { rulesToPython(rules), {} };
    case RuleExportFormat::HfKeyMapping: {
        HfExport hf = rulesToHfKeyMapping(rules, keys);
        return { std::move(hf.json), std::move(hf.problems) };
    }
    case RuleExportFormat::Torchtitan: {
        TemplateExport t = rulesToTorchtitan(rules, *keys);
        return { std::move(t.text), std::move(t.problems) };
    }
    case RuleExportFormat::Csv: return { rulesToCsv(rules, *keys), {} };
    }
    throw std::invalid_argument("unknown rule export format");
}

} // namespace sl
