// libFuzzer target: the safetensors reader on arbitrary bytes (header length, JSON header, offsets).
// A header is also read in chunks of a few bytes (streamSafetensorsHeader; a real file's chunks are 512 KiB),
// on one thread and on two, and must read exactly as in one piece: the same tensors, findings and metadata, or
// the same error. And members in the writers' layout, read by SafetensorsScan (a member or two at a time, the
// rest by simdjson), must read exactly as simdjson reads them all. Read as `statelens ls` reads it (rows,
// formats/safetensors_rows.h), in chunks too, its table and its entries are those of the entries built as read.

#include "fuzz_common.h"

#include "formats/safetensors_reader.h"
#include "io/input_file.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

// What a reading gives, to compare: the listing as JSON, or the error.
std::string reading(const std::shared_ptr<const sl::InputFile>& file, const sl::OpenOptions& options)
{
    try {
        return sl::sourceToJson(sl::readSafetensors(file, options));
    } catch (const sl::LoadError& e) {
        return std::string("error: ") + e.what();
    }
}

// The table, then the JSON (which builds the entries of rows), or the error.
std::string listing(const std::shared_ptr<const sl::InputFile>& file, const sl::OpenOptions& options)
{
    try {
        const sl::Source s = sl::readSafetensors(file, options);
        const std::string table = sl::sourceToTable(s);
        return table + sl::sourceToJson(s);
    } catch (const sl::LoadError& e) {
        return std::string("error: ") + e.what();
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string name = "fuzz.safetensors";
    auto file = sl::InputFile::fromBuffer(name, std::vector<uint8_t>(data, data + size));
    (void)sl::looksLikeSafetensors(sl::Bytes(data, size), size);
    sl::fuzz::expectOnlyLoadError(name, [&] {
        sl::Source s = sl::readSafetensors(file, {});
        sl::fuzz::exercise(s, name);
    });
    sl::OpenOptions whole;
    whole.headerChunk = 0;
    const std::string expected = reading(file, whole);
    for (size_t batch : { 0, 1, 2 }) {
        sl::OpenOptions scanned = whole;
        scanned.headerScanBatch = batch;
        if (reading(file, scanned) != expected)
            sl::fuzz::die("a header read with SafetensorsScan differs from the header read by simdjson alone",
                (std::to_string(batch) + "-member batches").c_str());
    }
    for (size_t chunk : { size_t(0), std::max<size_t>(7, size / 256) }) {
        sl::OpenOptions read, ls;
        read.headerChunk = ls.headerChunk = chunk;
        ls.deferEntries = true;
        if (listing(file, ls) != listing(file, read))
            sl::fuzz::die("the listing from rows differs from the one from entries",
                chunk ? (std::to_string(chunk) + "-byte chunks").c_str() : "whole");
    }
    // At most a few hundred chunks, so a 64 KB input stays quick.
    for (size_t small : { 1, 7, 61 })
        for (bool parallel : { false, true }) {
            const size_t chunk = std::max(small, size / 256);
            sl::OpenOptions chunked;
            chunked.headerChunk = chunk;
            chunked.parallelHeader = parallel;
            if (reading(file, chunked) != expected)
                sl::fuzz::die("a header read in chunks differs from the header read whole",
                    (std::to_string(chunk) + "-byte chunks" + (parallel ? " on two threads" : "")).c_str());
        }
    return 0;
}
