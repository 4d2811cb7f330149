#!/usr/bin/python3
"""Writes the small PNG test images in this folder (PIL is not needed: PNG chunks are written
by hand with zlib). JPEG test images are made by the tests themselves with libjpeg.

    /usr/bin/python3 tests/data/images/gen_images.py

Pixel formulas (the tests check against them):
    r(y, x) = 16 * (4y + x)          g(y, x) = 255 - r(y, x)          b(y, x) = 40y + 10x
"""
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def chunk(kind, data):
    c = struct.pack(">I", len(data)) + kind + data
    return c + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(w, h, depth, color_type, rows, plte=None, trns=None):
    raw = b"".join(b"\x00" + r for r in rows)  # filter type 0 on every row
    out = b"\x89PNG\r\n\x1a\n"
    out += chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 0))
    if plte:
        out += chunk(b"PLTE", plte)
    if trns:
        out += chunk(b"tRNS", trns)
    out += chunk(b"IDAT", zlib.compress(raw, 9))
    return out + chunk(b"IEND", b"")


def rgb(y, x):
    r = 16 * (4 * y + x)
    return r, 255 - r, 40 * y + 10 * x


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def main():
    rows = [bytes(v for x in range(4) for v in rgb(y, x)) for y in range(4)]
    write("rgb8_4x4.png", png(4, 4, 8, 2, rows))
    write("rgba8_4x4.png",
          png(4, 4, 8, 6, [bytes(v for x in range(4) for v in rgb(y, x) + (17 * x,))
                           for y in range(4)]))
    write("gray8_4x4.png", png(4, 4, 8, 0, [bytes(16 * (4 * y + x) for x in range(4))
                                             for y in range(4)]))
    # 16-bit: sample = 256 * v, read back as 256 * v / 257
    write("rgb16_4x4.png",
          png(4, 4, 16, 2, [b"".join(struct.pack(">H", 256 * v) for x in range(4)
                                     for v in rgb(y, x)) for y in range(4)]))
    # palette of 4 colours, index (x + y) % 4, with a tRNS chunk (alpha is dropped)
    pal = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (10, 20, 30)]
    write("palette_4x4.png",
          png(4, 4, 8, 3, [bytes((x + y) % 4 for x in range(4)) for y in range(4)],
              plte=b"".join(bytes(c) for c in pal), trns=b"\x80"))
    # 4 wide, 2 high, for keep-ratio resizing
    write("rgb8_4x2.png", png(4, 2, 8, 2, rows[:2]))
    full = png(4, 4, 8, 2, rows)
    write("truncated.png", full[:len(full) // 2 + 8])
    bad = bytearray(full)
    idat = bad.find(b"IDAT")
    bad[idat + 6] ^= 0xFF  # corrupt compressed data; the CRC no longer matches either
    write("badcrc.png", bytes(bad))
    write("notimage.png", b"this is not an image\n")
    # a folder: three 4x4 images whose red channel at (0, 0) tells them apart, plus a
    # non-image file that the provider skips
    for name, red in (("b.png", 2), ("a.png", 1), ("c.png", 3)):
        r = [bytes(v if i % 3 else (red if (y, i) == (0, 0) else v)
                   for i, v in enumerate(row)) for y, row in enumerate(rows)]
        write(os.path.join("folder", name), png(4, 4, 8, 2, r))
    write(os.path.join("folder", "notes.txt"), b"skipped\n")


if __name__ == "__main__":
    main()
