/*
 * Building a plan for one input shape set: prepare every node in topological order, evaluate
 * what is computable ahead of time, then place the remaining tensors in one arena by liveness.
 */
#include <stdlib.h>
#include <string.h>

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
        void **o = realloc(p->owned, cap * sizeof *o);
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

void rt_plan_free(struct rt_plan *p, size_t n_inputs) {
    (void)n_inputs;
    if (!p) return;
    for (size_t i = 0; i < p->n_steps; i++) {
        struct rt_step *st = &p->steps[i];
        free(st->state);
        free(st->in);
        free(st->conv_in);
    }
    free(p->steps);
    for (size_t i = 0; i < p->n_owned; i++)
        free(p->owned[i]);
    free(p->owned);
    free(p->arena);
    free(p->scratch);
    free(p->vals);
    free(p->temps);
    free(p->in_rank);
    free(p->in_key);
    free(p->in_key_bytes);
    free(p->in_dims);
    free(p);
}

static void convert_f16_to_f32(const struct qp_kt *src, struct qp_kt *dst) {
    const uint16_t *a = src->data;
    float *b = dst->data;
    for (uint64_t i = 0; i < src->numel; i++)
        b[i] = qp_fp16_to_f32(a[i]);
}

static void convert_f32_to_f16(const struct qp_kt *src, struct qp_kt *dst) {
    const float *a = src->data;
    uint16_t *b = dst->data;
    for (uint64_t i = 0; i < src->numel; i++)
        b[i] = qp_f32_to_fp16(a[i]);
}

enum qp_status rt_step_run(const struct qp_session *s, struct rt_plan *p, struct rt_step *st,
                           void *scratch, struct qp_error *err) {
    (void)p;
    for (int i = 0; i < st->n_conv_in; i++)
        convert_f16_to_f32(st->conv_in[i].src, st->conv_in[i].dst);
    struct qp_krun r = {.node = &s->g->nodes[st->node],
                        .state = st->state,
                        .n_in = st->n_in,
                        .n_out = st->n_out,
                        .in = (const struct qp_kt *const *)st->in,
                        .out = st->out,
                        .scratch = scratch,
                        .n_threads = s->n_threads,
                        .err = err};
    enum qp_status rc = st->k->run(&r);
    if (rc != QP_OK) return node_err(err, s->g, st->node, NULL);
    for (int i = 0; i < st->n_conv_out; i++)
        convert_f32_to_f16(st->conv_out[i].src, st->conv_out[i].dst);
    return QP_OK;
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
    int *stack = malloc((g->n_values + 1) * sizeof *stack);
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

enum qp_status rt_plan_build(struct qp_session *s, const int *ranks,
                             const int64_t (*dims)[QP_MAX_RANK], const struct qp_array *inputs,
                             struct rt_plan **plan_out, int *retry_out, struct qp_error *err) {
    *retry_out = 0;
    const struct qp_graph *g = s->g;
    enum qp_status st = QP_OK;
    struct qp_mem_req *reqs = NULL;
    struct qp_kt **req_kt = NULL;
    int *node_step = NULL;
    void *fold_scratch = NULL;
    struct rt_plan *p = calloc(1, sizeof *p);
    if (!p) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
    size_t ni = s->n_inputs ? s->n_inputs : 1;
    p->in_rank = calloc(ni, sizeof *p->in_rank);
    p->in_key = calloc(ni, sizeof *p->in_key);
    p->in_key_bytes = calloc(ni, sizeof *p->in_key_bytes);
    p->in_dims = calloc(ni, sizeof *p->in_dims);
    p->vals = calloc(g->n_values ? g->n_values : 1, sizeof *p->vals);
    size_t n_slots = 0;
    for (size_t k = 0; k < g->n_topo; k++) {
        const struct qp_node *n = &g->nodes[g->topo[k]];
        n_slots += (size_t)n->n_inputs + (size_t)n->n_outputs;
    }
    p->cap_temps = n_slots + 1;
    p->temps = calloc(p->cap_temps, sizeof *p->temps);
    p->steps = calloc(g->n_topo ? g->n_topo : 1, sizeof *p->steps);
    node_step = malloc((g->n_nodes ? g->n_nodes : 1) * sizeof *node_step);
    if (!p->in_rank || !p->in_key || !p->in_key_bytes || !p->in_dims || !p->vals || !p->temps ||
        !p->steps || !node_step) {
        st = qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < s->n_inputs; i++) {
        p->in_rank[i] = ranks[i];
        memcpy(p->in_dims[i], dims[i], sizeof p->in_dims[i]);
    }

    /* Initializers: constants borrowed from the model. */
    for (size_t i = 0; i < g->n_inits; i++) {
        const struct qp_tensor *t = &g->inits[i];
        struct qp_kt *kt = &p->vals[g->inits_value[i]];
        if (t->dtype == QP_DTYPE_STRING || t->rank > QP_MAX_RANK) {
            kt->dtype = QP_DTYPE_UNDEFINED; /* only an error if a kernel reads it */
            continue;
        }
        struct qp_error e2 = {0};
        if (qp_kt_set(kt, t->dtype, t->rank, t->dims, &e2) != QP_OK || kt->nbytes != t->nbytes ||
            (!t->data && t->nbytes)) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "session: initializer '%s' has no data or a size that does not "
                              "match its shape",
                              t->name ? t->name : "");
            goto fail;
        }
        kt->data = t->data ? (void *)t->data : rt_empty;
        kt->is_const = 1;
    }
    /* Caller inputs. */
    for (size_t i = 0; i < s->n_inputs; i++) {
        const struct qp_value *val = &g->values[s->inputs[i]];
        struct qp_kt *kt = &p->vals[s->inputs[i]];
        if ((st = qp_kt_set(kt, val->dtype, ranks[i], dims[i], err)) != QP_OK) {
            qp_error_prefix(err, "session: input '%s'", val->name);
            goto fail;
        }
        kt->data = rt_empty;
        if (s->keyed[i] && inputs) {
            void *copy;
            if ((st = own(p, kt->nbytes, &copy, err))) goto fail;
            if (kt->nbytes) memcpy(copy, inputs[i].data, kt->nbytes);
            kt->data = copy;
            kt->is_const = 1;
            p->in_key[i] = copy;
            p->in_key_bytes[i] = kt->nbytes;
        }
    }

    /* Prepare node by node. */
    size_t n_steps = 0;
    for (size_t k = 0; k < g->n_topo; k++) {
        int ni_ = g->topo[k];
        const struct qp_node *n = &g->nodes[ni_];
        const struct qp_kernel *kr = s->kernels[ni_];
        struct rt_step *stp = &p->steps[n_steps];
        memset(stp, 0, sizeof *stp);
        node_step[ni_] = -1;
        stp->node = ni_;
        stp->k = kr;
        stp->n_in = n->n_inputs;
        stp->n_out = n->n_outputs;
        size_t nptr = (size_t)(n->n_inputs + 2 * n->n_outputs) + 1;
        stp->in = calloc(nptr, sizeof *stp->in);
        stp->conv_in = calloc((size_t)(n->n_inputs + n->n_outputs) + 1, sizeof *stp->conv_in);
        if (!stp->in || !stp->conv_in) {
            free(stp->in);
            free(stp->conv_in);
            stp->in = NULL;
            stp->conv_in = NULL;
            st = qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
            goto fail;
        }
        stp->out = stp->in + n->n_inputs;
        stp->val_out = stp->out + n->n_outputs;
        int all_const = 1, any_f16 = 0;
        for (int i = 0; i < n->n_inputs; i++) {
            int v = n->inputs[i];
            if (v < 0) continue;
            struct qp_kt *kt = &p->vals[v];
            if (kt->dtype == QP_DTYPE_UNDEFINED) {
                st = qp_error_set(err, QP_ERR_UNSUPPORTED,
                                  "input %d '%s' has no dtype the engine can compute "
                                  "(string or outer-scope tensor)",
                                  i, g->values[v].name);
                node_err(err, g, ni_, NULL);
                free(stp->in);
                free(stp->conv_in);
                stp->in = NULL;
                stp->conv_in = NULL;
                goto fail;
            }
            stp->in[i] = kt;
            if (!kt->is_const) all_const = 0;
            if (kt->dtype == QP_DTYPE_FLOAT16) any_f16 = 1;
        }
        /* Dtype check against the row. */
        if (kr->dtypes != QP_DT_ANY && kr->dtype_input < n->n_inputs && stp->in[kr->dtype_input] &&
            !(kr->dtypes & QP_DT(stp->in[kr->dtype_input]->dtype))) {
            enum qp_dtype dt = stp->in[kr->dtype_input]->dtype;
            st = qp_error_set(err, QP_ERR_UNSUPPORTED,
                              "session: node '%s' (%s): no kernel for domain '%s' opset %d with "
                              "input %d of dtype %s",
                              n->name ? n->name : "", n->op_type,
                              n->domain && n->domain[0] ? n->domain : "ai.onnx", s->opsets[ni_],
                              kr->dtype_input, qp_dtype_name(dt));
            goto fail_step;
        }
        /* float16 through float32. */
        int convert = any_f16 && (kr->flags & QP_KF_F16_VIA_F32);
        if (convert) {
            for (int i = 0; i < n->n_inputs; i++) {
                struct qp_kt *src = stp->in[i];
                if (!src || src->dtype != QP_DTYPE_FLOAT16) continue;
                struct qp_kt *t = new_temp(p);
                if (!t || (st = qp_kt_set(t, QP_DTYPE_FLOAT, src->rank, src->dims, err))) {
                    if (!t) st = qp_error_set(err, QP_ERR_INTERNAL, "session: temp overflow");
                    goto fail_step;
                }
                if (src->is_const) {
                    if ((st = own(p, t->nbytes, &t->data, err))) goto fail_step;
                    convert_f16_to_f32(src, t);
                    t->is_const = 1;
                } else {
                    stp->conv_in[stp->n_conv_in++] = (struct rt_conv){src, t};
                }
                stp->in[i] = t;
            }
        }
        for (int i = 0; i < n->n_outputs; i++) {
            int v = n->outputs[i];
            if (v >= 0) {
                stp->out[i] = stp->val_out[i] = &p->vals[v];
            } else if (i == 0) {
                stp->out[0] = new_temp(p); /* kernels may rely on output 0 */
                if (!stp->out[0]) {
                    st = qp_error_set(err, QP_ERR_INTERNAL, "session: temp overflow");
                    goto fail_step;
                }
            }
        }
        struct qp_kprep pr = {.node = n,
                              .opset = s->opsets[ni_],
                              .n_in = n->n_inputs,
                              .n_out = n->n_outputs,
                              .in = (const struct qp_kt *const *)stp->in,
                              .out = stp->out,
                              .err = err};
        pr.missing_const = -1;
        st = kr->prepare(&pr);
        stp->state = pr.state;
        if (st != QP_OK && pr.missing_const >= 0 && pr.missing_const < n->n_inputs &&
            n->inputs[pr.missing_const] >= 0) {
            if (mark_keyed(s, n->inputs[pr.missing_const]))
                *retry_out = 1;
            else {
                for (size_t i = 0; i < s->n_inputs; i++)
                    if (s->keyed[i] && !inputs) *retry_out = 2;
            }
        }
        stp->scratch = (pr.scratch + RT_ALIGN - 1) / RT_ALIGN * RT_ALIGN;
        if (st != QP_OK) {
            node_err(err, g, ni_, NULL);
            goto fail_step;
        }
        if (convert) {
            struct rt_conv *co = stp->conv_in + stp->n_conv_in;
            stp->conv_out = co;
            for (int i = 0; i < n->n_outputs; i++) {
                struct qp_kt *o = stp->out[i];
                if (!o || o->dtype != QP_DTYPE_FLOAT || !stp->val_out[i]) continue;
                struct qp_kt *t = new_temp(p);
                if (!t) {
                    st = qp_error_set(err, QP_ERR_INTERNAL, "session: temp overflow");
                    goto fail_step;
                }
                *t = *o;
                if ((st = qp_kt_set(o, QP_DTYPE_FLOAT16, t->rank, t->dims, err))) goto fail_step;
                stp->out[i] = t;
                co[stp->n_conv_out++] = (struct rt_conv){t, o};
            }
        }
        if (all_const || (kr->flags & QP_KF_SHAPE_ONLY)) {
            /* Evaluate now; outputs become constants. */
            for (int i = 0; i < stp->n_conv_in; i++)
                if ((st = own(p, stp->conv_in[i].dst->nbytes, &stp->conv_in[i].dst->data, err)))
                    goto fail_step;
            for (int i = 0; i < n->n_outputs; i++) {
                if (stp->out[i] && (st = own(p, stp->out[i]->nbytes, &stp->out[i]->data, err)))
                    goto fail_step;
                if (stp->val_out[i] && stp->val_out[i] != stp->out[i] &&
                    (st = own(p, stp->val_out[i]->nbytes, &stp->val_out[i]->data, err)))
                    goto fail_step;
            }
            free(fold_scratch);
            fold_scratch = stp->scratch ? aligned_alloc(RT_ALIGN, stp->scratch) : NULL;
            if (stp->scratch && !fold_scratch) {
                st = qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
                goto fail_step;
            }
            if ((st = rt_step_run(s, p, stp, fold_scratch, err))) goto fail_step;
            for (int i = 0; i < n->n_outputs; i++) {
                if (stp->out[i]) stp->out[i]->is_const = 1;
                if (stp->val_out[i]) stp->val_out[i]->is_const = 1;
            }
            free(stp->state);
            free(stp->in);
            free(stp->conv_in);
            memset(stp, 0, sizeof *stp);
            continue;
        }
        node_step[ni_] = (int)n_steps;
        if (stp->scratch > p->scratch_bytes) p->scratch_bytes = stp->scratch;
        n_steps++;
        p->n_steps = n_steps;
        continue;
    fail_step:
        free(stp->state);
        free(stp->in);
        free(stp->conv_in);
        memset(stp, 0, sizeof *stp);
        goto fail;
    }
    p->n_steps = n_steps;

    /* Liveness: step outputs and conversion temps go in the arena. */
    size_t n_req = 0, cap_req = n_slots + 1;
    reqs = calloc(cap_req, sizeof *reqs);
    req_kt = calloc(cap_req, sizeof *req_kt);
    if (!reqs || !req_kt) {
        st = qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
        goto fail;
    }
    for (size_t k = 0; k < n_steps; k++) {
        struct rt_step *stp = &p->steps[k];
        const struct qp_node *n = &g->nodes[stp->node];
        for (int i = 0; i < stp->n_conv_in; i++) {
            reqs[n_req] = (struct qp_mem_req){stp->conv_in[i].dst->nbytes, (int)k, (int)k, 0};
            req_kt[n_req++] = stp->conv_in[i].dst;
        }
        for (int i = 0; i < n->n_outputs; i++) {
            struct qp_kt *vo = stp->val_out[i];
            if (vo) {
                int last = value_last_use(g, node_step, n->outputs[i], (int)n_steps);
                if (last < (int)k) last = (int)k;
                reqs[n_req] = (struct qp_mem_req){vo->nbytes, (int)k, last, 0};
                req_kt[n_req++] = vo;
            }
            if (stp->out[i] && stp->out[i] != vo) {
                reqs[n_req] = (struct qp_mem_req){stp->out[i]->nbytes, (int)k, (int)k, 0};
                req_kt[n_req++] = stp->out[i];
            }
        }
    }
    if ((st = qp_memplan(reqs, n_req, RT_ALIGN, &p->arena_bytes, err))) goto fail;
    if (p->arena_bytes) {
        p->arena = aligned_alloc(RT_ALIGN, p->arena_bytes);
        if (!p->arena) {
            st = qp_error_set(err, QP_ERR_NOMEM, "session: cannot allocate a %zu-byte arena",
                              p->arena_bytes);
            goto fail;
        }
    }
    for (size_t i = 0; i < n_req; i++)
        req_kt[i]->data = req_kt[i]->nbytes ? (unsigned char *)p->arena + reqs[i].offset : rt_empty;
    if (p->scratch_bytes) {
        p->scratch = aligned_alloc(RT_ALIGN, p->scratch_bytes);
        if (!p->scratch) {
            st = qp_error_set(err, QP_ERR_NOMEM, "session: out of memory for scratch");
            goto fail;
        }
    }
    free(reqs);
    free(req_kt);
    free(node_step);
    free(fold_scratch);
    *plan_out = p;
    return QP_OK;
fail:
    free(reqs);
    free(req_kt);
    free(node_step);
    free(fold_scratch);
    rt_plan_free(p, s->n_inputs);
    return st;
}
