#include "loader.h"

#include "formats/dcp_reader.h"
#include "formats/hf_index_reader.h"
#include "formats/live_dump_reader.h"
#include "formats/load_error_reader.h"
#include "formats/rank_folder_reader.h"
#include "formats/safetensors_reader.h"
#include "formats/torch_legacy_reader.h"
#include "formats/torch_zip_reader.h"
#include "formats/torchscript_reader.h"
#include "io/file_trust.h"
#include "io/input_file.h"
#include "io/tar_archive.h"
#include "io/zip_archive.h"
#include "pickle/opcode_scan.h"
#include "quant/quantized_tensors.h"
#include "torch/load_safety.h"
#include "util/error.h"
#include "util/json_space.h"
#include "util/load_control.h"
#include "util/terminal_text.h"
#include "util/timings.h"

#include <spdlog/spdlog.h>
#include <filesystem>
#include <new>

namespace sl {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kLfsPointer = "version https://git-lfs.github.com/spec";
const std::string kDcp = " of a torch.distributed.checkpoint (DCP) checkpoint";

// A DCP file opened on its own: the checkpoint is the folder (only .metadata says where anything is).
std::string dcpFolderHint(const std::string& path)
{
    std::string dir = fs::path(path).parent_path().string();
    if (dir.empty())
        dir = ".";
    std::error_code ec;
    if (!fs::is_regular_file(fs::path(dir) / ".metadata", ec))
        return "; open its folder with the .metadata file (" + dir + " has none)";
    return "; open its folder instead: " + dir;
}

std::string hexPrefix(Bytes b)
{
    std::string out;
    char buf[4];
    for (size_t i = 0; i < b.size() && i < 8; ++i) {
        std::snprintf(buf, sizeof buf, "%02x ", b[i]);
        out += buf;
    }
    if (!out.empty())
        out.pop_back();
    return out;
}

bool looksLikeIndexJson(Bytes b)
{
    size_t i = 0;
    while (i < b.size() && isJsonSpace(static_cast<char>(b[i])))
        ++i;
    if (i == b.size() || b[i] != '{')
        return false;
    std::string_view text(reinterpret_cast<const char*>(b.data()), std::min<size_t>(b.size(), 1 << 20));
    return text.find("\"weight_map\"") != std::string_view::npos;
}

// A file that is no format StateLens reads may still be a pickle: torch.load runs its first pickle before
// it checks the magic number, so what that pickle calls is named in the error.
std::string withPickleDangers(std::string message, const InputFile& f, Bytes head)
{
    constexpr uint64_t kScanned = 16u << 20;
    if (head.empty() || std::string_view("\x80(cNI]})lLdSVF").find(static_cast<char>(head[0])) == std::string_view::npos)
        return message;
    std::vector<uint8_t> buffer;
    torch::LoadSafety safety;
    safety.add("its pickle", pickle::scanPickle(f.prefix(kScanned, buffer)));
    return safety.withDangers(std::move(message));
}

// Sniffs a file from a bounded prefix (a 3 GB text file costs no more than a small one); `path` only names
// it in errors, unless `byName`: then bytes that match nothing but sit under a .safetensors name go to that
// reader, whose error (HeaderTooLarge, InvalidHeaderLength, ...) says more than a hex dump. detectFormat
// does not guess from names. Zips are told apart (torch.save or TorchScript) only when `lookInsideZips`:
// opening a file leaves that to the zip reader, which parses the central directory anyway, so it is not
// parsed twice.
SourceFormat sniff(const std::string& path, const InputFile& f, bool byName = false, bool lookInsideZips = true)
{
    if (f.size() == 0)
        throw LoadError(path, "the file is empty");
    // A DCP shard is payloads laid end to end (often small torch.save zips) that only .metadata can
    // locate; nothing in its bytes says so, and read as one zip it fails with a misleading zip64 error.
    if (byName && path.ends_with(".distcp"))
        throw LoadError(path, "is a data file (.distcp)" + kDcp + dcpFolderHint(path));
    // Safetensors, the common case (163 shards of one index), tells itself by its first bytes; no other format
    // here starts with a length that fits the file and then '{'. The checks below read 64 KiB.
    {
        std::vector<uint8_t> small;
        if (looksLikeSafetensors(f.prefix(4096, small), f.size()))
            return SourceFormat::Safetensors;
    }
    std::vector<uint8_t> headBuffer;
    const Bytes b = f.prefix(64 << 10, headBuffer);
    if (looksLikeZip(b) && !lookInsideZips)
        return SourceFormat::TorchZip;
    if (looksLikeZip(b)) {
        try {
            ZipArchive zip(f);
            if (!zip.entries().empty()) {
                std::string_view first = zip.entries().front().name;
                std::string prefix(first.substr(0, first.find('/') + 1));
                if (loadsAsTorchScript(zip, prefix))
                    return SourceFormat::TorchScript;
            }
        } catch (const FormatError&) {
            // Let the torch-zip reader report what is wrong with the archive.
        }
        return SourceFormat::TorchZip;
    }
    if (looksLikeLegacyTorch(b) || looksLikeTar(b))
        return SourceFormat::TorchLegacy;
    std::string_view head(reinterpret_cast<const char*>(b.data()), std::min<size_t>(b.size(), 4096));
    if (head.substr(0, kLfsPointer.size()) == kLfsPointer)
        throw LoadError(path, "is a Git LFS pointer, not checkpoint data (run `git lfs pull`)");
    if (looksLikeLiveDump(b))
        return SourceFormat::LiveDump;
    if (looksLikeSafetensors(b, f.size()))
        return SourceFormat::Safetensors;
    // An index names "weight_map" near its start; its weight_map can take megabytes, not read twice.
    if (looksLikeIndexJson(b))
        return indexFormat(path);
    // Text: the first 16 MiB, and a long log's last 8 MiB (where a run that failed to load stopped).
    std::vector<uint8_t> textBuffer, tailBuffer;
    const Bytes text = b.size() == f.size() ? b : f.prefix(kSniffedBytes, textBuffer);
    if (looksLikeIndexJson(text))
        return indexFormat(path);
    if (byName && path.ends_with(".safetensors"))
        return SourceFormat::Safetensors;
    // Never an index by name alone: a shard check that sniffs bytes would miss it, and it could name itself.
    // Files that sit next to checkpoints: say what they are rather than dumping their first bytes.
    if (b[0] == 0x80 && head.find("checkpoint.metadata") != std::string_view::npos)
        throw LoadError(
            path, "is the .metadata pickle" + kDcp + "; open the folder that holds it with its .distcp files");
    const bool longText = f.size() > kSniffedBytes;
    const Bytes tail = longText ? f.read(f.size() - kSniffedBytes / 2, kSniffedBytes / 2, tailBuffer) : Bytes {};
    if (looksLikeLoadErrorText(longText ? text.first(kSniffedBytes / 2) : text, tail))
        return SourceFormat::LoadErrorText;
    const std::string_view textView(reinterpret_cast<const char*>(text.data()), text.size());
    if (size_t i = textView.find_first_not_of(" \t\r\n"); i != std::string_view::npos && textView[i] == '{') {
        if (head.find("\"model_type\"") != std::string_view::npos
            || head.find("\"architectures\"") != std::string_view::npos)
            throw LoadError(path, "is a Hugging Face model config (JSON), not checkpoint data");
        throw LoadError(path, "is a JSON file without a \"weight_map\", neither checkpoint data nor a shard index");
    }
    throw LoadError(path, withPickleDangers("unrecognised format (first bytes: " + hexPrefix(b) + ")", f, b));
}

// The index or single checkpoint file a folder stands for; a LoadError when it is a symlink out of the folder.
std::string indexInDirectory(const std::string& dir)
{
    for (const char* name :
        { "model.safetensors.index.json", "pytorch_model.bin.index.json", "model.safetensors", "pytorch_model.bin" }) {
        fs::path p = fs::path(dir) / name;
        if (!fs::is_regular_file(p))
            continue;
        if (const std::string outside = CheckpointFolder(dir).leadsOutside(p.string()); !outside.empty())
            throw LoadError(dir,
                std::string(name) + " is a symlink that points outside the folder (to " + outside + "); not opened");
        return p.string();
    }
    return {};
}

// A folder that is no DCP checkpoint and holds no index: its per-rank sets, or an error that says what
// the folder would need (and which files in it could be opened on their own).
RankFolderPlan rankFolderPlan(const std::string& dir)
{
    RankFolderPlan plan = planRankFolder(dir);
    if (!plan.sets.empty())
        return plan;
    std::string problem
        = "the folder holds no checkpoint StateLens recognises (no DCP .metadata, no model.safetensors, "
          "pytorch_model.bin or index, no per-rank files such as model_rank0.pt)";
    if (!plan.leftOut.empty())
        problem += "; open a file in it on its own: " + plan.leftOut.front()
            + (plan.leftOut.size() > 1 ? " and " + std::to_string(plan.leftOut.size() - 1) + " more" : "");
    if (!plan.outside.empty())
        problem += "; not opened, as symlinks that point outside the folder: " + plan.outside.front()
            + (plan.outside.size() > 1 ? " and " + std::to_string(plan.outside.size() - 1) + " more" : "");
    throw LoadError(dir, problem);
}

SourceFormat sniffTimed(const std::string& path, const InputFile& file, const OpenOptions& options)
{
    PhaseTimer sniffTimer(options.timings, "sniff format");
    return sniff(path, file, true, false);
}

Source readAs(SourceFormat format, const std::string& path, const std::shared_ptr<const InputFile>& file,
    const OpenOptions& options)
{
    switch (format) {
    case SourceFormat::TorchZip:
        return readTorchZip(file, options);
    case SourceFormat::TorchLegacy:
        return readTorchLegacy(file, options);
    case SourceFormat::Safetensors:
        return readSafetensors(file, options);
    case SourceFormat::SafetensorsIndex:
    case SourceFormat::TorchBinIndex:
        if (!options.indexAllowed)
            throw LoadError(path, "a shard cannot itself be an index");
        return readHfIndex(path, options);
    case SourceFormat::LiveDump:
        return readLiveDump(file, options);
    case SourceFormat::LoadErrorText:
        return readLoadErrorText(file, options);
    case SourceFormat::TorchScript:
        return readTorchScript(file, options);
    case SourceFormat::InMemory:
    case SourceFormat::Dcp: // folders, never sniffed from one file's bytes
    case SourceFormat::PerRank:
        break;
    }
    throw LoadError(path, "unrecognised format");
}

Source dispatch(const std::string& path, const std::shared_ptr<const InputFile>& file, const OpenOptions& options)
{
    const SourceFormat format = sniffTimed(path, *file, options);
    spdlog::debug("{}: {} bytes, read as {}", terminalText(path), file->size(), formatId(format));
    return readAs(format, path, file, options);
}

// Every source goes through here once: format-independent steps that need the whole state dict.
Source finish(Source s, const OpenOptions& options)
{
    if (options.groupQuantized) {
        PhaseTimer timer(options.timings, "group quantized");
        quant::groupQuantizedEntries(s);
    }
    spdlog::debug("{}: {} entries ({}), files: {}, findings: {}", terminalText(s.path), s.entries.size(), formatId(s.format),
        s.files.size(), s.findings.size());
    return s;
}

template <typename F> auto guarded(const std::string& path, F&& f) -> decltype(f())
{
    try {
        return f();
    } catch (const LoadError&) {
        throw;
    } catch (const FormatError& e) {
        throw LoadError(path, e.what());
    } catch (const std::bad_alloc&) {
        throw LoadError(path, "out of memory while reading");
    } catch (const std::length_error&) {
        throw LoadError(path, "a length in the file is too large to allocate");
    } catch (const fs::filesystem_error& e) {
        throw LoadError(path, e.code().message());
    }
}

} // namespace

SourceFormat detectFormat(const std::string& path)
{
    return guarded(path, [&] {
        std::error_code ec;
        if (fs::is_directory(path, ec)) {
            if (isDcpDirectory(path))
                return SourceFormat::Dcp;
            const std::string inner = indexInDirectory(path);
            if (!inner.empty())
                return detectFormat(inner);
            (void)rankFolderPlan(path); // throws, saying why, when the folder holds no per-rank set either
            return SourceFormat::PerRank;
        }
        if (fs::path(path).filename() == ".metadata" && isDcpDirectory(fs::path(path).parent_path().string()))
            return SourceFormat::Dcp;
        return sniff(path, *InputFile::open(path));
    });
}

Source openSource(const std::string& path, const OpenOptions& options)
{
    return guarded(path, [&] {
        if (options.control)
            options.control->checkpoint(path);
        std::error_code ec;
        if (fs::is_directory(path, ec)) {
            if (isDcpDirectory(path)) {
                spdlog::debug("{}: a torch.distributed.checkpoint folder", terminalText(path));
                return finish(readDcp(path, options), options);
            }
            std::string inner = indexInDirectory(path);
            if (inner.empty()) {
                spdlog::debug("{}: a folder of per-rank files", terminalText(path));
                return readRankFolder(path, rankFolderPlan(path), options);
            }
            spdlog::debug("{}: a folder, opened through its index {}", terminalText(path), terminalText(inner));
            return openSource(inner, options);
        }
        // A DCP checkpoint is its folder; its .metadata file stands for it.
        if (fs::path(path).filename() == ".metadata" && isDcpDirectory(fs::path(path).parent_path().string())) {
            try {
                return finish(readDcp(fs::path(path).parent_path().string(), options), options);
            } catch (const LoadError& e) {
                throw LoadError(path, e.problem()); // name what the user gave
            }
        }
        auto file = InputFile::open(path);
        return finish(dispatch(path, file, options), options);
    });
}

ShardContents openShard(const std::string& path, const OpenOptions& options)
{
    return guarded(path, [&] {
        ShardContents shard;
        if (options.control)
            options.control->checkpoint(path);
        auto file = InputFile::open(path);
        const SourceFormat format = sniffTimed(path, *file, options);
        if (format == SourceFormat::Safetensors) {
            readSafetensorsHeader(*file, options, shard.header.emplace(), [&shard](const SafetensorsTensor& t) {
                if (shard.tensors.empty()) // a tensor takes over 64 bytes of header: no copy as the list grows
                    shard.tensors.reserve(static_cast<size_t>(shard.header->bufferStart / 64));
                shard.tensors.push_back(t);
            });
            // An index keeps every shard's tensors until the merge: their growth slack, 163 times over, was
            // 9 MB of a DeepSeek-V3 listing's peak. The copy is small, and the next shard reuses the old block.
            shard.tensors.shrink_to_fit();
        } else
            shard.source = finish(readAs(format, path, file, options), options);
        return shard;
    });
}

Source openSourceFromMemory(const std::string& name, std::vector<uint8_t> bytes, const OpenOptions& options)
{
    return guarded(name, [&] {
        auto file = InputFile::fromBuffer(name, std::move(bytes));
        // Sniffed as dispatch does (by name too), so bytes that only a .safetensors name claims get that
        // reader's specific error here as they do from disk.
        if (isShardIndex(sniff(name, *file, true)))
            throw LoadError(name, "an index must be opened from disk, next to its shards");
        return finish(dispatch(name, file, options), options);
    });
}

} // namespace sl
