#pragma once
// Where tests find their inputs and the executable under test.

#include <QByteArray>
#include <QDir>
#include <QFileInfo>
#include <QProcess>
#include <QString>
#include <QStringList>

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
    int exitCode = -1;
    QByteArray out;
    QByteArray err;
    qint64 peakKb = -1; // peak resident set of the child, from runMeasured()
};

inline RunResult run(const QString& program, const QStringList& args, int timeoutMs = 120000)
{
    QProcess p;
    p.start(program, args);
    RunResult r;
    if (!p.waitForFinished(timeoutMs)) {
        p.kill();
        p.waitForFinished();
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
// child forked from this process could not report apart from ours.
inline RunResult runMeasured(const QString& program, const QStringList& args, int timeoutMs = 120000)
{
    static const QByteArray marker = "statelens-test-peak-kb=";
    RunResult r = run(QStringLiteral("/usr/bin/time"),
        QStringList { QStringLiteral("-f"), QString::fromLatin1(marker) + QStringLiteral("%M"), program } + args,
        timeoutMs);
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
