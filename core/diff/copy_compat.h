#pragma once
// Whether load_state_dict's `param.copy_(input_param)` raises for a checkpoint tensor and a model tensor of
// the same shape. Plain tensors cast; tensor subclasses dispatch copy_ to their own tables, which refuse most
// pairs. Checked by running the loads under torch 2.6 with torchao 0.9 (tests/fixtures/torch2/loads.truth.json):
//   - a torchao subclass (AffineQuantizedTensor, LinearActivationQuantizedTensor, NF4Tensor, ...) into a plain
//     parameter raises ("attempting to run unimplemented operator", or NF4's missing attributes);
//   - into an AffineQuantizedTensor or LinearActivationQuantizedTensor parameter anything raises: torchao 0.9
//     implements no copy_ for them, not even from their own class;
//   - into an NF4Tensor parameter a plain or NF4 tensor copies (NF4 quantizes on copy);
//   - a quantized torch.ao tensor (qint8, quint8, ...) into a float parameter raises ("Copying from
//     quantized Tensor to non-quantized Tensor is not allowed");
//   - a plain tensor into a DTensor parameter (a live FSDP2 model), and a DTensor into a plain one, raise
//     ("got mixed torch.Tensor and DTensor").
// Subclasses outside this list are not judged (the load is assumed to copy), and neither are the pieces of a
// per-rank set, which stand for the global tensor.

#include "model/entry.h"

#include <string>

namespace sl {

struct CopyVerdict {
    bool fails = false;
    bool quantized = false; // a quantized tensor is involved (else a distributed one)
    std::string why; // one line: what raises and what to do instead
};

CopyVerdict copyCompatibility(const Entry& checkpoint, const Entry& model);

} // namespace sl
