#include "dtype.h"

#include <array>

namespace sl {

namespace {

struct DTypeInfo {
    DType type;
    std::string_view name;
    unsigned bits;
    std::string_view safetensors;
    std::string_view storageClass;
    bool floating;
};

// One row per DType, in enum order (checked by a static_assert below).
constexpr std::array<DTypeInfo, static_cast<size_t>(DType::Count_)> kTable { {
    { DType::Unknown, "unknown", 0, "", "", false },
    { DType::Bool, "bool", 8, "BOOL", "BoolStorage", false },
    { DType::UInt8, "uint8", 8, "U8", "ByteStorage", false },
    { DType::Int8, "int8", 8, "I8", "CharStorage", false },
    { DType::Int16, "int16", 16, "I16", "ShortStorage", false },
    { DType::Int32, "int32", 32, "I32", "IntStorage", false },
    { DType::Int64, "int64", 64, "I64", "LongStorage", false },
    { DType::UInt16, "uint16", 16, "U16", "", false },
    { DType::UInt32, "uint32", 32, "U32", "", false },
    { DType::UInt64, "uint64", 64, "U64", "", false },
    { DType::Float16, "float16", 16, "F16", "HalfStorage", true },
    { DType::BFloat16, "bfloat16", 16, "BF16", "BFloat16Storage", true },
    { DType::Float32, "float32", 32, "F32", "FloatStorage", true },
    { DType::Float64, "float64", 64, "F64", "DoubleStorage", true },
    { DType::Complex32, "complex32", 32, "", "", true },
    { DType::Complex64, "complex64", 64, "C64", "ComplexFloatStorage", true },
    { DType::Complex128, "complex128", 128, "", "ComplexDoubleStorage", true },
    { DType::Float8_e4m3fn, "float8_e4m3fn", 8, "F8_E4M3", "", true },
    { DType::Float8_e5m2, "float8_e5m2", 8, "F8_E5M2", "", true },
    { DType::Float8_e4m3fnuz, "float8_e4m3fnuz", 8, "F8_E4M3FNUZ", "", true },
    { DType::Float8_e5m2fnuz, "float8_e5m2fnuz", 8, "F8_E5M2FNUZ", "", true },
    { DType::Float8_e8m0fnu, "float8_e8m0fnu", 8, "F8_E8M0", "", true },
    { DType::Float4_e2m1fn_x2, "float4_e2m1fn_x2", 8, "", "", true },
    { DType::Float4_e2m1fn, "float4_e2m1fn", 4, "F4", "", true },
    { DType::Float6_e2m3fn, "float6_e2m3fn", 6, "F6_E2M3", "", true },
    { DType::Float6_e3m2fn, "float6_e3m2fn", 6, "F6_E3M2", "", true },
    { DType::QInt8, "qint8", 8, "", "QInt8Storage", false },
    { DType::QUInt8, "quint8", 8, "", "QUInt8Storage", false },
    { DType::QInt32, "qint32", 32, "", "QInt32Storage", false },
    { DType::QUInt4x2, "quint4x2", 8, "", "QUInt4x2Storage", false },
    { DType::QUInt2x4, "quint2x4", 8, "", "QUInt2x4Storage", false },
    { DType::Bits1x8, "bits1x8", 8, "", "", false },
    { DType::Bits2x4, "bits2x4", 8, "", "", false },
    { DType::Bits4x2, "bits4x2", 8, "", "", false },
    { DType::Bits8, "bits8", 8, "", "", false },
    { DType::Bits16, "bits16", 16, "", "", false },
} };

constexpr bool tableInOrder()
{
    for (size_t i = 0; i < kTable.size(); ++i)
        if (static_cast<size_t>(kTable[i].type) != i)
            return false;
    return true;
}
static_assert(tableInOrder(), "kTable rows must follow the DType enum order");

const DTypeInfo& info(DType t)
{
    auto i = static_cast<size_t>(t);
    return kTable[i < kTable.size() ? i : 0];
}

// Names torch accepts as attributes of the torch module that alias a canonical dtype.
struct Alias {
    std::string_view name;
    DType type;
};
constexpr Alias kAliases[] = {
    { "float", DType::Float32 },
    { "double", DType::Float64 },
    { "half", DType::Float16 },
    { "long", DType::Int64 },
    { "int", DType::Int32 },
    { "short", DType::Int16 },
    { "cfloat", DType::Complex64 },
    { "cdouble", DType::Complex128 },
    { "chalf", DType::Complex32 },
};

} // namespace

std::string_view dtypeName(DType t) { return info(t).name; }

std::optional<DType> dtypeFromName(std::string_view torchName)
{
    for (const auto& row : kTable)
        if (row.type != DType::Unknown && row.name == torchName)
            return row.type;
    for (const auto& a : kAliases)
        if (a.name == torchName)
            return a.type;
    return std::nullopt;
}

unsigned dtypeBits(DType t) { return info(t).bits; }

unsigned dtypeItemSize(DType t)
{
    unsigned bits = info(t).bits;
    return bits % 8 == 0 ? bits / 8 : 0;
}

bool dtypeIsFloatingPoint(DType t) { return info(t).floating; }

bool dtypeIsQuantized(DType t)
{
    return t == DType::QInt8 || t == DType::QUInt8 || t == DType::QInt32 || t == DType::QUInt4x2
        || t == DType::QUInt2x4;
}

std::optional<DType> dtypeFromSafetensors(std::string_view name)
{
    for (const auto& row : kTable)
        if (!row.safetensors.empty() && row.safetensors == name)
            return row.type;
    return std::nullopt;
}

std::string_view dtypeSafetensorsName(DType t) { return info(t).safetensors; }

std::optional<DType> dtypeFromStorageClass(std::string_view className)
{
    for (const auto& row : kTable)
        if (!row.storageClass.empty() && row.storageClass == className)
            return row.type;
    return std::nullopt;
}

} // namespace sl
