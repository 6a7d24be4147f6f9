#pragma once
// The load-safety verdict of a source, from every pickle that torch.load (or DCP's loader) would run:
// each is scanned at the opcode level (pickle/opcode_scan.h) and each import judged by pickle/global_policy.h.
// One home for the wording of the findings, so torch.save files, legacy files, DCP .metadata and DCP bytes
// items say the same thing, and so an error that stops a read can still name what it saw.

#include "model/source.h"
#include "pickle/opcode_scan.h"

#include <string>
#include <vector>

namespace sl::torch {

class LoadSafety {
public:
    // `where` names the pickle for the findings ("data.pkl", "the magic-number pickle", ".metadata").
    void add(std::string where, const pickle::PickleScan& scan);
    bool empty() const { return m_imports.empty(); }

    // Danger findings, one per import that executes; a warning listing the classes outside torch's
    // weights-only allowlist; an info line for the imports that allow-list the rest. `loader` is what would
    // run the pickles ("torch.load", "DCP's pickle.load of .metadata").
    void report(std::vector<Finding>& findings, WeightsOnlyLoad& verdict, std::string_view loader = "torch.load") const;
    void report(Source& out, std::string_view loader = "torch.load") const { report(out.findings, out.weightsOnly, loader); }

    // The imports that execute, for an error message that stops the read: "os.system (runs shell commands)".
    std::vector<std::string> dangerSummaries() const;
    // `message` with those appended: a read that stops still names the danger it saw.
    std::string withDangers(std::string message, std::string_view loader = "torch.load") const;

private:
    struct Import {
        std::string where;
        pickle::ScannedGlobal global;
    };
    std::vector<Import> m_imports;
};

} // namespace sl::torch
