#include "json_writer.h"

#include "util/utf8.h"

#include <cmath>
#include <cstring>

namespace sl {

void JsonWriter::key(std::string_view k)
{
    string(k); // rapidjson writes a key as a string; the writer's state tells them apart
}

void JsonWriter::string(std::string_view s)
{
    if (jsonPlainAscii(s)) {
        m_writer.plainString(s.data(), s.size());
    } else if (!isValidUtf8(s)) {
        const std::string clean = sanitizeUtf8(s);
        m_writer.String(clean.data(), static_cast<rapidjson::SizeType>(clean.size()));
    } else if (jsonPlainPrefix(s) == s.size()) {
        m_writer.plainString(s.data(), s.size());
    } else {
        m_writer.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
    }
}

void JsonWriter::number(double v)
{
    // JSON has no NaN or infinity; null keeps the document valid.
    if (std::isfinite(v))
        m_writer.Double(v);
    else
        m_writer.Null();
}

} // namespace sl
