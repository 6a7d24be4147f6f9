"""Pickle generator for the differential fuzzer.

A grammar of opcode sequences that stresses what StateLens' opcode scan models: the memo (PUT, MEMOIZE,
GET in all forms, sparse and overwritten slots), marks, FRAME (exact and ending mid-opcode), PROTO changes
mid-stream, protocol 0 text strings with escapes, getattr chains and pickles nested in bytes for
pickle.loads. generate(seed, ...) is deterministic for a seed and its options.
"""
import random
import struct

PAIRS_DANGER = [("os", "system"), ("subprocess", "Popen"), ("builtins", "eval"), ("builtins", "exec"),
                ("builtins", "getattr"), ("posix", "system"), ("subprocess", "check_output"), ("os", "popen"),
                ("pickle", "loads"), ("_pickle", "loads"), ("torch", "load"), ("__builtin__", "eval"),
                ("__builtin__", "getattr"), ("commands", "getoutput"), ("thread", "start_new_thread"),
                ("__builtin__", "reduce"), ("__builtin__", "intern"), ("httplib", "HTTPConnection"),
                ("SocketServer", "TCPServer"), ("torch", "os.system"), ("torch", "os"),
                ("torch.tensor", "os"), ("builtins", "__import__"), ("os", "execv")]
PAIRS_SAFE = [("torch._utils", "_rebuild_tensor_v2"), ("collections", "OrderedDict"),
              ("torch", "FloatStorage"), ("torch", "Size"), ("torch._utils", "_rebuild_parameter"),
              ("torch", "device"), ("builtins", "set"), ("copyreg", "_reconstructor"),
              ("torch.tensor", "_rebuild_from_type_v2")]
MODULES = sorted({m for m, _ in PAIRS_DANGER + PAIRS_SAFE})
NAMES = sorted({n for _, n in PAIRS_DANGER + PAIRS_SAFE})
ATTRS = ["system", "os", "Popen", "load", "loads", "values", "fromkeys", "_utils", "HIGHEST"]
LOADERS = [("pickle", "loads"), ("_pickle", "loads"), ("pickle", "loads"), ("torch", "load")]


def u8(n): return struct.pack("<B", n)
def u16(n): return struct.pack("<H", n)
def u32(n): return struct.pack("<I", n & 0xFFFFFFFF)
def u64(n): return struct.pack("<Q", n)


class Gen:
    """One pickle. skip_known leaves out what StateLens is known to read differently (inner pickles
    without a PROTO 2+ header, which it opens only when they end at a clean STOP; EXT opcodes); valid
    keeps to pickles CPython mostly reads to the end."""

    def __init__(self, r, depth=0, skip_known=False, valid=False):
        self.r = r
        self.depth = depth
        self.skip_known = skip_known
        self.valid = valid
        self.chunks = []
        # An abstract stack, only to choose plausible next opcodes: ('str', s) ('bytes', b) ('g', q) ('o',)
        # ('tuple',) ('mark',). It need not match what CPython's stack holds.
        self.stack = []
        self.memo = {}
        self.proto = 0
        self.features = set()

    def emit(self, b, feat=None):
        self.chunks.append(b)
        if feat:
            self.features.add(feat)

    def push(self, item):
        self.stack.append(item)

    def pop(self):
        return self.stack.pop() if self.stack else None

    def push_mark(self):
        self.emit(b"(", "MARK")
        self.stack.append(("mark",))

    def pop_mark(self):
        while self.stack and self.stack[-1][0] != "mark":
            self.stack.pop()
        if self.stack:
            self.stack.pop()

    def pick_pair(self):
        r = self.r
        x = r.random()
        if self.valid:  # fewer dangers: more verdicts are weights-only or imports, which are checked harder
            if x < 0.2:
                return r.choice(PAIRS_DANGER)
            if x < 0.9:
                return r.choice(PAIRS_SAFE)
            return r.choice(MODULES), r.choice(NAMES)
        if x < 0.45:
            return r.choice(PAIRS_DANGER)
        if x < 0.85:
            return r.choice(PAIRS_SAFE)
        return r.choice(MODULES), r.choice(NAMES)

    # ---- strings

    def text_escape_S(self, s):
        """STRING's body, some characters as \\x or octal escapes (Python decodes them before find_class)."""
        r = self.r
        out = []
        for ch in s:
            x = r.random()
            o = ord(ch)
            if o < 128 and x < 0.15:
                out.append("\\x%02x" % o)
            elif o < 128 and x < 0.25:
                out.append("\\%03o" % o)
            elif ch in "\\'\"":
                out.append("\\" + ch)
            else:
                out.append(ch)
        return "".join(out)

    def text_escape_V(self, s):
        """UNICODE's body (raw-unicode-escape), some characters as \\u or \\U escapes."""
        r = self.r
        out = []
        for ch in s:
            x = r.random()
            if x < 0.15:
                out.append("\\u%04x" % ord(ch))
            elif x < 0.2:
                out.append("\\U%08x" % ord(ch))
            else:
                out.append(ch)
        return "".join(out)

    def str_op(self, s):
        r = self.r
        b = s.encode("utf-8", "surrogatepass")
        kind = r.choice(["8c", "8c", "8c", "X", "X", "8d", "U", "T", "S", "S", "V", "V"])
        if kind == "8c" and len(b) < 256:
            return b"\x8c" + u8(len(b)) + b, "SHORT_BINUNICODE"
        if kind in ("8c", "X"):
            return b"X" + u32(len(b)) + b, "BINUNICODE"
        if kind == "8d":
            return b"\x8d" + u64(len(b)) + b, "BINUNICODE8"
        if kind == "U" and len(b) < 256:
            return b"U" + u8(len(b)) + b, "SHORT_BINSTRING"
        if kind in ("U", "T"):
            return b"T" + u32(len(b)) + b, "BINSTRING"
        if kind == "S":
            q = r.choice("'\"")
            end = b"\r\n" if r.random() < 0.03 else b"\n"
            return b"S" + (q + self.text_escape_S(s) + q).encode("latin-1", "replace") + end, "STRING"
        end = b"\r\n" if r.random() < 0.05 else b"\n"
        return b"V" + self.text_escape_V(s).encode("latin-1", "replace") + end, "UNICODE"

    def push_str(self, s=None):
        r = self.r
        if s is None:
            x = r.random()
            if x < 0.4:
                s = r.choice(MODULES)
            elif x < 0.8:
                s = r.choice(NAMES)
            elif x < 0.9:
                s = r.choice(ATTRS)
            else:
                s = r.choice(["", "a", "os.path", "torch._utils", "\x00", "é", "os\r"])
        b, f = self.str_op(s)
        self.emit(b, f)
        self.push(("str", s))

    def push_bytes(self, b=None):
        r = self.r
        if b is None:
            b = r.choice([b"os", b"system", b"torch", b"\x80\x02."])
        op = r.choice(["C", "B", "8e", "96"])
        if op == "C" and len(b) < 256:
            self.emit(b"C" + u8(len(b)) + b, "SHORT_BINBYTES")
        elif op in ("C", "B"):
            self.emit(b"B" + u32(len(b)) + b, "BINBYTES")
        elif op == "8e":
            self.emit(b"\x8e" + u64(len(b)) + b, "BINBYTES8")
        else:
            self.emit(b"\x96" + u64(len(b)) + b, "BYTEARRAY8")
        self.push(("bytes", b))

    # ---- memo

    def memo_index_text(self, i):
        """A protocol 0 PUT/GET index as CPython's PyLong_FromString reads it: every form here means i."""
        r = self.r
        s = str(i)
        x = r.random()
        if x < 0.6:
            return s.encode()
        if x < 0.65:
            return b"0" + s.encode()
        if x < 0.7:
            return b" " + s.encode()
        if x < 0.75:
            return s.encode() + b" "
        if x < 0.8:
            return b"+" + s.encode()
        if x < 0.85 and len(s) > 1:
            return (s[0] + "_" + s[1:]).encode()
        if x < 0.93:
            self.features.add("NUL_IN_INDEX")  # the C string ends at the NUL: the digits after it are ignored
            return s.encode() + b"\x00" + str(r.randrange(10)).encode()
        return s.encode() + b"\r"

    def memo_put(self):
        r = self.r
        if not self.stack or self.stack[-1][0] == "mark":
            return
        x = r.random()
        nxt = len(self.memo)
        if x < 0.45:
            idx = nxt
        elif x < 0.65 and self.memo:
            idx = r.choice(list(self.memo))  # overwrite
        elif x < 0.75:
            idx = nxt + r.randrange(1, 6)  # sparse
        elif x < 0.85:
            idx = r.choice([4095, 4096, 4097, 5000, 100000, 255, 256])  # far
        else:
            idx = r.randrange(0, 40)
        y = r.random()
        if y < 0.35:
            idx = len(self.memo)  # MEMOIZE stores at len(memo): the number of slots stored, not of stores
            self.emit(b"\x94", "MEMOIZE")
        elif y < 0.55 and idx < 256:
            self.emit(b"q" + u8(idx), "BINPUT")
        elif y < 0.75:
            self.emit(b"r" + u32(idx), "LONG_BINPUT")
        else:
            self.emit(b"p" + self.memo_index_text(idx) + b"\n", "PUT")
        self.memo[idx] = self.stack[-1]

    def memo_get(self):
        r = self.r
        if self.valid and not self.memo:
            return self.push_str()
        if self.memo and (self.valid or r.random() < 0.9):
            idx = r.choice(list(self.memo))
            item = self.memo[idx]
        else:
            idx = r.randrange(0, 50)  # maybe a slot never stored: CPython stops there
            item = self.memo.get(idx, ("o",))
        y = r.random()
        if y < 0.4 and idx < 256:
            self.emit(b"h" + u8(idx), "BINGET")
        elif y < 0.7:
            self.emit(b"j" + u32(idx), "LONG_BINGET")
        else:
            self.emit(b"g" + self.memo_index_text(idx) + b"\n", "GET")
        self.push(item)

    # ---- globals and calls

    def push_global(self, pair=None):
        r = self.r
        m, n = pair or self.pick_pair()
        x = r.random()
        if x < 0.35:
            end = b"\r\n" if r.random() < 0.03 else b"\n"
            self.emit(b"c" + m.encode() + end + n.encode() + end, "GLOBAL")
        else:
            # STACK_GLOBAL, its strings possibly through the memo
            self.push_str(m)
            if r.random() < 0.3:
                self.memo_put()
            self.push_str(n)
            if r.random() < 0.3:
                self.memo_put()
            strs = [i for i, v in self.memo.items() if v[0] == "str"]
            if r.random() < 0.2 and self.memo and not self.valid:
                self.memo_get()  # any two slots: the import is whatever they hold
                self.memo_get()
            elif r.random() < 0.3 and len(strs) >= 2 and self.valid:
                for _ in range(2):  # two string slots
                    i = r.choice(strs)
                    short = b"h" + u8(i) if i < 256 else b"j" + u32(i)
                    self.emit(r.choice([short, b"j" + u32(i), b"g%d\n" % i]), "MEMO_REFETCH")
                    self.push(self.memo[i])
            self.emit(b"\x93", "STACK_GLOBAL")
            if len(self.stack) >= 2:
                self.pop()
                self.pop()
        self.push(("g", m + "." + n))

    def push_args(self):
        r = self.r
        x = r.random()
        if x < 0.2:
            self.emit(b")", "EMPTY_TUPLE")
        elif x < 0.5:
            self.push_str(r.choice(["id", "echo hi", "x"]))
            self.pop()
            self.emit(b"\x85", "TUPLE1")
        elif x < 0.65:
            self.push_str("a")
            self.push_str("b")
            self.pop()
            self.pop()
            self.emit(b"\x86", "TUPLE2")
        elif x < 0.75:
            self.emit(b"NNN\x87", "TUPLE3")
        else:
            self.emit(b"(", "MARK")
            for _ in range(r.randrange(0, 3)):
                self.emit(b"K" + u8(r.randrange(256)))
            self.emit(b"t", "TUPLE")
        self.push(("tuple",))

    def call(self):
        self.push_global()
        if self.r.random() < 0.3:
            self.memo_put()
        self.push_args()
        self.emit(b"R", "REDUCE")
        self.pop()
        self.pop()
        self.push(("o",))

    def getattr_chain(self):
        """getattr(<global>, 'ATTR'), sometimes called: the scan names owner.ATTR."""
        r = self.r
        self.push_global(("builtins", "getattr") if r.random() < 0.7
                         else r.choice([("__builtin__", "getattr"), ("torch", "load")]))
        self.push_global(r.choice([("torch", "os"), ("collections", "OrderedDict"), ("torch", "FloatStorage"),
                                   ("os", "system"), ("torch", "_utils")]))
        self.push_str(r.choice(ATTRS))
        self.emit(b"\x86", "TUPLE2")
        self.pop()
        self.pop()
        self.emit(b"R", "REDUCE")
        self.pop()
        self.push(("o",))
        self.features.add("getattr")
        if r.random() < 0.6:
            self.push_args()
            self.emit(b"R", "REDUCE")
            self.pop()
            self.pop()
            self.push(("o",))

    def inst(self):
        r = self.r
        m, n = self.pick_pair()
        self.emit(b"(", "MARK")
        if r.random() < 0.5:
            self.emit(b"S'id'\n")
        self.emit(b"i" + m.encode() + b"\n" + n.encode() + b"\n", "INST")
        self.push(("o",))

    def obj(self):
        r = self.r
        self.push_mark()
        self.push_global()
        if r.random() < 0.5:
            self.push_str("id")
        self.emit(b"o", "OBJ")
        self.pop_mark()
        self.push(("o",))

    def newobj(self):
        r = self.r
        self.push_global()
        self.push_args()
        if r.random() < 0.5:
            self.emit(b"\x81", "NEWOBJ")
        else:
            self.emit(b"}", "EMPTY_DICT")
            self.emit(b"\x92", "NEWOBJ_EX")
        self.pop()
        self.pop()
        self.push(("o",))

    def build(self):
        r = self.r
        if not self.stack or self.stack[-1][0] == "mark":
            self.push_global()
        x = r.random()
        if x < 0.4:
            self.emit(b"}", "EMPTY_DICT")
        elif x < 0.7:
            self.emit(b"N")
        else:
            self.emit(b"N}\x86", "TUPLE2")
        self.emit(b"b", "BUILD")

    # ---- everything else

    def containers(self):
        r = self.r
        x = r.random()
        if x < 0.2:
            self.emit(b"]", "EMPTY_LIST")
            self.push(("o",))
            self.push_str()
            self.emit(b"a", "APPEND")
            self.pop()
        elif x < 0.4:
            self.emit(b"}", "EMPTY_DICT")
            self.push(("o",))
            self.push_str()
            self.push_str()
            self.emit(b"s", "SETITEM")
            self.pop()
            self.pop()
        elif x < 0.55:
            self.emit(b"]", "EMPTY_LIST")
            self.push(("o",))
            self.push_mark()
            self.push_str()
            self.push_global()
            self.emit(b"e", "APPENDS")
            self.pop_mark()
        elif x < 0.7:
            self.emit(b"}", "EMPTY_DICT")
            self.push(("o",))
            self.push_mark()
            self.push_str()
            self.push_str()
            self.emit(b"u", "SETITEMS")
            self.pop_mark()
        elif x < 0.8:
            self.emit(b"\x8f", "EMPTY_SET")
            self.push(("o",))
            self.push_mark()
            self.push_str()
            self.emit(b"\x90", "ADDITEMS")
            self.pop_mark()
        elif x < 0.9:
            self.push_mark()
            self.push_str()
            op = r.choice([b"l", b"d", b"\x91", b"t"])
            if op == b"d":
                self.push_str()
            self.emit(op, {b"l": "LIST", b"d": "DICT", b"\x91": "FROZENSET", b"t": "TUPLE"}[op])
            self.pop_mark()
            self.push(("o",))
        else:
            self.push_mark()
            self.push_str()
            self.push_global()
            self.emit(b"1", "POP_MARK")
            self.pop_mark()

    def misc(self):
        r = self.r
        x = r.random()
        if x < 0.15:
            self.emit(b"2", "DUP")
            if self.stack:
                self.push(self.stack[-1])
        elif x < 0.3:
            self.emit(b"0", "POP")
            if self.stack:
                self.stack.pop()
        elif x < 0.45 and self.valid:  # a balanced MARK ... POP_MARK
            self.emit(b"(", "MARK")
            self.push_str()
            self.push_global()
            self.emit(b"1", "POP_MARK")
            self.pop()
            self.pop()
        elif x < 0.38:
            self.push_mark()
        elif x < 0.45:
            self.emit(b"1", "POP_MARK")
            self.pop_mark()
        elif x < 0.5:
            p = r.randrange(0, 6)
            self.emit(b"\x80" + u8(p), "PROTO_MID")  # changes fix_imports for later GLOBALs
            self.proto = p
        elif x < 0.57:
            if self.skip_known:  # EXT is not modelled by the scan
                self.emit(b"N")
            else:
                c = r.randrange(1, 300)
                self.emit(r.choice([b"\x82" + u8(c % 256), b"\x83" + u16(c), b"\x84" + u32(c)]), "EXT")
            self.push(("o",))
        elif x < 0.64:
            if self.valid:  # torch.load refuses a persistent id that is not its storage tuple
                self.emit(b"N")
            elif r.random() < 0.5:
                self.emit(b"P" + r.choice([b"0", b"storage", b"x"]) + b"\n", "PERSID")
            else:
                self.push_str("0")
                self.pop()
                self.emit(b"Q", "BINPERSID")
            self.push(("o",))
        elif x < 0.8:
            self.emit(r.choice([b"N", b"\x88", b"\x89", b"K\x05", b"M\x01\x02", b"J\x01\x00\x00\x00",
                                b"I01\n", b"L5L\n", b"F1.0\n", b"G" + b"\x00" * 8, b"\x8a\x01\x05",
                                b"\x8b\x01\x00\x00\x00\x05"]))
            self.push(("o",))
        else:
            self.push_bytes()

    def nested(self):
        """A pickle in bytes, passed to pickle.loads (or torch.load, which does not unpickle bytes)."""
        r = self.r
        if self.depth >= 2:
            return self.push_str()
        sub = Gen(r, self.depth + 1, self.skip_known, self.valid)
        inner = sub.generate(steps=r.randrange(1, 8))
        if "NESTED_NO_HEADER" in sub.features:
            self.features.add("NESTED_NO_HEADER")
        self.push_global(r.choice(LOADERS))
        self.push_bytes(inner)
        self.emit(b"\x85", "TUPLE1")
        self.pop()
        self.emit(b"R", "REDUCE")
        self.pop()
        self.pop()
        self.push(("o",))
        self.features.add("NESTED")

    def step(self):
        acts = [(self.push_str, 10), (self.memo_put, 12), (self.memo_get, 10), (self.push_global, 12),
                (self.call, 12), (self.getattr_chain, 4), (self.inst, 3), (self.obj, 3), (self.newobj, 3),
                (self.build, 3), (self.containers, 5), (self.misc, 10), (self.nested, 2)]
        x = self.r.uniform(0, sum(w for _, w in acts))
        for f, w in acts:
            x -= w
            if x <= 0:
                return f()
        acts[0][0]()

    def generate(self, steps=None):
        r = self.r
        x = r.random()
        known_inner = self.skip_known and self.depth
        if x < 0.85 or known_inner:
            self.proto = r.randrange(0, 6) if r.random() < 0.5 else r.choice([2, 4])
            if known_inner:
                self.proto = r.randrange(2, 6)  # the scan opens only inner pickles with a PROTO 2+ header
            if self.proto >= 2 or r.random() < 0.5 or known_inner:
                self.emit(b"\x80" + u8(self.proto), "PROTO%d" % self.proto)
        if self.proto < 2 and self.depth:
            self.features.add("NESTED_NO_HEADER")
        for _ in range(steps if steps is not None else r.randrange(3, 30)):
            self.step()
        self.emit(b".")
        self.post()
        return b"".join(self.chunks)

    def post(self):
        r = self.r
        if r.random() < 0.3 and len(self.chunks) > 2:
            # a FRAME over some opcodes; usually exact, sometimes ending mid-opcode (torch.load then reads
            # the rest of that opcode from after the frame, and StateLens must say it cannot vouch for it)
            i = r.randrange(0, len(self.chunks) - 1)
            if self.chunks[0].startswith(b"\x80") and i == 0:
                i = 1
            j = r.randrange(i + 1, len(self.chunks) + 1)
            ln = sum(len(c) for c in self.chunks[i:j])
            if r.random() < 0.4:
                ln += r.randrange(-4, 5)
                self.features.add("FRAME_MIDOP")
            self.chunks.insert(i, b"\x95" + u64(max(ln, 0)))
            self.features.add("FRAME")
        # byte mutations; not of an inner pickle under skip_known, where one could lose its PROTO header
        if r.random() < 0.06 and not self.valid and not (self.skip_known and self.depth):
            b = bytearray(b"".join(self.chunks))
            for _ in range(r.randrange(1, 4)):
                k = r.randrange(len(b))
                y = r.random()
                if y < 0.4:
                    b[k] = r.randrange(256)
                elif y < 0.7:
                    del b[k]
                else:
                    b.insert(k, r.randrange(256))
            self.chunks = [bytes(b)]
            self.features.add("MUTATED")


def generate(seed, skip_known=False, valid=False):
    """Returns (pickle bytes, set of feature names) for one seed."""
    g = Gen(random.Random(seed), skip_known=skip_known, valid=valid)
    data = g.generate()
    return data, g.features
