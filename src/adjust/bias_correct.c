/* Bias correction (bias_correct.h). */
#include "adjust/bias_correct.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/batch_pool.h"
#include "calib/provider.h"
#include "core/arena.h"
#include "core/clock.h"
#include "qplace/session.h"

enum bc_kind { BC_CONV, BC_CONV_T, BC_GEMM, BC_MATMUL };

struct bc_layer {
    int node; /* the layer in mq */
    enum bc_kind kind;
    int add, add_slot; /* MatMul: the Add whose constant input `add_slot` is its bias, or -1 */
    int64_t n_ch;
    /* In the measured model of the current pass (its arena): the layer's output and that of
     * its float twin, which reads the same (unquantized) input and the float weight. */
    const char *out_q, *out_f;
    double *qsum, *fsum, *fsq; /* per channel */
    /* Per channel, the correction applied so far: the twin reads the same (corrected) bias, so
     * a pass measures the raw shift and the layer's remaining shift is raw - applied. */
    double *applied;
    uint64_t q_count, f_count; /* elements per channel seen on each */
};

struct bc_pass {
    struct bc_layer *layers;
    size_t n;
    long bad;           /* the layer whose output the observer refused, or -1 */
    uint64_t n_batches; /* batches merged in this pass */
    int bad_dtype;
    int64_t bad_ch;
    const char *bad_tensor;
};

static enum qp_status nomem(struct qp_error *err) {
    return qp_error_set(err, QP_ERR_NOMEM, "bias correction: out of memory");
}

static int is_conv(enum bc_kind k) {
    return k == BC_CONV || k == BC_CONV_T;
}

static int64_t attr_int(const struct qp_node *n, const char *name, int64_t dflt) {
    const struct qp_attr *a = qp_node_attr(n, name);
    return a && a->type == QP_ATTR_INT ? a->i : dflt;
}

/* The float constant behind value v (initializer or Constant), or NULL. */
static const struct qp_tensor *float_const(const struct qp_graph *g, int v) {
    if (v < 0) return NULL;
    const struct qp_tensor *t = qp_placement_weight_tensor(g, v);
    return t && t->dtype == QP_DTYPE_FLOAT && t->data && t->nbytes == t->numel * 4 ? t : NULL;
}

/* 1 when the placement quantizes input 0 or 1 of node `name`. */
static int placed(const struct qp_placement *pl, const char *name) {
    for (size_t i = 0; i < pl->n_edges; i++)
        if (pl->edges[i].input <= 1 && strcmp(pl->edges[i].node, name) == 0) return 1;
    for (size_t i = 0; i < pl->n_weights; i++)
        if (pl->weights[i].input <= 1 && strcmp(pl->weights[i].node, name) == 0) return 1;
    return 0;
}

/* 1 when constant t can take a per-channel term over its last axis: a scalar, or a last dim of
 * 1 or n_ch (widened to n_ch when 1). */
static int broadcasts_last(const struct qp_tensor *t, int64_t n_ch) {
    return t->rank == 0 || t->dims[t->rank - 1] == 1 || t->dims[t->rank - 1] == n_ch;
}

/* The output channel count from the weight, or 0 when the layer is not one we correct. */
static int64_t channels(const struct qp_node *n, enum bc_kind k, const struct qp_tensor *w) {
    switch (k) {
    case BC_CONV:
        return w->rank >= 2 ? w->dims[0] : 0;
    case BC_CONV_T: {
        /* Attributes are untrusted: a group that overflows the count leaves the layer alone. */
        int64_t group = attr_int(n, "group", 1);
        if (w->rank < 2 || group < 1 || w->dims[1] > INT64_MAX / group) return 0;
        return w->dims[1] * group;
    }
    case BC_GEMM:
        return w->rank != 2 ? 0 : attr_int(n, "transB", 0) ? w->dims[0] : w->dims[1];
    case BC_MATMUL:
        return w->rank >= 2 ? w->dims[w->rank - 1] : 0;
    }
    return 0;
}

/* The sum of n floats in float64, four partial sums (the quantized layer's channel mean). */
static double row_sum(const float *row, uint64_t n) {
    double s[4] = {0};
    uint64_t k = 0;
    for (; k + 4 <= n; k += 4)
        for (int j = 0; j < 4; j++)
            s[j] += row[k + j];
    for (; k < n; k++)
        s[0] += row[k];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

/* The sum of the squares of n floats in float64, as row_sum (the twin's channel variance). */
static double row_sum_sq(const float *row, uint64_t n) {
    double s[4] = {0};
    uint64_t k = 0;
    for (; k + 4 <= n; k += 4)
        for (int j = 0; j < 4; j++)
            s[j] += (double)row[k + j] * row[k + j];
    for (; k < n; k++)
        s[0] += (double)row[k] * row[k];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

/* Fills L for node `ni` of mq when it is a layer to correct: returns 1, 0 to leave it (with
 * *skipped set when it qualified but its bias cannot be corrected), or -1 with err set. */
static int discover(const struct qp_graph *g, int ni, const struct qp_placement *pl,
                    struct bc_layer *L, size_t *skipped, struct qp_error *err) {
    const struct qp_node *n = &g->nodes[ni];
    enum bc_kind k;
    if (qp_node_is(n, "Conv"))
        k = BC_CONV;
    else if (qp_node_is(n, "ConvTranspose"))
        k = BC_CONV_T;
    else if (qp_node_is(n, "Gemm"))
        k = BC_GEMM;
    else if (qp_node_is(n, "MatMul"))
        k = BC_MATMUL;
    else
        return 0;
    if (n->n_inputs < 2 || n->n_outputs < 1 || n->outputs[0] < 0 || !placed(pl, n->name)) return 0;
    const struct qp_tensor *w = float_const(g, n->inputs[1]);
    int64_t n_ch = w ? channels(n, k, w) : 0;
    if (n_ch <= 0) return 0;
    *L = (struct bc_layer){.node = ni, .kind = k, .add = -1, .n_ch = n_ch};
    int out = n->outputs[0];
    int bias = n->n_inputs > 2 ? n->inputs[2] : -1;
    if (k != BC_MATMUL && bias >= 0) {
        const struct qp_tensor *b = float_const(g, bias);
        if (!b) {
            qp_log(QP_LOG_WARN,
                   "bias correction: node '%s' (%s): bias '%s' is not a float constant; "
                   "left alone",
                   n->name, n->op_type, g->values[bias].name);
            ++*skipped;
            return 0;
        }
        int gemm_c_used = k == BC_GEMM && !(qp_node_attr(n, "beta") &&
                                            qp_node_attr(n, "beta")->type == QP_ATTR_FLOAT &&
                                            qp_node_attr(n, "beta")->f == 0.0f);
        if (is_conv(k) ? b->rank != 1 || b->dims[0] != n_ch
                       : gemm_c_used && (b->rank > 2 || !broadcasts_last(b, n_ch))) {
            qp_error_set(err, QP_ERR_BAD_INPUT,
                         "bias correction: node '%s' (%s): bias '%s' does not match the %lld "
                         "output channels of weight '%s'",
                         n->name, n->op_type, g->values[bias].name, (long long)n_ch,
                         g->values[n->inputs[1]].name);
            return -1;
        }
    }
    if (k == BC_MATMUL) {
        /* An Add that alone reads the output, with a constant broadcast over the last axis. */
        const struct qp_value *ov = &g->values[out];
        const struct qp_node *a = ov->n_uses == 1 ? &g->nodes[ov->uses[0].node] : NULL;
        if (a && !ov->is_graph_output && qp_node_is(a, "Add") && a->n_inputs == 2 &&
            a->n_outputs == 1 && a->outputs[0] >= 0) {
            int slot = 1 - ov->uses[0].input;
            const struct qp_tensor *c = float_const(g, a->inputs[slot]);
            if (c && broadcasts_last(c, n_ch)) {
                L->add = ov->uses[0].node;
                L->add_slot = slot;
            }
        }
    }
    return 1;
}

static int observe(const char *tensor, const char *node, const struct qp_array *v, void *user) {
    (void)node;
    struct bc_pass *p = user;
    struct bc_layer *L = NULL;
    int twin = 0;
    size_t i = 0;
    for (; i < p->n && !L; i++) {
        if (strcmp(p->layers[i].out_q, tensor) == 0)
            L = &p->layers[i];
        else if (strcmp(p->layers[i].out_f, tensor) == 0)
            L = &p->layers[i], twin = 1;
    }
    if (!L) return 0;
    int axis = is_conv(L->kind) ? 1 : v->rank - 1;
    if (v->dtype != QP_DTYPE_FLOAT || axis < 0 || axis >= v->rank || v->dims[axis] != L->n_ch) {
        p->bad = (long)(L - p->layers);
        p->bad_dtype = v->dtype != QP_DTYPE_FLOAT;
        p->bad_ch = axis >= 0 && axis < v->rank ? v->dims[axis] : 0;
        p->bad_tensor = twin ? L->out_f : L->out_q;
        return 1;
    }
    uint64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++)
        outer *= (uint64_t)v->dims[d];
    for (int d = axis + 1; d < v->rank; d++)
        inner *= (uint64_t)v->dims[d];
    const float *x = v->data;
    uint64_t n_ch = (uint64_t)L->n_ch;
    double *sum = twin ? L->fsum : L->qsum, *sq = twin ? L->fsq : NULL;
    if (inner == 1) {
        /* Channels on the last axis: rows of n_ch. */
        for (uint64_t o = 0; o < outer; o++) {
            const float *row = x + o * n_ch;
            for (uint64_t c = 0; c < n_ch; c++)
                sum[c] += row[c];
            if (sq)
                for (uint64_t c = 0; c < n_ch; c++)
                    sq[c] += (double)row[c] * row[c];
        }
    } else {
        for (uint64_t o = 0; o < outer; o++)
            for (uint64_t c = 0; c < n_ch; c++) {
                const float *row = x + (o * n_ch + c) * inner;
                sum[c] += row_sum(row, inner);
                if (sq) sq[c] += row_sum_sq(row, inner);
            }
    }
    if (twin)
        L->f_count += outer * inner;
    else
        L->q_count += outer * inner;
    return 0;
}

/* A worker of a pass: its session on its own lane and one batch's channel sums, in a copy of
 * the pass's layers (names and channel counts shared) that its observer fills. */
struct bc_worker {
    struct qp_session *s;
    struct bc_pass pass;
    const size_t *map;
    size_t ns;
};

static void zero_sums(struct bc_pass *p) {
    for (size_t i = 0; i < p->n; i++) {
        struct bc_layer *L = &p->layers[i];
        size_t c = (size_t)L->n_ch * sizeof(double);
        memset(L->qsum, 0, c);
        memset(L->fsum, 0, c);
        memset(L->fsq, 0, c);
        L->q_count = L->f_count = 0;
    }
}

static enum qp_status worker_run(void *user, const struct qp_array *batch, struct qp_error *err) {
    struct bc_worker *w = user;
    struct qp_array feed[QP_BATCH_POOL_MAX_INPUTS];
    for (size_t i = 0; i < w->ns; i++)
        feed[i] = batch[w->map[i]];
    zero_sums(&w->pass);
    w->pass.bad = -1;
    return qp_session_run(w->s, w->ns, feed, err);
}

/* A worker's batch sums into the pass's, in batch order. */
static enum qp_status worker_merge(void *user, void *wp, const struct qp_array *batch,
                                   struct qp_error *err) {
    (void)batch;
    (void)err;
    struct bc_pass *p = user;
    const struct bc_pass *b = &((const struct bc_worker *)wp)->pass;
    for (size_t i = 0; i < p->n; i++) {
        struct bc_layer *L = &p->layers[i];
        const struct bc_layer *B = &b->layers[i];
        for (int64_t c = 0; c < L->n_ch; c++) {
            L->qsum[c] += B->qsum[c];
            L->fsum[c] += B->fsum[c];
            L->fsq[c] += B->fsq[c];
        }
        L->q_count += B->q_count;
        L->f_count += B->f_count;
    }
    p->n_batches++;
    return QP_OK;
}

/* Worker w: a session of m (n_threads, lane w) observing every layer's output and twin, and
 * its own sums. */
static enum qp_status worker_open(struct bc_worker *w, int lane, const struct qp_model *m,
                                  const struct bc_pass *p, const char **names, int n_threads,
                                  struct qp_error *err) {
    struct qp_session_options so = {
        .n_threads = n_threads, .lazy_plan = 1, .int8 = QP_INT8_EXACT, .lane = lane};
    w->pass = *p;
    w->pass.layers = calloc(p->n ? p->n : 1, sizeof *w->pass.layers);
    if (!w->pass.layers) return nomem(err);
    for (size_t i = 0; i < p->n; i++) {
        struct bc_layer *L = &w->pass.layers[i];
        *L = p->layers[i];
        size_t c = (size_t)L->n_ch;
        L->qsum = calloc(3 * (c ? c : 1), sizeof(double));
        if (!L->qsum) return nomem(err);
        L->fsum = L->qsum + c;
        L->fsq = L->fsum + c;
    }
    enum qp_status st = qp_session_create(m, &so, 0, NULL, &w->s, err);
    if (st == QP_OK) st = qp_session_set_observed(w->s, 2 * p->n, names, err);
    if (st == QP_OK) qp_session_set_observer(w->s, observe, &w->pass);
    return st;
}

static void worker_close(struct bc_worker *w) {
    qp_session_free(w->s);
    for (size_t i = 0; w->pass.layers && i < w->pass.n; i++)
        free(w->pass.layers[i].qsum);
    free(w->pass.layers);
}

/* The error of a layer whose output the observer refused. */
static enum qp_status bad_layer(const struct bc_pass *b, const struct qp_graph *g,
                                struct qp_error *err) {
    const struct bc_layer *L = &b->layers[b->bad];
    const struct qp_node *n = &g->nodes[L->node];
    if (b->bad_dtype)
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "bias correction: node '%s' (%s): output '%s' is not float32", n->name,
                            n->op_type, b->bad_tensor);
    return qp_error_set(err, QP_ERR_BAD_INPUT,
                        "bias correction: node '%s' (%s): output '%s' has %lld channels on axis "
                        "%s, the weight gives %lld",
                        n->name, n->op_type, b->bad_tensor, (long long)b->bad_ch,
                        is_conv(L->kind) ? "1" : "-1", (long long)L->n_ch);
}

/* One pass of model m over every batch of `data`, accumulating the layers' channel sums: two
 * workers on alternate batches with two or more threads (calib/batch_pool.h), each batch's
 * sums added in batch order (the same sums for every thread count). */
static enum qp_status run_pass(const struct qp_model *m, struct bc_pass *p,
                               const struct qp_graph *g, struct qp_provider *data, int n_threads,
                               uint64_t *n_batches, struct qp_error *err) {
    int each = 1;
    size_t n_wk = qp_batch_pool_workers(n_threads, &each), n_in = qp_provider_n_inputs(data);
    struct bc_worker wk[QP_BATCH_POOL_MAX] = {0};
    const char **names = malloc(2 * (p->n ? p->n : 1) * sizeof *names);
    size_t map[QP_BATCH_POOL_MAX_INPUTS];
    enum qp_status st = names ? QP_OK : nomem(err);
    for (size_t i = 0; st == QP_OK && i < p->n; i++) {
        names[2 * i] = p->layers[i].out_q;
        names[2 * i + 1] = p->layers[i].out_f;
    }
    for (size_t w = 0; st == QP_OK && w < n_wk; w++)
        st = worker_open(&wk[w], (int)w, m, p, names, each, err);
    size_t ns = st == QP_OK ? qp_session_n_inputs(wk[0].s) : 0;
    if (st == QP_OK && (ns > n_in || ns > QP_BATCH_POOL_MAX_INPUTS))
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "bias correction: the model has %zu inputs, the data %zu", ns, n_in);
    if (st == QP_OK) st = qp_provider_map_inputs(data, wk[0].s, "bias correction", map, err);
    p->n_batches = 0;
    if (st == QP_OK) {
        for (size_t w = 0; w < n_wk; w++) {
            wk[w].map = map;
            wk[w].ns = ns;
        }
        struct qp_batch_pool bp = {.n_workers = n_wk,
                                   .worker = {&wk[0], &wk[1]},
                                   .run = worker_run,
                                   .merge = worker_merge,
                                   .user = p};
        st = qp_batch_pool_run(data, &bp, err);
        for (size_t w = 0; st != QP_OK && w < n_wk; w++)
            if (wk[w].pass.bad >= 0) {
                st = bad_layer(&wk[w].pass, g, err);
                break;
            }
    }
    *n_batches = p->n_batches;
    if (st == QP_OK && !*n_batches)
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "bias correction: the data has no batches");
    for (size_t w = 0; w < n_wk; w++)
        worker_close(&wk[w]);
    free(names);
    return st;
}

/* Per channel, the remaining shift mean(layer) - mean(float twin) - applied of every layer into
 * delta (n_ch each, concatenated); returns the mean of |remaining shift| / std(twin) over
 * channels whose twin varies. */
static double shifts(const struct bc_layer *layers, size_t n, double *delta) {
    double rel = 0;
    size_t n_rel = 0, off = 0;
    for (size_t i = 0; i < n; i++) {
        const struct bc_layer *L = &layers[i];
        double cnt = (double)L->f_count;
        for (int64_t c = 0; c < L->n_ch; c++, off++) {
            double mf = L->fsum[c] / cnt, mq = L->qsum[c] / cnt;
            double var = L->fsq[c] / cnt - mf * mf;
            delta[off] = mq - mf - L->applied[c];
            if (var > 1e-12 * mf * mf && var > 0) {
                rel += fabs(delta[off]) / sqrt(var);
                n_rel++;
            }
        }
    }
    return n_rel ? rel / (double)n_rel : 0;
}

/* ---- edits ------------------------------------------------------------------------------- */

/* Grows node ni's input list to `n` slots (new ones omitted). */
static enum qp_status grow_inputs(struct qp_graph *g, int ni, int n, struct qp_error *err) {
    struct qp_node *node = &g->nodes[ni];
    if (node->n_inputs >= n) return QP_OK;
    int *in = qp_arena_calloc(g->model->arena, (size_t)n, sizeof *in);
    if (!in) return nomem(err);
    for (int i = 0; i < n; i++)
        in[i] = i < node->n_inputs ? node->inputs[i] : -1;
    node->inputs = in;
    node->n_inputs = n;
    return QP_OK;
}

/* A new float initializer named after `base` owning `data` (malloc'd; taken on success and on
 * failure); *v_out receives its value. */
static enum qp_status new_init(struct qp_graph *g, const char *base, int rank, const int64_t *dims,
                               float *data, uint64_t numel, int *v_out, struct qp_error *err) {
    struct qp_model *m = g->model;
    enum qp_status st = qp_model_own(m, data, err);
    if (st != QP_OK) return st;
    const char *name = qp_graph_unique_value_name(g, base);
    int64_t *d = qp_arena_calloc(m->arena, (size_t)(rank ? rank : 1), sizeof *d);
    if (!name || !d) return nomem(err);
    memcpy(d, dims, (size_t)rank * sizeof *d);
    struct qp_tensor t = {.name = name,
                          .dtype = QP_DTYPE_FLOAT,
                          .rank = rank,
                          .dims = d,
                          .numel = numel,
                          .data = data,
                          .nbytes = numel * sizeof(float)};
    return qp_graph_add_initializer(g, &t, v_out, err);
}

/* A float buffer of `numel` elements, or NULL. */
static float *floats(uint64_t numel) {
    return numel <= SIZE_MAX / sizeof(float) ? malloc((size_t)(numel ? numel : 1) * sizeof(float))
                                             : NULL;
}

static float read_f32(const void *p, uint64_t i) {
    float f;
    memcpy(&f, (const char *)p + i * 4, 4);
    return f;
}

/* Input `slot` of node ni, a float constant broadcast over the last axis (or absent), minus
 * scale * delta per channel of the last axis; written in place when nothing else reads it,
 * otherwise into a copy the node reads instead. */
static enum qp_status correct_const(struct qp_graph *g, int ni, int slot, int64_t n_ch,
                                    const double *delta, double scale, const char *base,
                                    struct qp_bias_correct_stats *st, struct qp_error *err) {
    struct qp_model *m = g->model;
    int v = slot < g->nodes[ni].n_inputs ? g->nodes[ni].inputs[slot] : -1;
    const struct qp_tensor *t = v >= 0 ? float_const(g, v) : NULL;
    if (v >= 0 && (!t || !broadcasts_last(t, n_ch)))
        return qp_error_set(err, QP_ERR_INTERNAL,
                            "bias correction: node '%s': input %d changed under correction",
                            g->nodes[ni].name, slot);
    int64_t dims[QP_MAX_RANK];
    int rank = t && t->rank > 0 ? t->rank : 1;
    if (rank > QP_MAX_RANK)
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "bias correction: node '%s': input %d has rank %d", g->nodes[ni].name,
                            slot, rank);
    int64_t old_last = t && t->rank > 0 ? t->dims[t->rank - 1] : 1;
    uint64_t numel = 1;
    for (int d = 0; d < rank; d++) {
        dims[d] = t && t->rank > 0 ? t->dims[d] : 1;
        if (d == rank - 1) dims[d] = n_ch;
        numel *= (uint64_t)dims[d];
    }
    float *buf = floats(numel);
    if (!buf) return nomem(err);
    for (uint64_t i = 0; i < numel; i++) {
        uint64_t c = i % (uint64_t)n_ch;
        float old = !t                 ? 0.0f
                    : old_last == n_ch ? read_f32(t->data, i)
                                       : read_f32(t->data, i / (uint64_t)n_ch);
        buf[i] = (float)((double)old - scale * delta[c]);
    }
    const struct qp_value *val = v >= 0 ? &g->values[v] : NULL;
    int private = val && val->n_uses == 1 && !val->is_graph_input && !val->is_graph_output;
    if (!private) {
        char name[512];
        snprintf(name, sizeof name, "%.480s%s", val ? val->name : base, val ? "_corrected" : "");
        int nv = -1;
        enum qp_status s = new_init(g, name, rank, dims, buf, numel, &nv, err);
        if (s != QP_OK) return s;
        if ((s = grow_inputs(g, ni, slot + 1, err)) != QP_OK ||
            (s = qp_graph_set_input(g, ni, slot, nv, err)) != QP_OK)
            return s;
        if (val)
            st->n_copied++;
        else
            st->n_biases_added++;
        qp_log(QP_LOG_DEBUG, "bias correction: node '%s' (%s): input %d %s '%s'", g->nodes[ni].name,
               g->nodes[ni].op_type, slot, val ? "copied to" : "added:", g->values[nv].name);
        return QP_OK;
    }
    /* Written in place: a tensor of the model's own (the file's bytes are never touched). */
    enum qp_status s = qp_model_own(m, buf, err);
    if (s != QP_OK) return s;
    int64_t *td = qp_arena_calloc(m->arena, (size_t)rank, sizeof *td);
    struct qp_tensor *nt = qp_arena_alloc(m->arena, sizeof *nt);
    if (!td || !nt) return nomem(err);
    memcpy(td, dims, (size_t)rank * sizeof *td);
    *nt = *t;
    nt->rank = rank;
    nt->dims = td;
    nt->numel = numel;
    nt->data = buf;
    nt->nbytes = numel * sizeof(float);
    nt->origin = NULL;
    nt->external_location = NULL;
    nt->external_offset = nt->external_length = 0;
    if (val->initializer >= 0) {
        g->inits[val->initializer] = *nt;
    } else {
        struct qp_node *cn = &g->nodes[val->producer];
        for (int a = 0; a < cn->n_attrs; a++)
            if (cn->attrs[a].type == QP_ATTR_TENSOR && cn->attrs[a].t == t) cn->attrs[a].t = nt;
    }
    if (t->rank != rank || old_last != n_ch) {
        struct qp_dim *vd = qp_arena_calloc(m->arena, (size_t)rank, sizeof *vd);
        if (!vd) return nomem(err);
        for (int d = 0; d < rank; d++)
            vd[d].value = dims[d];
        g->values[v].rank = rank;
        g->values[v].dims = vd;
    }
    return QP_OK;
}

/* MatMul ni without an Add of its own: it now writes `<out>_matmul` and a new Add of a float
 * initializer `<node>_bias` (-delta) writes `out`. */
static enum qp_status add_bias_add(struct qp_graph *g, struct bc_layer *L, const double *delta,
                                   struct qp_bias_correct_stats *st, struct qp_error *err) {
    int out = g->nodes[L->node].outputs[0];
    const char *out_name = g->values[out].name, *node_name = g->nodes[L->node].name;
    char base[512];
    snprintf(base, sizeof base, "%.480s_matmul", out_name);
    const char *mm_name = qp_graph_unique_value_name(g, base);
    if (!mm_name) return nomem(err);
    int mv = qp_graph_value(g, mm_name);
    if (mv < 0) return nomem(err);
    struct qp_value *o = &g->values[out], *mm = &g->values[mv];
    mm->kind = o->kind;
    mm->dtype = o->dtype;
    mm->rank = o->rank;
    mm->dims = o->dims;
    mm->producer = L->node;
    mm->producer_output = 0;
    o->producer = -1;
    g->nodes[L->node].outputs[0] = mv;
    float *b = floats((uint64_t)L->n_ch);
    if (!b) return nomem(err);
    for (int64_t c = 0; c < L->n_ch; c++)
        b[c] = (float)-delta[c];
    snprintf(base, sizeof base, "%.480s_bias", node_name);
    int bv = -1;
    enum qp_status s = new_init(g, base, 1, &L->n_ch, b, (uint64_t)L->n_ch, &bv, err);
    if (s != QP_OK) return s;
    snprintf(base, sizeof base, "%.480s_bias_add", node_name);
    const char *add_name = qp_graph_unique_node_name(g, base);
    if (!add_name) return nomem(err);
    const char *ins[2] = {mm_name, g->values[bv].name}, *outs[1] = {out_name};
    if ((s = qp_graph_add_node(g, add_name, "Add", "", 2, ins, 1, outs, &L->add, err)) != QP_OK)
        return s;
    L->add_slot = 1;
    st->n_biases_added++;
    qp_log(QP_LOG_DEBUG, "bias correction: node '%s' (MatMul): Add '%s' of '%s' added after it",
           g->nodes[L->node].name, add_name, g->values[bv].name);
    return QP_OK;
}

/* Sets Gemm ni's beta to 1 (its C was ignored with beta 0 and is replaced). */
static enum qp_status set_beta_one(struct qp_graph *g, int ni, struct qp_error *err) {
    struct qp_node *n = &g->nodes[ni];
    for (int a = 0; a < n->n_attrs; a++)
        if (strcmp(n->attrs[a].name, "beta") == 0) {
            n->attrs[a].type = QP_ATTR_FLOAT;
            n->attrs[a].f = 1.0f;
            return QP_OK;
        }
    struct qp_attr *a = qp_node_add_attr(g, ni, "beta", QP_ATTR_FLOAT);
    if (!a) return nomem(err);
    a->f = 1.0f;
    return QP_OK;
}

static enum qp_status apply(struct qp_graph *g, struct bc_layer *L, const double *delta,
                            struct qp_bias_correct_stats *st, struct qp_error *err) {
    char base[512];
    snprintf(base, sizeof base, "%.480s_bias", g->nodes[L->node].name);
    switch (L->kind) {
    case BC_CONV:
    case BC_CONV_T:
        return correct_const(g, L->node, 2, L->n_ch, delta, 1.0, base, st, err);
    case BC_GEMM: {
        const struct qp_attr *a = qp_node_attr(&g->nodes[L->node], "beta");
        double beta = a && a->type == QP_ATTR_FLOAT ? a->f : 1.0;
        int has_c = g->nodes[L->node].n_inputs > 2 && g->nodes[L->node].inputs[2] >= 0;
        if (beta != 0)
            return correct_const(g, L->node, 2, L->n_ch, delta, 1.0 / beta, base, st, err);
        /* beta 0: C is ignored; the correction becomes C with beta 1. */
        enum qp_status s;
        if (has_c && (s = qp_graph_set_input(g, L->node, 2, -1, err)) != QP_OK) return s;
        if ((s = set_beta_one(g, L->node, err)) != QP_OK) return s;
        return correct_const(g, L->node, 2, L->n_ch, delta, 1.0, base, st, err);
    }
    case BC_MATMUL:
        if (L->add < 0) return add_bias_add(g, L, delta, st, err);
        return correct_const(g, L->add, L->add_slot, L->n_ch, delta, 1.0, base, st, err);
    }
    return QP_OK;
}

/* ---- the rounds ---------------------------------------------------------------------------- */

/* The float tensor a quantized input reads: x for DequantizeLinear(QuantizeLinear(x)), else
 * the input itself. */
static int unquantized(const struct qp_graph *g, int v) {
    int dq = v >= 0 ? g->values[v].producer : -1;
    if (dq < 0 || !qp_node_is(&g->nodes[dq], "DequantizeLinear")) return v;
    int qv = g->nodes[dq].inputs[0];
    int q = qv >= 0 ? g->values[qv].producer : -1;
    if (q < 0 || !qp_node_is(&g->nodes[q], "QuantizeLinear")) return v;
    return g->nodes[q].inputs[0];
}

/* Adds beside layer L (found by name in the written model `sm`) its float twin: the same op and
 * attributes reading the float input and the float weight of mq (borrowed: mq outlives sm),
 * and the same bias, so the difference of the two outputs is the shift the quantization of
 * this layer's inputs causes given the input it receives. */
static enum qp_status add_twin(struct qp_model *sm, const struct qp_model *mq, struct bc_layer *L,
                               struct qp_error *err) {
    struct qp_graph *g = sm->graph;
    const struct qp_node *src = &mq->graph->nodes[L->node];
    int ni = qp_graph_find_node(g, src->name);
    if (ni < 0)
        return qp_error_set(err, QP_ERR_INTERNAL,
                            "bias correction: node '%s' is missing from the written model",
                            src->name);
    const struct qp_tensor *w = float_const(mq->graph, src->inputs[1]);
    if (!w || g->nodes[ni].n_inputs < 2)
        return qp_error_set(err, QP_ERR_INTERNAL, "bias correction: node '%s' lost its weight",
                            src->name);
    char base[512];
    snprintf(base, sizeof base, "%.480s_float", w->name);
    struct qp_tensor wt = *w;
    wt.name = qp_graph_unique_value_name(g, base);
    wt.origin = NULL;
    wt.external_location = NULL;
    int wv = -1;
    if (!wt.name) return nomem(err);
    enum qp_status st = qp_graph_add_initializer(g, &wt, &wv, err);
    if (st != QP_OK) return st;
    struct qp_node *n = &g->nodes[ni];
    const char *ins[3] = {NULL, g->values[wv].name, NULL};
    int x = unquantized(g, n->inputs[0]);
    ins[0] = x >= 0 ? g->values[x].name : NULL;
    int n_in = n->n_inputs > 3 ? 3 : n->n_inputs;
    if (n_in > 2 && n->inputs[2] >= 0) ins[2] = g->values[n->inputs[2]].name;
    int out = n->outputs[0];
    L->out_q = g->values[out].name;
    snprintf(base, sizeof base, "%.480s_float", L->out_q);
    const char *out_name = qp_graph_unique_value_name(g, base);
    snprintf(base, sizeof base, "%.480s_float", n->name);
    const char *node_name = qp_graph_unique_node_name(g, base);
    if (!out_name || !node_name) return nomem(err);
    int twin = -1;
    if ((st = qp_graph_add_node(g, node_name, n->op_type, n->domain, n_in, ins, 1, &out_name, &twin,
                                err)) != QP_OK)
        return st;
    n = &g->nodes[ni];
    g->nodes[twin].attrs = n->attrs; /* shared, read only: cap_attrs 0 makes an add copy */
    g->nodes[twin].n_attrs = n->n_attrs;
    g->nodes[twin].cap_attrs = 0;
    int tv = g->nodes[twin].outputs[0];
    g->values[tv].kind = g->values[n->outputs[0]].kind;
    g->values[tv].dtype = g->values[n->outputs[0]].dtype;
    g->values[tv].rank = g->values[n->outputs[0]].rank;
    g->values[tv].dims = g->values[n->outputs[0]].dims;
    L->out_f = g->values[tv].name;
    return QP_OK;
}

/* Writes a clone of mq with the placement (float32 high precision), adds every layer's float
 * twin and runs one pass. */
static enum qp_status measure(const struct qp_model *mq, const struct qp_placement *pl,
                              const struct qp_writer_options *wo, struct bc_pass *p,
                              struct qp_provider *data, int n_threads, uint64_t *n_batches,
                              struct qp_error *err) {
    struct qp_model *sm = NULL;
    enum qp_status st = qp_model_clone(mq, &sm, err);
    if (st == QP_OK && (st = qp_qdq_write(sm, pl, wo, NULL, err)) != QP_OK)
        qp_error_prefix(err, "bias correction: writing the measured model");
    zero_sums(p);
    for (size_t i = 0; st == QP_OK && i < p->n; i++)
        st = add_twin(sm, mq, &p->layers[i], err);
    if (st == QP_OK) st = qp_graph_toposort(sm->graph, err);
    if (st == QP_OK) st = run_pass(sm, p, mq->graph, data, n_threads, n_batches, err);
    for (size_t i = 0; st == QP_OK && i < p->n; i++)
        if (p->layers[i].q_count != p->layers[i].f_count || !p->layers[i].f_count)
            st = qp_error_set(err, QP_ERR_INTERNAL,
                              "bias correction: node '%s': %llu output elements per channel, "
                              "%llu in its float twin",
                              mq->graph->nodes[p->layers[i].node].name,
                              (unsigned long long)p->layers[i].q_count,
                              (unsigned long long)p->layers[i].f_count);
    qp_model_free(sm);
    return st;
}

enum qp_status qp_bias_correct(struct qp_model *mq, const struct qp_placement *pl,
                               struct qp_provider *data, const struct qp_bias_correct_options *o,
                               struct qp_bias_correct_stats *stats, struct qp_error *err) {
    double t0 = qp_clock_seconds();
    struct qp_bias_correct_stats local;
    struct qp_bias_correct_stats *st_out = stats ? stats : &local;
    memset(st_out, 0, sizeof *st_out);
    if (!mq || !pl || !data || !o || !o->writer)
        return qp_error_set(err, QP_ERR_USAGE, "bias correction: NULL argument");
    int rounds = o->n_rounds ? o->n_rounds : QP_BIAS_CORRECT_DEFAULT_ROUNDS;
    if (rounds < 1 || rounds > QP_BIAS_CORRECT_MAX_ROUNDS)
        return qp_error_set(err, QP_ERR_USAGE, "bias correction: %d rounds is not in 1..%d",
                            o->n_rounds, QP_BIAS_CORRECT_MAX_ROUNDS);
    struct qp_graph *g = mq->graph;
    enum qp_status st = qp_graph_toposort(g, err);
    if (st != QP_OK) return st;
    struct bc_layer *layers = calloc(g->n_topo ? g->n_topo : 1, sizeof *layers);
    double *delta = NULL;
    size_t n = 0, n_ch = 0;
    if (!layers) return nomem(err);
    for (size_t k = 0; k < g->n_topo; k++) {
        int r = discover(g, g->topo[k], pl, &layers[n], &st_out->n_skipped, err);
        if (r < 0) {
            st = QP_ERR_BAD_INPUT;
            goto done;
        }
        if (r) n_ch += (size_t)layers[n++].n_ch;
    }
    for (size_t i = 0; i < n; i++) {
        struct bc_layer *L = &layers[i];
        size_t c = (size_t)L->n_ch;
        if (!(L->fsum = calloc(c, sizeof(double))) || !(L->fsq = calloc(c, sizeof(double))) ||
            !(L->qsum = calloc(c, sizeof(double))) || !(L->applied = calloc(c, sizeof(double)))) {
            st = nomem(err);
            goto done;
        }
    }
    if (!(delta = calloc(n_ch ? n_ch : 1, sizeof *delta))) {
        st = nomem(err);
        goto done;
    }
    st_out->n_layers = n;
    st_out->n_channels = n_ch;
    if (!n) goto done;
    struct qp_writer_options wo = *o->writer;
    wo.high_precision = QP_DTYPE_FLOAT;
    wo.direct_io_types = 0;
    struct bc_pass p = {.layers = layers, .n = n};
    int passes = rounds + (o->verify != 0);
    for (int k = 0; k < passes; k++) {
        if ((st = measure(mq, pl, &wo, &p, data, o->n_threads, &st_out->n_batches, err)) != QP_OK)
            goto done;
        st_out->shift[k] = shifts(layers, n, delta);
        st_out->n_passes = k + 1;
        qp_log(QP_LOG_INFO, "bias correction: pass %d, mean |shift| / channel std %.6g", k + 1,
               st_out->shift[k]);
        if (k >= rounds) break;
        size_t off = 0;
        for (size_t i = 0; i < n && st == QP_OK; i++) {
            st = apply(g, &layers[i], delta + off, st_out, err);
            for (int64_t c = 0; c < layers[i].n_ch; c++)
                layers[i].applied[c] += delta[off + (size_t)c];
            off += (size_t)layers[i].n_ch;
        }
        if (st == QP_OK) st = qp_graph_toposort(g, err);
        if (st != QP_OK) goto done;
        st_out->n_rounds = k + 1;
    }
    st_out->shift_before = st_out->shift[0];
    st_out->shift_after = st_out->shift[st_out->n_passes - 1];
done:
    for (size_t i = 0; i < n; i++) {
        free(layers[i].fsum);
        free(layers[i].fsq);
        free(layers[i].qsum);
        free(layers[i].applied);
    }
    free(layers);
    free(delta);
    st_out->seconds = qp_clock_seconds() - t0;
    return st;
}
