#include "load_error_reader.h"

#include "util/error.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <unordered_map>

namespace sl {

namespace {

constexpr std::string_view kHeadMissing = "missing key(s) in state_dict:";
constexpr std::string_view kHeadUnexpected = "unexpected key(s) in state_dict:";
constexpr std::string_view kHeadMismatch = "size mismatch for ";
constexpr std::string_view kHeadWhileCopying = "while copying the parameter named ";
constexpr std::string_view kHeadError = "error(s) in loading state_dict for ";

// Heads are matched case-insensitively (Lightning and logs change the casing): the text is lower-cased
// once into a copy with the same offsets, and searched with string_view::find (memchr/memcmp speed, which
// keeps a multi-megabyte log quick even in sanitizer builds).
std::string asciiLower(std::string_view t)
{
    std::string out(t);
    for (char& c : out)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

size_t findIn(std::string_view lowered, std::string_view needle, size_t from)
{
    return lowered.find(needle, from);
}

void skipSpace(std::string_view t, size_t& p)
{
    while (p < t.size() && std::isspace(static_cast<unsigned char>(t[p])))
        ++p;
}

// "a", "b", 'c'. -> keys, stopping at the first thing that is not a quoted key.
std::vector<std::string> quotedList(std::string_view t, size_t& p)
{
    std::vector<std::string> keys;
    while (true) {
        skipSpace(t, p);
        if (p < t.size() && t[p] == ',') {
            ++p;
            continue;
        }
        if (p >= t.size() || (t[p] != '"' && t[p] != '\''))
            break;
        char quote = t[p];
        size_t end = t.find(quote, p + 1);
        if (end == std::string_view::npos)
            break;
        keys.emplace_back(t.substr(p + 1, end - p - 1));
        p = end + 1;
    }
    return keys;
}

// torch.Size([4, 2]) or [4, 2] or (4, 2) at p.
std::optional<Shape> parseShape(std::string_view t, size_t& p)
{
    skipSpace(t, p);
    if (t.substr(p, 11) == "torch.Size(")
        p += 11;
    if (p >= t.size() || (t[p] != '[' && t[p] != '('))
        return std::nullopt;
    char close = t[p] == '[' ? ']' : ')';
    ++p;
    Shape s;
    while (p < t.size()) {
        skipSpace(t, p);
        if (t[p] == close) {
            ++p;
            if (p < t.size() && t[p] == ')')
                ++p; // torch.Size(...) closing paren
            return s;
        }
        if (t[p] == ',') {
            ++p;
            continue;
        }
        int64_t v = 0;
        auto [ptr, ec] = std::from_chars(t.data() + p, t.data() + t.size(), v);
        if (ec != std::errc() || v < 0 || s.size() >= 64)
            return std::nullopt;
        s.push_back(v);
        p = static_cast<size_t>(ptr - t.data());
    }
    return std::nullopt;
}

struct Side {
    std::vector<Entry> entries;
    std::unordered_map<std::string, size_t> index;

    Entry& get(const std::string& key, const char* from)
    {
        auto it = index.find(key);
        if (it != index.end())
            return entries[it->second];
        Entry e;
        e.name = key;
        e.shapeKnown = false; // until a size-mismatch clause gives it
        e.attributes.emplace_back("from", from);
        index.emplace(key, entries.size());
        entries.push_back(std::move(e));
        return entries.back();
    }
};

// The two sides, kept so either can be selected again.
struct LoadErrorBacking : SourceBacking {
    Side model;
    Side checkpoint;
    void selectContainer(Source& s, const std::string& container) const override
    {
        if (container != "model" && container != "checkpoint")
            throw LoadError(s.path, "no container '" + container + "' (available: 'model', 'checkpoint')");
        s.container = container;
        s.entries = container == "model" ? model.entries : checkpoint.entries;
    }
};

} // namespace

bool looksLikeLoadErrorText(Bytes first, Bytes last)
{
    std::string_view raw(reinterpret_cast<const char*>(first.data()), std::min<size_t>(first.size(), kSniffedBytes));
    // A text file: no NUL bytes in the first kilobyte.
    if (raw.substr(0, 1024).find('\0') != std::string_view::npos)
        return false;
    auto hasHead = [](std::string_view window) {
        const std::string t = asciiLower(window);
        return findIn(t, kHeadError, 0) != std::string_view::npos || findIn(t, kHeadMissing, 0) != std::string_view::npos
            || findIn(t, kHeadUnexpected, 0) != std::string_view::npos
            || (findIn(t, kHeadMismatch, 0) != std::string_view::npos && findIn(t, "from checkpoint", 0) != std::string_view::npos);
    };
    std::string_view end(reinterpret_cast<const char*>(last.data()), std::min<size_t>(last.size(), kSniffedBytes));
    return hasHead(raw) || (!end.empty() && hasHead(end));
}

Source parseLoadErrorText(std::string name, std::string_view text, const OpenOptions& options)
{
    Source out;
    out.path = std::move(name);
    out.format = SourceFormat::LoadErrorText;
    auto backing = std::make_shared<LoadErrorBacking>();
    size_t clauses = 0;
    const std::string lowered = asciiLower(text);

    // The model's class. A traceback also quotes torch's own source line ("... state_dict for {}:"), so
    // take the first occurrence followed by an identifier.
    for (size_t at = findIn(lowered, kHeadError, 0); at != std::string_view::npos;
         at = findIn(lowered, kHeadError, at + 1)) {
        size_t p = at + kHeadError.size();
        size_t end = text.find(':', p);
        if (end == std::string_view::npos || end == p || end - p > 200)
            continue;
        std::string_view cls = text.substr(p, end - p);
        if (std::all_of(cls.begin(), cls.end(),
                [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; })) {
            out.metadata.emplace_back("model_class", std::string(cls));
            break;
        }
    }
    for (size_t at = findIn(lowered, kHeadMissing, 0); at != std::string_view::npos;
         at = findIn(lowered, kHeadMissing, at + 1)) {
        size_t p = at + kHeadMissing.size();
        for (auto& k : quotedList(text, p))
            backing->model.get(k, "missing");
        ++clauses;
    }
    for (size_t at = findIn(lowered, kHeadUnexpected, 0); at != std::string_view::npos;
         at = findIn(lowered, kHeadUnexpected, at + 1)) {
        size_t p = at + kHeadUnexpected.size();
        for (auto& k : quotedList(text, p))
            backing->checkpoint.get(k, "unexpected");
        ++clauses;
    }
    for (size_t at = findIn(lowered, kHeadMismatch, 0); at != std::string_view::npos;
         at = findIn(lowered, kHeadMismatch, at + 1)) {
        // size mismatch for KEY: copying a param with shape S1 from checkpoint, the shape in current model is S2.
        size_t p = at + kHeadMismatch.size();
        size_t colon = text.find(": copying a param with shape", p);
        if (colon == std::string_view::npos)
            continue;
        std::string key(text.substr(p, colon - p));
        p = colon + std::string_view(": copying a param with shape").size();
        auto fromCkpt = parseShape(text, p);
        size_t modelAt = findIn(lowered, "the shape in current model is", p);
        if (!fromCkpt || modelAt == std::string_view::npos)
            continue;
        p = modelAt + std::string_view("the shape in current model is").size();
        auto inModel = parseShape(text, p);
        if (!inModel)
            continue;
        Entry& ce = backing->checkpoint.get(key, "size mismatch");
        ce.shape = *fromCkpt;
        ce.shapeKnown = true;
        Entry& me = backing->model.get(key, "size mismatch");
        me.shape = *inModel;
        me.shapeKnown = true;
        ++clauses;
    }
    for (size_t at = findIn(lowered, kHeadWhileCopying, 0); at != std::string_view::npos;
         at = findIn(lowered, kHeadWhileCopying, at + 1)) {
        // While copying the parameter named "KEY", whose dimensions in the model are S1 and whose dimensions
        // in the checkpoint are S2, an exception occurred : (...)
        size_t p = at + kHeadWhileCopying.size();
        auto keys = quotedList(text, p);
        if (keys.empty())
            continue;
        size_t m = findIn(lowered, "dimensions in the model are", p);
        size_t c = findIn(lowered, "dimensions in the checkpoint are", p);
        if (m == std::string_view::npos || c == std::string_view::npos)
            continue;
        size_t pm = m + std::string_view("dimensions in the model are").size();
        size_t pc = c + std::string_view("dimensions in the checkpoint are").size();
        auto inModel = parseShape(text, pm);
        auto fromCkpt = parseShape(text, pc);
        Entry& me = backing->model.get(keys[0], "copy error");
        Entry& ce = backing->checkpoint.get(keys[0], "copy error");
        if (inModel) {
            me.shape = *inModel;
            me.shapeKnown = true;
        }
        if (fromCkpt) {
            ce.shape = *fromCkpt;
            ce.shapeKnown = true;
        }
        ++clauses;
    }
    if (clauses == 0)
        throw LoadError(
            out.path, "no load_state_dict error clauses (Missing key(s) / Unexpected key(s) / size mismatch) found");

    out.containers.push_back({ "model", ContainerInfo::Role::Model, backing->model.entries.size() });
    out.containers.push_back({ "checkpoint", ContainerInfo::Role::Other, backing->checkpoint.entries.size() });
    out.addFinding(Severity::Info,
        "from an error message: it names only the keys that failed (" + std::to_string(backing->model.entries.size())
            + " on the model side, " + std::to_string(backing->checkpoint.entries.size())
            + " on the checkpoint side); shapes are known only for size mismatches");
    for (const auto& [k, v] : out.metadata)
        if (k == "model_class" && v == "OptimizedModule")
            out.addFinding(Severity::Info,
                "the model was wrapped by torch.compile (OptimizedModule): its keys carry the _orig_mod. prefix");
    backing->selectContainer(out, options.container.value_or("model"));
    out.backing = backing;
    return out;
}

Source readLoadErrorText(const std::shared_ptr<const InputFile>& file, const OpenOptions& options)
{
    if (file->size() > kMaxLoadErrorText)
        throw LoadError(file->path(), "a load_state_dict error text of " + std::to_string(file->size() >> 20)
                + " MiB is larger than any StateLens reads (256 MiB); save the part of the log with the error");
    const auto text = file->whole(kMaxLoadErrorText, "load_state_dict error text");
    const Bytes b = text->bytes();
    return parseLoadErrorText(
        file->path(), std::string_view(reinterpret_cast<const char*>(b.data()), b.size()), options);
}

} // namespace sl
