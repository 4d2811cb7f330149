/* The public sensitivity API (qplace/sensitivity.h): thin wrappers over src/sensitivity and the
 * ranking and exclusions of the driver (pipeline/sensitivity.h). */
#include "qplace/sensitivity.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "ir/ir.h"
#include "ir/opset_convert.h"
#include "pipeline/sensitivity.h"
#include "quant/policy_trt.h"
#include "quant/writer.h"
#include "core/sort.h"

_Static_assert((int)QP_SENSITIVITY_OP_TYPE == (int)QP_SENS_OP_TYPE &&
                   (int)QP_SENSITIVITY_NODE == (int)QP_SENS_NODE &&
                   (int)QP_SENSITIVITY_GRANULARITY_COUNT == (int)QP_SENS_GRANULARITY_COUNT,
               "granularity numbers");
_Static_assert((int)QP_SENSITIVITY_KL_DIV == (int)QP_SENS_KL_DIV &&
                   (int)QP_SENSITIVITY_MSE == (int)QP_SENS_MSE &&
                   (int)QP_SENSITIVITY_COS == (int)QP_SENS_COS &&
                   (int)QP_SENSITIVITY_METRIC_COUNT == (int)QP_SENS_METRIC_COUNT,
               "metric numbers");
_Static_assert((int)QP_SENSITIVITY_QUANTIZE_ONE == (int)QP_SENS_QUANTIZE_ONE &&
                   (int)QP_SENSITIVITY_EXCLUDE_ONE == (int)QP_SENS_EXCLUDE_ONE &&
                   (int)QP_SENSITIVITY_PROBE_COUNT == (int)QP_SENS_PROBE_COUNT,
               "probe numbers");
_Static_assert((int)QP_SENSITIVITY_SCORED == (int)QP_SENS_SCORED &&
                   (int)QP_SENSITIVITY_UNPROBED == (int)QP_SENS_UNPROBED &&
                   (int)QP_SENSITIVITY_FAILED == (int)QP_SENS_FAILED,
               "state numbers");
_Static_assert((int)QP_SENSITIVITY_BLOCK_SUM == (int)QP_BLOCK_SUM &&
                   (int)QP_SENSITIVITY_BLOCK_MAX == (int)QP_BLOCK_MAX &&
                   (int)QP_SENSITIVITY_BLOCK_MEAN == (int)QP_BLOCK_MEAN,
               "block_agg numbers");

struct qp_sensitivity {
    struct qp_model *model;
    struct qp_provider *data;
    const struct qp_ranges *ranges;
    struct qp_ranges *own_ranges; /* calibrated here */
    uint64_t n_calib_samples;
    struct qp_placement *pl; /* the copy, checked against the model */
    struct qp_sens_options so;
    struct qp_sens_result *r;
    struct qp_sens_ranking k;
    size_t *by_rank; /* every target index: the ranked scored ones, then the rest */
    size_t *rank;    /* target index -> rank (1-based; 0 when not scored) */
};

struct qp_sensitivity_exclusions {
    const struct qp_sensitivity *s;
    struct qp_sens_exclusions ex;
};

static enum qp_status nomem(struct qp_error *err) {
    return qp_error_set(err, QP_ERR_NOMEM, "sensitivity: out of memory");
}

void qp_sensitivity_free(struct qp_sensitivity *s) {
    if (!s) return;
    qp_ranges_free(s->own_ranges);
    qp_placement_free(s->pl);
    qp_sens_result_free(s->r);
    qp_sens_ranking_release(&s->k);
    free(s->by_rank);
    free(s->rank);
    free(s);
}

static enum qp_status check_options(const struct qp_sensitivity_options *o, struct qp_error *err) {
    if ((unsigned)o->granularity >= QP_SENSITIVITY_GRANULARITY_COUNT ||
        (unsigned)o->metric >= QP_SENSITIVITY_METRIC_COUNT ||
        (unsigned)o->probe >= QP_SENSITIVITY_PROBE_COUNT ||
        (unsigned)o->quantize_mode >= QP_QUANT_MODE_COUNT)
        return qp_error_set(err, QP_ERR_USAGE,
                            "sensitivity: bad granularity, metric, probe or quantize_mode");
    if (o->n_threads < 0 || o->probe_workers < 0 || (o->n_op_types_scope && !o->op_types_scope))
        return qp_error_set(err, QP_ERR_USAGE,
                            "sensitivity: negative threads or workers, or a NULL scope list");
    return QP_OK;
}

static void sens_options(const struct qp_sensitivity_options *o, struct qp_sens_options *so) {
    qp_sens_options_default(so);
    so->granularity = (enum qp_sens_granularity)o->granularity;
    so->metric = (enum qp_sens_metric)o->metric;
    so->probe = (enum qp_sens_probe)o->probe;
    so->qtype = o->quantize_mode == QP_QUANT_FP8 ? QP_DTYPE_FLOAT8E4M3FN : QP_DTYPE_INT8;
    so->weight_clip_mse = !o->absmax_weights;
    so->incremental = !o->no_incremental;
    if (o->cache_bytes) so->cache_bytes = o->cache_bytes;
    so->n_threads = o->n_threads;
    so->probe_workers = o->probe_workers;
    so->scope = o->op_types_scope;
    so->n_scope = o->n_op_types_scope;
    so->progress = o->progress;
    so->progress_user = o->progress_user;
}

/* The model as `qplace sensitivity` takes it (float, opset >= 19, sorted) and the placement. */
static enum qp_status prepare_model(struct qp_sensitivity *s, const struct qp_placement *pl,
                                    enum qp_quant_mode mode, struct qp_error *err) {
    struct qp_model *m = s->model;
    enum qp_status st;
    if (qp_model_has_qdq(m))
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "sensitivity: the model already holds QuantizeLinear/DequantizeLinear "
                            "nodes; give the float model");
    if (qp_model_opset(m, "") < 19 && (st = qp_model_convert_opset(m, 19, err)) != QP_OK)
        return qp_error_prefix(err, "sensitivity");
    if ((st = qp_graph_toposort(m->graph, err)) != QP_OK) return st;
    if (pl) {
        st = qp_placement_copy(pl, &s->pl, err);
    } else if (!(s->pl = qp_placement_create())) {
        st = nomem(err);
    } else {
        struct qp_policy_options pol = {.mode = mode};
        st = qp_policy_trt(m->graph, &pol, s->pl, NULL, err);
    }
    if (st == QP_OK && (st = qp_placement_validate(s->pl, m->graph, err)) != QP_OK)
        qp_error_prefix(err, "sensitivity: placement");
    return st;
}

/* by_rank and rank from the ranking. */
static enum qp_status index_ranks(struct qp_sensitivity *s, struct qp_error *err) {
    size_t n = s->r->n_targets, j = 0;
    s->by_rank = qp_malloc_n(n + 1, sizeof *s->by_rank);
    s->rank = calloc(n + 1, sizeof *s->rank);
    if (!s->by_rank || !s->rank) return nomem(err);
    for (size_t i = 0; i < s->k.n_scored; i++) {
        s->by_rank[j++] = s->k.order[i];
        s->rank[s->k.order[i]] = i + 1;
    }
    for (size_t i = 0; i < n; i++)
        if (s->r->targets[i].state != QP_SENS_SCORED) s->by_rank[j++] = i;
    return QP_OK;
}

enum qp_status qp_sensitivity_score(struct qp_model *model, const struct qp_placement *placement,
                                    struct qp_provider *data, const struct qp_ranges *ranges,
                                    const struct qp_sensitivity_options *o,
                                    struct qp_sensitivity **out, struct qp_error *err) {
    static const struct qp_sensitivity_options defaults = {0};
    if (!model || !data || !out)
        return qp_error_set(err, QP_ERR_USAGE, "sensitivity: NULL model, data or out");
    if (!o) o = &defaults;
    enum qp_status st = check_options(o, err);
    if (st != QP_OK) return st;
    struct qp_sensitivity *s = calloc(1, sizeof *s);
    if (!s) return nomem(err);
    s->model = model;
    s->data = data;
    s->ranges = ranges;
    sens_options(o, &s->so);
    st = prepare_model(s, placement, o->quantize_mode, err);
    struct qp_placement *extra = NULL; /* the scope's probe-only entries */
    if (st == QP_OK) st = qp_sens_scope_check(model->graph, s->so.scope, s->so.n_scope, err);
    if (st == QP_OK && s->so.n_scope && s->so.probe == QP_SENS_QUANTIZE_ONE)
        st = qp_sens_scope_placement(model->graph, s->pl, s->so.scope, s->so.n_scope, &extra, err);
    if (st == QP_OK && !ranges) {
        st = qp_sens_calibrate(model, s->pl, data, QP_CALIB_ENTROPY, 0, QP_DTYPE_INT8, o->n_threads,
                               &s->own_ranges, &s->n_calib_samples, err);
        struct qp_ranges *xr = NULL;
        if (st == QP_OK && extra)
            st = qp_sens_calibrate(model, extra, data, QP_CALIB_ENTROPY, 0, QP_DTYPE_INT8,
                                   o->n_threads, &xr, NULL, err);
        if (st == QP_OK && xr) st = qp_sens_ranges_add(s->own_ranges, xr, err);
        qp_ranges_free(xr);
        s->ranges = s->own_ranges;
    }
    if (st == QP_OK)
        st = qp_sens_score_scoped(model, s->pl, extra, data, s->ranges, &s->so, &s->r, err);
    qp_placement_free(extra);
    if (st == QP_OK) st = qp_sens_rank(s->r, &s->k, err);
    if (st == QP_OK) st = index_ranks(s, err);
    /* Borrowed for the call only: picking never reads them. */
    s->so.scope = NULL;
    s->so.n_scope = 0;
    s->so.progress = NULL;
    s->so.progress_user = NULL;
    if (st != QP_OK) {
        qp_sensitivity_free(s);
        return st;
    }
    *out = s;
    return QP_OK;
}

void qp_sensitivity_get_summary(const struct qp_sensitivity *s,
                                struct qp_sensitivity_summary *out) {
    memset(out, 0, sizeof *out);
    if (!s) return;
    out->n_targets = s->r->n_targets;
    out->n_scored = s->k.n_scored;
    out->n_unprobed = s->k.n_unprobed;
    out->n_failed = s->k.n_failed;
    out->n_samples = s->r->n_samples;
    out->n_calibration_samples = s->n_calib_samples;
    out->total_score = s->k.total_mass;
    out->reference_seconds = s->r->reference_seconds;
    out->probe_seconds = s->r->probe_seconds;
}

size_t qp_sensitivity_n_targets(const struct qp_sensitivity *s) {
    return s ? s->r->n_targets : 0;
}

int qp_sensitivity_target(const struct qp_sensitivity *s, size_t i,
                          struct qp_sensitivity_target *out) {
    if (!s || i >= s->r->n_targets) return 0;
    size_t ti = s->by_rank[i];
    const struct qp_sens_target *t = &s->r->targets[ti];
    out->name = t->name;
    out->op_type = t->op_type;
    out->state = (enum qp_sensitivity_state)t->state;
    out->score = t->state == QP_SENS_SCORED ? t->score : 0;
    out->rank = s->rank[ti];
    out->n_edges = t->n_edges;
    out->n_weights = t->n_weights;
    out->n_nodes = t->n_nodes;
    out->error = t->state == QP_SENS_SCORED ? NULL : t->error;
    return 1;
}

const char *qp_sensitivity_target_node(const struct qp_sensitivity *s, size_t i, size_t k) {
    if (!s || i >= s->r->n_targets) return NULL;
    const struct qp_sens_target *t = &s->r->targets[s->by_rank[i]];
    return k < t->n_nodes ? t->nodes[k] : NULL;
}

/* ---- picking ------------------------------------------------------------------------------- */

void qp_sensitivity_pick_options_default(struct qp_sensitivity_pick_options *o) {
    struct qp_pick_options po;
    qp_pick_options_default(&po);
    memset(o, 0, sizeof *o);
    o->mode = QP_SENSITIVITY_COVERAGE;
    o->coverage = po.coverage;
    o->min_score_floor = po.min_score_floor;
    o->near_tie_ratio = po.near_tie_ratio;
    o->block_agg = QP_SENSITIVITY_BLOCK_SUM;
    o->max_output_drift = -1;
}

/* The budget mode's bounds: a finite drift (< 0: none) and a top-1 agreement in [0, 1] (0:
 * none), at least one of them set. */
static enum qp_status budget_goal(const struct qp_sensitivity_pick_options *o,
                                  struct qp_sens_budget_goal *g, struct qp_error *err) {
    if (!isfinite(o->max_output_drift))
        return qp_error_set(err, QP_ERR_USAGE, "picker: max_output_drift must be finite");
    if (!(o->min_top1_agreement >= 0 && o->min_top1_agreement <= 1))
        return qp_error_set(err, QP_ERR_USAGE, "picker: min_top1_agreement %g is not in [0, 1]",
                            o->min_top1_agreement);
    *g = (struct qp_sens_budget_goal){.max_drift =
                                          o->max_output_drift < 0 ? -1 : o->max_output_drift,
                                      .min_top1 = o->min_top1_agreement};
    if (!qp_sens_goal_set(g))
        return qp_error_set(err, QP_ERR_USAGE,
                            "picker: the budget mode needs max_output_drift >= 0 or "
                            "min_top1_agreement > 0");
    return QP_OK;
}

static enum qp_status pick_options(const struct qp_sensitivity_pick_options *o,
                                   struct qp_pick_options *po, struct qp_sens_budget_goal *goal,
                                   struct qp_error *err) {
    if ((unsigned)o->mode > QP_SENSITIVITY_BUDGET)
        return qp_error_set(err, QP_ERR_USAGE, "picker: unknown mode %d", (int)o->mode);
    *goal = (struct qp_sens_budget_goal){.max_drift = -1, .min_top1 = 0};
    enum qp_status st = o->mode == QP_SENSITIVITY_BUDGET ? budget_goal(o, goal, err) : QP_OK;
    if (st != QP_OK) return st;
    qp_pick_options_default(po);
    po->threshold_mode = o->mode == QP_SENSITIVITY_THRESHOLD;
    po->coverage = o->coverage;
    po->threshold = o->threshold;
    po->max_nodes = o->max_targets;
    po->min_score_floor = o->min_score_floor;
    po->near_tie_ratio = o->near_tie_ratio;
    po->agg = (enum qp_block_agg)o->block_agg;
    return QP_OK;
}

enum qp_status qp_sensitivity_pick(struct qp_sensitivity *s,
                                   const struct qp_sensitivity_pick_options *o,
                                   struct qp_sensitivity_exclusions **out, struct qp_error *err) {
    if (!s || !o || !out)
        return qp_error_set(err, QP_ERR_USAGE, "sensitivity: NULL analysis, options or out");
    struct qp_pick_options po;
    struct qp_sens_budget_goal goal;
    enum qp_status st = pick_options(o, &po, &goal, err);
    if (st != QP_OK) return st;
    struct qp_sens_blocks *blocks = NULL;
    if (o->blocks_path && (st = qp_sens_blocks_load(o->blocks_path, &blocks, err)) != QP_OK)
        return st;
    po.blocks = blocks;
    struct qp_sensitivity_exclusions *x = calloc(1, sizeof *x);
    if (!x) st = nomem(err);
    if (st == QP_OK)
        st = qp_sens_exclude(s->model, s->pl, s->data, s->ranges, &s->so, s->r, &s->k, &po, &goal,
                             &x->ex, err);
    qp_sens_blocks_free(blocks);
    if (st != QP_OK) {
        free(x);
        return st;
    }
    x->s = s;
    *out = x;
    return QP_OK;
}

void qp_sensitivity_exclusions_free(struct qp_sensitivity_exclusions *x) {
    if (!x) return;
    qp_sens_exclusions_release(&x->ex);
    free(x);
}

void qp_sensitivity_exclusions_get_summary(const struct qp_sensitivity_exclusions *x,
                                           struct qp_sensitivity_pick_summary *out) {
    memset(out, 0, sizeof *out);
    out->warning = "";
    if (!x) return;
    const struct qp_sens_exclusions *e = &x->ex;
    double total = x->s->k.total_mass;
    out->n_excluded = e->n_excluded;
    out->excluded_score = e->excluded_mass;
    out->coverage_pct = total > 0 ? 100.0 * e->excluded_mass / total : 0.0;
    if (e->pick && e->pick->near_tie && !e->budget) {
        out->near_tie = 1;
        out->warning = e->pick->warning;
    }
    if (e->budget) {
        out->n_budget_groups = e->n_budget_groups;
        out->budget_met = e->budget_met;
        out->drift_quantized = e->steps[0].drift;
        out->drift_after = e->steps[e->n_budget_groups].drift;
        out->top1_quantized = e->steps[0].top1;
        out->top1_after = e->steps[e->n_budget_groups].top1;
    }
}

const char *qp_sensitivity_excluded(const struct qp_sensitivity_exclusions *x, size_t i) {
    if (!x || i >= x->ex.n_excluded) return NULL;
    return x->s->r->targets[x->ex.excluded[i]].name;
}

enum qp_status qp_sensitivity_exclusions_placement(const struct qp_sensitivity_exclusions *x,
                                                   struct qp_placement **out,
                                                   struct qp_error *err) {
    if (!x || !out) return qp_error_set(err, QP_ERR_USAGE, "sensitivity: NULL exclusions or out");
    return qp_sens_exclusions_placement(x->s->pl, x->s->r, &x->ex, out, err);
}

/* ---- picking on plain scores ------------------------------------------------------------ */

static enum qp_status check_scores(const char *const *names, const double *scores, size_t n,
                                   struct qp_error *err) {
    if (n && (!names || !scores))
        return qp_error_set(err, QP_ERR_USAGE, "picker: NULL names or scores");
    for (size_t i = 0; i < n; i++) {
        if (!names[i]) return qp_error_set(err, QP_ERR_USAGE, "picker: name %zu is NULL", i);
        if (!isfinite(scores[i]))
            return qp_error_set(err, QP_ERR_USAGE, "picker: the score of '%s' is not finite",
                                names[i]);
    }
    /* Repeated names: a sorted copy of the pointers, compared as strings. */
    const char **sorted = qp_malloc_n(n + 1, sizeof *sorted);
    if (!sorted) return nomem(err);
    memcpy(sorted, names, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, qp_cmp_strp);
    enum qp_status st = QP_OK;
    for (size_t i = 1; i < n && st == QP_OK; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0)
            st = qp_error_set(err, QP_ERR_USAGE, "picker: name '%s' is given twice", sorted[i]);
    free(sorted);
    return st;
}

enum qp_status qp_sensitivity_pick_scores(const char *const *names, const double *scores, size_t n,
                                          const struct qp_sensitivity_pick_options *o,
                                          const char *blocks_json, size_t blocks_len,
                                          struct qp_sensitivity_score_pick **out,
                                          struct qp_error *err) {
    if (!o || !out) return qp_error_set(err, QP_ERR_USAGE, "picker: NULL options or out");
    if (o->mode == QP_SENSITIVITY_BUDGET)
        return qp_error_set(err, QP_ERR_USAGE,
                            "picker: an accuracy budget runs the model; pick on the analysis "
                            "(qp_sensitivity_pick), not on plain scores");
    struct qp_pick_options po;
    struct qp_sens_budget_goal goal;
    enum qp_status st = pick_options(o, &po, &goal, err);
    if (st == QP_OK) st = check_scores(names, scores, n, err);
    if (st != QP_OK) return st;
    struct qp_sens_blocks *blocks = NULL;
    if (o->blocks_path)
        st = qp_sens_blocks_load(o->blocks_path, &blocks, err);
    else if (blocks_json)
        st = qp_sens_blocks_parse(blocks_json, blocks_len, "blocks", &blocks, err);
    if (st != QP_OK) return st;
    po.blocks = blocks;
    struct qp_pick_result *pr = NULL;
    struct qp_sensitivity_score_pick *p = calloc(1, sizeof *p);
    if (!p) st = nomem(err);
    if (st == QP_OK) st = qp_sens_pick(names, scores, n, &po, &pr, err);
    if (st == QP_OK && !(p->excluded = qp_malloc_n(pr->n_excluded + 1, sizeof *p->excluded)))
        st = nomem(err);
    if (st == QP_OK) {
        p->n_excluded = pr->n_excluded;
        memcpy(p->excluded, pr->excluded, pr->n_excluded * sizeof *p->excluded);
        for (size_t i = 0; i < n; i++)
            p->total_score += scores[i];
        for (size_t i = 0; i < p->n_excluded; i++)
            p->excluded_score += scores[p->excluded[i]];
        p->coverage_pct = p->total_score > 0 ? 100.0 * p->excluded_score / p->total_score : 0.0;
        p->near_tie = pr->near_tie;
        snprintf(p->warning, sizeof p->warning, "%s", pr->warning);
        if (pr->near_tie) qp_log(QP_LOG_WARN, "sensitivity: %s", pr->warning);
        *out = p;
        p = NULL;
    }
    qp_pick_result_free(pr);
    qp_sens_blocks_free(blocks);
    qp_sensitivity_score_pick_free(p);
    return st;
}

void qp_sensitivity_score_pick_free(struct qp_sensitivity_score_pick *p) {
    if (!p) return;
    free(p->excluded);
    free(p);
}
