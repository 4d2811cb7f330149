#!/usr/bin/python3
"""Writes N deterministic 224x224 RGB PNG images (smooth colour fields with edges and noise,
roughly natural-image statistics) into a folder, for bench/calib.sh:

    /usr/bin/python3 bench/calib_images.py OUT_DIR N [SIZE]

PNGs are written with zlib only (no imaging library needed).
"""
import os
import struct
import sys
import zlib

import numpy as np


def png(path, rgb):
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind, data):
        c = struct.pack(">I", len(data)) + kind + data
        return c + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 6)))
        f.write(chunk(b"IEND", b""))


def main(argv):
    out, n = argv[1], int(argv[2])
    size = int(argv[3]) if len(argv) > 3 else 224
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(2024)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    for k in range(n):
        img = np.zeros((size, size, 3), np.float32)
        for c in range(3):
            a, b, p = rng.uniform(-3, 3, 3)
            img[..., c] = 128 + 80 * np.sin(a * xx * 3 + b * yy * 3 + p)
        for _ in range(4):  # a few hard-edged blobs
            cx, cy, r = rng.uniform(0, 1, 3) * [1, 1, 0.3]
            mask = (xx - cx) ** 2 + (yy - cy) ** 2 < r * r
            img[mask] = rng.uniform(0, 255, 3)
        img += rng.normal(0, 6, img.shape)
        png(os.path.join(out, f"img{k:04d}.png"), np.clip(img, 0, 255).astype(np.uint8))


if __name__ == "__main__":
    main(sys.argv)
