#include "file_trust.h"

#include "util/error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <mutex>
#include <sys/stat.h>
#include <unistd.h>

namespace sl {

namespace {

namespace fs = std::filesystem;

std::string notRegular(mode_t mode)
{
    if (S_ISFIFO(mode))
        return "is a FIFO, not a regular file";
    if (S_ISCHR(mode))
        return "is a character device, not a regular file";
    if (S_ISBLK(mode))
        return "is a block device, not a regular file";
    if (S_ISSOCK(mode))
        return "is a socket, not a regular file";
    if (S_ISDIR(mode))
        return "is a directory, not a regular file";
    return "is not a regular file";
}

struct Recorded {
    unsigned kinds = 0;
    std::string path; // as first read
};

bool sameFile(const struct stat& a, const struct stat& b)
{
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// Whether `path` still names the file `st` describes. An input deleted since it was read may have given its
// inode number to a new file, which is no input.
bool stillNames(const std::string& path, const struct stat& st)
{
    struct stat now { };
    return ::stat(path.c_str(), &now) == 0 && sameFile(now, st);
}

// Every file this process opened for reading, by (device, inode).
class Inputs {
public:
    void add(const struct stat& st, const std::string& path, InputKind kind)
    {
        std::lock_guard lock(m_mutex);
        Recorded& r = m_files[key(st)];
        if (r.kinds != 0 && r.path != path && !stillNames(r.path, st))
            r.kinds = 0; // an earlier file of that number is gone
        if (r.kinds == 0)
            r.path = path;
        r.kinds |= static_cast<unsigned>(kind);
    }
    std::string find(const struct stat& st, unsigned kinds) const
    {
        std::lock_guard lock(m_mutex);
        auto it = m_files.find(key(st));
        if (it == m_files.end() || !(it->second.kinds & kinds) || !stillNames(it->second.path, st))
            return {};
        return it->second.path;
    }

private:
    static std::pair<uint64_t, uint64_t> key(const struct stat& st)
    {
        return { static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino) };
    }
    mutable std::mutex m_mutex;
    std::map<std::pair<uint64_t, uint64_t>, Recorded> m_files;
};

Inputs& inputs()
{
    static Inputs all;
    return all;
}

bool within(const std::string& path, const std::string& dir)
{
    if (dir.empty())
        return false;
    if (dir == "/")
        return true;
    return path.size() >= dir.size() && path.compare(0, dir.size(), dir) == 0
        && (path.size() == dir.size() || path[dir.size()] == '/');
}

} // namespace

ReadableFile::~ReadableFile()
{
    if (m_fd >= 0)
        ::close(m_fd);
}

ReadableFile::ReadableFile(ReadableFile&& other) noexcept
    : m_fd(other.m_fd)
    , m_size(other.m_size)
{
    other.m_fd = -1;
}

ReadableFile& ReadableFile::operator=(ReadableFile&& other) noexcept
{
    if (this != &other) {
        if (m_fd >= 0)
            ::close(m_fd);
        m_fd = other.m_fd;
        m_size = other.m_size;
        other.m_fd = -1;
    }
    return *this;
}

ReadableFile openRegularFile(const std::string& path, InputKind kind)
{
    struct stat before { };
    if (::stat(path.c_str(), &before) != 0)
        throw LoadError(path, std::string("cannot open: ") + std::strerror(errno));
    if (!S_ISREG(before.st_mode))
        throw LoadError(path, notRegular(before.st_mode));
    // O_NONBLOCK: a FIFO put in its place after the stat above must not block the open; it does nothing to
    // a regular file's reads, and is cleared below all the same.
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        throw LoadError(path, std::string("cannot open: ") + std::strerror(errno));
    ReadableFile file(fd, 0); // closed on the way out of a throw
    struct stat st { };
    if (::fstat(fd, &st) != 0)
        throw LoadError(path, std::string("cannot stat: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode))
        throw LoadError(path, notRegular(st.st_mode));
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0)
        ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    inputs().add(st, path, kind);
    file.m_size = static_cast<uint64_t>(st.st_size);
    return file;
}

void recordInput(const std::string& path, InputKind kind)
{
    struct stat st { };
    if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
        inputs().add(st, path, kind);
}

std::string inputReachedBy(const std::string& outputPath, unsigned kinds)
{
    struct stat st { };
    if (::stat(outputPath.c_str(), &st) != 0)
        return {};
    return inputs().find(st, kinds);
}

void refuseOutputOntoInput(const std::string& outputPath, unsigned kinds)
{
    const std::string input = inputReachedBy(outputPath, kinds);
    if (input.empty())
        return;
    if (input == outputPath)
        throw LoadError(outputPath, "is an input; inputs are never written over, so nothing was written");
    throw LoadError(outputPath,
        "would overwrite the input " + input
            + " (the same file); inputs are never written over, so nothing was written");
}

CheckpointFolder::CheckpointFolder(const std::string& folder)
{
    std::error_code ec;
    fs::path root = fs::canonical(folder.empty() ? std::string(".") : folder, ec);
    if (ec)
        return; // not there: nothing in it opens either
    m_root = root.string();
    // The shortcut in resolve() needs the folder's spelling to name the folder: a ".." after a symlink
    // ("link/..") leaves the symlink's target, which the lexical form does not know.
    m_shortcut = true;
    for (const auto& part : fs::path(folder))
        m_shortcut = m_shortcut && part != "..";
    m_prefix = fs::path(folder).lexically_normal().string();
    if (m_prefix == "." || m_prefix == "./")
        m_prefix.clear();
    else if (!m_prefix.ends_with('/'))
        m_prefix += '/';
    const fs::path snapshots = root.parent_path();
    const std::string repo = snapshots.parent_path().filename().string();
    if (snapshots.filename() == "snapshots"
        && (repo.starts_with("models--") || repo.starts_with("datasets--") || repo.starts_with("spaces--")))
        m_blobs = (snapshots.parent_path() / "blobs").string();
}

std::string CheckpointFolder::resolve(const std::string& path) const
{
    // A file directly in the folder that is no symlink resolves to the resolved folder plus its name: one
    // lstat, where canonical() reads every component's link (an index's 163 shards took 1.2 ms that way).
    if (m_shortcut && std::string_view(path).starts_with(m_prefix)) {
        const std::string_view leaf = std::string_view(path).substr(m_prefix.size());
        struct stat st { };
        if (!leaf.empty() && leaf != "." && leaf != ".." && leaf.find('/') == std::string_view::npos
            && ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
            return (m_root.ends_with('/') ? m_root : m_root + '/') + std::string(leaf);
    }
    std::error_code ec;
    const fs::path resolved = fs::canonical(path, ec);
    return ec ? std::string() : resolved.string();
}

bool CheckpointFolder::holds(const std::string& resolved) const
{
    return within(resolved, m_root) || within(resolved, m_blobs);
}

std::string CheckpointFolder::leadsOutside(const std::string& path) const
{
    const std::string r = resolve(path);
    return r.empty() || holds(r) ? std::string() : r;
}

} // namespace sl
