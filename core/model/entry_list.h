#pragma once
// A source's entries, which a reader may hand over unbuilt. Building an Entry for each of 76,800 tensors
// (216 bytes and a name on the heap each) was a quarter of listing a plain torch.save file, and a listing
// shows only a name, a dtype, a shape and a storage key per row. So a reader that knows every entry is a plain
// tensor, or an FP8 weight grouped with its block scale, may hand over rows instead (DeferredEntries): the
// table and the checks that need no more read the rows, and the entries are built, once, on the first access
// that needs them. Every other access works as on the std::vector it wraps.

#include "entry.h"

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

namespace sl {

// What a listing reads of one entry: a plain tensor (an Entry of kind Tensor, with a known shape, no type
// name, parts, attributes, sharding or quantization), or, with `parts`, an FP8 weight and its block scale as
// the group quant::Fp8PairGrouper builds (kind Group, the weight's name, dtype and shape, no type name).
struct EntryRow {
    std::string_view name;
    DType dtype = DType::Unknown;
    std::span<const int64_t> shape;
    std::string_view storageId; // Entry::location.storageId
    uint32_t parts = 0; // a group's: Entry::parts.size()
    uint64_t groupBytes = 0; // a group's: Entry::nbytes(), its parts' bytes
};

// Rows handed over instead of entries. Immutable once handed over; shared by the copies of a source.
class DeferredEntries {
public:
    virtual ~DeferredEntries() = default;
    virtual size_t size() const = 0;
    virtual EntryRow row(size_t i) const = 0;
    // Appends the entries, as the reader would have built them.
    virtual void build(std::vector<Entry>& out) const = 0;
    // Entries [from, to) as build() makes them, each handed to `visit` and then forgotten: a JSON listing
    // writes every field of every entry, and building them all first (216 bytes and a name on the heap each)
    // was most of its new memory, which the benchmark's machine charges about 2 ms a megabyte to touch.
    virtual void forEachBuilt(size_t from, size_t to, const std::function<void(const Entry&)>& visit) const = 0;
};

class EntryList {
public:
    using value_type = Entry;
    using iterator = std::vector<Entry>::iterator;
    using const_iterator = std::vector<Entry>::const_iterator;

    EntryList() = default;
    EntryList(std::vector<Entry> entries)
        : m_entries(std::move(entries))
    {
    }
    EntryList(const EntryList& other);
    EntryList(EntryList&& other) noexcept;
    EntryList& operator=(const EntryList& other);
    EntryList& operator=(EntryList&& other) noexcept;
    EntryList& operator=(std::vector<Entry> entries);

    // Hands over rows in place of entries (replacing any).
    void defer(std::shared_ptr<const DeferredEntries> rows);
    // The rows while the entries are not built yet; null once they are (or when there were none).
    const DeferredEntries* deferred() const { return m_pending.load(std::memory_order_acquire) ? m_rows.get() : nullptr; }

    // The entries, built first if they were deferred. Safe to call from several threads at once.
    const std::vector<Entry>& vector() const
    {
        build();
        return m_entries;
    }
    std::vector<Entry>& vector()
    {
        build();
        if (m_rows) // a change makes the rows stale
            dropRows();
        return m_entries;
    }
    operator const std::vector<Entry>&() const { return vector(); }
    operator std::vector<Entry>&() { return vector(); }

    size_t size() const
    {
        const DeferredEntries* rows = deferred();
        return rows ? rows->size() : m_entries.size();
    }
    bool empty() const { return size() == 0; }

    const Entry& operator[](size_t i) const { return vector()[i]; }
    Entry& operator[](size_t i) { return vector()[i]; }
    const Entry& at(size_t i) const { return vector().at(i); }
    Entry& at(size_t i) { return vector().at(i); }
    const Entry& front() const { return vector().front(); }
    Entry& front() { return vector().front(); }
    const Entry& back() const { return vector().back(); }
    Entry& back() { return vector().back(); }
    const Entry* data() const { return vector().data(); }
    Entry* data() { return vector().data(); }
    const_iterator begin() const { return vector().begin(); }
    const_iterator end() const { return vector().end(); }
    iterator begin() { return vector().begin(); }
    iterator end() { return vector().end(); }

    void push_back(const Entry& e) { vector().push_back(e); }
    void push_back(Entry&& e) { vector().push_back(std::move(e)); }
    template <typename... Args> Entry& emplace_back(Args&&... args) { return vector().emplace_back(std::forward<Args>(args)...); }
    void reserve(size_t n) { vector().reserve(n); }
    void clear()
    {
        dropRows();
        m_entries.clear();
    }
    void resize(size_t n) { vector().resize(n); }
    void shrink_to_fit() { vector().shrink_to_fit(); }
    template <typename... Args> iterator insert(Args&&... args) { return vector().insert(std::forward<Args>(args)...); }
    template <typename... Args> iterator erase(Args&&... args) { return vector().erase(std::forward<Args>(args)...); }

private:
    void build() const
    {
        if (m_pending.load(std::memory_order_acquire))
            buildSlow();
    }
    void buildSlow() const;
    void dropRows()
    {
        m_pending.store(false, std::memory_order_relaxed);
        m_rows.reset();
    }

    mutable std::vector<Entry> m_entries;
    std::shared_ptr<const DeferredEntries> m_rows;
    mutable std::atomic<bool> m_pending { false }; // m_rows are not built into m_entries yet
    mutable std::mutex m_building;
};

} // namespace sl
