#pragma once
// Optional per-phase wall times for `statelens ls --timings` and the benchmark: where a load spends its
// time, without a profiler. A null Timings* makes every PhaseTimer a no-op.

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace sl {

struct Timings {
    std::vector<std::pair<std::string, double>> phases; // name, milliseconds
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
    void stop()
    {
        if (!m_timings)
            return;
        auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - m_start).count();
        m_timings->phases.emplace_back(m_name, ms);
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
