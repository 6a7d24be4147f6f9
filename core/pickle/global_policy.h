#pragma once
// What a GLOBAL would do under torch.load: nothing harmful (torch's own rebuild functions, storages,
// dtypes: what its weights-only unpickler allows), import an arbitrary module (unknown), or hand the
// unpickler a callable that runs code (dangerous). StateLens never imports either; this only labels them.

#include <string>
#include <string_view>
#include <vector>

namespace sl::pickle {

enum class GlobalRisk { Safe, Unknown, Dangerous };

struct GlobalVerdict {
    GlobalRisk risk = GlobalRisk::Unknown;
    std::string reason; // for Dangerous: what it would do
};

// `module` and `name` as written in the pickle after Python 2 name mapping.
GlobalVerdict classifyGlobal(std::string_view module, std::string_view name);

// The import that makes torch.load(weights_only=True) accept a global it refuses by default: torch and
// torchao allow-list their classes with torch.serialization.add_safe_globals when their modules are
// imported (torch 2.6's torch.distributed.tensor; torchao 0.9's torchao, torchao.float8 and
// torchao.prototype.low_bit_optim, read from their sources and checked by running the loads). Empty when
// no import does.
std::string_view allowlistingImport(std::string_view module, std::string_view name);

// Whether having imported `imported` (module names, as `import X` would) allow-lists every global that
// needs `needed`; importing torchao also imports torch.distributed.tensor.
bool importsCover(const std::vector<std::string>& needed, const std::vector<std::string>& imported);

// Python 2 module and name mapping (pickle's _compat_pickle) plus torch.load's own renames.
std::pair<std::string_view, std::string_view> mapLegacyName(std::string_view module, std::string_view name);

} // namespace sl::pickle
