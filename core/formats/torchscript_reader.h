#pragma once
// TorchScript archives (torch.jit.save, torch.jit.trace(...).save, mobile .ptl): format id "torchscript".
//
// A TorchScript archive is a program, not data: torch::jit::load compiles the archive's code/ and runs its
// __setstate__ methods to rebuild the module, so StateLens cannot list it with its own pickle VM alone
// (parameter vs buffer, quantized packed params and the module classes live in that code). It asks LibTorch.
//
// Design (three pieces, so that LibTorch never enters the caller's process):
//   1. The reader here (core, no LibTorch) reads the archive's version records from the zip, then runs a
//      *worker* process with a deadline and an address-space limit (util/child_process.h), parses the JSON
//      the worker prints (simdjson) and builds the Source. Any failure (no worker, plugin missing, crash,
//      timeout, LibTorch's c10::Error) becomes one LoadError line naming the file.
//   2. The worker is a hidden subcommand of the statelens executable, `statelens __torchscript-worker
//      PATH` (app/cli/torchscript_worker_command.cpp). It dlopens the plugin and prints its JSON.
//   3. The plugin, libstatelens-torch.so beside the executable (core/torchscript/), is the only code that
//      links LibTorch: loading LibTorch costs ~370 ms and 286 shared libraries, so nothing else may.
//
// The core does not know where the worker is (it may be linked into a test, a fuzzer or the GUI module):
// the program says so with setTorchScriptWorker (app/main.cpp does), an OpenOptions field overrides that
// per call, and STATELENS_TORCHSCRIPT_WORKER (a statelens executable) is the fallback. With none of them
// the reader fails with a LoadError and runs nothing.

#include "formats/open_options.h"
#include "io/input_file.h"
#include "model/source.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sl {

struct TorchScriptWorker {
    // The worker's argv before the archive's path, e.g. {"/usr/bin/statelens", "__torchscript-worker"}.
    // Empty: not configured.
    std::vector<std::string> command;
    // Wall-clock limit per archive; 0 picks 60 s plus 20 s per GiB of archive.
    unsigned timeoutMs = 0;
    // RLIMIT_AS of the worker; 0 picks 4 GiB plus 4x the archive (LibTorch reads every tensor into memory).
    uint64_t memoryLimitBytes = 0;
};

// The process-wide worker (thread-safe). app/main.cpp points it at the running statelens executable.
void setTorchScriptWorker(TorchScriptWorker worker);
TorchScriptWorker torchScriptWorker();
// {exe, "__torchscript-worker"}: the command for a statelens executable at `exe`.
TorchScriptWorker torchScriptWorkerFor(const std::string& statelensExecutable);

Source readTorchScript(const std::shared_ptr<const InputFile>& file, const OpenOptions& options);

} // namespace sl
