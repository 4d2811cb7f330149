/*
 * Building a plan for one input shape set: prepare every node in topological order, evaluate
 * what is computable ahead of time, then place the remaining tensors in one arena by liveness.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "core/size.h"
#include "kernels/dnnl_conv.h"
#include "kernels/int8_conv.h"
#include "qmath/qparams.h"
#include "runtime/memplan.h"
#include "runtime/runtime.h"

#define RT_ALIGN 64

/* Non-NULL data for zero-byte tensors, so memcpy/memset never see NULL. */
static _Alignas(64) unsigned char rt_empty[64];

static enum qp_status node_err(struct qp_error *err, const struct qp_graph *g, int node,
                               const char *what) {
    const struct qp_node *n = &g->nodes[node];
    return qp_error_prefix(err, "session: node '%s' (%s)%s%s", n->name ? n->name : "", n->op_type,
                           what ? " " : "", what ? what : "");
}

static enum qp_status own(struct rt_plan *p, size_t bytes, void **out, struct qp_error *err) {
    *out = NULL;
    if (p->n_owned == p->cap_owned) {
        size_t cap = p->cap_owned ? p->cap_owned * 2 : 16;
        void **o = qp_realloc_n(p->owned, cap, sizeof *o);
        if (!o) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
        p->owned = o;
        p->cap_owned = cap;
    }
    if (bytes == 0) {
        *out = rt_empty;
        return QP_OK;
    }
    void *m = aligned_alloc(RT_ALIGN, (bytes + RT_ALIGN - 1) / RT_ALIGN * RT_ALIGN);
    if (!m) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory for %zu bytes", bytes);
    p->owned[p->n_owned++] = m;
    *out = m;
    return QP_OK;
}

static struct qp_kt *new_temp(struct rt_plan *p) {
    if (p->n_temps == p->cap_temps) return NULL; /* capacity reserved up front */
    struct qp_kt *t = &p->temps[p->n_temps++];
    memset(t, 0, sizeof *t);
    return t;
}

enum qp_status rt_plan_own(struct rt_plan *p, size_t bytes, void **out, struct qp_error *err) {
    return own(p, bytes, out, err);
}

struct qp_kt *rt_plan_temp(struct rt_plan *p) {
    return new_temp(p);
}

/* Frees a step's kernel state(s) and overlay inputs. */
static void step_free_state(struct rt_step *st) {
    if (st->var) {
        for (int j = 0; j < st->n_var; j++) {
            free(st->var[j].state);
            free(st->var[j].own);
        }
        free(st->var);
    } else {
        free(st->state);
    }
    st->var = NULL;
    st->n_var = 0;
    st->state = NULL;
    free(st->ovin);
    st->ovin = NULL;
    st->n_ovin = 0;
    rt_fuse_recipe_free(st->fuse);
    st->fuse = NULL;
}

/* Frees everything a step owns and zeroes it. */
static void step_release(struct rt_step *st) {
    step_free_state(st);
    free(st->in);
    free(st->conv_in);
    free(st->dep);
    free(st->nodes);
    if (st->rif) {
        rt_plan_free(st->rif->plan[0], 0);
        rt_plan_free(st->rif->plan[1], 0);
        free(st->rif);
    }
    memset(st, 0, sizeof *st);
}

void rt_plan_free(struct rt_plan *p, size_t n_inputs) {
    (void)n_inputs;
    if (!p) return;
    for (size_t i = 0; i < p->n_steps; i++) {
        step_release(&p->steps[i]);
    }
    free(p->steps);
    free(p->ov_baked);
    free(p->cov_steps);
    free(p->outer_v);
    free(p->outer_src);
    for (size_t i = 0; i < p->n_owned; i++)
        free(p->owned[i]);
    free(p->owned);
    free(p->arena);
    free(p->scratch);
    free(p->vals);
    free(p->blocked);
    free(p->temps);
    free(p->in_rank);
    free(p->in_key);
    free(p->in_key_bytes);
    free(p->in_dims);
    free(p);
}

/* Pieces of a float16 conversion (a plain per-element map: the split cannot change results). */
#define CONV_PIECE 16384

static void convert_f16_to_f32_par(const struct qp_kt *src, struct qp_kt *dst, int n_threads) {
    int64_t n = (int64_t)src->numel, pieces = (n + CONV_PIECE - 1) / CONV_PIECE;
    const uint16_t *a = src->data;
    float *b = dst->data;
    int nt = pieces < 4 ? 1 : n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t k = 0; k < pieces; k++) {
        int64_t o = k * CONV_PIECE, len = n - o < CONV_PIECE ? n - o : CONV_PIECE;
        qp_fp16_to_f32_n(a + o, b + o, (size_t)len);
    }
}

static void convert_f16_to_f32(const struct qp_kt *src, struct qp_kt *dst) {
    convert_f16_to_f32_par(src, dst, 1);
}

static void convert_f32_to_f16_par(const struct qp_kt *src, struct qp_kt *dst, int n_threads) {
    int64_t n = (int64_t)src->numel, pieces = (n + CONV_PIECE - 1) / CONV_PIECE;
    const float *a = src->data;
    uint16_t *b = dst->data;
    int nt = pieces < 4 ? 1 : n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t k = 0; k < pieces; k++) {
        int64_t o = k * CONV_PIECE, len = n - o < CONV_PIECE ? n - o : CONV_PIECE;
        qp_f32_to_fp16_n(a + o, b + o, (size_t)len);
    }
}

static void overlay_run(const struct qp_session *s, const struct rt_step *st) {
    const struct rt_overlay *ov = &s->ov[st->ov];
    struct qp_qspec q = {.qtype = ov->qtype,
                         .saturate = ov->saturate,
                         .outer = st->outer,
                         .axis_len = st->axis_len,
                         .inner = st->inner,
                         .n_params = (int64_t)ov->n_params,
                         .scale = ov->scale,
                         .zero_point = ov->zero_point};
    const float *x = st->in[0]->data;
    float *y = st->out[0]->data;
    int64_t n = (int64_t)st->in[0]->numel;
    int nt = s->n_threads;
    if (n < 65536) nt = 1;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        int64_t b, e;
        qp_ksplit(n, nt, t, &b, &e);
        if (b < e) qp_fake_quantize_f32(&q, x, y, b, e);
    }
}

enum qp_status rt_plan_run_all(const struct qp_session *s, struct rt_plan *p,
                               struct qp_error *err) {
    for (size_t k = 0; k < p->n_steps; k++) {
        enum qp_status st = rt_step_run(s, p, &p->steps[k], p->scratch, err);
        if (st != QP_OK) return st;
    }
    return QP_OK;
}

static enum qp_status if_run(const struct qp_session *s, struct rt_step *st, struct qp_error *err) {
    int b = ((const unsigned char *)st->cond->data)[0] != 0;
    struct rt_plan *bp = st->rif->plan[b];
    const struct qp_session *sub = st->rif->sub[b];
    if (!bp || !sub)
        return qp_error_set(err, QP_ERR_INTERNAL, "the %s branch was not planned",
                            b ? "then" : "else");
    for (size_t i = 0; i < bp->n_outer; i++)
        bp->vals[bp->outer_v[i]].data = bp->outer_src[i]->data;
    enum qp_status rc = rt_plan_run_all(sub, bp, err);
    if (rc != QP_OK) return rc;
    for (int o = 0; o < st->n_out; o++) {
        const struct qp_kt *src = &bp->vals[sub->outputs[o]];
        if (st->out[o] && src->nbytes) memcpy(st->out[o]->data, src->data, src->nbytes);
    }
    return QP_OK;
}

enum qp_status rt_step_run(const struct qp_session *s, struct rt_plan *p, struct rt_step *st,
                           void *scratch, struct qp_error *err) {
    (void)p;
    if (st->kind == RT_STEP_OVERLAY) {
        if (!s->ov[st->ov].bypass) overlay_run(s, st);
        return QP_OK;
    }
    for (int j = 0; j < st->n_ovin; j++) {
        const struct rt_ovin *o = &st->ovin[j];
        if (o->is_const && st->fuse) continue; /* folded into the variant's state */
        st->in[o->input] = s->ov[o->ov].bypass ? o->orig : o->fq;
    }
    if (st->kind == RT_STEP_IF) {
        enum qp_status rc = if_run(s, st, err);
        return rc == QP_OK ? rc : node_err(err, s->g, st->node, NULL);
    }
    for (int i = 0; i < st->n_conv_in; i++)
        convert_f16_to_f32_par(st->conv_in[i].src, st->conv_in[i].dst, s->n_threads);
    struct qp_krun r = {.node = &s->g->nodes[st->node],
                        .state = st->state,
                        .n_in = st->n_in,
                        .n_out = st->n_out,
                        .in = (const struct qp_kt *const *)st->in,
                        .out = st->out,
                        .scratch = scratch,
                        .n_threads = s->n_threads,
                        .lane = s->lane,
                        .err = err};
    enum qp_status rc = st->k->run(&r);
    if (rc != QP_OK) return node_err(err, s->g, st->node, NULL);
    for (int i = 0; i < st->n_conv_out; i++)
        convert_f32_to_f16_par(st->conv_out[i].src, st->conv_out[i].dst, s->n_threads);
    return QP_OK;
}

/* ---- edge overlays ------------------------------------------------------------------------
 */

/* The [outer, axis_len, inner] view of `x` for overlay `ov`. */
static enum qp_status overlay_geometry(const struct qp_session *s, const struct rt_overlay *ov,
                                       const struct qp_kt *x, struct rt_step *st,
                                       struct qp_error *err) {
    const struct qp_node *n = &s->g->nodes[ov->node];
    if (x->dtype != QP_DTYPE_FLOAT)
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "session: overlay on node '%s' input %d: tensor '%s' is %s; fake "
                            "quantization needs float",
                            n->name, ov->input, s->g->values[n->inputs[ov->input]].name,
                            qp_dtype_name(x->dtype));
    if (ov->n_params == 1) {
        st->outer = 1;
        st->axis_len = 1;
        st->inner = (int64_t)x->numel;
        return QP_OK;
    }
    int64_t axis = ov->axis < 0 ? ov->axis + x->rank : ov->axis;
    if (axis < 0 || axis >= x->rank || x->dims[axis] != (int64_t)ov->n_params)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "session: overlay on node '%s' input %d: %zu parameters do not fit "
                            "axis %d of a rank-%d tensor",
                            n->name, ov->input, ov->n_params, ov->axis, x->rank);
    st->outer = 1;
    st->inner = 1;
    for (int64_t d = 0; d < axis; d++)
        st->outer *= x->dims[d];
    for (int64_t d = axis + 1; d < x->rank; d++)
        st->inner *= x->dims[d];
    st->axis_len = x->dims[axis];
    return QP_OK;
}

/* ---- If -----------------------------------------------------------------------------------
 */

/* The tensor `name` resolves to in the enclosing scopes of branch session `s`. */
static struct qp_kt *outer_lookup(const struct qp_session *s, const char *name) {
    for (const struct qp_session *cs = s; cs->parent; cs = cs->parent) {
        int w = qp_graph_find_value(cs->parent->g, name);
        if (w >= 0 && cs->parent_plan && cs->parent_plan->vals[w].dtype != QP_DTYPE_UNDEFINED)
            return &cs->parent_plan->vals[w];
    }
    return NULL;
}

static enum qp_status bind_outer(const struct qp_session *s, struct rt_plan *p,
                                 struct qp_error *err) {
    const struct qp_graph *g = s->g;
    size_t n = 0;
    for (size_t v = 0; v < g->n_values; v++)
        n += g->values[v].is_outer;
    p->outer_v = calloc(n + 1, sizeof *p->outer_v);
    p->outer_src = calloc(n + 1, sizeof *p->outer_src);
    if (!p->outer_v || !p->outer_src)
        return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
    for (size_t v = 0; v < g->n_values; v++) {
        if (!g->values[v].is_outer) continue;
        struct qp_kt *src = outer_lookup(s, g->values[v].name);
        if (!src) continue; /* an error only if something reads it */
        p->vals[v] = *src;
        p->outer_v[p->n_outer] = (int)v;
        p->outer_src[p->n_outer++] = src;
    }
    return QP_OK;
}

/* Marks the values of `top` (n_values of them) that branch plan `bp`, or plans nested in it,
 * read. */
static void mark_outer_refs(const struct rt_plan *bp, const struct rt_plan *top, size_t n_values,
                            unsigned char *mark) {
    if (!bp) return;
    for (size_t i = 0; i < bp->n_outer; i++) {
        const struct qp_kt *src = bp->outer_src[i];
        if (src >= top->vals && src < top->vals + n_values) mark[src - top->vals] = 1;
    }
    for (size_t k = 0; k < bp->n_steps; k++)
        if (bp->steps[k].rif) {
            mark_outer_refs(bp->steps[k].rif->plan[0], top, n_values, mark);
            mark_outer_refs(bp->steps[k].rif->plan[1], top, n_values, mark);
        }
}

/* Plans the branches of If node `node` (only the taken one when the condition is a plan-time
 * constant) and sets the node's outputs. *fold_out = 1 when the outputs are plan-time
 * constants. */
static enum qp_status if_plan(struct qp_session *s, struct rt_plan *p, struct rt_step *stp,
                              int node, int *fold_out, struct qp_error *err) {
    const struct qp_node *n = &s->g->nodes[node];
    struct rt_if *sess = s->ifs ? s->ifs[node] : NULL;
    struct qp_kt *c = stp->in[0];
    enum qp_status st;
    *fold_out = 0;
    if (!sess || !sess->sub[0] || !sess->sub[1])
        return qp_error_set(err, QP_ERR_BAD_INPUT, "needs then_branch and else_branch graphs");
    if (!c || c->numel != 1) {
        char buf[64] = "";
        if (c) qp_kshape_str(c, buf, sizeof buf);
        return qp_error_set(err, QP_ERR_BAD_INPUT, "the condition must have one element (shape %s)",
                            buf);
    }
    stp->kind = RT_STEP_IF;
    stp->cond = c;
    stp->rif = calloc(1, sizeof *stp->rif);
    if (!stp->rif) return qp_error_set(err, QP_ERR_NOMEM, "out of memory");
    stp->rif->sub[0] = sess->sub[0];
    stp->rif->sub[1] = sess->sub[1];
    int lo = 0, hi = 1;
    if (c->is_const) lo = hi = ((const unsigned char *)c->data)[0] != 0;
    static const char *const bname[2] = {"else_branch", "then_branch"};
    for (int b = lo; b <= hi; b++) {
        struct qp_session *sub = sess->sub[b];
        int retry = 0, rank0 = 0;
        int64_t dims0[1][QP_MAX_RANK] = {{0}};
        sub->parent_plan = p;
        sub->n_threads = s->n_threads;
        st = rt_plan_build(sub, &rank0, (const int64_t(*)[QP_MAX_RANK])dims0, NULL,
                           &stp->rif->plan[b], &retry, err);
        if (st != QP_OK) return qp_error_prefix(err, "%s:", bname[b]);
        if ((int)sub->n_outputs != n->n_outputs)
            return qp_error_set(err, QP_ERR_BAD_INPUT, "%s has %zu outputs, the node %d", bname[b],
                                sub->n_outputs, n->n_outputs);
    }
    int fold = lo == hi && stp->rif->plan[lo]->n_steps == 0;
    for (int o = 0; o < n->n_outputs; o++) {
        const struct qp_kt *a = &stp->rif->plan[lo]->vals[sess->sub[lo]->outputs[o]];
        if (a->dtype == QP_DTYPE_UNDEFINED)
            return qp_error_set(err, QP_ERR_UNSUPPORTED, "%s: output %d has no computable dtype",
                                bname[lo], o);
        if (lo != hi) {
            const struct qp_kt *b = &stp->rif->plan[hi]->vals[sess->sub[hi]->outputs[o]];
            if (!rt_same_shape(a, b)) {
                char sa[64], sb[64];
                return qp_error_set(err, QP_ERR_UNSUPPORTED,
                                    "output %d: then_branch gives %s %s, else_branch %s %s; "
                                    "branches with different output dtypes or shapes are not "
                                    "supported",
                                    o, qp_dtype_name(b->dtype), qp_kshape_str(b, sb, sizeof sb),
                                    qp_dtype_name(a->dtype), qp_kshape_str(a, sa, sizeof sa));
            }
        }
        if (!a->is_const) fold = 0;
        if (stp->out[o] && (st = qp_kt_set(stp->out[o], a->dtype, a->rank, a->dims, err)))
            return st;
    }
    *fold_out = fold;
    return QP_OK;
}

/* Producer step of tensor `t` read by step k, or -1 (constants, graph inputs). */
static int producer_step(const struct rt_plan *p, const struct qp_graph *g, const int *node_step,
                         size_t k, const struct qp_kt *t) {
    const struct rt_step *st = &p->steps[k];
    for (int j = 0; j < st->n_conv_in; j++)
        if (st->conv_in[j].dst == t) t = st->conv_in[j].src;
    if (t >= p->vals && t < p->vals + g->n_values) {
        int pn = g->values[t - p->vals].producer;
        return pn >= 0 ? node_step[pn] : -1;
    }
    for (size_t j = k; j-- > 0;) {
        if (p->steps[j].kind != RT_STEP_OVERLAY) break;
        if (p->steps[j].out[0] == t) return (int)j;
    }
    return -1;
}

static int value_last_use(const struct qp_graph *g, const int *node_step, int v, int n_steps) {
    const struct qp_value *val = &g->values[v];
    if (val->is_graph_output) return n_steps;
    int last = -1;
    for (size_t u = 0; u < val->n_uses; u++) {
        int k = node_step[val->uses[u].node];
        if (k > last) last = k;
    }
    return last;
}

/* Marks the caller inputs `v` depends on as value-keyed; returns how many were new. */
static int mark_keyed(struct qp_session *s, int v0) {
    const struct qp_graph *g = s->g;
    int n_new = 0;
    unsigned char *seen = calloc(g->n_values ? g->n_values : 1, 1);
    int *stack = qp_malloc_n(g->n_values + 1, sizeof *stack);
    if (!seen || !stack) {
        free(seen);
        free(stack);
        return 0;
    }
    size_t sp = 0;
    stack[sp++] = v0;
    seen[v0] = 1;
    while (sp) {
        int v = stack[--sp];
        for (size_t i = 0; i < s->n_inputs; i++)
            if (s->inputs[i] == v && !s->keyed[i]) {
                s->keyed[i] = 1;
                n_new++;
            }
        int pn = g->values[v].producer;
        if (pn < 0) continue;
        const struct qp_node *n = &g->nodes[pn];
        for (int i = 0; i < n->n_inputs; i++) {
            int w = n->inputs[i];
            if (w >= 0 && !seen[w]) {
                seen[w] = 1;
                stack[sp++] = w;
            }
        }
    }
    free(seen);
    free(stack);
    return n_new;
}

/* ---- building a plan ----------------------------------------------------------------------
 */

/* What rt_plan_build works with; released by build_release (the plan itself by the caller). */
struct build {
    struct qp_session *s;
    const struct qp_graph *g;
    struct rt_plan *p;
    struct rt_fuse fz;
    const struct qp_array *inputs; /* the caller's values, NULL when only shapes are known */
    int *retry_out;
    int *node_step;       /* per node: its step, or -1 (evaluated at plan time, dead) */
    int *last_extra;      /* per value: the last step that reads it from an If branch, or -1 */
    struct qp_kt **ovin;  /* per input of the node being planned: its overlay's output */
    struct rt_ovin *pend; /* the overlays on the node being planned */
    unsigned char *mark;  /* per value: scratch for mark_outer_refs */
    void *fold_scratch;   /* scratch of the last node evaluated at plan time */
    struct qp_mem_req *reqs;
    struct qp_kt **req_kt;
    size_t n_req;
    size_t n_slots;    /* input and output slots of all nodes */
    size_t n_steps;    /* steps planned so far */
    size_t fuse_first; /* first step of the fusion group being planned */
};

/* One node being planned into step stp. */
struct node_work {
    int node;
    const struct qp_node *n;
    const struct qp_kernel *kr;
    struct rt_step *stp;
    int n_pend;     /* overlays on its inputs (b->pend) */
    unsigned cmask; /* the constant overlays it is prepared with: bit j for the j-th, applied */
    int n_const_ov; /* overlays on constant inputs */
    int all_const;  /* every input is a plan-time constant */
    int any_f16;    /* some input is float16 */
    int convert;    /* float16 goes through the kernel as float32 */
};

static void build_release(struct build *b) {
    free(b->reqs);
    free(b->req_kt);
    free(b->node_step);
    free(b->fold_scratch);
    free(b->ovin);
    free(b->pend);
    free(b->last_extra);
    free(b->mark);
    rt_fuse_free(&b->fz);
}

/* Allocates the plan's tables and the build's work arrays. QP_ERR_NOMEM only. */
static enum qp_status build_alloc(struct build *b, struct qp_error *err) {
    const struct qp_graph *g = b->g;
    struct qp_session *s = b->s;
    struct rt_plan *p = b->p;
    size_t ni = s->n_inputs ? s->n_inputs : 1;
    size_t nv = g->n_values ? g->n_values : 1;
    p->in_rank = calloc(ni, sizeof *p->in_rank);
    p->in_key = calloc(ni, sizeof *p->in_key);
    p->in_key_bytes = calloc(ni, sizeof *p->in_key_bytes);
    p->in_dims = calloc(ni, sizeof *p->in_dims);
    p->vals = calloc(nv, sizeof *p->vals);
    p->blocked = calloc(nv, 1);
    b->n_slots = 0;
    int max_in = 1;
    for (size_t k = 0; k < g->n_topo; k++) {
        const struct qp_node *n = &g->nodes[g->topo[k]];
        b->n_slots += (size_t)n->n_inputs + (size_t)n->n_outputs;
        if (n->n_inputs > max_in) max_in = n->n_inputs;
    }
    p->cap_temps = b->n_slots + s->n_ov + 2 * (size_t)b->fz.n_groups + 1;
    p->temps = calloc(p->cap_temps, sizeof *p->temps);
    p->steps = calloc(g->n_topo + s->n_ov + 1, sizeof *p->steps);
    b->node_step = qp_malloc_n(g->n_nodes, sizeof *b->node_step);
    b->ovin = calloc((size_t)max_in, sizeof *b->ovin);
    b->pend = calloc((size_t)max_in, sizeof *b->pend);
    p->ov_baked = calloc(s->n_ov + 1, 1);
    p->cov_steps = calloc(g->n_topo + 1, sizeof *p->cov_steps);
    b->last_extra = qp_malloc_n(g->n_values, sizeof *b->last_extra);
    b->mark = calloc(nv, 1);
    if (!b->ovin || !b->pend || !p->ov_baked || !p->cov_steps || !b->last_extra || !b->mark ||
        !p->in_rank || !p->in_key || !p->in_key_bytes || !p->in_dims || !p->vals || !p->temps ||
        !p->steps || !b->node_step || !p->blocked)
        return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
    for (size_t i = 0; i < g->n_values; i++)
        b->last_extra[i] = -1;
    for (size_t i = 0; i < g->n_nodes; i++)
        b->node_step[i] = -1;
    return QP_OK;
}

/* Initializers: constants borrowed from the model. */
static enum qp_status bind_inits(struct build *b, struct qp_error *err) {
    const struct qp_graph *g = b->g;
    for (size_t i = 0; i < g->n_inits; i++) {
        const struct qp_tensor *t = &g->inits[i];
        struct qp_kt *kt = &b->p->vals[g->inits_value[i]];
        if (t->dtype == QP_DTYPE_STRING || t->rank > QP_MAX_RANK) {
            kt->dtype = QP_DTYPE_UNDEFINED; /* only an error if a kernel reads it */
            continue;
        }
        struct qp_error e2 = {0};
        if (qp_kt_set(kt, t->dtype, t->rank, t->dims, &e2) != QP_OK || kt->nbytes != t->nbytes ||
            (!t->data && t->nbytes))
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "session: initializer '%s' has no data or a size that does not "
                                "match its shape",
                                t->name ? t->name : "");
        kt->data = t->data ? (void *)t->data : rt_empty;
        kt->is_const = 1;
    }
    return QP_OK;
}

/* Caller inputs: shapes, and for value-keyed ones a plan-owned copy of the bytes. */
static enum qp_status bind_inputs(struct build *b, const int *ranks,
                                  const int64_t (*dims)[QP_MAX_RANK], struct qp_error *err) {
    struct qp_session *s = b->s;
    struct rt_plan *p = b->p;
    enum qp_status st;
    for (size_t i = 0; i < s->n_inputs; i++) {
        p->in_rank[i] = ranks[i];
        memcpy(p->in_dims[i], dims[i], sizeof p->in_dims[i]);
    }
    for (size_t i = 0; i < s->n_inputs; i++) {
        const struct qp_value *val = &b->g->values[s->inputs[i]];
        struct qp_kt *kt = &p->vals[s->inputs[i]];
        if ((st = qp_kt_set(kt, val->dtype, ranks[i], dims[i], err)) != QP_OK) {
            qp_error_prefix(err, "session: input '%s'", val->name);
            return st;
        }
        kt->data = rt_empty;
        if (s->keyed[i] && b->inputs) {
            void *copy;
            if ((st = own(p, kt->nbytes, &copy, err))) return st;
            if (kt->nbytes) memcpy(copy, b->inputs[i].data, kt->nbytes);
            kt->data = copy;
            kt->is_const = 1;
            p->in_key[i] = copy;
            p->in_key_bytes[i] = kt->nbytes;
        }
    }
    return QP_OK;
}

/* Overlay `oi` on input `i` of w's node, reading `src`: a step at b->n_steps, or evaluated now
 * when src is a constant. Sets b->ovin[i] and appends to b->pend. */
static enum qp_status plan_overlay(struct build *b, struct node_work *w, int i, int oi,
                                   struct qp_error *err) {
    struct qp_session *s = b->s;
    struct rt_plan *p = b->p;
    enum qp_status st;
    struct qp_kt *src = &p->vals[w->n->inputs[i]];
    struct rt_step *os = &p->steps[b->n_steps];
    memset(os, 0, sizeof *os);
    os->kind = RT_STEP_OVERLAY;
    os->node = w->node;
    os->ov = oi;
    os->n_in = os->n_out = 1;
    struct qp_kt *t = new_temp(p);
    if (!t) return qp_error_set(err, QP_ERR_INTERNAL, "session: temp overflow");
    if ((st = overlay_geometry(s, &s->ov[oi], src, os, err))) return st;
    if ((st = qp_kt_set(t, QP_DTYPE_FLOAT, src->rank, src->dims, err))) return st;
    os->in = calloc(3, sizeof *os->in);
    if (!os->in) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
    os->out = os->in + 1;
    os->in[0] = src;
    os->out[0] = t;
    if (src->is_const) {
        st = own(p, t->nbytes, &t->data, err);
        if (st == QP_OK) {
            overlay_run(s, os); /* even when bypassed: a later toggle reads it */
            t->is_const = 1;
            p->ov_baked[oi] |= RT_OV_PARAMS_BAKED;
        }
        free(os->in);
        memset(os, 0, sizeof *os);
        if (st != QP_OK) return st;
    } else {
        b->n_steps++;
        p->n_steps = b->n_steps;
    }
    b->ovin[i] = t;
    b->pend[w->n_pend++] = (struct rt_ovin){i, oi, src->is_const, src, t};
    return QP_OK;
}

/* The overlays on w's inputs, then which constant ones its preparation applies (w->cmask). */
static enum qp_status plan_overlays(struct build *b, struct node_work *w, struct qp_error *err) {
    struct qp_session *s = b->s;
    enum qp_status st;
    for (int i = 0; s->n_ov && i < w->n->n_inputs; i++) {
        int oi = rt_overlay_index(s->ov, s->n_ov, w->node, i);
        if (oi < 0 || w->n->inputs[i] < 0) continue;
        if ((st = plan_overlay(b, w, i, oi, err))) return st;
    }
    for (int j = 0; j < w->n_pend; j++)
        if (b->pend[j].is_const) {
            if (!s->ov[b->pend[j].ov].bypass && w->n_const_ov < RT_MAX_CONST_OVIN)
                w->cmask |= 1u << w->n_const_ov;
            w->n_const_ov++;
        }
    return QP_OK;
}

/* Sets up step w->stp for w's node: its pointer arrays and its inputs (overlay outputs where
 * there are overlays; a bypassed constant overlay's original). */
static enum qp_status step_bind_inputs(struct build *b, struct node_work *w, struct qp_error *err) {
    const struct qp_node *n = w->n;
    struct rt_step *stp = w->stp;
    memset(stp, 0, sizeof *stp);
    stp->node = w->node;
    stp->k = w->kr;
    stp->n_in = n->n_inputs;
    stp->n_out = n->n_outputs;
    size_t nptr = (size_t)(n->n_inputs + 2 * n->n_outputs) + 1;
    stp->in = calloc(nptr, sizeof *stp->in);
    stp->conv_in = calloc((size_t)(n->n_inputs + n->n_outputs) + 1, sizeof *stp->conv_in);
    if (!stp->in || !stp->conv_in) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
    stp->out = stp->in + n->n_inputs;
    stp->val_out = stp->out + n->n_outputs;
    w->all_const = 1;
    for (int i = 0; i < n->n_inputs; i++) {
        int v = n->inputs[i];
        if (v < 0) continue;
        struct qp_kt *kt = b->ovin[i] ? b->ovin[i] : &b->p->vals[v];
        if (b->ovin[i] && kt->is_const) {
            /* A bypassed constant overlay: the kernel is prepared with the original. */
            for (int j = 0; j < w->n_pend; j++)
                if (b->pend[j].input == i && b->s->ov[b->pend[j].ov].bypass) kt = b->pend[j].orig;
        }
        b->ovin[i] = NULL;
        if (kt->dtype == QP_DTYPE_UNDEFINED) {
            enum qp_status st = qp_error_set(err, QP_ERR_UNSUPPORTED,
                                             "input %d '%s' has no dtype the engine can compute "
                                             "(string or outer-scope tensor)",
                                             i, b->g->values[v].name);
            node_err(err, b->g, w->node, NULL);
            return st;
        }
        stp->in[i] = kt;
        if (!kt->is_const) w->all_const = 0;
        if (kt->dtype == QP_DTYPE_FLOAT16) w->any_f16 = 1;
    }
    return QP_OK;
}

/* The dtype check against the kernel row. */
static enum qp_status step_check_dtype(const struct build *b, const struct node_work *w,
                                       struct qp_error *err) {
    const struct qp_node *n = w->n;
    const struct qp_kernel *kr = w->kr;
    const struct rt_step *stp = w->stp;
    if (kr->dtypes == QP_DT_ANY || kr->dtype_input >= n->n_inputs || !stp->in[kr->dtype_input] ||
        (kr->dtypes & QP_DT(stp->in[kr->dtype_input]->dtype)))
        return QP_OK;
    enum qp_dtype dt = stp->in[kr->dtype_input]->dtype;
    return qp_error_set(err, QP_ERR_UNSUPPORTED,
                        "session: node '%s' (%s): no kernel for domain '%s' opset %d with "
                        "input %d of dtype %s",
                        n->name ? n->name : "", n->op_type,
                        n->domain && n->domain[0] ? n->domain : "ai.onnx", b->s->opsets[w->node],
                        kr->dtype_input, qp_dtype_name(dt));
}

/* float16 inputs of a kernel that computes in float32: a float32 temp each, converted now for
 * constants, else by the step before it runs. */
static enum qp_status step_convert_inputs(struct build *b, struct node_work *w,
                                          struct qp_error *err) {
    struct rt_step *stp = w->stp;
    enum qp_status st;
    for (int i = 0; i < w->n->n_inputs; i++) {
        struct qp_kt *src = stp->in[i];
        if (!src || src->dtype != QP_DTYPE_FLOAT16) continue;
        struct qp_kt *t = new_temp(b->p);
        if (!t) return qp_error_set(err, QP_ERR_INTERNAL, "session: temp overflow");
        if ((st = qp_kt_set(t, QP_DTYPE_FLOAT, src->rank, src->dims, err))) return st;
        if (src->is_const) {
            if ((st = own(b->p, t->nbytes, &t->data, err))) return st;
            convert_f16_to_f32(src, t);
            t->is_const = 1;
        } else {
            stp->conv_in[stp->n_conv_in++] = (struct rt_conv){src, t};
        }
        stp->in[i] = t;
    }
    return QP_OK;
}

/* The step's outputs: the graph values, or a temp for a missing output 0. */
static enum qp_status step_bind_outputs(struct build *b, struct node_work *w,
                                        struct qp_error *err) {
    struct rt_step *stp = w->stp;
    for (int i = 0; i < w->n->n_outputs; i++) {
        int v = w->n->outputs[i];
        if (v >= 0) {
            stp->out[i] = stp->val_out[i] = &b->p->vals[v];
        } else if (i == 0) {
            stp->out[0] = new_temp(b->p); /* kernels may rely on output 0 */
            if (!stp->out[0]) return qp_error_set(err, QP_ERR_INTERNAL, "session: temp overflow");
        }
    }
    return QP_OK;
}

/* Runs the kernel's prepare (or plans an If). When it failed for want of a constant that a
 * caller input decides, marks that input value-keyed and asks for a retry. */
static enum qp_status step_prepare(struct build *b, struct node_work *w, struct qp_error *err) {
    struct qp_session *s = b->s;
    const struct qp_node *n = w->n;
    struct rt_step *stp = w->stp;
    enum qp_status st;
    struct qp_kprep pr = {.node = n,
                          .opset = s->opsets[w->node],
                          .n_in = n->n_inputs,
                          .n_out = n->n_outputs,
                          .in = (const struct qp_kt *const *)stp->in,
                          .out = stp->out,
                          .err = err};
    pr.missing_const = -1;
    if (strcmp(n->op_type, "If") == 0 && (!n->domain || !n->domain[0])) {
        int fold;
        st = if_plan(s, b->p, stp, w->node, &fold, err);
        w->all_const = fold;
    } else {
        st = rt_fuse_prepare(&b->fz, w->node, w->kr, &pr);
    }
    stp->state = pr.state;
    if (st != QP_OK && pr.missing_const >= 0 && pr.missing_const < n->n_inputs &&
        n->inputs[pr.missing_const] >= 0) {
        if (mark_keyed(s, n->inputs[pr.missing_const]))
            *b->retry_out = 1;
        else {
            for (size_t i = 0; i < s->n_inputs; i++)
                if (s->keyed[i] && !b->inputs) *b->retry_out = 2;
        }
    }
    stp->scratch = (pr.scratch + RT_ALIGN - 1) / RT_ALIGN * RT_ALIGN;
    if (st != QP_OK) node_err(err, b->g, w->node, NULL);
    return st;
}

/* float32 outputs of a converting kernel: the kernel writes a temp, the step converts it to
 * the float16 value. */
static enum qp_status step_convert_outputs(struct build *b, struct node_work *w,
                                           struct qp_error *err) {
    struct rt_step *stp = w->stp;
    enum qp_status st;
    struct rt_conv *co = stp->conv_in + stp->n_conv_in;
    stp->conv_out = co;
    for (int i = 0; i < w->n->n_outputs; i++) {
        struct qp_kt *o = stp->out[i];
        if (!o || o->dtype != QP_DTYPE_FLOAT || !stp->val_out[i]) continue;
        struct qp_kt *t = new_temp(b->p);
        if (!t) return qp_error_set(err, QP_ERR_INTERNAL, "session: temp overflow");
        *t = *o;
        if ((st = qp_kt_set(o, QP_DTYPE_FLOAT16, t->rank, t->dims, err))) return st;
        stp->out[i] = t;
        co[stp->n_conv_out++] = (struct rt_conv){t, o};
    }
    return QP_OK;
}

/* Everything from binding the inputs to a prepared step with its overlay inputs. On failure
 * the caller releases the step. */
static enum qp_status step_setup(struct build *b, struct node_work *w, struct qp_error *err) {
    enum qp_status st;
    struct rt_step *stp = w->stp;
    if ((st = step_bind_inputs(b, w, err))) return st;
    if ((st = step_check_dtype(b, w, err))) return st;
    w->convert = w->any_f16 && (w->kr->flags & QP_KF_F16_VIA_F32);
    if (w->convert && (st = step_convert_inputs(b, w, err))) return st;
    if ((st = step_bind_outputs(b, w, err))) return st;
    if ((st = step_prepare(b, w, err))) return st;
    if (w->convert && (st = step_convert_outputs(b, w, err))) return st;
    if (w->n_pend) {
        stp->ovin = qp_malloc_n((size_t)w->n_pend, sizeof *stp->ovin);
        if (!stp->ovin) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
        memcpy(stp->ovin, b->pend, (size_t)w->n_pend * sizeof *stp->ovin);
        stp->n_ovin = w->n_pend;
    }
    return QP_OK;
}

/* Evaluates a step whose inputs are all constants (or that needs only shapes) now: its outputs
 * become plan-owned constants. The caller releases the step either way. */
static enum qp_status step_fold(struct build *b, struct node_work *w, struct qp_error *err) {
    struct rt_plan *p = b->p;
    struct rt_step *stp = w->stp;
    enum qp_status st;
    for (int i = 0; i < stp->n_conv_in; i++)
        if ((st = own(p, stp->conv_in[i].dst->nbytes, &stp->conv_in[i].dst->data, err))) return st;
    for (int i = 0; i < w->n->n_outputs; i++) {
        if (stp->out[i] && (st = own(p, stp->out[i]->nbytes, &stp->out[i]->data, err))) return st;
        if (stp->val_out[i] && stp->val_out[i] != stp->out[i] &&
            (st = own(p, stp->val_out[i]->nbytes, &stp->val_out[i]->data, err)))
            return st;
    }
    free(b->fold_scratch);
    b->fold_scratch = stp->scratch ? aligned_alloc(RT_ALIGN, stp->scratch) : NULL;
    if (stp->scratch && !b->fold_scratch)
        return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
    if ((st = rt_step_run(b->s, p, stp, b->fold_scratch, err))) return st;
    for (int i = 0; i < w->n->n_outputs; i++) {
        if (stp->out[i]) stp->out[i]->is_const = 1;
        if (stp->val_out[i]) stp->val_out[i]->is_const = 1;
    }
    return QP_OK;
}

/* Keeps step w->stp in the plan (its bypass variant first, when constant overlays choose its
 * preparation), then fuses its group when it is a group's last node. */
static enum qp_status step_keep(struct build *b, struct node_work *w, struct qp_error *err) {
    struct qp_session *s = b->s;
    struct rt_plan *p = b->p;
    struct rt_step *stp = w->stp;
    enum qp_status st;
    if (w->n_const_ov && w->n_const_ov <= RT_MAX_CONST_OVIN && stp->kind != RT_STEP_IF) {
        stp->var = malloc(sizeof *stp->var);
        if (!stp->var) {
            step_release(stp);
            return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
        }
        stp->var[0] = (struct rt_variant){w->cmask, stp->state, stp->scratch, NULL, NULL};
        stp->n_var = 1;
        stp->cur_var = 0;
    }
    /* Dependencies (below) follow the overlay outputs, whatever the bypass flags. */
    /* (a constant overlay's input is its current choice, which fusion may bake in) */
    for (int j = 0; j < stp->n_ovin; j++) {
        const struct rt_ovin *o = &stp->ovin[j];
        stp->in[o->input] = o->is_const && s->ov[o->ov].bypass ? o->orig : o->fq;
    }
    b->node_step[w->node] = (int)b->n_steps;
    if (stp->scratch > p->scratch_bytes) p->scratch_bytes = stp->scratch;
    b->n_steps++;
    p->n_steps = b->n_steps;
    if (b->fz.order && b->fz.grp[w->node] >= 0) {
        if ((st = rt_fuse_apply(s, p, &b->fz, w->node, b->fuse_first, b->node_step, err)))
            return st;
        b->n_steps = p->n_steps;
    }
    return QP_OK;
}

/* Plans the k-th node in (fusion) order: its overlay steps, then its own step, which is kept,
 * or evaluated now and dropped. */
static enum qp_status plan_node(struct build *b, size_t k, struct qp_error *err) {
    struct qp_session *s = b->s;
    struct rt_plan *p = b->p;
    const struct rt_fuse *fz = &b->fz;
    enum qp_status st;
    struct node_work w = {0};
    w.node = fz->order ? fz->order[k] : b->g->topo[k];
    w.n = &b->g->nodes[w.node];
    w.kr = s->kernels[w.node];
    b->node_step[w.node] = -1;
    if (fz->order && fz->grp[w.node] >= 0 && fz->members[fz->start[fz->grp[w.node]]] == w.node)
        b->fuse_first = b->n_steps; /* a group's first node: its steps start here */
    if ((st = plan_overlays(b, &w, err))) return st;
    w.stp = &p->steps[b->n_steps];
    if ((st = step_setup(b, &w, err))) {
        step_release(w.stp);
        return st;
    }
    int folded = w.all_const || (w.kr->flags & QP_KF_SHAPE_ONLY);
    if (w.n_const_ov && (folded || w.n_const_ov > RT_MAX_CONST_OVIN || w.stp->kind == RT_STEP_IF))
        for (int j = 0; j < w.n_pend; j++)
            p->ov_baked[b->pend[j].ov] |= RT_OV_BYPASS_BAKED;
    if (folded) {
        st = step_fold(b, &w, err);
        step_release(w.stp);
        return st;
    }
    return step_keep(b, &w, err);
}

/* Dependencies between steps (partial re-execution) and reads by If branches. */
static enum qp_status plan_deps(struct build *b, struct qp_error *err) {
    const struct qp_graph *g = b->g;
    struct rt_plan *p = b->p;
    for (size_t k = 0; k < b->n_steps; k++) {
        struct rt_step *stp = &p->steps[k];
        size_t n_refs = 0;
        if (stp->kind == RT_STEP_IF) {
            memset(b->mark, 0, g->n_values ? g->n_values : 1);
            mark_outer_refs(stp->rif->plan[0], p, g->n_values, b->mark);
            mark_outer_refs(stp->rif->plan[1], p, g->n_values, b->mark);
            for (size_t v = 0; v < g->n_values; v++)
                n_refs += b->mark[v];
        }
        stp->dep = qp_malloc_n((size_t)stp->n_in + n_refs + 1, sizeof *stp->dep);
        if (!stp->dep) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
        for (int i = 0; i < stp->n_in; i++)
            stp->dep[stp->n_dep++] =
                stp->in[i] ? producer_step(p, g, b->node_step, k, stp->in[i]) : -1;
        for (size_t v = 0; n_refs && v < g->n_values; v++) {
            if (!b->mark[v]) continue;
            int pn = g->values[v].producer;
            stp->dep[stp->n_dep++] = pn >= 0 ? b->node_step[pn] : -1;
            b->last_extra[v] = (int)k;
        }
    }
    return QP_OK;
}

static void add_req(struct build *b, struct qp_kt *t, int first, int last) {
    b->reqs[b->n_req] = (struct qp_mem_req){t->nbytes, first, last, 0, 0};
    b->req_kt[b->n_req++] = t;
}

/* The input whose arena bytes step stp's output 0 may take over, or -1. A convolution whose
 * fused residual sum can accumulate in the residual's own bytes (a float one,
 * qp_dnnl_conv_sum_in_place, residual input 3; a QConv, qp_int8_conv_sum_in_place, input 9),
 * never when it also reads the residual around each pixel (y = conv(x) + x); a row that only
 * copies its input (QP_KF_COPY: Reshape, Flatten, (Un)Squeeze, Identity, Dropout), input 0. */
static int take_over_input(const struct rt_step *stp) {
    int r = (stp->k->flags & QP_KF_DNNL_CONV) && qp_dnnl_conv_sum_in_place(stp->state) ? 3
            : (stp->k->flags & QP_KF_QCONV) && qp_int8_conv_sum_in_place(stp->state)   ? 9
            : (stp->k->flags & QP_KF_COPY)                                             ? 0
                                                                                       : -1;
    if (r < 0 || stp->n_in <= r || !stp->in[r]) return -1;
    for (int i = 0; i < r; i++)
        if (stp->in[i] == stp->in[r]) return -1;
    return r;
}

/* Step stp's output request (the last one added) asks to take over the bytes of the input
 * take_over_input names, which the memory plan grants when this step is that input's last
 * reader and it lives in the arena; the kernel then finds the input already in its destination
 * and copies nothing (a residual sum accumulates onto it; a Reshape of a MatMul's output is
 * free). QP_SUM_IN_PLACE=0 in the environment asks for no take-over (tests: the same bits either
 * way). */
static void take_over(struct build *b, const struct rt_step *stp) {
    const char *env = getenv("QP_SUM_IN_PLACE");
    if (env && strcmp(env, "0") == 0) return;
    if (stp->kind != RT_STEP_NODE || !stp->k || stp->out[0] != stp->val_out[0]) return;
    int r = take_over_input(stp);
    if (r < 0) return;
    size_t out = b->n_req - 1;
    for (size_t j = out; j-- > 0;)
        if (b->req_kt[j] == stp->in[r]) {
            if (b->reqs[j].size == b->reqs[out].size) b->reqs[out].take = j + 1;
            return;
        }
}

/* The arena requests of step k: what it writes, live until its last reader. */
static void step_reqs(struct build *b, size_t k) {
    const struct qp_graph *g = b->g;
    struct rt_plan *p = b->p;
    struct rt_step *stp = &p->steps[k];
    const struct qp_node *n = &g->nodes[rt_step_onode(stp)];
    if (stp->kind == RT_STEP_OVERLAY) {
        /* Read by the consumer, the first node step after this one. */
        size_t c = k + 1;
        while (c < b->n_steps && p->steps[c].kind == RT_STEP_OVERLAY)
            c++;
        add_req(b, stp->out[0], (int)k, (int)c);
        return;
    }
    for (int i = 0; i < stp->n_conv_in; i++)
        add_req(b, stp->conv_in[i].dst, (int)k, (int)k);
    for (int i = 0; i < n->n_outputs; i++) {
        struct qp_kt *vo = stp->val_out[i];
        if (vo) {
            int last = value_last_use(g, b->node_step, n->outputs[i], (int)b->n_steps);
            if (b->last_extra[n->outputs[i]] > last) last = b->last_extra[n->outputs[i]];
            if (last < (int)k) last = (int)k;
            add_req(b, vo, (int)k, last);
            if (i == 0) take_over(b, stp);
        }
        if (stp->out[i] && stp->out[i] != vo) add_req(b, stp->out[i], (int)k, (int)k);
    }
}

/* Liveness: step outputs and conversion temps go in the arena; then the scratch. */
static enum qp_status plan_memory(struct build *b, struct qp_error *err) {
    struct rt_plan *p = b->p;
    enum qp_status st;
    size_t cap_req = b->n_slots + b->s->n_ov + 1;
    b->reqs = calloc(cap_req, sizeof *b->reqs);
    b->req_kt = calloc(cap_req, sizeof *b->req_kt);
    if (!b->reqs || !b->req_kt) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
    for (size_t k = 0; k < b->n_steps; k++)
        step_reqs(b, k);
    if ((st = qp_memplan(b->reqs, b->n_req, RT_ALIGN, &p->arena_bytes, err))) return st;
    size_t n_taken = 0;
    for (size_t i = 0; i < b->n_req; i++)
        n_taken += b->reqs[i].take && b->reqs[i].size &&
                   b->reqs[i].offset == b->reqs[b->reqs[i].take - 1].offset;
    if (n_taken) qp_log(QP_LOG_DEBUG, "session: %zu outputs take over an input's bytes", n_taken);
    if (p->arena_bytes) {
        p->arena = aligned_alloc(RT_ALIGN, p->arena_bytes);
        if (!p->arena)
            return qp_error_set(err, QP_ERR_NOMEM, "session: cannot allocate a %zu-byte arena",
                                p->arena_bytes);
    }
    for (size_t i = 0; i < b->n_req; i++)
        b->req_kt[i]->data =
            b->req_kt[i]->nbytes ? (unsigned char *)p->arena + b->reqs[i].offset : rt_empty;
    if (p->scratch_bytes) {
        p->scratch = aligned_alloc(RT_ALIGN, p->scratch_bytes);
        if (!p->scratch)
            return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory for scratch");
    }
    return QP_OK;
}

/* Everything after the tables are allocated: the plan's steps, settled, laid out, with
 * dependencies and memory. */
static enum qp_status build_steps(struct build *b, const int *ranks,
                                  const int64_t (*dims)[QP_MAX_RANK], struct qp_error *err) {
    struct rt_plan *p = b->p;
    enum qp_status st;
    if (b->s->parent && (st = bind_outer(b->s, p, err))) return st;
    if ((st = bind_inits(b, err))) return st;
    if ((st = bind_inputs(b, ranks, dims, err))) return st;
    for (size_t k = 0; k < b->g->n_topo; k++)
        if ((st = plan_node(b, k, err))) return st;
    p->n_steps = b->n_steps;
    if ((st = rt_fuse_settle(b->s, p, err))) return st;
    /* The steps with bypass variants, by their final indices (fusion moves steps). */
    p->n_cov_steps = 0;
    for (size_t k = 0; k < b->n_steps; k++)
        if (p->steps[k].n_var) p->cov_steps[p->n_cov_steps++] = (int)k;
    if ((st = rt_layout_apply(b->s, p, b->node_step, err))) return st;
    if ((st = plan_deps(b, err))) return st;
    return plan_memory(b, err);
}

enum qp_status rt_plan_build(struct qp_session *s, const int *ranks,
                             const int64_t (*dims)[QP_MAX_RANK], const struct qp_array *inputs,
                             struct rt_plan **plan_out, int *retry_out, struct qp_error *err) {
    *retry_out = 0;
    enum qp_status st;
    struct build b = {.s = s, .g = s->g, .inputs = inputs, .retry_out = retry_out};
    if ((st = rt_fuse_find(s, &b.fz, err))) return st;
    b.p = calloc(1, sizeof *b.p);
    if (!b.p) {
        rt_fuse_free(&b.fz);
        return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
    }
    if ((st = build_alloc(&b, err)) || (st = build_steps(&b, ranks, dims, err))) {
        build_release(&b);
        rt_plan_free(b.p, s->n_inputs);
        return st;
    }
    build_release(&b);
    s->n_plans_built++;
    *plan_out = b.p;
    return QP_OK;
}

/* Makes the plan's scratch at least `bytes` long. */
static enum qp_status grow_scratch(struct rt_plan *p, size_t bytes, struct qp_error *err) {
    if (bytes <= p->scratch_bytes) return QP_OK;
    void *ns = aligned_alloc(RT_ALIGN, bytes);
    if (!ns) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory for scratch");
    free(p->scratch);
    p->scratch = ns;
    p->scratch_bytes = bytes;
    return QP_OK;
}

/* Prepares the kernel of unfused node step `stp` once more, with its constant overlay inputs
 * applied per `mask` (bypassed ones read the original constant), into *var_out. */
static enum qp_status prepare_variant(const struct qp_session *s, const struct rt_step *stp,
                                      unsigned mask, struct rt_variant *var_out,
                                      struct qp_error *err) {
    const struct qp_node *n = &s->g->nodes[stp->node];
    enum qp_status st = QP_OK;
    const struct qp_kt **in = calloc((size_t)stp->n_in + 1, sizeof *in);
    struct qp_kt *outs = calloc((size_t)stp->n_out + 1, sizeof *outs);
    struct qp_kt **out = calloc((size_t)stp->n_out + 1, sizeof *out);
    if (!in || !outs || !out) {
        st = qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
        goto done;
    }
    for (int i = 0; i < stp->n_in; i++)
        in[i] = stp->in[i];
    for (int j = 0, c = 0; j < stp->n_ovin; j++) {
        const struct rt_ovin *o = &stp->ovin[j];
        if (!o->is_const) continue;
        in[o->input] = mask >> c & 1u ? o->fq : o->orig;
        c++;
    }
    for (int i = 0; i < stp->n_out; i++)
        if (stp->out[i]) {
            outs[i] = *stp->out[i];
            out[i] = &outs[i];
        }
    struct qp_kprep pr = {.node = n,
                          .opset = s->opsets[stp->node],
                          .n_in = stp->n_in,
                          .n_out = stp->n_out,
                          .in = in,
                          .out = out,
                          .err = err,
                          .missing_const = -1};
    if ((st = stp->k->prepare(&pr)) != QP_OK) {
        free(pr.state);
        node_err(err, s->g, stp->node, NULL);
        goto done;
    }
    for (int i = 0; i < stp->n_out; i++)
        if (out[i] &&
            (out[i]->dtype != stp->out[i]->dtype || out[i]->rank != stp->out[i]->rank ||
             memcmp(out[i]->dims, stp->out[i]->dims, sizeof(int64_t) * (size_t)out[i]->rank))) {
            free(pr.state);
            st = qp_error_set(err, QP_ERR_INTERNAL,
                              "session: node '%s' (%s): output %d changes with the bypass of a "
                              "constant overlay",
                              n->name ? n->name : "", n->op_type, i);
            goto done;
        }
    *var_out = (struct rt_variant){mask, pr.state,
                                   (pr.scratch + RT_ALIGN - 1) / RT_ALIGN * RT_ALIGN, NULL, NULL};
done:
    free(in);
    free(outs);
    free(out);
    return st;
}

enum qp_status rt_plan_sync_overlays(const struct qp_session *s, struct rt_plan *p,
                                     struct qp_error *err) {
    for (size_t i = 0; i < p->n_cov_steps; i++) {
        struct rt_step *stp = &p->steps[p->cov_steps[i]];
        unsigned mask = 0;
        for (int j = 0, c = 0; j < stp->n_ovin; j++) {
            if (!stp->ovin[j].is_const) continue;
            if (!s->ov[stp->ovin[j].ov].bypass) mask |= 1u << c;
            c++;
        }
        if (stp->var[stp->cur_var].mask == mask) continue;
        int found = -1;
        for (int j = 0; j < stp->n_var && found < 0; j++)
            if (stp->var[j].mask == mask) found = j;
        if (found < 0) { /* a combination not seen before: prepare it */
            struct rt_variant nv;
            struct rt_variant *grown =
                qp_realloc_n(stp->var, (size_t)stp->n_var + 1, sizeof *stp->var);
            if (!grown) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
            stp->var = grown;
            enum qp_status st = stp->fuse ? rt_fuse_prepare_variant(s, p, stp, mask, &nv, err)
                                          : prepare_variant(s, stp, mask, &nv, err);
            if (st == QP_OK && (st = grow_scratch(p, nv.scratch, err))) {
                free(nv.state);
                free(nv.own);
            }
            if (st != QP_OK) return st;
            rt_layout_state(stp, nv.state);
            stp->var[stp->n_var] = nv;
            found = stp->n_var++;
        }
        stp->cur_var = found;
        stp->state = stp->var[found].state;
        if (stp->var[found].in2) stp->in[2] = stp->var[found].in2;
    }
    return QP_OK;
}
