#pragma once
// Stored elements to numbers. Every dtype the readers know whose elements are whole bytes decodes here to
// double: bool as 0/1, integers as themselves (exact below 2^53), float16/bfloat16/float32/float64, and the
// 8-bit floats LibTorch 1.13 lacks (float8_e4m3fn, float8_e5m2, their fnuz variants, float8_e8m0fnu),
// decoded from their bit layouts (OCP 8-bit floating point and MX specifications) through 256-entry
// tables. Quantized dtypes decode to their stored integers (dequantizing needs the scheme's scales).
// Elements are little-endian, as every format StateLens reads stores them.

#include "model/dtype.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace sl::values {

// Whether decode() handles this dtype; when not, why (complex, packed sub-byte formats, ...).
bool decodable(DType t, std::string* why = nullptr);
// Decodes `count` consecutive elements of `t` at `src` into `out`. `t` must be decodable.
void decode(DType t, const uint8_t* src, size_t count, double* out);
// One 8-bit float (float8_* formats), for tests and tables.
double decodeFloat8(DType t, uint8_t bits);

} // namespace sl::values
