#!/usr/bin/python3
"""Writes DIR/packed.safetensors, a GPTQ and an AWQ 4-bit layer large enough that StateLens reads them in
several bands of output rows, and prints the truth as JSON: per layer, statistics of the values that
AutoGPTQ's and AutoAWQ's dequantization recipes give (written with torch ops, as in
tests/fixtures/make_values_fixtures.py) and the sha256 of those values as float64 in logical order.

    /usr/bin/python3 tests/tools/packed_values_truth.py DIR

The words are random (every nibble pattern occurs), so this checks unpacking and indexing, not meaning; the
small fixtures in tests/fixtures/values check meaning against float weights.
"""

import hashlib
import json
import struct
import sys

import numpy as np
import torch

O, I, GROUP = 2048, 8192, 128  # StateLens bands 512 output rows at a time for this input width: 4 bands
G = I // GROUP
AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]


def words(rng, shape):
    return rng.integers(0, 2 ** 32, size=shape, dtype=np.uint64).astype(np.uint32).view(np.int32)


def gptq(qweight, qzeros, scales):
    wf = torch.tensor(list(range(0, 32, 4)), dtype=torch.int32).unsqueeze(0)
    z = torch.bitwise_right_shift(torch.unsqueeze(qzeros, 2).expand(-1, -1, 8), wf.unsqueeze(0)).to(torch.int8)
    z = (torch.bitwise_and(z, 15) + 1).reshape(G, -1)
    w = torch.bitwise_right_shift(torch.unsqueeze(qweight, 1).expand(-1, 8, -1), wf.unsqueeze(-1)).to(torch.int8)
    w = torch.bitwise_and(w, 15).reshape(-1, w.shape[2])
    g = torch.arange(I) // GROUP
    return (scales[g] * (w - z[g])).t()


def awq(qweight, qzeros, scales):
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    iw = torch.bitwise_right_shift(qweight[:, :, None], shifts[None, None, :]).to(torch.int8).view(I, -1)
    iz = torch.bitwise_right_shift(qzeros[:, :, None], shifts[None, None, :]).to(torch.int8).view(G, -1)
    rev = torch.arange(iw.shape[-1]).view(-1, 8)[:, AWQ_REVERSE_ORDER].reshape(-1)
    iw = torch.bitwise_and(iw[:, rev], 15)
    iz = torch.bitwise_and(iz[:, rev], 15)
    return ((iw - iz.repeat_interleave(GROUP, 0)) * scales.repeat_interleave(GROUP, 0)).t()


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(7)
    layers = {
        "gptq": (words(rng, (I // 8, O)), words(rng, (G, O // 8)), (rng.random((G, O)) * 0.01).astype(np.float16)),
        "awq": (words(rng, (I, O // 8)), words(rng, (G, O // 8)), (rng.random((G, O)) * 0.01).astype(np.float16)),
    }
    items, truth = [], {}
    for name, (qw, qz, sc) in layers.items():
        items += [(name + ".qweight", "I32", qw), (name + ".qzeros", "I32", qz), (name + ".scales", "F16", sc)]
        t = [torch.from_numpy(a.copy()) for a in (qw, qz, sc)]
        d = (gptq if name == "gptq" else awq)(*t).contiguous().double().reshape(-1)
        truth[name + ".weight"] = {"min": d.min().item(), "max": d.max().item(), "mean": d.mean().item(),
                                   "std": d.std().item(), "zeros": int((d == 0).sum()), "numel": d.numel(),
                                   "sha256_values_f64": hashlib.sha256(d.numpy().tobytes()).hexdigest()}
    header, off = {}, 0
    for name, dt, a in items:
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(out + "/packed.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for _, _, a in items:
            f.write(a.tobytes())
    print(json.dumps({"tensors": truth}))


if __name__ == "__main__":
    main()
