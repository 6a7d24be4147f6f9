#pragma once
// TorchScript archives (torch.jit.save): format id "torchscript", read through LibTorch's torch::jit::load
// in a plugin loaded on demand (see the implementation file).

#include "formats/open_options.h"
#include "io/mapped_file.h"
#include "model/source.h"

#include <memory>

namespace sl {

Source readTorchScript(const std::shared_ptr<const MappedFile>& file, const OpenOptions& options);

} // namespace sl
