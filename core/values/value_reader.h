#pragma once
// The values of one entry as the model would see them, as float64 in logical (row-major) order, for the
// code that needs numbers rather than stored bytes (statistics of quantized groups, value comparison,
// thumbnails):
//   - plain tensors: their elements decoded from their dtype (element_decode.h); float4_e2m1fn_x2 gives two
//     values per element, the low nibble first, as torch packs it; complex dtypes give their real and
//     imaginary parts as two values (torch.view_as_real's order);
//   - quantized groups whose scheme is known: dequantized with the arithmetic of the library that wrote
//     them (float32 products, rounded to the logical dtype where the library returns it):
//       fp8.* / int8.*      weight * weight_scale_inv or weight_scale, per block, row, or tensor (DeepSeek-V3,
//                           compressed-tensors, vLLM)
//       torchao.Float8Tensor  qdata * scale expanded to its blocks
//       torchao.AffineQuantizedTensor (plain and float8 tensor impls; also the weight inside a
//                           LinearActivationQuantizedTensor)  torchao's dequantize_affine for its
//                           zero_point_domain (NONE, INT, FLOAT), each step in the tensor's dtype
//       torchao.NF4Tensor   nf4[nibble] * scaler per block, the scalers double-quantized (int8 /
//                           quantization_factor + scaler_mean), as get_original_weight() computes them
//       torchao.OptimState8bit/4bit/Fp8  qmap[code] (or the float8 code) * scale per block
//       bitsandbytes.nf4/fp4  quant_map[nibble] * absmax per block (double-quantized absmax first rebuilt
//                           from nested_quant_map, nested_absmax and nested_offset), high nibble first
//       bitsandbytes.int8   weight * SCB[row] / 127
//       gptq / awq          scale * (q - zero) per group; GPTQ zero points stored minus one (AutoGPTQ's v1
//                           format), AWQ nibbles in its interleaved order
//   - a group that wraps one plain tensor: that tensor (storedTensorOf below);
//   - sparse COO / CSR / CSC tensors: their dense values as to_dense() gives them.
// Reads take only the bytes a range needs (for packed GPTQ/AWQ, the box of words, zeros and scales under
// the range's output rows), so memory stays at a few buffers whatever the tensor's size; a sparse tensor's
// indices and values are read whole when its reader opens, capped at 2^22 stored values. Every part's
// shape and byte count is checked against the others when the reader opens, so a hostile file cannot make
// a read index past what it holds.

#include "model/source.h"
#include "values/tensor_bytes.h"

#include <cstdint>
#include <memory>
#include <string>

namespace sl::values {

// The tensor an entry's values are stored in, when that is one plain tensor: the entry itself, the one
// tensor a group without quantization wraps (torchao's flattened safetensors layout), or the
// original_weight of torchao's LinearActivationQuantizedTensor (which quantizes activations, not weights).
// Plain tensors take the byte-level paths (bit-pattern counting, hashes of stored bytes).
const Entry& storedTensorOf(const Entry& entry);

class ValueReader {
public:
    virtual ~ValueReader() = default;

    // nullptr with `why` when the entry has no values this reader can give (not a tensor, complex, a
    // quantization scheme it does not know, a part missing); throws LoadError when bytes that should be
    // there cannot be reached.
    static std::unique_ptr<const ValueReader> open(
        const Source& source, const Entry& entry, FileCache& files, std::string& why);
    // Whether open() takes this entry (rather than the plain-tensor paths that work on stored bytes).
    static bool needsReader(const Entry& entry);

    uint64_t numel() const { return m_numel; } // values, in logical order
    // "" for plain tensors, else how the values were made ("dequantized: ...").
    const std::string& note() const { return m_note; }
    // Values [first, first + count) into `out`. Safe to call from several threads at once.
    virtual void read(uint64_t first, uint64_t count, double* out) const = 0;

protected:
    uint64_t m_numel = 0;
    std::string m_note;
};

} // namespace sl::values
