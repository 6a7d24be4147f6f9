#include "rank_folder_reader.h"

#include "formats/loader.h"
#include "formats/rank_files_reader.h"
#include "formats/rank_sets.h"
#include "io/file_trust.h"
#include "torch/state_dict_tree.h"
#include "util/error.h"
#include "util/load_control.h"
#include "util/name_list.h"
#include "util/parallel.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>

namespace sl {

namespace {

namespace fs = std::filesystem;

// A folder listing longer than this is refused rather than sniffed file by file.
constexpr size_t kMaxFolderEntries = 100000;

std::string quote(const std::string& s)
{
    return "'" + oneLineMessage(s, 200) + "'";
}

struct Candidate {
    std::string path;
    RankSetName name;
};

// A set of bare numbers is a save only when they are 0..n-1; names with "rank" in them say so themselves.
bool looksLikeRanks(const std::vector<Candidate>& files)
{
    if (std::any_of(files.begin(), files.end(), [](const Candidate& c) { return c.name.fromRankWord; }))
        return true;
    std::set<int64_t> ranks;
    for (const Candidate& c : files)
        ranks.insert(c.name.rank);
    return ranks.size() == files.size() && *ranks.begin() == 0
        && *ranks.rbegin() == static_cast<int64_t>(files.size()) - 1;
}

// What the folder's sets are listed as: one container per set, or one per inner container of its files.
struct SetInfo {
    RankFolderSet set;
    std::vector<ContainerInfo> inner; // the first file's containers
    std::string innerPick; // the first file's own pick
};

struct Listed {
    size_t set = 0;
    std::optional<std::string> inner; // nullopt: the set with its files' own pick
};

ContainerInfo::Role roleOf(const std::string& setName, ContainerInfo::Role inner)
{
    return inner != ContainerInfo::Role::Model ? inner : torch::roleForKey(setName);
}

class RankFolderBacking : public SourceBacking {
public:
    std::string dir;
    std::vector<SetInfo> sets;
    std::vector<ContainerInfo> containers;
    std::vector<Listed> listed; // parallel to containers
    std::vector<Finding> folderFindings;

    void list()
    {
        for (size_t i = 0; i < sets.size(); ++i) {
            const SetInfo& s = sets[i];
            if (s.inner.size() <= 1) {
                ContainerInfo c;
                c.path = s.set.name;
                c.role = roleOf(s.set.name, s.inner.empty() ? ContainerInfo::Role::Model : s.inner.front().role);
                c.tensorCount = s.inner.empty() ? 0 : s.inner.front().tensorCount;
                containers.push_back(std::move(c));
                listed.push_back({ i, std::nullopt });
                continue;
            }
            for (const ContainerInfo& in : s.inner) {
                ContainerInfo c = in;
                c.path = in.path.empty() ? s.set.name : s.set.name + "/" + in.path;
                c.role = roleOf(s.set.name, in.role);
                containers.push_back(std::move(c));
                listed.push_back({ i, in.path });
            }
        }
    }

    // The set (and inner container) a requested container names; see rank_folder_reader.h.
    Listed resolve(const std::string& container) const
    {
        for (size_t i = 0; i < containers.size(); ++i)
            if (containers[i].path == container)
                return listed[i];
        for (size_t i = 0; i < sets.size(); ++i)
            if (sets[i].set.name == container)
                return { i, std::nullopt };
        std::optional<Listed> byInner;
        for (const Listed& l : listed)
            if (l.inner && *l.inner == container) {
                if (byInner)
                    throw LoadError(dir,
                        "container " + quote(container) + " is in several per-rank sets; name one as SET/" + container
                            + " (see ls --containers)");
                byInner = l;
            }
        if (byInner)
            return *byInner;
        std::string names;
        for (const ContainerInfo& c : containers)
            names += (names.empty() ? "" : ", ") + c.path;
        throw LoadError(dir, "no container " + quote(container) + " in the folder's per-rank sets (" + names + ")");
    }

    // Replaces what `s` shows with `container`'s entries; `options` carry the progress of a first open.
    void fill(Source& s, const std::string& container, const OpenOptions& options) const
    {
        const Listed want = resolve(container);
        Source shown = opened(want.set, options);
        if (want.inner && *want.inner != shown.container)
            shown = shown.withContainer(*want.inner);
        s.path = dir;
        s.format = SourceFormat::PerRank;
        s.containers = containers;
        s.container = sets[want.set].set.name;
        for (size_t i = 0; i < listed.size(); ++i)
            if (listed[i].set == want.set && listed[i].inner && *listed[i].inner == shown.container)
                s.container = containers[i].path;
        s.entries = std::move(shown.entries);
        s.files = std::move(shown.files);
        s.metadata = std::move(shown.metadata);
        s.weightsOnly = std::move(shown.weightsOnly);
        s.metadata.emplace_back("rank_set", sets[want.set].set.name);
        s.findings = folderFindings;
        s.findings.insert(s.findings.end(), shown.findings.begin(), shown.findings.end());
    }

    void selectContainer(Source& s, const std::string& container) const override { fill(s, container, {}); }

private:
    // A set's files merged, read once. A selection made later (no options) reads without progress.
    Source opened(size_t set, const OpenOptions& options) const
    {
        std::lock_guard lock(m_lock);
        auto& slot = m_opened[set];
        if (!slot) {
            OpenOptions o;
            o.threads = options.threads;
            o.control = options.control;
            o.timings = options.timings;
            slot = std::make_shared<const Source>(openRankFiles(sets[set].set.paths, o));
        }
        return *slot;
    }

    mutable std::mutex m_lock;
    mutable std::map<size_t, std::shared_ptr<const Source>> m_opened;
};

} // namespace

RankFolderPlan planRankFolder(const std::string& dir)
{
    std::vector<std::string> files;
    for (const fs::directory_entry& d : fs::directory_iterator(dir)) {
        if (files.size() >= kMaxFolderEntries)
            throw LoadError(dir, "the folder holds more than " + std::to_string(kMaxFolderEntries) + " files");
        const std::string name = d.path().filename().string();
        std::error_code ec;
        if (!name.starts_with(".") && d.is_regular_file(ec))
            files.push_back(d.path().string());
    }
    std::sort(files.begin(), files.end());

    RankFolderPlan plan;
    std::map<std::pair<std::string, std::string>, std::vector<Candidate>> groups; // (set, extension)
    const CheckpointFolder folder(dir);
    for (const std::string& path : files) {
        const std::string filename = fs::path(path).filename().string();
        if (const std::string to = folder.leadsOutside(path); !to.empty()) {
            plan.outside.push_back(filename + " (to " + to + ")");
            continue;
        }
        SourceFormat format;
        try {
            format = detectFormat(path);
        } catch (const LoadError& e) {
            // Not a checkpoint (notes, configs); one named as a rank's file may be a rank's file damaged.
            if (rankSetName(filename).fromRankWord)
                plan.unreadable.push_back(filename + " (" + e.problem() + ")");
            continue;
        }
        if (!isTorchSave(format)) {
            plan.leftOut.push_back(filename + " (" + std::string(formatId(format)) + ", not a torch.save file)");
            continue;
        }
        RankSetName name = rankSetName(filename);
        if (name.set.empty()) {
            plan.leftOut.push_back(filename + " (no rank number in its name)");
            continue;
        }
        groups[{ name.set, fs::path(path).extension().string() }].push_back({ path, std::move(name) });
    }
    std::map<std::string, size_t> named; // set names taken, to tell model_rank0.pt from model_rank0.bin
    for (const auto& [key, members] : groups)
        ++named[key.first];
    for (auto& [key, members] : groups) {
        if (!looksLikeRanks(members)) {
            for (const Candidate& c : members)
                plan.leftOut.push_back(fs::path(c.path).filename().string()
                    + " (its number is not a rank: the set's numbers are not 0 to " + std::to_string(members.size() - 1)
                    + ")");
            continue;
        }
        RankFolderSet set;
        set.name = named[key.first] > 1 ? key.first + key.second : key.first;
        for (Candidate& c : members)
            set.paths.push_back(std::move(c.path));
        plan.sets.push_back(std::move(set));
    }
    std::sort(plan.sets.begin(), plan.sets.end(),
        [](const RankFolderSet& a, const RankFolderSet& b) { return a.name < b.name; });
    return plan;
}

Source readRankFolder(const std::string& dir, RankFolderPlan plan, const OpenOptions& options)
{
    auto backing = std::make_shared<RankFolderBacking>();
    backing->dir = dir;

    // The first file of each set says what its files hold.
    std::vector<SetInfo> infos(plan.sets.size());
    std::vector<std::string> errors(plan.sets.size());
    LoadControl* control = options.control;
    if (control)
        control->addTotal(infos.size());
    parallelFor(infos.size(), threadsFor(options.threads), [&](size_t i) {
        infos[i].set = std::move(plan.sets[i]);
        if (control)
            control->checkpoint(dir);
        try {
            OpenOptions one;
            one.threads = 1;
            one.control = control;
            const Source first = openSource(infos[i].set.paths.front(), one);
            infos[i].inner = first.containers;
            infos[i].innerPick = first.container;
        } catch (const LoadCancelled&) {
            throw;
        } catch (const std::exception& e) {
            errors[i] = oneLineMessage(e.what());
        }
        if (control)
            control->advance();
    });
    for (size_t i = 0; i < infos.size(); ++i) {
        if (errors[i].empty())
            backing->sets.push_back(std::move(infos[i]));
        else
            backing->folderFindings.push_back(
                { Severity::Warning, "per-rank set " + quote(infos[i].set.name) + " left out: " + errors[i], {} });
    }
    if (backing->sets.empty()) {
        const std::string& first = errors.front();
        const std::string prefix = infos.front().set.paths.front() + ": ";
        throw LoadError(
            infos.front().set.paths.front(), first.starts_with(prefix) ? first.substr(prefix.size()) : first);
    }
    if (!plan.unreadable.empty())
        backing->folderFindings.push_back({ Severity::Warning,
            std::to_string(plan.unreadable.size())
                + " file(s) in the folder named as a rank's file are no checkpoint StateLens reads, so no set holds "
                  "them: "
                + listNames(plan.unreadable),
            {} });
    // A danger, as a shard or DCP file that leaves its folder is: the rank's pieces are missing from its set,
    // and the file it points to is never read.
    if (!plan.outside.empty())
        backing->folderFindings.push_back({ Severity::Danger,
            std::to_string(plan.outside.size())
                + " file(s) in the folder are symlinks that point outside it; not opened, so no set holds them: "
                + listNames(plan.outside),
            {} });
    if (!plan.leftOut.empty())
        backing->folderFindings.push_back({ Severity::Info,
            std::to_string(plan.leftOut.size())
                + " checkpoint file(s) in the folder belong to no per-rank set (open them on their own): "
                + listNames(plan.leftOut),
            {} });
    backing->list();

    std::string pick;
    std::string reason;
    if (options.container) {
        pick = *options.container;
    } else {
        // A model set under a well-known state-dict name first (as rule 2 does inside a file), then by size.
        int best = -1;
        int bestRank = -1;
        for (size_t i = 0; i < backing->containers.size(); ++i) {
            const ContainerInfo& c = backing->containers[i];
            const SetInfo& s = backing->sets[backing->listed[i].set];
            const int rank = torch::preferredKeyRank(s.set.name);
            const bool setsPick = !backing->listed[i].inner || *backing->listed[i].inner == s.innerPick;
            if (rank >= 0 && setsPick && c.role == ContainerInfo::Role::Model && c.tensorCount > 0
                && (best < 0 || rank < bestRank)) {
                best = static_cast<int>(i);
                bestRank = rank;
            }
        }
        if (best >= 0)
            reason = "the per-rank set named like a model state dict";
        else
            best = pickLargestContainer(backing->containers, &reason);
        if (best < 0) {
            best = 0;
            reason = "no container holds tensors";
        }
        pick = backing->containers[static_cast<size_t>(best)].path;
    }
    Source out;
    backing->fill(out, pick, options);
    if (!options.container && backing->containers.size() > 1)
        out.findings.insert(out.findings.begin(),
            { Severity::Info,
                "picked container " + quote(pick) + " (" + reason + "); "
                    + std::to_string(backing->containers.size() - 1) + " other container(s) can be selected",
                {} });
    out.backing = std::move(backing);
    return out;
}

} // namespace sl
