#include "dcp_reader.h"

#include "util/error.h"

#include <filesystem>

namespace sl {

bool isDcpDirectory(const std::string& path)
{
    std::error_code ec;
    return std::filesystem::is_regular_file(std::filesystem::path(path) / ".metadata", ec);
}

Source readDcp(const std::string& dir, const OpenOptions&)
{
    throw LoadError(dir, "is a torch.distributed.checkpoint (DCP) folder; StateLens does not read DCP yet");
}

} // namespace sl
