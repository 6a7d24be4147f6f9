#include "element_decode.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace sl::values {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A minifloat with `e` exponent bits, `m` mantissa bits and `bias`: subnormals when the exponent field is 0.
double minifloat(unsigned bits, unsigned e, unsigned m, int bias, bool hasSign = true)
{
    const bool negative = hasSign && ((bits >> (e + m)) & 1u);
    const unsigned exponent = (bits >> m) & ((1u << e) - 1);
    const unsigned mantissa = bits & ((1u << m) - 1);
    double v = exponent == 0 ? std::ldexp(static_cast<double>(mantissa), 1 - bias - static_cast<int>(m))
                             : std::ldexp(static_cast<double>((1u << m) | mantissa), static_cast<int>(exponent) - bias - static_cast<int>(m));
    return negative ? -v : v;
}

double float8(DType t, uint8_t b)
{
    switch (t) {
    case DType::Float8_e4m3fn: // no infinities; S.1111.111 is NaN; max 448
        return (b & 0x7f) == 0x7f ? kNaN : minifloat(b, 4, 3, 7);
    case DType::Float8_e5m2: // IEEE-like: exponent all ones is inf (mantissa 0) or NaN
        if ((b & 0x7c) == 0x7c)
            return (b & 0x03) ? kNaN : ((b & 0x80) ? -kInf : kInf);
        return minifloat(b, 5, 2, 15);
    case DType::Float8_e4m3fnuz: // no infinities, no negative zero: 0x80 is the only NaN
        return b == 0x80 ? kNaN : minifloat(b, 4, 3, 8);
    case DType::Float8_e5m2fnuz:
        return b == 0x80 ? kNaN : minifloat(b, 5, 2, 16);
    case DType::Float8_e8m0fnu: // an unsigned power of two (MX scales): 2^(b - 127), 0xff is NaN
        return b == 0xff ? kNaN : std::ldexp(1.0, static_cast<int>(b) - 127);
    default:
        return kNaN;
    }
}

template <DType T> const std::array<double, 256>& float8Table()
{
    static const std::array<double, 256> table = [] {
        std::array<double, 256> t {};
        for (unsigned b = 0; b < 256; ++b)
            t[b] = float8(T, static_cast<uint8_t>(b));
        return t;
    }();
    return table;
}

const std::array<float, 65536>& float16Table()
{
    static const std::array<float, 65536> table = [] {
        std::array<float, 65536> t {};
        for (unsigned h = 0; h < 65536; ++h) {
            if ((h & 0x7c00) == 0x7c00)
                t[h] = (h & 0x3ff) ? std::numeric_limits<float>::quiet_NaN() : ((h & 0x8000) ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity());
            else
                t[h] = static_cast<float>(minifloat(h, 5, 10, 15));
        }
        return t;
    }();
    return table;
}

template <typename T> void decodeInts(const uint8_t* src, size_t count, double* out)
{
    for (size_t i = 0; i < count; ++i) {
        T v;
        std::memcpy(&v, src + i * sizeof(T), sizeof(T));
        out[i] = static_cast<double>(v);
    }
}

void decodeTable(const std::array<double, 256>& table, const uint8_t* src, size_t count, double* out)
{
    for (size_t i = 0; i < count; ++i)
        out[i] = table[src[i]];
}

} // namespace

bool decodable(DType t, std::string* why)
{
    switch (t) {
    case DType::Bool:
    case DType::UInt8:
    case DType::Int8:
    case DType::Int16:
    case DType::Int32:
    case DType::Int64:
    case DType::UInt16:
    case DType::UInt32:
    case DType::UInt64:
    case DType::Float16:
    case DType::BFloat16:
    case DType::Float32:
    case DType::Float64:
    case DType::Float8_e4m3fn:
    case DType::Float8_e5m2:
    case DType::Float8_e4m3fnuz:
    case DType::Float8_e5m2fnuz:
    case DType::Float8_e8m0fnu:
    case DType::QInt8:
    case DType::QUInt8:
    case DType::QInt32:
        return true;
    case DType::Complex32:
    case DType::Complex64:
    case DType::Complex128:
        if (why)
            *why = "complex: its real and imaginary parts are read as two values (value_reader.h)";
        return false;
    default:
        if (why)
            *why = std::string(dtypeName(t)) + " elements are not whole bytes; not decoded yet";
        return false;
    }
}

double decodeFloat8(DType t, uint8_t bits) { return float8(t, bits); }

void decode(DType t, const uint8_t* src, size_t count, double* out)
{
    static_assert(std::endian::native == std::endian::little, "elements are decoded as little-endian");
    switch (t) {
    case DType::Bool:
        for (size_t i = 0; i < count; ++i)
            out[i] = src[i] ? 1.0 : 0.0;
        return;
    case DType::UInt8:
    case DType::QUInt8:
        return decodeInts<uint8_t>(src, count, out);
    case DType::Int8:
    case DType::QInt8:
        return decodeInts<int8_t>(src, count, out);
    case DType::Int16:
        return decodeInts<int16_t>(src, count, out);
    case DType::Int32:
    case DType::QInt32:
        return decodeInts<int32_t>(src, count, out);
    case DType::Int64:
        return decodeInts<int64_t>(src, count, out);
    case DType::UInt16:
        return decodeInts<uint16_t>(src, count, out);
    case DType::UInt32:
        return decodeInts<uint32_t>(src, count, out);
    case DType::UInt64:
        return decodeInts<uint64_t>(src, count, out);
    case DType::Float32:
        return decodeInts<float>(src, count, out);
    case DType::Float64:
        return decodeInts<double>(src, count, out);
    case DType::Float16: {
        const auto& table = float16Table();
        for (size_t i = 0; i < count; ++i) {
            uint16_t h;
            std::memcpy(&h, src + 2 * i, 2);
            out[i] = table[h];
        }
        return;
    }
    case DType::BFloat16: // the upper half of a float32
        for (size_t i = 0; i < count; ++i) {
            uint16_t h;
            std::memcpy(&h, src + 2 * i, 2);
            out[i] = std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
        }
        return;
    case DType::Float8_e4m3fn:
        return decodeTable(float8Table<DType::Float8_e4m3fn>(), src, count, out);
    case DType::Float8_e5m2:
        return decodeTable(float8Table<DType::Float8_e5m2>(), src, count, out);
    case DType::Float8_e4m3fnuz:
        return decodeTable(float8Table<DType::Float8_e4m3fnuz>(), src, count, out);
    case DType::Float8_e5m2fnuz:
        return decodeTable(float8Table<DType::Float8_e5m2fnuz>(), src, count, out);
    case DType::Float8_e8m0fnu:
        return decodeTable(float8Table<DType::Float8_e8m0fnu>(), src, count, out);
    default:
        for (size_t i = 0; i < count; ++i)
            out[i] = kNaN;
        return;
    }
}

} // namespace sl::values
