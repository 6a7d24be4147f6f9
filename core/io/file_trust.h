#pragma once
// Filesystem trust: what StateLens opens, where it may read, and what it must never write over.
//
// - Every file StateLens reads is opened by openRegularFile. A FIFO blocks open() and read() until a writer
//   comes, a device never ends (and opening one can act: /dev/watchdog arms a timer), so anything but a
//   regular file is refused with one line, before it is opened (stat) and again after (fstat: the path may
//   have changed in between), the open itself non-blocking so a FIFO swapped in meanwhile cannot hang it.
// - Every file opened is recorded for the process by device and inode. An output path that reaches one of
//   them, through symlinks or as a hard link, is refused before anything is written (`ls A -o A`,
//   `diff A B -o B`, `-o` onto a shard or a DCP .metadata): inputs are never modified.
// - Files a checkpoint names or holds (index shards, DCP data files, rank files found in a folder) must
//   resolve, symlinks followed, inside the checkpoint's folder (CheckpointFolder); the path the user names
//   may itself be a symlink.

#include <cstdint>
#include <string>

namespace sl {

// Which inputs an output may not reach: the CLI refuses all; the window refuses checkpoints and models but
// saves a rule file over the one it opened (that is what Save is for).
enum class InputKind : uint8_t { Checkpoint = 1, Rules = 2 };
constexpr unsigned kAllInputs = 3; // a mask of InputKind

// An open, read-only descriptor of a regular file, closed with the object.
class ReadableFile {
public:
    ReadableFile() = default;
    ReadableFile(int fd, uint64_t size)
        : m_fd(fd)
        , m_size(size)
    {
    }
    ~ReadableFile();
    ReadableFile(ReadableFile&& other) noexcept;
    ReadableFile& operator=(ReadableFile&& other) noexcept;
    ReadableFile(const ReadableFile&) = delete;
    ReadableFile& operator=(const ReadableFile&) = delete;

    int fd() const { return m_fd; }
    uint64_t size() const { return m_size; }
    // Hands the descriptor over (closing it becomes the caller's job).
    int release()
    {
        const int fd = m_fd;
        m_fd = -1;
        return fd;
    }

private:
    friend ReadableFile openRegularFile(const std::string& path, InputKind kind);
    int m_fd = -1;
    uint64_t m_size = 0;
};

// Opens `path` for reading, regular files only, and records it as an input of `kind`. Throws LoadError
// naming the path: "cannot open: No such file or directory", "is a FIFO, not a regular file", "is a
// character device, not a regular file", "is a directory, not a regular file", ...
ReadableFile openRegularFile(const std::string& path, InputKind kind = InputKind::Checkpoint);

// Records `path`, when it is a regular file, as an input without reading it (a file a source names but
// opens only later).
void recordInput(const std::string& path, InputKind kind = InputKind::Checkpoint);
// The input (as it was named when read) that writing `outputPath` would reach: the same device and inode
// once symlinks are followed. Empty when none of `kinds` (a mask of InputKind) does, or the path does not
// exist yet.
std::string inputReachedBy(const std::string& outputPath, unsigned kinds = kAllInputs);
// Throws LoadError(outputPath, "is an input; ...nothing was written") or "would overwrite the input X ...".
void refuseOutputOntoInput(const std::string& outputPath, unsigned kinds = kAllInputs);

// A checkpoint's folder, resolved (its path may be a symlink). Files found through it must resolve inside
// it. In a Hugging Face hub cache (models--org--name/snapshots/<rev>/), whose files are symlinks to
// ../../blobs/<hash>, the repository's blobs folder counts as inside too.
class CheckpointFolder {
public:
    explicit CheckpointFolder(const std::string& folder);
    // Where `path` leads when, symlinks followed, it leaves the folder (its resolved path); empty when it
    // stays inside, or cannot be resolved (missing: opening it says so).
    std::string leadsOutside(const std::string& path) const;
    // `path` with every symlink followed (std::filesystem::canonical); empty when it cannot be resolved.
    std::string resolve(const std::string& path) const;
    // Whether a resolved path lies inside.
    bool holds(const std::string& resolved) const;

private:
    std::string m_prefix; // the folder as named, lexically normal, with a closing '/' ("" for the current folder)
    bool m_shortcut = false; // resolve() may take m_prefix's files as the resolved folder's
    std::string m_root; // canonical
    std::string m_blobs; // the hub cache's blobs folder, or empty
};

} // namespace sl
