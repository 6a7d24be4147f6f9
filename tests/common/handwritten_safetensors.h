#pragma once
// Safetensors files written by hand, whose tensor names are whatever a test needs (control characters
// included: the header is JSON, so any Unicode text fits).

#include <QByteArray>
#include <QFile>
#include <QString>

namespace sl::test {

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

// A safetensors file of this header (JSON, padded with spaces to 8 bytes as the library pads it), then
// `data`, then `hole` more bytes left a hole (sparse: files of any size cost no disk).
inline bool writeSafetensorsFile(const QString& path, QByteArray header, const QByteArray& data = {}, qint64 hole = 0)
{
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
    f.write(data);
    if (hole && !f.resize(f.size() + hole))
        return false;
    return f.error() == QFileDevice::NoError;
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
    return writeSafetensorsFile(path, header, QByteArray(static_cast<int>(offset), '\0'));
}

} // namespace sl::test
