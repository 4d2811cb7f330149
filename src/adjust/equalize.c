/* Equalization folded into the weights (equalize.h). */
#include "adjust/equalize.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/provider.h"
#include "core/size.h"
#include "ir/ir.h"
#include "qplace/session.h"

#define EQ_MAX_INPUTS 64
/* Scales are kept within [1/EQ_SCALE_CAP, EQ_SCALE_CAP]: a channel of (almost) zero weights or
 * activations would otherwise ask for an unbounded one. */
#define EQ_SCALE_CAP 1e4

void qp_equalize_options_default(struct qp_equalize_options *o) {
    memset(o, 0, sizeof *o);
    o->alpha = 0.5;
    o->cle_passes = 8;
}

/* One rescaling: input `input` of node `node` multiplied (or divided, `divide`) by f[k], k the
 * index along `axis` (AXIS) or, for a Conv weight [M, C/g, ...] (CONV_IN), the input channel
 * (m / (M/g)) * (C/g) + c_local the element reads. */
enum eq_kind { EQ_AXIS, EQ_CONV_IN };

struct eq_op {
    char *node, *op_type;
    int input;
    enum eq_kind kind;
    int axis;
    int64_t groups;
    int divide;
    size_t n;
    float *f;
};

struct qp_equalize_plan {
    size_t n_ops, cap_ops;
    struct eq_op *ops;
};

void qp_equalize_plan_free(struct qp_equalize_plan *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_ops; i++) {
        free(p->ops[i].node);
        free(p->ops[i].op_type);
        free(p->ops[i].f);
    }
    free(p->ops);
    free(p);
}

void qp_equalize_report_free(struct qp_equalize_report *r) {
    if (!r) return;
    free(r->skips);
    free(r);
}

static enum qp_status nomem(struct qp_error *err) {
    return qp_error_set(err, QP_ERR_NOMEM, "equalize: out of memory");
}

static enum qp_status add_op(struct qp_equalize_plan *p, const struct qp_node *n, int input,
                             enum eq_kind kind, int axis, int64_t groups, int divide,
                             const float *f, size_t len, struct qp_error *err) {
    if (p->n_ops == p->cap_ops) {
        size_t cap = p->cap_ops ? 2 * p->cap_ops : 16;
        struct eq_op *ops = qp_realloc_n(p->ops, cap, sizeof *ops);
        if (!ops) return nomem(err);
        p->ops = ops;
        p->cap_ops = cap;
    }
    struct eq_op *o = &p->ops[p->n_ops];
    *o = (struct eq_op){.input = input,
                        .kind = kind,
                        .axis = axis,
                        .groups = groups,
                        .divide = divide,
                        .n = len,
                        .node = strdup(n->name),
                        .op_type = strdup(n->op_type),
                        .f = qp_malloc_n(len ? len : 1, sizeof *o->f)};
    if (!o->node || !o->op_type || !o->f) {
        free(o->node);
        free(o->op_type);
        free(o->f);
        return nomem(err);
    }
    memcpy(o->f, f, len * sizeof *f);
    p->n_ops++;
    return QP_OK;
}

static enum qp_status add_skip(struct qp_equalize_report *r, const char *method, const char *node,
                               struct qp_error *err, const char *fmt, ...) {
    struct qp_equalize_skip *s = qp_realloc_n(r->skips, r->n_skips + 1, sizeof *s);
    if (!s) return nomem(err);
    r->skips = s;
    s = &s[r->n_skips++];
    s->method = method;
    snprintf(s->node, sizeof s->node, "%s", node);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->reason, sizeof s->reason, fmt, ap);
    va_end(ap);
    if (strcmp(method, "cle") == 0)
        r->n_cle_skipped++;
    else
        r->n_smoothquant_skipped++;
    return QP_OK;
}

/* ---- graph helpers ------------------------------------------------------------------------ */

/* The constant tensor behind value v: its initializer or its Constant node's `value`. */
static struct qp_tensor *const_tensor(const struct qp_graph *g, int v) {
    if (v < 0) return NULL;
    const struct qp_value *val = &g->values[v];
    if (val->initializer >= 0) return &g->inits[val->initializer];
    if (val->producer < 0 || val->is_graph_input) return NULL;
    struct qp_node *p = &g->nodes[val->producer];
    if (p->dead || !qp_node_is(p, "Constant")) return NULL;
    for (int a = 0; a < p->n_attrs; a++)
        if (strcmp(p->attrs[a].name, "value") == 0 && p->attrs[a].type == QP_ATTR_TENSOR)
            return p->attrs[a].t;
    return NULL;
}

/* A float32 constant with its data, or NULL. */
static const struct qp_tensor *float_const(const struct qp_graph *g, int v) {
    const struct qp_tensor *t = const_tensor(g, v);
    if (!t || t->dtype != QP_DTYPE_FLOAT || !t->data || t->nbytes != t->numel * 4) return NULL;
    return t;
}

static int input_of(const struct qp_node *n, int i) {
    return i < n->n_inputs ? n->inputs[i] : -1;
}

/* The one node reading value v (as a live node, not a graph output), or -1. */
static int single_reader(const struct qp_graph *g, int v, int *input_out) {
    const struct qp_value *val = &g->values[v];
    if (val->is_graph_output || val->n_uses != 1) return -1;
    int n = val->uses[0].node;
    if (g->nodes[n].dead) return -1;
    if (input_out) *input_out = val->uses[0].input;
    return n;
}

/* 1 when node n has exactly one output that is read (the others absent or unread). */
static int one_output(const struct qp_graph *g, const struct qp_node *n) {
    for (int o = 1; o < n->n_outputs; o++)
        if (n->outputs[o] >= 0 &&
            (g->values[n->outputs[o]].n_uses || g->values[n->outputs[o]].is_graph_output))
            return 0;
    return n->n_outputs >= 1 && n->outputs[0] >= 0;
}

static int64_t attr_int(const struct qp_node *n, const char *name, int64_t dflt) {
    const struct qp_attr *a = qp_node_attr(n, name);
    return a && a->type == QP_ATTR_INT ? a->i : dflt;
}

/* A scalar float constant (attribute or input), or NAN when absent/not constant. */
static double clip_bound(const struct qp_graph *g, const struct qp_node *n, int input,
                         const char *attr, int *present) {
    const struct qp_attr *a = qp_node_attr(n, attr);
    if (a && a->type == QP_ATTR_FLOAT) {
        *present = 1;
        return a->f;
    }
    int v = input_of(n, input);
    *present = v >= 0;
    if (v < 0) return NAN;
    const struct qp_tensor *t = float_const(g, v);
    if (!t || t->numel != 1) return NAN;
    float x;
    memcpy(&x, t->data, 4);
    return x;
}

/* 1 when node n commutes with a positive per-channel scale: f(x / s) = f(x) / s. Else 0 and
 * `why` says why. */
static int homogeneous(const struct qp_graph *g, const struct qp_node *n, char *why, size_t len) {
    if (qp_node_is(n, "Relu") || qp_node_is(n, "Identity") || qp_node_is(n, "LeakyRelu") ||
        qp_node_is(n, "PRelu"))
        return 1;
    if (qp_node_is(n, "Clip")) {
        int has_min = 0, has_max = 0;
        double lo = clip_bound(g, n, 1, "min", &has_min), hi = clip_bound(g, n, 2, "max", &has_max);
        if ((!has_min || lo == 0.0) && !has_max) return 1;
        snprintf(why, len,
                 "Clip(%g, %g) between does not commute with a per-channel scale (its bounds "
                 "would have to scale too)",
                 has_min ? lo : -INFINITY, has_max ? hi : INFINITY);
        return 0;
    }
    snprintf(why, len, "%s between does not commute with a per-channel scale", n->op_type);
    return 0;
}

/* ---- CLE ---------------------------------------------------------------------------------- */

/* A working copy of one (node, input) constant: CLE's passes rescale these, never the model. */
struct work {
    int node, input;
    float *x;
    const struct qp_tensor *t;
};

struct cle_pair {
    int conv1, bn, conv2;
    int64_t c;       /* channels between */
    int64_t groups2; /* Conv2's group */
    float *s;        /* accumulated scale per channel */
    struct work *w1, *w2, *bn_scale;
    const struct qp_tensor *bn_var;
    float eps;
};

struct cle_state {
    struct work *works;
    size_t n_works, cap_works;
    struct cle_pair *pairs;
    size_t n_pairs, cap_pairs;
};

/* The working copy of (node, input); index into s->works, or -1 when out of memory. */
static long work_of(struct cle_state *s, const struct qp_graph *g, int node, int input) {
    for (size_t i = 0; i < s->n_works; i++)
        if (s->works[i].node == node && s->works[i].input == input) return (long)i;
    if (s->n_works == s->cap_works) {
        size_t cap = s->cap_works ? 2 * s->cap_works : 32;
        struct work *w = qp_realloc_n(s->works, cap, sizeof *w);
        if (!w) return -1;
        s->works = w;
        s->cap_works = cap;
    }
    const struct qp_tensor *t = float_const(g, g->nodes[node].inputs[input]);
    float *x = qp_malloc_n((size_t)t->numel ? (size_t)t->numel : 1, sizeof *x);
    if (!x) return -1;
    memcpy(x, t->data, (size_t)t->numel * 4);
    s->works[s->n_works] = (struct work){.node = node, .input = input, .x = x, .t = t};
    return (long)s->n_works++;
}

static void cle_state_release(struct cle_state *s) {
    for (size_t i = 0; i < s->n_works; i++)
        free(s->works[i].x);
    for (size_t i = 0; i < s->n_pairs; i++)
        free(s->pairs[i].s);
    free(s->works);
    free(s->pairs);
}

/* 1 when n is a Conv whose weight (input 1) is a float constant of rank >= 3 and whose bias, if
 * any, is a float constant. */
static int usable_conv(const struct qp_graph *g, const struct qp_node *n) {
    if (!qp_node_is(n, "Conv")) return 0;
    const struct qp_tensor *w = float_const(g, input_of(n, 1));
    if (!w || w->rank < 3 || w->dims[0] <= 0) return 0;
    int b = input_of(n, 2);
    if (b >= 0) {
        const struct qp_tensor *bt = float_const(g, b);
        if (!bt || bt->numel != (uint64_t)w->dims[0]) return 0;
    }
    return 1;
}

/* A BatchNormalization reading Conv1's output with float constant [C] parameters. */
static int usable_bn(const struct qp_graph *g, const struct qp_node *n, int64_t c) {
    if (!qp_node_is(n, "BatchNormalization") || n->n_inputs < 5 || attr_int(n, "training_mode", 0))
        return 0;
    for (int i = 1; i < 5; i++) {
        const struct qp_tensor *t = float_const(g, n->inputs[i]);
        if (!t || t->numel != (uint64_t)c) return 0;
    }
    return one_output(g, n);
}

/* Conv1's output y (after its BN) has several readers. When one of them leads to a Conv within a
 * few single-reader steps (a decomposed HardSwish: y * Clip(y + 3, 0, 6) / 6), the pair is
 * skipped and said why; a plain fan-out is not a pair and is not reported. */
static enum qp_status cle_fanout(const struct qp_graph *g, const struct qp_node *c1, int y,
                                 struct qp_equalize_report *r, struct qp_error *err) {
    const struct qp_value *val = &g->values[y];
    for (size_t u = 0; u < val->n_uses; u++) {
        int n = val->uses[u].node, in = 0;
        for (int step = 0; step < 4 && n >= 0 && !g->nodes[n].dead; step++) {
            const struct qp_node *nd = &g->nodes[n];
            if (step > 0 && qp_node_is(nd, "Conv")) {
                if (in != 0) break;
                return add_skip(r, "cle", c1->name, err,
                                "its output '%s' has %zu readers ('%s' (%s), ...) before '%s' "
                                "(Conv): no single scalable path (a residual, or a decomposed "
                                "activation such as HardSwish)",
                                val->name, val->n_uses, g->nodes[val->uses[u].node].name,
                                g->nodes[val->uses[u].node].op_type, nd->name);
            }
            if (qp_node_is(nd, "Conv") || !one_output(g, nd)) break;
            n = single_reader(g, nd->outputs[0], &in);
        }
    }
    return QP_OK;
}

/* Finds the pair starting at Conv node i (or records why it is skipped). The working copies
 * are indexed, not pointed at, since the array grows. */
static enum qp_status cle_find(struct cle_state *s, const struct qp_graph *g, int i,
                               struct qp_equalize_report *r, long *idx, struct qp_error *err) {
    const struct qp_node *c1 = &g->nodes[i];
    idx[0] = idx[1] = idx[2] = -1;
    if (!usable_conv(g, c1) || !one_output(g, c1)) return QP_OK;
    int64_t c = float_const(g, c1->inputs[1])->dims[0];
    int v = c1->outputs[0], in = 0, bn = -1, n = single_reader(g, v, &in);
    if (n < 0) return g->values[v].n_uses > 1 ? cle_fanout(g, c1, v, r, err) : QP_OK;
    if (in != 0) return QP_OK;
    if (usable_bn(g, &g->nodes[n], c)) {
        bn = n;
        int bv = g->nodes[n].outputs[0];
        if ((n = single_reader(g, bv, &in)) < 0)
            return g->values[bv].n_uses > 1 ? cle_fanout(g, c1, bv, r, err) : QP_OK;
        if (in != 0) return QP_OK;
    }
    const struct qp_node *act = NULL;
    if (!qp_node_is(&g->nodes[n], "Conv")) {
        act = &g->nodes[n];
        if (!one_output(g, act)) return QP_OK;
        int next = single_reader(g, act->outputs[0], &in);
        if (next < 0 || in != 0 || !qp_node_is(&g->nodes[next], "Conv")) return QP_OK;
        char why[160];
        if (!homogeneous(g, act, why, sizeof why))
            return add_skip(r, "cle", c1->name, err, "'%s' (%s): %s", act->name, act->op_type, why);
        if (qp_node_is(act, "PRelu")) {
            const struct qp_tensor *sl = const_tensor(g, input_of(act, 1));
            if (!sl)
                return add_skip(r, "cle", c1->name, err,
                                "'%s' (PRelu) has a slope that is not a constant", act->name);
        }
        n = next;
    }
    const struct qp_node *c2 = &g->nodes[n];
    if (!usable_conv(g, c2))
        return add_skip(r, "cle", c1->name, err,
                        "'%s' (Conv) after it has no float constant weight or bias", c2->name);
    const struct qp_tensor *w2 = float_const(g, c2->inputs[1]);
    int64_t groups = attr_int(c2, "group", 1);
    if (groups < 1 || w2->dims[1] * groups != c || w2->dims[0] % groups != 0)
        return add_skip(r, "cle", c1->name, err,
                        "'%s' (Conv) reads %lld channels in %lld groups, '%s' writes %lld",
                        c2->name, (long long)(w2->dims[1] * groups), (long long)groups, c1->name,
                        (long long)c);
    if (s->n_pairs == s->cap_pairs) {
        size_t cap = s->cap_pairs ? 2 * s->cap_pairs : 16;
        struct cle_pair *p = qp_realloc_n(s->pairs, cap, sizeof *p);
        if (!p) return nomem(err);
        s->pairs = p;
        s->cap_pairs = cap;
    }
    struct cle_pair *p = &s->pairs[s->n_pairs];
    *p = (struct cle_pair){.conv1 = i, .bn = bn, .conv2 = n, .c = c, .groups2 = groups};
    if (!(p->s = qp_malloc_n((size_t)c, sizeof *p->s))) return nomem(err);
    for (int64_t k = 0; k < c; k++)
        p->s[k] = 1.0f;
    s->n_pairs++;
    if ((idx[0] = work_of(s, g, i, 1)) < 0 || (idx[1] = work_of(s, g, n, 1)) < 0 ||
        (bn >= 0 && (idx[2] = work_of(s, g, bn, 1)) < 0))
        return nomem(err);
    if (bn >= 0) {
        p->bn_var = float_const(g, g->nodes[bn].inputs[4]);
        const struct qp_attr *e = qp_node_attr(&g->nodes[bn], "epsilon");
        p->eps = e && e->type == QP_ATTR_FLOAT ? e->f : 1e-5f;
    }
    return QP_OK;
}

/* One CLE pass over pair p (working copies): returns the largest |log s_c|. */
static double cle_pass(struct cle_pair *p, float *r1, float *r2) {
    const struct qp_tensor *t1 = p->w1->t, *t2 = p->w2->t;
    int64_t c = p->c, k1 = (int64_t)t1->numel / c;
    int64_t m = t2->dims[0], cg = t2->dims[1], mg = m / p->groups2;
    int64_t inner = (int64_t)t2->numel / (m * cg);
    for (int64_t k = 0; k < c; k++) {
        float a = 0.0f;
        for (int64_t e = 0; e < k1; e++)
            a = fmaxf(a, fabsf(p->w1->x[k * k1 + e]));
        if (p->bn >= 0) {
            float var;
            memcpy(&var, (const unsigned char *)p->bn_var->data + k * 4, 4);
            a *= fabsf(p->bn_scale->x[k]) / sqrtf(var + p->eps);
        }
        r1[k] = a;
        r2[k] = 0.0f;
    }
    for (int64_t o = 0; o < m; o++)
        for (int64_t l = 0; l < cg; l++) {
            int64_t k = (o / mg) * cg + l;
            const float *x = p->w2->x + (o * cg + l) * inner;
            for (int64_t e = 0; e < inner; e++)
                r2[k] = fmaxf(r2[k], fabsf(x[e]));
        }
    double change = 0.0;
    for (int64_t k = 0; k < c; k++) {
        double sc = 1.0;
        if (r1[k] > 0 && r2[k] > 0 && isfinite(r1[k]) && isfinite(r2[k]))
            sc = sqrt((double)r1[k] / r2[k]);
        double acc = (double)p->s[k] * sc;
        if (acc > EQ_SCALE_CAP) acc = EQ_SCALE_CAP;
        if (acc < 1.0 / EQ_SCALE_CAP) acc = 1.0 / EQ_SCALE_CAP;
        sc = acc / p->s[k];
        r1[k] = (float)sc;
        p->s[k] = (float)acc;
        if (fabs(log(sc)) > change) change = fabs(log(sc));
    }
    if (p->bn >= 0)
        for (int64_t k = 0; k < c; k++)
            p->bn_scale->x[k] /= r1[k];
    else
        for (int64_t k = 0; k < c; k++)
            for (int64_t e = 0; e < k1; e++)
                p->w1->x[k * k1 + e] /= r1[k];
    for (int64_t o = 0; o < m; o++)
        for (int64_t l = 0; l < cg; l++) {
            float sc = r1[(o / mg) * cg + l];
            float *x = p->w2->x + (o * cg + l) * inner;
            for (int64_t e = 0; e < inner; e++)
                x[e] *= sc;
        }
    return change;
}

static enum qp_status cle_plan(const struct qp_graph *g, const struct qp_equalize_options *o,
                               struct qp_equalize_plan *plan, struct qp_equalize_report *r,
                               struct qp_error *err) {
    struct cle_state s = {0};
    long *idx = NULL;
    float *r1 = NULL, *r2 = NULL;
    enum qp_status st = QP_OK;
    size_t cap_idx = 0;
    for (size_t k = 0; k < g->n_topo && st == QP_OK; k++) {
        if (!qp_node_is(&g->nodes[g->topo[k]], "Conv")) continue;
        if (s.n_pairs + 1 > cap_idx) {
            size_t cap = cap_idx ? 2 * cap_idx : 16;
            long *ni = qp_realloc_n(idx, cap * 3, sizeof *ni);
            if (!ni) {
                st = nomem(err);
                break;
            }
            idx = ni;
            cap_idx = cap;
        }
        st = cle_find(&s, g, g->topo[k], r, idx + 3 * s.n_pairs, err);
    }
    int64_t cmax = 1;
    for (size_t i = 0; st == QP_OK && i < s.n_pairs; i++) {
        struct cle_pair *p = &s.pairs[i];
        p->w1 = &s.works[idx[3 * i]];
        p->w2 = &s.works[idx[3 * i + 1]];
        p->bn_scale = p->bn >= 0 ? &s.works[idx[3 * i + 2]] : NULL;
        if (p->c > cmax) cmax = p->c;
    }
    if (st == QP_OK && s.n_pairs &&
        (!(r1 = qp_malloc_n((size_t)cmax, sizeof *r1)) ||
         !(r2 = qp_malloc_n((size_t)cmax, sizeof *r2))))
        st = nomem(err);
    for (int pass = 0; st == QP_OK && s.n_pairs && pass < o->cle_passes; pass++) {
        double change = 0.0;
        for (size_t i = 0; i < s.n_pairs; i++)
            change = fmax(change, cle_pass(&s.pairs[i], r1, r2));
        r->cle_passes = pass + 1;
        r->cle_last_change = change;
        if (change < 1e-4) break;
    }
    for (size_t i = 0; st == QP_OK && i < s.n_pairs; i++) {
        const struct cle_pair *p = &s.pairs[i];
        const struct qp_node *c1 = &g->nodes[p->conv1], *c2 = &g->nodes[p->conv2];
        size_t c = (size_t)p->c;
        if (p->bn >= 0) {
            const struct qp_node *bn = &g->nodes[p->bn];
            if ((st = add_op(plan, bn, 1, EQ_AXIS, 0, 1, 1, p->s, c, err)) == QP_OK)
                st = add_op(plan, bn, 2, EQ_AXIS, 0, 1, 1, p->s, c, err);
        } else {
            st = add_op(plan, c1, 1, EQ_AXIS, 0, 1, 1, p->s, c, err);
            if (st == QP_OK && input_of(c1, 2) >= 0)
                st = add_op(plan, c1, 2, EQ_AXIS, 0, 1, 1, p->s, c, err);
        }
        if (st == QP_OK) st = add_op(plan, c2, 1, EQ_CONV_IN, 0, p->groups2, 0, p->s, c, err);
        if (st == QP_OK) r->n_cle_pairs++;
    }
    free(r1);
    free(r2);
    free(idx);
    cle_state_release(&s);
    return st;
}

/* ---- SmoothQuant -------------------------------------------------------------------------- */

struct sq_slot {
    int node, input, axis;
};

struct sq_cand {
    int first;                  /* LayerNormalization or the decomposed form's Div (for messages) */
    int y;                      /* the normalized output value */
    struct sq_slot gamma, beta; /* beta.node -1: none */
    struct sq_slot *w;          /* consumers' weights */
    int n_w;
    int64_t c;
    float *xmax;
};

/* gamma / beta: a float constant of C values along the last axis (every other dim 1). */
static int channel_vector(const struct qp_graph *g, int v, int64_t *c) {
    const struct qp_tensor *t = float_const(g, v);
    if (!t || t->rank < 1) return 0;
    for (int d = 0; d + 1 < t->rank; d++)
        if (t->dims[d] != 1) return 0;
    if (*c > 0 && t->dims[t->rank - 1] != *c) return 0;
    *c = t->dims[t->rank - 1];
    return *c > 0;
}

static int produced_by(const struct qp_graph *g, int v, const char *op) {
    int p = v >= 0 ? g->values[v].producer : -1;
    return p >= 0 && !g->nodes[p].dead && qp_node_is(&g->nodes[p], op) ? p : -1;
}

/* The constant input of a two-input node whose other input is `v` (its slot in *slot_out). */
static int other_const(const struct qp_graph *g, const struct qp_node *n, int v, int *slot_out) {
    if (n->n_inputs != 2) return -1;
    int k = n->inputs[0] == v ? 1 : n->inputs[1] == v ? 0 : -1;
    if (k < 0 || !float_const(g, n->inputs[k])) return -1;
    *slot_out = k;
    return n->inputs[k];
}

/* Recognizes the LN at node i: LayerNormalization, or Div(Sub(x, ReduceMean(x)), Sqrt(..)) ->
 * Mul(gamma) [-> Add(beta)]. 1 with *c filled, 0 when node i is not one. */
static int sq_match(const struct qp_graph *g, int i, struct sq_cand *c) {
    const struct qp_node *n = &g->nodes[i];
    memset(c, 0, sizeof *c);
    c->first = i;
    c->beta.node = -1;
    if (qp_node_is(n, "LayerNormalization")) {
        if (!one_output(g, n) || !channel_vector(g, input_of(n, 1), &c->c)) return 0;
        c->gamma = (struct sq_slot){i, 1, -1};
        if (input_of(n, 2) >= 0) {
            if (!channel_vector(g, n->inputs[2], &c->c)) return 0;
            c->beta = (struct sq_slot){i, 2, -1};
        }
        c->y = n->outputs[0];
        return 1;
    }
    if (!qp_node_is(n, "Div") || n->n_inputs != 2 || !one_output(g, n)) return 0;
    int sub = produced_by(g, n->inputs[0], "Sub");
    if (sub < 0 || produced_by(g, n->inputs[1], "Sqrt") < 0 ||
        produced_by(g, input_of(&g->nodes[sub], 1), "ReduceMean") < 0)
        return 0;
    int in = 0, mul = single_reader(g, n->outputs[0], &in);
    int slot = 0;
    if (mul < 0 || !qp_node_is(&g->nodes[mul], "Mul") || !one_output(g, &g->nodes[mul]) ||
        other_const(g, &g->nodes[mul], n->outputs[0], &slot) < 0 ||
        !channel_vector(g, g->nodes[mul].inputs[slot], &c->c))
        return 0;
    c->gamma = (struct sq_slot){mul, slot, -1};
    c->y = g->nodes[mul].outputs[0];
    int add = single_reader(g, c->y, &in);
    if (add >= 0 && qp_node_is(&g->nodes[add], "Add") && one_output(g, &g->nodes[add]) &&
        other_const(g, &g->nodes[add], c->y, &slot) >= 0 &&
        channel_vector(g, g->nodes[add].inputs[slot], &c->c)) {
        c->beta = (struct sq_slot){add, slot, -1};
        c->y = g->nodes[add].outputs[0];
    }
    return 1;
}

/* Fills c->w with the consumers' weight slots; 0 with `why` when a consumer is not a MatMul /
 * Gemm with a constant weight reading the LN output on its contracted axis. */
static int sq_consumers(const struct qp_graph *g, struct sq_cand *c, char *why, size_t len) {
    const struct qp_value *y = &g->values[c->y];
    if (y->is_graph_output) {
        snprintf(why, len, "its output '%s' is a graph output", y->name);
        return 0;
    }
    if (!y->n_uses) {
        snprintf(why, len, "its output '%s' is not read", y->name);
        return 0;
    }
    if (!(c->w = calloc(y->n_uses, sizeof *c->w))) return -1;
    for (size_t u = 0; u < y->n_uses; u++) {
        const struct qp_node *n = &g->nodes[y->uses[u].node];
        /* Shape and Size read only the dims, which the scale leaves alone. */
        if (qp_node_is(n, "Shape") || qp_node_is(n, "Size")) continue;
        const struct qp_tensor *w = float_const(g, input_of(n, 1));
        int axis = -1;
        if (y->uses[u].input == 0 && w && qp_node_is(n, "MatMul") && w->rank >= 2)
            axis = w->rank - 2;
        else if (y->uses[u].input == 0 && w && qp_node_is(n, "Gemm") && w->rank == 2 &&
                 !attr_int(n, "transA", 0))
            axis = attr_int(n, "transB", 0) ? 1 : 0;
        if (axis < 0) {
            snprintf(why, len,
                     "its output '%s' also feeds '%s' (%s) input %d, not a MatMul/Gemm with a "
                     "constant weight: the scale could not be folded there",
                     y->name, n->name, n->op_type, y->uses[u].input);
            return 0;
        }
        if (w->dims[axis] != c->c) {
            snprintf(why, len, "'%s' (%s) contracts %lld channels, the LN has %lld", n->name,
                     n->op_type, (long long)w->dims[axis], (long long)c->c);
            return 0;
        }
        c->w[c->n_w++] = (struct sq_slot){y->uses[u].node, 1, axis};
    }
    if (!c->n_w) {
        snprintf(why, len, "its output '%s' feeds no MatMul/Gemm", y->name);
        return 0;
    }
    return 1;
}

struct sq_observe {
    struct sq_cand *cands;
    size_t n;
    const struct qp_graph *g;
};

static int sq_observer(const char *tensor, const char *node, const struct qp_array *value,
                       void *user) {
    (void)node;
    struct sq_observe *o = user;
    for (size_t i = 0; i < o->n; i++) {
        struct sq_cand *c = &o->cands[i];
        if (strcmp(o->g->values[c->y].name, tensor) != 0) continue;
        if (value->dtype != QP_DTYPE_FLOAT || value->rank < 1 ||
            value->dims[value->rank - 1] != c->c)
            return 1;
        const float *x = value->data;
        size_t n = value->nbytes / 4, cc = (size_t)c->c;
        for (size_t k = 0; k < n; k++) {
            float a = fabsf(x[k]);
            if (a > c->xmax[k % cc] && isfinite(a)) c->xmax[k % cc] = a;
        }
    }
    return 0;
}

/* Runs `model` over every batch of `data`, with the observer collecting each candidate's
 * per-channel max |x|. */
static enum qp_status sq_observe(const struct qp_model *model, struct qp_provider *data,
                                 const struct qp_equalize_options *o, struct sq_observe *ob,
                                 struct qp_error *err) {
    const char **names = qp_malloc_n(ob->n, sizeof *names);
    if (!names) return nomem(err);
    for (size_t i = 0; i < ob->n; i++)
        names[i] = ob->g->values[ob->cands[i].y].name;
    struct qp_session *s = NULL;
    struct qp_session_options so = {.n_threads = o->n_threads, .lazy_plan = 1};
    size_t n_in = qp_provider_n_inputs(data), map[EQ_MAX_INPUTS], ns = 0;
    struct qp_shape shapes[EQ_MAX_INPUTS];
    struct qp_array feed[EQ_MAX_INPUTS];
    enum qp_status st = QP_OK;
    if (n_in > EQ_MAX_INPUTS)
        st = qp_error_set(err, QP_ERR_UNSUPPORTED, "equalize: more than %d data inputs",
                          EQ_MAX_INPUTS);
    if (st == QP_OK) st = qp_provider_reset(data, err);
    for (;;) {
        const struct qp_array *batch = NULL;
        int end = 0;
        if (st != QP_OK || (st = qp_provider_next(data, &batch, &end, err)) != QP_OK || end) break;
        if (!s) {
            qp_provider_shapes(data, batch, shapes);
            if ((st = qp_session_create(model, &so, n_in, shapes, &s, err)) != QP_OK ||
                (st = qp_session_set_observed(s, ob->n, names, err)) != QP_OK ||
                (st = qp_provider_map_inputs(data, s, "equalize", map, err)) != QP_OK)
                break;
            qp_session_set_observer(s, sq_observer, ob);
            ns = qp_session_n_inputs(s);
            if (ns > EQ_MAX_INPUTS) {
                st = qp_error_set(err, QP_ERR_UNSUPPORTED, "equalize: more than %d model inputs",
                                  EQ_MAX_INPUTS);
                break;
            }
        }
        for (size_t i = 0; i < ns; i++)
            feed[i] = batch[map[i]];
        if ((st = qp_session_run(s, ns, feed, err)) != QP_OK) {
            if (st == QP_ERR_USAGE)
                qp_error_set(err, QP_ERR_BAD_INPUT,
                             "equalize: a LayerNorm output is not float32 with its channels on "
                             "the last axis in the engine's run");
            break;
        }
    }
    if (st == QP_OK && !s)
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "equalize: the calibration data has no batches");
    if (st == QP_OK) st = qp_provider_reset(data, err);
    qp_session_free(s);
    free(names);
    return st;
}

static enum qp_status sq_plan(const struct qp_model *model, struct qp_provider *data,
                              const struct qp_equalize_options *o, struct qp_equalize_plan *plan,
                              struct qp_equalize_report *r, struct qp_error *err) {
    const struct qp_graph *g = model->graph;
    struct sq_cand *cands = calloc(g->n_topo ? g->n_topo : 1, sizeof *cands);
    size_t n = 0;
    enum qp_status st = cands ? QP_OK : nomem(err);
    for (size_t k = 0; st == QP_OK && k < g->n_topo; k++) {
        struct sq_cand c;
        if (!sq_match(g, g->topo[k], &c)) continue;
        char why[200];
        int ok = sq_consumers(g, &c, why, sizeof why);
        if (ok < 0 || (ok && !(c.xmax = calloc((size_t)c.c, sizeof *c.xmax)))) {
            free(c.w);
            st = nomem(err);
            break;
        }
        if (ok) {
            cands[n++] = c;
        } else {
            const struct qp_node *f = &g->nodes[c.first];
            free(c.w);
            st = add_skip(r, "smoothquant", f->name, err, "%s", why);
        }
    }
    if (st == QP_OK && n) {
        struct sq_observe ob = {.cands = cands, .n = n, .g = g};
        st = sq_observe(model, data, o, &ob, err);
    }
    float *s = NULL;
    for (size_t i = 0; st == QP_OK && i < n; i++) {
        struct sq_cand *c = &cands[i];
        float *ns = qp_realloc_n(s, (size_t)c->c, sizeof *ns);
        if (!ns) {
            st = nomem(err);
            break;
        }
        s = ns;
        for (int64_t j = 0; j < c->c; j++) {
            double wmax = 0.0;
            for (int u = 0; u < c->n_w; u++) {
                const struct qp_tensor *w = float_const(g, g->nodes[c->w[u].node].inputs[1]);
                int64_t outer = 1, len = w->dims[c->w[u].axis], inner = 1;
                for (int d = 0; d < w->rank; d++)
                    if (d < c->w[u].axis)
                        outer *= w->dims[d];
                    else if (d > c->w[u].axis)
                        inner *= w->dims[d];
                const float *x = w->data;
                for (int64_t a = 0; a < outer; a++)
                    for (int64_t e = 0; e < inner; e++)
                        wmax = fmax(wmax, fabsf(x[(a * len + j) * inner + e]));
            }
            double sc = 1.0, xm = c->xmax[j];
            if (xm > 0 && wmax > 0 && isfinite(wmax))
                sc = pow(xm, o->alpha) / pow(wmax, 1.0 - o->alpha);
            if (!(sc > 1.0 / EQ_SCALE_CAP)) sc = 1.0 / EQ_SCALE_CAP;
            if (sc > EQ_SCALE_CAP) sc = EQ_SCALE_CAP;
            s[j] = (float)sc;
        }
        size_t cc = (size_t)c->c;
        st = add_op(plan, &g->nodes[c->gamma.node], c->gamma.input, EQ_AXIS, -1, 1, 1, s, cc, err);
        if (st == QP_OK && c->beta.node >= 0)
            st =
                add_op(plan, &g->nodes[c->beta.node], c->beta.input, EQ_AXIS, -1, 1, 1, s, cc, err);
        for (int u = 0; st == QP_OK && u < c->n_w; u++)
            st = add_op(plan, &g->nodes[c->w[u].node], 1, EQ_AXIS, c->w[u].axis, 1, 0, s, cc, err);
        if (st == QP_OK) r->n_smoothquant_pairs++;
    }
    free(s);
    for (size_t i = 0; i < n; i++) {
        free(cands[i].w);
        free(cands[i].xmax);
    }
    free(cands);
    return st;
}

enum qp_status qp_equalize_plan(const struct qp_model *model, struct qp_provider *data,
                                const struct qp_equalize_options *o,
                                struct qp_equalize_plan **plan_out,
                                struct qp_equalize_report **report_out, struct qp_error *err) {
    if (!model || !o || !plan_out)
        return qp_error_set(err, QP_ERR_USAGE, "equalize: no model, options or plan");
    if (o->methods & ~(unsigned)QP_EQUALIZE_ALL)
        return qp_error_set(err, QP_ERR_USAGE, "equalize: unknown method bits 0x%x", o->methods);
    if (!(o->alpha >= 0.0 && o->alpha <= 1.0))
        return qp_error_set(err, QP_ERR_USAGE, "equalize: smoothquant alpha %g is not in [0, 1]",
                            o->alpha);
    if ((o->methods & QP_EQUALIZE_SMOOTHQUANT) && !data)
        return qp_error_set(err, QP_ERR_USAGE,
                            "equalize: smoothquant needs calibration data for the activation "
                            "ranges");
    if (o->cle_passes < 1)
        return qp_error_set(err, QP_ERR_USAGE, "equalize: %d CLE passes", o->cle_passes);
    struct qp_equalize_plan *plan = calloc(1, sizeof *plan);
    struct qp_equalize_report *r = calloc(1, sizeof *r);
    enum qp_status st = plan && r ? QP_OK : nomem(err);
    if (st == QP_OK && (o->methods & QP_EQUALIZE_CLE)) st = cle_plan(model->graph, o, plan, r, err);
    if (st == QP_OK && (o->methods & QP_EQUALIZE_SMOOTHQUANT))
        st = sq_plan(model, data, o, plan, r, err);
    if (st != QP_OK) {
        qp_equalize_plan_free(plan);
        qp_equalize_report_free(r);
        return st;
    }
    *plan_out = plan;
    if (report_out)
        *report_out = r;
    else
        qp_equalize_report_free(r);
    return QP_OK;
}

/* ---- apply -------------------------------------------------------------------------------- */

/* Buffers this apply call made (rescaled in place by later ops on the same tensor). */
struct mine {
    const void **p;
    size_t n, cap;
};

static int is_mine(const struct mine *m, const void *p) {
    for (size_t i = 0; i < m->n; i++)
        if (m->p[i] == p) return 1;
    return 0;
}

/* A writable copy of t's bytes owned by the model (and remembered in `mine`). */
static enum qp_status own_bytes(struct qp_model *model, const struct qp_tensor *t, float **out,
                                struct mine *mine, struct qp_error *err) {
    if (mine->n == mine->cap) {
        size_t cap = mine->cap ? 2 * mine->cap : 32;
        const void **p = qp_realloc_n(mine->p, cap, sizeof *p);
        if (!p) return nomem(err);
        mine->p = p;
        mine->cap = cap;
    }
    float *x = qp_malloc_n(t->nbytes ? t->nbytes : 1, 1);
    if (!x) return nomem(err);
    memcpy(x, t->data, t->nbytes);
    enum qp_status st = qp_model_own(model, x, err);
    if (st != QP_OK) return st;
    mine->p[mine->n++] = x;
    *out = x;
    return QP_OK;
}

/* 1 when value v is read by something other than node `node`. */
static int shared(const struct qp_graph *g, int v, int node) {
    const struct qp_value *val = &g->values[v];
    if (val->is_graph_output) return 1;
    for (size_t u = 0; u < val->n_uses; u++)
        if (val->uses[u].node != node && !g->nodes[val->uses[u].node].dead) return 1;
    return 0;
}

static enum qp_status apply_op(const struct eq_op *op, struct qp_model *m, struct mine *mine,
                               struct qp_error *err) {
    struct qp_graph *g = m->graph;
    int node = qp_graph_find_node(g, op->node);
    if (node < 0 || strcmp(g->nodes[node].op_type, op->op_type) != 0)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "equalize: the model has no %s node '%s' (not the model planned on)",
                            op->op_type, op->node);
    int v = input_of(&g->nodes[node], op->input);
    struct qp_tensor *t = v >= 0 ? const_tensor(g, v) : NULL;
    if (!t || !float_const(g, v))
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "equalize: node '%s' (%s) input %d is not a float32 constant here",
                            op->node, op->op_type, op->input);
    int axis = op->kind == EQ_AXIS ? (op->axis < 0 ? t->rank + op->axis : op->axis) : 1;
    int64_t len = axis >= 0 && axis < t->rank ? t->dims[axis] : -1;
    if (op->kind == EQ_CONV_IN) len *= op->groups;
    if (len != (int64_t)op->n || (op->kind == EQ_CONV_IN && t->dims[0] % op->groups))
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "equalize: node '%s' (%s) input %d '%s' has another shape than the "
                            "plan's (%zu channels)",
                            op->node, op->op_type, op->input, g->values[v].name, op->n);
    float *x = NULL;
    enum qp_status st = QP_OK;
    if (shared(g, v, node)) {
        /* The other readers keep the original: this node gets its own copy. */
        const char *name = qp_graph_unique_value_name(g, g->values[v].name);
        if (!name) return nomem(err);
        if ((st = own_bytes(m, t, &x, mine, err)) != QP_OK) return st;
        struct qp_tensor c = *t;
        c.name = name;
        c.data = x;
        c.origin = NULL;
        c.external_location = NULL;
        c.doc_string = NULL;
        int nv = -1;
        if ((st = qp_graph_add_initializer(g, &c, &nv, err)) != QP_OK ||
            (st = qp_graph_set_input(g, node, op->input, nv, err)) != QP_OK)
            return st;
        g->values[nv].dtype = QP_DTYPE_FLOAT;
    } else if (is_mine(mine, t->data)) {
        x = (float *)t->data;
    } else {
        if ((st = own_bytes(m, t, &x, mine, err)) != QP_OK) return st;
        t->data = x;
        t->origin = NULL;
        t->external_location = NULL;
    }
    if (op->kind == EQ_AXIS) {
        int64_t outer = 1, inner = 1;
        for (int d = 0; d < t->rank; d++)
            if (d < axis)
                outer *= t->dims[d];
            else if (d > axis)
                inner *= t->dims[d];
        for (int64_t a = 0; a < outer; a++)
            for (int64_t k = 0; k < len; k++) {
                float f = op->f[k], *p = x + (a * len + k) * inner;
                for (int64_t e = 0; e < inner; e++)
                    p[e] = op->divide ? p[e] / f : p[e] * f;
            }
    } else {
        int64_t mo = t->dims[0], cg = t->dims[1], mg = mo / op->groups;
        int64_t inner = (int64_t)t->numel / (mo * cg);
        for (int64_t o = 0; o < mo; o++)
            for (int64_t l = 0; l < cg; l++) {
                float f = op->f[(o / mg) * cg + l], *p = x + (o * cg + l) * inner;
                for (int64_t e = 0; e < inner; e++)
                    p[e] = op->divide ? p[e] / f : p[e] * f;
            }
    }
    return QP_OK;
}

enum qp_status qp_equalize_apply(const struct qp_equalize_plan *plan, struct qp_model *m,
                                 struct qp_error *err) {
    if (!plan || !m) return qp_error_set(err, QP_ERR_USAGE, "equalize: no plan or model");
    struct mine mine = {0};
    enum qp_status st = QP_OK;
    for (size_t i = 0; st == QP_OK && i < plan->n_ops; i++)
        st = apply_op(&plan->ops[i], m, &mine, err);
    free(mine.p);
    return st;
}

enum qp_status qp_equalize_changed(const struct qp_equalize_plan *plan, const struct qp_graph *g,
                                   unsigned char *changed, struct qp_error *err) {
    if (!plan || !g || !changed)
        return qp_error_set(err, QP_ERR_USAGE, "equalize: no plan, graph or marks");
    memset(changed, 0, g->n_values);
    unsigned char *role = calloc(g->n_nodes ? g->n_nodes : 1, 1); /* 1 divides, 2 multiplies */
    if (!role) return nomem(err);
    for (size_t i = 0; i < plan->n_ops; i++) {
        int ni = qp_graph_find_node(g, plan->ops[i].node);
        if (ni < 0) {
            free(role);
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "equalize: node '%s' of the plan is not in the graph",
                                plan->ops[i].node);
        }
        role[ni] |= plan->ops[i].divide ? 1 : 2;
    }
    for (size_t k = 0; k < g->n_topo; k++) {
        int ni = g->topo[k];
        const struct qp_node *n = &g->nodes[ni];
        int fed = 0; /* Shape and Size read dims only */
        for (int j = 0;
             j < n->n_inputs && !fed && !qp_node_is(n, "Shape") && !qp_node_is(n, "Size"); j++)
            fed = n->inputs[j] >= 0 && changed[n->inputs[j]];
        if (!(role[ni] & 1) && !(fed && !(role[ni] & 2))) continue;
        for (int j = 0; j < n->n_outputs; j++)
            if (n->outputs[j] >= 0) changed[n->outputs[j]] = 1;
    }
    free(role);
    return QP_OK;
}
