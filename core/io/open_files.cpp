#include "io/open_files.h"

#include <algorithm>

namespace sl {

std::shared_ptr<const InputFile> OpenFiles::get(const std::string& path)
{
    std::lock_guard lock(m_mutex);
    // Hundreds of ranks' files would run into the descriptor limit (often 1024): past a bound, files no
    // open reader holds are closed; they are opened again if asked for.
    constexpr size_t kKeptOpen = 256;
    if (m_files.size() >= kKeptOpen && !m_files.count(path))
        std::erase_if(m_files, [](const auto& kv) { return kv.second.use_count() == 1; });
    auto& f = m_files[path];
    if (!f)
        f = InputFile::open(path);
    return f;
}

} // namespace sl
