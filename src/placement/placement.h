/*
 * A placement: the complete answer to "where do Q/DQ pairs go" (DESIGN.md, invariant 1).
 *
 * It holds two kinds of quantizer, each keyed by the consumer slot it feeds:
 *   - activation edges  (tensor, consumer node, input index): the writer puts one shared Q/DQ
 *     pair on `tensor` and points every quantized consumer slot of it at the DQ output;
 *   - weight quantizers (initializer, consumer node, input index, axis): the initializer is
 *     quantized per channel along `axis`, or per tensor when axis == -1.
 * Every entry carries `reason`, a stable identifier of the rule that placed it ("trt.conv_input",
 * "trt.residual_skip", "user.rule:3"; docs/placement-rules.md lists them).
 *
 * A slot (node, input) holds at most one quantizer. Entries refer to the graph by name, so a
 * placement can be written to JSON (docs/placement.md) and applied to another load of the same
 * model; qp_placement_validate resolves the names against a graph, fails naming the first node,
 * tensor or input index that does not exist, and sorts entries by the consumer's position in
 * topological order, then input index. Nothing here ever adds or drops an entry on its own.
 *
 *     struct qp_placement *p = qp_placement_create();
 *     qp_placement_add_edge(p, "x", "conv1", 0, "trt.conv_input", &err);
 *     qp_placement_add_weight(p, "w1", "conv1", 1, 0, "trt.conv_weight", &err);
 *     qp_placement_validate(p, graph, &err);      // names checked, entries sorted
 *     qp_placement_save_file(p, "placement.json", &err);
 *     qp_placement_free(p);
 */
#ifndef QP_PLACEMENT_PLACEMENT_H
#define QP_PLACEMENT_PLACEMENT_H

#include <stddef.h>

#include "ir/ir.h"
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

/* An empty placement; NULL when out of memory. Free with qp_placement_free (NULL-safe). */
struct qp_placement *qp_placement_create(void);
void qp_placement_free(struct qp_placement *p);
/* A deep copy of `p` into *out (a new placement). QP_ERR_NOMEM. */
enum qp_status qp_placement_copy(const struct qp_placement *p, struct qp_placement **out,
                                 struct qp_error *err);

/* Adds an activation edge. Strings are copied. If slot (node, input) already holds an edge on the
 * same tensor, nothing changes (the first reason stays) and QP_OK is returned. A slot holding a
 * weight quantizer or an edge on another tensor is QP_ERR_BAD_INPUT naming the slot. A negative
 * input or an empty name is QP_ERR_USAGE. */
enum qp_status qp_placement_add_edge(struct qp_placement *p, const char *tensor, const char *node,
                                     int input, const char *reason, struct qp_error *err);
/* Adds a weight quantizer; same rules (an existing identical slot, axis included, is kept). */
enum qp_status qp_placement_add_weight(struct qp_placement *p, const char *tensor, const char *node,
                                       int input, int axis, const char *reason,
                                       struct qp_error *err);

/* Looks up slot (node, input): returns 1 and sets *is_weight_out / *index_out (either may be
 * NULL) when it holds a quantizer, else 0. */
int qp_placement_find(const struct qp_placement *p, const char *node, int input, int *is_weight_out,
                      size_t *index_out);
/* Removes the quantizer on slot (node, input); returns 1 if there was one, else 0. Keeps the
 * order of the remaining entries. */
int qp_placement_remove(struct qp_placement *p, const char *node, int input);

/* Set operations on slots. A slot present in both with different contents (tensor, kind or axis)
 * is QP_ERR_BAD_INPUT naming it (union) or counts as different (equal, intersect keep `dst`'s).
 *   union:     dst += src's entries whose slot dst lacks (appended in src's order)
 *   subtract:  dst -= every slot that src holds
 *   intersect: dst keeps only slots that src holds too */
enum qp_status qp_placement_union(struct qp_placement *dst, const struct qp_placement *src,
                                  struct qp_error *err);
void qp_placement_subtract(struct qp_placement *dst, const struct qp_placement *src);
void qp_placement_intersect(struct qp_placement *dst, const struct qp_placement *src);
/* 1 when both hold the same slots with the same tensors, kinds and axes (reasons and order are
 * not compared), else 0. */
int qp_placement_equal(const struct qp_placement *a, const struct qp_placement *b);

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

/* JSON (docs/placement.md). Reading takes `len` bytes of `text` (borrowed for the call) and
 * rejects a wrong format string, a newer version, unknown keys, wrong types, negative or
 * fractional indices and repeated slots, naming the entry (QP_ERR_BAD_INPUT, or
 * QP_ERR_UNSUPPORTED for a newer version). `source` names the input in messages (may be NULL).
 * Entries keep their file order. */
enum qp_status qp_placement_read_json(const char *text, size_t len, const char *source,
                                      struct qp_placement **out, struct qp_error *err);
enum qp_status qp_placement_load_file(const char *path, struct qp_placement **out,
                                      struct qp_error *err);
/* Writes the entries in their current order, one per line. *text_out is malloc'd (caller frees).
 * Reading the text back and writing again gives the same bytes. */
enum qp_status qp_placement_write_json(const struct qp_placement *p, char **text_out,
                                       struct qp_error *err);
/* Writes atomically (temporary file beside `path`, then rename). QP_ERR_IO. */
enum qp_status qp_placement_save_file(const struct qp_placement *p, const char *path,
                                      struct qp_error *err);

#endif
