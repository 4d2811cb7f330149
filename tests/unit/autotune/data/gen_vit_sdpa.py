#!/usr/bin/python3
"""Writes vit_sdpa.onnx: a two-block ViT-like model with the SDPA-style attention scale of
ModelOpt issue #2123 (tests/models/gen_vit_tiny.py's structure, far smaller).

Usage: /usr/bin/python3 gen_vit_sdpa.py OUT_DIR

Input "input" [1,3,16,16]; patch embedding Conv 4x4/4 (3 -> 16), class token, position
embedding, two pre-norm blocks: LayerNormalization, qkv MatMul+Add, 2 heads of 8, the scale
sqrt(head_dim) computed from the query's shape (Shape -> Gather -> Cast -> Sqrt, a tensor the
engine computes at plan time) dividing Q.K^T (Div), Softmax, output projection, residual Add;
LayerNormalization, fc1, GELU as 0.5*x*(1+erf(x/sqrt 2)) (Div, Erf, Add, Mul, Mul), fc2, residual
Add; final LayerNormalization, class token, Gemm to 10 classes ("logits"). Opset 17, fixed seed.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DIM, HEADS, DEPTH, MLP, PATCH, IMG, CLASSES = 16, 2, 2, 32, 4, 16, 10


def build():
    rng = np.random.default_rng(2123)
    nodes, inits, counter = [], [], [0]

    def name(prefix):
        counter[0] += 1
        return '%s_%d' % (prefix, counter[0])

    def const(arr, prefix='c'):
        n = name(prefix)
        inits.append(numpy_helper.from_array(np.asarray(arr), n))
        return n

    def node(op, ins, **attrs):
        y = name(op.lower())
        nodes.append(helper.make_node(op, ins, [y], name=y, **attrs))
        return y

    def linear(x, cin, cout):
        wt = (rng.standard_normal((cin, cout)) / np.sqrt(cin)).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.02).astype(np.float32)
        return node('Add', [node('MatMul', [x, const(wt, 'w')]), const(b, 'b')])

    def layernorm(x):
        g = (1.0 + 0.05 * rng.standard_normal(DIM)).astype(np.float32)
        b = (0.02 * rng.standard_normal(DIM)).astype(np.float32)
        return node('LayerNormalization', [x, const(g, 'ln_g'), const(b, 'ln_b')], axis=-1,
                    epsilon=1e-6)

    npatch = (IMG // PATCH) ** 2
    wpe = (rng.standard_normal((DIM, 3, PATCH, PATCH)) / np.sqrt(3 * PATCH * PATCH)).astype(
        np.float32)
    pe = node('Conv', ['input', const(wpe, 'patch_w'), const(np.zeros(DIM, np.float32), 'patch_b')],
              kernel_shape=[PATCH, PATCH], strides=[PATCH, PATCH])
    pe = node('Reshape', [pe, const(np.array([0, DIM, -1], np.int64), 'shape')])
    pe = node('Transpose', [pe], perm=[0, 2, 1])
    cls = const((0.02 * rng.standard_normal((1, 1, DIM))).astype(np.float32), 'cls')
    x = node('Concat', [cls, pe], axis=1)
    x = node('Add', [x, const((0.02 * rng.standard_normal((1, npatch + 1, DIM))).astype(
        np.float32), 'pos')])
    hd = DIM // HEADS
    for _ in range(DEPTH):
        qkv = linear(layernorm(x), DIM, 3 * DIM)
        qkv = node('Reshape', [qkv, const(np.array([0, -1, 3, HEADS, hd], np.int64), 'shape')])
        qkv = node('Transpose', [qkv], perm=[2, 0, 3, 1, 4])
        q = node('Gather', [qkv, const(np.array(0, np.int64))], axis=0)
        k = node('Gather', [qkv, const(np.array(1, np.int64))], axis=0)
        v = node('Gather', [qkv, const(np.array(2, np.int64))], axis=0)
        d = node('Gather', [node('Shape', [q]), const(np.array(-1, np.int64))], axis=0)
        scale = node('Sqrt', [node('Cast', [d], to=TensorProto.FLOAT)])
        att = node('Div', [node('MatMul', [q, node('Transpose', [k], perm=[0, 1, 3, 2])]), scale])
        o = node('MatMul', [node('Softmax', [att], axis=-1), v])
        o = node('Reshape', [node('Transpose', [o], perm=[0, 2, 1, 3]),
                             const(np.array([0, -1, DIM], np.int64), 'shape')])
        x = node('Add', [x, linear(o, DIM, DIM)])
        h = linear(layernorm(x), DIM, MLP)
        e = node('Erf', [node('Div', [h, const(np.array(np.sqrt(2.0), np.float32))])])
        g = node('Mul', [node('Mul', [h, node('Add', [e, const(np.array(1.0, np.float32))])]),
                         const(np.array(0.5, np.float32))])
        x = node('Add', [x, linear(g, MLP, DIM)])
    tok = node('Gather', [layernorm(x), const(np.array(0, np.int64))], axis=1)
    whead = (rng.standard_normal((CLASSES, DIM)) / np.sqrt(DIM)).astype(np.float32)
    nodes.append(helper.make_node('Gemm', [tok, const(whead, 'head_w'),
                                           const(np.zeros(CLASSES, np.float32), 'head_b')],
                                  ['logits'], name='head', transB=1))
    graph = helper.make_graph(
        nodes, 'vit_sdpa',
        [helper.make_tensor_value_info('input', TensorProto.FLOAT, [1, 3, IMG, IMG])],
        [helper.make_tensor_value_info('logits', TensorProto.FLOAT, [1, CLASSES])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)],
                              producer_name='qplace-tests')
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 1
    onnx.save(build(), os.path.join(argv[1], 'vit_sdpa.onnx'))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
