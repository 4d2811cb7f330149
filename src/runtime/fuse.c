/*
 * The fusion pass: a Conv and the nodes that only transform its output (BatchNormalization,
 * Mul/Add by constants, activations, one residual Add) become one oneDNN primitive.
 *
 * Two halves. rt_fuse_find (before a plan is built) picks the groups from the graph alone: a
 * chain starting at a Conv where every intermediate tensor has its only readers inside the group
 * and is neither a graph output, nor observed, nor the input of an edge overlay. It returns an
 * execution order in which each group's nodes sit together at the place of its last node (valid:
 * the intermediate tensors have no other readers, and every other input of a member precedes the
 * last member). The plan then prepares every node as usual, and after a group's last node
 * rt_fuse_apply replaces the steps of the group's longest prefix that passes what only planning
 * can check (dtypes, shapes, plan-time constant values) and that oneDNN takes by one step:
 * BatchNormalization and per-channel Mul/Add fold into the weights and bias (in double, rounded
 * once), the rest becomes post-operations of the fused Conv. The other members keep their steps;
 * with no such prefix the group stays unfused. The layout pass (layout.c) runs after it.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "kernels/dnnl_conv.h"
#include "kernels/dnnl_util.h"
#include "kernels/kernels.h"
#include "runtime/runtime.h"

#define RT_FUSE_MAX 16

enum role {
    R_CONV = 0,
    R_BN,       /* BatchNormalization (inference) */
    R_MUL_C,    /* Mul by a constant (aux: the constant's input index) */
    R_ADD_C,    /* Add of a constant */
    R_ADD_RES,  /* Add of a computed tensor of the output's shape (aux: its input index) */
    R_RELU,     /* Relu, LeakyRelu */
    R_CLIP,     /* Clip */
    R_SIGMOID,  /* Sigmoid */
    R_HSIGMOID, /* HardSigmoid */
    R_HSWISH,   /* HardSwish */
    R_HS_ADD3,  /* x * Clip(x + 3, 0, 6) / 6, as PaddleOCR exports HardSwish: the Add */
    R_HS_CLIP,  /*   the Clip */
    R_HS_MUL,   /*   the Mul (aux: the input index of x) */
    R_HS_DIV    /*   the Div */
};

void rt_fuse_free(struct rt_fuse *f) {
    free(f->order);
    free(f->grp);
    free(f->start);
    free(f->size);
    free(f->members);
    free(f->role);
    free(f->aux);
    memset(f, 0, sizeof *f);
}

int rt_fuse_disabled(void) {
    const char *e = getenv("QP_NO_FUSE");
    return e && e[0] && strcmp(e, "0") != 0;
}

struct finder {
    const struct qp_session *s;
    const struct qp_graph *g;
    const unsigned char *cst; /* per value: a plan-time constant (predicted from the graph) */
    const unsigned char *taken;
};

/* 1 when tensor v may disappear inside a group: no graph output, not observed, exactly
 * `n_uses` readers (checked by the caller to be members), no overlay on any of its edges. */
static int absorbable(const struct finder *f, int v, size_t n_uses) {
    const struct qp_session *s = f->s;
    const struct qp_value *val = &f->g->values[v];
    if (val->is_graph_output || val->n_uses != n_uses || val->kind != QP_VALUE_TENSOR) return 0;
    if (s->observer && (!s->observed || s->observed[v])) return 0;
    for (size_t u = 0; u < val->n_uses; u++) {
        const struct qp_node *c = &f->g->nodes[val->uses[u].node];
        if (c->dead || f->taken[val->uses[u].node]) return 0;
        if (rt_overlay_index(s->ov, s->n_ov, val->uses[u].node, val->uses[u].input) >= 0) return 0;
    }
    return 1;
}

/* The only reader of v (when it has one) and the input it reads v as. */
static int sole_use(const struct qp_graph *g, int v, int *input_out) {
    const struct qp_value *val = &g->values[v];
    if (val->n_uses != 1) return -1;
    *input_out = val->uses[0].input;
    return val->uses[0].node;
}

/* Output 0 of a node with exactly one output used. */
static int out0(const struct qp_node *n) {
    for (int i = 1; i < n->n_outputs; i++)
        if (n->outputs[i] >= 0) return -1;
    return n->n_outputs >= 1 ? n->outputs[0] : -1;
}

/* Other input of a 2-input node reading v at `input`. */
static int other_input(const struct qp_node *n, int input) {
    if (n->n_inputs != 2) return -1;
    return n->inputs[1 - input];
}

int rt_fuse_chain_op(const struct qp_node *n) {
    /* every op type grow() below gives a role, the decomposed HardSwish's Div included */
    static const char *const ops[] = {
        "BatchNormalization", "Mul",  "Add",     "Div",         "Relu",
        "LeakyRelu",          "Clip", "Sigmoid", "HardSigmoid", "HardSwish"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (qp_node_is(n, ops[i])) return 1;
    return 0;
}

/* Grows the chain from Conv node `head`; returns the member count (1: nothing to fuse). */
static int grow(const struct finder *f, int head, int *mem, int *role, int *aux) {
    const struct qp_graph *g = f->g;
    int n = 0, v = out0(&g->nodes[head]);
    mem[n] = head;
    role[n] = R_CONV;
    aux[n++] = -1;
    int have_sum = 0, have_post = 0;
    while (v >= 0 && n + 4 <= RT_FUSE_MAX) {
        const struct qp_value *val = &g->values[v];
        int in = -1, c = -1;
        if (val->n_uses == 2) {
            /* x * Clip(x + 3, 0, 6) / 6 */
            int ia = val->uses[0].node, ib = val->uses[1].node;
            if (!qp_node_is(&g->nodes[ia], "Add")) {
                int t = ia;
                ia = ib;
                ib = t;
            }
            const struct qp_node *na = &g->nodes[ia], *nm = &g->nodes[ib];
            if (ia == ib || !qp_node_is(na, "Add") || !qp_node_is(nm, "Mul") ||
                !absorbable(f, v, 2))
                break;
            int ai = na->inputs[0] == v ? 0 : 1, a3 = other_input(na, ai);
            int va = out0(na), ic, nc = va >= 0 ? sole_use(g, va, &ic) : -1;
            if (a3 < 0 || !f->cst[a3] || nc < 0 || !qp_node_is(&g->nodes[nc], "Clip") || ic != 0 ||
                !absorbable(f, va, 1))
                break;
            const struct qp_node *ncl = &g->nodes[nc];
            int vc = out0(ncl), im, nmm = vc >= 0 ? sole_use(g, vc, &im) : -1;
            if (nmm != ib || !absorbable(f, vc, 1)) break;
            for (int i = 1; i < ncl->n_inputs; i++)
                if (ncl->inputs[i] >= 0 && !f->cst[ncl->inputs[i]]) return n;
            int mx = nm->inputs[0] == v ? 0 : 1;
            if (nm->n_inputs != 2 || nm->inputs[mx] != v || nm->inputs[1 - mx] != vc) break;
            int vm = out0(nm), idv, nd = vm >= 0 ? sole_use(g, vm, &idv) : -1;
            if (nd < 0 || !qp_node_is(&g->nodes[nd], "Div") || idv != 0 || !absorbable(f, vm, 1))
                break;
            int d6 = g->nodes[nd].n_inputs == 2 ? g->nodes[nd].inputs[1] : -1;
            if (d6 < 0 || !f->cst[d6]) break;
            mem[n] = ia, role[n] = R_HS_ADD3, aux[n++] = 1 - ai;
            mem[n] = nc, role[n] = R_HS_CLIP, aux[n++] = -1;
            mem[n] = ib, role[n] = R_HS_MUL, aux[n++] = mx;
            mem[n] = nd, role[n] = R_HS_DIV, aux[n++] = 1;
            have_post = 1;
            v = out0(&g->nodes[nd]);
            continue;
        }
        c = sole_use(g, v, &in);
        if (c < 0 || !absorbable(f, v, 1)) break;
        const struct qp_node *nc = &g->nodes[c];
        int r = -1, a = -1;
        if (qp_node_is(nc, "BatchNormalization")) {
            int ok = !have_post && in == 0 && nc->n_inputs == 5 && out0(nc) >= 0;
            for (int i = 1; ok && i < 5; i++)
                ok = nc->inputs[i] >= 0 && f->cst[nc->inputs[i]];
            if (!ok) break;
            r = R_BN;
        } else if (qp_node_is(nc, "Mul") || qp_node_is(nc, "Add")) {
            int o = other_input(nc, in);
            if (o < 0) break;
            if (f->cst[o]) {
                r = qp_node_is(nc, "Mul") ? R_MUL_C : R_ADD_C;
            } else if (qp_node_is(nc, "Add") && !have_sum) {
                r = R_ADD_RES;
                have_sum = have_post = 1;
            } else {
                break;
            }
            a = 1 - in;
        } else if ((qp_node_is(nc, "Relu") || qp_node_is(nc, "LeakyRelu")) && in == 0) {
            r = R_RELU;
        } else if (qp_node_is(nc, "Clip") && in == 0) {
            int ok = 1;
            for (int i = 1; i < nc->n_inputs; i++)
                ok &= nc->inputs[i] < 0 || f->cst[nc->inputs[i]];
            if (!ok) break;
            r = R_CLIP;
        } else if (qp_node_is(nc, "Sigmoid") && in == 0) {
            r = R_SIGMOID;
        } else if (qp_node_is(nc, "HardSigmoid") && in == 0) {
            r = R_HSIGMOID;
        } else if (qp_node_is(nc, "HardSwish") && in == 0) {
            r = R_HSWISH;
        } else {
            break;
        }
        if (r != R_BN && r != R_MUL_C && r != R_ADD_C) have_post = 1;
        mem[n] = c, role[n] = r, aux[n++] = a;
        v = out0(nc);
    }
    return n;
}

enum qp_status rt_fuse_find(const struct qp_session *s, struct rt_fuse *out, struct qp_error *err) {
    const struct qp_graph *g = s->g;
    memset(out, 0, sizeof *out);
    if (rt_fuse_disabled() || s->no_fusion || !qp_dnnl_enabled() || s->parent || s->ifs ||
        g->n_topo == 0)
        return QP_OK;
    size_t nn = g->n_nodes, nv = g->n_values ? g->n_values : 1;
    unsigned char *cst = calloc(nv, 1), *taken = calloc(nn, 1);
    int *mem = malloc(RT_FUSE_MAX * sizeof *mem), *role = malloc(RT_FUSE_MAX * sizeof *role);
    int *aux = malloc(RT_FUSE_MAX * sizeof *aux);
    out->order = qp_malloc_n(g->n_topo, sizeof *out->order);
    out->grp = qp_malloc_n(nn, sizeof *out->grp);
    out->start = qp_malloc_n(nn, sizeof *out->start);
    out->size = calloc(nn, sizeof *out->size);
    out->members = qp_malloc_n(nn, sizeof *out->members);
    out->role = qp_malloc_n(nn, sizeof *out->role);
    out->aux = qp_malloc_n(nn, sizeof *out->aux);
    enum qp_status st = QP_OK;
    if (!cst || !taken || !mem || !role || !aux || !out->order || !out->grp || !out->start ||
        !out->size || !out->members || !out->role || !out->aux) {
        st = qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
        goto done;
    }
    /* Plan-time constants as the planner will find them: initializers, and outputs of nodes
     * whose inputs all are constants (Constant nodes included). */
    for (size_t v = 0; v < g->n_values; v++)
        cst[v] = g->values[v].initializer >= 0;
    for (size_t k = 0; k < g->n_topo; k++) {
        const struct qp_node *n = &g->nodes[g->topo[k]];
        int all = !qp_node_is(n, "If");
        for (int i = 0; all && i < n->n_inputs; i++)
            all = n->inputs[i] < 0 || cst[n->inputs[i]];
        for (int o = 0; all && o < n->n_outputs; o++)
            if (n->outputs[o] >= 0) cst[n->outputs[o]] = 1;
    }
    for (size_t i = 0; i < nn; i++)
        out->grp[i] = -1;
    struct finder f = {s, g, cst, taken};
    size_t n_mem = 0;
    for (size_t k = 0; k < g->n_topo; k++) {
        int h = g->topo[k];
        const struct qp_node *n = &g->nodes[h];
        if (taken[h] || !(qp_node_is(n, "Conv") || qp_node_is(n, "ConvTranspose")) ||
            n->n_inputs < 2 || n->inputs[0] < 0 || cst[n->inputs[0]] || n->inputs[1] < 0 ||
            !cst[n->inputs[1]] || (n->n_inputs > 2 && n->inputs[2] >= 0 && !cst[n->inputs[2]]) ||
            out0(n) < 0)
            continue;
        int m = grow(&f, h, mem, role, aux);
        /* A trailing piece of the decomposed HardSwish never ends a group (grow adds all four
         * or none); anything else may. */
        if (m < 2) continue;
        int gid = out->n_groups++;
        out->start[gid] = (int)n_mem;
        out->size[gid] = m;
        for (int i = 0; i < m; i++) {
            taken[mem[i]] = 1;
            out->grp[mem[i]] = gid;
            out->members[n_mem] = mem[i];
            out->role[n_mem] = role[i];
            out->aux[n_mem++] = aux[i];
        }
    }
    /* Execution order: members move to their tail's place. */
    size_t j = 0;
    for (size_t k = 0; k < g->n_topo; k++) {
        int ni = g->topo[k], gid = out->grp[ni];
        if (gid < 0) {
            out->order[j++] = ni;
            continue;
        }
        if (out->members[out->start[gid] + out->size[gid] - 1] != ni) continue;
        for (int i = 0; i < out->size[gid]; i++)
            out->order[j++] = out->members[out->start[gid] + i];
    }
done:
    free(cst);
    free(taken);
    free(mem);
    free(role);
    free(aux);
    if (st != QP_OK) rt_fuse_free(out);
    return st;
}

/* ---- applying a group to a plan ----------------------------------------------------------- */

/* Float32 constant's elements (NULL when t is not one). */
static const float *cfloat(const struct qp_kt *t) {
    return t && t->is_const && t->dtype == QP_DTYPE_FLOAT && t->data ? t->data : NULL;
}

/* The per-channel view of constant t against an output of rank `rank` with `m` channels on
 * axis 1: 1 (a scalar: every channel), m (one per channel), 0 (neither). */
static int64_t per_channel(const struct qp_kt *t, int rank, int64_t m) {
    if (!cfloat(t) || t->rank > rank) return 0;
    if (t->numel == 1) return 1;
    if (t->numel != (uint64_t)m) return 0;
    int ax = 1 - (rank - t->rank); /* position of axis 1 in t's (right-aligned) dims */
    if (ax < 0) return 0;
    for (int d = 0; d < t->rank; d++)
        if (d != ax && t->dims[d] != 1) return 0;
    return t->dims[ax] == m ? m : 0;
}

static int scalar_is(const struct qp_kt *t, float x) {
    const float *v = cfloat(t);
    return v && t->numel == 1 && v[0] == x;
}

static const struct qp_kernel fused_conv_kernel = {
    "", "Conv", 1, 21, QP_DT_F32, 0, QP_KF_DNNL_CONV, NULL, qp_k_dnnl_conv_run};
static const struct qp_kernel fused_convt_kernel = {"",
                                                    "ConvTranspose",
                                                    1,
                                                    21,
                                                    QP_DT_F32,
                                                    0,
                                                    QP_KF_DNNL_CONV | QP_KF_TRANSPOSED,
                                                    NULL,
                                                    qp_k_dnnl_conv_transpose_run};

/* ---- preparing a group's convolution once ------------------------------------------------ */

/* A group's Conv/ConvTranspose is prepared without primitive or weights (deferred): the fused
 * prepare makes them, and rt_fuse_settle the plain ones for the convolutions left unfused, so
 * each convolution's weights are reordered once and no unused primitive stays in the cache. */
static int deferrable(const struct rt_fuse *f, int node, const struct qp_kernel *kr,
                      const struct qp_kprep *pr) {
    return f->order && f->grp[node] >= 0 && f->members[f->start[f->grp[node]]] == node &&
           (kr->flags & QP_KF_DNNL_CONV) && pr->n_in >= 1 && pr->in[0] && !pr->in[0]->is_const;
}

enum qp_status rt_fuse_prepare(const struct rt_fuse *f, int node, const struct qp_kernel *kr,
                               struct qp_kprep *pr) {
    if (!deferrable(f, node, kr, pr)) return kr->prepare(pr);
    return qp_dnnl_conv_defer_prepare(pr, (kr->flags & QP_KF_TRANSPOSED) != 0);
}

enum qp_status rt_fuse_settle(const struct qp_session *s, struct rt_plan *p, struct qp_error *err) {
    for (size_t k = 0; k < p->n_steps; k++) {
        struct rt_step *st = &p->steps[k];
        /* Only the convolution rows' states are dnnl_conv states (the fused steps' kernels,
         * which have no prepare, are never deferred). */
        if (st->kind != RT_STEP_NODE || !st->k || !(st->k->flags & QP_KF_DNNL_CONV) ||
            !st->k->prepare || !qp_dnnl_conv_state_deferred(st->state))
            continue;
        const struct qp_node *n = &s->g->nodes[st->node];
        struct qp_kprep pr = {.node = n,
                              .opset = s->opsets[st->node],
                              .n_in = st->n_in,
                              .n_out = st->n_out,
                              .in = (const struct qp_kt *const *)st->in,
                              .out = st->out,
                              .err = err,
                              .missing_const = -1};
        enum qp_status rc = st->k->prepare(&pr);
        if (rc != QP_OK) {
            free(pr.state);
            return qp_error_prefix(err, "session: node '%s' (%s)", n->name ? n->name : "",
                                   n->op_type);
        }
        free(st->state);
        st->state = pr.state;
        st->scratch = (pr.scratch + 63) / 64 * 64;
        if (st->var) { /* bypass variants: the deferred state was the current one */
            st->var[st->cur_var].state = pr.state;
            st->var[st->cur_var].scratch = st->scratch;
        }
        if (st->scratch > p->scratch_bytes) p->scratch_bytes = st->scratch;
    }
    return QP_OK;
}

struct folder {
    int64_t m;
    double *mul, *add; /* y = mul * (conv + bias) + add, per channel */
    int folding;       /* still before the first post-operation */
    int n_post;
    struct qp_conv_post post[QP_CONV_MAX_POST];
    const struct qp_kt *res;
};

static int push_post(struct folder *fo, int kind, float alpha, float beta) {
    if (fo->n_post >= QP_CONV_MAX_POST) return 0;
    fo->post[fo->n_post++] = (struct qp_conv_post){kind, alpha, beta};
    fo->folding = 0;
    return 1;
}

/* Takes member step `st` (role r, aux a) into the folder; 0 when it cannot be fused. */
static int take(struct folder *fo, const struct qp_session *s, int node, const struct rt_step *st,
                int r, int a) {
    const struct qp_node *n = &s->g->nodes[node];
    const struct qp_kt *y = st->out[0];
    int rank = y->rank;
    switch (r) {
    case R_BN: {
        const float *sc = cfloat(st->in[1]), *b = cfloat(st->in[2]), *mean = cfloat(st->in[3]),
                    *var = cfloat(st->in[4]);
        if (!fo->folding || !sc || !b || !mean || !var) return 0;
        for (int i = 1; i < 5; i++)
            if (st->in[i]->numel != (uint64_t)fo->m) return 0;
        double eps = qp_kattr_float(n, "epsilon", 1e-5f);
        for (int64_t c = 0; c < fo->m; c++) {
            double k = (double)sc[c] / sqrt((double)var[c] + eps);
            fo->mul[c] *= k;
            fo->add[c] = (fo->add[c] - mean[c]) * k + b[c];
        }
        return 1;
    }
    case R_MUL_C:
    case R_ADD_C: {
        const struct qp_kt *t = st->in[a];
        int64_t pc = per_channel(t, rank, fo->m);
        const float *v = cfloat(t);
        if (!pc) return 0;
        if (fo->folding) {
            for (int64_t c = 0; c < fo->m; c++) {
                double x = v[pc == 1 ? 0 : c];
                if (r == R_MUL_C) {
                    fo->mul[c] *= x;
                    fo->add[c] *= x;
                } else {
                    fo->add[c] += x;
                }
            }
            return 1;
        }
        if (pc != 1) return 0;
        /* x * a + b as one linear post-op when an Add follows a Mul. */
        struct qp_conv_post *last = fo->n_post ? &fo->post[fo->n_post - 1] : NULL;
        if (r == R_ADD_C && last && last->kind == QP_CONV_POST_LINEAR && last->beta == 0) {
            last->beta = v[0];
            return 1;
        }
        return r == R_MUL_C ? push_post(fo, QP_CONV_POST_LINEAR, v[0], 0)
                            : push_post(fo, QP_CONV_POST_LINEAR, 1, v[0]);
    }
    case R_ADD_RES: {
        const struct qp_kt *t = st->in[a];
        if (fo->res || t->dtype != QP_DTYPE_FLOAT || t->rank != rank ||
            memcmp(t->dims, y->dims, sizeof(int64_t) * (size_t)rank) != 0)
            return 0;
        fo->res = t;
        return push_post(fo, QP_CONV_POST_SUM, 1, 0);
    }
    case R_RELU:
        return push_post(fo, QP_CONV_POST_RELU,
                         qp_node_is(n, "LeakyRelu") ? qp_kattr_float(n, "alpha", 0.01f) : 0.0f, 0);
    case R_CLIP: {
        float lo = -FLT_MAX, hi = FLT_MAX;
        if (s->opsets[node] < 11) {
            lo = qp_kattr_float(n, "min", lo);
            hi = qp_kattr_float(n, "max", hi);
        } else {
            for (int i = 1; i < st->n_in && i < 3; i++) {
                if (!st->in[i]) continue;
                const float *v = cfloat(st->in[i]);
                if (!v || st->in[i]->numel != 1) return 0;
                if (i == 1)
                    lo = v[0];
                else
                    hi = v[0];
            }
        }
        if (!(lo <= hi)) return 0;
        return push_post(fo, QP_CONV_POST_CLIP, lo, hi);
    }
    case R_SIGMOID:
        return push_post(fo, QP_CONV_POST_SIGMOID, 0, 0);
    case R_HSIGMOID:
        return push_post(fo, QP_CONV_POST_LINEAR, qp_kattr_float(n, "alpha", 0.2f),
                         qp_kattr_float(n, "beta", 0.5f)) &&
               push_post(fo, QP_CONV_POST_CLIP, 0, 1);
    case R_HSWISH:
        return push_post(fo, QP_CONV_POST_HARDSWISH, 0, 0);
    case R_HS_ADD3:
        return scalar_is(st->in[a], 3.0f);
    case R_HS_CLIP: {
        float lo = -FLT_MAX, hi = FLT_MAX;
        if (s->opsets[node] < 11) {
            lo = qp_kattr_float(n, "min", lo);
            hi = qp_kattr_float(n, "max", hi);
        } else {
            if (st->n_in < 3 || !scalar_is(st->in[1], 0.0f) || !scalar_is(st->in[2], 6.0f))
                return 0;
            lo = 0, hi = 6;
        }
        return lo == 0 && hi == 6;
    }
    case R_HS_MUL:
        return 1;
    case R_HS_DIV:
        return scalar_is(st->in[1], 6.0f) && push_post(fo, QP_CONV_POST_HARDSWISH, 0, 0);
    default:
        return 0;
    }
}

/* A member may end a fused group: not inside the decomposed HardSwish. */
static int can_end(int role) {
    return role != R_HS_ADD3 && role != R_HS_CLIP && role != R_HS_MUL;
}

/* Member i's step: a float32 node step of the Conv output's shape (hs: the Conv's step). */
static int member_ok(const struct rt_step *st, const struct rt_step *hs) {
    if (st->kind != RT_STEP_NODE || st->n_conv_in || st->n_conv_out || !st->out[0] ||
        st->out[0]->dtype != QP_DTYPE_FLOAT || st->val_out[0] != st->out[0])
        return 0;
    if (st == hs) return 1;
    if (st->out[0]->rank != hs->out[0]->rank ||
        memcmp(st->out[0]->dims, hs->out[0]->dims, sizeof(int64_t) * (size_t)hs->out[0]->rank))
        return 0;
    for (int j = 0; j < st->n_in; j++)
        if (st->in[j] && st->in[j]->dtype != QP_DTYPE_FLOAT) return 0;
    return 1;
}

/* ---- fused steps whose constant overlays switch per run ----------------------------------- */

struct rt_fuse_recipe {
    int len, transpose;
    int64_t group, m;
    int mem[RT_FUSE_MAX], role[RT_FUSE_MAX], aux[RT_FUSE_MAX];
    int n_in[RT_FUSE_MAX], in_off[RT_FUSE_MAX];
    struct qp_kt *out[RT_FUSE_MAX]; /* member outputs 0 (their shapes only) */
    struct qp_kt **in;              /* every member's inputs as planned, concatenated (in_off) */
};

void rt_fuse_recipe_free(struct rt_fuse_recipe *r) {
    if (!r) return;
    free(r->in);
    free(r);
}

/* Whether the value of member i's constant input `input` only feeds the folded weights and
 * bias, so that any value of it fuses into the same primitive: the Conv's weights and bias, a
 * BatchNormalization's parameters, a per-channel Mul/Add before the first post-operation. The
 * others (a Clip's bounds, the decomposed HardSwish's 3 and 6, a post-operation's scalar)
 * decide whether and how the group fuses, so their bypass flags stay baked. */
static int switchable(const int *role, int i, int input) {
    if (i == 0) return input == 1 || input == 2;
    int folding = 1;
    for (int k = 1; k < i; k++)
        if (role[k] != R_BN && role[k] != R_MUL_C && role[k] != R_ADD_C && role[k] != R_HS_ADD3 &&
            role[k] != R_HS_CLIP && role[k] != R_HS_MUL)
            folding = 0;
    return role[i] == R_BN || ((role[i] == R_MUL_C || role[i] == R_ADD_C) && folding);
}

/* The fused step's per-run input choices (*ovin_out, *n_out): the head's overlay on input 0
 * (fused input 0), the residual Add's overlay on the residual (fused input 3) and, when every
 * constant overlay of the members is switchable (at most RT_MAX_CONST_OVIN of them), those too
 * (is_const, `input` indexing the recipe's inputs), with the recipe to prepare variants
 * (*recipe_out) and the planned combination (*mask_out). Otherwise the constant overlays'
 * bypass flags are baked into the plan (*recipe_out NULL). */
static enum qp_status fused_ovin(struct rt_plan *p, const int *mem, const int *role, const int *aux,
                                 int len, int transpose, int64_t group, int64_t m,
                                 const int *node_step, const struct qp_kt *res,
                                 const struct qp_session *s, struct rt_ovin **ovin_out, int *n_out,
                                 struct rt_fuse_recipe **recipe_out, unsigned *mask_out,
                                 struct qp_error *err) {
    *ovin_out = NULL;
    *n_out = 0;
    *recipe_out = NULL;
    *mask_out = 0;
    int n = 0, n_const = 0, ok = 1, n_in = 0;
    for (int i = 0; i < len; i++) {
        const struct rt_step *ms = &p->steps[node_step[mem[i]]];
        n += ms->n_ovin;
        n_in += ms->n_in;
        for (int j = 0; j < ms->n_ovin; j++) {
            const struct rt_ovin *o = &ms->ovin[j];
            if (!o->is_const) continue;
            n_const++;
            ok &= switchable(role, i, o->input) && !(p->ov_baked[o->ov] & RT_OV_BYPASS_BAKED);
        }
    }
    if (!n) return QP_OK;
    ok &= n_const > 0 && n_const <= RT_MAX_CONST_OVIN;
    struct rt_ovin *ovin = calloc((size_t)n, sizeof *ovin);
    struct rt_fuse_recipe *r = ok ? calloc(1, sizeof *r) : NULL;
    if (r) r->in = qp_malloc_n((size_t)n_in, sizeof *r->in);
    if (!ovin || (ok && (!r || !r->in))) {
        free(ovin);
        rt_fuse_recipe_free(r);
        return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
    }
    if (r) {
        r->len = len;
        r->transpose = transpose;
        r->group = group;
        r->m = m;
        for (int i = 0, at = 0; i < len; i++) {
            const struct rt_step *ms = &p->steps[node_step[mem[i]]];
            r->mem[i] = mem[i];
            r->role[i] = role[i];
            r->aux[i] = aux[i];
            r->n_in[i] = ms->n_in;
            r->in_off[i] = at;
            r->out[i] = ms->out[0];
            memcpy(r->in + at, ms->in, (size_t)ms->n_in * sizeof *r->in);
            at += ms->n_in;
        }
    }
    int k = 0, c = 0;
    for (int i = 0; i < len; i++) {
        const struct rt_step *ms = &p->steps[node_step[mem[i]]];
        for (int j = 0; j < ms->n_ovin; j++) {
            const struct rt_ovin *o = &ms->ovin[j];
            if (o->is_const && r) {
                ovin[k++] = (struct rt_ovin){r->in_off[i] + o->input, o->ov, 1, o->orig, o->fq};
                if (!s->ov[o->ov].bypass) *mask_out |= 1u << c;
                c++;
            } else if (o->is_const) {
                p->ov_baked[o->ov] |= RT_OV_BYPASS_BAKED;
            } else if (i == 0 && o->input == 0) {
                ovin[k++] = (struct rt_ovin){0, o->ov, 0, o->orig, o->fq};
            } else if (i > 0 && res && o->fq == res) {
                ovin[k++] = (struct rt_ovin){3, o->ov, 0, o->orig, o->fq};
            }
        }
    }
    *ovin_out = ovin;
    *n_out = k;
    *recipe_out = r;
    return QP_OK;
}

/* w1 = w scaled per output channel by mul: Conv weights [M, C/group, k...] have channel m at
 * axis 0, ConvTranspose weights [C, M/group, k...] channel (c / (C/group)) * M/group + j at
 * (c, j). */
static void fold_weights(const struct qp_kt *w, float *w1, int64_t m, int transpose, int64_t group,
                         const double *mul) {
    const float *w0 = w->data;
    if (!transpose) {
        uint64_t per = w->numel / (uint64_t)m;
        for (int64_t c = 0; c < m; c++)
            for (uint64_t i = 0; i < per; i++)
                w1[(uint64_t)c * per + i] = (float)(w0[(uint64_t)c * per + i] * mul[c]);
        return;
    }
    int64_t cin = w->dims[0], mg = w->dims[1], cg = cin / group;
    uint64_t per = w->numel / (uint64_t)(cin * mg), at = 0;
    for (int64_t ci = 0; ci < cin; ci++)
        for (int64_t j = 0; j < mg; j++) {
            double k = mul[(ci / cg) * mg + j];
            for (uint64_t i = 0; i < per; i++, at++)
                w1[at] = (float)(w0[at] * k);
        }
}

/* Folds members 1..len-1 (steps ms[i]) into fo (reset first); 0 when one cannot be taken. */
static int fold_prefix(struct folder *fo, const struct qp_session *s,
                       const struct rt_step *const *ms, const int *mem, const int *role,
                       const int *aux, int len) {
    fo->folding = 1;
    fo->n_post = 0;
    fo->res = NULL;
    for (int64_t c = 0; c < fo->m; c++) {
        fo->mul[c] = 1;
        fo->add[c] = 0;
    }
    for (int i = 1; i < len; i++)
        if (!take(fo, s, mem[i], ms[i], role[i], aux[i])) return 0;
    return 1;
}

/* Whether folding made new weights (else the fused Conv takes the model's). */
static int folds(const struct folder *fo) {
    int fold = 0;
    for (int64_t c = 0; c < fo->m; c++)
        fold |= fo->mul[c] != 1 || fo->add[c] != 0;
    return fold;
}

/* b1 = the bias after folding (b: the Conv's bias, NULL for none). */
static void fold_bias(const struct folder *fo, const struct qp_kt *b, float *b1) {
    const float *b0 = b ? b->data : NULL;
    for (int64_t c = 0; c < fo->m; c++)
        b1[c] = (float)((b0 ? b0[c] : 0.0) * fo->mul[c] + fo->add[c]);
}

/* A constant overlay whose value decides what fuses bakes the flags of the whole group
 * (whatever part of it fuses now, another value may fuse another part). */
static void bake_group_flags(struct rt_plan *p, const int *mem, const int *role, int n_mem,
                             const int *node_step) {
    int baked = 0;
    for (int i = 0; i < n_mem; i++) {
        const struct rt_step *ms = &p->steps[node_step[mem[i]]];
        for (int j = 0; j < ms->n_ovin; j++)
            baked |= ms->ovin[j].is_const && !switchable(role, i, ms->ovin[j].input);
    }
    for (int i = 0; baked && i < n_mem; i++) {
        const struct rt_step *ms = &p->steps[node_step[mem[i]]];
        for (int j = 0; j < ms->n_ovin; j++)
            if (ms->ovin[j].is_const) p->ov_baked[ms->ovin[j].ov] |= RT_OV_BYPASS_BAKED;
    }
}

/* The group's Conv (or ConvTranspose) step, as fusion reads it. */
struct fuse_head {
    const struct qp_kt *x, *w, *b; /* b NULL without a bias */
    int transpose;
    int64_t group, m; /* m: output channels */
};

/* Whether head step hs (node `conv`) can start a fused step: on oneDNN, float, constant
 * weights (and bias) with m output channels. Fills *h when it can. */
static int head_fusable(const struct qp_graph *g, const struct rt_step *hs, int conv,
                        struct fuse_head *h) {
    if (!member_ok(hs, hs) ||
        !(qp_dnnl_conv_state_uses_dnnl(hs->state) || qp_dnnl_conv_state_deferred(hs->state)))
        return 0;
    /* Overlaid constants (weights, BatchNormalization parameters) are in[] as the bypass flags
     * are at plan time; other flags get variants of the fused step (fused_ovin). */
    const struct qp_kt *x = hs->in[0], *w = hs->in[1];
    const struct qp_kt *b = hs->n_in > 2 ? hs->in[2] : NULL;
    if (!cfloat(w) || (b && !cfloat(b)) || x->dtype != QP_DTYPE_FLOAT || w->rank < 3) return 0;
    int transpose = qp_node_is(&g->nodes[conv], "ConvTranspose");
    int64_t group = qp_kattr_int(&g->nodes[conv], "group", 1);
    /* Output channels: Conv weights are [M, C/group, k...], ConvTranspose's [C, M/group, k...]
     * (the geometry checked both against the input). */
    int64_t m = transpose ? w->dims[1] * group : w->dims[0];
    if (group <= 0 || m <= 0 || (transpose && w->dims[0] % group) || hs->out[0]->rank < 2 ||
        hs->out[0]->dims[1] != m)
        return 0;
    *h = (struct fuse_head){x, w, b, transpose, group, m};
    return 1;
}

/* The prefix that fuses: its length, the fused Conv's state (NULL: none fuses), the weights and
 * bias it reads and the tensor it writes. */
struct fuse_pick {
    int len;
    void *state;
    struct qp_kt *wf, *bf, *y;
    size_t scratch; /* the state's scratch bytes, unrounded */
};

/* A group's members as fuse_pick reads them. */
struct fuse_group {
    const int *mem, *role, *aux;
    int n_mem;
    const struct rt_step *ms[RT_FUSE_MAX];
};

/* Finds the longest prefix of the group that folds into fo and that oneDNN takes, trying
 * shorter ones in turn. Out of temps is no error: *pk stays without a state. */
static enum qp_status fuse_pick(const struct qp_session *s, struct rt_plan *p,
                                const struct fuse_head *h, const struct fuse_group *gr,
                                const int *node_step, struct folder *fo, struct fuse_pick *pk,
                                struct qp_error *err) {
    const struct qp_graph *g = s->g;
    const int *mem = gr->mem, *role = gr->role, *aux = gr->aux;
    const struct rt_step *const *ms = gr->ms;
    enum qp_status st;
    memset(pk, 0, sizeof *pk);
    /* The members that pass the checks, one by one. */
    int len = 1;
    while (len < gr->n_mem && member_ok(ms[len], ms[0]) &&
           fold_prefix(fo, s, ms, mem, role, aux, len + 1))
        len++;
    struct qp_kt *wt = NULL, *bt = NULL;
    for (; len >= 2; len--) {
        if (!can_end(role[len - 1]) || !fold_prefix(fo, s, ms, mem, role, aux, len)) continue;
        /* Folded weights and bias: plan-owned constants (the model's when nothing folds), two
         * temps per group at most whatever the retries, so groups never compete for them. */
        int fold = folds(fo);
        if (fold && !wt) {
            if (!(wt = rt_plan_temp(p))) return QP_OK; /* no room: stay unfused */
            *wt = *h->w;
            wt->is_const = 1;
            if ((st = rt_plan_own(p, wt->nbytes, &wt->data, err))) return st;
        }
        if ((fold || !h->b) && !bt) {
            int64_t bd[1] = {h->m};
            if (!(bt = rt_plan_temp(p))) return QP_OK;
            if ((st = qp_kt_set(bt, QP_DTYPE_FLOAT, 1, bd, err)) ||
                (st = rt_plan_own(p, bt->nbytes, &bt->data, err)))
                return st;
            bt->is_const = 1;
        }
        struct qp_kt *wf = fold ? wt : (struct qp_kt *)h->w;
        struct qp_kt *bf = fold || !h->b ? bt : (struct qp_kt *)h->b;
        if (fold) fold_weights(h->w, wf->data, h->m, h->transpose, h->group, fo->mul);
        if (fold || bf != h->b) fold_bias(fo, h->b, bf->data);
        /* The fused Conv. */
        struct qp_kt *y = p->steps[node_step[mem[len - 1]]].out[0];
        const struct qp_kt *pin[3] = {h->x, wf, bf};
        struct qp_kt *pout[1] = {y};
        struct qp_error e2 = {0};
        int conv = mem[0];
        struct qp_kprep pr = {.node = &g->nodes[conv],
                              .opset = s->opsets[conv],
                              .n_in = 3,
                              .n_out = 1,
                              .in = pin,
                              .out = pout,
                              .err = &e2,
                              .missing_const = -1};
        if (qp_dnnl_conv_fused_prepare(&pr, h->transpose, fo->n_post, fo->post) == QP_OK &&
            qp_dnnl_conv_state_uses_dnnl(pr.state)) {
            *pk = (struct fuse_pick){len, pr.state, wf, bf, y, pr.scratch};
            return QP_OK;
        }
        free(pr.state);
    }
    return QP_OK;
}

static int in_prefix(const struct rt_step *st, const int *mem, int len) {
    int in = 0;
    for (int i = 0; i < len; i++)
        in |= st->node == mem[i];
    return in;
}

/* Steps [first, first + n_range) (a copy in tmp): the prefix members' overlay steps in order,
 * a slot for the fused step (its index returned), then the rest (the other members and their
 * overlay steps) as they were; the prefix members' node steps are freed. *end_out: one past
 * the last step. */
static size_t reorder_steps(struct rt_plan *p, size_t first, struct rt_step *tmp, size_t n_range,
                            const int *mem, int len, int *node_step, size_t *end_out) {
    size_t j = first;
    for (size_t k = 0; k < n_range; k++)
        if (in_prefix(&tmp[k], mem, len) && tmp[k].kind == RT_STEP_OVERLAY) p->steps[j++] = tmp[k];
    size_t fused_at = j++;
    for (size_t k = 0; k < n_range; k++) {
        if (!in_prefix(&tmp[k], mem, len)) {
            if (tmp[k].kind == RT_STEP_NODE) node_step[tmp[k].node] = (int)j;
            p->steps[j++] = tmp[k];
        } else if (tmp[k].kind != RT_STEP_OVERLAY) {
            free(tmp[k].state); /* == var[0].state: variants are only made after planning */
            free(tmp[k].var);
            free(tmp[k].ovin);
            free(tmp[k].in);
            free(tmp[k].conv_in);
            free(tmp[k].dep);
        }
    }
    *end_out = j;
    return fused_at;
}

/*
 * The longest prefix of the group that passes every check and that oneDNN takes is fused (at
 * least the Conv and one node). That choice depends only on the prefix itself, so two plans
 * whose groups differ only beyond a node (different overlays downstream) fuse the part before
 * it alike: partial re-execution restores values computed by the same steps.
 */
enum qp_status rt_fuse_apply(const struct qp_session *s, struct rt_plan *p, const struct rt_fuse *f,
                             int tail, size_t first, int *node_step, struct qp_error *err) {
    const struct qp_graph *g = s->g;
    int gid = f->grp[tail];
    if (gid < 0) return QP_OK;
    struct fuse_group gr = {.mem = f->members + f->start[gid],
                            .role = f->role + f->start[gid],
                            .aux = f->aux + f->start[gid],
                            .n_mem = f->size[gid]};
    const int *mem = gr.mem;
    int n_mem = gr.n_mem;
    if (mem[n_mem - 1] != tail || first > p->n_steps) return QP_OK;
    for (int i = 0; i < n_mem; i++)
        if (node_step[mem[i]] < (int)first) return QP_OK; /* evaluated at plan time */
    bake_group_flags(p, mem, gr.role, n_mem, node_step);
    struct fuse_head h;
    if (!head_fusable(g, &p->steps[node_step[mem[0]]], mem[0], &h)) return QP_OK;

    enum qp_status st = QP_OK;
    struct folder fo = {.m = h.m, .folding = 1};
    fo.mul = qp_malloc_n((size_t)h.m, sizeof *fo.mul);
    fo.add = calloc((size_t)h.m, sizeof *fo.add);
    struct fuse_pick pk = {0};
    struct qp_kt **arr = NULL;
    int *nodes = NULL;
    struct rt_step *tmp = NULL;
    struct rt_fuse_recipe *recipe = NULL;
    struct rt_variant *var = NULL;
    if (!fo.mul || !fo.add) {
        st = qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
        goto done;
    }
    for (int i = 0; i < n_mem; i++)
        gr.ms[i] = &p->steps[node_step[mem[i]]];
    if ((st = fuse_pick(s, p, &h, &gr, node_step, &fo, &pk, err)) || !pk.state) goto done;
    int len = pk.len, conv = mem[0], last = mem[len - 1];
    arr = calloc(4 + 2 + 1, sizeof *arr);
    nodes = qp_malloc_n((size_t)len, sizeof *nodes);
    size_t n_range = p->n_steps - first;
    tmp = qp_malloc_n(n_range, sizeof *tmp);
    if (!arr || !nodes || !tmp) {
        st = qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
        goto done;
    }
    memcpy(nodes, mem, (size_t)len * sizeof *nodes);
    struct rt_ovin *fovin;
    int n_fovin;
    unsigned mask;
    if ((st = fused_ovin(p, mem, gr.role, gr.aux, len, h.transpose, h.group, h.m, node_step, fo.res,
                         s, &fovin, &n_fovin, &recipe, &mask, err)))
        goto done;
    if (recipe && !(var = malloc(sizeof *var))) {
        free(fovin);
        st = qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
        goto done;
    }
    arr[0] = (struct qp_kt *)h.x;
    arr[1] = pk.wf;
    arr[2] = pk.bf;
    arr[3] = (struct qp_kt *)fo.res;
    arr[4] = arr[5] = pk.y;
    memcpy(tmp, p->steps + first, n_range * sizeof *tmp);
    size_t end;
    size_t fused_at = reorder_steps(p, first, tmp, n_range, mem, len, node_step, &end);
    struct rt_step *fs = &p->steps[fused_at];
    memset(fs, 0, sizeof *fs);
    fs->kind = RT_STEP_NODE;
    fs->node = conv;
    fs->k = h.transpose ? &fused_convt_kernel : &fused_conv_kernel;
    fs->state = pk.state;
    fs->n_in = 4;
    fs->n_out = 1;
    fs->in = arr;
    fs->out = arr + 4;
    fs->val_out = arr + 5;
    fs->scratch = (pk.scratch + 63) / 64 * 64;
    fs->n_nodes = len;
    fs->nodes = nodes;
    fs->ovin = fovin;
    fs->n_ovin = n_fovin;
    if (recipe) {
        var[0] = (struct rt_variant){mask, pk.state, fs->scratch, pk.bf, NULL};
        fs->var = var;
        fs->n_var = 1;
        fs->cur_var = 0;
        fs->fuse = recipe;
        var = NULL;
        recipe = NULL;
    }
    if (fs->scratch > p->scratch_bytes) p->scratch_bytes = fs->scratch;
    for (int i = 0; i < len; i++)
        node_step[mem[i]] = (int)fused_at;
    p->n_steps = end;
    p->n_fused++;
    qp_log(QP_LOG_DEBUG, "session: fused %d nodes from '%s' (Conv) to '%s' (%s), %d post-ops", len,
           g->nodes[conv].name ? g->nodes[conv].name : "",
           g->nodes[last].name ? g->nodes[last].name : "", g->nodes[last].op_type, fo.n_post);
    pk.state = NULL;
    arr = NULL;
    nodes = NULL;
done:
    free(pk.state);
    free(arr);
    free(nodes);
    free(tmp);
    free(var);
    rt_fuse_recipe_free(recipe);
    free(fo.mul);
    free(fo.add);
    return st;
}

enum qp_status rt_fuse_prepare_variant(const struct qp_session *s, const struct rt_plan *p,
                                       const struct rt_step *st, unsigned mask,
                                       struct rt_variant *var_out, struct qp_error *err) {
    const struct rt_fuse_recipe *r = st->fuse;
    const struct qp_node *n = &s->g->nodes[r->mem[0]];
    memset(var_out, 0, sizeof *var_out);
    size_t n_all = (size_t)r->in_off[r->len - 1] + (size_t)r->n_in[r->len - 1];
    size_t bias_at = (sizeof(struct qp_kt) + 63) / 64 * 64;
    struct folder fo = {.m = r->m};
    struct qp_kt **in = qp_malloc_n(n_all, sizeof *in);
    fo.mul = qp_malloc_n((size_t)r->m, sizeof *fo.mul);
    fo.add = qp_malloc_n((size_t)r->m, sizeof *fo.add);
    void *own = NULL, *state = NULL;
    float *wbuf = NULL;
    enum qp_status rc = QP_OK;
    if (!in || !fo.mul || !fo.add) {
        rc = qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
        goto done;
    }
    /* The members' inputs with the constant overlays applied per mask. */
    memcpy(in, r->in, n_all * sizeof *in);
    for (int j = 0, c = 0; j < st->n_ovin; j++) {
        const struct rt_ovin *o = &st->ovin[j];
        if (!o->is_const) continue;
        in[o->input] = mask >> c & 1u ? o->fq : o->orig;
        c++;
    }
    struct rt_step fk[RT_FUSE_MAX];
    const struct rt_step *ms[RT_FUSE_MAX];
    for (int i = 0; i < r->len; i++) {
        memset(&fk[i], 0, sizeof fk[i]);
        fk[i].kind = RT_STEP_NODE;
        fk[i].node = r->mem[i];
        fk[i].n_in = r->n_in[i];
        fk[i].in = in + r->in_off[i];
        fk[i].out = (struct qp_kt **)&r->out[i];
        fk[i].n_out = 1;
        ms[i] = &fk[i];
    }
    /* What rt_fuse_apply does for this prefix, with these constants. The switchable inputs
     * (fused_ovin) only change values, never whether a member can be taken. */
    if (!fold_prefix(&fo, s, ms, r->mem, r->role, r->aux, r->len)) {
        rc = qp_error_set(err, QP_ERR_INTERNAL,
                          "session: fused step from node '%s': a constant overlay's bypass "
                          "changes what fuses",
                          n->name ? n->name : "");
        goto done;
    }
    const struct qp_kt *x = in[r->in_off[0]], *w = in[r->in_off[0] + 1];
    const struct qp_kt *b = r->n_in[0] > 2 ? in[r->in_off[0] + 2] : NULL;
    int fold = folds(&fo);
    struct qp_kt wk = *w, *bf = (struct qp_kt *)b;
    if (fold) {
        wbuf = aligned_alloc(64, (w->nbytes + 63) / 64 * 64 + 64);
        if (!wbuf) {
            rc = qp_error_set(err, QP_ERR_NOMEM, "session: out of memory for %zu bytes", w->nbytes);
            goto done;
        }
        fold_weights(w, wbuf, r->m, r->transpose, r->group, fo.mul);
        wk.data = wbuf;
    }
    if (fold || !b) {
        int64_t bd[1] = {r->m};
        own = aligned_alloc(64, bias_at + ((size_t)r->m * sizeof(float) + 63) / 64 * 64);
        if (!own) {
            rc = qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
            goto done;
        }
        bf = own;
        memset(bf, 0, sizeof *bf);
        if ((rc = qp_kt_set(bf, QP_DTYPE_FLOAT, 1, bd, err))) goto done;
        bf->data = (unsigned char *)own + bias_at;
        bf->is_const = 1;
        fold_bias(&fo, b, bf->data);
    }
    struct qp_kt yk = *r->out[r->len - 1];
    const struct qp_kt *pin[3] = {x, &wk, bf};
    struct qp_kt *pout[1] = {&yk};
    struct qp_kprep pr = {.node = n,
                          .opset = s->opsets[r->mem[0]],
                          .n_in = 3,
                          .n_out = 1,
                          .in = pin,
                          .out = pout,
                          .err = err,
                          .missing_const = -1};
    rc = qp_dnnl_conv_fused_prepare(&pr, r->transpose, fo.n_post, fo.post);
    state = pr.state;
    if (rc != QP_OK) {
        qp_error_prefix(err, "session: node '%s' (%s)", n->name ? n->name : "", n->op_type);
        goto done;
    }
    if (!qp_dnnl_conv_state_uses_dnnl(state)) {
        rc = qp_error_set(err, QP_ERR_INTERNAL,
                          "session: fused step from node '%s': oneDNN refuses a variant",
                          n->name ? n->name : "");
        goto done;
    }
    *var_out = (struct rt_variant){mask, state, (pr.scratch + 63) / 64 * 64, bf, own};
    state = NULL;
    own = NULL;
done:
    free(state);
    free(own);
    free(wbuf);
    free(in);
    free(fo.mul);
    free(fo.add);
    return rc;
}
