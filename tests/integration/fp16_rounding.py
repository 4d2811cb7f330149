#!/usr/bin/python3
"""float16 models run with their float16 tensors held as float32 and rounded after every node
(src/runtime/narrow.h) give the bytes the float16 storage gives (QP_FP16_STORAGE=1): on a
generated model without declared intermediate types (Q/DQ with float16 scales, Conv, residual
Add, MaxPool, Where, LayerNormalization, a Cast to float16, a graph output also read inside)
and on the PaddleOCR cls model quantized with the default fp16 high precision. A bfloat16 model
is declined and still runs. The exact path (`--int8 exact`: fake-quantize and pointwise passes
with the float16 roundings inside them, runtime/int8.h) gives `--int8 off`'s bytes on the same
models and on cls quantized with fp32 high precision.
usage: fp16_rounding.py QPLACE REAL_MODELS_DIR WORKDIR"""
import json
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

qplace, real, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(3)
failed = 0


def run(model, inputs, storage, mode="off"):
    """The outputs of `qplace run --int8 MODE` and its debug log."""
    np.savez(os.path.join(work, "in.npz"), **inputs)
    out = os.path.join(work, "out.npz")
    env = dict(os.environ, QPLACE_VERBOSE="1")
    if storage:
        env["QP_FP16_STORAGE"] = "1"
    r = subprocess.run([qplace, "run", model, "--inputs", os.path.join(work, "in.npz"),
                        "--output", out, "--int8", mode, "--threads", "2"],
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"qplace run {model} failed ({r.returncode}): {r.stderr[-2000:]}")
    o = np.load(out)
    return {k: o[k] for k in o.files}, r.stderr


def rounding_nodes(log):
    m = re.search(r"float16 held as float32, (\d+) rounding nodes", log)
    return int(m[1]) if m else None


def same_bytes(name, got, want, what):
    """Every output of `want` in `got` with the same dtype and bytes; counts a failure per output."""
    global failed
    for k in want:
        if got[k].dtype != want[k].dtype or got[k].tobytes() != want[k].tobytes():
            d = np.abs(got[k].astype(np.float64) - want[k].astype(np.float64)).max()
            print(f"{name}: output {k} differs from {what} (max |diff| {d})")
            failed += 1


def check_exact(name, model, inputs, off):
    """--int8 exact: the exact path taken, and the bytes of --int8 off (`off`)."""
    global failed
    e, log = run(model, inputs, storage=False, mode="exact")
    if "session: exact path" not in log:
        print(f"{name}: the exact path was not taken: {log[-800:]}")
        failed += 1
    same_bytes(name, e, off, "--int8 off's with --int8 exact")


def compare(name, model, inputs, want_rounds):
    global failed
    a, log = run(model, inputs, storage=False)
    b, log_b = run(model, inputs, storage=True)
    n = rounding_nodes(log)
    if n != want_rounds:
        print(f"{name}: {n} rounding nodes, want {want_rounds}")
        failed += 1
    if rounding_nodes(log_b) is not None:
        print(f"{name}: QP_FP16_STORAGE=1 still rounded")
        failed += 1
    same_bytes(name, a, b, "the float16 storage's")
    return a


def small_model():
    c, k = 8, 3
    w = (rng.normal(size=(c, c, k, k)) * 0.2).astype(np.float16)
    ws = (np.abs(w.astype(np.float32)).reshape(c, -1).max(1) / 127).astype(np.float16)
    inits = [nh.from_array(w, "w"), nh.from_array(ws, "ws"),
             nh.from_array(np.zeros(c, np.int8), "wz"),
             nh.from_array(np.array(0.02, np.float16), "xs"),
             nh.from_array(np.array(0, np.int8), "xz"),
             nh.from_array((rng.normal(size=c) * 0.1).astype(np.float16), "b"),
             nh.from_array(np.ones(c, np.float16), "g"), nh.from_array(np.zeros(c, np.float16), "be"),
             nh.from_array(np.array(1.0 / 3, np.float16), "third")]
    nodes = [
        h.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        h.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        h.make_node("QuantizeLinear", ["w", "ws", "wz"], ["wq"], axis=0),
        h.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
        h.make_node("Conv", ["xd", "wd", "b"], ["conv"], pads=[1, 1, 1, 1]),
        h.make_node("Add", ["conv", "x"], ["res"]),
        h.make_node("Relu", ["res"], ["relu"]),
        h.make_node("MaxPool", ["relu"], ["pool"], kernel_shape=[2, 2], strides=[2, 2]),
        h.make_node("Mul", ["pool", "third"], ["scaled"]),
        h.make_node("Greater", ["scaled", "third"], ["big"]),
        h.make_node("Where", ["big", "scaled", "pool"], ["sel"]),
        h.make_node("Transpose", ["sel"], ["nhwc"], perm=[0, 2, 3, 1]),
        h.make_node("LayerNormalization", ["nhwc", "g", "be"], ["ln"], axis=-1),
        h.make_node("Cast", ["ln"], ["ln32"], to=T.FLOAT),
        h.make_node("Sqrt", ["ln32"], ["sq"]),
        h.make_node("Cast", ["sq"], ["sq16"], to=T.FLOAT16),
        h.make_node("Sub", ["sq16", "ln"], ["y"]),
        h.make_node("Softmax", ["conv"], ["sm"], axis=1),
    ]
    g = h.make_graph(nodes, "fp16", [h.make_tensor_value_info("x", T.FLOAT16, [1, c, 6, 6])],
                     [h.make_tensor_value_info("y", T.FLOAT16, None),
                      h.make_tensor_value_info("conv", T.FLOAT16, None),
                      h.make_tensor_value_info("sm", T.FLOAT16, None)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 19)])


path = os.path.join(work, "small16.onnx")
onnx.save(small_model(), path)
x = (rng.normal(size=(1, 8, 6, 6)) * 2).astype(np.float16)
# Rounded after every node that makes a float16 value by computing it: DequantizeLinear x2,
# Conv, Add, Mul, Where, LayerNormalization, the Cast to float16 -- not after Relu, MaxPool and
# Transpose, which move values, nor after Sub and Softmax, whose outputs only the Cast down to
# the float16 graph output reads (it rounds); Conv's output is read inside too: 8 rounding nodes.
out = compare("small", path, {"x": x}, 8)
check_exact("small", path, {"x": x}, out)
if not np.isfinite(out["y"].astype(np.float32)).any():
    print("small: the output has no finite value; the test proves nothing")
    failed += 1

# bfloat16: declined, the model runs as stored.
bf = h.make_graph([h.make_node("Cast", ["x"], ["b16"], to=T.BFLOAT16),
                   h.make_node("Cast", ["b16"], ["h"], to=T.FLOAT16),
                   h.make_node("Mul", ["h", "h"], ["y"])], "bf16",
                  [h.make_tensor_value_info("x", T.FLOAT16, [4])],
                  [h.make_tensor_value_info("y", T.FLOAT16, [4])])
bpath = os.path.join(work, "bf16.onnx")
onnx.save(h.make_model(bf, opset_imports=[h.make_opsetid("", 19)]), bpath)
a, log = run(bpath, {"x": np.array([1, 2.5, -3, 0.1], np.float16)}, storage=False)
if "kept as float16: a bfloat16" not in log or rounding_nodes(log) is not None:
    print("bf16: not declined:", log[-500:])
    failed += 1

# PaddleOCR cls quantized by default (fp16 high precision), on random images.
cls = os.path.join(real, "ch_ppocr_mobile_v2.0_cls_infer.onnx")
if os.path.exists(cls):
    q, q32 = os.path.join(work, "cls16.onnx"), os.path.join(work, "cls32.onnx")
    for path_q, hp in ((q, "fp16"), (q32, "fp32")):
        r = subprocess.run([qplace, "quantize", "--onnx_path", cls, "--output_path", path_q,
                            "--calibration_shapes", "x:1x3x48x192", "--threads", "2",
                            "--high_precision_dtype", hp], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"quantize cls {hp} failed ({r.returncode}): {r.stderr[-2000:]}")
    for i in range(2):
        img = rng.uniform(-1, 1, size=(1, 3, 48, 192)).astype(np.float32)
        a, log = run(q, {"x": img}, storage=False)
        if not rounding_nodes(log):
            print("cls: no rounding nodes")
            failed += 1
        b, _ = run(q, {"x": img}, storage=True)
        for k in b:
            if a[k].tobytes() != b[k].tobytes():
                print(f"cls: output {k} differs from the float16 storage's")
                failed += 1
        check_exact("cls fp16", q, {"x": img}, a)
        a32, _ = run(q32, {"x": img}, storage=False)
        check_exact("cls fp32", q32, {"x": img}, a32)
    # `bench --int8 exact` names the mode (text and JSON) and says what runs.
    b = [qplace, "bench", q32, "--shape", "x=1x3x48x192", "--iterations", "1", "--warmup", "0",
         "--int8", "exact"]
    t = subprocess.run(b, capture_output=True, text=True)
    j = subprocess.run(b + ["--json"], capture_output=True, text=True)
    if (t.returncode or j.returncode or "int8        exact" not in t.stdout or
            "int8 path   exact" not in t.stdout or json.loads(j.stdout).get("int8") != "exact"):
        print(f"bench --int8 exact: {t.stdout[-600:]}{t.stderr[-600:]}{j.stdout[-300:]}")
        failed += 1
else:
    print(f"(skipped the cls model: {cls} missing)")
print("fp16 rounding:", "FAILED" if failed else "ok")
sys.exit(1 if failed else 0)
