#pragma once
// Optional per-phase wall times for `statelens ls --timings` and the benchmark: where a load spends its
// time and where its memory peak grows, without a profiler. A null Timings* makes every PhaseTimer a no-op.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace sl {

// The process's peak resident set so far, in bytes (getrusage): one syscall, so it can close every phase.
uint64_t peakResidentBytes();

struct Timings {
    struct Phase {
        std::string name;
        double ms = 0;
        uint64_t peakRss = 0; // the process's peak resident set when the phase ended; 0: not taken
    };
    std::vector<Phase> phases;
};

class PhaseTimer {
public:
    PhaseTimer(Timings* t, const char* name)
        : m_timings(t)
        , m_name(name)
        , m_start(t ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point {})
    {
    }
    ~PhaseTimer() { stop(); }
    // For a phase that turns out to be another one than it started as.
    void rename(const char* name) { m_name = name; }
    void stop()
    {
        if (!m_timings)
            return;
        auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - m_start).count();
        m_timings->phases.push_back({ m_name, ms, peakResidentBytes() });
        m_timings = nullptr;
    }
    PhaseTimer(const PhaseTimer&) = delete;
    PhaseTimer& operator=(const PhaseTimer&) = delete;

private:
    Timings* m_timings;
    const char* m_name;
    std::chrono::steady_clock::time_point m_start;
};

} // namespace sl
