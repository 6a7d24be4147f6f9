#include "heap_tuning.h"

#include "util/sanitizers.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <malloc.h>
#include <string>
#include <unistd.h>

namespace sl::app {

namespace {

// Set on the fresh copy: "=" and the user's own GLIBC_TUNABLES, or "-" when they had none. The copy puts
// the environment back as it was, so any child process (the TorchScript worker) sees the user's.
constexpr const char* kReexecMarker = "STATELENS_HEAP_REEXEC";
constexpr const char* kHugePageTunable = "glibc.malloc.hugetlb=1";

// glibc hands large freed blocks back to the kernel, so every stage (each shard's entries, the merged list,
// the grouped list, the report) faulted in fresh zeroed pages: a third of listing a 90,000-tensor index was
// page faults. Keeping freed memory for reuse costs no peak (the peak is reached anyway).
void keepFreedMemory()
{
    constexpr int kLarge = 256 << 20; // blocks above this are still mapped and unmapped on their own
    mallopt(M_MMAP_THRESHOLD, kLarge);
    mallopt(M_TRIM_THRESHOLD, kLarge);
}

// Whether the kernel would back madvise(MADV_HUGEPAGE) memory with huge pages ("always" or "madvise").
bool kernelOffersHugePages()
{
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string line;
    return std::getline(in, line) && line.find("[never]") == std::string::npos;
}

} // namespace

void shareOneHeapArena()
{
    if (!kSanitizerAllocator)
        mallopt(M_ARENA_MAX, 1);
}

void tuneHeapForHeadlessRun(char** argv)
{
    keepFreedMemory();
    if (const char* marker = std::getenv(kReexecMarker)) {
        // The fresh copy: glibc has read the tunable; restore the user's environment.
        if (marker[0] == '=')
            ::setenv("GLIBC_TUNABLES", marker + 1, 1);
        else
            ::unsetenv("GLIBC_TUNABLES");
        ::unsetenv(kReexecMarker);
        return;
    }
    // Listing builds hundreds of thousands of entries, and the kernel's per-page work on first touch (a fault,
    // zeroing, accounting per 4 KiB page) was a third to a half of the CPU time of listing large files
    // (cases a, c and s2 of the benchmark). In 2 MiB pages the same memory costs a few hundred faults. glibc
    // advises its heap into huge pages only when its tunable is set at start-up, before main: so the process
    // runs itself again with it. Skipped where it would not help: no huge pages, a sanitizer's allocator, or
    // a user who already chose the tunable.
    const char* user = std::getenv("GLIBC_TUNABLES");
    if (kSanitizerAllocator || (user && std::strstr(user, "glibc.malloc.hugetlb")) || !kernelOffersHugePages())
        return;
    std::string tunables = user && *user ? std::string(user) + ":" + kHugePageTunable : kHugePageTunable;
    std::string marker = user ? std::string("=") + user : std::string("-");
    if (::setenv(kReexecMarker, marker.c_str(), 1) != 0 || ::setenv("GLIBC_TUNABLES", tunables.c_str(), 1) != 0)
        return;
    ::execv("/proc/self/exe", argv);
    // No /proc, or exec refused: run on as we are, with the environment as it was.
    ::unsetenv(kReexecMarker);
    if (user)
        ::setenv("GLIBC_TUNABLES", user, 1);
    else
        ::unsetenv("GLIBC_TUNABLES");
}

} // namespace sl::app
