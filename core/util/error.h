#pragma once
// Two error types with distinct jobs:
// - FormatError: a reader found malformed bytes; the message says what and where (offset, record), but
//   not which file, because readers work on byte ranges.
// - LoadError: what leaves the core. One line naming the file and the problem; the CLI prints it and
//   exits with code 2, the GUI shows it on the side that failed.

#include "util/terminal_text.h"

#include <stdexcept>
#include <string>

namespace sl {

class FormatError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Problems quote names taken from the file (zip records, tensor keys, pickle text). Control characters
// in them would break the one-line contract (and could drive a terminal), so they are shown escaped
// (util/terminal_text.h), and a huge quoted name is elided in the middle so the line stays readable.
inline std::string oneLineMessage(const std::string& text, size_t maxLength = 1000)
{
    std::string s = terminalText(text);
    if (s.size() <= maxLength)
        return s;
    // Keep both ends (the quoted name starts it, what went wrong ends it); cut on UTF-8 boundaries.
    auto isContinuation = [&](size_t i) { return (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80; };
    size_t head = maxLength * 3 / 5;
    size_t tail = s.size() - maxLength * 2 / 5;
    while (head > 0 && isContinuation(head))
        --head;
    while (tail < s.size() && isContinuation(tail))
        ++tail;
    return s.substr(0, head) + " ... " + s.substr(tail);
}

class LoadError : public std::runtime_error {
public:
    LoadError(std::string file, const std::string& problem)
        : LoadError(std::move(file), oneLineMessage(problem), 0)
    {
    }
    const std::string& file() const { return m_file; }
    const std::string& problem() const { return m_problem; }

private:
    LoadError(std::string file, std::string problem, int)
        : std::runtime_error(terminalText(file) + ": " + problem) // a path can hold control characters too
        , m_file(std::move(file))
        , m_problem(std::move(problem))
    {
    }
    std::string m_file;
    std::string m_problem;
};

} // namespace sl
