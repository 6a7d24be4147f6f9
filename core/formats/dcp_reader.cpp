// torch.distributed.checkpoint (DCP) folders, format id "dcp" (docs/on-disk-formats.md, "DCP folders").
//
// On disk (torch 2.x FileSystemWriter; torch 1.13 torch.distributed._shard.checkpoint is the same layout):
//   <folder>/.metadata          pickle of Metadata (dcp_metadata.h): every key's global shape, dtype and
//                                chunks, and storage_data: where each chunk's item is
//   <folder>/__<rank>_<n>.distcp items laid end to end, each addressed by (relative_path, offset, length):
//                                a tensor chunk is a whole torch.save zip of the chunk (TORCH_SAVE) or sits
//                                in one safetensors blob appended to the file (SAFETENSORS); a non-tensor
//                                value is torch.save(value). Nothing in a .distcp says what it holds.
// Writers: torch.distributed.checkpoint.save (flatten_state_dict: keys like `model.layers.0.weight`, the
// original paths in planner_data), Accelerate's SHARDED_STATE_DICT saves ({"model": sd} in
// pytorch_model_fsdp_0/, the optimizer in optimizer_0/), torchtitan's checkpoint/step-N/ (model keys at the
// top next to optimizer, lr_scheduler, dataloader, train_state).
//
// Also a folder without .metadata written by HuggingFaceStorageWriter(save_sharded=True): per-rank
// shard-0000r-model-0000k-of-0000N.safetensors files whose __metadata__ carries DCP_SHARDING_INFO. With an
// index (model.safetensors.index.json, the non-sharded writer) the folder is a Hugging Face checkpoint and the
// index reader opens it; without one it is read here, the global shapes being the largest offset + size per
// dimension (what torch's HuggingFaceStorageReader computes).
//
// Only .metadata, zip central directories and local headers of the items, and safetensors headers are read;
// tensor bytes never are. Paths from storage_data that leave the folder are never opened.

#include "dcp_reader.h"

#include "formats/dcp_safetensors.h"
#include "formats/dcp_source.h"
#include "io/arriving_bytes.h"
#include "io/file_trust.h"
#include "io/input_file.h"
#include "util/terminal_text.h"
#include "util/error.h"
#include "util/timings.h"

#include <spdlog/spdlog.h>
#include <algorithm>
#include <filesystem>
#include <map>

namespace sl {

namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxListedFiles = 100'000; // directory entries looked at when searching for shards
const char* const kIndexNames[] = { "model.safetensors.index.json", "pytorch_model.bin.index.json", "model.safetensors",
    "pytorch_model.bin" };

class FolderFiles : public dcp::FileProvider {
public:
    explicit FolderFiles(std::string dir)
        : m_dir(std::move(dir))
        , m_folder(m_dir)
    {
    }
    std::shared_ptr<const InputFile> open(const std::string& relativePath, std::string& error) const override
    {
        const std::string path = pathOf(relativePath);
        if (!leadsOutside(relativePath).empty()) {
            error = "a symlink that points outside the checkpoint folder";
            return nullptr;
        }
        std::error_code ec;
        if (!fs::exists(path, ec)) {
            error = "missing";
            return nullptr;
        }
        if (!fs::is_regular_file(path, ec)) {
            error = "is not a regular file";
            return nullptr;
        }
        try {
            return InputFile::open(path);
        } catch (const LoadError& e) {
            error = e.problem();
            return nullptr;
        }
    }
    std::string pathOf(const std::string& relativePath) const override
    {
        return (fs::path(m_dir) / relativePath).lexically_normal().string();
    }
    std::string leadsOutside(const std::string& relativePath) const override
    {
        return m_folder.leadsOutside(pathOf(relativePath));
    }

private:
    std::string m_dir;
    CheckpointFolder m_folder;
};

bool hasIndex(const fs::path& dir)
{
    std::error_code ec;
    for (const char* name : kIndexNames)
        if (fs::is_regular_file(dir / name, ec))
            return true;
    return false;
}

// The *.safetensors files of a folder, sorted by name.
std::vector<std::string> safetensorsFiles(const fs::path& dir)
{
    std::vector<std::string> names;
    std::error_code ec;
    size_t seen = 0;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end && seen++ < kMaxListedFiles; it.increment(ec)) {
        const std::string n = it->path().filename().string();
        if (n.size() > 12 && n.ends_with(".safetensors") && it->is_regular_file(ec))
            names.push_back(n);
    }
    std::sort(names.begin(), names.end());
    return names;
}

bool isShardedSafetensorsFolder(const fs::path& dir)
{
    if (hasIndex(dir))
        return false;
    const CheckpointFolder folder(dir.string());
    for (const std::string& name : safetensorsFiles(dir)) {
        if (!folder.leadsOutside((dir / name).string()).empty())
            continue; // never opened; metadataFromShards reports it
        try {
            return dcp::looksLikeDcpSafetensors(*InputFile::open((dir / name).string()));
        } catch (const LoadError&) {
            return false;
        }
    }
    return false;
}

// HuggingFaceStorageWriter(save_sharded=True) output as the Metadata torch's HuggingFaceStorageReader builds
// from it: one chunk per file and tensor, at DCP_SHARDING_INFO's offsets.
dcp::MetadataFile metadataFromShards(const std::string& dir, const std::vector<std::string>& files, std::vector<Finding>& findings)
{
    dcp::MetadataFile md;
    md.info.emplace_back("layout", "huggingface sharded safetensors");
    std::map<std::string, size_t> itemOf;
    std::string version;
    const CheckpointFolder folder(dir);
    for (const std::string& name : files) {
        std::shared_ptr<const InputFile> file;
        if (const std::string to = folder.leadsOutside((fs::path(dir) / name).string()); !to.empty()) {
            findings.push_back({ Severity::Danger,
                name + " is a symlink that points outside the checkpoint folder (to " + to + "); not opened", {} });
            continue;
        }
        try {
            file = InputFile::open((fs::path(dir) / name).string());
        } catch (const LoadError& e) {
            findings.push_back({ Severity::Warning, name + " cannot be read: " + e.problem(), {} });
            continue;
        }
        dcp::Blob blob;
        try {
            blob = dcp::parseBlob(*file);
        } catch (const FormatError& e) {
            findings.push_back({ Severity::Warning, name + " is not a readable safetensors file: " + e.what(), {} });
            continue;
        }
        if (!blob.hasShardingInfo)
            findings.push_back({ Severity::Warning, name + " has no DCP_SHARDING_INFO; its tensors are taken as whole", {} });
        if (version.empty())
            version = blob.dcpVersion;
        for (const std::string& fqn : blob.order) {
            const dcp::BlobTensor& t = blob.tensors.at(fqn);
            auto [it, inserted] = itemOf.emplace(fqn, md.items.size());
            if (inserted) {
                dcp::ItemMeta item;
                item.fqnId = md.fqns.intern(fqn);
                item.kind = dcp::ItemMeta::Kind::Tensor;
                item.dtype = t.dtype.value_or(DType::Unknown);
                if (!t.dtype)
                    item.dtypeText = t.dtypeName;
                item.size.resize(t.shape.size());
                item.sizeKnown = true;
                md.items.push_back(std::move(item));
            }
            dcp::ItemMeta& item = md.items[it->second];
            dcp::ChunkMeta c;
            c.sizes = t.shape;
            c.offsets = t.hasSavedOffsets ? t.savedOffsets : Shape();
            if (!t.hasSavedOffsets)
                c.offsets.resize(t.shape.size());
            if (c.offsets.size() != c.sizes.size() || item.size.size() != c.sizes.size()) {
                item.problems.push_back(name + " holds it with " + std::to_string(c.sizes.size())
                    + " dimensions and offsets " + dcp::dimsText(c.offsets) + ", which do not fit its other chunks");
                continue;
            }
            if (t.dtype && item.dtype != *t.dtype)
                item.problems.push_back(name + " holds it as " + t.dtypeName + ", another file as "
                    + std::string(dtypeName(item.dtype)));
            for (size_t d = 0; d < c.sizes.size(); ++d) {
                int64_t end = 0;
                if (__builtin_add_overflow(c.offsets[d], c.sizes[d], &end)) {
                    end = INT64_MAX;
                }
                item.size[d] = std::max(item.size[d], end);
            }
            dcp::StorageRef r;
            r.fqn = md.fqns.intern(fqn);
            r.hasOffset = true;
            r.offset = c.offsets;
            r.pathIsText = true;
            r.path = md.paths.intern(name);
            r.rangeKnown = true;
            r.itemOffset = 0; // the blob starts the file, as in SerializationFormat.SAFETENSORS items
            r.itemLength = t.end - t.begin;
            md.storage.push_back(std::move(r));
            item.chunks.push_back(std::move(c));
        }
    }
    if (!version.empty())
        md.info.emplace_back("DCP_VERSION", version);
    return md;
}

} // namespace

bool isDcpDirectory(const std::string& path)
{
    std::error_code ec;
    const fs::path dir(path);
    if (fs::is_regular_file(dir / ".metadata", ec))
        return true;
    return fs::is_directory(dir, ec) && isShardedSafetensorsFolder(dir);
}

Source readDcp(const std::string& dirGiven, const OpenOptions& options)
{
    const std::string dir = dirGiven.empty() ? std::string(".") : dirGiven; // `ls .metadata` in the folder itself
    const fs::path folder(dir);
    std::error_code ec;
    FolderFiles files(dir);
    std::vector<Finding> extra;
    if (!fs::is_regular_file(folder / ".metadata", ec)) {
        std::vector<std::string> shards = safetensorsFiles(folder);
        if (shards.empty())
            throw LoadError(dir, "the folder has neither a DCP .metadata file nor safetensors shards");
        spdlog::debug("{}: no .metadata; {} safetensors files read as a DCP save's shards", terminalText(dir), shards.size());
        PhaseTimer t(options.timings, "read safetensors headers");
        dcp::MetadataFile md = metadataFromShards(dir, shards, extra);
        t.stop();
        return dcp::buildSource(dir, std::move(md), files, options, std::move(extra));
    }
    for (const char* name : kIndexNames)
        if (fs::is_regular_file(folder / name, ec))
            extra.push_back({ Severity::Info,
                std::string("the folder also holds ") + name + "; this is its torch.distributed.checkpoint (.metadata); open "
                    + name + " itself to list that one",
                {} });
    // The checkpoint is the folder: its .metadata must be in it too.
    if (const std::string to = files.leadsOutside(".metadata"); !to.empty())
        throw LoadError(
            dir, ".metadata is a symlink that points outside the checkpoint folder (to " + to + "); not opened");
    // Read on the load-safety scan's thread while the unpickler follows (io/arriving_bytes.h): a 256-rank
    // save's 100 MB took a sixth of `ls` to read before.
    PhaseTimer parseTimer(options.timings, "read + unpickle .metadata");
    // Metadata of a 256-rank save of a 70B model with its optimizer is 78 MB; 4 GiB is no .metadata.
    const auto file = InputFile::open((folder / ".metadata").string());
    file->refuseLargerThan(uint64_t(4) << 30, ".metadata");
    ArrivingBytes metadata(*file, 0, file->size());
    dcp::MetadataFile md = dcp::parseMetadata(dir, metadata, options.control);
    parseTimer.stop();
    if (spdlog::should_log(spdlog::level::debug)) {
        size_t chunks = 0;
        for (const auto& item : md.items)
            chunks += item.chunks.size();
        spdlog::debug("{}: .metadata of {} bytes holds {} keys, {} chunks, {} storage_data entries over {} data files "
                      "(their bytes are not read)",
            terminalText(dir), md.pickleBytes, md.items.size(), chunks, md.storage.size(), md.paths.size());
    }
    PhaseTimer buildTimer(options.timings, "locate chunks");
    return dcp::buildSource(dir, std::move(md), files, options, std::move(extra));
}

} // namespace sl
