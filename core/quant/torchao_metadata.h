#pragma once
// torchao's flattened safetensors layout: the __metadata__ that describes its tensors, read from the
// headers only, and the names its classes use. Private to quant/ (grouper.h, scheme_torchao.cpp).

#include "grouper_names.h"

namespace sl::quant::grouping {

// torchao's safetensors metadata

// A __metadata__ value holds JSON text; an index's "metadata" values are JSON themselves (a string value
// arrives quoted). The text inside, or the value as it is.
inline std::string unquoted(simdjson::dom::parser& parser, std::string_view v)
{
    if (v.empty() || v.front() != '"')
        return std::string(v);
    simdjson::dom::element doc;
    std::string_view s;
    if (parser.parse(v.data(), v.size(), true).get(doc) || doc.get_string().get(s))
        return std::string(v);
    return std::string(s);
}

// The __metadata__ of a safetensors file, read from its header (not from any tensor's bytes).
// `budget` (bytes of headers still allowed) shrinks by what is read.
inline std::vector<std::pair<std::string, std::string>> readSafetensorsMetadata(
    const std::string& path, simdjson::dom::parser& parser, uint64_t& budget)
{
    std::vector<std::pair<std::string, std::string>> out;
    std::string header;
    try {
        const auto file = InputFile::open(path);
        uint8_t len[8];
        file->readInto(0, len);
        uint64_t n = 0;
        for (int i = 7; i >= 0; --i)
            n = n << 8 | len[i];
        if (n <= budget && n + 8 <= file->size()) {
            budget -= n;
            header.resize(n);
            file->readInto(8, std::span<uint8_t>(reinterpret_cast<uint8_t*>(header.data()), header.size()));
        }
    } catch (const std::exception&) {
        return out; // unreadable: no metadata (the reader reports the file itself)
    }
    simdjson::dom::element doc;
    simdjson::dom::object meta;
    if (header.empty() || parser.parse(header.data(), header.size(), true).get(doc)
        || doc["__metadata__"].get_object().get(meta))
        return out;
    for (auto [k, v] : meta) {
        std::string_view s;
        if (!v.get_string().get(s))
            out.emplace_back(std::string(k), std::string(s));
    }
    return out;
}

// Inner tensor names torchao classes use; a flattened layout without metadata is recognised by them.
constexpr std::string_view kTorchaoInner[] = { "qdata", "scale", "zero_point", "scale_and_zero", "act_pre_scale",
    "per_tensor_scale", "act_per_tensor_scale", "act_quant_scale", "act_quant_zero_point", "group_scale",
    "group_zero", "row_scale", "quantized_data", "scaler_mean", "quantization_factor", "quantized_scalers", "nf4",
    "original_weight", "original_weight_tensor", "_data", "_scale" };
// The tensor whose position a flattened group takes, and whose dtype is the storage dtype.
constexpr std::string_view kTorchaoPrimary[] = { "qdata", "quantized_data", "_data", "original_weight",
    "original_weight_tensor", "data" };

// "_weight_qdata": the data tensor of torchao's flattened layout (every class it saves has a qdata).
inline bool isUnderscoreQdata(std::string_view last) { return last.size() >= 8 && last[0] == '_' && last.ends_with("_qdata"); }

inline bool isTorchaoInner(std::string_view inner)
{
    return std::find(std::begin(kTorchaoInner), std::end(kTorchaoInner), inner) != std::end(kTorchaoInner);
}

// "<class 'torchao.quantization.Float8Tensor'>" -> "torchao.quantization.Float8Tensor".
inline std::string_view classFromTypeText(std::string_view t)
{
    if (t.starts_with("<class '") && t.ends_with("'>"))
        return t.substr(8, t.size() - 10);
    return t;
}

} // namespace sl::quant::grouping
