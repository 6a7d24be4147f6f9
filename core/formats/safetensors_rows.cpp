#include "formats/safetensors_rows.h"

#include "util/emplace_built.h"

#include <limits>

namespace sl {

SafetensorsRows::SafetensorsRows(uint64_t bufferStart)
    : m_bufferStart(bufferStart)
{
    // A tensor takes over 64 bytes of header: as the entries were reserved.
    m_rows.reserve(static_cast<size_t>(bufferStart / 64));
}

bool SafetensorsRows::add(const SafetensorsTensor& t)
{
    constexpr size_t kMax = std::numeric_limits<uint32_t>::max();
    if (!safetensorsEntryIsPlain(t) || t.shape.size() > std::numeric_limits<uint8_t>::max()
        || m_names.size() + t.name.size() > kMax || m_dims.size() + t.shape.size() > kMax)
        return false;
    m_rows.push_back({ t.begin, t.end, static_cast<uint32_t>(m_names.size()), static_cast<uint32_t>(t.name.size()),
        static_cast<uint32_t>(m_dims.size()), static_cast<uint8_t>(t.shape.size()), t.dtype, t.bytesInFile });
    m_names.append(t.name);
    m_dims.insert(m_dims.end(), t.shape.data(), t.shape.data() + t.shape.size());
    return true;
}

EntryRow SafetensorsRows::row(size_t i) const
{
    const Row& r = m_rows[i];
    EntryRow out;
    out.name = name(i);
    out.dtype = r.dtype;
    out.shape = shapeOf(r);
    return out;
}

void SafetensorsRows::build(std::vector<Entry>& out) const
{
    out.reserve(out.size() + m_rows.size());
    for (size_t i = 0; i < m_rows.size(); ++i) {
        const Row& r = m_rows[i];
        SafetensorsTensor t;
        t.name = name(i);
        t.dtype = r.dtype;
        t.bytesInFile = r.bytesInFile;
        const std::span<const int64_t> shape = shapeOf(r);
        t.shape.assign(shape.begin(), shape.end());
        t.begin = r.begin;
        t.end = r.end;
        emplaceBuilt(out, [&] { return safetensorsEntry(m_bufferStart, t, 0); });
    }
}

} // namespace sl
