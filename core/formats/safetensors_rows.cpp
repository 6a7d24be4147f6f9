#include "formats/safetensors_rows.h"

#include "util/emplace_built.h"

#include <limits>

namespace sl {

SafetensorsRows::SafetensorsRows(uint64_t bufferStart)
    : m_bufferStart(bufferStart)
{
    // Room reserved once, from the header's length, where growing by doubling copied each buffer and touched
    // about twice its final size in fresh pages (c's names: 15 MB for 6). Address space only: what the
    // tensors do not use is never touched. A tensor takes over 64 bytes of header, its name lies in the
    // header, and a dimension takes two bytes or more ("1,"); a header of rank-5 shapes outgrows the guess.
    m_rows.reserve(static_cast<size_t>(bufferStart / 64));
    m_names.reserve(static_cast<size_t>(bufferStart));
    m_dims.reserve(static_cast<size_t>(bufferStart / 16));
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

SafetensorsTensor SafetensorsRows::tensor(size_t i) const
{
    const Row& r = m_rows[i];
    SafetensorsTensor t;
    t.name = name(i);
    t.dtype = r.dtype;
    t.bytesInFile = r.bytesInFile;
    const std::span<const int64_t> shape = shapeOf(r);
    t.shape.assign(shape.begin(), shape.end());
    t.begin = r.begin;
    t.end = r.end;
    return t;
}

void SafetensorsRows::build(std::vector<Entry>& out) const
{
    out.reserve(out.size() + m_rows.size());
    for (size_t i = 0; i < m_rows.size(); ++i)
        emplaceBuilt(out, [&] { return safetensorsEntry(m_bufferStart, tensor(i), 0); });
}

void SafetensorsRows::forEachBuilt(size_t from, size_t to, const std::function<void(const Entry&)>& visit) const
{
    for (size_t i = from; i < to; ++i)
        visit(safetensorsEntry(m_bufferStart, tensor(i), 0));
}

} // namespace sl
