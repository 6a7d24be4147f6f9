#include "child_process.h"

#include "util/sanitizers.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>


namespace sl {

namespace {

using Clock = std::chrono::steady_clock;

void closeFd(int& fd)
{
    if (fd >= 0)
        ::close(fd);
    fd = -1;
}

struct Pipe {
    int r = -1;
    int w = -1;
    bool open() { return ::pipe2(&r, O_CLOEXEC) == 0; }
    ~Pipe()
    {
        closeFd(r);
        closeFd(w);
    }
};

// Only async-signal-safe calls from here to execv: the parent may have other threads (and their locks).
[[noreturn]] void childSide(char* const* argv, int in, int out, int err, int extraFd, int execErr,
    const struct rlimit* as, int maxFd, pid_t parent)
{
    ::setpgid(0, 0); // its own process group, so a timeout kills whatever it started too
    ::prctl(PR_SET_PDEATHSIG, SIGKILL); // and it dies with us
    if (::getppid() != parent)
        ::_exit(127);
    // Move the extra descriptor out of the way before 0..2 are overwritten.
    int extra = extraFd >= 0 ? ::fcntl(extraFd, F_DUPFD, 10) : -1;
    if (::dup2(in, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0)
        ::_exit(127);
    if (extra >= 0 && ::dup2(extra, 3) < 0)
        ::_exit(127);
    // Everything else is closed at exec (execErr is already close-on-exec and reports a failed exec).
    const int first = extra >= 0 ? 4 : 3;
#ifdef SYS_close_range
    constexpr unsigned kCloseRangeCloexec = 1u << 2; // CLOSE_RANGE_CLOEXEC, Linux >= 5.11
    if (::syscall(SYS_close_range, first, ~0u, kCloseRangeCloexec) != 0)
#endif
        for (int fd = first; fd < maxFd; ++fd)
            if (fd != execErr)
                ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    struct rlimit noCore = { 0, 0 };
    ::setrlimit(RLIMIT_CORE, &noCore); // a crash on a hostile file should not leave a core dump behind
    if (as)
        ::setrlimit(RLIMIT_AS, as);
    // Signal state is inherited across exec: start the child with defaults and nothing blocked.
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int s : { SIGPIPE, SIGINT, SIGTERM, SIGCHLD, SIGSEGV, SIGABRT, SIGBUS })
        ::sigaction(s, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execv(argv[0], argv);
    int e = errno;
    ssize_t ignored = ::write(execErr, &e, sizeof e);
    (void)ignored;
    ::_exit(127);
}

void killGroup(pid_t pid)
{
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
}

int waitBlocking(pid_t pid)
{
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
}

} // namespace

std::string signalDescription(int sig)
{
    const char* name = nullptr;
    switch (sig) {
    case SIGSEGV: name = "SIGSEGV"; break;
    case SIGABRT: name = "SIGABRT"; break;
    case SIGBUS: name = "SIGBUS"; break;
    case SIGILL: name = "SIGILL"; break;
    case SIGFPE: name = "SIGFPE"; break;
    case SIGKILL: name = "SIGKILL"; break;
    case SIGTERM: name = "SIGTERM"; break;
    case SIGXCPU: name = "SIGXCPU"; break;
    default: break;
    }
    const char* what = ::strsignal(sig);
    std::string out = name ? std::string(name) : "signal " + std::to_string(sig);
    if (what)
        out += std::string(" (") + what + ")";
    return out;
}

ChildResult runChild(const std::vector<std::string>& argv, const ChildLimits& limits, int extraFd)
{
    ChildResult r;
    const auto start = Clock::now();
    auto elapsedMs = [&] { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); };
    if (argv.empty()) {
        r.startError = "no program to run";
        return r;
    }
    // Everything the child needs is prepared before fork: it must not allocate.
    std::vector<char*> args;
    for (const auto& a : argv)
        args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    struct rlimit as = { limits.addressSpaceBytes, limits.addressSpaceBytes };
    // AddressSanitizer's shadow memory would not fit an RLIMIT_AS that is sane for LibTorch: the child of a
    // sanitized build runs unlimited, or it would stop before main().
    const struct rlimit* asLimit = limits.addressSpaceBytes && !kAddressSanitizer ? &as : nullptr;
    struct rlimit files = { 1024, 1024 };
    ::getrlimit(RLIMIT_NOFILE, &files);
    const int maxFd = static_cast<int>(std::min<rlim_t>(files.rlim_cur, 65536));

    int devNull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    Pipe out, err, execErr;
    if (devNull < 0 || !out.open() || !err.open() || !execErr.open()) {
        r.startError = std::string("cannot create pipes: ") + std::strerror(errno);
        closeFd(devNull);
        return r;
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
        r.startError = std::string("fork failed: ") + std::strerror(errno);
        closeFd(devNull);
        return r;
    }
    if (pid == 0)
        childSide(args.data(), devNull, out.w, err.w, extraFd, execErr.w, asLimit, maxFd, parent);

    closeFd(devNull);
    closeFd(out.w);
    closeFd(err.w);
    closeFd(execErr.w);
    // EOF when exec succeeded (close-on-exec), or the child's errno when it failed.
    int execErrno = 0;
    ssize_t n;
    while ((n = ::read(execErr.r, &execErrno, sizeof execErrno)) < 0 && errno == EINTR) {
    }
    if (n == static_cast<ssize_t>(sizeof execErrno)) {
        waitBlocking(pid);
        r.startError = "cannot run " + argv[0] + ": " + std::strerror(execErrno);
        r.milliseconds = elapsedMs();
        return r;
    }

    const auto deadline = start + std::chrono::milliseconds(limits.timeoutMs);
    bool timedOut = false;
    bool tooLarge = false;
    struct pollfd fds[2] = { { out.r, POLLIN, 0 }, { err.r, POLLIN, 0 } };
    std::string* sinks[2] = { &r.out, &r.err };
    const uint64_t caps[2] = { limits.maxStdout, limits.maxStderr };
    char buf[65536];
    while ((fds[0].fd >= 0 || fds[1].fd >= 0) && !timedOut && !tooLarge) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) {
            timedOut = true;
            break;
        }
        int ready = ::poll(fds, 2, static_cast<int>(std::min<long long>(left, 1000)));
        if (ready < 0 && errno != EINTR) {
            timedOut = true; // cannot watch it any more: treat as lost, kill it below
            break;
        }
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
            if (got < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (got <= 0) {
                ::close(fds[i].fd);
                fds[i].fd = -1;
                continue;
            }
            std::string& sink = *sinks[i];
            const uint64_t room = caps[i] > sink.size() ? caps[i] - sink.size() : 0;
            if (static_cast<uint64_t>(got) > room) {
                sink.append(buf, static_cast<size_t>(room));
                if (i == 0)
                    tooLarge = true; // stdout is the answer: a truncated one is no answer
            } else {
                sink.append(buf, static_cast<size_t>(got));
            }
        }
    }
    // Both pipes closed (or we gave up): wait for the exit, still against the deadline. WNOWAIT keeps the
    // child a zombie until its process group has been killed, so its pid cannot be reused meanwhile.
    while (!timedOut && !tooLarge) {
        siginfo_t info;
        std::memset(&info, 0, sizeof info);
        int w = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 || info.si_pid == pid)
            break;
        if (Clock::now() >= deadline) {
            timedOut = true;
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    killGroup(pid); // stragglers it started, or the child itself on timeout / too much output
    int status = waitBlocking(pid);
    for (auto& f : fds)
        if (f.fd >= 0)
            ::close(f.fd);
    out.r = err.r = -1;
    r.milliseconds = elapsedMs();
    if (timedOut) {
        r.end = ChildResult::End::TimedOut;
    } else if (tooLarge) {
        r.end = ChildResult::End::OutputTooLarge;
    } else if (WIFEXITED(status)) {
        r.end = ChildResult::End::Exited;
        r.exitCode = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        r.end = ChildResult::End::Signaled;
        r.signal = WTERMSIG(status);
    } else {
        r.end = ChildResult::End::Signaled;
    }
    return r;
}

} // namespace sl
