#!/usr/bin/env python3
"""png_edges.py FILE...: fail when a plot touches its image's edge.

gnuplot clips at the canvas, so a label too long for its margin ends in
non-background pixels on the edge row or column it was cut at. Prints one
line per image that does, naming the edge, and exits 1; exits 0 when every
image keeps a band of background (the corner pixel's colour) along all four
edges. Reads 8-bit RGB or RGBA PNGs (what gnuplot's pngcairo writes) with
the standard library only.
"""
import struct
import sys
import zlib

BAND = 2  # pixels along each edge that must be background


def decode(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            if depth != 8 or ctype not in (2, 6) or body[12] != 0:
                raise ValueError(f"unsupported PNG (depth {depth}, colour type {ctype}, interlace {body[12]})")
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif f == 2:
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 255
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pr = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pr) & 255
        rows.append(line)
        prev = line
    return w, h, bpp, rows


def main(paths):
    bad = 0
    for path in paths:
        w, h, bpp, rows = decode(path)
        px = lambda x, y: bytes(rows[y][x * bpp:x * bpp + 3])
        bg = px(0, 0)
        edges = {"bottom": [(x, y) for y in range(h - BAND, h) for x in range(w)],
                 "right": [(x, y) for x in range(w - BAND, w) for y in range(h)],
                 "top": [(x, y) for y in range(BAND) for x in range(w)],
                 "left": [(x, y) for x in range(BAND) for y in range(h)]}
        for name, points in edges.items():
            hit = [p for p in points if px(*p) != bg]
            if hit:
                print(f"{path}: the plot reaches the {name} edge ({len(hit)} pixels, the first at x {hit[0][0]}, "
                      f"y {hit[0][1]}): something is cut off there")
                bad = 1
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
