#!/usr/bin/python3
"""One calibration data module for every command: an image folder (with the --image_* flags)
goes through `qplace calibrate`, `qplace quantize` and `qplace sensitivity` alike.

    data_providers.py QPLACE MODEL.onnx WORK_DIR

MODEL is tests/integration/quantize_models/resnet_like.onnx (input x: 1x3x32x32). Checks:
- quantize --calibration_data_path IMAGES writes exactly the INT8 scales that
  calibrate --placement_in (same placement, same folder, same --image_mean/--image_std/--image_bgr)
  computes, and reports the source "images"; the flags matter (other flags, other scales);
- sensitivity reads the same folder (calibration_data "images");
- refusals, exit codes and messages: an image folder for a model without a 3-channel input, a zero
  --image_std entry and a malformed --max_calibration_bytes in every command, no output written.
Prints "N passed, N failed" and exits 1 on any failure.
"""
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

from qp_testlib import Tally, fresh as fresh_in, load_json, run as run_cmd, write_png

QPLACE, MODEL, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
SMALL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calibrate_data", "small.onnx")
os.makedirs(WORK, exist_ok=True)
T = Tally()
check = T.check


def run(*args):
    return run_cmd(QPLACE, *args)


def fresh(name):
    return fresh_in(WORK, name)


# Ten 40x48 images (resized to 32x32 by the provider), different colour statistics per channel
# so that --image_bgr and per-channel mean/std change the ranges.
IMG = os.path.join(WORK, "images")
os.makedirs(IMG, exist_ok=True)
rng = np.random.default_rng(7)
for i in range(10):
    base = np.array([40 + 10 * i, 120, 220 - 15 * i], np.float64)
    noise = rng.normal(0, [10, 30, 60], (40, 48, 3))
    write_png(os.path.join(IMG, f"img{i:02d}.png"),
              np.clip(base + noise, 0, 255).astype(np.uint8))
FLAGS = ["--image_mean", "0.485,0.456,0.406", "--image_std", "0.229,0.224,0.225", "--image_bgr"]

# The trt placement of the model (quantize on synthetic data writes it).
placement = fresh("trt.placement.json")
rc, out, err = run("quantize", "--onnx_path", MODEL, "--output_path", fresh("syn.quant.onnx"),
                   "--placement_out", placement, "--threads", "1")
check(rc == 0 and os.path.exists(placement), f"quantize --placement_out: {rc} {err}")

# calibrate with the placement and the flags.
ranges = fresh("img.ranges.json")
rc, out, err = run("calibrate", "--onnx_path", MODEL, "--calibration_data_path", IMG,
                   "--placement_in", placement, "--output_path", ranges, "--threads", "1", *FLAGS)
check(rc == 0, f"calibrate on images: {rc} {err}")
r = load_json(ranges) if rc == 0 else {"tensors": []}
check(r.get("calibration_source") == "images" and r.get("num_samples") == 10,
      f"calibrate source/samples: {r.get('calibration_source')} {r.get('num_samples')}")
cal_scale = {t["name"]: t["scale"] for t in r["tensors"]}

# The same without the flags gives other ranges (the flags reach the provider).
plain = fresh("plain.ranges.json")
rc, _, err = run("calibrate", "--onnx_path", MODEL, "--calibration_data_path", IMG,
                 "--placement_in", placement, "--output_path", plain, "--threads", "1")
check(rc == 0, f"calibrate on images without flags: {rc} {err}")
if rc == 0:
    p = {t["name"]: t["scale"] for t in load_json(plain)["tensors"]}
    check(p.get("x") != cal_scale.get("x"), "image flags change the input range")

# quantize on the same folder, all batches for calibration (--eval_data_path given).
qpath = fresh("img.quant.onnx")
rc, out, err = run("quantize", "--onnx_path", MODEL, "--output_path", qpath, "--placement_in",
                   placement, "--calibration_data_path", IMG, "--eval_data_path", IMG,
                   "--high_precision_dtype", "fp32", "--threads", "1", *FLAGS)
check(rc == 0, f"quantize on images: {rc} {err}")
check("calibration: images data" in out and "10 samples" in out,
      f"quantize reports the image source: {out}")
if rc == 0:
    qm = onnx.load(qpath)
    inits = {t.name: numpy_helper.to_array(t) for t in qm.graph.initializer}
    q_scale = {}
    for n in qm.graph.node:
        if n.op_type == "QuantizeLinear" and n.input[1] in inits:
            s = inits[n.input[1]]
            if s.size == 1:
                q_scale[n.input[0]] = float(s.reshape(()))
    check(len(q_scale) > 0 and set(q_scale) <= set(cal_scale),
          f"quantized tensors are calibrated tensors: {sorted(set(q_scale) - set(cal_scale))}")
    bad = [k for k, v in q_scale.items()
           if k in cal_scale and np.float32(v) != np.float32(cal_scale[k])]
    check(not bad, f"quantize scales equal calibrate's: {bad[:5]}")

# sensitivity on the same folder.
sj = fresh("img.sensitivity.json")
rc, out, err = run("sensitivity", "--onnx_path", MODEL, "--calibration_data_path", IMG,
                   "--placement_in", placement, "--output_json", sj, "--threads", "1", "--quiet",
                   *FLAGS)
check(rc == 0, f"sensitivity on images: {rc} {err}")
if rc == 0:
    j = load_json(sj)
    check(j.get("calibration_data") == "images" and j.get("calibration_source") == "real",
          f"sensitivity data: {j.get('calibration_data')} {j.get('calibration_source')}")

# Refusals, in every command, with nothing written.
for cmd in ("calibrate", "quantize", "sensitivity"):
    outflag = {"calibrate": "--output_path", "quantize": "--output_path",
               "sensitivity": "--output_json"}[cmd]
    o = fresh(f"refused.{cmd}.out")
    rc, _, err = run(cmd, "--onnx_path", SMALL, "--calibration_data_path", IMG, outflag, o)
    check(rc == 2 and "model input 'input' has no 3-channel axis (NCHW or NHWC) for images" in err
          and not os.path.exists(o), f"{cmd}: image folder for a non-image model: {rc} {err}")
    rc, _, err = run(cmd, "--onnx_path", MODEL, "--calibration_data_path", IMG, "--image_std",
                     "1,0,1", outflag, o)
    check(rc == 1 and f"qplace {cmd}: --image_std '1,0,1' has a zero entry" in err
          and not os.path.exists(o), f"{cmd}: zero --image_std: {rc} {err}")
    rc, _, err = run(cmd, "--onnx_path", MODEL, "--max_calibration_bytes", "12Q", outflag, o)
    check(rc == 1 and "--max_calibration_bytes '12Q' is not a positive byte count" in err
          and not os.path.exists(o), f"{cmd}: bad --max_calibration_bytes: {rc} {err}")

T.finish()
