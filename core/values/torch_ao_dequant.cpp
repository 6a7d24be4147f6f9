// torch.ao affine dequantization (torch_ao_dequant.h).

#include "values/torch_ao_dequant.h"

#include <stdexcept>

namespace sl::values {

// The dequantization of a torch.ao quantized entry, or why its integers are shown as they are.
TorchAoDequant torchAoDequant(const Source& s, const Entry& e, FileCache& files, std::string& note)
{
    TorchAoDequant d;
    if (!e.quantization || e.quantization->scheme.rfind("torch.ao.", 0) != 0) {
        if (dtypeIsQuantized(e.dtype))
            note = "stored integers: the quantization scheme is not known";
        return d;
    }
    const std::string& scheme = e.quantization->scheme;
    try {
        if (scheme == "torch.ao.per_tensor_affine") {
            const std::string* scale = e.quantization->param("scale");
            const std::string* zp = e.quantization->param("zero_point");
            if (!scale || !zp)
                throw std::runtime_error("no scale or zero point");
            d.scale = static_cast<float>(std::stod(*scale));
            d.zeroPoint = std::stoll(*zp);
            d.active = true;
            note = "dequantized (torch.ao per-tensor affine)";
            return d;
        }
        if (scheme == "torch.ao.per_channel_affine") {
            const std::string* axis = e.quantization->param("axis");
            const Entry* scales = e.part("scales");
            const Entry* zps = e.part("zero_points");
            if (!axis || !scales || !zps)
                throw std::runtime_error("no axis, scales or zero points");
            const size_t ax = static_cast<size_t>(std::stoul(*axis));
            if (ax >= e.shape.size())
                throw std::runtime_error("axis out of range");
            d.channels = static_cast<uint64_t>(e.shape[ax]);
            for (size_t k = ax + 1; k < e.shape.size(); ++k)
                d.inner *= static_cast<uint64_t>(e.shape[k]);
            auto readAll = [&](const Entry& part, std::vector<double>& out) {
                const TensorBytes tb = TensorBytes::open(s, part, files);
                tb.decodeTo(0, tb.numel(), out);
            };
            std::vector<double> sc, zp;
            readAll(*scales, sc);
            readAll(*zps, zp);
            if (sc.size() != d.channels || zp.size() != d.channels)
                throw std::runtime_error("scales or zero points do not match the axis");
            for (size_t c = 0; c < d.channels; ++c) {
                d.scales.push_back(static_cast<float>(sc[c]));
                d.zeroPoints.push_back(static_cast<int64_t>(zp[c]));
            }
            d.active = d.perChannel = true;
            note = "dequantized (torch.ao per-channel affine, axis " + *axis + ")";
            return d;
        }
        note = "stored integers: " + scheme + " is not dequantized yet";
    } catch (const std::exception& err) {
        note = std::string("stored integers: cannot dequantize (") + err.what() + ")";
        d = {};
    }
    return d;
}

} // namespace sl::values
