#include "formats/index_rows.h"

#include "formats/safetensors_reader.h"
#include "model/shape_volume.h"
#include "quant/quantized_tensors.h"
#include "util/emplace_built.h"

namespace sl {

IndexRows::IndexRows(std::vector<ShardContents> shards, std::vector<int32_t> fileIndex, size_t expected)
    : m_shards(std::move(shards))
    , m_fileIndex(std::move(fileIndex))
{
    m_rows.reserve(expected);
}

uint64_t IndexRows::bytesOf(Ref r) const
{
    const SafetensorsTensor& t = record(r);
    return tensorBytes(shapeVolume(t.shape), t.dtype);
}

EntryRow IndexRows::row(size_t i) const
{
    const Row& r = m_rows[i];
    const SafetensorsTensor& t = record(r.tensor);
    EntryRow out;
    out.name = t.name;
    out.dtype = t.dtype;
    out.shape = std::span<const int64_t>(t.shape.data(), t.shape.size());
    if (r.scale.at != kNone) {
        out.parts = 2;
        out.groupBytes = bytesOf(r.tensor) + bytesOf(r.scale);
    }
    return out;
}

void IndexRows::build(std::vector<Entry>& out) const
{
    quant::Fp8PairGrouper pairs;
    out.reserve(out.size() + m_rows.size());
    for (const Row& r : m_rows) {
        auto entryOf = [this](Ref ref) {
            return safetensorsEntry(m_shards[ref.shard].header->bufferStart, record(ref), m_fileIndex[ref.shard]);
        };
        if (r.scale.at == kNone)
            emplaceBuilt(out, [&] { return entryOf(r.tensor); });
        else
            emplaceBuilt(out, [&] {
                return pairs.group(std::string(record(r.tensor).name), [&] { return entryOf(r.tensor); },
                    [&] { return entryOf(r.scale); });
            });
    }
}

} // namespace sl
