"""Live dumps of real modules, and the truth to check StateLens's reading of them against.

Run by tst_live_dump with Debian's torch (/usr/bin/python3): make_dumps.py OUT_DIR
For each case writes OUT_DIR/<case>.sldump.json (statelens_dump.dump of the model) and
OUT_DIR/<case>.truth.json, computed here from the live model itself:
  {"keys": [{"name", "shape", "dtype", "kind", "requires_grad"}], "non_persistent": [names],
   "tied": {name: [names]}, "dtensor": {name: {...}}, "model_class": str}
torch 1.13 has no DTensor and no torch.compile: a DTensor is a small tensor subclass carrying the attributes
DTensor has (placements, device_mesh, _local_tensor), and the compiled wrapper is a module holding the
model as `_orig_mod`, which is all OptimizedModule does to state_dict keys.
"""
import json
import os
import pathlib
import subprocess
import sys

import torch
from torch import nn

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "resources" / "python"))
import statelens_dump  # noqa: E402

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.norm = nn.BatchNorm1d(8)


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(8, 16, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.register_buffer("inv_freq", torch.arange(4.0), persistent=False)
        self.embed.weight.requires_grad_(True)
        self.blocks[1].proj.bias.requires_grad_(False)  # frozen


class OptimizedModule(nn.Module):
    """torch.compile's wrapper as far as state_dict keys go: the model under `_orig_mod`."""

    def __init__(self, mod):
        super().__init__()
        self._orig_mod = mod


class WithExtraState(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def get_extra_state(self):
        return {"version": 3}

    def set_extra_state(self, state):
        pass


class Placement:
    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


class FakeMesh:
    shape = (2, 4)
    mesh_dim_names = ("dp", "tp")
    device_type = "cuda"


class FakeDTensor(torch.Tensor):
    """Just enough of DTensor for the dump: placements, device_mesh, _local_tensor."""

    @staticmethod
    def __new__(cls, local, global_shape):
        t = torch.Tensor._make_wrapper_subclass(cls, global_shape, dtype=local.dtype, requires_grad=False)
        t._local_tensor = local
        t.placements = (Placement("Shard(dim=0)"), Placement("Replicate()"))
        t.device_mesh = FakeMesh()
        return t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise NotImplementedError(func)


class Sharded(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("w", FakeDTensor(torch.zeros(4, 6), (8, 6)))
        self.bias = nn.Parameter(torch.zeros(6))


def truth(model):
    state = model.state_dict(keep_vars=True)
    params = {id(p) for p in model.parameters()}
    keys = []
    for name, v in state.items():
        if isinstance(v, torch.Tensor):
            kind = "parameter" if (isinstance(v, nn.Parameter) or id(v) in params) else "buffer"
            keys.append({"name": name, "shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", ""),
                         "kind": kind, "requires_grad": bool(v.requires_grad)})
        else:
            keys.append({"name": name, "kind": "extra_state" if name.endswith("_extra_state") else "other"})
    non_persistent = []
    for prefix, m in model.named_modules():
        for b in m._non_persistent_buffers_set:
            non_persistent.append(f"{prefix}.{b}" if prefix else b)
    by_id = {}
    for name, v in state.items():
        if isinstance(v, torch.Tensor) and v.device.type != "meta":
            by_id.setdefault(id(v), []).append(name)
    tied = {n: [o for o in names if o != n] for names in by_id.values() if len(names) > 1 for n in names}
    dtensor = {}
    for name, v in state.items():
        if hasattr(v, "placements"):
            dtensor[name] = {"placements": [repr(p) for p in v.placements], "mesh_shape": list(v.device_mesh.shape),
                             "local_shape": list(v._local_tensor.shape)}
    return {"keys": keys, "non_persistent": non_persistent, "tied": tied, "dtensor": dtensor,
            "model_class": f"{type(model).__module__}.{type(model).__qualname__}"}


def main(out):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cases = {
        "plain": TinyLM(),
        "data_parallel": nn.DataParallel(TinyLM()),  # CPU-only DataParallel just wraps: keys gain "module."
        "compiled": OptimizedModule(TinyLM()),
        "compiled_ddp": OptimizedModule(nn.DataParallel(TinyLM())),
        "extra_state": WithExtraState(),
        "dtensor": Sharded(),
    }
    for name, model in cases.items():
        statelens_dump.dump(model, str(out / f"{name}.sldump.json"))
        (out / f"{name}.truth.json").write_text(json.dumps(truth(model), indent=1))
    # The command-line form: python -m statelens_dump module:factory out.json
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parents[2] / "resources" / "python")]))
    subprocess.run([sys.executable, "-m", "statelens_dump", "make_dumps:TinyLM", str(out / "cli.sldump.json")],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    cli = truth(TinyLM())
    cli["model_class"] = "make_dumps.TinyLM"  # the factory was imported as a module there, not run as __main__
    (out / "cli.truth.json").write_text(json.dumps(cli, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
