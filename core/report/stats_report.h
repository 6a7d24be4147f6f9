#pragma once
// `stats` output: a table for people, JSON for programs. Statistics arrive batch by batch
// (values::computeStats) and are kept compact: the histograms in one flat array, and only when JSON shows
// them. The text is written to the output as it is made, so a million tensors never hold a million rows of
// strings (that held 1.8 GB for 10^6 small tensors).

#include "model/source.h"
#include "util/atomic_file.h"
#include "values/tensor_stats.h"

#include <cstdint>
#include <string>
#include <vector>

namespace sl {

class StatsReport {
public:
    enum class Format { Table, Json };
    StatsReport(const Source& source, Format format, unsigned bins);

    // Room for this many results, made once: grown by doubling, the histograms of 200,000 tensors briefly
    // took three times their size.
    void reserve(size_t tensors);
    // Takes one batch, in order (moves from it).
    void add(std::vector<values::TensorStatsResult>& batch);
    // Writes the report; the init hints (values/init_hints.h) compare tensors, so they are made here.
    void write(OutputFile& out) const;

private:
    void writeTable(OutputFile& out, const std::vector<std::string>& hints) const;
    void writeJson(OutputFile& out, const std::vector<std::string>& hints) const;

    const Source& m_source;
    Format m_format;
    unsigned m_bins;
    std::vector<values::TensorStatsResult> m_results; // without their histograms
    std::vector<uint64_t> m_histograms; // JSON only: each summarised tensor's bins, in order
    std::vector<uint32_t> m_histogramBins; // how many of them each summarised tensor has (0 or m_bins)
};

} // namespace sl
