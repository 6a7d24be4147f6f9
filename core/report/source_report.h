#pragma once
// `statelens ls` output: the JSON object documented in docs/json-output.md, and the human-readable table.

#include "model/source.h"
#include "io/json_writer.h"

#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace sl {

// Writes the `source` object: {"path", "format", "container", "containers", "files", "metadata"}.
void writeSourceJson(JsonWriter& w, const Source& s);
// An entry's object. Most (writePlainTensorJson) are written from fixed pieces of text, unless
// `shortcut` is false: tests hold the two to the same bytes.
// `plainFiles` (from plainFiles(s)) saves checking the file's path for each entry; empty, it is checked.
void writeEntryJson(JsonWriter& w, const Entry& e, const Source& s, bool shortcut = true,
    std::span<const uint8_t> plainFiles = {});
// An entry's object written from fixed pieces of text, as writeEntryJson writes it field by field: a tensor
// or group (quantized, with its parts) without sharding whose strings need no escaping. False (nothing
// written) for any other entry: objects, sharded tensors, escaped names. A listing's JSON is mostly these,
// and rapidjson's calls per field took five times as long (c's 100,000 entries: 21 ms against 3.9).
bool writePlainTensorJson(JsonWriter& w, const Entry& e, const Source& s, std::span<const uint8_t> plainFiles = {});
// Whether each of s.files needs no escaping in JSON (jsonPlainAscii), checked once for a listing rather than
// once for each entry that names it.
std::vector<uint8_t> plainFiles(const Source& s);
void writeFindingsJson(JsonWriter& w, const std::vector<Finding>& findings);

// Receives a long text in parts, in order (a file written as it is made).
using TextSink = std::function<void(std::string_view)>;

// {"source": {...}, "entries": [...], "findings": [...]}
std::string sourceToJson(const Source& s);
// The same text handed to `sink` in parts (4,096 entries each): a 90,000-tensor index's 54 MB of JSON is
// never held whole.
void sourceToJson(const Source& s, const TextSink& sink);
// "load safety: executes (...)": the verdict of WeightsOnlyLoad in one line, or nothing when the source's
// format runs no pickle.
std::string loadSafetyLine(const Source& s);

// A table of entries with a header and the findings underneath.
std::string sourceToTable(const Source& s);
void sourceToTable(const Source& s, const TextSink& sink); // in parts, as sourceToJson

// "1.2 MB"-style sizes and "3.4M"-style counts for humans.
std::string humanBytes(uint64_t bytes);
std::string humanCount(uint64_t n);

std::string_view locationKindName(TensorLocation::Kind k);
std::string_view entryKindName(EntryKind k);

} // namespace sl
