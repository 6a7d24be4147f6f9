#pragma once
// Progress and cancellation of one open. Readers whose work comes in units they can count (the shards of
// an index, the files of a per-rank set) announce the units, advance as each one finishes, and check for
// cancellation between units; the pickle VM checks every 65,536 opcodes, so a big pickle stops quickly too.
// A cancelled open throws LoadCancelled, which callers can tell apart from a bad file. Thread-safe: index
// shards open on several threads. The GUI polls fraction() for its progress bar and calls cancel().

#include "util/error.h"

#include <atomic>
#include <cstdint>
#include <string>

namespace sl {

class LoadCancelled : public LoadError {
public:
    explicit LoadCancelled(std::string file)
        : LoadError(std::move(file), "loading cancelled")
    {
    }
};

class LoadControl {
public:
    void cancel() { m_cancelled.store(true, std::memory_order_relaxed); }
    bool cancelled() const { return m_cancelled.load(std::memory_order_relaxed); }
    // Throws LoadCancelled naming `file` once cancel() was called.
    void checkpoint(const std::string& file) const
    {
        if (cancelled())
            throw LoadCancelled(file);
    }

    void addTotal(uint64_t units) { m_total.fetch_add(units, std::memory_order_relaxed); }
    void advance(uint64_t units = 1) { m_done.fetch_add(units, std::memory_order_relaxed); }
    uint64_t done() const { return m_done.load(std::memory_order_relaxed); }
    uint64_t total() const { return m_total.load(std::memory_order_relaxed); }
    // done / total, or a negative number while no reader has announced countable work.
    double fraction() const
    {
        const uint64_t t = total();
        return t ? static_cast<double>(std::min(done(), t)) / static_cast<double>(t) : -1.0;
    }

private:
    std::atomic<bool> m_cancelled { false };
    std::atomic<uint64_t> m_done { 0 };
    std::atomic<uint64_t> m_total { 0 };
};

} // namespace sl
