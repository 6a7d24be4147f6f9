#include "tensor_stats.h"

#include "util/load_control.h"
#include "util/parallel.h"
#include "values/element_decode.h"
#include "values/tensor_bytes.h"
#include "values/torch_ao_dequant.h"
#include "values/value_reader.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <iterator>
#include <limits>
#include <mutex>
#include <span>

namespace sl::values {

namespace {

constexpr size_t kBlock = 4096; // decoded values per block: 32 KB of doubles, in L1/L2

struct Partial {
    uint64_t finite = 0, nan = 0, posInf = 0, negInf = 0, zeros = 0;
    double min = std::numeric_limits<double>::infinity();
    double max = -std::numeric_limits<double>::infinity();
    double mean = 0;
    double m2 = 0;
};

// Chan et al.'s pairwise update: merges two (count, mean, M2) summaries without losing precision.
void merge(Partial& a, const Partial& b)
{
    a.nan += b.nan;
    a.posInf += b.posInf;
    a.negInf += b.negInf;
    a.zeros += b.zeros;
    if (b.finite == 0)
        return;
    if (a.finite == 0) {
        a.finite = b.finite;
        a.min = b.min;
        a.max = b.max;
        a.mean = b.mean;
        a.m2 = b.m2;
        return;
    }
    const double na = static_cast<double>(a.finite), nb = static_cast<double>(b.finite), n = na + nb;
    const double delta = b.mean - a.mean;
    a.mean += delta * nb / n;
    a.m2 += b.m2 + delta * delta * na * nb / n;
    a.finite += b.finite;
    a.min = std::min(a.min, b.min);
    a.max = std::max(a.max, b.max);
}

void scanBlock(const double* v, size_t n, Partial& into)
{
    Partial p;
    double sum = 0;
    for (size_t i = 0; i < n; ++i) {
        const double x = v[i];
        p.zeros += x == 0;
        if (std::isfinite(x)) {
            ++p.finite;
            sum += x;
            p.min = std::min(p.min, x);
            p.max = std::max(p.max, x);
        } else if (std::isnan(x)) {
            ++p.nan;
        } else if (x > 0) {
            ++p.posInf;
        } else {
            ++p.negInf;
        }
    }
    if (p.finite) {
        p.mean = sum / static_cast<double>(p.finite);
        double m2 = 0;
        for (size_t i = 0; i < n; ++i)
            if (std::isfinite(v[i])) {
                const double d = v[i] - p.mean;
                m2 += d * d;
            }
        p.m2 = m2;
    }
    merge(into, p);
}

// torch.histc's arithmetic: (x - min) * bins / (max - min), truncated, the top edge in the last bin. Where
// that overflows (a range near the largest double) the position is computed on halves, dividing first;
// all-equal values land in bin 0.
size_t binOf(double x, double lo, double hi, size_t bins)
{
    if (!(hi > lo))
        return 0;
    double pos = (x - lo) * static_cast<double>(bins) / (hi - lo);
    if (!std::isfinite(pos)) // torch's order overflows here (so would torch); divide first, on halves
        pos = (x / 2 - lo / 2) / (hi / 2 - lo / 2) * static_cast<double>(bins);
    if (!(pos > 0))
        return 0;
    return pos >= static_cast<double>(bins) ? bins - 1 : static_cast<size_t>(pos);
}

struct Piece {
    size_t tensor = 0;
    uint64_t first = 0;
    uint64_t count = 0;
    Partial partial;
    uint64_t hash = 0;
    std::vector<uint64_t> histogram;
};

struct Work {
    size_t entry = 0;
    TorchAoDequant dequant;
    std::string note;
    std::optional<TensorBytes> bytes;
    // Or, for quantized groups and packed float4: their values (dequantized), summarised without counting.
    std::unique_ptr<const ValueReader> reader;
    std::string skipped;
    size_t firstPiece = 0;
    size_t pieces = 0;
    Partial total;
    // 8- and 16-bit dtypes are counted by bit pattern in one sweep: every statistic and the histogram
    // follow exactly from the 256 or 65,536 counts. The table lives only while the tensor's pieces run.
    bool counted = false;
    std::mutex mutex;
    std::vector<uint64_t> counts;
    std::atomic<size_t> piecesLeft { 0 };
    std::vector<uint64_t> histogram;
};

// Count tables are reused: at most one per tensor in flight exists, instead of a fresh 512 KB allocation
// per tensor that the allocator may keep around.
class TablePool {
public:
    std::vector<uint64_t> take(size_t size)
    {
        std::vector<uint64_t> t;
        {
            std::lock_guard lock(m_mutex);
            if (!m_free.empty()) {
                t = std::move(m_free.back());
                m_free.pop_back();
            }
        }
        t.assign(size, 0);
        return t;
    }
    void give(std::vector<uint64_t>&& t)
    {
        std::lock_guard lock(m_mutex);
        m_free.push_back(std::move(t));
    }

private:
    std::mutex m_mutex;
    std::vector<std::vector<uint64_t>> m_free;
};

// Statistics and histogram from a tensor's bit-pattern counts.
void summariseCounts(Work& w, unsigned bins)
{
    const DType dtype = w.bytes->dtype();
    const unsigned item = w.bytes->itemSize();
    Partial total;
    double sum = 0;
    std::vector<std::pair<double, uint64_t>> finite;
    for (size_t bits = 0; bits < w.counts.size(); ++bits) {
        const uint64_t c = w.counts[bits];
        if (!c)
            continue;
        uint8_t raw[2] = { static_cast<uint8_t>(bits & 0xff), static_cast<uint8_t>(bits >> 8) };
        double v;
        decode(dtype, raw, 1, &v);
        if (w.dequant.active)
            w.dequant.apply(0, &v, 1); // per-tensor only: per-channel tensors are not counted
        (void)item;
        if (v == 0)
            total.zeros += c;
        if (std::isnan(v)) {
            total.nan += c;
        } else if (std::isinf(v)) {
            (v > 0 ? total.posInf : total.negInf) += c;
        } else {
            finite.emplace_back(v, c);
            total.finite += c;
            sum += v * static_cast<double>(c);
            total.min = std::min(total.min, v);
            total.max = std::max(total.max, v);
        }
    }
    if (total.finite) {
        total.mean = sum / static_cast<double>(total.finite);
        for (const auto& [v, c] : finite) {
            const double d = v - total.mean;
            total.m2 += d * d * static_cast<double>(c);
        }
        if (bins) {
            w.histogram.assign(bins, 0);
            const double lo = total.min, hi = total.max;
            for (const auto& [v, c] : finite) {
                w.histogram[binOf(v, lo, hi, bins)] += c;
            }
        }
    }
    w.total = total;
}

} // namespace

std::optional<double> TensorStats::std() const
{
    if (finite < 2)
        return std::nullopt;
    return std::sqrt(m2 / static_cast<double>(finite - 1));
}

namespace {

// One batch of tensors: what computeStats does, with the working state (readers, pieces, partial sums)
// living only while the batch runs.
void computeBatch(const Source& source, std::span<const size_t> entries, const StatsOptions& options, FileCache& files,
    TablePool& tables, std::vector<TensorStatsResult>& results)
{
    std::vector<Work> work(entries.size());
    std::vector<Piece> pieces;
    for (size_t i = 0; i < entries.size(); ++i) {
        Work& w = work[i];
        w.entry = entries[i];
        const Entry* target = &storedTensorOf(source.entries.at(entries[i]));
        std::string why;
        std::string storedNote; // set when a quantized group is summarised by its stored values instead
        if (ValueReader::needsReader(*target)) {
            if (target->quantization && !options.dequantize) {
                why = "dequantizing is off";
            } else {
                try {
                    w.reader = ValueReader::open(source, *target, files, why);
                } catch (const LoadError& err) {
                    w.skipped = err.problem();
                    continue;
                }
            }
            if (w.reader) {
                w.note = w.reader->note();
                // Pieces of float64 values: the reader decodes (and dequantizes) into them.
                const uint64_t perPiece = std::max<uint64_t>(options.pieceBytes / sizeof(double), 1);
                w.firstPiece = pieces.size();
                for (uint64_t first = 0; first < w.reader->numel(); first += perPiece)
                    pieces.push_back(Piece { i, first, std::min(perPiece, w.reader->numel() - first), {}, 0, {} });
                w.pieces = pieces.size() - w.firstPiece;
                w.piecesLeft = w.pieces;
                continue;
            }
            // A quantized group that is not dequantized: the stored values of its main part (the packed
            // weight, listed first), with a note saying so, rather than nothing.
            const Entry* main = target->quantization && !target->parts.empty() ? &target->parts.front() : nullptr;
            if (!main || main->kind != EntryKind::Tensor || !decodable(main->dtype)) {
                w.skipped = why;
                continue;
            }
            storedNote = "stored values of its " + main->name + " part (" + why + ")";
            target = main;
        }
        const Entry& e = *target;
        if (!decodable(e.dtype, &why)) {
            w.skipped = e.kind == EntryKind::Tensor
                ? why
                : (e.kind == EntryKind::Group ? "a group of tensors; its parts have the values" : "not a tensor");
            continue;
        }
        try {
            // torch.ao tensors dequantize per element index, so only plain ones are weighed.
            w.bytes = dtypeIsQuantized(e.dtype) ? TensorBytes::open(source, e, files)
                                                : TensorBytes::openCollapsingBroadcasts(source, e, files);
        } catch (const LoadError& err) {
            w.skipped = err.problem();
            continue;
        }
        const uint64_t perPiece = std::max<uint64_t>(options.pieceBytes / w.bytes->itemSize(), 1);
        if (options.dequantize)
            w.dequant = torchAoDequant(source, e, files, w.note);
        else if (dtypeIsQuantized(e.dtype))
            w.note = "stored integers";
        if (!storedNote.empty())
            w.note = storedNote;
        w.counted = w.bytes->itemSize() <= 2 && !w.dequant.perChannel;
        w.firstPiece = pieces.size();
        for (uint64_t first = 0; first < w.bytes->numel(); first += perPiece) {
            Piece p;
            p.tensor = i;
            p.first = first;
            p.count = std::min(perPiece, w.bytes->numel() - first);
            pieces.push_back(std::move(p));
        }
        w.pieces = pieces.size() - w.firstPiece;
        w.piecesLeft = w.pieces;
    }
    const unsigned threads = threadsFor(options.threads);
    LoadControl* progress = const_cast<LoadControl*>(options.control);
    if (progress)
        progress->addTotal(pieces.size() * (options.bins ? 2 : 1));

    // Sweep 1: counts, range, mean and M2, and the hash of each piece.
    parallelFor(pieces.size(), threads, [&](size_t i) {
        if (options.control)
            options.control->checkpoint(source.path);
        Piece& p = pieces[i];
        Work& w = work[p.tensor];
        if (w.reader) {
            std::vector<double> values(kBlock);
            XXH3_state_t* hash = XXH3_createState();
            XXH3_64bits_reset(hash);
            for (uint64_t off = 0; off < p.count; off += kBlock) {
                const size_t n = static_cast<size_t>(std::min<uint64_t>(kBlock, p.count - off));
                w.reader->read(p.first + off, n, values.data());
                XXH3_64bits_update(hash, values.data(), n * sizeof(double));
                scanBlock(values.data(), n, p.partial);
            }
            p.hash = XXH3_64bits_digest(hash);
            XXH3_freeState(hash);
            if (progress)
                progress->advance();
            return;
        }
        const TensorBytes& tb = *w.bytes;
        thread_local std::vector<uint8_t> buffer;
        const uint8_t* piece = tb.read(p.first, p.count, buffer);
        p.hash = XXH3_64bits(piece, p.count * tb.itemSize());
        if (w.counted) {
            thread_local std::vector<uint32_t> local;
            const size_t patterns = size_t(1) << (8 * tb.itemSize());
            local.assign(patterns, 0);
            if (tb.itemSize() == 1) {
                for (uint64_t k = 0; k < p.count; ++k)
                    ++local[piece[k]];
            } else {
                for (uint64_t k = 0; k < p.count; ++k)
                    ++local[static_cast<size_t>(piece[2 * k]) | (static_cast<size_t>(piece[2 * k + 1]) << 8)];
            }
            {
                std::lock_guard lock(w.mutex);
                if (w.counts.empty())
                    w.counts = tables.take(patterns);
                for (size_t b = 0; b < patterns; ++b)
                    w.counts[b] += local[b];
            }
            if (--w.piecesLeft == 0) { // the last piece of this tensor summarises it and frees the table
                summariseCounts(w, options.bins);
                tables.give(std::move(w.counts));
                w.counts = {};
            }
            if (progress)
                progress->advance(options.bins ? 2 : 1);
            return;
        }
        std::vector<double> values(kBlock);
        for (uint64_t off = 0; off < p.count; off += kBlock) {
            const size_t n = static_cast<size_t>(std::min<uint64_t>(kBlock, p.count - off));
            decode(tb.dtype(), piece + off * tb.itemSize(), n, values.data());
            if (w.dequant.active)
                w.dequant.apply(p.first + off, values.data(), n);
            scanBlock(values.data(), n, p.partial);
        }
        if (progress)
            progress->advance();
    });
    for (Work& w : work)
        if (!w.counted)
            for (size_t k = 0; k < w.pieces; ++k)
                merge(w.total, pieces[w.firstPiece + k].partial);

    // Sweep 2: the histogram over each tensor's finite range.
    if (options.bins) {
        parallelFor(pieces.size(), threads, [&](size_t i) {
            if (options.control)
                options.control->checkpoint(source.path);
            Piece& p = pieces[i];
            const Work& w = work[p.tensor];
            if (w.counted)
                return; // summarised from its counts already
            p.histogram.assign(options.bins, 0);
            if (w.total.finite && w.reader) {
                std::vector<double> values(kBlock);
                for (uint64_t off = 0; off < p.count; off += kBlock) {
                    const size_t n = static_cast<size_t>(std::min<uint64_t>(kBlock, p.count - off));
                    w.reader->read(p.first + off, n, values.data());
                    for (size_t k = 0; k < n; ++k)
                        if (std::isfinite(values[k]))
                            ++p.histogram[binOf(values[k], w.total.min, w.total.max, options.bins)];
                }
            } else if (w.total.finite) {
                const TensorBytes& tb = *w.bytes;
                const double lo = w.total.min, hi = w.total.max;
                thread_local std::vector<uint8_t> buffer;
                std::vector<double> values(kBlock);
                const uint8_t* piece = tb.read(p.first, p.count, buffer);
                for (uint64_t off = 0; off < p.count; off += kBlock) {
                    const size_t n = static_cast<size_t>(std::min<uint64_t>(kBlock, p.count - off));
                    decode(tb.dtype(), piece + off * tb.itemSize(), n, values.data());
                    if (w.dequant.active)
                        w.dequant.apply(p.first + off, values.data(), n);
                    for (size_t k = 0; k < n; ++k) {
                        const double x = values[k];
                        if (!std::isfinite(x))
                            continue;
                        ++p.histogram[binOf(x, lo, hi, options.bins)];
                    }
                }
            }
            if (progress)
                progress->advance();
        });
    }

    for (size_t i = 0; i < work.size(); ++i) {
        const Work& w = work[i];
        TensorStatsResult& r = results.emplace_back();
        r.entry = w.entry;
        if (!w.bytes && !w.reader) {
            r.skipped = w.skipped;
            continue;
        }
        TensorStats s;
        s.note = w.note;
        s.numel = w.bytes ? w.bytes->numel() : w.reader->numel();
        s.finite = w.total.finite;
        s.nan = w.total.nan;
        s.posInf = w.total.posInf;
        s.negInf = w.total.negInf;
        s.zeros = w.total.zeros;
        if (s.finite) {
            s.min = w.total.min;
            s.max = w.total.max;
            s.mean = w.total.mean;
            s.m2 = w.total.m2;
        }
        if (options.bins && s.finite && w.counted) {
            s.histogram = w.histogram;
        } else if (options.bins && s.finite) {
            s.histogram.assign(options.bins, 0);
            for (size_t k = 0; k < w.pieces; ++k)
                for (size_t b = 0; b < options.bins; ++b)
                    s.histogram[b] += pieces[w.firstPiece + k].histogram[b];
        }
        if (w.pieces == 1) {
            s.hash = pieces[w.firstPiece].hash;
        } else {
            std::vector<uint64_t> hashes(w.pieces);
            for (size_t k = 0; k < w.pieces; ++k)
                hashes[k] = pieces[w.firstPiece + k].hash;
            s.hash = XXH3_64bits(hashes.data(), hashes.size() * sizeof(uint64_t));
        }
        if (w.pieces == 0)
            s.hash = XXH3_64bits(nullptr, 0);
        if (const uint64_t m = w.bytes ? w.bytes->multiplicity() : 1; m > 1) {
            // A collapsed broadcast: each stored element stands m times. Mean, min and max are the stored
            // elements'; counts and squared deviations scale, so the unbiased std is the logical tensor's. The
            // hash is of the stored elements and the logical shape.
            for (uint64_t* c : { &s.numel, &s.finite, &s.nan, &s.posInf, &s.negInf, &s.zeros })
                *c *= m;
            s.m2 *= static_cast<double>(m);
            for (uint64_t& c : s.histogram)
                c *= m;
            const Entry& e = storedTensorOf(source.entries.at(w.entry));
            std::vector<uint64_t> key { s.hash };
            for (int64_t d : e.shape)
                key.push_back(static_cast<uint64_t>(d));
            s.hash = XXH3_64bits(key.data(), key.size() * sizeof(uint64_t));
            const std::string how = "a broadcast view: its " + std::to_string(s.numel / m)
                + " stored elements, each standing for " + std::to_string(m) + " (hash of those and the shape)";
            s.note = s.note.empty() ? how : s.note + "; " + how;
        }
        r.stats = std::move(s);
    }
}

} // namespace

void computeStats(const Source& source, const std::vector<size_t>& entries, const StatsOptions& options,
    const std::function<void(std::vector<TensorStatsResult>&)>& batchDone)
{
    // Batches keep the working state per batch, not per file: a million small tensors at once held a
    // reader, pieces and partial histograms for each (1.8 GB for 10^6). A batch is large enough to keep
    // every core busy on small tensors; a large tensor is split into pieces within its batch.
    constexpr size_t kBatch = 4096;
    FileCache files;
    TablePool tables;
    std::vector<TensorStatsResult> results;
    for (size_t at = 0; at < entries.size(); at += kBatch) {
        results.clear();
        computeBatch(source, std::span(entries).subspan(at, std::min(kBatch, entries.size() - at)), options, files, tables, results);
        batchDone(results);
    }
}

std::vector<TensorStatsResult> computeStats(const Source& source, const std::vector<size_t>& entries, const StatsOptions& options)
{
    std::vector<TensorStatsResult> all;
    all.reserve(entries.size());
    computeStats(source, entries, options, [&](std::vector<TensorStatsResult>& batch) {
        std::move(batch.begin(), batch.end(), std::back_inserter(all));
    });
    return all;
}

} // namespace sl::values
