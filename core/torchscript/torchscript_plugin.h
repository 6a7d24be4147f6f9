#pragma once
// The C interface of libstatelens-torch.so, the only StateLens code that links LibTorch.
//
// The statelens executable never links the plugin: its hidden `__torchscript-worker` subcommand dlopens it
// in a child process (see core/formats/torchscript_reader.h for the whole design), so this header holds
// plain C declarations and no LibTorch type.

#include <stddef.h>

#define STATELENS_TORCH_PLUGIN_ABI 1
#define STATELENS_TORCH_PLUGIN_FILE "libstatelens-torch.so"

extern "C" {

typedef void (*statelens_torch_write_fn)(void* context, const char* data, size_t size);

// STATELENS_TORCH_PLUGIN_ABI of the plugin; the worker refuses a plugin built for another ABI.
int statelens_torch_plugin_abi(void);

// Loads the TorchScript archive at `path` with torch::jit::load (map_location cpu) and writes one JSON
// document through `write` (possibly in several calls). Returns 0 when the document describes the module,
// non-zero when it is {"statelens_torchscript": 1, "error": "...", "error_kind": "..."}. The fields are
// documented in torchscript_plugin.cpp. Never throws.
int statelens_torchscript_describe(const char* path, statelens_torch_write_fn write, void* context);
}
