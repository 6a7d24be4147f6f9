#pragma once
// torch.save archives (torch >= 1.6, `_use_new_zipfile_serialization=True`), format id "torch-zip".
// The layout and the pickle's rebuild functions: docs/on-disk-formats.md, "torch.save files".
//
// Layout (see io/zip_archive.h for the container itself):
//   <archive>/data.pkl            the pickled object; tensors reference storages by persistent id
//                                 ('storage', <StorageClass>, key, location, numel)
//   <archive>/data/<key>          one record per storage, raw little-endian bytes, 64-byte aligned
//   <archive>/version             "3" (".data/version" in TorchScript archives)
//   <archive>/byteorder           "little" or "big" (torch >= 2.1)
//   <archive>/.format_version, .storage_alignment, .data/serialization_id   (newer 2.x)
// <archive> is whatever precedes the first "/" of the first record (the file's stem, or "archive").
// Only data.pkl and the local headers of the storage records are read; tensor bytes are never touched.

#include "formats/open_options.h"
#include "io/input_file.h"
#include "model/source.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sl {

class ZipArchive;

Source readTorchZip(const std::shared_ptr<const InputFile>& file, const OpenOptions& options);

// TorchScript archives are zips too; they carry constants.pkl, bytecode.pkl or code/ records.
bool isTorchScriptArchive(const ZipArchive& zip, const std::string& prefix);
// Whether torch.load hands the archive to torch.jit.load: only when it has constants.pkl (or, pre-1.4, no
// data.pkl at all). Any other archive with a data.pkl is unpickled as a torch.save file, code/ or not.
bool loadsAsTorchScript(const ZipArchive& zip, const std::string& prefix);

class ZipArchive;
// The small text records of a torch archive (version, .data/version, byteorder, .format_version,
// .storage_alignment, .data/serialization_id) under `prefix`, trailing whitespace removed, appended to
// `out` in that order. Records over 64 bytes or unreadable are left out; torch.save and torch.jit.save
// write the same ones.
void readTorchTextRecords(const ZipArchive& zip, const std::string& prefix,
    std::vector<std::pair<std::string, std::string>>& out);

} // namespace sl
