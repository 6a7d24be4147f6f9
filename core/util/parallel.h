#pragma once
// The one way work runs on every core (index shards, rank files, tensor values): jobs taken from a shared
// counter by `threads` threads (the calling thread included, never more threads than jobs); the first
// exception (a cancel) stops the others at their next job and is rethrown to the caller.

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace sl {

template <typename F> void parallelFor(size_t n, unsigned threads, F&& job)
{
    std::atomic<size_t> next { 0 };
    std::exception_ptr error;
    std::mutex errorMutex;
    auto worker = [&] {
        for (size_t i = next++; i < n; i = next++) {
            try {
                job(i);
            } catch (...) {
                std::lock_guard lock(errorMutex);
                if (!error)
                    error = std::current_exception();
                next = n;
            }
        }
    };
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads && t < n; ++t)
        pool.emplace_back(worker);
    worker();
    for (auto& t : pool)
        t.join();
    if (error)
        std::rethrow_exception(error);
}

inline unsigned threadsFor(unsigned asked) { return asked ? asked : std::max(1u, std::thread::hardware_concurrency()); }

} // namespace sl
