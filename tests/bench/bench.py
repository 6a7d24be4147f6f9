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
      [--compare-statelens OTHER_BUILD/app/statelens]
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
import statistics
import struct
import subprocess
import sys
import tempfile
import time

PYTHON = sys.executable

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
                                        "diff-pair": 400 * n, "quantized": 2 * n * n}[kind])
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


# --- timing --------------------------------------------------------------------------------------------------

def evict(path):
    """Drops the file's pages from the page cache (works without root, unlike /proc/sys/vm/drop_caches)."""
    fd = os.open(path, os.O_RDONLY)
    try:
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
        return human(v) if note == "memory" else fmt_time(v)
    for r in rows:
        target = "—" if r["target"] is None else f"≥ {r['target']}x"
        result = r["note"] or "—" if r["pass"] is None else ("PASS" if r["pass"] else "FAIL")
        cpu = "—" if r.get("cpu_ratio") is None else f"{r['cpu_ratio']:.1f}x"
        out.append(f"| {r['case']} | {r['peer']} | {r['comparison']} | {value(r['peer_s'], r['note'])} | {r['statelens']} "
                   f"| {value(r['statelens_s'], r['note'])} | {r['ratio']:.1f}x | {target} | {result} | {cpu} |")
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
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def internal_modes():
    """Child-process entry points: --helper PEER PATH [--cold] [--warmup PATH] and --generate KIND PATH N."""
    if len(sys.argv) > 1 and sys.argv[1] == "--helper":
        ap = argparse.ArgumentParser()
        ap.add_argument("--helper", choices=["unpickle", "torchload", "json", "diff"])
        ap.add_argument("path")
        ap.add_argument("--cold", action="store_true")
        ap.add_argument("--warmup")
        a = ap.parse_args()
        helper_main(a.helper, a.path, a.cold, a.warmup)
        return True
    if len(sys.argv) > 1 and sys.argv[1] == "--generate":
        kind, path, n = sys.argv[2], sys.argv[3], int(sys.argv[4])
        {"small-zip": make_small_zip, "large-zip": make_large_zip, "safetensors": make_safetensors,
         "diff-pair": make_diff_pair, "quantized": make_quantized}[kind](path, n)
        return True
    return False


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
    ap.add_argument("--cases", default="abcdefgh", help="which cases to run (default abcdefgh; f needs xvfb-run)")
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
    sizes = {"small_zip_tensors": 7_680, "large_zip_layers": 2, "safetensors_tensors": 10_000,
             "diff_tensors": 10_000, "quantized_side": 2048} if args.quick else \
        {"small_zip_tensors": 76_800, "large_zip_layers": 35, "safetensors_tensors": 100_000, "diff_tensors": 100_000,
         "quantized_side": 12288}

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
                        ("e", case_suggest), ("f", case_gui), ("g", case_values), ("h", case_quantized_values)):
            if key in args.cases:
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
          f"interleaved runs, file cache warm unless the case says cold.\n")
    print(markdown(rows))
    base = [r for c in cases for r in c["baseline_rows"]]
    if base:
        print(f"\nThis statelens vs {args.compare_statelens} (median wall / CPU time, same interleaved runs):\n")
        print("| case | format | baseline | this build | speed-up | CPU speed-up |\n|---|---|---:|---:|---:|---:|")
        for r in base:
            print(f"| {r['case']} | {r['format']} | {fmt_time(r['baseline_s'])} | {fmt_time(r['statelens_s'])} "
                  f"| {r['speedup']:.2f}x | {r['cpu_speedup']:.2f}x |")
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
