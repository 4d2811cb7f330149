/*
 * The default placement policy, `trt`: TensorRT-friendly Q/DQ placement as ModelOpt's ONNX PTQ
 * derives it (shared/reference/modelopt-onnx-ptq.md §3, §4), written as a placement with one
 * reason per entry. docs/placement-rules.md explains every rule with a small example.
 *
 *     struct qp_policy_options o = {.mode = QP_QUANT_INT8, .select = sel};
 *     struct qp_placement *p = qp_placement_create();
 *     if (qp_policy_trt(graph, &o, p, NULL, &err) != QP_OK) ...
 *     if (rules) qp_rules_apply(rules, graph, p, &err);
 *
 * Shapes and dtypes come from the graph's values (struct qp_value): a dimension or dtype that is
 * unknown never triggers a shape-based exclusion (GEMV/small GEMM, MHA sequence length, head
 * size), and an UNDEFINED dtype counts as float. Concrete shapes filled in before the call (for
 * given input shapes) make the policy match ModelOpt run with those shapes.
 */
#ifndef QP_QUANT_POLICY_TRT_H
#define QP_QUANT_POLICY_TRT_H

#include "ir/ir.h"
#include "placement/placement.h"
#include "placement/select.h"
#include "qplace/status.h"

/* enum qp_quant_mode: qplace/placement.h. */

struct qp_policy_options {
    enum qp_quant_mode mode;
    /* 1: never quantize the two batched MatMuls of attention (--disable_mha_qdq). */
    int disable_mha_qdq;
    /* 1: skip the automatic GEMV/small-GEMM and small-conv exclusions (autotune does). */
    int no_auto_exclusions;
    /* Include/exclude lists (borrowed for the call); NULL for none. */
    const struct qp_select *select;
};

/* Computes the trt placement of `g` (the top-level graph; nodes of subgraphs are never
 * quantized) into `out`, which must be empty. Re-sorts g->topo (qp_graph_toposort). On success,
 * `out` is validated and sorted. `node_notes`, when not NULL, has g->n_nodes entries and receives
 * for each node a static identifier of what the policy decided about it ("trt.conv",
 * "trt.fused", "trt.excluded.small_conv", "user.exclude", ... or NULL when the node was never
 * considered), for --explain. A model that already holds QuantizeLinear/DequantizeLinear gets an
 * empty placement and a warning, as in ModelOpt. Returns QP_ERR_USAGE for an FP8 op-type list
 * outside {Conv, Gemm, MatMul, Add}, QP_ERR_BAD_INPUT from toposort, QP_ERR_NOMEM. */
enum qp_status qp_policy_trt(struct qp_graph *g, const struct qp_policy_options *opts,
                             struct qp_placement *out, const char **node_notes,
                             struct qp_error *err);

/* qp_policy_trt, then the rules file at `rules_path` (NULL: none) applied to `out`: the
 * placement step of quantize and of qp_placement_trt (policy_api.c). Statuses of both and of
 * qp_rules_load_file. */
enum qp_status qp_policy_trt_place(struct qp_graph *g, const struct qp_policy_options *po,
                                   const char *rules_path, struct qp_placement *out,
                                   struct qp_error *err);

/* The op types the policy quantizes when no user list is given (NULL-terminated, static):
 * INT8's or FP8's. Autotune's insertion points use the same list. */
const char *const *qp_policy_trt_op_types(enum qp_quant_mode mode);

/* The inputs of node n that its Q/DQ handler quantizes: bit i for input i (both inputs of a
 * linear op, input 0 of the QDQ_INPUT0 ops, the two values of Where, else every input). */
uint64_t qp_policy_trt_op_slots(const struct qp_node *n);

#endif
