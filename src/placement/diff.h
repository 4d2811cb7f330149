/*
 * Q/DQ topology diff (`qplace diff`): compares two sides, each a Q/DQ model or a placement, at
 * the level of consumer input slots. For a model, every (consumer node, input index) fed through
 * a DequantizeLinear is resolved back to the original tensor: the input
 * of the QuantizeLinear before the DQ, or, for a weight stored quantized (DQ only), the
 * initializer itself (a `<w>_quantized` copy counts as `<w>`). A slot is a weight slot when that
 * tensor is a constant. For a placement, its edges and weight quantizers are the slots.
 *
 * Two slots are the SAME when node, input index, tensor and kind agree; a slot present on both
 * sides with a different tensor counts once as A ONLY and once as B ONLY. Differences are grouped
 * by "producer op -> consumer op" (op types from the graph each side was resolved with; "?" when a
 * placement is read without a graph).
 *
 *     struct qp_qdq_slots *a = NULL, *b = NULL;
 *     qp_qdq_slots_from_model(model_a->graph, &a, &err);
 *     qp_qdq_slots_from_placement(placement_b, model_a->graph, &b, &err);
 *     struct qp_qdq_diff d;
 *     qp_qdq_diff(a, b, &d, &err);
 *     char *text = NULL; qp_qdq_diff_format(&d, "a.onnx", "b.json", 0, &text, &err);
 *     qp_qdq_diff_release(&d); qp_qdq_slots_free(a); qp_qdq_slots_free(b);
 */
#ifndef QP_PLACEMENT_DIFF_H
#define QP_PLACEMENT_DIFF_H

#include <stddef.h>

#include "ir/ir.h"
#include "qplace/status.h"
#include "placement/placement.h"

/* Suffix of a quantized weight copy whose float original is still read elsewhere (qdq-to-dq
 * writes such copies; diff reads them as the original's weight quantizer). */
#define QP_QUANTIZED_SUFFIX "_quantized"

struct qp_qdq_slot {
    const char *node;
    int input;
    const char *tensor;
    int weight;
    const char *producer_op; /* op type, "input", "initializer", "Constant" or "?" */
    const char *consumer_op; /* op type or "?" */
};

struct qp_qdq_slots {
    size_t n, cap;
    struct qp_qdq_slot *slots; /* sorted by (node, input) after creation */
    struct qp_arena *arena;    /* strings */
};

/* Slots of a Q/DQ graph (borrowed for the call; strings are copied). QP_ERR_NOMEM. */
enum qp_status qp_qdq_slots_from_model(const struct qp_graph *g, struct qp_qdq_slots **out,
                                       struct qp_error *err);
/* Slots of a placement; `g` (may be NULL) supplies op types for the report. QP_ERR_NOMEM. */
enum qp_status qp_qdq_slots_from_placement(const struct qp_placement *p, const struct qp_graph *g,
                                           struct qp_qdq_slots **out, struct qp_error *err);
void qp_qdq_slots_free(struct qp_qdq_slots *s);

/* One difference pattern: side ("A ONLY"/"B ONLY"), kind, "producer -> consumer", count and up
 * to QP_DIFF_EXAMPLES examples (borrowed from the slot sets). */
#define QP_DIFF_EXAMPLES 3
struct qp_qdq_diff_group {
    int side; /* 0: A only, 1: B only */
    int weight;
    const char *producer_op, *consumer_op;
    size_t count;
    size_t n_examples;
    const struct qp_qdq_slot *examples[QP_DIFF_EXAMPLES];
};

struct qp_qdq_diff {
    /* [0] activation edges, [1] weights */
    size_t same[2], a_only[2], b_only[2];
    size_t n_groups;
    struct qp_qdq_diff_group *groups; /* malloc'd; largest count first */
};

/* Compares two slot sets (borrowed while `out` is used). QP_ERR_NOMEM. */
enum qp_status qp_qdq_diff(const struct qp_qdq_slots *a, const struct qp_qdq_slots *b,
                           struct qp_qdq_diff *out, struct qp_error *err);
/* 1 when nothing differs. */
int qp_qdq_diff_same(const struct qp_qdq_diff *d);
/* Human text or JSON (json = 1) report; *text_out is malloc'd. QP_ERR_NOMEM. */
enum qp_status qp_qdq_diff_format(const struct qp_qdq_diff *d, const char *name_a,
                                  const char *name_b, int json, char **text_out,
                                  struct qp_error *err);
void qp_qdq_diff_release(struct qp_qdq_diff *d);

#endif
