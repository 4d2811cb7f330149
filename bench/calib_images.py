#!/usr/bin/python3
"""Writes N deterministic 224x224 RGB PNG images (smooth colour fields with edges and noise,
roughly natural-image statistics) into a folder, for bench/calib.sh:

    /usr/bin/python3 bench/calib_images.py OUT_DIR N [SIZE]

PNGs are written with zlib only (no imaging library needed), by tests/integration/qp_testlib.py.
"""
import os
import sys

import numpy as np

# The PNG writer is the integration tests' (tests/integration/qp_testlib.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from qp_testlib import write_png  # noqa: E402


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
        write_png(os.path.join(out, f"img{k:04d}.png"), np.clip(img, 0, 255).astype(np.uint8))


if __name__ == "__main__":
    main(sys.argv)
