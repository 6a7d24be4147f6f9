#pragma once
// What an import in a pickle would do under torch.load, as one of three verdicts (StateLens never imports
// anything; this only labels them):
//   Safe       torch's weights-only unpickler loads it (torch's rebuild functions, storages, dtypes, ...);
//   Unknown    "imports": torch.load(weights_only=False) imports and constructs a class from a library or the
//              user's code (TrainingArguments, argparse.Namespace, a model class): a warning;
//   Dangerous  "executes": it hands the unpickler a callable that runs code: a danger.
// Dangerous is decided by lists that look at the whole dotted path, whatever opcode reaches it:
//   - any segment naming a module that runs commands, loads code or touches files or the network
//     (kDangerousSegments: os, subprocess, sys, importlib, pickle, marshal, ctypes, socket, shutil, pydoc,
//     cProfile, ...), so `torch.os.system` is caught like `os.system`;
//   - exact paths and path prefixes that load nested bytes, download, compile or write (kDangerousPaths:
//     torch.load, torch.save, torch.serialization.*, torch.storage._load_from_bytes, torch.hub.*, ...);
//   - gadgets by their last segment (getattr, eval, exec, compile, methodcaller, attrgetter, system, ...),
//     and dunder attributes that reach the interpreter (__globals__, __builtins__, __subclasses__, ...);
//   - builtins outside the plain data types;
//   - any function (a lower-case last segment, by Python's naming convention) that the pickle calls and
//     that is not on the curated list of known-safe callables (kSafeCallables: collections, copyreg's
//     reconstructors, _codecs.encode, numpy's reconstruct and scalar, torch's _rebuild_*, ...).
// Classes (capitalised names) that are constructed stay "imports": importing and building them runs the
// library's or the user's own code, which the user chose to install, not code carried by the file.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sl::pickle {

enum class GlobalRisk { Safe, Unknown, Dangerous };

struct GlobalVerdict {
    GlobalRisk risk = GlobalRisk::Unknown;
    std::string reason; // for Dangerous: what it would do
};

// How a pickle uses an import (found by pickle/opcode_scan.h), as bit flags.
enum GlobalUseFlags : uint8_t {
    kUsedAsValue = 0,
    kCalled = 1, // REDUCE, OBJ or INST runs it as a function (or a class constructor)
    kInstantiated = 2, // NEWOBJ / NEWOBJ_EX: cls.__new__(cls, ...)
    kAttributeLookup = 4, // getattr(<imported class>, "PLAIN_NAME"): how Python 3.11+ pickles enum members
    kUsesUnknown = 0x80, // nobody knows: counts as called
};

// `module` and `name` as written in the pickle after Python 2 name mapping; `name` may be dotted.
GlobalVerdict classifyGlobal(std::string_view module, std::string_view name, uint8_t uses = kUsesUnknown);

// The import that makes torch.load(weights_only=True) accept a global it refuses by default: torch and
// torchao allow-list their classes with torch.serialization.add_safe_globals when their modules are
// imported (torch 2.6's torch.distributed.tensor; torchao 0.9's torchao, torchao.float8 and
// torchao.prototype.low_bit_optim, read from their sources and checked by running the loads). Empty when
// no import does.
std::string_view allowlistingImport(std::string_view module, std::string_view name);

// Whether having imported `imported` (module names, as `import X` would) allow-lists every global that
// needs `needed`; importing torchao also imports torch.distributed.tensor.
bool importsCover(const std::vector<std::string>& needed, const std::vector<std::string>& imported);

// Python 2 module and name mapping (pickle's _compat_pickle, which Python applies to pickles of protocol
// 0-2 only) plus torch.load's own renames (always).
std::pair<std::string_view, std::string_view> mapLegacyName(std::string_view module, std::string_view name, int protocol);

} // namespace sl::pickle
