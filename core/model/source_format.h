#pragma once
// What a Source was read from. Readers set it and later stages branch on it (the quantized grouping, the
// reasons), so it is an enum and a misspelt format does not compile; its ids are the `source.format` strings
// of the JSON output (docs/json-output.md) and the table's "format:" line.

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sl {

enum class SourceFormat : uint8_t {
    InMemory, // built by a program rather than read (tests, an empty side of the window): no id
    Safetensors,
    SafetensorsIndex, // model.safetensors.index.json and its shards
    TorchZip, // torch.save since 1.6
    TorchLegacy, // torch.save before 1.6 (and its tar variant)
    TorchBinIndex, // pytorch_model.bin.index.json and its shards
    LiveDump, // resources/python/statelens_dump.py's dump of a running model
    LoadErrorText, // a pasted load_state_dict error or a log holding one
    TorchScript,
    Dcp, // a torch.distributed.checkpoint folder
    PerRank, // one torch.save file per rank, opened together
};

// Every format a file or folder can be read as, in the order docs/json-output.md lists them.
inline constexpr std::array kReadableFormats { SourceFormat::Safetensors, SourceFormat::SafetensorsIndex,
    SourceFormat::TorchZip, SourceFormat::TorchLegacy, SourceFormat::TorchBinIndex, SourceFormat::LiveDump,
    SourceFormat::LoadErrorText, SourceFormat::TorchScript, SourceFormat::Dcp, SourceFormat::PerRank };

constexpr std::string_view formatId(SourceFormat f)
{
    switch (f) {
    case SourceFormat::InMemory:
        return "";
    case SourceFormat::Safetensors:
        return "safetensors";
    case SourceFormat::SafetensorsIndex:
        return "safetensors-index";
    case SourceFormat::TorchZip:
        return "torch-zip";
    case SourceFormat::TorchLegacy:
        return "torch-legacy";
    case SourceFormat::TorchBinIndex:
        return "torch-bin-index";
    case SourceFormat::LiveDump:
        return "live-dump";
    case SourceFormat::LoadErrorText:
        return "load-error-text";
    case SourceFormat::TorchScript:
        return "torchscript";
    case SourceFormat::Dcp:
        return "dcp";
    case SourceFormat::PerRank:
        return "per-rank";
    }
    return "";
}

constexpr std::optional<SourceFormat> formatFromId(std::string_view id)
{
    for (SourceFormat f : kReadableFormats)
        if (formatId(f) == id)
            return f;
    return std::nullopt;
}

// A torch.save file, zip or legacy: what a per-rank set is made of.
constexpr bool isTorchSave(SourceFormat f) { return f == SourceFormat::TorchZip || f == SourceFormat::TorchLegacy; }
constexpr bool isShardIndex(SourceFormat f)
{
    return f == SourceFormat::SafetensorsIndex || f == SourceFormat::TorchBinIndex;
}

} // namespace sl
