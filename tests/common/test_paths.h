#pragma once
// Where tests find their inputs and the executable under test.

#include <QByteArray>
#include <QDir>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QProcess>
#include <QString>
#include <QStringList>

#include <csignal>

namespace sl::test {

inline QString sourceDir()
{
    return QStringLiteral(STATELENS_SOURCE_DIR);
}
// Sanitizer builds reserve terabytes of shadow address space, so tests that run under `ulimit -v` skip there.
inline constexpr bool sanitized()
{
#if defined(STATELENS_SANITIZED) && STATELENS_SANITIZED
    return true;
#else
    return false;
#endif
}

inline QString fixturesDir()
{
    return sourceDir() + QStringLiteral("/tests/fixtures");
}
inline QString statelensBinary()
{
    return QStringLiteral(STATELENS_BINARY);
}

// ../shared (or $STATELENS_SHARED_DIR); empty when it is not there, so suites can QSKIP.
inline QString sharedDir()
{
    QString dir = qEnvironmentVariable("STATELENS_SHARED_DIR", QStringLiteral(STATELENS_DEFAULT_SHARED_DIR));
    return QFileInfo(dir + QStringLiteral("/fixtures/real")).isDir() ? QDir(dir).absolutePath() : QString();
}
inline QString realFixturesDir()
{
    QString s = sharedDir();
    return s.isEmpty() ? QString() : s + QStringLiteral("/fixtures/real");
}

// Debian's torch lives in /usr/bin/python3; the python3 on PATH may be another interpreter.
inline QString torchPython()
{
    return QStringLiteral("/usr/bin/python3");
}
inline bool haveTorchPython()
{
    static const bool have = [] {
        QProcess p;
        p.start(torchPython(), { QStringLiteral("-c"), QStringLiteral("import torch") });
        return p.waitForFinished(60000) && p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0;
    }();
    return have;
}

struct RunResult {
    int exitCode = -1; // -1 when it crashed or was killed at the timeout
    bool timedOut = false; // killed at the timeout, so a regression fails instead of hanging ctest
    double seconds = 0; // wall time of the child
    QByteArray out;
    QByteArray err;
    qint64 peakKb = -1; // peak resident set of the child, from runMeasured()
};

inline RunResult run(const QString& program, const QStringList& args, int timeoutMs = 120000)
{
    QProcess p;
    QElapsedTimer clock;
    clock.start();
    p.start(program, args);
    RunResult r;
    const bool finished = p.waitForFinished(timeoutMs);
    r.seconds = clock.nsecsElapsed() / 1e9;
    if (!finished) {
        p.kill();
        p.waitForFinished();
        r.timedOut = true;
        r.err = "timed out";
        return r;
    }
    r.exitCode = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    r.out = p.readAllStandardOutput();
    r.err = p.readAllStandardError();
    return r;
}

inline RunResult runStatelens(const QStringList& args, int timeoutMs = 120000)
{
    return run(statelensBinary(), args, timeoutMs);
}

// run() under GNU time (a test dependency, see setup.sh): the child's own peak resident set, which a
// child forked from this process could not report apart from ours (Linux keeps the pre-exec peak). The
// child is killed at the timeout by coreutils' timeout, so it is not left running behind GNU time.
inline RunResult runMeasured(const QString& program, const QStringList& args, int timeoutMs = 120000)
{
    static const QByteArray marker = "statelens-test-peak-kb=";
    RunResult r = run(QStringLiteral("/usr/bin/time"),
        QStringList { QStringLiteral("-f"), QString::fromLatin1(marker) + QStringLiteral("%M"), QStringLiteral("timeout"),
            QStringLiteral("-s"), QStringLiteral("KILL"), QString::number(timeoutMs / 1000.0, 'f', 3), program }
            + args,
        timeoutMs + 10000);
    if (r.exitCode == 128 + SIGKILL) {
        r.timedOut = true;
        r.exitCode = -1;
    }
    const qsizetype at = r.err.lastIndexOf(marker);
    if (at >= 0) {
        r.peakKb = r.err.mid(at + marker.size()).trimmed().toLongLong();
        r.err.truncate(at);
    }
    // GNU time reports a child's non-zero exit on stderr too ("Command exited with non-zero status N").
    if (const qsizetype note = r.err.lastIndexOf("Command exited with non-zero status"); note >= 0)
        r.err.truncate(note);
    return r;
}

} // namespace sl::test
