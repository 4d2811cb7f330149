#!/usr/bin/env python3
"""Fails when an #include in src/ points up or sideways in the module order of src/modules.txt,
when a folder of src/ is not in that order, or when a file outside src/onnx includes the
generated protobuf header (onnx.pb-c.h). Prints every offence as FILE:LINE: message.
Usage: scripts/check_layering.py [ROOT]   (exit 0: clean, 1: offences, 2: bad modules.txt)"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
PROTOBUF = "onnx.pb-c.h"


def read_order(path):
    rank = {}
    with open(path, encoding="utf-8") as f:
        for layer, line in enumerate(l for l in f if l.strip() and not l.lstrip().startswith("#")):
            for mod in line.split():
                if mod in rank:
                    raise ValueError(f"{path}: module {mod} listed twice")
                rank[mod] = layer
    return rank


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    src = os.path.join(root, "src")
    try:
        rank = read_order(os.path.join(src, "modules.txt"))
    except (OSError, ValueError) as e:
        print(f"check_layering: {e}")
        return 2
    bad = []
    folders = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    for d in folders:
        if d not in rank:
            bad.append(f"src/{d}: folder not in src/modules.txt (add it to the module order)")
    n_files = n_includes = 0
    for d in folders:
        for dirpath, _, files in os.walk(os.path.join(src, d)):
            for name in sorted(files):
                if not name.endswith((".c", ".h", ".def")) or ".pb-c." in name:
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                n_files += 1
                with open(path, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        n_includes += 1
                        inc = m.group(1)
                        if os.path.basename(inc) == PROTOBUF:
                            if d != "onnx":
                                bad.append(f"{rel}:{lineno}: includes {inc}: only src/onnx may see protobuf structs")
                            continue
                        target = inc.split("/")[0] if "/" in inc else None
                        if target is None or target == "qplace" or target == d or target not in rank:
                            continue  # own folder, public API, or not a module path
                        if d in rank and rank[target] >= rank[d]:
                            how = "sideways" if rank[target] == rank[d] else "up"
                            bad.append(f"{rel}:{lineno}: {d} includes {inc}: points {how} in src/modules.txt")
    for b in bad:
        print(b)
    print(f"check_layering: {n_files} files, {n_includes} includes, {len(bad)} offence(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
