#pragma once
// A folder of per-rank torch.save files (model_rank0.pt, model_rank1.pt, optim_rank0.pt, ...) opened as one
// source, format id "per-rank". The loader comes here for a folder without a DCP .metadata, a Hugging Face
// index, model.safetensors or pytorch_model.bin.
//
// Sets: the folder's torch.save files grouped by name with the rank number taken out (formats/rank_sets.h):
// model_rank{0,1}.pt are set "model", optim_rank{0,1}.pt set "optim". A set of names whose only number is
// the last one in the name (shard_0.pt, shard_1.pt) counts only when its numbers are 0 to n-1 (a whole
// save); otherwise they are more likely steps or epochs. Files with no number, files of other formats
// (safetensors, live dumps, TorchScript) and sub-folders belong to no set: one info finding names the
// checkpoints left out, and a warning the files named as a rank's that no reader recognises.
//
// Containers: each set is one, named by the set. When the rank files hold several state dicts themselves
// ({"model": sd, "optimizer": osd} per rank), the set gives one container per inner one, named
// "SET/INNER" ("ckpt/model", "ckpt/optimizer"; the top level is plain "SET"). A requested container may
// also be a set's name alone (that set with its files' own pick) or an inner name that only one set has
// ("optimizer"). The role is the inner container's, or the one the set's name says (optim*, ema, ...).
// The pick without --container: a model set whose name is a well-known state-dict name ("model",
// "state_dict", ...; torch/state_dict_tree.h rule 2), else the model container with the most tensors, then
// EMA, other, optimizer state (ties: the first by name). An info finding says which and why.
//
// Only the first file of each set is read to list the containers; a set's files are all read when it is
// selected (formats/rank_files_reader.h merges them), once, and kept for the next selection.

#include "formats/open_options.h"
#include "model/source.h"

#include <string>
#include <vector>

namespace sl {

struct RankFolderSet {
    std::string name;
    std::vector<std::string> paths;
};

struct RankFolderPlan {
    std::vector<RankFolderSet> sets; // by name
    std::vector<std::string> leftOut; // checkpoint files in no set: "name (why)"
    std::vector<std::string> unreadable; // files named as a rank's that no reader recognises: "name (why)"
    std::vector<std::string> outside; // symlinks that point outside the folder, never opened: "name (to target)"
};

// Reads the folder's listing and each file's first bytes (to tell torch.save files from others); files that
// resolve outside the folder are not opened.
RankFolderPlan planRankFolder(const std::string& dir);

// Opens `plan` (non-empty sets) as the folder's source.
Source readRankFolder(const std::string& dir, RankFolderPlan plan, const OpenOptions& options);

} // namespace sl
