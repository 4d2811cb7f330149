#!/usr/bin/python3
"""Writes a ResNet-50 (v1.5, torchvision layout) ONNX model with random weights.

Usage: /usr/bin/python3 gen_resnet50.py OUT.onnx [--batch N]

BatchNorm is folded into the convolutions (as exporters do for inference), so the graph is
Conv(+bias) / Relu / MaxPool / Add / GlobalAveragePool / Flatten / Gemm: 53 convolutions.
Weights are He-scaled with a fixed seed, and the last convolution of every bottleneck is scaled
down (like zero-initialised residual BatchNorm gammas), so activations neither explode nor vanish
over the 16 residual blocks. Input "input" [N,3,224,224] (N symbolic unless --batch), output
"logits" [N,1000]. Opset 17.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 1
    out = argv[1]
    batch = 'N'
    if '--batch' in argv:
        batch = int(argv[argv.index('--batch') + 1])
    rng = np.random.default_rng(50)
    nodes, inits = [], []
    counter = [0]

    def name(prefix):
        counter[0] += 1
        return '%s_%d' % (prefix, counter[0])

    def conv(x, cin, cout, k, stride, pad, relu, gain=1.0):
        fan_in = cin * k * k
        w = rng.standard_normal((cout, cin, k, k)).astype(np.float32) * np.float32(
            gain * np.sqrt(2.0 / fan_in))
        b = (rng.standard_normal(cout) * 0.01).astype(np.float32)
        wn, bn, y = name('conv_w'), name('conv_b'), name('conv')
        inits.append(numpy_helper.from_array(w, wn))
        inits.append(numpy_helper.from_array(b, bn))
        nodes.append(helper.make_node('Conv', [x, wn, bn], [y], name=y, kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[pad] * 4))
        if relu:
            r = name('relu')
            nodes.append(helper.make_node('Relu', [y], [r], name=r))
            return r
        return y

    x = conv('input', 3, 64, 7, 2, 3, True)
    mp = name('maxpool')
    nodes.append(helper.make_node('MaxPool', [x], [mp], name=mp, kernel_shape=[3, 3],
                                  strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = mp, 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            s = stride if i == 0 else 1
            cout = width * 4
            h = conv(x, cin, width, 1, 1, 0, True)
            h = conv(h, width, width, 3, s, 1, True)  # v1.5: stride on the 3x3
            h = conv(h, width, cout, 1, 1, 0, False, gain=0.3)
            sc = conv(x, cin, cout, 1, s, 0, False) if i == 0 else x
            a, r = name('add'), name('relu')
            nodes.append(helper.make_node('Add', [h, sc], [a], name=a))
            nodes.append(helper.make_node('Relu', [a], [r], name=r))
            x, cin = r, cout
    gap, fl, fc = name('gap'), name('flatten'), 'logits'
    nodes.append(helper.make_node('GlobalAveragePool', [x], [gap], name=gap))
    nodes.append(helper.make_node('Flatten', [gap], [fl], name=fl, axis=1))
    wfc = (rng.standard_normal((1000, 2048)) * np.sqrt(1.0 / 2048)).astype(np.float32)
    inits.append(numpy_helper.from_array(wfc, 'fc_w'))
    inits.append(numpy_helper.from_array(np.zeros(1000, np.float32), 'fc_b'))
    nodes.append(helper.make_node('Gemm', [fl, 'fc_w', 'fc_b'], [fc], name='fc', transB=1))
    graph = helper.make_graph(
        nodes, 'resnet50', [helper.make_tensor_value_info('input', TensorProto.FLOAT,
                                                          [batch, 3, 224, 224])],
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
