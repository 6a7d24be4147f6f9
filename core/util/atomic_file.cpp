#include "atomic_file.h"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
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

// Throws on failure; OutputFile's destructor then removes its temporary file.
void writeAll(int fd, std::string_view contents, const std::string& path)
{
    size_t done = 0;
    while (done < contents.size()) {
        ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fail(path, "cannot write", errno);
        }
        done += static_cast<size_t>(n);
    }
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
    if (path.empty() || path == "-")
        throw std::runtime_error("no file name to write to");
    OutputFile out(path);
    out.write(contents);
    out.commit();
}

OutputFile::OutputFile(const std::string& path)
    : m_path(path)
{
    if (path.empty() || path == "-") {
        m_stdout = true;
        m_fd = STDOUT_FILENO;
        std::fflush(stdout); // what was printed through stdio comes first
        return;
    }
    struct stat st { };
    if (::stat(path.c_str(), &st) != 0) {
        if (errno != ENOENT)
            fail(path, "cannot write", errno);
        m_target = danglingTarget(path);
    } else if (S_ISDIR(st.st_mode)) {
        throw std::runtime_error(path + ": is a directory; give a file name to write to");
    } else if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
        // A FIFO or a device is written into, as a shell's `>` would: replacing it would leave the reader
        // with nothing and, for `-o /dev/null` run as root, put a regular file where /dev/null was. Opening a
        // FIFO waits for its reader; symlinks are followed (/dev/stdout's to a pipe included).
        m_fd = ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
        if (m_fd < 0)
            fail(path, "cannot open", errno);
        return;
    } else if (!S_ISREG(st.st_mode)) {
        throw std::runtime_error(path + ": is a socket or another special file, not a file to write to");
    } else {
        // A regular file, perhaps behind symlinks: replaced where it is, so a symlink keeps pointing at it.
        char resolved[PATH_MAX];
        if (!::realpath(path.c_str(), resolved))
            fail(path, "cannot resolve", errno);
        m_target = resolved;
        m_keepMode = static_cast<int>(st.st_mode & 0777);
    }
    m_temporary = m_target + ".tmp-XXXXXX";
    m_fd = ::mkstemp(m_temporary.data());
    if (m_fd < 0)
        fail(path, "cannot create a temporary file", errno);
}

OutputFile::~OutputFile()
{
    if (m_fd < 0 || m_stdout)
        return;
    ::close(m_fd);
    if (!m_temporary.empty())
        ::unlink(m_temporary.c_str());
}

void OutputFile::write(std::string_view bytes)
{
    // Small parts are gathered into writes of up to 1 MiB; a part of 64 KiB or more (a chunk of table rows)
    // is written as it is, after what was gathered: copying it first cost a tenth of writing a table.
    constexpr size_t kBuffered = size_t(1) << 20, kWrittenAsIs = size_t(1) << 16;
    if (m_fd < 0)
        throw std::runtime_error(m_path + ": written after it was committed");
    if (m_buffer.size() + bytes.size() > kBuffered || bytes.size() >= kWrittenAsIs)
        flush();
    if (bytes.size() >= kWrittenAsIs)
        writeAll(m_fd, bytes, m_path);
    else
        m_buffer.append(bytes);
}

void OutputFile::flush()
{
    writeAll(m_fd, m_buffer, m_path);
    m_buffer.clear();
}

void OutputFile::commit()
{
    flush();
    const int fd = m_fd;
    if (m_stdout || m_temporary.empty()) {
        m_fd = -1;
        if (!m_stdout && ::close(fd) != 0)
            fail(m_path, "cannot close", errno);
        return;
    }
    mode_t mode;
    if (m_keepMode >= 0) {
        mode = static_cast<mode_t>(m_keepMode);
    } else { // an ordinary file's: 0666 less the umask (mkstemp creates 0600)
        const mode_t mask = ::umask(0);
        ::umask(mask);
        mode = 0666 & ~mask;
    }
    ::fchmod(fd, mode);
    if (::fsync(fd) != 0)
        fail(m_path, "cannot flush", errno); // the destructor removes the temporary file
    m_fd = -1;
    if (::close(fd) != 0) {
        const int err = errno;
        ::unlink(m_temporary.c_str());
        fail(m_path, "cannot close", err);
    }
    if (::rename(m_temporary.c_str(), m_target.c_str()) != 0) {
        const int err = errno;
        ::unlink(m_temporary.c_str());
        fail(m_path, "cannot replace", err);
    }
}

} // namespace sl
