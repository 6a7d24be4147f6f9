#pragma once
// Reading what the suites compare against: truth JSON written by real torch next to its fixture, and the
// files the statelens binary wrote.

#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QJsonParseError>
#include <QString>
#include <QtGlobal>

namespace sl::test {

// The file's bytes; empty when it cannot be read.
inline QByteArray readAll(const QString& path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// The file's top-level JSON object; empty when the file is missing, not JSON or not an object (the
// suite's own checks then fail on what they expected in it).
inline QJsonObject readJson(const QString& path)
{
    return QJsonDocument::fromJson(readAll(path)).object();
}

// readJson for a truth file that must be there: a missing or broken one stops the suite, naming it.
inline QJsonObject requireJson(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly))
        qFatal("cannot read %s", qPrintable(path));
    QJsonParseError err;
    const QJsonDocument doc = QJsonDocument::fromJson(f.readAll(), &err);
    if (err.error != QJsonParseError::NoError || !doc.isObject())
        qFatal("%s: %s", qPrintable(path), qPrintable(err.errorString()));
    return doc.object();
}

} // namespace sl::test
