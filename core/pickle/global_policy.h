#pragma once
// What a GLOBAL would do under torch.load: nothing harmful (torch's own rebuild functions, storages,
// dtypes: what its weights-only unpickler allows), import an arbitrary module (unknown), or hand the
// unpickler a callable that runs code (dangerous). StateLens never imports either; this only labels them.

#include <string>
#include <string_view>

namespace sl::pickle {

enum class GlobalRisk { Safe, Unknown, Dangerous };

struct GlobalVerdict {
    GlobalRisk risk = GlobalRisk::Unknown;
    std::string reason; // for Dangerous: what it would do
};

// `module` and `name` as written in the pickle after Python 2 name mapping.
GlobalVerdict classifyGlobal(std::string_view module, std::string_view name);

// Python 2 module and name mapping (pickle's _compat_pickle) plus torch.load's own renames.
std::pair<std::string_view, std::string_view> mapLegacyName(std::string_view module, std::string_view name);

} // namespace sl::pickle
