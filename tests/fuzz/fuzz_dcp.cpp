// libFuzzer target: torch.distributed.checkpoint folders held in memory. The input is a .metadata pickle
// followed by the checkpoint's data files, each introduced by the separator below (named __0_0.distcp,
// __1_0.distcp, ... in order), so the fuzzer mutates the pickle (Metadata, chunks, storage_data, planner
// paths) and the items it points into (embedded torch.save zips, safetensors blobs, bytes items) together.
// Besides "only LoadError escapes", every byte range the source reports must lie inside its file, listed
// as usual (items not read) and with the items read (ls --inspect-items). The dataclass lane
// (pickle/dataclass_record.h) is held to the opcode loop: .metadata reads the same with and without it.

#include "fuzz_common.h"

#include "formats/dcp_metadata.h"
#include "formats/dcp_safetensors.h"
#include "formats/dcp_source.h"
#include "io/arriving_bytes.h"
#include "io/input_file.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr std::string_view kSeparator = "%%DCPFILE%%";

void checkRanges(const sl::Source& s, const std::vector<uint64_t>& sizes)
{
    auto inside = [&](int32_t file, uint64_t offset, uint64_t length) {
        if (file < 0 || static_cast<size_t>(file) >= s.files.size())
            sl::fuzz::die("a byte range names no file", s.path.c_str());
        if (static_cast<size_t>(file) < sizes.size() && sizes[static_cast<size_t>(file)] != UINT64_MAX
            && (offset > sizes[static_cast<size_t>(file)] || length > sizes[static_cast<size_t>(file)] - offset))
            sl::fuzz::die("a byte range runs past its file", s.path.c_str());
    };
    for (const sl::Entry& e : s.entries) {
        if (e.location.kind == sl::TensorLocation::Kind::Mapped)
            inside(e.location.file, e.location.offset, e.location.length);
        if (e.sharding)
            for (const sl::ShardChunk& c : e.sharding->chunks)
                if (c.byteLength)
                    inside(c.file, c.byteOffset, c.byteLength);
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string name = "fuzz/ckpt";
    std::string_view input(reinterpret_cast<const char*>(data), size);
    const std::vector<std::string_view> parts = sl::fuzz::splitInput(input, kSeparator, 8);

    sl::dcp::MemoryFiles files(name);
    std::vector<std::string> rels;
    for (size_t i = 1; i < parts.size(); ++i) {
        rels.push_back("__" + std::to_string(i - 1) + "_0.distcp");
        files.add(rels.back(), std::vector<uint8_t>(parts[i].begin(), parts[i].end()));
        // The blob parser on its own, as the safetensors-shard folders use it.
        try {
            (void)sl::dcp::parseBlob(*sl::InputFile::fromBuffer(rels.back(), std::vector<uint8_t>(parts[i].begin(), parts[i].end())));
        } catch (const sl::FormatError&) {
        }
    }

    const std::string_view md = parts.front();
    auto metadataRead = [&](bool lane) {
        try {
            return sl::dcp::dumpMetadata(sl::dcp::parseMetadata(name, sl::Bytes(reinterpret_cast<const uint8_t*>(md.data()), md.size()), nullptr, lane));
        } catch (const sl::LoadError& e) {
            return std::string("error: ") + e.what();
        }
    };
    const std::string laned = metadataRead(true);
    if (laned != metadataRead(false))
        sl::fuzz::die("the dataclass lane changed what .metadata reads as", laned.substr(0, 200).c_str());
    // Read as it arrives (io/arriving_bytes.h), in pieces of 1 to 64 bytes, the unpickler following 1 to 7
    // bytes behind: the same.
    {
        const auto file = sl::InputFile::fromBuffer("fuzz/.metadata", std::vector<uint8_t>(md.begin(), md.end()));
        sl::ArrivingBytes arriving(*file, 0, md.size(), 1 + size % 64, 1 + size % 7);
        std::string streamed;
        try {
            streamed = sl::dcp::dumpMetadata(sl::dcp::parseMetadata(name, arriving));
        } catch (const sl::LoadError& e) {
            streamed = std::string("error: ") + e.what();
        }
        if (streamed != laned)
            sl::fuzz::die("reading .metadata as it arrives changed what it reads as", streamed.substr(0, 200).c_str());
    }
    // Source::files lists the data files by name; their sizes bound every range.
    auto sizesOf = [&](const sl::Source& s) {
        std::vector<uint64_t> sizes;
        for (const std::string& f : s.files) {
            uint64_t sz = UINT64_MAX;
            for (size_t i = 0; i < rels.size(); ++i)
                if (f == name + "/" + rels[i])
                    sz = parts[i + 1].size();
            sizes.push_back(sz);
        }
        return sizes;
    };
    sl::fuzz::expectOnlyLoadError(name, [&] {
        sl::Source s = sl::dcp::readCheckpoint(name, sl::Bytes(reinterpret_cast<const uint8_t*>(md.data()), md.size()), files, {});
        checkRanges(s, sizesOf(s));
        sl::fuzz::exercise(s, name);
    });
    // Reading the items while listing (ls --inspect-items): what values reads do to place each chunk.
    sl::fuzz::expectOnlyLoadError(name, [&] {
        sl::OpenOptions inspecting;
        inspecting.inspectDcpItems = true;
        sl::Source s = sl::dcp::readCheckpoint(name, sl::Bytes(reinterpret_cast<const uint8_t*>(md.data()), md.size()), files, inspecting);
        checkRanges(s, sizesOf(s));
    });
    return 0;
}
