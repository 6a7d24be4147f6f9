#include "heap_tuning.h"

#include "util/sanitizers.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <malloc.h>
#include <sys/mman.h>
#include <string>
#include <unistd.h>

namespace sl::app {

namespace {

// Set on the fresh copy: "=" and the user's own GLIBC_TUNABLES, or "-" when they had none. The copy puts
// the environment back as it was, so any child process (the TorchScript worker) sees the user's.
constexpr const char* kReexecMarker = "STATELENS_HEAP_REEXEC";
constexpr const char* kHugePageTunable = "glibc.malloc.hugetlb=1";
// A thread's arena heap is advised into huge pages only as far as glibc first maps it (the request plus
// M_TOP_PAD), and it grows from a few pages: so without a pad every thread arena stayed in 4 KiB pages, and
// case d's diff took 10,000 faults (316 ms, median of 15), with it 540-830 (167 ms). 64 MiB is a whole
// thread heap (HEAP_MAX_SIZE), mapped as address space and touched as used.
constexpr const char* kTopPadTunable = "glibc.malloc.top_pad=67108864";

// glibc hands large freed blocks back to the kernel, so every stage (each shard's entries, the merged list,
// the grouped list, the report) faulted in fresh zeroed pages: a third of listing a 90,000-tensor index was
// page faults. Keeping freed memory for reuse costs no peak (the peak is reached anyway).
constexpr int kLarge = 256 << 20; // blocks above this are still mapped and unmapped on their own
void keepFreedMemory()
{
    mallopt(M_MMAP_THRESHOLD, kLarge);
    mallopt(M_TRIM_THRESHOLD, kLarge);
}

// The heap that is advised into huge pages in place: address space only (nothing is touched until used).
// Past it the heap grows in 4 KiB pages. A DCP listing of 256 ranks peaks at 760 MB.
constexpr size_t kAdvisedHeap = size_t(1) << 30;

constexpr uintptr_t kHugePage = uintptr_t(2) << 20, kPage = 4096;

// Where the main heap's free top starts (glibc's keepcost is its size): 16-byte aligned.
uintptr_t freeTop()
{
    const auto end = reinterpret_cast<uintptr_t>(::sbrk(0));
    return end - std::min<uintptr_t>(end, mallinfo2().keepcost);
}

// Takes the main heap's free top up to `boundary` (2 MiB aligned) as one block that is never freed, so that
// what is allocated next starts there, in huge pages. The 2 MiB range the heap starts in is shared with
// whatever lies below the heap, so no huge page can back it, and on a virtual machine like the benchmark's
// 2 MiB cost 5.6 ms in 4 KiB pages (11 us each; filled in bulk with MADV_POPULATE_WRITE, 2.6 ms of first
// writes remain) and 0.1-3.6 ms as one huge page (a test program, 64 MiB each way). The block's pages are
// never touched: glibc writes a header at each end, at its start (in a page the heap uses already) and at
// `boundary` (the free top's, in the first huge page, which is used next anyway).
void startHeapAt(uintptr_t boundary)
{
    static void* skipped = nullptr; // kept, never freed: freed, it would join the free top again
    const auto end = reinterpret_cast<uintptr_t>(::sbrk(0));
    const uintptr_t top = freeTop();
    constexpr uintptr_t kHeader = 8; // glibc's chunk size field: a chunk of n bytes serves n - 8
    if (skipped || boundary >= end || boundary < top + 64)
        return;
    void* block = std::malloc(boundary - top - kHeader);
    if (reinterpret_cast<uintptr_t>(block) != top + 2 * kHeader) {
        std::free(block); // served from elsewhere (a free block): the heap's first pages stay in use
        return;
    }
    skipped = block;
}

// What glibc's tunable does for each heap it makes, done here for the main arena without a fresh process:
// the heap grows once by kAdvisedHeap (M_TOP_PAD for one allocation), kept as its free top (the trim
// threshold above it), and is advised into huge pages. For a command whose threads all allocate from the
// main arena (M_ARENA_MAX 1). False when the heap could not grow (a data-segment limit).
//
// A 2 MiB range that has a page table before the advice stays in 4 KiB pages, each a fault: a few
// microseconds on hardware, 12-16 us on a virtual machine like the benchmark's, where the heap's first
// 2 MiB (data.pkl's first megabytes, read into them) took 500 faults, 6-8 ms of case a's 45, and the range
// of the byte the old 16 MiB probe wrote before the advice 480 more. So the probe is just over the free top
// (the header glibc writes past it lands below the advised range), and allocation starts at the advised
// range's first byte (startHeapAt).
bool adviseMainHeapIntoHugePages()
{
    mallopt(M_TRIM_THRESHOLD, static_cast<int>(kAdvisedHeap) + kLarge);
    mallopt(M_TOP_PAD, static_cast<int>(kAdvisedHeap));
    const struct mallinfo2 heap = mallinfo2(); // keepcost: the heap's free top
    char* const before = static_cast<char*>(::sbrk(0));
    // Just more than the free top, so the heap grows, and glibc's header past the probe lands at `before`.
    // Volatile: a malloc freed unused may be optimised away.
    void* volatile probe = std::malloc(heap.keepcost + 64);
    char* const after = static_cast<char*>(::sbrk(0));
    mallopt(M_TOP_PAD, 128 << 10); // glibc's default again
    std::free(probe);
    const auto b = reinterpret_cast<uintptr_t>(before), a = reinterpret_cast<uintptr_t>(after);
    if (before == reinterpret_cast<char*>(-1) || after == reinterpret_cast<char*>(-1) || a < b || a - b < kAdvisedHeap)
        return false;
    // From the first 2 MiB boundary past the header's page.
    const uintptr_t first = (b + kPage + kHugePage - 1) & ~(kHugePage - 1), last = a & ~(kHugePage - 1);
    if (last <= first || ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE) != 0)
        return false;
    startHeapAt(first);
    return true;
}

// Whether the kernel would back madvise(MADV_HUGEPAGE) memory with huge pages ("always" or "madvise").
bool kernelOffersHugePages()
{
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string line;
    return std::getline(in, line) && line.find("[never]") == std::string::npos;
}

} // namespace

void tuneHeapForHeadlessRun(char** argv, bool oneArena)
{
    keepFreedMemory();
    if (oneArena && !kSanitizerAllocator)
        mallopt(M_ARENA_MAX, 1); // in the fresh copy too, should one be made
    if (const char* marker = std::getenv(kReexecMarker)) {
        // The fresh copy: glibc has read the tunable; restore the user's environment.
        if (marker[0] == '=')
            ::setenv("GLIBC_TUNABLES", marker + 1, 1);
        else
            ::unsetenv("GLIBC_TUNABLES");
        ::unsetenv(kReexecMarker);
        // glibc advised the heap from its start, whose 2 MiB range is in 4 KiB pages: allocate past it.
        startHeapAt((freeTop() + kHugePage - 1) & ~(kHugePage - 1));
        return;
    }
    // Listing builds hundreds of thousands of entries, and the kernel's per-page work on first touch (a fault,
    // zeroing, accounting per 4 KiB page) was a third to a half of the CPU time of listing large files
    // (cases a, c and s2 of the benchmark). In 2 MiB pages the same memory costs a few hundred faults. glibc
    // advises its heaps into huge pages only when its tunable is set at start-up, before main: so the process
    // runs itself again with it, unless one arena serves every thread: that one heap is advised here, and the
    // second start is saved (`ls` of a small file: 4.0 -> 2.6 ms, perf stat). Commands with an arena per
    // thread need the tunable (diff without it: 160 -> 170 ms), and a pad for their arenas (kTopPadTunable).
    // Skipped where it would not help: no huge pages, a sanitizer's allocator, or a user who already chose
    // the tunable.
    const char* user = std::getenv("GLIBC_TUNABLES");
    if (kSanitizerAllocator || (user && std::strstr(user, "glibc.malloc.hugetlb")) || !kernelOffersHugePages())
        return;
    if (oneArena && adviseMainHeapIntoHugePages())
        return;
    std::string tunables = user && *user ? std::string(user) + ":" + kHugePageTunable : kHugePageTunable;
    if (!user || !std::strstr(user, "glibc.malloc.top_pad"))
        tunables = tunables + ":" + kTopPadTunable;
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
