// libFuzzer target: a Hugging Face index folder, opened as `statelens ls` opens it, so the shard merge runs
// (readHfIndex: shard placement, the name lookups, misplaced and unlisted tensors, the early FP8 pairs).
// fuzz_hf_index only parses the JSON. The input is model.safetensors.index.json followed by the shard files,
// each introduced by the separator below and named model-0000<i>-of-0000<n>.safetensors in order, so that
// index JSON written by transformers names them. readHfIndex opens shards by path, so the folder is written
// to a private temporary directory (in /dev/shm where it can be written) for every input.
//
// Each folder is opened twice: with the early FP8 groups (the default) and shards read on the prefetch thread,
// and with all grouping left to the pass after the reader (earlyFp8Groups = false) and shards read in turn.
// Both must fail alike or give the same report: the early groups and the prefetch are only shortcuts. Every
// part and piece must lie in its entry's shard, and a safetensors shard's byte ranges inside it. Opened a
// third time as `ls` opens it (rows, formats/index_rows.h), its table and its report are the first's.

#include "fuzz_common.h"

#include "formats/open_options.h"

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace {

constexpr std::string_view kSeparator = "%%SHARD%%";
constexpr size_t kMaxShards = 6;

// The index folder lives as long as the process, and the files an input does not have are out of it: each
// input takes away the files of the one before. They are moved aside (to a folder next to it that no shard
// name can reach, "..") rather than deleted, and rewritten in place: StateLens records every file it opens
// by inode for the whole process (io/file_trust.cpp), so fresh files would grow that record by every input,
// and libFuzzer would run its slow leak check after each (it does when an input allocates more than it
// frees). For the same reason every path is made once, here.
class Folder {
public:
    Folder()
    {
        // In memory where /dev/shm can be written, else where TMPDIR (or /tmp) says.
        std::error_code ec;
        const std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
        for (const std::string& root : { std::string("/dev/shm"), ec ? std::string("/tmp") : tmp.string() }) {
            std::string tmpl = root + "/statelens-fuzz-hf-index-XXXXXX";
            if (mkdtemp(tmpl.data())) {
                m_base = tmpl;
                break;
            }
        }
        if (m_base.empty())
            sl::fuzz::die("cannot make a temporary folder", "/dev/shm or the temporary directory");
        m_dir = m_base + "/ckpt";
        m_aside = m_base + "/aside";
        if (::mkdir(m_dir.c_str(), 0700) != 0 || ::mkdir(m_aside.c_str(), 0700) != 0)
            sl::fuzz::die("cannot make a temporary folder", m_base.c_str());
        m_index = m_dir + "/model.safetensors.index.json";
        for (size_t n = 1; n <= kMaxShards; ++n)
            for (size_t i = 1; i <= n; ++i) {
                const std::string name
                    = "model-0000" + std::to_string(i) + "-of-0000" + std::to_string(n) + ".safetensors";
                m_shards[n - 1].push_back(m_dir + "/" + name);
                m_asidePaths[n - 1].push_back(m_aside + "/" + name);
                m_present[n - 1].push_back(false);
            }
    }
    ~Folder()
    {
        ::unlink(m_index.c_str());
        for (size_t n = 1; n <= kMaxShards; ++n)
            for (size_t i = 0; i < n; ++i) {
                ::unlink(m_shards[n - 1][i].c_str());
                ::unlink(m_asidePaths[n - 1][i].c_str());
            }
        ::rmdir(m_dir.c_str());
        ::rmdir(m_aside.c_str());
        ::rmdir(m_base.c_str());
    }
    Folder(const Folder&) = delete;
    Folder& operator=(const Folder&) = delete;

    const std::string& index() const { return m_index; }
    // The paths of shards 1..n of n.
    const std::vector<std::string>& shards(size_t n) const { return m_shards[n - 1]; }

    // Leaves the index and `shards` (named as for shards.size()) in the folder, and nothing else.
    void writeInput(std::string_view index, const std::vector<std::string_view>& shards)
    {
        for (size_t n = 1; n <= kMaxShards; ++n)
            for (size_t i = 0; i < n; ++i) {
                const bool wanted = n == shards.size();
                if (m_present[n - 1][i] != wanted) {
                    const std::string& from = wanted ? m_asidePaths[n - 1][i] : m_shards[n - 1][i];
                    const std::string& to = wanted ? m_shards[n - 1][i] : m_asidePaths[n - 1][i];
                    // The first time a file is wanted it is not aside yet: it is made below.
                    if (::rename(from.c_str(), to.c_str()) != 0 && (!wanted || errno != ENOENT))
                        sl::fuzz::die("cannot move a fuzz input file", from.c_str());
                    m_present[n - 1][i] = wanted;
                }
                if (wanted)
                    write(m_shards[n - 1][i], shards[i]);
            }
        write(m_index, index);
    }

private:
    static void write(const std::string& path, std::string_view bytes)
    {
        FILE* f = std::fopen(path.c_str(), "wb"); // an existing file keeps its inode
        if (!f || (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size())
            || std::fclose(f) != 0)
            sl::fuzz::die("cannot write a fuzz input file", path.c_str());
    }

    std::string m_base, m_dir, m_aside, m_index;
    std::array<std::vector<std::string>, kMaxShards> m_shards, m_asidePaths;
    std::array<std::vector<bool>, kMaxShards> m_present; // in the folder, not aside
};

Folder& folder()
{
    static Folder f; // destroyed at exit, so a finished run leaves nothing behind
    return f;
}

// Group parts (an FP8 weight and its scale, a torchao subclass's inner tensors) carry locations of their
// own. `file`: the file of the nearest entry above that names one (-1: none). Each shard's entries come from
// that shard alone, so a part or chunk naming another file points at the wrong bytes (a shard opened as a
// Source numbers its files from 0; the merge must renumber them all). Only the groups the grouping pass
// forms after the merge (no file of their own) may join parts of two shards (a pair split across them).
void checkEntryRanges(const sl::Source& s, const std::vector<uint64_t>& sizes, const sl::Entry& e, int32_t file)
{
    auto inside = [&](int32_t f, uint64_t offset, uint64_t length) {
        if (f < 0 || static_cast<size_t>(f) >= s.files.size())
            sl::fuzz::die("a byte range names no file", e.name.c_str());
        const uint64_t size = sizes[static_cast<size_t>(f)];
        if (size != UINT64_MAX && (offset > size || length > size - offset))
            sl::fuzz::die("a byte range runs past its shard",
                (e.name + ": [" + std::to_string(offset) + ", +" + std::to_string(length) + ") in "
                    + s.files[static_cast<size_t>(f)] + " of " + std::to_string(size) + " bytes")
                    .c_str());
    };
    auto sameFile = [&](int32_t f) {
        if (file >= 0 && f >= 0 && f != file && static_cast<size_t>(f) < s.files.size()
            && static_cast<size_t>(file) < s.files.size())
            sl::fuzz::die("a part lies in another shard than its entry",
                (e.name + ": in " + s.files[static_cast<size_t>(f)] + ", its entry in "
                    + s.files[static_cast<size_t>(file)])
                    .c_str());
    };
    if (e.location.kind != sl::TensorLocation::Kind::None)
        sameFile(e.location.file);
    // Only a safetensors shard's ranges are bounded by its reader (past the end: unavailable). A torch.save
    // shard's tensors (they name a storage) keep the range torch would read, with a finding where it cannot
    // (a view past its storage, a storage longer than its record); reading their values checks the bounds.
    const bool bounded = e.location.storageId.empty();
    if (bounded && e.location.kind == sl::TensorLocation::Kind::Mapped)
        inside(e.location.file, e.location.offset, e.location.length);
    if (e.sharding)
        for (const sl::ShardChunk& c : e.sharding->chunks) {
            sameFile(c.file);
            if (bounded && c.byteLength)
                inside(c.file, c.byteOffset, c.byteLength);
        }
    for (const sl::Entry& part : e.parts)
        checkEntryRanges(s, sizes, part, e.location.file >= 0 ? e.location.file : file);
}

// `shards`: the paths written and their sizes; a file Source::files lists that is not one of them (the
// fuzzer cannot make one, but a name may lead elsewhere) is not bounded.
void checkRanges(const sl::Source& s, const std::vector<std::pair<std::string, uint64_t>>& shards)
{
    std::vector<uint64_t> sizes;
    for (const std::string& f : s.files) {
        uint64_t size = UINT64_MAX;
        for (const auto& [path, n] : shards)
            if (f == path)
                size = n;
        sizes.push_back(size);
    }
    for (const sl::Entry& e : s.entries)
        checkEntryRanges(s, sizes, e, -1);
}

// The source, or the LoadError's text when it refused the folder (anything else aborts).
struct Opened {
    std::optional<sl::Source> source;
    std::string error;
};

Opened open(const std::string& path, const sl::OpenOptions& options)
{
    Opened o;
    sl::fuzz::expectOnlyLoadError(path, [&] {
        try {
            o.source = sl::openSource(path, options);
        } catch (const sl::LoadError& e) {
            o.error = e.what();
            throw;
        }
    });
    return o;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    std::string_view input(reinterpret_cast<const char*>(data), size);
    const std::vector<std::string_view> parts = sl::fuzz::splitInput(input, kSeparator, kMaxShards + 1);

    Folder& dir = folder();
    const std::vector<std::string_view> shardBytes(parts.begin() + 1, parts.end());
    dir.writeInput(parts.front(), shardBytes);
    const std::string& index = dir.index();
    std::vector<std::pair<std::string, uint64_t>> shards;
    for (size_t i = 0; i < shardBytes.size(); ++i)
        shards.emplace_back(dir.shards(shardBytes.size())[i], shardBytes[i].size());

    // The first open also reads shards on the prefetch thread while the index is parsed (inputs are smaller
    // than the size at which it starts by default): the two reports must agree all the same.
    sl::OpenOptions prefetching;
    prefetching.shardPrefetchFrom = 0;
    const Opened early = open(index, prefetching);
    sl::OpenOptions late;
    late.earlyFp8Groups = false;
    const Opened later = open(index, late);

    // The early groups change how the entries are built, never whether the folder opens or what it says.
    if (early.source.has_value() != later.source.has_value() || early.error != later.error)
        sl::fuzz::die("early FP8 groups change whether the index opens",
            ("early: " + (early.source ? std::string("opened") : early.error)
                + "; later: " + (later.source ? std::string("opened") : later.error))
                .c_str());
    if (!early.source)
        return 0;
    const std::string a = sl::sourceToJson(*early.source);
    const std::string b = sl::sourceToJson(*later.source);
    if (a != b) {
        size_t at = 0;
        while (at < a.size() && at < b.size() && a[at] == b[at])
            ++at;
        const size_t from = at < 200 ? 0 : at - 200;
        sl::fuzz::die("early FP8 groups give another report than the grouping pass",
            ("first difference at byte " + std::to_string(at) + "\n--- early:\n" + a.substr(from, 400)
                + "\n--- later:\n" + b.substr(from, 400))
                .c_str());
    }
    sl::OpenOptions ls;
    ls.deferEntries = true;
    const Opened listed = open(index, ls);
    if (!listed.source || sl::sourceToTable(*listed.source) != sl::sourceToTable(*early.source)
        || sl::sourceToJson(*listed.source) != a)
        sl::fuzz::die("the listing from rows differs from the one from entries", listed.error.c_str());
    checkRanges(*early.source, shards);
    checkRanges(*later.source, shards);
    sl::fuzz::exercise(*early.source, index);
    return 0;
}
