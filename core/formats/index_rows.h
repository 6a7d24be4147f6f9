#pragma once
// A safetensors index's entries handed over as rows (model/entry_list.h), for a listing: each row is a tensor
// of a shard's header, or an FP8 weight with the block scale after it, which builds into the group
// quant::Fp8PairGrouper makes. The shards' headers are kept instead of the entries built from them: a
// DeepSeek-V3 index's 90,427 tensors made 135,000 entries (45,000 groups and their parts, 216 bytes and a
// name or two on the heap each), where a row is 16 bytes.

#include "formats/loader.h"
#include "model/entry_list.h"

#include <cstdint>
#include <vector>

namespace sl::quant {
class Fp8PairGrouper;
}

namespace sl {

class IndexRows final : public DeferredEntries {
public:
    // A tensor: its shard (an index into the shards handed over) and its place in that shard's header.
    struct Ref {
        uint32_t shard = 0;
        uint32_t at = 0;
    };
    // `shards`: each shard's header and tensors (empty for a shard no row reads), and the Source::files index
    // its entries name.
    IndexRows(std::vector<ShardContents> shards, std::vector<int32_t> fileIndex, size_t expected);
    void add(Ref tensor) { m_rows.push_back({ tensor, { 0, kNone } }); }
    void addPair(Ref weight, Ref scale) { m_rows.push_back({ weight, scale }); }

    // What the tensor's entry would count in Entry::nbytes.
    uint64_t bytesOf(Ref r) const;

    size_t size() const override { return m_rows.size(); }
    EntryRow row(size_t i) const override;
    // As the index reader builds them: safetensorsEntry for a tensor, Fp8PairGrouper::group for a pair.
    void build(std::vector<Entry>& out) const override;
    void forEachBuilt(size_t from, size_t to, const std::function<void(const Entry&)>& visit) const override;

private:
    static constexpr uint32_t kNone = UINT32_MAX;
    struct Row {
        Ref tensor;
        Ref scale; // at == kNone: a tensor alone
    };
    const SafetensorsTensor& record(Ref r) const { return m_shards[r.shard].tensors[r.at]; }
    // Row i's entry, `pairs` grouping a weight with its scale.
    Entry entry(size_t i, quant::Fp8PairGrouper& pairs) const;

    std::vector<ShardContents> m_shards;
    std::vector<int32_t> m_fileIndex;
    std::vector<Row> m_rows;
};

} // namespace sl
