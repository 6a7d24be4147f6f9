#!/usr/bin/env python3
"""Seed corpora for the StateLens fuzzers, built at run time (nothing here is committed as a blob).

    make_corpus.py OUT_DIR [SOURCE_DIR ...]

Writes OUT_DIR/<fuzzer>/<sha1> files:
  * synthetic seeds made here with the standard library only (no torch import): small safetensors files,
    pickles of every protocol, torch.save-shaped zips, legacy streams and tar layouts whose pickles call
    torch's rebuild functions through stand-in modules;
  * every DCP folder (a .metadata file with its .distcp files) under the SOURCE_DIRs, as one fuzz_dcp input:
    the .metadata bytes, then each data file after the separator fuzz_dcp.cpp splits on;
  * every index folder (model.safetensors.index.json or pytorch_model.bin.index.json with its shards) under
    the SOURCE_DIRs, as one fuzz_hf_index_folder input in the same way, plus synthetic FP8 index folders;
  * every file under the SOURCE_DIRs, sorted by what its bytes are (not its name): zips go to the zip
    fuzzer (big storage records cut short so the seed stays small) and their .pkl records to the pickle
    fuzzer; legacy streams and tars to the legacy and tar fuzzers, their pickles to the pickle fuzzer;
    safetensors files; index JSON.
"""

import collections
import hashlib
import io
import os
import pickle
import pickletools
import struct
import sys
import tarfile
import types
import zipfile

# Inputs longer than this are cut by libFuzzer anyway (run_fuzzers.sh passes the same -max_len).
MAX_LEN = {
    "fuzz_safetensors": 64 << 10,
    "fuzz_torch_zip": 128 << 10,
    "fuzz_torch_legacy": 128 << 10,
    "fuzz_tar": 128 << 10,
    "fuzz_pickle": 64 << 10,
    "fuzz_hf_index": 64 << 10,
    "fuzz_hf_index_folder": 128 << 10,
    "fuzz_dcp": 128 << 10,
    "fuzz_rules": 64 << 10,
    "fuzz_values": 128 << 10,
}
MAX_SEEDS_PER_FUZZER = 2000
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


class Corpus:
    def __init__(self, out):
        self.out = out
        self.count = collections.Counter()
        for name in MAX_LEN:
            os.makedirs(os.path.join(out, name), exist_ok=True)

    def add(self, fuzzer, data):
        if not data or self.count[fuzzer] >= MAX_SEEDS_PER_FUZZER:
            return
        data = bytes(data[: MAX_LEN[fuzzer]])
        path = os.path.join(self.out, fuzzer, hashlib.sha1(data).hexdigest())
        if not os.path.exists(path):
            with open(path, "wb") as f:
                f.write(data)
            self.count[fuzzer] += 1


# ---- stand-ins for torch, so pickle writes the globals torch.save writes without importing torch ----

def install_fake_torch():
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")
    tensor_mod = types.ModuleType("torch._tensor")

    def fn(module, name):
        def f(*args):
            return None
        f.__module__ = module.__name__
        f.__name__ = f.__qualname__ = name
        setattr(module, name, f)
        return f

    fns = {n: fn(utils, n) for n in ("_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_parameter",
                                     "_rebuild_qtensor", "_rebuild_meta_tensor_no_storage")}
    fns["_rebuild_from_type_v2"] = fn(tensor_mod, "_rebuild_from_type_v2")
    classes = {}
    for name in ("FloatStorage", "LongStorage", "HalfStorage", "ByteStorage", "UntypedStorage", "Tensor", "Size"):
        cls = type(name, (), {})
        cls.__module__ = "torch"
        setattr(torch, name, cls)
        classes[name] = cls
    dtype = type("dtype", (), {})
    dtype.__module__ = "torch"
    torch._utils = utils
    torch._tensor = tensor_mod
    sys.modules.update({"torch": torch, "torch._utils": utils, "torch._tensor": tensor_mod})
    return fns, classes


FNS, CLASSES = install_fake_torch()


class Storage:
    def __init__(self, key, cls, numel, data=b""):
        self.key, self.cls, self.numel, self.data = key, cls, numel, data


class Tensor:
    def __init__(self, storage, offset, size, stride, fn="_rebuild_tensor_v2"):
        self.storage, self.offset, self.size, self.stride, self.fn = storage, offset, size, stride, fn

    def __reduce_ex__(self, proto):
        if self.fn == "_rebuild_tensor":
            return (FNS[self.fn], (self.storage, self.offset, self.size, self.stride))
        inner = (FNS["_rebuild_tensor_v2"],
                 (self.storage, self.offset, self.size, self.stride, False, collections.OrderedDict()))
        if self.fn == "_rebuild_parameter":
            return (FNS[self.fn], (Tensor(self.storage, self.offset, self.size, self.stride), True,
                                   collections.OrderedDict()))
        if self.fn == "_rebuild_from_type_v2":
            return (FNS[self.fn], (inner[0], CLASSES["Tensor"], inner[1], {}))
        return inner


class TorchPickler(pickle.Pickler):
    def __init__(self, f, protocol, legacy):
        super().__init__(f, protocol)
        self.legacy = legacy

    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            pid = ("storage", obj.cls, obj.key, "cpu", obj.numel)
            return pid + (None,) if self.legacy else pid
        return None


def torch_pickle(obj, protocol=2, legacy=False):
    f = io.BytesIO()
    TorchPickler(f, protocol, legacy).dump(obj)
    return f.getvalue()


def sample_objects():
    s0 = Storage("0", CLASSES["FloatStorage"], 6, struct.pack("<6f", *range(6)))
    s1 = Storage("1", CLASSES["LongStorage"], 2, struct.pack("<2q", 7, 8))
    s2 = Storage("2", CLASSES["HalfStorage"], 4, b"\0" * 8)
    w = Tensor(s0, 0, (2, 3), (3, 1))
    view = Tensor(s0, 2, (2,), (1,))
    sd = collections.OrderedDict([("layer.weight", w), ("layer.bias", Tensor(s0, 0, (3,), (1,))),
                                  ("tied", view), ("steps", Tensor(s1, 0, (2,), (1,))),
                                  ("half", Tensor(s2, 0, (2, 2), (2, 1), "_rebuild_tensor")),
                                  ("param", Tensor(s0, 0, (6,), (1,), "_rebuild_parameter")),
                                  ("sub", Tensor(s0, 0, (3, 2), (1, 3), "_rebuild_from_type_v2"))])
    sd._metadata = {"": {"version": 1}}
    yield sd, [s0, s1, s2]
    yield {"model": sd, "optimizer": {"state": {0: {"exp_avg": w}}, "param_groups": [{"lr": 0.1, "params": [0]}]},
           "epoch": 3, "name": "run"}, [s0, s1, s2]
    yield [w, view, {"nested": [w, (w, None)]}], [s0]
    yield {"bad_stride": Tensor(s0, 5, (4, 4), (100, -1)), "past_end": Tensor(s0, 1 << 40, (1,), (1,))}, [s0]


def plain_objects():
    shared = [1, 2, 3]
    yield {"a": 1, "b": [1.5, "x", b"y", None, True, (1, 2)], "c": {"d": shared, "e": shared}}
    yield collections.OrderedDict(a=1 << 70, b=-(1 << 100), c=frozenset({1, 2}), d={3, 4}, e=bytearray(b"z"))
    deep = []
    for _ in range(50):
        deep = [deep]
    yield deep
    yield "\u00e9\u4e2d\U0001f600" * 3


# ---- container writers ----

def torch_zip(obj, storages, protocol=2, name="archive", compress=False):
    f = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(f, "w", method) as z:
        z.writestr(f"{name}/data.pkl", torch_pickle(obj, protocol))
        z.writestr(f"{name}/byteorder", "little")
        for s in storages:
            z.writestr(f"{name}/data/{s.key}", s.data)
        z.writestr(f"{name}/version", "3\n")
    return f.getvalue()


def torch_zip_raw(pickle_bytes):
    f = io.BytesIO()
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle_bytes)
        z.writestr("archive/data/0", b"\0" * 24)
        z.writestr("archive/version", "3\n")
    return f.getvalue()


def legacy_stream(obj, storages, protocol=2):
    out = io.BytesIO()
    for header in (LEGACY_MAGIC, 1001,
                   {"protocol_version": 1001, "little_endian": True,
                    "type_sizes": {"short": 2, "int": 4, "long": 4}}):
        pickle.dump(header, out, protocol)
    out.write(torch_pickle(obj, protocol, legacy=True))
    keys = sorted(s.key for s in storages)
    pickle.dump(keys, out, protocol)
    by_key = {s.key: s for s in storages}
    for k in keys:
        out.write(struct.pack("<q", by_key[k].numel))
        out.write(by_key[k].data)
    return out.getvalue()


def tar_layout(protocol=2):
    def member(tf, name, data):
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))

    storages = io.BytesIO()
    pickle.dump(1, storages, protocol)
    pickle.dump(("0", "cpu", CLASSES["FloatStorage"]), storages, protocol)
    storages.write(struct.pack("<q", 4) + struct.pack("<4f", 1, 2, 3, 4))
    pickle.dump([("1", "0", 1, 2)], storages, protocol)
    tensors = io.BytesIO()
    pickle.dump(1, tensors, protocol)
    pickle.dump(("t0", "0", "torch.FloatTensor"), tensors, protocol)
    tensors.write(struct.pack("<ii", 2, 0) + struct.pack("<qq", 2, 2) + struct.pack("<qq", 2, 1) + struct.pack("<q", 0))

    class Key:
        def __init__(self, k):
            self.k = k

    class KeyPickler(pickle.Pickler):
        def persistent_id(self, obj):
            return obj.k if isinstance(obj, Key) else None

    main = io.BytesIO()
    KeyPickler(main, protocol).dump(collections.OrderedDict(weight=Key("t0"), view=Key("1")))
    f = io.BytesIO()
    with tarfile.open(fileobj=f, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        member(tf, "sys_info", pickle.dumps({"protocol_version": 1001, "little_endian": True}, protocol))
        member(tf, "pickle", main.getvalue())
        member(tf, "tensors", tensors.getvalue())
        member(tf, "storages", storages.getvalue())
    return f.getvalue(), main.getvalue()


def safetensors(tensors, metadata=None, pad=True):
    import json
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, shape, payload) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    h = json.dumps(header).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def hostile_pickles():
    """Small pickles shaped like the attacks the walks must survive, for the fuzzers to mutate further."""
    def su(s):
        b = s.encode()
        return b"X" + struct.pack("<I", len(b)) + b

    def put(i):  # far above the memo indices torch_pickle's fragment uses
        return b"r" + struct.pack("<I", 5000 + i)

    def get(i):
        return b"j" + struct.pack("<I", 5000 + i)

    tensor = torch_pickle(Tensor(Storage("0", CLASSES["FloatStorage"], 6), 0, (6,), (1,)))[2:-1]
    out = []
    b = b"\x80\x02}" + su("t") + tensor + b"s" + put(0)  # {"a": d, "b": d} nested: 2^n paths
    for k in range(1, 24):
        b += b"}(" + su("a") + get(k - 1) + su("b") + get(k - 1) + b"u" + put(k)
    out.append(b + b".")
    out.append(b"\x80\x02}" + su("x") + b"]" + put(0) + b"(" + get(0) + tensor + get(0) + b"es.")  # cyclic list
    out.append(b"\x80\x02}" + su("w") + tensor + put(0) + b"}" + su("self") + get(0) + b"sbs.")  # state holds itself
    out.append(b"\x80\x02" + b"]" * 200 + b"a" * 199 + b".")  # deep nesting
    key = "k" * 300
    b = b"\x80\x02" + su(key) + put(1000) + b"0}" + su("t") + tensor + b"s" + put(0)  # one key at every level
    for k in range(1, 32):
        b += b"}" + get(1000) + get(k - 1) + b"s" + put(k)
    out.append(b + b".")
    b = b"\x80\x02](" + b"K\x01K\x02\x86" * 20 + b"e" + put(0) + b"0"  # OrderedDict(memoised pairs) again and again
    b += (b"ccollections\nOrderedDict\n" + get(0) + b"\x85R0") * 20
    out.append(b + b"N.")
    return out


RULE_SEEDS = [
    "# kept\nversion: 1\nrules:\n  # strip\n  - pattern: '^_orig_mod\\.'\n    replace: ''\n    note: compile\n"
    "  - pattern: '^model\\.layers\\.(\\d+)\\.self_attn\\.q_proj\\.'\n    replace: 'layers.\\1.attention.wq.'\n"
    "  - pattern: '\\.rotary_emb\\.inv_freq$'\n    drop: true\n    enabled: false\n",
    "version: 1\nmode: first_match\nrules:\n  - {pattern: '(?P<n>\\d+)', replace: '\\g<n>x'}\n",
    '{"version": 1, "rules": [{"pattern": "^module\\\\.", "replace": ""}, {"pattern": "a|b", "replace": "c", "drop": false}]}',
    '{"^language_model.model": "model.language_model", "^vision_tower": "model.vision_tower", "(\\d+)": "<\\\\1>"}',
    '_checkpoint_conversion_mapping = {\n    r"^language_model.model": "model.language_model",  # text\n'
    "    r'^multi_modal_projector': 'model.multi_modal_projector',\n}\n",
    'old,new\nmodel.norm.weight,norm.weight\n"a,b","c""d"\nlm_head.weight,\n',
]


def synthetic(c):
    for seed in RULE_SEEDS:
        c.add("fuzz_rules", seed.encode())
    for proto in range(6):
        for obj in plain_objects():
            c.add("fuzz_pickle", pickle.dumps(obj, proto))
    for obj, storages in sample_objects():
        for proto in (0, 1, 2, 3, 4, 5):
            c.add("fuzz_pickle", torch_pickle(obj, proto))
            c.add("fuzz_pickle", torch_pickle(obj, proto, legacy=True))
            c.add("fuzz_torch_legacy", legacy_stream(obj, storages, proto))
        for proto in (2, 4):
            c.add("fuzz_torch_zip", torch_zip(obj, storages, proto))
        c.add("fuzz_torch_zip", torch_zip(obj, storages, 2, compress=True))
    for p in hostile_pickles():
        c.add("fuzz_pickle", p)
        c.add("fuzz_torch_zip", torch_zip_raw(p))
    for proto in (0, 2):
        tar, main = tar_layout(proto)
        c.add("fuzz_tar", tar)
        c.add("fuzz_torch_legacy", tar)
        c.add("fuzz_pickle", main)
    c.add("fuzz_safetensors", safetensors({"a": ("F32", [2, 2], b"\0" * 16), "b": ("I64", [1], b"\1" * 8),
                                           "c": ("BF16", [0], b""), "d": ("F4", [4], b"\0\0")},
                                          {"format": "pt"}))
    c.add("fuzz_safetensors", safetensors({"x": ("U8", [3], b"abc")}, pad=False))
    c.add("fuzz_safetensors", safetensors({}, {}))
    c.add("fuzz_hf_index", b'{"metadata": {"total_size": 24}, "weight_map": {"a": "model-00001-of-00002.safetensors",'
                           b' "b": "model-00002-of-00002.safetensors", "c": "../escape.bin", "d": "/abs"}}')
    c.add("fuzz_hf_index", b'{"metadata": {"total_size": 1.5e3, "format": "pt"}, "weight_map": {}}')


# ---- files found on disk ----

def split_pickles(data, limit=8):
    """Consecutive pickles at the start of data (a legacy stream is five of them, then raw bytes)."""
    out, pos = [], 0
    while pos < len(data) and len(out) < limit:
        try:
            end = None
            for op, arg, at in pickletools.genops(io.BytesIO(data[pos:])):
                if op.name == "STOP":
                    end = pos + at + 1
                    break
        except Exception:
            break
        if end is None:
            break
        out.append(data[pos:end])
        pos = end
    return out, pos


def shrink_zip(data, limit):
    """A copy of a zip with each record cut to `limit` bytes (tensor bytes are never read)."""
    try:
        src = zipfile.ZipFile(io.BytesIO(data))
        f = io.BytesIO()
        with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as dst:
            for info in src.infolist():
                body = src.read(info)
                if not info.filename.endswith(".pkl"):
                    body = body[:limit]
                dst.writestr(info.filename, body)
        return f.getvalue()
    except Exception:
        return None


def add_file(c, data):
    # Any small checkpoint is a seed for reading values (the loader picks the format).
    if len(data) <= MAX_LEN["fuzz_values"]:
        c.add("fuzz_values", data)
    if data[:4] == b"PK\x03\x04":
        c.add("fuzz_torch_zip", data if len(data) <= MAX_LEN["fuzz_torch_zip"] else shrink_zip(data, 64))
        try:
            z = zipfile.ZipFile(io.BytesIO(data))
            for info in z.infolist():
                if info.filename.endswith(".pkl") and info.file_size <= 4 << 20:
                    c.add("fuzz_pickle", z.read(info))
        except Exception:
            pass
        return
    if len(data) >= 512 and data[257:262] == b"ustar":
        c.add("fuzz_tar", data)
        c.add("fuzz_torch_legacy", data)
        try:
            with tarfile.open(fileobj=io.BytesIO(data)) as tf:
                for m in tf.getmembers():
                    if m.isfile() and m.size <= 4 << 20:
                        for p in split_pickles(tf.extractfile(m).read(), 3)[0]:
                            c.add("fuzz_pickle", p)
        except Exception:
            pass
        return
    if data[:1] == b"\x80" or data[:1] in (b"(", b"}", b"]", b"L", b"c", b"I"):
        pickles, _ = split_pickles(data)
        if len(pickles) >= 5:
            c.add("fuzz_torch_legacy", data)
        for p in pickles:
            c.add("fuzz_pickle", p)
        if pickles:
            return
    stripped = data.lstrip()
    if stripped[:1] == b"{" and b'"weight_map"' in data[: 1 << 20]:
        c.add("fuzz_hf_index", data)
        return
    if len(data) >= 10:
        (n,) = struct.unpack("<Q", data[:8])
        if 2 <= n <= len(data) - 8 and data[8:8 + n].lstrip()[:1] == b"{":
            c.add("fuzz_safetensors", data)


DCP_SEPARATOR = b"%%DCPFILE%%"  # as tests/fuzz/fuzz_dcp.cpp splits its input


def add_dcp_folder(c, dirpath, files):
    """A DCP folder as one fuzz_dcp input. The fuzzer names its data files __0_0.distcp, __1_0.distcp, ... in
    order, so the .metadata's relative paths are renamed to those names (same order as sorted here)."""
    try:
        with open(os.path.join(dirpath, ".metadata"), "rb") as f:
            metadata = f.read()
        data = sorted(n for n in files if n.endswith(".distcp") or n.endswith(".safetensors"))[:7]
        blobs = []
        renames = []
        for i, n in enumerate(data):
            with open(os.path.join(dirpath, n), "rb") as f:
                blobs.append(f.read())
            old, new = n.encode(), f"__{i}_0.distcp".encode()
            if len(old) == len(new):  # a pickle string's length prefix stays right only for same-length names
                placeholder = b"\x01\x01" + f"{i:02d}".encode() + b"\x01" * (len(old) - 4)
                metadata = metadata.replace(old, placeholder)  # in two steps: new names may be old ones
                renames.append((placeholder, new))
        for placeholder, new in renames:
            metadata = metadata.replace(placeholder, new)
        c.add("fuzz_dcp", DCP_SEPARATOR.join([metadata] + blobs))
    except OSError:
        pass


SHARD_SEPARATOR = b"%%SHARD%%"  # as tests/fuzz/fuzz_hf_index_folder.cpp splits its input
MAX_INDEX_SHARDS = 6
INDEX_NAMES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def shard_name(i, n):
    """What fuzz_hf_index_folder names the i-th (from 1) of n shards."""
    return f"model-{i:05d}-of-{n:05d}.safetensors"


def shrink_shard(data, keep=1024):
    """A shard cut to its header and `keep` bytes of tensor data: the merge reads headers only, and tensors
    past the end are listed as unavailable (the seed stays small). A torch.save zip is kept whole (its central
    directory is at the end), or left out (None) when it is larger than a seed may be."""
    if data[:2] == b"PK":
        return data if len(data) <= 96 << 10 else None
    if len(data) >= 8:
        (n,) = struct.unpack("<Q", data[:8])
        if n <= len(data) - 8:
            return data[: 8 + n + keep]
    return data[: 8 << 10]


def index_folder_seed(index, shards):
    """One fuzz_hf_index_folder input: the index JSON with `shards` (a list of (name, bytes), at most six)
    renamed to the fuzzer's names, then the shards. Names the index gives that are not among `shards` stay as
    written (missing shards)."""
    shards = shards[:MAX_INDEX_SHARDS]
    renames = []
    for i, (old, _) in enumerate(shards):
        placeholder = b"\x01\x01" + f"{i:02d}".encode() + b"\x01"  # in two steps: new names may be old ones
        index = index.replace(b'"' + old.encode() + b'"', b'"' + placeholder + b'"')
        renames.append((placeholder, shard_name(i + 1, len(shards)).encode()))
    for placeholder, new in renames:
        index = index.replace(placeholder, new)
    return SHARD_SEPARATOR.join([index] + [data for _, data in shards])


def add_index_folder(c, dirpath, files):
    """An index folder as one fuzz_hf_index_folder input; its shards are the .safetensors and .bin files beside
    the index, in name order."""
    try:
        name = next(n for n in INDEX_NAMES if n in files)
        with open(os.path.join(dirpath, name), "rb") as f:
            index = f.read()
        shards = []
        for n in sorted(files):
            if n.endswith(".safetensors") or n.endswith(".bin"):
                with open(os.path.join(dirpath, n), "rb") as f:
                    shard = shrink_shard(f.read())
                if shard is None:
                    return
                shards.append((n, shard))
        c.add("fuzz_hf_index_folder", index_folder_seed(index, shards))
    except (OSError, StopIteration):
        pass


def synthetic_index_folders(c):
    """FP8 index folders: each FP8 weight followed by its `_scale_inv` in a sorted weight_map (grouped while
    the index is merged), and the variants the grouping pass must split back or that turn early grouping off."""
    import json

    def f8(rows, cols):
        return ("F8_E4M3", [rows, cols], b"\x38" * (rows * cols))

    def f32(*shape):
        n = 1
        for d in shape:
            n *= d
        return ("F32", list(shape), b"\0\0\x80\x3f" * n)

    def bf16(*shape):
        n = 1
        for d in shape:
            n *= d
        return ("BF16", list(shape), b"\x80\x3f" * n)

    base = {
        "model.embed_tokens.weight": (0, bf16(4, 8)),
        "model.layers.0.mlp.down_proj.weight": (0, f8(16, 8)),
        "model.layers.0.mlp.down_proj.weight_scale_inv": (0, f32(2, 1)),
        "model.layers.0.mlp.up_proj.weight": (0, f8(8, 16)),
        "model.layers.0.mlp.up_proj.weight_scale_inv": (1, f32(1, 2)),  # the pair split across the shards
        "model.layers.0.self_attn.q_proj.weight": (1, f8(4, 4)),
        "model.layers.0.self_attn.q_proj.weight_scale_inv": (1, f32(1, 1)),
        "model.norm.weight": (1, bf16(8)),
    }

    def folder(tensors, shards=2, order=None, unlisted=None, metadata=None):
        names = order or sorted(tensors)
        total = sum(len(t[1][2]) for t in tensors.values())
        index = {"metadata": dict(metadata or {}, total_size=total),
                 "weight_map": {n: shard_name(tensors[n][0] + 1, shards) for n in names}}
        blobs = []
        for i in range(shards):
            held = {n: t for n, (s, t) in tensors.items() if s == i}
            held.update((unlisted or {}).get(i, {}))
            blobs.append(safetensors(held, {"format": "pt"}))
        c.add("fuzz_hf_index_folder", SHARD_SEPARATOR.join([json.dumps(index, indent=2).encode()] + blobs))

    folder(base)
    folder({n: (0, t) for n, (_, t) in base.items()}, shards=1)
    # Another scheme's names, or an input_scale joining a group: the grouping pass splits the early groups.
    folder(dict(base, **{"model.layers.0.mlp.down_proj.input_scale": (0, f32())}))
    folder(dict(base, **{"model.layers.1.mlp.qweight": (1, ("I32", [2, 4], b"\0" * 32)),
                         "model.layers.1.mlp.qzeros": (1, ("I32", [1, 4], b"\0" * 16)),
                         "model.layers.1.mlp.scales": (1, ("F16", [1, 8], b"\0" * 16))}))
    folder(dict(base, **{"model.layers.1.mlp.weight:qdata": (1, ("I8", [4, 4], b"\0" * 16)),
                         "model.layers.1.mlp.weight:scale": (1, f32(4))}))
    folder(dict(base, **{"model.layers.1.mlp.weight._qdata": (1, ("I8", [4, 4], b"\0" * 16))}))
    folder(dict(base, **{"model.layers.1.mlp.SCB": (1, f32(4))}))
    folder(base, metadata={"tensor_names": "[]"})
    # No early groups: weight_map not sorted, or a shard tensor the index does not list.
    folder(base, order=list(reversed(sorted(base))))
    folder(base, order=sorted(base)[1:] + sorted(base)[:1])
    folder(base, unlisted={1: {"model.layers.9.extra.weight": bf16(2)}})
    # Pairs that are not: a float8 weight without its scale, a scale after a weight that is not float8, a
    # float8 scale, and other float8 layouts (per-channel, per-tensor).
    folder({"a.weight": (0, f8(4, 4)), "a.weight_scale": (0, f32(1)), "b.weight": (0, bf16(4, 4)),
            "b.weight_scale_inv": (1, f32(1, 1)), "c.weight": (1, ("F8_E5M2", [4, 4], b"\0" * 16)),
            "c.weight_scale_inv": (1, ("F8_E4M3", [1, 1], b"\0")), "d.weight": (1, f8(4, 4)),
            "d.weight_scale_inv": (1, f32(4, 1)), "e.weight": (1, f8(4, 4)), "e.weight_scale_inv": (1, f32())})
    # The index puts a pair's scale in the shard that does not hold it.
    tensors = dict(base)
    index = {"metadata": {"total_size": 0},
             "weight_map": {n: shard_name(2 - s, 2) if n.endswith("up_proj.weight_scale_inv") else shard_name(s + 1, 2)
                            for n, (s, _) in sorted(tensors.items())}}
    blobs = [safetensors({n: t for n, (s, t) in tensors.items() if s == i}) for i in range(2)]
    c.add("fuzz_hf_index_folder", SHARD_SEPARATOR.join([json.dumps(index).encode()] + blobs))


def wrapped_subclass_shards(c, root, bin_sharded):
    """A .bin index whose second shard holds torchao tensors (inner tensors with locations of their own): the
    input with which fuzz_hf_index_folder found parts pointing into the first shard."""
    import json

    ao = os.path.join(root, "quant", "torchao_subclasses.pt")
    try:
        with open(os.path.join(bin_sharded, "pytorch_model-00001-of-00002.bin"), "rb") as f:
            first = f.read()
        with open(ao, "rb") as f:
            second = f.read()
    except OSError:
        return
    weight_map = {"transformer.h.0.attn.bias": shard_name(1, 2), "transformer.h.0.attn.weight": shard_name(1, 2),
                  "transformer.h.0.step": shard_name(1, 2), "transformer.wte.weight": shard_name(1, 2),
                  "a.weight": shard_name(2, 2), "m.bias": shard_name(2, 2)}
    c.add("fuzz_hf_index_folder", SHARD_SEPARATOR.join([json.dumps({"weight_map": weight_map}).encode(), first, second]))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    c = Corpus(sys.argv[1])
    synthetic(c)
    synthetic_index_folders(c)
    for root in sys.argv[2:]:
        if not os.path.isdir(root):
            continue
        for dirpath, _, files in os.walk(root):
            if ".metadata" in files:
                add_dcp_folder(c, dirpath, files)
            if any(n in files for n in INDEX_NAMES):
                add_index_folder(c, dirpath, files)
            if dirpath.endswith(os.path.join("fixtures", "index", "bin_sharded")):
                wrapped_subclass_shards(c, root, dirpath)
            for name in sorted(files):
                path = os.path.join(dirpath, name)
                try:
                    if os.path.getsize(path) > 64 << 20:
                        continue
                    with open(path, "rb") as f:
                        add_file(c, f.read())
                except OSError:
                    continue
    print("seeds: " + ", ".join(f"{k} {c.count[k]}" for k in MAX_LEN))


if __name__ == "__main__":
    main()
