/*
 * qplace/placement.h — where Q/DQ pairs go, as data.
 *
 * A placement is the complete answer to "where do Q/DQ pairs go": the writer applies exactly the
 * placement it is given, calibration only computes scales for it, and nothing adds or drops an
 * entry on its own. It holds two kinds of quantizer, each keyed by the consumer slot it feeds:
 *   - activation edges  (tensor, consumer node, input index): one shared Q/DQ pair on `tensor`,
 *     every quantized consumer slot of it reading the DQ output;
 *   - weight quantizers (constant, consumer node, input index, axis): per channel along `axis`,
 *     or per tensor when axis is -1.
 * Every entry carries `reason`, a stable identifier of the rule that placed it ("trt.conv_input",
 * "user.rule:3"; docs/placement-rules.md lists them). A slot holds at most one quantizer.
 * Entries refer to the model by name, so a placement written to JSON (docs/placement.md) applies
 * to another load of the same model.
 *
 *     struct qp_error err = {0};
 *     struct qp_placement *p = qp_placement_create();
 *     qp_placement_add_edge(p, "x", "conv1", 0, "user.manual", &err);
 *     qp_placement_add_weight(p, "w1", "conv1", 1, 0, "user.manual", &err);
 *     if (qp_placement_check(p, model, &err) != QP_OK) ...   // names checked, entries sorted
 *     qp_placement_save_file(p, "placement.json", &err);
 *     for (size_t i = 0; i < qp_placement_n_edges(p); i++) {
 *         struct qp_placement_entry e;
 *         qp_placement_edge(p, i, &e);                        // strings borrowed from p
 *     }
 *     qp_placement_free(p);
 *
 * Compare a placement with the Q/DQ model written from it (`qplace diff`):
 *
 *     struct qp_diff_side a = {.model = written}, b = {.placement = p, .model = float_model};
 *     struct qp_diff_counts c;
 *     qp_placement_diff(&a, &b, 0, &c, NULL, &err);          // c.a_only + c.b_only == 0: SAME
 *
 * Strings passed in are copied; strings handed out are borrowed from the placement until it is
 * changed or freed. A placement is not safe to change from two threads at once.
 */
#ifndef QPLACE_PLACEMENT_H
#define QPLACE_PLACEMENT_H

#include <stddef.h>

#include "qplace/model.h"
#include "qplace/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qp_placement;

/* An empty placement; NULL when out of memory. Free with qp_placement_free (NULL-safe). */
struct qp_placement *qp_placement_create(void);
void qp_placement_free(struct qp_placement *p);
/* A deep copy of `p` into *out (a new placement). QP_ERR_NOMEM. */
enum qp_status qp_placement_copy(const struct qp_placement *p, struct qp_placement **out,
                                 struct qp_error *err);

/* Adds an activation edge. If slot (node, input) already holds an edge on the same tensor,
 * nothing changes (the first reason stays) and QP_OK is returned. A slot holding a weight
 * quantizer or an edge on another tensor is QP_ERR_BAD_INPUT naming the slot. A negative input
 * or an empty name is QP_ERR_USAGE. QP_ERR_NOMEM. */
enum qp_status qp_placement_add_edge(struct qp_placement *p, const char *tensor, const char *node,
                                     int input, const char *reason, struct qp_error *err);
/* Adds a weight quantizer; same rules (an existing identical slot, axis included, is kept). */
enum qp_status qp_placement_add_weight(struct qp_placement *p, const char *tensor, const char *node,
                                       int input, int axis, const char *reason,
                                       struct qp_error *err);

/* Looks up slot (node, input): returns 1 and sets *is_weight_out / *index_out (either may be
 * NULL) when it holds a quantizer, else 0. The index is the entry's in qp_placement_edge or
 * qp_placement_weight. */
int qp_placement_find(const struct qp_placement *p, const char *node, int input, int *is_weight_out,
                      size_t *index_out);
/* Removes the quantizer on slot (node, input); returns 1 if there was one, else 0. Keeps the
 * order of the remaining entries. */
int qp_placement_remove(struct qp_placement *p, const char *node, int input);

/* One entry as qp_placement_edge / qp_placement_weight hand it out. */
struct qp_placement_entry {
    const char *tensor; /* the quantized tensor (a weight: the constant) */
    const char *node;   /* the consumer node */
    int input;          /* the consumer's input index */
    int axis;           /* weights: per-channel axis or -1 (per tensor); edges: -1 */
    const char *reason;
};

size_t qp_placement_n_edges(const struct qp_placement *p);
size_t qp_placement_n_weights(const struct qp_placement *p);
/* Entry i (in the placement's order: insertion, or sorted after qp_placement_check) into *out.
 * Returns 0 (out untouched) when i is out of range, else 1. */
int qp_placement_edge(const struct qp_placement *p, size_t i, struct qp_placement_entry *out);
int qp_placement_weight(const struct qp_placement *p, size_t i, struct qp_placement_entry *out);

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

/* Checks every entry against `model`'s top-level graph (borrowed for the call; its topological
 * order is recomputed, nothing else changes): the node exists, the input index is within its
 * inputs, the slot reads `tensor`, edges are not initializers and weights are float constants
 * (initializers or Constant outputs) whose axis is -1 or within their rank. The first failure is
 * QP_ERR_BAD_INPUT naming the entry, node, tensor or index. On success, entries are sorted by
 * (consumer position in topological order, input index). Note that `qplace quantize` converts a
 * model below opset 19 to opset 19 before placing; check against the model you apply to. */
enum qp_status qp_placement_check(struct qp_placement *p, struct qp_model *model,
                                  struct qp_error *err);

/* JSON (docs/placement.md). Reading takes `len` bytes of `text` (borrowed for the call) and
 * rejects a wrong format string, a newer version, unknown keys, wrong types, negative or
 * fractional indices and repeated slots, naming the entry (QP_ERR_BAD_INPUT, or
 * QP_ERR_UNSUPPORTED for a newer version). `source` names the input in messages (may be NULL).
 * Entries keep their file order. On success *out owns a new placement. */
enum qp_status qp_placement_read_json(const char *text, size_t len, const char *source,
                                      struct qp_placement **out, struct qp_error *err);
/* Reads a file of at most 256 MiB; QP_ERR_IO when it cannot be read. */
enum qp_status qp_placement_load_file(const char *path, struct qp_placement **out,
                                      struct qp_error *err);
/* Writes the entries in their current order, one per line. *text_out is malloc'd (caller
 * frees). Reading the text back and writing again gives the same bytes. QP_ERR_NOMEM. */
enum qp_status qp_placement_write_json(const struct qp_placement *p, char **text_out,
                                       struct qp_error *err);
/* Writes atomically (temporary file beside `path`, then rename); nothing is left behind on
 * failure. QP_ERR_IO, QP_ERR_NOMEM. */
enum qp_status qp_placement_save_file(const struct qp_placement *p, const char *path,
                                      struct qp_error *err);

/* ---- the trt policy ------------------------------------------------------------------------ */

/* What the quantizers hold: INT8 (default) or FP8 E4M3FN. */
enum qp_quant_mode { QP_QUANT_INT8 = 0, QP_QUANT_FP8, QP_QUANT_MODE_COUNT };

/* The trt policy's options, named as ModelOpt's flags (docs/placement-rules.md). Every list is
 * borrowed for the call and holds what the flag of that name takes: an op type (several may be
 * comma-separated), a node-name regex matched at the start of the name, or "@FILE" (one entry a
 * line). Zero-initialized: INT8, no lists, no rules. */
struct qp_trt_options {
    enum qp_quant_mode quantize_mode;
    int disable_mha_qdq; /* 1: never quantize the two batched MatMuls of attention */
    size_t n_op_types_to_quantize, n_op_types_to_exclude;
    const char *const *op_types_to_quantize, *const *op_types_to_exclude;
    size_t n_nodes_to_quantize, n_nodes_to_exclude;
    const char *const *nodes_to_quantize, *const *nodes_to_exclude;
    const char *rules_path; /* a rules file applied after the policy (--rules); NULL: none */
};

/* The placement `qplace quantize` computes for `model`: TensorRT-friendly Q/DQ (the trt policy,
 * docs/placement-rules.md explains each rule), the lists, then the rules file. A model below
 * opset 19 is first converted to opset 19 in place, as quantize does: the placement names that
 * model's nodes, so apply it to the converted model. `o` may be NULL (defaults). On success *out
 * owns a new placement, checked and sorted, every entry with its reason. Returns QP_ERR_USAGE (a
 * regex that does not compile, an FP8 op-type list outside Conv, Gemm, MatMul and Add),
 * QP_ERR_BAD_INPUT (a model already holding Q/DQ nodes; a bad rules file, naming its line),
 * QP_ERR_IO (an unreadable @FILE or rules file), QP_ERR_UNSUPPORTED (an opset that cannot be
 * converted), QP_ERR_NOMEM. */
enum qp_status qp_placement_trt(struct qp_model *model, const struct qp_trt_options *o,
                                struct qp_placement **out, struct qp_error *err);

/* ---- diff ------------------------------------------------------------------------------- */

/* One side of a Q/DQ topology diff, compared at consumer input slots (node, input, tensor, kind):
 *   - `placement` set: its entries; `model` (may be NULL) only names op types in the report;
 *   - `placement` NULL: the Q/DQ `model`, every slot fed through a DequantizeLinear resolved back
 *     to the tensor before its QuantizeLinear (a weight stored quantized: the initializer).
 * `name` labels the side in the report (NULL: "A" / "B"). Everything is borrowed for the call. */
struct qp_diff_side {
    const struct qp_model *model;
    const struct qp_placement *placement;
    const char *name;
};

/* Slot counts of a diff; [0] activation edges, [1] weights. A slot on both sides with another
 * tensor counts once in a_only and once in b_only. */
struct qp_diff_counts {
    size_t same[2], a_only[2], b_only[2];
};

/* Compares a and b into *counts_out (may be NULL) and, when text_out is not NULL, a report as
 * `qplace diff` prints it (json = 1: its JSON form), malloc'd (caller frees). Returns
 * QP_ERR_USAGE for a side with neither model nor placement, QP_ERR_NOMEM. */
enum qp_status qp_placement_diff(const struct qp_diff_side *a, const struct qp_diff_side *b,
                                 int json, struct qp_diff_counts *counts_out, char **text_out,
                                 struct qp_error *err);

#ifdef __cplusplus
}
#endif
#endif
