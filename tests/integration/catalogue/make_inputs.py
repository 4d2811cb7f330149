#!/usr/bin/python3
"""Writes the bad inputs of the catalogue into a folder: make_inputs.py DIR SMALL_MODEL.

  broken.onnx     bytes that are no protobuf
  truncated.onnx  the first half of the small model
  empty.onnx      an empty file
  custom.onnx     a valid model whose only op (com.example FancyOp) no engine runs
  wrong64.npy     the small model's input as float64 (1x2x4x4)
  wrongshape.npy  float32 with another channel count (1x3x4x4)
  good.npy        the small model's input (1x2x4x4 float32)
  pickled.npy     an object array (pickled Python objects)
  nosuch.json     a placement naming a node the small model lacks
  dynamic.onnx    a Relu with input x of dims [batch, 3, height, width]
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

out, small = sys.argv[1], sys.argv[2]


def put(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


put("broken.onnx", b"\x08\x07this is not an ONNX model")
whole = open(small, "rb").read()
put("truncated.onnx", whole[: len(whole) // 2])
put("empty.onnx", b"")
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
g = helper.make_graph([helper.make_node("FancyOp", ["x"], ["y"], domain="com.example")], "g",
                      [x], [y])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                              helper.make_opsetid("com.example", 1)]),
          os.path.join(out, "custom.onnx"))
xd = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "height", "width"])
yd = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, "height", "width"])
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "d", [xd], [yd])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
          os.path.join(out, "dynamic.onnx"))
np.save(os.path.join(out, "wrong64.npy"), np.zeros((1, 2, 4, 4), np.float64))
np.save(os.path.join(out, "wrongshape.npy"), np.zeros((1, 3, 4, 4), np.float32))
np.save(os.path.join(out, "good.npy"), np.ones((1, 2, 4, 4), np.float32))
np.save(os.path.join(out, "pickled.npy"), np.array([{"a": 1}], dtype=object), allow_pickle=True)
put("nosuch.json", b'{"format": "qplace.placement", "version": 1, "edges": [{"tensor": "input", '
    b'"node": "nosuch", "input": 0, "reason": "user"}], "weights": []}\n')
