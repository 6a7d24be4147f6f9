#pragma once
// The prefixes that module wrappers put into parameter names, in one table: what each comes from and where
// in a name it may appear. The diff's reasons, the suggestions, the window's folding and its legend read it.

#include <string_view>

namespace sl {

struct WrapperPrefix {
    enum class Place : unsigned char {
        Start, // only where the name starts: deeper down `module.` or `base_model.` is an ordinary module name
        Once, // once, at the start or inside an outer wrapper (DDP around torch.compile: module._orig_mod.)
        EveryLevel, // around each wrapped submodule, so it can recur at every depth (FSDP, checkpointing)
    };
    std::string_view prefix; // with its trailing dot
    std::string_view origin; // what puts it there, as messages name it
    Place place;
};

inline constexpr WrapperPrefix kWrapperPrefixes[] = {
    { "_orig_mod.", "torch.compile", WrapperPrefix::Place::Once },
    { "module.", "DistributedDataParallel/DataParallel", WrapperPrefix::Place::Start },
    { "_fsdp_wrapped_module.", "FSDP", WrapperPrefix::Place::EveryLevel },
    { "_fpw_module.", "FSDP", WrapperPrefix::Place::EveryLevel }, // FSDP1's FlattenParamsWrapper
    { "_checkpoint_wrapped_module.", "activation checkpointing", WrapperPrefix::Place::EveryLevel },
    { "base_model.model.", "PEFT", WrapperPrefix::Place::Start },
};

// The table's row for `prefix` (with its dot), or nullptr.
inline const WrapperPrefix* wrapperPrefix(std::string_view prefix)
{
    for (const WrapperPrefix& w : kWrapperPrefixes)
        if (w.prefix == prefix)
            return &w;
    return nullptr;
}

// What puts `prefix` into names ("torch.compile"), or "a wrapper" for one the table does not know.
inline std::string_view wrapperOrigin(std::string_view prefix)
{
    const WrapperPrefix* w = wrapperPrefix(prefix);
    return w ? w->origin : std::string_view("a wrapper");
}

// Whether one name segment (no dot) is a wrapper's that may stand anywhere in a name but its last segment:
// `_orig_mod`, `_fsdp_wrapped_module`, `_fpw_module`, `_checkpoint_wrapped_module`.
inline bool isInnerWrapperSegment(std::string_view segment)
{
    for (const WrapperPrefix& w : kWrapperPrefixes)
        if (w.place != WrapperPrefix::Place::Start && w.prefix.size() == segment.size() + 1 && w.prefix.starts_with(segment))
            return true;
    return false;
}

} // namespace sl
