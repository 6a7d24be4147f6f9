#pragma once
// From a parsed DCP Metadata (dcp_metadata.h) to a Source: entries with their global shapes and chunks,
// the byte range of every chunk inside its .distcp file, containers, findings. Files come from a
// FileProvider, so tests and fuzzers can hand the reader a checkpoint held in memory.
//
// Where a chunk's bytes are: storage_data gives (relative_path, offset, length) of its item. The item is
//   - SerializationFormat.TORCH_SAVE (the default): a whole torch.save zip (folder "archive/") of the chunk,
//     whose offsets are relative to the item's start. Its central directory and the local header of its
//     one data/<key> record are read (ZipArchive over the item's bytes) to give the tensor data's range;
//   - SerializationFormat.SAFETENSORS: nothing; the item's offset is where the file's safetensors blob
//     starts and its length is the chunk's byte count. The blob header gives the chunk's data range;
//   - transformed (2.x transform_descriptors, e.g. zstd): only the item's range is known.
// A bytes item (BytesStorageMetadata) is torch.save(value): its data.pkl is unpickled (at most 1 MiB, with
// the safe VM) to say what the value is.

#include "formats/dcp_metadata.h"
#include "formats/open_options.h"
#include "io/input_file.h"
#include "model/source.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sl::dcp {

class FileProvider {
public:
    virtual ~FileProvider() = default;
    // The file at `relativePath` (already checked to stay inside the folder), or null with `error` set:
    // "missing", or why it cannot be read.
    virtual std::shared_ptr<const InputFile> open(const std::string& relativePath, std::string& error) const = 0;
    // How the file is named in Source::files.
    virtual std::string pathOf(const std::string& relativePath) const = 0;
    // Where the file leads when it is a symlink out of the checkpoint folder (open() refuses it then); empty
    // when it stays inside.
    virtual std::string leadsOutside(const std::string& /*relativePath*/) const { return {}; }
};

// Files held in memory, by relative path.
class MemoryFiles : public FileProvider {
public:
    explicit MemoryFiles(std::string folder)
        : m_folder(std::move(folder))
    {
    }
    void add(const std::string& relativePath, std::vector<uint8_t> bytes) { m_files[relativePath] = std::move(bytes); }
    std::shared_ptr<const InputFile> open(const std::string& relativePath, std::string& error) const override;
    std::string pathOf(const std::string& relativePath) const override { return m_folder + "/" + relativePath; }

private:
    std::string m_folder;
    std::map<std::string, std::vector<uint8_t>> m_files;
};

// Builds the source of a checkpoint whose Metadata is `md`. `name` is what Source::path and LoadErrors
// name (the folder). `extraFindings` are file-level findings the caller found (an index beside it).
// Throws LoadError (an unknown --container, ...).
Source buildSource(const std::string& name, MetadataFile md, const FileProvider& files, const OpenOptions& options,
    std::vector<Finding> extraFindings = {});

// parseMetadata + buildSource.
Source readCheckpoint(const std::string& name, Bytes metadata, const FileProvider& files, const OpenOptions& options,
    std::vector<Finding> extraFindings = {});

} // namespace sl::dcp
