/*
 * What the integer path's graph passes share (src/runtime/int8.c, int8_pw.c): reading constants
 * and Q/DQ parameters off the graph, the per-node decisions of the report, and the edits that
 * replace nodes by fused ones. Internal to the runtime.
 */
#ifndef QP_RUNTIME_INT8_GRAPH_H
#define QP_RUNTIME_INT8_GRAPH_H

#include "ir/ir.h"
#include "runtime/int8.h"

#define MAX_IN 16

/* Per-tensor quantization of a Q or DQ node: scale, zero point, dtype. */
struct i8g_qparam {
    float s;
    int64_t z;
    enum qp_dtype dt;
    int scale_v, zp_v; /* the values holding them */
    enum qp_dtype sdt; /* the scale's dtype (float or float16): the float side's dtype */
};

/* The live node that produces value v, or NULL (graph input, initializer, v < 0). */
const struct qp_node *i8g_producer(const struct qp_graph *g, int v);
/* The constant tensor value v holds (an initializer or a Constant node's `value`), or NULL. */
const struct qp_tensor *i8g_const_of(const struct qp_graph *g, int v);
/* 1 for float32 and float16; i8g_is_op: 1 when n is the QP_INT8_DOMAIN op `op`. */
int i8g_float_dt(enum qp_dtype dt);
int i8g_is_op(const struct qp_node *n, const char *op);

/* 1 when value v is certainly a float (float32 or float16) tensor: its declared dtype, an op
 * that only makes float, or a type-preserving op (elementwise arithmetic, data movement) of a
 * float input, looked up to eight producers back. */
int i8g_known_float(const struct qp_graph *g, int v);

/* Element i of a float/float16 (tensor_f) or int8/uint8 (tensor_i) constant; 0 if none. */
int i8g_tensor_f(const struct qp_tensor *t, uint64_t i, float *out);
int i8g_tensor_i(const struct qp_tensor *t, uint64_t i, int64_t *out);
/* The value of scalar v when the graph fixes it without running: a constant of one element, or
 * Sqrt, Reciprocal, Cast, Identity, (Un)Squeeze or Reshape of one, Mul/Add/Sub/Div of two, or a
 * Gather of a Shape whose dim shape inference knows (attention's Div by sqrt(head size) as
 * exporters write it); 0 otherwise. Integer and float constants alike, computed in double. */
int i8g_scalar_f(const struct qp_graph *g, int v, float *out);
/* Input i of n, or -1. */
int i8g_in_at(const struct qp_node *n, int i);
/* A bound on the magnitude of every element the live node producing v can write to it, known
 * from constants alone, or INFINITY when none is (a NaN that may reach v counts as none):
 *   - a QConv (not transposed) with a float output: from its int8 weights (128 each where a
 *     QuantizeLinear of a float constant makes them), scales, bias, folded BatchNormalization,
 *     an int8 residual and its post-operations (a float residual has none);
 *   - a Pointwise node's float output: its program run on bounds, from its int8 inputs (255
 *     levels), constants and, up to four producers back, the bounds of its float inputs (a
 *     FakeQuant bounds whatever it reads, NaN included; Div only by a constant);
 *   - anything else: none.
 * A NaN or infinite constant gives INFINITY, and so does a float16 QConv output whose bound
 * passes 65504. */
double i8g_magnitude_bound(const struct qp_graph *g, int v);
/* Per-tensor parameters of a Q or DQ node (constant scale > 0 and zero point, saturating). */
int i8g_per_tensor(const struct qp_graph *g, const struct qp_node *n, struct i8g_qparam *q);
int i8g_same_q(const struct i8g_qparam *a, const struct i8g_qparam *b);
/* n is a Resize that only copies elements: nearest, no tf_crop_and_resize (extrapolation), no
 * antialias. */
int i8g_resize_copies(const struct qp_node *n);
/* v is DQ(x) of a computed int8 tensor x with per-tensor parameters. */
int i8g_dq_act(const struct qp_graph *g, int v, int *x_out, struct i8g_qparam *q);
/* 1 when use u reads input 0 of a live QuantizeLinear with per-tensor int8/uint8 parameters
 * (into *q). */
int i8g_q8_use(const struct qp_graph *g, const struct qp_use *u, struct i8g_qparam *q);
/* The Q node that is v's only reader (i8g_q8_use), or -1. */
int i8g_sole_q(const struct qp_graph *g, int v, struct i8g_qparam *q);

/* Records the decision for Q/DQ node n (a fusion overrides an earlier reason, and where a moved
 * Q or DQ ends up overrides the move); 0: no memory. */
int i8g_note(struct rt_int8_report *rep, const struct qp_node *n, int fused, const char *into,
             const char *reason);

/* The name of value v ("" for -1). */
const char *i8g_vname(const struct qp_graph *g, int v);
/* Replaces nodes dead[0..n_dead) by a node of op/domain with the given inputs and one output,
 * copying the attributes of `attrs_of` (may be -1). Returns the new node or -1. */
int i8g_replace(struct qp_graph *g, const int *dead, int n_dead, const char *name, const char *op,
                const char *domain, int n_in, const int *in, int out, int attrs_of,
                struct qp_error *err);
/* The same with n_out outputs out[0..n_out) (a Split). */
int i8g_replace_n(struct qp_graph *g, const int *dead, int n_dead, const char *name, const char *op,
                  const char *domain, int n_in, const int *in, int n_out, const int *out,
                  int attrs_of, struct qp_error *err);
/* Appends copies of node `from`'s attributes (a dead node keeps them) to node `to`; 0 when out
 * of memory. */
int i8g_copy_attrs(struct qp_graph *g, int to, int from);
/* A copy of n bytes owned by the graph's model (NULL: out of memory). */
void *i8g_arena_dup(struct qp_graph *g, const void *v, size_t n);
/* Adds an attribute to node `node`; 0: out of memory. */
int i8g_add_ints(struct qp_graph *g, int node, const char *name, int n, const int64_t *v);
int i8g_add_floats(struct qp_graph *g, int node, const char *name, int n, const float *v);
int i8g_add_int(struct qp_graph *g, int node, const char *name, int64_t v);
/* Sets an int / ints attribute: the existing one of that name changed in place, or a new one. */
int i8g_set_int(struct qp_graph *g, int node, const char *name, int64_t v);
int i8g_set_ints(struct qp_graph *g, int node, const char *name, int n, const int64_t *v);

/* The pointwise pass (int8_pw.c): elementwise chains, their FakeQuant passes, DQ sources and Q
 * sinks become Pointwise nodes (kernels/int8_pw.h). `exact` (rt_int8_exact_rewrite): only the
 * ops whose Pointwise arithmetic is bit for bit the engine kernel's, RoundFloat16 nodes as
 * members, and no node a Conv chain of the float fusion could take. 0 on failure (err set, or
 * out of memory). */
int rt_int8_pw_pass(struct qp_graph *g, int exact, struct rt_int8_report *rep,
                    struct qp_error *err);

#endif
