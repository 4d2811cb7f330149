#!/usr/bin/python3
"""Checks of a model written by `qplace quantize` for quantize_output.cases:
quantize_output_check.py CHECK MODEL [ARG]; exit 0 when it holds, else 1 with the reason.

  opset N        the default-domain opset import is N
  external DATA  every initializer of 1 KiB or more lives in the file DATA (beside MODEL), and
                 the model loads with its data
  fp32_op OP     every OP node reads and writes float32 (declared dtypes, initializers, or a
                 Cast to float feeding it), with fp16 elsewhere in the model
  bf16           bfloat16 initializers present, no float16 ones, graph I/O float32
  direct_io      graph inputs int8/float8 read by DequantizeLinear only, outputs float16
"""
import os
import sys

import onnx
from onnx import TensorProto as T


def fail(msg):
    print(msg)
    sys.exit(1)


def dtypes(m):
    d = {v.name: v.type.tensor_type.elem_type
         for v in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output)}
    d.update({t.name: t.data_type for t in m.graph.initializer})
    for n in m.graph.node:
        if n.op_type == "Cast":
            d[n.output[0]] = next(a.i for a in n.attribute if a.name == "to")
    return d


def main():
    check, path = sys.argv[1], sys.argv[2]
    arg = sys.argv[3] if len(sys.argv) > 3 else None
    if check == "external":
        m = onnx.load(path, load_external_data=False)
        big = [t for t in m.graph.initializer
               if t.data_location == T.EXTERNAL or len(t.raw_data) >= 1024]
        where = {e.value for t in big for e in t.external_data if e.key == "location"}
        if not big or any(t.data_location != T.EXTERNAL for t in big) or where != {arg}:
            fail(f"large initializers not all in {arg}: {where}")
        if not os.path.exists(os.path.join(os.path.dirname(path), arg)):
            fail(f"{arg} missing")
        onnx.load(path)  # with its data
        return
    m = onnx.load(path)
    if check == "opset":
        got = [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")]
        if got != [int(arg)]:
            fail(f"opset {got}, expected {arg}")
    elif check == "fp32_op":
        d = dtypes(m)
        nodes = [n for n in m.graph.node if n.op_type == arg]
        if not nodes:
            fail(f"no {arg} node")
        for n in nodes:
            # inputs declared or cast to float32; the output is not declared otherwise (the
            # pass adds no value_info for it)
            slots = [(t, d.get(t)) for t in n.input if t]
            slots.append((n.output[0], d.get(n.output[0], T.FLOAT)))
            for t, got in slots:
                if got != T.FLOAT:
                    fail(f"{n.name}: {t} is {got}, not float32")
        if not any(v == T.FLOAT16 for v in d.values()):
            fail("no fp16 tensor at all")
    elif check == "bf16":
        kinds = {t.data_type for t in m.graph.initializer}
        io = {v.type.tensor_type.elem_type for v in list(m.graph.input) + list(m.graph.output)}
        if T.BFLOAT16 not in kinds or T.FLOAT16 in kinds or io != {T.FLOAT}:
            fail(f"initializer dtypes {kinds}, I/O {io}")
    elif check == "direct_io":
        # 17 is FLOAT8E4M3FN (onnx 1.12 has no name for it)
        ins = {v.name: v.type.tensor_type.elem_type for v in m.graph.input}
        outs = {v.type.tensor_type.elem_type for v in m.graph.output}
        if set(ins.values()) - {T.INT8, 17} or outs != {T.FLOAT16}:
            fail(f"inputs {ins}, outputs {outs}")
        for n in m.graph.node:
            if any(i in ins for i in n.input) and n.op_type != "DequantizeLinear":
                fail(f"graph input read by {n.op_type}")
    else:
        fail(f"unknown check {check}")


main()
