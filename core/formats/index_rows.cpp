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

Entry IndexRows::entry(size_t i, quant::Fp8PairGrouper& pairs) const
{
    const Row& r = m_rows[i];
    auto entryOf = [this](Ref ref) {
        return safetensorsEntry(m_shards[ref.shard].header->bufferStart, record(ref), m_fileIndex[ref.shard]);
    };
    if (r.scale.at == kNone)
        return entryOf(r.tensor);
    return pairs.group(std::string(record(r.tensor).name), [&] { return entryOf(r.tensor); },
        [&] { return entryOf(r.scale); });
}

void IndexRows::build(std::vector<Entry>& out) const
{
    quant::Fp8PairGrouper pairs;
    out.reserve(out.size() + m_rows.size());
    for (size_t i = 0; i < m_rows.size(); ++i)
        emplaceBuilt(out, [&] { return entry(i, pairs); });
}

void IndexRows::forEachBuilt(size_t from, size_t to, const std::function<void(const Entry&)>& visit) const
{
    quant::Fp8PairGrouper pairs;
    for (size_t i = from; i < to; ++i)
        visit(entry(i, pairs));
}

} // namespace sl
