#pragma once
// --dtype: floating elements cast between float64, float32, float16 and bfloat16 bit for bit as torch's
// Tensor.to does on the CPU: through float32 (c10::Half and c10::BFloat16 are built from a float), float16
// by c10's fp16_ieee_from_fp32_value, bfloat16 rounded to nearest even with NaN as
// 0xFFFF, as ATen's vectorized conversion writes it (measured under torch 1.13 and 2.6).

#include "model/dtype.h"

#include <cstddef>
#include <cstdint>

namespace sl::convert {

// Whether castElements handles `from` -> `to` (both among float16, bfloat16, float32, float64).
bool castable(DType from, DType to);
// `count` little-endian elements of `from` at `in` written as `to` at `out` (count * itemsize(to) bytes).
void castElements(DType from, const uint8_t* in, DType to, uint8_t* out, size_t count);

} // namespace sl::convert
