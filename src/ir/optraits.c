/* The ONNX op traits table (see optraits.h). Rows are sorted by strcmp so lookup is a binary
 * search; the unit test checks the order and every flag's members. */
#include "ir/optraits.h"

#include <stdlib.h>
#include <string.h>

static const char *const flag_names[QP_OP_FLAG_COUNT] = {
    [QP_OP_FLAG_SAME_TYPE] = "same_type",
    [QP_OP_FLAG_SAME_RANK] = "same_rank",
    [QP_OP_FLAG_BROADCAST] = "broadcast",
    [QP_OP_FLAG_SAME_CHANNELS] = "same_channels",
    [QP_OP_FLAG_SAME_VALUES] = "same_values",
    [QP_OP_FLAG_LINEAR] = "linear",
    [QP_OP_FLAG_COPY] = "copy",
    [QP_OP_FLAG_POINTWISE] = "pointwise",
    [QP_OP_FLAG_POOL] = "pool",
    [QP_OP_FLAG_QDQ_INPUT0] = "qdq_input0",
    [QP_OP_FLAG_SHAPE_SOURCE] = "shape_source",
    [QP_OP_FLAG_NO_FP16] = "no_fp16",
    [QP_OP_FLAG_OUT_INT64] = "out_int64",
    [QP_OP_FLAG_OUT_BOOL] = "out_bool",
    [QP_OP_FLAG_BF16] = "bf16",
};
_Static_assert(sizeof flag_names / sizeof flag_names[0] == QP_OP_FLAG_COUNT,
               "one name per op flag");

#define B(f) QP_OP_BIT(QP_OP_FLAG_##f)

static const struct qp_op_row rows[] = {
    {"Abs", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POINTWISE) | B(BF16)},
    {"Add", B(SAME_TYPE) | B(BROADCAST) | B(POINTWISE) | B(BF16)},
    {"And", B(BROADCAST) | B(OUT_BOOL)},
    {"ArgMax", B(QDQ_INPUT0) | B(OUT_INT64) | B(BF16)},
    {"ArgMin", B(OUT_INT64) | B(BF16)},
    {"Atan", B(POINTWISE)},
    {"AveragePool", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POOL) | B(QDQ_INPUT0)},
    {"BatchNormalization",
     B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(QDQ_INPUT0) | B(BF16)},
    {"Bernoulli", B(NO_FP16)},
    {"BitShift", B(POINTWISE)},
    {"BitwiseAnd", B(POINTWISE)},
    {"BitwiseOr", B(POINTWISE)},
    {"BitwiseXor", B(POINTWISE)},
    {"BlackmanWindow", B(POOL) | B(NO_FP16)},
    {"Cast", B(SAME_RANK) | B(SAME_CHANNELS) | B(POINTWISE) | B(BF16)},
    {"CastLike", B(BF16)},
    {"Ceil", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POINTWISE) | B(BF16)},
    {"Celu", B(NO_FP16)},
    {"Clip", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(QDQ_INPUT0) | B(BF16)},
    {"Concat", B(SAME_TYPE) | B(SAME_RANK) | B(COPY) | B(BF16)},
    {"ConcatFromSequence", B(NO_FP16)},
    {"Constant", B(BF16)},
    {"Conv", B(SAME_TYPE) | B(SAME_RANK) | B(LINEAR)},
    {"ConvTranspose", B(SAME_TYPE) | B(SAME_RANK) | B(LINEAR)},
    {"Cos", B(POINTWISE)},
    {"CumSum", B(SAME_RANK) | B(POINTWISE) | B(BF16)},
    {"DFT", B(BF16)},
    {"DepthToSpace", B(SAME_TYPE) | B(SAME_RANK) | B(QDQ_INPUT0) | B(BF16)},
    {"DequantizeLinear", B(BF16)},
    {"Div", B(SAME_TYPE) | B(BROADCAST) | B(POINTWISE) | B(BF16)},
    {"Dropout", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS)},
    {"DynamicQuantizeLinear", B(NO_FP16)},
    {"Elu", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POINTWISE)},
    {"Equal", B(BROADCAST) | B(POINTWISE) | B(OUT_BOOL) | B(BF16)},
    {"Erf", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POINTWISE) | B(BF16)},
    {"Exp", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POINTWISE) | B(BF16)},
    {"Expand", B(SAME_TYPE) | B(COPY) | B(QDQ_INPUT0) | B(BF16)},
    {"Flatten", B(SAME_TYPE) | B(SAME_VALUES) | B(COPY) | B(QDQ_INPUT0) | B(BF16)},
    {"Floor", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POINTWISE) | B(BF16)},
    {"Gather", B(SAME_TYPE) | B(COPY) | B(QDQ_INPUT0) | B(BF16)},
    {"GatherElements", B(SAME_TYPE) | B(COPY) | B(QDQ_INPUT0) | B(BF16)},
    {"GatherND", B(SAME_TYPE) | B(COPY) | B(QDQ_INPUT0) | B(BF16)},
    {"Gelu", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POINTWISE)},
    {"Gemm", B(SAME_TYPE) | B(LINEAR) | B(BF16)},
    {"GlobalAveragePool", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POOL) | B(QDQ_INPUT0)},
    {"GlobalLpPool", B(POOL) | B(QDQ_INPUT0)},
    {"GlobalMaxPool", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POOL) | B(QDQ_INPUT0)},
    {"Greater", B(BROADCAST) | B(POINTWISE) | B(OUT_BOOL) | B(BF16)},
    {"GreaterOrEqual", B(BROADCAST) | B(POINTWISE) | B(OUT_BOOL) | B(BF16)},
    {"GroupNormalization", B(SAME_CHANNELS)},
    {"HammingWindow", B(POOL) | B(NO_FP16)},
    {"HannWindow", B(POOL) | B(NO_FP16)},
    {"HardSigmoid", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS)},
    {"HardSwish", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(QDQ_INPUT0)},
    {"Hardmax", B(SAME_TYPE) | B(SAME_RANK) | B(BF16)},
    {"Identity", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(SAME_VALUES) | B(BF16)},
    {"InstanceNormalization",
     B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POINTWISE) | B(QDQ_INPUT0)},
    {"IsInf", B(POINTWISE) | B(OUT_BOOL)},
    {"IsNaN", B(POINTWISE) | B(OUT_BOOL) | B(BF16)},
    {"LRN", B(SAME_TYPE) | B(SAME_RANK) | B(QDQ_INPUT0) | B(BF16)},
    {"LayerNormalization", B(SAME_TYPE) | B(SAME_RANK) | B(QDQ_INPUT0) | B(BF16)},
    {"LeakyRelu",
     B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POINTWISE) | B(QDQ_INPUT0) | B(BF16)},
    {"Less", B(BROADCAST) | B(POINTWISE) | B(OUT_BOOL) | B(BF16)},
    {"LessOrEqual", B(BROADCAST) | B(POINTWISE) | B(OUT_BOOL) | B(BF16)},
    {"Log", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POINTWISE) | B(BF16)},
    {"LogSoftmax", B(SAME_TYPE) | B(SAME_RANK) | B(BF16)},
    {"LpPool", B(SAME_CHANNELS) | B(POOL) | B(QDQ_INPUT0)},
    {"MatMul", B(SAME_TYPE) | B(LINEAR) | B(BF16)},
    {"Max", B(SAME_TYPE) | B(BROADCAST) | B(POINTWISE) | B(BF16)},
    {"MaxPool", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POOL) | B(QDQ_INPUT0)},
    {"MaxPoolGridSample", B(POOL)},
    {"Mean", B(SAME_TYPE) | B(BROADCAST) | B(BF16)},
    {"MeanVarianceNormalization", B(BF16)},
    {"MelWeightMatrix", B(NO_FP16)},
    {"Min", B(SAME_TYPE) | B(BROADCAST) | B(POINTWISE) | B(BF16)},
    {"Mish", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS)},
    {"Mod", B(BROADCAST) | B(BF16)},
    {"Mul", B(SAME_TYPE) | B(BROADCAST) | B(POINTWISE) | B(BF16)},
    {"Multinomial", B(NO_FP16)},
    {"Neg", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POINTWISE) | B(BF16)},
    {"NonMaxSuppression", B(NO_FP16) | B(OUT_INT64)},
    {"NonZero", B(OUT_INT64) | B(BF16)},
    {"Not", B(SAME_RANK) | B(POINTWISE) | B(OUT_BOOL)},
    {"OneHot", B(COPY)},
    {"Optional", B(NO_FP16)},
    {"OptionalGetElement", B(NO_FP16)},
    {"OptionalHasElement", B(NO_FP16)},
    {"Or", B(BROADCAST) | B(OUT_BOOL)},
    {"PRelu", B(SAME_TYPE) | B(BROADCAST) | B(BF16)},
    {"Pad", B(SAME_TYPE) | B(SAME_RANK) | B(QDQ_INPUT0) | B(BF16)},
    {"Pow", B(SAME_TYPE) | B(BROADCAST) | B(POINTWISE) | B(BF16)},
    {"QLinearConv", B(NO_FP16)},
    {"QLinearMatMul", B(NO_FP16)},
    {"QuantizeLinear", B(BF16)},
    {"RandomNormal", B(NO_FP16)},
    {"RandomNormalLike", B(NO_FP16)},
    {"RandomUniform", B(NO_FP16)},
    {"RandomUniformLike", B(NO_FP16)},
    {"Reciprocal", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(BF16)},
    {"ReduceL1", B(SAME_TYPE) | B(BF16)},
    {"ReduceL2", B(SAME_TYPE) | B(BF16)},
    {"ReduceLogSum", B(SAME_TYPE) | B(BF16)},
    {"ReduceLogSumExp", B(SAME_TYPE) | B(BF16)},
    {"ReduceMax", B(SAME_TYPE) | B(BF16)},
    {"ReduceMean", B(SAME_TYPE) | B(BF16)},
    {"ReduceMin", B(SAME_TYPE) | B(BF16)},
    {"ReduceProd", B(SAME_TYPE) | B(BF16)},
    {"ReduceSum", B(SAME_TYPE) | B(BF16)},
    {"ReduceSumSquare", B(SAME_TYPE) | B(BF16)},
    {"Relu", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(QDQ_INPUT0) | B(BF16)},
    {"Reshape", B(SAME_TYPE) | B(SAME_VALUES) | B(COPY) | B(QDQ_INPUT0) | B(BF16)},
    {"Resize", B(SAME_TYPE) | B(SAME_RANK) | B(QDQ_INPUT0)},
    {"ReverseSequence", B(COPY)},
    {"Round", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POINTWISE)},
    {"STFT", B(BF16)},
    {"ScatterElements", B(COPY) | B(BF16)},
    {"ScatterND", B(COPY) | B(BF16)},
    {"Selu", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS)},
    {"Shape", B(SHAPE_SOURCE) | B(OUT_INT64) | B(BF16)},
    {"Sigmoid",
     B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POINTWISE) | B(QDQ_INPUT0) | B(BF16)},
    {"Sign", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POINTWISE) | B(BF16)},
    {"Sin", B(POINTWISE)},
    {"Size", B(SHAPE_SOURCE) | B(OUT_INT64) | B(BF16)},
    {"Slice", B(SAME_TYPE) | B(SAME_RANK) | B(COPY) | B(QDQ_INPUT0) | B(BF16)},
    {"Softmax", B(SAME_TYPE) | B(SAME_RANK) | B(POINTWISE) | B(QDQ_INPUT0) | B(BF16)},
    {"Softplus", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POINTWISE)},
    {"Softsign", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS)},
    {"SpaceToDepth", B(SAME_TYPE) | B(SAME_RANK) | B(QDQ_INPUT0) | B(BF16)},
    {"Split", B(SAME_TYPE) | B(SAME_RANK) | B(COPY) | B(QDQ_INPUT0) | B(BF16)},
    {"SplitToSequence", B(NO_FP16)},
    {"Sqrt", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POINTWISE) | B(BF16)},
    {"Squeeze", B(SAME_TYPE) | B(SAME_VALUES) | B(COPY) | B(QDQ_INPUT0) | B(BF16)},
    {"Sub", B(SAME_TYPE) | B(BROADCAST) | B(POINTWISE) | B(BF16)},
    {"Sum", B(SAME_TYPE) | B(BROADCAST) | B(BF16)},
    {"Tanh", B(SAME_TYPE) | B(SAME_RANK) | B(SAME_CHANNELS) | B(POINTWISE) | B(BF16)},
    {"TfIdfVectorizer", B(NO_FP16)},
    {"Tile", B(SAME_TYPE) | B(SAME_RANK) | B(COPY) | B(QDQ_INPUT0) | B(BF16)},
    {"TopK", B(SAME_TYPE) | B(SAME_RANK)},
    {"Transpose", B(SAME_TYPE) | B(SAME_VALUES) | B(COPY) | B(QDQ_INPUT0) | B(BF16)},
    {"Trilu", B(BF16)},
    {"Unsqueeze", B(SAME_TYPE) | B(SAME_VALUES) | B(QDQ_INPUT0) | B(BF16)},
    {"Upsample", B(SAME_TYPE) | B(SAME_RANK) | B(QDQ_INPUT0) | B(NO_FP16)},
    {"Where", B(BROADCAST) | B(BF16)},
    {"Xor", B(BROADCAST) | B(OUT_BOOL)},
};

#undef B

static int row_cmp(const void *key, const void *row) {
    return strcmp((const char *)key, ((const struct qp_op_row *)row)->op);
}

unsigned qp_op_traits_of(const char *op) {
    if (!op) return 0;
    const struct qp_op_row *r =
        bsearch(op, rows, sizeof rows / sizeof rows[0], sizeof rows[0], row_cmp);
    return r ? r->flags : 0;
}

unsigned qp_op_traits(const struct qp_node *n) {
    return n && qp_domain_is_onnx(n->domain) ? qp_op_traits_of(n->op_type) : 0;
}

int qp_op_is(const struct qp_node *n, enum qp_op_flag f) {
    return (unsigned)f < QP_OP_FLAG_COUNT && (qp_op_traits(n) & QP_OP_BIT(f)) != 0;
}

const char *qp_op_flag_name(enum qp_op_flag f) {
    return (unsigned)f < QP_OP_FLAG_COUNT ? flag_names[f] : NULL;
}

const struct qp_op_row *qp_op_rows(size_t *n_out) {
    if (n_out) *n_out = sizeof rows / sizeof rows[0];
    return rows;
}
