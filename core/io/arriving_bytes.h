#pragma once
// A range of a file read on one thread and parsed on another as it arrives.
//
// Reading a DCP save's .metadata (100 MB at 256 ranks) into fresh memory took a sixth of `ls`, and the
// unpickler waited for all of it. Here the reader publishes how far it has got after each piece, and the
// parser waits only where it would read past that. The buffer is allocated whole before the first piece, so
// views into it (the parser's strings) stay valid; a read that fails ends every wait with the reader's error.

#include "io/bytes.h"

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>

namespace sl {

class InputFile;

class ArrivingBytes {
public:
    // Room for [offset, offset + length) of `file`, nothing read yet, to be read in pieces of `piece` bytes;
    // the parser keeps `ahead` bytes arrived past where it reads, waiting for them (tests make both tiny,
    // so the parser waits everywhere). Throws FormatError when the range is not inside the file.
    ArrivingBytes(const InputFile& file, uint64_t offset, uint64_t length, size_t piece = kPiece, size_t ahead = kAhead);

    // The reader's side: reads the range piece by piece, publishing each. Never throws: an error is kept
    // for the waiting side.
    void read() noexcept;

    // The parser's side. All the bytes, of which only the first arrived() may be read yet.
    Bytes all() const { return { m_data.get(), m_size }; }
    size_t size() const { return m_size; }
    // Waits until at least min(n, size()) bytes have arrived and returns how many have; rethrows the
    // reader's error when it failed first.
    size_t waitFor(size_t n) const;
    bool failed() const { return m_arrived.load(std::memory_order_acquire) == kFailed; }
    size_t ahead() const { return m_ahead; }

    static constexpr size_t kPiece = 1 << 20;
    static constexpr size_t kAhead = 1 << 20; // more than a pickle lane record's unchecked span

private:
    static constexpr size_t kFailed = SIZE_MAX;
    const InputFile& m_file;
    uint64_t m_offset;
    size_t m_size;
    size_t m_piece;
    size_t m_ahead;
    std::unique_ptr<uint8_t[]> m_data;
    mutable std::atomic<size_t> m_arrived { 0 }; // kFailed once the read failed
    std::exception_ptr m_error; // written before kFailed is published
};

} // namespace sl
