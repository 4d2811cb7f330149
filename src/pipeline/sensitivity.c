/* The sensitivity pipeline (sensitivity.h). */
#include "pipeline/sensitivity.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "calib/provider_npz.h"
#include "core/clock.h"
#include "core/file.h"
#include "core/size.h"
#include "ir/ir.h"
#include "ir/opset_convert.h"
#include "qplace/model.h"
#include "quant/policy_trt.h"
#include "quant/writer.h"

#define SENS_MAX_INPUTS 64

static enum qp_status nomem(struct qp_error *err) {
    return qp_error_set(err, QP_ERR_NOMEM, "sensitivity: out of memory");
}

/* ---- ranking ------------------------------------------------------------------------------- */

struct ranked {
    double score;
    size_t index;
};

/* Highest score first, then target order: a total order, so the ranking is deterministic. */
static int cmp_ranked(const void *a, const void *b) {
    const struct ranked *x = a, *y = b;
    if (x->score > y->score) return -1;
    if (x->score < y->score) return 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

enum qp_status qp_sens_rank(const struct qp_sens_result *r, struct qp_sens_ranking *out,
                            struct qp_error *err) {
    struct qp_sens_ranking k = {0};
    struct ranked *tmp = qp_malloc_n(r->n_targets + 1, sizeof *tmp);
    k.order = qp_malloc_n(r->n_targets + 1, sizeof *k.order);
    if (!tmp || !k.order) {
        free(tmp);
        free(k.order);
        return nomem(err);
    }
    for (size_t i = 0; i < r->n_targets; i++) {
        const struct qp_sens_target *t = &r->targets[i];
        k.n_unprobed += t->state == QP_SENS_UNPROBED;
        k.n_failed += t->state == QP_SENS_FAILED;
        if (t->state != QP_SENS_SCORED) continue;
        k.total_mass += t->score;
        tmp[k.n_scored].score = t->score;
        tmp[k.n_scored++].index = i;
    }
    qsort(tmp, k.n_scored, sizeof *tmp, cmp_ranked);
    for (size_t i = 0; i < k.n_scored; i++)
        k.order[i] = tmp[i].index;
    free(tmp);
    *out = k;
    return QP_OK;
}

void qp_sens_ranking_release(struct qp_sens_ranking *k) {
    if (!k) return;
    free(k->order);
    memset(k, 0, sizeof *k);
}

/* ---- exclusions ---------------------------------------------------------------------------- */

void qp_sens_exclusions_release(struct qp_sens_exclusions *x) {
    if (!x) return;
    qp_pick_result_free(x->pick);
    free(x->excluded);
    free(x->steps);
    qp_placement_free(x->placement);
    memset(x, 0, sizeof *x);
}

/* Groups of target indices for the budget: the first `ng` picked groups. */
struct budget_groups {
    size_t n;
    size_t **targets, *sizes;
    const size_t **members;
};

static void budget_groups_release(struct budget_groups *b) {
    for (size_t g = 0; b->targets && g < b->n; g++)
        free(b->targets[g]);
    free(b->targets);
    free(b->sizes);
    free(b->members);
}

int qp_sens_goal_set(const struct qp_sens_budget_goal *g) {
    return g && (g->max_drift >= 0 || g->min_top1 > 0);
}

static enum qp_status budget_groups_make(const struct qp_pick_result *pick,
                                         const struct qp_sens_ranking *k, size_t ng,
                                         struct budget_groups *b, struct qp_error *err) {
    b->n = ng;
    b->targets = calloc(ng + 1, sizeof *b->targets);
    b->sizes = calloc(ng + 1, sizeof *b->sizes);
    b->members = calloc(ng + 1, sizeof *b->members);
    if (!b->targets || !b->sizes || !b->members) return nomem(err);
    for (size_t g = 0; g < ng; g++) {
        const struct qp_pick_group *gr = &pick->groups[g];
        if (!(b->targets[g] = calloc(gr->n_members + 1, sizeof **b->targets))) return nomem(err);
        for (size_t i = 0; i < gr->n_members; i++)
            b->targets[g][i] = k->order[gr->members[i]];
        b->sizes[g] = gr->n_members;
        b->members[g] = b->targets[g];
    }
    return QP_OK;
}

/* The budget: the picked groups excluded one at a time until the drift is small enough. */
static enum qp_status run_budget(const struct qp_model *m, const struct qp_placement *pl,
                                 struct qp_provider *prov, const struct qp_ranges *ranges,
                                 const struct qp_sens_options *so, const struct qp_sens_result *r,
                                 const struct qp_sens_ranking *k, const struct qp_pick_options *po,
                                 struct qp_sens_exclusions *x, struct qp_error *err) {
    size_t ng = x->pick->n_groups;
    if (po->max_nodes && ng > po->max_nodes) ng = po->max_nodes;
    struct budget_groups b = {0};
    enum qp_status st = budget_groups_make(x->pick, k, ng, &b, err);
    if (st == QP_OK && !(x->steps = calloc(ng + 2, sizeof *x->steps))) st = nomem(err);
    x->n_budget_candidates = ng;
    struct qp_sens_options bo = *so;
    bo.progress = NULL;
    struct qp_sens_groups gs = {.n = ng, .members = b.members, .sizes = b.sizes};
    if (st == QP_OK)
        st = qp_sens_budget(m, pl, prov, ranges, &bo, r, &gs, &x->goal, &x->n_budget_groups,
                            x->steps, &x->budget_met, &x->placement, err);
    for (size_t g = 0; st == QP_OK && g < x->n_budget_groups; g++)
        for (size_t i = 0; i < b.sizes[g]; i++)
            x->excluded[x->n_excluded++] = b.targets[g][i];
    budget_groups_release(&b);
    return st;
}

enum qp_status qp_sens_exclude(const struct qp_model *m, const struct qp_placement *pl,
                               struct qp_provider *prov, const struct qp_ranges *ranges,
                               const struct qp_sens_options *so, const struct qp_sens_result *r,
                               const struct qp_sens_ranking *k, const struct qp_pick_options *po,
                               const struct qp_sens_budget_goal *goal,
                               struct qp_sens_exclusions *out, struct qp_error *err) {
    struct qp_sens_exclusions x = {.budget = qp_sens_goal_set(goal)};
    if (x.budget) x.goal = *goal;
    size_t ns = k->n_scored;
    const char **names = qp_malloc_n(ns + 1, sizeof *names);
    double *scores = qp_malloc_n(ns + 1, sizeof *scores);
    x.excluded = calloc(ns + 1, sizeof *x.excluded);
    enum qp_status st = names && scores && x.excluded ? QP_OK : nomem(err);
    for (size_t i = 0; st == QP_OK && i < ns; i++) {
        names[i] = r->targets[k->order[i]].name;
        scores[i] = r->targets[k->order[i]].score;
    }
    struct qp_pick_options pko = *po;
    if (x.budget) { /* rank every group; the budget decides how many go */
        pko.threshold_mode = 0;
        pko.coverage = 1;
        pko.min_score_floor = -INFINITY;
    }
    if (st == QP_OK) st = qp_sens_pick(names, scores, ns, &pko, &x.pick, err);
    if (st == QP_OK && x.budget) {
        st = run_budget(m, pl, prov, ranges, so, r, k, po, &x, err);
    } else if (st == QP_OK) {
        for (size_t i = 0; i < x.pick->n_excluded; i++)
            x.excluded[x.n_excluded++] = k->order[x.pick->excluded[i]];
        if (x.pick->near_tie) qp_log(QP_LOG_WARN, "sensitivity: %s", x.pick->warning);
    }
    for (size_t i = 0; st == QP_OK && i < x.n_excluded; i++)
        x.excluded_mass += r->targets[x.excluded[i]].score;
    free(names);
    free(scores);
    if (st != QP_OK) {
        qp_sens_exclusions_release(&x);
        return st;
    }
    *out = x;
    return QP_OK;
}

enum qp_status qp_sens_exclusions_placement(const struct qp_placement *pl,
                                            const struct qp_sens_result *r,
                                            const struct qp_sens_exclusions *x,
                                            struct qp_placement **out, struct qp_error *err) {
    if (x->placement) return qp_placement_copy(x->placement, out, err);
    unsigned char *mask = calloc(pl->n_edges + pl->n_weights + 1, 1);
    if (!mask) return nomem(err);
    for (size_t i = 0; i < x->n_excluded; i++) {
        const struct qp_sens_target *t = &r->targets[x->excluded[i]];
        for (size_t q = 0; q < t->n_edges + t->n_weights; q++)
            mask[t->entries[q]] = 1;
    }
    enum qp_status st = qp_sens_placement_minus(pl, mask, out, err);
    free(mask);
    return st;
}

/* ---- the driver ---------------------------------------------------------------------------- */

void qp_sensitivity_run_options_default(struct qp_sensitivity_run_options *o) {
    memset(o, 0, sizeof *o);
    o->n_synthetic_samples = 100;
    o->method = QP_CALIB_ENTROPY;
    qp_sens_options_default(&o->sens);
    qp_pick_options_default(&o->pick);
    o->max_output_drift = -1;
}

void qp_sensitivity_report_free(struct qp_sensitivity_report *r) {
    if (!r) return;
    qp_sens_result_free(r->result);
    qp_sens_ranking_release(&r->ranking);
    qp_sens_exclusions_release(&r->ex);
    free(r->calibration_data);
    free(r->ranges_method);
    free(r->json_path);
    free(r->exclusions_path);
    free(r->placement_path);
    free(r);
}

/* "<dir>/<stem><suffix>" for `model` (the ".onnx" suffix replaced). malloc'd or NULL. */
static char *stem_path(const char *model, const char *suffix) {
    size_t n = strlen(model);
    if (n >= 5 && strcmp(model + n - 5, ".onnx") == 0) n -= 5;
    char *p = malloc(n + strlen(suffix) + 1);
    if (!p) return NULL;
    memcpy(p, model, n);
    strcpy(p + n, suffix);
    return p;
}

static int same_file(const char *a, const char *b) {
    if (strcmp(a, b) == 0) return 1;
    struct stat sa, sb;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static void event(const struct qp_sensitivity_run_options *o, enum qp_sensitivity_event ev,
                  const struct qp_sensitivity_report *r) {
    if (o->on_event) o->on_event(ev, r, o->user);
}

static enum qp_status usage_error(const struct qp_sensitivity_run_options *o, enum qp_status st) {
    if (o->usage_error_out && st == QP_ERR_USAGE) *o->usage_error_out = 1;
    return st;
}

/* The float model, opset >= 19, topologically sorted. */
static enum qp_status load_model(const char *onnx, struct qp_model **out, struct qp_error *err) {
    struct qp_model *m = NULL;
    enum qp_status st = qp_model_load_file(onnx, NULL, &m, err);
    if (st != QP_OK) return st;
    if (qp_model_has_qdq(m)) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "sensitivity: '%s' already holds QuantizeLinear/DequantizeLinear nodes; "
                          "give the float model",
                          onnx);
    } else if (qp_model_opset(m, "") < 19 && (st = qp_model_convert_opset(m, 19, err)) != QP_OK) {
        qp_error_prefix(err, "sensitivity: '%s'", onnx);
    } else {
        st = qp_graph_toposort(m->graph, err);
    }
    if (st != QP_OK) {
        qp_model_free(m);
        return st;
    }
    *out = m;
    return QP_OK;
}

/* placement_in, or the trt policy for the quantized type; validated against the model. */
static enum qp_status make_placement(const struct qp_sensitivity_run_options *o,
                                     const struct qp_model *m, struct qp_placement **out,
                                     struct qp_error *err) {
    struct qp_placement *pl = NULL;
    enum qp_status st = QP_OK;
    const char *pin = o->placement_in;
    if (pin) {
        st = qp_placement_load_file(pin, &pl, err);
    } else if (!(pl = qp_placement_create())) {
        st = nomem(err);
    } else {
        struct qp_policy_options pol = {.mode = o->sens.qtype == QP_DTYPE_INT8 ? QP_QUANT_INT8
                                                                               : QP_QUANT_FP8};
        st = qp_policy_trt(m->graph, &pol, pl, NULL, err);
    }
    if (st == QP_OK && (st = qp_placement_validate(pl, m->graph, err)) != QP_OK)
        qp_error_prefix(err, "sensitivity: placement%s%s", pin ? " " : "", pin ? pin : "");
    if (st != QP_OK) {
        qp_placement_free(pl);
        return st;
    }
    *out = pl;
    return QP_OK;
}

/* Calibration and scoring data through the one data module (calib/data.h). */
static enum qp_status open_data(const struct qp_sensitivity_run_options *o,
                                const struct qp_model *m, const struct qp_calib_shapes *shapes,
                                struct qp_provider **out, struct qp_error *err) {
    struct qp_npz_provider_input inputs[SENS_MAX_INPUTS];
    size_t n_inputs = 0;
    enum qp_status st = qp_provider_graph_inputs(m->graph, shapes->n ? shapes : NULL, "sensitivity",
                                                 inputs, SENS_MAX_INPUTS, &n_inputs, err);
    if (st != QP_OK) return st;
    struct qp_data_options dopt;
    if (o->data)
        dopt = *o->data;
    else
        qp_data_options_default(&dopt);
    /* Synthetic: samples, not batches (a batch of calibration_shapes rows holds several). */
    uint64_t rows = n_inputs && inputs[0].rank > 0 && inputs[0].batch_dims[0] > 0
                        ? (uint64_t)inputs[0].batch_dims[0]
                        : 1;
    uint64_t n_syn = o->n_synthetic_samples;
    dopt.synthetic_batches = n_syn / rows ? n_syn / rows : 1;
    if ((st = qp_provider_open(o->calibration_data_path, &dopt, inputs, n_inputs, out, err)) !=
        QP_OK)
        return st;
    if (!o->calibration_data_path)
        qp_log(QP_LOG_WARN,
               "sensitivity: no --calibration_data_path: calibrating and scoring on synthetic "
               "data (uniform [0, 1)); the scores are directional only (calibration_source: "
               "synthetic)");
    return QP_OK;
}

/* What the driver holds while it runs. */
struct run_state {
    struct qp_model *m;
    struct qp_placement *pl;
    struct qp_placement *extra; /* the scope's probe-only entries, or NULL */
    struct qp_calib_shapes shapes;
    struct qp_provider *prov;
    struct qp_ranges *ranges;
    struct qp_sens_blocks *blocks;
};

static void run_state_release(struct run_state *s) {
    qp_sens_blocks_free(s->blocks);
    qp_ranges_free(s->ranges);
    qp_provider_free(s->prov);
    qp_calib_shapes_release(&s->shapes);
    qp_placement_free(s->extra);
    qp_placement_free(s->pl);
    qp_model_free(s->m);
}

/* The ranges_in file, checked as quantize checks --calibration_cache_path: every activation
 * tensor of the placement has a range (the scope's probe-only edges may lack one: their targets
 * fail, naming the tensor). */
static enum qp_status load_ranges(const struct qp_sensitivity_run_options *o, struct run_state *s,
                                  struct qp_sensitivity_report *r, struct qp_error *err) {
    enum qp_status st = qp_ranges_load_json(o->ranges_in, &s->ranges, err);
    if (st != QP_OK) return qp_error_prefix(err, "sensitivity: --ranges_in");
    for (size_t e = 0; e < s->pl->n_edges; e++) {
        const struct qp_qedge *q = &s->pl->edges[e];
        if (!qp_ranges_find(s->ranges, q->tensor))
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "sensitivity: --ranges_in '%s' has no range for tensor '%s' "
                                "(quantized at input %d of node '%s'); calibrate the same "
                                "placement with qplace calibrate",
                                o->ranges_in, q->tensor, q->input, q->node);
    }
    const struct qp_ranges_meta *meta = qp_ranges_get_meta(s->ranges);
    r->n_calib_samples = meta->num_samples;
    if (meta->method && !(r->ranges_method = strdup(meta->method))) return nomem(err);
    return QP_OK;
}

/* Everything before the scores: outputs checked, blocks, model, placement, data, calibration. */
static enum qp_status prepare(const struct qp_sensitivity_run_options *o, struct run_state *s,
                              struct qp_sensitivity_report *r, struct qp_error *err) {
    const char *onnx = o->onnx_path;
    enum qp_status st;
    r->json_path = o->output_json ? strdup(o->output_json) : stem_path(onnx, ".sensitivity.json");
    if (!r->json_path) return nomem(err);
    if (same_file(onnx, r->json_path))
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "sensitivity: --output_json '%s' is the input model", r->json_path);
    const char *outs[][2] = {{r->json_path, "sensitivity: --output_json"},
                             {o->exclusions_out, "sensitivity: --exclusions_out"},
                             {o->placement_out, "sensitivity: --placement_out"}};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        if ((st = qp_file_check_output(outs[i][0], outs[i][1], err)) != QP_OK) return st;
    if (o->blocks_path && (st = qp_sens_blocks_load(o->blocks_path, &s->blocks, err)) != QP_OK)
        return st;
    if (o->calibration_shapes &&
        (st = qp_calib_shapes_parse(o->calibration_shapes, &s->shapes, err)) != QP_OK)
        return usage_error(o, st);
    if ((st = load_model(onnx, &s->m, err)) != QP_OK) return st;
    const struct qp_sens_options *so = &o->sens;
    if ((st = qp_sens_scope_check(s->m->graph, so->scope, so->n_scope, err)) != QP_OK)
        return usage_error(o, st);
    if ((st = make_placement(o, s->m, &s->pl, err)) != QP_OK) return st;
    if (so->n_scope && so->probe == QP_SENS_QUANTIZE_ONE &&
        (st = qp_sens_scope_placement(s->m->graph, s->pl, so->scope, so->n_scope, &s->extra,
                                      err)) != QP_OK)
        return st;
    if (o->ranges_in && (st = load_ranges(o, s, r, err)) != QP_OK) return st;
    if ((st = open_data(o, s->m, &s->shapes, &s->prov, err)) != QP_OK) return st;
    if (!(r->calibration_data = strdup(qp_provider_source(s->prov)))) return nomem(err);
    r->synthetic = !o->calibration_data_path;
    if (o->ranges_in) return QP_OK;
    double t0 = qp_clock_seconds();
    if ((st = qp_sens_calibrate(s->m, s->pl, s->prov, o->method, o->percentile, so->qtype,
                                so->n_threads, &s->ranges, &r->n_calib_samples, err)) != QP_OK)
        return st;
    if (s->extra) { /* calibrated apart: the placement's ranges stay what they are */
        struct qp_ranges *xr = NULL;
        st = qp_sens_calibrate(s->m, s->extra, s->prov, o->method, o->percentile, so->qtype,
                               so->n_threads, &xr, NULL, err);
        if (st == QP_OK) st = qp_sens_ranges_add(s->ranges, xr, err);
        qp_ranges_free(xr);
        if (st != QP_OK) return st;
    }
    r->calibration_seconds = qp_clock_seconds() - t0;
    return QP_OK;
}

static int scope_only(const struct qp_sens_target *t) {
    return t->n_scope_edges + t->n_scope_weights > 0;
}

/* The exclusions file: one exact-name regex per quantized node of the excluded targets (a
 * comment for a scope-only one: the placement has nothing of it to exclude). */
static char *exclusions_text(const struct qp_sens_result *r, const size_t *ti, size_t n,
                             const char *model, const char *how) {
    size_t cap = 256 + strlen(model) + strlen(how), len = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < r->targets[ti[i]].n_nodes; k++)
            cap += 2 * strlen(r->targets[ti[i]].nodes[k]) + 4;
    char *s = malloc(cap);
    if (!s) return NULL;
    for (size_t i = 0; i < n; i++)
        cap += strlen(r->targets[ti[i]].name) + 96;
    len += (size_t)snprintf(s, cap, "# qplace sensitivity exclusions for %s (%s)\n", model, how);
    for (size_t i = 0; i < n; i++)
        if (scope_only(&r->targets[ti[i]]))
            len += (size_t)snprintf(s + len, cap - len,
                                    "# %s: not quantized by the placement (--op_types_scope "
                                    "probe only)\n",
                                    r->targets[ti[i]].name);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; !scope_only(&r->targets[ti[i]]) && k < r->targets[ti[i]].n_nodes; k++) {
            len += qp_sens_name_regex(r->targets[ti[i]].nodes[k], s + len, cap - len);
            s[len++] = '\n';
            s[len] = '\0';
        }
    return s;
}

static struct qp_sens_budget_goal run_goal(const struct qp_sensitivity_run_options *o) {
    return (struct qp_sens_budget_goal){.max_drift = o->max_output_drift,
                                        .min_top1 = o->min_top1_agreement};
}

static const char *pick_mode(const struct qp_sensitivity_run_options *o) {
    struct qp_sens_budget_goal g = run_goal(o);
    return g.max_drift >= 0 && g.min_top1 > 0 ? "max_output_drift + min_top1_agreement"
           : g.max_drift >= 0                 ? "max_output_drift"
           : g.min_top1 > 0                   ? "min_top1_agreement"
           : o->pick.threshold_mode           ? "threshold"
                                              : "coverage";
}

/* The outputs, prepared in full before anything is written, then written. */
static enum qp_status write_outputs(const struct qp_sensitivity_run_options *o,
                                    const struct run_state *s, struct qp_sensitivity_report *r,
                                    struct qp_error *err) {
    const struct qp_sens_exclusions *x = &r->ex;
    char *json = NULL, *excl = NULL;
    struct qp_placement *own = NULL;
    const struct qp_placement *out_pl = NULL;
    enum qp_status st = qp_sensitivity_report_json(o, r, &json, err);
    if (st == QP_OK && o->exclusions_out) {
        char how[128];
        snprintf(how, sizeof how, "%s, %s, %s", qp_sens_metric_name(o->sens.metric),
                 qp_sens_granularity_name(o->sens.granularity), pick_mode(o));
        if (!(excl = exclusions_text(r->result, x->excluded, x->n_excluded, o->onnx_path, how)) ||
            !(r->exclusions_path = strdup(o->exclusions_out)))
            st = nomem(err);
    }
    struct qp_sens_budget_goal goal = run_goal(o);
    if (st == QP_OK && r->picking && (o->placement_out || qp_sens_goal_set(&goal))) {
        r->placement_path = o->placement_out
                                ? strdup(o->placement_out)
                                : stem_path(o->onnx_path, ".sensitivity.placement.json");
        if (!r->placement_path)
            st = nomem(err);
        else if (x->placement)
            out_pl = x->placement;
        else if ((st = qp_sens_exclusions_placement(s->pl, r->result, x, &own, err)) == QP_OK)
            out_pl = own;
    }
    const char *outs[3] = {r->json_path, r->exclusions_path, r->placement_path};
    for (int i = 0; st == QP_OK && i < 3; i++)
        for (int j = 0; st == QP_OK && j < 3; j++)
            if (i != j && outs[i] && outs[j] && strcmp(outs[i], outs[j]) == 0)
                st = qp_error_set(err, QP_ERR_USAGE, "sensitivity: '%s' is given as two outputs",
                                  outs[i]);
    for (int i = 0; st == QP_OK && i < 3; i++)
        if (outs[i] && same_file(o->onnx_path, outs[i]))
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "sensitivity: output '%s' is the input model",
                              outs[i]);
    /* All or nothing: when a later file cannot be written, the ones written before it go. */
    int written = 0;
    if (st == QP_OK && (st = qp_file_write_atomic(r->json_path, json, strlen(json), err)) == QP_OK)
        written = 1;
    if (st == QP_OK && excl &&
        (st = qp_file_write_atomic(r->exclusions_path, excl, strlen(excl), err)) == QP_OK)
        written = 2;
    if (st == QP_OK && out_pl) st = qp_placement_save_file(out_pl, r->placement_path, err);
    if (st != QP_OK && written >= 1) unlink(r->json_path);
    if (st != QP_OK && written >= 2) unlink(r->exclusions_path);
    free(json);
    free(excl);
    qp_placement_free(own);
    return st;
}

enum qp_status qp_sensitivity_run(const struct qp_sensitivity_run_options *o,
                                  struct qp_sensitivity_report **report_out, struct qp_error *err) {
    if (o && o->usage_error_out) *o->usage_error_out = 0;
    if (!o || !o->onnx_path)
        return qp_error_set(err, QP_ERR_USAGE, "sensitivity: --onnx_path is required");
    struct qp_sensitivity_report *r = calloc(1, sizeof *r);
    if (!r) return nomem(err);
    r->t_start = qp_clock_seconds();
    r->c_start = qp_clock_cpu_seconds();
    r->picking = o->picking;
    struct run_state s = {0};
    enum qp_status st = prepare(o, &s, r, err);
    if (st == QP_OK) {
        event(o, QP_SENSITIVITY_EVENT_SCORING, r);
        st = qp_sens_score_scoped(s.m, s.pl, s.extra, s.prov, s.ranges, &o->sens, &r->result, err);
    }
    if (st == QP_OK && (st = qp_sens_rank(r->result, &r->ranking, err)) == QP_OK)
        event(o, QP_SENSITIVITY_EVENT_SCORED, r);
    if (st == QP_OK && o->picking) {
        struct qp_pick_options po = o->pick;
        po.blocks = s.blocks;
        struct qp_sens_budget_goal goal = run_goal(o);
        st = qp_sens_exclude(s.m, s.pl, s.prov, s.ranges, &o->sens, r->result, &r->ranking, &po,
                             &goal, &r->ex, err);
        usage_error(o, st); /* the picker's options (the budget reuses the scoring's) */
        if (st == QP_OK) event(o, QP_SENSITIVITY_EVENT_PICKED, r);
    }
    if (st == QP_OK) st = write_outputs(o, &s, r, err);
    run_state_release(&s);
    if (st == QP_OK && report_out)
        *report_out = r;
    else
        qp_sensitivity_report_free(r);
    return st;
}

/* ---- the JSON report ----------------------------------------------------------------------- */

static const char *block_agg_name(enum qp_block_agg a) {
    static const char *const names[] = {"sum", "max", "mean"};
    return (unsigned)a < 3 ? names[a] : "?";
}

/* Scored targets ranked, then the unprobed and failed ones. 0 when out of memory. */
static int json_targets(cJSON *root, const struct qp_sensitivity_run_options *o,
                        const struct qp_sensitivity_report *rep) {
    const struct qp_sens_result *r = rep->result;
    cJSON *jscores = cJSON_AddObjectToObject(root, "scores");
    cJSON *jt = cJSON_AddArrayToObject(root, "targets");
    cJSON *jun = cJSON_AddArrayToObject(root, "unprobed");
    cJSON *jfail = cJSON_AddArrayToObject(root, "failed");
    if (!jscores || !jt || !jun || !jfail) return 0;
    for (size_t k = 0; k < rep->ranking.n_scored; k++) {
        const struct qp_sens_target *t = &r->targets[rep->ranking.order[k]];
        cJSON_AddNumberToObject(jscores, t->name, t->score);
        cJSON *obj = cJSON_CreateObject();
        if (!obj) return 0;
        cJSON_AddItemToArray(jt, obj);
        cJSON_AddNumberToObject(obj, "rank", (double)(k + 1));
        cJSON_AddStringToObject(obj, "name", t->name);
        cJSON_AddStringToObject(obj, "op_type", t->op_type);
        cJSON_AddNumberToObject(obj, "score", t->score);
        cJSON_AddNumberToObject(obj, "edges", (double)(t->n_edges + t->n_scope_edges));
        cJSON_AddNumberToObject(obj, "weights", (double)(t->n_weights + t->n_scope_weights));
        if (scope_only(t)) cJSON_AddBoolToObject(obj, "scope_only", 1);
        if (o->sens.granularity == QP_SENS_OP_TYPE)
            cJSON_AddItemToObject(
                obj, "nodes",
                cJSON_CreateStringArray((const char *const *)t->nodes, (int)t->n_nodes));
    }
    for (size_t i = 0; i < r->n_targets; i++) {
        const struct qp_sens_target *t = &r->targets[i];
        if (t->state == QP_SENS_SCORED) continue;
        cJSON *obj = cJSON_CreateObject();
        if (!obj) return 0;
        cJSON_AddItemToArray(t->state == QP_SENS_UNPROBED ? jun : jfail, obj);
        cJSON_AddStringToObject(obj, "name", t->name);
        cJSON_AddStringToObject(obj, "op_type", t->op_type);
        cJSON_AddStringToObject(obj, t->state == QP_SENS_UNPROBED ? "reason" : "error", t->error);
    }
    return 1;
}

static int json_timings(cJSON *root, const struct qp_sensitivity_report *rep) {
    const struct qp_sens_result *r = rep->result;
    cJSON *tim = cJSON_AddObjectToObject(root, "timings");
    if (!tim) return 0;
    cJSON_AddNumberToObject(tim, "calibration_s", rep->calibration_seconds);
    cJSON_AddNumberToObject(tim, "reference_s", r->reference_seconds);
    cJSON_AddNumberToObject(tim, "probes_s", r->probe_seconds);
    cJSON_AddNumberToObject(tim, "total_s", qp_clock_seconds() - rep->t_start);
    cJSON_AddNumberToObject(tim, "reference_cpu_s", r->reference_cpu_seconds);
    cJSON_AddNumberToObject(tim, "probes_cpu_s", r->probe_cpu_seconds);
    cJSON_AddNumberToObject(tim, "total_cpu_s", qp_clock_cpu_seconds() - rep->c_start);
    cJSON_AddNumberToObject(tim, "nodes_executed", (double)r->nodes_executed);
    cJSON_AddNumberToObject(tim, "nodes_full_pass", (double)r->nodes_full_pass);
    cJSON_AddNumberToObject(tim, "probe_workers", (double)r->n_probe_workers);
    return 1;
}

/* Adds `v` to the number member `key` of `o`. */
static void json_add_to(cJSON *o, const char *key, double v) {
    cJSON *f = cJSON_GetObjectItemCaseSensitive(o, key);
    cJSON_SetNumberValue(f, f->valuedouble + v);
}

/* The breakdown of the scored targets and the exclusions by op type. */
static int json_by_op_type(cJSON *ex, const struct qp_sensitivity_report *rep) {
    const struct qp_sens_result *r = rep->result;
    const struct qp_sens_exclusions *x = &rep->ex;
    cJSON *bop = cJSON_AddObjectToObject(ex, "by_op_type");
    if (!bop) return 0;
    for (size_t k = 0; k < rep->ranking.n_scored; k++) {
        const struct qp_sens_target *t = &r->targets[rep->ranking.order[k]];
        cJSON *obj = cJSON_GetObjectItemCaseSensitive(bop, t->op_type);
        if (!obj) {
            if (!(obj = cJSON_AddObjectToObject(bop, t->op_type))) return 0;
            cJSON_AddNumberToObject(obj, "targets", 0);
            cJSON_AddNumberToObject(obj, "excluded", 0);
            cJSON_AddNumberToObject(obj, "mass", 0);
            cJSON_AddNumberToObject(obj, "excluded_mass", 0);
        }
        int is_ex = 0;
        for (size_t q = 0; q < x->n_excluded && !is_ex; q++)
            is_ex = x->excluded[q] == rep->ranking.order[k];
        json_add_to(obj, "targets", 1);
        json_add_to(obj, "mass", t->score);
        if (is_ex) {
            json_add_to(obj, "excluded", 1);
            json_add_to(obj, "excluded_mass", t->score);
        }
    }
    return 1;
}

static int json_exclusions(cJSON *root, const struct qp_sensitivity_run_options *o,
                           const struct qp_sensitivity_report *rep) {
    const struct qp_sens_exclusions *x = &rep->ex;
    const struct qp_pick_options *po = &o->pick;
    int budget = x->budget;
    cJSON *ex = cJSON_AddObjectToObject(root, "exclusions");
    if (!ex) return 0;
    cJSON_AddStringToObject(ex, "mode", pick_mode(o));
    if (budget && x->goal.max_drift >= 0)
        cJSON_AddNumberToObject(ex, "max_output_drift", x->goal.max_drift);
    if (budget && x->goal.min_top1 > 0)
        cJSON_AddNumberToObject(ex, "min_top1_agreement", x->goal.min_top1);
    if (!budget && po->threshold_mode)
        cJSON_AddNumberToObject(ex, "threshold", po->threshold);
    else if (!budget)
        cJSON_AddNumberToObject(ex, "coverage", po->coverage);
    if (po->max_nodes) cJSON_AddNumberToObject(ex, "max_nodes", (double)po->max_nodes);
    cJSON_AddNumberToObject(ex, "min_score_floor", po->min_score_floor);
    if (o->blocks_path) {
        cJSON_AddStringToObject(ex, "blocks", o->blocks_path);
        cJSON_AddStringToObject(ex, "block_agg", block_agg_name(po->agg));
        cJSON *grs = cJSON_AddArrayToObject(ex, "groups");
        size_t ngc = budget ? x->n_budget_groups : x->pick->n_chosen_groups;
        for (size_t g = 0; grs && g < ngc; g++) {
            cJSON *go = cJSON_CreateObject();
            if (!go) return 0;
            cJSON_AddItemToArray(grs, go);
            cJSON_AddStringToObject(go, "name", x->pick->groups[g].name);
            cJSON_AddNumberToObject(go, "score", x->pick->groups[g].score);
        }
    }
    cJSON *je = cJSON_AddArrayToObject(ex, "excluded");
    if (!je) return 0;
    for (size_t k = 0; k < x->n_excluded; k++)
        cJSON_AddItemToArray(je, cJSON_CreateString(rep->result->targets[x->excluded[k]].name));
    cJSON *sum = cJSON_AddObjectToObject(ex, "summary");
    if (!sum) return 0;
    double total = rep->ranking.total_mass;
    size_t ns = rep->ranking.n_scored;
    cJSON_AddNumberToObject(sum, "coverage_pct",
                            total > 0 ? 100.0 * x->excluded_mass / total : 0.0);
    cJSON_AddNumberToObject(sum, "num_excluded", (double)x->n_excluded);
    cJSON_AddNumberToObject(sum, "num_previously_quantized", (double)ns);
    cJSON_AddNumberToObject(sum, "num_remaining_quantized", (double)(ns - x->n_excluded));
    cJSON_AddNumberToObject(sum, "excluded_mass", x->excluded_mass);
    cJSON_AddNumberToObject(sum, "total_mass", total);
    if (!json_by_op_type(ex, rep)) return 0;
    if (x->pick && x->pick->near_tie && !budget)
        cJSON_AddStringToObject(ex, "near_tie_warning", x->pick->warning);
    if (budget) {
        cJSON_AddBoolToObject(ex, "budget_met", x->budget_met);
        cJSON *js = cJSON_AddArrayToObject(ex, "budget_steps");
        for (size_t g = 0; js && g <= x->n_budget_candidates; g++) {
            if (!x->steps[g].measured) continue;
            cJSON *so = cJSON_CreateObject();
            if (!so) return 0;
            cJSON_AddItemToArray(js, so);
            cJSON_AddNumberToObject(so, "excluded_groups", (double)g);
            cJSON_AddNumberToObject(so, "drift", x->steps[g].drift);
            if (x->steps[g].top1 >= 0)
                cJSON_AddNumberToObject(so, "top1_agreement", x->steps[g].top1);
        }
    }
    return 1;
}

static cJSON *json_report(const struct qp_sensitivity_run_options *o,
                          const struct qp_sensitivity_report *rep) {
    const struct qp_sens_options *so = &o->sens;
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    char absbuf[PATH_MAX];
    const char *onnx = o->onnx_path;
    cJSON_AddStringToObject(root, "onnx_path", realpath(onnx, absbuf) ? absbuf : onnx);
    cJSON_AddStringToObject(root, "calibration_source", rep->synthetic ? "synthetic" : "real");
    cJSON_AddStringToObject(root, "calibration_data", rep->calibration_data);
    if (o->ranges_in) {
        cJSON_AddStringToObject(root, "ranges_in", o->ranges_in);
        cJSON_AddStringToObject(root, "calibration_method",
                                rep->ranges_method ? rep->ranges_method : "unknown");
    } else {
        cJSON_AddStringToObject(root, "calibration_method", qp_calib_method_name(o->method));
    }
    if (!o->ranges_in && o->method == QP_CALIB_PERCENTILE && o->percentile > 0)
        cJSON_AddNumberToObject(root, "percentile", o->percentile);
    cJSON_AddNumberToObject(root, "num_calibration_samples", (double)rep->n_calib_samples);
    cJSON_AddNumberToObject(root, "num_evaluation_samples", (double)rep->result->n_samples);
    cJSON_AddStringToObject(root, "metric", qp_sens_metric_name(so->metric));
    cJSON_AddStringToObject(root, "granularity", qp_sens_granularity_name(so->granularity));
    cJSON_AddStringToObject(root, "target_precision", so->qtype == QP_DTYPE_INT8 ? "int8" : "fp8");
    cJSON_AddStringToObject(root, "weight_clipping", so->weight_clip_mse ? "mse" : "absmax");
    cJSON_AddStringToObject(root, "probe", qp_sens_probe_name(so->probe));
    cJSON_AddStringToObject(root, "placement", o->placement_in ? o->placement_in : "trt policy");
    cJSON_AddBoolToObject(root, "incremental", so->incremental);
    if (!json_targets(root, o, rep) || !json_timings(root, rep) ||
        (rep->picking && !json_exclusions(root, o, rep))) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

enum qp_status qp_sensitivity_report_json(const struct qp_sensitivity_run_options *o,
                                          const struct qp_sensitivity_report *r, char **text_out,
                                          struct qp_error *err) {
    cJSON *root = json_report(o, r);
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) return nomem(err);
    size_t n = strlen(text);
    char *t2 = realloc(text, n + 2);
    if (!t2) {
        free(text);
        return nomem(err);
    }
    memcpy(t2 + n, "\n", 2);
    *text_out = t2;
    return QP_OK;
}
