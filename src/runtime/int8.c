/*
 * The integer path's graph rewrite (int8.h). Three passes over a clone of the model's graph:
 * integer data flows (ops that commute with quantization run on the int8 tensor), QConv fusion,
 * and clean-up (Q/DQ nodes nobody reads); then the channels-last marking and a decision per
 * original Q/DQ node for `qplace bench --explain`.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "kernels/dnnl_conv.h"
#include "kernels/dnnl_util.h"
#include "kernels/int8_conv.h"
#include "kernels/isa.h"
#include "runtime/int8.h"
#include "runtime/int8_graph.h"
#include "runtime/narrow.h"

/* 1 when string attribute a holds exactly s. */
static int attr_is(const struct qp_attr *a, const char *s) {
    size_t n = strlen(s);
    return a->s.len == n && memcmp(a->s.data, s, n) == 0;
}

/* ---- integer data flows --------------------------------------------------------------------- */

static int is_flow_op(const struct qp_node *n) {
    static const char *ops[] = {"MaxPool", "Reshape",   "Flatten",  "Transpose",
                                "Squeeze", "Unsqueeze", "Identity", "Slice",
                                "Gather",  "Pad",       "Concat",   "Resize"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (qp_node_is(n, ops[i])) return 1;
    return 0;
}

/* Why op `n` cannot run on the int8 tensors (NULL: it can), given the Q after it. */
static const char *flow_blocker(const struct qp_graph *g, const struct qp_node *n,
                                const struct i8g_qparam *qo, int *xq) {
    int n_data = qp_node_is(n, "Concat") ? n->n_inputs : 1;
    for (int i = 1; i < n->n_outputs; i++)
        if (n->outputs[i] >= 0 && g->values[n->outputs[i]].n_uses) return "a second output is read";
    if (qp_node_is(n, "Resize") && !i8g_resize_copies(n))
        return "Resize interpolates or extrapolates (only nearest copies values)";
    if (qp_node_is(n, "Pad")) {
        const struct qp_attr *m = qp_node_attr(n, "mode");
        if (m && !attr_is(m, "constant")) return "Pad mode";
        if (i8g_in_at(n, 2) >= 0 || qp_node_attr(n, "value")) return "Pad with a value";
        if (qo->z != 0) return "Pad of a tensor with a zero point";
    }
    for (int i = 0; i < n_data; i++) {
        struct i8g_qparam qi;
        if (!i8g_dq_act(g, i8g_in_at(n, i), &xq[i], &qi))
            return i ? "an input is not DequantizeLinear-fed" : NULL;
        if (!i8g_same_q(&qi, qo))
            return qp_node_is(n, "Concat") ? "Concat inputs have different scales"
                                           : "the Q after it has another scale";
    }
    return NULL;
}

/* DQ -> Split -> on every output a Q of the DQ's parameters: Split on the int8 tensor (node k);
 * 1 when rewritten. A Split with an output read otherwise stays float; one whose Qs have other
 * parameters says so on them. */
static int split_flow(struct qp_graph *g, int k, struct rt_int8_report *rep, int *ok,
                      struct qp_error *err) {
    const struct qp_node *n = &g->nodes[k];
    int x0, nq = n->n_outputs, dead[MAX_IN + 1], outs[MAX_IN], in[MAX_IN];
    struct i8g_qparam q0, qo;
    if (nq > MAX_IN || n->n_inputs > MAX_IN || !i8g_dq_act(g, i8g_in_at(n, 0), &x0, &q0)) return 0;
    const char *why = NULL;
    dead[0] = k;
    for (int i = 0; i < nq; i++) {
        dead[1 + i] = n->outputs[i] >= 0 ? i8g_sole_q(g, n->outputs[i], &qo) : -1;
        if (dead[1 + i] < 0) return 0; /* an output read otherwise: float, nothing to say */
        if (!i8g_same_q(&q0, &qo)) why = "the Q after an output has another scale";
        outs[i] = g->nodes[dead[1 + i]].outputs[0];
    }
    char msg[160];
    if (why)
        snprintf(msg, sizeof msg, "Split '%s' runs in float: %s", n->name, why);
    else
        snprintf(msg, sizeof msg, "Split '%s' on int8", n->name);
    *ok = i8g_note(rep, i8g_producer(g, n->inputs[0]), !why, why ? "" : msg, why ? msg : NULL);
    for (int i = 0; i < nq && *ok; i++)
        *ok = i8g_note(rep, &g->nodes[dead[1 + i]], !why, why ? "" : msg, why ? msg : NULL);
    if (why || !*ok) return 0;
    in[0] = x0;
    for (int i = 1; i < n->n_inputs; i++)
        in[i] = n->inputs[i];
    const char *name = n->name, *op = n->op_type, *dom = n->domain;
    if (i8g_replace_n(g, dead, nq + 1, name, op, dom, n->n_inputs, in, nq, outs, k, err) < 0) {
        *ok = 0;
        return 0;
    }
    rep->n_flow++;
    return 1;
}

/* DQ -> op -> Q (same parameters) becomes op on the int8 tensor; returns the rewrites made. */
static int flow_pass(struct qp_graph *g, struct rt_int8_report *rep, int *ok,
                     struct qp_error *err) {
    int made = 0;
    for (size_t k = 0; k < g->n_nodes && *ok; k++) {
        struct qp_node *n = &g->nodes[k];
        if (!n->dead && qp_node_is(n, "Split")) {
            made += split_flow(g, (int)k, rep, ok, err);
            continue;
        }
        if (n->dead || !is_flow_op(n) || n->n_outputs < 1 || n->outputs[0] < 0) continue;
        int x0;
        struct i8g_qparam q0, qo;
        if (!i8g_dq_act(g, i8g_in_at(n, 0), &x0, &q0)) continue;
        int q = i8g_sole_q(g, n->outputs[0], &qo);
        if (q < 0) continue;
        int xq[MAX_IN];
        if (n->n_inputs > MAX_IN) continue;
        const char *why = flow_blocker(g, n, &qo, xq);
        if (why) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s '%s' runs in float: %s", n->op_type, n->name, why);
            *ok = i8g_note(rep, &g->nodes[q], 0, "", msg);
            continue;
        }
        int in[MAX_IN], nd = qp_node_is(n, "Concat") ? n->n_inputs : 1;
        for (int i = 0; i < n->n_inputs; i++)
            in[i] = i < nd ? xq[i] : n->inputs[i];
        char into[160];
        snprintf(into, sizeof into, "%s '%s' on int8", n->op_type, n->name);
        for (int i = 0; i < nd; i++)
            *ok = *ok && i8g_note(rep, i8g_producer(g, n->inputs[i]), 1, into, NULL);
        *ok = *ok && i8g_note(rep, &g->nodes[q], 1, into, NULL);
        int dead[2] = {(int)k, q};
        const char *name = n->name, *op = n->op_type, *dom = n->domain;
        int out = g->nodes[q].outputs[0];
        if (*ok && i8g_replace(g, dead, 2, name, op, dom, n->n_inputs, in, out, (int)k, err) < 0)
            *ok = 0;
        made++;
        rep->n_flow++;
    }
    return made;
}

/* ---- QConv fusion --------------------------------------------------------------------------- */

/* The int8 weights behind DQ output v: an int8 constant, or Q of a constant (folded at plan
 * time); per tensor, or per output channel (axis 0) with zero points 0. */
static const char *weight_blocker(const struct qp_graph *g, int v, int axis, int *w_out,
                                  int *ws_out, int *wz_out) {
    const struct qp_node *d = i8g_producer(g, v);
    if (!d || !qp_node_is(d, "DequantizeLinear")) return "its weights are not DequantizeLinear-fed";
    int w = i8g_in_at(d, 0);
    const struct qp_tensor *wt = i8g_const_of(g, w);
    const struct qp_node *qw = i8g_producer(g, w);
    int64_t m = -1;
    if (wt) {
        if (wt->dtype != QP_DTYPE_INT8) return "its weights are not int8";
        m = wt->rank > axis ? wt->dims[axis] : -1;
    } else if (qw && qp_node_is(qw, "QuantizeLinear") && i8g_const_of(g, i8g_in_at(qw, 0))) {
        const struct qp_tensor *zq = i8g_const_of(g, i8g_in_at(qw, 2)),
                               *wf = i8g_const_of(g, i8g_in_at(qw, 0));
        if (!zq || zq->dtype != QP_DTYPE_INT8) return "its weights are not quantized to int8";
        m = wf->rank > axis ? wf->dims[axis] : -1;
    } else {
        return "its weights are not a constant";
    }
    const struct qp_tensor *sc = i8g_const_of(g, i8g_in_at(d, 1)),
                           *zp = i8g_const_of(g, i8g_in_at(d, 2));
    if (!sc || (sc->numel != 1 && (int64_t)sc->numel != m))
        return "its weight scales are not per channel";
    const struct qp_attr *ax = qp_node_attr(d, "axis");
    int64_t ax_v = ax ? ax->i : 1; /* DequantizeLinear's default axis */
    if (ax_v < 0) ax_v += 2;       /* rank-2 MatMul weights */
    if (sc->numel > 1 && ax_v != axis)
        return axis ? "its weights are not quantized per output column / channel (axis 1)"
                    : "its weights are not quantized per output channel (axis 0)";
    for (uint64_t i = 0; zp && i < zp->numel; i++) {
        int64_t z;
        if (!i8g_tensor_i(zp, i, &z) || z != 0) return "its weights have a zero point";
    }
    *w_out = w;
    *ws_out = i8g_in_at(d, 1);
    *wz_out = i8g_in_at(d, 2);
    return NULL;
}

#define CHAIN_MAX 20
#define AFF_MAX   5

struct chain {
    int n, mem[CHAIN_MAX];
    int n_post;
    int64_t kind[QP_CONV_MAX_POST];
    float al[QP_CONV_MAX_POST], be[QP_CONV_MAX_POST];
    int res, res_q, res_dq; /* the residual, 1 when int8, and its DequantizeLinear node */
    struct i8g_qparam rq;
    int q;
    struct i8g_qparam yq;
    int out;
    int bn; /* a BatchNormalization folded (its node index), or -1 */
    /* The per-channel affine maps right after the Conv, in order: at most one
     * BatchNormalization (aff_c -1) and Mul/Add by constants per channel or scalar (a
     * ConvTranspose's bias Add, PaddleOCR's LearnableAffineBlock), composed into one. */
    int n_aff, aff[AFF_MAX], aff_c[AFF_MAX]; /* the node, and its constant's value */
};

static int post(struct chain *c, int kind, float al, float be) {
    int last = c->n_post - 1;
    if (kind == QP_CONV_POST_LINEAR && last >= 0 && c->kind[last] == QP_CONV_POST_LINEAR) {
        /* one map a2 (a1 x + b1) + b2: oneDNN 2.6's int8 convolution gets two linear post-ops
         * in a row wrong (test_paddle_block), and one is cheaper anyway */
        c->be[last] = al * c->be[last] + be;
        c->al[last] *= al;
        return 1;
    }
    if (c->n_post >= QP_CONV_MAX_POST - 1) return 0;
    c->kind[c->n_post] = kind;
    c->al[c->n_post] = al;
    c->be[c->n_post++] = be;
    return 1;
}

static float attr_f(const struct qp_node *n, const char *name, float def) {
    const struct qp_attr *a = qp_node_attr(n, name);
    return a ? a->f : def;
}

/* An activation node as post-operations; 0 when it is none oneDNN fuses. */
static int act_posts(const struct qp_graph *g, const struct qp_node *u, struct chain *c) {
    if (qp_node_is(u, "Relu")) return post(c, QP_CONV_POST_RELU, 0, 0);
    if (qp_node_is(u, "LeakyRelu")) return post(c, QP_CONV_POST_RELU, attr_f(u, "alpha", 0.01f), 0);
    if (qp_node_is(u, "Sigmoid")) return post(c, QP_CONV_POST_SIGMOID, 0, 0);
    if (qp_node_is(u, "HardSwish")) return post(c, QP_CONV_POST_HARDSWISH, 0, 0);
    if (qp_node_is(u, "Gelu")) {
        const struct qp_attr *a = qp_node_attr(u, "approximate");
        if (!a || attr_is(a, "none")) return post(c, QP_CONV_POST_GELU, 0, 0);
        if (attr_is(a, "tanh")) return post(c, QP_CONV_POST_GELU_TANH, 0, 0);
        return 0;
    }
    if (qp_node_is(u, "HardSigmoid"))
        return post(c, QP_CONV_POST_LINEAR, attr_f(u, "alpha", 0.2f), attr_f(u, "beta", 0.5f)) &&
               post(c, QP_CONV_POST_CLIP, 0, 1);
    if (qp_node_is(u, "Clip")) {
        float lo = attr_f(u, "min", -FLT_MAX), hi = attr_f(u, "max", FLT_MAX);
        for (int i = 1; i < 3 && i < u->n_inputs; i++) {
            if (u->inputs[i] < 0) continue;
            float v;
            if (!i8g_tensor_f(i8g_const_of(g, u->inputs[i]), 0, &v)) return 0;
            *(i == 1 ? &lo : &hi) = v;
        }
        return post(c, QP_CONV_POST_CLIP, lo, hi);
    }
    return 0;
}

/* Grows the chain after Conv `conv`: activations, one residual Add, a final Q. */
static void grow_from(const struct qp_graph *g, struct chain *c, int v);

/* An inference BatchNormalization of constant parameters that only reads v, or -1. */
static int bn_after(const struct qp_graph *g, int v) {
    const struct qp_value *val = &g->values[v];
    if (val->is_graph_output || val->n_uses != 1 || val->uses[0].input != 0) return -1;
    int ui = val->uses[0].node;
    const struct qp_node *u = &g->nodes[ui];
    if (u->dead || !qp_node_is(u, "BatchNormalization") || u->n_inputs < 5) return -1;
    for (int i = 1; i < u->n_outputs; i++)
        if (u->outputs[i] >= 0 && g->values[u->outputs[i]].n_uses) return -1;
    const struct qp_attr *tm = qp_node_attr(u, "training_mode");
    if (tm && tm->i) return -1;
    int64_t m = -1;
    for (int i = 1; i < 5; i++) {
        const struct qp_tensor *t = i8g_const_of(g, u->inputs[i]);
        if (!t || (t->dtype != QP_DTYPE_FLOAT && t->dtype != QP_DTYPE_FLOAT16) ||
            (m >= 0 && (int64_t)t->numel != m))
            return -1;
        m = (int64_t)t->numel;
    }
    return ui;
}

/* A Mul or Add that is v's only reader, by a float constant that is a scalar or one value per
 * channel of a 2-D convolution's output ([1,M,1,1] or [M,1,1]): its node, the constant in
 * *c_out; -1 otherwise. */
static int affine_after(const struct qp_graph *g, int v, int *c_out) {
    const struct qp_value *val = &g->values[v];
    if (val->is_graph_output || val->n_uses != 1) return -1;
    int ui = val->uses[0].node;
    const struct qp_node *u = &g->nodes[ui];
    if (u->dead || u->n_inputs != 2 || u->n_outputs != 1 ||
        !(qp_node_is(u, "Mul") || qp_node_is(u, "Add")))
        return -1;
    int cv = u->inputs[1 - val->uses[0].input];
    const struct qp_tensor *t = i8g_const_of(g, cv);
    if (!t || (t->dtype != QP_DTYPE_FLOAT && t->dtype != QP_DTYPE_FLOAT16) || cv == v) return -1;
    int ok = t->numel == 1;
    if (!ok && t->rank >= 3 && t->rank <= 4) {
        ok = t->dims[t->rank - 1] == 1 && t->dims[t->rank - 2] == 1 &&
             (uint64_t)t->dims[t->rank - 3] == t->numel;
        for (int i = 0; ok && i < t->rank - 3; i++)
            ok = t->dims[i] == 1;
    }
    *c_out = cv;
    return ok ? ui : -1;
}

static void grow(const struct qp_graph *g, int conv, struct chain *c) {
    memset(c, 0, sizeof *c);
    c->mem[c->n++] = conv;
    c->res = c->q = c->bn = -1;
    int v = g->nodes[conv].outputs[0], a, cv = -1;
    while (c->n_aff < AFF_MAX) {
        if (c->bn < 0 && (a = bn_after(g, v)) >= 0) {
            c->bn = a;
            cv = -1;
        } else if ((a = affine_after(g, v, &cv)) < 0) {
            break;
        }
        c->aff[c->n_aff] = a;
        c->aff_c[c->n_aff++] = cv;
        c->mem[c->n++] = a;
        v = g->nodes[a].outputs[0];
    }
    grow_from(g, c, v);
}

/* The weights behind int8 value w: the int8 constant, or the float constant a Q quantizes (its
 * shape is theirs); NULL when neither. */
static const struct qp_tensor *weight_source(const struct qp_graph *g, int w) {
    const struct qp_tensor *t = i8g_const_of(g, w);
    const struct qp_node *q = i8g_producer(g, w);
    if (!t && q && qp_node_is(q, "QuantizeLinear")) t = i8g_const_of(g, i8g_in_at(q, 0));
    return t;
}

/* The output channels of a fused Conv: its int8 weights' (or their float source's) first dim;
 * a ConvTranspose's ([C, M/group, k...]): the second times group. */
static int64_t out_channels(const struct qp_graph *g, int w, const struct qp_node *head) {
    const struct qp_tensor *t = weight_source(g, w);
    if (!qp_node_is(head, "ConvTranspose")) return t && t->rank >= 1 ? t->dims[0] : -1;
    const struct qp_attr *ga = qp_node_attr(head, "group");
    return t && t->rank >= 2 ? t->dims[1] * (ga ? ga->i : 1) : -1;
}

static int bn_affine(struct qp_graph *g, int bn, float **sc_out, float **sh_out, int *m_out);

/* The channel affine map of chain c: its BatchNormalization's (or identity), then each Mul/Add
 * by a constant, composed in double and rounded once (arena copies in *sc_out, *sh_out). */
static int chain_affine(struct qp_graph *g, const struct chain *c, int64_t m, float **sc_out,
                        float **sh_out) {
    double *sc = qp_malloc_n((size_t)m, sizeof *sc), *sh = qp_malloc_n((size_t)m, sizeof *sh);
    float *bs = NULL, *bh = NULL, *fs = qp_malloc_n((size_t)m, sizeof *fs),
          *fh = qp_malloc_n((size_t)m, sizeof *fh);
    int bm = 0, ok = sc && sh && fs && fh;
    for (int64_t i = 0; ok && i < m; i++) {
        sc[i] = 1.0;
        sh[i] = 0.0;
    }
    for (int k = 0; ok && k < c->n_aff; k++) {
        if (c->aff_c[k] < 0) { /* the BatchNormalization */
            ok = bn_affine(g, c->aff[k], &bs, &bh, &bm) && bm == m;
            for (int64_t i = 0; ok && i < m; i++) {
                sc[i] *= bs[i];
                sh[i] = sh[i] * bs[i] + bh[i];
            }
            continue;
        }
        const struct qp_tensor *t = i8g_const_of(g, c->aff_c[k]);
        int mul = qp_node_is(&g->nodes[c->aff[k]], "Mul");
        ok = t->numel == 1 || (int64_t)t->numel == m;
        for (int64_t i = 0; ok && i < m; i++) {
            float v;
            ok = i8g_tensor_f(t, t->numel == 1 ? 0 : (uint64_t)i, &v);
            if (mul) {
                sc[i] *= v;
                sh[i] *= v;
            } else {
                sh[i] += v;
            }
        }
    }
    for (int64_t i = 0; ok && i < m; i++) {
        fs[i] = (float)sc[i];
        fh[i] = (float)sh[i];
    }
    *sc_out = ok ? i8g_arena_dup(g, fs, (size_t)m * sizeof *fs) : NULL;
    *sh_out = ok ? i8g_arena_dup(g, fh, (size_t)m * sizeof *fh) : NULL;
    free(sc);
    free(sh);
    free(fs);
    free(fh);
    return *sc_out && *sh_out;
}

/* The per-channel affine map of BatchNormalization node `bn`: ch_scale = gamma / sqrt(var +
 * eps), ch_shift = beta - mean * ch_scale, as attributes of fused node nn (computed in
 * double, rounded once). */
static int bn_affine(struct qp_graph *g, int bn, float **sc_out, float **sh_out, int *m_out) {
    const struct qp_node *u = &g->nodes[bn];
    const struct qp_tensor *ga = i8g_const_of(g, u->inputs[1]), *be = i8g_const_of(g, u->inputs[2]);
    const struct qp_tensor *mu = i8g_const_of(g, u->inputs[3]), *va = i8g_const_of(g, u->inputs[4]);
    float eps = attr_f(u, "epsilon", 1e-5f);
    size_t m = (size_t)ga->numel;
    float *sc = malloc(m * sizeof *sc), *sh = malloc(m * sizeof *sh);
    int ok = sc && sh;
    for (size_t i = 0; ok && i < m; i++) {
        float fg = 1, fb = 0, fm = 0, fv = 1;
        ok = i8g_tensor_f(ga, i, &fg) && i8g_tensor_f(be, i, &fb) && i8g_tensor_f(mu, i, &fm) &&
             i8g_tensor_f(va, i, &fv);
        double s = (double)fg / sqrt((double)fv + (double)eps);
        sc[i] = (float)s;
        sh[i] = (float)((double)fb - (double)fm * s);
    }
    *sc_out = ok ? i8g_arena_dup(g, sc, m * sizeof *sc) : NULL;
    *sh_out = ok ? i8g_arena_dup(g, sh, m * sizeof *sh) : NULL;
    *m_out = (int)m;
    free(sc);
    free(sh);
    return *sc_out && *sh_out;
}

static int set_floats(struct qp_graph *g, int node, const char *name, int n, const float *v) {
    struct qp_attr *a = qp_node_add_attr(g, node, name, QP_ATTR_FLOATS);
    if (!a) return 0;
    a->floats = v;
    a->n = (size_t)n;
    return 1;
}

/* The value of v, 1 when it is a scalar the graph fixes (i8g_scalar_f). */
static int scalar_const(const struct qp_graph *g, int v, float *out) {
    return v >= 0 && i8g_scalar_f(g, v, out);
}

/* The only reader of v (not a graph output), or -1; its input slot in *in. */
static int sole_reader(const struct qp_graph *g, int v, int *in) {
    const struct qp_value *val = &g->values[v];
    if (val->is_graph_output || val->n_uses != 1 || g->nodes[val->uses[0].node].dead) return -1;
    *in = val->uses[0].input;
    return val->uses[0].node;
}

/* The hard-swish PaddleOCR exports, read from v: Add(v, 3) -> Clip(0, 6) -> Mul(v, that) ->
 * Div(6), v read by the Add and the Mul alone, each later value by the next node alone: the four
 * nodes in mem (the Div last), 1; else 0. It is oneDNN's hardswish post-op, formula for formula. */
static int hswish_after(const struct qp_graph *g, int v, int mem[4]) {
    const struct qp_value *val = &g->values[v];
    if (val->is_graph_output || val->n_uses != 2) return 0;
    int ia = val->uses[0].node, ib = val->uses[1].node, in;
    if (!qp_node_is(&g->nodes[ia], "Add")) {
        int t = ia;
        ia = ib;
        ib = t;
    }
    const struct qp_node *na = &g->nodes[ia], *nm = &g->nodes[ib];
    float k;
    if (ia == ib || na->dead || nm->dead || !qp_node_is(na, "Add") || !qp_node_is(nm, "Mul") ||
        na->n_inputs != 2 || nm->n_inputs != 2 || na->n_outputs != 1 ||
        !scalar_const(g, na->inputs[na->inputs[0] == v], &k) || k != 3.0f)
        return 0;
    int nc = sole_reader(g, na->outputs[0], &in);
    const struct qp_node *cl = nc >= 0 ? &g->nodes[nc] : NULL;
    float lo, hi;
    if (!cl || !qp_node_is(cl, "Clip") || in != 0 || cl->n_inputs != 3 || cl->n_outputs != 1 ||
        !scalar_const(g, cl->inputs[1], &lo) || !scalar_const(g, cl->inputs[2], &hi) ||
        lo != 0.0f || hi != 6.0f)
        return 0;
    int vc = cl->outputs[0];
    if (sole_reader(g, vc, &in) != ib || nm->inputs[1 - in] != v || nm->n_outputs != 1) return 0;
    int nd = sole_reader(g, nm->outputs[0], &in);
    const struct qp_node *dv = nd >= 0 ? &g->nodes[nd] : NULL;
    if (!dv || !qp_node_is(dv, "Div") || in != 0 || dv->n_inputs != 2 || dv->n_outputs != 1 ||
        !scalar_const(g, dv->inputs[1], &k) || k != 6.0f)
        return 0;
    mem[0] = ia, mem[1] = nc, mem[2] = ib, mem[3] = nd;
    return 1;
}

/* Node u (not dead, one output) is `op` with input `in` one of its two inputs and the other a
 * scalar constant within 1e-3 (relative) of k: a float16 model's constants are k rounded to
 * float16 (1.4140625 for sqrt 2). */
static int by_const(const struct qp_graph *g, int u, const char *op, int in, float k) {
    const struct qp_node *n = &g->nodes[u];
    float c;
    return !n->dead && qp_node_is(n, op) && n->n_inputs == 2 && n->n_outputs == 1 &&
           (in == 0 || in == 1) && scalar_const(g, n->inputs[1 - in], &c) &&
           fabsf(c - k) <= 1e-3f * fabsf(k);
}

/* The exact GELU as exporters decompose it, read from v: Div(v, sqrt 2) (or Mul by 1/sqrt 2)
 * -> Erf -> Add 1 -> then either Mul(v, that) -> Mul 0.5 (PyTorch's export) or Mul(h, that)
 * with h = Mul(v, 0.5) (Hugging Face's), v read by the two branches alone and every later value
 * by the next node alone: the five nodes in mem (the last one's output is GELU(v)), 1; else 0.
 * It is oneDNN's gelu_erf post-op; the values differ from the nodes' by float rounding. */
static int gelu_after(const struct qp_graph *g, int v, int mem[5]) {
    const struct qp_value *val = &g->values[v];
    if (val->is_graph_output || val->n_uses != 2) return 0;
    int sc = -1, other = -1, in = 0, io = 0;
    for (int i = 0; i < 2; i++) {
        int u = val->uses[i].node, ui = val->uses[i].input;
        if (sc < 0 && ((ui == 0 && by_const(g, u, "Div", 0, 1.41421356f)) ||
                       by_const(g, u, "Mul", ui, 0.70710678f))) {
            sc = u;
        } else {
            other = u;
            io = ui;
        }
    }
    if (sc < 0 || other < 0 || sc == other) return 0;
    int ne = sole_reader(g, g->nodes[sc].outputs[0], &in);
    if (ne < 0 || !qp_node_is(&g->nodes[ne], "Erf") || g->nodes[ne].n_outputs != 1) return 0;
    int na = sole_reader(g, g->nodes[ne].outputs[0], &in);
    if (na < 0 || !by_const(g, na, "Add", in, 1.0f)) return 0;
    int nm = sole_reader(g, g->nodes[na].outputs[0], &in);
    if (nm < 0 || !qp_node_is(&g->nodes[nm], "Mul") || g->nodes[nm].n_inputs != 2 ||
        g->nodes[nm].n_outputs != 1)
        return 0;
    int partner = g->nodes[nm].inputs[1 - in], last;
    if (other == nm && partner == v) { /* Mul(v, 1 + erf) -> Mul 0.5 */
        last = sole_reader(g, g->nodes[nm].outputs[0], &in);
        if (last < 0 || !by_const(g, last, "Mul", in, 0.5f)) return 0;
        mem[3] = nm, mem[4] = last;
    } else { /* h = Mul(v, 0.5); Mul(h, 1 + erf) */
        if (!by_const(g, other, "Mul", io, 0.5f) || partner != g->nodes[other].outputs[0] ||
            g->values[partner].n_uses != 1 || g->values[partner].is_graph_output)
            return 0;
        mem[3] = other, mem[4] = nm;
    }
    mem[0] = sc, mem[1] = ne, mem[2] = na;
    return 1;
}

/* A Mul, Add, Sub or Div of u's input `in` by a scalar constant (that input first for Sub and
 * Div) as a linear post-operation; 0 when u is none. */
static int scalar_post(const struct qp_graph *g, const struct qp_node *u, int in, struct chain *c) {
    float k;
    if (u->n_inputs != 2 || !scalar_const(g, u->inputs[1 - in], &k)) return 0;
    if (qp_node_is(u, "Mul")) return post(c, QP_CONV_POST_LINEAR, k, 0);
    if (qp_node_is(u, "Add")) return post(c, QP_CONV_POST_LINEAR, 1, k);
    if (qp_node_is(u, "Sub") && in == 0) return post(c, QP_CONV_POST_LINEAR, 1, -k);
    if (qp_node_is(u, "Div") && in == 0 && k != 0.0f) return post(c, QP_CONV_POST_LINEAR, 1 / k, 0);
    return 0;
}

/* Continues chain c from value v (the last member's output). */
static void grow_from(const struct qp_graph *g, struct chain *c, int v) {
    for (;;) {
        c->out = v;
        struct i8g_qparam yq;
        int q = i8g_sole_q(g, v, &yq);
        if (q >= 0) {
            c->q = q;
            c->yq = yq;
            c->out = g->nodes[q].outputs[0];
            return;
        }
        const struct qp_value *val = &g->values[v];
        int hs[4];
        if (c->n + 4 < CHAIN_MAX - 1 && hswish_after(g, v, hs)) {
            if (!post(c, QP_CONV_POST_HARDSWISH, 0, 0)) return;
            for (int i = 0; i < 4; i++)
                c->mem[c->n++] = hs[i];
            v = g->nodes[hs[3]].outputs[0];
            continue;
        }
        int ge[5];
        if (c->n + 5 < CHAIN_MAX - 1 && gelu_after(g, v, ge)) {
            if (!post(c, QP_CONV_POST_GELU, 0, 0)) return;
            for (int i = 0; i < 5; i++)
                c->mem[c->n++] = ge[i];
            v = g->nodes[ge[4]].outputs[0];
            continue;
        }
        if (val->is_graph_output || val->n_uses != 1 || c->n >= CHAIN_MAX - 2) return;
        int ui = val->uses[0].node;
        const struct qp_node *u = &g->nodes[ui];
        if (u->dead || u->n_outputs < 1) return;
        struct chain save = *c;
        if (scalar_post(g, u, val->uses[0].input, c)) {
            /* a Mul/Add/Sub/Div by a scalar constant (after an activation) */
        } else if (qp_node_is(u, "Add") && c->res < 0 && u->n_inputs == 2) {
            int o = u->inputs[1 - val->uses[0].input];
            if (o < 0 || i8g_const_of(g, o) || o == v) return;
            c->res_q = i8g_dq_act(g, o, &c->res, &c->rq);
            c->res_dq = g->values[o].producer;
            if (!c->res_q) c->res = o;
            if (!post(c, QP_CONV_POST_SUM, 0, 0)) {
                *c = save;
                return;
            }
        } else if (!act_posts(g, u, c)) {
            return;
        }
        c->mem[c->n++] = ui;
        v = u->outputs[0];
    }
}

/* A fused node to write: the head (Conv, MatMul, Gemm), its operands and the chain after it. */
struct fused {
    int head;
    const char *op;
    int xq, w, ws, wz, bias, trans_b;
    struct i8g_qparam xp;
    struct chain c;
};

/* Notes the decisions and replaces the head and its chain by the fused node. */
static int emit(struct qp_graph *g, struct fused *f, struct rt_int8_report *rep,
                struct qp_error *err, int *ok) {
    const struct qp_node *n = &g->nodes[f->head];
    struct chain *c = &f->c;
    char into[160];
    snprintf(into, sizeof into, "%s '%s' (%d nodes%s%s%s%s)", f->op, n->name, c->n + (c->q >= 0),
             c->bn >= 0 ? ", BatchNormalization folded" : "",
             c->n_aff ? ", constant Mul/Add folded" : "", c->res >= 0 ? ", residual add" : "",
             c->q >= 0 ? ", int8 output" : ", float output");
    *ok = i8g_note(rep, i8g_producer(g, i8g_in_at(n, 0)), 1, into, NULL) &&
          i8g_note(rep, i8g_producer(g, i8g_in_at(n, 1)), 1, into, NULL);
    const struct qp_node *qw = i8g_producer(g, f->w);
    if (*ok && qw && qp_node_is(qw, "QuantizeLinear") && i8g_const_of(g, i8g_in_at(qw, 0)))
        *ok = i8g_note(rep, qw, 1, into, NULL);
    if (*ok && c->q >= 0) *ok = i8g_note(rep, &g->nodes[c->q], 1, into, NULL);
    if (*ok && c->res_q) *ok = i8g_note(rep, &g->nodes[c->res_dq], 1, into, NULL);
    int in[12] = {f->xq, f->xp.scale_v, f->xp.zp_v, f->w, f->ws, f->wz, f->bias, -1,
                  -1,    c->res,        -1,         -1};
    if (c->q >= 0) {
        in[7] = c->yq.scale_v;
        in[8] = c->yq.zp_v;
        c->mem[c->n++] = c->q;
    }
    if (c->res_q) {
        in[10] = c->rq.scale_v;
        in[11] = c->rq.zp_v;
    }
    int conv = strcmp(f->op, "QConv") == 0, affine = c->bn >= 0 || c->n_aff > 0;
    int64_t m = out_channels(g, f->w, n);
    int transposed = qp_node_is(n, "ConvTranspose");
    float *bn_sc = NULL, *bn_sh = NULL; /* read before the folded nodes go */
    if (*ok && affine) *ok = m > 0 && chain_affine(g, c, m, &bn_sc, &bn_sh);
    const char *name = n->name;
    int nn = *ok ? i8g_replace(g, c->mem, c->n, name, f->op, QP_INT8_DOMAIN, 12, in, c->out,
                               conv ? f->head : -1, err)
                 : -1;
    if (nn < 0) {
        *ok = 0;
        return 0;
    }
    enum qp_dtype od = f->xp.sdt == QP_DTYPE_FLOAT16 ? QP_DTYPE_FLOAT16 : QP_DTYPE_FLOAT;
    *ok = i8g_add_ints(g, nn, "post", c->n_post, c->kind) &&
          i8g_add_floats(g, nn, "post_alpha", c->n_post, c->al) &&
          i8g_add_floats(g, nn, "post_beta", c->n_post, c->be) &&
          i8g_add_int(g, nn, "out_dtype", od) &&
          (conv || i8g_add_int(g, nn, "trans_b", f->trans_b)) &&
          (!transposed || i8g_add_int(g, nn, "transposed", 1)) &&
          (!affine || (set_floats(g, nn, "ch_scale", (int)m, bn_sc) &&
                       set_floats(g, nn, "ch_shift", (int)m, bn_sh)));
    if (conv)
        rep->n_qconv++;
    else
        rep->n_qmatmul++;
    return 1;
}

/* 1 when attribute `name` of n is absent or every value is v. */
static int ints_all(const struct qp_node *n, const char *name, int64_t v) {
    const struct qp_attr *a = qp_node_attr(n, name);
    for (size_t i = 0; a && i < a->n; i++)
        if (a->ints[i] != v) return 0;
    return 1;
}

/* ConvTranspose n with int8 weights w ([C, M/group, k...]) has its kernel equal to its strides,
 * no padding, dilation, group or output shape: each source pixel fills its own output patch
 * (int8_conv.h: the patch the AVX2 kernels run). */
static int kernel_is_stride(const struct qp_graph *g, const struct qp_node *n, int w) {
    const struct qp_tensor *t = weight_source(g, w);
    const struct qp_attr *st = qp_node_attr(n, "strides"), *ap = qp_node_attr(n, "auto_pad");
    if (!t || t->rank < 3 || !st || st->n != (size_t)(t->rank - 2) ||
        qp_node_attr(n, "output_shape") || !ints_all(n, "pads", 0) ||
        !ints_all(n, "dilations", 1) || !ints_all(n, "output_padding", 0) ||
        !ints_all(n, "group", 1))
        return 0;
    if (ap && !(ap->s.len == 0 || attr_is(ap, "NOTSET") || attr_is(ap, "VALID"))) return 0;
    for (int i = 2; i < t->rank; i++)
        if (st->ints[i - 2] != t->dims[i]) return 0;
    return 1;
}

/* Why ConvTranspose n (weights f->w) cannot run on int8 here (NULL: it can). Its int8 kernels
 * (int8_conv.h) are oneDNN's int8 deconvolution, exact only with VNNI, and where the kernel
 * equals the stride a 1x1 convolution and a scatter, which the AVX2 kernels run too; elsewhere
 * oneDNN's float deconvolution would add the bias and activations in reference loops, slower
 * than the float path. Per-channel weight scales are read on axis 1, the output channels of one
 * group. */
static const char *transpose_blocker(const struct qp_graph *g, const struct qp_node *n,
                                     const struct fused *f) {
    const struct qp_attr *ga = qp_node_attr(n, "group");
    const struct qp_tensor *sc = i8g_const_of(g, f->ws);
    if (ga && ga->i > 1 && sc && sc->numel > 1) return "per-channel weight scales with group > 1";
    if (!qp_dnnl_enabled() || qp_int8_ref_forced() || qp_int8_cpu_has_vnni()) return NULL;
    if (qp_kernel_isa() < QP_ISA_AVX2 || !qp_int8_avx2_allowed() || !kernel_is_stride(g, n, f->w))
        return "no exact int8 kernel for it on this CPU without VNNI (the AVX2 kernels take "
               "kernel == stride without padding or groups)";
    if (f->c.res >= 0) return "a residual Add after it (without VNNI)";
    return NULL;
}

static int fuse_conv(struct qp_graph *g, int k, struct rt_int8_report *rep, struct qp_error *err,
                     int *ok) {
    struct qp_node *n = &g->nodes[k];
    struct fused f = {.head = k, .op = "QConv", .bias = i8g_in_at(n, 2)};
    int transposed = qp_node_is(n, "ConvTranspose");
    char msg[160];
    if (!i8g_dq_act(g, i8g_in_at(n, 0), &f.xq, &f.xp)) return 0;
    const char *why = n->n_inputs > 2 && i8g_in_at(n, 2) >= 0 && !i8g_const_of(g, i8g_in_at(n, 2))
                          ? "its bias is not a constant"
                          : weight_blocker(g, i8g_in_at(n, 1), transposed, &f.w, &f.ws, &f.wz);
    if (!why) grow(g, k, &f.c);
    if (!why && transposed) why = transpose_blocker(g, n, &f);
    if (why) {
        snprintf(msg, sizeof msg, "DQ feeds %s '%s', which runs in float: %s", n->op_type, n->name,
                 why);
        *ok = i8g_note(rep, i8g_producer(g, i8g_in_at(n, 0)), 0, "", msg);
        return 0;
    }
    return emit(g, &f, rep, err, ok);
}

/* A constant of N floats (a MatMul's bias Add, a Gemm's C). */
static int bias_of(const struct qp_graph *g, int v, int64_t n) {
    const struct qp_tensor *t = i8g_const_of(g, v);
    return t && (int64_t)t->numel == n && t->rank >= 1 && t->dims[t->rank - 1] == n &&
           (t->dtype == QP_DTYPE_FLOAT || t->dtype == QP_DTYPE_FLOAT16);
}

/* The right-hand operand: constant int8 weights per column (per row with transB), or DQ of a
 * computed int8 tensor; N its column count (-1: unknown). */
static const char *rhs(const struct qp_graph *g, int v, int trans_b, struct fused *f,
                       int64_t *n_out) {
    struct i8g_qparam q;
    int x;
    *n_out = -1;
    if (!trans_b && i8g_dq_act(g, v, &x, &q)) {
        if (q.dt != QP_DTYPE_INT8 || q.z != 0) return "its second operand is not symmetric int8";
        f->w = x;
        f->ws = q.scale_v;
        f->wz = q.zp_v;
        return NULL;
    }
    const char *why = weight_blocker(g, v, trans_b ? 0 : 1, &f->w, &f->ws, &f->wz);
    if (why) return why;
    const struct qp_node *d = i8g_producer(g, v);
    const struct qp_tensor *wt = i8g_const_of(g, i8g_in_at(d, 0));
    if (!wt) wt = i8g_const_of(g, i8g_in_at(i8g_producer(g, i8g_in_at(d, 0)), 0));
    if (!wt || wt->rank != 2) return "its weights are not a matrix";
    *n_out = wt->dims[trans_b ? 0 : 1];
    return NULL;
}

static int fuse_matmul(struct qp_graph *g, int k, struct rt_int8_report *rep, struct qp_error *err,
                       int *ok) {
    struct qp_node *n = &g->nodes[k];
    int gemm = qp_node_is(n, "Gemm");
    struct fused f = {.head = k, .op = "QMatMul", .bias = -1};
    char msg[160];
    if (!i8g_dq_act(g, i8g_in_at(n, 0), &f.xq, &f.xp)) return 0;
    const struct qp_attr *ta = qp_node_attr(n, "transA"), *tb = qp_node_attr(n, "transB");
    f.trans_b = gemm && tb && tb->i;
    int64_t nn = -1;
    const char *why = NULL;
    if (gemm &&
        ((ta && ta->i) || attr_f(n, "alpha", 1.0f) != 1.0f || attr_f(n, "beta", 1.0f) != 1.0f))
        why = "Gemm with transA, alpha or beta";
    if (!why) why = rhs(g, i8g_in_at(n, 1), f.trans_b, &f, &nn);
    if (!why && gemm && i8g_in_at(n, 2) >= 0) {
        if (!bias_of(g, i8g_in_at(n, 2), nn)) why = "its C is not a constant vector";
        f.bias = i8g_in_at(n, 2);
    }
    if (why) {
        snprintf(msg, sizeof msg, "DQ feeds %s '%s', which runs in float: %s", n->op_type, n->name,
                 why);
        *ok = i8g_note(rep, i8g_producer(g, i8g_in_at(n, 0)), 0, "", msg);
        return 0;
    }
    memset(&f.c, 0, sizeof f.c);
    f.c.mem[f.c.n++] = k;
    f.c.res = f.c.q = f.c.bn = -1;
    int v = n->outputs[0];
    const struct qp_value *val = &g->values[v];
    if (!gemm && nn > 0 && !val->is_graph_output && val->n_uses == 1) { /* the bias Add */
        const struct qp_node *u = &g->nodes[val->uses[0].node];
        int o = qp_node_is(u, "Add") && u->n_inputs == 2 ? u->inputs[1 - val->uses[0].input] : -1;
        if (bias_of(g, o, nn)) {
            f.bias = o;
            f.c.mem[f.c.n++] = val->uses[0].node;
            v = u->outputs[0];
        }
    }
    grow_from(g, &f.c, v);
    return emit(g, &f, rep, err, ok);
}

static void conv_pass(struct qp_graph *g, struct rt_int8_report *rep, int *ok,
                      struct qp_error *err) {
    size_t n0 = g->n_nodes; /* nodes added by the pass are QConv already */
    for (size_t k = 0; k < n0 && *ok; k++)
        if (g->nodes[k].dead || g->nodes[k].n_outputs != 1)
            continue;
        else if (qp_node_is(&g->nodes[k], "Conv") || qp_node_is(&g->nodes[k], "ConvTranspose"))
            fuse_conv(g, (int)k, rep, err, ok);
        else if (qp_node_is(&g->nodes[k], "MatMul") || qp_node_is(&g->nodes[k], "Gemm"))
            fuse_matmul(g, (int)k, rep, err, ok);
}

/* ---- clean-up, layouts, decisions ----------------------------------------------------------- */

static int is_qdq(const struct qp_node *n) {
    return qp_node_is(n, "QuantizeLinear") || qp_node_is(n, "DequantizeLinear");
}

static int is_qconv(const struct qp_node *n) {
    return !n->dead && n->domain && strcmp(n->domain, QP_INT8_DOMAIN) == 0 &&
           strcmp(n->op_type, "QConv") == 0;
}

static int is_fused(const struct qp_node *n) {
    return !n->dead && n->domain && strcmp(n->domain, QP_INT8_DOMAIN) == 0;
}

/* Removes Q/DQ nodes whose outputs nobody reads (repeatedly: a Q feeding only such a DQ). */
static enum qp_status sweep(struct qp_graph *g, struct rt_int8_report *rep, struct qp_error *err) {
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t k = 0; k < g->n_nodes; k++) {
            struct qp_node *n = &g->nodes[k];
            if (n->dead || !is_qdq(n) || n->n_outputs < 1 || n->outputs[0] < 0) continue;
            const struct qp_value *v = &g->values[n->outputs[0]];
            if (v->n_uses || v->is_graph_output) continue;
            enum qp_status st = qp_graph_remove_node(g, (int)k, err);
            if (st) return st;
            rep->n_removed++;
            changed = 1;
        }
    }
    return QP_OK;
}

/* ---- channels-last tensors ------------------------------------------------------------------ */

static int is_pw(const struct qp_node *n) {
    return is_fused(n) && strcmp(n->op_type, "Pointwise") == 0;
}

/* 1 when value v is int8 as the integer path leaves it: a QConv's or a Pointwise's quantized
 * output. */
static int int8_output(const struct qp_graph *g, int v) {
    const struct qp_value *x = &g->values[v];
    if (x->producer < 0) return 0;
    const struct qp_node *n = &g->nodes[x->producer];
    if (is_qconv(n)) return i8g_in_at(n, 7) >= 0;
    const int64_t *oq;
    return is_pw(n) && qp_kattr_ints(n, "pw_out_q", &oq) > x->producer_output &&
           oq[x->producer_output] >= 0;
}

/* 1 when every reader of v is a QConv reading it as source or residual. */
static int qconv_readers(const struct qp_graph *g, const struct qp_value *v) {
    int all = v->n_uses > 0 && !v->is_graph_output;
    for (size_t u = 0; all && u < v->n_uses; u++)
        all = is_qconv(&g->nodes[v->uses[u].node]) &&
              (v->uses[u].input == 0 || v->uses[u].input == 9);
    return all;
}

/* A MaxPool (on the int8 output of a QConv, so int8 itself) without indices whose output only
 * QConv nodes read: it can run channels last between them (pool.c, attribute `nhwc`). */
static int nhwc_maxpool(const struct qp_graph *g, const struct qp_use *u) {
    const struct qp_node *n = &g->nodes[u->node];
    if (n->dead || !qp_node_is(n, "MaxPool") || u->input != 0 || n->n_outputs < 1 ||
        (n->n_outputs > 1 && n->outputs[1] >= 0) || n->outputs[0] < 0)
        return 0;
    return qconv_readers(g, &g->values[n->outputs[0]]);
}

/* 1 when value v is float32 as the integer path leaves it: a QConv's output without Q in a
 * float32 graph, or a Pointwise output written as float32. */
static int float32_output(const struct qp_graph *g, int v) {
    const struct qp_value *x = &g->values[v];
    if (x->producer < 0 || int8_output(g, v)) return 0;
    const struct qp_node *n = &g->nodes[x->producer];
    if (is_qconv(n)) return qp_kattr_int(n, "out_dtype", -1) == QP_DTYPE_FLOAT;
    const int64_t *dt;
    return is_pw(n) && qp_kattr_ints(n, "pw_out_dt", &dt) > x->producer_output &&
           dt[x->producer_output] == QP_DTYPE_FLOAT;
}

/* A GlobalAveragePool reading float32 value v: it can average it channels last (pool.c,
 * attribute `nhwc`), and its [N, C, 1, ...] output is the same in either layout (an SE block's
 * pooling, so the Conv before it need not write channels first). */
static int nhwc_gap(const struct qp_graph *g, const struct qp_use *u, int v) {
    const struct qp_node *n = &g->nodes[u->node];
    return !n->dead && qp_node_is(n, "GlobalAveragePool") && u->input == 0 && float32_output(g, v);
}

/* A 2-D AveragePool without dilation reading float32 value v: it can read it channels last and
 * write its output channels first (pool.c, attribute `nhwc`; PaddleOCR rec's neck pools a
 * hard-swish output so). */
static int nhwc_avgpool(const struct qp_graph *g, const struct qp_use *u, int v) {
    const struct qp_node *n = &g->nodes[u->node];
    if (n->dead || !qp_node_is(n, "AveragePool") || u->input != 0 || !float32_output(g, v))
        return 0;
    const int64_t *k, *d;
    int64_t nk = qp_kattr_ints(n, "kernel_shape", &k), nd = qp_kattr_ints(n, "dilations", &d);
    if (nk != 2) return 0; /* two spatial axes: a [N, C, H, W] input in a valid model */
    for (int64_t i = 0; i < nd; i++)
        if (d[i] != 1) return 0;
    return 1;
}

/* A QGlobalAveragePool reading the int8 value v: it sums it channels last (pool.c, attribute
 * `nhwc`; a ResNet's last block then writes channels last for its head). */
static int nhwc_qgap(const struct qp_graph *g, const struct qp_use *u, int v) {
    const struct qp_node *n = &g->nodes[u->node];
    return is_fused(n) && strcmp(n->op_type, "QGlobalAveragePool") == 0 && u->input == 0 &&
           int8_output(g, v);
}

/* A pool that averages a channels-last value (nhwc_gap, nhwc_avgpool, nhwc_qgap). */
static int nhwc_average(const struct qp_graph *g, const struct qp_use *u, int v) {
    return nhwc_gap(g, u, v) || nhwc_avgpool(g, u, v) || nhwc_qgap(g, u, v);
}

/* 1 when value v, made by a QConv or a Pointwise node that `ok` admits, can be stored channels
 * last: every reader takes it so (a QConv's source, its int8 residual, a MaxPool between
 * QConv nodes, a Pointwise node `ok` admits, a GlobalAveragePool or 2-D AveragePool of a
 * float32 value) and it is no graph output. */
static int nhwc_value(const struct qp_graph *g, const unsigned char *ok, int v) {
    const struct qp_value *x = &g->values[v];
    if (x->producer < 0 || x->is_graph_output || x->n_uses == 0) return 0;
    const struct qp_node *p = &g->nodes[x->producer];
    if (!is_qconv(p) && !(is_pw(p) && ok[x->producer])) return 0;
    for (size_t u = 0; u < x->n_uses; u++) {
        const struct qp_use *xu = &x->uses[u];
        const struct qp_node *r = &g->nodes[xu->node];
        int fine = is_qconv(r) ? xu->input == 0 || (xu->input == 9 && int8_output(g, v))
                   : is_pw(r)  ? ok[xu->node]
                               : (is_qconv(p) && int8_output(g, v) && nhwc_maxpool(g, xu)) ||
                                    nhwc_average(g, xu, v);
        if (!fine) return 0;
    }
    return 1;
}

/* Whether Pointwise node k can run channels last: every output can be stored so, some input is,
 * and no other input is an activation of the integer path stored channels first (it would be
 * gathered element by element; a constant or an SE gate [N,C,1,1] is read as it is). */
static int nhwc_pointwise(const struct qp_graph *g, const unsigned char *ok, int k) {
    const struct qp_node *n = &g->nodes[k];
    for (int o = 0; o < n->n_outputs; o++)
        if (n->outputs[o] < 0 || !nhwc_value(g, ok, n->outputs[o])) return 0;
    int some = 0;
    for (int i = 0; i < n->n_inputs; i++) {
        int v = n->inputs[i];
        if (v < 0 || i8g_const_of(g, v)) continue;
        if (nhwc_value(g, ok, v)) {
            some = 1;
            continue;
        }
        const struct qp_node *p = i8g_producer(g, v);
        if (p && (is_qconv(p) || is_pw(p))) return 0;
    }
    return some;
}

static int mark_readers(struct qp_graph *g, const struct qp_value *v) {
    for (size_t u = 0; u < v->n_uses; u++)
        if (!i8g_add_int(g, v->uses[u].node, v->uses[u].input == 0 ? "src_nhwc" : "res_nhwc", 1))
            return 0;
    return 1;
}

/* The GlobalAveragePool and AveragePool readers of channels-last value v average it so. */
static int mark_gaps(struct qp_graph *g, int v) {
    const struct qp_value *x = &g->values[v];
    for (size_t u = 0; u < x->n_uses; u++)
        if (nhwc_average(g, &x->uses[u], v) && !i8g_add_int(g, x->uses[u].node, "nhwc", 1))
            return 0;
    return 1;
}

/* The attributes of one node on channels-last tensors (`ok`: the Pointwise nodes admitted). */
static int mark_node(struct qp_graph *g, const unsigned char *ok, int k) {
    const struct qp_node *n = &g->nodes[k];
    if (is_pw(n)) {
        int64_t fi[64], fo[64];
        if (n->n_inputs > 64 || n->n_outputs > 64) return 1;
        for (int i = 0; i < n->n_inputs; i++)
            fi[i] = n->inputs[i] >= 0 && nhwc_value(g, ok, n->inputs[i]);
        for (int o = 0; o < n->n_outputs; o++)
            if (!mark_gaps(g, n->outputs[o])) return 0;
        for (int o = 0; o < n->n_outputs; o++)
            fo[o] = 1;
        return i8g_add_int(g, k, "nhwc", 1) && i8g_add_ints(g, k, "pw_in_nhwc", n->n_inputs, fi) &&
               i8g_add_ints(g, k, "pw_out_nhwc", n->n_outputs, fo);
    }
    int x = i8g_in_at(n, 0), r = i8g_in_at(n, 9), y = n->outputs[0];
    if ((x >= 0 && nhwc_value(g, ok, x) && !i8g_add_int(g, k, "src_nhwc", 1)) ||
        (r >= 0 && nhwc_value(g, ok, r) && !i8g_add_int(g, k, "res_nhwc", 1)))
        return 0;
    if (y < 0 || !nhwc_value(g, ok, y)) return 1;
    if (!i8g_add_int(g, k, "dst_nhwc", 1) || !mark_gaps(g, y)) return 0;
    const struct qp_value *v = &g->values[y];
    for (size_t u = 0; u < v->n_uses; u++) { /* a MaxPool between QConv nodes */
        int m = v->uses[u].node;
        if (qp_node_is(&g->nodes[m], "MaxPool") &&
            (!i8g_add_int(g, m, "nhwc", 1) || !mark_readers(g, &g->values[g->nodes[m].outputs[0]])))
            return 0;
    }
    return 1;
}

/* Tensors that only the integer path's QConv and Pointwise nodes exchange stay channels last
 * (NHWC), so that no transposition runs between them; so do those around a MaxPool between
 * QConv nodes (ResNet's stem). The Pointwise nodes admitted are the largest set in which each
 * satisfies nhwc_pointwise given the others (every node admitted, then those that fail dropped
 * until none does). */
static int mark_nhwc(struct qp_graph *g) {
    unsigned char *ok = calloc(g->n_nodes ? g->n_nodes : 1, 1);
    if (!ok) return 0;
    const char *e = getenv("QP_INT8_NHWC_POINTWISE");
    int pw = !e || strcmp(e, "0") != 0;
    for (size_t k = 0; k < g->n_nodes; k++)
        ok[k] = pw && is_pw(&g->nodes[k]);
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t k = 0; k < g->n_nodes; k++)
            if (ok[k] && !nhwc_pointwise(g, ok, (int)k)) {
                ok[k] = 0;
                changed = 1;
            }
    }
    int fine = 1;
    for (size_t k = 0; fine && k < g->n_nodes; k++)
        if (is_qconv(&g->nodes[k]) || ok[k]) fine = mark_node(g, ok, (int)k);
    free(ok);
    return fine;
}

/* Why a Q/DQ node that survived runs as its own pass. */
static void own_reason(const struct qp_graph *g, const struct qp_node *n, char *out, size_t size) {
    const struct qp_value *v = &g->values[n->outputs[0]];
    int in0 = i8g_in_at(n, 0);
    if (i8g_const_of(g, in0) ||
        (i8g_producer(g, in0) && i8g_const_of(g, i8g_in_at(i8g_producer(g, in0), 0)) &&
         is_qdq(i8g_producer(g, in0)))) {
        snprintf(out, size, "on a constant: evaluated once when the plan is built");
        return;
    }
    if (qp_node_is(n, "DequantizeLinear")) {
        for (size_t u = 0; u < v->n_uses; u++) {
            const struct qp_node *c = &g->nodes[v->uses[u].node];
            if (is_fused(c)) continue;
            snprintf(out, size, "DQ feeds %s '%s': no int8 kernel", c->op_type, c->name);
            return;
        }
        snprintf(out, size, "its output is a graph output");
        return;
    }
    const struct qp_node *p = i8g_producer(g, in0);
    int quantized = 0;
    for (size_t u = 0; u < v->n_uses; u++) {
        const struct qp_node *c = &g->nodes[v->uses[u].node];
        if (!qp_node_is(c, "DequantizeLinear")) quantized = 1; /* reads the int8 tensor */
        const struct qp_value *dv =
            qp_node_is(c, "DequantizeLinear") ? &g->values[c->outputs[0]] : NULL;
        for (size_t w = 0; dv && w < dv->n_uses; w++)
            quantized |= is_fused(&g->nodes[dv->uses[w].node]);
    }
    if (!p)
        snprintf(out, size, "Q of graph input '%s': quantizes the float input as its own pass",
                 g->values[in0].name);
    else if (!quantized)
        snprintf(out, size, "Q after %s '%s' has no quantized consumer", p->op_type, p->name);
    else if (is_flow_op(p) || qp_node_is(p, "Split"))
        snprintf(out, size,
                 "Q after %s '%s': it reads a float tensor (no DQ of this Q's parameters before "
                 "it), so its result is quantized as its own pass",
                 p->op_type, p->name);
    else
        snprintf(out, size,
                 "Q after %s '%s': %s has no int8 kernel, so the float result is "
                 "quantized as its own pass",
                 p->op_type, p->name, p->op_type);
}

/* A Q whose readers are all DQs of its own parameters that feed float ops becomes one
 * FakeQuant pass (float in, float out: the two nodes' values) instead of a quantize and a
 * dequantize pass through an int8 tensor. */
static int fakequant_pass(struct qp_graph *g, size_t n_orig, struct rt_int8_report *rep,
                          struct qp_error *err) {
    for (size_t k = 0; k < n_orig; k++) {
        struct qp_node *q = &g->nodes[k];
        struct i8g_qparam qp;
        if (q->dead || !qp_node_is(q, "QuantizeLinear") || q->n_outputs != 1 ||
            !i8g_per_tensor(g, q, &qp) || i8g_const_of(g, i8g_in_at(q, 0)))
            continue;
        const struct qp_value *qv = &g->values[q->outputs[0]];
        int ok = qv->n_uses > 0 && !qv->is_graph_output && qv->n_uses <= 8;
        int dqs[8];
        for (size_t u = 0; ok && u < qv->n_uses; u++) {
            const struct qp_node *d = &g->nodes[qv->uses[u].node];
            struct i8g_qparam dp;
            ok = qp_node_is(d, "DequantizeLinear") && qv->uses[u].input == 0 &&
                 i8g_per_tensor(g, d, &dp) && i8g_same_q(&qp, &dp) && d->n_outputs == 1;
            dqs[u] = qv->uses[u].node;
        }
        int nd = (int)qv->n_uses;
        for (int i = 1; ok && i < nd; i++) /* keep it simple: several DQ outputs named outside */
            ok = !g->values[g->nodes[dqs[i]].outputs[0]].is_graph_output;
        if (!ok) continue;
        char why[110];
        own_reason(g, q, why, sizeof why);
        char msg[160];
        snprintf(msg, sizeof msg, "%s (Q and DQ run as one fake-quantize pass)", why);
        if (!i8g_note(rep, q, 0, "", msg)) return 0;
        for (int i = 0; i < nd; i++) {
            own_reason(g, &g->nodes[dqs[i]], why, sizeof why);
            snprintf(msg, sizeof msg, "%s (Q and DQ run as one fake-quantize pass)", why);
            if (!i8g_note(rep, &g->nodes[dqs[i]], 0, "", msg)) return 0;
        }
        /* The other DQs' readers read the first one's output. */
        int out = g->nodes[dqs[0]].outputs[0];
        for (int i = 1; i < nd; i++) {
            const struct qp_value *dv = &g->values[g->nodes[dqs[i]].outputs[0]];
            while (dv->n_uses) {
                int c = dv->uses[0].node, in = dv->uses[0].input;
                if (qp_graph_set_input(g, c, in, out, err)) return 0;
            }
        }
        int in3[3] = {i8g_in_at(q, 0), i8g_in_at(q, 1), i8g_in_at(q, 2)}, dead[9];
        dead[0] = (int)k;
        for (int i = 0; i < nd; i++)
            dead[1 + i] = dqs[i];
        char name[256];
        snprintf(name, sizeof name, "%s", q->name ? q->name : "");
        int64_t idx[9];
        int n_idx = 0;
        for (size_t i = 0; i < rep->n && n_idx < 9; i++)
            for (int j = 0; j < 1 + nd; j++)
                if (rep->d[i].node == g->nodes[dead[j]].name) {
                    idx[n_idx++] = (int64_t)i;
                    break;
                }
        int fq =
            i8g_replace(g, dead, 1 + nd, name, "FakeQuant", QP_INT8_DOMAIN, 3, in3, out, -1, err);
        /* which decisions are this pair's, for a pass that fuses the FakeQuant later */
        if (fq < 0 || !i8g_add_ints(g, fq, "qp_decisions", n_idx, idx)) return 0;
        rep->n_fakequant++;
    }
    return 1;
}

static int decide_rest(const struct qp_graph *g, struct rt_int8_report *rep) {
    for (size_t k = 0; k < g->n_nodes; k++) { /* the moved ones (int8_move.c) too */
        const struct qp_node *n = &g->nodes[k];
        if (n->dead || !is_qdq(n) || n->n_outputs < 1 || n->outputs[0] < 0) continue;
        char why[128];
        own_reason(g, n, why, sizeof why);
        int folded = strncmp(why, "on a constant", 13) == 0;
        if (!i8g_note(rep, n, 0, "", why)) return 0;
        for (size_t i = 0; i < rep->n; i++)
            if (rep->d[i].node == n->name && rep->d[i].fused && !folded) /* partly fused */
                snprintf(rep->text[i][1], sizeof rep->text[i][1], "also runs on its own: %s", why);
    }
    for (size_t i = 0; i < rep->n; i++) {
        rep->d[i].into = rep->text[i][0];
        rep->d[i].reason = rep->text[i][1];
    }
    return 1;
}

/* 1 when a value of g is declared float16 or bfloat16. */
static int has_narrow_value(const struct qp_graph *g) {
    for (size_t v = 0; v < g->n_values; v++)
        if (g->values[v].dtype == QP_DTYPE_FLOAT16 || g->values[v].dtype == QP_DTYPE_BFLOAT16)
            return 1;
    return 0;
}

/* A Cast the widening left between two float32 tensors (a float16 model's Cast to its float32
 * graph output: every float value is float32 once the widening is complete) copies; the node
 * that makes its input writes its output instead, when the Cast is that input's one reader and
 * the input is nothing else (not a graph input or output). */
static enum qp_status drop_same_type_casts(struct qp_graph *g, struct qp_error *err) {
    for (size_t k = 0; k < g->n_nodes; k++) {
        struct qp_node *n = &g->nodes[k];
        if (n->dead || !qp_node_is(n, "Cast") || n->n_inputs != 1 || n->n_outputs != 1) continue;
        int v = n->inputs[0], w = n->outputs[0];
        if (v < 0 || w < 0) continue;
        const struct qp_value *vv = &g->values[v];
        if (!i8g_known_float(g, v) || g->values[w].dtype != QP_DTYPE_FLOAT ||
            qp_kattr_int(n, "to", 0) != QP_DTYPE_FLOAT || vv->producer < 0 || vv->n_uses != 1 ||
            vv->is_graph_input || vv->is_graph_output || vv->initializer >= 0)
            continue;
        int p = vv->producer, slot = vv->producer_output;
        enum qp_status st = qp_graph_remove_node(g, (int)k, err);
        if (st) return st;
        g->nodes[p].outputs[slot] = w;
        g->values[w].producer = p;
        g->values[w].producer_output = slot;
        g->values[v].producer = -1;
    }
    return QP_OK;
}

enum qp_status rt_int8_widen(struct qp_graph *g, const char **why, size_t *n_widened,
                             struct qp_error *err) {
    const char *e = getenv("QP_INT8_FP16_OUT");
    *why = NULL;
    *n_widened = 0;
    if (e && strcmp(e, "1") == 0) {
        if (has_narrow_value(g)) *why = "QP_INT8_FP16_OUT=1 keeps them";
        return QP_OK;
    }
    enum qp_status st = rt_narrow_widen(g, why, n_widened, err);
    return st || *why ? st : drop_same_type_casts(g, err);
}

/* QP_INT8_POINTWISE=0 keeps elementwise chains node by node (measurements, bisecting). */
static int pointwise_off(void) {
    const char *e = getenv("QP_INT8_POINTWISE");
    return e && strcmp(e, "0") == 0;
}

enum qp_status rt_int8_rewrite(struct qp_graph *g, struct rt_int8_report *rep,
                               struct qp_error *err) {
    memset(rep, 0, sizeof *rep);
    size_t n_orig = g->n_nodes;
    int ok = 1;
    enum qp_status st = rt_int8_widen(g, &rep->widen_why, &rep->n_widened, err);
    if (st) ok = 0;
    while (ok && flow_pass(g, rep, &ok, err) > 0) {
    }
    int moved = ok ? rt_int8_move_pass(g, rep, err) : 0;
    if (moved < 0) ok = 0;
    while (ok && moved > 0 && flow_pass(g, rep, &ok, err) > 0) {
    }
    if (ok) conv_pass(g, rep, &ok, err);
    if (ok && (st = sweep(g, rep, err))) ok = 0;
    if (ok && !fakequant_pass(g, n_orig, rep, err)) ok = 0;
    if (ok && !pointwise_off() && !rt_int8_pw_pass(g, 0, rep, err)) ok = 0;
    if (ok && !mark_nhwc(g)) ok = 0;
    if (ok && !decide_rest(g, rep)) ok = 0;
    if (ok && (st = qp_graph_toposort(g, err))) ok = 0;
    if (!ok) {
        rt_int8_report_free(rep);
        return st ? st
                  : (err && err->status ? err->status
                                        : qp_error_set(err, QP_ERR_NOMEM, "int8: out of memory"));
    }
    return QP_OK;
}

enum qp_status rt_int8_exact_rewrite(struct qp_graph *g, const char **why, size_t *n_rounds,
                                     struct qp_error *err) {
    *why = NULL;
    *n_rounds = 0;
    enum qp_status st = QP_OK;
    if (rt_narrow_emulates(g)) {
        if ((st = rt_narrow_emulate(g, why, n_rounds, err)) != QP_OK || *why) return st;
    } else if (has_narrow_value(g)) {
        *why = "narrow float values the engine does not emulate";
        return QP_OK;
    }
    struct rt_int8_report rep = {0}; /* the passes note decisions; nobody reads them here */
    int ok = fakequant_pass(g, g->n_nodes, &rep, err) && rt_int8_pw_pass(g, 1, &rep, err);
    rt_int8_report_free(&rep);
    if (ok) return qp_graph_toposort(g, err);
    return err && err->status ? err->status
                              : qp_error_set(err, QP_ERR_NOMEM, "int8: out of memory");
}
