#pragma once
// Several torch.save files of one sharded save (model_rank0.pt, model_rank1.pt, ... as FSDP/DTensor
// per-rank saves write them) opened together as one source: format id "per-rank".

#include "formats/open_options.h"
#include "model/source.h"

#include <string>
#include <vector>

namespace sl {

Source openRankFiles(const std::vector<std::string>& paths, const OpenOptions& options);

} // namespace sl
