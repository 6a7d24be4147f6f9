#include "entry_list.h"

namespace sl {

EntryList::EntryList(const EntryList& other)
{
    *this = other;
}

EntryList::EntryList(EntryList&& other) noexcept
{
    *this = std::move(other);
}

EntryList& EntryList::operator=(const EntryList& other)
{
    if (this == &other)
        return *this;
    // Under the other's lock: it may be building its entries on another thread (a const access).
    std::lock_guard lock(other.m_building);
    m_entries = other.m_entries;
    m_rows = other.m_rows;
    m_pending.store(other.m_pending.load(std::memory_order_acquire), std::memory_order_release);
    return *this;
}

EntryList& EntryList::operator=(EntryList&& other) noexcept
{
    if (this == &other)
        return *this;
    m_entries = std::move(other.m_entries);
    m_rows = std::move(other.m_rows);
    m_pending.store(other.m_pending.exchange(false), std::memory_order_release);
    other.m_entries.clear();
    return *this;
}

EntryList& EntryList::operator=(std::vector<Entry> entries)
{
    dropRows();
    m_entries = std::move(entries);
    return *this;
}

void EntryList::defer(std::shared_ptr<const DeferredEntries> rows)
{
    m_entries.clear();
    m_rows = std::move(rows);
    m_pending.store(m_rows != nullptr, std::memory_order_release);
}

void EntryList::buildSlow() const
{
    std::lock_guard lock(m_building);
    if (!m_pending.load(std::memory_order_relaxed))
        return; // another thread built them meanwhile
    m_entries.clear();
    m_entries.reserve(m_rows->size());
    m_rows->build(m_entries);
    // The rows stay: a thread that read deferred() before this may still be reading them.
    m_pending.store(false, std::memory_order_release);
}

} // namespace sl
