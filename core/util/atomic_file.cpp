#include "atomic_file.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace sl {

namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& path, const char* what, int err)
{
    throw std::runtime_error(path + ": " + what + ": " + std::strerror(err));
}

void writeAll(int fd, std::string_view contents, const std::string& path, const std::function<void()>& cleanup)
{
    size_t done = 0;
    while (done < contents.size()) {
        ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            const int err = errno;
            cleanup();
            fail(path, "cannot write", err);
        }
        done += static_cast<size_t>(n);
    }
}

// A temporary file beside `target`, flushed, then renamed over it. `mode`: the permissions to keep (those of
// the file replaced), else an ordinary file's (0666 less the umask; mkstemp creates 0600).
void replaceAtomically(
    const std::string& path, const std::string& target, std::string_view contents, std::optional<mode_t> mode)
{
    std::string tmp = target + ".tmp-XXXXXX";
    int fd = ::mkstemp(tmp.data());
    if (fd < 0)
        fail(path, "cannot create a temporary file", errno);
    auto discard = [&] {
        ::close(fd);
        ::unlink(tmp.c_str());
    };
    writeAll(fd, contents, path, discard);
    if (!mode) {
        const mode_t mask = ::umask(0);
        ::umask(mask);
        mode = 0666 & ~mask;
    }
    ::fchmod(fd, *mode);
    if (::fsync(fd) != 0) {
        const int err = errno;
        discard();
        fail(path, "cannot flush", err);
    }
    if (::close(fd) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        fail(path, "cannot close", err);
    }
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        fail(path, "cannot replace", err);
    }
}

// A FIFO or a device is written into, as a shell's `>` would: replacing it would leave the reader with
// nothing and, for `-o /dev/null` run as root, put a regular file where /dev/null was. Opening a FIFO waits
// for its reader.
void writeInto(const std::string& path, std::string_view contents)
{
    int fd = ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        fail(path, "cannot open", errno);
    writeAll(fd, contents, path, [&] { ::close(fd); });
    if (::close(fd) != 0)
        fail(path, "cannot close", errno);
}

// Where a write to `path` lands when it does not exist: itself, or the end of its (dangling) symlinks.
std::string danglingTarget(const std::string& path)
{
    fs::path p(path);
    for (int hops = 0; hops < 40; ++hops) {
        std::error_code ec;
        if (!fs::is_symlink(fs::symlink_status(p, ec)))
            return p.string();
        const fs::path next = fs::read_symlink(p, ec);
        if (ec)
            fail(path, "cannot read the symlink", ec.value());
        p = next.is_absolute() ? next : p.parent_path() / next;
    }
    fail(path, "cannot follow the symlink", ELOOP);
}

} // namespace

void writeFileAtomically(const std::string& path, std::string_view contents)
{
    struct stat st { };
    if (::stat(path.c_str(), &st) != 0) {
        if (errno != ENOENT)
            fail(path, "cannot write", errno);
        replaceAtomically(path, danglingTarget(path), contents, std::nullopt);
        return;
    }
    if (S_ISDIR(st.st_mode))
        throw std::runtime_error(path + ": is a directory; give a file name to write to");
    if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
        writeInto(path, contents); // through symlinks, /dev/stdout's to a pipe included
        return;
    }
    if (!S_ISREG(st.st_mode))
        throw std::runtime_error(path + ": is a socket or another special file, not a file to write to");
    // A regular file, perhaps behind symlinks: replaced where it is, so a symlink keeps pointing at it.
    char resolved[PATH_MAX];
    if (!::realpath(path.c_str(), resolved))
        fail(path, "cannot resolve", errno);
    replaceAtomically(path, resolved, contents, st.st_mode & 0777);
}

} // namespace sl
