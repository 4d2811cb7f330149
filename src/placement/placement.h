/*
 * Placement internals: the public API and its documentation are in include/qplace/placement.h;
 * this header adds what the modules above need: the entry structs, validation against an IR
 * graph (resolving the entries' node and value indices) and the weight-tensor lookup.
 *
 *     qp_placement_validate(p, graph, &err);   // what qp_placement_check does on model->graph
 *     for (size_t i = 0; i < p->n_edges; i++) use(p->edges[i].node_index, p->edges[i].value_index);
 */
#ifndef QP_PLACEMENT_PLACEMENT_H
#define QP_PLACEMENT_PLACEMENT_H

#include <stddef.h>

#include "ir/ir.h"
#include "qplace/placement.h"
#include "qplace/status.h"

/* The JSON format this code reads and writes (docs/placement.md). */
#define QP_PLACEMENT_FORMAT  "qplace.placement"
#define QP_PLACEMENT_VERSION 1
/* Largest placement file qp_placement_load_file reads. */
#define QP_PLACEMENT_MAX_FILE_BYTES ((size_t)256 << 20)

/* An activation quantizer on one consumer slot. Strings belong to the placement. */
struct qp_qedge {
    const char *tensor;
    const char *node;
    int input;
    const char *reason;
    /* Filled by qp_placement_validate (-1 before): indices in the graph it was validated on. */
    int node_index, value_index;
};

/* A weight quantizer: `tensor` is a constant (an initializer or a Constant node's output) read by
 * input `input` of `node`. */
struct qp_qweight {
    const char *tensor;
    const char *node;
    int input;
    int axis; /* per-channel axis (>= 0), or -1 for per tensor */
    const char *reason;
    int node_index, value_index;
};

struct qp_placement {
    size_t n_edges, cap_edges;
    struct qp_qedge *edges;
    size_t n_weights, cap_weights;
    struct qp_qweight *weights;
    /* Internal: string storage and the (node, input) -> entry index. */
    struct qp_arena *arena;
    size_t hash_cap, hash_n;
    int *hash;
};

/* Checks every entry against `g` (top-level graph; g->topo must be current) and resolves its
 * indices: the node exists and is live, the input index is within its inputs, the slot reads
 * `tensor`, edges are not initializers and weights are float constants (initializers or Constant
 * outputs, qp_placement_weight_tensor) whose axis is -1 or within their rank. The first failure is
 * QP_ERR_BAD_INPUT naming the entry, node, tensor or index. On success, entries are sorted by
 * (consumer topo position, input index). */
enum qp_status qp_placement_validate(struct qp_placement *p, const struct qp_graph *g,
                                     struct qp_error *err);

/* The constant tensor behind value `v` of `g`: its initializer, or the `value` attribute of the
 * Constant node producing it (exporters such as Paddle2ONNX store weights that way); NULL when
 * neither. Weight quantizers may only name such tensors. */
const struct qp_tensor *qp_placement_weight_tensor(const struct qp_graph *g, int v);

#endif
