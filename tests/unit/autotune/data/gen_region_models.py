#!/usr/bin/python3
"""Deeper models for the autotune region tests (tests/unit/autotune/test_region.c), whose blocks
repeat so that repeated blocks can be seen sharing one pattern signature:

    /usr/bin/python3 tests/unit/autotune/data/gen_region_models.py tests/unit/autotune/data

resnet_deep.onnx (opset 13): Conv/Relu stem, MaxPool, one bottleneck block with a projection Conv,
four identical bottleneck blocks with identity shortcuts, GlobalAveragePool, Flatten, Gemm.
resnet_short.onnx: the same with two identity blocks (the pattern cache test of
tests/unit/pipeline/test_autotune.c: a cache from it on resnet_deep).
resnet_stages.onnx: two stages whose identity blocks share a pattern at two shapes (the
representative instances of tests/unit/autotune/test_subgraph.c).
vit_deep.onnx (opset 20): patch embedding, four identical pre-LN transformer blocks (one-head
attention, Gelu MLP, residual Adds), mean pooling, classifier. Nodes are named per block.
Weights from a fixed seed; the files are reproducible byte for byte.
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

RNG = np.random.default_rng(11)
N = helper.make_node


def w(name, *shape):
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.2).astype(np.float32), name)


def c(name, arr, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(arr, dtype=dtype), name)


def conv_maker(nodes, inits):
    """conv(x, y, cin, cout, k, stride): a Conv with its weight and bias, appended."""
    def conv(x, y, cin, cout, k, stride=1):
        inits.extend([w(f"{y}_w", cout, cin, k, k), w(f"{y}_b", cout)])
        nodes.append(N("Conv", [x, f"{y}_w", f"{y}_b"], [y], name=f"conv_{y}",
                       kernel_shape=[k, k], pads=[k // 2] * 4, strides=[stride, stride]))
    return conv


def stem(nodes, conv):
    """Conv 3->8 stride 2, Relu, MaxPool 2x2: the tensor 'pool'."""
    conv("x", "stem", 3, 8, 3, 2)
    nodes.append(N("Relu", ["stem"], ["stem_r"], name="relu_stem"))
    nodes.append(N("MaxPool", ["stem_r"], ["pool"], name="maxpool", kernel_shape=[2, 2],
                   strides=[2, 2]))
    return "pool"


def resnet_deep(n_blocks=5, name="resnet_deep"):
    nodes, inits = [], []
    conv = conv_maker(nodes, inits)
    prev = stem(nodes, conv)
    for b in range(n_blocks):
        y = f"b{b}"
        conv(prev, f"{y}_a", 8 if b == 0 else 16, 4, 1)
        nodes.append(N("Relu", [f"{y}_a"], [f"{y}_ar"], name=f"relu_{y}_a"))
        conv(f"{y}_ar", f"{y}_b", 4, 4, 3)
        nodes.append(N("Relu", [f"{y}_b"], [f"{y}_br"], name=f"relu_{y}_b"))
        conv(f"{y}_br", f"{y}_c", 4, 16, 1)
        skip = prev
        if b == 0:
            conv(prev, f"{y}_p", 8, 16, 1)
            skip = f"{y}_p"
        nodes.append(N("Add", [f"{y}_c", skip], [f"{y}_sum"], name=f"add_{y}"))
        nodes.append(N("Relu", [f"{y}_sum"], [y], name=f"relu_{y}"))
        prev = y
    nodes.append(N("GlobalAveragePool", [prev], ["gap"], name="gap"))
    nodes.append(N("Flatten", ["gap"], ["flat"], name="flatten"))
    inits += [w("fc_w", 10, 16), w("fc_b", 10)]
    nodes.append(N("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1))
    g = helper.make_graph(nodes, name,
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)],
                             producer_name="qplace-tests", ir_version=8)


def resnet_stages():
    """Two stages of bottlenecks whose identity blocks share one pattern at two shapes: stage 1
    at 16 channels 8x8 (a projection block, two identity blocks), stage 2 at 32 channels 4x4 (a
    strided projection block, three identity blocks; the last joins the pooling's region)."""
    nodes, inits = [], []
    conv = conv_maker(nodes, inits)
    prev, cin = stem(nodes, conv), 8
    for s, (width, n_blocks) in enumerate([(16, 3), (32, 4)]):
        for b in range(n_blocks):
            y = f"s{s}b{b}"
            stride = 2 if b == 0 and s > 0 else 1
            mid = width // 4
            conv(prev, f"{y}_a", cin if b == 0 else width, mid, 1)
            nodes.append(N("Relu", [f"{y}_a"], [f"{y}_ar"], name=f"relu_{y}_a"))
            conv(f"{y}_ar", f"{y}_b", mid, mid, 3, stride)
            nodes.append(N("Relu", [f"{y}_b"], [f"{y}_br"], name=f"relu_{y}_b"))
            conv(f"{y}_br", f"{y}_c", mid, width, 1)
            skip = prev
            if b == 0:
                conv(prev, f"{y}_p", cin, width, 1, stride)
                skip = f"{y}_p"
            nodes.append(N("Add", [f"{y}_c", skip], [f"{y}_sum"], name=f"add_{y}"))
            nodes.append(N("Relu", [f"{y}_sum"], [y], name=f"relu_{y}"))
            prev = y
        cin = width
    nodes.append(N("GlobalAveragePool", [prev], ["gap"], name="gap"))
    nodes.append(N("Flatten", ["gap"], ["flat"], name="flatten"))
    inits += [w("fc_w", 10, 32), w("fc_b", 10)]
    nodes.append(N("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1))
    g = helper.make_graph(nodes, "resnet_stages",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)],
                             producer_name="qplace-tests", ir_version=8)


def vit_deep():
    nodes, inits = [], []
    D, T = 16, 16
    inits += [w("patch_w", D, 3, 4, 4), w("patch_b", D), c("shape_btd", [1, D, T], np.int64)]
    nodes.append(N("Conv", ["x", "patch_w", "patch_b"], ["patch"], name="patch_embed",
                   kernel_shape=[4, 4], strides=[4, 4]))
    nodes.append(N("Reshape", ["patch", "shape_btd"], ["patch_flat"], name="patch_reshape"))
    nodes.append(N("Transpose", ["patch_flat"], ["tok"], name="patch_transpose", perm=[0, 2, 1]))
    inits += [w("pos", 1, T, D), c("attn_scale", 0.25)]
    nodes.append(N("Add", ["tok", "pos"], ["h"], name="pos_add"))

    def linear(x, y, din, dout):
        inits.extend([w(f"{y}_w", din, dout), w(f"{y}_b", dout)])
        nodes.append(N("MatMul", [x, f"{y}_w"], [f"{y}_mm"], name=f"mm_{y}"))
        nodes.append(N("Add", [f"{y}_mm", f"{y}_b"], [y], name=f"bias_{y}"))

    def ln(x, y):
        inits.extend([c(f"{y}_g", np.ones(D)), c(f"{y}_bb", np.zeros(D))])
        nodes.append(N("LayerNormalization", [x, f"{y}_g", f"{y}_bb"], [y], name=f"ln_{y}",
                       axis=-1, epsilon=1e-5))

    prev = "h"
    for b in range(4):
        p = f"l{b}"
        ln(prev, f"{p}_ln1")
        for t in "qkv":
            linear(f"{p}_ln1", f"{p}_{t}", D, D)
        nodes.append(N("Transpose", [f"{p}_k"], [f"{p}_kt"], name=f"{p}_k_transpose",
                       perm=[0, 2, 1]))
        nodes.append(N("MatMul", [f"{p}_q", f"{p}_kt"], [f"{p}_s"], name=f"{p}_attn_qk"))
        nodes.append(N("Mul", [f"{p}_s", "attn_scale"], [f"{p}_ss"], name=f"{p}_attn_scale"))
        nodes.append(N("Softmax", [f"{p}_ss"], [f"{p}_pr"], name=f"{p}_softmax", axis=-1))
        nodes.append(N("MatMul", [f"{p}_pr", f"{p}_v"], [f"{p}_ctx"], name=f"{p}_attn_pv"))
        linear(f"{p}_ctx", f"{p}_o", D, D)
        nodes.append(N("Add", [prev, f"{p}_o"], [f"{p}_h1"], name=f"{p}_residual1"))
        ln(f"{p}_h1", f"{p}_ln2")
        linear(f"{p}_ln2", f"{p}_fc1", D, 2 * D)
        nodes.append(N("Gelu", [f"{p}_fc1"], [f"{p}_gelu"], name=f"{p}_gelu"))
        linear(f"{p}_gelu", f"{p}_fc2", 2 * D, D)
        nodes.append(N("Add", [f"{p}_h1", f"{p}_fc2"], [f"{p}_h2"], name=f"{p}_residual2"))
        prev = f"{p}_h2"
    inits.append(c("pool_axes", [1], np.int64))
    nodes.append(N("ReduceMean", [prev, "pool_axes"], ["pooled"], name="pool_tokens",
                   keepdims=0))
    inits.append(w("head_w", D, 10))
    nodes.append(N("MatMul", ["pooled", "head_w"], ["logits"], name="head"))
    g = helper.make_graph(nodes, "vit_deep",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)],
                             producer_name="qplace-tests", ir_version=9)


def main(argv):
    out = argv[0] if argv else os.path.dirname(os.path.abspath(__file__))
    save(resnet_deep(), os.path.join(out, "resnet_deep.onnx"))
    save(vit_deep(), os.path.join(out, "vit_deep.onnx"))
    save(resnet_deep(3, "resnet_short"), os.path.join(out, "resnet_short.onnx"))
    save(resnet_stages(), os.path.join(out, "resnet_stages.onnx"))  # last: the others' weights stay
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
