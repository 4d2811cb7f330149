/* Targets, probes and scoring through engine overlays; the accuracy budget (sensitivity.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calib/collect.h"
#include "quant/qparams.h"
#include "qplace/session.h"
#include "sensitivity/sensitivity.h"

#define SENS_MAX_INPUTS 64

void qp_sens_options_default(struct qp_sens_options *o) {
    memset(o, 0, sizeof *o);
    o->granularity = QP_SENS_OP_TYPE;
    o->metric = QP_SENS_KL_DIV;
    o->probe = QP_SENS_QUANTIZE_ONE;
    o->qtype = QP_DTYPE_INT8;
    o->incremental = 1;
    o->cache_bytes = (size_t)1 << 30;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void target_release(struct qp_sens_target *t) {
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
        target_release(&r->targets[i]);
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

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Appends entry `e` and node `node` (if new) to target t. */
static enum qp_status target_add(struct qp_sens_target *t, const struct qp_placement *pl,
                                 const struct qp_graph *g, size_t e, struct qp_error *err) {
    size_t *ne = realloc(t->entries, (t->n_edges + t->n_weights + 1) * sizeof *ne);
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
    char **nn = realloc(t->nodes, (t->n_nodes + 1) * sizeof *nn);
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
        int *tidx = malloc((g->n_nodes + 1) * sizeof *tidx);
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
    qsort(ops, nops, sizeof *ops, cmp_str);
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

struct sens_ctx {
    const struct qp_graph *g;
    const struct qp_placement *pl;
    const struct qp_sens_options *o;
    struct qp_provider *prov;
    struct qp_session *s;
    size_t n_in;
    size_t in_map[SENS_MAX_INPUTS]; /* provider index of session input i */
    struct qp_array in[SENS_MAX_INPUTS];
    size_t n_entries;
    struct qp_overlay *ov;  /* one per entry */
    float **scales;         /* per entry */
    char **entry_err;       /* per entry: why it cannot be overlaid, or NULL */
    struct qp_overlay *buf; /* a probe's overlays */
    unsigned char *apply;   /* per entry: quantized by the current probe */
    /* Every entry that can be overlaid is set on the session once, and probes toggle bypass
     * flags (the plan is kept). 0 when planning with all of them failed: then each probe sets
     * only its own overlays, so only the probes holding the bad edge fail. */
    int all_mode;
    size_t n_all;
    size_t *all_entry; /* entry of c->buf[k] in all_mode */
    size_t n_out;
    int *out_float;  /* 1: a float output that is scored */
    float **ref;     /* reference values of the current batch, per output */
    size_t *ref_n;   /* their element counts */
    size_t *samples; /* samples in the current batch, per output */
    double *acc;     /* one probe's metric sums, per output */
    uint64_t rows;   /* samples (first input's rows) of the current batch */
};

static void ctx_free(struct sens_ctx *c) {
    qp_session_free(c->s);
    for (size_t e = 0; e < c->n_entries; e++) {
        if (c->scales) free(c->scales[e]);
        if (c->entry_err) free(c->entry_err[e]);
    }
    free(c->ov);
    free(c->scales);
    free(c->entry_err);
    free(c->buf);
    free(c->apply);
    free(c->all_entry);
    for (size_t i = 0; c->ref && i < c->n_out; i++)
        free(c->ref[i]);
    free(c->ref);
    free(c->ref_n);
    free(c->samples);
    free(c->acc);
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
 * weight scales per channel (or per tensor) from the weight's absmax — as the writer does. */
static enum qp_status build_overlays(struct sens_ctx *c, const struct qp_ranges *ranges,
                                     struct qp_error *err) {
    const struct qp_placement *pl = c->pl;
    size_t ne = c->n_entries;
    c->ov = calloc(ne + 1, sizeof *c->ov);
    c->scales = calloc(ne + 1, sizeof *c->scales);
    c->entry_err = calloc(ne + 1, sizeof *c->entry_err);
    c->buf = calloc(ne + 1, sizeof *c->buf);
    c->apply = calloc(ne + 1, 1);
    c->all_entry = calloc(ne + 1, sizeof *c->all_entry);
    if (!c->ov || !c->scales || !c->entry_err || !c->buf || !c->apply || !c->all_entry)
        return nomem(err);
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
        int64_t outer = 1, len = 1, inner = 1;
        for (int d = 0; d < t->rank; d++) {
            if (w->axis < 0 || d > w->axis)
                inner *= t->dims[d];
            else if (d < w->axis)
                outer *= t->dims[d];
            else
                len = t->dims[d];
        }
        if (len <= 0 || (uint64_t)len > t->numel + 1) {
            if (entry_error(c, e, "weight '%s' (-> node '%s') has an empty quantization axis",
                            w->tensor, w->node) != QP_OK)
                return nomem(err);
            continue;
        }
        float *amax = calloc((size_t)len, sizeof *amax);
        if (!amax) return nomem(err);
        c->scales[e] = amax;
        const unsigned char *bytes = t->data;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t a = 0; a < len; a++)
                for (int64_t i = 0; i < inner; i++) {
                    float x;
                    memcpy(&x, bytes + (size_t)((o * len + a) * inner + i) * 4, 4);
                    float ax = fabsf(x);
                    if (ax > amax[a] && isfinite(ax)) amax[a] = ax;
                }
        int bad = 0;
        for (int64_t a = 0; a < len && !bad; a++)
            bad = qp_qparams_from_range(qt, -amax[a], amax[a], 1, &amax[a], &zp, &tmp) != QP_OK;
        if (bad) {
            if (entry_error(c, e, "weight '%s': %s", w->tensor, tmp.msg) != QP_OK)
                return nomem(err);
            continue;
        }
        ov->axis = w->axis < 0 ? 0 : w->axis;
        ov->n_params = w->axis < 0 ? 1 : (size_t)len;
        ov->scale = amax;
    }
    return QP_OK;
}

static enum qp_status ctx_init(struct sens_ctx *c, const struct qp_model *model,
                               const struct qp_placement *pl, struct qp_provider *prov,
                               const struct qp_ranges *ranges, const struct qp_sens_options *o,
                               struct qp_error *err) {
    memset(c, 0, sizeof *c);
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
    struct qp_shape shapes[SENS_MAX_INPUTS];
    qp_provider_shapes(prov, batch, shapes);
    /* Fused like any session: a fused Conv chain keeps one preparation per combination of its
     * weight overlays' bypass flags (made on first use), so probes toggling them keep the plan.
     * lazy_plan: planned once, below, with its overlays, not also at creation. */
    struct qp_session_options so = {.n_threads = o->n_threads, .lazy_plan = 1};
    if ((st = qp_session_create(model, &so, np, shapes, &c->s, err)) != QP_OK) return st;
    c->n_in = qp_session_n_inputs(c->s);
    if ((st = qp_provider_map_inputs(prov, c->s, "sensitivity", c->in_map, err)) != QP_OK)
        return st;
    /* Every entry that can be overlaid, bypassed, planned once for the first batch's shapes. */
    c->n_all = 0;
    for (size_t e = 0; e < c->n_entries; e++) {
        if (c->entry_err[e]) continue;
        c->buf[c->n_all] = c->ov[e];
        c->buf[c->n_all].bypass = 1;
        c->all_entry[c->n_all++] = e;
    }
    struct qp_error perr = {0};
    c->all_mode = qp_session_set_overlays(c->s, c->n_all, c->buf, &perr) == QP_OK &&
                  qp_session_plan(c->s, np, shapes, &perr) == QP_OK;
    if (!c->all_mode) {
        if (perr.status == QP_ERR_NOMEM) return qp_error_set(err, QP_ERR_NOMEM, "%s", perr.msg);
        if ((st = qp_session_set_overlays(c->s, 0, NULL, err)) != QP_OK) return st;
    }
    c->n_out = qp_session_n_outputs(c->s);
    size_t no = c->n_out + 1;
    c->out_float = calloc(no, sizeof *c->out_float);
    c->ref = calloc(no, sizeof *c->ref);
    c->ref_n = calloc(no, sizeof *c->ref_n);
    c->samples = calloc(no, sizeof *c->samples);
    c->acc = calloc(no, sizeof *c->acc);
    if (!c->out_float || !c->ref || !c->ref_n || !c->samples || !c->acc) return nomem(err);
    return qp_provider_reset(prov, err);
}

/* Puts the entries marked in c->apply on the session: bypass flags over every entry in
 * all_mode, else exactly the applied overlays. */
static enum qp_status ctx_set_overlays(struct sens_ctx *c, struct qp_error *err) {
    if (c->all_mode) {
        for (size_t k = 0; k < c->n_all; k++)
            c->buf[k].bypass = !c->apply[c->all_entry[k]];
        return qp_session_set_overlays(c->s, c->n_all, c->buf, err);
    }
    size_t n = 0;
    for (size_t e = 0; e < c->n_entries; e++)
        if (c->apply[e]) c->buf[n++] = c->ov[e];
    return qp_session_set_overlays(c->s, n, c->buf, err);
}

/* Full float run of `batch` (the reference; cached by the engine when `cache`), outputs copied. */
static enum qp_status ctx_reference(struct sens_ctx *c, const struct qp_array *batch, int cache,
                                    struct qp_error *err) {
    for (size_t i = 0; i < c->n_in; i++)
        c->in[i] = batch[c->in_map[i]];
    c->rows = c->n_in && c->in[0].rank > 0 && c->in[0].dims[0] > 0 ? (uint64_t)c->in[0].dims[0] : 1;
    memset(c->apply, 0, c->n_entries);
    enum qp_status st = ctx_set_overlays(c, err);
    if (st != QP_OK) return st;
    qp_session_set_cache(c->s, cache ? c->o->cache_bytes : 0);
    if ((st = qp_session_run(c->s, c->n_in, c->in, err)) != QP_OK) return st;
    size_t n_float = 0;
    for (size_t i = 0; i < c->n_out; i++) {
        struct qp_array v;
        if ((st = qp_session_output(c->s, i, &v, err)) != QP_OK) return st;
        c->out_float[i] = v.dtype == QP_DTYPE_FLOAT;
        if (!c->out_float[i]) continue;
        n_float++;
        size_t n = v.nbytes / 4;
        if (n != c->ref_n[i] || !c->ref[i]) {
            float *p = realloc(c->ref[i], (n ? n : 1) * sizeof *p);
            if (!p) return nomem(err);
            c->ref[i] = p;
            c->ref_n[i] = n;
        }
        memcpy(c->ref[i], v.data, n * 4);
        c->samples[i] = v.rank >= 1 && (uint64_t)v.dims[0] == c->rows && c->rows > 0 && n > 0
                            ? (size_t)c->rows
                            : 1;
    }
    if (n_float == 0)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "sensitivity: the model has no float32 graph output to score");
    return QP_OK;
}

/* Runs with the entries of c->apply quantized (partial re-execution when `partial`) and fills
 * c->acc with the metric summed over the batch's samples, per output. */
static enum qp_status ctx_probe(struct sens_ctx *c, int partial, uint64_t *nodes,
                                struct qp_error *err) {
    enum qp_status st = ctx_set_overlays(c, err);
    if (st != QP_OK) return st;
    st = partial ? qp_session_run_partial(c->s, err) : qp_session_run(c->s, c->n_in, c->in, err);
    if (st != QP_OK) return st;
    if (nodes) *nodes += qp_session_nodes_executed(c->s);
    for (size_t i = 0; i < c->n_out; i++) {
        c->acc[i] = 0;
        if (!c->out_float[i]) continue;
        struct qp_array v;
        if ((st = qp_session_output(c->s, i, &v, err)) != QP_OK) return st;
        if (v.dtype != QP_DTYPE_FLOAT || v.nbytes / 4 != c->ref_n[i])
            return qp_error_set(err, QP_ERR_INTERNAL,
                                "sensitivity: output '%s' changed shape under quantization",
                                qp_session_output_name(c->s, i));
        size_t s = c->samples[i], f = c->ref_n[i] / s;
        const float *q = v.data;
        for (size_t k = 0; k < s; k++)
            c->acc[i] += qp_sens_metric_sample(c->o->metric, c->ref[i] + k * f, q + k * f, f);
    }
    return QP_OK;
}

/* Marks in c->apply the entries a probe quantizes: the target's (quantize_one) or all others
 * (exclude_one). On an applied entry that cannot be overlaid returns its index + 1 (the probe
 * fails), else 0. */
static size_t probe_apply(struct sens_ctx *c, const struct qp_sens_target *t, int exclude) {
    memset(c->apply, exclude ? 1 : 0, c->n_entries);
    for (size_t k = 0; k < t->n_edges + t->n_weights; k++)
        c->apply[t->entries[k]] = !exclude;
    for (size_t e = 0; e < c->n_entries; e++)
        if (c->apply[e] && c->entry_err[e]) return e + 1;
    return 0;
}

static enum qp_status set_target_error(struct qp_sens_target *t, enum qp_sens_state state,
                                       const char *msg, struct qp_error *err) {
    t->state = state;
    free(t->error);
    if (!(t->error = strdup(msg))) return nomem(err);
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
        size_t bad = probe_apply(&c, tg, o->probe == QP_SENS_EXCLUDE_ONE);
        if (bad) {
            snprintf(msg, sizeof msg, "%s", c.entry_err[bad - 1]);
            if ((st = set_target_error(tg, QP_SENS_FAILED, msg, err)) != QP_OK) goto done;
        }
    }
    size_t n_live = 0;
    for (size_t t = 0; t < nt; t++)
        n_live += r->targets[t].state == QP_SENS_SCORED;
    uint64_t total = qp_provider_n_batches(prov) * (uint64_t)n_live, done_steps = 0;
    const struct qp_array *batch = NULL;
    int end = 0;
    for (;;) {
        if ((st = qp_provider_next(prov, &batch, &end, err)) != QP_OK) goto done;
        if (end) break;
        double t0 = now_s(), c0 = cpu_s();
        if ((st = ctx_reference(&c, batch, o->incremental, err)) != QP_OK) goto done;
        r->reference_seconds += now_s() - t0;
        r->reference_cpu_seconds += cpu_s() - c0;
        r->nodes_full_pass = qp_session_nodes_executed(c.s);
        r->n_batches++;
        r->n_samples += c.rows;
        for (size_t i = 0; i < c.n_out; i++)
            counts[i] += c.out_float[i] ? (double)c.samples[i] : 0;
        t0 = now_s();
        c0 = cpu_s();
        for (size_t t = 0; t < nt; t++) {
            struct qp_sens_target *tg = &r->targets[t];
            if (tg->state != QP_SENS_SCORED) continue;
            probe_apply(&c, tg, o->probe == QP_SENS_EXCLUDE_ONE);
            struct qp_error perr = {0};
            enum qp_status ps = ctx_probe(&c, o->incremental, &r->nodes_executed, &perr);
            if (ps == QP_ERR_NOMEM) {
                st = qp_error_set(err, ps, "%s", perr.msg);
                goto done;
            }
            if (ps != QP_OK) {
                if ((st = set_target_error(tg, QP_SENS_FAILED, perr.msg, err)) != QP_OK) goto done;
            } else {
                for (size_t i = 0; i < c.n_out; i++)
                    sums[t * (c.n_out + 1) + i] += c.acc[i];
            }
            if (o->progress) o->progress(++done_steps, total, o->progress_user);
        }
        r->probe_seconds += now_s() - t0;
        r->probe_cpu_seconds += cpu_s() - c0;
    }
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

/* Drift of the full placement minus the masked entries, over every batch. */
static enum qp_status measure_drift(struct sens_ctx *c, const unsigned char *mask, double *out,
                                    struct qp_error *err) {
    for (size_t e = 0; e < c->n_entries; e++) {
        if (mask[e]) continue;
        if (c->entry_err[e])
            return qp_error_set(err, QP_ERR_BAD_INPUT, "sensitivity budget: %s", c->entry_err[e]);
    }
    double *sums = calloc(c->n_out + 1, sizeof *sums), *cnt = calloc(c->n_out + 1, sizeof *cnt);
    if (!sums || !cnt) {
        free(sums);
        free(cnt);
        return nomem(err);
    }
    enum qp_status st = qp_provider_reset(c->prov, err);
    const struct qp_array *batch = NULL;
    int end = 0;
    while (st == QP_OK) {
        if ((st = qp_provider_next(c->prov, &batch, &end, err)) != QP_OK || end) break;
        if ((st = ctx_reference(c, batch, 0, err)) != QP_OK) break;
        for (size_t e = 0; e < c->n_entries; e++)
            c->apply[e] = !mask[e];
        if ((st = ctx_probe(c, 0, NULL, err)) != QP_OK) break;
        for (size_t i = 0; i < c->n_out; i++)
            if (c->out_float[i]) {
                sums[i] += c->acc[i];
                cnt[i] += (double)c->samples[i];
            }
    }
    if (st == QP_OK) {
        double d = 0;
        for (size_t i = 0; i < c->n_out; i++)
            if (cnt[i] > 0) d += sums[i] / cnt[i];
        *out = d;
    }
    free(sums);
    free(cnt);
    return st;
}

enum qp_status qp_sens_budget(const struct qp_model *model, const struct qp_placement *pl,
                              struct qp_provider *prov, const struct qp_ranges *ranges,
                              const struct qp_sens_options *o, const struct qp_sens_result *r,
                              size_t n_groups, const size_t *const *groups,
                              const size_t *group_sizes, double max_drift, size_t *n_groups_out,
                              double *drift_out, int *met_out, struct qp_placement **placement_out,
                              struct qp_error *err) {
    struct sens_ctx c;
    unsigned char *mask = NULL;
    struct qp_placement *p = NULL;
    enum qp_status st = ctx_init(&c, model, pl, prov, ranges, o, err);
    if (st != QP_OK) goto done;
    if (!(mask = calloc(c.n_entries + 1, 1))) {
        st = nomem(err);
        goto done;
    }
    size_t k = 0;
    int met = 0;
    for (;; k++) {
        double d = 0;
        if ((st = measure_drift(&c, mask, &d, err)) != QP_OK) goto done;
        if (drift_out) drift_out[k] = d;
        if (d <= max_drift) {
            met = 1;
            break;
        }
        if (k == n_groups) break;
        for (size_t m = 0; m < group_sizes[k]; m++) {
            size_t ti = groups[k][m];
            if (ti >= r->n_targets) continue;
            const struct qp_sens_target *t = &r->targets[ti];
            for (size_t q = 0; q < t->n_edges + t->n_weights; q++)
                mask[t->entries[q]] = 1;
        }
    }
    if (placement_out) {
        if ((st = qp_placement_copy(pl, &p, err)) != QP_OK) goto done;
        for (size_t e = 0; e < c.n_entries; e++) {
            if (!mask[e]) continue;
            if (e < pl->n_edges)
                qp_placement_remove(p, pl->edges[e].node, pl->edges[e].input);
            else
                qp_placement_remove(p, pl->weights[e - pl->n_edges].node,
                                    pl->weights[e - pl->n_edges].input);
        }
        *placement_out = p;
        p = NULL;
    }
    *n_groups_out = k < n_groups ? k : n_groups;
    *met_out = met;
    st = QP_OK;
done:
    ctx_free(&c);
    free(mask);
    qp_placement_free(p);
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
                                 int n_threads, struct qp_ranges **out, uint64_t *n_samples_out,
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
