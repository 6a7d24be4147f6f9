#include "timings.h"

#include <sys/resource.h>

namespace sl {

uint64_t peakResidentBytes()
{
    rusage u {};
    if (getrusage(RUSAGE_SELF, &u) != 0)
        return 0;
    return static_cast<uint64_t>(u.ru_maxrss) * 1024; // Linux reports kilobytes
}

} // namespace sl
