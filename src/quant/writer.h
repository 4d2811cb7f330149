/*
 * The Q/DQ writer: applies a placement (placement/placement.h) to a model, exactly as given
 * (DESIGN.md invariant 1), with scales from calibrated activation ranges and from the weights.
 *
 *   - every placed activation tensor gets ONE QuantizeLinear -> DequantizeLinear pair (named
 *     `<t>_QuantizeLinear`, `<t>_DequantizeLinear`, `<t>_scale`, `<t>_zero_point`, ORT's
 *     convention), and exactly the placed consumer slots of it read the DQ output; consumers of
 *     the same tensor that are not placed keep reading the float tensor;
 *   - every placed weight gets float -> Q -> DQ with per-channel (axis >= 0) or per-tensor scales
 *     from its absmax, or, with `dq_only`, a quantized initializer feeding the DQ directly;
 *     weights stored as Constant nodes are folded into initializers first;
 *   - zero points are written explicitly (int8 or float8e4m3fn zeros), biases stay float;
 *   - a model below opset 19 is converted to 19 first (ir/opset_convert.h);
 *   - with high_precision QP_DTYPE_FLOAT16, the rest of the model (weights left float, biases,
 *     constants, Q/DQ scales, activations) is converted to fp16 last, graph inputs and outputs
 *     kept float32 with Casts (quant/f16.h); QP_DTYPE_BFLOAT16 the same to bfloat16, where ops
 *     whose schema does not take bfloat16 stay float32; `keep_fp32_ops` stay float32 in both;
 *   - with `direct_io_types` (ModelOpt's flag), graph inputs and outputs take the high
 *     precision type too, and a graph input read only by QuantizeLinear nodes is fed to their
 *     DequantizeLinear nodes directly, typed as the zero point (int8/fp8), as ModelOpt's
 *     remove_graph_input_q.
 * The precision step is also qp_qdq_write_precision, for a caller that measures the model
 * between the two (the engine runs neither bfloat16 nor int8 graph inputs).
 *
 * All scale, rounding and saturation math goes through qmath/qparams.h.
 *
 *     struct qp_writer_options o;
 *     qp_writer_options_default(&o);
 *     o.amax = my_lookup; o.amax_user = ranges;
 *     struct qp_writer_stats st;
 *     if (qp_qdq_write(model, placement, &o, &st, &err) != QP_OK) ...   // model edited in place
 */
#ifndef QP_QUANT_WRITER_H
#define QP_QUANT_WRITER_H

#include <stddef.h>

#include "ir/ir.h"
#include "qplace/dtype.h"
#include "qplace/status.h"
#include "quant/f16.h"
#include "placement/placement.h"

/* The calibrated absolute threshold of activation tensor `tensor`: returns 1 and sets *amax_out
 * (finite, >= 0), or 0 when the tensor has no range. */
typedef int (*qp_amax_fn)(void *user, const char *tensor, float *amax_out);

struct qp_writer_options {
    enum qp_dtype qtype; /* QP_DTYPE_INT8 (default) or QP_DTYPE_FLOAT8E4M3FN */
    int dq_only;         /* 1: weights stored quantized, DQ only (no float weight, no Q) */
    /* Precision of the non-quantized parts: QP_DTYPE_FLOAT (fp32, the default here) or
     * QP_DTYPE_FLOAT16 (quant/f16.h; the default of `qplace quantize`). */
    enum qp_dtype high_precision;
    qp_amax_fn amax; /* required when the placement has activation edges */
    void *amax_user;
    /* Op types kept float32 by the fp16/bf16 conversion (borrowed for the call); may be NULL. */
    const char *const *keep_fp32_ops;
    size_t n_keep_fp32_ops;
    int direct_io_types; /* 1: I/O in the high precision type, graph-input Q removed */
    /* 1: each weight channel's scale is the one whose quantization error (squared, over the
     * channel's weights) is least among clip ratios 1.0 .. 0.5 of its absmax (the ratio 1.0,
     * absmax, when nothing better); 0 (default): absmax. */
    int weight_clip_mse;
    /* Threads the weight clipping runs channels on (tensors of 64K weights or more); <= 1
     * (default): one. The written model does not depend on it. */
    int n_threads;
};

/* Per op type counts of what was quantized (consumer op types). */
#define QP_WRITER_MAX_OPS 64
struct qp_writer_op_count {
    char op_type[64]; /* copied (truncated past 63 bytes), so stats outlive the model */
    size_t n_edges, n_weights;
};

struct qp_writer_stats {
    size_t n_edges;   /* placed activation slots */
    size_t n_tensors; /* distinct activation tensors (Q/DQ pairs written) */
    size_t n_weights; /* placed weight slots */
    size_t n_weight_tensors;
    size_t n_folded_constants; /* Constant nodes turned into initializers */
    int64_t opset_from, opset_to;
    size_t n_ops; /* entries of by_op (op types beyond QP_WRITER_MAX_OPS are not listed) */
    struct qp_writer_op_count by_op[QP_WRITER_MAX_OPS];
    enum qp_dtype high_precision; /* as applied: float, float16 or bfloat16 */
    struct qp_f16_stats f16;      /* the fp16/bf16 conversion (zeros with float) */
    size_t n_input_q_removed;     /* direct_io_types: graph-input QuantizeLinear nodes removed */
    /* weight_clip_mse: weight channels quantized, those clipped below absmax, and the mean
     * ratio of the chosen amax to absmax over all of them. */
    size_t n_weight_channels, n_weight_channels_clipped;
    double weight_clip_mean_ratio;
};

void qp_writer_options_default(struct qp_writer_options *o);

/* 1 when the top-level graph of `m` already holds a QuantizeLinear or DequantizeLinear node. */
int qp_model_has_qdq(const struct qp_model *m);

/* Applies `p` (its entries' names are resolved against `m`; `p` is copied, not changed) to `m`,
 * edited in place. `stats` may be NULL. Returns QP_ERR_BAD_INPUT for a model that already holds
 * Q/DQ nodes ("already quantized"), a placement entry naming a missing node, tensor or slot, an
 * activation tensor without a calibrated range, a weight that is not a float tensor or whose axis
 * is out of range; QP_ERR_UNSUPPORTED for a qtype other than int8/fp8, a high precision other than
 * float/float16/bfloat16, an opset conversion qplace does not do, or what qp_model_convert_f16
 * refuses; QP_ERR_NOMEM. On an error other than the "already quantized", placement and option
 * checks (done before any edit), `m` may be half edited: free it. */
enum qp_status qp_qdq_write(struct qp_model *m, const struct qp_placement *p,
                            const struct qp_writer_options *o, struct qp_writer_stats *stats,
                            struct qp_error *err);

/* The last step of qp_qdq_write on its own, for a model written with high precision float and
 * direct_io_types 0: converts to o->high_precision (keep_fp32_ops, direct_io_types) and, with
 * direct_io_types, removes the graph-input Q nodes. Fills stats->high_precision, f16 and
 * n_input_q_removed (the rest of `stats` is kept; may be NULL). Returns QP_ERR_UNSUPPORTED for a
 * high precision other than float/float16/bfloat16 and what qp_model_convert_low refuses;
 * QP_ERR_NOMEM. On an error `m` may be half edited: free it. */
enum qp_status qp_qdq_write_precision(struct qp_model *m, const struct qp_writer_options *o,
                                      struct qp_writer_stats *stats, struct qp_error *err);

/* The scales qp_qdq_write gives float weight `t` quantized to `qtype` along `axis` (a channel
 * axis, or -1: one scale for the tensor), with clip_mse as weight_clip_mse: *scales_out
 * (malloc'd, *n_out entries: the axis's length, or 1). Returns QP_ERR_BAD_INPUT for scales the
 * type cannot hold (naming the weight) and QP_ERR_NOMEM. */
enum qp_status qp_qdq_weight_scales(const struct qp_tensor *t, int axis, enum qp_dtype qtype,
                                    int clip_mse, float **scales_out, int64_t *n_out,
                                    struct qp_error *err);

/* Output path for `input` when none is given: "<dir>/<stem>.quant.onnx" (the ".onnx" suffix of
 * the input is replaced; otherwise ".quant.onnx" is appended). malloc'd; NULL when out of
 * memory. */
char *qp_quant_default_output(const char *input);

#endif
