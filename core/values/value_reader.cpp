#include "value_reader.h"

#include "util/error.h"
#include "values/element_decode.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
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

// "[1, 32]" -> {1, 32}; empty when absent or not a list of sizes.
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
        } else if (*p == '[' || *p == ']' || *p == ',' || *p == ' ') {
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

// ---- a weight times a scale per block, row or tensor (FP8 / int8 scales, torchao Float8Tensor, LLM.int8)

class ScaledReader final : public ValueReader {
public:
    // Null with `why` when the scale does not tile the weight.
    static std::unique_ptr<ScaledReader> make(const Source& s, const Entry& g, const Entry& weight, const Entry& scale,
        float factor, FileCache& files, std::string& why)
    {
        if (!weight.shapeKnown || !scale.shapeKnown || weight.shape.empty()) {
            why = "the weight's or the scale's shape is not known";
            return nullptr;
        }
        if (!decodable(weight.dtype, &why) || !decodable(scale.dtype, &why))
            return nullptr;
        auto r = std::unique_ptr<ScaledReader>(
            new ScaledReader(TensorBytes::open(s, weight, files), TensorBytes::open(s, scale, files)));
        const size_t n = weight.shape.size();
        Shape sshape = scale.shape;
        if (r->m_s.numel() == 1) { // one scale for the tensor
            sshape.clear();
            sshape.resize(n, 1);
        } else {
            while (sshape.size() < n)
                sshape.push_back(1); // [rows] scales a [rows, cols] weight per row
        }
        if (sshape.size() != n) {
            why = "scale shape " + shapeText(scale) + " does not tile weight shape " + shapeText(weight);
            return nullptr;
        }
        // The block edge per dimension: the stated block_size (torchao), else the power of two whose
        // ceil-division gives the scale's size (a [200, 300] weight in 128 x 128 blocks has [2, 3] scales,
        // which 100 x 100 blocks would also give), else the plain ceil-division.
        const std::vector<uint64_t> stated
            = g.quantization ? listParam(*g.quantization, "block_size") : std::vector<uint64_t> {};
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
                return nullptr;
            }
            r->m_block.push_back(b);
        }
        r->m_dims.assign(weight.shape.begin(), weight.shape.end());
        r->m_sdims.assign(sshape.begin(), sshape.end());
        r->m_factor = factor;
        r->m_out = g.dtype;
        r->m_numel = r->m_w.numel();
        std::string blocks;
        bool perRow = n == 2 && r->m_block[0] == 1;
        for (size_t d = 0; d < n; ++d) {
            blocks += (d ? ", " : "") + std::to_string(r->m_block[d]);
            perRow = perRow && (d == 0 || r->m_sdims[d] == 1);
        }
        const bool perTensor = r->m_s.numel() == 1;
        r->m_note = "dequantized: " + std::string(dtypeName(weight.dtype)) + " x " + scale.name
            + (perTensor     ? " (one per tensor)"
                    : perRow ? " per row"
                             : " per [" + blocks + "] block")
            + (factor != 1.0f ? " / 127" : "") + ", in float32"
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
        std::vector<double> scales;
        m_s.decodeTo(s0 * sc, (s1 - s0 + 1) * sc, scales);
        thread_local std::vector<uint8_t> buffer;
        decode(m_w.dtype(), m_w.read(first, count, buffer), static_cast<size_t>(count), out);
        // In runs that share one scale (a row's stretch inside one block), so the inner loop has no division.
        uint64_t r = r0, c = first % cols, sr = s0;
        for (uint64_t k = 0; k < count;) {
            const uint64_t blockEnd = std::min((c / bc + 1) * bc, cols);
            const uint64_t run = std::min(blockEnd - c, count - k);
            const float scale = static_cast<float>(scales[static_cast<size_t>((sr - s0) * sc + c / bc)]);
            for (uint64_t e = k + run; k < e; ++k) {
                float v = static_cast<float>(out[k]) * scale;
                if (m_factor != 1.0f)
                    v *= m_factor;
                out[k] = roundTo(v, m_out);
            }
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
    std::vector<int64_t> m_dims, m_sdims;
    std::vector<uint64_t> m_block;
    float m_factor = 1;
    DType m_out = DType::Float32;
};

// ---- bitsandbytes 4-bit (NF4, FP4)

class Bnb4Reader final : public ValueReader {
public:
    static std::unique_ptr<Bnb4Reader> make(const Source& s, const Entry& g, FileCache& files, std::string& why)
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
        auto r = std::unique_ptr<Bnb4Reader>(
            new Bnb4Reader(TensorBytes::open(s, *weight, files), TensorBytes::open(s, *absmax, files)));
        r->m_numel = g.numel();
        r->m_block = std::strtoull(bs->c_str(), nullptr, 10);
        r->m_out = g.dtype;
        if (r->m_block == 0 || r->m_block > (uint64_t(1) << 32)) {
            why = "blocksize " + *bs + " is not a positive block size";
            return nullptr;
        }
        uint64_t storedBytes = 0;
        if (__builtin_mul_overflow(r->m_w.numel(), static_cast<uint64_t>(r->m_w.itemSize()), &storedBytes)
            || storedBytes < ceilDiv(r->m_numel, 2)) {
            why = "the packed weight holds " + std::to_string(storedBytes) + " bytes, fewer than "
                + std::to_string(r->m_numel) + " 4-bit values need";
            return nullptr;
        }
        const uint64_t blocks = ceilDiv(r->m_numel, r->m_block);
        if (r->m_absmax.numel() < blocks) {
            why = "absmax has " + std::to_string(r->m_absmax.numel()) + " values; " + std::to_string(blocks)
                + " blocks need one each";
            return nullptr;
        }
        if (!readTable(s, *qmap, files, 16, r->m_code, why))
            return nullptr;
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
            r->m_nestedBlock = std::strtoull(nbs->c_str(), nullptr, 10);
            r->m_offset = std::strtof(off->c_str(), nullptr);
            if (r->m_nestedBlock == 0 || r->m_nestedBlock > (uint64_t(1) << 32)) {
                why = "nested_blocksize " + *nbs + " is not a positive block size";
                return nullptr;
            }
            r->m_nestedAbsmax.emplace(TensorBytes::open(s, *nabs, files));
            if (!decodable(nabs->dtype, &why) || r->m_nestedAbsmax->numel() < ceilDiv(blocks, r->m_nestedBlock)) {
                why = "nested_absmax has too few values for its blocks";
                return nullptr;
            }
            if (!readTable(s, *nmap, files, 256, r->m_nestedCode, why))
                return nullptr;
        } else if (!decodable(absmax->dtype, &why)) {
            return nullptr;
        }
        const std::string* type = q.param("quant_type");
        r->m_note = "dequantized: bitsandbytes " + (type ? *type : std::string("4-bit"))
            + ", quant_map x absmax per block of " + *bs + (r->m_nestedAbsmax ? " (absmax double-quantized)" : "")
            + ", high nibble first, rounded to " + outName(r->m_out);
        return r;
    }

    void read(uint64_t first, uint64_t count, double* out) const override
    {
        if (!count)
            return;
        const uint64_t last = first + count - 1;
        // The packed bytes under [first, last], whatever the storage dtype.
        const uint64_t item = m_w.itemSize();
        const uint64_t b0 = first / 2, b1 = last / 2;
        const uint64_t e0 = b0 / item, e1 = b1 / item;
        thread_local std::vector<uint8_t> scratch;
        const uint8_t* packed = m_w.read(e0, e1 - e0 + 1, scratch) + (b0 - e0 * item);
        // absmax of the blocks under the range.
        const uint64_t j0 = first / m_block, j1 = last / m_block;
        std::vector<double> absmax;
        m_absmax.decodeTo(j0, j1 - j0 + 1, absmax);
        std::vector<float> scale(absmax.size());
        if (m_nestedAbsmax) {
            const uint64_t n0 = j0 / m_nestedBlock, n1 = j1 / m_nestedBlock;
            std::vector<double> nested;
            m_nestedAbsmax->decodeTo(n0, n1 - n0 + 1, nested);
            for (uint64_t j = j0; j <= j1; ++j) {
                const float code = m_nestedCode[static_cast<size_t>(absmax[j - j0]) & 0xff];
                scale[j - j0] = code * static_cast<float>(nested[j / m_nestedBlock - n0]) + m_offset;
            }
        } else {
            for (size_t k = 0; k < absmax.size(); ++k)
                scale[k] = static_cast<float>(absmax[k]);
        }
        // Block by block, so the inner loop has no division.
        for (uint64_t i = first, k = 0; k < count;) {
            const uint64_t j = i / m_block;
            const uint64_t end = std::min((j + 1) * m_block, first + count);
            const float sc = scale[j - j0];
            for (; i < end; ++i, ++k) {
                const uint8_t byte = packed[(i >> 1) - b0];
                out[k] = roundTo(m_code[(i & 1) ? (byte & 0x0f) : (byte >> 4)] * sc, m_out);
            }
        }
    }

private:
    Bnb4Reader(TensorBytes w, TensorBytes absmax)
        : m_w(std::move(w))
        , m_absmax(std::move(absmax))
    {
    }
    static bool readTable(
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
    TensorBytes m_w, m_absmax;
    std::optional<TensorBytes> m_nestedAbsmax;
    std::vector<float> m_code, m_nestedCode;
    uint64_t m_block = 64, m_nestedBlock = 256;
    float m_offset = 0;
    DType m_out = DType::Float32;
};

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
            return ScaledReader::make(s, g, *w, *sc, 1.0f, files, why);
    } else if (scheme == "torchao.Float8Tensor") {
        const Entry* w = g.part("qdata");
        const Entry* sc = g.part("scale");
        if (w && sc)
            return ScaledReader::make(s, g, *w, *sc, 1.0f, files, why);
    } else if (scheme == "bitsandbytes.int8") {
        const Entry* w = g.part("weight");
        const Entry* sc = g.part("SCB");
        if (w && sc && w->shape.size() == 2)
            return ScaledReader::make(s, g, *w, *sc, 7.874015718698502e-3f, files, why); // bitsandbytes' 1/127
    } else if (starts("bitsandbytes.")) {
        return Bnb4Reader::make(s, g, files, why);
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
        || complexComponent(e.dtype) != DType::Unknown;
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
    const bool fp4x2 = e.dtype == DType::Float4_e2m1fn_x2;
    if (!fp4x2 && complexComponent(e.dtype) == DType::Unknown && !decodable(e.dtype, &why))
        return nullptr;
    return std::make_unique<PlainReader>(TensorBytes::open(source, e, files), fp4x2);
}

} // namespace sl::values
