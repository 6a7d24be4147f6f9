"""Ground truth for the differential fuzzer: which imports CPython's C unpickler asks for.

Run as a subprocess (class CPython in difffuzz.py). It reads one pickle per line (hex) on stdin and writes
one JSON line per pickle: {"calls": [...], "error": str or null}. Each call is a find_class the C
_pickle.Unpickler made before it stopped: {"module", "name"} as torch.load would import them (torch's
torch.tensor rename, then pickle's fix_imports mapping for protocol < 3), the raw strings from the pickle,
and the nesting depth (0: the file's own pickle; 1+: a pickle passed to pickle.loads).

The pickle is read from an io.BytesIO, which is how torch.load reads archive/data.pkl: a FRAME's end
matters there. Nothing is imported or run: find_class returns stub classes that accept any call.
The list is an over-approximation of torch.load's imports: a stub never fails where the real import,
attribute or persistent id would have stopped the load.
"""
import _compat_pickle
import io
import json
import pickle
import resource
import sys

MAX_DEPTH = 4
LOADERS = {("pickle", "loads"), ("_pickle", "loads"), ("pickle", "_loads")}


def cpython_name(module, name, fix_imports):
    """The (module, name) that find_class imports for a GLOBAL of (module, name)."""
    if module == "torch.tensor":  # torch.load's UnpicklerWrapper, before super().find_class
        module = "torch._tensor"
    if fix_imports:
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
    return module, name


class _Imported(Exception):
    def __init__(self, name):
        self.name = name


def _fake_import(name, *a, **k):
    raise _Imported(name)


# The C unpickler does not expose the protocol it has read, which decides whether fix_imports applies.
# _probe calls the C find_class on '__builtin__': it imports 'builtins' when the mapping applies. It runs
# in globals whose __builtins__ has a fake __import__ (PyImport_Import takes __import__ from the calling
# frame's globals), so the probe imports nothing.
_fake_builtins = dict(vars(__builtins__) if hasattr(__builtins__, "__dict__") else __builtins__)
_fake_builtins["__import__"] = _fake_import
_probe_globals = {"__builtins__": _fake_builtins, "pickle": pickle, "_Imported": _Imported}
exec(
    "def _probe(self):\n"
    "    try:\n"
    "        pickle.Unpickler.find_class(self, '__builtin__', 'zz')\n"
    "    except _Imported as e:\n"
    "        return e.name\n"
    "    except BaseException:\n"
    "        return None\n"
    "    return None\n",
    _probe_globals,
)
_probe = _probe_globals["_probe"]


class StubMeta(type):
    """Stub classes: any attribute is another stub, and calling one records nothing but nests loads."""

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return make_stub(cls._path + "." + name)

    def __call__(cls, *a, **k):
        if cls._path == "_codecs.encode" and a and isinstance(a[0], str):
            # protocol < 3 carries bytes this way; a real result lets a nested pickle reach pickle.loads
            import codecs
            try:
                return codecs.encode(a[0], *(x for x in a[1:2] if isinstance(x, str)))
            except Exception:
                pass
        if cls._loader and a and isinstance(a[0], (bytes, bytearray)) and Recorder.depth < MAX_DEPTH:
            Recorder.depth += 1
            try:
                run_one(bytes(a[0]), nested=True)
            except BaseException:
                pass
            finally:
                Recorder.depth -= 1
        return make_stub(cls._path + "()")

    def __repr__(cls):
        return "<stub " + cls._path + ">"


def _inst_getattr(self, name):
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    return make_stub("inst." + name)


def make_stub(path, loader=False):
    return StubMeta("Stub", (), {
        "_path": path,
        "_loader": loader,
        "__new__": staticmethod(lambda c, *a, **k: object.__new__(c)),
        "__init__": lambda self, *a, **k: None,
        "__setstate__": lambda *a, **k: None,
        "__getattr__": _inst_getattr,
        "__call__": lambda self, *a, **k: make_stub("call"),
        "__setitem__": lambda self, *a: None,
        "append": lambda self, *a: None,
        "extend": lambda self, *a: None,
        "add": lambda self, *a: None,
    })


class Recorder(pickle.Unpickler):
    calls = []
    depth = 0

    def find_class(self, module, name):
        fix = _probe(self) == "builtins"
        # Nested pickles get torch's rename too, though pickle.loads has none: there it would fail to import
        # torch.tensor (a function), and the scan names torch._tensor alike.
        m, n = cpython_name(module, name, fix)
        Recorder.calls.append({"module": m, "name": n, "raw": [module, name], "depth": Recorder.depth})
        return make_stub(m + "." + n, loader=(m, n) in LOADERS)

    def persistent_load(self, pid):
        return make_stub("persid")


class AllAtOnce(io.BytesIO):
    """read(n) hands over everything left, so the C unpickler holds the whole pickle in its buffer, as
    pickle.loads does: FRAME ends then change nothing."""

    def read(self, n=-1):
        return super().read(-1)


def run_one(data, nested=False):
    if nested:
        Recorder(AllAtOnce(data)).load()  # pickle.loads' defaults
    else:
        Recorder(io.BytesIO(data), encoding="utf-8").load()  # torch.load's encoding


def main():
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    sys.setrecursionlimit(3000)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        Recorder.calls = []
        Recorder.depth = 0
        err = None
        try:
            run_one(bytes.fromhex(line))
        except BaseException as e:  # any way the unpickler stops
            err = type(e).__name__ + ": " + str(e)[:200]
        sys.stdout.write(json.dumps({"calls": Recorder.calls, "error": err}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
