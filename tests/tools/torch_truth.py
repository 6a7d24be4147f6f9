#!/usr/bin/python3
"""Ground truth from real torch for the tensors of torch.save files, without ever running their pickles.

Usage: /usr/bin/python3 torch_truth.py FILE...      (or the file names one per line on stdin with `-`)

Prints one JSON object: {"torch": "<version>", "files": {FILE: RESULT}} where RESULT is
  {"status": "ok", "method": "weights_only" | "restricted", "tensors": [LEAF...]}
  {"status": "skipped" | "error", "reason": "..."}
and LEAF is {"path", "shape", "dtype", "stride", "storage_offset", "kind"}: one per tensor reachable from
the top object, `path` being the dotted key path ("state_dict.conv1.weight", list/tuple items by index,
"" for a bare tensor). Pickled nn.Modules are flattened the way Module.state_dict() names them.

SAFETY. These files are untrusted third-party pickles. Nothing here calls torch.load with
weights_only=False or unpickles with a permissive Unpickler:
  1. torch.load(weights_only=True): torch's own allowlisting unpickler. TorchScript archives are never
     handed to torch.load at all (torch 1.13 would forward them to torch.jit.load).
  2. When torch refuses a file (quantized tensors, tensor subclasses, pickled modules, numpy objects, ...),
     RestrictedUnpickler reads it: find_class imports nothing and returns inert stand-ins; only
     torch._utils._rebuild_* (and torch._tensor._rebuild_from_type*) and collections.OrderedDict are
     reimplemented, as pure-Python stubs that record their arguments. Storages are never read either:
     only the metadata in the pickle is used. Such results ("method": "restricted") are torch's rebuild
     arguments as Python's own pickle machine decodes them, not the output of torch.load; that is also
     how the hand-built pre-0.1.10 tar layout is read, which torch 1.13 itself cannot load.
"""

import io
import json
import pickle
import sys
import tarfile
import zipfile

# dtype of each legacy typed storage class, named as torch names dtypes (without "torch.").
STORAGE_DTYPES = {
    "BoolStorage": "bool", "ByteStorage": "uint8", "CharStorage": "int8", "ShortStorage": "int16",
    "IntStorage": "int32", "LongStorage": "int64", "HalfStorage": "float16", "BFloat16Storage": "bfloat16",
    "FloatStorage": "float32", "DoubleStorage": "float64", "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128", "QInt8Storage": "qint8", "QUInt8Storage": "quint8",
    "QInt32Storage": "qint32", "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4",
    "UntypedStorage": "uint8", "ByteStorageBase": "uint8",
}


# ----------------------------------------------------------------------------------------------------
# Inert stand-ins. None of them runs code from the file: they only remember what they were given.

class Inert:
    """Any class or function the pickle names that is not reimplemented below."""
    qualname = "object"

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, *args, **kwargs):
        self.__dict__["_args"] = args
        self.__dict__["_state"] = None
        self.__dict__["_items"] = []
        self.__dict__["_list"] = []

    def __setstate__(self, state):
        self.__dict__["_state"] = state

    def __setitem__(self, key, value):
        self.__dict__.setdefault("_items", []).append((key, value))

    def append(self, value):
        self.__dict__.setdefault("_list", []).append(value)

    def extend(self, values):
        self.__dict__.setdefault("_list", []).extend(values)

    def __call__(self, *args, **kwargs):
        return inert_class(self.qualname + "()")(*args)


_inert_classes = {}


def inert_class(qualname):
    cls = _inert_classes.get(qualname)
    if cls is None:
        cls = type("Inert_" + str(len(_inert_classes)), (Inert,), {"qualname": qualname})
        _inert_classes[qualname] = cls
    return cls


class Named:
    """A non-callable global such as torch.float32, torch.per_tensor_affine or torch.FloatStorage."""

    def __init__(self, module, name):
        self.module = module
        self.name = name

    def __call__(self, *args, **kwargs):
        return inert_class(self.module + "." + self.name)(*args)


class OrderedDictStub(dict):
    """collections.OrderedDict: a plain dict keeps insertion order; BUILD may set `_metadata`."""

    def __setstate__(self, state):
        if isinstance(state, dict):
            self.__dict__.update(state)


class StorageStub:
    def __init__(self, dtype, key, numel):
        self.dtype = dtype
        self.key = key
        self.numel = numel


class TensorRecord:
    def __init__(self, kind, dtype, size, stride, storage_offset):
        self.kind = kind
        self.dtype = dtype
        self.size = [int(s) for s in size] if isinstance(size, (list, tuple)) else None
        self.stride = [int(s) for s in stride] if isinstance(stride, (list, tuple)) else None
        self.storage_offset = int(storage_offset) if isinstance(storage_offset, int) else 0
        self.subclass = None

    def __setstate__(self, state):
        pass  # Parameter / subclass state: not part of what is compared


def _dtype_of(x):
    if isinstance(x, StorageStub):
        return x.dtype
    if isinstance(x, tuple) and len(x) >= 2 and x[0] == "storage":  # tar layout: the id tuple inline
        return STORAGE_DTYPES.get(getattr(x[1], "name", ""), None)
    if isinstance(x, Named) and x.module == "torch":
        return x.name
    return None


def _rebuild_tensor(storage, storage_offset, size, stride, *rest):
    return TensorRecord("tensor", _dtype_of(storage), size, stride, storage_offset)


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype, *rest):
    return TensorRecord("tensor", _dtype_of(dtype) or _dtype_of(storage), size, stride, storage_offset)


def _rebuild_parameter(data, *rest):
    if isinstance(data, TensorRecord) and data.kind == "tensor":
        data.kind = "parameter"
    return data


def _rebuild_qtensor(storage, storage_offset, size, stride, *rest):
    return TensorRecord("qtensor", _dtype_of(storage), size, stride, storage_offset)


def _rebuild_wrapper_subclass(cls, dtype, size, stride, storage_offset, *rest):
    t = TensorRecord("subclass", _dtype_of(dtype), size, stride, storage_offset)
    t.subclass = getattr(cls, "qualname", None)
    return t


def _rebuild_meta_tensor_no_storage(dtype, size, stride, *rest):
    return TensorRecord("meta", _dtype_of(dtype), size, stride, 0)


def _rebuild_unknown(*args):
    return TensorRecord("unknown", None, None, None, 0)


def _rebuild_from_type_v2(func, new_type, args, state):
    # Calls only what find_class handed out: our own stubs, or an Inert stand-in.
    result = func(*args) if isinstance(func, (type(_rebuild_tensor), Named)) or \
        (isinstance(func, type) and issubclass(func, Inert)) else None
    if isinstance(result, TensorRecord):
        if result.kind in ("tensor", "parameter"):
            result.kind = "subclass"
        result.subclass = getattr(new_type, "qualname", None) or getattr(new_type, "name", None)
    return result


def _rebuild_from_type(func, new_type, args, dict_):
    return _rebuild_from_type_v2(func, new_type, args, dict_)


REBUILDS = {
    "_rebuild_tensor": _rebuild_tensor,
    "_rebuild_tensor_v2": _rebuild_tensor,
    "_rebuild_tensor_v3": _rebuild_tensor_v3,
    "_rebuild_parameter": _rebuild_parameter,
    "_rebuild_parameter_with_state": _rebuild_parameter,
    "_rebuild_qtensor": _rebuild_qtensor,
    "_rebuild_wrapper_subclass": _rebuild_wrapper_subclass,
    "_rebuild_meta_tensor_no_storage": _rebuild_meta_tensor_no_storage,
}


class RestrictedUnpickler(pickle.Unpickler):
    """Imports nothing. See the module docstring."""

    def __init__(self, file, legacy_storages=None):
        super().__init__(file, encoding="latin1")
        self.legacy_storages = legacy_storages

    def find_class(self, module, name):
        if module in ("collections", "__builtin__", "builtins") and name == "OrderedDict":
            return OrderedDictStub
        if module == "torch._utils" and name.startswith("_rebuild_"):
            return REBUILDS.get(name, _rebuild_unknown)
        if module == "torch._tensor" and name == "_rebuild_from_type_v2":
            return _rebuild_from_type_v2
        if module == "torch._tensor" and name == "_rebuild_from_type":
            return _rebuild_from_type
        if module == "torch" and (name in STORAGE_DTYPES or name[:1].islower()):
            return Named(module, name)  # storage classes, dtypes, qschemes, torch.device, torch.Size
        return inert_class(module + "." + name)

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or not pid or pid[0] != "storage":
            return inert_class("persistent")()
        storage_type = pid[1]
        dtype = STORAGE_DTYPES.get(getattr(storage_type, "name", ""), None)
        return StorageStub(dtype, str(pid[2]), pid[4] if len(pid) > 4 else None)


def restricted_load_zip(path):
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        pkl = [n for n in names if n.endswith("/data.pkl") or n == "data.pkl"]
        if not pkl:
            raise ValueError("no data.pkl record")
        data = z.read(pkl[0])
    return RestrictedUnpickler(io.BytesIO(data)).load()


def restricted_load_tar(path):
    # Pre-0.1.10 layout: members sys_info, pickle, storages (and tensors); only `pickle` is needed.
    with tarfile.open(path, mode="r:") as tar:
        member = tar.extractfile("pickle")
        if member is None:
            raise ValueError("no pickle member")
        data = member.read()
    return RestrictedUnpickler(io.BytesIO(data)).load()


def restricted_load_legacy(path):
    with open(path, "rb") as f:
        data = f.read()
    stream = io.BytesIO(data)
    magic = RestrictedUnpickler(stream).load()
    if magic != 0x1950A86A20F9469CFC6C:
        raise ValueError("not a legacy torch.save stream")
    RestrictedUnpickler(stream).load()  # protocol version
    RestrictedUnpickler(stream).load()  # sys_info
    return RestrictedUnpickler(stream).load()


# ----------------------------------------------------------------------------------------------------
# Walking what was loaded.

def join(prefix, key):
    return key if not prefix else prefix + "." + key


def key_str(k):
    if isinstance(k, bytes):
        return k.decode("latin1")
    return str(k)


def leaf_from_torch(t, path):
    import torch
    kind = "parameter" if isinstance(t, torch.nn.Parameter) else "tensor"
    if t.is_quantized:
        kind = "qtensor"
    return {
        "path": path, "kind": kind, "dtype": str(t.dtype).replace("torch.", ""),
        "shape": list(t.shape), "stride": list(t.stride()), "storage_offset": int(t.storage_offset()),
    }


def leaf_from_record(r, path):
    return {
        "path": path, "kind": r.kind, "dtype": r.dtype, "shape": r.size, "stride": r.stride,
        "storage_offset": r.storage_offset, "subclass": r.subclass,
    }


def inert_state(obj):
    """(attribute dict, slots dict) of an Inert object's BUILD state."""
    st = obj.__dict__.get("_state")
    if isinstance(st, dict):
        return st, None
    if isinstance(st, tuple) and len(st) == 2:
        a = st[0] if isinstance(st[0], dict) else None
        b = st[1] if isinstance(st[1], dict) else None
        return a, b
    return None, None


def is_module(obj):
    attrs, _ = inert_state(obj) if isinstance(obj, Inert) else (None, None)
    return attrs is not None and "_parameters" in attrs and "_modules" in attrs


def set_items(v):
    if isinstance(v, (set, frozenset, list, tuple)):
        return set(v)
    if isinstance(v, Inert):  # builtins.set stand-in: REDUCE(set, ([names],))
        args = v.__dict__.get("_args") or ()
        if args and isinstance(args[0], (list, tuple, set)):
            return set(args[0])
    return set()


class Walker:
    def __init__(self):
        self.out = []
        self.on_path = set()

    def walk(self, v, path, depth=0):
        import torch
        if depth > 64:
            return
        if isinstance(v, torch.Tensor):
            self.out.append(leaf_from_torch(v, path))
            return
        if isinstance(v, TensorRecord):
            self.out.append(leaf_from_record(v, path))
            return
        if id(v) in self.on_path:
            return
        self.on_path.add(id(v))
        try:
            if isinstance(v, dict):
                for k, item in v.items():
                    self.walk(item, join(path, key_str(k)), depth + 1)
            elif isinstance(v, (list, tuple)):
                for i, item in enumerate(v):
                    self.walk(item, join(path, str(i)), depth + 1)
            elif is_module(v):
                self.module(v, path, depth)
            elif isinstance(v, Inert):
                attrs, slots = inert_state(v)
                for d in (attrs, slots):
                    for k, item in (d or {}).items():
                        self.walk(item, join(path, key_str(k)), depth + 1)
                for k, item in v.__dict__.get("_items", []):
                    self.walk(item, join(path, key_str(k)), depth + 1)
                for i, item in enumerate(v.__dict__.get("_list", [])):
                    self.walk(item, join(path, str(i)), depth + 1)
        finally:
            self.on_path.discard(id(v))

    def module(self, m, prefix, depth):
        # nn.Module.state_dict(): parameters, persistent buffers, then submodules.
        attrs, _ = inert_state(m)
        non_persistent = set_items(attrs.get("_non_persistent_buffers_set"))
        for k, v in (attrs.get("_parameters") or {}).items():
            if v is not None:
                self.walk(v, join(prefix, key_str(k)), depth + 1)
        for k, v in (attrs.get("_buffers") or {}).items():
            if v is not None and k not in non_persistent:
                self.walk(v, join(prefix, key_str(k)), depth + 1)
        for k, v in (attrs.get("_modules") or {}).items():
            if is_module(v) and id(v) not in self.on_path:
                self.on_path.add(id(v))
                self.module(v, join(prefix, key_str(k)), depth + 1)
                self.on_path.discard(id(v))


def leaves(obj):
    w = Walker()
    w.walk(obj, "")
    return w.out


# ----------------------------------------------------------------------------------------------------

def classify(path):
    """'zip', 'legacy', 'tar', or a reason to skip the file."""
    with open(path, "rb") as f:
        head = f.read(512)
    if head[:4] == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
        except zipfile.BadZipFile as e:
            return "skip: not a readable zip (%s)" % e
        for n in names:
            base = n.split("/", 1)[-1]
            if base in ("constants.pkl", "bytecode.pkl", "model.json", "attributes.pkl") \
                    or base.startswith("code/"):
                return "skip: TorchScript archive (never handed to torch.load)"
        if not any(n.endswith("data.pkl") for n in names):
            return "skip: zip without data.pkl"
        return "zip"
    if len(head) >= 262 and head[257:262] == b"ustar":
        return "tar"
    # Legacy streams start with the pickled magic number (any pickle protocol); checked again on load.
    return "legacy"


def truth_for(path):
    import torch
    kind = classify(path)
    if kind.startswith("skip"):
        return {"status": "skipped", "reason": kind[6:]}
    refused = None
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
        return {"status": "ok", "method": "weights_only", "tensors": leaves(obj)}
    except Exception as e:  # torch refused: fall back to the restricted reader
        msg = str(e).splitlines()[0] if str(e) else ""
        msg = msg.split("WeightsUnpickler error: ")[-1]  # drop torch's long preamble
        refused = "%s: %s" % (type(e).__name__, msg)
    try:
        if kind == "zip":
            obj = restricted_load_zip(path)
        elif kind == "legacy":
            obj = restricted_load_legacy(path)
        else:
            obj = restricted_load_tar(path)
        return {"status": "ok", "method": "restricted", "weights_only_refused": refused, "tensors": leaves(obj)}
    except Exception as e:
        return {"status": "error", "reason": "weights_only refused (%s); restricted reader failed: %s: %s"
                % (refused, type(e).__name__, e)}


def main(argv):
    import warnings
    warnings.simplefilter("ignore")
    import torch
    paths = argv[1:]
    if paths == ["-"]:
        paths = [line.rstrip("\n") for line in sys.stdin if line.strip()]
    files = {}
    for p in paths:
        try:
            files[p] = truth_for(p)
        except Exception as e:
            files[p] = {"status": "error", "reason": "%s: %s" % (type(e).__name__, e)}
    json.dump({"torch": torch.__version__, "files": files}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
