#include "rule_io.h"

#include "io/input_file.h"
#include "io/json_writer.h"
#include "rules/rule_engine.h"
#include "util/error.h"
#include "util/terminal_text.h"

#include <simdjson.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <sstream>

namespace sl {

namespace {

constexpr int kNewestVersion = 1;

std::string_view trimLeft(std::string_view s)
{
    size_t i = s.find_first_not_of(" \t");
    return i == std::string_view::npos ? std::string_view {} : s.substr(i);
}

// Comment lines before `rules:` and before each item of its sequence, in order.
void collectComments(std::string_view text, RuleSet& out)
{
    std::vector<std::string> pending;
    bool inRules = false;
    size_t item = 0;
    size_t pos = 0;
    while (pos <= text.size()) {
        size_t end = text.find('\n', pos);
        std::string_view line = text.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
        if (!line.empty() && line.back() == '\r')
            line.remove_suffix(1);
        std::string_view t = trimLeft(line);
        if (t.substr(0, 1) == "#") {
            t.remove_prefix(1);
            if (t.substr(0, 1) == " ")
                t.remove_prefix(1);
            pending.emplace_back(t);
        } else if (!inRules && line.substr(0, 6) == "rules:") {
            out.headerComments = std::move(pending);
            pending.clear();
            inRules = true;
        } else if (inRules && t.substr(0, 2) == "- ") {
            if (item < out.rules.size())
                out.rules[item].comments = std::move(pending);
            pending.clear();
            ++item;
        } else if (!t.empty() && !inRules) {
            // Comments above `version:` still belong to the header.
        } else if (!t.empty()) {
            pending.clear(); // a comment inside a rule's fields stays with nothing
        }
        if (end == std::string_view::npos)
            break;
        pos = end + 1;
    }
    if (!inRules)
        out.headerComments = std::move(pending);
}

bool parseMode(std::string_view text, RuleMode& mode)
{
    if (text == "chain")
        mode = RuleMode::Chain;
    else if (text == "first_match")
        mode = RuleMode::FirstMatch;
    else
        return false;
    return true;
}

std::string tooManyRules(size_t count)
{
    return std::to_string(count) + " rules: a rule file holds at most " + std::to_string(kMaxRules);
}

// A first pass over the parser's events, before yaml-cpp builds its node tree: no aliases, and at most
// kMaxYamlNodes nodes, so the tree (and every string taken from it) is bounded by the file itself.
class BoundedYaml : public YAML::EventHandler {
public:
    explicit BoundedYaml(const std::string& name)
        : m_name(name)
    {
    }
    void OnDocumentStart(const YAML::Mark&) override { }
    void OnDocumentEnd() override { }
    void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { node(mark); }
    void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override
    {
        throw LoadError(m_name,
            "a YAML alias (*name) at line " + std::to_string(mark.line + 1)
                + ": rule files do not use anchors and aliases; write each value out");
    }
    void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override
    {
        node(mark);
    }
    void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override
    {
        node(mark);
    }
    void OnSequenceEnd() override { }
    void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override
    {
        node(mark);
    }
    void OnMapEnd() override { }

private:
    void node(const YAML::Mark& mark)
    {
        if (++m_nodes > kMaxYamlNodes)
            throw LoadError(m_name,
                "more than " + std::to_string(kMaxYamlNodes) + " YAML nodes (at line " + std::to_string(mark.line + 1)
                    + "): a rule file holds at most " + std::to_string(kMaxRules) + " rules");
    }
    const std::string& m_name;
    size_t m_nodes = 0;
};

RuleSet fromYaml(std::string_view text, const std::string& name)
{
    YAML::Node root;
    try {
        const std::string document(text);
        {
            std::istringstream in(document);
            YAML::Parser parser(in);
            BoundedYaml bounds(name);
            parser.HandleNextDocument(bounds); // the first document: the one YAML::Load reads
        }
        root = YAML::Load(document);
    } catch (const YAML::Exception& e) {
        throw LoadError(name, "YAML error at line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
    }
    if (!root.IsMap())
        throw LoadError(name, "a rule file is a mapping with 'version' and 'rules'");
    RuleSet out;
    auto line = [](const YAML::Node& n) { return " (line " + std::to_string(n.Mark().line + 1) + ")"; };
    for (const auto& kv : root) {
        const std::string key = kv.first.as<std::string>();
        if (key != "version" && key != "rules" && key != "mode")
            throw LoadError(name, "unknown top-level field '" + key + "'" + line(kv.first));
    }
    try {
        out.version = root["version"] ? root["version"].as<int>() : 1;
    } catch (const YAML::Exception&) {
        throw LoadError(name, "'version' must be a number" + line(root["version"]));
    }
    if (out.version < 1 || out.version > kNewestVersion)
        throw LoadError(name, "rule file version " + std::to_string(out.version) + " is not supported (this StateLens reads version 1)");
    if (const YAML::Node mode = root["mode"]) {
        const std::string m = mode.IsScalar() ? mode.as<std::string>() : std::string();
        if (!parseMode(m, out.mode))
            throw LoadError(name, "'mode' must be 'chain' or 'first_match'" + line(mode));
    }
    const YAML::Node rules = root["rules"];
    if (rules && !rules.IsNull() && !rules.IsSequence())
        throw LoadError(name, "'rules' must be a list" + line(rules));
    if (rules && rules.IsSequence()) {
        if (rules.size() > kMaxRules)
            throw LoadError(name, tooManyRules(rules.size()));
        for (const auto& item : rules) {
            if (!item.IsMap())
                throw LoadError(name, "each rule is a mapping with at least 'pattern'" + line(item));
            Rule r;
            for (const auto& kv : item) {
                const std::string key = kv.first.as<std::string>();
                try {
                    if (key == "pattern")
                        r.pattern = kv.second.as<std::string>();
                    else if (key == "replace" || key == "replacement")
                        r.replacement = kv.second.IsNull() ? std::string() : kv.second.as<std::string>();
                    else if (key == "drop")
                        r.drop = kv.second.as<bool>();
                    else if (key == "enabled")
                        r.enabled = kv.second.as<bool>();
                    else if (key == "note")
                        r.note = kv.second.as<std::string>();
                    else
                        throw LoadError(name, "unknown field '" + key + "' in rule " + std::to_string(out.rules.size() + 1) + line(kv.first));
                } catch (const YAML::Exception&) {
                    throw LoadError(name, "field '" + key + "' of rule " + std::to_string(out.rules.size() + 1) + " has the wrong type" + line(kv.second));
                }
            }
            if (!item["pattern"])
                throw LoadError(name, "rule " + std::to_string(out.rules.size() + 1) + " has no 'pattern'" + line(item));
            // Rules are Python str text (the exports write them as such); yaml-cpp passes any bytes on.
            for (const auto& [field, text] :
                { std::pair { "pattern", &r.pattern }, { "replace", &r.replacement }, { "note", &r.note } })
                if (!isValidUtf8(*text))
                    throw LoadError(name,
                        "field '" + std::string(field) + "' of rule " + std::to_string(out.rules.size() + 1)
                            + " is not UTF-8 text" + line(item));
            out.rules.push_back(std::move(r));
        }
    }
    checkRuleCount(out, name);
    collectComments(text, out);
    return out;
}

RuleSet fromJson(std::string_view text, const std::string& name)
{
    simdjson::dom::parser parser;
    simdjson::dom::object root;
    if (auto err = parser.parse(text.data(), text.size(), true).get_object().get(root))
        throw LoadError(name, std::string("corrupt JSON rule file: ") + simdjson::error_message(err));
    RuleSet out;
    for (auto [k, v] : root) {
        if (k == "version") {
            int64_t version = 0;
            if (v.get_int64().get(version))
                throw LoadError(name, "'version' must be a number");
            out.version = static_cast<int>(version);
        } else if (k == "mode") {
            std::string_view m;
            if (v.get_string().get(m) || !parseMode(m, out.mode))
                throw LoadError(name, "'mode' must be 'chain' or 'first_match'");
        } else if (k != "rules") {
            throw LoadError(name, "unknown top-level field '" + std::string(k) + "'");
        }
    }
    if (out.version < 1 || out.version > kNewestVersion)
        throw LoadError(name, "rule file version " + std::to_string(out.version) + " is not supported (this StateLens reads version 1)");
    simdjson::dom::element rulesField;
    if (root["rules"].get(rulesField))
        return out; // no rules: an empty set
    simdjson::dom::array rules;
    if (rulesField.get_array().get(rules))
        throw LoadError(name, "'rules' must be a list of rules");
    if (rules.size() > kMaxRules)
        throw LoadError(name, tooManyRules(rules.size()));
    for (auto item : rules) {
        simdjson::dom::object o;
        if (item.get_object().get(o))
            throw LoadError(name, "each rule is an object with at least 'pattern'");
        Rule r;
        bool havePattern = false;
        const std::string which = "rule " + std::to_string(out.rules.size() + 1);
        for (auto [k, v] : o) {
            std::string_view s;
            bool b = false;
            if (k == "pattern") {
                if (v.get_string().get(s))
                    throw LoadError(name, "'pattern' of " + which + " must be a string");
                r.pattern = std::string(s);
                havePattern = true;
            } else if (k == "replace" || k == "replacement") {
                if (v.get_string().get(s))
                    throw LoadError(name, "'replace' of " + which + " must be a string");
                r.replacement = std::string(s);
            } else if (k == "note") {
                if (v.get_string().get(s))
                    throw LoadError(name, "'note' of " + which + " must be a string");
                r.note = std::string(s);
            } else if (k == "drop" || k == "enabled") {
                if (v.get_bool().get(b))
                    throw LoadError(name, "'" + std::string(k) + "' of " + which + " must be true or false");
                (k == "drop" ? r.drop : r.enabled) = b;
            } else {
                throw LoadError(name, "unknown field '" + std::string(k) + "' in " + which);
            }
        }
        if (!havePattern)
            throw LoadError(name, which + " has no 'pattern'");
        out.rules.push_back(std::move(r));
    }
    checkRuleCount(out, name);
    return out;
}

} // namespace

void checkRuleCount(const RuleSet& rules, const std::string& name)
{
    if (rules.rules.size() > kMaxRules)
        throw LoadError(name, tooManyRules(rules.rules.size()));
    if (auto e = patternRuleCapError(rules))
        throw LoadError(name, describePatternError(*e));
}

RuleSet parseRules(std::string_view text, const std::string& name)
{
    size_t i = text.find_first_not_of(" \t\r\n");
    if (i != std::string_view::npos && text[i] == '{')
        return fromJson(text, name);
    try {
        return fromYaml(text, name);
    } catch (const YAML::Exception& e) {
        // A conversion the field checks above did not anticipate (a sequence used as a key, ...).
        std::string msg = e.msg;
        std::replace(msg.begin(), msg.end(), '\n', ' ');
        throw LoadError(name, "YAML error at line " + std::to_string(e.mark.line + 1) + ": " + msg);
    }
}

RuleSet loadRules(const std::string& path)
{
    auto file = InputFile::open(path, InputKind::Rules);
    if (file->size() > kMaxRuleFileBytes)
        throw LoadError(path, "a rule file larger than 64 MiB is not a rule file");
    const auto text = file->whole(kMaxRuleFileBytes, "rule file");
    const Bytes b = text->bytes();
    return parseRules(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()), path);
}

// Written by hand rather than with YAML::Emitter: the emitter puts a comment that follows a mapping on
// the line of its last value, where the next load would give it to the wrong rule. Text that a terminal
// would obey (control characters) goes double-quoted, escaped, so `suggest` output is safe to print.
static std::string yamlScalar(const std::string& s)
{
    if (isTerminalSafe(s)) {
        std::string out = "'";
        for (char c : s) {
            if (c == '\'')
                out += '\'';
            out += c;
        }
        return out + "'";
    }
    YAML::Emitter e;
    e << YAML::DoubleQuoted << s;
    std::string out;
    for (char c : std::string_view(e.c_str()))
        out += c == '\x7f' ? std::string("\\x7f") : std::string(1, c); // the emitter leaves DEL raw
    return out;
}

std::string rulesToYaml(const RuleSet& set)
{
    std::string out;
    auto comment = [&](const std::string& indent, const std::string& text) {
        // One comment per line, whatever the text holds; a comment has no escapes, so what a terminal
        // would obey is shown escaped (suggestion titles quote keys).
        size_t start = 0;
        for (;;) {
            size_t nl = text.find('\n', start);
            out += indent + "# "
                + terminalText(
                    std::string_view(text).substr(start, nl == std::string::npos ? std::string::npos : nl - start))
                + "\n";
            if (nl == std::string::npos)
                break;
            start = nl + 1;
        }
    };
    for (const auto& c : set.headerComments)
        comment("", c);
    out += "version: " + std::to_string(set.version) + "\n";
    if (set.mode == RuleMode::FirstMatch)
        out += "mode: first_match\n";
    out += set.rules.empty() ? "rules: []\n" : "rules:\n";
    for (const auto& r : set.rules) {
        for (const auto& c : r.comments)
            comment("  ", c);
        out += "  - pattern: " + yamlScalar(r.pattern) + "\n";
        if (!r.drop || !r.replacement.empty())
            out += "    replace: " + yamlScalar(r.replacement) + "\n";
        if (r.drop)
            out += "    drop: true\n";
        if (!r.enabled)
            out += "    enabled: false\n";
        if (!r.note.empty())
            out += "    note: " + yamlScalar(r.note) + "\n";
    }
    return out;
}

std::string rulesToJson(const RuleSet& set)
{
    JsonWriter w;
    w.beginObject();
    w.field("version", static_cast<int64_t>(set.version));
    if (set.mode == RuleMode::FirstMatch)
        w.field("mode", "first_match");
    w.key("rules");
    w.beginArray();
    for (const auto& r : set.rules) {
        w.beginObject();
        w.field("pattern", r.pattern);
        w.field("replace", r.replacement);
        if (r.drop)
            w.field("drop", true);
        if (!r.enabled)
            w.field("enabled", false);
        if (!r.note.empty())
            w.field("note", r.note);
        w.endObject();
    }
    w.endArray();
    w.endObject();
    std::string out(w.text());
    out += '\n';
    return out;
}

} // namespace sl
