#include "dcp_safetensors.h"

#include "formats/safetensors_reader.h"
#include "io/byte_reader.h"
#include "util/error.h"

#include <simdjson.h>

#include <optional>
#include <span>

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

namespace {

// The header text of the blob at `offset`, or nullopt when the bytes there do not start like one.
std::optional<simdjson::padded_string> blobHeader(const InputFile& file, uint64_t offset)
{
    if (offset > file.size())
        return std::nullopt;
    std::vector<uint8_t> headBuffer;
    const Bytes head = file.read(offset, std::min<uint64_t>(file.size() - offset, 4096), headBuffer);
    if (!looksLikeSafetensors(head, file.size() - offset))
        return std::nullopt;
    const uint64_t n = ByteReader(head).u64le();
    simdjson::padded_string text(static_cast<size_t>(n));
    file.readInto(offset + 8, std::span(reinterpret_cast<uint8_t*>(text.data()), static_cast<size_t>(n)));
    return text;
}

} // namespace

bool looksLikeDcpSafetensors(const InputFile& file)
{
    const auto header = blobHeader(file, 0);
    return header && std::string_view(*header).find("\"DCP_SHARDING_INFO\"") != std::string_view::npos;
}

Blob parseBlob(const InputFile& file, uint64_t offset)
{
    const auto text = blobHeader(file, offset);
    if (!text)
        throw FormatError("not a safetensors blob (no header length followed by '{')");
    Blob blob;
    blob.dataStart = 8 + text->size();

    simdjson::dom::parser parser;
    simdjson::dom::object header;
    if (auto err = parser.parse(*text).get_object().get(header))
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
