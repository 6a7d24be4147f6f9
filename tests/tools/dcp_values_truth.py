#!/usr/bin/python3
"""The values of a torch 1.13 DCP checkpoint's tensors, assembled by torch itself: for each tensor,
FileSystemReader.read_metadata() gives its chunks and where each chunk's item lies (storage_data), each
item is loaded with torch.load, and the chunks are copied into the full tensor at their offsets.

Usage: /usr/bin/python3 dcp_values_truth.py DIR
Prints {"tensors": {FQN: {"sha256": hex of the contiguous elements, "min", "max", "numel"}}}.
"""

import dataclasses
import hashlib
import io
import json
import os
import sys

# torch 1.13's sharded_tensor/metadata.py declares a dataclass field whose default is a TensorProperties
# instance, which Python 3.11 refuses unless the class is hashable (as in make_dcp_fixtures.py).
_orig_dataclass = dataclasses.dataclass


def _patched_dataclass(cls=None, **kw):
    def wrap(c):
        return _orig_dataclass(**dict(kw, unsafe_hash=True))(c) if c.__name__ == "TensorProperties" else _orig_dataclass(**kw)(c)
    return wrap if cls is None else wrap(cls)


dataclasses.dataclass = _patched_dataclass
import torch  # noqa: E402
from torch.distributed._shard.checkpoint import FileSystemReader  # noqa: E402
from torch.distributed._shard.checkpoint.metadata import MetadataIndex, TensorStorageMetadata  # noqa: E402
dataclasses.dataclass = _orig_dataclass


def main(folder):
    md = FileSystemReader(folder).read_metadata()
    out = {}
    blobs = {}
    for fqn, item in md.state_dict_metadata.items():
        if not isinstance(item, TensorStorageMetadata):
            continue
        full = torch.zeros(item.size, dtype=item.properties.dtype)
        for chunk in item.chunks:
            info = md.storage_data[MetadataIndex(fqn, chunk.offsets)]
            path = os.path.join(folder, info.relative_path)
            if path not in blobs:
                with open(path, "rb") as f:
                    blobs[path] = f.read()
            piece = torch.load(io.BytesIO(blobs[path][info.offset:info.offset + info.length]))
            index = tuple(slice(o, o + s) for o, s in zip(chunk.offsets, chunk.sizes))
            full[index] = piece.view(chunk.sizes)
        flat = full.contiguous()
        # Raw element bytes whatever the dtype (numpy has no bfloat16): viewed as bytes of the same storage.
        raw = flat.view(-1).view(torch.uint8) if flat.numel() else torch.empty(0, dtype=torch.uint8)
        out[fqn] = {"sha256": hashlib.sha256(raw.numpy().tobytes()).hexdigest(), "numel": flat.numel(),
                    "min": flat.double().min().item() if flat.numel() else None,
                    "max": flat.double().max().item() if flat.numel() else None}
    json.dump({"torch": torch.__version__, "tensors": out}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
