#pragma once
// What every fuzz target shares: the one exception a reader may let out is sl::LoadError, naming the
// input and fitting on one line. Anything else escaping (FormatError, std::out_of_range, bad_alloc, ...)
// is a bug, so it aborts and libFuzzer keeps the input.

#include "formats/loader.h"
#include "model/source.h"
#include "report/source_report.h"
#include "util/error.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

namespace sl::fuzz {

[[noreturn]] inline void die(const char* what, const char* detail)
{
    std::fprintf(stderr, "\n*** fuzz target: %s: %s\n", what, detail);
    std::abort();
}

inline void checkLoadError(const LoadError& e, const std::string& name)
{
    std::string_view w = e.what();
    if (w.substr(0, name.size() + 2) != name + ": ")
        die("LoadError does not start with the file name", e.what());
    if (w.find_first_of("\n\r") != std::string_view::npos)
        die("LoadError is not one line", e.what());
}

// The files of a multi-file input: the pieces between `separator`s, at most `max` (the last keeps the rest,
// separators included).
inline std::vector<std::string_view> splitInput(std::string_view input, std::string_view separator, size_t max)
{
    std::vector<std::string_view> parts;
    for (size_t at = 0;;) {
        const size_t next = input.find(separator, at);
        parts.push_back(input.substr(at, next == std::string_view::npos ? std::string_view::npos : next - at));
        if (next == std::string_view::npos || parts.size() == max)
            return parts;
        at = next + separator.size();
    }
}

// Runs f(); a LoadError is the expected way to refuse bad input, anything else aborts.
template <typename F> void expectOnlyLoadError(const std::string& name, F&& f)
{
    try {
        f();
    } catch (const LoadError& e) {
        checkLoadError(e, name);
    } catch (const std::exception& e) {
        die("an exception other than sl::LoadError escaped", e.what());
    } catch (...) {
        die("a non-std exception escaped", "(unknown)");
    }
}

// What the CLI and GUI do with a loaded source: render it, and switch between its containers.
inline void exercise(const Source& s, const std::string& name)
{
    (void)sourceToJson(s);
    (void)sourceToTable(s);
    (void)s.totalParameters();
    (void)s.totalBytes();
    size_t tried = 0;
    for (const auto& c : s.containers) {
        if (++tried > 4)
            break;
        expectOnlyLoadError(name, [&] {
            Source other = s.withContainer(c.path);
            (void)sourceToJson(other);
        });
    }
    // A container that does not exist must be a LoadError, not a crash.
    expectOnlyLoadError(name, [&] { (void)s.withContainer("no.such.container"); });
}

} // namespace sl::fuzz
