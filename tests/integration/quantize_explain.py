#!/usr/bin/python3
"""`qplace quantize --explain` lists exactly the placement it applied: every edge and weight of
--placement_out appears once, with the same reason, and nothing else.
usage: quantize_explain.py QPLACE MODEL.onnx WORKDIR"""
import json
import os
import re
import subprocess
import sys

qplace, model, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
out = os.path.join(work, "explain.quant.onnx")
placement = os.path.join(work, "explain.placement.json")
r = subprocess.run([qplace, "quantize", "--onnx_path", model, "--output_path", out,
                    "--placement_out", placement, "--explain"],
                   capture_output=True, text=True)
if r.returncode != 0:
    sys.exit(f"quantize failed ({r.returncode}): {r.stderr}")
edge_re = re.compile(r"^  edge   (.+) -> (.+)\[(\d+)\]: (\S+)$")
weight_re = re.compile(r"^  weight (.+) -> (.+)\[(\d+)\], (?:axis (\d+)|per tensor): (\S+)$")
edges, weights = set(), set()
for line in r.stdout.splitlines():
    m = edge_re.match(line)
    if m:
        edges.add((m[1], m[2], int(m[3]), m[4]))
        continue
    m = weight_re.match(line)
    if m:
        weights.add((m[1], m[2], int(m[3]), int(m[4]) if m[4] else -1, m[5]))
p = json.load(open(placement))
want_edges = {(e["tensor"], e["node"], e["input"], e["reason"]) for e in p["edges"]}
want_weights = {(w["tensor"], w["node"], w["input"], w["axis"], w["reason"]) for w in p["weights"]}
failed = 0
if not want_edges or not want_weights:
    print("the placement is empty; the test proves nothing"); failed += 1
if edges != want_edges:
    print("edges differ:", sorted(edges ^ want_edges)[:5]); failed += 1
if weights != want_weights:
    print("weights differ:", sorted(weights ^ want_weights)[:5]); failed += 1
m = re.search(r"^placement: (\d+) activation edges, (\d+) weights", r.stdout, re.M)
if not m or (int(m[1]), int(m[2])) != (len(want_edges), len(want_weights)):
    print("header counts differ"); failed += 1
n_checks = 4
print(f"{n_checks - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
