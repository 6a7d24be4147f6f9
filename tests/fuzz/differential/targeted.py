"""Minimal repros of what the differential fuzzer found, checked one by one (difffuzz.py targeted).

Each case's pickle runs through CPython and StateLens, compared as the fuzzer compares them. A case whose
third field gives a reason is a difference StateLens still has; every other case must agree.
"""
import struct

from compare import compare, cpython_imports, statelens_names


def X(s):
    """SHORT_BINUNICODE."""
    b = s.encode()
    return b"\x8c" + bytes([len(b)]) + b


def frame(body):
    return b"\x95" + struct.pack("<Q", len(body)) + body


NESTED = "a pickle nested in bytes, without a PROTO header and with bytes after its STOP: left unopened"

# (name, pickle, None or why it is a known difference)
CASES = []

# FRAME crossing: a frame that ends inside an opcode's argument. torch.load (io.BytesIO) drops the frame's
# rest and reads the argument from after the frame; StateLens must report a danger it cannot name (?.?).
CASES.append(("frame_split_line", b"\x80\x04" + frame(b"ctorch\nX") + b"load\nS'x'\n\x85R.", None))
CASES.append(("frame_desync_hidden_payload",
              b"\x80\x04" + frame(b"X" + bytes([2 + len(b"cos\nsystem\n(S'id'\ntR0")]) + b"\x00")
              + b"\x00\x00\x00\x00cos\nsystem\n(S'id'\ntR0}.", None))
# The inner frame is read from the outer one's bytes: the outer end still bounds what follows.
_call = b"cos\nsystem\n" + X("true") + b"\x85R"
CASES.append(("frame_in_frame_crossing",
              b"\x80\x04" + frame(frame(b"N") + b"0X" + struct.pack("<H", 2 + len(_call)))
              + b"\x00\x00\x00\x00" + _call + b"0}.", None))

# Protocol 0 GET/PUT indices as PyLong_FromString reads them: a NUL ends the number.
CASES.append(("nul_in_get", b"\x80\x02" + X("os") + b"q\x01" + X("system") + b"q\x02" + X("collections")
              + b"q\x0c" + X("OrderedDict") + b"q\x17" + b"g1\x002\ng2\x003\n\x93S'id'\n\x85R.", None))
CASES.append(("nul_in_put", b"\x80\x02" + X("collections") + b"p1\n" + X("OrderedDict") + b"p2\n" + X("os")
              + b"p1\x000\n" + X("system") + b"p2\x000\n" + b"g1\ng2\n\x93S'id'\n\x85R.", None))

# MEMOIZE stores at len(memo), the number of slots stored: a PUT over a stored slot does not grow it, and a
# slot stored far ahead is reached later.
def _memoize(s):
    return X(s) + b"\x940"


CASES.append(("memoize_after_overwrite",
              b"\x80\x04" + X("a") + b"q\x000" + X("b") + b"q\x000" + _memoize("torch._utils")
              + _memoize("os") + _memoize("_rebuild_tensor_v2") + _memoize("system") + b"h\x02h\x04\x93"
              + X("true") + b"\x85R.", None))
CASES.append(("memoize_after_sparse_put",
              b"\x80\x04" + X("far") + b"r" + struct.pack("<I", 5000) + b"0" + b"N\x940" * 4999
              + _memoize("torch._utils") + _memoize("os") + b"j" + struct.pack("<I", 5000) + X("system")
              + b"\x93" + X("true") + b"\x85R.", None))

# fix_imports (protocol < 3) maps Python 2 names with all of _compat_pickle.
CASES.append(("legacy_socketserver", b"\x80\x02cSocketServer\nTCPServer\nS'0.0.0.0'\nM\\\x11\x86"
              b"cSocketServer\nBaseRequestHandler\n\x86R.", None))
CASES.append(("legacy_basehttp", b"\x80\x02cBaseHTTPServer\nHTTPServer\nS''\nM\\\x11\x86"
              b"cBaseHTTPServer\nBaseHTTPRequestHandler\n\x86R.", None))
CASES.append(("legacy_thread", b"\x80\x02cthread\nstart_new_thread\nN)\x86R.", None))
CASES.append(("legacy_reduce", b"\x80\x02c__builtin__\nreduce\nN)\x86R.", None))

# torch re-exports the modules it imports: torch.os is os.
CASES.append(("torch_os_value", b"\x80\x02ctorch\nos\n.", None))
CASES.append(("torch_tensor_os", b"\x80\x02ctorch.tensor\nos\n.", None))

# A getattr(<import>, "NAME") lookup beside a real import of the same dotted name must not hide it.
CASES.append(("getattr_beside_import_samekey", b"\x80\x04cbuiltins\ngetattr\n" + X("torch") + X("os")
              + b"\x93" + X("system") + b"\x86R0" + X("torch") + X("os.system") + b"\x93.", None))
CASES.append(("getattr_beside_import_samequal", b"\x80\x04cbuiltins\ngetattr\n" + X("torch") + X("_utils")
              + b"\x93" + X("os") + b"\x86R0" + X("torch._utils") + X("os") + b"\x93.", None))

# Nested pickles without a PROTO 2+ header: opened since stop 49 when they scan cleanly and end at their STOP.
_inner0 = b"cos\nsystem\n(S'id'\ntR."
CASES.append(("nested_proto0", b"\x80\x03cpickle\nloads\nC" + bytes([len(_inner0)]) + _inner0 + b"\x85R.",
              None))
_inner1 = X("os") + X("system") + b"\x93S'id'\n\x85R."
CASES.append(("nested_binary_without_proto", b"\x80\x04" + X("_pickle") + X("loads") + b"\x93C"
              + bytes([len(_inner1)]) + _inner1 + b"\x85R.", None))
_inner2 = ("\x80\x02cos\nsystem\nX\x02\x00\x00\x00id\x85R.").encode("utf-8")  # latin-1 text as UTF-8
CASES.append(("nested_via_codecs_encode", b"\x80\x02cpickle\nloads\nc_codecs\nencode\nX"
              + struct.pack("<I", len(_inner2)) + _inner2 + b"X\x06\x00\x00\x00latin1\x86R\x85R.",
              None))
# Known: the same with a byte after the STOP, which pickle.loads ignores and the scan takes for data.
_inner3 = _inner0 + b"x"
CASES.append(("nested_proto0_trailing",
              b"\x80\x03cpickle\nloads\nC" + bytes([len(_inner3)]) + _inner3 + b"\x85R.", NESTED))


def run_targeted(cpython, statelens):
    """Prints each case; returns 1 if a case that is not a known difference disagrees."""
    failed = 0
    for name, data, known in CASES:
        cp = cpython.imports(data)
        sl = statelens.ls(data)
        res = compare(cp, sl)
        imports = [q + ("  (nested %d)" % depth if depth else "") for q, _, depth in cpython_imports(cp)]
        # every repro imports something: agreeing on nothing would prove nothing
        agree = imports and not res["divergences"] and not res["undecidable"]
        status = "agree" if agree else ("DISAGREE (known: %s)" % known if known else "DISAGREE")
        if agree and res["unknown"]:
            status += " (%s covered by ?.?)" % ", ".join(res["unknown"])
        if agree and known:
            status += " -- listed as a known difference, but agrees now: update targeted.py"
        print("== %s: %s" % (name, status))
        print("   CPython imports: %s%s" % (", ".join(imports) or "-", "  [stopped: %s]" % cp["error"]
                                              if cp["error"] else ""))
        print("   StateLens: rc %s, verdict %s, names %s" % (sl["rc"], sl["verdict"],
                                                             ", ".join(sorted(statelens_names(sl))) or "-"))
        for d in res["divergences"]:
            print("   divergence: %s %s" % (d["kind"], d["q"]))
        if not agree and not known:
            failed += 1
    print("%d cases, %d disagree outside the known differences" % (len(CASES), failed))
    return 1 if failed else 0
