/*
 * The layout pass: after fusion, keeps tensors between oneDNN convolutions in the primitives'
 * blocked layouts (nChw8c on AVX2; NHWC or nChw16c on AVX-512), so no reorder runs between them.
 *
 * A tensor is kept blocked when it comes from a oneDNN convolution that writes a blocked layout,
 * or from a layout-transparent step (an elementwise activation, or Add/Sub/Mul/Div of
 * same-shape tensors or a scalar) all of whose full-shape inputs are kept blocked in one layout,
 * and when every reader takes it that way:
 *   - a oneDNN convolution that accepts the layout as its source (input 0) or residual (3);
 *   - a layout-transparent step whose output is kept blocked too;
 *   - a per-tensor edge overlay (fake quantization is elementwise with one scale) in front of
 *     such a reader: its output is then in the same layout;
 *   - the observer, when the session's observer declared itself order-agnostic
 *     (qp_session_set_observer_any_order): it then sees the elements in blocked order;
 *   - a float32 MaxPool (no Indices output) when the layout is channels last (NHWC, no
 *     padding): it then runs channels last (kernels/pool.h) and its output is a candidate in
 *     that layout too, so ResNet's stem convolution and the ones after the pool do not reorder
 *     (QP_LAYOUT_POOL=0 turns this off).
 * Elementwise readers, overlays and observers see the bytes as a flat array, so those three need
 * a layout without padding (channels a multiple of the block); convolutions read padded tensors.
 * Graph outputs stay plain. The pass starts from every candidate and drops, until nothing
 * changes, any whose readers or (for transparent steps) inputs do not qualify.
 */
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "kernels/dnnl_conv.h"
#include "kernels/dnnl_util.h"
#include "kernels/pool.h"
#include "runtime/runtime.h"

static int is_conv_step(const struct rt_step *st) {
    return st->kind == RT_STEP_NODE && st->k && (st->k->flags & QP_KF_DNNL_CONV) &&
           !st->n_conv_in && !st->n_conv_out && st->out[0] && st->out[0] == st->val_out[0] &&
           qp_dnnl_conv_state_uses_dnnl(st->state);
}

/* An elementwise step over float tensors that computes each output element from the elements
 * at the same offset (or a scalar), whatever order those offsets stand for. */
static int is_transparent(const struct rt_step *st) {
    if (st->kind != RT_STEP_NODE || st->nodes || !st->k || st->n_conv_in || st->n_conv_out ||
        st->n_out != 1 || !st->out[0] || st->out[0] != st->val_out[0] ||
        st->out[0]->dtype != QP_DTYPE_FLOAT)
        return 0;
    const struct qp_kt *y = st->out[0];
    if (st->k->flags & QP_KF_LAYOUT_UNARY)
        return st->in[0] && rt_same_shape(st->in[0], y); /* y is float */
    if (!(st->k->flags & QP_KF_LAYOUT_BINARY) || st->n_in != 2) return 0;
    for (int i = 0; i < 2; i++) {
        const struct qp_kt *x = st->in[i];
        if (!x || x->dtype != QP_DTYPE_FLOAT || (!rt_same_shape(x, y) && x->numel != 1)) return 0;
    }
    return 1;
}

/* QP_LAYOUT_POOL=0 keeps MaxPool steps plain (comparisons, tests). */
static int pools_allowed(void) {
    const char *e = getenv("QP_LAYOUT_POOL");
    return !e || strcmp(e, "0") != 0;
}

/* A float32 MaxPool step that can run channels last (kernels/pool.h). */
static int is_pool_step(const struct rt_step *st) {
    return pools_allowed() && st->kind == RT_STEP_NODE && !st->nodes && st->k &&
           strcmp(st->k->op, "MaxPool") == 0 && !st->n_conv_in && !st->n_conv_out &&
           st->n_in >= 1 && st->in[0] && st->in[0]->dtype == QP_DTYPE_FLOAT && st->out[0] &&
           st->out[0] == st->val_out[0] && st->out[0]->dtype == QP_DTYPE_FLOAT &&
           !(st->n_out > 1 && st->out[1]) && qp_pool_nhwc_capable(st->state);
}

/* Inputs of a transparent step that carry the layout (not the scalars, nor Clip's bounds). */
static int carries(const struct rt_step *st, int i) {
    const struct qp_kt *x = st->in[i];
    if (!x) return 0;
    if (st->k->flags & QP_KF_LAYOUT_UNARY) return i == 0;
    return rt_same_shape(x, st->out[0]);
}

struct pass {
    const struct qp_session *s;
    struct rt_plan *p;
    const int *node_step;
    int *prod;                   /* per value: producing step, -1 */
    const void **md;             /* per value: its blocked layout (candidates) */
    dnnl_memory_desc_t *pool_md; /* per MaxPool step, in step order: its output's layout */
    unsigned char *cand;         /* per value: still a candidate */
    unsigned char *flat;         /* per value: the blocked layout has no padding */
};

/* The value step input `i` reads (through an overlay when there is one), or -1. */
static int read_value(const struct pass *ps, const struct rt_step *st, int i) {
    for (int j = 0; j < st->n_ovin; j++)
        if (st->ovin[j].input == i) {
            const struct qp_kt *o = st->ovin[j].orig;
            return o >= ps->p->vals && o < ps->p->vals + ps->s->g->n_values ? (int)(o - ps->p->vals)
                                                                            : -1;
        }
    const struct qp_kt *t = st->in[i];
    return t && t >= ps->p->vals && t < ps->p->vals + ps->s->g->n_values ? (int)(t - ps->p->vals)
                                                                         : -1;
}

/* 1 when candidate v may stay blocked given the other candidates. */
static int keeps(const struct pass *ps, int v) {
    const struct qp_session *s = ps->s;
    const struct qp_value *val = &s->g->values[v];
    if (val->is_graph_output || val->n_uses == 0) return 0;
    if (s->observer && (!s->observed || s->observed[v]) && !(s->observer_any_order && ps->flat[v]))
        return 0;
    const struct rt_step *ps_st = &ps->p->steps[ps->prod[v]];
    if (is_transparent(ps_st))
        for (int i = 0; i < ps_st->n_in; i++)
            if (carries(ps_st, i)) {
                int x = read_value(ps, ps_st, i);
                if (x < 0 || !ps->cand[x]) return 0;
            }
    if (is_pool_step(ps_st)) {
        int x = read_value(ps, ps_st, 0);
        if (x < 0 || !ps->cand[x]) return 0;
    }
    for (size_t u = 0; u < val->n_uses; u++) {
        int c = val->uses[u].node, kc = ps->node_step[c];
        if (kc < 0) return 0;
        int oi = rt_overlay_index(s->ov, s->n_ov, c, val->uses[u].input);
        if (oi >= 0 && (s->ov[oi].n_params != 1 || !ps->flat[v])) return 0;
        const struct rt_step *sc = &ps->p->steps[kc];
        int reads = 0;
        for (int i = 0; i < sc->n_in; i++) {
            if (read_value(ps, sc, i) != v) continue;
            reads = 1;
            if (is_conv_step(sc)) {
                if ((i != 0 && i != 3) || !qp_dnnl_conv_accepts(sc->state, i, ps->md[v])) return 0;
            } else if ((is_transparent(sc) && carries(sc, i)) || (is_pool_step(sc) && i == 0)) {
                int w = (int)(sc->out[0] - ps->p->vals);
                if (!ps->cand[w]) return 0;
            } else {
                return 0;
            }
        }
        if (!reads) return 0;
    }
    return 1;
}

enum qp_status rt_layout_apply(const struct qp_session *s, struct rt_plan *p, const int *node_step,
                               struct qp_error *err) {
    const struct qp_graph *g = s->g;
    if (rt_fuse_disabled() || s->no_fusion || !qp_dnnl_enabled() || s->parent || s->ifs)
        return QP_OK;
    size_t nv = g->n_values ? g->n_values : 1;
    struct pass ps = {.s = s, .p = p, .node_step = node_step};
    ps.prod = qp_malloc_n(nv, sizeof *ps.prod);
    ps.md = calloc(nv, sizeof *ps.md);
    ps.cand = calloc(nv, 1);
    ps.flat = calloc(nv, 1);
    size_t n_pool = 0; /* descriptors are large (696 bytes): one per MaxPool step only */
    for (size_t k = 0; k < p->n_steps; k++)
        n_pool += is_pool_step(&p->steps[k]);
    ps.pool_md = calloc(n_pool ? n_pool : 1, sizeof *ps.pool_md);
    size_t *bytes = calloc(nv, sizeof *bytes);
    enum qp_status st = QP_OK;
    if (!ps.prod || !ps.md || !ps.cand || !ps.flat || !ps.pool_md || !bytes) {
        st = qp_error_set(err, QP_ERR_NOMEM, "session: out of memory (layout pass)");
        goto done;
    }
    for (size_t v = 0; v < nv; v++)
        ps.prod[v] = -1;
    /* Candidates, in step order (a transparent step's inputs come before it). */
    size_t at_pool = 0;
    for (size_t k = 0; k < p->n_steps; k++) {
        const struct rt_step *stp = &p->steps[k];
        const struct qp_kt *y = stp->kind == RT_STEP_NODE ? stp->out[0] : NULL;
        if (!y || y < p->vals || y >= p->vals + g->n_values) continue;
        int v = (int)(y - p->vals);
        if (is_conv_step(stp)) {
            const void *md = qp_dnnl_conv_blocked_dst(stp->state, &bytes[v]);
            if (!md) continue;
            ps.md[v] = md;
            ps.flat[v] = bytes[v] == y->nbytes;
        } else if (is_transparent(stp)) {
            const void *md = NULL;
            int ok = 1;
            for (int i = 0; ok && i < stp->n_in; i++) {
                if (!carries(stp, i)) continue;
                int x = read_value(&ps, stp, i);
                ok = x >= 0 && ps.cand[x] && ps.flat[x] &&
                     (!md || qp_dnnl_conv_md_equal(md, ps.md[x]));
                if (ok) md = ps.md[x];
            }
            if (!ok || !md) continue;
            ps.md[v] = md;
            ps.flat[v] = 1;
            bytes[v] = y->nbytes;
        } else if (is_pool_step(stp)) {
            dnnl_memory_desc_t *md = &ps.pool_md[at_pool++];
            int x = read_value(&ps, stp, 0);
            if (x < 0 || !ps.cand[x] || !ps.flat[x] || !qp_dnnl_md_is_nhwc(ps.md[x]) ||
                !qp_dnnl_md_nhwc_f32(md, y->rank, y->dims))
                continue;
            ps.md[v] = md;
            ps.flat[v] = 1;
            bytes[v] = y->nbytes;
        } else {
            continue;
        }
        ps.prod[v] = (int)k;
        ps.cand[v] = 1;
    }
    /* Drop what does not qualify until nothing changes. */
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t v = 0; v < g->n_values; v++)
            if (ps.cand[v] && !keeps(&ps, (int)v)) {
                ps.cand[v] = 0;
                changed = 1;
            }
    }
    for (size_t v = 0; v < g->n_values; v++) {
        if (!ps.cand[v]) continue;
        struct rt_step *pr = &p->steps[ps.prod[v]];
        if (is_conv_step(pr)) {
            pr->layout |= RT_LAYOUT_DST;
            qp_dnnl_conv_set_blocked(pr->state, -1, 1);
            if (bytes[v] > pr->out[0]->nbytes) pr->out[0]->nbytes = bytes[v];
        } else if (is_pool_step(pr)) {
            pr->layout |= RT_LAYOUT_SRC | RT_LAYOUT_DST;
            qp_pool_set_nhwc(pr->state);
        }
        const struct qp_value *val = &g->values[v];
        for (size_t u = 0; u < val->n_uses; u++) {
            struct rt_step *sc = &p->steps[node_step[val->uses[u].node]];
            if (!is_conv_step(sc)) continue;
            for (int i = 0; i < sc->n_in; i++)
                if (read_value(&ps, sc, i) == (int)v) {
                    sc->layout |= i == 0 ? RT_LAYOUT_SRC : RT_LAYOUT_RES;
                    qp_dnnl_conv_set_blocked(sc->state, i, 1);
                }
        }
        p->blocked[v] = 1;
        p->n_blocked++;
    }
    if (p->n_blocked) qp_log(QP_LOG_DEBUG, "session: %zu tensors kept blocked", p->n_blocked);
done:
    free(ps.prod);
    free(ps.md);
    free(ps.cand);
    free(ps.flat);
    free(ps.pool_md);
    free(bytes);
    return st;
}

void rt_layout_state(const struct rt_step *st, void *state) {
    if (st->layout && is_pool_step(st)) {
        qp_pool_set_nhwc(state);
        return;
    }
    if (!st->layout || !qp_dnnl_conv_state_uses_dnnl(state)) return;
    if (st->layout & RT_LAYOUT_SRC) qp_dnnl_conv_set_blocked(state, 0, 1);
    if (st->layout & RT_LAYOUT_RES) qp_dnnl_conv_set_blocked(state, 3, 1);
    if (st->layout & RT_LAYOUT_DST) qp_dnnl_conv_set_blocked(state, -1, 1);
}
