#pragma once
// The core's UTF-8 text as QString, for QCOMPARE and the suites' messages.

#include <QString>

#include <string_view>

namespace sl::test {

inline QString q(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())); }

} // namespace sl::test
