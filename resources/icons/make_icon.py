#!/usr/bin/env python3
"""Draws statelens.png, the application icon: a lens over two offset parameter columns, one row of each
highlighted. Pure Python (zlib + struct), so it needs nothing beyond the standard library; run it again
after changing the drawing and commit the PNG."""
import math
import struct
import zlib

SIZE = 128


def blend(dst, src, a):
    return tuple(round(d * (1 - a) + s * a) for d, s in zip(dst, src))


def draw():
    px = [[(0, 0, 0, 0)] * SIZE for _ in range(SIZE)]

    def put(x, y, rgb, a=1.0):
        if 0 <= x < SIZE and 0 <= y < SIZE:
            r, g, b, al = px[y][x]
            base = (r, g, b) if al else rgb
            out = blend(base, rgb, a)
            px[y][x] = (*out, max(al, round(255 * a)))

    # rounded background tile
    for y in range(SIZE):
        for x in range(SIZE):
            dx = max(12 - x, 0, x - (SIZE - 13))
            dy = max(12 - y, 0, y - (SIZE - 13))
            d = math.hypot(dx, dy)
            if d <= 12:
                put(x, y, (38, 50, 56), min(1.0, 12.5 - d))
    # two columns of rows (A and B), one row differing
    for col, x0 in ((0, 22), (1, 68)):
        for i in range(6):
            y0 = 24 + i * 14
            colour = (120, 144, 156)
            if i == 3:
                colour = (239, 83, 80) if col == 0 else (171, 71, 188)
            if col == 1 and i == 1:
                colour = (66, 165, 245)
            for y in range(y0, y0 + 8):
                for x in range(x0, x0 + 38):
                    put(x, y, colour)
    # the lens: a ring and a handle
    cx, cy, r = 70, 66, 26
    for y in range(SIZE):
        for x in range(SIZE):
            d = math.hypot(x - cx, y - cy)
            if abs(d - r) <= 4:
                put(x, y, (255, 183, 77), min(1.0, 4.5 - abs(d - r)))
            elif d < r - 4:
                put(x, y, (255, 255, 255), 0.18)
    for t in range(0, 260):
        s = t / 10
        x = cx + (r + 2 + s) * math.cos(math.pi / 4)
        y = cy + (r + 2 + s) * math.sin(math.pi / 4)
        for ox in range(-5, 6):
            for oy in range(-5, 6):
                if ox * ox + oy * oy <= 25:
                    put(int(x + ox), int(y + oy), (255, 183, 77))
    return px


def png(px):
    raw = b"".join(b"\0" + b"".join(struct.pack("BBBB", *p) for p in row) for row in px)

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", SIZE, SIZE, 8, 6, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


if __name__ == "__main__":
    import os
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "statelens.png"), "wb") as f:
        f.write(png(draw()))
