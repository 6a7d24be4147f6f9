"""The oracle of the differential fuzzer: which of CPython's imports StateLens must name, and how.

Only one direction is checked: every import CPython makes must show in StateLens' output (or be one
StateLens calls safe by design). StateLens naming more than CPython imports is not a divergence: the
scan reads on where CPython stops at the first failing opcode.
"""
import re

import _compat_pickle

from gen import PAIRS_DANGER
from gt_worker import cpython_name

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")

# torch's weights-only allowlist, as far as the generator's names reach.
WEIGHTS_ONLY = {"torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter",
                "torch._tensor._rebuild_from_type_v2", "torch.FloatStorage", "torch.Size", "torch.device",
                "collections.OrderedDict", "builtins.set", "copyreg._reconstructor", "_codecs.encode"}

# What CPython imports for the generator's dangerous pairs, in either protocol range, less Python 2 module
# names (they import nothing in Python 3). StateLens must list each as a danger, even when its read fails.
DANGEROUS = {".".join(cpython_name(m, n, fix)) for m, n in PAIRS_DANGER for fix in (False, True)
             if fix or m not in _compat_pickle.IMPORT_MAPPING}

# StateLens' policy calls these safe where not called: torch.X values (dtypes, storage classes; the oracle
# cannot tell them from attributes torch lacks) and the _rebuild* functions of torch's rebuild modules.
POLICY_SAFE = re.compile(r"^(torch\.[A-Za-z_]\w*|torch\.(_utils|_tensor|storage)\._rebuild\w*)$")

# The first 4 dangers are listed when a read fails; more are cut off, so the rest cannot be checked.
DANGER_LIST_CUT = re.compile(r"DANGER: its pickle references .*\(\d+ in all\)")


def safe_by_design(q):
    return q not in DANGEROUS and (q in WEIGHTS_ONLY or POLICY_SAFE.match(q) is not None)


def danger_list(text):
    """The names in a failed read's line "DANGER: its pickle references A (why), B (why), ..., which"."""
    names = []
    for m in re.finditer(r"DANGER: its pickle references ", text):
        i = m.end()
        while True:
            j = text.find(" (", i)
            if j < 0:
                break
            names.append(text[i:j])
            k, depth = j + 1, 0
            while k < len(text):  # past the balanced "(why)", which may hold parentheses itself
                depth += {"(": 1, ")": -1}.get(text[k], 0)
                k += 1
                if depth == 0:
                    break
            if not text.startswith(", ", k) or text.startswith((", ...", ", which"), k):
                break
            i = k + 2
    return names


def statelens_names(sl):
    """Every import StateLens names: its lists after a full read, the DANGER list of a failed one. Not
    free text: a message's "torch.load would run it" must not count as naming torch.load."""
    return set(sl["refused"]) | set(sl["executes"]) | set(danger_list(sl["text"]))


def cpython_imports(cp):
    """CPython's distinct imports with importable names: [(q, raw, depth)], in order."""
    seen = set()
    out = []
    for c in cp["calls"]:
        q = c["module"] + "." + c["name"]
        if q in seen or not (IDENT.match(c["module"]) and IDENT.match(c["name"])):
            continue
        seen.add(q)
        out.append((q, ".".join(c["raw"]), c["depth"]))
    return out


def compare(cp, sl):
    """cp: gt_worker's result; sl: StateLens.ls's. Returns {"divergences": [...], "unknown": [q, ...],
    "undecidable": bool}. "unknown" are imports StateLens does not name but covers with ?.?, a danger
    it cannot name (a FRAME crossing, a computed name): the verdict is right, the name is not given."""
    res = {"divergences": [], "unknown": [], "undecidable": False}
    divs = res["divergences"]
    if sl["rc"] not in (0, 2):
        divs.append({"kind": "statelens-exit", "q": str(sl["rc"]), "depth": 0})
        return res
    if "json_error" in sl:
        divs.append({"kind": "statelens-bad-json", "q": sl["json_error"], "depth": 0})
        return res
    if sl["rc"] == 2 and DANGER_LIST_CUT.search(sl["text"]):
        res["undecidable"] = True
        return res
    names = statelens_names(sl)
    for q, raw, depth in cpython_imports(cp):
        if safe_by_design(q):
            continue
        ok = q in names
        if sl["rc"] == 2 and q == "builtins.getattr":
            ok = True  # a getattr that only reads an attribute (an enum member) is no danger to list
        # A failed read lists only its dangers; a full read lists every import outside the allowlist.
        must = q in DANGEROUS or sl["rc"] == 0
        if sl["verdict"] == "weights-only":
            divs.append({"kind": "weights-only-but-imports", "q": q, "raw": raw, "depth": depth})
        elif not ok and must:
            if "?.?" in names:
                res["unknown"].append(q)
            else:
                divs.append({"kind": "not-named", "q": q, "raw": raw, "depth": depth})
    return res
