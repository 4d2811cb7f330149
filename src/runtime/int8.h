/*
 * The integer path of the engine (qp_session_options.int8 = QP_INT8_AUTO): before a session is
 * created on a Q/DQ model, a copy of its graph is rewritten the way TensorRT fuses Q/DQ
 * (../docs/engine.md "INT8 path"):
 *
 *   - DQ(x) and DQ(w, per channel) -> Conv [-> activations] [-> Add(residual)] [-> activations]
 *     [-> Q] become one QP_INT8_DOMAIN "QConv" node (kernels/int8_conv.h) that reads the int8
 *     tensor and, with a Q, writes the int8 tensor (requantized), else the float result;
 *   - DQ(x) -> op -> Q with the same scale and zero point, for ops that commute with
 *     quantization (MaxPool, Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Identity, Slice,
 *     Gather, Pad with zeros, nearest Resize, Concat whose inputs share the scale), becomes op
 *     on the int8 tensor; a Q after a Concat of other scales or after a nearest Resize moves
 *     before it, a DQ before a nearest Resize read by elementwise ops after it
 *     (rt_int8_move_pass), so that those run on int8 too;
 *   - a Q whose readers are DQs of its parameters feeding float ops becomes one FakeQuant pass;
 *   - connected elementwise chains with their FakeQuant passes, the DQs that feed them and the
 *     Qs that end them become one QP_INT8_DOMAIN "Pointwise" node (int8_pw.c, kernels/int8_pw.h);
 *   - Q/DQ nodes nothing reads any more go; the rest run as their own pass.
 *
 * First of all, float16 and bfloat16 tensors inside the graph become float32 (rt_int8_widen).
 * Int8 tensors that only QConv nodes exchange are stored channels last (NHWC). Every Q/DQ node of
 * the original graph gets a decision: what it fused into, or why it runs on its own.
 */
#ifndef QP_RUNTIME_INT8_H
#define QP_RUNTIME_INT8_H

#include "ir/ir.h"
#include "qplace/session.h"

struct rt_int8_report {
    size_t n, cap;
    struct qp_int8_decision *d; /* strings on the rewritten model's arena or `text` */
    char (*text)[2][160];       /* per decision: `into` and `reason` storage */
    size_t n_qconv, n_qmatmul, n_flow, n_fakequant, n_pointwise, n_removed;
    size_t n_widened;      /* narrow constants, Casts and declared types widened (rt_int8_widen) */
    const char *widen_why; /* why a graph with such values keeps them (static text), or NULL */
};

/* Rewrites `g` (a graph of a model the caller owns: a clone) in place and fills `rep`.
 * QP_ERR_NOMEM, or an edit's error; the graph is then unusable. */
enum qp_status rt_int8_rewrite(struct qp_graph *g, struct rt_int8_report *rep,
                               struct qp_error *err);
void rt_int8_report_free(struct rt_int8_report *rep);

/* The exact path (qp_session_options.int8 = QP_INT8_EXACT): the rewrites of `g` (a clone) that
 * keep every output bit for bit what the fake-quantization oracle (QP_INT8_OFF) computes, only
 * faster. A float16 graph is first emulated as QP_INT8_OFF runs it (runtime/narrow.h: float32
 * values with a RoundFloat16 node wherever the model stores float16); then each Q whose readers
 * are only DQs of its parameters runs with them as one FakeQuant pass, and chains of elementwise
 * nodes whose Pointwise arithmetic is the engine kernel's own (Add, Sub, Mul, Div, Clip, Relu,
 * LeakyRelu, FakeQuant, RoundFloat16; not a node a Conv chain of the float fusion could take,
 * so what runtime/fuse.c folds stays as it is) run as one Pointwise pass (int8_pw.c with
 * `exact`). Sets *why (static text) and changes nothing when the graph cannot be emulated; then
 * the caller runs the model as written. *n_rounds: RoundFloat16 nodes added. Other errors
 * leave the graph unusable. */
enum qp_status rt_int8_exact_rewrite(struct qp_graph *g, const char **why, size_t *n_rounds,
                                     struct qp_error *err);

/* Moves Q and DQ nodes across Concat and nearest Resize (int8_move.c) so that those run on
 * int8: Q(Concat(a, ...)) -> Concat(Q(a), ...), Q(Resize(y)) -> Resize(Q(y)) for a Resize that
 * does not shrink, Resize(DQ(x)) -> DQ(Resize(x)) when only elementwise ops read the Resize.
 * Returns the moves made, or -1 on an edit's error (the graph is then unusable). */
int rt_int8_move_pass(struct qp_graph *g, struct rt_int8_report *rep, struct qp_error *err);

/* rt_narrow_widen (runtime/narrow.h) for the integer path: results differ from the written
 * model's by its fp16 rounding between nodes only. QP_INT8_FP16_OUT=1 declines (tests). */
enum qp_status rt_int8_widen(struct qp_graph *g, const char **why, size_t *n_widened,
                             struct qp_error *err);

/* 1 when `g` has a QuantizeLinear or DequantizeLinear node. */
int rt_int8_has_qdq(const struct qp_graph *g);

#endif
