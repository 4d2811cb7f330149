/* Targets, probes and scoring through engine overlays; the accuracy budget (sensitivity.h). */
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/size.h"
#include "calib/collect.h"
#include "core/clock.h"
#include "qmath/qparams.h"
#include "qplace/session.h"
#include "quant/writer.h"
#include "sensitivity/sensitivity.h"
#include "core/sort.h"

#define SENS_MAX_INPUTS 64

void qp_sens_options_default(struct qp_sens_options *o) {
    memset(o, 0, sizeof *o);
    o->granularity = QP_SENS_OP_TYPE;
    o->metric = QP_SENS_KL_DIV;
    o->probe = QP_SENS_QUANTIZE_ONE;
    o->qtype = QP_DTYPE_INT8;
    o->weight_clip_mse = 1;
    o->incremental = 1;
    o->cache_bytes = (size_t)1 << 30;
}

void qp_sens_target_release(struct qp_sens_target *t) {
    free(t->name);
    free(t->op_type);
    for (size_t k = 0; k < t->n_nodes; k++)
        free(t->nodes[k]);
    free(t->nodes);
    free(t->error);
    free(t->entries);
}

void qp_sens_result_free(struct qp_sens_result *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n_targets; i++)
        qp_sens_target_release(&r->targets[i]);
    free(r->targets);
    free(r);
}

static enum qp_status nomem(struct qp_error *err) {
    return qp_error_set(err, QP_ERR_NOMEM, "sensitivity: out of memory");
}

/* ---- targets --------------------------------------------------------------------------------- */

static size_t n_entries_of(const struct qp_placement *pl) {
    return pl->n_edges + pl->n_weights;
}

static int entry_node(const struct qp_placement *pl, size_t e) {
    return e < pl->n_edges ? pl->edges[e].node_index : pl->weights[e - pl->n_edges].node_index;
}

static int in_scope(const struct qp_sens_options *o, const char *op) {
    if (o->n_scope == 0) return 1;
    for (size_t i = 0; i < o->n_scope; i++)
        if (strcmp(o->scope[i], op) == 0) return 1;
    return 0;
}

/* Appends entry `e` and node `node` (if new) to target t. */
static enum qp_status target_add(struct qp_sens_target *t, const struct qp_placement *pl,
                                 const struct qp_graph *g, size_t e, struct qp_error *err) {
    size_t *ne = qp_realloc_n(t->entries, (t->n_edges + t->n_weights + 1), sizeof *ne);
    if (!ne) return nomem(err);
    t->entries = ne;
    t->entries[t->n_edges + t->n_weights] = e;
    if (e < pl->n_edges)
        t->n_edges++;
    else
        t->n_weights++;
    const char *node = g->nodes[entry_node(pl, e)].name;
    for (size_t k = 0; k < t->n_nodes; k++)
        if (strcmp(t->nodes[k], node) == 0) return QP_OK;
    char **nn = qp_realloc_n(t->nodes, (t->n_nodes + 1), sizeof *nn);
    if (!nn) return nomem(err);
    t->nodes = nn;
    if (!(t->nodes[t->n_nodes] = strdup(node))) return nomem(err);
    t->n_nodes++;
    return QP_OK;
}

/* Node targets in topological order; op-type targets sorted by name. Entries are added in
 * placement order, so within a target they follow the consumer order as well. */
static enum qp_status build_targets(const struct qp_graph *g, const struct qp_placement *pl,
                                    const struct qp_sens_options *o, struct qp_sens_result *r,
                                    struct qp_error *err) {
    size_t ne = n_entries_of(pl);
    size_t cap = (o->granularity == QP_SENS_NODE ? g->n_nodes : ne) + o->n_scope + 1;
    r->targets = calloc(cap, sizeof *r->targets);
    if (!r->targets) return nomem(err);
    if (o->granularity == QP_SENS_NODE) {
        int *tidx = qp_malloc_n(g->n_nodes + 1, sizeof *tidx);
        if (!tidx) return nomem(err);
        for (size_t i = 0; i < g->n_nodes; i++)
            tidx[i] = -1;
        /* -2 marks a node holding an entry; targets are then numbered in topological order. */
        for (size_t e = 0; e < ne; e++)
            tidx[entry_node(pl, e)] = -2;
        for (size_t k = 0; k < g->n_topo; k++) {
            int ni = g->topo[k];
            if (tidx[ni] != -2) continue;
            tidx[ni] = -1;
            if (!in_scope(o, g->nodes[ni].op_type)) continue;
            struct qp_sens_target *t = &r->targets[r->n_targets];
            tidx[ni] = (int)r->n_targets++;
            if (!(t->name = strdup(g->nodes[ni].name)) ||
                !(t->op_type = strdup(g->nodes[ni].op_type))) {
                free(tidx);
                return nomem(err);
            }
        }
        for (size_t e = 0; e < ne; e++) {
            int ti = tidx[entry_node(pl, e)];
            if (ti < 0) continue;
            enum qp_status st = target_add(&r->targets[ti], pl, g, e, err);
            if (st != QP_OK) {
                free(tidx);
                return st;
            }
        }
        free(tidx);
        return QP_OK;
    }
    /* Op types: the distinct consumer op types (in scope), plus scoped types with no entry. */
    const char **ops = calloc(ne + o->n_scope + 1, sizeof *ops);
    if (!ops) return nomem(err);
    size_t nops = 0;
    for (size_t e = 0; e < ne + o->n_scope; e++) {
        const char *op = e < ne ? g->nodes[entry_node(pl, e)].op_type : o->scope[e - ne];
        if (e < ne && !in_scope(o, op)) continue;
        int seen = 0;
        for (size_t k = 0; k < nops && !seen; k++)
            seen = strcmp(ops[k], op) == 0;
        if (!seen) ops[nops++] = op;
    }
    qsort(ops, nops, sizeof *ops, qp_cmp_strp);
    for (size_t k = 0; k < nops; k++) {
        struct qp_sens_target *t = &r->targets[r->n_targets++];
        if (!(t->name = strdup(ops[k])) || !(t->op_type = strdup(ops[k]))) {
            free(ops);
            return nomem(err);
        }
        for (size_t e = 0; e < ne; e++) {
            if (strcmp(g->nodes[entry_node(pl, e)].op_type, ops[k]) != 0) continue;
            enum qp_status st = target_add(t, pl, g, e, err);
            if (st != QP_OK) {
                free(ops);
                return st;
            }
        }
    }
    free(ops);
    return QP_OK;
}

/* ---- the evaluation context ------------------------------------------------------------------ */

/* What runs probes: a session and a probe's overlays. Worker 0's session runs the reference
 * passes too (with every thread) and the others, sessions of their own on lanes 1.. with a share
 * of the threads, read its cached reference (qp_session_borrow_cache). */
struct sens_worker {
    struct qp_session *s;
    struct qp_overlay *buf; /* a probe's overlays */
    unsigned char *apply;   /* per entry: quantized by the current probe */
    double *acc;            /* one probe's metric sums, per output */
    uint64_t nodes;         /* node computations of its probes in this batch */
    struct qp_error err;    /* a probe error that stops the run */
};

struct sens_ctx {
    const struct qp_graph *g;
    const struct qp_placement *pl;
    const struct qp_sens_options *o;
    struct qp_provider *prov;
    const struct qp_model *model;
    struct sens_worker *wk; /* n_wk >= 1 */
    size_t n_wk;
    size_t n_in;
    size_t np; /* provider inputs, and their shapes in the first batch (what sessions plan for) */
    struct qp_shape shapes[SENS_MAX_INPUTS];
    size_t in_map[SENS_MAX_INPUTS]; /* provider index of session input i */
    struct qp_array in[SENS_MAX_INPUTS];
    size_t n_entries;
    struct qp_overlay *ov; /* one per entry */
    float **scales;        /* per entry */
    char **entry_err;      /* per entry: why it cannot be overlaid, or NULL */
    /* Every entry that can be overlaid is set on the session once, and probes toggle bypass
     * flags (the plan is kept). 0 when planning with all of them failed: then each probe sets
     * only its own overlays, so only the probes holding the bad edge fail. */
    int all_mode;
    size_t n_all;
    size_t *all_entry; /* entry of a worker's buf[k] in all_mode */
    size_t n_out;
    int *out_float;   /* 1: a float output that is scored */
    float **ref;      /* reference values of the current batch, per output */
    size_t *ref_n;    /* their element counts */
    size_t *samples;  /* samples in the current batch, per output */
    size_t *last_dim; /* per output: its last dimension when it holds class scores, else 0 */
    uint64_t rows;    /* samples (first input's rows) of the current batch */
};

static void worker_free(struct sens_worker *w) {
    qp_session_free(w->s);
    free(w->buf);
    free(w->apply);
    free(w->acc);
}

static void ctx_free(struct sens_ctx *c) {
    for (size_t k = 0; c->wk && k < c->n_wk; k++)
        worker_free(&c->wk[k]);
    free(c->wk);
    for (size_t e = 0; e < c->n_entries; e++) {
        if (c->scales) free(c->scales[e]);
        if (c->entry_err) free(c->entry_err[e]);
    }
    free(c->ov);
    free(c->scales);
    free(c->entry_err);
    free(c->all_entry);
    for (size_t i = 0; c->ref && i < c->n_out; i++)
        free(c->ref[i]);
    free(c->ref);
    free(c->ref_n);
    free(c->samples);
    free(c->last_dim);
    free(c->out_float);
}

static enum qp_status entry_error(struct sens_ctx *c, size_t e, const char *fmt, const char *a,
                                  const char *b) {
    char msg[2048];
    snprintf(msg, sizeof msg, fmt, a, b);
    if (!(c->entry_err[e] = strdup(msg))) return QP_ERR_NOMEM;
    return QP_OK;
}

/* Overlay parameters of every placement entry: activation scales from the calibrated amax,
 * weight scales per channel (or per tensor) as the writer gives them (qp_qdq_weight_scales:
 * absmax, or with o->weight_clip_mse each channel's least-error clipping). */
static enum qp_status build_overlays(struct sens_ctx *c, const struct qp_ranges *ranges,
                                     struct qp_error *err) {
    const struct qp_placement *pl = c->pl;
    size_t ne = c->n_entries;
    c->ov = calloc(ne + 1, sizeof *c->ov);
    c->scales = calloc(ne + 1, sizeof *c->scales);
    c->entry_err = calloc(ne + 1, sizeof *c->entry_err);
    c->all_entry = calloc(ne + 1, sizeof *c->all_entry);
    if (!c->ov || !c->scales || !c->entry_err || !c->all_entry) return nomem(err);
    enum qp_dtype qt = c->o->qtype;
    for (size_t e = 0; e < ne; e++) {
        struct qp_overlay *ov = &c->ov[e];
        ov->qtype = qt;
        ov->saturate = 1;
        struct qp_error tmp = {0};
        int32_t zp = 0;
        if (e < pl->n_edges) {
            const struct qp_qedge *q = &pl->edges[e];
            ov->node = q->node;
            ov->input = q->input;
            ov->n_params = 1;
            const struct qp_range *rg = ranges ? qp_ranges_find(ranges, q->tensor) : NULL;
            if (!rg) {
                if (entry_error(c, e,
                                "tensor '%s' (-> node '%s') has no calibrated range (not a "
                                "float tensor the engine computes)",
                                q->tensor, q->node) != QP_OK)
                    return nomem(err);
                continue;
            }
            if (!(c->scales[e] = malloc(sizeof(float)))) return nomem(err);
            if (qp_qparams_from_range(qt, -rg->amax, rg->amax, 1, c->scales[e], &zp, &tmp) !=
                QP_OK) {
                if (entry_error(c, e, "tensor '%s': %s", q->tensor, tmp.msg) != QP_OK)
                    return nomem(err);
                continue;
            }
            ov->scale = c->scales[e];
            continue;
        }
        const struct qp_qweight *w = &pl->weights[e - pl->n_edges];
        ov->node = w->node;
        ov->input = w->input;
        const struct qp_tensor *t = qp_placement_weight_tensor(c->g, w->value_index);
        if (!t || t->dtype != QP_DTYPE_FLOAT || !t->data || t->nbytes != t->numel * 4 ||
            w->axis >= t->rank) {
            if (entry_error(c, e, "weight '%s' (-> node '%s') is not a float constant with data",
                            w->tensor, w->node) != QP_OK)
                return nomem(err);
            continue;
        }
        int64_t len = 0;
        if (w->axis >= 0 && (t->dims[w->axis] <= 0 || (uint64_t)t->dims[w->axis] > t->numel + 1)) {
            if (entry_error(c, e, "weight '%s' (-> node '%s') has an empty quantization axis",
                            w->tensor, w->node) != QP_OK)
                return nomem(err);
            continue;
        }
        enum qp_status st =
            qp_qdq_weight_scales(t, w->axis, qt, c->o->weight_clip_mse, &c->scales[e], &len, &tmp);
        if (st == QP_ERR_NOMEM) return nomem(err);
        if (st != QP_OK) { /* tmp.msg names the weight */
            if (entry_error(c, e, "%s%s", tmp.msg, "") != QP_OK) return nomem(err);
            continue;
        }
        ov->axis = w->axis < 0 ? 0 : w->axis;
        ov->n_params = w->axis < 0 ? 1 : (size_t)len;
        ov->scale = c->scales[e];
    }
    return QP_OK;
}

/* A worker's session on `lane` with `n_threads`, fused like any session: a fused Conv chain
 * keeps one preparation per combination of its weight overlays' bypass flags (made on first
 * use), so probes toggling them keep the plan. Planned once (lazy_plan: not also at creation)
 * for the first batch's shapes with every entry that can be overlaid, bypassed; when that
 * fails for worker 0, c->all_mode drops to 0 and every probe sets only its own overlays (so
 * only the probes holding the bad edge fail). */
static enum qp_status worker_init(struct sens_ctx *c, struct sens_worker *w, int lane,
                                  int n_threads, struct qp_error *err) {
    size_t ne = c->n_entries + 1;
    w->buf = calloc(ne, sizeof *w->buf);
    w->apply = calloc(ne, 1);
    if (!w->buf || !w->apply) return nomem(err);
    struct qp_session_options so = {.n_threads = n_threads, .lazy_plan = 1, .lane = lane};
    enum qp_status st = qp_session_create(c->model, &so, c->np, c->shapes, &w->s, err);
    if (st != QP_OK) return st;
    if (!(w->acc = calloc(qp_session_n_outputs(w->s) + 1, sizeof *w->acc))) return nomem(err);
    if (lane == 0) c->n_out = qp_session_n_outputs(w->s);
    if (!c->all_mode) return QP_OK;
    for (size_t k = 0; k < c->n_all; k++) {
        w->buf[k] = c->ov[c->all_entry[k]];
        w->buf[k].bypass = 1;
    }
    struct qp_error perr = {0};
    if (qp_session_set_overlays(w->s, c->n_all, w->buf, &perr) == QP_OK &&
        qp_session_plan(w->s, c->np, c->shapes, &perr) == QP_OK)
        return QP_OK;
    if (perr.status == QP_ERR_NOMEM) return qp_error_set(err, QP_ERR_NOMEM, "%s", perr.msg);
    if (lane != 0) /* worker 0 planned with them: this one should have */
        return qp_error_set(err, perr.status ? perr.status : QP_ERR_INTERNAL, "%s", perr.msg);
    c->all_mode = 0;
    return qp_session_set_overlays(w->s, 0, NULL, err);
}

static enum qp_status ctx_init(struct sens_ctx *c, const struct qp_model *model,
                               const struct qp_placement *pl, struct qp_provider *prov,
                               const struct qp_ranges *ranges, const struct qp_sens_options *o,
                               struct qp_error *err) {
    memset(c, 0, sizeof *c);
    c->model = model;
    c->g = model->graph;
    c->pl = pl;
    c->o = o;
    c->prov = prov;
    c->n_entries = n_entries_of(pl);
    if (o->qtype != QP_DTYPE_INT8 && o->qtype != QP_DTYPE_FLOAT8E4M3FN)
        return qp_error_set(err, QP_ERR_USAGE, "sensitivity: target precision must be int8 or fp8");
    if ((unsigned)o->metric >= QP_SENS_METRIC_COUNT ||
        (unsigned)o->granularity >= QP_SENS_GRANULARITY_COUNT ||
        (unsigned)o->probe >= QP_SENS_PROBE_COUNT)
        return qp_error_set(err, QP_ERR_USAGE, "sensitivity: bad metric, granularity or probe");
    enum qp_status st = build_overlays(c, ranges, err);
    if (st != QP_OK) return st;
    /* The session, planned for the first batch's shapes. */
    const struct qp_array *batch = NULL;
    int end = 0;
    if ((st = qp_provider_reset(prov, err)) != QP_OK) return st;
    if ((st = qp_provider_next(prov, &batch, &end, err)) != QP_OK) return st;
    if (end) return qp_error_set(err, QP_ERR_BAD_INPUT, "sensitivity: the data has no batches");
    size_t np = qp_provider_n_inputs(prov);
    if (np > SENS_MAX_INPUTS)
        return qp_error_set(err, QP_ERR_UNSUPPORTED, "sensitivity: more than %d model inputs",
                            SENS_MAX_INPUTS);
    c->np = np;
    qp_provider_shapes(prov, batch, c->shapes);
    /* Every entry that can be overlaid, the list each worker sets (bypassed) and plans with. */
    c->n_all = 0;
    for (size_t e = 0; e < c->n_entries; e++)
        if (!c->entry_err[e]) c->all_entry[c->n_all++] = e;
    if (!(c->wk = calloc(1, sizeof *c->wk))) return nomem(err);
    c->n_wk = 1;
    c->all_mode = 1;
    if ((st = worker_init(c, &c->wk[0], 0, o->n_threads, err)) != QP_OK) return st;
    c->n_in = qp_session_n_inputs(c->wk[0].s);
    if ((st = qp_provider_map_inputs(prov, c->wk[0].s, "sensitivity", c->in_map, err)) != QP_OK)
        return st;
    size_t no = c->n_out + 1;
    c->out_float = calloc(no, sizeof *c->out_float);
    c->ref = calloc(no, sizeof *c->ref);
    c->ref_n = calloc(no, sizeof *c->ref_n);
    c->samples = calloc(no, sizeof *c->samples);
    c->last_dim = calloc(no, sizeof *c->last_dim);
    if (!c->out_float || !c->ref || !c->ref_n || !c->samples || !c->last_dim) return nomem(err);
    return qp_provider_reset(prov, err);
}

/* Puts the entries marked in w->apply on w's session: bypass flags over every entry in
 * all_mode, else exactly the applied overlays. */
static enum qp_status ctx_set_overlays(const struct sens_ctx *c, struct sens_worker *w,
                                       struct qp_error *err) {
    if (c->all_mode) {
        for (size_t k = 0; k < c->n_all; k++)
            w->buf[k].bypass = !w->apply[c->all_entry[k]];
        return qp_session_set_overlays(w->s, c->n_all, w->buf, err);
    }
    size_t n = 0;
    for (size_t e = 0; e < c->n_entries; e++)
        if (w->apply[e]) w->buf[n++] = c->ov[e];
    return qp_session_set_overlays(w->s, n, w->buf, err);
}

/* Full float run of `batch` (the reference; cached by the engine when `cache`), outputs copied. */
static enum qp_status ctx_reference(struct sens_ctx *c, const struct qp_array *batch, int cache,
                                    struct qp_error *err) {
    for (size_t i = 0; i < c->n_in; i++)
        c->in[i] = batch[c->in_map[i]];
    c->rows = c->n_in && c->in[0].rank > 0 && c->in[0].dims[0] > 0 ? (uint64_t)c->in[0].dims[0] : 1;
    struct sens_worker *w = &c->wk[0];
    memset(w->apply, 0, c->n_entries);
    enum qp_status st = ctx_set_overlays(c, w, err);
    if (st != QP_OK) return st;
    qp_session_set_threads(w->s, c->o->n_threads);
    qp_session_set_cache(w->s, cache ? c->o->cache_bytes : 0);
    if ((st = qp_session_run(w->s, c->n_in, c->in, err)) != QP_OK) return st;
    size_t n_float = 0;
    for (size_t i = 0; i < c->n_out; i++) {
        struct qp_array v;
        if ((st = qp_session_output(w->s, i, &v, err)) != QP_OK) return st;
        c->out_float[i] = v.dtype == QP_DTYPE_FLOAT;
        if (!c->out_float[i]) continue;
        n_float++;
        size_t n = v.nbytes / 4;
        if (n != c->ref_n[i] || !c->ref[i]) {
            float *p = qp_realloc_n(c->ref[i], (n ? n : 1), sizeof *p);
            if (!p) return nomem(err);
            c->ref[i] = p;
            c->ref_n[i] = n;
        }
        memcpy(c->ref[i], v.data, n * 4);
        /* class scores, as the quantize summary's top1 says: rank >= 2, last dim >= 2 */
        c->last_dim[i] = v.rank >= 2 && v.dims[v.rank - 1] >= 2 ? (size_t)v.dims[v.rank - 1] : 0;
        c->samples[i] = v.rank >= 1 && (uint64_t)v.dims[0] == c->rows && c->rows > 0 && n > 0
                            ? (size_t)c->rows
                            : 1;
    }
    if (n_float == 0)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "sensitivity: the model has no float32 graph output to score");
    return QP_OK;
}

/* Runs w with the entries of w->apply quantized (partial re-execution when `partial`, from the
 * reference worker 0 recorded) and fills w->acc with the metric summed over the batch's samples,
 * per output. */
static enum qp_status ctx_probe(const struct sens_ctx *c, struct sens_worker *w, int partial,
                                struct qp_error *err) {
    enum qp_status st = ctx_set_overlays(c, w, err);
    if (st != QP_OK) return st;
    st = partial ? qp_session_run_partial(w->s, err) : qp_session_run(w->s, c->n_in, c->in, err);
    if (st != QP_OK) return st;
    w->nodes += qp_session_nodes_executed(w->s);
    for (size_t i = 0; i < c->n_out; i++) {
        w->acc[i] = 0;
        if (!c->out_float[i]) continue;
        struct qp_array v;
        if ((st = qp_session_output(w->s, i, &v, err)) != QP_OK) return st;
        if (v.dtype != QP_DTYPE_FLOAT || v.nbytes / 4 != c->ref_n[i])
            return qp_error_set(err, QP_ERR_INTERNAL,
                                "sensitivity: output '%s' changed shape under quantization",
                                qp_session_output_name(w->s, i));
        size_t s = c->samples[i], f = c->ref_n[i] / s;
        const float *q = v.data;
        for (size_t k = 0; k < s; k++)
            w->acc[i] += qp_sens_metric_sample(c->o->metric, c->ref[i] + k * f, q + k * f, f);
    }
    return QP_OK;
}

/* Marks in w->apply the entries a probe quantizes: the target's (quantize_one) or all others
 * (exclude_one). On an applied entry that cannot be overlaid returns its index + 1 (the probe
 * fails), else 0. */
static size_t probe_apply(const struct sens_ctx *c, struct sens_worker *w,
                          const struct qp_sens_target *t, int exclude) {
    memset(w->apply, exclude ? 1 : 0, c->n_entries);
    for (size_t k = 0; k < t->n_edges + t->n_weights; k++)
        w->apply[t->entries[k]] = !exclude;
    for (size_t e = 0; e < c->n_entries; e++)
        if (w->apply[e] && c->entry_err[e]) return e + 1;
    return 0;
}

static enum qp_status set_target_error(struct qp_sens_target *t, enum qp_sens_state state,
                                       const char *msg, struct qp_error *err) {
    t->state = state;
    free(t->error);
    if (!(t->error = strdup(msg))) return nomem(err);
    return QP_OK;
}

/* ---- probes on parallel workers ------------------------------------------------------------ */

/* The probes of a batch are independent, so workers run whole probes side by side, each on its
 * own session with a share of the threads, rather than every probe in turn with every thread:
 * the later layers, which most probes re-run, are small operations whose parallel regions cost
 * more than they share out. Each probe is computed the same way whichever worker takes it
 * (kernels give the same results at any thread count), so the scores do not depend on the
 * number of workers. Targets go out costliest first (estimated from the nodes downstream of
 * their edges, then from the previous batch's times). A worker keeps the targets it ran in the
 * previous batch (its session holds their quantized weight preparations): it takes its own
 * first, then targets nobody ran yet, then the cheapest left to another worker. */
struct probe_pool {
    struct sens_ctx *c;
    struct qp_sens_result *r;
    double *sums; /* per target and output */
    size_t n_targets;
    size_t *order; /* live targets, costliest first */
    size_t n_order;
    double *cost; /* per target: estimate, then the last batch's seconds */
    int n_threads_each;
    uint64_t total, done;   /* probe steps (probes x batches) */
    uint64_t n_batches;     /* steps per probe */
    int *owner;             /* per target: the worker that ran it last, or -1 */
    unsigned char *taken;   /* per position in order: handed out in this batch */
    size_t *own_at;         /* per worker: where its scan for its own targets is */
    size_t new_at, back_at; /* the scans for targets nobody ran, and from the cheapest end */
    atomic_int stop;
    pthread_mutex_t lock; /* handing out targets, progress */
    int lock_ok;
    struct pool_arg *args; /* per worker */
    pthread_t *th;
};

static int cmp_cost(const void *a, const void *b, void *u);

struct pool_arg {
    struct probe_pool *p;
    struct sens_worker *w;
};

/* Nodes at or downstream of the consumers of target t's entries. */
static size_t downstream_nodes(const struct sens_ctx *c, const struct qp_sens_target *t,
                               unsigned char *mark, int *stack) {
    const struct qp_graph *g = c->g;
    memset(mark, 0, g->n_nodes ? g->n_nodes : 1);
    size_t sp = 0;
    for (size_t k = 0; k < t->n_edges + t->n_weights; k++) {
        int nd = entry_node(c->pl, t->entries[k]);
        if (nd >= 0 && !mark[nd]) {
            mark[nd] = 1;
            stack[sp++] = nd;
        }
    }
    return qp_graph_mark_downstream(g, mark, stack, sp);
}

/* Bytes the system can still give (MemAvailable), or 0 when unknown. */
static uint64_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

/* How many workers: --probe_workers, or (0) one per thread; never more than the threads or the
 * live targets. Left to choose, extra workers (each a session: its prepared weights and
 * activation arena) take at most half of the memory still available. */
static size_t pool_size(const struct sens_ctx *c, size_t n_live, int n_threads) {
    size_t w = c->o->probe_workers > 0 ? (size_t)c->o->probe_workers : (size_t)n_threads;
    if (w > (size_t)n_threads) w = (size_t)n_threads;
    if (w > n_live) w = n_live;
    if (w < 1) w = 1;
    if (c->o->probe_workers > 0 || w == 1) return w;
    uint64_t weights = 0;
    for (size_t i = 0; i < c->g->n_inits; i++)
        weights += c->g->inits[i].nbytes;
    /* Measured on the generated ResNet-50 (about 100 MB of weights, batch 8): one extra
     * worker added 0.33 GB of peak RSS (its prepared weights, the quantized variants its probes
     * made, its arena), about three times the weights plus the arena. */
    uint64_t each = 3 * weights + qp_session_arena_bytes(c->wk[0].s);
    uint64_t avail = mem_available();
    while (w > 1 && avail && (uint64_t)(w - 1) * each > avail / 2)
        w--;
    return w;
}

struct worker_make {
    struct sens_ctx *c;
    struct sens_worker *w;
    int lane, n_threads;
    enum qp_status st;
    struct qp_error err;
    int joined; /* made on the calling thread */
};

static void *worker_make(void *arg) {
    struct worker_make *a = arg;
    a->st = worker_init(a->c, a->w, a->lane, a->n_threads, &a->err);
    return NULL;
}

static void pool_free(struct probe_pool *p) {
    free(p->order);
    free(p->cost);
    free(p->args);
    free(p->th);
    free(p->owner);
    free(p->taken);
    free(p->own_at);
    if (p->lock_ok) pthread_mutex_destroy(&p->lock);
}

static enum qp_status pool_init(struct probe_pool *p, size_t n_live, struct qp_error *err) {
    struct sens_ctx *c = p->c;
    if (pthread_mutex_init(&p->lock, NULL) != 0)
        return qp_error_set(err, QP_ERR_NOMEM, "sensitivity: cannot create a lock");
    p->lock_ok = 1;
    p->order = calloc(p->n_targets + 1, sizeof *p->order);
    p->cost = calloc(p->n_targets + 1, sizeof *p->cost);
    p->owner = malloc((p->n_targets + 1) * sizeof *p->owner);
    p->taken = calloc(p->n_targets + 1, 1);
    if (!p->owner || !p->taken) return nomem(err);
    for (size_t t = 0; t < p->n_targets; t++)
        p->owner[t] = -1;
    unsigned char *mark = malloc(c->g->n_nodes + 1);
    int *stack = qp_malloc_n(c->g->n_nodes + 1, sizeof *stack);
    if (!p->order || !p->cost || !mark || !stack) {
        free(mark);
        free(stack);
        return nomem(err);
    }
    for (size_t t = 0; t < p->n_targets; t++) {
        const struct qp_sens_target *tg = &p->r->targets[t];
        if (tg->state != QP_SENS_SCORED) continue;
        p->order[p->n_order++] = t;
        p->cost[t] = c->o->incremental ? (double)downstream_nodes(c, tg, mark, stack) : 1.0;
    }
    free(mark);
    free(stack);
    qsort_r(p->order, p->n_order, sizeof *p->order, cmp_cost, p->cost);
    int n_threads = c->o->n_threads > 0 ? c->o->n_threads : omp_get_num_procs();
    if (n_threads < 1) n_threads = 1;
    size_t w = pool_size(c, n_live, n_threads);
    p->n_threads_each = n_threads / (int)w > 0 ? n_threads / (int)w : 1;
    struct sens_worker *wk = qp_realloc_n(c->wk, w, sizeof *wk);
    if (!wk) return nomem(err);
    c->wk = wk;
    memset(wk + 1, 0, (w - 1) * sizeof *wk);
    p->args = calloc(w, sizeof *p->args);
    p->th = calloc(w, sizeof *p->th);
    p->own_at = calloc(w, sizeof *p->own_at);
    if (!p->args || !p->th || !p->own_at) return nomem(err);
    /* The extra workers' sessions are made side by side (each plans and prepares its weights). */
    struct worker_make *mk = calloc(w, sizeof *mk);
    if (!mk) return nomem(err);
    c->n_wk = w; /* zeroed workers free safely */
    for (size_t k = 1; k < w; k++) {
        mk[k] = (struct worker_make){c, &wk[k], (int)k, p->n_threads_each, QP_OK, {0}, 0};
        if (pthread_create(&p->th[k], NULL, worker_make, &mk[k]) != 0) {
            worker_make(&mk[k]);
            mk[k].joined = 1;
        }
    }
    enum qp_status st = QP_OK;
    for (size_t k = 1; k < w; k++) {
        if (!mk[k].joined) pthread_join(p->th[k], NULL);
        if (st == QP_OK && mk[k].st != QP_OK) st = qp_error_set(err, mk[k].st, "%s", mk[k].err.msg);
    }
    free(mk);
    return st;
}

static int cmp_cost(const void *a, const void *b, void *u) {
    const double *cost = u;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    if (cost[x] != cost[y]) return cost[x] > cost[y] ? -1 : 1;
    return x < y ? -1 : (x > y);
}

/* The next target for worker `me` (its own, else one nobody ran, else the cheapest left), or
 * SIZE_MAX when the batch is handed out. Called under p->lock. */
static size_t pool_take(struct probe_pool *p, int me) {
    size_t n = p->n_order, j = n;
    size_t *own = &p->own_at[me];
    while (*own < n && (p->taken[*own] || p->owner[p->order[*own]] != me))
        (*own)++;
    if (*own < n) {
        j = *own;
    } else {
        while (p->new_at < n && (p->taken[p->new_at] || p->owner[p->order[p->new_at]] >= 0))
            p->new_at++;
        if (p->new_at < n) {
            j = p->new_at;
        } else {
            while (p->back_at > 0 && p->taken[p->back_at - 1])
                p->back_at--;
            if (p->back_at > 0) j = p->back_at - 1;
        }
    }
    if (j >= n) return SIZE_MAX;
    p->taken[j] = 1;
    p->owner[p->order[j]] = me;
    return p->order[j];
}

static void *pool_work(void *arg_) {
    struct pool_arg *arg = arg_;
    struct probe_pool *p = arg->p;
    struct sens_ctx *c = p->c;
    struct sens_worker *w = arg->w;
    int exclude = c->o->probe == QP_SENS_EXCLUDE_ONE;
    size_t no = c->n_out + 1;
    while (!atomic_load(&p->stop)) {
        pthread_mutex_lock(&p->lock);
        size_t t = pool_take(p, (int)(w - p->c->wk));
        pthread_mutex_unlock(&p->lock);
        if (t == SIZE_MAX) break;
        struct qp_sens_target *tg = &p->r->targets[t];
        if (tg->state != QP_SENS_SCORED) continue; /* failed in an earlier batch */
        double t0 = qp_clock_seconds();
        probe_apply(c, w, tg, exclude);
        struct qp_error perr = {0};
        enum qp_status ps = ctx_probe(c, w, c->o->incremental, &perr);
        p->cost[t] = qp_clock_seconds() - t0;
        if (ps == QP_ERR_NOMEM) {
            qp_error_set(&w->err, ps, "%s", perr.msg);
            atomic_store(&p->stop, 1);
            break;
        }
        if (ps != QP_OK) {
            if (set_target_error(tg, QP_SENS_FAILED, perr.msg, &w->err) != QP_OK) {
                atomic_store(&p->stop, 1);
                break;
            }
        } else {
            for (size_t i = 0; i < c->n_out; i++)
                p->sums[t * no + i] += w->acc[i];
        }
        pthread_mutex_lock(&p->lock);
        p->done++;
        if (c->o->progress) /* probes, not probe steps */
            c->o->progress(p->done / p->n_batches, p->total / p->n_batches, c->o->progress_user);
        pthread_mutex_unlock(&p->lock);
    }
    return NULL;
}

/* Every live target's probe on the current batch, spread over the workers. */
static enum qp_status pool_run_batch(struct probe_pool *p, struct qp_error *err) {
    struct sens_ctx *c = p->c;
    size_t n = c->n_wk;
    for (size_t k = 1; k < n && c->o->incremental; k++) {
        enum qp_status st = qp_session_borrow_cache(c->wk[k].s, c->wk[0].s, err);
        if (st != QP_OK) return st;
    }
    qp_session_set_threads(c->wk[0].s, n > 1 ? p->n_threads_each : c->o->n_threads);
    memset(p->taken, 0, p->n_order);
    memset(p->own_at, 0, n * sizeof *p->own_at);
    p->new_at = 0;
    p->back_at = p->n_order;
    atomic_store(&p->stop, 0);
    struct pool_arg *args = p->args;
    pthread_t *th = p->th;
    size_t started = 1;
    for (size_t k = 0; k < n; k++) {
        c->wk[k].nodes = 0;
        c->wk[k].err = (struct qp_error){0};
        args[k] = (struct pool_arg){p, &c->wk[k]};
    }
    for (size_t k = 1; k < n; k++) {
        if (pthread_create(&th[k], NULL, pool_work, &args[k]) != 0) break;
        started++;
    }
    pool_work(&args[0]); /* the calling thread is worker 0; workers not started leave it more */
    for (size_t k = 1; k < started; k++)
        pthread_join(th[k], NULL);
    enum qp_status st = QP_OK;
    for (size_t k = 0; k < n; k++) {
        p->r->nodes_executed += c->wk[k].nodes;
        if (st == QP_OK && c->wk[k].err.status != QP_OK)
            st = qp_error_set(err, c->wk[k].err.status, "%s", c->wk[k].err.msg);
    }
    if (st != QP_OK) return st;
    /* The next batch hands out the costliest first by this batch's times. */
    qsort_r(p->order, p->n_order, sizeof *p->order, cmp_cost, p->cost);
    return QP_OK;
}

enum qp_status qp_sens_score(const struct qp_model *model, const struct qp_placement *pl,
                             struct qp_provider *prov, const struct qp_ranges *ranges,
                             const struct qp_sens_options *o, struct qp_sens_result **out,
                             struct qp_error *err) {
    if (!model || !pl || !prov || !o || !out)
        return qp_error_set(err, QP_ERR_USAGE, "sensitivity: NULL argument");
    struct sens_ctx c;
    struct qp_sens_result *r = calloc(1, sizeof *r);
    double *sums = NULL, *counts = NULL;
    if (!r) return nomem(err);
    enum qp_status st = ctx_init(&c, model, pl, prov, ranges, o, err);
    if (st != QP_OK) goto done;
    if ((st = build_targets(c.g, pl, o, r, err)) != QP_OK) goto done;
    size_t nt = r->n_targets;
    sums = calloc((nt + 1) * (c.n_out + 1), sizeof *sums);
    counts = calloc(c.n_out + 1, sizeof *counts);
    if (!sums || !counts) {
        st = nomem(err);
        goto done;
    }
    /* What can be decided before running: unprobed targets, entries that cannot be overlaid. */
    for (size_t t = 0; t < nt; t++) {
        struct qp_sens_target *tg = &r->targets[t];
        size_t ne = tg->n_edges + tg->n_weights;
        char msg[640];
        if (ne == 0) {
            if ((st = set_target_error(tg, QP_SENS_UNPROBED,
                                       "the placement quantizes no input of this op type", err)) !=
                QP_OK)
                goto done;
            continue;
        }
        if (o->probe == QP_SENS_EXCLUDE_ONE && ne == c.n_entries) {
            if ((st = set_target_error(tg, QP_SENS_UNPROBED,
                                       "the target holds every entry of the placement, so "
                                       "excluding it leaves no quantizer",
                                       err)) != QP_OK)
                goto done;
            continue;
        }
        size_t bad = probe_apply(&c, &c.wk[0], tg, o->probe == QP_SENS_EXCLUDE_ONE);
        if (bad) {
            snprintf(msg, sizeof msg, "%s", c.entry_err[bad - 1]);
            if ((st = set_target_error(tg, QP_SENS_FAILED, msg, err)) != QP_OK) goto done;
        }
    }
    size_t n_live = 0;
    for (size_t t = 0; t < nt; t++)
        n_live += r->targets[t].state == QP_SENS_SCORED;
    struct probe_pool pool = {.c = &c, .r = r, .sums = sums, .n_targets = nt};
    if ((st = pool_init(&pool, n_live, err)) != QP_OK) goto pool_done;
    r->n_probe_workers = c.n_wk;
    pool.n_batches = qp_provider_n_batches(prov) ? qp_provider_n_batches(prov) : 1;
    pool.total = pool.n_batches * (uint64_t)n_live;
    const struct qp_array *batch = NULL;
    int end = 0;
    for (;;) {
        if ((st = qp_provider_next(prov, &batch, &end, err)) != QP_OK) goto pool_done;
        if (end) break;
        double t0 = qp_clock_seconds(), c0 = qp_clock_cpu_seconds();
        if ((st = ctx_reference(&c, batch, o->incremental, err)) != QP_OK) goto pool_done;
        r->reference_seconds += qp_clock_seconds() - t0;
        r->reference_cpu_seconds += qp_clock_cpu_seconds() - c0;
        r->nodes_full_pass = qp_session_nodes_executed(c.wk[0].s);
        r->n_batches++;
        r->n_samples += c.rows;
        for (size_t i = 0; i < c.n_out; i++)
            counts[i] += c.out_float[i] ? (double)c.samples[i] : 0;
        t0 = qp_clock_seconds();
        c0 = qp_clock_cpu_seconds();
        if ((st = pool_run_batch(&pool, err)) != QP_OK) goto pool_done;
        r->probe_seconds += qp_clock_seconds() - t0;
        r->probe_cpu_seconds += qp_clock_cpu_seconds() - c0;
    }
pool_done:
    pool_free(&pool);
    if (st != QP_OK) goto done;
    r->n_float_outputs = 0;
    for (size_t i = 0; i < c.n_out; i++)
        r->n_float_outputs += c.out_float[i] != 0;
    for (size_t t = 0; t < nt; t++) {
        struct qp_sens_target *tg = &r->targets[t];
        if (tg->state != QP_SENS_SCORED) continue;
        double s = 0;
        for (size_t i = 0; i < c.n_out; i++)
            if (c.out_float[i] && counts[i] > 0) s += sums[t * (c.n_out + 1) + i] / counts[i];
        if (!isfinite(s)) {
            if ((st = set_target_error(tg, QP_SENS_FAILED,
                                       "non-finite score (NaN or Inf in the outputs)", err)) !=
                QP_OK)
                goto done;
            continue;
        }
        tg->score = s;
    }
    st = QP_OK;
done:
    ctx_free(&c);
    free(sums);
    free(counts);
    if (st == QP_OK)
        *out = r;
    else
        qp_sens_result_free(r);
    return st;
}

/* ---- accuracy budget ------------------------------------------------------------------------- */

uint64_t qp_sens_top1_agree(const float *ref, const float *q, size_t n, size_t last) {
    uint64_t agree = 0;
    for (size_t r = 0; r + last <= n; r += last) {
        size_t a = 0, b = 0;
        for (size_t j = 1; j < last; j++) {
            if (ref[r + j] > ref[r + a]) a = j;
            if (q[r + j] > q[r + b]) b = j;
        }
        agree += a == b;
    }
    return agree;
}

/* Per-output sums of whole-model measurements: the metric, the samples, top-1 agreement. */
struct step_acc {
    double *sums, *cnt;
    uint64_t *agree, *rows;
};

static void step_acc_free(struct step_acc *a) {
    free(a->sums);
    free(a->cnt);
    free(a->agree);
    free(a->rows);
}

static enum qp_status step_acc_init(struct step_acc *a, size_t n_out, struct qp_error *err) {
    size_t no = n_out + 1;
    a->sums = calloc(no, sizeof *a->sums);
    a->cnt = calloc(no, sizeof *a->cnt);
    a->agree = calloc(no, sizeof *a->agree);
    a->rows = calloc(no, sizeof *a->rows);
    if (a->sums && a->cnt && a->agree && a->rows) return QP_OK;
    step_acc_free(a);
    return nomem(err);
}

/* Worker 0's run of the current batch (against c->ref) added to the sums. */
static enum qp_status step_acc_add(struct sens_ctx *c, struct step_acc *a, struct qp_error *err) {
    struct sens_worker *w = &c->wk[0];
    for (size_t i = 0; i < c->n_out; i++) {
        if (!c->out_float[i]) continue;
        a->sums[i] += w->acc[i];
        a->cnt[i] += (double)c->samples[i];
        size_t last = c->last_dim[i];
        if (!last) continue;
        struct qp_array v;
        enum qp_status st = qp_session_output(w->s, i, &v, err);
        if (st != QP_OK) return st;
        a->agree[i] += qp_sens_top1_agree(c->ref[i], v.data, c->ref_n[i], last);
        a->rows[i] += c->ref_n[i] / last;
    }
    return QP_OK;
}

static void step_acc_finish(const struct step_acc *a, size_t n_out,
                            struct qp_sens_budget_step *out) {
    out->drift = 0;
    out->top1 = -1;
    for (size_t i = 0; i < n_out; i++) {
        if (a->cnt[i] > 0) out->drift += a->sums[i] / a->cnt[i];
        double t = a->rows[i] ? (double)a->agree[i] / (double)a->rows[i] : -1;
        if (a->rows[i] && (out->top1 < 0 || t < out->top1)) out->top1 = t;
    }
}

/* Fails naming the first entry that is not masked out and cannot be overlaid. */
static enum qp_status check_unmasked(const struct sens_ctx *c, const unsigned char *mask,
                                     struct qp_error *err) {
    for (size_t e = 0; e < c->n_entries; e++)
        if (!mask[e] && c->entry_err[e])
            return qp_error_set(err, QP_ERR_BAD_INPUT, "sensitivity budget: %s", c->entry_err[e]);
    return QP_OK;
}

/* The whole model with the full placement minus the masked entries, over every batch: the
 * metric summed over outputs (mean per sample) and the least top-1 agreement of the outputs
 * that hold class scores (-1 when none does). */
static enum qp_status measure_budget(struct sens_ctx *c, const unsigned char *mask,
                                     struct qp_sens_budget_step *out, struct qp_error *err) {
    enum qp_status st = check_unmasked(c, mask, err);
    if (st != QP_OK) return st;
    struct step_acc a;
    if ((st = step_acc_init(&a, c->n_out, err)) != QP_OK) return st;
    st = qp_provider_reset(c->prov, err);
    const struct qp_array *batch = NULL;
    int end = 0;
    while (st == QP_OK) {
        if ((st = qp_provider_next(c->prov, &batch, &end, err)) != QP_OK || end) break;
        if ((st = ctx_reference(c, batch, 0, err)) != QP_OK) break;
        struct sens_worker *w = &c->wk[0];
        for (size_t e = 0; e < c->n_entries; e++)
            w->apply[e] = !mask[e];
        if ((st = ctx_probe(c, w, 0, err)) != QP_OK) break;
        st = step_acc_add(c, &a, err);
    }
    if (st == QP_OK) step_acc_finish(&a, c->n_out, out);
    step_acc_free(&a);
    return st;
}

static int budget_met(const struct qp_sens_budget_goal *g, const struct qp_sens_budget_step *s) {
    return (g->max_drift < 0 || s->drift <= g->max_drift) &&
           (g->min_top1 <= 0 || s->top1 >= g->min_top1);
}

enum qp_status qp_sens_placement_minus(const struct qp_placement *pl, const unsigned char *mask,
                                       struct qp_placement **out, struct qp_error *err) {
    size_t n_entries = n_entries_of(pl);
    struct qp_placement *p = NULL;
    enum qp_status st = qp_placement_copy(pl, &p, err);
    if (st != QP_OK) return st;
    for (size_t e = 0; e < n_entries; e++) {
        if (!mask[e]) continue;
        if (e < pl->n_edges)
            qp_placement_remove(p, pl->edges[e].node, pl->edges[e].input);
        else
            qp_placement_remove(p, pl->weights[e - pl->n_edges].node,
                                pl->weights[e - pl->n_edges].input);
    }
    *out = p;
    return QP_OK;
}

/* mask = the entries of the first k groups' targets. */
static void mask_groups(const struct qp_sens_result *r, const struct qp_sens_groups *groups,
                        size_t k, unsigned char *mask, size_t n_entries) {
    memset(mask, 0, n_entries + 1);
    for (size_t g = 0; g < k; g++)
        for (size_t m = 0; m < groups->sizes[g]; m++) {
            size_t ti = groups->members[g][m];
            if (ti >= r->n_targets) continue;
            const struct qp_sens_target *t = &r->targets[ti];
            for (size_t q = 0; q < t->n_edges + t->n_weights; q++)
                mask[t->entries[q]] = 1;
        }
}

/* The model with the first k groups excluded, into steps[k]; *met_out whether it meets goal. */
static enum qp_status budget_at(struct sens_ctx *c, const struct qp_sens_result *r,
                                const struct qp_sens_groups *groups,
                                const struct qp_sens_budget_goal *goal, size_t k,
                                unsigned char *mask, struct qp_sens_budget_step *steps,
                                int *met_out, struct qp_error *err) {
    mask_groups(r, groups, k, mask, c->n_entries);
    struct qp_sens_budget_step s = {0};
    enum qp_status st = measure_budget(c, mask, &s, err);
    if (st != QP_OK) return st;
    if (goal->min_top1 > 0 && s.top1 < 0)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "min_top1_agreement: no float graph output holds class scores "
                            "(rank >= 2, last dimension >= 2); use max_output_drift instead");
    s.measured = 1;
    steps[k] = s;
    *met_out = budget_met(goal, &s);
    return QP_OK;
}

/* Galloping search over k, the groups excluded: 0, 1, 2, 4, ... until the goal holds (or all
 * groups are out), then bisection between the last k that failed and the first that held. */
static enum qp_status budget_search(struct sens_ctx *c, const struct qp_sens_result *r,
                                    const struct qp_sens_groups *groups,
                                    const struct qp_sens_budget_goal *goal, unsigned char *mask,
                                    struct qp_sens_budget_step *steps, size_t *k_out, int *met_out,
                                    struct qp_error *err) {
    size_t n = groups->n, fail = 0, k = 0;
    int met = 0;
    enum qp_status st = budget_at(c, r, groups, goal, 0, mask, steps, &met, err);
    while (st == QP_OK && !met && k < n) {
        fail = k;
        k = k ? (2 * k < n ? 2 * k : n) : 1;
        st = budget_at(c, r, groups, goal, k, mask, steps, &met, err);
    }
    if (st != QP_OK) return st;
    if (!met) {
        *k_out = n;
        *met_out = 0;
        return QP_OK;
    }
    while (k > 0 && k - fail > 1) { /* fail fails (or is 0 and untested below k), k holds */
        size_t mid = fail + (k - fail) / 2;
        int ok = 0;
        if ((st = budget_at(c, r, groups, goal, mid, mask, steps, &ok, err)) != QP_OK) return st;
        if (ok)
            k = mid;
        else
            fail = mid;
    }
    *k_out = k;
    *met_out = 1;
    return QP_OK;
}

enum qp_status qp_sens_budget(const struct qp_model *model, const struct qp_placement *pl,
                              struct qp_provider *prov, const struct qp_ranges *ranges,
                              const struct qp_sens_options *o, const struct qp_sens_result *r,
                              const struct qp_sens_groups *groups,
                              const struct qp_sens_budget_goal *goal, size_t *n_groups_out,
                              struct qp_sens_budget_step *steps_out, int *met_out,
                              struct qp_placement **placement_out, struct qp_error *err) {
    struct sens_ctx c;
    unsigned char *mask = NULL;
    struct qp_sens_budget_step *steps = steps_out;
    enum qp_status st = ctx_init(&c, model, pl, prov, ranges, o, err);
    if (st != QP_OK) goto done;
    if (!steps_out && !(steps = calloc(groups->n + 1, sizeof *steps))) {
        st = nomem(err);
        goto done;
    }
    for (size_t g = 0; g <= groups->n; g++)
        steps[g].measured = 0;
    if (!(mask = calloc(c.n_entries + 1, 1))) {
        st = nomem(err);
        goto done;
    }
    size_t k = 0;
    int met = 0;
    if ((st = budget_search(&c, r, groups, goal, mask, steps, &k, &met, err)) != QP_OK) goto done;
    mask_groups(r, groups, k, mask, c.n_entries);
    if (placement_out && (st = qp_sens_placement_minus(pl, mask, placement_out, err)) != QP_OK)
        goto done;
    *n_groups_out = k;
    *met_out = met;
    st = QP_OK;
done:
    ctx_free(&c);
    free(mask);
    if (steps != steps_out) free(steps);
    return st;
}

/* ---- whole-model drift of sub-placements (qp_sens_eval) ------------------------------------- */

/* One batch's float reference, as ctx_reference leaves it in the context. */
struct eval_batch {
    float **ref;
    size_t *ref_n, *samples, *last_dim;
    int *out_float;
    uint64_t rows;
};

struct qp_sens_eval {
    struct sens_ctx c;
    struct qp_sens_options o;
    size_t n_batches;
    struct eval_batch *b;
    uint64_t n_samples;
    int has_ref; /* incremental, one batch: the session holds a measurement's run as reference */
};

static void eval_batch_free(struct eval_batch *b, size_t n_out) {
    for (size_t i = 0; b->ref && i < n_out; i++)
        free(b->ref[i]);
    free(b->ref);
    free(b->ref_n);
    free(b->samples);
    free(b->last_dim);
    free(b->out_float);
}

void qp_sens_eval_free(struct qp_sens_eval *ev) {
    if (!ev) return;
    for (size_t k = 0; k < ev->n_batches; k++)
        eval_batch_free(&ev->b[k], ev->c.n_out);
    free(ev->b);
    ctx_free(&ev->c);
    free(ev);
}

uint64_t qp_sens_eval_n_samples(const struct qp_sens_eval *ev) {
    return ev ? ev->n_samples : 0;
}

uint64_t qp_sens_eval_nodes_executed(const struct qp_sens_eval *ev) {
    return ev && ev->c.wk ? (uint64_t)ev->c.wk[0].nodes : 0;
}

/* The context's current reference (after ctx_reference) copied into *b. */
static enum qp_status eval_keep(const struct sens_ctx *c, struct eval_batch *b,
                                struct qp_error *err) {
    size_t no = c->n_out + 1;
    b->ref = calloc(no, sizeof *b->ref);
    b->ref_n = calloc(no, sizeof *b->ref_n);
    b->samples = calloc(no, sizeof *b->samples);
    b->last_dim = calloc(no, sizeof *b->last_dim);
    b->out_float = calloc(no, sizeof *b->out_float);
    if (!b->ref || !b->ref_n || !b->samples || !b->last_dim || !b->out_float) return nomem(err);
    memcpy(b->ref_n, c->ref_n, c->n_out * sizeof *b->ref_n);
    memcpy(b->samples, c->samples, c->n_out * sizeof *b->samples);
    memcpy(b->last_dim, c->last_dim, c->n_out * sizeof *b->last_dim);
    memcpy(b->out_float, c->out_float, c->n_out * sizeof *b->out_float);
    b->rows = c->rows;
    for (size_t i = 0; i < c->n_out; i++) {
        if (!c->out_float[i]) continue;
        if (!(b->ref[i] = malloc((c->ref_n[i] ? c->ref_n[i] : 1) * sizeof(float))))
            return nomem(err);
        memcpy(b->ref[i], c->ref[i], c->ref_n[i] * sizeof(float));
    }
    return QP_OK;
}

enum qp_status qp_sens_eval_create(const struct qp_model *model, const struct qp_placement *pl,
                                   struct qp_provider *prov, const struct qp_ranges *ranges,
                                   const struct qp_sens_options *o, struct qp_sens_eval **out,
                                   struct qp_error *err) {
    *out = NULL;
    struct qp_sens_eval *ev = calloc(1, sizeof *ev);
    if (!ev) return nomem(err);
    ev->o = *o;
    ev->o.progress = NULL;
    enum qp_status st = ctx_init(&ev->c, model, pl, prov, ranges, &ev->o, err);
    const struct qp_array *batch = NULL;
    int end = 0;
    size_t cap = 0;
    while (st == QP_OK) {
        if ((st = qp_provider_next(prov, &batch, &end, err)) != QP_OK || end) break;
        if (ev->n_batches == cap) {
            struct eval_batch *nb = qp_realloc_n(ev->b, cap = cap ? 2 * cap : 4, sizeof *nb);
            if (!nb) {
                st = nomem(err);
                break;
            }
            ev->b = nb;
        }
        struct eval_batch *b = &ev->b[ev->n_batches];
        memset(b, 0, sizeof *b);
        ev->n_batches++;
        if ((st = ctx_reference(&ev->c, batch, 0, err)) != QP_OK) break;
        st = eval_keep(&ev->c, b, err);
        ev->n_samples += b->rows;
    }
    if (st != QP_OK) {
        qp_sens_eval_free(ev);
        return st;
    }
    *out = ev;
    return QP_OK;
}

/* Points the context's reference fields at batch b's (the context's own are saved in *save). */
static void eval_swap(struct sens_ctx *c, struct eval_batch *b) {
    float **r = c->ref;
    size_t *rn = c->ref_n, *sm = c->samples, *ld = c->last_dim;
    int *of = c->out_float;
    c->ref = b->ref;
    c->ref_n = b->ref_n;
    c->samples = b->samples;
    c->last_dim = b->last_dim;
    c->out_float = b->out_float;
    b->ref = r;
    b->ref_n = rn;
    b->samples = sm;
    b->last_dim = ld;
    b->out_float = of;
    uint64_t rows = c->rows;
    c->rows = b->rows;
    b->rows = rows;
}

void qp_sens_eval_rebase(struct qp_sens_eval *ev) {
    if (ev) ev->has_ref = 0;
}

enum qp_status qp_sens_eval_measure(struct qp_sens_eval *ev, const unsigned char *quantized,
                                    struct qp_sens_budget_step *out, struct qp_error *err) {
    struct sens_ctx *c = &ev->c;
    struct sens_worker *w = &c->wk[0];
    for (size_t e = 0; e < c->n_entries; e++)
        if (quantized[e] && c->entry_err[e])
            return qp_error_set(err, QP_ERR_BAD_INPUT, "drift: %s", c->entry_err[e]);
    struct step_acc a;
    enum qp_status st = step_acc_init(&a, c->n_out, err);
    if (st != QP_OK) return st;
    /* one batch: its run can stay as the reference a partial run starts from */
    int keep = ev->o.incremental && ev->n_batches == 1, partial = keep && ev->has_ref;
    if (!partial && (st = qp_provider_reset(c->prov, err)) == QP_OK) {
        qp_session_set_threads(w->s, ev->o.n_threads);
        qp_session_set_cache(w->s, keep ? ev->o.cache_bytes : 0);
    }
    const struct qp_array *batch = NULL;
    int end = 0;
    for (size_t k = 0; st == QP_OK && k < ev->n_batches && !partial; k++) {
        if ((st = qp_provider_next(c->prov, &batch, &end, err)) != QP_OK) break;
        if (end) {
            st = qp_error_set(err, QP_ERR_INTERNAL,
                              "drift: the data has fewer batches than "
                              "at the start");
            break;
        }
        for (size_t i = 0; i < c->n_in; i++)
            c->in[i] = batch[c->in_map[i]];
        memcpy(w->apply, quantized, c->n_entries);
        eval_swap(c, &ev->b[k]); /* the kept reference is the context's for the run */
        if ((st = ctx_probe(c, w, 0, err)) == QP_OK) st = step_acc_add(c, &a, err);
        eval_swap(c, &ev->b[k]);
    }
    if (partial) { /* the inputs are the reference's: only what the changed entries reach */
        memcpy(w->apply, quantized, c->n_entries);
        eval_swap(c, &ev->b[0]);
        if ((st = ctx_probe(c, w, 1, err)) == QP_OK) st = step_acc_add(c, &a, err);
        eval_swap(c, &ev->b[0]);
    }
    ev->has_ref = keep && st == QP_OK;
    if (st == QP_OK) {
        step_acc_finish(&a, c->n_out, out);
        out->measured = 1;
    }
    step_acc_free(&a);
    return st;
}

/* ---- calibration ----------------------------------------------------------------------------- */

/* The ranges of `all` whose tensors the collector's session has as float32 (what an overlay
 * takes), into a new table with the same meta. */
static enum qp_status keep_f32(const struct qp_ranges *all, const struct qp_session *s,
                               struct qp_ranges **out, struct qp_error *err) {
    struct qp_ranges *r = qp_ranges_create();
    if (!r) return nomem(err);
    enum qp_status st = qp_ranges_set_meta(r, qp_ranges_get_meta(all), err);
    for (size_t i = 0; st == QP_OK && i < qp_ranges_count(all); i++) {
        const struct qp_range *rg = qp_ranges_at(all, i);
        enum qp_dtype dt = QP_DTYPE_UNDEFINED;
        int computed = 0;
        struct qp_error ierr = {0};
        if (qp_session_value_info(s, rg->tensor, &dt, &computed, &ierr) == QP_OK && computed &&
            dt == QP_DTYPE_FLOAT)
            st = qp_ranges_set(r, rg, err);
    }
    if (st != QP_OK) {
        qp_ranges_free(r);
        return st;
    }
    *out = r;
    return QP_OK;
}

enum qp_status qp_sens_calibrate(const struct qp_model *model, const struct qp_placement *pl,
                                 struct qp_provider *prov, enum qp_calib_method method,
                                 double percentile, enum qp_dtype qtype, int n_threads,
                                 struct qp_ranges **out, uint64_t *n_samples_out,
                                 struct qp_error *err) {
    struct qp_placement *cal = NULL;
    struct qp_collector *col = NULL;
    struct qp_ranges *all = NULL;
    const struct qp_array *batch = NULL;
    int end = 0;
    enum qp_status st = qp_provider_reset(prov, err);
    if (st != QP_OK) goto done;
    if ((st = qp_provider_next(prov, &batch, &end, err)) != QP_OK) goto done;
    if (end) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "sensitivity: the calibration data has no "
                          "batches");
        goto done;
    }
    size_t np = qp_provider_n_inputs(prov);
    if (np > SENS_MAX_INPUTS) {
        st = qp_error_set(err, QP_ERR_UNSUPPORTED, "sensitivity: more than %d model inputs",
                          SENS_MAX_INPUTS);
        goto done;
    }
    struct qp_shape shapes[SENS_MAX_INPUTS];
    qp_provider_shapes(prov, batch, shapes);
    /* The activation edges only; tensors that turn out not to be float get no range (the
     * collector skips them, keep_f32 below drops float16/double ones). */
    if ((st = qp_placement_copy(pl, &cal, err)) != QP_OK) goto done;
    while (cal->n_weights > 0)
        qp_placement_remove(cal, cal->weights[0].node, cal->weights[0].input);
    struct qp_collect_options co;
    qp_collect_options_default(&co, method);
    if (percentile > 0) co.calib.percentile = percentile;
    co.calib.qtype = qtype;
    co.placement = cal;
    co.placement_float_only = 1;
    co.n_threads = n_threads;
    if ((st = qp_collector_create(model, &co, np, shapes, &col, err)) != QP_OK) goto done;
    const struct qp_session *cs = qp_collector_session(col);
    size_t ns = qp_session_n_inputs(cs), map[SENS_MAX_INPUTS];
    if ((st = qp_provider_map_inputs(prov, cs, "sensitivity", map, err)) != QP_OK) goto done;
    if ((st = qp_provider_reset(prov, err)) != QP_OK) goto done;
    uint64_t n_samples = 0;
    struct qp_array in[SENS_MAX_INPUTS];
    for (;;) {
        if ((st = qp_provider_next(prov, &batch, &end, err)) != QP_OK) goto done;
        if (end) break;
        for (size_t i = 0; i < ns; i++)
            in[i] = batch[map[i]];
        if ((st = qp_collector_run(col, ns, in, err)) != QP_OK) goto done;
        n_samples += ns && in[0].rank > 0 && in[0].dims[0] > 0 ? (uint64_t)in[0].dims[0] : 1;
    }
    if ((st = qp_collector_finish(col, &all, NULL, err)) != QP_OK) goto done;
    if ((st = keep_f32(all, cs, out, err)) != QP_OK) goto done;
    if (n_samples_out) *n_samples_out = n_samples;
done:
    qp_ranges_free(all);
    qp_collector_free(col);
    qp_placement_free(cal);
    return st;
}
