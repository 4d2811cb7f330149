/*
 * Q/DQ -> DQ-only weights (`qplace qdq-to-dq`, `quantize --dq_only`; ModelOpt's qdq_to_dq,
 * shared/reference/modelopt-onnx-ptq.md §6.4): every QuantizeLinear whose input is a constant
 * (an initializer or a Constant node's output) and whose output feeds only DequantizeLinear nodes
 * is evaluated once. The quantized weight is stored as an initializer of the Q's output type
 * (INT8 rounded half to even and saturated, FP8 saturating — qmath/qparams.h does the math), the
 * DQ nodes read it directly, and the Q node is removed. When nothing else reads the float weight
 * it is replaced in place (same name, now quantized); otherwise the quantized copy is named
 * `<weight>_quantized` and the float weight stays for its other readers. A Constant node left
 * without readers is removed.
 *
 *     size_t n = 0;
 *     if (qp_qdq_to_dq(model, &n, &err) != QP_OK) ...   // model edited in place
 */
#ifndef QP_QUANT_QDQ_TO_DQ_H
#define QP_QUANT_QDQ_TO_DQ_H

#include <stddef.h>

#include "ir/ir.h"
#include "placement/diff.h" /* QP_QUANTIZED_SUFFIX */
#include "qplace/status.h"

/* Converts the top-level graph of `m` in place; *n_converted_out (may be NULL) receives the
 * number of Q nodes folded. Q nodes on activations are left alone. Returns QP_ERR_BAD_INPUT for
 * a weight Q whose scale or zero point is not a constant of the right type and size (naming the
 * node), QP_ERR_UNSUPPORTED for blocked quantization or a quantized type qparams lacks,
 * QP_ERR_NOMEM (the model may then be half converted: free it). */
enum qp_status qp_qdq_to_dq(struct qp_model *m, size_t *n_converted_out, struct qp_error *err);

#endif
