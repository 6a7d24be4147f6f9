#include "formats/safetensors_rows.h"

#include "util/emplace_built.h"

#include <cstring>
#include <limits>

namespace sl {

SafetensorsRows::SafetensorsRows(uint64_t bufferStart)
    : m_bufferStart(bufferStart)
{
}

bool SafetensorsRows::add(const SafetensorsTensor& t)
{
    if (!safetensorsEntryIsPlain(t) || t.shape.size() > std::numeric_limits<uint8_t>::max()
        || t.name.size() > std::numeric_limits<uint32_t>::max())
        return false;
    const size_t shapeBytes = t.shape.size() * sizeof(int64_t);
    char* text = m_text.allocate(shapeBytes + t.name.size());
    if (shapeBytes) // memcpy from a null pointer is undefined even for 0 bytes
        std::memcpy(text, t.shape.data(), shapeBytes);
    if (!t.name.empty())
        std::memcpy(text + shapeBytes, t.name.data(), t.name.size());
    m_rows.push_back({ t.begin, t.end, text, static_cast<uint32_t>(t.name.size()), static_cast<uint8_t>(t.shape.size()),
        t.dtype, t.bytesInFile });
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
