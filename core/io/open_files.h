#pragma once
// Input files opened once by path and shared by whoever reads from them: the value readers (hundreds of
// shards and rank files) and the quantized grouping's few metadata reads. A bounded number stay open, so
// a 256-rank save stays under the descriptor limit (often 1024, 64 in tests). Thread-safe.

#include "io/input_file.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace sl {

class OpenFiles {
public:
    // Throws LoadError naming the path when it cannot be opened (io/file_trust.h: regular files only).
    std::shared_ptr<const InputFile> get(const std::string& path);

private:
    std::mutex m_mutex;
    std::map<std::string, std::shared_ptr<const InputFile>> m_files;
};

} // namespace sl
