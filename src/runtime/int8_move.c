/*
 * Q and DQ nodes moved across data movement (runtime/int8.h, rt_int8_move_pass), so that the
 * movement runs on int8 tensors even where the scales around it differ. All three moves are
 * exact: QuantizeLinear and DequantizeLinear are elementwise with per-tensor parameters, and
 * Concat and a nearest Resize only copy elements.
 *
 *   Q(Concat(a, b, ...))       -> Concat(Q(a), Q(b), ...)  when the inputs are not all DQs of
 *                                 the Q's parameters (then the flow pass runs it on int8 as is)
 *   Q(Resize(y))               -> Resize(Q(y))             nearest, not shrinking: the Q runs on
 *                                 the smaller tensor, or joins y's producer
 *   Resize(DQ(x)) -> readers   -> DQ(Resize(x)) -> readers nearest, every reader elementwise:
 *                                 the DQ joins the readers' Pointwise pass
 *   Q(op(y))                   -> op(Q(y))                 op Reshape, Flatten, Squeeze,
 *                                 Unsqueeze, Transpose or Identity (as many elements out as
 *                                 in): the op copies int8, and the Q may join y's producer
 *                                 (attention's MatMul -> Transpose -> Reshape -> Q)
 *   Q(Gather(y))               -> GatherQuantize(y)        y float: the Gather quantizes each
 *                                 run as it copies it (kernels/gather.h), the float slice is
 *                                 never written (a ViT's q, k and v, three Gathers of one
 *                                 tensor, each with its own scale: moving each Q before its
 *                                 Gather would quantize the whole tensor three times)
 *   Q(Softmax(y))              -> SoftmaxQuantize(y)       axis -1: each row is quantized as it
 *                                 is computed
 *   Q(LayerNormalization(y))   -> LayerNormQuantize(y)     Y only: the same
 *   Q(GlobalAveragePool(DQ(x))) -> QGlobalAveragePool(x)   integer sums requantized: within
 *                                 one step of the float mean (not a move; TensorRT pools int8)
 *   GatherQuantize(Transpose(y)) -> GatherQuantize(y)   scalar indices, every reader of the
 *                                 Transpose such a node: it reads through the permutation
 *
 * The moved Q keeps the original's name (its decision in the report is the original's).
 */
#include <stdio.h>
#include <string.h>

#include "kernels/dnnl_softmax.h"
#include "kernels/int8_conv.h"
#include "runtime/int8.h"
#include "runtime/int8_graph.h"

/* Adds op(in...) -> out (new value when out_name is NULL: a unique name from `base`) with the
 * attributes of node `attrs_of` (-1: none); returns the new node or -1. */
static int add_like(struct qp_graph *g, const char *name, const char *op, int n_in, const int *in,
                    const char *out_name, const char *base, int attrs_of, struct qp_error *err) {
    const char *names[MAX_IN];
    for (int i = 0; i < n_in; i++)
        names[i] = i8g_vname(g, in[i]);
    if (!out_name && !(out_name = qp_graph_unique_value_name(g, base))) return -1;
    const char *nm = qp_graph_unique_node_name(g, name);
    int nn;
    if (!nm || qp_graph_add_node(g, nm, op, "", n_in, names, 1, &out_name, &nn, err)) return -1;
    return attrs_of < 0 || i8g_copy_attrs(g, nn, attrs_of) ? nn : -1;
}

/* The scales of Resize n (input 2, constant) are all >= 1, or its sizes (input 3) are not
 * below its input's known dims: it does not shrink. */
static int grows(const struct qp_graph *g, const struct qp_node *n) {
    const struct qp_tensor *sc = i8g_const_of(g, i8g_in_at(n, 2));
    if (sc && sc->numel) {
        for (uint64_t i = 0; i < sc->numel; i++) {
            float f;
            if (!i8g_tensor_f(sc, i, &f) || !(f >= 1.0f)) return 0;
        }
        return 1;
    }
    const struct qp_tensor *sz = i8g_const_of(g, i8g_in_at(n, 3));
    const struct qp_value *x = &g->values[n->inputs[0]];
    if (!sz || x->rank < 0 || sz->numel != (uint64_t)x->rank || qp_node_attr(n, "axes")) return 0;
    for (int d = 0; d < x->rank; d++) {
        int64_t v;
        if (x->dims[d].value < 0 || !i8g_tensor_i(sz, (uint64_t)d, &v) || v < x->dims[d].value)
            return 0;
    }
    return 1;
}

/* A new Q of `q`'s parameters on value v, named as q; returns its output or -1. (On a DQ's
 * output it requantizes: a dequantize and a quantize pass over the smaller tensor.) */
static int q_on(struct qp_graph *g, int q, int v, struct qp_error *err) {
    const struct qp_node *qn = &g->nodes[q];
    int in[3] = {v, i8g_in_at(qn, 1), i8g_in_at(qn, 2)};
    int nn = add_like(g, qn->name, "QuantizeLinear", in[2] >= 0 ? 3 : 2, in, NULL,
                      g->values[v].name, q, err);
    if (nn < 0) return -1;
    g->nodes[nn].name = g->nodes[q].name; /* the report keys decisions on the name */
    return g->nodes[nn].outputs[0];
}

/* Q(Concat(...)) -> Concat(Q(...)); 1 when made, 0 when not applicable, -1 on error. */
static int q_over_concat(struct qp_graph *g, int k, struct rt_int8_report *rep,
                         struct qp_error *err) {
    const struct qp_node *n = &g->nodes[k];
    struct i8g_qparam qo, qi;
    int q = i8g_sole_q(g, n->outputs[0], &qo), all_same = 1, x;
    if (q < 0 || n->n_inputs > MAX_IN || n->n_inputs < 1) return 0;
    for (int i = 0; i < n->n_inputs; i++)
        all_same &= i8g_dq_act(g, n->inputs[i], &x, &qi) && i8g_same_q(&qi, &qo);
    if (all_same) return 0;
    char into[160];
    snprintf(into, sizeof into, "Concat '%s' on int8 (the Q applied to each of its inputs)",
             n->name);
    if (!i8g_note(rep, &g->nodes[q], 1, into, NULL)) return -1;
    int in[MAX_IN], n_in = n->n_inputs;
    for (int i = 0; i < n_in; i++)
        if ((in[i] = q_on(g, q, g->nodes[k].inputs[i], err)) < 0) return -1;
    int dead[2] = {k, q}, out = g->nodes[q].outputs[0];
    const char *name = g->nodes[k].name;
    return i8g_replace(g, dead, 2, name, "Concat", "", n_in, in, out, k, err) < 0 ? -1 : 1;
}

/* An op that copies its input 0's elements, each once (no fewer, no more). */
static int reshapes(const struct qp_node *n) {
    static const char *const ops[] = {"Reshape",   "Flatten",   "Squeeze",
                                      "Unsqueeze", "Transpose", "Identity"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (qp_node_is(n, ops[i])) return 1;
    return 0;
}

/* Q(op(y)) -> op(Q(y)) for a nearest Resize that does not shrink or an op that reshapes. */
static int q_over_copy(struct qp_graph *g, int k, struct rt_int8_report *rep,
                       struct qp_error *err) {
    const struct qp_node *n = &g->nodes[k];
    struct i8g_qparam qo, qi;
    int q = i8g_sole_q(g, n->outputs[0], &qo), x;
    if (q < 0 || n->n_inputs > MAX_IN || n->n_inputs < 1 || n->inputs[0] < 0 ||
        (!reshapes(n) && !grows(g, n)))
        return 0;
    if (i8g_dq_act(g, n->inputs[0], &x, &qi) && i8g_same_q(&qi, &qo)) return 0; /* flow pass */
    char into[160];
    snprintf(into, sizeof into, "%s '%s' on int8 (the Q moved before it)", n->op_type, n->name);
    if (!i8g_note(rep, &g->nodes[q], 1, into, NULL)) return -1;
    int in[MAX_IN], n_in = n->n_inputs;
    for (int i = 0; i < n_in; i++)
        in[i] = g->nodes[k].inputs[i];
    if ((in[0] = q_on(g, q, in[0], err)) < 0) return -1;
    int dead[2] = {k, q}, out = g->nodes[q].outputs[0];
    const char *name = g->nodes[k].name, *op = g->nodes[k].op_type;
    return i8g_replace(g, dead, 2, name, op, "", n_in, in, out, k, err) < 0 ? -1 : 1;
}

/* Node k and its only reader, the Q node q, become one QP_INT8_DOMAIN `op` node reading
 * in[0..n_in) and writing the Q's output; the Q, and the DQ node `dq` before k when one joins
 * too (else NULL), are noted as fused into "<op type> '<name>' (<how>)". 1, or -1 on error. */
static int join_q(struct qp_graph *g, int k, int q, const struct qp_node *dq, const char *op,
                  const int *in, int n_in, const char *how, struct rt_int8_report *rep,
                  struct qp_error *err) {
    char into[160];
    snprintf(into, sizeof into, "%s '%s' (%s)", g->nodes[k].op_type, g->nodes[k].name, how);
    if (!i8g_note(rep, &g->nodes[q], 1, into, NULL) || (dq && !i8g_note(rep, dq, 1, into, NULL)))
        return -1;
    int dead[2] = {k, q}, out = g->nodes[q].outputs[0];
    return i8g_replace(g, dead, 2, g->nodes[k].name, op, QP_INT8_DOMAIN, n_in, in, out, k, err) < 0
               ? -1
               : 1;
}

/* The Q node reading value v when v's readers are that Q (per-tensor int8/uint8 parameters, on
 * its input 0) and any number of Shape or Size nodes (which read only v's dims: a ViT's
 * sqrt(head_dim) is computed from q's shape), or -1. */
static int q_and_shapes(const struct qp_graph *g, int v, struct i8g_qparam *q) {
    const struct qp_value *val = &g->values[v];
    int found = -1;
    if (val->is_graph_output) return -1;
    for (size_t i = 0; i < val->n_uses; i++) {
        const struct qp_node *n = &g->nodes[val->uses[i].node];
        if (qp_node_is(n, "Shape") || qp_node_is(n, "Size")) continue;
        if (found >= 0 || !i8g_q8_use(g, &val->uses[i], q)) return -1;
        found = val->uses[i].node;
    }
    return found;
}

/* Q(Gather(y)) -> GatherQuantize(y) for float y (not DQ(x): the flow pass gathers x); Shape and
 * Size readers of the Gather's output read the int8 result instead (the same dims). */
static int q_into_gather(struct qp_graph *g, int k, struct rt_int8_report *rep,
                         struct qp_error *err) {
    const struct qp_node *n = &g->nodes[k];
    struct i8g_qparam qo, qi;
    int q = q_and_shapes(g, n->outputs[0], &qo), x;
    if (q < 0 || n->n_inputs != 2 || n->inputs[0] < 0 || n->inputs[1] < 0 ||
        i8g_dq_act(g, n->inputs[0], &x, &qi) || !i8g_known_float(g, n->inputs[0]))
        return 0;
    int out = g->nodes[q].outputs[0];
    for (const struct qp_value *gv = &g->values[n->outputs[0]]; gv->n_uses > 1;) {
        size_t i = gv->uses[0].node == q ? 1 : 0; /* a Shape or Size reader */
        if (qp_graph_set_input(g, gv->uses[i].node, gv->uses[i].input, out, err)) return -1;
    }
    const struct qp_node *qn = &g->nodes[q];
    int in[4] = {n->inputs[0], n->inputs[1], i8g_in_at(qn, 1), i8g_in_at(qn, 2)};
    return join_q(g, k, q, NULL, "GatherQuantize", in, in[3] >= 0 ? 4 : 3,
                  "it quantizes each slice as it copies it", rep, err);
}

/* Q(Softmax(y, axis -1)) -> SoftmaxQuantize(y) when the Q is the Softmax's only reader and the
 * kernel can run here (kernels/dnnl_softmax.h). Only an explicit axis of -1: the last axis under
 * every opset's semantics, whatever the rank (unknown here). */
static int q_into_softmax(struct qp_graph *g, int k, struct rt_int8_report *rep,
                          struct qp_error *err) {
    const struct qp_node *n = &g->nodes[k];
    const struct qp_attr *ax = qp_node_attr(n, "axis");
    struct i8g_qparam qo;
    int q = i8g_sole_q(g, n->outputs[0], &qo);
    if (q < 0 || !ax || ax->type != QP_ATTR_INT || ax->i != -1 || n->n_inputs != 1 ||
        n->inputs[0] < 0 || !i8g_known_float(g, n->inputs[0]) || !qp_softmax_quantize_available())
        return 0;
    const struct qp_node *qn = &g->nodes[q];
    int in[3] = {n->inputs[0], i8g_in_at(qn, 1), i8g_in_at(qn, 2)};
    return join_q(g, k, q, NULL, "SoftmaxQuantize", in, in[2] >= 0 ? 3 : 2,
                  "it quantizes each row as it computes it", rep, err);
}

/* Q(LayerNormalization(x, scale, B)) -> LayerNormQuantize(x, scale, B) when the Q is the only
 * reader of its Y and its Mean and InvStdDev outputs are absent or unread. */
static int q_into_layernorm(struct qp_graph *g, int k, struct rt_int8_report *rep,
                            struct qp_error *err) {
    const struct qp_node *n = &g->nodes[k];
    struct i8g_qparam qo;
    if (n->n_outputs < 1 || n->outputs[0] < 0 || n->n_inputs < 2 || n->n_inputs > 3 ||
        n->inputs[0] < 0 || n->inputs[1] < 0)
        return 0;
    for (int i = 1; i < n->n_outputs; i++)
        if (n->outputs[i] >= 0 &&
            (g->values[n->outputs[i]].n_uses || g->values[n->outputs[i]].is_graph_output))
            return 0;
    int q = i8g_sole_q(g, n->outputs[0], &qo);
    if (q < 0 || !i8g_known_float(g, n->inputs[0])) return 0;
    const struct qp_node *qn = &g->nodes[q];
    int in[5] = {n->inputs[0], n->inputs[1], i8g_in_at(n, 2), i8g_in_at(qn, 1), i8g_in_at(qn, 2)};
    return join_q(g, k, q, NULL, "LayerNormQuantize", in, in[4] >= 0 ? 5 : 4,
                  "it quantizes each row as it computes it", rep, err);
}

/* Q(GlobalAveragePool(DQ(x))) -> QGlobalAveragePool(x) (per-tensor parameters; the Q the
 * GlobalAveragePool's only reader, the pool the DQ's): integer sums requantized
 * (kernels/pool.c), where TensorRT also pools int8 (a ResNet's head: the last block's output is
 * read once, as int8, channels last). The DQ then has no reader and the sweep removes it. */
static int q_into_gap(struct qp_graph *g, int k, struct rt_int8_report *rep, struct qp_error *err) {
    const struct qp_node *n = &g->nodes[k];
    struct i8g_qparam qi, qo;
    int x, q;
    if (n->n_inputs != 1 || !i8g_dq_act(g, n->inputs[0], &x, &qi) ||
        (q = i8g_sole_q(g, n->outputs[0], &qo)) < 0)
        return 0;
    /* Only where the pool is all the int8 tensor and its float twin are read for (a ResNet's
     * head). In PaddleOCR's SE blocks the tensor pooled is also multiplied by the gate: as
     * DQ(x) (the first block) or as the float tensor x quantizes (the others, where that Q
     * would become a pass of its own); taking those made cls 0.76 -> 0.81-0.91 ms a run. */
    const struct qp_node *q0 = i8g_producer(g, x);
    int y = q0 && qp_node_is(q0, "QuantizeLinear") ? i8g_in_at(q0, 0) : -1;
    if (g->values[n->inputs[0]].n_uses != 1 ||
        (y >= 0 && (g->values[y].n_uses != 1 || g->values[y].is_graph_output)))
        return 0;
    const struct qp_node *qn = &g->nodes[q];
    int in[5] = {x, qi.scale_v, qi.zp_v, i8g_in_at(qn, 1), i8g_in_at(qn, 2)};
    return join_q(g, k, q, i8g_producer(g, n->inputs[0]), "QGlobalAveragePool", in,
                  in[4] >= 0 ? 5 : 4, "integer sums requantized", rep, err);
}

/* GatherQuantize(Transpose(y), scalar index) -> GatherQuantize(y) reading through the perm, when
 * every reader of the Transpose is such a GatherQuantize: the transposed float tensor is never
 * written (a ViT's [1, 197, 3, 3, 64] -> [3, 1, 3, 197, 64] before q, k and v). */
static int transpose_into_gathers(struct qp_graph *g, int k, struct qp_error *err) {
    const struct qp_node *n = &g->nodes[k];
    const struct qp_attr *perm = qp_node_attr(n, "perm");
    const struct qp_value *tv = &g->values[n->outputs[0]];
    if (!perm || perm->type != QP_ATTR_INTS || tv->is_graph_output || !tv->n_uses ||
        n->n_inputs != 1 || n->inputs[0] < 0)
        return 0;
    for (size_t i = 0; i < tv->n_uses; i++) {
        const struct qp_node *u = &g->nodes[tv->uses[i].node];
        const struct qp_tensor *ix = i8g_const_of(g, i8g_in_at(u, 1));
        if (!i8g_is_op(u, "GatherQuantize") || tv->uses[i].input != 0 || qp_node_attr(u, "perm") ||
            !ix || ix->rank != 0)
            return 0;
    }
    int x = n->inputs[0];
    int64_t pv[QP_MAX_RANK];
    if (perm->n > QP_MAX_RANK) return 0;
    for (size_t i = 0; i < perm->n; i++)
        pv[i] = perm->ints[i];
    while (tv->n_uses) {
        int u = tv->uses[0].node;
        if (qp_graph_set_input(g, u, 0, x, err) || !i8g_add_ints(g, u, "perm", (int)perm->n, pv))
            return -1;
    }
    return qp_graph_remove_node(g, k, err) ? -1 : 1;
}

static int elementwise(const struct qp_node *n) {
    static const char *const ops[] = {"Add", "Sub", "Mul", "Div", "Relu", "Clip", NULL};
    for (int i = 0; ops[i]; i++)
        if (qp_node_is(n, ops[i])) return 1;
    return 0;
}

/* Resize(DQ(x)) read by elementwise ops only -> DQ(Resize(x)). */
static int dq_under_resize(struct qp_graph *g, int k, struct rt_int8_report *rep,
                           struct qp_error *err) {
    const struct qp_node *n = &g->nodes[k];
    struct i8g_qparam qi;
    int x, v = n->outputs[0];
    const struct qp_value *out = &g->values[v];
    if (out->is_graph_output || !out->n_uses || n->n_inputs > MAX_IN ||
        !i8g_dq_act(g, n->inputs[0], &x, &qi))
        return 0;
    for (size_t u = 0; u < out->n_uses; u++)
        if (!elementwise(&g->nodes[out->uses[u].node])) return 0;
    int dq = g->values[n->inputs[0]].producer;
    char into[160];
    snprintf(into, sizeof into, "Resize '%s' on int8 (the DQ moved after it)", n->name);
    int in[MAX_IN], n_in = n->n_inputs;
    for (int i = 0; i < n_in; i++)
        in[i] = n->inputs[i];
    in[0] = x;
    const char *name = n->name;
    if (qp_graph_remove_node(g, k, err)) return -1; /* its attributes stay for add_like */
    int rn = add_like(g, name, "Resize", n_in, in, NULL, g->values[x].name, k, err);
    if (rn < 0) return -1;
    g->nodes[rn].name = name;
    const struct qp_node *d = &g->nodes[dq];
    int din[3] = {g->nodes[rn].outputs[0], i8g_in_at(d, 1), i8g_in_at(d, 2)};
    int dn = add_like(g, d->name, "DequantizeLinear", din[2] >= 0 ? 3 : 2, din, g->values[v].name,
                      NULL, dq, err);
    if (dn < 0) return -1;
    if (!g->values[g->nodes[dq].outputs[0]].n_uses) g->nodes[dn].name = g->nodes[dq].name;
    return i8g_note(rep, &g->nodes[dq], 1, into, NULL) ? 1 : -1;
}

/* One sweep over the nodes there are; returns the moves made or -1. */
static int move_sweep(struct qp_graph *g, struct rt_int8_report *rep, struct qp_error *err) {
    int made = 0;
    size_t n_nodes = g->n_nodes;
    for (size_t k = 0; k < n_nodes; k++) {
        const struct qp_node *n = &g->nodes[k];
        if (n->dead || n->n_outputs < 1 || n->outputs[0] < 0 ||
            (n->n_outputs != 1 && !qp_node_is(n, "LayerNormalization")))
            continue;
        int r = 0;
        if (qp_node_is(n, "Concat"))
            r = q_over_concat(g, (int)k, rep, err);
        else if (i8g_resize_copies(n) || reshapes(n)) {
            r = q_over_copy(g, (int)k, rep, err);
            if (r == 0 && qp_node_is(&g->nodes[k], "Transpose"))
                r = transpose_into_gathers(g, (int)k, err);
        } else if (qp_node_is(n, "Gather"))
            r = q_into_gather(g, (int)k, rep, err);
        else if (qp_node_is(n, "Softmax"))
            r = q_into_softmax(g, (int)k, rep, err);
        else if (qp_node_is(n, "LayerNormalization"))
            r = q_into_layernorm(g, (int)k, rep, err);
        else if (qp_node_is(n, "GlobalAveragePool"))
            r = q_into_gap(g, (int)k, rep, err);
        if (r == 0 && !g->nodes[k].dead && i8g_resize_copies(&g->nodes[k]))
            r = dq_under_resize(g, (int)k, rep, err);
        if (r < 0) return -1;
        made += r;
    }
    return made;
}

/* Sweeps until nothing moves: a Q distributed over a Concat may then move before the Resize
 * that feeds it. Every move takes a Q up or a DQ down past a Resize, Concat or reshaping op, so
 * it ends. */
int rt_int8_move_pass(struct qp_graph *g, struct rt_int8_report *rep, struct qp_error *err) {
    int made = 0, r;
    while ((r = move_sweep(g, rep, err)) > 0)
        made += r;
    return r < 0 ? -1 : made;
}
