#!/usr/bin/env python3
"""Draws statelens.png, the application icon: a lens over two offset parameter columns, one row of each
highlighted, and its smaller sizes for the desktop's icon theme (hicolor/statelens-N.png, averaged down from
the 128-pixel drawing; the install puts each under share/icons/hicolor/NxN/apps). Pure Python (zlib +
struct), so it needs nothing beyond the standard library; run it again after changing the drawing and commit
the PNGs."""
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


HICOLOR_SIZES = (16, 24, 32, 48, 64)  # and 128: statelens.png itself


def downscale(px, size):
    """Area average (each target pixel is the coverage-weighted mean of the source pixels under it), with
    colours weighted by alpha so transparent pixels do not darken the edges."""
    scale = SIZE / size
    out = []
    for ty in range(size):
        row = []
        for tx in range(size):
            acc = [0.0, 0.0, 0.0, 0.0]
            area = 0.0
            y0, y1 = ty * scale, (ty + 1) * scale
            x0, x1 = tx * scale, (tx + 1) * scale
            for sy in range(int(y0), min(SIZE, math.ceil(y1))):
                wy = min(y1, sy + 1) - max(y0, sy)
                for sx in range(int(x0), min(SIZE, math.ceil(x1))):
                    w = wy * (min(x1, sx + 1) - max(x0, sx))
                    r, g, b, a = px[sy][sx]
                    acc[0] += r * a * w
                    acc[1] += g * a * w
                    acc[2] += b * a * w
                    acc[3] += a * w
                    area += w
            alpha = acc[3] / area
            if acc[3] > 0:
                rgb = tuple(min(255, round(c / acc[3])) for c in acc[:3])
            else:
                rgb = (0, 0, 0)
            row.append((*rgb, min(255, round(alpha))))
        out.append(row)
    return out


def png(px):
    size = len(px)
    raw = b"".join(b"\0" + b"".join(struct.pack("BBBB", *p) for p in row) for row in px)

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


if __name__ == "__main__":
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    drawing = draw()
    outputs = {os.path.join(here, "statelens.png"): drawing}
    for n in HICOLOR_SIZES:
        outputs[os.path.join(here, "hicolor", f"statelens-{n}.png")] = downscale(drawing, n)
    os.makedirs(os.path.join(here, "hicolor"), exist_ok=True)
    for path, px in outputs.items():
        with open(path + ".tmp", "wb") as f:  # renamed into place: never a half-written icon
            f.write(png(px))
        os.replace(path + ".tmp", path)
