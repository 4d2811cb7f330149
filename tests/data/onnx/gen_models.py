#!/usr/bin/python3
"""Generates the small ONNX files the src/onnx unit tests load (tests/unit/onnx/).

Run with the system Python that has onnx installed (ONNX 1.12 is enough; dtypes 17..23 are
written as plain data_type numbers):

    /usr/bin/python3 tests/data/onnx/gen_models.py

It rewrites every *.onnx / *.bin file in this folder plus dtypes_expected.h (the packed
little-endian bytes each dtype test tensor must load as, computed here with numpy independently
of the C code). Outputs are deterministic.
"""
import os
import struct
import sys

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
OPSET = [helper.make_opsetid("", 13)]

# An unknown varint field (number 99, value 7): the loader must keep it and the saver write it back.
UNKNOWN = b"\x98\x06\x07"


def with_unknown(msg):
    msg.MergeFromString(UNKNOWN)
    return msg


def save(model, name, check=True):
    if check:
        onnx.checker.check_model(model)
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(model.SerializeToString())


def model_of(graph, **kw):
    kw.setdefault("opset_imports", OPSET)
    m = helper.make_model(graph, producer_name="qplace-gen", **kw)
    m.ir_version = 8
    return m


# ---- every dtype, raw_data and typed-field forms ----------------------------------------------

def pack4(vals):
    """Two 4-bit elements per byte, first element in the low nibble."""
    out = []
    for i in range(0, len(vals), 2):
        lo = vals[i] & 0xF
        hi = (vals[i + 1] & 0xF) if i + 1 < len(vals) else 0
        out.append(lo | (hi << 4))
    return out


def bf16_bits(vals):
    f = np.array(vals, dtype=np.float32).view(np.uint32)
    return [int(x) >> 16 for x in f]  # values chosen to be exact in bf16


# name, dtype number, dims, raw bytes, typed field, typed values
DTYPES = []


def add(name, dt, dims, raw, field, typed):
    DTYPES.append((name, dt, dims, bytes(raw), field, typed))


def build_dtypes():
    f32 = [1.5, -2.0, 0.0, 3.25, 1e-3, -7.0]
    add("float", 1, [2, 3], np.array(f32, "<f4").tobytes(), "float_data", f32)
    add("double", 11, [3, 2], np.array(f32, "<f8").tobytes(), "double_data", f32)
    h = np.array([1.5, -2.0, 0.5, 65504.0], "<f2")
    add("float16", 10, [4], h.tobytes(), "int32_data", [int(x) for x in h.view("<u2")])
    b = bf16_bits([1.0, -2.0, 0.5, 3.0])
    add("bfloat16", 16, [2, 2], np.array(b, "<u2").tobytes(), "int32_data", b)
    fp8 = [0x38, 0xC0, 0x7E, 0x00, 0x01]
    for nm, dt in (("float8e4m3fn", 17), ("float8e4m3fnuz", 18), ("float8e5m2", 19),
                   ("float8e5m2fnuz", 20)):
        add(nm, dt, [5], fp8, "int32_data", fp8)
    u4 = [0, 15, 9]
    add("uint4", 21, [3], pack4(u4), "int32_data", pack4(u4))
    i4 = [-8, 7, 1, -1, 3]
    add("int4", 22, [5], pack4(i4), "int32_data", pack4(i4))
    f4 = [1, 2, 7, 0]
    add("float4e2m1", 23, [2, 2], pack4(f4), "int32_data", pack4(f4))
    v = [-128, 127, -1, 0]
    add("int8", 3, [4], np.array(v, "<i1").tobytes(), "int32_data", v)
    v = [0, 255, 7]
    add("uint8", 2, [3], np.array(v, "<u1").tobytes(), "int32_data", v)
    v = [-32768, 32767, -2]
    add("int16", 5, [3], np.array(v, "<i2").tobytes(), "int32_data", v)
    v = [0, 65535, 12345]
    add("uint16", 4, [3], np.array(v, "<u2").tobytes(), "int32_data", v)
    v = [-2**31, 2**31 - 1, 5]
    add("int32", 6, [3], np.array(v, "<i4").tobytes(), "int32_data", v)
    v = [-2**63, 2**63 - 1, 42]
    add("int64", 7, [3], np.array(v, "<i8").tobytes(), "int64_data", v)
    v = [0, 2**32 - 1, 7]
    add("uint32", 12, [3], np.array(v, "<u4").tobytes(), "uint64_data", v)
    v = [0, 2**64 - 1, 9]
    add("uint64", 13, [3], np.array(v, "<u8").tobytes(), "uint64_data", v)
    v = [1, 0, 1]
    add("bool", 9, [3], np.array(v, "<u1").tobytes(), "int32_data", v)
    c = [1.0, 2.0, -3.5, 0.0]
    add("complex64", 14, [2], np.array(c, "<f4").tobytes(), "float_data", c)
    add("complex128", 15, [2], np.array(c, "<f8").tobytes(), "double_data", c)
    # Rank 0 and empty tensors.
    add("scalar", 1, [], struct.pack("<f", 42.0), "float_data", [42.0])
    add("empty", 1, [0, 3], b"", "float_data", [])


def make_tensor(name, dt, dims, raw, field, typed, use_raw):
    t = TensorProto()
    t.name = name
    t.data_type = dt
    t.dims.extend(dims)
    if use_raw:
        t.raw_data = raw
    else:
        getattr(t, field).extend(typed)
    return t


def gen_dtypes():
    build_dtypes()
    inits = []
    for (name, dt, dims, raw, field, typed) in DTYPES:
        inits.append(make_tensor("raw_" + name, dt, dims, raw, field, typed, True))
        inits.append(make_tensor("typed_" + name, dt, dims, raw, field, typed, False))
    s = TensorProto()
    s.name = "strings"
    s.data_type = TensorProto.STRING
    s.dims.extend([3])
    s.string_data.extend([b"hello", b"", "w\u00f6rld".encode()])
    inits.append(s)
    # Every initializer is a graph output (a valid, node-free graph).
    outs = [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits]
    g = helper.make_graph([], "dtypes", [], outs, initializer=inits)
    save(model_of(g), "dtypes.onnx", check=False)  # ONNX 1.12's checker predates dtypes 17..23

    with open(os.path.join(HERE, "dtypes_expected.h"), "w") as f:
        f.write("/* Generated by gen_models.py: packed little-endian bytes of each dtype test\n"
                " * tensor in dtypes.onnx (raw_<name> and typed_<name> must both load as these). */\n")
        f.write("struct dtype_case {\n    const char *name;\n    int dtype;\n    int rank;\n"
                "    long long dims[4];\n    unsigned long long numel;\n    size_t nbytes;\n"
                "    const unsigned char *bytes;\n};\n\n")
        for (name, dt, dims, raw, field, typed) in DTYPES:
            body = ", ".join("0x%02x" % x for x in raw) if raw else "0"
            f.write("static const unsigned char dt_bytes_%s[] = {%s};\n" % (name, body))
        f.write("\nstatic const struct dtype_case dtype_cases[] = {\n")
        for (name, dt, dims, raw, field, typed) in DTYPES:
            numel = int(np.prod(dims)) if dims else 1
            d = ", ".join(str(x) for x in dims) if dims else "0"
            f.write("    {\"%s\", %d, %d, {%s}, %d, %d, dt_bytes_%s},\n"
                    % (name, dt, len(dims), d, numel, len(raw), name))
        f.write("};\n")


# ---- control flow, functions, metadata, unknown fields ---------------------------------------

def gen_control_flow():
    X = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 4])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 4])
    L = helper.make_tensor_value_info("L", TensorProto.FLOAT, ["batch", 4])
    F = helper.make_tensor_value_info("F", TensorProto.FLOAT, ["batch", 4])
    Y.doc_string = "the If result"

    w = helper.make_tensor("W", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])
    # Constant node: tensor attribute.
    const = helper.make_node("Constant", [], ["C"], name="const_c",
                             value=helper.make_tensor("cval", TensorProto.FLOAT, [4],
                                                      [0.5, 0.5, 0.5, 0.5]))
    xw = helper.make_node("Mul", ["X", "W"], ["XW"], name="mul_xw", doc_string="x times w")
    with_unknown(xw)

    # If: both branches read outer-scope tensors XW and C.
    then_out = helper.make_tensor_value_info("then_y", TensorProto.FLOAT, None)
    then_g = helper.make_graph([helper.make_node("Add", ["XW", "C"], ["then_y"], name="then_add")],
                               "then_branch", [], [then_out])
    else_out = helper.make_tensor_value_info("else_y", TensorProto.FLOAT, None)
    else_g = helper.make_graph([helper.make_node("Sub", ["XW", "C"], ["else_y"], name="else_sub")],
                               "else_branch", [], [else_out])
    with_unknown(else_g)
    if_node = helper.make_node("If", ["cond"], ["Y"], name="the_if", then_branch=then_g,
                               else_branch=else_g)

    # Loop: 3 iterations accumulating outer-scope W; the body has its own Constant and a
    # nested If reading the outer-outer tensor C.
    trip = helper.make_tensor("trip", TensorProto.INT64, [], [3])
    body_in = [helper.make_tensor_value_info("i", TensorProto.INT64, []),
               helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
               helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, ["batch", 4])]
    body_out = [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
                helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, ["batch", 4])]
    inner_then = helper.make_graph(
        [helper.make_node("Identity", ["C"], ["it_y"], name="inner_then_id")], "inner_then", [],
        [helper.make_tensor_value_info("it_y", TensorProto.FLOAT, [4])])
    inner_else = helper.make_graph(
        [helper.make_node("Neg", ["C"], ["ie_y"], name="inner_else_neg")], "inner_else", [],
        [helper.make_tensor_value_info("ie_y", TensorProto.FLOAT, [4])])
    body_nodes = [
        helper.make_node("Identity", ["c_in"], ["c_out"], name="body_cond"),
        helper.make_node("If", ["c_in"], ["delta"], name="body_if", then_branch=inner_then,
                         else_branch=inner_else),
        helper.make_node("Add", ["acc_in", "W"], ["acc_w"], name="body_add_w"),
        helper.make_node("Add", ["acc_w", "delta"], ["acc_out"], name="body_add_delta"),
    ]
    body = helper.make_graph(body_nodes, "loop_body", body_in, body_out,
                             value_info=[helper.make_tensor_value_info("acc_w", TensorProto.FLOAT,
                                                                       ["batch", 4])])
    loop = helper.make_node("Loop", ["trip", "cond", "X"], ["L"], name="the_loop", body=body)

    # A model-local function and a node calling it.
    fn = helper.make_function("qp.test", "AddTwice", ["a", "b"], ["c"],
                              [helper.make_node("Add", ["a", "b"], ["t"]),
                               helper.make_node("Add", ["t", "b"], ["c"])],
                              [helper.make_opsetid("", 13)])
    call = helper.make_node("AddTwice", ["X", "XW"], ["F"], name="call_fn", domain="qp.test")

    # Unnamed node: the loader names it.
    unnamed = helper.make_node("Relu", ["Y"], ["Yr"])
    Yr = helper.make_tensor_value_info("Yr", TensorProto.FLOAT, ["batch", 4])

    # An attribute of each kind on a custom-domain node (never run).
    g1 = helper.make_graph([helper.make_node("Identity", ["gi"], ["go"], name="zoo_g1_id")],
                           "zoo_g1", [helper.make_tensor_value_info("gi", TensorProto.FLOAT, [1])],
                           [helper.make_tensor_value_info("go", TensorProto.FLOAT, [1])])
    g2 = helper.make_graph([helper.make_node("Neg", ["X"], ["go2"], name="zoo_g2_neg")],
                           "zoo_g2", [], [helper.make_tensor_value_info("go2", TensorProto.FLOAT,
                                                                        None)])
    sp = helper.make_sparse_tensor(helper.make_tensor("spv", TensorProto.FLOAT, [2], [1.0, 2.0]),
                                   helper.make_tensor("spi", TensorProto.INT64, [2], [0, 3]), [4])
    tp = helper.make_tensor_type_proto(TensorProto.INT8, [2, "n"])
    attrs = helper.make_node("Custom", ["X"], ["Z"], name="attr_zoo", domain="qp.test",
                             f=0.25, i=-3, s=b"str", floats=[1.0, 2.5], ints=[1, -2, 3],
                             strings=[b"a", b"bc"],
                             tensors=[helper.make_tensor("t0", TensorProto.INT64, [2], [5, 6]),
                                      helper.make_tensor("t1", TensorProto.FLOAT, [], [1.0])],
                             graphs=[g1, g2])
    a = attrs.attribute.add()
    a.name = "sparse"
    a.type = AttributeProto.SPARSE_TENSOR
    a.sparse_tensor.CopyFrom(sp)
    a = attrs.attribute.add()
    a.name = "tp"
    a.type = AttributeProto.TYPE_PROTO
    a.tp.CopyFrom(tp)
    a = attrs.attribute.add()
    a.name = "tps"
    a.type = AttributeProto.TYPE_PROTOS
    a.type_protos.extend([tp, tp])
    # Files from before IR version 2 did not write `type`: inferred from the field set.
    a = attrs.attribute.add()
    a.name = "legacy"
    a.i = 11
    Z = helper.make_tensor_value_info("Z", TensorProto.FLOAT, None)

    g = helper.make_graph([const, xw, if_node, loop, call, unnamed, attrs], "main",
                          [X, cond], [Y, L, F, Yr, Z], initializer=[w, trip],
                          value_info=[helper.make_tensor_value_info("XW", TensorProto.FLOAT,
                                                                    ["batch", 4])],
                          doc_string="graph doc")
    with_unknown(g)
    m = model_of(g, opset_imports=OPSET + [helper.make_opsetid("qp.test", 1)],
                 functions=[fn], doc_string="model doc")
    m.producer_version = "1.0"
    m.domain = "ai.qplace.test"
    m.model_version = 7
    helper.set_model_props(m, {"author": "qplace", "license": "MIT"})
    with_unknown(m.opset_import[0])
    with_unknown(m.graph.initializer[0])
    with_unknown(m.graph.input[0])
    with_unknown(m.graph.node[0].attribute[0])
    with_unknown(m)
    save(m, "control_flow.onnx", check=False)  # Z has no shape, which the checker rejects


# ---- small model for truncation tests -------------------------------------------------------

def gen_small():
    X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    b = helper.make_tensor("b", TensorProto.FLOAT, [2], [1.0, 2.0])
    g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["y"], name="add")], "small",
                          [X], [Y], initializer=[b])
    m = model_of(g)
    # Field order of the file: ir_version, producer_name, graph, opset_import. Every strict
    # prefix is therefore either malformed or misses the graph or the opset import.
    save(m, "small.onnx")


# ---- external data --------------------------------------------------------------------------

def ext_tensor(name, location, offset=None, length=None, dims=(4,), extra=None):
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    kv = [("location", location)]
    if offset is not None:
        kv.append(("offset", str(offset)))
    if length is not None:
        kv.append(("length", str(length)))
    for k, v in kv + (extra or []):
        e = t.external_data.add()
        e.key = k
        e.value = v
    return t


def ext_model(name, tensors):
    X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    nodes, prev = [], "x"
    for i, t in enumerate(tensors):
        out = "y" if i == len(tensors) - 1 else "t%d" % i
        nodes.append(helper.make_node("Add", [prev, t.name], [out], name="add%d" % i))
        prev = out
    Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    g = helper.make_graph(nodes, "ext", [X], [Y], initializer=tensors)
    save(model_of(g), name, check=False)


def gen_external():
    a = np.array([1, 2, 3, 4], "<f4").tobytes()
    b = np.array([10, 20, 30, 40], "<f4").tobytes()
    # weights.bin: a at 0, 16 bytes of padding, b at 32 (48 bytes in all).
    with open(os.path.join(HERE, "weights.bin"), "wb") as f:
        f.write(a + b"\0" * 16 + b)
    with open(os.path.join(HERE, "tail.bin"), "wb") as f:
        f.write(b)
    ext_model("ext_good.onnx", [ext_tensor("wa", "weights.bin", 0, 16),
                                ext_tensor("wb", "weights.bin", 32, 16, extra=[("checksum", "x")]),
                                ext_tensor("wc", "tail.bin")])  # no offset/length: whole file
    ext_model("ext_absolute.onnx", [ext_tensor("w", "/tmp/weights.bin", 0, 16)])
    ext_model("ext_dotdot.onnx", [ext_tensor("w", "sub/../../weights.bin", 0, 16)])
    ext_model("ext_missing.onnx", [ext_tensor("w", "missing.bin", 0, 16)])
    ext_model("ext_offset_past_end.onnx", [ext_tensor("w", "weights.bin", 100, 16)])
    ext_model("ext_range_past_end.onnx", [ext_tensor("w", "weights.bin", 40, 16)])
    ext_model("ext_length_mismatch.onnx", [ext_tensor("w", "weights.bin", 0, 12)])
    ext_model("ext_size_mismatch.onnx", [ext_tensor("w", "weights.bin")])  # 48 bytes, need 16
    ext_model("ext_bad_offset.onnx", [ext_tensor("w", "weights.bin", "16x", 16)])
    ext_model("ext_symlink.onnx", [ext_tensor("w", "link.bin", 0, 16)])  # link made by the test


# ---- invalid graphs and tensors --------------------------------------------------------------

def simple_graph(nodes, inits=(), name="g", outputs=("y",)):
    X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2]) for o in outputs]
    return helper.make_graph(nodes, name, [X], outs, initializer=list(inits))


def gen_invalid():
    # Sparse initializer.
    vals = helper.make_tensor("sp", TensorProto.FLOAT, [2], [1.0, 2.0])
    idx = helper.make_tensor("sp_idx", TensorProto.INT64, [2], [0, 3])
    sp = helper.make_sparse_tensor(vals, idx, [4])
    g = simple_graph([helper.make_node("Relu", ["x"], ["y"], name="r")])
    g.sparse_initializer.append(sp)
    save(model_of(g), "sparse_init.onnx", check=False)

    # Cycle: a -> b -> a.
    g = simple_graph([helper.make_node("Add", ["x", "b_out"], ["a_out"], name="node_a"),
                      helper.make_node("Relu", ["a_out"], ["b_out"], name="node_b"),
                      helper.make_node("Identity", ["a_out"], ["y"], name="node_c")])
    save(model_of(g), "cycle.onnx", check=False)

    # Undefined input.
    g = simple_graph([helper.make_node("Add", ["x", "ghost"], ["y"], name="haunted")])
    save(model_of(g), "undefined_input.onnx", check=False)

    def bad_tensor(fname, t):
        g = simple_graph([helper.make_node("Add", ["x", t.name], ["y"], name="add")], [t])
        save(model_of(g), fname, check=False)

    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3], raw_data=b"\0" * 20)
    bad_tensor("bad_raw_len.onnx", t)
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, -3], raw_data=b"\0" * 24)
    bad_tensor("bad_negative_dim.onnx", t)
    # Dims claiming 4 PiB of floats with 4 bytes present: must fail without allocating.
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 20, 1 << 20, 1 << 10],
                    raw_data=b"\0" * 4)
    bad_tensor("bad_huge_dims.onnx", t)
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 20, 1 << 20, 1 << 10],
                    float_data=[1.0])
    bad_tensor("bad_huge_dims_typed.onnx", t)
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 40, 1 << 40], raw_data=b"")
    bad_tensor("bad_overflow_dims.onnx", t)
    t = TensorProto(name="w", data_type=TensorProto.INT8, dims=[3], int32_data=[1, 2])
    bad_tensor("bad_typed_count.onnx", t)
    t = TensorProto(name="w", data_type=99, dims=[1], raw_data=b"\0")
    bad_tensor("bad_dtype.onnx", t)
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1], float_data=[1.0],
                    raw_data=b"\0" * 4)
    bad_tensor("bad_raw_and_typed.onnx", t)
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1], raw_data=b"\0" * 4)
    t.segment.begin = 0
    t.segment.end = 1
    bad_tensor("bad_segment.onnx", t)

    # Constant whose tensor attribute has a bad raw_data length.
    c = helper.make_node("Constant", [], ["k"], name="bad_const",
                         value=TensorProto(name="kv", data_type=TensorProto.FLOAT, dims=[2],
                                           raw_data=b"\0" * 7))
    g = simple_graph([c, helper.make_node("Add", ["x", "k"], ["y"], name="add")])
    save(model_of(g), "bad_constant.onnx", check=False)

    # Unknown attribute type number and unknown data_location.
    r = helper.make_node("Relu", ["x"], ["y"], name="r")
    a = AttributeProto()
    a.ParseFromString(b"\x0a\x01a" + b"\xa0\x01\x63")  # name "a", type 99 (kept unknown)
    r.attribute.append(a)
    save(model_of(simple_graph([r])), "bad_attr_type.onnx", check=False)
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2], raw_data=b"\0" * 8)
    t.MergeFromString(b"\x70\x05")  # data_location (14) = 5
    bad_tensor("bad_data_location.onnx", t)

    # No opset import; no graph.
    g = simple_graph([helper.make_node("Relu", ["x"], ["y"], name="r")])
    m = model_of(g)
    del m.opset_import[:]
    save(m, "no_opset.onnx", check=False)
    m = onnx.ModelProto(ir_version=8)
    m.opset_import.append(helper.make_opsetid("", 13))
    save(m, "no_graph.onnx", check=False)

    # Two nodes writing one tensor.
    g = simple_graph([helper.make_node("Relu", ["x"], ["y"], name="r1"),
                      helper.make_node("Neg", ["x"], ["y"], name="r2")])
    save(model_of(g), "double_producer.onnx", check=False)


def main():
    gen_dtypes()
    gen_control_flow()
    gen_small()
    gen_external()
    gen_invalid()
    return 0


if __name__ == "__main__":
    sys.exit(main())
