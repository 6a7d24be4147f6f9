#include "pickle/pickle_memo.h"

namespace sl::pickle {

template <typename T> bool SlotMemo<T>::putElsewhere(uint64_t index, T v)
{
    bool fresh = true;
    if (index < m_size) {
        Block& b = m_blocks[index >> 6];
        const uint64_t bit = uint64_t(1) << (index & 63);
        if (b.held & bit) {
            m_values[b.first + heldBelow(b.held, bit)] = v;
            return true;
        }
        // A placeholder or an empty slot: the array cannot take a value here without moving the ones after.
        auto it = m_far.find(index);
        fresh = !(b.placeholders & bit) && it == m_far.end();
        if (v == m_placeholder) {
            b.placeholders |= bit;
            if (it != m_far.end())
                m_far.erase(it);
        } else {
            b.placeholders &= ~bit;
            if (it != m_far.end())
                it->second = v;
            else if (m_far.size() >= m_maxDense)
                return false;
            else
                m_far.emplace(index, v);
        }
    } else if (index < m_size + kDenseSlack && index <= m_maxDense) {
        // The slots up to it become dense; far slots among them move in, stored once.
        while (m_size <= index) {
            auto it = m_far.empty() ? m_far.end() : m_far.find(m_size);
            if (m_size == index) {
                fresh = it == m_far.end();
                if (!fresh)
                    m_far.erase(it);
                append(v);
            } else if (it != m_far.end()) {
                append(it->second);
                m_far.erase(it);
            } else {
                appendEmpty();
            }
        }
    } else {
        if (m_far.size() >= m_maxDense)
            return false;
        fresh = m_far.insert_or_assign(index, v).second;
    }
    m_count += fresh;
    return true;
}

template class SlotMemo<Value*>;
template class SlotMemo<uint32_t>;

} // namespace sl::pickle
