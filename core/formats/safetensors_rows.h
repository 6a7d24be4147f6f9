#pragma once
// A safetensors file's entries handed over as rows for a listing (model/entry_list.h). The header is read in
// chunks, so its tensors are kept as they stream past: 32 bytes a tensor, and its shape and name side by side
// in blocks (util/block_vector.h), where each was built into an Entry (216 bytes, its name on the heap): a
// header of 100,000 tensors is mostly that. Built into entries as the reader builds them (safetensorsEntry).

#include "formats/safetensors_reader.h"
#include "model/entry_list.h"
#include "util/block_vector.h"

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace sl {

class SafetensorsRows final : public DeferredEntries {
public:
    explicit SafetensorsRows(uint64_t bufferStart);
    // Keeps the tensor. False for one whose entry a row cannot give (an attribute says how torch reads its
    // dtype or shape): the reader builds entries instead.
    bool add(const SafetensorsTensor& t);
    std::string_view name(size_t i) const
    {
        const Row& r = m_rows[i];
        return { r.text + r.rank * sizeof(int64_t), r.nameLength };
    }

    size_t size() const override { return m_rows.size(); }
    EntryRow row(size_t i) const override;
    void build(std::vector<Entry>& out) const override;
    void forEachBuilt(size_t from, size_t to, const std::function<void(const Entry&)>& visit) const override;

private:
    struct Row {
        uint64_t begin, end; // data_offsets
        const char* text; // in m_text: the shape's `rank` int64s, then the name
        uint32_t nameLength;
        uint8_t rank;
        DType dtype;
        bool bytesInFile;
    };
    static std::span<const int64_t> shapeOf(const Row& r)
    {
        return { reinterpret_cast<const int64_t*>(r.text), r.rank };
    }
    // Row i as the reader handed it over, which safetensorsEntry builds.
    SafetensorsTensor tensor(size_t i) const;

    uint64_t m_bufferStart;
    BlockVector<Row, 4096> m_rows; // 128 KiB a block
    ByteBlocks m_text;
};

} // namespace sl
