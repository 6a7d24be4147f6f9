"""Pickles made by CPython's own pickle module, with the value each must decode to.

Prints one JSON object per line: {"name", "protocol", "hex", "expected"}. `expected` is a canonical,
type-tagged form of the value (see canon()); the C++ suite turns what StateLens's VM builds into the
same form and compares. Run with any Python 3; no torch needed.
"""
import collections
import json
import pickle
import struct
import sys


class Point:
    """A plain object: NEWOBJ (or copyreg._reconstructor at protocol 0/1) plus BUILD of its __dict__."""

    def __init__(self, x, y):
        self.x = x
        self.y = y


class Reduced:
    """An object that pickles through __reduce__ with arguments and a state."""

    def __reduce__(self):
        return (Reduced, (1, "two"), {"state": [3.5]})


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self):
        self.a = 1
        self.b = None


def canon(v, path=()):
    if any(v is p for p in path):
        return {"cycle": True}
    path = path + (v,)
    if v is None:
        return None
    if isinstance(v, bool):
        return {"bool": v}
    if isinstance(v, int):
        return {"int": str(v)}
    if isinstance(v, float):
        return {"float": struct.pack(">d", v).hex()}  # exact bits: -0.0 and inf included
    if isinstance(v, str):
        return {"str": v}
    if isinstance(v, (bytes, bytearray)):
        return {"bytes": bytes(v).hex()}
    if isinstance(v, tuple):
        return {"tuple": [canon(x, path) for x in v]}
    if isinstance(v, list):
        return {"list": [canon(x, path) for x in v]}
    if isinstance(v, (set, frozenset)):
        return {"set": [canon(x, path) for x in v]}
    if isinstance(v, dict):
        return {"dict": [[canon(k, path), canon(x, path)] for k, x in v.items()]}
    if isinstance(v, Point):
        return {"object": "__main__.Point", "state": canon(v.__dict__, path)}
    if isinstance(v, Reduced):
        return {"object": "__main__.Reduced", "args": canon((1, "two")), "state": canon({"state": [3.5]})}
    if isinstance(v, Slotted):
        return {"object": "__main__.Slotted", "slots": canon({"a": 1, "b": None})}
    raise TypeError(type(v))


def cases():
    cyclic = []
    cyclic.append(cyclic)
    shared = [1, 2]
    yield "scalars", [None, True, False, 0, 1, -1, 255, 256, 65535, 65536, -129, 2**31 - 1, -2**31, 2**63 - 1, -2**63]
    yield "big_ints", [2**64, -2**64 - 1, 2**200, 0x1950a86a20f9469cfc6c]
    yield "floats", [0.0, -0.0, 1.5, 1e300, -2.5e-300, float("inf"), 0.1]
    yield "strings", ["", "a", "héllo", "日本語", "\n\t\\'\"", "x" * 300]
    yield "bytes", [b"", b"\x00\xff", bytes(range(256)), bytearray(b"ab")]
    yield "containers", {"t0": (), "t1": (1,), "t2": (1, 2), "t3": (1, 2, 3), "t4": (1, 2, 3, 4), "l": [1, [2, [3]]], "d": {1: "a", "b": 2.0}}
    yield "ordered_dict", collections.OrderedDict([("w", 1), ("b", (2, 3))])
    yield "sets", [set(), {1}, frozenset({"x"})]
    yield "shared", [shared, shared]
    yield "cycle", cyclic
    yield "objects", [Point(1, "a"), Reduced(), Slotted()]
    yield "many_items", list(range(2500))
    yield "long_dict", {f"k{i}": i for i in range(1200)}
    # Lists that grow batch by batch (APPENDS of 1000, or APPEND one by one at protocol 0) leave their old
    # blocks to the arena, which hands them to the values that follow: every item must survive that.
    yield "growth_reused", [[(i * 2500 + j) * 1000003 + 2**40 for j in range(2500)] + [f"s{i}"] for i in range(8)]


def su(text):
    b = text.encode()
    return b"\x8c" + bytes([len(b)]) + b


def memo_pickles():
    """Hand-written pickles whose MEMOIZE slots depend on how len(memo) counts: a PUT over a stored slot,
    and a slot stored far past the others (a sparse slot) that MEMOIZE later reaches. CPython decides what
    they decode to. Each returns the list of what GET fetches afterwards."""
    def memoize(text):
        return su(text) + b"\x94" + b"0"  # MEMOIZE, POP

    # PUT 0, PUT 0 again (len(memo) stays 1), then MEMOIZE: slots 1, 2, 3.
    overwrite = (b"\x80\x04" + su("a") + b"q\x00" + b"0" + su("b") + b"q\x00" + b"0"
                 + memoize("one") + memoize("two") + memoize("three")
                 + b"(" + b"h\x00h\x01h\x02h\x03" + b"l.")
    yield "memo_overwrite", overwrite
    # LONG_BINPUT far past the dense slots (the VMs keep such slots apart), then enough MEMOIZEs to reach it:
    # MEMOIZE overwrites it, and len(memo) stops growing there.
    for far in (5000, 70000):
        body = b"\x80\x04" + su("far") + b"r" + struct.pack("<I", far) + b"0"
        body += b"".join(b"K" + bytes([i % 200]) + b"\x94" + b"0" for i in range(far - 1))
        body += memoize("reached") + memoize("again") + memoize("third")
        gets = b"".join(b"j" + struct.pack("<I", i) for i in (1, far - 1, far))
        yield f"memo_sparse_{far}", body + b"(" + gets + b"l."


def text_index_pickles():
    """Protocol 0 PUT and GET indices as CPython reads them (PyLong_FromString on the line as a C string):
    a NUL ends the number, spaces around it, a sign and underscores between digits are allowed."""
    body = (b"S'z'\np0\n0" + b"S'a'\np1\x002\n0" + b"S'b'\np+0_2\n0" + b"S'c'\np 3 \n0"
            + b"(g 1 \ng1\x00x\ng2\ng-0\ng03\nl.")
    yield "memo_text_indices", body


def main():
    for name, data in text_index_pickles():
        print(json.dumps({"name": name, "protocol": 0, "hex": data.hex(), "expected": canon(pickle.loads(data))}))
    for name, data in memo_pickles():
        print(json.dumps({"name": name, "protocol": 4, "hex": data.hex(), "expected": canon(pickle.loads(data))}))
    for name, value in cases():
        for proto in range(0, pickle.HIGHEST_PROTOCOL + 1):
            if name == "objects" and proto < 2:
                continue  # __slots__ objects need protocol 2; Point/Reduced are covered at 2+
            try:
                data = pickle.dumps(value, protocol=proto)
            except Exception as e:  # e.g. cycles are fine everywhere; keep going on anything odd
                print(f"skip {name} p{proto}: {e}", file=sys.stderr)
                continue
            if name == "ordered_dict":
                expected = {"dict": canon(dict(value))["dict"], "ordered": True}
            else:
                expected = canon(value)
            print(json.dumps({"name": name, "protocol": proto, "hex": data.hex(), "expected": expected}))


if __name__ == "__main__":
    main()
