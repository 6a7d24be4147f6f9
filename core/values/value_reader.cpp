#include "value_reader.h"

#include "util/error.h"
#include "values/element_decode.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

namespace sl::values {

namespace {

// Side tensors read whole when a reader opens (code tables, g_idx): a cap keeps a hostile shape from
// asking for gigabytes.
constexpr uint64_t kMaxWholePart = uint64_t(1) << 24;

// float32 to the dtype a library returns, rounding to nearest even as torch's .to() does. Computed on the
// value (scaling by powers of two is exact in double), so no compiler support for _Float16 is needed.
float roundTo(float v, DType d)
{
    if (!std::isfinite(v) || v == 0)
        return v;
    if (d == DType::BFloat16) {
        uint32_t b = std::bit_cast<uint32_t>(v);
        b += 0x7fffu + ((b >> 16) & 1u);
        return std::bit_cast<float>(b & 0xffff0000u);
    }
    if (d == DType::Float16) {
        const double x = v;
        if (std::fabs(x) >= 65520.0) // past the largest half (65504) by half a step or more
            return x > 0 ? INFINITY : -INFINITY;
        int exp = 0;
        std::frexp(x, &exp); // |x| = m * 2^exp, m in [0.5, 1)
        const int quantumExp = std::max(exp - 1 - 10, -24); // 10 mantissa bits; subnormals step by 2^-24
        const double q = std::ldexp(1.0, quantumExp);
        return static_cast<float>(std::nearbyint(x / q) * q);
    }
    return v;
}

const char* outName(DType d)
{
    return d == DType::Float16 || d == DType::BFloat16 ? dtypeName(d).data() : "float32";
}

// ", rounded to bfloat16" for the 16-bit floats a library rounds its result to, else ", in float32".
std::string inDType(DType d)
{
    return d == DType::Float16 || d == DType::BFloat16 ? std::string(", rounded to ") + outName(d)
                                                       : std::string(", in float32");
}

// "[1, 32]" or "(1, 32)" -> {1, 32}; empty when absent or not a list of sizes.
std::vector<uint64_t> listParam(const Quantization& q, std::string_view key)
{
    std::vector<uint64_t> out;
    const std::string* text = q.param(key);
    if (!text)
        return out;
    const char* p = text->c_str();
    while (*p) {
        if (*p >= '0' && *p <= '9') {
            char* end = nullptr;
            out.push_back(std::strtoull(p, &end, 10));
            p = end;
        } else if (std::strchr("[](), ", *p)) {
            ++p;
        } else {
            return {};
        }
    }
    return out;
}

std::string shapeText(const Entry& e)
{
    return e.shapeKnown ? shapeToString(e.shape) : std::string("[?]");
}

uint64_t ceilDiv(uint64_t a, uint64_t b)
{
    return b ? (a + b - 1) / b : 0;
}

// Parts are read with TensorBytes::read (pread into a reused buffer), not through the mapping: touching
// mapped pages would make every page read resident, and the resident set should stay at a few buffers.

// 32-bit words [first, first + count) of an int32 part, appended to `out`.
void appendWords(const TensorBytes& tb, uint64_t first, uint64_t count, std::vector<uint32_t>& out)
{
    thread_local std::vector<uint8_t> scratch;
    const size_t at = out.size();
    out.resize(at + static_cast<size_t>(count));
    if (count)
        std::memcpy(out.data() + at, tb.read(first, count, scratch), static_cast<size_t>(count) * 4);
}

// ---- plain tensors

double fp4(unsigned nibble) // OCP E2M1: sign, 2 exponent bits (bias 1), 1 mantissa bit; no inf or NaN
{
    static constexpr double kMagnitude[8] = { 0, 0.5, 1, 1.5, 2, 3, 4, 6 };
    return (nibble & 8u) ? -kMagnitude[nibble & 7u] : kMagnitude[nibble & 7u];
}

// The real type of a complex dtype's two components; Unknown for other dtypes.
DType complexComponent(DType t)
{
    switch (t) {
    case DType::Complex32:
        return DType::Float16;
    case DType::Complex64:
        return DType::Float32;
    case DType::Complex128:
        return DType::Float64;
    default:
        return DType::Unknown;
    }
}

class PlainReader final : public ValueReader {
public:
    PlainReader(TensorBytes tb, bool fp4x2)
        : m_tb(std::move(tb))
        , m_fp4x2(fp4x2)
        , m_component(complexComponent(m_tb.dtype()))
    {
        m_numel = m_tb.numel() * (fp4x2 || m_component != DType::Unknown ? 2 : 1);
        if (fp4x2)
            m_note = "two float4_e2m1 values per element, low nibble first (as torch packs float4_e2m1fn_x2)";
        else if (m_component != DType::Unknown)
            m_note = "real and imaginary parts as separate values (as torch.view_as_real gives them)";
    }
    void read(uint64_t first, uint64_t count, double* out) const override
    {
        if (!count)
            return;
        thread_local std::vector<uint8_t> buffer;
        if (m_component != DType::Unknown) { // components lie in pairs, real first, each a plain float
            const uint64_t e0 = first / 2, e1 = (first + count - 1) / 2 + 1;
            const uint8_t* p = m_tb.read(e0, e1 - e0, buffer);
            decode(m_component, p + (first - 2 * e0) * (m_tb.itemSize() / 2), static_cast<size_t>(count), out);
            return;
        }
        if (!m_fp4x2) {
            decode(m_tb.dtype(), m_tb.read(first, count, buffer), static_cast<size_t>(count), out);
            return;
        }
        const uint64_t e0 = first / 2, e1 = (first + count - 1) / 2 + 1;
        const uint8_t* p = m_tb.read(e0, e1 - e0, buffer);
        for (uint64_t k = 0; k < count; ++k) {
            const uint64_t v = first + k;
            const uint8_t b = p[v / 2 - e0];
            out[k] = fp4((v & 1) ? (b >> 4) : (b & 0x0f));
        }
    }

private:
    TensorBytes m_tb;
    bool m_fp4x2;
    DType m_component; // complex: the type of its real and imaginary parts
};

// ---- sparse COO / CSR / CSC tensors: their dense values, as to_dense() gives them

// The layout of a sparse tensor ("sparse_coo", ...); nullptr for strided ones.
const std::string* sparseLayout(const Entry& e)
{
    const std::string* layout = e.kind == EntryKind::Tensor ? e.attribute("layout") : nullptr;
    return layout && layout->rfind("sparse_", 0) == 0 ? layout : nullptr;
}

// Stored values a sparse tensor may have for its dense values to be made: their indices are read whole.
constexpr uint64_t kMaxSparseValues = uint64_t(1) << 22;

class SparseReader final : public ValueReader {
public:
    // Null with `why` when the parts do not make a sparse tensor of the entry's shape.
    static std::unique_ptr<SparseReader> make(
        const Source& s, const Entry& e, const std::string& layout, FileCache& files, std::string& why)
    {
        const bool coo = layout == "sparse_coo";
        const bool csc = layout == "sparse_csc";
        if (!coo && !csc && layout != "sparse_csr") {
            why = layout + " tensors are not expanded";
            return nullptr;
        }
        const Entry* values = e.part("values");
        const Entry* indices = coo ? e.part("indices") : e.part("compressed_indices");
        const Entry* plain = coo ? nullptr : e.part("plain_indices");
        if (!values || !indices || (!coo && !plain) || !e.shapeKnown) {
            why = "the sparse tensor's indices or values are missing";
            return nullptr;
        }
        const uint64_t nnz = values->numel();
        const size_t nd = e.shape.size();
        if (!decodable(values->dtype, &why) || !decodable(indices->dtype, &why)
            || (plain && !decodable(plain->dtype, &why)))
            return nullptr;
        // Hybrid (dense trailing dimensions) and batched layouts are not expanded.
        if (values->shape.size() != 1
            || (coo ? indices->shape != Shape { int64_t(nd), int64_t(nnz) }
                    : nd != 2 || indices->shape.size() != 1 || plain->shape != Shape { int64_t(nnz) })) {
            why = "indices " + shapeText(*indices) + " and values " + shapeText(*values) + " are not a plain " + layout
                + " layout of " + shapeText(e);
            return nullptr;
        }
        if (nnz > kMaxSparseValues) {
            why = "more than " + std::to_string(kMaxSparseValues) + " stored values: not expanded";
            return nullptr;
        }
        auto r = std::unique_ptr<SparseReader>(new SparseReader());
        std::vector<uint64_t> flat(static_cast<size_t>(nnz), 0);
        if (coo) {
            const TensorBytes tb = TensorBytes::open(s, *indices, files);
            std::vector<double> row;
            for (size_t d = 0; d < nd; ++d) {
                tb.decodeTo(d * nnz, nnz, row);
                const uint64_t size = static_cast<uint64_t>(e.shape[d]);
                for (uint64_t k = 0; k < nnz; ++k) {
                    if (!(row[k] >= 0 && row[k] < static_cast<double>(size))) {
                        why = "an index lies outside " + shapeText(e);
                        return nullptr;
                    }
                    flat[k] = flat[k] * size + static_cast<uint64_t>(row[k]); // below numel: no overflow
                }
            }
        } else {
            // compressed_indices[i] .. compressed_indices[i + 1] are the stored values of row (CSC: column) i.
            const uint64_t outer = static_cast<uint64_t>(e.shape[csc ? 1 : 0]);
            const uint64_t inner = static_cast<uint64_t>(e.shape[csc ? 0 : 1]);
            std::vector<double> ptr, idx;
            if (outer >= kMaxWholePart) {
                why = "more than " + std::to_string(kMaxWholePart) + " rows of compressed indices: not expanded";
                return nullptr;
            }
            if (indices->numel() != outer + 1) {
                why = "compressed_indices " + shapeText(*indices) + " does not hold one bound per row of "
                    + shapeText(e);
                return nullptr;
            }
            TensorBytes::open(s, *indices, files).decodeTo(0, outer + 1, ptr);
            TensorBytes::open(s, *plain, files).decodeTo(0, nnz, idx);
            if (ptr[0] != 0 || ptr[static_cast<size_t>(outer)] != static_cast<double>(nnz)) {
                why = "compressed_indices does not run from 0 to the number of stored values";
                return nullptr;
            }
            for (uint64_t i = 0; i < outer; ++i) {
                const double lo = ptr[static_cast<size_t>(i)], hi = ptr[static_cast<size_t>(i + 1)];
                if (!(lo <= hi)) {
                    why = "compressed_indices decreases";
                    return nullptr;
                }
                for (uint64_t k = static_cast<uint64_t>(lo); k < static_cast<uint64_t>(hi); ++k) {
                    const double j = idx[static_cast<size_t>(k)];
                    if (!(j >= 0 && j < static_cast<double>(inner))) {
                        why = "an index lies outside " + shapeText(e);
                        return nullptr;
                    }
                    flat[k] = csc ? static_cast<uint64_t>(j) * outer + i : i * inner + static_cast<uint64_t>(j);
                }
            }
        }
        std::vector<double> v;
        TensorBytes::open(s, *values, files).decodeTo(0, nnz, v);
        r->m_stored.reserve(static_cast<size_t>(nnz));
        for (uint64_t k = 0; k < nnz; ++k)
            r->m_stored.emplace_back(flat[k], v[k]);
        std::sort(
            r->m_stored.begin(), r->m_stored.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        // to_dense() sums repeated indices in an order of its own; not guessed.
        for (size_t k = 1; k < r->m_stored.size(); ++k)
            if (r->m_stored[k].first == r->m_stored[k - 1].first) {
                why = "an index is stored twice (uncoalesced): not expanded";
                return nullptr;
            }
        r->m_numel = e.numel();
        r->m_note = "dense values of a " + layout + " tensor (zero where nothing is stored), as to_dense() gives them";
        return r;
    }

    void read(uint64_t first, uint64_t count, double* out) const override
    {
        std::fill(out, out + count, 0.0);
        auto it = std::lower_bound(m_stored.begin(), m_stored.end(), first,
            [](const std::pair<uint64_t, double>& a, uint64_t i) { return a.first < i; });
        for (; it != m_stored.end() && it->first < first + count; ++it)
            out[it->first - first] = it->second;
    }

private:
    SparseReader() = default;
    std::vector<std::pair<uint64_t, double>> m_stored; // (flat index, value), sorted
};

// ---- a weight times a scale per block, row or tensor (FP8 / int8 scales, torchao Float8Tensor, LLM.int8,
// torchao's AffineQuantizedTensor)

// How a stored code, its block's scale and zero point become a value.
struct Recipe {
    enum class Kind : uint8_t {
        Float32, // code.float() * scale [* factor], in float32, then rounded to the output dtype
        // torchao's dequantize_affine (quant_primitives.py) per ZeroPointDomain, each step in the output
        // dtype as torch computes it (a float32 operation rounded to that dtype):
        AffineNone, //  code.to(out) * scale
        AffineInt, //   (code.to(int32) - zero_point.to(int32)).to(out) * scale
        AffineFloat, // ((code - mid).to(out) * scale) + zero_point, mid = (quant_min + quant_max + 1) / 2
        Divide, // code.to(out) / scale, in float32, rounded to out: torchao.float8's to_original_precision()
    };
    Kind kind = Kind::Float32;
    float factor = 1; // Float32: bitsandbytes' 1/127
    const Entry* zero = nullptr; // AffineInt (optional), AffineFloat
    float mid = 0; // AffineFloat
    std::string what; // AffineX: the note's description of the scheme
};

// torch's .to(torch.int32) of an integer (wrapping as the int64 -> int32 cast does) or a float (truncated);
// saturated where C++ would have no defined answer.
int32_t toInt32(double v)
{
    if (!(v > -9.2e18 && v < 9.2e18))
        return v > 0 ? INT32_MAX : INT32_MIN;
    return static_cast<int32_t>(static_cast<int64_t>(v));
}

class ScaledReader final : public ValueReader {
public:
    // Null with `why` when the scale does not tile the weight.
    static std::unique_ptr<ScaledReader> make(const Source& s, const Entry& g, const Entry& weight, const Entry& scale,
        const Recipe& how, FileCache& files, std::string& why)
    {
        if (!weight.shapeKnown || !scale.shapeKnown || weight.shape.empty()) {
            why = "the weight's or the scale's shape is not known";
            return nullptr;
        }
        if (!decodable(weight.dtype, &why) || !decodable(scale.dtype, &why))
            return nullptr;
        const bool affine = how.kind != Recipe::Kind::Float32 && how.kind != Recipe::Kind::Divide;
        if (how.zero && (!how.zero->shapeKnown || !decodable(how.zero->dtype, &why)))
            return nullptr;
        if (affine && (scale.dtype == DType::Float64 || (how.zero && how.zero->dtype == DType::Float64))) {
            why = "float64 scales or zero points (torch would compute in float64) are not modelled";
            return nullptr;
        }
        auto r = std::unique_ptr<ScaledReader>(
            new ScaledReader(TensorBytes::open(s, weight, files), TensorBytes::open(s, scale, files)));
        if (how.zero)
            r->m_zero.emplace(TensorBytes::open(s, *how.zero, files));
        const size_t n = weight.shape.size();
        const std::vector<uint64_t> stated
            = g.quantization ? listParam(*g.quantization, "block_size") : std::vector<uint64_t> {};
        if (affine ? !affineGrid(weight, scale, stated, *r, why) : !inferredGrid(weight, scale, stated, *r, why))
            return nullptr;
        if (r->m_zero && r->m_zero->numel() != r->m_s.numel()) {
            why = "zero_point " + shapeText(*how.zero) + " does not match scale " + shapeText(scale);
            return nullptr;
        }
        r->m_dims.assign(weight.shape.begin(), weight.shape.end());
        r->m_kind = how.kind;
        r->m_factor = how.factor;
        r->m_mid = how.mid;
        r->m_out = g.dtype;
        r->m_numel = r->m_w.numel();
        std::string blocks;
        bool perRow = n == 2 && r->m_block[0] == 1;
        for (size_t d = 0; d < n; ++d) {
            blocks += (d ? ", " : "") + std::to_string(r->m_block[d]);
            perRow = perRow && (d == 0 || r->m_sdims[d] == 1);
        }
        const bool perTensor = r->m_s.numel() == 1;
        const std::string granularity = perTensor ? " (one per tensor)"
            : perRow                              ? " per row"
                                                  : " per [" + blocks + "] block";
        if (affine || how.kind == Recipe::Kind::Divide)
            r->m_note = "dequantized: " + how.what + granularity + inDType(r->m_out);
        else
            r->m_note = "dequantized: " + std::string(dtypeName(weight.dtype)) + " x " + scale.name + granularity
                + (how.factor != 1.0f ? " / 127" : "") + ", in float32"
                + (r->m_out == DType::Float16 || r->m_out == DType::BFloat16
                        ? std::string(", rounded to ") + outName(r->m_out)
                        : std::string());
        return r;
    }

    void read(uint64_t first, uint64_t count, double* out) const override
    {
        if (!count)
            return;
        const uint64_t cols = static_cast<uint64_t>(m_dims.back());
        const uint64_t bc = m_block.back(), sc = static_cast<uint64_t>(m_sdims.back());
        const uint64_t r0 = first / cols, r1 = (first + count - 1) / cols;
        const uint64_t s0 = scaleRow(r0), s1 = scaleRow(r1);
        std::vector<double> scales, zeros;
        m_s.decodeTo(s0 * sc, (s1 - s0 + 1) * sc, scales);
        if (m_zero)
            m_zero->decodeTo(s0 * sc, (s1 - s0 + 1) * sc, zeros);
        thread_local std::vector<uint8_t> buffer;
        decode(m_w.dtype(), m_w.read(first, count, buffer), static_cast<size_t>(count), out);
        // In runs that share one scale (a row's stretch inside one block), so the inner loop has no division.
        uint64_t r = r0, c = first % cols, sr = s0;
        for (uint64_t k = 0; k < count;) {
            const uint64_t blockEnd = std::min((c / bc + 1) * bc, cols);
            const uint64_t run = std::min(blockEnd - c, count - k);
            const size_t at = static_cast<size_t>((sr - s0) * sc + c / bc);
            apply(out + k, run, static_cast<float>(scales[at]), zeros.empty() ? 0.0 : zeros[at]);
            k += run;
            c += run;
            if (c == cols && k < count) {
                c = 0;
                sr = scaleRow(++r);
            }
        }
    }

private:
    ScaledReader(TensorBytes w, TensorBytes s)
        : m_w(std::move(w))
        , m_s(std::move(s))
    {
    }

    // The block edge per dimension: the stated block_size (torchao's Float8Tensor), else the power of two
    // whose ceil-division gives the scale's size (a [200, 300] weight in 128 x 128 blocks has [2, 3] scales,
    // which 100 x 100 blocks would also give), else the plain ceil-division.
    static bool inferredGrid(
        const Entry& weight, const Entry& scale, const std::vector<uint64_t>& stated, ScaledReader& r, std::string& why)
    {
        const size_t n = weight.shape.size();
        Shape sshape = scale.shape;
        if (r.m_s.numel() == 1) { // one scale for the tensor
            sshape.clear();
            sshape.resize(n, 1);
        } else {
            while (sshape.size() < n)
                sshape.push_back(1); // [rows] scales a [rows, cols] weight per row
        }
        if (sshape.size() != n) {
            why = "scale shape " + shapeText(scale) + " does not tile weight shape " + shapeText(weight);
            return false;
        }
        for (size_t d = 0; d < n; ++d) {
            const uint64_t w = static_cast<uint64_t>(weight.shape[d]), sd = static_cast<uint64_t>(sshape[d]);
            uint64_t b = 1;
            if (stated.size() == n && stated[d] > 0) {
                b = stated[d];
            } else if (sd > 0) {
                while (b < (uint64_t(1) << 40) && ceilDiv(w, b) > sd)
                    b *= 2;
                if (ceilDiv(w, b) != sd)
                    b = std::max<uint64_t>(ceilDiv(w, sd), 1);
            }
            if (sd == 0 || (w && ceilDiv(w, b) != sd)) {
                why = "scale shape " + shapeText(scale) + " does not tile weight shape " + shapeText(weight);
                return false;
            }
            r.m_block.push_back(b);
        }
        r.m_sdims.assign(sshape.begin(), sshape.end());
        return true;
    }

    // torchao's view of the scale (_get_reduction_params): block_size divides each dimension, and the scale
    // holds one value per block whatever its own shape.
    static bool affineGrid(
        const Entry& weight, const Entry& scale, const std::vector<uint64_t>& block, ScaledReader& r, std::string& why)
    {
        const size_t n = weight.shape.size();
        if (block.size() != n) {
            why = "block_size does not give one size per dimension of " + shapeText(weight);
            return false;
        }
        uint64_t cells = 1;
        for (size_t d = 0; d < n; ++d) {
            const uint64_t w = static_cast<uint64_t>(weight.shape[d]), b = block[d];
            if (b == 0 || b > w || w % b) {
                why = "block_size " + std::to_string(b) + " does not divide dimension " + std::to_string(d) + " of "
                    + shapeText(weight);
                return false;
            }
            r.m_block.push_back(b);
            r.m_sdims.push_back(static_cast<int64_t>(w / b));
            cells *= w / b; // at most the weight's numel: no overflow
        }
        if (r.m_s.numel() != cells) {
            why = "scale " + shapeText(scale) + " does not hold one value per block of " + shapeText(weight);
            return false;
        }
        return true;
    }

    // `n` decoded codes sharing one scale (and zero point) become values, in place.
    void apply(double* v, uint64_t n, float scale, double zero) const
    {
        switch (m_kind) {
        case Recipe::Kind::Float32:
            for (uint64_t i = 0; i < n; ++i) {
                float x = static_cast<float>(v[i]) * scale;
                if (m_factor != 1.0f)
                    x *= m_factor;
                v[i] = roundTo(x, m_out);
            }
            return;
        case Recipe::Kind::AffineNone:
            for (uint64_t i = 0; i < n; ++i)
                v[i] = roundTo(roundTo(static_cast<float>(v[i]), m_out) * scale, m_out);
            return;
        case Recipe::Kind::Divide: // a 0-d float32 scale keeps float32 arithmetic (checked under torch 2.6)
            for (uint64_t i = 0; i < n; ++i)
                v[i] = roundTo(roundTo(static_cast<float>(v[i]), m_out) / scale, m_out);
            return;
        case Recipe::Kind::AffineInt: {
            const uint32_t z = static_cast<uint32_t>(toInt32(zero));
            for (uint64_t i = 0; i < n; ++i) {
                const int32_t d = static_cast<int32_t>(static_cast<uint32_t>(toInt32(v[i])) - z); // int32 wraps
                v[i] = roundTo(roundTo(static_cast<float>(d), m_out) * scale, m_out);
            }
            return;
        }
        case Recipe::Kind::AffineFloat: {
            const float z = static_cast<float>(zero);
            for (uint64_t i = 0; i < n; ++i) {
                const float x = roundTo(static_cast<float>(v[i]) - m_mid, m_out);
                v[i] = roundTo(roundTo(x * scale, m_out) + z, m_out);
            }
            return;
        }
        }
    }

    // The scale row (over all dimensions but the last) of weight row r.
    uint64_t scaleRow(uint64_t r) const
    {
        uint64_t sr = 0, mult = 1;
        for (size_t d = m_dims.size() - 1; d-- > 0;) {
            const uint64_t size = static_cast<uint64_t>(m_dims[d]);
            const uint64_t i = size ? r % size : 0;
            r = size ? r / size : 0;
            sr += (i / m_block[d]) * mult;
            mult *= static_cast<uint64_t>(m_sdims[d]);
        }
        return sr;
    }
    TensorBytes m_w, m_s;
    std::optional<TensorBytes> m_zero;
    std::vector<int64_t> m_dims, m_sdims;
    std::vector<uint64_t> m_block;
    Recipe::Kind m_kind = Recipe::Kind::Float32;
    float m_factor = 1, m_mid = 0;
    DType m_out = DType::Float32;
};

// ---- a code table times a scale per block of consecutive values: bitsandbytes 4-bit (NF4, FP4), torchao's
// NF4Tensor and its low-bit optimizer states (OptimState8bit, OptimState4bit, OptimStateFp8)

// A small table read whole (code maps): exactly `size` values, or false with `why`.
bool readTable(
    const Source& s, const Entry& part, FileCache& files, uint64_t size, std::vector<float>& out, std::string& why)
{
    if (!decodable(part.dtype, &why))
        return false;
    const TensorBytes tb = TensorBytes::open(s, part, files);
    if (tb.numel() != size) {
        why = part.name + " has " + std::to_string(tb.numel()) + " values, not " + std::to_string(size);
        return false;
    }
    std::vector<double> v;
    tb.decodeTo(0, size, v);
    out.assign(v.begin(), v.end());
    return true;
}

// "64" -> 64 when it is a block size a reader can use; 0 otherwise.
uint64_t blockParam(const std::string* text)
{
    const uint64_t b = text ? std::strtoull(text->c_str(), nullptr, 10) : 0;
    return b <= (uint64_t(1) << 32) ? b : 0;
}

// The scale of every block, made for the blocks a read covers.
class BlockScales {
public:
    virtual ~BlockScales() = default;
    virtual uint64_t blocks() const = 0; // how many blocks have a scale
    // Scales of blocks [j0, j1] into `out`.
    virtual void get(uint64_t j0, uint64_t j1, std::vector<float>& out) const = 0;
};

// One stored value per block (bitsandbytes absmax, the optimizer states' scale).
class StoredScales final : public BlockScales {
public:
    explicit StoredScales(TensorBytes tb)
        : m_tb(std::move(tb))
    {
    }
    uint64_t blocks() const override { return m_tb.numel(); }
    void get(uint64_t j0, uint64_t j1, std::vector<float>& out) const override
    {
        std::vector<double> v;
        m_tb.decodeTo(j0, j1 - j0 + 1, v);
        out.assign(v.begin(), v.end());
    }

private:
    TensorBytes m_tb;
};

// Double quantization: each block's scale is made from a stored value of its own and one of its group of
// `group` blocks (bitsandbytes: a code into nested_quant_map and nested_absmax; NF4Tensor: a quantized scaler
// and its quantization_factor).
class TwoLevelScales final : public BlockScales {
public:
    using Combine = std::function<float(double perBlock, double perGroup)>;
    TwoLevelScales(TensorBytes perBlock, TensorBytes perGroup, uint64_t group, Combine combine)
        : m_perBlock(std::move(perBlock))
        , m_perGroup(std::move(perGroup))
        , m_group(group)
        , m_combine(std::move(combine))
    {
    }
    uint64_t blocks() const override
    {
        uint64_t covered = 0;
        return __builtin_mul_overflow(m_perGroup.numel(), m_group, &covered) ? m_perBlock.numel()
                                                                             : std::min(m_perBlock.numel(), covered);
    }
    void get(uint64_t j0, uint64_t j1, std::vector<float>& out) const override
    {
        std::vector<double> own, shared;
        m_perBlock.decodeTo(j0, j1 - j0 + 1, own);
        const uint64_t g0 = j0 / m_group;
        m_perGroup.decodeTo(g0, j1 / m_group - g0 + 1, shared);
        out.resize(own.size());
        for (uint64_t j = j0; j <= j1; ++j)
            out[j - j0] = m_combine(own[j - j0], shared[j / m_group - g0]);
    }

private:
    TensorBytes m_perBlock, m_perGroup;
    uint64_t m_group;
    Combine m_combine;
};

// Values i = table[code i] * scale[i / block], rounded to the output dtype; codes are 4-bit (two per byte,
// the high nibble first, as all of these libraries pack them) or 8-bit.
class CodebookReader final : public ValueReader {
public:
    struct Layout {
        unsigned bits = 4;
        std::vector<float> table; // 2^bits values
        uint64_t numel = 0;
        uint64_t block = 0;
        DType out = DType::Float32;
    };
    // Null with `why` when the codes or the scales do not cover `numel` values.
    static std::unique_ptr<CodebookReader> make(
        TensorBytes codes, std::unique_ptr<const BlockScales> scales, Layout l, std::string note, std::string& why)
    {
        uint64_t storedBytes = 0;
        if (__builtin_mul_overflow(codes.numel(), static_cast<uint64_t>(codes.itemSize()), &storedBytes)
            || storedBytes < (l.bits == 4 ? ceilDiv(l.numel, 2) : l.numel)) {
            why = "the codes hold " + std::to_string(storedBytes) + " bytes, fewer than " + std::to_string(l.numel)
                + " " + std::to_string(l.bits) + "-bit values need";
            return nullptr;
        }
        if (l.block == 0) {
            why = "the block size is not positive";
            return nullptr;
        }
        const uint64_t blocks = ceilDiv(l.numel, l.block);
        if (scales->blocks() < blocks) {
            why = "the scales cover " + std::to_string(scales->blocks()) + " blocks; " + std::to_string(blocks)
                + " blocks need one each";
            return nullptr;
        }
        if (l.table.size() != (size_t(1) << l.bits)) {
            why = "the code table does not hold a value per code";
            return nullptr;
        }
        auto r = std::unique_ptr<CodebookReader>(new CodebookReader(std::move(codes), std::move(scales), std::move(l)));
        r->m_numel = r->m_l.numel;
        r->m_note = std::move(note);
        return r;
    }

    void read(uint64_t first, uint64_t count, double* out) const override
    {
        if (!count)
            return;
        const uint64_t last = first + count - 1;
        const bool nibbles = m_l.bits == 4;
        // The bytes under [first, last], whatever the storage dtype.
        const uint64_t item = m_codes.itemSize();
        const uint64_t b0 = nibbles ? first / 2 : first, b1 = nibbles ? last / 2 : last;
        const uint64_t e0 = b0 / item, e1 = b1 / item;
        thread_local std::vector<uint8_t> scratch;
        const uint8_t* bytes = m_codes.read(e0, e1 - e0 + 1, scratch) + (b0 - e0 * item);
        const uint64_t j0 = first / m_l.block;
        std::vector<float> scale;
        m_scales->get(j0, last / m_l.block, scale);
        // Block by block, so the inner loop has no division.
        for (uint64_t i = first, k = 0; k < count;) {
            const uint64_t j = i / m_l.block;
            const uint64_t end = std::min((j + 1) * m_l.block, first + count);
            const float sc = scale[j - j0];
            for (; i < end; ++i, ++k) {
                const unsigned code
                    = nibbles ? ((i & 1) ? bytes[(i >> 1) - b0] & 0x0f : bytes[(i >> 1) - b0] >> 4) : bytes[i - b0];
                out[k] = roundTo(m_l.table[code] * sc, m_l.out);
            }
        }
    }

private:
    CodebookReader(TensorBytes codes, std::unique_ptr<const BlockScales> scales, Layout l)
        : m_codes(std::move(codes))
        , m_scales(std::move(scales))
        , m_l(std::move(l))
    {
    }
    TensorBytes m_codes;
    std::unique_ptr<const BlockScales> m_scales;
    Layout m_l;
};

std::unique_ptr<const ValueReader> openBnb4(const Source& s, const Entry& g, FileCache& files, std::string& why)
{
    const Quantization& q = *g.quantization;
    const Entry* weight = g.part("weight");
    const Entry* absmax = g.part("absmax");
    const Entry* qmap = g.part("quant_map");
    const std::string* bs = q.param("blocksize");
    if (!weight || !absmax || !qmap) {
        why = "stored without its absmax or quant_map: cannot dequantize";
        return nullptr;
    }
    if (!g.shapeKnown || !bs) {
        why = "the original shape or blocksize is not known (quant_state not read)";
        return nullptr;
    }
    CodebookReader::Layout l;
    l.numel = g.numel();
    l.block = blockParam(bs);
    l.out = g.dtype;
    if (l.block == 0) {
        why = "blocksize " + *bs + " is not a positive block size";
        return nullptr;
    }
    TensorBytes codes = TensorBytes::open(s, *weight, files);
    TensorBytes absmaxBytes = TensorBytes::open(s, *absmax, files);
    if (!readTable(s, *qmap, files, 16, l.table, why))
        return nullptr;
    std::unique_ptr<const BlockScales> scales;
    const std::string* dq = q.param("double_quant");
    if (dq && *dq == "true") {
        const Entry* nabs = g.part("nested_absmax");
        const Entry* nmap = g.part("nested_quant_map");
        const std::string* nbs = q.param("nested_blocksize");
        const std::string* off = q.param("nested_offset");
        if (!nabs || !nmap || !nbs || !off) {
            why = "double-quantized, but nested_absmax, nested_quant_map, nested_blocksize or nested_offset is "
                  "missing";
            return nullptr;
        }
        if (absmax->dtype != DType::UInt8) { // its values index the 256-entry nested code
            why = "double-quantized absmax should be uint8 codes, not " + std::string(dtypeName(absmax->dtype));
            return nullptr;
        }
        const uint64_t nestedBlock = blockParam(nbs);
        if (nestedBlock == 0) {
            why = "nested_blocksize " + *nbs + " is not a positive block size";
            return nullptr;
        }
        if (!decodable(nabs->dtype, &why))
            return nullptr;
        std::vector<float> nestedCode;
        if (!readTable(s, *nmap, files, 256, nestedCode, why))
            return nullptr;
        // absmax holds uint8 codes into nested_quant_map, scaled by nested_absmax, plus nested_offset (float32).
        const float offset = std::strtof(off->c_str(), nullptr);
        scales = std::make_unique<TwoLevelScales>(std::move(absmaxBytes), TensorBytes::open(s, *nabs, files),
            nestedBlock, [table = std::move(nestedCode), offset](double code, double nested) {
                return table[static_cast<size_t>(code) & 0xff] * static_cast<float>(nested) + offset;
            });
    } else if (!decodable(absmax->dtype, &why)) {
        return nullptr;
    } else {
        scales = std::make_unique<StoredScales>(std::move(absmaxBytes));
    }
    const std::string* type = q.param("quant_type");
    std::string note = "dequantized: bitsandbytes " + (type ? *type : std::string("4-bit"))
        + ", quant_map x absmax per block of " + *bs + (dq && *dq == "true" ? " (absmax double-quantized)" : "")
        + ", high nibble first, rounded to " + outName(g.dtype);
    return CodebookReader::make(std::move(codes), std::move(scales), std::move(l), std::move(note), why);
}

// The dtype torch gives a product of two float tensors (float16, bfloat16 or float32); Unknown for others.
DType productDType(DType a, DType b)
{
    for (DType t : { a, b })
        if (t != DType::Float32 && t != DType::Float16 && t != DType::BFloat16)
            return DType::Unknown;
    return a == b ? a : DType::Float32;
}

// The first part named in `roles` that is missing, or nullptr when all are there.
const char* missingPart(const Entry& g, std::initializer_list<const char*> roles)
{
    for (const char* r : roles)
        if (!g.part(r))
            return r;
    return nullptr;
}

// torchao's NF4Tensor as get_original_weight() computes it: nf4[nibble] * scaler, the high nibble first.
std::unique_ptr<const ValueReader> openNf4(const Source& s, const Entry& g, FileCache& files, std::string& why)
{
    if (const char* m
        = missingPart(g, { "quantized_data", "quantized_scalers", "quantization_factor", "scaler_mean", "nf4" })) {
        why = std::string("stored without its ") + m + ": cannot dequantize";
        return nullptr;
    }
    const Entry& data = *g.part("quantized_data");
    const Entry& scalers = *g.part("quantized_scalers");
    const Entry& factor = *g.part("quantization_factor");
    const Entry& mean = *g.part("scaler_mean");
    const Entry& nf4 = *g.part("nf4");
    CodebookReader::Layout l;
    l.block = blockParam(g.quantization->param("block_size"));
    const uint64_t scalerBlock = blockParam(g.quantization->param("scaler_block_size"));
    l.numel = g.numel();
    l.out = g.dtype;
    if (!g.shapeKnown || l.block == 0 || l.block % 2 || scalerBlock == 0) {
        why = "the shape, block_size or scaler_block_size is not known or not a positive even block size";
        return nullptr;
    }
    if (productDType(g.dtype, g.dtype) == DType::Unknown || nf4.dtype != g.dtype || factor.dtype != g.dtype
        || mean.dtype != g.dtype) {
        why = "nf4, quantization_factor and scaler_mean are not all in the weight's dtype (float32, float16 or "
              "bfloat16), as torchao writes them";
        return nullptr;
    }
    if (data.dtype != DType::UInt8 || scalers.dtype != DType::Int8) {
        why = "quantized_data and quantized_scalers are not the uint8 and int8 tensors torchao writes";
        return nullptr;
    }
    // get_original_weight's reshapes: two values per byte, one scaler per block, one factor per scaler block.
    const uint64_t blocks = l.numel / l.block;
    if (l.numel % l.block || data.numel() != l.numel / 2 || scalers.numel() != blocks || blocks % scalerBlock
        || factor.numel() != blocks / scalerBlock || mean.numel() != 1) {
        why = "quantized_data " + shapeText(data) + ", quantized_scalers " + shapeText(scalers)
            + " and quantization_factor " + shapeText(factor) + " do not fit a " + shapeText(g)
            + " weight in blocks of " + std::to_string(l.block) + " and scaler blocks of "
            + std::to_string(scalerBlock);
        return nullptr;
    }
    if (!readTable(s, nf4, files, 16, l.table, why))
        return nullptr;
    std::vector<double> m;
    TensorBytes::open(s, mean, files).decodeTo(0, 1, m);
    // dequantize_scalers: int8 / quantization_factor (the int8 promoted to the factor's dtype), plus
    // scaler_mean, each operation rounded to the weight's dtype.
    const float meanValue = static_cast<float>(m[0]);
    const DType out = g.dtype;
    auto scales = std::make_unique<TwoLevelScales>(TensorBytes::open(s, scalers, files),
        TensorBytes::open(s, factor, files), scalerBlock, [meanValue, out](double q, double f) {
            const float x = roundTo(static_cast<float>(q), out) / static_cast<float>(f);
            return roundTo(roundTo(x, out) + meanValue, out);
        });
    std::string note = "dequantized: torchao NF4 (get_original_weight), nf4[nibble] x scaler per block of "
        + std::to_string(l.block) + ", high nibble first; scalers int8 / quantization_factor per "
        + std::to_string(scalerBlock) + " + scaler_mean" + inDType(g.dtype);
    return CodebookReader::make(
        TensorBytes::open(s, data, files), std::move(scales), std::move(l), std::move(note), why);
}

// torchao's low-bit optimizer states (prototype/low_bit_optim) as their dequantize() computes them:
// qmap[code] (OptimState8bit; OptimState4bit with two codes per byte, high nibble first) or the float8 code
// itself (OptimStateFp8) times the scale of its block, block = values / scales.
std::unique_ptr<const ValueReader> openOptimState(
    const Source& s, const Entry& g, std::string_view cls, FileCache& files, std::string& why)
{
    const bool fp8 = cls == "OptimStateFp8";
    if (const char* m = fp8 ? missingPart(g, { "codes", "scale" }) : missingPart(g, { "codes", "scale", "qmap" })) {
        why = std::string("stored without its ") + m + ": cannot dequantize";
        return nullptr;
    }
    const Entry& codes = *g.part("codes");
    const Entry& scale = *g.part("scale");
    CodebookReader::Layout l;
    l.bits = cls == "OptimState4bit" ? 4 : 8;
    l.numel = g.numel();
    if (!g.shapeKnown || !codes.shapeKnown || !scale.shapeKnown) {
        why = "the shape of the state, its codes or its scale is not known";
        return nullptr;
    }
    if (fp8 ? dtypeItemSize(codes.dtype) != 1 || !dtypeIsFloatingPoint(codes.dtype) || !decodable(codes.dtype)
            : codes.dtype != DType::UInt8) {
        why = std::string("codes are not the ") + (fp8 ? "float8" : "uint8") + " tensor torchao writes";
        return nullptr;
    }
    const bool codesFit = l.bits == 4 ? l.numel % 2 == 0 && codes.numel() == l.numel / 2 : codes.numel() == l.numel;
    if (!codesFit || scale.numel() == 0 || l.numel % scale.numel()) {
        why = "codes " + shapeText(codes) + " and scale " + shapeText(scale) + " do not split a " + shapeText(g)
            + " state into equal blocks";
        return nullptr;
    }
    l.block = l.numel / scale.numel();
    if (fp8) {
        // codes.float() * scale: a table of the 256 float8 values.
        uint8_t all[256];
        for (int b = 0; b < 256; ++b)
            all[b] = static_cast<uint8_t>(b);
        double decoded[256];
        decode(codes.dtype, all, 256, decoded);
        l.table.assign(decoded, decoded + 256);
        l.out = productDType(DType::Float32, scale.dtype);
    } else {
        const Entry& qmap = *g.part("qmap");
        if (!readTable(s, qmap, files, uint64_t(1) << l.bits, l.table, why))
            return nullptr;
        l.out = productDType(qmap.dtype, scale.dtype);
    }
    if (l.out == DType::Unknown || !decodable(scale.dtype, &why)) {
        why = "scale and qmap are not float16, bfloat16 or float32 tensors";
        return nullptr;
    }
    const char* code = fp8 ? "codes.float()" : l.bits == 4 ? "qmap[nibble]" : "qmap[code]";
    std::string note = "dequantized: torchao " + std::string(cls) + ", " + code + " x scale per block of "
        + std::to_string(l.block) + (l.bits == 4 ? ", high nibble first" : "") + inDType(l.out);
    return CodebookReader::make(TensorBytes::open(s, codes, files),
        std::make_unique<StoredScales>(TensorBytes::open(s, scale, files)), std::move(l), std::move(note), why);
}

// ---- GPTQ and AWQ: int32 words packing 32 / bits values, zero points and scales per group of inputs

class PackedIntReader final : public ValueReader {
public:
    static std::unique_ptr<PackedIntReader> make(const Source& s, const Entry& g, FileCache& files, std::string& why)
    {
        const Quantization& q = *g.quantization;
        const Entry* qweight = g.part("qweight");
        const Entry* qzeros = g.part("qzeros");
        const Entry* scales = g.part("scales");
        const Entry* gidx = g.part("g_idx");
        const std::string* bitsText = q.param("bits");
        const std::string* layout = q.param("layout");
        if (!qweight || !qzeros || !scales) {
            why = "stored without its qzeros or scales: cannot dequantize";
            return nullptr;
        }
        if (!g.shapeKnown || g.shape.size() != 2 || !bitsText || !layout) {
            why = "bits and group size are not determined by the tensors (quantize_config.json has them)";
            return nullptr;
        }
        auto r = std::unique_ptr<PackedIntReader>(new PackedIntReader(TensorBytes::open(s, *qweight, files),
            TensorBytes::open(s, *qzeros, files), TensorBytes::open(s, *scales, files)));
        r->m_awq = *layout == "awq-gemm";
        r->m_bits = std::strtoull(bitsText->c_str(), nullptr, 10);
        r->m_out = static_cast<int64_t>(g.shape[0]);
        r->m_in = static_cast<int64_t>(g.shape[1]);
        if (r->m_bits != 2 && r->m_bits != 4 && r->m_bits != 8) {
            why = std::to_string(r->m_bits) + "-bit packing spans words; not dequantized";
            return nullptr;
        }
        if (r->m_awq && r->m_bits != 4) {
            why = "AWQ's interleaved order is known for 4 bits only";
            return nullptr;
        }
        r->m_pack = 32 / r->m_bits;
        const uint64_t O = r->m_out, I = r->m_in, pack = r->m_pack;
        if (qweight->dtype != DType::Int32 || qzeros->dtype != DType::Int32 || !decodable(scales->dtype, &why)
            || scales->shape.size() != 2 || qzeros->shape.size() != 2 || qweight->shape.size() != 2 || O % pack
            || I % pack) {
            why = why.empty()
                ? "qweight, qzeros and scales are not the int32/int32/float 2-D tensors GPTQ and AWQ write"
                : why;
            return nullptr;
        }
        r->m_groups = static_cast<uint64_t>(scales->shape[0]);
        const uint64_t G = r->m_groups;
        const Shape wantQ
            = r->m_awq ? Shape { int64_t(I), int64_t(O / pack) } : Shape { int64_t(I / pack), int64_t(O) };
        if (qweight->shape != wantQ || scales->shape != Shape { int64_t(G), int64_t(O) }
            || qzeros->shape != Shape { int64_t(G), int64_t(O / pack) } || G == 0 || G > I) {
            why = "qweight " + shapeText(*qweight) + ", qzeros " + shapeText(*qzeros) + " and scales "
                + shapeText(*scales) + " do not fit a [" + std::to_string(O) + ", " + std::to_string(I) + "] weight";
            return nullptr;
        }
        r->m_groupSize = ceilDiv(I, G);
        if (ceilDiv(I, r->m_groupSize) != G) {
            why = std::to_string(G) + " groups do not split " + std::to_string(I) + " inputs evenly";
            return nullptr;
        }
        if (I > kMaxWholePart) {
            why = std::to_string(I) + " inputs is more than a packed layer can have";
            return nullptr;
        }
        if (gidx && !r->m_awq) {
            if (!gidx->shapeKnown || gidx->numel() != I || I > kMaxWholePart || !decodable(gidx->dtype, &why)) {
                why = "g_idx does not hold one group per input";
                return nullptr;
            }
            std::vector<double> v;
            TensorBytes::open(s, *gidx, files).decodeTo(0, I, v);
            r->m_gidx.reserve(v.size());
            for (double x : v) {
                if (!(x >= 0 && x < static_cast<double>(G))) {
                    why = "g_idx names a group outside [0, " + std::to_string(G) + ")";
                    return nullptr;
                }
                r->m_gidx.push_back(static_cast<uint32_t>(x));
            }
        }
        const bool fromGidx = !r->m_gidx.empty();
        if (!fromGidx) // the group of every input, so reads look it up instead of dividing
            for (uint64_t i = 0; i < I; ++i)
                r->m_gidx.push_back(static_cast<uint32_t>(i / r->m_groupSize));
        r->m_packShift = static_cast<unsigned>(std::countr_zero(pack));
        r->m_numel = O * I;
        r->m_outDtype = scales->dtype;
        r->m_note = "dequantized: " + std::string(r->m_awq ? "AWQ" : "GPTQ") + " " + std::to_string(r->m_bits)
            + "-bit, scale x (q - zero) per group of " + std::to_string(r->m_groupSize) + " inputs"
            + (r->m_awq ? std::string(", AWQ's interleaved order")
                        : (fromGidx ? std::string(", groups from g_idx") : std::string())
                        + ", zero points stored minus one (AutoGPTQ v1)")
            + ", rounded to " + outName(r->m_outDtype);
        return r;
    }

    void read(uint64_t first, uint64_t count, double* out) const override
    {
        if (!count)
            return;
        const uint64_t I = m_in, pack = m_pack, mask = (uint64_t(1) << m_bits) - 1;
        const Box& b = box(first / I, (first + count - 1) / I + 1);
        const uint64_t o0 = b.o0, nO = b.nO, c0 = b.c0, nC = b.nC;
        const std::vector<uint32_t>& words = b.words;
        const std::vector<uint32_t>& zeros = b.zeros;
        const std::vector<double>& scales = b.scales;
        // AWQ packs the 8 nibbles of a word in the order 0, 2, 4, 6, 1, 3, 5, 7: where column m sits.
        static constexpr unsigned kAwqPosition[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };
        const unsigned shift = m_packShift;
        const uint64_t low = pack - 1;
        uint64_t o = first / I, i = first % I;
        for (uint64_t k = 0; k < count; ++k) {
            const uint64_t gr = m_gidx[static_cast<size_t>(i)];
            const uint64_t col = (o >> shift) - c0;
            const unsigned colShift = static_cast<unsigned>(m_bits * (m_awq ? kAwqPosition[o & low] : o & low));
            const uint32_t zw = zeros[static_cast<size_t>(gr * nC + col)];
            int64_t zero = static_cast<int64_t>((zw >> colShift) & mask);
            int64_t qv;
            if (m_awq) {
                qv = static_cast<int64_t>((words[static_cast<size_t>(i * nC + col)] >> colShift) & mask);
            } else {
                qv = static_cast<int64_t>(
                    (words[static_cast<size_t>((i >> shift) * nO + (o - o0))] >> (m_bits * (i & low))) & mask);
                zero += 1; // AutoGPTQ stores zero - 1
            }
            const float scale = static_cast<float>(scales[static_cast<size_t>(gr * nO + (o - o0))]);
            out[k] = roundTo(scale * static_cast<float>(qv - zero), m_outDtype);
            if (++i == I) {
                i = 0;
                ++o;
            }
        }
    }

private:
    PackedIntReader(TensorBytes qw, TensorBytes qz, TensorBytes sc)
        : m_qw(std::move(qw))
        , m_qz(std::move(qz))
        , m_sc(std::move(sc))
    {
    }

    // The words, zero points and scales under a band of output rows. Callers ask for a few thousand values
    // at a time, but the band's words lie in one short run per input (GPTQ: per packed input row), so each
    // thread keeps its last band (about 2 MB of words) and serves the following reads from it.
    struct Box {
        uint64_t reader = 0; // the reader's serial: an address could be reused by a later reader
        uint64_t o0 = 0, o1 = 0, nO = 0, c0 = 0, nC = 0;
        std::vector<uint32_t> words, zeros;
        std::vector<double> scales; // [groups, nO]
    };
    const Box& box(uint64_t o0, uint64_t o1) const
    {
        thread_local Box b;
        if (b.reader == m_serial && b.o0 <= o0 && o1 <= b.o1)
            return b;
        const uint64_t O = m_out, I = m_in, G = m_groups, pack = m_pack;
        const uint64_t band
            = std::max<uint64_t>(pack, ((uint64_t(1) << 19) * pack / std::max<uint64_t>(I, 1)) / pack * pack);
        b.reader = m_serial;
        b.o0 = o0 / band * band;
        b.o1 = std::max(o1, std::min(O, b.o0 + band));
        b.nO = b.o1 - b.o0;
        b.c0 = b.o0 / pack;
        b.nC = (b.o1 - 1) / pack + 1 - b.c0;
        b.words.clear();
        if (m_awq) {
            b.words.reserve(static_cast<size_t>(I * b.nC));
            for (uint64_t i = 0; i < I; ++i)
                appendWords(m_qw, i * (O / pack) + b.c0, b.nC, b.words);
        } else {
            b.words.reserve(static_cast<size_t>(I / pack * b.nO));
            for (uint64_t p = 0; p < I / pack; ++p)
                appendWords(m_qw, p * O + b.o0, b.nO, b.words);
        }
        b.zeros.clear();
        for (uint64_t gr = 0; gr < G; ++gr)
            appendWords(m_qz, gr * (O / pack) + b.c0, b.nC, b.zeros);
        b.scales.resize(static_cast<size_t>(G * b.nO));
        std::vector<double> row;
        for (uint64_t gr = 0; gr < G; ++gr) {
            m_sc.decodeTo(gr * O + b.o0, b.nO, row);
            std::copy(row.begin(), row.end(), b.scales.begin() + static_cast<std::ptrdiff_t>(gr * b.nO));
        }
        return b;
    }
    static uint64_t nextSerial()
    {
        static std::atomic<uint64_t> serial { 0 };
        return ++serial;
    }
    const uint64_t m_serial = nextSerial();
    TensorBytes m_qw, m_qz, m_sc;
    std::vector<uint32_t> m_gidx; // the group of every input (g_idx, or input / group size)
    unsigned m_packShift = 3; // log2 of values per word
    bool m_awq = false;
    uint64_t m_bits = 4, m_pack = 8, m_out = 0, m_in = 0, m_groups = 1, m_groupSize = 1;
    DType m_outDtype = DType::Float16;
};

// A number param ("-448", "15"); false when absent or not a number.
bool numberParam(const Quantization& q, std::string_view key, double& out)
{
    const std::string* text = q.param(key);
    if (!text || text->empty())
        return false;
    char* end = nullptr;
    out = std::strtod(text->c_str(), &end);
    return *end == '\0' && std::isfinite(out);
}

// "INT", "FLOAT" or "NONE" from a ZeroPointDomain param: pickled as the enum's value (torchao 0.9: INT = 1,
// FLOAT = 2, NONE = 3) or by name; "" for anything else.
std::string zeroPointDomain(const std::string* text)
{
    static constexpr std::pair<const char*, const char*> kDomains[]
        = { { "INT", "1" }, { "FLOAT", "2" }, { "NONE", "3" } };
    for (const auto& [name, value] : kDomains)
        if (text
            && (*text == std::string("ZeroPointDomain(") + value + ")"
                || *text == std::string("ZeroPointDomain.") + name))
            return name;
    return {};
}

// torchao's AffineQuantizedTensor (torchao.dtypes, deleted in 2026 but in many files) as its dequantize()
// computes it: the tensor impl's plain data, scale and zero point through dequantize_affine, in the tensor's
// dtype. Also the weight of a LinearActivationQuantizedTensor, which quantizes activations only.
std::unique_ptr<const ValueReader> openAffine(const Source& s, const Entry& g, FileCache& files, std::string& why)
{
    const Quantization& q = *g.quantization;
    const std::string* implParam = q.param("tensor_impl");
    const std::string impl = implParam ? *implParam : std::string("an unknown tensor impl");
    const bool plain = impl == "PlainAQTTensorImpl" || impl == "PlainAQTLayout";
    if (impl == "Int4CPUAQTTensorImpl") {
        // aten's weight_to_int4pack_kernel lays nibbles out per CPU_CAPABILITY (AVX512: blocks of 64 rows,
        // AVX2: 32, otherwise pairs of rows); torchao's own dequantize() is wrong on another kind of CPU.
        why = "Int4CPULayout's nibble order depends on the CPU of the process that saved it (AVX512, AVX2 or "
              "other) and is not recorded: not dequantized";
        return nullptr;
    }
    if (!plain && impl != "Float8AQTTensorImpl" && impl != "Float8AQTLayout") {
        why = "torchao.AffineQuantizedTensor with " + impl + " is not dequantized";
        return nullptr;
    }
    const Entry* data = g.part(plain ? "int_data" : "float8_data");
    const Entry* scale = g.part("scale");
    if (!data || !scale) {
        const char* missing = data ? "scale" : plain ? "int_data" : "float8_data";
        why = std::string("stored without its ") + missing + ": cannot dequantize";
        return nullptr;
    }
    if (const std::string* t = q.param("transposed"); t && *t != "False") {
        why = "its tensor impl is marked transposed (the data keeps the other shape): not dequantized";
        return nullptr;
    }
    if (g.dtype != DType::Float32 && g.dtype != DType::Float16 && g.dtype != DType::BFloat16) {
        why = "torchao dequantizes to float32, float16 or bfloat16, not " + std::string(dtypeName(g.dtype));
        return nullptr;
    }
    const std::string* domainText = q.param("zero_point_domain");
    const std::string domain = zeroPointDomain(domainText);
    if (domain.empty()) {
        why = "its zero_point_domain (" + (domainText ? *domainText : std::string("absent"))
            + ") is not one torchao 0.9 knows";
        return nullptr;
    }
    Recipe how;
    how.zero = g.part("zero_point");
    std::string formula;
    if (domain == "NONE") {
        if (how.zero) {
            why = "a zero_point with ZeroPointDomain.NONE (torchao refuses it)";
            return nullptr;
        }
        how.kind = Recipe::Kind::AffineNone;
        formula = data->name + " x scale";
    } else {
        if (dtypeIsFloatingPoint(data->dtype)) {
            why = "ZeroPointDomain." + domain + " needs integer data, not " + std::string(dtypeName(data->dtype));
            return nullptr;
        }
        if (domain == "INT") {
            how.kind = Recipe::Kind::AffineInt;
            formula = how.zero ? "(int_data - zero_point) x scale" : "int_data x scale";
        } else {
            // quant_min and quant_max default to the data dtype's range (_get_and_check_qmin_qmax).
            const bool isUnsigned = data->dtype == DType::UInt8;
            const unsigned bits = dtypeItemSize(data->dtype) * 8;
            double lo = isUnsigned ? 0.0 : -std::ldexp(1.0, static_cast<int>(bits) - 1);
            double hi = isUnsigned ? 255.0 : std::ldexp(1.0, static_cast<int>(bits) - 1) - 1;
            if ((q.param("quant_min") && !numberParam(q, "quant_min", lo))
                || (q.param("quant_max") && !numberParam(q, "quant_max", hi))) {
                why = "quant_min or quant_max is not a number";
                return nullptr;
            }
            how.kind = Recipe::Kind::AffineFloat;
            how.mid = static_cast<float>((hi + lo + 1) / 2);
            char mid[32];
            std::snprintf(mid, sizeof mid, "%g", static_cast<double>(how.mid));
            formula = "(int_data - " + std::string(mid) + ") x scale" + (how.zero ? " + zero_point" : "");
        }
    }
    const std::string* wrapper = q.param("wrapper");
    how.what = (wrapper ? "the weight of a " + *wrapper + ", " : std::string()) + "torchao dequantize_affine (" + impl
        + ", ZeroPointDomain." + domain + "): " + formula;
    return ScaledReader::make(s, g, *data, *scale, how, files, why);
}

std::unique_ptr<const ValueReader> openGroup(const Source& s, const Entry& g, FileCache& files, std::string& why)
{
    if (!g.quantization) {
        why = "a group of tensors; its parts have the values";
        return nullptr;
    }
    const std::string& scheme = g.quantization->scheme;
    auto starts = [&](std::string_view p) { return scheme.compare(0, p.size(), p) == 0; };
    if (starts("fp8.") || starts("int8.")) {
        const Entry* w = g.part("weight");
        const Entry* sc = g.part("weight_scale_inv");
        if (!sc)
            sc = g.part("weight_scale");
        if (w && sc)
            return ScaledReader::make(s, g, *w, *sc, {}, files, why);
    } else if (scheme == "torchao.Float8Tensor") {
        const Entry* w = g.part("qdata");
        const Entry* sc = g.part("scale");
        if (w && sc)
            return ScaledReader::make(s, g, *w, *sc, {}, files, why);
    } else if (scheme == "torchao.Float8TrainingTensor") {
        const Entry* w = g.part("_data");
        const Entry* sc = g.part("_scale");
        Recipe how;
        how.kind = Recipe::Kind::Divide;
        how.what = "torchao.float8 to_original_precision(): _data.to(orig_dtype) / _scale";
        if (w && sc)
            return ScaledReader::make(s, g, *w, *sc, how, files, why);
    } else if (scheme == "torchao.AffineQuantizedTensor") {
        return openAffine(s, g, files, why);
    } else if (scheme == "torchao.NF4Tensor") {
        return openNf4(s, g, files, why);
    } else if (scheme == "torchao.OptimState8bit" || scheme == "torchao.OptimState4bit"
        || scheme == "torchao.OptimStateFp8") {
        return openOptimState(s, g, std::string_view(scheme).substr(8), files, why);
    } else if (scheme == "bitsandbytes.int8") {
        const Entry* w = g.part("weight");
        const Entry* sc = g.part("SCB");
        Recipe how;
        how.factor = 7.874015718698502e-3f; // bitsandbytes' 1/127
        if (w && sc && w->shape.size() == 2)
            return ScaledReader::make(s, g, *w, *sc, how, files, why);
    } else if (starts("bitsandbytes.")) {
        return openBnb4(s, g, files, why);
    } else if (scheme == "gptq" || scheme == "awq") {
        return PackedIntReader::make(s, g, files, why);
    } else {
        why = scheme + " is not dequantized";
        return nullptr;
    }
    if (why.empty())
        why = "the parts " + scheme + " needs are missing: cannot dequantize";
    return nullptr;
}

} // namespace

const Entry& storedTensorOf(const Entry& e)
{
    if (e.kind != EntryKind::Group)
        return e;
    const Entry* inner = nullptr;
    if (!e.quantization && e.parts.size() == 1)
        inner = &e.parts[0];
    else if (e.quantization && e.quantization->scheme == "torchao.LinearActivationQuantizedTensor") {
        inner = e.part("original_weight");
        if (!inner)
            inner = e.part("original_weight_tensor");
    }
    return inner && inner->kind == EntryKind::Tensor ? *inner : e;
}

bool ValueReader::needsReader(const Entry& entry)
{
    const Entry& e = storedTensorOf(entry);
    return e.kind == EntryKind::Group || e.dtype == DType::Float4_e2m1fn_x2
        || complexComponent(e.dtype) != DType::Unknown || sparseLayout(e);
}

std::unique_ptr<const ValueReader> ValueReader::open(
    const Source& source, const Entry& e, FileCache& files, std::string& why)
{
    switch (e.kind) {
    case EntryKind::Object:
        why = "not a tensor";
        return nullptr;
    case EntryKind::Group:
        if (const Entry& inner = storedTensorOf(e); &inner != &e)
            return open(source, inner, files, why);
        return openGroup(source, e, files, why);
    case EntryKind::Tensor:
        break;
    }
    if (const std::string* layout = sparseLayout(e))
        return SparseReader::make(source, e, *layout, files, why);
    const bool fp4x2 = e.dtype == DType::Float4_e2m1fn_x2;
    if (!fp4x2 && complexComponent(e.dtype) == DType::Unknown && !decodable(e.dtype, &why))
        return nullptr;
    return std::make_unique<PlainReader>(TensorBytes::open(source, e, files), fp4x2);
}

} // namespace sl::values
