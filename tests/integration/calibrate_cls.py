#!/usr/bin/python3
"""`qplace calibrate` on the real PaddleOCR cls model, checked against ONNX Runtime.

    calibrate_cls.py QPLACE MODELS_DIR NPM_DIR DATA_DIR WORK_DIR

The committed calibrate_data/cls.npz (6 text-line images) is calibrated with the max method in
3 batches of 2 (no Concat grouping, so every range is the tensor's own). Independently, the
model is rewritten with every float intermediate as a graph output and run in ONNX Runtime
(calibrate_ort.js) on the same batches; every range qplace wrote must match ORT's min/max
(rtol 1e-4, atol 1e-4 * max(1, amax)), and every float tensor consumed by a node must have a
range. Then entropy with a TensorRT cache: the cache has one line per range. A missing model
or ONNX Runtime skips (exit 77), or fails when QP_REQUIRE_REAL_MODELS=1.
"""
import json
import os
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

from qp_testlib import Tally, load_json, run

QPLACE, MODELS, NPM, DATA, WORK = sys.argv[1:6]
MODEL = os.path.join(MODELS, "ch_ppocr_mobile_v2.0_cls_infer.onnx")
ORT = os.path.join(NPM, "node_modules", "onnxruntime-node")
NODE = "/usr/bin/node"
for need in (MODEL, ORT, NODE):
    if not os.path.exists(need):
        print(f"{need} missing (run scripts/setup.sh)")
        sys.exit(1 if os.environ.get("QP_REQUIRE_REAL_MODELS") == "1" else 77)
os.makedirs(WORK, exist_ok=True)
T = Tally()
check = T.check


x = np.load(os.path.join(DATA, "cls.npz"))["x"]
shapes = ["--calibration_shapes", "x:2x3x48x192"]
out = os.path.join(WORK, "cls.max.json")
rc, _, err = run(QPLACE, "calibrate", "--onnx_path", MODEL, "--calibration_data_path",
                 os.path.join(DATA, "cls.npz"), "--calibration_method", "max", "--no_group_concat",
                 *shapes, "--output_path", out, "--quiet")
check(rc == 0, f"calibrate max: exit {rc}: {err}")
if rc:
    T.finish()
mine = {t["name"]: t for t in load_json(out)["tensors"]}

# Every float intermediate as a graph output, for ORT.
m = onnx.load(MODEL)
inferred = onnx.shape_inference.infer_shapes(m)
types = {vi.name: vi.type.tensor_type.elem_type
         for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
outputs = {o.name for o in m.graph.output}
consumed = {i for n in m.graph.node for i in n.input}
constant = {o for n in m.graph.node if n.op_type == "Constant" for o in n.output}
float_acts = set()
for n in m.graph.node:
    for o in n.output:
        if o and o not in constant and types.get(o) == TensorProto.FLOAT:
            if o in consumed:
                float_acts.add(o)
            if o not in outputs:
                m.graph.output.append(helper.make_tensor_value_info(o, TensorProto.FLOAT, None))
                outputs.add(o)
all_path = os.path.join(WORK, "cls_all_outputs.onnx")
onnx.save(m, all_path)
bin_path = os.path.join(WORK, "cls_x.bin")
x.astype("<f4").tofile(bin_path)
ort_js = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calibrate_ort.js")
rc, so, err = run(NODE, ort_js, NPM, all_path, bin_path, "x", ",".join(map(str, x.shape)), "2")
check(rc == 0, f"ORT run: {err}")
ort = json.loads(so) if rc == 0 else {}
ort["x"] = [float(x.min()), float(x.max())]

compared = 0
for name, t in mine.items():
    if name not in ort:
        check(False, f"{name}: has a range but ORT gave no float output for it")
        continue
    lo, hi = ort[name]
    amax = max(abs(lo), abs(hi))
    tol = 1e-4 * max(1.0, amax)
    ok = abs(t["lo"] - lo) <= tol + 1e-4 * abs(lo) and abs(t["hi"] - hi) <= tol + 1e-4 * abs(hi)
    check(ok, f"{name}: qplace [{t['lo']}, {t['hi']}] vs ORT [{lo}, {hi}]")
    compared += 1
missing = sorted(float_acts - set(mine))
check(not missing, f"float activations without a range: {missing[:10]}")
check(compared >= 150, f"only {compared} tensors compared")
check(mine["x"]["n_values"] == x.size, "input value count")

# Entropy + TensorRT cache on the same data.
jo, co = os.path.join(WORK, "cls.entropy.json"), os.path.join(WORK, "cls.entropy.cache")
rc, _, err = run(QPLACE, "calibrate", "--onnx_path", MODEL, "--calibration_data_path",
                 os.path.join(DATA, "cls.npz"), *shapes, "--output_path", jo, "--trt_cache_out", co)
check(rc == 0, f"calibrate entropy: {err}")
if rc == 0:
    ent = load_json(jo)
    lines = open(co).read().splitlines()
    check(lines[0] == "TRT-8601-EntropyCalibration2", f"header {lines[0]}")
    check(len(lines) == len(ent["tensors"]) + 1, "one cache line per tensor")
    for t, line in zip(ent["tensors"], lines[1:]):
        name, h = line.rsplit(": ", 1)
        s = struct.unpack(">f", bytes.fromhex(h))[0]
        check(name == t["name"] and np.float32(s) == np.float32(t["scale"]), f"cache {line}")
    for t in ent["tensors"]:
        if t["name"] in mine and not t["name"].startswith("softmax"):
            # Grouping may widen a range; entropy never exceeds the group's max.
            check(t["amax"] > 0, f"entropy {t['name']} amax {t['amax']}")
    print(f"cls: {compared} ranges equal to ORT's, {len(ent['tensors'])} entropy ranges")

T.finish()
