#include "dtype_cast.h"

#include <bit>
#include <cmath>
#include <cstring>

namespace sl::convert {

namespace {

bool isFloat(DType t)
{
    return t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 || t == DType::Float64;
}

// c10/util/Half.h: fp16_ieee_to_fp32_value and fp16_ieee_from_fp32_value (exact, branch-light).
float halfToFloat(uint16_t h)
{
    const uint32_t w = static_cast<uint32_t>(h) << 16;
    const uint32_t sign = w & UINT32_C(0x80000000);
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = UINT32_C(0xE0) << 23;
    const float exp_scale = 0x1.0p-112f;
    const float normalized = std::bit_cast<float>((two_w >> 4) + exp_offset) * exp_scale;
    const uint32_t magic_mask = UINT32_C(126) << 23;
    const float magic_bias = 0.5f;
    const float denormalized = std::bit_cast<float>((two_w >> 17) | magic_mask) - magic_bias;
    const uint32_t denormalized_cutoff = UINT32_C(1) << 27;
    const uint32_t result
        = sign | (two_w < denormalized_cutoff ? std::bit_cast<uint32_t>(denormalized) : std::bit_cast<uint32_t>(normalized));
    return std::bit_cast<float>(result);
}

uint16_t floatToHalf(float f)
{
    const float scale_to_inf = 0x1.0p+112f;
    const float scale_to_zero = 0x1.0p-110f;
    float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
    const uint32_t w = std::bit_cast<uint32_t>(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & UINT32_C(0x80000000);
    uint32_t bias = shl1_w & UINT32_C(0xFF000000);
    if (bias < UINT32_C(0x71000000))
        bias = UINT32_C(0x71000000);
    base = std::bit_cast<float>((bias >> 1) + UINT32_C(0x07800000)) + base;
    const uint32_t bits = std::bit_cast<uint32_t>(base);
    const uint32_t exp_bits = (bits >> 13) & UINT32_C(0x00007C00);
    const uint32_t mantissa_bits = bits & UINT32_C(0x00000FFF);
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return static_cast<uint16_t>((sign >> 16) | (shl1_w > UINT32_C(0xFF000000) ? UINT32_C(0x7E00) : nonsign));
}

float bfloat16ToFloat(uint16_t b)
{
    return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// c10/util/BFloat16.h: round_to_nearest_even; NaN as ATen's vectorized conversion (the path Tensor.to takes
// for float32 tensors of any size, and float64 ones past a few elements) writes it: 0xFFFF.
uint16_t floatToBfloat16(float f)
{
    if (std::isnan(f))
        return UINT16_C(0xFFFF);
    const uint32_t u = std::bit_cast<uint32_t>(f);
    const uint32_t bias = ((u >> 16) & 1) + UINT32_C(0x7FFF);
    return static_cast<uint16_t>((u + bias) >> 16);
}

template <typename T> T load(const uint8_t* p)
{
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}
template <typename T> void store(uint8_t* p, T v)
{
    std::memcpy(p, &v, sizeof(T));
}

} // namespace

bool castable(DType from, DType to)
{
    return isFloat(from) && isFloat(to);
}

void castElements(DType from, const uint8_t* in, DType to, uint8_t* out, size_t count)
{
    if (from == to) {
        std::memcpy(out, in, count * dtypeItemSize(from));
        return;
    }
    const unsigned inSize = dtypeItemSize(from), outSize = dtypeItemSize(to);
    for (size_t i = 0; i < count; ++i) {
        const uint8_t* p = in + i * inSize;
        uint8_t* q = out + i * outSize;
        if (from == DType::Float64 && to == DType::Float32) { // one rounding, as torch does
            store(q, static_cast<float>(load<double>(p)));
            continue;
        }
        float v = 0;
        switch (from) {
        case DType::Float16:
            v = halfToFloat(load<uint16_t>(p));
            break;
        case DType::BFloat16:
            v = bfloat16ToFloat(load<uint16_t>(p));
            break;
        case DType::Float32:
            v = load<float>(p);
            break;
        default: // Float64, to a 16-bit type: through float32 as c10's constructors take a float
            v = static_cast<float>(load<double>(p));
            break;
        }
        switch (to) {
        case DType::Float16:
            store(q, floatToHalf(v));
            break;
        case DType::BFloat16:
            store(q, floatToBfloat16(v));
            break;
        case DType::Float32:
            store(q, v);
            break;
        default:
            store(q, static_cast<double>(v));
            break;
        }
    }
}

} // namespace sl::convert
