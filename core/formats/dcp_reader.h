#pragma once
// torch.distributed.checkpoint (DCP) directories: format id "dcp". See the implementation file for the
// on-disk layout (docs/on-disk-formats.md, "DCP folders").

#include "formats/open_options.h"
#include "model/source.h"

#include <string>

namespace sl {

// True for a folder holding a DCP `.metadata` file.
bool isDcpDirectory(const std::string& path);
// Reads a DCP folder (`dir` is the folder, not the .metadata file). Throws LoadError.
Source readDcp(const std::string& dir, const OpenOptions& options);

} // namespace sl
