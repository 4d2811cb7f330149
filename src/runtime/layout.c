/*
 * The layout pass: after fusion, keeps tensors that only oneDNN convolutions read in the
 * primitives' blocked layouts, so no reorder runs between them.
 */
#include <stdlib.h>

#include "kernels/dnnl_conv.h"
#include "kernels/dnnl_util.h"
#include "kernels/kernels.h"
#include "runtime/runtime.h"

/* The overlay on (node, input), if any. */
static int has_overlay(const struct qp_session *s, int node, int input) {
    for (size_t i = 0; i < s->n_ov; i++)
        if (s->ov[i].node == node && s->ov[i].input == input) return 1;
    return 0;
}

static int is_conv_step(const struct rt_step *st) {
    return st->kind == RT_STEP_NODE && st->k &&
           (st->k->run == qp_k_dnnl_conv_run || st->k->run == qp_k_dnnl_conv_transpose_run) &&
           !st->n_conv_in && !st->n_conv_out && st->out[0] && st->out[0] == st->val_out[0] &&
           qp_dnnl_conv_state_uses_dnnl(st->state);
}

enum qp_status rt_layout_apply(const struct qp_session *s, struct rt_plan *p, const int *node_step,
                               struct qp_error *err) {
    const struct qp_graph *g = s->g;
    (void)err;
    if (rt_fuse_disabled() || s->no_fusion || !qp_dnnl_enabled() || s->parent || s->ifs)
        return QP_OK;
    for (size_t k = 0; k < p->n_steps; k++) {
        struct rt_step *st = &p->steps[k];
        if (!is_conv_step(st)) continue;
        size_t bytes = 0;
        const void *md = qp_dnnl_conv_blocked_dst(st->state, &bytes);
        if (!md || st->out[0] < p->vals || st->out[0] >= p->vals + g->n_values) continue;
        int v = (int)(st->out[0] - p->vals);
        const struct qp_value *val = &g->values[v];
        if (val->is_graph_output || val->n_uses == 0 ||
            (s->observer && (!s->observed || s->observed[v])))
            continue;
        /* Every reader is a oneDNN convolution that takes this layout where it reads v. */
        int ok = 1;
        for (size_t u = 0; ok && u < val->n_uses; u++) {
            int c = val->uses[u].node;
            int kc = node_step[c];
            if (has_overlay(s, c, val->uses[u].input) || kc < 0 || !is_conv_step(&p->steps[kc])) {
                ok = 0;
                break;
            }
            const struct rt_step *sc = &p->steps[kc];
            int reads = 0;
            for (int i = 0; i < sc->n_in; i++) {
                if (sc->in[i] != st->out[0]) continue;
                reads = 1;
                if ((i != 0 && i != 3) || !qp_dnnl_conv_accepts(sc->state, i, md)) ok = 0;
            }
            if (!reads) ok = 0;
        }
        if (!ok) continue;
        qp_dnnl_conv_set_blocked(st->state, -1, 1);
        for (size_t u = 0; u < val->n_uses; u++) {
            struct rt_step *sc = &p->steps[node_step[val->uses[u].node]];
            for (int i = 0; i < sc->n_in; i++)
                if (sc->in[i] == st->out[0]) qp_dnnl_conv_set_blocked(sc->state, i, 1);
        }
        if (bytes > st->out[0]->nbytes) st->out[0]->nbytes = bytes;
        p->blocked[v] = 1;
        p->n_blocked++;
    }
    return QP_OK;
}
