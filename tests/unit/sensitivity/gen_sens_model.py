#!/usr/bin/python3
"""Writes the small sensitivity test model and its placement (committed; regenerate with
/usr/bin/python3 gen_sens_model.py OUT_DIR).

x[N,3,8,8] -> conv1 -> sig1 (Sigmoid) -> conv2 -> flat (Reshape [N,4,64]) -> mm (MatMul 64x16)
  -> addb (Add a large offset) -> ln (LayerNormalization) -> sm (Softmax) -> y[N,4,16]
ln output also -> am (ArgMax, int64) -> cast_idx (Cast to float) -> z[N,4,1]

The offset before ln makes its input's int8 step large compared with the spread that the
normalization magnifies, so quantizing ln's input hurts most. sens_small.placement.json is the
trt-like placement (conv/matmul inputs and weights) plus the inputs of ln, sm and sig1;
sens_small.failing.placement.json adds the int64 edge am -> cast_idx (no calibrated range).
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main(argv):
    out = argv[1] if len(argv) > 1 else os.path.dirname(os.path.abspath(__file__)) + '/data'
    rng = np.random.RandomState(7)
    inits = [
        numpy_helper.from_array((rng.randn(4, 3, 3, 3) * 0.3).astype(np.float32), 'w1'),
        numpy_helper.from_array((rng.randn(4) * 0.1).astype(np.float32), 'b1'),
        numpy_helper.from_array((rng.randn(4, 4, 3, 3) * 0.3).astype(np.float32), 'w2'),
        numpy_helper.from_array((rng.randn(4) * 0.1).astype(np.float32), 'b2'),
        numpy_helper.from_array(np.array([0, 4, 64], dtype=np.int64), 'shape'),
        numpy_helper.from_array((rng.randn(64, 16) * 0.2).astype(np.float32), 'wm'),
        numpy_helper.from_array((40 + rng.rand(16)).astype(np.float32), 'offset'),
        numpy_helper.from_array(np.full(16, 3.0, dtype=np.float32), 'gamma'),
        numpy_helper.from_array(np.zeros(16, dtype=np.float32), 'beta'),
    ]
    nodes = [
        helper.make_node('Conv', ['x', 'w1', 'b1'], ['c1'], 'conv1', pads=[1, 1, 1, 1]),
        helper.make_node('Sigmoid', ['c1'], ['s1'], 'sig1'),
        helper.make_node('Conv', ['s1', 'w2', 'b2'], ['c2'], 'conv2', pads=[1, 1, 1, 1]),
        helper.make_node('Reshape', ['c2', 'shape'], ['f'], 'flat'),
        helper.make_node('MatMul', ['f', 'wm'], ['m'], 'mm'),
        helper.make_node('Add', ['m', 'offset'], ['a'], 'addb'),
        helper.make_node('LayerNormalization', ['a', 'gamma', 'beta'], ['l'], 'ln', axis=-1),
        helper.make_node('Softmax', ['l'], ['y'], 'sm', axis=-1),
        helper.make_node('ArgMax', ['l'], ['idx'], 'am', axis=-1, keepdims=1),
        helper.make_node('Cast', ['idx'], ['z'], 'cast_idx', to=TensorProto.FLOAT),
    ]
    g = helper.make_graph(
        nodes, 'sens_small',
        [helper.make_tensor_value_info('x', TensorProto.FLOAT, ['N', 3, 8, 8])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, ['N', 4, 16]),
         helper.make_tensor_value_info('z', TensorProto.FLOAT, ['N', 4, 1])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 19)],
                          producer_name='qplace-tests')
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(out, 'sens_small.onnx'))

    edges = [('x', 'conv1', 0, 'trt.conv_input'), ('c1', 'sig1', 0, 'user.test'),
             ('s1', 'conv2', 0, 'trt.conv_input'), ('f', 'mm', 0, 'trt.matmul_input'),
             ('a', 'ln', 0, 'user.test'), ('l', 'sm', 0, 'user.test')]
    weights = [('w1', 'conv1', 1, 0, 'trt.conv_weight'), ('w2', 'conv2', 1, 0, 'trt.conv_weight'),
               ('wm', 'mm', 1, 1, 'trt.matmul_weight')]

    def write(name, edges):
        doc = {'format': 'qplace.placement', 'version': 1,
               'edges': [{'tensor': t, 'node': n, 'input': i, 'reason': r}
                         for t, n, i, r in edges],
               'weights': [{'tensor': t, 'node': n, 'input': i, 'axis': a, 'reason': r}
                           for t, n, i, a, r in weights]}
        with open(os.path.join(out, name), 'w') as f:
            json.dump(doc, f, indent=1)
            f.write('\n')

    write('sens_small.placement.json', edges)
    write('sens_small.failing.placement.json', edges + [('idx', 'cast_idx', 0, 'user.test')])
    # Calibration / evaluation data: 6 samples.
    np.savez(os.path.join(out, 'sens_small.calib.npz'),
             x=rng.rand(6, 3, 8, 8).astype(np.float32))


if __name__ == '__main__':
    main(sys.argv)
