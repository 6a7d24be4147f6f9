#pragma once
// Outputs are written atomically: into a temporary file beside the target, flushed to disk, then renamed
// over it, so a crash or a full disk never leaves a half-written report or rule file behind. Only a regular
// file (keeping its permissions) or a path that does not exist yet is replaced that way; a symlink is written
// through (the file it points to is replaced beside itself, the link stays), a FIFO or a device is written
// straight into (`-o /dev/null` leaves /dev/null a device), a directory is an error.
// Whether the path is an input is the caller's question (io/file_trust.h).

#include <string>
#include <string_view>

namespace sl {

// Throws std::runtime_error naming the path when any step fails; the temporary file is removed then.
void writeFileAtomically(const std::string& path, std::string_view contents);

// The same, streamed: an output too large to build in memory first (stats of a million tensors) is written
// as it is made, into the temporary file, and renamed over the target by commit(). Destroyed without
// commit() (an exception on the way), the temporary file is removed and the target is left as it was. An
// empty path or "-" is stdout.
class OutputFile {
public:
    explicit OutputFile(const std::string& path);
    ~OutputFile();
    OutputFile(const OutputFile&) = delete;
    OutputFile& operator=(const OutputFile&) = delete;

    void write(std::string_view bytes); // buffered; throws std::runtime_error as above
    void commit();

private:
    void flush();

    std::string m_path; // as given, for messages
    std::string m_target; // what commit() renames onto; empty when written into directly
    std::string m_temporary;
    int m_fd = -1;
    bool m_stdout = false;
    int m_keepMode = -1; // the permissions of the file replaced, or -1 for a new file's
    std::string m_buffer;
};

} // namespace sl
