#pragma once
// How the files of one per-rank save are told from their names, and how paths given together are split
// into sources. Shared by the folder reader, the command line (diff, suggest, ls) and the window.
//
// A file's rank number is the number after the last "rank" in its name (model_rank3.pt, rank-3.pt,
// mp_rank_03_model_states.pt), else the last number in its name (shard_3.pt). Its set is its name with
// that number (and the "rank" before it) taken out: model_rank0.pt and model_rank1.pt are set "model",
// optim_fqn_rank1.pt is "optim_fqn", mp_rank_00_model_states.pt is "mp_model_states"; a name that is only
// a rank ("rank0.pt") is set "rank". Files of one set share their folder and extension.

#include "formats/open_options.h"
#include "model/source.h"

#include <cstdint>
#include <string>
#include <vector>

namespace sl {

// The number after the last "rank" in a file name, or -1.
int64_t rankInName(const std::string& filename);
// The last run of digits in a file name's stem ("shard_3.pt" -> 3), or -1.
int64_t lastNumberInName(const std::string& filename);

struct RankSetName {
    std::string set; // the name with the rank number taken out; empty when the name has no number
    bool fromRankWord = false; // the number follows "rank" (else it is only the last number in the name)
    int64_t rank = -1;
};
RankSetName rankSetName(const std::string& filename);

// Paths grouped into sets (same folder, set name and extension), in order of first appearance. A folder,
// or a file whose name carries no number, is a group of its own.
std::vector<std::vector<std::string>> groupBySet(const std::vector<std::string>& paths);

// A command-line path: itself when it exists or has no wildcard, else what glob(3) finds for it (sorted;
// a quoted 'ckpt/model_rank*.pt'). A pattern that matches nothing is a LoadError naming it.
bool isPattern(const std::string& argument);
std::vector<std::string> expandPattern(const std::string& argument);

// Command-line arguments split into sources ("sides"), each one path (a file, a folder, a pattern) or the
// rank files of one set. As many arguments as `maxSides` are one side each; more are grouped by set (a
// pattern stays one side). Fewer than `minSides` or more than `maxSides` groups is a LoadError whose
// message says how to write each side; `command` names the command in it.
std::vector<std::vector<std::string>> splitIntoSides(
    const std::vector<std::string>& arguments, size_t minSides, size_t maxSides, const std::string& command);

// One side as a source: a single path through openSource, several files through openRankFiles.
Source openPaths(const std::vector<std::string>& paths, const OpenOptions& options = {});
// How a side is named in headers and messages: the path, or "model_rank{0..3}.pt (4 files)" style.
std::string describePaths(const std::vector<std::string>& paths);

} // namespace sl
