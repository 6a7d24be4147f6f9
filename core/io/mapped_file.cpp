#include "mapped_file.h"

#include "util/error.h"

#include <cerrno>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

namespace sl {

void populate(const void* data, size_t size)
{
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
    if (size == 0)
        return;
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<uintptr_t>(data) & ~(page - 1);
    const auto end = reinterpret_cast<uintptr_t>(data) + size;
    if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_READ) != 0) // a hint; errors do not matter
        ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);
}

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path, InputKind kind)
{
    const ReadableFile file = openRegularFile(path, kind);
    std::shared_ptr<MappedFile> f(new MappedFile);
    f->m_path = path;
    f->m_size = static_cast<size_t>(file.size());
    if (f->m_size > 0) {
        void* p = ::mmap(nullptr, f->m_size, PROT_READ, MAP_PRIVATE, file.fd(), 0);
        if (p == MAP_FAILED)
            throw LoadError(path, std::string("cannot map: ") + std::strerror(errno));
        f->m_data = static_cast<const uint8_t*>(p);
        f->m_mapped = true;
    }
    return f;
}

std::shared_ptr<const MappedFile> MappedFile::fromBuffer(std::string name, std::vector<uint8_t> bytes)
{
    std::shared_ptr<MappedFile> f(new MappedFile);
    f->m_path = std::move(name);
    f->m_owned = std::move(bytes);
    f->m_data = f->m_owned.data();
    f->m_size = f->m_owned.size();
    return f;
}

MappedFile::~MappedFile()
{
    if (m_mapped)
        ::munmap(const_cast<uint8_t*>(m_data), m_size);
}

} // namespace sl
