/* Accuracy in the autotune search: drift per placement and pareto.json (autotune_drift.h). */
#include "pipeline/autotune_drift.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calib/provider.h"
#include "core/clock.h"
#include "sensitivity/sensitivity.h"

struct qp_autotune_drift {
    struct qp_placement *every; /* checked against the model: its entries are the overlays */
    struct qp_provider *data, *head;
    struct qp_sens_options so;
    struct qp_sens_eval *ev;
    unsigned char *on; /* per entry of `every` */
    const char *source, *path;
    double seconds;
};

static enum qp_status nomem(struct qp_error *err) {
    return qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
}

void qp_autotune_drift_free(struct qp_autotune_drift *d) {
    if (!d) return;
    qp_sens_eval_free(d->ev);
    qp_provider_free(d->head);
    qp_provider_free(d->data);
    qp_placement_free(d->every);
    free(d->on);
    free(d);
}

/* The evaluation data: eval data, else the calibration data, else synthetic data with seed 2
 * (quantize's evaluation data, docs/quantize.md). */
static enum qp_status open_data(const struct qp_model *model,
                                const struct qp_autotune_drift_options *o,
                                struct qp_autotune_drift *d, struct qp_error *err) {
    struct qp_data_options dopt;
    if (o->data)
        dopt = *o->data;
    else
        qp_data_options_default(&dopt);
    dopt.seed = 2;
    dopt.synthetic_batches = 1;
    d->path = o->eval_data_path ? o->eval_data_path : o->calibration_data_path;
    d->source = o->eval_data_path          ? "eval data"
                : o->calibration_data_path ? "calibration data (in-sample)"
                                           : "synthetic data (seed 2)";
    enum qp_status st =
        qp_provider_open_model(model, d->path, o->calibration_shapes, &dopt, &d->data, err);
    if (st != QP_OK) {
        if (o->eval_data_path) qp_error_prefix(err, "autotune: --eval_data_path");
        return st;
    }
    if (!o->max_samples) return QP_OK;
    return qp_provider_head_create(d->data, o->max_samples, &d->head, err);
}

enum qp_status qp_autotune_drift_open(const struct qp_model *model,
                                      const struct qp_placement *every,
                                      const struct qp_ranges *ranges,
                                      const struct qp_autotune_drift_options *o,
                                      struct qp_autotune_drift **out, struct qp_error *err) {
    *out = NULL;
    double t0 = qp_clock_seconds();
    struct qp_autotune_drift *d = calloc(1, sizeof *d);
    if (!d) return nomem(err);
    enum qp_status st = qp_placement_copy(every, &d->every, err);
    if (st == QP_OK) st = qp_placement_check(d->every, (struct qp_model *)model, err);
    if (st == QP_OK &&
        !(d->on = calloc(d->every->n_edges + d->every->n_weights + 1, sizeof *d->on)))
        st = nomem(err);
    if (st == QP_OK) st = open_data(model, o, d, err);
    if (st == QP_OK) {
        qp_sens_options_default(&d->so);
        d->so.metric = QP_SENS_KL_DIV;
        d->so.qtype = o->quant_mode == QP_QUANT_FP8 ? QP_DTYPE_FLOAT8E4M3FN : QP_DTYPE_INT8;
        /* the search writes its models with absmax weight scales (pipeline/autotune.c's
         * writer_options: clipping every weight again for each scheme's file would cost more
         * than the timing, and latency does not depend on the scales) */
        d->so.weight_clip_mse = 0;
        d->so.n_threads = o->n_threads;
        /* one batch (the default synthetic sample): a scheme's run recomputes what its
         * pattern's entries reach from the reference qp_autotune_drift_rebase sets */
        d->so.incremental = 1;
        d->so.cache_bytes = QP_AUTOTUNE_DRIFT_CACHE;
        st = qp_sens_eval_create(model, d->every, d->head ? d->head : d->data, ranges, &d->so,
                                 &d->ev, err);
        if (st != QP_OK) qp_error_prefix(err, "autotune: output drift on the %s", d->source);
    }
    if (st != QP_OK) {
        qp_autotune_drift_free(d);
        return st;
    }
    d->seconds = qp_clock_seconds() - t0;
    *out = d;
    return QP_OK;
}

/* d->on = the entries of `every` that `p` holds. */
static enum qp_status mark(struct qp_autotune_drift *d, const struct qp_placement *p,
                           struct qp_error *err) {
    size_t ne = d->every->n_edges;
    memset(d->on, 0, ne + d->every->n_weights);
    for (size_t k = 0; k < p->n_edges + p->n_weights; k++) {
        int weight = k >= p->n_edges;
        const char *node = weight ? p->weights[k - p->n_edges].node : p->edges[k].node;
        int input = weight ? p->weights[k - p->n_edges].input : p->edges[k].input;
        int w = 0;
        size_t idx = 0;
        if (!qp_placement_find(d->every, node, input, &w, &idx) || w != weight)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "autotune: drift: slot (node '%s', input %d) is not an insertion "
                                "point of the search",
                                node, input);
        d->on[w ? ne + idx : idx] = 1;
    }
    return QP_OK;
}

enum qp_status qp_autotune_drift_measure(struct qp_autotune_drift *d, const struct qp_placement *p,
                                         double *drift_out, struct qp_error *err) {
    double t0 = qp_clock_seconds();
    enum qp_status st = mark(d, p, err);
    struct qp_sens_budget_step s = {0};
    if (st == QP_OK) st = qp_sens_eval_measure(d->ev, d->on, &s, err);
    d->seconds += qp_clock_seconds() - t0;
    if (st != QP_OK) return st;
    if (!isfinite(s.drift))
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "autotune: drift: the quantized model's outputs are not finite");
    *drift_out = s.drift;
    return QP_OK;
}

void qp_autotune_drift_rebase(struct qp_autotune_drift *d) {
    if (d) qp_sens_eval_rebase(d->ev);
}

const char *qp_autotune_drift_source(const struct qp_autotune_drift *d) {
    return d ? d->source : "";
}
const char *qp_autotune_drift_path(const struct qp_autotune_drift *d) {
    return d ? d->path : NULL;
}
uint64_t qp_autotune_drift_samples(const struct qp_autotune_drift *d) {
    return d ? qp_sens_eval_n_samples(d->ev) : 0;
}
double qp_autotune_drift_seconds(const struct qp_autotune_drift *d) {
    return d ? d->seconds : 0;
}

/* ---- pareto.json ---------------------------------------------------------------------------- */

cJSON *qp_autotune_pareto_entry(const char *label, double median_ms, double drift, long pattern,
                                const char *signature, cJSON *points) {
    cJSON *o = cJSON_CreateObject();
    if (!o) {
        cJSON_Delete(points);
        return NULL;
    }
    cJSON_AddStringToObject(o, "label", label);
    cJSON_AddNumberToObject(o, "median_ms", median_ms);
    cJSON_AddNumberToObject(o, "drift", drift);
    if (pattern >= 0)
        cJSON_AddNumberToObject(o, "pattern", (double)pattern);
    else
        cJSON_AddNullToObject(o, "pattern");
    if (signature)
        cJSON_AddStringToObject(o, "signature", signature);
    else
        cJSON_AddNullToObject(o, "signature");
    cJSON_AddItemToObject(o, "points", points ? points : cJSON_CreateNull());
    return o;
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* 1 when entry a is on the frontier of the n entries. */
static int non_dominated(const double *ms, const double *dr, size_t n, size_t a) {
    for (size_t b = 0; b < n; b++)
        if (b != a && ms[b] <= ms[a] && dr[b] <= dr[a] && (ms[b] < ms[a] || dr[b] < dr[a]))
            return 0;
    return 1;
}

/* The frontier's entries (indices into `measured`), fastest first, into *idx_out / *n_out. */
static enum qp_status frontier(const cJSON *measured, size_t **idx_out, size_t *n_out,
                               struct qp_error *err) {
    size_t n = (size_t)cJSON_GetArraySize(measured), k = 0;
    double *ms = calloc(n + 1, sizeof *ms), *dr = calloc(n + 1, sizeof *dr);
    size_t *idx = calloc(n + 1, sizeof *idx), *valid = calloc(n + 1, sizeof *valid);
    if (!ms || !dr || !idx || !valid) {
        free(ms);
        free(dr);
        free(idx);
        free(valid);
        return nomem(err);
    }
    size_t nv = 0;
    for (size_t i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(measured, (int)i);
        double m = num(e, "median_ms"), d = num(e, "drift");
        if (!(m > 0) || !isfinite(d)) continue;
        ms[nv] = m;
        dr[nv] = d;
        valid[nv++] = i;
    }
    for (size_t a = 0; a < nv; a++)
        if (non_dominated(ms, dr, nv, a)) idx[k++] = a;
    for (size_t i = 1; i < k; i++) /* by median, then drift: stable insertion sort */
        for (size_t j = i; j > 0 && (ms[idx[j - 1]] > ms[idx[j]] ||
                                     (ms[idx[j - 1]] == ms[idx[j]] && dr[idx[j - 1]] > dr[idx[j]]));
             j--) {
            size_t v = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = v;
        }
    for (size_t i = 0; i < k; i++)
        idx[i] = valid[idx[i]];
    free(ms);
    free(dr);
    free(valid);
    *idx_out = idx;
    *n_out = k;
    return QP_OK;
}

static void front_row(const cJSON *e, struct qp_autotune_front *r) {
    memset(r, 0, sizeof *r);
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(e, "label");
    snprintf(r->label, sizeof r->label, "%s", cJSON_IsString(l) ? l->valuestring : "");
    r->median_ms = num(e, "median_ms");
    r->drift = num(e, "drift");
    double p = num(e, "pattern");
    r->pattern = isfinite(p) ? (long)p : -1;
    const cJSON *pts = cJSON_GetObjectItemCaseSensitive(e, "points");
    r->n_points_on = cJSON_IsArray(pts) ? (size_t)cJSON_GetArraySize(pts) : 0;
    r->final = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "final"));
    r->estimated = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "estimated"));
}

static enum qp_status write_atomic(const char *path, const char *text, struct qp_error *err) {
    size_t n = strlen(path) + 8;
    char *tmp = malloc(n);
    if (!tmp) return nomem(err);
    snprintf(tmp, n, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int bad = !f || fprintf(f, "%s\n", text) < 0;
    if (f && fclose(f) != 0) bad = 1;
    if (!bad && rename(tmp, path) != 0) bad = 1;
    int e = errno;
    if (bad) unlink(tmp);
    free(tmp);
    if (bad)
        return qp_error_set(err, QP_ERR_IO, "autotune: cannot write '%s': %s", path, strerror(e));
    return QP_OK;
}

static cJSON *pareto_doc(const cJSON *measured, const struct qp_autotune_pareto_meta *meta,
                         const size_t *idx, size_t k) {
    cJSON *doc = cJSON_CreateObject(), *ev = cJSON_CreateObject(), *fr = cJSON_CreateArray();
    if (!doc || !ev || !fr) {
        cJSON_Delete(doc);
        cJSON_Delete(ev);
        cJSON_Delete(fr);
        return NULL;
    }
    cJSON_AddStringToObject(doc, "format", "qplace.autotune_pareto");
    cJSON_AddNumberToObject(doc, "version", 1);
    cJSON_AddStringToObject(doc, "model", meta->model ? meta->model : "");
    cJSON_AddStringToObject(doc, "metric", "kl_div");
    if (meta->max_output_drift >= 0)
        cJSON_AddNumberToObject(doc, "max_output_drift", meta->max_output_drift);
    else
        cJSON_AddNullToObject(doc, "max_output_drift");
    cJSON_AddStringToObject(ev, "source", meta->source ? meta->source : "");
    if (meta->path)
        cJSON_AddStringToObject(ev, "path", meta->path);
    else
        cJSON_AddNullToObject(ev, "path");
    cJSON_AddNumberToObject(ev, "samples", (double)meta->samples);
    cJSON_AddItemToObject(doc, "evaluation", ev);
    cJSON_AddNumberToObject(doc, "n_measured", cJSON_GetArraySize(measured));
    for (size_t i = 0; i < k; i++)
        cJSON_AddItemToArray(fr, cJSON_Duplicate(cJSON_GetArrayItem(measured, (int)idx[i]), 1));
    cJSON_AddItemToObject(doc, "frontier", fr);
    cJSON_AddItemToObject(doc, "measured", cJSON_Duplicate(measured, 1));
    return doc;
}

enum qp_status qp_autotune_pareto_write(const cJSON *measured, const char *path,
                                        const struct qp_autotune_pareto_meta *meta,
                                        struct qp_autotune_front **rows_out, size_t *n_rows_out,
                                        struct qp_error *err) {
    size_t *idx = NULL, k = 0;
    enum qp_status st = frontier(measured, &idx, &k, err);
    if (st != QP_OK) return st;
    cJSON *doc = pareto_doc(measured, meta, idx, k);
    char *text = doc ? cJSON_Print(doc) : NULL;
    cJSON_Delete(doc);
    struct qp_autotune_front *rows = calloc(k + 1, sizeof *rows);
    if (!text || !rows) {
        st = nomem(err);
        goto done;
    }
    for (size_t i = 0; i < k; i++)
        front_row(cJSON_GetArrayItem(measured, (int)idx[i]), &rows[i]);
    if ((st = write_atomic(path, text, err)) != QP_OK) goto done;
    if (rows_out) {
        *rows_out = rows;
        *n_rows_out = k;
        rows = NULL;
    }
done:
    free(rows);
    free(text);
    free(idx);
    return st;
}
