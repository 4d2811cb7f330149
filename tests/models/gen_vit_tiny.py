#!/usr/bin/python3
"""Writes a ViT-tiny/16 (224) ONNX model with random weights.

Usage: /usr/bin/python3 gen_vit_tiny.py OUT.onnx [--batch N]

Patch embedding Conv 16x16/16 (3 -> 192), class token, learned position embedding, 12 blocks of
pre-norm attention (3 heads of 64) and MLP (768), final LayerNorm, classifier on the class token.
Opset 17: LayerNormalization; GELU as the exact erf formula decomposed (0.5*x*(1+erf(x/sqrt 2)),
opset 17 has no Gelu op); attention scaled SDPA-style by Shape -> Gather -> Cast -> Sqrt -> Div.
Fixed seed; weights scaled (fan-in, residual branches by 1/sqrt(2*depth)) so activations neither
explode nor vanish. Input "input" [N,3,224,224] (N symbolic unless --batch), output "logits".
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DIM, HEADS, DEPTH, MLP, PATCH, IMG = 192, 3, 12, 768, 16, 224


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 1
    out = argv[1]
    batch = 'N'
    if '--batch' in argv:
        batch = int(argv[argv.index('--batch') + 1])
    rng = np.random.default_rng(192)
    nodes, inits = [], []
    counter = [0]

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

    def linear(x, cin, cout, gain=1.0):
        w = (rng.standard_normal((cin, cout)) * gain / np.sqrt(cin)).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.02).astype(np.float32)
        return node('Add', [node('MatMul', [x, const(w, 'w')]), const(b, 'b')])

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
    pe = node('Transpose', [pe], perm=[0, 2, 1])  # [N,196,192]
    # Class token expanded to the batch: Shape -> Slice batch -> Concat -> Expand.
    cls = const((0.02 * rng.standard_normal((1, 1, DIM))).astype(np.float32), 'cls')
    nb = node('Slice', [node('Shape', ['input']), const(np.array([0], np.int64)),
                        const(np.array([1], np.int64))])
    cls_shape = node('Concat', [nb, const(np.array([1, DIM], np.int64))], axis=0)
    x = node('Concat', [node('Expand', [cls, cls_shape]), pe], axis=1)
    pos = (0.02 * rng.standard_normal((1, npatch + 1, DIM))).astype(np.float32)
    x = node('Add', [x, const(pos, 'pos')])
    rgain = 1.0 / np.sqrt(2 * DEPTH)
    hd = DIM // HEADS
    for _ in range(DEPTH):
        h = layernorm(x)
        qkv = linear(h, DIM, 3 * DIM)
        qkv = node('Reshape', [qkv, const(np.array([0, -1, 3, HEADS, hd], np.int64), 'shape')])
        qkv = node('Transpose', [qkv], perm=[2, 0, 3, 1, 4])  # [3,N,H,T,hd]
        q = node('Gather', [qkv, const(np.array(0, np.int64))], axis=0)
        k = node('Gather', [qkv, const(np.array(1, np.int64))], axis=0)
        v = node('Gather', [qkv, const(np.array(2, np.int64))], axis=0)
        # SDPA-style scale: sqrt(head_dim) from the query's shape.
        d = node('Gather', [node('Shape', [q]), const(np.array(-1, np.int64))], axis=0)
        scale = node('Sqrt', [node('Cast', [d], to=TensorProto.FLOAT)])
        att = node('Div', [node('MatMul', [q, node('Transpose', [k], perm=[0, 1, 3, 2])]), scale])
        att = node('Softmax', [att], axis=-1)
        o = node('MatMul', [att, v])  # [N,H,T,hd]
        o = node('Reshape', [node('Transpose', [o], perm=[0, 2, 1, 3]),
                             const(np.array([0, -1, DIM], np.int64), 'shape')])
        x = node('Add', [x, linear(o, DIM, DIM, gain=rgain * np.sqrt(2))])
        h = linear(layernorm(x), DIM, MLP)
        # GELU, exact: 0.5 * x * (1 + erf(x / sqrt(2)))
        e = node('Erf', [node('Div', [h, const(np.array(np.sqrt(2.0), np.float32))])])
        g = node('Mul', [node('Mul', [h, node('Add', [e, const(np.array(1.0, np.float32))])]),
                         const(np.array(0.5, np.float32))])
        x = node('Add', [x, linear(g, MLP, DIM, gain=rgain * np.sqrt(2))])
    x = layernorm(x)
    tok = node('Gather', [x, const(np.array(0, np.int64))], axis=1)  # [N,192]
    whead = (rng.standard_normal((1000, DIM)) / np.sqrt(DIM)).astype(np.float32)
    nodes.append(helper.make_node('Gemm', [tok, const(whead, 'head_w'),
                                           const(np.zeros(1000, np.float32), 'head_b')],
                                  ['logits'], name='head', transB=1))
    graph = helper.make_graph(
        nodes, 'vit_tiny', [helper.make_tensor_value_info('input', TensorProto.FLOAT,
                                                          [batch, 3, IMG, IMG])],
        [helper.make_tensor_value_info('logits', TensorProto.FLOAT, [batch, 1000])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)],
                              producer_name='qplace-tests')
    model.ir_version = 8
    onnx.checker.check_model(model)
    tmp = '%s.tmp.%d' % (out, os.getpid())  # concurrent runs each write their own
    onnx.save(model, tmp)
    os.replace(tmp, out)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
