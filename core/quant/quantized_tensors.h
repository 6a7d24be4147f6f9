#pragma once
// Quantized state dicts: one logical parameter shown as one entry with its parts.
// - describeQuantizedSubclass: torchao tensor subclasses met while a torch.save tensor becomes an entry.
// - groupQuantizedEntries: key-pattern grouping after any reader (bitsandbytes, GPTQ/AWQ, FP8 scales,
//   torchao's flattened safetensors layout, torch.ao eager modules), with the missing-scale checks.

#include "model/source.h"
#include "pickle/value.h"

namespace sl::quant {

bool describeQuantizedSubclass(const pickle::TensorValue& t, Entry& e);
void groupQuantizedEntries(Source& s);

} // namespace sl::quant
