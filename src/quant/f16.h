/*
 * FP16 conversion of the non-quantized part of a model (`--high_precision_dtype fp16`, the
 * default of `qplace quantize`, as ModelOpt's autocast `convert_to_f16` with keep_io_types).
 *
 *   - every node computes in fp16 except the ops kept in fp32 (ops without an fp16 kernel in the
 *     ONNX schema: Upsample, NonMaxSuppression, Celu, QLinear*, ops with a dtype attribute such
 *     as RandomNormal, sequence/optional ops, nodes with subgraphs, nodes of other domains, and
 *     the producers of tensors read implicitly by subgraphs);
 *   - float32 initializers and Constant tensors (weights, biases, Q/DQ scales) become fp16 where
 *     every consumer takes fp16; one consumed by both kinds is kept fp32 and gets an fp16 copy
 *     `<name>_fp16`;
 *   - Resize keeps its `scales` input (index 2) in fp32 (the schema allows float only);
 *     LayerNormalization's Mean/InvStdDev outputs stay float (stash type);
 *   - graph inputs and outputs stay float32: a Cast to fp16 after each input read by an fp16
 *     node, and an output computed in fp16 is produced by a Cast (the fp16 tensor is renamed
 *     `<name>_fp16`);
 *   - Casts to float in converted regions are retargeted to fp16; every other precision
 *     boundary gets one Cast per tensor and target type (`<tensor>_cast_fp16`/`_cast_fp32`);
 *   - a QuantizeLinear whose input arrives in fp32 (a graph input, an fp32-kept producer) stays
 *     fp32 and its DequantizeLinear gets an fp16 scale (no Cast between a tensor and its
 *     quantizer, so `qplace diff` still resolves each slot to the placed tensor); a
 *     DequantizeLinear whose consumers are all fp32-kept stays fp32;
 *   - values beyond the fp16 range (|x| > 65504, including infinities) are clamped to +-65504,
 *     counted and logged as a warning (ModelOpt clamps too); a non-zero Q/DQ scale that would
 *     round to zero becomes the smallest fp16 subnormal (2^-24), counted (a zero scale is
 *     invalid);
 *   - value dtypes (value_info) follow the conversion. Dtypes the model does not declare are
 *     inferred from the op (Cast `to`, comparisons -> bool, Shape -> int64, ...); a float
 *     slot whose dtype cannot be inferred is QP_ERR_UNSUPPORTED naming the tensor.
 *
 *
 * The same pass converts to bfloat16 (`--high_precision_dtype bf16`): there every op whose
 * schema at opset 19 does not take bfloat16 (Conv, pooling, Resize, ... ) stays float32 as the
 * fp16 blocked ops do, nothing is clamped (bf16 has float32's range), and added names end in
 * `_bf16`. Options also keep named op types in float32 (ModelOpt's --op_types_to_exclude_fp16:
 * Casts around them as for blocked ops) and convert the graph inputs and outputs too (ModelOpt's
 * --direct_io_types: keep_io_types 0; an output produced by a float32-kept node stays float32).
 *
 *     struct qp_f16_stats st;
 *     if (qp_model_convert_f16(model, &st, &err) != QP_OK) ...   // model edited in place
 *     struct qp_f16_options o;
 *     qp_f16_options_default(&o);
 *     o.dtype = QP_DTYPE_BFLOAT16; o.keep_ops = ops; o.n_keep_ops = 1;
 *     if (qp_model_convert_low(model, &o, &st, &err) != QP_OK) ...
 */
#ifndef QP_QUANT_F16_H
#define QP_QUANT_F16_H

#include <stddef.h>

#include "ir/ir.h"
#include "qplace/status.h"

struct qp_f16_stats {
    size_t n_fp16_nodes;      /* nodes computing in fp16 */
    size_t n_fp32_nodes;      /* nodes kept fp32 (Casts added by the pass not counted) */
    size_t n_initializers;    /* initializers converted (copies included) */
    size_t n_constants;       /* Constant node tensors converted */
    size_t n_casts;           /* Cast nodes added (I/O and boundaries) */
    size_t n_clamped;         /* values beyond +-65504 clamped */
    size_t n_scale_underflow; /* non-zero scales raised to 2^-24 */
};

struct qp_f16_options {
    enum qp_dtype dtype;         /* QP_DTYPE_FLOAT16 (default) or QP_DTYPE_BFLOAT16 */
    const char *const *keep_ops; /* op types kept float32 (borrowed for the call); may be NULL */
    size_t n_keep_ops;
    int keep_io_types; /* 1 (default): graph inputs and outputs stay float32 */
};

void qp_f16_options_default(struct qp_f16_options *o);

/* Converts the top-level graph of `m` in place, with the default options (fp16, I/O float32).
 * `stats` may be NULL. Returns QP_ERR_UNSUPPORTED for an initializer whose data is not loaded or a
 * float slot of unknown dtype (naming it), QP_ERR_BAD_INPUT for a graph that does not sort (a
 * cycle, an undefined input), QP_ERR_NOMEM. On an error `m` may be half converted: free it. */
enum qp_status qp_model_convert_f16(struct qp_model *m, struct qp_f16_stats *stats,
                                    struct qp_error *err);
/* The same with options `o` (borrowed for the call); QP_ERR_USAGE for a dtype other than
 * float16/bfloat16. The stats count bf16 nodes, initializers and Casts in the fp16 fields. */
enum qp_status qp_model_convert_low(struct qp_model *m, const struct qp_f16_options *o,
                                    struct qp_f16_stats *stats, struct qp_error *err);

#endif
