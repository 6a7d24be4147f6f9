#pragma once
// A loaded source: one checkpoint (a file, an index with its shards, later a DCP directory or a live model
// dump) presented as the entries of one selected state dict, plus what the reader noticed on the way.

#include "entry.h"
#include "entry_list.h"
#include "source_format.h"

#include <memory>
#include <string>
#include <vector>

namespace sl {

enum class Severity : uint8_t { Info, Warning, Danger };
std::string_view severityName(Severity s);

struct Finding {
    Severity severity = Severity::Info;
    std::string message;
    std::string entry; // the entry it concerns, when there is one
};

// A place inside the file that holds a state dict (or something shaped like one). `path` is the dotted
// key path from the top object: "" for the top itself, "state_dict", "model", "optimizer.state".
struct ContainerInfo {
    enum class Role : uint8_t { Model, Optimizer, Ema, Other };
    std::string path;
    Role role = Role::Other;
    size_t tensorCount = 0; // tensors directly or in nested dicts under it
};
std::string_view containerRoleName(ContainerInfo::Role r);
// The model container with the most tensors; without one, the EMA copy, then other state, then optimizer
// state with the most tensors (ties: the first listed). -1 when none holds tensors; `reason` says which.
int pickLargestContainer(const std::vector<ContainerInfo>& containers, std::string* reason = nullptr);

// What torch.load(weights_only=True), torch's default since 2.6, would do with the source's pickles.
struct WeightsOnlyLoad {
    bool checked = false; // the format is read by torch.load (torch.save zip or legacy files, rank files)
    std::vector<std::string> imports; // import these first: they allow-list classes the pickles reference
    std::vector<std::string> refused; // globals nothing allow-lists: refused unless add_safe_globals names them
    std::vector<std::string> executes; // imports that run code (also filled for DCP, whose pickles torch.load
                                       // does not read, without `checked`)
    bool loads() const { return checked && imports.empty() && refused.empty(); }
    // The load-safety verdict: "weights-only" (torch's weights-only unpickler loads it, perhaps after the
    // imports listed), "imports" (torch.load(weights_only=False) would import and build classes outside
    // that allowlist) or "executes" (it would call something that runs code).
    std::string_view verdict() const
    {
        return !executes.empty() ? "executes" : !refused.empty() ? "imports" : "weights-only";
    }
};

class Source;

// What keeps a Source's data alive (mapped files, the parsed object tree) and what can be done with it
// again without reading the files a second time.
class SourceBacking {
public:
    virtual ~SourceBacking() = default;
    // Replaces s.container, s.entries and the entry-level findings with those of another container.
    // The default has only one container: it throws LoadError for anything but the current one.
    virtual void selectContainer(Source& s, const std::string& container) const;
};

class Source {
public:
    std::string path;
    SourceFormat format = SourceFormat::InMemory;
    std::string container; // path of the selected container ("" when tensors sit at the top)
    std::vector<std::string> files; // every file the entries' locations refer to
    EntryList entries; // built on first access where a reader handed over rows (entry_list.h)
    std::vector<Finding> findings;
    std::vector<ContainerInfo> containers; // every candidate, the selected one included
    std::vector<std::pair<std::string, std::string>> metadata; // safetensors __metadata__, zip records, ...
    WeightsOnlyLoad weightsOnly;
    // Some FP8 groups were formed as the entries were built (quant::Fp8PairGrouper): groupQuantizedEntries
    // confirms or splits them, then clears this.
    bool provisionalFp8Groups = false;

    std::shared_ptr<const SourceBacking> backing;

    // A copy of this source showing another container. Throws LoadError when there is no such container.
    Source withContainer(const std::string& container) const;

    void addFinding(Severity s, std::string message, std::string entry = {});
    size_t countFindings(Severity s) const;
    uint64_t totalParameters() const; // sum of numel over tensor and group entries
    static uint64_t parameterCount(const Entry& e) { return e.kind == EntryKind::Object ? 0 : e.numel(); } // its share
    uint64_t totalBytes() const;
};

} // namespace sl
