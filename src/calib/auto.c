/* The auto method's per-tensor choice (auto.h). */
#include "calib/auto.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/batch_pool.h"
#include "core/size.h"
#include "ir/ir.h"
#include "placement/placement.h"
#include "qmath/qparams.h"
#include "qplace/session.h"

_Static_assert(QP_CALIB_AUTO + 1 == QP_CALIB_METHOD_COUNT,
               "auto's candidates are the methods before it: keep it last");

/* One batch's copy of an observed tensor (buffers kept from batch to batch). */
struct copy {
    struct qp_array a;
    size_t cap;
    uint64_t run; /* 1 + the batch that filled it (0: never) */
};

/* A consumer node run alone. */
struct evnode {
    int node;
    int failed; /* cannot be evaluated: left out */
    int go;     /* evaluated in this batch */
    struct qp_model *m;
    struct qp_session *s;
    size_t n_in;
    int *in_value;         /* per session input: the value index in the big graph */
    struct qp_array *feed; /* per session input */
    size_t n_const;        /* non-float inputs baked in as initializers */
    int *const_value;
    int *const_init; /* their initializer indices in the mini model */
};

struct consumer {
    size_t tensor; /* index into the caller's tensors */
    size_t ev;     /* index into evnodes */
    double sse[QP_AUTO_N_CAND], norm;
    int used; /* batches evaluated */
};

/* One worker's buffers. */
struct scratch {
    float *q; /* fake-quantized tensor */
    size_t q_cap;
    float *ref; /* reference outputs of one node, concatenated */
    size_t ref_cap;
};

#define AUTO_MAX_WORKERS 2

struct ctx {
    const struct qp_model *model;
    const struct qp_graph *g;
    enum qp_dtype qtype;
    int n_threads;
    int n_workers; /* consumer nodes evaluated at once, each on one thread and its own lane */
    const struct evnode *evs;
    struct copy *copies; /* per value index */
    unsigned char *need; /* per value index */
    uint64_t run;
    struct scratch scr[AUTO_MAX_WORKERS];
    int failed;
    struct qp_error obs_err;
};

static enum qp_status grow(void **p, size_t *cap, size_t bytes, struct qp_error *err) {
    if (bytes <= *cap) return QP_OK;
    void *n = realloc(*p, bytes);
    if (!n) return qp_error_set(err, QP_ERR_NOMEM, "calibrate auto: out of memory");
    *p = n;
    *cap = bytes;
    return QP_OK;
}

static enum qp_status keep(struct ctx *c, int v, const struct qp_array *a, struct qp_error *err) {
    struct copy *cp = &c->copies[v];
    void *data = cp->a.data;
    enum qp_status st = grow(&data, &cp->cap, a->nbytes ? a->nbytes : 1, err);
    if (st != QP_OK) return st;
    if (a->nbytes) memcpy(data, a->data, a->nbytes);
    cp->a = *a;
    cp->a.data = data;
    cp->a.owned = 0;
    cp->run = c->run;
    return QP_OK;
}

static int observe(const char *tensor, const char *node, const struct qp_array *value, void *user) {
    (void)node;
    struct ctx *c = user;
    int v = qp_graph_find_value(c->g, tensor);
    if (v < 0 || !c->need[v]) return 0;
    if (keep(c, v, value, &c->obs_err) != QP_OK) {
        c->failed = 1;
        return 1;
    }
    return 0;
}

/* The tensor of a Constant node's `value` (weights of models exported with Constant nodes), or
 * NULL. */
static const struct qp_tensor *constant_of(const struct qp_graph *g, int v) {
    const struct qp_value *x = &g->values[v];
    if (x->producer < 0 || !qp_node_is(&g->nodes[x->producer], "Constant")) return NULL;
    const struct qp_attr *a = qp_node_attr(&g->nodes[x->producer], "value");
    return a && a->type == QP_ATTR_TENSOR && a->t && a->t->data ? a->t : NULL;
}

/* 1 when input value v of a consumer is a constant the one-node model takes as an initializer
 * (so the reference kernels see constant weights, as in the model), 0 when it is fed. */
static int is_fixed(const struct qp_graph *g, int v) {
    return g->values[v].initializer >= 0 || constant_of(g, v);
}

static int is_consumer(const struct qp_graph *g, const struct qp_placement *pl, int v, int node) {
    if (!pl) return 1;
    for (size_t i = 0; i < pl->n_edges; i++)
        if (!strcmp(pl->edges[i].tensor, g->values[v].name) &&
            !strcmp(pl->edges[i].node, g->nodes[node].name))
            return 1;
    return 0;
}

/* Non-float input v (shapes, indices) of this batch as an initializer of the one-node model m,
 * recorded in ev so later batches are checked against it. */
static enum qp_status add_const_copy(struct qp_model *m, struct evnode *ev, int v, const char *name,
                                     const struct qp_array *a, struct qp_error *e) {
    int64_t *dims = qp_malloc_n((size_t)a->rank + 1, sizeof *dims);
    void *data = malloc(a->nbytes ? a->nbytes : 1);
    if (!dims || !data) {
        free(dims);
        free(data);
        return qp_error_set(e, QP_ERR_NOMEM, "calibrate auto: out of memory");
    }
    memcpy(dims, a->dims, (size_t)a->rank * sizeof *dims);
    if (a->nbytes) memcpy(data, a->data, a->nbytes);
    enum qp_status st = qp_model_own(m, dims, e);
    if (st != QP_OK) {
        free(data);
        return st;
    }
    if ((st = qp_model_own(m, data, e)) != QP_OK) return st;
    int ok = 1;
    struct qp_tensor t = {.name = name,
                          .dtype = a->dtype,
                          .rank = a->rank,
                          .dims = dims,
                          .numel = qp_array_numel(a, &ok),
                          .data = data,
                          .nbytes = a->nbytes};
    int v2 = -1;
    if ((st = qp_graph_add_initializer(m->graph, &t, &v2, e)) != QP_OK) return st;
    ev->const_value[ev->n_const] = v;
    ev->const_init[ev->n_const++] = m->graph->values[v2].initializer;
    return QP_OK;
}

/* Float input `name` of m, typed and shaped as this batch's copy a; its shape into *shape. */
static enum qp_status add_float_input(struct qp_model *m, const char *name,
                                      const struct qp_array *a, struct qp_shape *shape,
                                      struct qp_error *e) {
    struct qp_graph *g2 = m->graph;
    int v2 = qp_graph_value(g2, name);
    struct qp_dim *d = qp_malloc_n((size_t)a->rank + 1, sizeof *d);
    if (v2 < 0 || !d) {
        free(d);
        return qp_error_set(e, QP_ERR_NOMEM, "calibrate auto: out of memory");
    }
    enum qp_status st = qp_model_own(m, d, e);
    if (st != QP_OK) return st;
    for (int k = 0; k < a->rank; k++)
        d[k] = (struct qp_dim){.value = a->dims[k]};
    g2->values[v2].dtype = a->dtype;
    g2->values[v2].rank = a->rank;
    g2->values[v2].dims = d;
    if ((st = qp_graph_add_input(g2, v2, e)) != QP_OK) return st;
    shape->name = name;
    shape->rank = a->rank;
    memcpy(shape->dims, a->dims, (size_t)a->rank * sizeof a->dims[0]);
    return QP_OK;
}

/* The inputs of node n into m: initializers and Constants borrowed, non-float copies baked in,
 * float copies as graph inputs (their shapes into shapes[*n_shapes++]). names[j]: input j's. */
static enum qp_status add_inputs(struct ctx *c, struct evnode *ev, const struct qp_node *n,
                                 const char **names, struct qp_shape *shapes, size_t *n_shapes,
                                 struct qp_error *e) {
    const struct qp_graph *g = c->g;
    struct qp_graph *g2 = ev->m->graph;
    for (int j = 0; j < n->n_inputs; j++) {
        int v = n->inputs[j];
        names[j] = v >= 0 ? g->values[v].name : "";
        if (v < 0 || qp_graph_find_value(g2, names[j]) >= 0) continue;
        const struct qp_value *x = &g->values[v];
        enum qp_status st;
        if (x->initializer >= 0 || constant_of(g, v)) {
            struct qp_tensor ct =
                x->initializer >= 0 ? g->inits[x->initializer] : *constant_of(g, v);
            ct.name = names[j];
            st = qp_graph_add_initializer(g2, &ct, NULL, e);
        } else {
            const struct qp_array *a = &c->copies[v].a;
            if (a->dtype != QP_DTYPE_FLOAT && a->dtype != QP_DTYPE_FLOAT16 &&
                a->dtype != QP_DTYPE_BFLOAT16 && a->dtype != QP_DTYPE_DOUBLE)
                st = add_const_copy(ev->m, ev, v, names[j], a, e);
            else
                st = add_float_input(ev->m, names[j], a, &shapes[(*n_shapes)++], e);
        }
        if (st != QP_OK) return st;
    }
    return QP_OK;
}

/* Node n itself into g2 (its attributes borrowed from the model), its outputs as graph
 * outputs, then the order. names: its inputs' then its outputs' names (outputs filled here). */
static enum qp_status add_node(struct qp_graph *g2, const struct qp_graph *g,
                               const struct qp_node *n, const char **names, struct qp_error *e) {
    for (int j = 0; j < n->n_outputs; j++)
        names[n->n_inputs + j] = n->outputs[j] >= 0 ? g->values[n->outputs[j]].name : "";
    int k2 = -1;
    enum qp_status st = qp_graph_add_node(g2, n->name, n->op_type, n->domain, n->n_inputs, names,
                                          n->n_outputs, names + n->n_inputs, &k2, e);
    if (st != QP_OK) return st;
    for (int j = 0; j < n->n_attrs; j++) {
        struct qp_attr *b = qp_node_add_attr(g2, k2, n->attrs[j].name, n->attrs[j].type);
        if (!b) return qp_error_set(e, QP_ERR_NOMEM, "calibrate auto: out of memory");
        *b = n->attrs[j]; /* its arrays are the model's, which outlives the mini model */
    }
    for (int j = 0; j < n->n_outputs; j++)
        if (n->outputs[j] >= 0 &&
            (st = qp_graph_add_output(g2, qp_graph_find_value(g2, names[n->n_inputs + j]), e)) !=
                QP_OK)
            return st;
    return qp_graph_toposort(g2, e);
}

/* Builds node ev's one-node model and session from this batch's copies. QP_OK with ev->failed
 * set when the node cannot run alone; other statuses only for out-of-memory. */
static enum qp_status build(struct ctx *c, struct evnode *ev, struct qp_error *err) {
    const struct qp_graph *g = c->g;
    const struct qp_node *n = &g->nodes[ev->node];
    struct qp_error e = {0};
    enum qp_status st = QP_OK;
    const char **names = calloc((size_t)n->n_inputs + (size_t)n->n_outputs + 1, sizeof *names);
    struct qp_shape *shapes = calloc((size_t)n->n_inputs + 1, sizeof *shapes);
    ev->in_value = calloc((size_t)n->n_inputs + 1, sizeof *ev->in_value);
    ev->feed = calloc((size_t)n->n_inputs + 1, sizeof *ev->feed);
    ev->const_value = calloc((size_t)n->n_inputs + 1, sizeof *ev->const_value);
    ev->const_init = calloc((size_t)n->n_inputs + 1, sizeof *ev->const_init);
    struct qp_model *m = ev->m = qp_model_create();
    if (!names || !shapes || !ev->in_value || !ev->feed || !ev->const_value || !ev->const_init ||
        !m) {
        st = qp_error_set(err, QP_ERR_NOMEM, "calibrate auto: out of memory");
        goto done;
    }
    m->opsets = c->model->opsets; /* borrowed: the mini model lives shorter than the model */
    m->n_opsets = c->model->n_opsets;
    m->ir_version = c->model->ir_version;
    size_t n_shapes = 0;
    for (int j = 0; j < n->n_attrs; j++)
        if (n->attrs[j].type == QP_ATTR_GRAPH || n->attrs[j].type == QP_ATTR_GRAPHS) {
            snprintf(e.msg, sizeof e.msg, "has a subgraph");
            goto unfit;
        }
    if ((st = add_inputs(c, ev, n, names, shapes, &n_shapes, &e)) != QP_OK) goto unfit;
    if ((st = add_node(m->graph, g, n, names, &e)) != QP_OK) goto unfit;
    /* One thread: the workers run nodes side by side (evaluate_batch), each on its own lane. */
    struct qp_session_options so = {.n_threads = 1, .lane = (int)(ev - c->evs) % c->n_workers};
    if ((st = qp_session_create(m, &so, n_shapes, shapes, &ev->s, &e)) != QP_OK) goto unfit;
    ev->n_in = qp_session_n_inputs(ev->s);
    for (size_t i = 0; i < ev->n_in; i++)
        ev->in_value[i] = qp_graph_find_value(g, qp_session_input_name(ev->s, i));
    goto done;
unfit:
    if (st == QP_ERR_NOMEM) {
        if (err) *err = e;
        goto done;
    }
    st = QP_OK;
    ev->failed = 1;
    qp_log(QP_LOG_DEBUG, "calibrate auto: node '%s' (%s) cannot run alone: %s", n->name, n->op_type,
           e.msg);
done:
    free(names);
    free(shapes);
    return st;
}

/* 1 when this batch's copies can feed ev's session as built. */
static int fits(const struct ctx *c, const struct evnode *ev) {
    const struct qp_node *n = &c->g->nodes[ev->node];
    for (int j = 0; j < n->n_inputs; j++) {
        int v = n->inputs[j];
        if (v >= 0 && !is_fixed(c->g, v) && c->copies[v].run != c->run) return 0;
    }
    for (size_t i = 0; i < ev->n_const; i++) {
        const struct qp_array *a = &c->copies[ev->const_value[i]].a;
        const struct qp_tensor *t = &qp_model_graph(ev->m)->inits[ev->const_init[i]];
        if (a->dtype != t->dtype || a->nbytes != t->nbytes || a->rank != t->rank ||
            (a->nbytes && memcmp(a->data, t->data, a->nbytes)) ||
            memcmp(a->dims, t->dims, (size_t)a->rank * sizeof *t->dims))
            return 0;
    }
    const struct qp_graph *g2 = qp_model_graph(ev->m);
    for (size_t i = 0; i < ev->n_in; i++) {
        const struct qp_array *a = &c->copies[ev->in_value[i]].a;
        const struct qp_value *x = &g2->values[g2->inputs[i]];
        if (a->dtype != x->dtype || a->rank != x->rank) return 0;
        for (int k = 0; k < a->rank; k++)
            if (a->dims[k] != x->dims[k].value) return 0;
    }
    return 1;
}

/* Runs ev with its feed; on success the float32 outputs are compared with `ref` (the float run's,
 * when ref is not NULL: adds sum((y - ref)^2) to *sse and sum(ref^2) to *norm) or copied into
 * c->ref (ref NULL). Returns 0 when the run failed or there is no float32 output, -1 (err set)
 * when it ran out of memory: that is an error of the calibration, not a node that cannot run. */
static int run_node(const struct ctx *c, struct scratch *w, struct evnode *ev, const float *ref,
                    double *sse, double *norm, struct qp_error *err) {
    struct qp_error e = {0};
    if (qp_session_run(ev->s, ev->n_in, ev->feed, &e) != QP_OK) {
        if (e.status == QP_ERR_NOMEM) {
            if (err) *err = e;
            return -1;
        }
        qp_log(QP_LOG_DEBUG, "calibrate auto: node '%s' alone: %s", c->g->nodes[ev->node].name,
               e.msg);
        return 0;
    }
    size_t off = 0, n_float = 0;
    for (size_t i = 0; i < qp_session_n_outputs(ev->s); i++) {
        struct qp_array y;
        if (qp_session_output(ev->s, i, &y, &e) != QP_OK || y.dtype != QP_DTYPE_FLOAT) continue;
        size_t ne = y.nbytes / sizeof(float);
        const float *yv = y.data;
        n_float++;
        if (!ref) {
            void *p = w->ref;
            if (grow(&p, &w->ref_cap, (off + ne) * sizeof(float), err) != QP_OK) return -1;
            w->ref = p;
            memcpy(w->ref + off, yv, ne * sizeof(float));
        } else {
            double s = 0, r = 0;
            for (size_t k = 0; k < ne; k++) {
                double rk = ref[off + k], d = (double)yv[k] - rk;
                if (!isfinite(d)) continue;
                s += d * d;
                r += rk * rk;
            }
            *sse += s;
            if (norm) *norm += r;
        }
        off += ne;
    }
    return n_float ? 1 : 0;
}

/* Fake-quantizes the float32 array a symmetrically with amax into w->q. */
static enum qp_status fake_quantize(const struct ctx *c, struct scratch *w,
                                    const struct qp_array *a, double amax, struct qp_error *err) {
    size_t ne = a->nbytes / sizeof(float);
    void *p = w->q;
    enum qp_status st = grow(&p, &w->q_cap, (ne ? ne : 1) * sizeof(float), err);
    if (st != QP_OK) return st;
    w->q = p;
    float scale;
    int32_t zp;
    if ((st = qp_qparams_from_range(c->qtype, (float)-amax, (float)amax, 1, &scale, &zp, err)) !=
        QP_OK)
        return st;
    uint8_t zero[2] = {0, 0};
    struct qp_qspec q = {.qtype = c->qtype,
                         .saturate = 1,
                         .outer = 1,
                         .axis_len = 1,
                         .inner = (int64_t)ne,
                         .n_params = 1,
                         .scale = &scale,
                         .zero_point = zero};
    qp_fake_quantize_f32(&q, a->data, w->q, 0, (int64_t)ne);
    return QP_OK;
}

/* Node ev in float, then once per candidate of each tensor it consumes (its consumers co[i]
 * with co[i].ev == k): their squared errors added. QP_OK with ev->failed set when the node does
 * not run; other statuses only for out-of-memory. */
static enum qp_status evaluate_node(const struct ctx *c, struct scratch *w, size_t k,
                                    struct evnode *ev, size_t n_co, struct consumer *co,
                                    const struct qp_auto_tensor *t, struct qp_error *err) {
    enum qp_status st;
    for (size_t i = 0; i < ev->n_in; i++)
        ev->feed[i] = c->copies[ev->in_value[i]].a;
    double dummy = 0;
    int r = run_node(c, w, ev, NULL, &dummy, NULL, err);
    if (r < 0) return QP_ERR_NOMEM;
    if (!r) {
        ev->failed = 1;
        return QP_OK;
    }
    for (size_t i = 0; i < n_co; i++) {
        if (co[i].ev != k) continue;
        const struct qp_auto_tensor *x = &t[co[i].tensor];
        const struct qp_array *a = &c->copies[x->value].a;
        if (a->dtype != QP_DTYPE_FLOAT) continue;
        double sse[QP_AUTO_N_CAND] = {0}, norm = 0;
        int ok = 1;
        for (int m = 0; m < QP_AUTO_N_CAND && ok; m++) {
            int same = -1; /* an earlier candidate with the same threshold: same error */
            for (int p = 0; p < m && same < 0; p++)
                if (x->amax[p] == x->amax[m]) same = p;
            if (same >= 0) {
                sse[m] = sse[same];
                continue;
            }
            if ((st = fake_quantize(c, w, a, x->amax[m], err)) != QP_OK) return st;
            for (size_t j = 0; j < ev->n_in; j++)
                if (ev->in_value[j] == x->value) ev->feed[j].data = w->q;
            r = run_node(c, w, ev, w->ref, &sse[m], m == 0 ? &norm : NULL, err);
            if (r < 0) return QP_ERR_NOMEM;
            ok = r;
            for (size_t j = 0; j < ev->n_in; j++)
                ev->feed[j].data = c->copies[ev->in_value[j]].a.data;
        }
        if (!ok) continue;
        for (int m = 0; m < QP_AUTO_N_CAND; m++)
            co[i].sse[m] += sse[m];
        co[i].norm += norm;
        co[i].used++;
    }
    return QP_OK;
}

/* One batch: the nodes' sessions built as their inputs first come (in order, on this thread),
 * then the nodes evaluated on c->n_workers threads, node k on worker k % n_workers, which
 * always runs its session (its lane). Each consumer's sums belong to one node and grow in
 * batch order, so the results do not depend on the number of workers. */
static enum qp_status evaluate_batch(struct ctx *c, size_t n_ev, struct evnode *evs, size_t n_co,
                                     struct consumer *co, const struct qp_auto_tensor *t,
                                     struct qp_error *err) {
    enum qp_status st;
    for (size_t k = 0; k < n_ev; k++) {
        struct evnode *ev = &evs[k];
        ev->go = 0;
        if (ev->failed) continue;
        if (!ev->s) {
            const struct qp_node *n = &c->g->nodes[ev->node];
            int have = 1;
            for (int j = 0; j < n->n_inputs; j++)
                if (n->inputs[j] >= 0 && !is_fixed(c->g, n->inputs[j]) &&
                    c->copies[n->inputs[j]].run != c->run)
                    have = 0;
            if (!have) continue; /* not computed in this batch (a branch not taken) */
            if ((st = build(c, ev, err)) != QP_OK) return st;
            if (ev->failed) continue;
        }
        ev->go = fits(c, ev);
    }
    enum qp_status wst[AUTO_MAX_WORKERS] = {QP_OK};
    struct qp_error werr[AUTO_MAX_WORKERS];
    memset(werr, 0, sizeof werr);
    int nw = c->n_workers;
#pragma omp parallel num_threads(nw) if (nw > 1)
    {
        int me = omp_get_thread_num(), all = omp_get_num_threads();
        for (size_t k = (size_t)me; k < n_ev && wst[me] == QP_OK; k += (size_t)all)
            if (evs[k].go)
                wst[me] = evaluate_node(c, &c->scr[me], k, &evs[k], n_co, co, t, &werr[me]);
    }
    for (int w = 0; w < nw; w++)
        if (wst[w] != QP_OK) {
            if (err) *err = werr[w];
            return wst[w];
        }
    return QP_OK;
}

enum qp_status qp_auto_evaluate(const struct qp_model *model, const struct qp_placement *placement,
                                enum qp_dtype qtype, int n_threads, size_t n_batches,
                                size_t n_inputs, const struct qp_array *batches, size_t n,
                                struct qp_auto_tensor *t, struct qp_error *err) {
    if (!model || (n && !t) || (n_batches && n_inputs && !batches))
        return qp_error_set(err, QP_ERR_USAGE, "calibrate auto: NULL argument");
    const struct qp_graph *g = qp_model_graph(model);
    struct ctx c = {.model = model, .g = g, .qtype = qtype, .n_threads = n_threads};
    struct evnode *evs = NULL;
    struct consumer *co = NULL;
    int *ev_of_node = NULL;
    const char **names = NULL;
    struct qp_session *s = NULL;
    size_t n_ev = 0, n_co = 0, cap_co = 0;
    enum qp_status st = QP_OK;
    for (size_t i = 0; i < n; i++) {
        t[i].n_consumers = 0;
        for (int m = 0; m < QP_AUTO_N_CAND; m++)
            t[i].error[m] = INFINITY;
    }
    c.copies = calloc(g->n_values + 1, sizeof *c.copies);
    c.need = calloc(g->n_values + 1, 1);
    evs = calloc(g->n_nodes + 1, sizeof *evs);
    c.evs = evs;
    int each = 1;
    size_t nw = qp_batch_pool_workers(n_threads, &each);
    c.n_workers = nw > AUTO_MAX_WORKERS ? AUTO_MAX_WORKERS : (int)nw;
    ev_of_node = malloc((g->n_nodes + 1) * sizeof *ev_of_node);
    names = malloc((g->n_values + 1) * sizeof *names);
    if (!c.copies || !c.need || !evs || !ev_of_node || !names) goto nomem;
    for (size_t k = 0; k < g->n_nodes; k++)
        ev_of_node[k] = -1;
    /* The consumers, their nodes, and what to copy from each batch. */
    for (size_t i = 0; i < n; i++) {
        const struct qp_value *x = &g->values[t[i].value];
        c.need[t[i].value] = 1;
        for (size_t u = 0; u < x->n_uses; u++) {
            int k = x->uses[u].node;
            if (g->nodes[k].dead || !is_consumer(g, placement, t[i].value, k)) continue;
            int dup = 0; /* a node reading the tensor twice is one consumer */
            for (size_t q = 0; q < n_co; q++)
                if (co[q].tensor == i && evs[co[q].ev].node == k) dup = 1;
            if (dup) continue;
            if (ev_of_node[k] < 0) {
                ev_of_node[k] = (int)n_ev;
                evs[n_ev++].node = k;
                const struct qp_node *nd = &g->nodes[k];
                for (int j = 0; j < nd->n_inputs; j++)
                    if (nd->inputs[j] >= 0 && !is_fixed(g, nd->inputs[j]))
                        c.need[nd->inputs[j]] = 1;
            }
            if (n_co == cap_co) {
                size_t nc = cap_co ? 2 * cap_co : 64;
                struct consumer *p = realloc(co, nc * sizeof *co);
                if (!p) goto nomem;
                co = p;
                cap_co = nc;
            }
            co[n_co++] = (struct consumer){.tensor = i, .ev = (size_t)ev_of_node[k]};
        }
    }
    if (!n_co || !n_batches) goto done;
    size_t n_names = 0;
    for (size_t v = 0; v < g->n_values; v++)
        if (c.need[v] && g->values[v].producer >= 0) names[n_names++] = g->values[v].name;
    struct qp_session_options so = {.n_threads = n_threads, .lazy_plan = 1};
    if ((st = qp_session_create(model, &so, 0, NULL, &s, err)) != QP_OK) goto done;
    qp_session_set_observer(s, observe, &c);
    if (n_names && (st = qp_session_set_observed(s, n_names, names, err)) != QP_OK) goto done;
    for (size_t b = 0; b < n_batches; b++) {
        c.run = b + 1;
        c.failed = 0;
        const struct qp_array *in = batches + b * n_inputs;
        st = qp_session_run(s, n_inputs, in, err);
        if (c.failed) {
            st = c.obs_err.status;
            if (err) *err = c.obs_err;
        }
        if (st != QP_OK) goto done;
        for (size_t i = 0; i < n_inputs; i++) {
            int v = qp_graph_find_value(g, qp_session_input_name(s, i));
            if (v >= 0 && c.need[v] && (st = keep(&c, v, &in[i], err)) != QP_OK) goto done;
        }
        if ((st = evaluate_batch(&c, n_ev, evs, n_co, co, t, err)) != QP_OK) goto done;
    }
    for (size_t i = 0; i < n_co; i++) {
        struct qp_auto_tensor *x = &t[co[i].tensor];
        if (!co[i].used) continue;
        if (!x->n_consumers)
            for (int m = 0; m < QP_AUTO_N_CAND; m++)
                x->error[m] = 0;
        x->n_consumers++;
        double norm = co[i].norm > 0 ? co[i].norm : 1.0;
        for (int m = 0; m < QP_AUTO_N_CAND; m++)
            x->error[m] += co[i].sse[m] / norm;
    }
    goto done;
nomem:
    st = qp_error_set(err, QP_ERR_NOMEM, "calibrate auto: out of memory");
done:
    qp_session_free(s);
    for (size_t k = 0; k < n_ev; k++) {
        qp_session_free(evs[k].s);
        qp_model_free(evs[k].m);
        free(evs[k].in_value);
        free(evs[k].feed);
        free(evs[k].const_value);
        free(evs[k].const_init);
    }
    if (c.copies)
        for (size_t v = 0; v < g->n_values; v++)
            free(c.copies[v].a.data);
    free(c.copies);
    free(c.need);
    for (int w = 0; w < AUTO_MAX_WORKERS; w++) {
        free(c.scr[w].q);
        free(c.scr[w].ref);
    }
    free(evs);
    free(co);
    free(ev_of_node);
    free(names);
    return st;
}
