#pragma once
// Runs another program with a deadline, an address-space limit and capped output, for work that must not
// run in this process: loading a TorchScript archive executes code from the file (its __setstate__
// methods) inside LibTorch, which can crash, hang or allocate without bound on malformed input.
//
// POSIX fork + exec. Between the two the child only makes async-signal-safe calls (setrlimit, dup2,
// close, execv), so this is safe from a multi-threaded caller (the GUI loads on worker threads); every
// pipe is close-on-exec, so children started concurrently never hold each other's pipes open.

#include <cstdint>
#include <string>
#include <vector>

namespace sl {

struct ChildLimits {
    unsigned timeoutMs = 60'000; // wall clock, from fork to exit; then the child's process group is killed
    uint64_t addressSpaceBytes = 0; // RLIMIT_AS in the child; 0 for none (ignored in ASan builds, see .cpp)
    uint64_t maxStdout = 256u << 20; // more than this kills the child (OutputTooLarge)
    uint64_t maxStderr = 64u << 10; // the first this many bytes are kept, the rest drained and dropped
};

struct ChildResult {
    enum class End : uint8_t {
        Exited, // exitCode is valid
        Signaled, // killed by `signal` (a crash: SIGSEGV, SIGABRT, SIGKILL from the kernel's OOM killer, ...)
        TimedOut, // ran past timeoutMs and was killed
        OutputTooLarge, // wrote more than maxStdout and was killed
        StartFailed, // fork, pipe or exec failed; `startError` says why
    };
    End end = End::StartFailed;
    int exitCode = -1;
    int signal = 0;
    std::string out;
    std::string err;
    std::string startError;
    double milliseconds = 0;
};

// Runs argv (argv[0] is a path to the program, not looked up in PATH) with stdin from /dev/null.
// `extraFd`, when >= 0, is passed to the child as descriptor 3. Never throws for anything the child does.
ChildResult runChild(const std::vector<std::string>& argv, const ChildLimits& limits, int extraFd = -1);

// "SIGSEGV (segmentation fault)" and the like.
std::string signalDescription(int signal);

} // namespace sl
