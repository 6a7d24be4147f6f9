"""load_state_dict error texts from real torch, with what they say.

Run by tst_load_error with Debian's torch (/usr/bin/python3): make_errors.py OUT_DIR
Writes OUT_DIR/<case>.txt (the text as a user would paste it) and OUT_DIR/<case>.truth.json:
  {"model": {key: shape|null}, "checkpoint": {key: shape|null}, "model_class": str}
where "model" holds the keys the model side must have (missing + size-mismatched, with the model's shape)
and "checkpoint" those of the checkpoint side (unexpected + size-mismatched, with the checkpoint's shape).
"""
import json
import pathlib
import sys
import traceback

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, width=3):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(2, width), nn.ReLU(), nn.Linear(width, 2))
        self.norm = nn.LayerNorm(2)


class OptimizedModule(nn.Module):
    """torch.compile's wrapper as far as the message goes: its class name and _orig_mod. keys."""

    def __init__(self, mod):
        super().__init__()
        self._orig_mod = mod


def error_of(model, state):
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        return e
    raise AssertionError("load_state_dict did not fail")


def truth_of(model, state):
    msd = model.state_dict()
    out = {"model": {}, "checkpoint": {}, "model_class": type(model).__name__}
    for k in msd:
        if k not in state:
            out["model"][k] = None
    for k in state:
        if k not in msd:
            out["checkpoint"][k] = None
        elif tuple(state[k].shape) != tuple(msd[k].shape):
            out["model"][k] = list(msd[k].shape)
            out["checkpoint"][k] = list(state[k].shape)
    return out


def main(out):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)

    def case(name, model, state, render):
        err = error_of(model, state)
        (out / f"{name}.txt").write_text(render(err))
        (out / f"{name}.truth.json").write_text(json.dumps(truth_of(model, state), indent=1))

    wide = Net(width=5).state_dict()
    state = dict(wide)
    state["extra.bias"] = torch.zeros(1)
    del state["norm.weight"]
    plain = lambda e: str(e)
    traceback_text = lambda e: "".join(traceback.format_exception(type(e), e, e.__traceback__))
    case("plain", Net(), state, plain)
    case("traceback", Net(), state, traceback_text)
    case("tabs_to_spaces", Net(), state, lambda e: "RuntimeError: " + str(e).replace("\t", "    "))
    case("crlf", Net(), state, lambda e: ("RuntimeError: " + str(e)).replace("\n", "\r\n"))

    compiled_state = {"_orig_mod." + k: v for k, v in Net().state_dict().items()}  # keys from a compiled model
    case("compiled_model", OptimizedModule(Net()), Net().state_dict(), plain)
    case("compiled_checkpoint", Net(), compiled_state, traceback_text)

    # Copies of the message in other tools: lower-case heads (Lightning), single quotes.
    case("lowercase_single_quotes", Net(), state,
         lambda e: str(e).replace("Missing key(s)", "missing key(s)").replace("Unexpected key(s)", "unexpected key(s)")
         .replace('"', "'"))
    # Buried in a longer log.
    case("in_log", Net(), state,
         lambda e: "epoch 3 done\n[rank0]: loading checkpoint\n" + traceback_text(e) + "\nexiting with code 1\n")

    # The rarer clause: an exception while copying (shapes compatible in numel but copy_ failed).
    (out / "while_copying.txt").write_text(
        'Error(s) in loading state_dict for Net:\n\tWhile copying the parameter named "body.0.weight", whose '
        'dimensions in the model are torch.Size([3, 2]) and whose dimensions in the checkpoint are '
        'torch.Size([3, 2]), an exception occurred : (\'Inplace update to inference tensor\',).')
    (out / "while_copying.truth.json").write_text(json.dumps(
        {"model": {"body.0.weight": [3, 2]}, "checkpoint": {"body.0.weight": [3, 2]}, "model_class": "Net"}))


if __name__ == "__main__":
    main(sys.argv[1])
