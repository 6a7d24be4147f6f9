#!/usr/bin/python3
"""What torch.jit.load says about TorchScript archives, for tst_torchscript (run with /usr/bin/python3).

Reads one path per line on stdin; prints {"torch": version, "files": {path: RESULT}} where RESULT is
{"loads": true, "class": qualified class name, "state_dict": [{"name", "dtype", "shape", "requires_grad",
"role"}], "named_parameters": [...], "named_buffers": [...]} or {"loads": false, "error": first line}.
"role" is "parameter" or "buffer", from the owning module's _parameters / _buffers (what state_dict() walks).
"""

import json
import sys
import warnings

import torch

warnings.filterwarnings("ignore")


def roles(module, prefix=""):
    out = {}
    for k, v in module._parameters.items():
        if v is not None:
            out[prefix + k] = "parameter"
    for k, v in module._buffers.items():
        if v is not None:
            out[prefix + k] = "buffer"
    for k, child in module._modules.items():
        if child is not None:
            out.update(roles(child, prefix + k + "."))
    return out


def describe(path):
    try:
        m = torch.jit.load(path, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - the error is the answer
        return {"loads": False, "error": (str(e).strip().splitlines() or [type(e).__name__])[0]}
    role = roles(m)
    return {
        "loads": True,
        "class": m._c._type().qualified_name(),
        "state_dict": [
            {"name": k, "dtype": str(v.dtype).replace("torch.", ""), "shape": list(v.shape),
             "requires_grad": bool(v.requires_grad), "role": role.get(k, "?")}
            for k, v in m.state_dict(keep_vars=True).items()
        ],
        "named_parameters": [k for k, _ in m.named_parameters()],
        "named_buffers": [k for k, _ in m.named_buffers()],
    }


def main():
    files = [line.strip() for line in sys.stdin if line.strip()]
    json.dump({"torch": torch.__version__, "files": {f: describe(f) for f in files}}, sys.stdout)


if __name__ == "__main__":
    main()
