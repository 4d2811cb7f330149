#!/usr/bin/python3
"""`qplace calibrate` end to end on tests/integration/calibrate_data/small.onnx.

    calibrate_small.py QPLACE DATA_DIR WORK_DIR

The expected ranges are computed here, independently, with numpy (the model is a Conv, Relu,
Concat, Mul, ReduceMean, Softmax chain whose weights are read from the file), over the 16 samples
of small.npz in 4 batches. Checks: max ranges with and without Concat grouping, the Softmax pin,
NaN/Inf counts and warnings, the refusals (pickled, wrong keys, dtype, rank, over the byte cap,
bad shapes, a malformed TensorRT cache: exit 2 with the message, no output written), the
TensorRT cache round trip, progress lines and --quiet, synthetic data marking. Prints
"N passed, N failed" and exits 1 on any failure.
"""
import json
import os
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from qp_testlib import Tally, fresh, load_json as load, run as run_cmd

QPLACE, DATA, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(WORK, exist_ok=True)
MODEL = os.path.join(DATA, "small.onnx")
T = Tally()
check = T.check


def run(*args):
    return run_cmd(QPLACE, "calibrate", *args)


def out_path(name):
    return fresh(WORK, name)


# ---- the independent reference -------------------------------------------------------------
m = onnx.load(MODEL)
inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
W, B, TWO = inits["w"].astype(np.float64), inits["b"].astype(np.float64), float(inits["two"])


def forward(x):
    x = x.astype(np.float64)
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((n, W.shape[0], h, w))
    for o in range(W.shape[0]):
        for i in range(c):
            for dy in range(3):
                for dx in range(3):
                    conv[:, o] += W[o, i, dy, dx] * xp[:, i, dy:dy + h, dx:dx + w]
        conv[:, o] += B[o]
    relu = np.maximum(conv, 0)
    cat = np.concatenate([relu, x], axis=1)
    mul = cat * TWO
    pooled = mul.mean(axis=(2, 3))
    e = np.exp(pooled - pooled.max(axis=1, keepdims=True))
    prob = e / e.sum(axis=1, keepdims=True)
    return {"input": x, "conv_out": conv, "relu_out": relu, "cat_out": cat, "mul_out": mul,
            "pooled": pooled, "prob": prob}


X = np.load(os.path.join(DATA, "small.npz"))["input"]
ref = {}
for k in range(4):  # batches of 4, as --calibration_shapes input:4x2x4x4 cuts them
    for name, v in forward(X[4 * k:4 * k + 4]).items():
        lo, hi = float(v.min()), float(v.max())
        if name in ref:
            lo, hi = min(lo, ref[name][0]), max(hi, ref[name][1])
        ref[name] = (lo, hi)
ORDER = ["input", "conv_out", "relu_out", "cat_out", "mul_out", "pooled", "prob"]


def close(a, b, rtol=1e-5, atol=1e-6):
    return abs(a - b) <= atol + rtol * abs(b)


def expect(grouped):
    e = {n: [ref[n][0], ref[n][1]] for n in ORDER}
    if grouped:  # Concat inputs and output share min lo, max hi
        g = ["relu_out", "input", "cat_out"]
        lo, hi = min(e[n][0] for n in g), max(e[n][1] for n in g)
        for n in g:
            e[n] = [lo, hi]
    e["prob"] = [0.0, 1.0]
    return {n: (lo, hi, max(abs(lo), abs(hi))) for n, (lo, hi) in e.items()}


SHAPES = ["--calibration_shapes", "input:4x2x4x4"]
NPZ = os.path.join(DATA, "small.npz")

# ---- max ranges, grouped and not ------------------------------------------------------------
for grouped in (True, False):
    o = out_path(f"max_{grouped}.json")
    rc, so, se = run("--onnx_path", MODEL, "--calibration_data_path", NPZ, "--calibration_method",
                     "max", *SHAPES, "--output_path", o,
                     *([] if grouped else ["--no_group_concat"]))
    check(rc == 0, f"max grouped={grouped}: exit {rc}: {se}")
    if rc:
        continue
    j = load(o)
    check([t["name"] for t in j["tensors"]] == ORDER, f"tensor order {[t['name'] for t in j['tensors']]}")
    check(j["method"] == "max" and j["calibration_source"] == "npz" and j["num_samples"] == 16,
          f"meta {j['method']} {j['calibration_source']} {j['num_samples']}")
    exp = expect(grouped)
    for t in j["tensors"]:
        lo, hi, amax = exp[t["name"]]
        ok = close(t["lo"], lo) and close(t["hi"], hi) and close(t["amax"], amax)
        check(ok, f"grouped={grouped} {t['name']}: got [{t['lo']}, {t['hi']}] amax {t['amax']}, "
                  f"expected [{lo}, {hi}] amax {amax}")
        want_scale = np.float32(np.float32(t["amax"]) / np.float32(127))
        check(np.float32(t["scale"]) == want_scale, f"{t['name']}: scale {t['scale']} != amax/127")
        check(t["n_nan"] == 0 and t["n_inf"] == 0, f"{t['name']}: non-finite counts")
    check(j["tensors"][0]["n_values"] == X.size, f"input n_values {j['tensors'][0]['n_values']}")

# ---- entropy and percentile run and stay inside the max range ---------------------------------
for method in ("entropy", "percentile"):
    o = out_path(f"{method}.json")
    extra = ["--percentile", "99"] if method == "percentile" else []
    rc, so, se = run("--onnx_path", MODEL, "--calibration_data_path", NPZ, "--calibration_method",
                     method, *extra, *SHAPES, "--output_path", o, "--no_group_concat")
    check(rc == 0, f"{method}: exit {rc}: {se}")
    if rc == 0:
        j = load(o)
        exp = expect(False)
        for t in j["tensors"]:
            check(t["amax"] <= exp[t["name"]][2] * (1 + 1e-6) and t["amax"] > 0,
                  f"{method} {t['name']}: amax {t['amax']} outside (0, {exp[t['name']][2]}]")
        if method == "percentile":
            check(j["percentile"] == 99, "percentile recorded")
            # 99th percentile of |x| over 512 values: well below the 4.5 outlier of the input.
            check(j["tensors"][0]["amax"] < 4.0, f"percentile input amax {j['tensors'][0]['amax']}")

# ---- NaN / Inf -----------------------------------------------------------------------------
o = out_path("nan.json")
rc, so, se = run("--onnx_path", MODEL, "--calibration_data_path", os.path.join(DATA, "small_nan.npz"),
                 "--calibration_method", "max", *SHAPES, "--output_path", o, "--no_group_concat")
check(rc == 0, f"nan: exit {rc}")
if rc == 0:
    t = load(o)["tensors"][0]
    check(t["n_nan"] == 3 and t["n_inf"] == 2, f"input counts nan {t['n_nan']} inf {t['n_inf']}")
    check(t["n_values"] == X.size - 5, f"input finite values {t['n_values']}")
    Xf = np.load(os.path.join(DATA, "small_nan.npz"))["input"]
    fin = Xf[np.isfinite(Xf)]
    check(close(t["lo"], float(fin.min())) and close(t["hi"], float(fin.max())),
          f"input range with NaN: [{t['lo']}, {t['hi']}]")
    check("tensor 'input': 3 NaN and 2 Inf" in se, f"NaN warning missing: {se}")

# ---- refusals: exit 2, the message, no output -------------------------------------------------
refusals = [
    (["--calibration_data_path", os.path.join(DATA, "bad_pickled.npz")], "pickled"),
    (["--calibration_data_path", os.path.join(DATA, "bad_keys.npz")], "key 'inputs' is not an input"),
    (["--calibration_data_path", os.path.join(DATA, "bad_dtype.npz")], "is double, the model takes float"),
    (["--calibration_data_path", os.path.join(DATA, "bad_rank.npz")], "has rank 3, the model takes rank 4"),
    (["--calibration_data_path", NPZ, "--max_calibration_bytes", "1K"], "over the limit"),
    (["--calibration_data_path", NPZ, "--calibration_shapes", "input:4x3x4x4"], "input"),
    (["--calibration_data_path", NPZ, "--calibration_shapes", "other:4x2x4x4"],
     "'other', which is not an input"),
    (["--calibration_data_path", os.path.join(WORK, "does-not-exist.npz")], "does-not-exist"),
]
for extra, msg in refusals:
    o = out_path("refused.json")
    rc, so, se = run("--onnx_path", MODEL, *extra, "--output_path", o)
    check(rc == 2 and msg in se, f"refusal {extra}: exit {rc}, stderr {se!r}, wanted {msg!r}")
    check(not os.path.exists(o), f"refusal {extra} wrote {o}")
rc, so, se = run("--onnx_path", MODEL, "--calibration_method", "median")
check(rc == 1 and "median" in se, f"bad method: exit {rc} {se!r}")
rc, so, se = run("--onnx_path", MODEL, "--percentile", "99")
check(rc == 1 and "--percentile needs" in se, f"--percentile without percentile: {rc} {se!r}")
rc, so, se = run("--trt_cache_in", os.path.join(DATA, "bad_line.cache"), "--output_path",
                 out_path("bad_cache.json"))
check(rc == 2 and "bad_line.cache:3:" in se, f"bad cache: exit {rc} {se!r}")
check(not os.path.exists(os.path.join(WORK, "bad_cache.json")), "bad cache wrote output")

# ---- --placement_in: only the placement's activation tensors ---------------------------------
pl = os.path.join(WORK, "placement.json")
with open(pl, "w") as f:
    json.dump({"format": "qplace.placement", "version": 1,
               "edges": [{"tensor": "input", "node": "conv", "input": 0, "reason": "trt.conv_input"},
                         {"tensor": "pooled", "node": "softmax", "input": 0, "reason": "user.rule:1"}],
               "weights": [{"tensor": "w", "node": "conv", "input": 1, "axis": 0,
                            "reason": "trt.conv_weight"}]}, f)
o = out_path("placement.ranges.json")
rc, so, se = run("--onnx_path", MODEL, "--calibration_data_path", NPZ, "--calibration_method", "max",
                 *SHAPES, "--placement_in", pl, "--output_path", o)
check(rc == 0, f"placement: exit {rc} {se}")
if rc == 0:
    t = load(o)["tensors"]
    check([x["name"] for x in t] == ["input", "pooled"], f"placement tensors {[x['name'] for x in t]}")
    for x in t:
        lo, hi = ref[x["name"]]
        check(close(x["lo"], lo) and close(x["hi"], hi), f"placement {x['name']} range")
with open(pl, "w") as f:
    json.dump({"format": "qplace.placement", "version": 1, "edges": [
        {"tensor": "pooled", "node": "nosuch", "input": 0, "reason": "user.rule:1"}], "weights": []}, f)
rc, so, se = run("--onnx_path", MODEL, "--placement_in", pl, "--output_path", out_path("pl_bad.json"))
check(rc == 2 and "'nosuch'" in se and not os.path.exists(os.path.join(WORK, "pl_bad.json")),
      f"bad placement: {rc} {se!r}")

# ---- an output that would replace an input is refused; the model stays as it was ---------------
before = open(MODEL, "rb").read()
rc, so, se = run("--onnx_path", MODEL, "--calibration_data_path", NPZ, "--output_path", MODEL)
check(rc == 1 and "would replace an input" in se, f"output over the model: {rc} {se!r}")
check(open(MODEL, "rb").read() == before, "the model was modified")
o = out_path("same.json")
rc, so, se = run("--onnx_path", MODEL, "--output_path", o, "--trt_cache_out", o)
check(rc == 1 and "same file" in se and not os.path.exists(o), f"same outputs: {rc} {se!r}")

# ---- TensorRT cache round trip ----------------------------------------------------------------
j1, c1 = out_path("rt1.json"), out_path("rt1.cache")
rc, so, se = run("--onnx_path", MODEL, "--calibration_data_path", NPZ, "--calibration_method",
                 "max", *SHAPES, "--output_path", j1, "--trt_cache_out", c1, "--quiet")
check(rc == 0 and so == "" and se == "", f"--quiet: exit {rc}, stdout {so!r}, stderr {se!r}")
if rc == 0:
    lines = open(c1).read().split("\n")
    check(lines[0] == "TRT-8601-MinMaxCalibration" and lines[-1] == "", f"cache header {lines[0]!r}")
    ranges = load(j1)["tensors"]
    for t, line in zip(ranges, lines[1:]):
        name, hexv = line.rsplit(": ", 1)
        scale = struct.unpack(">f", bytes.fromhex(hexv))[0]
        check(name == t["name"] and np.float32(scale) == np.float32(t["scale"]),
              f"cache line {line!r} vs {t['name']} scale {t['scale']}")
    j2, c2 = out_path("rt2.json"), out_path("rt2.cache")
    rc, so, se = run("--trt_cache_in", c1, "--output_path", j2, "--trt_cache_out", c2)
    check(rc == 0, f"cache in: exit {rc} {se}")
    if rc == 0:
        check(open(c1).read() == open(c2).read(), "cache -> JSON -> cache changed the bytes")
        back = load(j2)
        check(back["calibration_source"] == "trt_cache" and back["method"] == "max",
              f"cache meta {back['calibration_source']} {back['method']}")
        for a, b in zip(ranges, back["tensors"]):
            check(a["name"] == b["name"] and np.float32(a["scale"]) == np.float32(b["scale"]) and
                  close(b["amax"], a["amax"], rtol=2e-7, atol=0),
                  f"round trip {a['name']}: amax {a['amax']} -> {b['amax']}")

# ---- progress lines (stderr is not a terminal here) and synthetic data -------------------------
o = out_path("progress.json")
rc, so, se = run("--onnx_path", MODEL, "--calibration_data_path", NPZ, *SHAPES, "--output_path", o)
check(rc == 0 and "calibrate: 8/16 samples (50%)" in se and "calibrate: 16 samples in" in se
      and "\r" not in se, f"progress lines: {se!r}")
check("wrote 7 ranges (entropy, 16 samples)" in so, f"summary: {so!r}")
o = out_path("synthetic.json")
rc, so, se = run("--onnx_path", MODEL, "--output_path", o, "--no_group_concat")
check(rc == 0 and "synthetic" in se and "warning" in se, f"synthetic warning: {rc} {se!r}")
if rc == 0:
    j = load(o)
    check(j["calibration_source"] == "synthetic" and j["num_samples"] == 1,
          f"synthetic meta {j['calibration_source']} {j['num_samples']}")
    # uniform [0, 1) inputs
    check(0 <= j["tensors"][0]["lo"] and j["tensors"][0]["hi"] < 1, "synthetic input range")

# ---- a placement edge on a tensor the engine computes when it plans (ModelOpt #2123's
# Cast -> Sqrt of a shape value): its range is its value's, in calibrate and in quantize, and
# the written model keeps exactly the placement -------------------------------------------------
pt_model = os.path.join(WORK, "plan_time.onnx")
g = helper.make_graph(
    [helper.make_node("Shape", ["x"], ["shape"], name="shape_of"),
     helper.make_node("Gather", ["shape", "last"], ["dim"], name="gather_dim", axis=0),
     helper.make_node("Cast", ["dim"], ["dimf"], name="cast_dim", to=TensorProto.FLOAT),
     helper.make_node("Sqrt", ["dimf"], ["root"], name="sqrt_dim"),
     helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
     helper.make_node("Div", ["mm", "root"], ["y"], name="div")],
    "plan_time",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])],
    [numpy_helper.from_array(np.array(2, dtype=np.int64), "last"),
     numpy_helper.from_array(np.linspace(-1, 1, 128, dtype=np.float32).reshape(16, 8), "w")])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), pt_model)
pl = os.path.join(WORK, "plan_time_placement.json")
with open(pl, "w") as f:
    json.dump({"format": "qplace.placement", "version": 1,
               "edges": [{"tensor": "x", "node": "mm", "input": 0, "reason": "trt.matmul_input"},
                         {"tensor": "dimf", "node": "sqrt_dim", "input": 0, "reason": "user"}],
               "weights": [{"tensor": "w", "node": "mm", "input": 1, "axis": 1,
                            "reason": "trt.matmul_weight"}]}, f)
for method in ("max", "entropy", "percentile"):
    o = out_path(f"plan_time_{method}.json")
    extra = ["--percentile", "99.9"] if method == "percentile" else []
    rc, so, se = run("--onnx_path", pt_model, "--placement_in", pl, "--calibration_method", method,
                     *extra, "--output_path", o)
    check(rc == 0, f"plan-time tensor, {method}: exit {rc} {se!r}")
    if rc == 0:
        r = {x["name"]: x for x in load(o)["tensors"]}
        check(sorted(r) == ["dimf", "x"] and r["dimf"]["lo"] == 16 and r["dimf"]["hi"] == 16,
              f"plan-time tensor range, {method}: {r.get('dimf')}")
q = out_path("plan_time_q.onnx")
rc, so, se = run_cmd(QPLACE, "quantize", "--onnx_path", pt_model, "--output_path", q,
                     "--placement_in", pl, "--high_precision_dtype", "fp32")
check(rc == 0, f"quantize with a plan-time edge: exit {rc} {se!r}")
if rc == 0:
    qs = {n.input[0]: n for n in onnx.load(q).graph.node if n.op_type == "QuantizeLinear"}
    inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(q).graph.initializer}
    check("dimf" in qs and abs(float(inits[qs["dimf"].input[1]]) - 16 / 127) < 1e-6,
          f"Q on the plan-time edge: {sorted(qs)}")
    rc, so, se = run_cmd(QPLACE, "diff", pl, q)
    check(rc == 0 and "result: SAME" in so, f"diff placement / written: {rc} {so!r} {se!r}")

T.finish()
