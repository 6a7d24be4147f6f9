"""Differential fuzzer: StateLens' pickle opcode scan against CPython's C unpickler. A manual tool.

Run with /usr/bin/python3 (the Python torch.load runs on here: its C _pickle is the ground truth).

  difffuzz.py run SEED COUNT [--out DIR] [--skip-known] [--valid]   generated pickles; exit 1 on a divergence
  difffuzz.py targeted                                             the minimal repros in targeted.py
  difffuzz.py minimize CASE.json [--q IMPORT] [--out FILE]         shrink a case that run saved

Before the subcommand: --statelens PATH (default: build/app/statelens of the repo this folder is in).
See README.md for what is compared and what counts as a divergence.
"""
import argparse
import collections
import json
import os
import select
import subprocess
import sys
import tempfile
import time

from compare import compare
from gen import generate
from statelens_ls import StateLens
from targeted import run_targeted

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_STATELENS = os.path.normpath(os.path.join(HERE, "..", "..", "..", "build", "app", "statelens"))
CASES_PER_SIGNATURE = 3  # cases saved for each (kind, import, nested) signature


class CPython:
    """gt_worker.py in a subprocess (its own memory limit, and a crash or hang costs one case)."""

    def __init__(self, timeout=10):
        self.timeout = timeout
        self.p = None
        self._start()

    def _start(self):
        self.close()
        self.p = subprocess.Popen([sys.executable, os.path.join(HERE, "gt_worker.py")], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def imports(self, data):
        try:
            self.p.stdin.write(data.hex().encode() + b"\n")
            self.p.stdin.flush()
            if not select.select([self.p.stdout], [], [], self.timeout)[0]:
                raise TimeoutError
            line = self.p.stdout.readline()
            if not line:
                raise EOFError
            return json.loads(line)
        except (OSError, EOFError, ValueError) as e:
            self._start()
            return {"calls": [], "error": "worker: " + type(e).__name__, "worker_failed": True}

    def close(self):
        if self.p:
            self.p.kill()
            self.p.wait()
            self.p = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def write_json(path, obj):
    """Atomically: a reader never sees half a file."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def is_known(div, features):
    # Imports of an inner pickle without a PROTO 2+ header that does not end at a clean STOP: the scan leaves
    # it unopened (README.md).
    return div["depth"] > 0 and "NESTED_NO_HEADER" in features


def cmd_run(args, cpython, statelens):
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    stats = collections.Counter()
    sigs = collections.Counter()
    t0 = time.time()
    for seed in range(args.seed, args.seed + args.count):
        data, feats = generate(seed, skip_known=args.skip_known, valid=args.valid)
        stats["cases"] += 1
        cp = cpython.imports(data)
        if cp.get("worker_failed"):
            stats["cpython_worker_failed"] += 1
            continue
        stats["cpython_read_to_end" if cp["error"] is None else "cpython_stopped"] += 1
        if cp["calls"]:
            stats["cpython_imports"] += 1
        sl = statelens.ls(data)
        stats["statelens_rc_%s" % sl["rc"]] += 1
        res = compare(cp, sl)
        stats["undecidable"] += res["undecidable"]
        stats["covered_by_unknown"] += bool(res["unknown"])
        save = False
        for d in res["divergences"]:
            d["known"] = is_known(d, feats)
            stats["known_differences" if d["known"] else "divergences"] += 1
            sig = (d["kind"], d["q"], d["depth"] > 0, d["known"])
            sigs[sig] += 1
            save |= sigs[sig] <= CASES_PER_SIGNATURE
        if args.out and save:
            write_json(os.path.join(args.out, "case_%d.json" % seed), {
                "seed": seed, "skip_known": args.skip_known, "valid": args.valid, "data": data.hex(),
                "repr": repr(data), "features": sorted(feats), "divergences": res["divergences"],
                "cpython": cp, "statelens": sl})
    stats["seconds"] = round(time.time() - t0)
    signatures = [{"kind": k, "q": q, "nested": n, "known": kn, "count": c}
                  for (k, q, n, kn), c in sigs.most_common()]
    if args.out:
        write_json(os.path.join(args.out, "stats_%d_%d.json" % (args.seed, args.count)),
                   {"stats": stats, "signatures": signatures})
    for k in sorted(stats):
        print("%-24s %d" % (k, stats[k]))
    for s in signatures:
        print("%5d %s %s%s%s" % (s["count"], s["kind"], s["q"], " (nested)" if s["nested"] else "",
                                 " (known)" if s["known"] else ""))
    return 1 if stats["divergences"] else 0


def cmd_minimize(args, cpython, statelens):
    """Delta debugging (ddmin): the shortest pickle, by removing chunks, that keeps the case's divergence."""
    with open(args.case) as f:
        case = json.load(f)
    data = bytes.fromhex(case["data"])
    divs = [d for d in case["divergences"] if args.q in (None, d["q"])]
    if not divs:
        print("no divergence of %s in %s" % (args.q, args.case))
        return 1
    div = min(divs, key=lambda d: d["known"])  # an unknown one first
    kind, q = div["kind"], div["q"]

    def still(d):
        res = compare(cpython.imports(d), statelens.ls(d))
        return any(x["kind"] == kind and x["q"] == q for x in res["divergences"])

    if not still(data):
        print("the case no longer diverges (%s %s)" % (kind, q))
        return 1
    n = 2
    while len(data) >= 2:
        chunk = max(1, len(data) // n)
        reduced = False
        i = 0
        while i < len(data):
            cand = data[:i] + data[i + chunk:]
            if cand and still(cand):
                data = cand
                reduced = True
            else:
                i += chunk
        if not reduced:
            if chunk == 1:
                break
            n = min(len(data), n * 2)
    result = {"kind": kind, "q": q, "min": repr(data), "data": data.hex(), "cpython": cpython.imports(data),
              "statelens": statelens.ls(data)}
    if args.out:
        write_json(args.out, result)
    print(json.dumps(result, indent=1))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--statelens", default=DEFAULT_STATELENS,
                    help="the statelens binary (default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=30, help="seconds for one statelens ls (default: 30)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="generate COUNT pickles from SEED on and compare each")
    r.add_argument("seed", type=int)
    r.add_argument("count", type=int)
    r.add_argument("--out", help="folder for the diverging cases and the run's stats (default: none written)")
    r.add_argument("--skip-known", action="store_true",
                   help="leave out what StateLens is known to read differently: inner pickles without a "
                        "PROTO 2+ header, EXT opcodes")
    r.add_argument("--valid", action="store_true",
                   help="mostly valid pickles (no unbalanced marks, missing memo slots, persistent ids or "
                        "byte mutations), so that more cases are read to the end")
    sub.add_parser("targeted", help="run the minimal repros and say whether each agrees")
    m = sub.add_parser("minimize", help="shrink a case file that run wrote")
    m.add_argument("case")
    m.add_argument("--q", help="the import whose divergence to keep (default: the case's first unknown one)")
    m.add_argument("--out", help="also write the result to this JSON file")
    args = ap.parse_args()

    with CPython() as cpython, tempfile.TemporaryDirectory(prefix="difffuzz-") as tmp:
        statelens = StateLens(args.statelens, tmp, args.timeout)
        if args.cmd == "run":
            return cmd_run(args, cpython, statelens)
        if args.cmd == "targeted":
            return run_targeted(cpython, statelens)
        return cmd_minimize(args, cpython, statelens)


if __name__ == "__main__":
    sys.exit(main())
