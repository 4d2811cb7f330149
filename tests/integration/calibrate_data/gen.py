#!/usr/bin/python3
"""Regenerates the committed calibration test data (run from anywhere with /usr/bin/python3,
which has onnx and numpy):

  small.onnx       Conv -> Relu -> Concat(with the input) -> Mul -> ReduceMean -> Softmax ->
                   Identity, input "input" [N, 2, 4, 4], opset 13
  small.npz        16 samples of "input" (float32)
  small_nan.npz    the same with 3 NaN and 2 Inf in sample 5
  cls.npz          6 text-line images for the PaddleOCR cls model ("x" [6, 3, 48, 192]): dark
                   glyph-like strokes on off-white paper, normalised as PaddleOCR does,
                   (v / 255 - 0.5) / 0.5; stored compressed
  bad_pickled.npz  key "input" holding an object array (a pickled dict)
  bad_keys.npz     key "inputs" instead of "input"
  bad_dtype.npz    float64 data
  bad_rank.npz     rank 3 data
  bad_line.cache   a TensorRT cache whose third line is malformed
Everything is seeded, so the files come out the same each time.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def small_model():
    rng = np.random.default_rng(7)
    w = rng.normal(0, 0.5, (3, 2, 3, 3)).astype(np.float32)
    b = np.array([0.1, -0.2, 0.05], np.float32)
    nodes = [
        helper.make_node("Conv", ["input", "w", "b"], ["conv_out"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv_out"], ["relu_out"], name="relu"),
        helper.make_node("Concat", ["relu_out", "input"], ["cat_out"], name="cat", axis=1),
        helper.make_node("Mul", ["cat_out", "two"], ["mul_out"], name="mul"),
        helper.make_node("ReduceMean", ["mul_out"], ["pooled"], name="pool", axes=[2, 3],
                         keepdims=0),
        helper.make_node("Softmax", ["pooled"], ["prob"], name="softmax", axis=1),
        helper.make_node("Identity", ["prob"], ["output"], name="out"),
    ]
    g = helper.make_graph(
        nodes, "calib_small",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 2, 4, 4])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 5])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
         numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="gen.py")
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(HERE, "small.onnx"))


def text_lines(n, h, w, seed):
    """n grey text-line images (values 0..255)."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, h, w), np.float32)
    for k in range(n):
        img = (238 + rng.integers(0, 14, (h, w))).astype(np.float32)  # paper with grain
        gh = int(h * 0.6)
        gw = int(gh * 0.6)
        th = max(1, gh // 9)
        y0 = (h - gh) // 2
        x = int(rng.integers(2, 12))
        end = w - int(rng.integers(0, w // 4))
        while x + gw < end:
            for _ in range(int(rng.integers(2, 7))):
                if x + gw >= end:
                    break
                v = float(rng.uniform(20, 60))
                for _ in range(int(rng.integers(2, 4))):
                    r = rng.random()
                    if r < 0.4:  # stem
                        sx = x + int(rng.integers(0, gw))
                        img[y0:y0 + gh, sx:sx + th] = v
                    elif r < 0.7:  # bar
                        sy = y0 + int(rng.integers(0, gh))
                        img[sy:sy + th, x:x + gw] = v
                    else:  # diagonal
                        for s in range(gh):
                            xx = x + s * gw // gh
                            img[y0 + gh - 1 - s, xx:xx + th] = v
                x += gw + th + 1
            x += int(gw * rng.uniform(0.6, 1.2))
        out[k] = img
    return out


def main():
    small_model()
    rng = np.random.default_rng(11)
    x = rng.normal(0, 1, (16, 2, 4, 4)).astype(np.float32)
    x[3, 1, 2, 2] = 4.5  # one clear maximum
    np.savez(os.path.join(HERE, "small.npz"), input=x)
    xn = x.copy()
    xn[5, 0, 0, 0:3] = np.nan
    xn[5, 1, 3, 0] = np.inf
    xn[5, 1, 3, 1] = -np.inf
    np.savez(os.path.join(HERE, "small_nan.npz"), input=xn)
    np.savez(os.path.join(HERE, "bad_pickled.npz"), input=np.array([{"input": x}], dtype=object))
    np.savez(os.path.join(HERE, "bad_keys.npz"), inputs=x)
    np.savez(os.path.join(HERE, "bad_dtype.npz"), input=x.astype(np.float64))
    np.savez(os.path.join(HERE, "bad_rank.npz"), input=x[:, 0])

    grey = text_lines(6, 48, 192, 5)
    cls = np.repeat(grey[:, None], 3, axis=1)
    cls = ((cls / 255.0 - 0.5) / 0.5).astype(np.float32)
    np.savez_compressed(os.path.join(HERE, "cls.npz"), x=cls)

    with open(os.path.join(HERE, "bad_line.cache"), "w") as f:
        f.write("TRT-8601-EntropyCalibration2\ninput: 3c010a14\nconv_out 3c010a14\n")


if __name__ == "__main__":
    main()
