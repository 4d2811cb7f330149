"""Helpers shared by the Python integration tests (data_providers.py, calibrate_small.py,
calibrate_cls.py) and bench/calib_images.py: a pass/fail tally, running the CLI, fresh output
paths, JSON reading and PNG writing (zlib only, no imaging library).

    T = Tally()
    T.check(rc == 0, f"calibrate: {rc} {err}")   # prints "FAIL: ..." when ok is false
    T.finish()                                     # "N passed, N failed"; exit 1 on any failure
"""
import json
import os
import struct
import subprocess
import sys
import zlib


class Tally:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL: {what}", flush=True)

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)


def run(*cmd):
    """Runs cmd; returns (exit code, stdout, stderr) as text."""
    p = subprocess.run(list(cmd), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def fresh(work, name):
    """WORK/name with any file of that name removed, so a refusal can be checked to write
    nothing."""
    p = os.path.join(work, name)
    if os.path.exists(p):
        os.unlink(p)
    return p


def load_json(path):
    with open(path) as f:
        return json.load(f)


def write_png(path, rgb):
    """An 8-bit RGB PNG of the uint8 array rgb [h, w, 3]."""
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
