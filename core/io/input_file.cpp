#include "input_file.h"

#include "util/error.h"

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <unistd.h>

namespace sl {

int preadFully(int fd, uint64_t offset, uint8_t* out, uint64_t length)
{
    uint64_t done = 0;
    while (done < length) {
        const ssize_t n = ::pread(fd, out + done, static_cast<size_t>(std::min<uint64_t>(length - done, uint64_t(1) << 30)),
            static_cast<off_t>(offset + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno;
        if (n == 0)
            return -1;
        done += static_cast<uint64_t>(n);
    }
    return 0;
}

std::shared_ptr<const InputFile> InputFile::open(const std::string& path, InputKind kind)
{
    ReadableFile file = openRegularFile(path, kind);
    std::shared_ptr<InputFile> f(new InputFile);
    f->m_path = path;
    f->m_size = file.size();
    f->m_fd = file.release();
    return f;
}

std::shared_ptr<const InputFile> InputFile::fromBuffer(std::string name, std::vector<uint8_t> bytes)
{
    std::shared_ptr<InputFile> f(new InputFile);
    f->m_path = std::move(name);
    f->m_buffer = std::move(bytes);
    f->m_size = f->m_buffer.size();
    return f;
}

InputFile::~InputFile()
{
    if (m_fd >= 0)
        ::close(m_fd);
}

void InputFile::checkRange(uint64_t offset, uint64_t length) const
{
    if (offset > m_size || length > m_size - offset)
        throw FormatError("bytes " + std::to_string(offset) + " to " + std::to_string(offset + length) + " lie past the end of the "
            + std::to_string(m_size) + "-byte file");
}

void InputFile::readAt(uint64_t offset, uint8_t* out, uint64_t length) const
{
    const int rc = preadFully(m_fd, offset, out, length);
    if (rc > 0)
        throw LoadError(m_path, std::string("cannot read: ") + std::strerror(rc));
    if (rc < 0)
        throw LoadError(m_path, "changed while reading: it ends before byte " + std::to_string(offset + length)
                + " of the " + std::to_string(m_size) + " it had when opened");
}

Bytes InputFile::read(uint64_t offset, uint64_t length, std::vector<uint8_t>& buffer) const
{
    checkRange(offset, length);
    // Copied for in-memory files too: what a reader keeps then lives exactly as long as it does from disk
    // (a view into the buffer outlived the file once, in a pickle's names).
    buffer.resize(static_cast<size_t>(length));
    readInto(offset, buffer);
    return buffer;
}

void InputFile::readInto(uint64_t offset, std::span<uint8_t> out) const
{
    checkRange(offset, out.size());
    if (m_fd < 0)
        std::copy_n(m_buffer.data() + offset, out.size(), out.data());
    else
        readAt(offset, out.data(), out.size());
}

std::shared_ptr<const Region> InputFile::region(uint64_t offset, uint64_t length) const
{
    checkRange(offset, length);
    auto r = std::make_shared<Region>();
    r->m_offset = offset;
    // Not zeroed first: a 78 MB .metadata was cleared and then overwritten.
    r->m_owned = std::make_unique_for_overwrite<uint8_t[]>(static_cast<size_t>(length));
    readInto(offset, std::span<uint8_t>(r->m_owned.get(), static_cast<size_t>(length)));
    r->m_bytes = Bytes(r->m_owned.get(), static_cast<size_t>(length));
    return r;
}

void InputFile::refuseLargerThan(uint64_t maxSize, const char* what) const
{
    if (m_size > maxSize)
        throw LoadError(m_path, std::string("a ") + what + " of " + std::to_string(m_size) + " bytes is larger than any StateLens reads ("
                + std::to_string(maxSize >> 20) + " MiB)");
}

std::shared_ptr<const Region> InputFile::whole(uint64_t maxSize, const char* what) const
{
    refuseLargerThan(maxSize, what);
    return region(0, m_size);
}

Bytes InputFile::prefix(uint64_t length, std::vector<uint8_t>& buffer) const
{
    return read(0, std::min(length, m_size), buffer);
}

} // namespace sl
