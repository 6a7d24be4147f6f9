#pragma once
// torch.ao eager quantized tensors (qint8, quint8, qint32 with per-tensor or per-channel affine parameters)
// as floats, the way ATen's dequantize() computes them. Used by the statistics and by `convert --dtype`.

#include "model/source.h"
#include "values/tensor_bytes.h"

#include <cstdint>
#include <string>
#include <vector>

namespace sl::values {

// torch.ao affine quantization, applied the way ATen's dequantize does: float(q - zero_point) * float(scale).
struct TorchAoDequant {
    bool active = false;
    bool perChannel = false;
    float scale = 1;
    int64_t zeroPoint = 0;
    std::vector<float> scales; // per channel
    std::vector<int64_t> zeroPoints;
    uint64_t inner = 1; // elements per step along the axis (product of the dimensions after it)
    uint64_t channels = 1;
    void apply(uint64_t first, double* v, size_t n) const
    {
        if (!perChannel) {
            for (size_t k = 0; k < n; ++k)
                v[k] = static_cast<double>(static_cast<float>(static_cast<int64_t>(v[k]) - zeroPoint) * scale);
            return;
        }
        for (size_t k = 0; k < n; ++k) {
            const size_t c = static_cast<size_t>(((first + k) / inner) % channels);
            v[k] = static_cast<double>(static_cast<float>(static_cast<int64_t>(v[k]) - zeroPoints[c]) * scales[c]);
        }
    }
};

// The dequantization of a torch.ao quantized entry (`active`), or in `note` why its integers stay as they are.
TorchAoDequant torchAoDequant(const Source& s, const Entry& e, FileCache& files, std::string& note);

} // namespace sl::values
