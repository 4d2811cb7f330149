#!/usr/bin/python3
"""Writes the JPEG seeds of fuzz_image into fuzz/corpus/image (python3-pil): baseline, progressive,
grayscale, CMYK (refused as unsupported), 4:2:0 subsampled and restart-marker JPEGs, all tiny.
The PNG seeds are tests/data/images' (gen_images.py)."""
import os

from PIL import Image

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "image")
img = Image.new("RGB", (9, 7))
for y in range(7):
    for x in range(9):
        img.putpixel((x, y), (x * 28, y * 36, (x * y * 7) % 256))
img.save(os.path.join(here, "baseline.jpg"), quality=90)
img.save(os.path.join(here, "progressive.jpg"), quality=75, progressive=True)
img.save(os.path.join(here, "subsampled.jpg"), quality=50, subsampling=2)
img.convert("L").save(os.path.join(here, "gray.jpg"), quality=80)
img.convert("CMYK").save(os.path.join(here, "cmyk.jpg"), quality=80)
img.resize((33, 17)).save(os.path.join(here, "restart.jpg"), quality=60, restart_marker_blocks=1)
