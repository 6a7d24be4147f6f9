#pragma once
// Running the statelens executable as a hostile input would: with a wall-clock guard (a hang fails the
// test instead of stalling ctest) and the child's own peak resident set and time, read with wait4(), so a
// bound on memory or time is checked on that process alone. And safetensors files written by hand, whose
// tensor names are whatever a test needs (control characters included: the header is JSON, so any
// Unicode text fits).

#include <QByteArray>
#include <QFile>
#include <QString>
#include <QStringList>
#include <QTemporaryFile>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace sl::test {

struct MeasuredRun {
    int exitCode = -1; // -1 when killed by a signal or the guard
    bool timedOut = false;
    double seconds = 0;
    long maxRssKb = 0; // the child's peak resident set
    QByteArray out;
    QByteArray err;
};

inline MeasuredRun runMeasured(const QString& program, const QStringList& args, int guardSeconds = 120)
{
    MeasuredRun r;
    QTemporaryFile out, err;
    if (!out.open() || !err.open())
        return r;
    // Everything the child needs is made before fork(): between fork and exec only dup2/execv/_exit run.
    std::vector<std::string> words { program.toStdString() };
    for (const QString& a : args)
        words.push_back(a.toStdString());
    std::vector<char*> argv;
    for (std::string& w : words)
        argv.push_back(w.data());
    argv.push_back(nullptr);
    const int outFd = out.handle();
    const int errFd = err.handle();
    const auto start = std::chrono::steady_clock::now();
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(outFd, 1);
        dup2(errFd, 2);
        execv(argv[0], argv.data());
        _exit(127);
    }
    if (pid < 0)
        return r;
    int status = 0;
    rusage usage {};
    for (;;) {
        const pid_t done = wait4(pid, &status, WNOHANG, &usage);
        if (done == pid)
            break;
        if (std::chrono::steady_clock::now() - start > std::chrono::seconds(guardSeconds)) {
            kill(pid, SIGKILL);
            wait4(pid, &status, 0, &usage);
            r.timedOut = true;
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.maxRssKb = usage.ru_maxrss;
    r.exitCode = !r.timedOut && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    QFile o(out.fileName()), e(err.fileName());
    if (o.open(QIODevice::ReadOnly))
        r.out = o.readAll();
    if (e.open(QIODevice::ReadOnly))
        r.err = e.readAll();
    return r;
}

// A JSON string literal of UTF-8 text, controls as \u00XX.
inline QByteArray jsonString(const QByteArray& utf8)
{
    QByteArray out = "\"";
    for (char c : utf8) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (u < 0x20) {
            out += QByteArray("\\u00") + QByteArray::number(u, 16).rightJustified(2, '0');
        } else {
            out += c;
        }
    }
    return out + "\"";
}

// A safetensors file of one-element float32 tensors with these names (UTF-8), all zero.
inline bool writeSafetensors(const QString& path, const QList<QByteArray>& names)
{
    QByteArray header = "{";
    qint64 offset = 0;
    for (const QByteArray& n : names) {
        if (header.size() > 1)
            header += ',';
        header += jsonString(n) + ":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[" + QByteArray::number(offset)
            + "," + QByteArray::number(offset + 4) + "]}";
        offset += 4;
    }
    header += '}';
    while (header.size() % 8)
        header += ' ';
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly))
        return false;
    const quint64 n = static_cast<quint64>(header.size());
    char size[8];
    for (int i = 0; i < 8; ++i)
        size[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
    f.write(size, 8);
    f.write(header);
    f.write(QByteArray(static_cast<int>(offset), '\0'));
    return f.error() == QFileDevice::NoError;
}

} // namespace sl::test
