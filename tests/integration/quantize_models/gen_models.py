#!/usr/bin/python3
"""Small runnable models for the Q/DQ writer's preservation tests (tests/unit/quant/test_writer.c).

    /usr/bin/python3 tests/integration/quantize_models/gen_models.py tests/integration/quantize_models

resnet_like.onnx (opset 13): Conv/Relu stem, MaxPool, two bottleneck blocks with residual Adds
(one with a projection Conv), GlobalAveragePool, Flatten, Gemm -> [1, 10] class scores.
vit_like.onnx (opset 20): patch embedding (Conv + Reshape + Transpose), LayerNormalization,
two-head self-attention (MatMul, Softmax, scaled by a constant), an RMS-style branch with Sqrt,
a Gelu MLP, residual Adds, mean pooling and a classifier -> [1, 10].
Weights come from a fixed seed, so the files are reproducible byte for byte.
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

RNG = np.random.default_rng(7)


def w(name, *shape, scale=None):
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    s = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
    return numpy_helper.from_array((RNG.standard_normal(shape) * s).astype(np.float32), name)


def c(name, arr, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(arr, dtype=dtype), name)


def resnet_like():
    nodes, inits = [], []
    N = helper.make_node

    def conv(x, y, cin, cout, k, stride=1, name=None):
        inits.append(w(f"{y}_w", cout, cin, k, k))
        inits.append(w(f"{y}_b", cout, scale=0.1))
        nodes.append(N("Conv", [x, f"{y}_w", f"{y}_b"], [y], name=name or f"conv_{y}",
                       kernel_shape=[k, k], pads=[k // 2] * 4, strides=[stride, stride]))

    conv("x", "stem", 3, 8, 3, 2)
    nodes.append(N("Relu", ["stem"], ["stem_r"], name="relu_stem"))
    nodes.append(N("MaxPool", ["stem_r"], ["pool"], name="maxpool", kernel_shape=[2, 2],
                   strides=[2, 2]))

    def block(x, y, cin, mid, cout, project):
        conv(x, f"{y}_a", cin, mid, 1)
        nodes.append(N("Relu", [f"{y}_a"], [f"{y}_ar"], name=f"relu_{y}_a"))
        conv(f"{y}_ar", f"{y}_b", mid, mid, 3)
        nodes.append(N("Relu", [f"{y}_b"], [f"{y}_br"], name=f"relu_{y}_b"))
        conv(f"{y}_br", f"{y}_c", mid, cout, 1)
        skip = x
        if project:
            conv(x, f"{y}_p", cin, cout, 1)
            skip = f"{y}_p"
        nodes.append(N("Add", [f"{y}_c", skip], [f"{y}_sum"], name=f"add_{y}"))
        nodes.append(N("Relu", [f"{y}_sum"], [y], name=f"relu_{y}"))

    block("pool", "b1", 8, 4, 16, True)
    block("b1", "b2", 16, 4, 16, False)
    nodes.append(N("GlobalAveragePool", ["b2"], ["gap"], name="gap"))
    nodes.append(N("Flatten", ["gap"], ["flat"], name="flatten"))
    inits.append(w("fc_w", 10, 16))
    inits.append(w("fc_b", 10, scale=0.1))
    nodes.append(N("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1))
    g = helper.make_graph(nodes, "resnet_like",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)],
                             producer_name="qplace-tests", ir_version=8)


def vit_like():
    nodes, inits = [], []
    N = helper.make_node
    D, T, H, HD = 16, 16, 2, 8
    inits += [w("patch_w", D, 3, 4, 4), w("patch_b", D, scale=0.1)]
    nodes.append(N("Conv", ["x", "patch_w", "patch_b"], ["patch"], name="patch_embed",
                   kernel_shape=[4, 4], strides=[4, 4]))
    inits.append(c("shape_btd", [1, D, T], np.int64))
    nodes.append(N("Reshape", ["patch", "shape_btd"], ["patch_flat"], name="patch_reshape"))
    nodes.append(N("Transpose", ["patch_flat"], ["tok"], name="patch_transpose", perm=[0, 2, 1]))
    inits.append(w("pos", 1, T, D, scale=0.1))
    nodes.append(N("Add", ["tok", "pos"], ["h0"], name="pos_add"))

    def ln(x, y):
        inits.append(c(f"{y}_g", 1.0 + 0.1 * RNG.standard_normal(D)))
        inits.append(c(f"{y}_bb", 0.1 * RNG.standard_normal(D)))
        nodes.append(N("LayerNormalization", [x, f"{y}_g", f"{y}_bb"], [y], name=f"ln_{y}",
                       axis=-1, epsilon=1e-5))

    def linear(x, y, din, dout):
        inits.append(w(f"{y}_w", din, dout))
        inits.append(w(f"{y}_b", dout, scale=0.1))
        nodes.append(N("MatMul", [x, f"{y}_w"], [f"{y}_mm"], name=f"mm_{y}"))
        nodes.append(N("Add", [f"{y}_mm", f"{y}_b"], [y], name=f"bias_{y}"))

    ln("h0", "ln1")
    inits.append(c("shape_heads", [1, T, H, HD], np.int64))
    for p in "qkv":
        linear("ln1", p, D, D)
        nodes.append(N("Reshape", [p, "shape_heads"], [f"{p}_h"], name=f"reshape_{p}"))
        perm = [0, 2, 3, 1] if p == "k" else [0, 2, 1, 3]
        nodes.append(N("Transpose", [f"{p}_h"], [f"{p}_t"], name=f"transpose_{p}", perm=perm))
    nodes.append(N("MatMul", ["q_t", "k_t"], ["scores"], name="attn_qk"))
    inits.append(c("attn_scale", 1.0 / np.sqrt(HD)))
    nodes.append(N("Mul", ["scores", "attn_scale"], ["scores_s"], name="attn_scale_mul"))
    nodes.append(N("Softmax", ["scores_s"], ["probs"], name="attn_softmax", axis=-1))
    nodes.append(N("MatMul", ["probs", "v_t"], ["ctx"], name="attn_pv"))
    nodes.append(N("Transpose", ["ctx"], ["ctx_t"], name="ctx_transpose", perm=[0, 2, 1, 3]))
    inits.append(c("shape_btd2", [1, T, D], np.int64))
    nodes.append(N("Reshape", ["ctx_t", "shape_btd2"], ["ctx_r"], name="ctx_reshape"))
    linear("ctx_r", "o", D, D)
    nodes.append(N("Add", ["h0", "o"], ["h1"], name="residual1"))
    # RMS-style scaling branch: x / Sqrt(mean(x^2) + eps).
    nodes.append(N("Mul", ["h1", "h1"], ["sq"], name="rms_sq"))
    nodes.append(N("ReduceMean", ["sq"], ["ms"], name="rms_mean", axes=[-1], keepdims=1))
    inits.append(c("eps", 1e-5))
    nodes.append(N("Add", ["ms", "eps"], ["ms_eps"], name="rms_eps"))
    nodes.append(N("Sqrt", ["ms_eps"], ["rms"], name="rms_sqrt"))
    nodes.append(N("Div", ["h1", "rms"], ["h1n"], name="rms_div"))
    ln("h1n", "ln2")
    linear("ln2", "fc1", D, 2 * D)
    nodes.append(N("Gelu", ["fc1"], ["gelu"], name="gelu"))
    linear("gelu", "fc2", 2 * D, D)
    nodes.append(N("Add", ["h1", "fc2"], ["h2"], name="residual2"))
    nodes.append(N("ReduceMean", ["h2"], ["pooled3"], name="pool_tokens", axes=[1], keepdims=0))
    inits.append(w("head_w", D, 10))
    nodes.append(N("MatMul", ["pooled3", "head_w"], ["logits"], name="head"))
    g = helper.make_graph(nodes, "vit_like",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
                          inits)
    # Opset 20 for Gelu; fix_reduce_mean_axes moves ReduceMean's axes to an input (opset 18+).
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)],
                             producer_name="qplace-tests", ir_version=9)


def fix_reduce_mean_axes(model):
    """Opset 18+ ReduceMean takes axes as an input: move the attribute there."""
    g = model.graph
    for n in g.node:
        if n.op_type != "ReduceMean":
            continue
        axes = [a for a in n.attribute if a.name == "axes"]
        if not axes:
            continue
        name = f"{n.name}_axes"
        g.initializer.append(numpy_helper.from_array(np.array(axes[0].ints, dtype=np.int64), name))
        n.input.append(name)
        n.attribute.remove(axes[0])
    return model


def main(argv):
    out = argv[0] if argv else os.path.dirname(os.path.abspath(__file__))
    save(resnet_like(), os.path.join(out, "resnet_like.onnx"))
    save(fix_reduce_mean_axes(vit_like()), os.path.join(out, "vit_like.onnx"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
