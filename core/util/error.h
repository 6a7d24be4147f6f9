#pragma once
// Two error types with distinct jobs:
// - FormatError: a reader found malformed bytes; the message says what and where (offset, record), but
//   not which file, because readers work on byte ranges.
// - LoadError: what leaves the core. One line naming the file and the problem; the CLI prints it and
//   exits with code 2, the GUI shows it on the side that failed.

#include <stdexcept>
#include <string>

namespace sl {

class FormatError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class LoadError : public std::runtime_error {
public:
    LoadError(std::string file, std::string problem)
        : std::runtime_error(file + ": " + problem)
        , m_file(std::move(file))
        , m_problem(std::move(problem))
    {
    }
    const std::string& file() const { return m_file; }
    const std::string& problem() const { return m_problem; }

private:
    std::string m_file;
    std::string m_problem;
};

} // namespace sl
