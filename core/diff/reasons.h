#pragma once
// Why a diff row is not a plain match: the known causes of load_state_dict failures, each recognised from
// names and shapes on both sides (see Reason in diff.h). A row gets at most one reason, the most specific;
// the explanation is one line naming the counterpart on the other side, so a user can act on it.

#include "diff/diff.h"

namespace sl {

void explainRows(DiffResult& diff, const Source& a, const Source& b);

// The name with wrapper segments taken out (torch.compile's _orig_mod, DDP/DataParallel's leading module,
// FSDP and activation-checkpoint wrappers, PEFT's base_model.model), and which ones were there.
struct UnwrappedName {
    std::string name;
    std::vector<std::string> removed; // "_orig_mod.", "module.", ...
};
UnwrappedName unwrapName(std::string_view name);

// Names model code registers as non-persistent buffers (rotary inv_freq, position_ids, GPT-2's attn.bias).
bool looksLikeNonPersistentBufferName(std::string_view name, const Entry* entry);

} // namespace sl
