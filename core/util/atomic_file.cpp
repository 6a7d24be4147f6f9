#include "atomic_file.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace sl {

void writeFileAtomically(const std::string& path, std::string_view contents)
{
    std::string tmp = path + ".tmp-XXXXXX";
    int fd = ::mkstemp(tmp.data());
    if (fd < 0)
        throw std::runtime_error(path + ": cannot create a temporary file: " + std::strerror(errno));
    auto fail = [&](const char* what) {
        int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        throw std::runtime_error(path + ": " + what + ": " + std::strerror(err));
    };
    size_t done = 0;
    while (done < contents.size()) {
        ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fail("cannot write");
        }
        done += static_cast<size_t>(n);
    }
    // mkstemp creates 0600; outputs are ordinary files.
    mode_t mask = ::umask(0);
    ::umask(mask);
    ::fchmod(fd, 0666 & ~mask);
    if (::fsync(fd) != 0)
        fail("cannot flush");
    if (::close(fd) != 0) {
        int err = errno;
        ::unlink(tmp.c_str());
        throw std::runtime_error(path + ": cannot close: " + std::strerror(err));
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        int err = errno;
        ::unlink(tmp.c_str());
        throw std::runtime_error(path + ": cannot replace: " + std::strerror(err));
    }
}

} // namespace sl
