#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace sl {

class LoadControl;
struct Timings;
struct TorchScriptWorker;

struct OpenOptions {
    // The container to select instead of the picked one ("optimizer", "state_dict", ...).
    std::optional<std::string> container;
    // Threads for opening shards; 0 means one per core.
    unsigned threads = 0;
    // Where to record per-phase times (statelens ls --timings); null to skip.
    Timings* timings = nullptr;
    // Readers that open parts of a larger source (index shards) turn this off: quantized groups are formed
    // once, over the whole state dict (torchao's flattened safetensors can split a group across shards).
    bool groupQuantized = true;
    // A reader may hand over a state dict of plain tensors as rows, its entries built on first access
    // (model/entry_list.h): `ls` turns this on, and neither its table nor its JSON builds them all. Off,
    // every entry is built as the file is read (what the window, diff and values need: building from rows
    // would check each twice).
    bool deferEntries = false;
    // How TorchScript archives are loaded (a child process; formats/torchscript_reader.h). Null uses the
    // process-wide setting (setTorchScriptWorker), which app/main.cpp points at the statelens executable.
    const TorchScriptWorker* torchScriptWorker = nullptr;
    // DCP: read every tensor item while listing, to place each chunk's elements inside its item and report
    // what only the item shows (a data record shorter than the chunk). Off, listing reads no tensor data and
    // chunks are placed when their values are read (formats/dcp_item.h).
    bool inspectDcpItems = false;
    // False for an index's shards: a shard that is itself an index is refused where it is sniffed (it would
    // be read as an index again, perhaps naming itself), so shards are sniffed once, not twice.
    bool indexAllowed = true;
    // torch.save zips: take each tensor record torch writes in one step, in the unpickler and the load-safety
    // scan (pickle/tensor_record.h). Off, both run opcode by opcode, to the same result (tests compare them).
    bool tensorLanes = true;
    // safetensors: a header longer than two chunks of this many bytes is read a chunk at a time
    // (streamSafetensorsHeader), on two threads with `parallelHeader`; tests make the chunks small. Off where
    // the caller already reads two sources at once (diff opens both sides together).
    size_t headerChunk = 512 << 10;
    bool parallelHeader = true;
    // safetensors: header members in the writers' own layout are read by SafetensorsScan this many at a time
    // (formats/safetensors_scan.h); 0 reads every member with simdjson, to the same result (tests compare them
    // and make the batches small).
    size_t headerScanBatch = 256;
    // Indexes: an FP8 weight and the block scale after it are grouped as the merged entries are built
    // (quant::Fp8PairGrouper), with groupQuantized; false leaves all grouping to the pass after the reader,
    // to the same result (tests compare them).
    bool earlyFp8Groups = true;
    // Indexes of at least this many bytes open their shards on a second thread while the index is parsed
    // (hf_index_reader.cpp, ShardPrefetch); tests set 0. SIZE_MAX where the caller already reads two
    // sources at once.
    size_t shardPrefetchFrom = 256 << 10;
    // Tests: the parse's end waits until every shard named was opened there, so that the opening loop takes
    // them all (a small index is otherwise parsed before the second thread opens anything).
    bool shardPrefetchFinishes = false;
    // Progress and cancellation (util/load_control.h); null when nobody watches. A cancelled open throws
    // LoadCancelled.
    LoadControl* control = nullptr;
};

} // namespace sl
