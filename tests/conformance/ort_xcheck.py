#!/usr/bin/env python3
"""ONNX Runtime cross-check cases for the kernels the backend node tests cover thinly.

    ort_xcheck.py gen DIR   one-node models with random inputs, one folder per case in the
                            backend-test layout (model.onnx, test_data_set_0/input_N.pb) plus the
                            inputs as raw .bin files and man.json for ort_xcheck.js
    ort_xcheck.py fin DIR   turns the outputs ort_xcheck.js wrote (out_N.bin, out.json) into
                            test_data_set_0/output_N.pb, so qp_conformance can compare

Only cases ONNX Runtime runs and computes the same way are generated (docs/engine.md lists the
known differences: ORT's u8s8 convolution saturation, per-channel integer zero points, even LRN
sizes, broadcasting Einsum ellipses, RNN layout 1). Needs onnx and numpy (/usr/bin/python3).
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

NP2T = {np.float32: T.FLOAT, np.float64: T.DOUBLE, np.int64: T.INT64, np.int32: T.INT32,
        np.uint8: T.UINT8, np.int8: T.INT8, np.bool_: T.BOOL}


def case(root, name, op, inputs, attrs, n_out=1, opset=17, out_types=None, inits=()):
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    vis = [h.make_tensor_value_info(nm, NP2T[a.dtype.type], a.shape)
           for nm, a in inputs if nm not in inits]
    outs = [h.make_tensor_value_info("y%d" % i, (out_types or [T.FLOAT] * n_out)[i], None)
            for i in range(n_out)]
    init = [nh.from_array(a, nm) for nm, a in inputs if nm in inits]
    node = h.make_node(op, [nm for nm, _ in inputs], ["y%d" % i for i in range(n_out)], **attrs)
    graph = h.make_graph([node], name, vis, outs, initializer=init)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, os.path.join(d, "model.onnx"))
    man = {"inputs": []}
    k = 0
    for nm, a in inputs:
        if nm in inits:
            continue
        onnx.save_tensor(nh.from_array(a, nm), os.path.join(d, "test_data_set_0", "input_%d.pb" % k))
        a.tofile(os.path.join(d, "in_%d.bin" % k))
        man["inputs"].append({"name": nm, "dtype": str(a.dtype), "shape": list(a.shape)})
        k += 1
    with open(os.path.join(d, "man.json"), "w") as f:
        json.dump(man, f)


def gen(root):
    rng = np.random.default_rng(20261129)

    def f(*s):
        return rng.standard_normal(s).astype(np.float32)

    def u8(*s):
        return rng.integers(0, 256, s).astype(np.uint8)

    def i8(*s):
        return rng.integers(-64, 64, s).astype(np.int8)  # ORT's u8s8 kernels need |w| < 64

    for mode in ["nearest", "bilinear", "bicubic"]:
        for pad in ["zeros", "border", "reflection"]:
            for al in [0, 1]:
                if mode == "bicubic" and pad == "zeros":
                    continue  # ORT's float coefficients: values near 0 differ by ~1e-7 abs
                case(root, "gridsample_%s_%s_%d" % (mode, pad, al), "GridSample",
                     [("x", f(2, 3, 5, 7)),
                      ("g", rng.uniform(-1.7, 1.7, (2, 4, 6, 2)).astype(np.float32))],
                     dict(mode=mode, padding_mode=pad, align_corners=al), opset=16)
    rois = np.array([[0.5, 1.0, 6.0, 7.5], [2, 2, 3, 3.2], [-2, -1, 4, 12], [1, 1, 1, 1]],
                    np.float32)
    for ctm in ["half_pixel", "output_half_pixel"]:
        for sr in [0, 2]:
            case(root, "roialign_%s_%d" % (ctm, sr), "RoiAlign",
                 [("x", f(2, 3, 8, 9)), ("r", rois), ("b", np.array([0, 1, 1, 0], np.int64))],
                 dict(coordinate_transformation_mode=ctm, output_height=3, output_width=4,
                      sampling_ratio=sr, spatial_scale=0.75), opset=16)
    bx = rng.uniform(0, 10, (2, 30, 4)).astype(np.float32)
    sc = rng.uniform(0, 1, (2, 3, 30)).astype(np.float32)
    for cp in [0, 1]:
        case(root, "nms_%d" % cp, "NonMaxSuppression",
             [("b", bx), ("s", sc), ("m", np.array([7], np.int64)),
              ("i", np.array([0.3], np.float32)), ("t", np.array([0.2], np.float32))],
             dict(center_point_box=cp), opset=11, out_types=[T.INT64])
    for k, (eq, shapes) in enumerate([("bij,bjk", [(2, 3, 4), (2, 4, 5)]), ("ii->i", [(4, 4)]),
                                      ("ij,ij->", [(3, 4), (3, 4)]),
                                      ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 2)]),
                                      ("ba", [(3, 4)]), ("i,j->ij", [(3,), (4,)]),
                                      ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)])]):
        case(root, "einsum_%d" % k, "Einsum", [("x%d" % i, f(*s)) for i, s in enumerate(shapes)],
             dict(equation=eq), opset=12)
    for size in [1, 3, 5]:
        case(root, "lrn_%d" % size, "LRN", [("x", f(2, 6, 3, 4))],
             dict(size=size, alpha=0.001, beta=0.75, bias=1.0), opset=13)
    for mode in ["DCR", "CRD"]:
        case(root, "depthtospace_" + mode, "DepthToSpace", [("x", f(2, 18, 2, 3))],
             dict(blocksize=3, mode=mode), opset=13)
    case(root, "spacetodepth", "SpaceToDepth", [("x", f(2, 3, 6, 9))], dict(blocksize=3),
         opset=13)
    for ex in [0, 1]:
        for rv in [0, 1]:
            case(root, "cumsum_%d%d" % (ex, rv), "CumSum",
                 [("x", f(3, 4, 5)), ("a", np.array(-2, np.int64))],
                 dict(exclusive=ex, reverse=rv), opset=14, inits=("a",))
    for up in [0, 1]:
        for k in [-2, 0, 3]:
            case(root, "trilu_%d_%d" % (up, k), "Trilu",
                 [("x", f(2, 4, 6)), ("k", np.array(k, np.int64))], dict(upper=up), opset=14,
                 inits=("k",))
    case(root, "gathernd_b1", "GatherND",
         [("x", f(2, 3, 4, 5)), ("i", np.array([[[1, 2], [0, 0]], [[2, 3], [1, 1]]], np.int64))],
         dict(batch_dims=1), opset=13)
    case(root, "scatternd_add", "ScatterND",
         [("x", f(4, 5, 3)), ("i", np.array([[1, 2], [3, 0], [1, 2]], np.int64)), ("u", f(3, 3))],
         dict(reduction="add"), opset=16)
    idx = np.array([[0, 2], [2, 2], [1, 0]], np.int64)
    case(root, "scatterelements_mul", "ScatterElements", [("x", f(3, 4)), ("i", idx), ("u", f(3, 2))],
         dict(axis=1, reduction="mul"), opset=16)
    case(root, "scatterelements_max", "ScatterElements", [("x", f(3, 4)), ("i", idx), ("u", f(3, 2))],
         dict(axis=1, reduction="max"), opset=18)
    case(root, "onehot", "OneHot",
         [("i", np.array([[0, 3, -1], [5, 2, -4]], np.int64)), ("d", np.array(4, np.int64)),
          ("v", np.array([0.5, 2.0], np.float32))], dict(axis=1), opset=11, inits=("d",))
    case(root, "batchnorm_training", "BatchNormalization",
         [("x", f(3, 4, 5, 2)), ("s", f(4)), ("b", f(4)), ("m", f(4)), ("v", np.abs(f(4)) + 0.5)],
         dict(training_mode=1, momentum=0.7, epsilon=1e-4), n_out=3, opset=15)
    case(root, "maxpool_int8", "MaxPool", [("x", rng.integers(-128, 128, (1, 2, 7, 6)).astype(np.int8))],
         dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1]), opset=12, out_types=[T.INT8])
    case(root, "maxpool_uint8_dilated", "MaxPool", [("x", u8(1, 2, 7, 6))],
         dict(kernel_shape=[2, 2], dilations=[2, 1], ceil_mode=1), opset=12, out_types=[T.UINT8])
    case(root, "eyelike", "EyeLike", [("x", f(4, 6))], dict(k=-1, dtype=T.INT32), opset=9,
         out_types=[T.INT32])
    case(root, "compress", "Compress", [("x", f(3, 4)), ("c", np.array([1, 0, 1, 1], np.bool_))],
         dict(axis=1), opset=11, inits=("c",))
    case(root, "mvn_axes", "MeanVarianceNormalization", [("x", f(2, 3, 4, 5))], dict(axes=[1, 3]),
         opset=13)
    case(root, "dynamicquantizelinear", "DynamicQuantizeLinear", [("x", f(4, 7) * 3)], {}, n_out=3,
         opset=11, out_types=[T.UINT8, T.FLOAT, T.UINT8])
    case(root, "matmulinteger", "MatMulInteger",
         [("a", u8(2, 3, 5, 7)), ("b", u8(7, 4)), ("az", np.array(100, np.uint8)), ("bz", u8(4))],
         {}, opset=10, out_types=[T.INT32])
    case(root, "qlinearmatmul", "QLinearMatMul",
         [("a", u8(2, 5, 7)), ("as", np.array(0.02, np.float32)), ("az", np.array(120, np.uint8)),
          ("b", u8(7, 4)), ("bs", np.array(0.03, np.float32)), ("bz", np.array(130, np.uint8)),
          ("ys", np.array(0.15, np.float32)), ("yz", np.array(128, np.uint8))], {}, opset=10,
         out_types=[T.UINT8])
    case(root, "convinteger", "ConvInteger",
         [("x", u8(2, 4, 7, 6)), ("w", u8(6, 2, 3, 2)), ("xz", np.array(128, np.uint8)),
          ("wz", np.array(7, np.uint8))],
         dict(group=2, strides=[2, 1], pads=[1, 0, 1, 1], dilations=[1, 2]), opset=10,
         out_types=[T.INT32])
    case(root, "qlinearconv", "QLinearConv",
         [("x", u8(1, 4, 7, 6)), ("xs", np.array(0.05, np.float32)), ("xz", np.array(128, np.uint8)),
          ("w", i8(6, 4, 3, 3)), ("ws", (np.abs(f(6)) * 0.01 + 0.005).astype(np.float32)),
          ("wz", np.zeros(6, np.int8)), ("ys", np.array(0.2, np.float32)),
          ("yz", np.array(100, np.uint8)), ("bias", rng.integers(-500, 500, 6).astype(np.int32))],
         dict(pads=[1, 1, 1, 1]), opset=10, out_types=[T.UINT8])
    S, B, I, H = 5, 3, 4, 6

    def rnn(name, op, G, dirs, attrs, seqlens=None, peep=False):
        g = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)
        ins = [("X", g(S, B, I)), ("W", g(dirs, G * H, I)), ("R", g(dirs, G * H, H)),
               ("B", g(dirs, 2 * G * H)),
               ("sl", np.array(seqlens if seqlens is not None else [S] * B, np.int32)),
               ("h0", g(dirs, B, H))]
        if op == "LSTM":
            ins.append(("c0", g(dirs, B, H)))
            if peep:
                ins.append(("P", g(dirs, 3 * H)))
        case(root, name, op, ins, dict(hidden_size=H, **attrs), n_out=3 if op == "LSTM" else 2,
             opset=14)

    for op, G in [("RNN", 1), ("GRU", 3), ("LSTM", 4)]:
        rnn(op.lower() + "_bidirectional", op, G, 2, dict(direction="bidirectional"), [5, 2, 3])
        rnn(op.lower() + "_reverse", op, G, 1, dict(direction="reverse"), [1, 5, 4])
        rnn(op.lower() + "_clip", op, G, 1, dict(clip=0.7))
    rnn("gru_linear_before_reset", "GRU", 3, 2,
        dict(direction="bidirectional", linear_before_reset=1), [5, 3, 1])
    rnn("lstm_peepholes", "LSTM", 4, 2, dict(direction="bidirectional"), [4, 5, 2], peep=True)
    rnn("rnn_activations", "RNN", 1, 2,
        dict(direction="bidirectional", activations=["Relu", "HardSigmoid"],
             activation_alpha=[0.3], activation_beta=[0.4]))
    rnn("gru_activations", "GRU", 3, 1,
        dict(activations=["HardSigmoid", "LeakyRelu"], activation_alpha=[0.25, 0.1],
             activation_beta=[0.45]))
    rnn("lstm_activations", "LSTM", 4, 1,
        dict(activations=["Sigmoid", "ScaledTanh", "Affine"], activation_alpha=[0.9, 1.5],
             activation_beta=[0.8, 0.1]))


def fin(root):
    types = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32,
             "uint8": np.uint8, "int8": np.int8, "bool": np.bool_}
    for c in sorted(os.listdir(root)):
        d = os.path.join(root, c)
        path = os.path.join(d, "out.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            outs = json.load(f)
        for i, o in enumerate(outs):
            a = np.fromfile(os.path.join(d, "out_%d.bin" % i), types[o["type"]]).reshape(o["dims"])
            onnx.save_tensor(nh.from_array(a, "y%d" % i),
                             os.path.join(d, "test_data_set_0", "output_%d.pb" % i))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("gen", "fin"):
        sys.exit("usage: ort_xcheck.py gen|fin DIR")
    os.makedirs(sys.argv[2], exist_ok=True)
    (gen if sys.argv[1] == "gen" else fin)(sys.argv[2])
