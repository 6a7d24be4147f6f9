#include "torchscript_reader.h"

#include "util/error.h"

namespace sl {

Source readTorchScript(const std::shared_ptr<const MappedFile>& file, const OpenOptions&)
{
    throw LoadError(file->path(),
        "is a TorchScript archive (torch.jit.save), not a torch.save checkpoint; TorchScript is not supported yet");
}

} // namespace sl
