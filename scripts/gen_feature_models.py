#!/usr/bin/python3
"""Writes small ONNX models that use the parts of the format the ONNX test data leaves out:
model-local functions, metadata, every attribute type (sparse tensors and type protos too),
quantization annotations, symbolic dims, denotations, doc strings,
non-tensor value types and tensors of many dtypes. They seed the model fuzzer and are round-
tripped by ctest (integration/roundtrip/corpus).

    /usr/bin/python3 scripts/gen_feature_models.py fuzz/corpus/model

Needs Debian's python3-onnx (scripts/setup.sh installs it). Output is deterministic.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def tensor_type(elem, shape, denotation=None):
    t = helper.make_tensor_type_proto(elem, shape)
    if denotation:
        t.denotation = denotation
    return t


def features_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, None])
    x.doc_string = "input with a symbolic, a static and an unknown dim"
    x.type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, None])
    seq_out = helper.make_value_info(
        "seq", helper.make_sequence_type_proto(tensor_type(TensorProto.FLOAT, None)))

    inits = [
        numpy_helper.from_array(np.arange(3, dtype=np.float32).reshape(1, 3, 1), "bias"),
        helper.make_tensor("i64", TensorProto.INT64, [4], [1, -2, 1 << 40, -(1 << 62)]),
        helper.make_tensor("f16", TensorProto.FLOAT16, [2], np.array([1.5, -0.25], np.float16)
                           .view(np.uint16).astype(np.int32).tolist()),
        helper.make_tensor("bools", TensorProto.BOOL, [3], [True, False, True]),
        helper.make_tensor("i8", TensorProto.INT8, [2, 2], [-128, -1, 0, 127]),
        helper.make_tensor("u8raw", TensorProto.UINT8, [5], b"\x00\x01\x7f\x80\xff", raw=True),
        helper.make_tensor("dbl", TensorProto.DOUBLE, [2], [3.25, -1e300]),
        helper.make_tensor("strs", TensorProto.STRING, [3], [b"a", b"", b"\xff\x00z"]),
        helper.make_tensor("scalar", TensorProto.FLOAT, [], [7.0]),
        helper.make_tensor("empty", TensorProto.FLOAT, [0, 4], []),
    ]
    inits[0].doc_string = "an initializer with a doc string"

    then_g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["then_out"], name="then_id")], "then_graph", [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, None)])
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["else_out"], name="else_neg")], "else_graph", [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, None)])

    sparse = helper.make_sparse_tensor(
        helper.make_tensor("sp_values", TensorProto.FLOAT, [2], [1.0, 2.0]),
        helper.make_tensor("sp_indices", TensorProto.INT64, [2], [1, 5]), [2, 4])

    custom = helper.make_node(
        "EveryAttribute", ["x"], ["custom_out"], name="every_attribute", domain="qp.test",
        doc_string="a node carrying one attribute of each type",
        f=0.1, i=-3, s=b"bytes\x00inside", t=numpy_helper.from_array(np.ones(2, np.float32), "t"),
        g=then_g, floats=[1.0, float("inf"), -0.0], ints=[0, -1, 1 << 50], strings=[b"x", b""],
        tensors=[numpy_helper.from_array(np.zeros(1, np.int32), "t0")], graphs=[else_g])
    a = custom.attribute.add()
    a.name = "sparse"
    a.type = onnx.AttributeProto.SPARSE_TENSOR
    a.sparse_tensor.CopyFrom(sparse)
    a = custom.attribute.add()
    a.name = "sparses"
    a.type = onnx.AttributeProto.SPARSE_TENSORS
    a.sparse_tensors.extend([sparse, sparse])
    a = custom.attribute.add()
    a.name = "tp"
    a.type = onnx.AttributeProto.TYPE_PROTO
    a.tp.CopyFrom(tensor_type(TensorProto.INT8, [1, "n"], "IMAGE"))
    a = custom.attribute.add()
    a.name = "tps"
    a.type = onnx.AttributeProto.TYPE_PROTOS
    a.type_protos.extend([tensor_type(TensorProto.FLOAT, [2]),
                          helper.make_optional_type_proto(tensor_type(TensorProto.INT64, None))])
    a = custom.attribute.add()
    a.name = "empty_ints"
    a.type = onnx.AttributeProto.INTS

    nodes = [
        helper.make_node("Add", ["x", "bias"], ["added"], name="add_bias", doc_string="adds"),
        helper.make_node("MyScaledRelu", ["added"], ["relu_out"], name="fn_call", domain="qp.fn",
                         alpha=2.0),
        helper.make_node("Greater", ["scalar", "scalar"], ["cond"], name=""),  # unnamed
        helper.make_node("If", ["cond"], ["if_out"], name="branch", then_branch=then_g,
                         else_branch=else_g),
        helper.make_node("Add", ["relu_out", "if_out"], ["y"], name="merge"),
        custom,
        helper.make_node("SequenceConstruct", ["x", "x"], ["seq"], name="seq_make"),
        helper.make_node("Constant", [], ["const_out"], name="const",
                         value=numpy_helper.from_array(np.array([[1, 2]], np.int64))),
    ]
    graph = helper.make_graph(nodes, "features", [x], [y, seq_out], inits,
                              doc_string="graph doc string",
                              value_info=[helper.make_tensor_value_info(
                                  "added", TensorProto.FLOAT, ["batch", 3, "w"])])
    qa = graph.quantization_annotation.add()
    qa.tensor_name = "added"
    kv = qa.quant_parameter_tensor_names.add()
    kv.key = "SCALE_TENSOR"
    kv.value = "bias"

    fn = helper.make_function(
        "qp.fn", "MyScaledRelu", ["X"], ["Y"],
        [helper.make_node("Constant", [], ["A"], value_float=1.0),
         helper.make_node("Relu", ["X"], ["R"]),
         helper.make_node("Mul", ["R", "A"], ["Y"])],
        [helper.make_opsetid("", 15)], attributes=["alpha"], doc_string="relu times alpha")
    fn.node[0].attribute[0].ref_attr_name = "alpha"
    fn.node[0].attribute[0].name = "value_float"

    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 15), helper.make_opsetid("qp.fn", 1),
                              helper.make_opsetid("qp.test", 3)],
        producer_name="qplace-features", producer_version="0.1", functions=[fn])
    model.ir_version = 8
    model.domain = "org.qplace.test"
    model.model_version = 42
    model.doc_string = "exercises what the ONNX test data leaves out"
    helper.set_model_props(model, {"author": "qplace", "empty": "", "unicode": "\u00e9\u4e2d"})
    return model


def minimal_model():
    """The smallest model a loader should accept: one Identity."""
    g = helper.make_graph([helper.make_node("Identity", ["a"], ["b"])], "m",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7
    return m


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "fuzz/corpus/model"
    os.makedirs(out, exist_ok=True)
    for name, model in (("features", features_model()), ("minimal", minimal_model())):
        path = os.path.join(out, name + ".onnx")
        with open(path, "wb") as f:
            f.write(model.SerializeToString(deterministic=True))
        print(path)


if __name__ == "__main__":
    main()
