#include "dcp_safetensors.h"

#include "formats/safetensors_reader.h"
#include "io/byte_reader.h"
#include "util/error.h"

#include <simdjson.h>

namespace sl::dcp {

namespace {

constexpr size_t kMaxDims = 64;

bool readInts(simdjson::dom::element e, Dims& out)
{
    simdjson::dom::array arr;
    if (e.get_array().get(arr) || arr.size() > kMaxDims)
        return false;
    out.clear();
    for (auto x : arr) {
        int64_t v = 0;
        if (x.get_int64().get(v) || v < 0)
            return false;
        out.push_back(v);
    }
    return true;
}

} // namespace

bool looksLikeDcpSafetensors(Bytes data)
{
    if (!looksLikeSafetensors(data))
        return false;
    ByteReader r(data);
    uint64_t n = r.u64le();
    std::string_view header(reinterpret_cast<const char*>(data.data()) + 8, static_cast<size_t>(n));
    return header.find("\"DCP_SHARDING_INFO\"") != std::string_view::npos;
}

Blob parseBlob(Bytes data)
{
    if (!looksLikeSafetensors(data))
        throw FormatError("not a safetensors blob (no header length followed by '{')");
    ByteReader r(data);
    const uint64_t n = r.u64le();
    Blob blob;
    blob.dataStart = 8 + n;

    simdjson::dom::parser parser;
    simdjson::dom::object header;
    if (auto err = parser.parse(reinterpret_cast<const char*>(data.data()) + 8, static_cast<size_t>(n), true).get_object().get(header))
        throw FormatError(std::string("unreadable safetensors header: ") + simdjson::error_message(err));

    std::unordered_map<std::string, Dims> saved;
    for (auto [key, value] : header) {
        if (key == "__metadata__") {
            simdjson::dom::object meta;
            if (value.get_object().get(meta))
                continue;
            for (auto [mk, mv] : meta) {
                std::string_view s;
                if (mv.get_string().get(s))
                    continue;
                if (mk == "DCP_VERSION") {
                    blob.dcpVersion = std::string(s);
                } else if (mk == "DCP_SHARDING_INFO") {
                    // A JSON document inside a JSON string.
                    blob.hasShardingInfo = true;
                    simdjson::dom::parser inner;
                    simdjson::dom::object info;
                    if (inner.parse(s.data(), s.size(), true).get_object().get(info))
                        throw FormatError("DCP_SHARDING_INFO in the safetensors __metadata__ is not a JSON object");
                    for (auto [fqn, v] : info) {
                        simdjson::dom::element offs;
                        Dims d;
                        if (!v["saved_offsets"].get(offs) && readInts(offs, d))
                            saved[std::string(fqn)] = std::move(d);
                    }
                }
            }
            continue;
        }
        BlobTensor t;
        std::string_view dtype;
        simdjson::dom::element shape, offsets;
        if (value["dtype"].get_string().get(dtype) || value["shape"].get(shape) || !readInts(shape, t.shape)
            || value["data_offsets"].get(offsets))
            throw FormatError("safetensors header entry '" + std::string(key) + "' lacks dtype, shape or data_offsets");
        Dims range;
        if (!readInts(offsets, range) || range.size() != 2 || range[0] > range[1])
            throw FormatError("safetensors header entry '" + std::string(key) + "' has invalid data_offsets");
        t.dtypeName = std::string(dtype);
        t.dtype = dtypeFromSafetensors(dtype);
        t.begin = static_cast<uint64_t>(range[0]);
        t.end = static_cast<uint64_t>(range[1]);
        std::string name(key);
        auto [it, inserted] = blob.tensors.try_emplace(name, std::move(t)); // moves t only when inserted
        if (inserted)
            blob.order.push_back(std::move(name));
        else
            it->second = std::move(t);
    }
    for (auto& [fqn, d] : saved) {
        auto it = blob.tensors.find(fqn);
        if (it != blob.tensors.end()) {
            it->second.hasSavedOffsets = true;
            it->second.savedOffsets = std::move(d);
        }
    }
    return blob;
}

} // namespace sl::dcp
