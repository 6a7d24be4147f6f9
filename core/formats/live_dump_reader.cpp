#include "live_dump_reader.h"

#include "util/error.h"

#include <simdjson.h>

namespace sl {

namespace {

constexpr std::string_view kFormat = "statelens-live-dump";
constexpr int64_t kNewestVersion = 1;

struct LiveDumpBacking : SourceBacking {
    std::vector<Entry> persistent;
    std::vector<Entry> nonPersistent;
    void selectContainer(Source& s, const std::string& container) const override
    {
        if (container == "model")
            s.entries = persistent;
        else if (container == "non_persistent_buffers")
            s.entries = nonPersistent;
        else
            throw LoadError(s.path, "no container '" + container + "' (available: 'model', 'non_persistent_buffers')");
        s.container = container;
    }
};

std::string text(simdjson::dom::element e)
{
    std::string_view s;
    if (!e.get_string().get(s))
        return std::string(s);
    return simdjson::to_string(e);
}

} // namespace

// A live dump lists a model's keys with shapes: a 100,000-key model's is about 20 MB.
constexpr uint64_t kMaxLiveDump = uint64_t(1) << 30;

bool looksLikeLiveDump(Bytes data)
{
    std::string_view t(reinterpret_cast<const char*>(data.data()), std::min<size_t>(data.size(), 4096));
    size_t i = t.find_first_not_of(" \t\r\n");
    return i != std::string_view::npos && t[i] == '{' && t.find(kFormat) != std::string_view::npos;
}

Source readLiveDump(const std::shared_ptr<const InputFile>& file, const OpenOptions& options)
{
    Source out;
    out.path = file->path();
    out.format = SourceFormat::LiveDump;
    const auto whole = file->whole(kMaxLiveDump, "live dump");
    const Bytes b = whole->bytes();
    simdjson::dom::parser parser;
    simdjson::dom::object root;
    if (auto err = parser.parse(reinterpret_cast<const char*>(b.data()), b.size(), true).get_object().get(root))
        throw LoadError(out.path, std::string("corrupt live dump JSON: ") + simdjson::error_message(err));
    std::string_view format;
    if (root["format"].get_string().get(format) || format != kFormat)
        throw LoadError(out.path, "not a StateLens live dump (\"format\" is not \"statelens-live-dump\")");
    int64_t version = 0;
    if (root["version"].get_int64().get(version) || version < 1)
        throw LoadError(out.path, "live dump without a valid \"version\"");
    if (version > kNewestVersion)
        out.addFinding(Severity::Warning,
            "live dump version " + std::to_string(version) + " is newer than this StateLens reads (1); fields may be missing");
    out.metadata.emplace_back("version", std::to_string(version));
    if (std::string_view cls; !root["model_class"].get_string().get(cls))
        out.metadata.emplace_back("model_class", std::string(cls));
    simdjson::dom::object producer;
    if (!root["producer"].get_object().get(producer))
        for (auto [k, v] : producer)
            out.metadata.emplace_back("producer." + std::string(k), text(v));

    simdjson::dom::array entries;
    if (root["entries"].get_array().get(entries))
        throw LoadError(out.path, "live dump without an \"entries\" array");
    auto backing = std::make_shared<LiveDumpBacking>();
    for (auto item : entries) {
        simdjson::dom::object o;
        if (item.get_object().get(o))
            throw LoadError(out.path, "live dump entry is not an object");
        Entry e;
        std::string_view name;
        if (o["name"].get_string().get(name))
            throw LoadError(out.path, "live dump entry without a \"name\"");
        e.name = std::string(name);
        std::string_view kind;
        if (o["kind"].get_string().get(kind))
            kind = "other";
        bool persistent = true;
        if (o["persistent"].get_bool().get(persistent))
            persistent = true; // absent: a state-dict key

        e.attributes.emplace_back("kind", std::string(kind));
        if (std::string_view module; !o["module"].get_string().get(module))
            e.attributes.emplace_back("module", std::string(module));

        simdjson::dom::array shape;
        if (!o["shape"].get_array().get(shape)) {
            for (auto d : shape) {
                int64_t v = 0;
                if (d.get_int64().get(v) || v < 0)
                    throw LoadError(out.path, "entry '" + e.name + "' has a shape that is not a list of non-negative integers");
                e.shape.push_back(v);
            }
            std::string_view dtype;
            if (!o["dtype"].get_string().get(dtype)) {
                auto dt = dtypeFromName(dtype);
                e.dtype = dt.value_or(DType::Unknown);
                if (!dt)
                    e.attributes.emplace_back("dtype", std::string(dtype));
            }
            e.kind = EntryKind::Tensor;
            e.isParameter = kind == "parameter";
        } else {
            e.kind = EntryKind::Object;
            if (std::string_view v; !o["value"].get_string().get(v))
                e.value = std::string(v);
            if (std::string_view t; !o["type"].get_string().get(t))
                e.typeName = std::string(t);
        }
        if (o["requires_grad"].get_bool().get(e.requiresGrad))
            e.requiresGrad = false;
        if (std::string_view dev; !o["device"].get_string().get(dev))
            e.device = std::string(dev);
        if (std::string_view sub; !o["subclass"].get_string().get(sub))
            e.typeName = std::string(sub);
        simdjson::dom::array tied;
        if (!o["tied_with"].get_array().get(tied)) {
            std::string partners;
            for (auto t : tied)
                partners += (partners.empty() ? "" : ", ") + text(t);
            e.attributes.emplace_back("tied_with", partners);
        }
        simdjson::dom::object dtensor;
        if (!o["dtensor"].get_object().get(dtensor)) {
            // The entry's shape is the DTensor's global shape; the rank's piece and the layout go here.
            auto sharding = std::make_shared<Sharding>();
            sharding->kind = Sharding::Kind::DTensor;
            auto ints = [&](simdjson::dom::element v, Shape& out) {
                simdjson::dom::array arr;
                if (v.get_array().get(arr))
                    return;
                for (auto x : arr) {
                    int64_t i = 0;
                    if (!x.get_int64().get(i) && i >= 0)
                        out.push_back(i);
                }
            };
            auto strings = [&](simdjson::dom::element v, std::vector<std::string>& out) {
                simdjson::dom::array arr;
                if (v.get_array().get(arr))
                    return;
                for (auto x : arr)
                    out.push_back(text(x));
            };
            for (auto [k, v] : dtensor) {
                if (k == "placements")
                    strings(v, sharding->placements);
                else if (k == "mesh_shape")
                    ints(v, sharding->meshShape);
                else if (k == "mesh_dim_names")
                    strings(v, sharding->meshDimNames);
                else if (k == "local_shape")
                    ints(v, sharding->localShape);
                else
                    e.attributes.emplace_back("dtensor." + std::string(k), text(v));
            }
            e.sharding = std::move(sharding);
        }
        (persistent ? backing->persistent : backing->nonPersistent).push_back(std::move(e));
    }
    out.containers.push_back({ "model", ContainerInfo::Role::Model, backing->persistent.size() });
    out.containers.push_back({ "non_persistent_buffers", ContainerInfo::Role::Other, backing->nonPersistent.size() });
    backing->selectContainer(out, options.container.value_or("model"));
    out.backing = backing;
    return out;
}

} // namespace sl
