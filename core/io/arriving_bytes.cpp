#include "arriving_bytes.h"

#include "io/input_file.h"
#include "util/error.h"

#include <algorithm>
#include <span>
#include <string>

namespace sl {

ArrivingBytes::ArrivingBytes(const InputFile& file, uint64_t offset, uint64_t length, size_t piece, size_t ahead)
    : m_file(file)
    , m_offset(offset)
    , m_size(static_cast<size_t>(length))
    , m_piece(std::max<size_t>(piece, 1))
    , m_ahead(std::max<size_t>(ahead, 1))
{
    if (offset > file.size() || length > file.size() - offset)
        throw FormatError("range of " + std::to_string(length) + " bytes at " + std::to_string(offset) + " runs past the end of "
            + std::to_string(file.size()));
    // Not zeroed: every byte is written by read() before it is published.
    m_data = std::make_unique_for_overwrite<uint8_t[]>(std::max<size_t>(m_size, 1));
}

void ArrivingBytes::read() noexcept
{
    size_t done = 0;
    try {
        while (done < m_size) {
            const size_t n = std::min(m_piece, m_size - done);
            m_file.readInto(m_offset + done, std::span<uint8_t>(m_data.get() + done, n));
            done += n;
            m_arrived.store(done, std::memory_order_release);
            m_arrived.notify_all();
        }
    } catch (...) {
        m_error = std::current_exception();
        m_arrived.store(kFailed, std::memory_order_release);
        m_arrived.notify_all();
    }
}

size_t ArrivingBytes::waitFor(size_t n) const
{
    n = std::min(n, m_size);
    size_t got = m_arrived.load(std::memory_order_acquire);
    while (got < n) { // kFailed is never less than n
        m_arrived.wait(got, std::memory_order_acquire);
        got = m_arrived.load(std::memory_order_acquire);
    }
    if (got == kFailed)
        std::rethrow_exception(m_error);
    return got;
}

} // namespace sl
