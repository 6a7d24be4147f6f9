#!/usr/bin/env python3
"""StateLens benchmark: speed ratios against the Python peers, measured back to back on one machine.

Absolute times on a shared machine drift, so this script only claims ratios: every measurement of a case
is repeated (default 7 times), the peers and statelens are interleaved round-robin within each repetition,
and each ratio compares medians.

Cases (targets from the issue):
  a  torch.save zip with 76,800 small tensors: statelens >= 20x faster than a metadata-only Python unpickle
     (zipfile + pickle.Unpickler with find_class/persistent_load stubs, as lazy loaders such as mergekit do)
     and >= 20x faster than torch.load.
  b  1.9 GB torch.save zip of 318 LLM-sized float16 tensors: statelens >= 100x faster than torch.load (warm
     page cache; cold numbers too: the file is evicted with posix_fadvise(DONTNEED) before each cold run,
     which needs no root, unlike /proc/sys/vm/drop_caches; a VM host may still cache the disk).
  c  safetensors file with 100,000 tensors: the header parsed >= 10x faster than Python's json.loads of that
     header. Compared three ways: statelens's reader phases from `ls --timings` (parse + checks + entries)
     against json.loads in-process (parse vs parse, the target's wording), and the statelens whole process
     against both json.loads in-process and a python3 process that reads the header and parses it.

  d  two safetensors files of 100,000 tensors each (a Hugging Face-named checkpoint, a torchtitan-named model)
     and 20 rename rules: `statelens diff A B --rules R --format json` (load both, map, align, classify,
     explain, write the JSON report) in under 1 s and >= 10x faster than the same alignment in Python (read
     both headers with json, map A's keys through the 20 rules with `re.sub`, hash-join with B, compare
     shapes and dtypes, json.dumps the rows).
  e  `statelens suggest A B` on the pair of d without rules (every key unexpected or missing): under 1 s.
     No peer offers this; the row reports the absolute time against the target.
  f  the window on d's pair under Xvfb: first paint under 2 s, slowest filter keystroke under 100 ms.
  g  `statelens stats` of b's checkpoint: >= 3x faster than torch.load plus the same reductions in Python,
     >= 1 GB/s, peak resident set under 10% of the file.
  h  `statelens stats` of a bitsandbytes NF4 weight and a block-scaled FP8 weight (12288 x 12288 each):
     dequantized as the libraries do, against Python reading the file and applying the same recipes and
     reductions with torch (the 3x of g, by analogy; the issue sets no figure), and the peak resident set.
  (a to h together are the issue's s3.)
  i  `statelens convert` (issue 17), two inputs. (1) b's 1.9 GB torch zip to one safetensors file: at most 1.5x
     the time of `cp` of the same file, peak resident set under 64 MB; beside it, for context, the peer
     torch.load + safetensors.torch.save_file (torch 2.6 and safetensors through --torch2-env, as Debian 12's
     Python has no safetensors; its time and peak printed), and the plain read+write loops of the same bytes
     (`dd bs=8M`, and `dd bs=8M conv=fsync`, since convert flushes its file to disk before renaming it into
     place). (2) a DCP save of a Llama-like model (torchtitan names, hidden 2048, 8 layers, vocab 32000:
     2.7 GB of float32 random values, not sparse) by 64 ranks, every tensor in 64 Shard(0) pieces, planned by
     torch 2.6's DefaultSavePlanner and written by its FileSystemWriter rank by rank in one process
     (DCP_GENERATE_SRC says why): converted to one safetensors file with a peak resident set under 64 MB,
     against torch 2.6's dcp_to_torch_save (torch.distributed.checkpoint.format_utils, which loads every tensor
     into memory) time and peak, and `cp -r` of the folder. Outputs are removed before each run. Repetitions:
     --reps capped at 3.

Scale cases (issue 13, "Real scale"; inputs are sparse, so they fit on any disk; not run by default):
  s1 a torchtitan DCP save of Llama-3-70B (80 layers, hidden 8192, FFN 28672, vocab 128256, GQA 64/8 heads
     of 128) with its AdamW state, by 8, 64 and 256 ranks: every parameter and moment a DTensor Shard(0) over
     the ranks. The .metadata is planned and pickled by torch 2.x's own DCP code run through
     ../shared/tools/torch2-env.sh (S1_GENERATE_SRC says what is matched and what is estimated); each rank's
     __<rank>_0.distcp holds its items at their real offsets and lengths, the tensor data a hole. At 256 ranks:
     10,846 keys, 555,987 chunks (the issue's 555,264 of sharded tensors + 723 step scalars), 256 files,
     789 GiB apparent, ~4.6 GB on disk. Targets: `statelens ls DIR` >= 10x faster than torch's
     FileSystemReader(DIR).read_metadata() (timed in-process after its imports, and as the whole process),
     peak resident set no higher than torch's whole process, zero bytes read from .distcp files. The bytes
     read are measured two ways (distcp_reads): the .distcp pages are evicted, statelens runs once, and
     mincore counts the pages it brought into the page cache (holes included; tensor items and bytes items
     apart); and one run under strace -f -y counts reads and mmaps of .distcp files, with the run's major
     page faults for what a mapping reads without a system call.
  s2 a DeepSeek-V3 model.safetensors.index.json over 163 shards (90,427 tensors: FP8 e4m3 weights with
     128 x 128 block weight_scale_inv, bf16 norms and embeddings, MLA attention, 256 routed experts and a
     shared expert per MoE layer), at a quarter, half and all of its 61 layers (15, 30, 61), and the same
     weights in transformers v5's stacked-experts layout (ds3_tensors says what is matched). Targets: `statelens
     ls DIR` >= 5x faster than the ten-line Python script that reads every shard header with json (whole
     process and in-process), peak resident set no higher than the script's; `statelens diff` of the
     per-expert index against the stacked one under 0.5 s.
  How cost grows: after the rows, a table gives each tool's median time and peak resident set at every size
  of s1 and s2 (with time per chunk or per tensor), and `statelens ls --timings` (and `diff --timings` for
  s2) at the largest size of each.
  Sizes and repetitions: --s1-ranks 8,64,256, --s2-layers 15,30,61, --scale-reps (3; quick 1; an s1 size
  whose first run takes over --scale-slow seconds gets 1), --scale-timeout (3600 s per run). s1 needs root
  for the chroot; the work folder is bound at /here inside it, so use --work-dir (or --keep) on a disk with
  room, e.g. --work-dir /work/bench-cache --keep.

Two kinds of comparison are reported for every peer:
  whole process  python3 start to exit vs statelens start to exit (what a user runs). Both are timed the same
                 way: time.perf_counter around subprocess.run with stdout and stderr to /dev/null.
  in-process     only the peer's parse, timed inside a fresh interpreter (this script with --helper) after its
                 imports and one warm-up call (json.loads gets the header bytes already in memory), vs the
                 statelens whole process, start-up included: the conservative comparison.
statelens runs as `statelens ls FILE --format table|json` with stdout to /dev/null (both formats are timed;
-o is not used because it writes atomically through a temporary file next to the target). The table also
shows the ratio of CPU time (user + sys), which other load on a shared machine disturbs less than wall time.
This script itself never imports torch: inputs are built and in-process peers run in child processes, so
its own heap and torch's idle worker threads stay out of the numbers.

Needs torch: run with Debian's interpreter, e.g.
  /usr/bin/python3 tests/bench/bench.py --statelens build/app/statelens [--quick] [--keep] [--json-out FILE]
      [--compare-statelens OTHER_BUILD/app/statelens] [--cases abcdefgh|s1,s2|all]
  /usr/bin/python3 tests/bench/bench.py --cases s1,s2 --work-dir /work/bench-cache --keep   # scale cases
(--compare-statelens applies to cases a to c.)
Inputs are generated into a temporary folder removed at exit, or with --keep into a cache folder reused by
the next --keep run (never into the repository).
"""

import argparse
import gc
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

PYTHON = sys.executable
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# --- peers ---------------------------------------------------------------------------------------------------

# Metadata-only unpickling the way lazy loaders do it (cf. mergekit's LazyTorchUnpickler): zipfile for the
# archive, a pickle.Unpickler whose find_class/persistent_load return stubs, so no tensor byte is read.
# Kept as source text so the whole-process peer runs exactly the code the in-process peer runs.
LAZY_UNPICKLE_SRC = r'''
import collections, pickle, zipfile

class StubStorage:
    __slots__ = ("type", "key", "location", "numel")
    def __init__(self, type_, key, location, numel):
        self.type, self.key, self.location, self.numel = type_, key, location, numel

class StubTensor:
    __slots__ = ("storage", "offset", "shape", "stride", "requires_grad")
    def __init__(self, storage, offset, shape, stride, requires_grad):
        self.storage, self.offset, self.shape, self.stride = storage, offset, tuple(shape), tuple(stride)
        self.requires_grad = requires_grad

class StubStorageType:
    def __init__(self, name):
        self.name = name

def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None,
                       metadata=None):
    return StubTensor(storage, storage_offset, size, stride, requires_grad)

def _rebuild_parameter(data, requires_grad, backward_hooks, *rest):
    return data

class LazyTorchUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor_v2
        if module == "torch._utils" and name == "_rebuild_parameter":
            return _rebuild_parameter
        if module == "torch" and name.endswith("Storage"):
            return StubStorageType(name)
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        raise pickle.UnpicklingError(f"refusing {module}.{name}")

    def persistent_load(self, pid):
        kind, storage_type, key, location, numel = pid
        return StubStorage(storage_type, key, location, numel)

def lazy_metadata(path):
    with zipfile.ZipFile(path) as zf:
        prefix = zf.namelist()[0].split("/")[0]
        with zf.open(prefix + "/data.pkl") as f:
            return LazyTorchUnpickler(f).load()
'''

TORCH_LOAD_SRC = r'''
import torch
def torch_load(path):
    return torch.load(path, map_location="cpu")
'''

# What a user would write to read a safetensors header with the standard library.
JSON_HEADER_SRC = r'''
import json, struct
def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))
'''

# The diff of case d in plain Python: what a user would script with json and re.
DIFF_SRC = r'''
import json, re, struct
def _header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h
def diff_pair(paths):
    a_path, b_path, rules_path = paths.split("|")
    a, b = _header(a_path), _header(b_path)
    with open(rules_path) as f:
        rules = [(re.compile(r["pattern"]), r.get("replace", ""), r.get("drop", False)) for r in json.load(f)["rules"]]
    rows, seen = [], set()
    for key, meta in a.items():
        new = key
        for pattern, repl, drop in rules:
            if drop:
                if pattern.search(new):
                    new = None
                    break
                continue
            new = pattern.sub(repl, new)
        if new is None:
            rows.append({"status": "dropped", "a": key, "b": None})
            continue
        other = b.get(new)
        if other is None:
            rows.append({"status": "unexpected", "a": key, "b": None})
            continue
        seen.add(new)
        if other["shape"] != meta["shape"]:
            status = "shape_mismatch"
        elif other["dtype"] != meta["dtype"]:
            status = "dtype_mismatch"
        else:
            status = "renamed" if new != key else "match"
        rows.append({"status": status, "a": key, "b": new, "a_shape": meta["shape"], "b_shape": other["shape"]})
    for key in b:
        if key not in seen:
            rows.append({"status": "missing", "a": None, "b": key})
    return json.dumps({"rows": rows})
'''


STATS_SRC = r'''
import torch
def stats(path):
    sd = torch.load(path, map_location="cpu")
    out = {}
    for k, t in sd.items():
        if not torch.is_tensor(t) or t.is_complex():
            continue
        f = t.float()
        finite = f[torch.isfinite(f)]
        r = {"nan": int(torch.isnan(f).sum()), "inf": int(torch.isinf(f).sum()), "zeros": int((f == 0).sum())}
        if finite.numel():
            lo, hi = finite.min().item(), finite.max().item()
            r.update(min=lo, max=hi, mean=finite.mean().item(), std=finite.std().item(),
                     hist=torch.histc(finite, 16, lo, hi).tolist())
        out[k] = r
    return len(out)
'''


QUANT_STATS_SRC = r'''
import json, struct, numpy as np, torch
def stats(path):
    """Read the safetensors by hand, dequantize with each library's recipe in torch, reduce (case h)."""
    blob = open(path, "rb").read()
    (h,) = struct.unpack("<Q", blob[:8])
    hd = json.loads(blob[8:8 + h])
    def arr(k, dt):
        b, e = hd[k]["data_offsets"]
        return torch.from_numpy(np.frombuffer(blob, dtype=dt, count=(e - b) // np.dtype(dt).itemsize, offset=8 + h + b).copy())
    n = 0
    for group in ("nf4", "fp8"):
        if group == "nf4":  # bitsandbytes dequantize_4bit: quant_map[nibble] * absmax[block], high nibble first
            packed = arr("a.weight", np.uint8).long()
            nib = torch.stack([packed >> 4, packed & 15], 1).reshape(-1)
            v = (arr("a.weight.quant_map", np.float32)[nib] * arr("a.weight.absmax", np.float32).repeat_interleave(64))
            v = v.to(torch.bfloat16).double()
        else:  # float8_e4m3fn (torch 1.13 has no float8: decoded from its bits) * weight_scale_inv per 128x128 block
            side = hd["b.weight"]["shape"]
            q = arr("b.weight", np.uint8).long()
            e, m = (q >> 3) & 15, q & 7
            f = torch.where(e == 0, m.double() * 2.0 ** -9, (8 + m).double() * torch.pow(2.0, (e - 10).double())).float()
            f = torch.where((q & 0x80) != 0, -f, f).reshape(side)
            s = arr("b.weight_scale_inv", np.float32).reshape(hd["b.weight_scale_inv"]["shape"])
            v = (f * s.repeat_interleave(128, 0).repeat_interleave(128, 1)).double().reshape(-1)
        fin = v[torch.isfinite(v)]
        lo, hi = fin.min().item(), fin.max().item()
        r = [lo, hi, fin.mean().item(), fin.std().item(), int(torch.isnan(v).sum()), int((v == 0).sum()),
             torch.histc(fin, 16, lo, hi).tolist()]
        n += len(r)
    return n
'''


# Case s1's peer, run with torch 2.x through ../shared/tools/torch2-env.sh: DCP's own reading of `.metadata`
# (FileSystemReader.read_metadata, a pickle.load of torch's dataclasses), timed inside the process after its
# imports, with the resident-set high-water mark before and after.
S1_READ_METADATA_SRC = r'''
import json, resource, sys, time
t0 = time.perf_counter()
import torch
from torch.distributed.checkpoint import FileSystemReader
import_s = time.perf_counter() - t0
rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
c0, t0 = time.process_time(), time.perf_counter()
metadata = FileSystemReader(sys.argv[1]).read_metadata()
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
sd = metadata.state_dict_metadata
chunks = sum(len(v.chunks) for v in sd.values() if hasattr(v, "chunks"))
print(json.dumps({"wall": wall, "cpu": cpu, "import_s": import_s, "maxrss_before_kb": rss_before,
                  "maxrss_after_kb": rss_after, "keys": len(sd), "chunks": chunks, "torch": torch.__version__}))
'''

# Case s2's peer: the ten lines a user writes to read every shard header of a safetensors index with json.
S2_HEADERS_SRC = r'''
import json, os, struct
def read_index_headers(folder):
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    tensors = {}
    for shard in shards:
        with open(os.path.join(folder, shard), "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            tensors.update((k, v) for k, v in json.loads(f.read(n)).items() if k != "__metadata__")
    return tensors
'''

# The Llama parameter list and Shard(0) arithmetic of both DCP generators (s1's and case i's), which start
# with it. Plain Python: no import.
LLAMA_DCP_COMMON_SRC = r'''
def llama_parameters(hidden, ffn, vocab, layers, q, kv):
    """torchtitan's Llama in named_parameters() order (freqs_cis is a non-persistent buffer); q and kv are the
    query and key/value projection widths (heads x head_dim)."""
    out = [("tok_embeddings.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"layers.{i}."
        out += [(p + "attention.wq.weight", (q, hidden)), (p + "attention.wk.weight", (kv, hidden)),
                (p + "attention.wv.weight", (kv, hidden)), (p + "attention.wo.weight", (hidden, q)),
                (p + "feed_forward.w1.weight", (ffn, hidden)), (p + "feed_forward.w2.weight", (hidden, ffn)),
                (p + "feed_forward.w3.weight", (ffn, hidden)), (p + "attention_norm.weight", (hidden,)),
                (p + "ffn_norm.weight", (hidden,))]
    return out + [("norm.weight", (hidden,)), ("output.weight", (vocab, hidden))]


def shard0(size, ranks, rank):
    """Shard(0)'s local size and offset on dim 0: torch.chunk's pieces (Shard._local_shard_size_on_dim)."""
    if size % ranks == 0:
        return size // ranks, size // ranks * rank
    full = -(-size // ranks)
    start = full * rank
    if size < start:
        return 0, size
    return min(size, start + full) - start, start
'''

# Case s1's input: a torchtitan DCP save of Llama-3-70B by R ranks, written by this program under torch 2.x
# (torch2-env.sh), planned by torch's own code: flatten_state_dict, DefaultSavePlanner.create_global_plan
# (dedup_save_plans, create_default_global_save_plan, the index hints), FileSystemWriter.prepare_global_plan and
# FileSystemWriter.finish, which pickles the Metadata to .metadata. Only the ranks are simulated: each rank's
# local plan is what create_default_local_save_plan makes of its DTensors, and plans and write results go through
# pickle on their way to and from the coordinator as gather_object/scatter_object_list send them, so object
# identities, and with them the pickle memo of .metadata, are those of a real save.
#
# What it matches (torch 2.6, torchtitan's defaults): the state dict {"model": get_model_state_dict, "optimizer":
# OptimizersContainer.state_dict(), i.e. get_optimizer_state_dict with flatten_optimizer_state_dict=True,
# "train_state": bytes}; 723 float32 parameters (torchtitan's names, named_parameters() order); AdamW's step
# (0-d float32, a plain tensor on every rank, so one chunk kept by dedup on one rank), exp_avg and exp_avg_sq;
# the 11 param-group values (lr, betas, eps, weight_decay, amsgrad, foreach, maximize, capturable, differentiable,
# fused, and initial_lr from the LR scheduler) flattened per parameter as optimizer.param_groups.<fqn>.<key>,
# each a bytes item. Every parameter and moment is a DTensor Shard(0) over R ranks: R chunks of torch.chunk sizes.
# At R=256 that gives the issue's 555,264 sharded chunks (2,169 tensors x 256) exactly, 789 GiB of data and 256
# .distcp files; the issue's 2,170 keys counted the sharded tensors and train_state only, while the real layout
# adds 723 step tensors (723 more chunks) and 7,953 param-group bytes items: 10,846 keys in all.
# Layout of each __<rank>_0.distcp (FileSystemWriter defaults: one file per rank): the bytes items first, then the
# tensor items sorted by size (stable), as _OverlappingCpuLoader orders them on a CUDA machine. A tensor item is
# torch.save of the chunk: its exact bytes come from a template per shape (torch.save of zeros into a sink that
# keeps the small writes), so every offset and length is the real one. With items "framing" the zip framing of
# each item (its first ~450 and last ~730 bytes) is written and the tensor data left a hole, so torch.load of any
# item works (zeros); with "holes" nothing but the bytes items is written. Bytes items (~1 KB each) are written.
S1_GENERATE_SRC = LLAMA_DCP_COMMON_SRC + r'''
import dataclasses, io, json, os, pickle, sys, time
from pathlib import Path
import torch
import torch.distributed.checkpoint.default_planner as default_planner
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.filesystem import FileSystemWriter, _StorageInfo, _item_size
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorProperties
from torch.distributed.checkpoint.planner import SavePlan, TensorWriteData, WriteItem, WriteItemType
from torch.distributed.checkpoint.storage import WriteResult
from torch.distributed.checkpoint._nested_dict import flatten_state_dict

HIDDEN, FFN, VOCAB, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 8192, 28672, 128256, 80, 64, 8, 128


def model_parameters():
    """torchtitan's Llama 3 70B."""
    return llama_parameters(HIDDEN, FFN, VOCAB, LAYERS, HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM)


class Sink:
    """A file-like object that keeps torch.save's small writes and only the length of the big one (the
    tensor's data record), so a template costs no memory."""
    def __init__(self):
        self.pos, self.pieces = 0, []

    def write(self, b):
        n = memoryview(b).nbytes
        if n < 65536:
            self.pieces.append((self.pos, bytes(b)))
        self.pos += n
        return n

    def flush(self):
        pass


def main():
    out, ranks, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    t0 = time.perf_counter()
    params = model_parameters()
    placeholder = torch.empty(0)
    lr = 3e-4
    group = {"lr": lr, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1, "amsgrad": False, "foreach": True,
             "maximize": False, "capturable": False, "differentiable": False, "fused": False, "initial_lr": lr}
    optim = {}
    for fqn, _ in params:  # AdamW._init_group: step, then exp_avg, exp_avg_sq
        for field in ("step", "exp_avg", "exp_avg_sq"):
            optim[f"state.{fqn}.{field}"] = placeholder
    for fqn, _ in params:  # _flatten_optim_state_dict: param_groups.<fqn>.<key> for every key but params
        for k, v in group.items():
            optim[f"param_groups.{fqn}.{k}"] = v
    train_state = b"torchtitan TrainState step=1000 ntokens_seen=8388608000"
    nested = {"model": {fqn: placeholder for fqn, _ in params}, "optimizer": optim, "train_state": train_state}
    flat, mappings = flatten_state_dict(nested)
    shapes = dict(params)

    # One local plan per rank, as create_default_local_save_plan makes it: every key in flattened order; a
    # DTensor gives its Shard(0) piece, a plain tensor (step) and a non-tensor value an item on every rank.
    props, shared, plans = {}, {}, []
    for rank in range(ranks):
        items = []
        for key, value in flat.items():
            if not isinstance(value, torch.Tensor):
                if key not in shared:
                    shared[key] = WriteItem(index=MetadataIndex(key), type=WriteItemType.BYTE_IO)
                items.append(shared[key])
                continue
            if key.endswith(".step"):
                if key not in shared:
                    empty = torch.Size([])
                    shared[key] = WriteItem(index=MetadataIndex(key, empty), type=WriteItemType.TENSOR,
                                            tensor_data=TensorWriteData(
                                                chunk=ChunkStorageMetadata(offsets=empty, sizes=torch.Size([])),
                                                properties=TensorProperties(dtype=torch.float32), size=torch.Size([])))
                items.append(shared[key])
                continue
            fqn = key[len("model."):] if key.startswith("model.") else key[len("optimizer.state."):key.rindex(".")]
            shape = shapes[fqn]
            local, offset = shard0(shape[0], ranks, rank)
            sizes = torch.Size([local] + list(shape[1:]))
            offsets = torch.Size([offset] + [0] * (len(shape) - 1))
            if key not in props:
                props[key] = TensorProperties(dtype=torch.float32)
            items.append(WriteItem(index=MetadataIndex(key, offsets), type=WriteItemType.SHARD,
                                   tensor_data=TensorWriteData(chunk=ChunkStorageMetadata(offsets=offsets, sizes=sizes),
                                                               properties=props[key], size=torch.Size(shape))))
        # gather_object pickles every rank's plan on its way to the coordinator
        plans.append(pickle.loads(pickle.dumps(SavePlan(items, planner_data=mappings))))
    print(f"s1: {ranks} local plans in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)

    planner = DefaultSavePlanner()
    if ranks > 64:  # _validate_global_plan compares every tensor's chunks pairwise; it changes nothing
        default_planner._validate_global_plan = lambda plan, metadata: True
    writer = FileSystemWriter(Path(out), sync_files=False)
    global_plan, metadata = planner.create_global_plan(plans)
    global_plan = writer.prepare_global_plan(global_plan)
    del plans
    print(f"s1: global plan in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)

    templates = {}

    def template(shape):
        if shape not in templates:
            sink = Sink()
            torch.save(torch.zeros(shape, dtype=torch.float32), sink)
            merged = []
            for pos, data in sink.pieces:
                if merged and merged[-1][0] + len(merged[-1][1]) == pos:
                    merged[-1] = (merged[-1][0], merged[-1][1] + data)
                else:
                    merged.append((pos, data))
            templates[shape] = (sink.pos, merged)
        return templates[shape]

    # Each rank's FileSystemWriter.write_data: one __<rank>_0.distcp, bytes items first, then the tensors in
    # _OverlappingCpuLoader's order (by size, stable).
    os.makedirs(out, exist_ok=True)
    results, layout = [], []
    for plan in (pickle.loads(pickle.dumps(p)) for p in global_plan):  # scatter_object_list
        name = f"{plan.storage_data.prefix}0.distcp"
        bytes_w = [wi for wi in plan.items if wi.type == WriteItemType.BYTE_IO]
        tensor_w = sorted((wi for wi in plan.items if wi.type != WriteItemType.BYTE_IO), key=_item_size)
        fd = os.open(os.path.join(out, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        offset, res, byte_ranges = 0, [], []
        for wi in bytes_w:
            buf = io.BytesIO()
            torch.save(flat[wi.index.fqn], buf)  # DefaultSavePlanner.transform_object
            data = buf.getvalue()
            os.pwrite(fd, data, offset)
            res.append(WriteResult(index=wi.index, size_in_bytes=len(data),
                                   storage_data=_StorageInfo(name, offset, len(data))))
            byte_ranges.append([offset, len(data)])
            offset += len(data)
        for wi in tensor_w:
            length, pieces = template(tuple(wi.tensor_data.chunk.sizes))
            if mode == "framing":
                for pos, data in pieces:
                    os.pwrite(fd, data, offset + pos)
            res.append(WriteResult(index=wi.index, size_in_bytes=length, storage_data=_StorageInfo(name, offset, length)))
            offset += length
        os.ftruncate(fd, offset)  # the tensor data stays a hole: sparse
        os.close(fd)
        results.append(pickle.loads(pickle.dumps(res)))  # gathered to the coordinator
        layout.append({"file": name, "size": offset, "bytes_items": byte_ranges, "tensor_items": len(tensor_w)})
    print(f"s1: data files in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    writer.finish(metadata, results)  # storage_data and storage_meta, then pickle.dump to .metadata
    md = metadata.state_dict_metadata
    tensors = [v for v in md.values() if hasattr(v, "chunks")]
    summary = {"ranks": ranks, "items": mode, "keys": len(md), "tensor_keys": len(tensors),
               "bytes_keys": len(md) - len(tensors), "chunks": sum(len(v.chunks) for v in tensors),
               "sharded_chunks": sum(len(v.chunks) for v in tensors if len(v.chunks) > 1),
               "model_tensors": sum(1 for k in md if k.startswith("model.")),
               "metadata_bytes": os.path.getsize(os.path.join(out, ".metadata")),
               "data_bytes": sum(f["size"] for f in layout), "files": layout,
               "torch": torch.__version__, "seconds": time.perf_counter() - t0}
    with open(out.rstrip("/") + ".layout.json", "w") as f:
        json.dump(summary, f)
    print(f"s1: done in {summary['seconds']:.1f} s: {summary['keys']} keys, {summary['chunks']} chunks, "
          f".metadata {summary['metadata_bytes']} bytes", file=sys.stderr)


main()
'''

CONVERT_PEER_SRC = r"""
# bench.py case i's peer: what a user writes today to turn a .bin into safetensors (torch 2.6 + safetensors).
import sys
import torch
from safetensors.torch import save_file
sd = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
save_file(sd, sys.argv[2], metadata={"format": "pt"})
"""

DCP_PEER_SRC = r"""
# bench.py case i's DCP peer: torch's own converter (loads every tensor into this process, then torch.save).
import sys
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
dcp_to_torch_save(sys.argv[1], sys.argv[2])
"""

DCP_GENERATE_SRC = LLAMA_DCP_COMMON_SRC + r"""
# bench.py case i: a DCP save by RANKS ranks of a Llama-like model with real (random) float32 values, each
# tensor a DTensor Shard(0) over the ranks. Each rank's local plan is made as create_default_local_save_plan
# makes it (one WriteItem per local piece), torch's DefaultSavePlanner makes the global plan and the metadata,
# and torch's FileSystemWriter writes each rank's __<rank>_0.distcp (write_data, the same code dcp.save runs on
# every rank), then finish() writes .metadata as the coordinator does. One process instead of 64 gloo
# processes: 64 interpreters with torch would not fit a small machine, and the files are the same.
import json, os, sys, time
from pathlib import Path
import torch
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorProperties
from torch.distributed.checkpoint.planner import SavePlan, TensorWriteData, WriteItem, WriteItemType

HIDDEN, FFN, VOCAB, LAYERS = 2048, 8192, 32000, 8


def model_parameters():
    return llama_parameters(HIDDEN, FFN, VOCAB, LAYERS, HIDDEN, HIDDEN)


class Pieces:
    # What FileSystemWriter.write_data asks of the planner: each item's tensor (the rank's local piece).
    def __init__(self, tensors):
        self.tensors = tensors

    def resolve_data(self, wi):
        c = wi.tensor_data.chunk
        return self.tensors[wi.index.fqn].narrow(0, c.offsets[0], c.sizes[0]).clone()


def main():
    out, ranks = sys.argv[1], int(sys.argv[2])
    t0 = time.perf_counter()
    torch.manual_seed(0)
    params = model_parameters()
    tensors = {fqn: torch.randn(shape) for fqn, shape in params}
    props = TensorProperties(dtype=torch.float32)
    plans = []
    for rank in range(ranks):
        items = []
        for fqn, shape in params:
            local, offset = shard0(shape[0], ranks, rank)
            if local == 0:
                continue
            offsets = torch.Size([offset] + [0] * (len(shape) - 1))
            sizes = torch.Size([local] + list(shape[1:]))
            items.append(WriteItem(index=MetadataIndex(fqn, offsets), type=WriteItemType.SHARD,
                                   tensor_data=TensorWriteData(chunk=ChunkStorageMetadata(offsets=offsets, sizes=sizes),
                                                               properties=props, size=torch.Size(shape))))
        plans.append(SavePlan(items, planner_data={fqn: (fqn,) for fqn, _ in params}))
    planner = DefaultSavePlanner()
    global_plan, metadata = planner.create_global_plan(plans)
    writer = FileSystemWriter(Path(out), sync_files=False)
    writer.set_up_storage_writer(True)
    global_plan = writer.prepare_global_plan(global_plan)
    pieces = Pieces(tensors)
    results = []
    for plan in global_plan:
        plan = writer.prepare_local_plan(plan)
        results.append(writer.write_data(plan, pieces).wait())
    writer.finish(metadata, results)
    files = [f for f in os.listdir(out) if f.endswith(".distcp")]
    summary = {"ranks": ranks, "files": len(files), "tensors": len(params),
               "chunks": sum(len(v.chunks) for v in metadata.state_dict_metadata.values()),
               "tensor_bytes": sum(t.numel() * 4 for t in tensors.values()),
               "data_bytes": sum(os.path.getsize(os.path.join(out, f)) for f in files),
               "torch": torch.__version__, "seconds": time.perf_counter() - t0}
    with open(out.rstrip("/") + ".layout.json", "w") as f:
        json.dump(summary, f)
    print(f"i: {summary}", file=sys.stderr)


main()
"""


def peer_namespace(src):
    ns = {}
    exec(compile(src, "<peer>", "exec"), ns)
    return ns


def whole_process_cmd(src, call):
    return [PYTHON, "-c", src + "\nimport sys\n" + call + "(sys.argv[1])\n"]


# --- inputs --------------------------------------------------------------------------------------------------

def human(n):
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000:
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1000
    return f"{n:.1f} PB"


def need_space(folder, nbytes):
    free = shutil.disk_usage(folder).free
    if free < nbytes * 1.2 + (1 << 30):
        sys.exit(f"bench: {folder} has {human(free)} free; this case needs about {human(nbytes)}")


def write_marker(path, info):
    with open(path + ".done", "w") as f:
        json.dump(info, f)


def read_marker(path, info):
    try:
        with open(path + ".done") as f:
            return json.load(f) == info and os.path.exists(path)
    except (OSError, ValueError):
        return False


def generate(kind, path, n):
    """Builds an input in a child process, so this script never imports torch itself."""
    info = {"kind": kind, "n": n, "v": 2}
    if read_marker(path, info):
        return
    need_space(os.path.dirname(path), {"small-zip": n * 1024, "large-zip": llm_bytes(n), "safetensors": 200 * n,
                                        "diff-pair": 400 * n, "quantized": 2 * n * n, "s2-fp8": (1 << 20) * n,
                                        "s2-stacked": (1 << 16) * n}[kind])
    subprocess.run([PYTHON, os.path.abspath(__file__), "--generate", kind, path, str(n)], check=True)
    write_marker(path, info)


def llm_bytes(layers):
    return sum(2 * prod(s) for _, s in llm_state_dict_spec(layers))


def make_small_zip(path, tensors):
    """A torch.save zip of `tensors` small tensors, each with its own storage (so one zip record each)."""
    import torch
    sd = {}
    layer = 0
    while len(sd) < tensors:
        for e in range(256):
            for w, shape in (("w1", (16, 8)), ("w2", (8, 16)), ("w3", (16, 8))):
                if len(sd) < tensors:
                    sd[f"model.layers.{layer}.mlp.experts.{e}.{w}.weight"] = torch.zeros(shape)
        layer += 1
    torch.save(sd, path)


def llm_state_dict_spec(layers):
    """Names and shapes of a LLaMA-like decoder (hidden 1536, GQA 4 KV heads of 64, MLP 4096, vocab 32000):
    9 tensors per layer; 35 layers make 318 tensors and 1.9 GB in float16."""
    hidden, kv, inter, vocab = 1536, 256, 4096, 32000
    spec = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        spec += [
            (p + "self_attn.q_proj.weight", (hidden, hidden)),
            (p + "self_attn.k_proj.weight", (kv, hidden)),
            (p + "self_attn.v_proj.weight", (kv, hidden)),
            (p + "self_attn.o_proj.weight", (hidden, hidden)),
            (p + "mlp.gate_proj.weight", (inter, hidden)),
            (p + "mlp.up_proj.weight", (inter, hidden)),
            (p + "mlp.down_proj.weight", (hidden, inter)),
            (p + "input_layernorm.weight", (hidden,)),
            (p + "post_attention_layernorm.weight", (hidden,)),
        ]
    spec += [("model.norm.weight", (hidden,)), ("lm_head.weight", (vocab, hidden))]
    return spec


def make_large_zip(path, layers):
    """A torch.save zip of a float16 LLaMA-like model; zeros, so building it costs no compute."""
    import torch
    sd = {name: torch.zeros(shape, dtype=torch.float16) for name, shape in llm_state_dict_spec(layers)}
    torch.save(sd, path)


def prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def make_safetensors(path, tensors):
    """A safetensors file written directly: compact header JSON, then a zero buffer made sparse by truncate."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0

    def add(name, dtype, shape):
        nonlocal offset
        size = prod(shape) * {"BF16": 2, "F32": 4}[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size

    count = 0
    layer = 0
    while count < tensors:
        p = f"model.layers.{layer}."
        names = [(p + "input_layernorm.weight", "F32", (1024,)),
                 (p + "self_attn.q_proj.weight", "BF16", (1024, 1024)),
                 (p + "self_attn.k_proj.weight", "BF16", (256, 1024)),
                 (p + "self_attn.v_proj.weight", "BF16", (256, 1024)),
                 (p + "self_attn.o_proj.weight", "BF16", (1024, 1024)),
                 (p + "post_attention_layernorm.weight", "F32", (1024,)),
                 (p + "block_sparse_moe.gate.weight", "BF16", (128, 1024))]
        for e in range(128):
            for w, shape in (("w1", (256, 128)), ("w2", (128, 256)), ("w3", (256, 128))):
                names.append((f"{p}block_sparse_moe.experts.{e}.{w}.weight", "BF16", shape))
        for name, dtype, shape in names:
            if count < tensors:
                add(name, dtype, shape)
                count += 1
        layer += 1
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the reference writer pads the header to 8 bytes with spaces
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.truncate(8 + len(text) + offset)  # sparse: the buffer costs no disk


# Case d: 20 rules that take Hugging Face Mixtral-like names to torchtitan's (and a few that match nothing
# here, as real rule files carry), applied in order.
DIFF_RULES = [
    (r"^_orig_mod\.", ""),
    (r"^module\.", ""),
    (r"^model\.embed_tokens\.", "tok_embeddings."),
    (r"^model\.norm\.", "norm."),
    (r"^lm_head\.", "output."),
    (r"^model\.layers\.(\d+)\.self_attn\.q_proj\.", r"layers.\1.attention.wq."),
    (r"^model\.layers\.(\d+)\.self_attn\.k_proj\.", r"layers.\1.attention.wk."),
    (r"^model\.layers\.(\d+)\.self_attn\.v_proj\.", r"layers.\1.attention.wv."),
    (r"^model\.layers\.(\d+)\.self_attn\.o_proj\.", r"layers.\1.attention.wo."),
    (r"^model\.layers\.(\d+)\.input_layernorm\.", r"layers.\1.attention_norm."),
    (r"^model\.layers\.(\d+)\.post_attention_layernorm\.", r"layers.\1.ffn_norm."),
    (r"^model\.layers\.(\d+)\.block_sparse_moe\.gate\.", r"layers.\1.moe.router.gate."),
    (r"^model\.layers\.(\d+)\.block_sparse_moe\.experts\.(\d+)\.w1\.", r"layers.\1.moe.experts.\2.w1."),
    (r"^model\.layers\.(\d+)\.block_sparse_moe\.experts\.(\d+)\.w2\.", r"layers.\1.moe.experts.\2.w2."),
    (r"^model\.layers\.(\d+)\.block_sparse_moe\.experts\.(\d+)\.w3\.", r"layers.\1.moe.experts.\2.w3."),
    (r"\.rotary_emb\.inv_freq$", None),
    (r"^model\.vision_tower\.", "vision."),
    (r"^model\.multi_modal_projector\.", "projector."),
    (r"\.base_layer\.", "."),
    (r"^base_model\.model\.", ""),
]


def make_quantized(path, side):
    """Case h: one bitsandbytes NF4 weight (absmax per 64) and one FP8 weight with weight_scale_inv per
    128 x 128 block, each side x side, random codes, as safetensors."""
    import numpy as np
    rng = np.random.default_rng(0)
    n = side * side
    nf4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                    0.7229568362236023, 1.0], dtype=np.float32)
    state = json.dumps({"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [side, side]}).encode()
    items = [("a.weight", "U8", [n // 2, 1], rng.integers(0, 256, size=n // 2, dtype=np.uint8).tobytes()),
             ("a.weight.absmax", "F32", [n // 64], rng.random(n // 64, dtype=np.float32).tobytes()),
             ("a.weight.quant_map", "F32", [16], nf4.tobytes()),
             ("a.weight.quant_state.bitsandbytes__nf4", "U8", [len(state)], state),
             ("b.weight", "F8_E4M3", [side, side], rng.integers(0, 0x7e, size=n, dtype=np.uint8).tobytes()),
             ("b.weight_scale_inv", "F32", [side // 128, side // 128],
              rng.random((side // 128, side // 128), dtype=np.float32).tobytes())]
    header, off = {}, 0
    for name, dt, shape, data in items:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for *_, data in items:
            f.write(data)
    os.replace(path + ".tmp", path)


def make_diff_pair(folder, tensors):
    """A.safetensors (HF names), B.safetensors (the same tensors under torchtitan names, one in 1,000 left out
    and one in 1,000 with another shape, so the report has every kind of row) and rules.json/rules.yaml."""
    import re
    os.makedirs(folder, exist_ok=True)
    a = os.path.join(folder, "a.safetensors")
    make_safetensors(a, tensors)
    with open(a, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__")
    compiled = [(re.compile(p), r) for p, r in DIFF_RULES]
    b_header = {"__metadata__": meta}
    offset = 0
    for i, (key, info) in enumerate(header.items()):
        for pattern, repl in compiled:
            if repl is not None:
                key = pattern.sub(repl, key)
        if i % 1000 == 999:
            continue
        shape = list(info["shape"])
        if i % 1000 == 500:
            shape[0] += 8
        size = prod(shape) * {"BF16": 2, "F32": 4}[info["dtype"]]
        b_header[key] = {"dtype": info["dtype"], "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(b_header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(folder, "b.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.truncate(8 + len(text) + offset)
    rules = [{"pattern": p, "replace": r or "", "drop": r is None} for p, r in DIFF_RULES]
    with open(os.path.join(folder, "rules.json"), "w") as f:
        json.dump({"version": 1, "rules": rules}, f)


# Case s2's inputs: DeepSeek-V3 as deepseek-ai/DeepSeek-V3 publishes it (model.safetensors.index.json over 163
# shards, model-0000i-of-000163.safetensors) and the same weights in transformers v5's stacked-experts layout.
# Matched: the config (61 layers, the first 3 dense with intermediate 18432; 256 routed experts of intermediate
# 2048 and one shared expert per MoE layer; hidden 7168; vocab 129280; MLA with q_lora_rank 1536, kv_lora_rank
# 512, 128 heads of qk_nope 128 + qk_rope 64 and v 128), the tensor names of the published index, FP8 e4m3
# (F8_E4M3) linear weights each with a float32 weight_scale_inv of one value per 128 x 128 block, bf16 norms,
# embeddings, lm_head and router, the router's float32 e_score_correction_bias: 90,427 tensors for layers 0-60,
# the issue's count. The published index also holds the multi-token-prediction layer 61 (1,564 more tensors):
# left out, as in the issue. Estimated: which tensors share a shard (in module order, cut greedily at the size
# that gives 163 shards for the whole model; smaller cases keep that size) and the order of the index's
# weight_map (sorted by name, as transformers writes it). Headers are what the safetensors library writes:
# tensors by dtype then name, compact JSON padded to 8 bytes with spaces; the data is a hole (truncate).
# The stacked side: transformers v5 keeps a MoE layer's experts as model.layers.N.mlp.experts.gate_up_proj
# [256, 4096, 7168] and mlp.experts.down_proj [256, 7168, 2048]; decided: the weights as v5 holds them after
# loading this FP8 checkpoint dequantized (bf16, no weight_scale_inv), saved by save_pretrained with 5 GB shards
# (transformers' long-standing default; a 15 GB stacked tensor gets a shard of its own).
DS3 = {"hidden": 7168, "inter": 18432, "moe_inter": 2048, "experts": 256, "vocab": 129280, "dense": 3,
       "heads": 128, "q_lora": 1536, "kv_lora": 512, "nope": 128, "rope": 64, "v": 128, "layers": 61, "shards": 163}
DTYPE_BYTES = {"F8_E4M3": 1, "BF16": 2, "F32": 4}


def ds3_tensors(layers, stacked=False):
    """(name, dtype, shape) of DeepSeek-V3's layers 0..layers-1 in module order."""
    h, c = DS3["hidden"], DS3
    out = [("model.embed_tokens.weight", "BF16", [c["vocab"], h])]

    def linear(name, rows, cols):
        if stacked:
            return [(name + ".weight", "BF16", [rows, cols])]
        return [(name + ".weight", "F8_E4M3", [rows, cols]),
                (name + ".weight_scale_inv", "F32", [-(-rows // 128), -(-cols // 128)])]

    for n in range(layers):
        p = f"model.layers.{n}."
        a = p + "self_attn."
        out += linear(a + "q_a_proj", c["q_lora"], h)
        out.append((a + "q_a_layernorm.weight", "BF16", [c["q_lora"]]))
        out += linear(a + "q_b_proj", c["heads"] * (c["nope"] + c["rope"]), c["q_lora"])
        out += linear(a + "kv_a_proj_with_mqa", c["kv_lora"] + c["rope"], h)
        out.append((a + "kv_a_layernorm.weight", "BF16", [c["kv_lora"]]))
        out += linear(a + "kv_b_proj", c["heads"] * (c["nope"] + c["v"]), c["kv_lora"])
        out += linear(a + "o_proj", h, c["heads"] * c["v"])
        m = p + "mlp."
        if n < c["dense"]:
            out += linear(m + "gate_proj", c["inter"], h) + linear(m + "up_proj", c["inter"], h)
            out += linear(m + "down_proj", h, c["inter"])
        else:
            if stacked:
                out += [(m + "experts.gate_up_proj", "BF16", [c["experts"], 2 * c["moe_inter"], h]),
                        (m + "experts.down_proj", "BF16", [c["experts"], h, c["moe_inter"]])]
            else:
                for e in range(c["experts"]):
                    x = f"{m}experts.{e}."
                    out += linear(x + "gate_proj", c["moe_inter"], h) + linear(x + "up_proj", c["moe_inter"], h)
                    out += linear(x + "down_proj", h, c["moe_inter"])
            out += [(m + "gate.weight", "BF16", [c["experts"], h]),
                    (m + "gate.e_score_correction_bias", "F32", [c["experts"]])]
            out += linear(m + "shared_experts.gate_proj", c["moe_inter"], h)
            out += linear(m + "shared_experts.up_proj", c["moe_inter"], h)
            out += linear(m + "shared_experts.down_proj", h, c["moe_inter"])
        out += [(p + "input_layernorm.weight", "BF16", [h]), (p + "post_attention_layernorm.weight", "BF16", [h])]
    return out + [("model.norm.weight", "BF16", [h]), ("lm_head.weight", "BF16", [c["vocab"], h])]


def tensor_bytes(t):
    return prod(t[2]) * DTYPE_BYTES[t[1]]


def cut_shards(tensors, cap):
    """Tensors in order, a new shard when the next one would pass cap bytes (huggingface_hub's
    split_torch_state_dict_into_shards; a tensor over cap fills a shard of its own)."""
    shards, current, size = [], [], 0
    for t in tensors:
        n = tensor_bytes(t)
        if current and size + n > cap:
            shards.append(current)
            current, size = [], 0
        current.append(t)
        size += n
    return shards + ([current] if current else [])


def ds3_shard_cap():
    """The smallest shard size that cuts the whole model into DeepSeek-V3's 163 shards."""
    full = ds3_tensors(DS3["layers"])
    lo, hi = 1, sum(tensor_bytes(t) for t in full)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(cut_shards(full, mid)) <= DS3["shards"]:
            hi = mid
        else:
            lo = mid + 1
    assert len(cut_shards(full, lo)) == DS3["shards"]
    return lo


def write_safetensors_index(folder, shards, name):
    """Shard headers as the safetensors library writes them (data a hole) and the index transformers writes."""
    os.makedirs(folder, exist_ok=True)
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        file_name = name(i + 1, len(shards))
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for t_name, dtype, shape in sorted(shard, key=lambda t: (-DTYPE_BYTES[t[1]], t[0])):
            n = prod(shape) * DTYPE_BYTES[dtype]
            header[t_name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
            weight_map[t_name] = file_name
            offset += n
        total += offset
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(folder, file_name), "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            f.truncate(8 + len(text) + offset)
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)


def make_s2_fp8(folder, layers):
    write_safetensors_index(folder, cut_shards(ds3_tensors(layers), ds3_shard_cap()),
                            lambda i, n: f"model-{i:05d}-of-{n:06d}.safetensors")


def make_s2_stacked(folder, layers):
    write_safetensors_index(folder, cut_shards(ds3_tensors(layers, stacked=True), 5 * 10**9),
                            lambda i, n: f"model-{i:05d}-of-{n:05d}.safetensors")

# --- timing --------------------------------------------------------------------------------------------------

def evict(path):
    """Drops the file's pages from the page cache (works without root, unlike /proc/sys/vm/drop_caches).
    Dirty pages cannot be dropped, so a file just written (a freshly generated input) is synced first:
    otherwise its unwritten pages stay cached and read as pages the measured run brought in."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def warm(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


class Measure:
    """One thing timed repeatedly: wall time (what the targets use) and CPU time (user + sys), which a busy
    shared machine disturbs less."""

    def __init__(self, key, label, kind, fn, cold_path=None):
        self.key, self.label, self.kind, self.fn, self.cold_path = key, label, kind, fn, cold_path
        self.runs = []
        self.cpu_runs = []

    def once(self):
        if self.cold_path:
            evict(self.cold_path)
        gc.collect()
        wall, cpu = self.fn()
        self.runs.append(wall)
        self.cpu_runs.append(cpu)

    def clear(self):
        self.runs.clear()
        self.cpu_runs.clear()

    @property
    def median(self):
        return statistics.median(self.runs)

    @property
    def cpu_median(self):
        return statistics.median(self.cpu_runs)


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def subprocess_timer(cmd, ok_codes=(0,)):
    def run():
        c0 = children_cpu()
        t0 = time.perf_counter()
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t = time.perf_counter() - t0
        cpu = children_cpu() - c0
        if r.returncode not in ok_codes:
            sys.exit(f"bench: {' '.join(cmd[:2])}... exited with {r.returncode}")
        return t, cpu
    return run


def helper_timer(peer, path, cold=False, warmup=None):
    """An in-process peer, timed inside a fresh interpreter (this script with --helper): imports and a
    warm-up call first, then one timed call of just the parse. A fresh process per run keeps this script's
    own heap and threads out of the numbers (a big heap slows Python's GC, and torch's idle worker threads
    spin on the two cores)."""
    cmd = [PYTHON, os.path.abspath(__file__), "--helper", peer, path]
    if cold:
        cmd += ["--cold"]
    if warmup:
        cmd += ["--warmup", warmup]

    def run():
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            sys.exit(f"bench: helper {peer} failed on {path}:\n{r.stderr}")
        out = json.loads(r.stdout)
        return out["wall"], out["cpu"]
    return run


def helper_main(peer, path, cold, warmup):
    """--helper: prints {"wall", "cpu", "count"} for one timed call of `peer` on `path`."""
    if peer == "diff":
        fn, arg = peer_namespace(DIFF_SRC)["diff_pair"], path
        warm_arg = path
    elif peer == "s2headers":
        fn, arg = peer_namespace(S2_HEADERS_SRC)["read_index_headers"], path
        warm_arg = path
    elif peer == "json":
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            data = f.read(n)
        fn, arg = json.loads, data
        warm_arg = data
    else:
        src, name = (LAZY_UNPICKLE_SRC, "lazy_metadata") if peer == "unpickle" else (TORCH_LOAD_SRC, "torch_load")
        fn, arg = peer_namespace(src)[name], path
        warm_arg = warmup or path
    result = fn(warm_arg)  # imports, lazy initialisation, first-call costs
    del result
    if cold:
        evict(path)
    gc.collect()
    c0 = time.process_time()
    t0 = time.perf_counter()
    result = fn(arg)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    print(json.dumps({"wall": wall, "cpu": cpu, "count": len(result)}))


def run_interleaved(measures, reps, warmups=1):
    for _ in range(warmups):
        for m in measures:
            m.once()
        for m in measures:
            m.clear()
    for i in range(reps):
        order = measures[:] if i % 2 == 0 else measures[::-1]  # alternate order so drift hits all alike
        for m in order:
            m.once()


def statelens_measures(args, path, suffix="", cold_path=None):
    binaries = [("statelens", args.statelens)]
    if args.compare_statelens:
        binaries.append(("baseline", args.compare_statelens))
    out = []
    for who, binary in binaries:
        for fmt in ("table", "json"):
            label = f"statelens ls ({fmt})" if who == "statelens" else f"baseline statelens ls ({fmt})"
            out.append(Measure(f"{who}-{fmt}{suffix}", label, who,
                               subprocess_timer([binary, "ls", path, "--format", fmt]), cold_path))
    return out


def baseline_rows(case, measures):
    """--compare-statelens: how much faster this statelens is than the other binary, per format."""
    by = {m.key: m for m in measures}
    rows = []
    for key, m in by.items():
        if not key.startswith("baseline-"):
            continue
        new = by["statelens-" + key[len("baseline-"):]]
        rows.append({"case": case, "format": key[len("baseline-"):], "baseline_s": m.median, "statelens_s": new.median,
                     "speedup": m.median / new.median, "baseline_cpu_s": m.cpu_median,
                     "statelens_cpu_s": new.cpu_median, "cpu_speedup": m.cpu_median / new.cpu_median})
    return rows


def check_statelens(statelens, path, expected_entries):
    r = subprocess.run([statelens, "ls", path, "--format", "json"], capture_output=True)
    if r.returncode != 0:
        sys.exit(f"bench: statelens failed on {path}: {r.stderr.decode(errors='replace')}")
    doc = json.loads(r.stdout)
    got = len(doc["entries"])
    if got != expected_entries:
        sys.exit(f"bench: statelens listed {got} entries in {path}, expected {expected_entries}")


def compare(case, measures, peer_key, target, note="", formats=("table", "json")):
    """One row per statelens format: peer median / statelens median."""
    by = {m.key: m for m in measures}
    peer = by[peer_key]
    rows = []
    suffix = peer_key[peer_key.index("@"):] if "@" in peer_key else ""
    for fmt in formats:
        sl = by["statelens-" + fmt + suffix]
        ratio = peer.median / sl.median
        rows.append({
            "peer_cpu_s": peer.cpu_median,
            "statelens_cpu_s": sl.cpu_median,
            "cpu_ratio": peer.cpu_median / sl.cpu_median if sl.cpu_median > 0 else None,
            "case": case,
            "peer": peer.label,
            "comparison": peer.kind,
            "peer_s": peer.median,
            "statelens": sl.label,
            "statelens_s": sl.median,
            "ratio": ratio,
            "target": target,
            "pass": None if target is None else ratio >= target,
            "note": note,
        })
    return rows


# --- cases ---------------------------------------------------------------------------------------------------

def whole_process(key, label, src, call, path, cold=False):
    return Measure(key, label, "whole process", subprocess_timer(whole_process_cmd(src, call) + [path]),
                   path if cold else None)


def in_process(key, label, peer, path, cold=False, warmup=None):
    return Measure(key, label, "in-process", helper_timer(peer, path, cold, warmup))


def check_peer(peer, path, expected):
    r = subprocess.run([PYTHON, os.path.abspath(__file__), "--helper", peer, path], capture_output=True, text=True)
    if r.returncode != 0 or json.loads(r.stdout)["count"] != expected:
        sys.exit(f"bench: peer {peer} did not list {expected} items in {path}: {r.stdout} {r.stderr}")


def case_small_zip(args, workdir, sizes):
    n = sizes["small_zip_tensors"]
    path = os.path.join(workdir, f"small-{n}.bin")
    t0 = time.perf_counter()
    generate("small-zip", path, n)
    log(f"a: {path} ({human(os.path.getsize(path))}, {n} tensors) ready in {time.perf_counter() - t0:.1f} s")
    check_statelens(args.statelens, path, n)
    check_peer("unpickle", path, n)
    warm(path)
    measures = statelens_measures(args, path) + [
        whole_process("unpickle-process", "python3 metadata-only unpickle", LAZY_UNPICKLE_SRC, "lazy_metadata", path),
        in_process("unpickle-inproc", "metadata-only unpickle, in-process", "unpickle", path),
        whole_process("torchload-process", "python3 torch.load", TORCH_LOAD_SRC, "torch_load", path),
        in_process("torchload-inproc", "torch.load, in-process", "torchload", path),
    ]
    run_interleaved(measures, args.reps)
    label = f"a. torch zip, {n:,} small tensors ({human(os.path.getsize(path))})"
    rows = []
    for key in ("unpickle-process", "unpickle-inproc", "torchload-process", "torchload-inproc"):
        rows += compare(label, measures, key, 20)
    return {"case": "a", "label": label, "file_bytes": os.path.getsize(path), "tensors": n,
            "cache": "warm", "measurements": dump(measures), "rows": rows,
            "baseline_rows": baseline_rows(label, measures)}


def case_large_zip(args, workdir, sizes):
    layers = sizes["large_zip_layers"]
    path = os.path.join(workdir, f"llm-{layers}layers.bin")
    spec = llm_state_dict_spec(layers)
    t0 = time.perf_counter()
    generate("large-zip", path, layers)
    size = os.path.getsize(path)
    log(f"b: {path} ({human(size)}, {len(spec)} tensors) ready in {time.perf_counter() - t0:.1f} s")
    check_statelens(args.statelens, path, len(spec))
    warm(path)
    measures = statelens_measures(args, path) + [
        whole_process("torchload-process", "python3 torch.load", TORCH_LOAD_SRC, "torch_load", path),
        in_process("torchload-inproc", "torch.load, in-process", "torchload", path),
        whole_process("unpickle-process", "python3 metadata-only unpickle", LAZY_UNPICKLE_SRC, "lazy_metadata", path),
        in_process("unpickle-inproc", "metadata-only unpickle, in-process", "unpickle", path),
    ]
    run_interleaved(measures, args.reps)
    label = f"b. torch zip, {len(spec)} LLM tensors ({human(size)})"
    rows = []
    for key in ("torchload-process", "torchload-inproc"):
        rows += compare(label + ", warm", measures, key, 100)
    for key in ("unpickle-process", "unpickle-inproc"):
        rows += compare(label + ", warm", measures, key, None, "context only, no target")
    result = {"case": "b", "label": label, "file_bytes": size, "tensors": len(spec), "cache": "warm",
              "measurements": dump(measures), "rows": rows,
              "baseline_rows": baseline_rows(label + ", warm", measures)}
    if args.cold_reps > 0:
        # Cold file cache: the checkpoint's pages are evicted (posix_fadvise DONTNEED) right before each timed
        # run; the interpreters, torch and statelens themselves stay cached. The in-process torch.load warms
        # up on a one-tensor file, then evicts the checkpoint and times the load.
        tiny = os.path.join(workdir, "tiny.bin")
        generate("small-zip", tiny, 1)
        cold = statelens_measures(args, path, "@cold", path) + [
            whole_process("torchload-process@cold", "python3 torch.load", TORCH_LOAD_SRC, "torch_load", path, True),
            in_process("torchload-inproc@cold", "torch.load, in-process", "torchload", path, True, tiny),
        ]
        run_interleaved(cold, args.cold_reps, warmups=0)
        for key in ("torchload-process@cold", "torchload-inproc@cold"):
            rows += compare(label + ", cold", cold, key, 100)
        result["cold_measurements"] = dump(cold)
        result["baseline_rows"] += baseline_rows(label + ", cold", cold)
        warm(path)
    return result


def output_measure(key, label, kind, cmd, output, cwd=None):
    """run_measure for a command that writes `output` (a file or a folder): removed before every run, so each
    run writes it anew, and after the last."""
    m = run_measure(key, label, kind, cmd, cwd=cwd)
    timed = m.fn

    def run():
        remove_output(output)
        return timed()
    m.fn = run
    m.output = output
    return m


def remove_output(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


def generate_dcp_real(args, workdir, ranks):
    """Case i's DCP folder (DCP_GENERATE_SRC), made once per cache folder."""
    name = f"i-dcp-{ranks}ranks"
    folder = os.path.join(workdir, name)
    info = {"kind": "i-dcp", "ranks": ranks, "v": 1}
    if not read_marker(folder, info):
        if not os.access(args.torch2_env, os.X_OK):
            sys.exit(f"bench: case i needs torch 2.x through {args.torch2_env} (--torch2-env)")
        need_space(workdir, 3 * 2_700_000_000)
        shutil.rmtree(folder, ignore_errors=True)
        with open(os.path.join(workdir, "_statelens_i_dcp_generate.py"), "w") as f:
            f.write(DCP_GENERATE_SRC)
        t0 = time.perf_counter()
        subprocess.run(torch2_cmd(args, "_statelens_i_dcp_generate.py", "/here/" + name, str(ranks)), cwd=workdir,
                       check=True)
        write_marker(folder, info)
        log(f"i: {folder} generated in {time.perf_counter() - t0:.0f} s")
    with open(folder + ".layout.json") as f:
        return folder, json.load(f)


def ratio_row(case, peer, ours, target=None, note="", at_most=None, target_text=None):
    """A row comparing two measures: ratio = peer / ours (>= target), or with at_most, ours / peer (<= at_most:
    "at most 1.5x the time of cp")."""
    ratio = ours.median / peer.median if at_most else peer.median / ours.median
    passed = None if (target is None and at_most is None) else (ratio <= at_most if at_most else ratio >= target)
    cpu = (peer.cpu_median / ours.cpu_median if ours.cpu_median > 0 else None) if not at_most else \
        (ours.cpu_median / peer.cpu_median if peer.cpu_median > 0 else None)
    return {"case": case, "peer": peer.label, "comparison": peer.kind, "peer_s": peer.median, "statelens": ours.label,
            "statelens_s": ours.median, "ratio": ratio, "target": target if not at_most else at_most,
            "target_text": target_text, "pass": passed, "note": note, "peer_cpu_s": peer.cpu_median,
            "statelens_cpu_s": ours.cpu_median, "cpu_ratio": cpu}


def peak_limit_row(case, ours, limit, peers):
    peak = max(ours.peaks)
    others = "; ".join(f"{p.label} {human(max(p.peaks))}" for p in peers)
    return {"case": case, "peer": f"target under {human(limit)}", "comparison": "absolute", "peer_s": limit,
            "statelens": f"peak resident set {human(peak)} ({others})", "statelens_s": peak, "ratio": limit / peak,
            "target": 1, "target_text": f"< {human(limit)}", "pass": peak < limit, "note": "memory",
            "peer_cpu_s": None, "statelens_cpu_s": None, "cpu_ratio": None}


def case_convert(args, workdir, sizes):
    """i. `statelens convert` of b's .bin and of a 64-rank DCP save with real data (see the docstring)."""
    reps = max(1, min(args.reps, 3))
    limit = 64_000_000
    layers = sizes["large_zip_layers"]
    path = os.path.join(workdir, f"llm-{layers}layers.bin")
    generate("large-zip", path, layers)
    size = os.path.getsize(path)
    need_space(workdir, 2 * size)
    with open(os.path.join(workdir, "_statelens_i_peer.py"), "w") as f:
        f.write(CONVERT_PEER_SRC)
    with open(os.path.join(workdir, "_statelens_i_dcp_peer.py"), "w") as f:
        f.write(DCP_PEER_SRC)
    out = os.path.join(workdir, "i-out")
    os.makedirs(out, exist_ok=True)
    warm(path)
    ours = output_measure("statelens-convert", "statelens convert", "statelens",
                          [args.statelens, "convert", path, "-o", os.path.join(out, "sl.safetensors")],
                          os.path.join(out, "sl.safetensors"))
    cp = output_measure("cp", "cp", "whole process", ["cp", path, os.path.join(out, "cp.bin")],
                        os.path.join(out, "cp.bin"))
    dd = output_measure("dd", "dd bs=8M (read+write loop)", "whole process",
                        ["dd", f"if={path}", f"of={os.path.join(out, 'dd.bin')}", "bs=8M", "status=none"],
                        os.path.join(out, "dd.bin"))
    ddsync = output_measure("dd-fsync", "dd bs=8M conv=fsync", "whole process",
                            ["dd", f"if={path}", f"of={os.path.join(out, 'ddsync.bin')}", "bs=8M", "conv=fsync",
                             "status=none"], os.path.join(out, "ddsync.bin"))
    rel = os.path.relpath(path, workdir)
    peer = output_measure("torch-save-file", "torch.load + safetensors save_file (torch 2.6)", "whole process",
                          torch2_cmd(args, "_statelens_i_peer.py", "/here/" + rel, "/here/i-out/peer.safetensors"),
                          os.path.join(out, "peer.safetensors"), cwd=workdir)
    measures = [ours, cp, dd, ddsync, peer]
    run_interleaved(measures, reps)
    label = f"i. convert b's {human(size)} torch zip to safetensors"
    rows = [ratio_row(label, cp, ours, at_most=1.5, target_text="≤ 1.5x cp"),
            peak_limit_row(label, ours, limit, [cp, dd, peer]),
            ratio_row(label, dd, ours, note="context: the same bytes read and written"),
            ratio_row(label, ddsync, ours, note="context: and flushed to disk, as convert does"),
            ratio_row(label, peer, ours, note="context, no target")]
    result = {"case": "i", "label": label, "file_bytes": size, "measurements": dump(measures),
              "peaks": {m.key: m.peaks for m in measures}, "rows": rows, "baseline_rows": []}
    for m in measures:
        remove_output(m.output)

    folder, layout = generate_dcp_real(args, workdir, 64)
    warm_folder = [os.path.join(folder, f) for f in os.listdir(folder)]
    for f in warm_folder:
        warm(f)
    dcp_ours = output_measure("statelens-convert-dcp", "statelens convert", "statelens",
                              [args.statelens, "convert", folder, "-o", os.path.join(out, "dcp.safetensors")],
                              os.path.join(out, "dcp.safetensors"))
    dcp_peer = output_measure("dcp-to-torch-save", "dcp_to_torch_save (torch 2.6)", "whole process",
                              torch2_cmd(args, "_statelens_i_dcp_peer.py", "/here/" + os.path.basename(folder),
                                         "/here/i-out/dcp.pt"), os.path.join(out, "dcp.pt"), cwd=workdir)
    dcp_cp = output_measure("cp-r", "cp -r of the folder", "whole process",
                            ["cp", "-r", folder, os.path.join(out, "dcp-copy")], os.path.join(out, "dcp-copy"))
    dcp_measures = [dcp_ours, dcp_peer, dcp_cp]
    run_interleaved(dcp_measures, reps)
    dlabel = (f"i. convert a DCP save by {layout['ranks']} ranks ({layout['files']} files, {layout['chunks']} chunks, "
              f"{human(layout['tensor_bytes'])} of float32 values)")
    drows = [peak_limit_row(dlabel, dcp_ours, limit, [dcp_peer, dcp_cp]),
             ratio_row(dlabel, dcp_peer, dcp_ours, note="context, no target"),
             ratio_row(dlabel, dcp_cp, dcp_ours, note="context: the same bytes copied")]
    for m in dcp_measures:
        remove_output(m.output)
    result["rows"] += drows
    result["dcp_layout"] = layout
    result["dcp_measurements"] = dump(dcp_measures)
    result["dcp_peaks"] = {m.key: m.peaks for m in dcp_measures}
    return result


def reader_phase_timer(statelens, path, phases):
    """The reader's own time inside a statelens run (`ls --timings` prints each phase on stderr): the sum of
    `phases`, i.e. parsing the header into entries, without process start-up or output. This is what
    target c compares with json.loads, which likewise only parses."""
    def run():
        r = subprocess.run([statelens, "ls", path, "--timings"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
        if r.returncode != 0:
            sys.exit(f"bench: statelens --timings failed on {path}")
        total = 0.0
        for line in r.stderr.splitlines():
            name = line[:24].strip()
            if name in phases:
                total += float(line[24:].split()[0]) / 1000
        return total, total
    return run


def case_safetensors(args, workdir, sizes):
    n = sizes["safetensors_tensors"]
    path = os.path.join(workdir, f"many-{n}.safetensors")
    t0 = time.perf_counter()
    generate("safetensors", path, n)
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
    log(f"c: {path} (header {human(hlen)}, {n} tensors, {human(os.path.getsize(path))} sparse) "
        f"ready in {time.perf_counter() - t0:.1f} s")
    check_statelens(args.statelens, path, n)
    check_peer("json", path, n + 1)  # + __metadata__
    reader = Measure("statelens-reader", "statelens header reader (parse + checks + entries)", "statelens",
                     reader_phase_timer(args.statelens, path, {"header parse", "duplicate names", "validate offsets"}))
    measures = statelens_measures(args, path) + [
        whole_process("json-process", "python3 read header + json.loads", JSON_HEADER_SRC, "read_header", path),
        in_process("json-inproc", "json.loads(header bytes), in-process", "json", path),
        reader,
    ]
    run_interleaved(measures, args.reps)
    label = f"c. safetensors, {n:,} tensors (header {human(hlen)})"
    rows = compare(label, measures, "json-process", 10) + compare(label, measures, "json-inproc", 10)
    peer = next(m for m in measures if m.key == "json-inproc")
    rows.append({"case": label, "peer": peer.label, "comparison": "parse vs parse", "peer_s": peer.median,
                 "statelens": reader.label, "statelens_s": reader.median, "ratio": peer.median / reader.median,
                 "target": 10, "pass": peer.median / reader.median >= 10, "note": "",
                 "peer_cpu_s": peer.cpu_median, "statelens_cpu_s": reader.cpu_median,
                 "cpu_ratio": peer.cpu_median / reader.cpu_median if reader.cpu_median else None})
    return {"case": "c", "label": label, "file_bytes": os.path.getsize(path), "header_bytes": hlen, "tensors": n,
            "cache": "warm", "measurements": dump(measures), "rows": rows,
            "baseline_rows": baseline_rows(label, measures)}


def case_diff(args, workdir, sizes):
    n = sizes["diff_tensors"]
    folder = os.path.join(workdir, f"diff-{n}")
    t0 = time.perf_counter()
    generate("diff-pair", folder, n)
    a, b, rules = (os.path.join(folder, f) for f in ("a.safetensors", "b.safetensors", "rules.json"))
    log(f"d: {folder} (2 x {n:,} tensors, {len(DIFF_RULES)} rules) ready in {time.perf_counter() - t0:.1f} s")
    diff_cmd = [args.statelens, "diff", a, b, "--rules", rules, "--format", "json"]
    r = subprocess.run(diff_cmd, capture_output=True)
    if r.returncode not in (0, 1):
        sys.exit(f"bench: statelens diff failed: {r.stderr.decode(errors='replace')}")
    ours = json.loads(r.stdout)
    peer_rows = json.loads(peer_namespace(DIFF_SRC)["diff_pair"](f"{a}|{b}|{rules}"))["rows"]
    want = {}
    for row in peer_rows:
        want[row["status"]] = want.get(row["status"], 0) + 1
    got = {k: v for k, v in ours["summary"].items() if type(v) is int and v}
    if got != want:
        sys.exit(f"bench: statelens diff and the Python peer disagree: {got} vs {want}")
    paths = f"{a}|{b}|{rules}"
    measures = [
        # diff exits 1 here: the pair has missing, unexpected and shape-mismatched rows on purpose.
        Measure("statelens-json", "statelens diff --format json", "statelens", subprocess_timer(diff_cmd, (1,))),
        Measure("statelens-text", "statelens diff (text)", "statelens", subprocess_timer(diff_cmd[:-2], (1,))),
        whole_process("diff-process", "python3 json + re diff", DIFF_SRC, "diff_pair", paths),
        in_process("diff-inproc", "json + re diff, in-process", "diff", paths),
    ]
    run_interleaved(measures, args.reps)
    label = f"d. diff, {n:,} vs {n:,} tensors, {len(DIFF_RULES)} rules"
    rows = []
    for key in ("diff-process", "diff-inproc"):
        rows += compare(label, measures, key, 10, formats=("json",))
    rows.append(absolute_row(label, measures[0], 1.0))
    return {"case": "d", "label": label, "tensors": n, "summary": got, "cache": "warm",
            "measurements": dump(measures), "rows": rows, "baseline_rows": []}


def case_suggest(args, workdir, sizes):
    n = sizes["diff_tensors"]
    folder = os.path.join(workdir, f"diff-{n}")
    generate("diff-pair", folder, n)
    a, b = os.path.join(folder, "a.safetensors"), os.path.join(folder, "b.safetensors")
    cmd = [args.statelens, "suggest", a, b]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0 or "pattern:" not in r.stdout:
        sys.exit(f"bench: statelens suggest failed: {r.stderr}")
    log("e: " + r.stderr.strip().splitlines()[-1])
    m = Measure("statelens-suggest", "statelens suggest (no rules)", "statelens", subprocess_timer(cmd))
    run_interleaved([m], args.reps)
    label = f"e. suggest, {n:,} vs {n:,} tensors"
    return {"case": "e", "label": label, "tensors": n, "cache": "warm", "measurements": dump([m]),
            "rows": [absolute_row(label, m, 1.0)], "baseline_rows": []}


def rss_timer(cmd, ok_codes=(0,)):
    """Wall time, CPU time and the peak resident set of the child, per run.

    The peak comes from GNU time (/usr/bin/time -f %M), which forks from its own small image: a child forked
    from this script would carry the script's resident set in its peak, because Linux folds the pre-exec
    image's high-water mark into ru_maxrss at exec. Without GNU time, os.wait4's figure is kept (an upper
    bound) and marked."""
    peaks = []
    gnu_time = shutil.which("time") if os.path.exists("/usr/bin/time") else None

    def run():
        with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
            full = [gnu_time, "-f", "%M", "-o", rss.name] + cmd if gnu_time else cmd
            t0 = time.perf_counter()
            p = subprocess.Popen(full, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _, status, usage = os.wait4(p.pid, 0)
            t = time.perf_counter() - t0
            code = os.waitstatus_to_exitcode(status)
            if code not in ok_codes:
                sys.exit(f"bench: {' '.join(cmd[:2])}... exited with {code}")
            kb = int(rss.read().strip().splitlines()[-1]) if gnu_time else usage.ru_maxrss
        peaks.append(kb * 1024)
        return t, usage.ru_utime + usage.ru_stime
    run.exact = gnu_time is not None
    return run, peaks


def peak_row(label, size, ours, our_peaks, peer_name, peer_peaks):
    """The memory target of the values cases: statelens's peak resident set under 10% of the file."""
    peak = max(our_peaks)
    bound = "" if ours.exact else "; an upper bound: no GNU time"
    return {"case": label, "peer": "target 10% of the file", "comparison": "absolute", "peer_s": 0.1 * size,
            "statelens": f"peak resident set {human(peak)} ({100 * peak / size:.1f}% of the file; {peer_name} "
                         f"{human(max(peer_peaks))}{bound})", "statelens_s": peak, "ratio": 0.1 * size / peak,
            "target": 1, "pass": peak <= 0.1 * size, "note": "memory", "peer_cpu_s": None,
            "statelens_cpu_s": None, "cpu_ratio": None}


def case_values(args, workdir, sizes):
    """g. Values of case b's checkpoint (warm page cache): statelens stats (every statistic, the histogram
    and the content hash of every tensor) against torch.load followed by the same reductions in Python."""
    layers = sizes["large_zip_layers"]
    path = os.path.join(workdir, f"llm-{layers}layers.bin")
    generate("large-zip", path, layers)
    size = os.path.getsize(path)
    warm(path)
    ours, our_peaks = rss_timer([args.statelens, "stats", path, "--format", "json", "-o", os.devnull])
    peer, peer_peaks = rss_timer(whole_process_cmd(STATS_SRC, "stats") + [path])
    measures = [Measure("statelens-stats", "statelens stats", "statelens", ours),
                Measure("torch-stats", "python3 torch.load + reductions", "peer", peer)]
    run_interleaved(measures, max(1, min(args.reps, 3)))
    label = f"g. values of a {human(size)} torch zip (fp16), warm"
    rows = compare(label, measures, "torch-stats", 3, formats=("stats",))
    gbps = size / measures[0].median / 1e9
    # As a time: the peer column is what 1 GB/s would take, so the ratio is the throughput in GB/s.
    rows.append({"case": label, "peer": "target 1 GB/s", "comparison": "absolute", "peer_s": size / 1e9,
                 "statelens": f"statelens stats throughput ({gbps:.2f} GB/s)", "statelens_s": measures[0].median,
                 "ratio": gbps, "target": 1, "pass": gbps >= 1, "note": "GB/s", "peer_cpu_s": None,
                 "statelens_cpu_s": measures[0].cpu_median, "cpu_ratio": None})
    rows.append(peak_row(label, size, ours, our_peaks, "torch", peer_peaks))
    return {"case": "g", "label": label, "file_bytes": size, "cache": "warm", "measurements": dump(measures),
            "rows": rows, "baseline_rows": [], "peak_rss": {"statelens": our_peaks, "torch": peer_peaks}}


def case_quantized_values(args, workdir, sizes):
    """h. Values of quantized weights (warm page cache): statelens stats dequantizes a bitsandbytes NF4 and a
    block-scaled FP8 weight as their libraries do, against reading them in Python and applying the same
    recipes and reductions with torch."""
    side = sizes["quantized_side"]
    path = os.path.join(workdir, f"quantized-{side}.safetensors")
    generate("quantized", path, side)
    size = os.path.getsize(path)
    warm(path)
    ours, our_peaks = rss_timer([args.statelens, "stats", path, "--format", "json", "-o", os.devnull])
    peer, peer_peaks = rss_timer(whole_process_cmd(QUANT_STATS_SRC, "stats") + [path])
    measures = [Measure("statelens-stats", "statelens stats (dequantized)", "statelens", ours),
                Measure("torch-qstats", "python3 + torch dequantize recipes + reductions", "peer", peer)]
    run_interleaved(measures, max(1, min(args.reps, 2)), warmups=0)
    values = 2 * side * side
    label = f"h. values of NF4 + FP8 weights ({human(size)}, {values / 1e6:.0f}M values), warm"
    rows = compare(label, measures, "torch-qstats", 3, formats=("stats",))
    rows.append(peak_row(label, size, ours, our_peaks, "Python", peer_peaks))
    log(f"h: {values / measures[0].median / 1e6:.0f}M dequantized values/s")
    return {"case": "h", "label": label, "file_bytes": size, "cache": "warm", "measurements": dump(measures),
            "rows": rows, "baseline_rows": [], "peak_rss": {"statelens": our_peaks, "python": peer_peaks}}


def case_gui(args, workdir, sizes):
    """f. The window on the 100,000-row pair under Xvfb: time from launch to the first paint of the compared
    trees, and per-keystroke filter time (typing "layers.1.mlp", layers folded and unfolded)."""
    n = sizes["diff_tensors"]
    folder = os.path.join(workdir, f"diff-{n}")
    generate("diff-pair", folder, n)
    a, b, rules = (os.path.join(folder, f) for f in ("a.safetensors", "b.safetensors", "rules.json"))
    if not shutil.which("xvfb-run"):
        sys.exit("bench: case f needs xvfb-run (apt install xvfb xauth)")
    script = 'STATELENS_LAUNCH_EPOCH=$(date +%s.%N) exec "$@"'
    cmd = ["xvfb-run", "-a", "-s", "-screen 0 1600x1000x24", "sh", "-c", script, "sh", args.statelens, "--measure",
           a, b, "--rules", rules]
    paints, keystrokes = [], []
    for _ in range(args.reps):
        r = subprocess.run(cmd, capture_output=True, text=True)
        line = next((x for x in r.stdout.splitlines() if x.startswith("{")), None)
        if r.returncode != 0 or line is None:
            sys.exit(f"bench: statelens --measure failed: {r.stderr}")
        m = json.loads(line)
        paints.append(m["first_paint_ms"] / 1000)
        keystrokes.append(max(m["filter_folded_max_ms"], m["filter_unfolded_max_ms"]) / 1000)
        log(f"f: first paint {m['first_paint_ms']:.0f} ms (diff {m['diff_ms']:.0f} ms), slowest keystroke "
            f"{keystrokes[-1] * 1000:.0f} ms, median keystroke {m['filter_unfolded_median_ms']:.1f} ms unfolded")
    label = f"f. GUI on the {n:,}-row pair"
    rows = []
    for what, runs, limit in (("time to first paint (launch to painted trees)", paints, 2.0),
                              ("slowest filter keystroke (median over runs)", keystrokes, 0.1)):
        median = statistics.median(runs)
        rows.append({"case": label, "peer": f"target {limit:g} s", "comparison": "absolute", "peer_s": limit,
                     "statelens": what, "statelens_s": median, "ratio": limit / median, "target": 1,
                     "pass": median <= limit, "note": "absolute time", "peer_cpu_s": None, "statelens_cpu_s": None,
                     "cpu_ratio": None})
    return {"case": "f", "label": label, "tensors": n, "cache": "warm", "rows": rows, "baseline_rows": [],
            "measurements": {"first_paint_s": paints, "slowest_keystroke_s": keystrokes}}


# --- scale cases (s1, s2) -------------------------------------------------------------------------------------

class TimedOut(Exception):
    pass


def measured_run(cmd, cwd=None, capture=False, timeout=None):
    """One run of cmd: wall and CPU time, the peak resident set (GNU time's %M, see rss_timer), major and minor
    page faults (%F, %R), exit code, stdout (with capture) and stderr. Past `timeout` seconds the process group
    is killed and TimedOut raised."""
    gnu_time = "/usr/bin/time" if os.path.exists("/usr/bin/time") else None
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss, tempfile.TemporaryFile() as out, \
            tempfile.TemporaryFile() as err:
        full = [gnu_time, "-f", "%M %F %R", "-o", rss.name] + cmd if gnu_time else cmd
        t0 = time.perf_counter()
        p = subprocess.Popen(full, cwd=cwd, stdout=out if capture else subprocess.DEVNULL, stderr=err,
                             start_new_session=True)
        expired = []
        timer = None
        if timeout:
            def kill():
                expired.append(True)
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            timer = threading.Timer(timeout, kill)
            timer.start()
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        if timer:
            timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        if expired:
            raise TimedOut(f"{' '.join(cmd[:3])}... still running after {timeout:.0f} s; killed")
        out.seek(0)
        err.seek(0)
        text = rss.read().strip().splitlines()
        fields = text[-1].split() if gnu_time and text else []
        exact = len(fields) == 3 and all(f.isdigit() for f in fields)
        peak = int(fields[0]) * 1024 if exact else usage.ru_maxrss * 1024
        return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "peak": peak, "exact_peak": exact,
                "major_faults": int(fields[1]) if exact else usage.ru_majflt,
                "minor_faults": int(fields[2]) if exact else usage.ru_minflt,
                "rc": p.returncode, "stdout": out.read() if capture else b"",
                "stderr": err.read().decode(errors="replace")}


def run_measure(key, label, kind, cmd, cwd=None, timeout=None, ok_codes=(0,), parse=None):
    """A Measure whose runs also keep each run's peak resident set (m.peaks) and, with parse, what parse made of
    the run's output (m.extra)."""
    m = Measure(key, label, kind, None)
    m.peaks, m.extra = [], []

    def run():
        r = measured_run(cmd, cwd=cwd, capture=parse is not None, timeout=timeout)
        if r["rc"] not in ok_codes:
            sys.exit(f"bench: {' '.join(cmd[:3])}... exited with {r['rc']}: {r['stderr'][-2000:]}")
        m.peaks.append(r["peak"])
        if parse:
            m.extra.append(parse(r))
        return r["wall"], r["cpu"]
    m.fn = run
    return m


def derived_measure(key, label, kind, values):
    """A Measure made of numbers another run reported (an in-process time printed by the peer)."""
    m = Measure(key, label, kind, None)
    m.runs = [v[0] for v in values]
    m.cpu_runs = [v[1] for v in values]
    return m


def torch2_cmd(args, *script_args):
    """python3 SCRIPT ARGS under torch 2.x (../shared/tools/torch2-env.sh; run it from the folder to bind at
    /here). As root it runs in a private mount namespace (unshare), so its bind mount of /here neither disturbs
    nor is disturbed by other users of the same chroot."""
    cmd = [args.torch2_env, "python", *script_args]
    if os.geteuid() == 0 and shutil.which("unshare"):
        cmd = ["unshare", "--mount", "--propagation", "private"] + cmd
    return cmd


def generate_s1(args, workdir, ranks):
    """Case s1's DCP folder for `ranks` ranks (see S1_GENERATE_SRC), made once per cache folder."""
    name = f"s1-llama3-70b-{ranks}ranks"
    folder = os.path.join(workdir, name)
    info = {"kind": "s1", "ranks": ranks, "items": args.s1_items, "v": 1}
    if not read_marker(folder, info):
        if not os.access(args.torch2_env, os.X_OK):
            sys.exit(f"bench: case s1 needs torch 2.x through {args.torch2_env} (--torch2-env)")
        # written for real: the .metadata (~140 bytes per chunk) and, with framing, about two pages per item
        items = 2169 * ranks + 723 + 7954
        need_space(workdir, 160 * items + (64 << 20) + (8192 * items if args.s1_items == "framing" else 0))
        shutil.rmtree(folder, ignore_errors=True)
        with open(os.path.join(workdir, "_statelens_s1_generate.py"), "w") as f:
            f.write(S1_GENERATE_SRC)
        t0 = time.perf_counter()
        subprocess.run(torch2_cmd(args, "_statelens_s1_generate.py", "/here/" + name, str(ranks), args.s1_items),
                       cwd=workdir, check=True)
        write_marker(folder, info)
        log(f"s1: {folder} generated in {time.perf_counter() - t0:.0f} s")
    with open(folder + ".layout.json") as f:
        return folder, json.load(f)


def disk_bytes(folder):
    return sum(os.stat(os.path.join(folder, f)).st_blocks * 512 for f in os.listdir(folder))


def resident_bytes(path, ranges=()):
    """Bytes of `path` in the page cache (mincore over a mapping of the whole file): in all, and in the pages
    that `ranges` [(offset, length)] touch."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = os.path.getsize(path)
    if size == 0:
        return 0, 0
    page = os.sysconf("SC_PAGE_SIZE")
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
    finally:
        os.close(fd)
    try:
        vec = (ctypes.c_ubyte * ((size + page - 1) // page))()
        if libc.mincore(ctypes.c_void_p(addr), size, vec) != 0:
            raise OSError(ctypes.get_errno(), f"mincore {path}")
        flags = bytes(vec)
    finally:
        libc.munmap(ctypes.c_void_p(addr), size)
    total = len(flags) - flags.count(0)
    pages = set()
    for offset, length in ranges:
        pages.update(range(offset // page, (offset + max(length, 1) - 1) // page + 1))
    inside = sum(1 for i in pages if flags[i])
    return total * page, inside * page


def parse_strace(path):
    """What an `strace -f -y` log says about .distcp files: opens, read calls and the bytes they returned,
    mmap calls and the bytes they mapped."""
    import re
    counts = {"opens": 0, "read_calls": 0, "read_bytes": 0, "mmap_calls": 0, "mmap_bytes": 0, "files": set()}
    pending = {}
    result = re.compile(r"\)\s+=\s+(-?\d+|0x[0-9a-f]+)")
    with open(path, errors="replace") as f:
        for line in f:
            pid, _, text = line.rstrip("\n").partition(" ")
            text = text.lstrip()
            if text.endswith("<unfinished ...>"):
                pending[pid] = text[:-len("<unfinished ...>")]
                continue
            if text.startswith("<..."):
                text = pending.pop(pid, "") + text[text.index(">") + 1:]
            name = text.split("(", 1)[0]
            if ".distcp" not in text:
                continue
            m = result.search(text)
            if not m or m.group(1).startswith("-"):
                continue
            if name in ("open", "openat"):
                counts["opens"] += 1
                counts["files"].add(text.split('"')[1] if '"' in text else "")
            elif name in ("read", "pread64", "readv", "preadv", "preadv2"):
                counts["read_calls"] += 1
                counts["read_bytes"] += int(m.group(1))
            elif name == "mmap":
                counts["mmap_calls"] += 1
                counts["mmap_bytes"] += int(text.split("(", 1)[1].split(",")[1])
    counts["files"] = len(counts["files"])
    return counts


def distcp_reads(args, folder, layout, timeout):
    """What `statelens ls DIR` reads of the .distcp files, measured two ways (both work as root, where a
    chmod 000 would not stop the reads):
    - page cache: every .distcp page is evicted (posix_fadvise DONTNEED), statelens runs once, and mincore counts
      the pages now cached. A read or a touch of a mapping, holes included, brings its pages in (plus the
      kernel's readahead and fault-around), so 0 means nothing was read. Pages of bytes items (non-tensor
      values, ~1 KB each) are counted apart from those of tensor items.
      With little free memory the count is a lower bound (pages evicted again during the run are not seen).
    - strace -f -y: opens, read/pread calls and mmaps of .distcp files, with bytes returned or mapped. Reads
      through a mapping make no system call: the run's major page faults (GNU time) count those.
    The first run also checks the listing and is timed (a cold start for the .distcp pages)."""
    files = [(os.path.join(folder, f["file"]), f) for f in layout["files"]]
    for path, _ in files:
        evict(path)
    r = measured_run([args.statelens, "ls", folder, "--format", "json"], capture=True, timeout=timeout)
    if r["rc"] != 0:
        sys.exit(f"bench: statelens ls {folder} exited with {r['rc']}: {r['stderr'][-2000:]}")
    doc = json.loads(r["stdout"])
    cached = cached_bytes_items = 0
    for path, f in files:
        total, inside = resident_bytes(path, f["bytes_items"])
        cached += total
        cached_bytes_items += inside
    out = {"cold_run_s": r["wall"], "cold_run_peak": r["peak"], "entries": len(doc.get("entries", [])),
           "findings": len(doc.get("findings", [])), "page_cache_bytes": cached,
           "major_faults": r["major_faults"], "minor_faults": r["minor_faults"],
           "page_cache_bytes_in_bytes_items": cached_bytes_items,
           "page_cache_bytes_in_tensor_items": cached - cached_bytes_items}
    if shutil.which("strace") and not args.no_strace:
        with tempfile.NamedTemporaryFile("r", suffix=".strace") as trace:
            t = measured_run(["strace", "-f", "-qq", "-y", "-s", "0", "-o", trace.name, "-e",
                              "trace=open,openat,read,pread64,readv,preadv,preadv2,mmap",
                              args.statelens, "ls", folder, "--format", "json"], timeout=timeout)
            if t["rc"] != 0:
                sys.exit(f"bench: strace statelens ls {folder} exited with {t['rc']}")
            out["strace"] = parse_strace(trace.name)
            out["strace_run_s"] = t["wall"]
    return out


def timings_of(args, path, timeout, command="ls", extra=()):
    r = measured_run([args.statelens, command, path, *extra, "--timings"], timeout=timeout)
    return [line for line in r["stderr"].splitlines() if line.strip()]


def memory_row(label, ours, peer_name, peer):
    """Target: statelens's peak resident set no higher than the peer's."""
    return {"case": label, "peer": f"peak RSS of {peer_name}", "comparison": "memory", "peer_s": peer,
            "statelens": "statelens ls peak RSS", "statelens_s": ours, "ratio": peer / ours, "target": 1,
            "pass": ours <= peer, "note": "memory", "peer_cpu_s": None, "statelens_cpu_s": None, "cpu_ratio": None}


def timed_out_row(label, what, message):
    return {"case": label, "peer": what, "comparison": "absolute", "peer_s": 0, "statelens": message,
            "statelens_s": 0, "ratio": None, "target": None, "target_text": "finishes", "pass": False,
            "note": "timed out", "peer_cpu_s": None, "statelens_cpu_s": None, "cpu_ratio": None}


def s1_size(args, workdir, ranks, largest):
    folder, layout = generate_s1(args, workdir, ranks)
    size = {"ranks": ranks, **{k: layout[k] for k in ("keys", "tensor_keys", "bytes_keys", "chunks",
                                                       "sharded_chunks", "model_tensors", "metadata_bytes",
                                                       "data_bytes", "items")},
            "files": len(layout["files"]), "disk_bytes": disk_bytes(folder)}
    label = (f"s1. DCP Llama-3-70B, {ranks} ranks ({size['keys']:,} keys, {size['chunks']:,} chunks, "
             f".metadata {human(size['metadata_bytes'])})")
    log(f"s1: {folder}: {size['keys']:,} keys ({size['tensor_keys']:,} tensors), {size['chunks']:,} chunks "
        f"({size['sharded_chunks']:,} of sharded tensors), .metadata {human(size['metadata_bytes'])}, "
        f"{size['files']} .distcp files of {human(size['data_bytes'])} using {human(size['disk_bytes'])} on disk")
    timeout = args.scale_timeout
    rows = []
    try:
        reads = distcp_reads(args, folder, layout, timeout)
    except TimedOut as e:
        log(f"s1 ({ranks} ranks): {e}")
        size["timed_out"] = str(e)
        return size, [timed_out_row(label, f"timeout {timeout:.0f} s", f"statelens ls: {e}")]
    size["reads"] = reads
    log(f"s1 ({ranks} ranks): first ls after evicting the .distcp pages took {reads['cold_run_s']:.1f} s, "
        f"{reads['entries']} entries; .distcp bytes brought into the page cache: {reads['page_cache_bytes']:,} "
        f"({reads['page_cache_bytes_in_tensor_items']:,} in pages of tensor items), {reads['major_faults']:,} major "
        f"and {reads['minor_faults']:,} minor page faults; strace: {reads.get('strace')}")
    if reads["entries"] != size["model_tensors"]:
        log(f"s1: note: statelens listed {reads['entries']} entries, the model container has {size['model_tensors']}")
    with open(os.path.join(workdir, "_statelens_s1_read_metadata.py"), "w") as f:
        f.write(S1_READ_METADATA_SRC)
    torch_cmd = torch2_cmd(args, "_statelens_s1_read_metadata.py", "/here/" + os.path.basename(folder))
    parse = lambda r: json.loads(r["stdout"].decode().strip().splitlines()[-1])  # noqa: E731
    measures = [run_measure(f"statelens-{fmt}", f"statelens ls ({fmt})", "statelens",
                            [args.statelens, "ls", folder, "--format", fmt], timeout=timeout)
                for fmt in ("table", "json")]
    torch_m = run_measure("torch-process", "torch 2.x read_metadata, whole process (python3, import torch, read)",
                          "whole process", torch_cmd, cwd=workdir, timeout=timeout, parse=parse)
    measures.append(torch_m)
    reps = args.scale_reps if reads["cold_run_s"] < args.scale_slow else 1
    try:
        run_interleaved(measures, reps, warmups=0)
    except TimedOut as e:
        log(f"s1 ({ranks} ranks): {e}")
        size["timed_out"] = str(e)
        return size, [timed_out_row(label, f"timeout {timeout:.0f} s", f"statelens ls: {e}")]
    first = torch_m.extra[0]
    if first["chunks"] != size["chunks"] or first["keys"] != size["keys"]:
        sys.exit(f"bench: torch read {first['keys']} keys / {first['chunks']} chunks, expected {size['keys']} / "
                 f"{size['chunks']}")
    inproc = derived_measure("torch-inproc", "torch 2.x FileSystemReader(dir).read_metadata(), in-process",
                             "in-process", [(e["wall"], e["cpu"]) for e in torch_m.extra])
    measures.append(inproc)
    rows += compare(label, measures, "torch-inproc", 10) + compare(label, measures, "torch-process", 10)
    ours = max(measures[0].peaks + measures[1].peaks)
    rows.append(memory_row(label, ours, "torch (whole process, GNU time)", max(torch_m.peaks)))
    touched = reads["page_cache_bytes"]
    st = reads.get("strace")
    what = f"{human(touched)} of .distcp pages cached after one ls ({human(reads['page_cache_bytes_in_tensor_items'])} " \
           f"in tensor items), {reads['major_faults']:,} major faults"
    if st:
        what += f"; strace: {st['read_calls']:,} reads returning {human(st['read_bytes'])}, {st['mmap_calls']:,} " \
                f"mmaps of {human(st['mmap_bytes'])}, {st['opens']:,} opens"
    rows.append({"case": label, "peer": "target: no .distcp byte read", "comparison": "absolute", "peer_s": 0,
                 "statelens": what, "statelens_s": touched, "ratio": None, "target": None, "target_text": "0 bytes",
                 "pass": touched == 0 and (not st or (st["read_bytes"] == 0 and st["mmap_calls"] == 0)),
                 "note": "bytes", "peer_cpu_s": None, "statelens_cpu_s": None, "cpu_ratio": None})
    size.update({"reps": reps, "measurements": dump(measures), "statelens_peak": ours, "torch_peak": max(torch_m.peaks),
                 "torch_import_s": statistics.median(e["import_s"] for e in torch_m.extra),
                 "torch_rss_growth": statistics.median(1024 * (e["maxrss_after_kb"] - e["maxrss_before_kb"])
                                                       for e in torch_m.extra),
                 "torch_version": first["torch"]})
    if ranks == largest:
        try:
            size["timings"] = timings_of(args, folder, timeout)
        except TimedOut as e:
            size["timings"] = [str(e)]
    return size, rows


def case_s1(args, workdir, sizes):
    """s1. A torchtitan DCP save of Llama-3-70B by 8, 64 and 256 ranks: statelens ls against torch 2.x's
    FileSystemReader.read_metadata, peak resident sets, and the .distcp bytes statelens reads."""
    ranks = sizes["s1_ranks"]
    results, rows = [], []
    for r in ranks:
        try:
            size, size_rows = s1_size(args, workdir, r, max(ranks))
        finally:
            # statelens's reads leave the .distcp pages (mostly holes read as zeros) in the page cache: hand
            # that memory back rather than leave it to crowd out the next size and other work on the machine
            folder = os.path.join(workdir, f"s1-llama3-70b-{r}ranks")
            for f in os.listdir(folder) if os.path.isdir(folder) else []:
                if f.endswith(".distcp"):
                    evict(os.path.join(folder, f))
        results.append(size)
        rows += size_rows
        log(markdown(size_rows))
    return {"case": "s1", "label": "s1. DCP Llama-3-70B", "sizes": results, "rows": rows, "baseline_rows": []}


def s2_size(args, workdir, layers, largest):
    fp8 = os.path.join(workdir, f"s2-deepseek-v3-{layers}layers")
    stacked = os.path.join(workdir, f"s2-deepseek-v3-{layers}layers-v5-stacked")
    t0 = time.perf_counter()
    generate("s2-fp8", fp8, layers)
    generate("s2-stacked", stacked, layers)
    tensors = ds3_tensors(layers)
    shards = sorted(f for f in os.listdir(fp8) if f.endswith(".safetensors"))
    header_bytes = 0
    for s in shards:
        with open(os.path.join(fp8, s), "rb") as f:
            header_bytes += struct.unpack("<Q", f.read(8))[0]
    stacked_n = len(ds3_tensors(layers, stacked=True))
    size = {"layers": layers, "tensors": len(tensors), "shards": len(shards), "header_bytes": header_bytes,
            "index_bytes": os.path.getsize(os.path.join(fp8, "model.safetensors.index.json")),
            "data_bytes": sum(tensor_bytes(t) for t in tensors), "stacked_tensors": stacked_n,
            "stacked_shards": sum(f.endswith(".safetensors") for f in os.listdir(stacked))}
    log(f"s2: {fp8}: {len(tensors):,} tensors in {len(shards)} shards, headers {human(header_bytes)}, "
        f"{human(size['data_bytes'])} sparse; stacked: {stacked_n:,} tensors in {size['stacked_shards']} shards; "
        f"ready in {time.perf_counter() - t0:.1f} s")
    # statelens lists an FP8 weight and its weight_scale_inv as one quantized group
    grouped = sum(1 for t in tensors if not t[0].endswith("_scale_inv"))
    r = subprocess.run([args.statelens, "ls", fp8, "--format", "json"], capture_output=True)
    listed = len(json.loads(r.stdout)["entries"]) if r.returncode == 0 else None
    if listed not in (len(tensors), grouped):
        sys.exit(f"bench: statelens listed {listed} entries in {fp8}, expected {len(tensors)} tensors or {grouped} "
                 f"with FP8 groups: {r.stderr.decode(errors='replace')[-2000:]}")
    size["listed_entries"] = listed
    check_peer("s2headers", fp8, len(tensors))
    timeout = args.scale_timeout
    label = f"s2. DeepSeek-V3 index, {layers} layers ({len(tensors):,} tensors, {len(shards)} shards)"
    diff_label = f"s2. diff per-expert FP8 vs v5 stacked bf16, {layers} layers ({len(tensors):,} vs {stacked_n:,})"
    measures = [run_measure(f"statelens-{fmt}", f"statelens ls ({fmt})", "statelens",
                            [args.statelens, "ls", fp8, "--format", fmt], timeout=timeout) for fmt in ("table", "json")]
    peer = run_measure("headers-process", "python3: json over the index and every shard header, whole process",
                       "whole process", whole_process_cmd(S2_HEADERS_SRC, "read_index_headers") + [fp8],
                       timeout=timeout)
    diff = run_measure("statelens-diff", "statelens diff per-expert vs stacked --format json", "statelens",
                       [args.statelens, "diff", fp8, stacked, "--format", "json"], timeout=timeout, ok_codes=(0, 1))
    measures += [peer, in_process("headers-inproc", "json over the index and every shard header, in-process",
                                  "s2headers", fp8), diff]
    try:
        run_interleaved(measures, args.scale_reps)
    except TimedOut as e:
        log(f"s2 ({layers} layers): {e}")
        size["timed_out"] = str(e)
        return size, [timed_out_row(label, f"timeout {timeout:.0f} s", str(e))]
    rows = compare(label, measures, "headers-process", 5) + compare(label, measures, "headers-inproc", 5)
    ours = max(measures[0].peaks + measures[1].peaks)
    rows.append(memory_row(label, ours, "the Python script (whole process, GNU time)", max(peer.peaks)))
    rows.append(absolute_row(diff_label, diff, 0.5))
    r = subprocess.run([args.statelens, "diff", fp8, stacked, "--format", "json"], capture_output=True)
    summary = json.loads(r.stdout).get("summary", {}) if r.returncode in (0, 1) and r.stdout else {}
    size.update({"reps": args.scale_reps, "measurements": dump(measures), "statelens_peak": ours,
                 "script_peak": max(peer.peaks), "diff_peak": max(diff.peaks),
                 "diff_summary": {k: v for k, v in summary.items() if type(v) is int}})
    log(f"s2 ({layers} layers): diff summary {size['diff_summary']}")
    if layers == largest:
        try:
            size["timings"] = timings_of(args, fp8, timeout)
            size["diff_timings"] = timings_of(args, fp8, timeout, "diff", (stacked, "--format", "json"))
        except TimedOut as e:
            size["timings"] = [str(e)]
    return size, rows


def case_s2(args, workdir, sizes):
    """s2. A DeepSeek-V3-sized safetensors index at a quarter, half and all of its layers: statelens ls against
    the Python script that reads every shard header with json, peak resident sets; statelens diff of the
    per-expert FP8 index against the same weights in transformers v5's stacked-experts layout."""
    layers = sizes["s2_layers"]
    results, rows = [], []
    for n in layers:
        size, size_rows = s2_size(args, workdir, n, max(layers))
        results.append(size)
        rows += size_rows
        log(markdown(size_rows))
    return {"case": "s2", "label": "s2. DeepSeek-V3 index", "sizes": results, "rows": rows, "baseline_rows": []}


def growth_markdown(cases):
    """How cost grows: each tool's median time and peak resident set per size, and the time per chunk or key."""
    out = []
    for c in cases:
        if c["case"] == "s1":
            out += ["s1 (DCP Llama-3-70B): median wall time and peak RSS per size; µs per chunk = time / chunks.\n",
                    "| ranks | keys | chunks | .metadata | torch read_metadata (in-process) | torch whole process "
                    "| torch peak RSS | statelens ls (table) | statelens ls (json) | statelens peak RSS "
                    "| read_metadata µs/chunk | ls µs/chunk | .distcp bytes cached by ls | ls major faults |",
                    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for s in c["sizes"]:
                if "measurements" not in s:
                    out.append(f"| {s['ranks']} | {s['keys']:,} | {s['chunks']:,} | {human(s['metadata_bytes'])} "
                               f"| | | | {s.get('timed_out', '')} | | | | | | |")
                    continue
                m = s["measurements"]
                t_in, t_pr = m["torch-inproc"]["median_s"], m["torch-process"]["median_s"]
                table, js = m["statelens-table"]["median_s"], m["statelens-json"]["median_s"]
                out.append(f"| {s['ranks']} | {s['keys']:,} | {s['chunks']:,} | {human(s['metadata_bytes'])} "
                           f"| {fmt_time(t_in)} | {fmt_time(t_pr)} | {human(s['torch_peak'])} | {fmt_time(table)} "
                           f"| {fmt_time(js)} | {human(s['statelens_peak'])} | {1e6 * t_in / s['chunks']:.1f} "
                           f"| {1e6 * table / s['chunks']:.1f} | {human(s['reads']['page_cache_bytes'])} "
                           f"| {s['reads']['major_faults']:,} |")
        elif c["case"] == "s2":
            out += ["\ns2 (DeepSeek-V3 index): median wall time and peak RSS per size; µs per tensor = time / "
                    "tensors.\n",
                    "| layers | tensors | shards | headers | script (in-process) | script whole process "
                    "| script peak RSS | statelens ls (table) | statelens ls (json) | statelens peak RSS "
                    "| script µs/tensor | ls µs/tensor | diff vs stacked | diff peak RSS |",
                    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for s in c["sizes"]:
                if "measurements" not in s:
                    out.append(f"| {s['layers']} | {s['tensors']:,} | {s['shards']} | {human(s['header_bytes'])} "
                               f"| | | | {s.get('timed_out', '')} | | | | | | |")
                    continue
                m = s["measurements"]
                t_in, t_pr = m["headers-inproc"]["median_s"], m["headers-process"]["median_s"]
                table, js = m["statelens-table"]["median_s"], m["statelens-json"]["median_s"]
                out.append(f"| {s['layers']} | {s['tensors']:,} | {s['shards']} | {human(s['header_bytes'])} "
                           f"| {fmt_time(t_in)} | {fmt_time(t_pr)} | {human(s['script_peak'])} | {fmt_time(table)} "
                           f"| {fmt_time(js)} | {human(s['statelens_peak'])} | {1e6 * t_pr / s['tensors']:.2f} "
                           f"| {1e6 * table / s['tensors']:.2f} | {fmt_time(m['statelens-diff']['median_s'])} "
                           f"| {human(s['diff_peak'])} |")
    for c in cases:
        for s in c.get("sizes", []):
            for key, what in (("timings", "ls"), ("diff_timings", "diff")):
                if s.get(key):
                    where = f"{s['ranks']} ranks" if c["case"] == "s1" else f"{s['layers']} layers"
                    out += [f"\n`statelens {what} --timings`, {c['case']} at {where} (warm):\n", "```",
                            *s[key], "```"]
    return "\n".join(out)

def absolute_row(case, m, limit_s):
    """A target in seconds (no peer): reported as limit / time, so >= 1 passes like the ratio rows."""
    return {"case": case, "peer": f"target {limit_s:g} s", "comparison": "absolute", "peer_s": limit_s,
            "statelens": m.label, "statelens_s": m.median, "ratio": limit_s / m.median, "target": 1,
            "pass": m.median <= limit_s, "note": "absolute time", "peer_cpu_s": None,
            "statelens_cpu_s": m.cpu_median, "cpu_ratio": None}


def dump(measures):
    return {m.key: {"label": m.label, "kind": m.kind, "median_s": m.median, "runs_s": m.runs,
                    "cpu_median_s": m.cpu_median, "cpu_runs_s": m.cpu_runs} for m in measures}


# --- report --------------------------------------------------------------------------------------------------

def fmt_time(s):
    return f"{s * 1000:.1f} ms" if s < 10 else f"{s:.2f} s"


def markdown(rows):
    out = ["| case | peer | comparison | peer time | statelens | statelens time | ratio | target | result "
           "| CPU ratio |",
           "|---|---|---|---:|---|---:|---:|---:|---|---:|"]

    def value(v, note):
        if note == "timed out":
            return "—"
        return human(v) if note in ("memory", "bytes") else fmt_time(v)
    for r in rows:
        target = r.get("target_text") or ("—" if r["target"] is None else f"≥ {r['target']}x")
        result = r["note"] or "—" if r["pass"] is None else ("PASS" if r["pass"] else "FAIL")
        cpu = "—" if r.get("cpu_ratio") is None else f"{r['cpu_ratio']:.1f}x"
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.1f}x"
        out.append(f"| {r['case']} | {r['peer']} | {r['comparison']} | {value(r['peer_s'], r['note'])} | {r['statelens']} "
                   f"| {value(r['statelens_s'], r['note'])} | {ratio} | {target} | {result} | {cpu} |")
    return "\n".join(out)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def machine_info(statelens):
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    torch_version = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                                   text=True).stdout.strip()
    version = subprocess.run([statelens, "--version"], capture_output=True, text=True).stdout.strip()
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
            "torch": torch_version, "statelens": version, "statelens_path": os.path.abspath(statelens),
            "loadavg": os.getloadavg(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def internal_modes():
    """Child-process entry points: --helper PEER PATH [--cold] [--warmup PATH] and --generate KIND PATH N."""
    if len(sys.argv) > 1 and sys.argv[1] == "--helper":
        ap = argparse.ArgumentParser()
        ap.add_argument("--helper", choices=["unpickle", "torchload", "json", "diff", "s2headers"])
        ap.add_argument("path")
        ap.add_argument("--cold", action="store_true")
        ap.add_argument("--warmup")
        a = ap.parse_args()
        helper_main(a.helper, a.path, a.cold, a.warmup)
        return True
    if len(sys.argv) > 1 and sys.argv[1] == "--generate":
        kind, path, n = sys.argv[2], sys.argv[3], int(sys.argv[4])
        {"small-zip": make_small_zip, "large-zip": make_large_zip, "safetensors": make_safetensors,
         "diff-pair": make_diff_pair, "quantized": make_quantized, "s2-fp8": make_s2_fp8,
         "s2-stacked": make_s2_stacked}[kind](path, n)
        return True
    return False


def scale_reps_note(args, cases):
    if not any(c["case"] in ("s1", "s2") for c in cases):
        return ""
    return f" ({args.scale_reps} for s1 and s2; 1 for an s1 size whose first run took over {args.scale_slow:g} s)"


def parse_cases(text):
    """--cases: a-h, i, s1, s2, s3 (a-h) or all; comma-separated, or letters run together ("abc")."""
    wanted = []
    for token in text.replace(" ", "").lower().split(","):
        if token in ("s1", "s2"):
            wanted.append(token)
        elif token == "i":
            wanted.append(token)
        elif token in ("s3", "all"):
            wanted += list("abcdefgh") + (["i", "s1", "s2"] if token == "all" else [])
        elif token and all(ch in "abcdefghi" for ch in token):
            wanted += list(token)
        elif token:
            sys.exit(f"bench: unknown case {token!r} in --cases (a-h, i, s1, s2, s3, all)")
    return wanted


def main():
    if internal_modes():
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--statelens", default="build/app/statelens", help="the statelens binary to measure")
    ap.add_argument("--quick", action="store_true", help="smaller inputs and fewer repetitions (smoke run)")
    ap.add_argument("--keep", action="store_true", help="keep generated inputs in --work-dir and reuse them")
    ap.add_argument("--work-dir", help="where inputs go (default: a temporary folder, or with --keep "
                    "$XDG_CACHE_HOME/statelens-bench)")
    ap.add_argument("--reps", type=int, help="timed repetitions per measurement (default 7, quick 3)")
    ap.add_argument("--cold-reps", type=int, help="cold-cache repetitions for case b (default 3; 0 skips)")
    ap.add_argument("--cases", default="abcdefgh",
                    help="which cases to run: letters a-i, s1, s2, s3 (= a-h) or all, comma-separated or run "
                    "together (default abcdefgh; f needs xvfb-run, i and s1 torch 2.x through --torch2-env)")
    ap.add_argument("--s1-ranks", help="case s1's rank counts (default 8,64,256; quick 8)")
    ap.add_argument("--s2-layers", help="case s2's layer counts (default 15,30,61: a quarter, half and all of "
                    "DeepSeek-V3's 61; quick 15)")
    ap.add_argument("--s1-items", choices=["framing", "holes"], default="framing",
                    help="s1's tensor items: their torch.save zip framing written around a hole (default), or "
                    "nothing written at all")
    ap.add_argument("--scale-reps", type=int, help="timed repetitions for s1 and s2 (default 3, quick 1)")
    ap.add_argument("--scale-slow", type=float, default=120.0,
                    help="s1 sizes whose first statelens run takes longer than this many seconds get 1 repetition")
    ap.add_argument("--scale-timeout", type=float, default=3600.0,
                    help="seconds after which a statelens or peer run of s1/s2 is killed (default 3600)")
    ap.add_argument("--no-strace", action="store_true", help="s1: skip the strace run (page-cache count only)")
    ap.add_argument("--torch2-env", default=os.path.join(REPO_ROOT, "..", "shared", "tools", "torch2-env.sh"),
                    help="the torch 2.x launcher for s1 (default ../shared/tools/torch2-env.sh); the work folder "
                    "is bound at /here inside it")
    ap.add_argument("--json-out", help="also write the results here as JSON")
    ap.add_argument("--compare-statelens", metavar="BINARY",
                    help="also time this other statelens build in the same runs and report the speed-up")
    args = ap.parse_args()
    if not os.access(args.statelens, os.X_OK):
        sys.exit(f"bench: no statelens binary at {args.statelens} (build it first)")
    args.statelens = os.path.abspath(args.statelens)
    if args.compare_statelens:
        if not os.access(args.compare_statelens, os.X_OK):
            sys.exit(f"bench: no statelens binary at {args.compare_statelens}")
        args.compare_statelens = os.path.abspath(args.compare_statelens)
    if args.reps is None:
        args.reps = 3 if args.quick else 7
    if args.cold_reps is None:
        args.cold_reps = 1 if args.quick else 3
    if args.scale_reps is None:
        args.scale_reps = 1 if args.quick else 3
    args.torch2_env = os.path.abspath(args.torch2_env)
    cases_wanted = parse_cases(args.cases)
    sizes = {"small_zip_tensors": 7_680, "large_zip_layers": 2, "safetensors_tensors": 10_000,
             "diff_tensors": 10_000, "quantized_side": 2048} if args.quick else \
        {"small_zip_tensors": 76_800, "large_zip_layers": 35, "safetensors_tensors": 100_000, "diff_tensors": 100_000,
         "quantized_side": 12288}
    sizes["s1_ranks"] = [int(x) for x in (args.s1_ranks or ("8" if args.quick else "8,64,256")).split(",")]
    sizes["s2_layers"] = [int(x) for x in (args.s2_layers or ("15" if args.quick else "15,30,61")).split(",")]
    if any(not 1 <= n <= DS3["layers"] for n in sizes["s2_layers"]) or any(r < 1 for r in sizes["s1_ranks"]):
        sys.exit("bench: --s2-layers takes 1 to 61, --s1-ranks positive numbers")

    if args.work_dir:
        workdir, temporary = args.work_dir, not args.keep
    elif args.keep:
        workdir = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "statelens-bench")
        temporary = False
    else:
        workdir, temporary = tempfile.mkdtemp(prefix="statelens-bench-"), True
    os.makedirs(workdir, exist_ok=True)
    log(f"bench: inputs in {workdir}{' (removed at exit)' if temporary else ''}; {args.reps} reps, median")
    try:
        info = machine_info(args.statelens)
        cases = []
        for key, fn in (("a", case_small_zip), ("b", case_large_zip), ("c", case_safetensors), ("d", case_diff),
                        ("e", case_suggest), ("f", case_gui), ("g", case_values), ("h", case_quantized_values),
                        ("i", case_convert), ("s1", case_s1), ("s2", case_s2)):
            if key in cases_wanted:
                load_before = os.getloadavg()
                cases.append(fn(args, workdir, sizes))
                cases[-1]["loadavg_before"] = load_before
                cases[-1]["loadavg_after"] = os.getloadavg()
                log(markdown(cases[-1]["rows"]))
    finally:
        if temporary:
            shutil.rmtree(workdir, ignore_errors=True)
    rows = [r for c in cases for r in c["rows"]]
    print(f"StateLens benchmark ({'quick' if args.quick else 'full'}): {info['cpu']}, {info['cores']} cores, "
          f"Python {info['python']}, torch {info['torch']}, {info['statelens']}; median of {args.reps} "
          f"interleaved runs{scale_reps_note(args, cases)}, file cache warm unless the case says cold.\n")
    print(markdown(rows))
    base = [r for c in cases for r in c["baseline_rows"]]
    if base:
        print(f"\nThis statelens vs {args.compare_statelens} (median wall / CPU time, same interleaved runs):\n")
        print("| case | format | baseline | this build | speed-up | CPU speed-up |\n|---|---|---:|---:|---:|---:|")
        for r in base:
            print(f"| {r['case']} | {r['format']} | {fmt_time(r['baseline_s'])} | {fmt_time(r['statelens_s'])} "
                  f"| {r['speedup']:.2f}x | {r['cpu_speedup']:.2f}x |")
    scale = [c for c in cases if c["case"] in ("s1", "s2")]
    if scale:
        print("\nHow cost grows (scale cases; warm page cache, whole processes unless marked in-process):\n")
        print(growth_markdown(scale))
    loads = ", ".join(f"{c['case']}: {c['loadavg_before'][0]:.1f}→{c['loadavg_after'][0]:.1f}" for c in cases)
    print(f"\n1-minute load average during each case ({os.cpu_count()} cores): {loads}. "
          "Wall-time ratios are the targets' measure; the CPU ratio (user+sys) is less disturbed by other load.")
    failed = [r for r in rows if r["pass"] is False]
    print(f"\n{len(failed)} of {sum(r['pass'] is not None for r in rows)} targeted comparisons missed their target.")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"machine": info, "quick": args.quick, "reps": args.reps, "cold_reps": args.cold_reps,
                       "sizes": sizes, "cases": cases}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
