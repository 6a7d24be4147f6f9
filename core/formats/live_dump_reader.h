#pragma once
// Live model dumps written by resources/python/statelens_dump.py: format id "live-dump".
// The JSON format (versioned; this reader knows version 1) is documented in that script and in
// docs/formats.md ("Live model dumps").
//
// A dump is what a running model expects from a checkpoint. Its persistent keys form the "model"
// container; non-persistent buffers (never in a checkpoint, such as rotary inv_freq) form a second
// container, "non_persistent_buffers", so a diff can explain a checkpoint that still carries them.

#include "formats/open_options.h"
#include "io/input_file.h"
#include "model/source.h"

#include <memory>

namespace sl {

Source readLiveDump(const std::shared_ptr<const InputFile>& file, const OpenOptions& options);

// A JSON object whose "format" is "statelens-live-dump".
bool looksLikeLiveDump(Bytes data);

} // namespace sl
