/*
 * Sub-models for region-local timing (docs/autotune.md "Region-local timing"): the part of a
 * model a pattern's schemes change, cut out as a valid model of its own, so a race times that
 * part instead of the whole model.
 *
 * The node set of pattern p (qp_subgraph_nodes) is the instances of p asked for (every one, or
 * one of each shape: qp_subgraph_representatives), plus one step outside them: the producers
 * of the tensors they read and the consumers of the tensors they write. A Q/DQ on an
 * instance's border fuses into those neighbours in the engine (a Quantize into the producing
 * Conv's output, an int8 output into the consumer), so they are in the sub-model to fuse the
 * way they do in the whole model. Constant nodes the set reads are in it too.
 *
 * The sub-model (qp_subgraph_extract) holds those nodes, the initializers they read, and:
 *   - as graph inputs, the float tensors entering the set, each declared with the static dtype
 *     and shape it has in a run of the whole model at the given input shapes (captured once by
 *     qp_subgraph_capture); every graph input of the whole model is declared too, read or not,
 *     so a backend's shape option naming them (`--calibration_shapes`) fits every sub-model;
 *   - as initializers, the entering tensors that are not float32 or that the engine computes at
 *     plan time (shape computations, a Cast of a dimension): their values from that run, so
 *     Reshape and friends get the same shapes;
 *   - as graph outputs, the tensors its nodes write that the whole model reads outside the set
 *     or returns.
 * Node, tensor and initializer names are the whole model's, so a placement of the whole model
 * restricted to the sub-model's nodes (qp_subgraph_placement) writes the same Q/DQ there.
 * Running the sub-model on the captured entering tensors gives the whole model's values of its
 * outputs (the unit test checks it on ResNet- and ViT-like blocks). qp_subgraph_write writes a
 * placement into it with the borders quantized as the whole model quantizes them there.
 *
 *     unsigned char *keep = calloc(g->n_nodes, 1);
 *     qp_subgraph_nodes(rs, p, NULL, keep);          // every instance (or a representative set)
 *     struct qp_subgraph_capture *cap = NULL;      // once per model, for every pattern's border
 *     qp_subgraph_border(g, keep, &names, &n);     // names to capture (append for all patterns)
 *     if (qp_subgraph_capture(m, "input:1x3x224x224", names, n, 2, &cap, &err) != QP_OK) ...
 *     struct qp_model *sub = NULL;
 *     if (qp_subgraph_extract(m, keep, cap, &sub, &err) != QP_OK) ...
 *     struct qp_model *w = NULL;                    // best's Q/DQ inside, borders as in m
 *     if (qp_subgraph_write(sub, m->graph, best, &writer_options, &w, &err) != QP_OK) ...
 *     qp_model_free(w); qp_model_free(sub); qp_subgraph_capture_free(cap);
 */
#ifndef QP_AUTOTUNE_SUBGRAPH_H
#define QP_AUTOTUNE_SUBGRAPH_H

#include <stddef.h>

#include "autotune/region.h"
#include "ir/ir.h"
#include "placement/placement.h"
#include "quant/writer.h"
#include "qplace/array.h"
#include "qplace/status.h"

/* How many steps out of the pattern's instances the node set reaches (qp_subgraph_nodes). Two
 * was tried and timed worse: the wider borders ran mixed layouts the whole model never runs. */
#define QP_SUBGRAPH_STEPS 1

/* Marks in keep[0..g->n_nodes) (a byte per node of rs->graph, set to 1; other bytes are left
 * as they are) the node set of pattern `pattern`'s instances marked in
 * instances[0..rs->n_regions) (NULL: every instance): their nodes, the live producers of
 * what they read, the live consumers of what they write, the activations that fuse after those
 * neighbours (a single reader running as the step's post-operation: Relu, Clip, LeakyRelu,
 * Sigmoid, HardSigmoid, HardSwish, BatchNormalization, up to four in a chain), and the Constant
 * nodes any of those read. Returns the number of nodes marked by this call. */
size_t qp_subgraph_nodes(const struct qp_regions *rs, size_t pattern,
                         const unsigned char *instances, unsigned char *keep);

/* The tensors entering the node set `keep` that qp_subgraph_extract needs captured: read by a
 * kept node, produced by a node outside the set (not a graph input, not an initializer).
 * Appends their value indices to *vals (grown with realloc; *n and *cap updated), no
 * duplicates within the call's additions or with what *vals already holds. Returns QP_ERR_NOMEM. */
enum qp_status qp_subgraph_border(const struct qp_graph *g, const unsigned char *keep, int **vals,
                                  size_t *n, size_t *cap, struct qp_error *err);

/* What one run of the whole model says of some of its tensors. */
struct qp_subgraph_tensor {
    const char *name;      /* the model's (borrowed from it) */
    struct qp_array value; /* dtype and shape; `data` (owned) only when `frozen` */
    int frozen;            /* not float32, or computed at plan time: becomes an initializer */
};

struct qp_subgraph_capture {
    size_t n;
    struct qp_subgraph_tensor *tensors;
    size_t n_inputs;
    struct qp_shape *inputs; /* the whole model's graph inputs' concrete shapes */
};

/* Runs model `m` (borrowed; the capture borrows its names for its lifetime) once on
 * runtime/bench.h's deterministic inputs at `shapes` ("NAME:1x3x224x224,..."; NULL: the model's
 * static shapes) with n_threads (0: all cores) and records the tensors vals[0..n) of its
 * top-level graph. *out (free with qp_subgraph_capture_free) is written only on success.
 * Returns QP_ERR_USAGE (a bad shape string, a dynamic input without a shape), QP_ERR_BAD_INPUT
 * (a tensor the run does not compute), QP_ERR_NOMEM, and what creating and running the
 * session return. */
enum qp_status qp_subgraph_capture(const struct qp_model *m, const char *shapes, const int *vals,
                                   size_t n, int n_threads, struct qp_subgraph_capture **out,
                                   struct qp_error *err);
void qp_subgraph_capture_free(struct qp_subgraph_capture *c);

/* Representatives (docs/autotune.md "Representative instances"). A pattern's instances often
 * repeat with the same shapes (ViT-tiny's 12 encoder blocks; ResNet-50's identity bottlenecks,
 * 2, 3, 5 and 1 per stage), so a sub-model needs one instance of each kind, not all of them:
 * qp_subgraph_representatives picks, among the instances marked in searched[0..rs->n_regions)
 * (NULL: every instance), the first of each group whose nodes read tensors of the same shapes,
 * slot by slot in the pattern's canonical order (captured shapes of activations, initializers'
 * dims), into chosen[0..rs->n_regions) (1 chosen, 0 not), and returns how many. `cap` must hold
 * what qp_subgraph_instance_border lists for the pattern. Choosing is pure: the same
 * instances for the same model and shapes. */
size_t qp_subgraph_representatives(const struct qp_regions *rs, size_t pattern,
                                   const unsigned char *searched,
                                   const struct qp_subgraph_capture *cap, unsigned char *chosen);

/* Appends to *vals (as qp_subgraph_border does) every tensor that a sub-model of some subset of
 * pattern `pattern`'s instances needs captured (the border of each instance's node set: a
 * border of a union of those sets is part of their borders' union) and the tensors each
 * instance reads from outside itself (what qp_subgraph_representatives compares). Returns
 * QP_ERR_NOMEM. */
enum qp_status qp_subgraph_instance_border(const struct qp_regions *rs, size_t pattern, int **vals,
                                           size_t *n, size_t *cap, struct qp_error *err);

/* The sub-model of `m` (borrowed; the sub-model borrows its initializer bytes, so `m` must
 * outlive it) holding the nodes marked in keep[0..m->graph->n_nodes) (see the overview).
 * `cap` must hold every tensor qp_subgraph_border lists for `keep`. *out is written only on
 * success (qp_model_free). Returns QP_ERR_BAD_INPUT (an entering tensor not captured; no
 * tensor leaves the set), QP_ERR_NOMEM. */
enum qp_status qp_subgraph_extract(const struct qp_model *m, const unsigned char *keep,
                                   const struct qp_subgraph_capture *cap, struct qp_model **out,
                                   struct qp_error *err);

/* The entries of placement `p` (borrowed) whose consumer node is in `sub`: a new placement in
 * *out (qp_placement_free), written only on success. Returns QP_ERR_NOMEM and what adding an
 * entry returns. */
enum qp_status qp_subgraph_placement(const struct qp_placement *p, const struct qp_model *sub,
                                     struct qp_placement **out, struct qp_error *err);

/* The sub-model `sub` of the model whose graph is `whole`, with placement `p` (a placement of
 * the whole model) written by the Q/DQ writer (options `wo`) into a new model *out
 * (qp_model_free, before `sub`: *out borrows the bytes of sub's initializers,
 * qp_model_clone_shared; written only on success); `sub` is not changed. Inside it holds p's
 * entries whose consumer is in `sub` (qp_subgraph_placement). At its border it keeps how the whole
 * model reads the tensors that leave it: a graph output that a consumer outside reads through
 * an edge of p is written quantized, the QuantizeLinear's output becoming a graph output, so
 * its producer writes int8 as it does in the whole model; it stays a float graph output only
 * when the whole model returns it or a consumer outside reads it unquantized. Without that, a
 * scheme that unquantizes an edge into a tensor's in-region reader looks faster in the
 * sub-model (its producer just writes float) while the whole model pays a QuantizeLinear pass
 * for the readers outside. Returns QP_ERR_NOMEM and what cloning and the writer return. */
enum qp_status qp_subgraph_write(const struct qp_model *sub, const struct qp_graph *whole,
                                 const struct qp_placement *p, const struct qp_writer_options *wo,
                                 struct qp_model **out, struct qp_error *err);

#endif
