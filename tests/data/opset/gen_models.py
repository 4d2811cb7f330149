#!/usr/bin/python3
"""Writes the small old-opset models the opset converter is checked on in ONNX Runtime
(tests/integration/opset_ort.mjs): <name>.onnx plus <name>.inputs.json with the inputs to feed.
Expected outputs are not stored: ORT running the original model is the reference.

Run with the system Python (onnx 1.12 + numpy):  /usr/bin/python3 tests/data/opset/gen_models.py
Deterministic (fixed seeds); regenerating gives the same files.
"""
import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.dirname(os.path.abspath(__file__))
F = TensorProto.FLOAT


def vi(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def save(name, opset, nodes, inputs, outputs, feeds, inits=(), ir_version=None):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, producer_name="qplace-opset-gen",
                              opset_imports=[helper.make_opsetid("", opset)])
    # The IR version of the exporters of the time (onnx 1.12 would otherwise write 8).
    model.ir_version = ir_version or {7: 3, 8: 3, 9: 4, 10: 5, 11: 6}.get(opset, 7)
    # No onnx.checker: several outputs are declared without a shape, which it refuses.
    with open(os.path.join(OUT, name + ".onnx"), "wb") as f:
        f.write(model.SerializeToString())
    js = {}
    for k, a in feeds.items():
        a = np.asarray(a)
        js[k] = {"dtype": str(a.dtype), "dims": list(a.shape), "data": a.ravel().tolist()}
    with open(os.path.join(OUT, name + ".inputs.json"), "w") as f:
        json.dump(js, f, separators=(",", ":"))
        f.write("\n")


def rnd(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def main():
    rng = np.random.RandomState(1234)
    x4 = rnd(rng, 2, 3, 4, 5)

    # Clip-6 attributes -> Clip-11 inputs; only max; neither; type found through Relu.
    save("clip_opset9", 9, [
        helper.make_node("Clip", ["x"], ["a"], name="clip", min=-0.5, max=0.5),
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Clip", ["r"], ["b"], name="clip_max", max=0.7),
        helper.make_node("Clip", ["x"], ["c"], name="clip_none"),
    ], [vi("x", [2, 3, 4, 5])], [vi("a", [2, 3, 4, 5]), vi("b", [2, 3, 4, 5]),
                                 vi("c", [2, 3, 4, 5])], {"x": x4})

    # Softmax family before 13: coerced to 2-D at axis.
    save("softmax_opset11", 11, [
        helper.make_node("Softmax", ["x"], ["s1"], name="sm_default"),  # axis 1 of rank 4
        helper.make_node("Softmax", ["x"], ["s2"], name="sm_last", axis=3),
        helper.make_node("LogSoftmax", ["x"], ["s3"], name="lsm_2", axis=2),
        helper.make_node("Softmax", ["x"], ["s4"], name="sm_0", axis=0),
        helper.make_node("Hardmax", ["x"], ["s5"], name="hm_neg", axis=-2),
        helper.make_node("Softmax", ["x"], ["s6"], name="sm_neg1", axis=-1),
    ], [vi("x", [2, 3, 4, 5])],
        [vi("s%d" % i, [2, 3, 4, 5]) for i in range(1, 7)], {"x": x4})
    save("softmax_opset9_2d", 9, [
        helper.make_node("Flatten", ["x"], ["f"], name="flat"),
        helper.make_node("Softmax", ["f"], ["y"], name="sm"),  # 2-D, axis 1: last
    ], [vi("x", [2, 3, 4, 5])], [vi("y", [2, 60])], {"x": x4})

    # Reduce* axes attribute -> input (ReduceSum at 13, the others at 18).
    save("reduce_opset11", 11, [
        helper.make_node("ReduceMean", ["x"], ["m"], name="rmean", axes=[2, 3], keepdims=1),
        helper.make_node("ReduceSum", ["x"], ["s"], name="rsum", axes=[1], keepdims=0),
        helper.make_node("ReduceMax", ["x"], ["mx"], name="rmax", axes=[-1]),
        helper.make_node("ReduceMin", ["x"], ["mn"], name="rmin", axes=[0, 2], keepdims=0),
        helper.make_node("ReduceL2", ["x"], ["l2"], name="rl2", axes=[1]),
        helper.make_node("ReduceMean", ["x"], ["all"], name="rall", keepdims=0),
    ], [vi("x", [2, 3, 4, 5])], [vi("m", None), vi("s", None), vi("mx", None),
                                 vi("mn", None), vi("l2", None), vi("all", None)], {"x": x4})

    # Squeeze/Unsqueeze axes, Split split attribute and equal split.
    save("shape_ops_opset11", 11, [
        helper.make_node("Unsqueeze", ["x"], ["u"], name="unsq", axes=[0, 5]),
        helper.make_node("Squeeze", ["u"], ["q"], name="sq", axes=[0]),
        helper.make_node("Squeeze", ["u"], ["q2"], name="sq_all"),
        helper.make_node("Split", ["x"], ["p0", "p1"], name="split", axis=1, split=[1, 2]),
        helper.make_node("Split", ["x"], ["e0", "e1"], name="split_eq", axis=2),
    ], [vi("x", [2, 3, 4, 5])], [vi(n, None) for n in ["q", "q2", "p0", "p1", "e0", "e1"]],
        {"x": x4})

    # Slice attributes -> inputs (10), TopK k -> input (10), Pad attributes -> inputs (11).
    save("slice_topk_pad_opset9", 9, [
        helper.make_node("Slice", ["x"], ["s"], name="slice", starts=[1, 0], ends=[3, -1],
                         axes=[1, 3]),
        helper.make_node("Slice", ["x"], ["s2"], name="slice_noaxes", starts=[1],
                         ends=[2 ** 62]),
        helper.make_node("TopK", ["x"], ["tv", "ti"], name="topk", k=2),
        helper.make_node("Pad", ["x"], ["pc"], name="pad_const", pads=[0, 0, 1, 2, 0, 1, 0, 1],
                         value=1.5),
        helper.make_node("Pad", ["x"], ["pz"], name="pad_zero", pads=[0, 0, 1, 0, 0, 0, 1, 0]),
        helper.make_node("Pad", ["x"], ["pr"], name="pad_reflect", mode="reflect",
                         pads=[0, 0, 1, 1, 0, 0, 1, 1]),
    ], [vi("x", [2, 3, 4, 5])], [vi("s", None), vi("s2", None), vi("tv", None),
                                 vi("ti", None, TensorProto.INT64), vi("pc", None),
                                 vi("pz", None), vi("pr", None)], {"x": x4})

    # Dropout (ratio attribute, unused mask output) and BatchNormalization-7 (spatial).
    c = 3
    bn = [init("scale", rng.uniform(0.5, 1.5, c).astype(np.float32)),
          init("bias", rnd(rng, c)), init("mean", rnd(rng, c)),
          init("var", rng.uniform(0.5, 2, c).astype(np.float32))]
    save("dropout_bn_opset7", 7, [
        helper.make_node("Dropout", ["x"], ["d", "mask"], name="drop", ratio=0.3),
        helper.make_node("BatchNormalization", ["d", "scale", "bias", "mean", "var"], ["y"],
                         name="bn", spatial=1, epsilon=1e-3),
        helper.make_node("Relu", ["y"], ["z"], name="relu"),
    ], [vi("x", [2, 3, 4, 5])], [vi("z", [2, 3, 4, 5])], {"x": x4}, inits=bn)

    # Upsample-7 (scales attribute) and Upsample-9 (scales input) -> Resize.
    x_small = rnd(rng, 1, 2, 3, 4)
    save("upsample_opset7", 7, [
        helper.make_node("Upsample", ["x"], ["n"], name="up_nearest", scales=[1.0, 1.0, 2.0, 3.0]),
        helper.make_node("Upsample", ["x"], ["l"], name="up_linear", mode="linear",
                         scales=[1.0, 1.0, 2.0, 2.0]),
    ], [vi("x", [1, 2, 3, 4])], [vi("n", None), vi("l", None)], {"x": x_small})
    save("upsample_opset9", 9, [
        helper.make_node("Upsample", ["x", "sc"], ["n"], name="up_nearest"),
        helper.make_node("Upsample", ["x", "sc2"], ["l"], name="up_linear", mode="linear"),
    ], [vi("x", [1, 2, 3, 4])], [vi("n", None), vi("l", None)], {"x": x_small},
        inits=[init("sc", np.array([1, 1, 3, 2], np.float32)),
               init("sc2", np.array([1, 1, 2, 2], np.float32))])

    # Resize-10 (X, scales) and Resize-11 with tf_half_pixel_for_nn (removed at 13).
    save("resize_opset10", 10, [
        helper.make_node("Resize", ["x", "sc"], ["n"], name="rs_nearest"),
        helper.make_node("Resize", ["x", "sc2"], ["l"], name="rs_linear", mode="linear"),
    ], [vi("x", [1, 2, 3, 4])], [vi("n", None), vi("l", None)], {"x": x_small},
        inits=[init("sc", np.array([1, 1, 2, 3], np.float32)),
               init("sc2", np.array([1, 1, 2, 2], np.float32))])
    save("resize_opset11", 11, [
        helper.make_node("Resize", ["x", "roi", "sc"], ["t"], name="rs_tf_nn",
                         coordinate_transformation_mode="tf_half_pixel_for_nn",
                         nearest_mode="floor"),
        helper.make_node("Resize", ["x", "roi", "sc2"], ["h"], name="rs_half_pixel",
                         mode="linear", coordinate_transformation_mode="half_pixel"),
        helper.make_node("Resize", ["x", "roi", "empty", "sizes"], ["z"], name="rs_sizes"),
    ], [vi("x", [1, 2, 3, 4])], [vi("t", None), vi("h", None), vi("z", None)], {"x": x_small},
        inits=[init("roi", np.zeros([0], np.float32)), init("empty", np.zeros([0], np.float32)),
               init("sc", np.array([1, 1, 2.5, 1.5], np.float32)),
               init("sc2", np.array([1, 1, 2, 2], np.float32)),
               init("sizes", np.array([1, 2, 7, 5], np.int64))])

    # A small CNN at opset 9 with ops whose schema changed only compatibly (pass-through).
    w1 = rnd(rng, 4, 3, 3, 3) * 0.3
    save("cnn_opset9", 9, [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bs", "bb", "bm", "bv"], ["n1"],
                         name="bn1"),
        helper.make_node("HardSigmoid", ["n1"], ["hs"], name="hsig", alpha=0.2, beta=0.5),
        helper.make_node("Mul", ["n1", "hs"], ["hsw"], name="hswish"),
        helper.make_node("MaxPool", ["hsw"], ["mp"], name="maxpool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("AveragePool", ["hsw"], ["ap"], name="avgpool", kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1], count_include_pad=0),
        helper.make_node("GlobalAveragePool", ["ap"], ["gap"], name="gap"),
        helper.make_node("Sigmoid", ["gap"], ["se"], name="se_sigmoid"),
        helper.make_node("Mul", ["ap", "se"], ["att"], name="se_mul"),
        helper.make_node("Flatten", ["mp"], ["fl"], name="flatten"),
        helper.make_node("Gemm", ["fl", "wg", "bg"], ["g"], name="fc", transB=1),
        helper.make_node("Tanh", ["g"], ["th"], name="tanh"),
        helper.make_node("Softmax", ["th"], ["prob"], name="softmax"),
        helper.make_node("Shape", ["att"], ["shp"], name="shape"),
        helper.make_node("Cast", ["shp"], ["shpf"], name="cast", to=F),
        helper.make_node("Transpose", ["att"], ["tr"], name="transpose", perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["tr", "rshape"], ["rs"], name="reshape"),
        helper.make_node("MatMul", ["rs", "wm"], ["mm"], name="matmul"),
        helper.make_node("Abs", ["mm"], ["mm_abs"], name="abs"),
        helper.make_node("Sqrt", ["mm_abs"], ["sq"], name="sqrt"),
        helper.make_node("Pow", ["sq", "two"], ["pw"], name="pow"),
        helper.make_node("Div", ["pw", "two"], ["dv"], name="div"),
        helper.make_node("Sub", ["dv", "mm"], ["sb"], name="sub"),
        helper.make_node("Greater", ["sb", "mm"], ["gt"], name="greater"),
        helper.make_node("Where", ["gt", "sb", "mm"], ["wh"], name="where"),
        helper.make_node("Concat", ["wh", "mm"], ["cat"], name="concat", axis=-1),
        helper.make_node("Gather", ["cat", "idx"], ["ga"], name="gather", axis=1),
        helper.make_node("Max", ["ga", "two"], ["mx"], name="max"),
        helper.make_node("Exp", ["mx"], ["ex"], name="exp"),
        helper.make_node("Log", ["ex"], ["lg"], name="log"),
        helper.make_node("Neg", ["lg"], ["ng"], name="neg"),
        helper.make_node("Floor", ["ng"], ["fo"], name="floor"),
    ], [vi("x", [1, 3, 8, 8])],
        [vi("prob", [1, 5]), vi("shpf", [4]), vi("fo", None)], {"x": rnd(rng, 1, 3, 8, 8)},
        inits=[init("w1", w1), init("b1", rnd(rng, 4)),
               init("bs", rng.uniform(0.5, 1.5, 4).astype(np.float32)), init("bb", rnd(rng, 4)),
               init("bm", rnd(rng, 4)), init("bv", rng.uniform(0.5, 2, 4).astype(np.float32)),
               init("wg", rnd(rng, 5, 64) * 0.2), init("bg", rnd(rng, 5)),
               init("rshape", np.array([1, -1, 4], np.int64)), init("wm", rnd(rng, 4, 3)),
               init("two", np.array(2, np.float32)), init("idx", np.array([0, 2, 3], np.int64))])

    # If with subgraphs at opset 11: each branch holds nodes that must be converted.
    then_g = helper.make_graph([
        helper.make_node("Unsqueeze", ["x"], ["t"], name="then_unsq", axes=[0]),
    ], "then", [], [vi("t", None)])
    else_g = helper.make_graph([
        helper.make_node("ReduceSum", ["x"], ["e0"], name="else_rsum", axes=[1], keepdims=1),
        helper.make_node("Unsqueeze", ["e0"], ["e"], name="else_unsq", axes=[0]),
    ], "else", [], [vi("e", None)])
    for cond in (True, False):
        save("if_opset11_%s" % ("then" if cond else "else"), 11, [
            helper.make_node("ReduceMean", ["x"], ["m"], name="rmean", axes=[1]),
            helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g,
                             else_branch=else_g),
        ], [vi("x", [2, 3]), vi("cond", [], TensorProto.BOOL)], [vi("y", None), vi("m", None)],
            {"x": rnd(rng, 2, 3), "cond": np.array(cond)})


if __name__ == "__main__":
    main()
