/* The autotune search (pipeline/autotune.h; docs/autotune.md "The search"). */
#include "pipeline/autotune.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autotune/cache.h"
#include "autotune/pattern.h"
#include "autotune/region.h"
#include "autotune/scheme.h"
#include "autotune/subgraph.h"
#include "core/clock.h"
#include "core/numtext.h"
#include "pipeline/autotune_filter.h"
#include "placement/diff.h"
#include "ir/ir.h"
#include "qplace/calib.h"
#include "qplace/model.h"
#include "qplace/placement.h"
#include "quant/writer.h"

/* How far (op-sequence edit distance) a cached pattern may be from a pattern to seed it. */
#define CACHE_MAX_DISTANCE 4

int qp_autotune_mode_parse(const char *s) {
    static const char *const names[QP_AUTOTUNE_MODE_COUNT] = {"quick", "default", "extensive"};
    for (int i = 0; s && i < QP_AUTOTUNE_MODE_COUNT; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

int qp_autotune_timing_parse(const char *s) {
    static const char *const names[QP_AUTOTUNE_TIMING_COUNT] = {"auto", "whole", "region",
                                                                "region_all"};
    for (int i = 0; s && i < QP_AUTOTUNE_TIMING_COUNT; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

size_t qp_autotune_mode_schemes(enum qp_autotune_mode m) {
    static const size_t n[QP_AUTOTUNE_MODE_COUNT] = {8, 16, 32};
    _Static_assert(sizeof n / sizeof n[0] == QP_AUTOTUNE_MODE_COUNT, "a row per mode");
    return (unsigned)m < QP_AUTOTUNE_MODE_COUNT ? n[m] : n[QP_AUTOTUNE_DEFAULT];
}

void qp_autotune_options_default(struct qp_autotune_options *o) {
    memset(o, 0, sizeof *o);
    o->mode = QP_AUTOTUNE_DEFAULT;
    o->high_precision = QP_DTYPE_FLOAT;
    qp_latency_race_options_default(&o->race);
    o->race.stop_without_gain = 1; /* only FASTER is acted on (the region check sets it off) */
    o->race.early_reject = 1;      /* so a slower candidate may stop after one round */
    o->race.replicate = 1;         /* a FASTER verdict holds on fresh sessions too */
    o->guard_min_effect = 0.02;
    o->cache_patience = 2;
    o->max_output_drift = -1;
    o->drift_samples = QP_AUTOTUNE_DRIFT_SAMPLES;
}

void qp_autotune_report_free(struct qp_autotune_report *r) {
    if (!r) return;
    free(r->output_dir);
    qp_placement_free(r->best);
    qp_placement_free(r->seed);
    free(r->frontier);
    free(r);
}

/* The state of one run. */
struct tune {
    const struct qp_autotune_options *o;
    struct qp_autotune_report *r;
    struct qp_model *m; /* at opset >= 19, the trt policy's model */
    struct qp_regions *rs;
    struct qp_ranges *ranges;
    struct qp_pattern_cache *cache_in, *cache_out;
    FILE *log;
    char *cand_path, *best_path, *ref_path;
    double t0;
    /* Resume: the steps of the state file found at the start (NULL: none), whether they still
     * match what the search measures, and the state written as the search goes. */
    cJSON *prev;
    int prev_valid;
    cJSON *state, *steps;
    char *state_path;
    size_t step;
    int last_replayed; /* the race being logged came from the state file */
    int *region_in;    /* node_filter_list: region r is searched; NULL: every region */
    /* Accuracy (autotune_drift.h): the evaluator, the state file's drift header when it
     * describes the same measurement (else its drifts are measured again), the best's drift
     * and the scheme it came from, and every measured placement for pareto.json. */
    struct qp_autotune_drift *drift;
    cJSON *prev_drift;
    int prev_drift_ok;
    double bound; /* < 0: none */
    long best_pattern;
    cJSON *best_points;
    cJSON *measured;
    cJSON *best_entry; /* the adopted scheme's entry in `measured` (borrowed); NULL: the seed */
    /* Region-local timing (NULL/0 with whole-model timing): each pattern's node set, the
     * tensors entering them from one run of the whole model, the sub-model files, the whole
     * best's median as estimated (measured once, then lowered by each adopted gain), and the
     * current pattern's sub-model size and scaled minimum effect, for the log. */
    int region, region_all;
    unsigned char **keep;
    /* per pattern: searched instances / instances in its sub-model (1: all of them, else
     * representatives: a FASTER sub-model race is confirmed as whole models) */
    double *weight;
    struct qp_subgraph_capture *cap;
    char *cand_sub_path, *best_sub_path;
    /* Representatives' confirmation (confirm): the current pattern's every-instance sub-model
     * (NULL until its first confirmation), its files, its scaled minimum effect and node count,
     * whether its best file lags behind the best, and `confirming` while its race is accounted. */
    struct qp_model *sub_all;
    char *cand_all_path, *best_all_path;
    double all_min_effect;
    size_t all_nodes;
    int best_all_stale, confirming;
    double whole_ms, sub_min_effect, sub_weight;
    size_t sub_nodes;
    /* Borderline sub-model races raced again as whole models (escalate): `escalating` while
     * that race is accounted, `escalate` the decision recorded with the sub-model race, and
     * whether the whole best file (best_path) lags behind the best (region adoptions write only
     * sub-models). */
    int escalating, escalate, whole_best_stale;
};

/* The timing a race of the search uses, as log.jsonl and the state file name it. */
static const char *timing_name(const struct tune *t) {
    return t->escalating   ? "escalated"
           : t->confirming ? "confirmed"
           : t->region_all ? "region_all"
           : t->region     ? "region"
                           : "whole";
}

/* The minimum effect of a sub-model race: the whole model's, scaled by whole / sub-model
 * latency, so that the sub-model must gain as many milliseconds as the whole model would
 * (with representatives: as many as the whole model would gain divided by the weight, each
 * timed instance standing for `weight` searched ones). */
static double scaled_effect(const struct tune *t, double sub_ms, double w) {
    double e = t->o->race.min_effect;
    return sub_ms > 0 && t->whole_ms > sub_ms * w ? e * t->whole_ms / (sub_ms * w) : e;
}
static double region_effect(const struct tune *t, double sub_ms) {
    return scaled_effect(t, sub_ms, t->sub_weight >= 1 ? t->sub_weight : 1);
}

/* The whole model's gain in ms that a sub-model race's medians (candidate cm, best bm) stand
 * for. */
static double region_gain(const struct tune *t, double cm, double bm) {
    return (bm - cm) * (t->sub_weight >= 1 ? t->sub_weight : 1);
}

/* 1 while the current pattern's sub-model leaves instances out: its FASTER and borderline
 * verdicts are confirmed on the every-instance sub-model (confirm). */
static int region_confirms(const struct tune *t) {
    return t->region && !t->escalating && !t->confirming && t->sub_weight > 1;
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s/%s", dir, name);
    return s;
}

static int amax_from_ranges(void *user, const char *tensor, float *amax_out) {
    const struct qp_range *r = qp_ranges_find(user, tensor);
    if (!r) return 0;
    *amax_out = r->amax;
    return 1;
}

/* The Q/DQ writer's options of every model the search writes: the calibrated ranges' scales. */
static void writer_options(const struct tune *t, struct qp_writer_options *wo) {
    qp_writer_options_default(wo);
    wo->high_precision = t->o->high_precision;
    wo->qtype = t->o->quant_mode == QP_QUANT_FP8 ? QP_DTYPE_FLOAT8E4M3FN : QP_DTYPE_INT8;
    wo->amax = amax_from_ranges;
    wo->amax_user = t->ranges;
}

/* Writes model `base` (t->m or a sub-model of it) with placement `p` to `path`. The writer adds
 * nodes and initializers and converts with new buffers, so the copy it writes into may borrow
 * base's initializer bytes (ResNet-50: 100 MB not serialized and parsed again per race). */
static enum qp_status write_model_of(struct tune *t, const struct qp_model *base,
                                     const struct qp_placement *p, const char *path,
                                     struct qp_error *err) {
    struct qp_model *c = NULL;
    enum qp_status st = qp_model_clone_shared(base, &c, err);
    if (st != QP_OK) return st;
    struct qp_writer_options wo;
    writer_options(t, &wo);
    if ((st = qp_qdq_write(c, p, &wo, NULL, err)) == QP_OK)
        st = qp_model_save_file(c, path, NULL, err);
    qp_model_free(c);
    return st;
}

/* Writes the whole model with placement `p` to `path`. */
static enum qp_status write_model(struct tune *t, const struct qp_placement *p, const char *path,
                                  struct qp_error *err) {
    return write_model_of(t, t->m, p, path, err);
}

static double median_of(const double *x, size_t n) {
    if (!n) return 0;
    double *s = malloc(n * sizeof *s);
    if (!s) return 0;
    memcpy(s, x, n * sizeof *s);
    for (size_t i = 1; i < n; i++) /* insertion sort: a few hundred samples at most */
        for (size_t j = i; j > 0 && s[j - 1] > s[j]; j--) {
            double v = s[j];
            s[j] = s[j - 1];
            s[j - 1] = v;
        }
    double m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    free(s);
    return m;
}

/* One log.jsonl line: a race (res), a scheme that could not be measured (error) or one over
 * the drift bound (neither). A write failure is QP_ERR_IO. */
static enum qp_status log_line(struct tune *t, size_t pattern, const char *source,
                               const uint64_t *bits, const struct qp_latency_race_result *res,
                               int adopted, const char *error, double drift, struct qp_error *err) {
    const struct qp_pattern *pat = &t->rs->patterns[pattern];
    cJSON *o = cJSON_CreateObject(), *pts = cJSON_CreateArray();
    if (!o || !pts) goto nomem;
    cJSON_AddNumberToObject(o, "pattern", (double)pattern);
    cJSON_AddStringToObject(o, "signature", pat->signature);
    cJSON_AddNumberToObject(o, "regions", (double)pat->n_instances);
    cJSON_AddNumberToObject(o, "n_points", (double)pat->n_points);
    cJSON_AddStringToObject(o, "source", source);
    cJSON_AddStringToObject(o, "timing", timing_name(t));
    if (t->region && !t->escalating) {
        cJSON_AddNumberToObject(o, "sub_nodes", (double)t->sub_nodes);
        cJSON_AddNumberToObject(o, "weight", t->sub_weight >= 1 ? t->sub_weight : 1);
        cJSON_AddNumberToObject(o, "min_effect", t->sub_min_effect);
        if (res) cJSON_AddBoolToObject(o, "escalated", t->escalate);
    }
    for (size_t k = 0; k < pat->n_points; k++)
        if (qp_scheme_get(bits, k)) cJSON_AddItemToArray(pts, cJSON_CreateNumber((double)k));
    cJSON_AddItemToObject(o, "points", pts);
    pts = NULL;
    if (res) {
        cJSON_AddNumberToObject(o, "candidate_median_ms", res->verdict.median_a_ms);
        cJSON_AddNumberToObject(o, "best_median_ms", res->verdict.median_b_ms);
        cJSON_AddItemToObject(o, "candidate_ms",
                              cJSON_CreateDoubleArray(res->cand_ms, (int)res->n_cand));
        cJSON_AddItemToObject(o, "best_ms",
                              cJSON_CreateDoubleArray(res->best_ms, (int)res->n_best));
        cJSON_AddNumberToObject(o, "rounds", (double)res->n_rounds);
        cJSON_AddStringToObject(o, "stop", qp_latency_stop_name(res->stop));
        cJSON_AddNumberToObject(o, "p_value", res->verdict.p_value);
        cJSON_AddStringToObject(o, "verdict", qp_latency_verdict_name(res->verdict.verdict));
    } else if (error) {
        cJSON_AddStringToObject(o, "verdict", "error");
        cJSON_AddStringToObject(o, "error", error);
    } else {
        cJSON_AddStringToObject(o, "verdict", "rejected_drift");
        cJSON_AddNumberToObject(o, "drift_bound", t->bound);
    }
    if (isfinite(drift)) cJSON_AddNumberToObject(o, "drift", drift);
    cJSON_AddBoolToObject(o, "adopted", adopted);
    if (!error) cJSON_AddBoolToObject(o, "resumed", t->last_replayed);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) goto nomem;
    int bad = fprintf(t->log, "%s\n", s) < 0 || fflush(t->log) != 0;
    free(s);
    if (bad)
        return qp_error_set(err, QP_ERR_IO, "autotune: cannot write log.jsonl: %s",
                            strerror(errno));
    return QP_OK;
nomem:
    cJSON_Delete(o);
    cJSON_Delete(pts);
    return qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory writing the log");
}

/* ---- resume: autotune_state.json ------------------------------------------------------ */

static cJSON *points_json(const uint64_t *bits, size_t n_points) {
    cJSON *a = cJSON_CreateArray();
    for (size_t k = 0; a && k < n_points; k++)
        if (qp_scheme_get(bits, k)) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)k));
    return a;
}

static int samples_from(const cJSON *a, double **out, size_t *n_out) {
    int n = cJSON_GetArraySize(a);
    if (!cJSON_IsArray(a) || n < 1) return 0;
    double *x = malloc((size_t)n * sizeof *x);
    if (!x) return 0;
    for (int i = 0; i < n; i++) {
        const cJSON *v = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0)) {
            free(x);
            return 0;
        }
        x[i] = v->valuedouble;
    }
    *out = x;
    *n_out = (size_t)n;
    return 1;
}

/* Step t->step of the state file when it measured this scheme of this pattern: its race
 * result in *out (owned, as qp_latency_race's) and, when `escalate` is not NULL, whether the
 * step raced its scheme again as whole models. 0 when there is none; the first mismatch ends
 * the replay (the search took another way from there). */
static int state_replay(struct tune *t, const struct qp_pattern *pat, const uint64_t *bits,
                        struct qp_latency_race_result *out, int *escalate) {
    if (!t->prev_valid) return 0;
    const cJSON *st = cJSON_GetArrayItem(t->prev, (int)t->step);
    const cJSON *sig = cJSON_GetObjectItemCaseSensitive(st, "signature");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(st, "verdict");
    const cJSON *pv = cJSON_GetObjectItemCaseSensitive(st, "p_value");
    const cJSON *rounds = cJSON_GetObjectItemCaseSensitive(st, "rounds");
    const cJSON *timing = cJSON_GetObjectItemCaseSensitive(st, "timing"); /* absent: whole */
    const char *was = cJSON_IsString(timing) ? timing->valuestring : "whole";
    cJSON *want = points_json(bits, pat->n_points);
    int ok = st && cJSON_IsString(sig) && strcmp(sig->valuestring, pat->signature) == 0 && want &&
             cJSON_Compare(cJSON_GetObjectItemCaseSensitive(st, "points"), want, 1) &&
             cJSON_IsString(ver) && cJSON_IsNumber(pv) && cJSON_IsNumber(rounds) &&
             strcmp(was, timing_name(t)) == 0;
    if (escalate) *escalate = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "escalate"));
    cJSON_Delete(want);
    memset(out, 0, sizeof *out);
    int v = -1;
    for (int i = 0; ok && i < QP_LATENCY_VERDICT_COUNT; i++)
        if (strcmp(ver->valuestring, qp_latency_verdict_name(i)) == 0) v = i;
    ok = ok && v >= 0 &&
         samples_from(cJSON_GetObjectItemCaseSensitive(st, "candidate_ms"), &out->cand_ms,
                      &out->n_cand) &&
         samples_from(cJSON_GetObjectItemCaseSensitive(st, "best_ms"), &out->best_ms, &out->n_best);
    if (!ok) {
        qp_latency_race_result_release(out);
        t->prev_valid = 0;
        return 0;
    }
    out->n_rounds = (size_t)rounds->valuedouble;
    out->stop = v == QP_LATENCY_UNRESOLVED ? QP_LATENCY_STOP_MAX_ROUNDS : QP_LATENCY_STOP_RESOLVED;
    /* the stop as recorded (state files before it was recorded: from the verdict, above) */
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(st, "stop");
    if (v == QP_LATENCY_UNRESOLVED && cJSON_IsString(stop) &&
        strcmp(stop->valuestring, qp_latency_stop_name(QP_LATENCY_STOP_NOT_REPLICATED)) == 0)
        out->stop = QP_LATENCY_STOP_NOT_REPLICATED;
    out->verdict.verdict = v;
    out->verdict.na = out->n_cand;
    out->verdict.nb = out->n_best;
    out->verdict.median_a_ms = median_of(out->cand_ms, out->n_cand);
    out->verdict.median_b_ms = median_of(out->best_ms, out->n_best);
    out->verdict.p_value = pv->valuedouble;
    if (out->verdict.median_b_ms > 0)
        out->verdict.rel_diff =
            (out->verdict.median_a_ms - out->verdict.median_b_ms) / out->verdict.median_b_ms;
    return 1;
}

/* Before a race: step t->step of the state file replayed into *res (*replayed 1, and
 * *escalate as state_replay sets it), else, when the caller asked the search to stop, the
 * search marked interrupted. Returns 0 then (nothing is to be measured or accounted), else 1. */
static int replay_or_go(struct tune *t, const struct qp_pattern *pat, const uint64_t *bits,
                        struct qp_latency_race_result *res, int *replayed, int *escalate) {
    *replayed = state_replay(t, pat, bits, res, escalate);
    if (!*replayed && t->o->stop && *t->o->stop) {
        t->r->interrupted = 1;
        return 0;
    }
    return 1;
}

static enum qp_status state_write(struct tune *t, struct qp_error *err);

/* The state file's numbers read back bit for bit (core/numtext.h), so that a resumed run
 * recomputes exactly the medians, verdicts and drift checks it replays. A NaN or infinity is
 * null, as cJSON prints it. */
static cJSON *exact_number(double v) {
    char b[QP_DOUBLE_TEXT];
    return isfinite(v) ? cJSON_CreateRaw(qp_double_text(v, b)) : cJSON_CreateNull();
}

static void add_exact(cJSON *o, const char *key, double v) {
    cJSON_AddItemToObject(o, key, exact_number(v));
}

static void add_exact_array(cJSON *o, const char *key, const double *x, size_t n) {
    cJSON *a = cJSON_AddArrayToObject(o, key);
    for (size_t i = 0; a && i < n; i++)
        cJSON_AddItemToArray(a, exact_number(x[i]));
}

/* Appends a step to the state and writes the file atomically: a race (res), or a scheme
 * rejected by the drift bound (res NULL). */
static enum qp_status state_record(struct tune *t, const struct qp_pattern *pat,
                                   const uint64_t *bits, const struct qp_latency_race_result *res,
                                   double drift, int adopted, struct qp_error *err) {
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(t->steps, o)) {
        cJSON_Delete(o);
        return qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
    }
    cJSON_AddStringToObject(o, "signature", pat->signature);
    cJSON_AddItemToObject(o, "points", points_json(bits, pat->n_points));
    cJSON_AddStringToObject(o, "timing", timing_name(t));
    if (res && t->region && !t->escalating) cJSON_AddBoolToObject(o, "escalate", t->escalate);
    if (res) {
        add_exact_array(o, "candidate_ms", res->cand_ms, res->n_cand);
        add_exact_array(o, "best_ms", res->best_ms, res->n_best);
        cJSON_AddNumberToObject(o, "rounds", (double)res->n_rounds);
        cJSON_AddStringToObject(o, "stop", qp_latency_stop_name(res->stop));
        add_exact(o, "p_value", res->verdict.p_value);
    }
    cJSON_AddStringToObject(o, "verdict",
                            res ? qp_latency_verdict_name(res->verdict.verdict) : "rejected_drift");
    if (isfinite(drift)) add_exact(o, "drift", drift);
    cJSON_AddBoolToObject(o, "adopted", adopted);
    return state_write(t, err);
}

/* Writes the state file atomically. */
static enum qp_status state_write(struct tune *t, struct qp_error *err) {
    char *text = cJSON_PrintUnformatted(t->state);
    size_t n = strlen(t->state_path) + 8;
    char *tmp = malloc(n);
    if (!text || !tmp) {
        free(text);
        free(tmp);
        return qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
    }
    snprintf(tmp, n, "%s.tmp", t->state_path);
    FILE *f = fopen(tmp, "w");
    int bad = !f || fprintf(f, "%s\n", text) < 0;
    if (f && fclose(f) != 0) bad = 1;
    if (!bad && rename(tmp, t->state_path) != 0) bad = 1;
    if (bad) unlink(tmp);
    free(text);
    free(tmp);
    if (bad)
        return qp_error_set(err, QP_ERR_IO, "autotune: cannot write '%s': %s", t->state_path,
                            strerror(errno));
    return QP_OK;
}

/* Reads the state file when it exists: steps measured by an earlier run on the same model. */
static enum qp_status state_open(struct tune *t, struct qp_error *err) {
    t->state = cJSON_CreateObject();
    t->steps = cJSON_CreateArray();
    if (!t->state || !t->steps) {
        cJSON_Delete(t->steps);
        t->steps = NULL;
        return qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
    }
    cJSON_AddStringToObject(t->state, "format", "qplace.autotune_state");
    cJSON_AddNumberToObject(t->state, "version", 1);
    cJSON_AddStringToObject(t->state, "model", t->o->onnx_path);
    cJSON_AddItemToObject(t->state, "steps", t->steps);
    FILE *f = fopen(t->state_path, "rb");
    if (!f) return QP_OK; /* a fresh start */
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            char *nt = realloc(text, cap = cap ? cap * 2 : 65536);
            if (!nt) {
                fclose(f);
                free(text);
                return qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
            }
            text = nt;
        }
        size_t got = fread(text + len, 1, 4096, f);
        len += got;
        if (got < 4096) break;
    }
    fclose(f);
    text[len] = 0;
    cJSON *doc = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(doc, "format");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(doc, "model");
    cJSON *steps = cJSON_GetObjectItemCaseSensitive(doc, "steps");
    if (!doc || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "qplace.autotune_state") != 0 ||
        !cJSON_IsString(model) || !cJSON_IsArray(steps)) {
        cJSON_Delete(doc);
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "autotune: '%s' is not an autotune state file (format "
                            "qplace.autotune_state); remove it to start afresh",
                            t->state_path);
    }
    if (strcmp(model->valuestring, t->o->onnx_path) != 0) {
        cJSON_Delete(doc);
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "autotune: '%s' holds a search of '%s', not of '%s'; remove it or "
                            "choose another --output_dir",
                            t->state_path, model->valuestring, t->o->onnx_path);
    }
    t->prev = cJSON_DetachItemViaPointer(doc, steps);
    t->prev_drift = cJSON_DetachItemFromObjectCaseSensitive(doc, "drift");
    cJSON_Delete(doc);
    t->prev_valid = 1;
    return QP_OK;
}

/* ---- accuracy: drift per placement (autotune_drift.h) ----------------------------------- */

/* What the drifts of a state file were measured on; a state measured otherwise is replayed
 * for its races only, its drifts measured again. */
static cJSON *drift_header(const struct tune *t) {
    cJSON *h = cJSON_CreateObject();
    const char *path = qp_autotune_drift_path(t->drift);
    if (!h) return NULL;
    cJSON_AddStringToObject(h, "metric", "kl_div");
    cJSON_AddStringToObject(h, "source", qp_autotune_drift_source(t->drift));
    if (path)
        cJSON_AddStringToObject(h, "path", path);
    else
        cJSON_AddNullToObject(h, "path");
    cJSON_AddNumberToObject(h, "samples", (double)qp_autotune_drift_samples(t->drift));
    cJSON_AddNumberToObject(h, "quant_type", (double)t->o->quant_mode);
    return h;
}

/* The seed's drift (replayed from the state when it measured the same way), the bound, and
 * the state's drift header. */
/* The best is the seed: its drift, no adopted pattern, scheme or pareto.json entry. */
static void best_is_seed(struct tune *t) {
    t->r->best_drift = t->r->seed_drift;
    t->best_pattern = -1;
    t->best_entry = NULL;
    cJSON_Delete(t->best_points);
    t->best_points = NULL;
}

static enum qp_status drift_setup(struct tune *t, struct qp_error *err) {
    struct qp_autotune_report *r = t->r;
    cJSON *h = drift_header(t);
    if (!h) return qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
    cJSON *pd = cJSON_DetachItemFromObjectCaseSensitive(t->prev_drift, "seed_drift");
    t->prev_drift_ok = t->prev_drift && cJSON_Compare(t->prev_drift, h, 1);
    enum qp_status st = QP_OK;
    if (t->prev_drift_ok && cJSON_IsNumber(pd) && isfinite(pd->valuedouble))
        r->seed_drift = pd->valuedouble;
    else
        st = qp_autotune_drift_measure(t->drift, r->seed, &r->seed_drift, err);
    cJSON_Delete(pd);
    if (st != QP_OK) {
        cJSON_Delete(h);
        return qp_error_prefix(err, "autotune: the seed placement");
    }
    add_exact(h, "seed_drift", r->seed_drift);
    cJSON_AddItemToObject(t->state, "drift", h);
    r->max_output_drift = t->o->max_output_drift;
    r->seed_over_bound = r->max_output_drift >= 0 && r->seed_drift > r->max_output_drift;
    t->bound = r->max_output_drift < 0 ? -1
               : r->seed_over_bound    ? r->seed_drift
                                       : r->max_output_drift;
    r->drift_bound = t->bound;
    r->drift_source = qp_autotune_drift_source(t->drift);
    r->drift_path = qp_autotune_drift_path(t->drift);
    r->drift_samples = qp_autotune_drift_samples(t->drift);
    best_is_seed(t);
    return QP_OK;
}

/* The drift step t->step of the state file recorded for this scheme, when it matches. */
static int drift_replay(const struct tune *t, const struct qp_pattern *pat, const uint64_t *bits,
                        double *drift) {
    if (!t->prev_valid || !t->prev_drift_ok) return 0;
    const cJSON *st = cJSON_GetArrayItem(t->prev, (int)t->step);
    const cJSON *sig = cJSON_GetObjectItemCaseSensitive(st, "signature");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(st, "drift");
    if (!cJSON_IsString(sig) || strcmp(sig->valuestring, pat->signature) != 0 ||
        !cJSON_IsNumber(d) || !isfinite(d->valuedouble))
        return 0;
    cJSON *want = points_json(bits, pat->n_points);
    int ok = want && cJSON_Compare(cJSON_GetObjectItemCaseSensitive(st, "points"), want, 1);
    cJSON_Delete(want);
    if (ok) *drift = d->valuedouble;
    return ok;
}

/* A replayed step whose decision differs from the state's (another bound): the search takes
 * another way from here, so the rest of the state is not replayed. */
static void replay_decision(struct tune *t, size_t step, int adopted) {
    const cJSON *a =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(t->prev, (int)step), "adopted");
    if (cJSON_IsBool(a) && cJSON_IsTrue(a) != adopted) t->prev_valid = 0;
}

/* Appends a measured placement to pareto.json's list; `estimated`: ms is a whole-model
 * estimate from a sub-model race (region timing), not a measured whole-model median. */
static enum qp_status measured_add(struct tune *t, const char *label, double ms, double drift,
                                   long pattern, const char *sig, cJSON *points, int final,
                                   int estimated, struct qp_error *err) {
    cJSON *e = qp_autotune_pareto_entry(label, ms, drift, pattern, sig, points);
    if (!e || !cJSON_AddBoolToObject(e, "final", final) ||
        !cJSON_AddBoolToObject(e, "estimated", estimated) ||
        !cJSON_AddItemToArray(t->measured, e)) {
        cJSON_Delete(e);
        return qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
    }
    return QP_OK;
}

/* Marks entry e (NULL: none) as the placement optimized_final.onnx holds. */
static void mark_final(cJSON *e) {
    if (e) cJSON_ReplaceItemInObjectCaseSensitive(e, "final", cJSON_CreateTrue());
}

enum { DRIFT_RACE = 0, DRIFT_REJECTED, DRIFT_FAILED, DRIFT_STOP };

/* The drift of scheme `bits` of pattern p applied as `cand` (replayed or measured) into
 * *drift, and what follows in *what: DRIFT_RACE, DRIFT_REJECTED (over the bound: logged and
 * recorded, not raced), DRIFT_FAILED (not measurable: logged) or DRIFT_STOP (Ctrl-C). */
static enum qp_status scheme_drift(struct tune *t, size_t p, const uint64_t *bits,
                                   const struct qp_placement *cand, int from_cache, double *drift,
                                   int *what, struct qp_error *err) {
    const struct qp_pattern *pat = &t->rs->patterns[p];
    const char *source = from_cache ? "cache" : "generated";
    int replayed = drift_replay(t, pat, bits, drift);
    *what = DRIFT_RACE;
    if (!replayed) {
        if (t->o->stop && *t->o->stop) {
            t->r->interrupted = 1;
            *what = DRIFT_STOP;
            return QP_OK;
        }
        struct qp_error derr = {0};
        enum qp_status st = qp_autotune_drift_measure(t->drift, cand, drift, &derr);
        if (st == QP_ERR_BAD_INPUT) {
            *what = DRIFT_FAILED;
            t->r->n_skipped++;
            return log_line(t, p, source, bits, NULL, 0, derr.msg, NAN, err);
        }
        if (st != QP_OK) {
            *err = derr;
            return st;
        }
        t->r->n_drift_measured++;
    } else {
        t->r->n_drift_replayed++;
    }
    if (!(t->bound >= 0 && *drift > t->bound)) return QP_OK;
    *what = DRIFT_REJECTED;
    t->r->n_rejected_drift++;
    t->last_replayed = replayed;
    if (replayed) replay_decision(t, t->step, 0);
    t->step++;
    enum qp_status st = state_record(t, pat, bits, NULL, *drift, 0, err);
    if (st == QP_OK) st = log_line(t, p, source, bits, NULL, 0, NULL, *drift, err);
    return st;
}

/* pareto.json: the seed, every raced scheme (already listed), the best as the guard measured
 * it and the model without Q/DQ; the frontier into the report. */
static enum qp_status write_pareto(struct tune *t, struct qp_error *err) {
    struct qp_autotune_report *r = t->r;
    int kept = r->guard_passed;
    cJSON *bp = t->best_points ? cJSON_Duplicate(t->best_points, 1) : NULL;
    const char *bsig = t->best_pattern >= 0 ? t->rs->patterns[t->best_pattern].signature : NULL;
    enum qp_status st = measured_add(t, "seed", r->seed_median_ms, r->seed_drift, -1, NULL, NULL,
                                     kept && !t->best_entry, 0, err);
    if (kept) mark_final(t->best_entry);
    if (st == QP_OK)
        st = measured_add(t, "best", r->guard.median_a_ms, r->best_drift, t->best_pattern, bsig, bp,
                          kept, 0, err);
    else
        cJSON_Delete(bp);
    if (st == QP_OK)
        st = measured_add(t, "without_qdq", r->reference_median_ms, 0, -1, NULL, NULL, !kept, 0,
                          err);
    r->final_drift = kept ? r->best_drift : 0;
    char *path = join(r->output_dir, "pareto.json");
    if (st == QP_OK && !path) st = qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
    struct qp_autotune_pareto_meta meta = {
        .model = t->o->onnx_path,
        .max_output_drift = t->o->max_output_drift,
        .source = r->drift_source,
        .path = r->drift_path,
        .samples = r->drift_samples,
    };
    if (st == QP_OK)
        st = qp_autotune_pareto_write(t->measured, path, &meta, &r->frontier, &r->n_frontier, err);
    free(path);
    return st;
}

/* Patterns in search order: largest total node count (over all instances) first. */
static size_t *pattern_order(const struct qp_regions *rs) {
    size_t np = rs->n_patterns;
    size_t *order = malloc((np ? np : 1) * sizeof *order);
    size_t *total = calloc(np ? np : 1, sizeof *total);
    if (!order || !total) {
        free(order);
        free(total);
        return NULL;
    }
    for (size_t r = 0; r < rs->n_regions; r++)
        if (rs->regions[r].pattern >= 0) total[rs->regions[r].pattern] += rs->regions[r].n_nodes;
    for (size_t i = 0; i < np; i++)
        order[i] = i;
    for (size_t i = 1; i < np; i++) /* stable insertion sort */
        for (size_t j = i; j > 0 && total[order[j - 1]] < total[order[j]]; j--) {
            size_t v = order[j];
            order[j] = order[j - 1];
            order[j - 1] = v;
        }
    free(total);
    return order;
}

/* The pattern cache's entry for `pat` (NULL: none, or no cache). */
static const struct qp_cache_entry *cache_entry(const struct tune *t,
                                                const struct qp_pattern *pat) {
    if (!t->cache_in) return NULL;
    int k = qp_pattern_cache_nearest(t->cache_in, pat, CACHE_MAX_DISTANCE, NULL);
    if (k >= 0 && t->cache_in->entries[k].n_points == pat->n_points &&
        t->cache_in->entries[k].n_schemes > 0)
        return &t->cache_in->entries[k];
    return NULL;
}

/* The schemes to try for pattern p: the pattern cache's first, then generated ones from the
 * best placement's scheme, no duplicates, at most `max`. Pointers into `gen` and the cache. */
static enum qp_status candidates(struct tune *t, size_t p, const uint64_t *seed_bits, size_t max,
                                 struct qp_scheme_list *gen, const uint64_t ***out,
                                 int **from_cache, size_t *n_out, struct qp_error *err) {
    const struct qp_pattern *pat = &t->rs->patterns[p];
    enum qp_status st = qp_schemes_generate(t->rs, p, seed_bits, 42 + (uint64_t)p, max, gen, err);
    if (st != QP_OK) return st;
    const struct qp_cache_entry *e = cache_entry(t, pat);
    size_t cap = gen->n + (e ? e->n_schemes : 0);
    const uint64_t **list = malloc((cap ? cap : 1) * sizeof *list);
    int *src = malloc((cap ? cap : 1) * sizeof *src);
    if (!list || !src) {
        free(list);
        free(src);
        return qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
    }
    size_t n = 0, words = QP_SCHEME_WORDS(pat->n_points);
    for (size_t pass = 0; pass < 2; pass++) {
        size_t m = pass == 0 ? (e ? e->n_schemes : 0) : gen->n;
        for (size_t i = 0; i < m && n < max; i++) {
            const uint64_t *b = pass == 0 ? e->schemes[i].bits : qp_scheme_list_at(gen, i);
            int dup = 0;
            for (size_t j = 0; j < n && !dup; j++)
                dup = memcmp(list[j], b, words * sizeof *b) == 0;
            if (dup) continue;
            list[n] = b;
            src[n++] = pass == 0;
        }
    }
    *out = list;
    *from_cache = src;
    *n_out = n;
    return QP_OK;
}

/* The schemes a pattern of n points is expected to get before its list is made. */
static size_t planned_schemes(size_t n_points, size_t max) {
    return n_points < 20 && ((size_t)1 << n_points) < max ? (size_t)1 << n_points : max;
}

/* A race just run or replayed, accounted for: the state file, the result's medians, the
 * pattern cache, pareto.json's list and log.jsonl. *adopt: the candidate was faster (its
 * drift, within the bound, was checked before the race). */
static enum qp_status account_race(struct tune *t, size_t p, const uint64_t *scheme,
                                   const uint64_t *cur, int from_cache, int replayed,
                                   const struct qp_latency_race_result *res, double drift,
                                   int *adopt, struct qp_error *err) {
    const struct qp_pattern *pat = &t->rs->patterns[p];
    *adopt = res->verdict.verdict == QP_LATENCY_FASTER && !region_confirms(t);
    t->r->n_not_replicated += res->stop == QP_LATENCY_STOP_NOT_REPLICATED;
    if (replayed) replay_decision(t, t->step, *adopt);
    t->step++;
    t->last_replayed = replayed;
    t->r->n_replayed += (size_t)replayed;
    enum qp_status st = state_record(t, pat, scheme, res, drift, *adopt, err);
    if (st != QP_OK) return st;
    double cm = median_of(res->cand_ms, res->n_cand), bm = median_of(res->best_ms, res->n_best);
    if (t->r->n_measured == 0 && !t->region) t->r->seed_median_ms = bm;
    t->r->n_measured++;
    if (!t->region) t->r->best_median_ms = *adopt ? cm : bm;
    /* the cache's medians compare schemes of one pattern: a borderline scheme's whole-model
     * race would not compare with its sub-model races */
    if (t->cache_out && !t->escalating && !t->confirming &&
        ((st = qp_pattern_cache_add(t->cache_out, pat, scheme, cm, err)) != QP_OK ||
         (st = qp_pattern_cache_add(t->cache_out, pat, cur, bm, err)) != QP_OK))
        return st;
    /* with region timing cm is a sub-model's median: the frontier compares whole models, so the
     * entry holds the whole best's estimate less the sub-model's gain */
    int estimated = t->region && !t->escalating;
    double entry_ms = estimated ? t->whole_ms - region_gain(t, cm, bm) : cm;
    if ((st = measured_add(t, "scheme", entry_ms, drift, (long)p, pat->signature,
                           points_json(scheme, pat->n_points), 0, estimated, err)) != QP_OK)
        return st;
    if (*adopt) {
        t->best_entry = cJSON_GetArrayItem(t->measured, cJSON_GetArraySize(t->measured) - 1);
        t->r->best_drift = drift;
        t->best_pattern = (long)p;
        cJSON_Delete(t->best_points);
        if (!(t->best_points = points_json(scheme, pat->n_points)))
            return qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
    }
    return log_line(t, p, from_cache ? "cache" : "generated", scheme, res, *adopt, NULL, drift,
                    err);
}

/* The progress callback after race (k, j) of n_order patterns and n schemes; res NULL: the
 * scheme was rejected by the drift bound, unraced. */
static void progress_step(const struct tune *t, size_t p, size_t k, size_t n_order, size_t j,
                          size_t n, size_t done, size_t planned, const uint64_t *scheme,
                          int from_cache, const struct qp_latency_race_result *res, int adopt,
                          int replayed, double drift) {
    if (!t->o->progress) return;
    double el = qp_clock_seconds() - t->t0;
    struct qp_autotune_step s = {
        .pattern_k = k + 1,
        .n_patterns = n_order,
        .scheme_j = j + 1,
        .n_schemes = n,
        .elapsed_s = el,
        .eta_s = planned > done ? el / (double)done * (double)(planned - done) : 0,
        .cand_median_ms = res ? median_of(res->cand_ms, res->n_cand) : 0,
        .best_median_ms = res ? median_of(res->best_ms, res->n_best) : 0,
        .verdict = res ? res->verdict.verdict : QP_LATENCY_UNRESOLVED,
        .rejected_drift = !res,
        .adopted = adopt,
        .replayed = replayed,
        .signature = t->rs->patterns[p].signature,
        .points = scheme,
        .n_points = t->rs->patterns[p].n_points,
        .p_value = res ? res->verdict.p_value : 0,
        .from_cache = from_cache,
        .races_done = done,
        .races_planned = planned,
        .drift = drift,
        .timed = t->escalating   ? 2
                 : t->confirming ? 3
                 : t->region     ? 1
                                 : 0,
    };
    t->o->progress(&s, t->o->progress_user);
}

/* The first instance of pattern p that the node filter lets through (every region without one). */
static size_t first_instance(const struct tune *t, size_t p) {
    size_t r = 0;
    while (r < t->rs->n_regions &&
           (t->rs->regions[r].pattern != (int)p || (t->region_in && !t->region_in[r])))
        r++;
    return r;
}

/* 1 when pattern p has an instance the node filter lets through. */
static int pattern_searched(const struct tune *t, size_t p) {
    return first_instance(t, p) < t->rs->n_regions;
}

/* `best` with scheme `bits` on every instance of pattern p that the node filter lets through. */
static enum qp_status apply_scheme(const struct tune *t, size_t p, const uint64_t *bits,
                                   const struct qp_placement *best, struct qp_placement **out,
                                   struct qp_error *err) {
    const struct qp_regions *rs = t->rs;
    size_t n = t->region_in ? rs->n_regions : rs->n_patterns;
    const uint64_t **choice = calloc(n ? n : 1, sizeof *choice);
    if (!choice) return qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
    enum qp_status st;
    if (t->region_in) {
        for (size_t r = 0; r < rs->n_regions; r++)
            if (rs->regions[r].pattern == (int)p && t->region_in[r]) choice[r] = bits;
        st = qp_schemes_apply_regions(rs, best, choice, out, err);
    } else {
        choice[p] = bits;
        st = qp_schemes_apply(rs, best, choice, out, err);
    }
    free(choice);
    return st;
}

/* The pattern cache's early stop before scheme j of n: pattern p's current scheme is its cache
 * entry's best and the last `losses` races in a row (at least cache_patience) were not adopted.
 * The schemes not tried leave *planned. */
static int cache_stop(struct tune *t, size_t p, const uint64_t *cur, size_t losses, size_t j,
                      size_t n, size_t *planned) {
    const struct qp_pattern *pat = &t->rs->patterns[p];
    const struct qp_cache_entry *e = cache_entry(t, pat);
    if (!e || !t->o->cache_patience || losses < t->o->cache_patience ||
        memcmp(cur, e->schemes[0].bits, QP_SCHEME_WORDS(pat->n_points) * sizeof *cur) != 0)
        return 0;
    *planned -= n - j;
    t->r->n_cache_stops++;
    qp_log(QP_LOG_DEBUG,
           "autotune: pattern '%s': the pattern cache's best scheme holds and %zu races after it "
           "were lost: %zu schemes not tried",
           pat->signature, losses, n - j);
    return 1;
}

/* A debug line for pattern p (k-th of n_order) and its n schemes. */
static void log_pattern(const struct tune *t, size_t p, size_t k, size_t n_order,
                        const int *from_cache, size_t n) {
    const struct qp_pattern *pat = &t->rs->patterns[p];
    size_t searched = 0, cached = 0;
    for (size_t r = 0; r < t->rs->n_regions; r++)
        searched += t->rs->regions[r].pattern == (int)p && (!t->region_in || t->region_in[r]);
    for (size_t j = 0; j < n; j++)
        cached += (size_t)from_cache[j];
    qp_log(QP_LOG_DEBUG,
           "autotune: pattern %zu/%zu '%s': %zu instances (%zu searched), %zu points, %zu schemes "
           "(%zu from the pattern cache)",
           k + 1, n_order, pat->signature, pat->n_instances, searched, pat->n_points, n, cached);
}

/* The candidate just raced (its model at cand_path) becomes the best; `cand` is transferred. */
static enum qp_status adopt_candidate(struct tune *t, struct qp_placement *cand,
                                      const char *cand_file, const char *best_file,
                                      struct qp_placement **best, struct qp_error *err) {
    t->best_all_stale = 1; /* the every-instance sub-model's best is written again when used */
    if (rename(cand_file, best_file) != 0) {
        qp_placement_free(cand);
        return qp_error_set(err, QP_ERR_IO, "autotune: cannot rename '%s': %s", cand_file,
                            strerror(errno));
    }
    qp_placement_free(*best);
    *best = cand;
    t->r->n_adopted++;
    return QP_OK;
}

/* ---- region-local timing (docs/autotune.md "Region-local timing") ---------------------- */

/* The instances of pattern p that the search changes (the node filter's), into in[r]. */
static size_t searched_instances(const struct tune *t, size_t p, unsigned char *in) {
    size_t n = 0;
    for (size_t r = 0; r < t->rs->n_regions; r++) {
        in[r] = t->rs->regions[r].pattern == (int)p && (!t->region_in || t->region_in[r]);
        n += in[r];
    }
    return n;
}

/* Every searched pattern's node set: its representatives' (qp_subgraph_representatives), or
 * with region_all every instance's, and the weight of its sub-model races. */
static enum qp_status region_node_sets(struct tune *t, struct qp_error *err) {
    const struct qp_regions *rs = t->rs;
    size_t nr = rs->n_regions ? rs->n_regions : 1;
    unsigned char *searched = calloc(nr, 1), *chosen = calloc(nr, 1);
    enum qp_status st = QP_OK;
    if (!searched || !chosen) st = qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
    for (size_t p = 0; p < rs->n_patterns && st == QP_OK; p++) {
        if (!t->keep[p]) continue;
        size_t n = searched_instances(t, p, searched), k = n;
        if (!t->region_all) k = qp_subgraph_representatives(rs, p, searched, t->cap, chosen);
        t->weight[p] = k ? (double)n / (double)k : 1.0;
        qp_subgraph_nodes(rs, p, t->region_all ? NULL : chosen, t->keep[p]);
        qp_log(QP_LOG_DEBUG, "autotune: pattern '%s': %zu of %zu searched instances timed",
               rs->patterns[p].signature, k, n);
    }
    free(searched);
    free(chosen);
    return st;
}

/* Decides the timing; for region timing, every searched pattern's node set and one capture of
 * the tensors entering them (a run of the whole float model). Before anything is written. */
static enum qp_status region_prepare(struct tune *t, struct qp_error *err) {
    /* auto is whole-model timing on every backend: with its borders quantized as in the whole
     * model a sub-model search reached ResNet-50's placement, but on PaddleOCR rec and det it
     * adopted schemes that left the whole model 17-30% slower than whole-model timing's choice
     * (docs/autotune.md "Region-local timing"), so region timing is asked for, not assumed */
    enum qp_autotune_timing tm = t->o->timing;
    if (tm == QP_AUTOTUNE_TIMING_AUTO) tm = QP_AUTOTUNE_TIMING_WHOLE;
    t->region_all = tm == QP_AUTOTUNE_TIMING_REGION_ALL;
    t->region = t->r->timing_region = tm == QP_AUTOTUNE_TIMING_REGION || t->region_all;
    if (!t->region) return QP_OK;
    const struct qp_graph *g = t->m->graph;
    int *vals = NULL;
    size_t n = 0, cap = 0, np = t->rs->n_patterns ? t->rs->n_patterns : 1;
    enum qp_status st = QP_OK;
    if (!(t->keep = calloc(np, sizeof *t->keep)) || !(t->weight = calloc(np, sizeof *t->weight)))
        return qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
    for (size_t p = 0; p < t->rs->n_patterns && st == QP_OK; p++) {
        if (!t->rs->patterns[p].n_points || !pattern_searched(t, p)) continue;
        if (!(t->keep[p] = calloc(g->n_nodes ? g->n_nodes : 1, 1))) {
            st = qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
            break;
        }
        /* what any subset of the instances needs: the representatives are chosen from the
         * shapes this capture records */
        st = qp_subgraph_instance_border(t->rs, p, &vals, &n, &cap, err);
    }
    if (st == QP_OK)
        st = qp_subgraph_capture(t->m, t->o->calibration_shapes, vals, n, t->o->n_threads, &t->cap,
                                 err);
    free(vals);
    if (st != QP_OK && st != QP_ERR_NOMEM && t->o->timing == QP_AUTOTUNE_TIMING_AUTO) {
        /* a model the capture cannot run as asked (e.g. a tensor only a subgraph computes):
         * auto falls back to whole-model timing, which needs none of it */
        for (size_t p = 0; p < t->rs->n_patterns; p++)
            free(t->keep[p]);
        free(t->keep);
        free(t->weight);
        t->keep = NULL;
        t->weight = NULL;
        t->region = t->region_all = t->r->timing_region = 0;
        return QP_OK;
    }
    if (st == QP_OK) st = region_node_sets(t, err);
    if (st != QP_OK) qp_error_prefix(err, "autotune: region-local timing");
    return st;
}

static void region_release(struct tune *t) {
    for (size_t p = 0; t->keep && p < t->rs->n_patterns; p++)
        free(t->keep[p]);
    free(t->keep);
    free(t->weight);
    qp_subgraph_capture_free(t->cap);
    if (t->cand_sub_path) unlink(t->cand_sub_path);
    if (t->best_sub_path) unlink(t->best_sub_path);
    free(t->cand_sub_path);
    free(t->best_sub_path);
    if (t->cand_all_path) unlink(t->cand_all_path);
    if (t->best_all_path) unlink(t->best_all_path);
    free(t->cand_all_path);
    free(t->best_all_path);
}

/* Writes sub-model `sub` with placement `p` restricted to it, its border quantized as the
 * whole model's (qp_subgraph_write). */
static enum qp_status write_sub(struct tune *t, const struct qp_model *sub,
                                const struct qp_placement *p, const char *path,
                                struct qp_error *err) {
    struct qp_writer_options wo;
    writer_options(t, &wo);
    struct qp_model *c = NULL;
    enum qp_status st = qp_subgraph_write(sub, t->m->graph, p, &wo, &c, err);
    if (st == QP_OK) st = qp_model_save_file(c, path, NULL, err);
    qp_model_free(c);
    return st;
}

/* Pattern p's race setup: with region timing, its sub-model (*sub) with the best placement
 * written to best_sub_path, timed once to scale the minimum effect. */
static enum qp_status region_begin(struct tune *t, size_t p, const struct qp_placement *best,
                                   struct qp_model **sub, struct qp_latency_race_options *ro,
                                   struct qp_error *err) {
    *ro = t->o->race;
    *sub = NULL;
    if (!t->region) return QP_OK;
    size_t n = ro->runs_per_round ? ro->runs_per_round : 1;
    double *ms = malloc(n * sizeof *ms);
    if (!ms) return qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
    enum qp_status st = qp_subgraph_extract(t->m, t->keep[p], t->cap, sub, err);
    if (st == QP_OK) st = write_sub(t, *sub, best, t->best_sub_path, err);
    if (st == QP_OK) st = qp_latency_measure(t->o->backend, t->best_sub_path, n, ms, err);
    if (st == QP_OK) {
        t->sub_nodes = 0;
        for (size_t k = 0; k < (*sub)->graph->n_nodes; k++)
            t->sub_nodes += !(*sub)->graph->nodes[k].dead;
        t->sub_weight = t->weight[p];
        ro->min_effect = t->sub_min_effect = region_effect(t, median_of(ms, n));
    } else {
        qp_model_free(*sub);
        *sub = NULL;
    }
    free(ms);
    return st;
}

/* An adopted race: the whole best's estimate loses the sub-model's gain, and the effect is
 * scaled to the new best sub-model's median. */
static void region_adopted(struct tune *t, const struct qp_latency_race_result *res,
                           struct qp_latency_race_options *ro) {
    if (!t->region) return;
    t->whole_best_stale = 1;
    double cm = median_of(res->cand_ms, res->n_cand), bm = median_of(res->best_ms, res->n_best);
    double gain = region_gain(t, cm, bm);
    if (gain > 0 && t->whole_ms > gain) t->whole_ms -= gain;
    ro->min_effect = t->sub_min_effect = region_effect(t, cm);
}

/* The whole seed model (written at best_path), timed once: the whole-model latency the
 * minimum effects are scaled by, and the report's seed median. */
static enum qp_status region_seed(struct tune *t, struct qp_error *err) {
    size_t n = t->o->race.runs_per_round ? t->o->race.runs_per_round : 1;
    double *ms = malloc(n * sizeof *ms);
    if (!ms) return qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
    enum qp_status st = qp_latency_measure(t->o->backend, t->best_path, n, ms, err);
    if (st == QP_OK) t->whole_ms = t->r->seed_median_ms = median_of(ms, n);
    free(ms);
    return st;
}

/* A sub-model race that did not adopt its scheme yet read it at least half the minimum effect
 * faster: the sub-model sees too little of the model to decide (a ViT's patch embedding gains
 * as much in the blocks after it, through the layouts it hands on, as in its own nodes), so the
 * whole models decide (docs/autotune.md "Borderline schemes"). */
#define ESCALATE_FRACTION 0.5
static int borderline(const struct qp_latency_race_result *res, double min_effect) {
    if (res->verdict.verdict == QP_LATENCY_FASTER) return 0;
    double cm = median_of(res->cand_ms, res->n_cand), bm = median_of(res->best_ms, res->n_best);
    return bm > 0 && cm < bm && 1.0 - cm / bm >= ESCALATE_FRACTION * min_effect;
}

/* Region timing: scheme `bits` of pattern p (placement cand) raced again as whole models,
 * after a borderline sub-model race; *adopt when the whole-model race says faster, and then
 * best_path holds the candidate and t->whole_ms its median. Both whole files are written first
 * (replayed or not), as a race's files are. */
static enum qp_status escalate(struct tune *t, size_t p, const uint64_t *bits, const uint64_t *cur,
                               int from_cache, const struct qp_placement *cand,
                               const struct qp_placement *best, double drift,
                               struct qp_latency_race_result *res, int *replayed, int *adopt,
                               struct qp_error *err) {
    const struct qp_pattern *pat = &t->rs->patterns[p];
    enum qp_status st = QP_OK;
    *adopt = 0;
    if (t->whole_best_stale && (st = write_model(t, best, t->best_path, err)) != QP_OK) return st;
    t->whole_best_stale = 0;
    if ((st = write_model(t, cand, t->cand_path, err)) != QP_OK) return st;
    if (!replay_or_go(t, pat, bits, res, replayed, NULL)) return QP_OK;
    if (!*replayed && (st = qp_latency_race(t->o->backend, t->cand_path, t->best_path, &t->o->race,
                                            res, err)) != QP_OK)
        return st;
    t->r->n_escalated++;
    st = account_race(t, p, bits, cur, from_cache, *replayed, res, drift, adopt, err);
    if (st == QP_OK && *adopt) {
        t->r->n_escalated_adopted++;
        t->whole_ms = median_of(res->cand_ms, res->n_cand);
        if (rename(t->cand_path, t->best_path) != 0)
            st = qp_error_set(err, QP_ERR_IO, "autotune: cannot rename '%s': %s", t->cand_path,
                              strerror(errno));
    }
    return st;
}

/* The current pattern p's every-instance sub-model (t->sub_all), for the representatives'
 * confirmations: cut, written with `best` and timed once to scale its minimum effect. */
static enum qp_status all_begin(struct tune *t, size_t p, const struct qp_placement *best,
                                struct qp_error *err) {
    const struct qp_graph *g = t->m->graph;
    size_t n = t->o->race.runs_per_round ? t->o->race.runs_per_round : 1;
    double *ms = malloc(n * sizeof *ms);
    unsigned char *keep = calloc(g->n_nodes ? g->n_nodes : 1, 1);
    enum qp_status st = QP_OK;
    if (!ms || !keep) st = qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
    if (st == QP_OK) {
        qp_subgraph_nodes(t->rs, p, NULL, keep);
        st = qp_subgraph_extract(t->m, keep, t->cap, &t->sub_all, err);
    }
    if (st == QP_OK) st = write_sub(t, t->sub_all, best, t->best_all_path, err);
    if (st == QP_OK) st = qp_latency_measure(t->o->backend, t->best_all_path, n, ms, err);
    if (st == QP_OK) {
        t->all_nodes = 0;
        for (size_t k = 0; k < t->sub_all->graph->n_nodes; k++)
            t->all_nodes += !t->sub_all->graph->nodes[k].dead;
        t->all_min_effect = scaled_effect(t, median_of(ms, n), 1.0);
        t->best_all_stale = 0;
    } else {
        qp_model_free(t->sub_all);
        t->sub_all = NULL;
    }
    free(ms);
    free(keep);
    return st;
}

/* What the log and the state say of the sub-model being raced, saved while a confirmation
 * races the every-instance sub-model. */
struct sub_view {
    double weight, min_effect;
    size_t nodes;
};

static void confirm_enter(struct tune *t, struct sub_view *saved) {
    *saved = (struct sub_view){t->sub_weight, t->sub_min_effect, t->sub_nodes};
    t->confirming = 1;
    t->sub_weight = 1;
    t->sub_min_effect = t->all_min_effect;
    t->sub_nodes = t->all_nodes;
}

static void confirm_leave(struct tune *t, const struct sub_view *saved) {
    t->confirming = 0;
    t->sub_weight = saved->weight;
    t->sub_min_effect = saved->min_effect;
    t->sub_nodes = saved->nodes;
}

/* Representatives (docs/autotune.md "Representative instances"): scheme `bits` of pattern p
 * (placement cand), FASTER or borderline on the representatives' sub-model, raced again on the
 * every-instance sub-model as region_all races it (inside confirm_enter): *adopt when FASTER,
 * and t->escalate when borderline there in its turn (the whole models decide next). */
static enum qp_status confirm(struct tune *t, size_t p, const uint64_t *bits, const uint64_t *cur,
                              int from_cache, const struct qp_placement *cand,
                              const struct qp_placement *best, double drift,
                              struct qp_latency_race_result *res, int *replayed, int *adopt,
                              struct qp_error *err) {
    const struct qp_pattern *pat = &t->rs->patterns[p];
    enum qp_status st = QP_OK;
    *adopt = 0;
    t->escalate = 0;
    if (!t->sub_all)
        st = all_begin(t, p, best, err);
    else if (t->best_all_stale)
        st = write_sub(t, t->sub_all, best, t->best_all_path, err);
    if (st != QP_OK) return st;
    t->best_all_stale = 0;
    t->sub_min_effect = t->all_min_effect; /* confirm_enter ran before the first all_begin */
    t->sub_nodes = t->all_nodes;
    if ((st = write_sub(t, t->sub_all, cand, t->cand_all_path, err)) != QP_OK) return st;
    int esc_recorded = 0;
    if (!replay_or_go(t, pat, bits, res, replayed, &esc_recorded)) return QP_OK;
    struct qp_latency_race_options ro = t->o->race;
    ro.min_effect = t->all_min_effect;
    if (!*replayed && (st = qp_latency_race(t->o->backend, t->cand_all_path, t->best_all_path, &ro,
                                            res, err)) != QP_OK)
        return st;
    t->escalate = *replayed ? esc_recorded : borderline(res, ro.min_effect);
    t->r->n_confirmed++;
    st = account_race(t, p, bits, cur, from_cache, *replayed, res, drift, adopt, err);
    if (st != QP_OK || !*adopt) return st;
    t->r->n_confirmed_adopted++;
    t->whole_best_stale = 1;
    double cm = median_of(res->cand_ms, res->n_cand), bm = median_of(res->best_ms, res->n_best);
    if (bm > cm && t->whole_ms > bm - cm) t->whole_ms -= bm - cm;
    return QP_OK;
}

/* One step of a pattern's loop, for what follows a race: the pattern (k-th of n_order), the
 * scheme (j-th of n) and its drift, the counters the progress reports. */
struct step {
    size_t p, k, n_order, j, n;
    size_t *done, *planned;
    const uint64_t *bits, *cur;
    int from_cache;
    double drift;
};

static void step_progress(const struct tune *t, const struct step *sp,
                          const struct qp_latency_race_result *res, int adopt, int replayed) {
    progress_step(t, sp->p, sp->k, sp->n_order, sp->j, sp->n, *sp->done, *sp->planned, sp->bits,
                  sp->from_cache, res, adopt, replayed, sp->drift);
}

/* After a sub-model race that did not adopt but asked to go on (t->escalate): with
 * representatives the every-instance sub-model races it (confirm), and when that race, or a
 * sub-model race without representatives, is borderline, the whole models do (escalate).
 * *adopt when one of them adopted; ro's effect follows the new best sub-model then. */
static enum qp_status follow_up(struct tune *t, const struct step *sp,
                                const struct qp_placement *cand, const struct qp_placement *best,
                                double sub_cand_ms, struct qp_latency_race_options *ro, int *adopt,
                                struct qp_error *err) {
    enum qp_status st = QP_OK;
    if (region_confirms(t)) {
        struct qp_latency_race_result cres = {0};
        struct sub_view saved;
        int crep = 0;
        confirm_enter(t, &saved);
        st = confirm(t, sp->p, sp->bits, sp->cur, sp->from_cache, cand, best, sp->drift, &cres,
                     &crep, adopt, err);
        if (st == QP_OK && !t->r->interrupted) step_progress(t, sp, &cres, *adopt, crep);
        qp_latency_race_result_release(&cres);
        confirm_leave(t, &saved);
        if (st != QP_OK || t->r->interrupted || *adopt || !t->escalate) goto out;
    }
    struct qp_latency_race_result wres = {0};
    int wrep = 0;
    t->escalating = 1; /* while the whole-model race is accounted and reported */
    st = escalate(t, sp->p, sp->bits, sp->cur, sp->from_cache, cand, best, sp->drift, &wres, &wrep,
                  adopt, err);
    if (st == QP_OK && !t->r->interrupted) step_progress(t, sp, &wres, *adopt, wrep);
    qp_latency_race_result_release(&wres);
    t->escalating = 0;
out:
    if (st == QP_OK && *adopt) /* the sub-models follow: the scaled effect too */
        ro->min_effect = t->sub_min_effect = region_effect(t, sub_cand_ms);
    return st;
}

/* Measures the schemes of pattern p (k-th of n in the search order). */
static enum qp_status tune_pattern(struct tune *t, size_t p, size_t k, size_t n_order, size_t *done,
                                   size_t *planned, struct qp_placement **best,
                                   struct qp_error *err) {
    const struct qp_regions *rs = t->rs;
    const struct qp_pattern *pat = &rs->patterns[p];
    size_t max = t->o->schemes_per_pattern ? t->o->schemes_per_pattern
                                           : qp_autotune_mode_schemes(t->o->mode);
    size_t words = QP_SCHEME_WORDS(pat->n_points), losses = 0;
    uint64_t *cur = qp_scheme_alloc(pat->n_points);
    struct qp_scheme_list gen = {0};
    const uint64_t **list = NULL;
    int *from_cache = NULL;
    size_t n = 0;
    struct qp_model *sub = NULL; /* region timing: the pattern's sub-model */
    struct qp_latency_race_options ro;
    const char *cand_file = t->region ? t->cand_sub_path : t->cand_path;
    const char *best_file = t->region ? t->best_sub_path : t->best_path;
    enum qp_status st = QP_OK;
    if (!cur) {
        st = qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
        goto done;
    }
    qp_autotune_drift_rebase(t->drift); /* the pattern's schemes differ only in its entries */
    if ((st = region_begin(t, p, *best, &sub, &ro, err)) != QP_OK) goto done;
    qp_scheme_from_placement(rs, first_instance(t, p), *best, cur);
    if ((st = candidates(t, p, cur, max, &gen, &list, &from_cache, &n, err)) != QP_OK) goto done;
    *planned = *planned + n - planned_schemes(pat->n_points, max); /* the estimate made exact */
    log_pattern(t, p, k, n_order, from_cache, n);
    for (size_t j = 0; j < n; j++) {
        if (cache_stop(t, p, cur, losses, j, n, planned)) break;
        struct qp_placement *cand = NULL;
        if ((st = apply_scheme(t, p, list[j], *best, &cand, err)) != QP_OK) goto done;
        if (qp_placement_equal(cand, *best)) { /* nothing to measure */
            qp_placement_free(cand);
            t->r->n_skipped++;
            (*done)++;
            continue;
        }
        struct qp_error werr = {0};
        st = sub ? write_sub(t, sub, cand, cand_file, &werr)
                 : write_model(t, cand, cand_file, &werr);
        if (st == QP_ERR_BAD_INPUT) { /* e.g. a point whose tensor got no range */
            qp_placement_free(cand);
            t->r->n_skipped++;
            (*done)++;
            if ((st = log_line(t, p, from_cache[j] ? "cache" : "generated", list[j], NULL, 0,
                               werr.msg, NAN, err)) != QP_OK)
                goto done;
            continue;
        }
        if (st != QP_OK) {
            *err = werr;
            qp_placement_free(cand);
            goto done;
        }
        double drift = NAN;
        int what = DRIFT_RACE;
        st = scheme_drift(t, p, list[j], cand, from_cache[j], &drift, &what, err);
        if (st != QP_OK || what != DRIFT_RACE) {
            qp_placement_free(cand);
            if (st != QP_OK || what == DRIFT_STOP) goto done;
            (*done)++;
            if (what == DRIFT_REJECTED)
                progress_step(t, p, k, n_order, j, n, *done, *planned, list[j], 0, NULL, 0,
                              t->last_replayed, drift);
            continue;
        }
        struct qp_latency_race_result res;
        int esc_recorded = 0;
        int replayed = 0;
        if (!replay_or_go(t, pat, list[j], &res, &replayed, &esc_recorded)) {
            qp_placement_free(cand);
            goto done;
        }
        if (!replayed) {
            st = qp_latency_race(t->o->backend, cand_file, best_file, &ro, &res, err);
            if (st != QP_OK) {
                qp_placement_free(cand);
                goto done;
            }
        }
        int adopt = 0;
        /* with representatives a FASTER verdict goes on to the every-instance sub-model too */
        t->escalate =
            t->region &&
            (replayed ? esc_recorded
                      : borderline(&res, ro.min_effect) ||
                            (region_confirms(t) && res.verdict.verdict == QP_LATENCY_FASTER));
        st = account_race(t, p, list[j], cur, from_cache[j], replayed, &res, drift, &adopt, err);
        (*done)++;
        if (st == QP_OK)
            progress_step(t, p, k, n_order, j, n, *done, *planned, list[j], from_cache[j], &res,
                          adopt, replayed, drift);
        if (st == QP_OK && adopt) region_adopted(t, &res, &ro);
        double sub_cand_ms = median_of(res.cand_ms, res.n_cand);
        qp_latency_race_result_release(&res);
        if (st == QP_OK && !adopt && t->escalate) {
            struct step sp = {p,       k,   n_order,       j,    n, done, planned,
                              list[j], cur, from_cache[j], drift};
            st = follow_up(t, &sp, cand, *best, sub_cand_ms, &ro, &adopt, err);
            if (st == QP_OK && t->r->interrupted) {
                qp_placement_free(cand);
                goto done;
            }
        }
        if (st != QP_OK) {
            qp_placement_free(cand);
            goto done;
        }
        if (!adopt) {
            qp_placement_free(cand);
            losses++;
            continue;
        }
        if ((st = adopt_candidate(t, cand, cand_file, best_file, best, err)) != QP_OK) goto done;
        memcpy(cur, list[j], words * sizeof *cur);
        losses = 0;
    }
done:
    qp_model_free(sub);
    qp_model_free(t->sub_all);
    t->sub_all = NULL;
    free(list);
    free(from_cache);
    qp_scheme_list_free(&gen);
    free(cur);
    return st;
}

/* The placement holding every insertion point (over `base`), for the one calibration. */
static enum qp_status all_points(const struct qp_regions *rs, const struct qp_placement *base,
                                 struct qp_placement **out, struct qp_error *err) {
    const uint64_t **choice = calloc(rs->n_patterns ? rs->n_patterns : 1, sizeof *choice);
    uint64_t **bits = calloc(rs->n_patterns ? rs->n_patterns : 1, sizeof *bits);
    enum qp_status st = QP_OK;
    if (!choice || !bits) {
        st = qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
        goto done;
    }
    for (size_t p = 0; p < rs->n_patterns; p++) {
        if (!(bits[p] = qp_scheme_alloc(rs->patterns[p].n_points))) {
            st = qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
            goto done;
        }
        for (size_t k = 0; k < rs->patterns[p].n_points; k++)
            qp_scheme_set(bits[p], k, 1);
        choice[p] = bits[p];
    }
    st = qp_schemes_apply(rs, base, choice, out, err);
done:
    for (size_t p = 0; bits && p < rs->n_patterns; p++)
        free(bits[p]);
    free(bits);
    free(choice);
    return st;
}

/* The placement of the Q/DQ model at `path`, on the slots of `m`'s nodes (by name): each slot
 * fed through a DequantizeLinear. Weight axes: the trt policy's or the insertion point's. */
static enum qp_status baseline_placement(struct tune *t, const char *path,
                                         struct qp_placement **out, struct qp_error *err) {
    struct qp_model *b = NULL;
    struct qp_qdq_slots *slots = NULL;
    struct qp_placement *p = qp_placement_create();
    enum qp_status st = p ? QP_OK : qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
    if (st == QP_OK && (st = qp_model_load_file(path, NULL, &b, err)) != QP_OK)
        qp_error_prefix(err, "autotune: --qdq_baseline '%s'", path);
    if (st == QP_OK && !qp_model_has_qdq(b))
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "autotune: --qdq_baseline '%s' holds no Q/DQ node",
                          path);
    if (st == QP_OK) st = qp_qdq_slots_from_model(b->graph, &slots, err);
    for (size_t i = 0; st == QP_OK && i < slots->n; i++) {
        const struct qp_qdq_slot *q = &slots->slots[i];
        if (!q->weight) {
            st = qp_placement_add_edge(p, q->tensor, q->node, q->input, "qdq_baseline", err);
            continue;
        }
        int axis = -1, found = 0, w = 0;
        size_t idx = 0;
        if (qp_placement_find(t->r->seed, q->node, q->input, &w, &idx) && w) {
            axis = t->r->seed->weights[idx].axis;
            found = 1;
        }
        int n = qp_graph_find_node(t->m->graph, q->node);
        if (!found && n >= 0 && t->rs->region_of[n] >= 0) {
            const struct qp_region *r = &t->rs->regions[t->rs->region_of[n]];
            for (size_t k = 0; k < r->n_points; k++)
                if (r->points[k].node == n && r->points[k].input == q->input)
                    axis = r->points[k].axis;
        }
        st = qp_placement_add_weight(p, q->tensor, q->node, q->input, axis, "qdq_baseline", err);
    }
    if (st == QP_OK && (st = qp_placement_check(p, t->m, err)) != QP_OK)
        qp_error_prefix(err, "autotune: --qdq_baseline '%s' does not fit the model", path);
    qp_qdq_slots_free(slots);
    qp_model_free(b);
    if (st == QP_OK)
        *out = p;
    else
        qp_placement_free(p);
    return st;
}

/* --node_filter_list: the file read, each pattern checked against the model, the regions it
 * lets through in t->region_in. */
static enum qp_status prepare_filter(struct tune *t, struct qp_error *err) {
    struct qp_node_filter *f = NULL;
    enum qp_status st = qp_node_filter_load(t->o->node_filter_list, &f, err);
    if (st == QP_OK) st = qp_node_filter_check(f, t->m->graph, err);
    if (st == QP_OK) st = qp_node_filter_regions(f, t->rs, &t->region_in, err);
    qp_node_filter_free(f);
    if (st != QP_OK) return st;
    for (size_t r = 0; r < t->rs->n_regions; r++)
        t->r->n_regions_filtered += !t->region_in[r];
    qp_log(QP_LOG_DEBUG, "autotune: --node_filter_list '%s': %zu of %zu regions searched",
           t->o->node_filter_list, t->rs->n_regions - t->r->n_regions_filtered, t->rs->n_regions);
    return QP_OK;
}

/* Loads, places, builds regions, calibrates: everything that can fail on bad input, before
 * anything is written. */
static enum qp_status prepare(struct tune *t, struct qp_error *err) {
    const struct qp_autotune_options *o = t->o;
    enum qp_status st = qp_model_load_file(o->onnx_path, NULL, &t->m, err);
    if (st != QP_OK) return qp_error_prefix(err, "autotune: '%s'", o->onnx_path);
    if (qp_model_has_qdq(t->m))
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "autotune: '%s' already holds Q/DQ nodes; give the float model",
                            o->onnx_path);
    struct qp_trt_options trt = {.quantize_mode = o->quant_mode};
    if ((st = qp_placement_trt(t->m, &trt, &t->r->seed, err)) != QP_OK) return st;
    if ((st = qp_regions_build(t->m->graph, &t->rs, err)) != QP_OK) return st;
    if (o->qdq_baseline) {
        struct qp_placement *b = NULL;
        if ((st = baseline_placement(t, o->qdq_baseline, &b, err)) != QP_OK) return st;
        qp_placement_free(t->r->seed);
        t->r->seed = b;
    }
    t->r->n_regions = t->rs->n_regions;
    t->r->n_patterns = t->rs->n_patterns;
    for (size_t r = 0; r < t->rs->n_regions; r++)
        t->r->n_points += t->rs->regions[r].n_points;
    if (o->pattern_cache_in &&
        (st = qp_pattern_cache_load_file(o->pattern_cache_in, &t->cache_in, err)) != QP_OK)
        return st;
    if (o->node_filter_list && (st = prepare_filter(t, err)) != QP_OK) return st;
    struct qp_placement *every = NULL;
    if ((st = all_points(t->rs, t->r->seed, &every, err)) != QP_OK) return st;
    struct qp_provider *data = NULL, *given = o->calibration_provider;
    st = given ? QP_OK
               : qp_provider_open_model(t->m, o->calibration_data_path, o->calibration_shapes,
                                        o->data, &data, err);
    if (given) data = given;
    if (st == QP_OK) {
        t->r->calibration_source = qp_provider_is_synthetic(data) ? "synthetic" : "data";
        struct qp_calibrate_options co;
        qp_calibrate_options_default(&co);
        co.placement = every;
        co.placement_float_only = 1; /* plan-time tensors: their points are skipped */
        co.n_threads = o->n_threads;
        st = qp_calibrate(t->m, data, &co, &t->ranges, NULL, err);
    }
    if (!given) qp_provider_free(data);
    if (st == QP_OK) {
        struct qp_autotune_drift_options dop = {
            .eval_data_path = o->eval_data_path,
            .calibration_data_path = o->calibration_data_path,
            .calibration_shapes = o->calibration_shapes,
            .data = o->data,
            .max_samples = o->drift_samples,
            .quant_mode = o->quant_mode,
            .n_threads = o->n_threads,
        };
        st = qp_autotune_drift_open(t->m, every, t->ranges, &dop, &t->drift, err);
    }
    qp_placement_free(every);
    return st;
}

/* Creates `dir` when missing. */
static enum qp_status make_dir(const char *dir, struct qp_error *err) {
    struct stat s;
    if (stat(dir, &s) == 0) {
        if (S_ISDIR(s.st_mode)) return QP_OK;
        return qp_error_set(err, QP_ERR_IO, "autotune: '%s' exists and is not a folder", dir);
    }
    if (mkdir(dir, 0777) != 0)
        return qp_error_set(err, QP_ERR_IO, "autotune: cannot create '%s': %s", dir,
                            strerror(errno));
    return QP_OK;
}

/* After a region search that adopted schemes: the whole best raced against the whole seed. The
 * sub-models' gains need not add up to the whole model's (borders, layouts, what fuses across
 * patterns), so a best that is slower than the seed as a whole model gives way to the seed:
 * the result is never slower than the seed. */
static enum qp_status region_check(struct tune *t, struct qp_placement **best,
                                   struct qp_error *err) {
    if (!t->region || !t->r->n_adopted || t->r->interrupted) return QP_OK;
    enum qp_status st = write_model(t, t->r->seed, t->cand_path, err);
    struct qp_latency_race_result res;
    struct qp_latency_race_options ro = t->o->race;
    ro.stop_without_gain = 0; /* this race looks for SLOWER, */
    ro.early_reject = 0;      /* after min_rounds */
    ro.replicate = 0;         /* (it replicates FASTER only) */
    if (st == QP_OK)
        st = qp_latency_race(t->o->backend, t->best_path, t->cand_path, &ro, &res, err);
    if (st != QP_OK) return st;
    t->r->region_checked = 1;
    t->r->region_check = res.verdict;
    t->r->region_best_ms = median_of(res.cand_ms, res.n_cand);
    t->r->region_seed_ms = median_of(res.best_ms, res.n_best);
    qp_latency_race_result_release(&res);
    qp_log(QP_LOG_DEBUG, "autotune: region check: best %.4f ms, seed %.4f ms as whole models (%s)",
           t->r->region_best_ms, t->r->region_seed_ms,
           qp_latency_verdict_name(t->r->region_check.verdict));
    if (t->r->region_check.verdict != QP_LATENCY_SLOWER) return QP_OK;
    struct qp_placement *seed = NULL;
    if ((st = qp_placement_copy(t->r->seed, &seed, err)) != QP_OK) return st;
    if (rename(t->cand_path, t->best_path) != 0) {
        qp_placement_free(seed);
        return qp_error_set(err, QP_ERR_IO, "autotune: cannot write '%s': %s", t->best_path,
                            strerror(errno));
    }
    qp_placement_free(*best);
    *best = seed;
    t->r->region_reverted = 1;
    best_is_seed(t);
    return QP_OK;
}

/* The guard and the final files. */
static enum qp_status finish(struct tune *t, struct qp_placement *best, struct qp_error *err) {
    const char *dir = t->r->output_dir;
    struct qp_placement *none = qp_placement_create();
    char *final = join(dir, "optimized_final.onnx"), *pj = join(dir, "placement.json"),
         *pc = join(dir, "pattern_cache.json");
    enum qp_status st = QP_OK;
    if (!none || !final || !pj || !pc) {
        st = qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
        goto done;
    }
    if ((st = write_model(t, none, t->ref_path, err)) != QP_OK) goto done;
    struct qp_latency_race_options ro = t->o->race;
    ro.min_effect = t->o->guard_min_effect;
    ro.replicate = 0; /* Q/DQ against none: several times apart, one race decides */
    struct qp_latency_race_result res;
    if ((st = qp_latency_race(t->o->backend, t->best_path, t->ref_path, &ro, &res, err)) != QP_OK)
        goto done;
    t->r->guard = res.verdict;
    t->r->reference_median_ms = median_of(res.best_ms, res.n_best);
    double guard_best_ms = median_of(res.cand_ms, res.n_cand);
    if (t->r->n_measured == 0 && !t->region) t->r->seed_median_ms = guard_best_ms;
    if (t->r->n_measured == 0 || t->region) t->r->best_median_ms = guard_best_ms;
    qp_latency_race_result_release(&res);
    t->r->guard_passed = t->r->guard.verdict == QP_LATENCY_FASTER;
    const char *keep = t->r->guard_passed ? t->best_path : t->ref_path;
    if ((st = qp_placement_save_file(t->r->guard_passed ? best : none, pj, err)) != QP_OK)
        goto done;
    if (rename(keep, final) != 0) {
        st =
            qp_error_set(err, QP_ERR_IO, "autotune: cannot write '%s': %s", final, strerror(errno));
        goto done;
    }
    if ((st = qp_pattern_cache_save_file(t->cache_out, pc, err)) != QP_OK) goto done;
    st = write_pareto(t, err);
done:
    qp_placement_free(none);
    free(final);
    free(pj);
    free(pc);
    return st;
}

enum qp_status qp_autotune(const struct qp_autotune_options *o,
                           struct qp_autotune_report **report_out, struct qp_error *err) {
    if (report_out) *report_out = NULL;
    if (!o || !o->onnx_path || !o->backend)
        return qp_error_set(err, QP_ERR_USAGE, "autotune: the model path and a backend are needed");
    if (o->high_precision != QP_DTYPE_FLOAT && o->high_precision != QP_DTYPE_FLOAT16)
        return qp_error_set(err, QP_ERR_USAGE, "autotune: high precision must be fp32 or fp16");
    if ((unsigned)o->mode >= QP_AUTOTUNE_MODE_COUNT || !(o->guard_min_effect >= 0) ||
        (unsigned)o->quant_mode >= QP_QUANT_MODE_COUNT)
        return qp_error_set(err, QP_ERR_USAGE, "autotune: bad mode or guard effect");
    if (!isfinite(o->max_output_drift))
        return qp_error_set(err, QP_ERR_USAGE,
                            "autotune: max_output_drift must be a finite number (< 0: no bound)");
    struct tune t = {.o = o, .t0 = qp_clock_seconds(), .bound = -1, .best_pattern = -1};
    size_t *order = NULL;
    struct qp_placement *best = NULL;
    enum qp_status st = QP_OK;
    if (!(t.r = calloc(1, sizeof *t.r)) ||
        !(t.r->output_dir = strdup(o->output_dir ? o->output_dir : "autotune_out"))) {
        st = qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
        goto fail;
    }
    if ((st = prepare(&t, err)) != QP_OK) goto fail;
    double t_search = qp_clock_seconds();
    if ((st = region_prepare(&t, err)) != QP_OK) goto fail;
    if (!(t.state_path = o->state_file ? strdup(o->state_file)
                                       : join(t.r->output_dir, "autotune_state.json"))) {
        st = qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
        goto fail;
    }
    if ((st = state_open(&t, err)) != QP_OK) goto fail; /* read before anything is written */
    if (!(t.measured = cJSON_CreateArray())) {
        st = qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
        goto fail;
    }
    if ((st = drift_setup(&t, err)) != QP_OK) goto fail;
    if ((st = make_dir(t.r->output_dir, err)) != QP_OK) goto fail;
    char *log_path = join(t.r->output_dir, "log.jsonl");
    t.cand_path = join(t.r->output_dir, ".autotune.candidate.onnx");
    t.best_path = join(t.r->output_dir, ".autotune.best.onnx");
    t.ref_path = join(t.r->output_dir, ".autotune.reference.onnx");
    t.cand_sub_path = join(t.r->output_dir, ".autotune.sub.candidate.onnx");
    t.best_sub_path = join(t.r->output_dir, ".autotune.sub.best.onnx");
    t.cand_all_path = join(t.r->output_dir, ".autotune.sub.all.candidate.onnx");
    t.best_all_path = join(t.r->output_dir, ".autotune.sub.all.best.onnx");
    t.cache_out = qp_pattern_cache_create();
    order = pattern_order(t.rs);
    if (!log_path || !t.cand_path || !t.best_path || !t.ref_path || !t.cache_out || !order ||
        !t.cand_sub_path || !t.best_sub_path || !t.cand_all_path || !t.best_all_path) {
        free(log_path);
        st = qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
        goto fail;
    }
    t.log = fopen(log_path, "w");
    if (!t.log) {
        st = qp_error_set(err, QP_ERR_IO, "autotune: cannot write '%s': %s", log_path,
                          strerror(errno));
        free(log_path);
        goto fail;
    }
    free(log_path);
    if ((st = qp_placement_copy(t.r->seed, &best, err)) != QP_OK) goto fail;
    if ((st = write_model(&t, best, t.best_path, err)) != QP_OK) goto fail;
    if (t.region && (st = region_seed(&t, err)) != QP_OK) goto fail;
    size_t n_order = 0, done = 0, planned = 0;
    for (size_t i = 0; i < t.rs->n_patterns; i++)
        if (t.rs->patterns[order[i]].n_points && pattern_searched(&t, order[i]))
            order[n_order++] = order[i];
    size_t max =
        o->schemes_per_pattern ? o->schemes_per_pattern : qp_autotune_mode_schemes(o->mode);
    for (size_t k = 0; k < n_order; k++)
        planned += planned_schemes(t.rs->patterns[order[k]].n_points, max);
    for (size_t k = 0; k < n_order && !t.r->interrupted; k++)
        if ((st = tune_pattern(&t, order[k], k, n_order, &done, &planned, &best, err)) != QP_OK)
            goto fail;
    if (t.region && t.whole_best_stale && !t.r->interrupted &&
        (st = write_model(&t, best, t.best_path, err)) != QP_OK) /* races wrote sub-models */
        goto fail;
    if ((st = region_check(&t, &best, err)) != QP_OK) goto fail;
    t.r->search_seconds = qp_clock_seconds() - t_search;
    if (!t.r->interrupted && (st = finish(&t, best, err)) != QP_OK) goto fail;
    t.r->best = best;
    best = NULL;
    t.r->seconds = qp_clock_seconds() - t.t0;
fail:
    if (t.log && fclose(t.log) != 0 && st == QP_OK)
        st = qp_error_set(err, QP_ERR_IO, "autotune: cannot write log.jsonl");
    if (t.cand_path) unlink(t.cand_path);
    if (t.best_path) unlink(t.best_path);
    if (t.ref_path) unlink(t.ref_path);
    free(t.cand_path);
    free(t.best_path);
    free(t.ref_path);
    region_release(&t);
    free(order);
    free(t.region_in);
    free(t.state_path);
    cJSON_Delete(t.state);
    cJSON_Delete(t.prev);
    cJSON_Delete(t.prev_drift);
    cJSON_Delete(t.best_points);
    cJSON_Delete(t.measured);
    if (t.r) t.r->drift_seconds = qp_autotune_drift_seconds(t.drift);
    qp_autotune_drift_free(t.drift);
    qp_placement_free(best);
    qp_pattern_cache_free(t.cache_in);
    qp_pattern_cache_free(t.cache_out);
    qp_ranges_free(t.ranges);
    qp_regions_free(t.rs);
    qp_model_free(t.m);
    if (st == QP_OK && report_out)
        *report_out = t.r;
    else
        qp_autotune_report_free(t.r);
    return st;
}
