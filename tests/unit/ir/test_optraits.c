/* Unit tests of the ONNX op traits table (ir/optraits.h): each flag's members exactly (the
 * lists below are the ones the passes kept before the table, so a widened or narrowed flag
 * fails here), table order, unknown ops and nodes of other domains. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ir/optraits.h"

/* opset_convert: element type, rank, broadcast, channels; calib/collect: values kept;
 * policy_trt: linear, copy, pointwise, pool, ORT input-0 handlers, shape sources; quant/f16:
 * float32-only ops, int64 and bool outputs. */
static const char *const same_type[] = {"Abs",
                                        "Add",
                                        "AveragePool",
                                        "BatchNormalization",
                                        "Ceil",
                                        "Clip",
                                        "Concat",
                                        "Conv",
                                        "ConvTranspose",
                                        "DepthToSpace",
                                        "Div",
                                        "Dropout",
                                        "Elu",
                                        "Erf",
                                        "Exp",
                                        "Expand",
                                        "Flatten",
                                        "Floor",
                                        "Gather",
                                        "GatherElements",
                                        "GatherND",
                                        "Gelu",
                                        "Gemm",
                                        "GlobalAveragePool",
                                        "GlobalMaxPool",
                                        "HardSigmoid",
                                        "HardSwish",
                                        "Hardmax",
                                        "Identity",
                                        "InstanceNormalization",
                                        "LRN",
                                        "LayerNormalization",
                                        "LeakyRelu",
                                        "Log",
                                        "LogSoftmax",
                                        "MatMul",
                                        "Max",
                                        "MaxPool",
                                        "Mean",
                                        "Min",
                                        "Mish",
                                        "Mul",
                                        "Neg",
                                        "PRelu",
                                        "Pad",
                                        "Pow",
                                        "Reciprocal",
                                        "ReduceL1",
                                        "ReduceL2",
                                        "ReduceLogSum",
                                        "ReduceLogSumExp",
                                        "ReduceMax",
                                        "ReduceMean",
                                        "ReduceMin",
                                        "ReduceProd",
                                        "ReduceSum",
                                        "ReduceSumSquare",
                                        "Relu",
                                        "Reshape",
                                        "Resize",
                                        "Round",
                                        "Selu",
                                        "Sigmoid",
                                        "Sign",
                                        "Slice",
                                        "Softmax",
                                        "Softplus",
                                        "Softsign",
                                        "SpaceToDepth",
                                        "Split",
                                        "Sqrt",
                                        "Squeeze",
                                        "Sub",
                                        "Sum",
                                        "Tanh",
                                        "Tile",
                                        "TopK",
                                        "Transpose",
                                        "Unsqueeze",
                                        "Upsample",
                                        NULL};
static const char *const same_rank[] = {"Abs",
                                        "AveragePool",
                                        "BatchNormalization",
                                        "Cast",
                                        "Ceil",
                                        "Clip",
                                        "Concat",
                                        "Conv",
                                        "ConvTranspose",
                                        "CumSum",
                                        "DepthToSpace",
                                        "Dropout",
                                        "Elu",
                                        "Erf",
                                        "Exp",
                                        "Floor",
                                        "Gelu",
                                        "GlobalAveragePool",
                                        "GlobalMaxPool",
                                        "HardSigmoid",
                                        "HardSwish",
                                        "Hardmax",
                                        "Identity",
                                        "InstanceNormalization",
                                        "LRN",
                                        "LayerNormalization",
                                        "LeakyRelu",
                                        "Log",
                                        "LogSoftmax",
                                        "MaxPool",
                                        "Mish",
                                        "Neg",
                                        "Not",
                                        "Pad",
                                        "Reciprocal",
                                        "Relu",
                                        "Resize",
                                        "Round",
                                        "Selu",
                                        "Sigmoid",
                                        "Sign",
                                        "Slice",
                                        "Softmax",
                                        "Softplus",
                                        "Softsign",
                                        "SpaceToDepth",
                                        "Split",
                                        "Sqrt",
                                        "Tanh",
                                        "Tile",
                                        "TopK",
                                        "Upsample",
                                        NULL};
static const char *const broadcast[] = {
    "Add",   "And", "Div", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Max",
    "Mean",  "Min", "Mod", "Mul",   "Or",      "PRelu",          "Pow",  "Sub",         "Sum",
    "Where", "Xor", NULL};
static const char *const same_channels[] = {"Abs",
                                            "AveragePool",
                                            "BatchNormalization",
                                            "Cast",
                                            "Ceil",
                                            "Clip",
                                            "Dropout",
                                            "Elu",
                                            "Erf",
                                            "Exp",
                                            "Floor",
                                            "Gelu",
                                            "GlobalAveragePool",
                                            "GlobalMaxPool",
                                            "GroupNormalization",
                                            "HardSigmoid",
                                            "HardSwish",
                                            "Identity",
                                            "InstanceNormalization",
                                            "LeakyRelu",
                                            "Log",
                                            "LpPool",
                                            "MaxPool",
                                            "Mish",
                                            "Neg",
                                            "Reciprocal",
                                            "Relu",
                                            "Round",
                                            "Selu",
                                            "Sigmoid",
                                            "Sign",
                                            "Softplus",
                                            "Softsign",
                                            "Sqrt",
                                            "Tanh",
                                            NULL};
static const char *const same_values[] = {"Identity",  "Reshape",   "Flatten", "Squeeze",
                                          "Unsqueeze", "Transpose", NULL};
static const char *const linear[] = {"Conv", "ConvTranspose", "Gemm", "MatMul", NULL};
static const char *const copy[] = {
    "Flatten",         "Transpose",       "Concat",    "Split",  "Squeeze", "Expand",
    "ReverseSequence", "Reshape",         "Tile",      "Gather", "Slice",   "GatherElements",
    "GatherND",        "ScatterElements", "ScatterND", "OneHot", NULL};
static const char *const pointwise[] = {
    "Neg",        "Sqrt",        "Abs",     "Log",       "Exp",
    "Not",        "Cast",        "Floor",   "Ceil",      "Round",
    "Erf",        "Gelu",        "Sin",     "Cos",       "Atan",
    "Sign",       "IsNaN",       "IsInf",   "LeakyRelu", "Elu",
    "Tanh",       "Sigmoid",     "Softmax", "Softplus",  "InstanceNormalization",
    "CumSum",     "Add",         "Sub",     "Mul",       "Pow",
    "Div",        "Min",         "Max",     "Greater",   "GreaterOrEqual",
    "Less",       "LessOrEqual", "Equal",   "BitwiseOr", "BitwiseAnd",
    "BitwiseXor", "BitShift",    NULL};
static const char *const pool[] = {
    "AveragePool", "GlobalAveragePool", "MaxPool",       "GlobalMaxPool",  "GlobalLpPool",
    "LpPool",      "MaxPoolGridSample", "HammingWindow", "BlackmanWindow", "HannWindow",
    NULL};
static const char *const qdq_input0[] = {"BatchNormalization",
                                         "LayerNormalization",
                                         "LRN",
                                         "InstanceNormalization",
                                         "Resize",
                                         "Upsample",
                                         "AveragePool",
                                         "GlobalAveragePool",
                                         "MaxPool",
                                         "GlobalMaxPool",
                                         "LpPool",
                                         "GlobalLpPool",
                                         "Clip",
                                         "HardSwish",
                                         "Relu",
                                         "LeakyRelu",
                                         "Sigmoid",
                                         "Softmax",
                                         "Reshape",
                                         "Transpose",
                                         "Squeeze",
                                         "Unsqueeze",
                                         "Flatten",
                                         "Split",
                                         "Slice",
                                         "Pad",
                                         "Tile",
                                         "Expand",
                                         "Gather",
                                         "GatherElements",
                                         "GatherND",
                                         "ArgMax",
                                         "DepthToSpace",
                                         "SpaceToDepth",
                                         NULL};
static const char *const shape_source[] = {"Shape", "Size", NULL};
static const char *const no_fp16[] = {"Upsample",
                                      "NonMaxSuppression",
                                      "Celu",
                                      "QLinearConv",
                                      "QLinearMatMul",
                                      "DynamicQuantizeLinear",
                                      "RandomNormal",
                                      "RandomUniform",
                                      "RandomNormalLike",
                                      "RandomUniformLike",
                                      "Multinomial",
                                      "Bernoulli",
                                      "HannWindow",
                                      "HammingWindow",
                                      "BlackmanWindow",
                                      "MelWeightMatrix",
                                      "TfIdfVectorizer",
                                      "SplitToSequence",
                                      "ConcatFromSequence",
                                      "Optional",
                                      "OptionalGetElement",
                                      "OptionalHasElement",
                                      NULL};
static const char *const out_int64[] = {
    "Shape", "Size", "ArgMax", "ArgMin", "NonZero", "NonMaxSuppression", NULL};
static const char *const out_bool[] = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
                                       "Not",   "And",  "Or",      "Xor",         "IsNaN",
                                       "IsInf", NULL};

static const char *const bf16[] = {"Abs",
                                   "Add",
                                   "ArgMax",
                                   "ArgMin",
                                   "BatchNormalization",
                                   "Cast",
                                   "CastLike",
                                   "Ceil",
                                   "Clip",
                                   "Concat",
                                   "Constant",
                                   "CumSum",
                                   "DFT",
                                   "DepthToSpace",
                                   "DequantizeLinear",
                                   "Div",
                                   "Equal",
                                   "Erf",
                                   "Exp",
                                   "Expand",
                                   "Flatten",
                                   "Floor",
                                   "Gather",
                                   "GatherElements",
                                   "GatherND",
                                   "Gemm",
                                   "Greater",
                                   "GreaterOrEqual",
                                   "Hardmax",
                                   "Identity",
                                   "IsNaN",
                                   "LRN",
                                   "LayerNormalization",
                                   "LeakyRelu",
                                   "Less",
                                   "LessOrEqual",
                                   "Log",
                                   "LogSoftmax",
                                   "MatMul",
                                   "Max",
                                   "Mean",
                                   "MeanVarianceNormalization",
                                   "Min",
                                   "Mod",
                                   "Mul",
                                   "Neg",
                                   "NonZero",
                                   "PRelu",
                                   "Pad",
                                   "Pow",
                                   "QuantizeLinear",
                                   "Reciprocal",
                                   "ReduceL1",
                                   "ReduceL2",
                                   "ReduceLogSum",
                                   "ReduceLogSumExp",
                                   "ReduceMax",
                                   "ReduceMean",
                                   "ReduceMin",
                                   "ReduceProd",
                                   "ReduceSum",
                                   "ReduceSumSquare",
                                   "Relu",
                                   "Reshape",
                                   "STFT",
                                   "ScatterElements",
                                   "ScatterND",
                                   "Shape",
                                   "Sigmoid",
                                   "Sign",
                                   "Size",
                                   "Slice",
                                   "Softmax",
                                   "SpaceToDepth",
                                   "Split",
                                   "Sqrt",
                                   "Squeeze",
                                   "Sub",
                                   "Sum",
                                   "Tanh",
                                   "Tile",
                                   "Transpose",
                                   "Trilu",
                                   "Unsqueeze",
                                   "Where",
                                   NULL};

static const struct {
    enum qp_op_flag flag;
    const char *const *members;
} expected[] = {
    {QP_OP_FLAG_SAME_TYPE, same_type},
    {QP_OP_FLAG_SAME_RANK, same_rank},
    {QP_OP_FLAG_BROADCAST, broadcast},
    {QP_OP_FLAG_SAME_CHANNELS, same_channels},
    {QP_OP_FLAG_SAME_VALUES, same_values},
    {QP_OP_FLAG_LINEAR, linear},
    {QP_OP_FLAG_COPY, copy},
    {QP_OP_FLAG_POINTWISE, pointwise},
    {QP_OP_FLAG_POOL, pool},
    {QP_OP_FLAG_QDQ_INPUT0, qdq_input0},
    {QP_OP_FLAG_SHAPE_SOURCE, shape_source},
    {QP_OP_FLAG_NO_FP16, no_fp16},
    {QP_OP_FLAG_OUT_INT64, out_int64},
    {QP_OP_FLAG_OUT_BOOL, out_bool},
    {QP_OP_FLAG_BF16, bf16},
};

static int in(const char *op, const char *const *list) {
    for (; *list; list++)
        if (strcmp(op, *list) == 0) return 1;
    return 0;
}

static struct qp_node onnx_node(const char *op, const char *domain) {
    struct qp_node n;
    memset(&n, 0, sizeof n);
    n.op_type = op;
    n.domain = domain;
    return n;
}

/* Every flag has exactly its expected members, and every flag is checked. */
static void test_flag_members(void **state) {
    (void)state;
    assert_int_equal(sizeof expected / sizeof expected[0], QP_OP_FLAG_COUNT);
    size_t n_rows = 0;
    const struct qp_op_row *rows = qp_op_rows(&n_rows);
    for (size_t k = 0; k < sizeof expected / sizeof expected[0]; k++) {
        enum qp_op_flag f = expected[k].flag;
        assert_int_equal(f, (enum qp_op_flag)k);
        size_t n_members = 0;
        for (const char *const *m = expected[k].members; *m; m++, n_members++) {
            if (!(qp_op_traits_of(*m) & QP_OP_BIT(f)))
                fail_msg("%s lacks flag %s", *m, qp_op_flag_name(f));
            struct qp_node nd = onnx_node(*m, "");
            assert_true(qp_op_is(&nd, f));
        }
        size_t n_flagged = 0;
        for (size_t i = 0; i < n_rows; i++) {
            if (!(rows[i].flags & QP_OP_BIT(f))) continue;
            n_flagged++;
            if (!in(rows[i].op, expected[k].members))
                fail_msg("%s has flag %s, not expected", rows[i].op, qp_op_flag_name(f));
        }
        assert_int_equal(n_flagged, n_members);
    }
}

/* Sorted, unique, and each row carries at least one flag within range. */
static void test_table_order(void **state) {
    (void)state;
    size_t n = 0;
    const struct qp_op_row *rows = qp_op_rows(&n);
    assert_true(n > 0);
    for (size_t i = 0; i < n; i++) {
        assert_true(rows[i].flags != 0);
        assert_int_equal(rows[i].flags >> QP_OP_FLAG_COUNT, 0);
        if (i) assert_true(strcmp(rows[i - 1].op, rows[i].op) < 0);
        assert_int_equal(qp_op_traits_of(rows[i].op), rows[i].flags);
    }
    for (int f = 0; f < QP_OP_FLAG_COUNT; f++)
        assert_non_null(qp_op_flag_name(f));
    assert_null(qp_op_flag_name(QP_OP_FLAG_COUNT));
    assert_string_equal(qp_op_flag_name(QP_OP_FLAG_SAME_VALUES), "same_values");
}

static void test_unknown_ops(void **state) {
    (void)state;
    static const char *const unknown[] = {
        "", "relu", "Reluu", "Rel", "FusedMatMul", "Zzz", "AAA", "QLinearAdd", "DequantizeLinearX"};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        assert_int_equal(qp_op_traits_of(unknown[i]), 0);
        struct qp_node nd = onnx_node(unknown[i], "");
        assert_int_equal(qp_op_traits(&nd), 0);
    }
    assert_int_equal(qp_op_traits_of(NULL), 0);
    assert_int_equal(qp_op_traits(NULL), 0);
    struct qp_node relu = onnx_node("Relu", "");
    assert_false(qp_op_is(&relu, QP_OP_FLAG_COUNT));
    assert_false(qp_op_is(&relu, (enum qp_op_flag) - 1));
}

/* ONNX's domain spellings get the traits; another domain's node of the same name gets none. */
static void test_domains(void **state) {
    (void)state;
    static const char *const ops[] = {"Relu", "MaxPool", "Reshape", "Conv", "Shape", "Equal"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        unsigned want = qp_op_traits_of(ops[i]);
        assert_true(want != 0);
        struct qp_node a = onnx_node(ops[i], NULL), b = onnx_node(ops[i], ""),
                       c = onnx_node(ops[i], "ai.onnx"), ms = onnx_node(ops[i], "com.microsoft"),
                       ml = onnx_node(ops[i], "ai.onnx.ml");
        assert_int_equal(qp_op_traits(&a), want);
        assert_int_equal(qp_op_traits(&b), want);
        assert_int_equal(qp_op_traits(&c), want);
        assert_int_equal(qp_op_traits(&ms), 0);
        assert_int_equal(qp_op_traits(&ml), 0);
        for (int f = 0; f < QP_OP_FLAG_COUNT; f++)
            assert_false(qp_op_is(&ms, f));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flag_members),
        cmocka_unit_test(test_table_order),
        cmocka_unit_test(test_unknown_ops),
        cmocka_unit_test(test_domains),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
