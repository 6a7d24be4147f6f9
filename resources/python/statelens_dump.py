"""Record what a live PyTorch model expects from a checkpoint, for StateLens.

A checkpoint is half of a load failure; the other half is the model that receives it. This module writes
every key the model's state_dict() has, after whatever wrapping the script applied (torch.compile's
_orig_mod, DDP/DataParallel's module., FSDP, activation checkpointing, FSDP2 fully_shard), with shapes,
dtypes and how each is held, without copying any tensor data.

Getting it: the StateLens .deb installs it for the system Python, so `import statelens_dump` works there
(with Debian's torch, python3-torch, which the package recommends). For any other environment (conda, a
venv, a cluster image), `statelens dump-helper DIR` writes this file into DIR: the environment's
site-packages, or the training project's folder.

Use it from a training script:

    import statelens_dump
    statelens_dump.dump(model, "model.sldump.json")

or from the command line, with a factory that returns the model:

    python -m statelens_dump mypackage.models:build_model model.sldump.json [--kwargs '{"dim": 512}']

Only the standard library and torch (1.13 to 2.x) are needed. Nothing is moved between devices and no
collective runs, except what the model's own state_dict() does (FSDP1 FULL_STATE_DICT gathers).

Format ("statelens-live-dump", version 1): a JSON object
  {"format": "statelens-live-dump", "version": 1,
   "producer": {"torch": str, "python": str, "statelens_dump": 1},
   "model_class": "pkg.Class",
   "modules": [{"prefix": "layers.0", "class": "pkg.Block"}, ...],
   "entries": [{"name": "layers.0.attn.weight", "kind": "parameter"|"buffer"|"extra_state"|"other",
                "persistent": true, "shape": [int], "dtype": "float32", "requires_grad": bool,
                "device": "cuda:0", "module": "torch.nn.modules.linear.Linear",
                "tied_with": ["other.name"],          # same tensor under another key
                "subclass": "torch.distributed.tensor.DTensor",   # tensor subclasses only
                "dtensor": {"placements": ["Shard(dim=0)"], "mesh_shape": [2], "mesh_dim_names": ["dp"],
                            "device_type": "cuda", "local_shape": [int]},
                "value": "repr"}, ...]}              # non-tensor values (extra_state)
Non-persistent buffers (not in state_dict(), so not expected in a checkpoint) are listed with
"persistent": false so StateLens can explain keys such as rotary inv_freq.
"""

import argparse
import importlib
import json
import os
import sys
import tempfile

import torch

FORMAT = "statelens-live-dump"
VERSION = 1


def _qualname(obj):
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def _placement_text(p):
    # Shard(dim=0), Replicate(), Partial(sum), _StridedShard(dim=0, sf=2): as repr() prints them.
    try:
        return repr(p)
    except Exception:  # noqa: BLE001 - a broken repr must not stop the dump
        return type(p).__name__


def _dtensor_info(t):
    """Placements, mesh and local shape of a DTensor-like value (duck-typed: 1.13 has no DTensor)."""
    placements = getattr(t, "placements", None)
    mesh = getattr(t, "device_mesh", None)
    if placements is None or mesh is None:
        return None
    info = {"placements": [_placement_text(p) for p in placements]}
    shape = getattr(mesh, "shape", None)
    if shape is None and hasattr(mesh, "mesh"):
        shape = tuple(mesh.mesh.shape)
    if shape is not None:
        info["mesh_shape"] = [int(s) for s in shape]
    names = getattr(mesh, "mesh_dim_names", None)
    if names:
        info["mesh_dim_names"] = list(names)
    device_type = getattr(mesh, "device_type", None)
    if device_type:
        info["device_type"] = str(device_type)
    local = getattr(t, "_local_tensor", None)
    if local is None and hasattr(t, "to_local"):
        try:
            local = t.to_local()
        except Exception:  # noqa: BLE001
            local = None
    if local is not None:
        info["local_shape"] = [int(s) for s in local.shape]
    return info


def _storage_key(t):
    """Identity of the bytes behind a tensor, for tied weights; None where it cannot be known cheaply."""
    if t.device.type == "meta":
        return ("meta", id(t))
    try:
        storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        return (storage.data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()))
    except Exception:  # noqa: BLE001 - wrapper subclasses have no storage of their own
        return None


def _owner(prefix_to_class, name):
    prefix = name.rsplit(".", 1)[0] if "." in name else ""
    while True:
        if prefix in prefix_to_class:
            return prefix_to_class[prefix]
        if not prefix:
            return None
        prefix = prefix.rsplit(".", 1)[0] if "." in prefix else ""


def describe(model):
    """The dump as a dict (see the module docstring)."""
    prefix_to_class = {}
    modules = []
    for prefix, module in model.named_modules(remove_duplicate=False):
        if prefix not in prefix_to_class:
            prefix_to_class[prefix] = _qualname(module)
            modules.append({"prefix": prefix, "class": prefix_to_class[prefix]})

    # keep_vars=True returns the Parameter objects themselves, so requires_grad and ties stay visible.
    state = model.state_dict(keep_vars=True)
    param_ids = {id(p) for p in model.parameters()}
    entries = []
    by_storage = {}
    for name, value in state.items():
        entry = {"name": name, "persistent": True, "module": _owner(prefix_to_class, name)}
        if isinstance(value, torch.Tensor):
            is_param = isinstance(value, torch.nn.Parameter) or id(value) in param_ids
            entry["kind"] = "parameter" if is_param else "buffer"
            entry["shape"] = [int(s) for s in value.shape]
            entry["dtype"] = _dtype_name(value.dtype)
            entry["requires_grad"] = bool(value.requires_grad)
            entry["device"] = str(value.device)
            cls = type(value)
            if cls not in (torch.Tensor, torch.nn.Parameter):
                entry["subclass"] = _qualname(cls)
            dt = _dtensor_info(value)
            if dt is not None:
                entry["dtensor"] = dt
            key = _storage_key(value)
            if key is not None:
                by_storage.setdefault(key, []).append(len(entries))
        else:
            entry["kind"] = "extra_state" if name.endswith("_extra_state") else "other"
            entry["value"] = repr(value)[:200]
            entry["type"] = _qualname(value)
        entries.append(entry)
    for members in by_storage.values():
        if len(members) > 1:
            for i in members:
                entries[i]["tied_with"] = [entries[j]["name"] for j in members if j != i]

    # Buffers registered with persistent=False never reach a checkpoint; list them so keys like
    # rotary_emb.inv_freq in an old checkpoint can be explained.
    for prefix, module in model.named_modules():
        for bname in getattr(module, "_non_persistent_buffers_set", ()):
            buf = module._buffers.get(bname)
            if buf is None:
                continue
            name = f"{prefix}.{bname}" if prefix else bname
            entries.append({"name": name, "kind": "buffer", "persistent": False, "shape": [int(s) for s in buf.shape],
                            "dtype": _dtype_name(buf.dtype), "requires_grad": False, "device": str(buf.device),
                            "module": _qualname(module)})

    return {
        "format": FORMAT,
        "version": VERSION,
        "producer": {"torch": torch.__version__, "python": sys.version.split()[0], "statelens_dump": VERSION},
        "model_class": _qualname(model),
        "modules": modules,
        "entries": entries,
    }


def dump(model, path):
    """Write the dump of `model` to `path` atomically (a temporary file beside it, then a rename)."""
    data = describe(model)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".sldump-", dir=directory)
    try:
        # mkstemp makes the file owner-only; a dump is an ordinary output file, so honour the umask.
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(prog="statelens_dump", description="Dump what a live model expects.")
    parser.add_argument("factory", help="module.path:callable returning the model (built on the meta device if "
                                        "--meta is given)")
    parser.add_argument("output", help="where to write the .sldump.json")
    parser.add_argument("--kwargs", default="{}", help="JSON keyword arguments for the factory")
    parser.add_argument("--meta", action="store_true", help="build the model on the meta device (no memory)")
    args = parser.parse_args(argv)
    module_name, _, attr = args.factory.partition(":")
    if not attr:
        parser.error("factory must look like package.module:callable")
    factory = getattr(importlib.import_module(module_name), attr)
    kwargs = json.loads(args.kwargs)
    if args.meta:
        if not hasattr(torch.device("meta"), "__enter__"):
            parser.error("--meta needs torch >= 2.0 (torch.device as a context manager)")
        with torch.device("meta"):
            model = factory(**kwargs)
    else:
        model = factory(**kwargs)
    dump(model, args.output)
    print(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
