#!/usr/bin/python3
"""Writes a ~100 MB float model for the load/save benchmark: an MLP of four 2560x2560 MatMul
weights (26 MB each) with biases and Relus, weights in raw_data, deterministic values.

    /usr/bin/python3 bench/gen_big_model.py OUT.onnx [SIDE] [LAYERS]

Needs Debian's python3-onnx and python3-numpy (scripts/setup.sh installs them).
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    out = sys.argv[1]
    side = int(sys.argv[2]) if len(sys.argv) > 2 else 2560
    layers = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    rng = np.random.default_rng(20240229)
    inits, nodes = [], []
    cur = "x"
    for k in range(layers):
        w = (rng.standard_normal((side, side), dtype=np.float32) / np.sqrt(side)).astype(np.float32)
        b = rng.standard_normal(side, dtype=np.float32) * 0.01
        inits += [numpy_helper.from_array(w, f"layer{k}.weight"),
                  numpy_helper.from_array(b.astype(np.float32), f"layer{k}.bias")]
        nodes += [helper.make_node("MatMul", [cur, f"layer{k}.weight"], [f"mm{k}"], name=f"/layer{k}/MatMul"),
                  helper.make_node("Add", [f"mm{k}", f"layer{k}.bias"], [f"add{k}"], name=f"/layer{k}/Add")]
        cur = f"add{k}"
        if k + 1 < layers:
            nodes.append(helper.make_node("Relu", [cur], [f"relu{k}"], name=f"/layer{k}/Relu"))
            cur = f"relu{k}"
    nodes.append(helper.make_node("Identity", [cur], ["y"], name="/out"))
    graph = helper.make_graph(
        nodes, "bench_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", side])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", side])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="qplace-bench")
    model.ir_version = 8
    with open(out, "wb") as f:
        f.write(model.SerializeToString())


if __name__ == "__main__":
    main()
