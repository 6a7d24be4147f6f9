#pragma once
// Pickled values as text, in one place. Two styles, for two readers:
//   shortRepr   Python's repr, bounded: what a non-tensor entry holds, and the values findings quote
//               ('text' quoted, floats to 17 digits, objects as Class(...)).
//   paramText   a quantization parameter as a user reads it in Quantization::params: dtypes by name
//               (torch.float8_e4m3fn), enum members as Class.NAME, small objects with their fields
//               (Float8MMConfig(use_fast_accum=True)), strings unquoted, floats to 9 digits.
// Both are bounded in length and depth, so a hostile pickle's million-item list prints as a few words.

#include "pickle/value.h"

#include <string>

namespace sl::pickle {

std::string shortRepr(const Value* v, size_t maxLength = 80);
std::string paramText(const Value* v);

} // namespace sl::pickle
