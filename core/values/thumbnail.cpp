#include "thumbnail.h"

#include "util/error.h"
#include "util/load_control.h"
#include "values/element_decode.h"
#include "values/tensor_bytes.h"
#include "values/value_reader.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sl::values {

std::optional<Thumbnail> thumbnail(const Source& s, const Entry& e, int maxSide, std::string* why, const LoadControl* control)
{
    auto refuse = [&](const std::string& w) -> std::optional<Thumbnail> {
        if (why)
            *why = w;
        return std::nullopt;
    };
    if (e.shape.size() < 2 || maxSide < 1)
        return refuse("a picture needs two or more dimensions");
    std::string reason;
    FileCache files;
    std::unique_ptr<const ValueReader> reader;
    try {
        reader = ValueReader::open(s, e, files, reason);
    } catch (const LoadError& err) {
        return refuse(err.problem());
    }
    if (!reader)
        return refuse(reason);
    const uint64_t rows = static_cast<uint64_t>(e.shape[0]);
    const uint64_t cols = rows ? reader->numel() / rows : 0;
    if (rows == 0 || cols == 0)
        return refuse("empty");
    Thumbnail t;
    t.rows = static_cast<int>(std::min<uint64_t>(rows, static_cast<uint64_t>(maxSide)));
    t.cols = static_cast<int>(std::min<uint64_t>(cols, static_cast<uint64_t>(maxSide)));
    std::vector<double> sum(static_cast<size_t>(t.rows) * static_cast<size_t>(t.cols), 0.0);
    std::vector<uint32_t> count(sum.size(), 0);
    // Streamed in chunks of elements (a row can be wider than memory should hold), each element's cell from
    // its row and column.
    constexpr uint64_t kChunk = 65536;
    std::vector<double> values(kChunk);
    const uint64_t total = reader->numel();
    for (uint64_t first = 0; first < total; first += kChunk) {
        if (control)
            control->checkpoint(s.path);
        const uint64_t n = std::min(kChunk, total - first);
        reader->read(first, n, values.data());
        uint64_t r = first / cols, c = first % cols;
        for (uint64_t k = 0; k < n; ++k) {
            const double v = values[k];
            if (std::isfinite(v)) {
                const size_t cell = static_cast<size_t>(r * static_cast<uint64_t>(t.rows) / rows) * static_cast<size_t>(t.cols)
                    + static_cast<size_t>(c * static_cast<uint64_t>(t.cols) / cols);
                sum[cell] += v;
                ++count[cell];
            }
            if (++c == cols) {
                c = 0;
                ++r;
            }
        }
    }
    t.cells.resize(sum.size());
    t.min = std::numeric_limits<float>::infinity();
    t.max = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < sum.size(); ++i) {
        t.cells[i] = count[i] ? static_cast<float>(sum[i] / count[i]) : std::numeric_limits<float>::quiet_NaN();
        if (count[i]) {
            t.min = std::min(t.min, t.cells[i]);
            t.max = std::max(t.max, t.cells[i]);
        }
    }
    if (!(t.min <= t.max))
        t.min = t.max = 0;
    return t;
}

} // namespace sl::values
