#pragma once
// Every import a pickle makes and how it is used, read opcode by opcode without building the object
// graph: GLOBAL, STACK_GLOBAL and INST, and whether REDUCE, OBJ, INST, NEWOBJ or NEWOBJ_EX calls what they
// import. It shadows the pickle machine's stack with just enough (strings, imports, pairs) to name
// STACK_GLOBAL's operands and `getattr(Class, "NAME")` lookups, so it keeps reporting where the unpickler
// stops (its work budget, a malformed tail) and it reads pickles the unpickler never runs (the magic
// number, protocol and storage-key pickles of legacy files, nested pickled bytes). Linear in the input.

#include "io/bytes.h"
#include "pickle/global_policy.h"

#include <cstdint>
#include <string>
#include <vector>

namespace sl::pickle {

struct ScannedGlobal {
    std::string module; // after Python 2 name mapping where the protocol asks for it
    std::string name; // may be dotted (protocol 4's qualified names, or a getattr lookup's result)
    std::string opcode; // of the first reference: GLOBAL, STACK_GLOBAL or INST
    uint64_t offset = 0; // absolute offset of the first reference
    uint8_t uses = kUsedAsValue; // GlobalUseFlags over every reference
    uint32_t count = 0;
    uint32_t nestedDepth = 0; // 0: the pickle itself; 1+: a pickle inside one of its bytes literals
    bool attribute = false; // the result of getattr(<import>, "NAME"): no import of its own
    std::string qualified() const { return module + "." + name; }
};

struct PickleScan {
    std::vector<ScannedGlobal> globals; // distinct (module, name, depth), in order of first reference
    std::vector<std::string> problems; // what stopped or confused the scan (never fatal)
    uint64_t consumed = 0; // bytes up to and including STOP
    bool complete = false; // reached STOP
    bool ranOut = false; // stopped because the bytes ended (a longer prefix may complete it)
    uint64_t tensorRecords = 0; // taken in one step by the tensor lane (scanPickle), nested pickles' not counted
    uint64_t dataclassRecords = 0; // DCP dataclass records (pickle/dataclass_record.h) taken in one step, likewise
};

// Scans one pickle starting at data[0]; `baseOffset` is where data starts in its file. Bytes literals that
// hold a pickle are scanned too, down to `nestedDepth` levels. With `tensorLane`, each tensor record torch
// writes (pickle/tensor_record.h) and each dataclass record of a DCP .metadata (pickle/dataclass_record.h) is
// taken in one step, to the same result; off, opcode by opcode (tests compare the two).
PickleScan scanPickle(Bytes data, uint64_t baseOffset = 0, uint32_t nestedDepth = 2, bool tensorLane = true);

// Whether `data` starts like a pickle of protocol 2-5 (PROTO n), the only kind nested loaders are handed.
bool looksLikeBinaryPickle(Bytes data);

} // namespace sl::pickle
