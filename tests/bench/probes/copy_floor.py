#!/usr/bin/env python3
"""What copying a file's bytes costs at the least, beside `statelens convert` of it (bench.py case i: convert's
target is at most 1.5x the time of `cp`). Each way runs REPS times, interleaved, the output removed before each
run; medians printed. The ways: cp (coreutils 9 copies with copy_file_range, in the kernel, and does not wait
for the disk); copy_file_range in a loop, with and without fsync; pread/write through an 8 MB buffer (what
convert does), with and without fsync; and statelens convert, which copies through its buffer and fsyncs the
file before renaming it into place.

  python3 tests/bench/probes/copy_floor.py FILE OUT_DIR [STATELENS] [REPS]
"""
import os
import statistics
import subprocess
import sys
import time


def copy(src, dst, kernel, sync):
    fi = os.open(src, os.O_RDONLY)
    fo = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    n, off = os.fstat(fi).st_size, 0
    buf = bytearray(8 << 20)
    while off < n:
        if kernel:
            off += os.copy_file_range(fi, fo, min(n - off, 1 << 30), off, off)
        else:
            k = os.preadv(fi, [buf], off)
            os.write(fo, memoryview(buf)[:k])
            off += k
    if sync:
        os.fsync(fo)
    os.close(fo)
    os.close(fi)


def main():
    src, out = sys.argv[1], sys.argv[2]
    statelens = sys.argv[3] if len(sys.argv) > 3 else None
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    os.makedirs(out, exist_ok=True)
    dst = os.path.join(out, "copy_floor.out")
    ways = {
        "cp": lambda: subprocess.run(["cp", src, dst], check=True),
        "copy_file_range": lambda: copy(src, dst, True, False),
        "copy_file_range + fsync": lambda: copy(src, dst, True, True),
        "pread/write 8 MB": lambda: copy(src, dst, False, False),
        "pread/write 8 MB + fsync": lambda: copy(src, dst, False, True),
    }
    if statelens:
        ways["statelens convert"] = lambda: subprocess.run(
            [statelens, "convert", src, "-o", dst + ".safetensors"], check=True, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
    times = {k: [] for k in ways}
    for i in range(reps + 1):  # the first round warms up and is not counted
        for name in (list(ways) if i % 2 == 0 else list(ways)[::-1]):
            for p in (dst, dst + ".safetensors"):
                if os.path.exists(p):
                    os.remove(p)
            os.sync()  # each way starts without the previous one's dirty pages to write back
            t0 = time.perf_counter()
            ways[name]()
            if i:
                times[name].append(time.perf_counter() - t0)
    for p in (dst, dst + ".safetensors"):
        if os.path.exists(p):
            os.remove(p)
    cp = statistics.median(times["cp"])
    for name, t in times.items():
        m = statistics.median(t)
        print(f"{name:28s} {m:7.3f} s  {m / cp:4.2f}x cp   runs {' '.join(f'{x:.2f}' for x in t)}")


if __name__ == "__main__":
    main()
