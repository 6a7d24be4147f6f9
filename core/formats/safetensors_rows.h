#pragma once
// A safetensors file's entries handed over as rows for a listing (model/entry_list.h). The header is read in
// chunks, so its tensors are kept as they stream past: every name in one buffer, every shape in one array,
// and 32 bytes a tensor, where each was built into an Entry (216 bytes, its name on the heap): a header of
// 100,000 tensors is mostly that. Built into entries as the reader builds them (safetensorsEntry).

#include "formats/safetensors_reader.h"
#include "model/entry_list.h"

#include <cstdint>
#include <string>
#include <vector>

namespace sl {

class SafetensorsRows final : public DeferredEntries {
public:
    explicit SafetensorsRows(uint64_t bufferStart);
    // Keeps the tensor. False for one whose entry a row cannot give (an attribute says how torch reads its
    // dtype or shape, or the buffers outgrow their 32-bit offsets): the reader builds entries instead.
    bool add(const SafetensorsTensor& t);
    std::string_view name(size_t i) const
    {
        return std::string_view(m_names.data() + m_rows[i].nameOffset, m_rows[i].nameLength);
    }

    size_t size() const override { return m_rows.size(); }
    EntryRow row(size_t i) const override;
    void build(std::vector<Entry>& out) const override;
    void forEachBuilt(size_t from, size_t to, const std::function<void(const Entry&)>& visit) const override;

private:
    struct Row {
        uint64_t begin, end; // data_offsets
        uint32_t nameOffset, nameLength; // in m_names
        uint32_t shapeOffset; // in m_dims
        uint8_t rank;
        DType dtype;
        bool bytesInFile;
    };
    std::span<const int64_t> shapeOf(const Row& r) const { return { m_dims.data() + r.shapeOffset, r.rank }; }
    // Row i as the reader handed it over, which safetensorsEntry builds.
    SafetensorsTensor tensor(size_t i) const;

    uint64_t m_bufferStart;
    std::string m_names;
    std::vector<int64_t> m_dims;
    std::vector<Row> m_rows;
};

} // namespace sl
