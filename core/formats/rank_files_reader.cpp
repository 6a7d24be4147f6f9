#include "rank_files_reader.h"

#include "util/error.h"

namespace sl {

Source openRankFiles(const std::vector<std::string>& paths, const OpenOptions&)
{
    throw LoadError(paths.empty() ? std::string("(no files)") : paths.front(),
        "opening several per-rank files as one source is not supported yet");
}

} // namespace sl
