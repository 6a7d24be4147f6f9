#!/usr/bin/python3
"""Sources for `statelens convert` and the check of what it wrote, by Debian's torch 1.13 (tst_convert runs this
at test time). Nothing here uses StateLens: the expected names come from Python's own string handling, the
expected values from torch.load (or torch assembling a DCP checkpoint's chunks), and the output is read by
hand (u64 header length, JSON header, raw bytes), as torch 1.13 has no safetensors module.

  convert_truth.py make DIR
      writes compiled.pt (a training checkpoint of a model wrapped as torch.compile wraps it: every key under
      `_orig_mod.`, beside optimizer state and an epoch number), tied.pt (embedding and output projection
      tied), extras.pt (a module with `_extra_state`, a bytes value and an int beside tensors), views.pt
      (slices, a transpose, an expanded tensor), collide.pt (two keys that one rule maps onto one name) and
      bin_index/ (a pytorch_model.bin.index.json with two shards).
  convert_truth.py check --out OUT --source SRC [--kind pt|safetensors|bin-index|dcp|per-rank-truth|parts] [--container C]
                         [--strip PREFIX] [--drop REGEX] [--only REGEX] [--dtype keep|bf16|fp16|fp32]
                         [--model NAME] [--shard-size BYTES] [--sub PATTERN REPLACEMENT]...
      reads OUT (a .safetensors file or a folder with model.safetensors or shards and their index) and checks
      every tensor against the source (per-rank-truth: SRC is a *.per-rank.truth.json of torch 2.6's
      full_tensor() values or a DCP save's, from make_torch2_fixtures.py, --container picking the keys under
      one; parts: SRC is tests/fixtures/convert/quantized_parts.truth.json and --entry names the quantized
      fixture, what torch 2.6 and torchao 0.9 hold as its tensors and subclasses' parts): names (the source's, PREFIX removed, each --sub applied with re.sub, keys matching --drop or not
      matching --only left out, non-tensors left out), dtype, shape and the bytes (after torch's .to() for
      --dtype), tied names recorded in __metadata__ as safetensors.torch.save_model records them, the index
      as transformers writes it, and with --model a strict load_state_dict into that model. Prints a JSON
      summary; exits 1 with the first problem on stderr.
"""

import argparse
import hashlib
import io
import json
import os
import re
import struct
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_models import HFLM, TitanLM  # noqa: E402  (make_torch2_fixtures.py's models, one definition)

ST_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "C64": torch.complex64,
}
TORCH_TO_ST = {v: k for k, v in ST_DTYPES.items()}
# safetensors dtype -> torch 2.x's name, for truth recorded by torch 2.6 (float8 has no torch 1.13 dtype).
ST_NAMES = {k: str(v).replace("torch.", "") for k, v in ST_DTYPES.items()}
ST_NAMES.update({"F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "U16": "uint16", "U32": "uint32", "U64": "uint64"})
CASTS = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(6)
        self.proj = nn.Linear(6, 6)
        self.bn = nn.BatchNorm1d(6)  # num_batches_tracked: an int64 buffer


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 6)
        self.layers = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(6, 10, bias=False)


class TiedNet(Net):
    def __init__(self):
        super().__init__()
        self.head.weight = self.embed.weight


class Compiled(nn.Module):
    """What torch.compile's OptimizedModule looks like to state_dict(): the model under `_orig_mod`."""

    def __init__(self, inner):
        super().__init__()
        self._orig_mod = inner


class WithExtra(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def get_extra_state(self):
        return {"version": 7}

    def set_extra_state(self, state):
        pass


MODELS = {"net": Net, "tied": TiedNet, "titan": TitanLM, "hf": HFLM,
          # torchtune's tests/assets/tiny_fair_checkpoint.pt: vocab 500, dim 32, hidden 256, 2 layers, no buffers
          "fair": lambda: TitanLM(500, 32, 256, 2, buffers=False), "fair-hf": lambda: HFLM(500, 32, 256, 2, buffers=False)}


def make(folder):
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(17)
    net = Net()
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn_like(p))
        net.layers[0].bn.running_mean.copy_(torch.randn(6))
        net.layers[1].bn.num_batches_tracked.fill_(5)
    compiled = Compiled(net)
    opt = torch.optim.Adam(compiled.parameters(), lr=0.1)
    compiled._orig_mod.head.weight.grad = torch.ones_like(net.head.weight)
    opt.step()
    torch.save({"model": compiled.state_dict(), "optimizer": opt.state_dict(), "epoch": 3},
               os.path.join(folder, "compiled.pt"))

    tied = TiedNet()
    with torch.no_grad():
        for p in tied.parameters():
            p.copy_(torch.randn_like(p))
    torch.save(tied.state_dict(), os.path.join(folder, "tied.pt"))

    extra = WithExtra()
    sd = extra.state_dict()
    sd["train_state"] = b"\x00\x01opaque"
    sd["step"] = 12
    torch.save(sd, os.path.join(folder, "extras.pt"))

    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    torch.save({"base": base, "row": base[1], "cols": base[:, 2:4], "t": base.t(), "wide": torch.randn(3, 1).expand(3, 5),
                "half": torch.randn(5).half(), "f64": torch.randn(4, dtype=torch.float64),
                "special": torch.tensor([float("nan"), float("inf"), -float("inf"), 1e-40, -0.0, 65520.0, 3.0e38]),
                "empty": torch.zeros(0, 3), "scalar": torch.tensor(2.5), "flags": torch.tensor([True, False])},
               os.path.join(folder, "views.pt"))

    torch.save({"a.weight": torch.ones(2), "b.weight": torch.zeros(2)}, os.path.join(folder, "collide.pt"))

    index_dir = os.path.join(folder, "bin_index")
    os.makedirs(index_dir, exist_ok=True)
    sd = net.state_dict()
    names = list(sd)
    half = len(names) // 2
    weight_map = {}
    for i, part in enumerate((names[:half], names[half:])):
        shard = f"pytorch_model-0000{i + 1}-of-00002.bin"
        torch.save({k: sd[k] for k in part}, os.path.join(index_dir, shard))
        weight_map.update({k: shard for k in part})
    with open(os.path.join(index_dir, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    tensors = {}
    spans = []
    for name, info in header.items():
        begin, end = info["data_offsets"]
        spans.append((begin, end))
        tensors[name] = (info["dtype"], info["shape"], blob[8 + n + begin:8 + n + end])
    spans.sort()
    at = 0
    for begin, end in spans:  # the reference reader's rule: no gap, no overlap, nothing after
        if begin != at:
            raise SystemExit(f"{path}: byte ranges leave a gap or overlap at {begin}")
        at = end
    if 8 + n + at != len(blob):
        raise SystemExit(f"{path}: {len(blob) - 8 - n - at} bytes after the last tensor")
    if n % 8:
        raise SystemExit(f"{path}: header length {n} is not a multiple of 8")
    return tensors, meta


def read_output(out, shard_size):
    if out.endswith(".safetensors"):
        return read_safetensors(out) + ([out],)
    index_path = os.path.join(out, "model.safetensors.index.json")
    if not os.path.exists(index_path):
        if sorted(os.listdir(out)) != ["model.safetensors"]:
            raise SystemExit(f"{out}: holds {sorted(os.listdir(out))}, expected model.safetensors alone")
        return read_safetensors(os.path.join(out, "model.safetensors")) + ([os.path.join(out, "model.safetensors")],)
    with open(index_path) as f:
        text = f.read()
    index = json.loads(text)
    if text != json.dumps(index, indent=2, sort_keys=True) + "\n":
        raise SystemExit("the index is not written as transformers writes it (indent 2, sorted keys)")
    files = sorted(set(index["weight_map"].values()))
    n = len(files)
    if files != [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]:
        raise SystemExit(f"shard names {files}")
    if sorted(os.listdir(out)) != sorted(files + ["model.safetensors.index.json"]):
        raise SystemExit(f"{out}: holds {sorted(os.listdir(out))}")
    tensors, meta = {}, {}
    total = 0
    for shard in files:
        t, m = read_safetensors(os.path.join(out, shard))
        for name in t:
            if index["weight_map"].get(name) != shard:
                raise SystemExit(f"{name} is in {shard} but the index names {index['weight_map'].get(name)}")
            total += len(t[name][2])
        tensors.update(t)
        meta.update(m)
    if set(tensors) != set(index["weight_map"]):
        raise SystemExit("the index and the shards name different keys")
    if index["metadata"]["total_size"] != total:
        raise SystemExit(f"total_size {index['metadata']['total_size']}, the shards hold {total} bytes")
    return tensors, meta, [os.path.join(out, f) for f in files]


def hf_shards(keys, sizes, max_size):
    """huggingface_hub's split_torch_state_dict_into_shards, for untied tensors: in order, a new shard when
    the next tensor would pass the size, a tensor larger than the size in a shard of its own."""
    shards, current, current_size = [], [], 0
    for k in keys:
        size = sizes[k]
        if size > max_size:
            shards.append([k])
            continue
        if current_size + size > max_size:
            shards.append(current)
            current, current_size = [], 0
        current.append(k)
        current_size += size
    if current:
        shards.append(current)
    return shards


def raw(t):
    t = t.contiguous()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.dtype != torch.bool else t.numpy().tobytes()


def load_reference(args):
    """{name: tensor or ("sha256", hex, dtype, shape)} and the names of non-tensor values, in source order."""
    if args.kind == "dcp":
        import contextlib
        import dcp_values_truth
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            dcp_values_truth.main(args.source)
        truth = json.loads(buf.getvalue())["tensors"]
        return {k: ("sha256", v["sha256"]) for k, v in truth.items()}, []
    if args.kind == "per-rank-truth":
        # torch 2.6's full_tensor() of each DTensor (or the values a DCP save held), recorded by
        # make_torch2_fixtures.py (values as float64); --container keeps the keys under it, as DCP flattens them.
        with open(args.source) as f:
            entries = json.load(f)["entries"]
        if args.container:
            prefix = args.container + "."
            entries = [dict(e, name=e["name"][len(prefix):]) for e in entries if e["name"].startswith(prefix)]
        return {e["name"]: ("f64sha", e["values"]["sha256_values_f64"], e["dtype"], e["shape"])
                for e in entries if "values" in e}, [e["name"] for e in entries if "values" not in e]
    if args.kind == "parts":
        # A quantized checkpoint kept quantized: what torch 2.6 and torchao 0.9 hold for SRC's --entry (every
        # plain tensor, every inner tensor of a subclass under the weight's key and the part's name), recorded by
        # make_convert_fixtures_torch2.py --quant-truth: dtype, shape, sha256 of the bytes.
        with open(args.source) as f:
            entries = json.load(f)["files"][args.entry]
        return {e["name"]: ("parts", e["dtype"], e["shape"], e["sha256"]) for e in entries}, []
    if args.kind == "bin-index":
        with open(os.path.join(args.source, "pytorch_model.bin.index.json")) as f:
            files = list(dict.fromkeys(json.load(f)["weight_map"].values()))
        obj = {}
        for shard in files:
            obj.update(torch.load(os.path.join(args.source, shard), map_location="cpu"))
    elif args.kind == "safetensors":
        tensors, _ = read_safetensors(args.source)
        obj = {}
        for name, (dt, shape, data) in tensors.items():
            obj[name] = (torch.frombuffer(bytearray(data), dtype=ST_DTYPES[dt]).reshape(shape)
                         if dt in ST_DTYPES and data else ("bytes", dt, shape, data))
    else:
        obj = torch.load(args.source, map_location="cpu")
        if args.container:
            for part in args.container.split("."):
                obj = obj[part]
    ref, objects = {}, []
    for k, v in obj.items():
        if isinstance(v, torch.Tensor) or isinstance(v, tuple):
            ref[k] = v
        else:
            objects.append(k)
    return ref, objects


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    c = sub.add_parser("check")
    c.add_argument("--out", required=True)
    c.add_argument("--source", required=True)
    c.add_argument("--kind", default="pt")
    c.add_argument("--entry", default="", help="--kind parts: the fixture's entry in the truth file")
    c.add_argument("--container", default="")
    c.add_argument("--strip", default="")
    c.add_argument("--drop", default="")
    c.add_argument("--only", default="")
    c.add_argument("--dtype", default="keep")
    c.add_argument("--model", default="")
    c.add_argument("--shard-size", type=int, default=0)
    c.add_argument("--sub", nargs=2, action="append", metavar=("PATTERN", "REPLACEMENT"),
                   help="a rename, applied in order after --strip with Python's re.sub")
    args = p.parse_args()
    if args.cmd == "make":
        make(args.dir)
        return

    ref, objects = load_reference(args)
    out, meta, files = read_output(args.out, args.shard_size)
    expected = {}  # output name -> source name, in source order
    for k in ref:
        if args.only and not re.search(args.only, k):
            continue
        name = k[len(args.strip):] if args.strip and k.startswith(args.strip) else k
        for pattern, replacement in args.sub or []:  # renames as a Python loop of re.sub runs them
            name = re.sub(pattern, replacement, name)
        if args.drop and re.search(args.drop, name):
            continue
        expected[name] = k
    tied = {k: v for k, v in meta.items() if k != "format"}
    if meta.get("format") != "pt":
        raise SystemExit(f"__metadata__ {meta} lacks format: pt")
    if set(out) | set(tied) != set(expected) or set(out) & set(tied):
        raise SystemExit(f"written {sorted(out)} + tied {sorted(tied)}, expected {sorted(expected)}")
    # Tied names: the same bytes in the source, the first name in sorted order kept (save_model's choice).
    groups = {}
    for dropped, kept in tied.items():
        groups.setdefault(kept, [kept]).append(dropped)
        a, b = ref[expected[dropped]], ref[expected[kept]]
        if not (isinstance(a, torch.Tensor) and a.data_ptr() == b.data_ptr() and a.shape == b.shape
                and a.stride() == b.stride() and a.dtype == b.dtype):
            raise SystemExit(f"{dropped} -> {kept} in __metadata__, but they are not one tensor in the source")
    for kept, names in groups.items():
        if sorted(names)[0] != kept:
            raise SystemExit(f"kept {kept} of {sorted(names)}; save_model keeps the first in sorted order")
    ptrs = {}
    for name, k in expected.items():  # every tied pair in the source is recorded
        v = ref[k]
        if isinstance(v, torch.Tensor) and v.numel():
            key = (v.data_ptr(), tuple(v.shape), v.stride(), v.dtype)
            if key in ptrs and name not in tied and ptrs[key] not in tied:
                raise SystemExit(f"{name} and {ptrs[key]} share their bytes but both were written")
            ptrs.setdefault(key, name)
    checked = 0
    for name, (dt, shape, data) in out.items():
        want = ref[expected[name]]
        if isinstance(want, tuple) and want[0] == "sha256":
            if hashlib.sha256(data).hexdigest() != want[1]:
                raise SystemExit(f"{name}: bytes differ from torch's assembly of the DCP chunks")
        elif isinstance(want, tuple) and want[0] == "parts":
            if (ST_NAMES.get(dt), shape) != (want[1], want[2]):
                raise SystemExit(f"{name}: {dt} {shape}, torch says {want[1]} {want[2]}")
            if hashlib.sha256(data).hexdigest() != want[3]:
                raise SystemExit(f"{name}: bytes differ from torch's")
        elif isinstance(want, tuple) and want[0] == "f64sha":
            t = torch.frombuffer(bytearray(data), dtype=ST_DTYPES[dt]) if data else torch.zeros(0, dtype=ST_DTYPES[dt])
            if str(ST_DTYPES[dt]).replace("torch.", "") != want[2] or shape != want[3]:
                raise SystemExit(f"{name}: {dt} {shape}, torch's full_tensor() is {want[2]} {want[3]}")
            if t.is_complex():
                t = torch.view_as_real(t)
            if hashlib.sha256(t.reshape(-1).to(torch.float64).numpy().astype("<f8").tobytes()).hexdigest() != want[1]:
                raise SystemExit(f"{name}: values differ from torch's full_tensor()")
        elif isinstance(want, tuple):
            if (dt, shape, data) != want[1:]:
                raise SystemExit(f"{name}: differs from the source's {want[1]} bytes")
        else:
            if args.dtype != "keep" and want.dtype in FLOATS:
                want = want.to(CASTS[args.dtype])
            if TORCH_TO_ST.get(want.dtype) != dt:
                raise SystemExit(f"{name}: dtype {dt}, torch says {want.dtype}")
            if list(want.shape) != shape:
                raise SystemExit(f"{name}: shape {shape}, torch says {list(want.shape)}")
            if raw(want) != data:
                raise SystemExit(f"{name}: values differ from torch's")
        checked += 1
    if args.shard_size:
        sizes = {k: len(v[2]) for k, v in out.items()}
        order = [n for n in expected if n in out]
        want_shards = hf_shards(order, sizes, args.shard_size)
        got = {}
        for f in files:
            got[os.path.basename(f)] = sorted(read_safetensors(f)[0])
        if sorted(got.values()) != sorted(sorted(s) for s in want_shards):
            raise SystemExit(f"shards {got}, huggingface_hub would cut {want_shards}")
    strict = None
    if args.model:
        model = MODELS[args.model]()
        sd = {}
        for name, (dt, shape, data) in out.items():
            sd[name] = torch.frombuffer(bytearray(data), dtype=ST_DTYPES[dt]).reshape(shape) if data \
                else torch.zeros(shape, dtype=ST_DTYPES[dt])
        for dropped, kept in tied.items():  # what safetensors.torch.load_model does with the record
            sd[dropped] = sd[kept]
        result = model.load_state_dict(sd, strict=True)
        strict = not result.missing_keys and not result.unexpected_keys
        for name, v in model.state_dict().items():
            if raw(v) != raw(sd[name].to(v.dtype)):
                raise SystemExit(f"{name}: the loaded model holds other values")
    json.dump({"checked": checked, "tied": len(tied), "objects": objects, "strict_load": strict, "files": len(files)},
              sys.stdout)


if __name__ == "__main__":
    main()
