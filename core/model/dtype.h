#pragma once
// Element types, named as PyTorch names them (without "torch."), with their sizes and the names the
// on-disk formats use for them: safetensors dtype strings and torch.save's legacy storage classes.

#include <cstdint>
#include <optional>
#include <string_view>

namespace sl {

enum class DType : uint8_t {
    Unknown,
    Bool,
    UInt8,
    Int8,
    Int16,
    Int32,
    Int64,
    UInt16,
    UInt32,
    UInt64,
    Float16,
    BFloat16,
    Float32,
    Float64,
    Complex32,
    Complex64,
    Complex128,
    Float8_e4m3fn,
    Float8_e5m2,
    Float8_e4m3fnuz,
    Float8_e5m2fnuz,
    Float8_e8m0fnu,
    Float4_e2m1fn_x2, // torch's packed pair of fp4 values, one byte per element
    Float4_e2m1fn, // one fp4 value per element (safetensors F4, 4 bits)
    Float6_e2m3fn, // safetensors F6_E2M3 (6 bits); torch has no such dtype
    Float6_e3m2fn, // safetensors F6_E3M2 (6 bits)
    QInt8,
    QUInt8,
    QInt32,
    QUInt4x2,
    QUInt2x4,
    Bits1x8,
    Bits2x4,
    Bits4x2,
    Bits8,
    Bits16,
    Count_
};

// "float32", "bfloat16", "float8_e4m3fn", ...; "unknown" for Unknown.
std::string_view dtypeName(DType t);
// Inverse of dtypeName; also accepts the legacy aliases torch keeps (float, double, half, long, int, ...).
std::optional<DType> dtypeFromName(std::string_view torchName);
// Bits per element (4 for Float4_e2m1fn, 6 for Float6_*, 8 for Float4_e2m1fn_x2); 0 for Unknown.
unsigned dtypeBits(DType t);
// Bytes per element for whole-byte types; 0 for sub-byte types and Unknown.
unsigned dtypeItemSize(DType t);
bool dtypeIsFloatingPoint(DType t);
bool dtypeIsQuantized(DType t);

// safetensors dtype strings ("F32", "BF16", "F8_E4M3", ...).
std::optional<DType> dtypeFromSafetensors(std::string_view name);
std::string_view dtypeSafetensorsName(DType t); // empty when safetensors has no name for it

// Legacy typed storage classes of torch.save ("FloatStorage", "QInt8Storage", ...), by class name.
std::optional<DType> dtypeFromStorageClass(std::string_view className);

} // namespace sl
