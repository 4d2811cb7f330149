#!/usr/bin/python3
"""Real-looking calibration data for the PaddleOCR models: text lines rendered with numpy.

Each sample is one line of "words" made of glyph-like strokes (stems, bars, diagonals, bowls,
dots) in dark ink on light, slightly uneven and noisy paper, softened by a small blur (print and
scan), then preprocessed as PaddleOCR does for its recognition / orientation models:
pixels / 255, (x - 0.5) / 0.5, NCHW float32, height 48, the width past the text padded with 0.
For `cls`, every other line is turned upside down (the classifier's 180-degree class).

    /usr/bin/python3 tests/data/ocr/gen_ocr_data.py --kind rec --n 10 --out rec.npz
    /usr/bin/python3 tests/data/ocr/gen_ocr_data.py --kind cls --n 20 --out cls.npz

Output: an .npz holding only `x` (the models' input name; calibration refuses extra keys) of
shape [n, 3, 48, W] (cls W=192, rec W=320). Deterministic for a given --seed. The data is made, not shipped, because its noise does not compress (a few samples
are already > 300 KB); generating 30 samples takes well under a second.
"""
import argparse
import sys

import numpy as np

WIDTHS = {"cls": 192, "rec": 320}
H = 48


def stroke(img, x0, y0, x1, y1, thick, ink):
    n = int(max(abs(x1 - x0), abs(y1 - y0), 1) * 2)
    t = np.linspace(0.0, 1.0, n + 1)
    xs = x0 + (x1 - x0) * t
    ys = y0 + (y1 - y0) * t
    h, w = img.shape
    r = thick / 2.0
    for dy in np.arange(-r, r + 1e-6, 0.5):
        for dx in np.arange(-r, r + 1e-6, 0.5):
            xi = np.clip(np.round(xs + dx).astype(int), 0, w - 1)
            yi = np.clip(np.round(ys + dy).astype(int), 0, h - 1)
            np.minimum.at(img, (yi, xi), ink)


def glyph(img, rng, x, y0, gw, gh, thick, ink):
    for _ in range(rng.integers(2, 5)):
        r = rng.random()
        if r < 0.32:  # stem
            sx = x + rng.random() * gw
            stroke(img, sx, y0, sx, y0 + gh, thick, ink)
        elif r < 0.55:  # bar
            sy = y0 + rng.random() * gh
            stroke(img, x, sy, x + gw, sy, thick, ink)
        elif r < 0.75:  # diagonal
            if rng.random() < 0.5:
                stroke(img, x, y0 + gh, x + gw, y0, thick, ink)
            else:
                stroke(img, x, y0, x + gw, y0 + gh, thick, ink)
        elif r < 0.93:  # bowl
            cx, cy = x + gw / 2, y0 + gh * (0.35 + 0.3 * rng.random())
            rx, ry = gw / 2, gh * (0.25 + 0.15 * rng.random())
            a = np.linspace(0, 2 * np.pi, 24)
            for k in range(len(a) - 1):
                stroke(img, cx + rx * np.cos(a[k]), cy + ry * np.sin(a[k]),
                       cx + rx * np.cos(a[k + 1]), cy + ry * np.sin(a[k + 1]), thick, ink)
        else:  # dot / accent
            dx = x + rng.random() * gw
            stroke(img, dx, y0 - thick, dx, y0 - thick + 1, thick, ink)


def text_line(rng, width):
    """A grey image H x width (0..255) holding one text line, and the text's right edge."""
    xs = np.arange(width)[None, :]
    ys = np.arange(H)[:, None]
    paper = 232 + 14 * rng.random() + 6 * np.sin(xs / (40 + 60 * rng.random()) + ys / 30.0)
    img = (paper + rng.normal(0, 3.0, (H, width))).astype(np.float64)
    gh = int(rng.integers(22, 32))
    gw = int(round(gh * (0.5 + 0.2 * rng.random())))
    thick = max(1.5, gh / 9.0)
    y0 = (H - gh) / 2 + rng.normal(0, 1.5)
    x = 3 + rng.random() * 6
    end = width * (0.55 + 0.45 * rng.random()) - 3
    base_ink = 15 + 50 * rng.random()
    while x + gw < end:
        for _ in range(rng.integers(2, 8)):
            if x + gw >= end:
                break
            glyph(img, rng, x, y0 + rng.normal(0, 0.6), gw, gh, thick, base_ink + 15 * rng.random())
            x += gw + thick + 1 + 2 * rng.random()
        x += gw * (0.5 + 0.6 * rng.random())
    # Print/scan blur: a 3x3 box blur mixed with the sharp image.
    p = np.pad(img, 1, mode="edge")
    blur = sum(p[dy:dy + H, dx:dx + width] for dy in range(3) for dx in range(3)) / 9.0
    img = 0.5 * img + 0.5 * blur
    return np.clip(np.round(img), 0, 255), int(min(width, x + 4))


def sample(rng, kind):
    width = WIDTHS[kind]
    img, text_end = text_line(rng, width)
    tint = 1.0 + rng.normal(0, 0.02, 3)  # slight colour cast of a scan or photo
    rgb = np.clip(img[None, :, :] * tint[:, None, None], 0, 255)
    x = (rgb / 255.0 - 0.5) / 0.5
    rotated = 0
    if kind == "rec":
        x[:, :, text_end:] = 0.0  # PaddleOCR pads past the resized text with zeros
    elif rng.random() < 0.5:
        x = x[:, ::-1, ::-1]
        rotated = 1
    return x.astype(np.float32), rotated


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kind", choices=sorted(WIDTHS), required=True)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if a.n < 1 or a.n > 10000:
        ap.error("--n must be in 1..10000")
    rng = np.random.default_rng(a.seed)
    xs, rot = zip(*(sample(rng, a.kind) for _ in range(a.n)))
    np.savez(a.out, x=np.stack(xs))
    print(f"{a.out}: x {a.n}x3x{H}x{WIDTHS[a.kind]}, {sum(rot)} lines upside down")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
