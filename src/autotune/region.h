/*
 * Autotune regions: the graph cut into small pieces whose Q/DQ choices are searched one at a time,
 * following ModelOpt's divergence/convergence semantics (shared/reference/modelopt-onnx-ptq.md
 * §8.2; docs/autotune.md "Regions" says exactly what differs).
 *
 * Every live node of the top-level graph except Constant nodes lands in exactly one region, built
 * in one walk over the topological order:
 *   - a node D whose outputs feed more than one node (divergent) starts a *converged* region when
 *     its branches meet again at a node C within QP_REGION_MAX_STEPS steps and nothing between D
 *     and C leaves the set (C post-dominates it locally). The region is the nodes between D and C,
 *     C itself, D when no earlier region took it, and a short tail after C (at most
 *     QP_REGION_TAIL_NODES single-consumer nodes, ending before a Conv/ConvTranspose/Gemm/MatMul,
 *     with a divergent node as its last node): a residual block, an attention core;
 *   - any other node not yet placed starts a *sequence* region: a walk over single consumers that
 *     holds at most one Conv/ConvTranspose/Gemm/MatMul and ends with the first divergent node.
 * Each region lists its *insertion points*: the candidate quantizer slots (tensor, consumer node,
 * input index) whose consumer is in the region, so every slot belongs to one region. A slot is a
 * point when the consumer is a quantizable op (qp_region_op_quantizable) at an input its Q/DQ
 * handler takes, and the tensor is a float activation that is neither a shape computation nor a
 * scalar (an activation point), or a float constant of rank >= 1 with more than one element (a
 * weight point, axis as the trt policy chooses it): the slots the trt policy can place, plus the
 * ops ModelOpt's autotune also tries (Softmax, Gelu, Sqrt, Div, ...).
 *
 *     struct qp_regions *rs = NULL;
 *     if (qp_regions_build(graph, &rs, &err) != QP_OK) ...   // also computes patterns
 *     for (size_t r = 0; r < rs->n_regions; r++) {
 *         const struct qp_region *reg = &rs->regions[r];
 *         for (size_t k = 0; k < reg->n_points; k++)
 *             use(reg->points[k].node, reg->points[k].input, reg->points[k].value);
 *     }
 *     qp_regions_free(rs);
 */
#ifndef QP_AUTOTUNE_REGION_H
#define QP_AUTOTUNE_REGION_H

#include <stddef.h>

#include "ir/ir.h"
#include "qplace/status.h"

/* How far (in node steps from a branch) the convergence of a divergent node is looked for. */
#define QP_REGION_MAX_STEPS 10
/* How many nodes after the convergence a converged region takes. */
#define QP_REGION_TAIL_NODES 3

enum qp_region_kind { QP_REGION_CONVERGED = 0, QP_REGION_SEQUENCE, QP_REGION_KIND_COUNT };

/* One insertion point: consumer slot (node, input) reading `value`. `pos` and `slot` place it in
 * the region's pattern (autotune/pattern.h): the consumer's position in the canonical node order
 * and its canonical input slot (inputs of commutative ops are sorted). */
struct qp_region_point {
    int node, input, value;
    int is_weight; /* 1: a constant (weight quantizer), 0: an activation edge */
    int axis;      /* weights: per-channel axis or -1; edges: -1 */
    int pos, slot;
};

struct qp_region {
    enum qp_region_kind kind;
    size_t n_nodes;
    int *nodes; /* node indices, in the pattern's canonical order once patterns are computed */
    size_t n_points;
    struct qp_region_point *points; /* sorted by (pos, slot) once patterns are computed */
    int pattern;                    /* index into qp_regions.patterns, -1 before */
};

/* A pattern: regions of the same signature (autotune/pattern.h). */
struct qp_pattern {
    char *signature; /* canonical text: op types, attributes, topology, which slots are points */
    size_t n_ops;
    char **ops;      /* the op types in canonical order (edit distance works on these) */
    size_t n_points; /* every instance has this many points, in the same canonical order */
    size_t n_instances;
};

struct qp_regions {
    const struct qp_graph *graph; /* borrowed for the object's lifetime */
    size_t n_regions;
    struct qp_region *regions; /* in order of their first node in topological order */
    size_t n_patterns;
    struct qp_pattern *patterns; /* in order of first instance */
    int *region_of;              /* node -> region index, -1 for Constant and dead nodes */
};

/* 1 when node `n` is an op whose inputs may hold quantizers: the trt policy's INT8 op types, and
 * any other ONNX op except those ModelOpt's autotune filter skips (boolean, comparison, bitwise,
 * reductions, TopK, copy and shape ops, Cast, Pad, Range, ...). */
int qp_region_op_quantizable(const struct qp_node *n);

/* Splits `g` (top-level graph; borrowed for the lifetime of *out; its topological order is
 * recomputed) into regions with their insertion points, then computes the patterns
 * (qp_patterns_compute). *out is written only on success; free with qp_regions_free (NULL-safe).
 * Returns QP_ERR_BAD_INPUT from toposort, QP_ERR_NOMEM. */
enum qp_status qp_regions_build(struct qp_graph *g, struct qp_regions **out, struct qp_error *err);
void qp_regions_free(struct qp_regions *rs);

#endif
