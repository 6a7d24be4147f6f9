#pragma once
// The text of a failed strict load_state_dict, pasted or saved from a log: format id "load-error-text".
//
// torch/nn/modules/module.py (identical in 1.13 and 2.x) raises
//   Error(s) in loading state_dict for {Model}:
//   \tMissing key(s) in state_dict: "a", "b". \n\tUnexpected key(s) in state_dict: "c". \n
//   \tsize mismatch for {key}: copying a param with shape torch.Size([..]) from checkpoint, the shape in
//   current model is torch.Size([..]).
//   \tWhile copying the parameter named "{key}", whose dimensions in the model are torch.Size([..]) and
//   whose dimensions in the checkpoint are torch.Size([..]), an exception occurred : (...).
// Logs add "RuntimeError: ", turn tabs into spaces and wrap lines; Lightning and other copies use single
// quotes or lower-case heads. The text is searched for those heads rather than parsed line by line.
//
// It tells what each side must have held, so it is one source with two containers:
//   "model"       the model's keys the error names: missing ones, and mismatched ones with the model's shape
//   "checkpoint"  the checkpoint's keys it names: unexpected ones, and mismatched ones with the checkpoint's
// Keys that loaded fine are not in the text; entries say which clause named them (attribute "from").

#include "formats/open_options.h"
#include "io/input_file.h"
#include "model/source.h"

#include <memory>
#include <string_view>

namespace sl {

Source readLoadErrorText(const std::shared_ptr<const InputFile>& file, const OpenOptions& options);
Source parseLoadErrorText(std::string name, std::string_view text, const OpenOptions& options = {});

// True when a text holds a load_state_dict error (one of its clause heads) in its `first` bytes or, for a long
// log, its `last` ones.
bool looksLikeLoadErrorText(Bytes first, Bytes last = {});

// Telling a text apart looks at most at 16 MiB of it (a long log's first and last 8 MiB); a text over
// 256 MiB is refused rather than copied.
constexpr size_t kSniffedBytes = size_t(16) << 20;
constexpr size_t kMaxLoadErrorText = size_t(256) << 20;

} // namespace sl
