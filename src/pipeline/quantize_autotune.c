/* qplace quantize --autotune: the search's placement, quantized exactly (quantize_autotune.h). */
#include "pipeline/quantize_autotune.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autotune/trtexec.h"
#include "core/file.h"
#include "qplace/autotune.h"
#include "quant/writer.h"

void qp_quantize_autotune_report_free(struct qp_quantize_autotune_report *r) {
    if (!r) return;
    qp_autotune_report_free(r->search);
    qp_quantize_report_free(r->quantize);
    free(r);
}

/* A fresh folder under $TMPDIR (else /tmp) for the search; *dir_out malloc'd. */
static enum qp_status make_temp_dir(char **dir_out, struct qp_error *err) {
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    size_t n = strlen(base) + 32;
    char *dir = malloc(n);
    if (!dir) return qp_error_set(err, QP_ERR_NOMEM, "quantize --autotune: out of memory");
    snprintf(dir, n, "%s/qplace-autotune-XXXXXX", base);
    if (!mkdtemp(dir)) {
        qp_error_set(err, QP_ERR_IO,
                     "quantize --autotune: cannot create a temporary folder under '%s': %s "
                     "(set TMPDIR, or give --autotune_output_dir)",
                     base, strerror(errno));
        free(dir);
        return err->status;
    }
    *dir_out = dir;
    return QP_OK;
}

/* Removes the temporary folder and the files the search left in it (it makes no subfolders). */
static void remove_temp_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            size_t n = strlen(dir) + strlen(e->d_name) + 2;
            char *p = malloc(n);
            if (!p) continue;
            snprintf(p, n, "%s/%s", dir, e->d_name);
            unlink(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* qp_autotune on `onnx_path` into a's output_dir, or a temporary folder removed afterwards
 * (*temporary 1). */
static enum qp_status search(const struct qp_autotune_options *a, const char *onnx_path,
                             int *temporary, struct qp_autotune_report **out,
                             struct qp_error *err) {
    char *tmp = NULL;
    struct qp_autotune_options ao = *a;
    ao.onnx_path = onnx_path;
    enum qp_status st = QP_OK;
    *temporary = 0;
    if (!ao.output_dir) {
        if ((st = make_temp_dir(&tmp, err)) != QP_OK) return st;
        ao.output_dir = tmp;
        *temporary = 1;
    }
    st = qp_autotune(&ao, out, err);
    if (tmp) {
        remove_temp_dir(tmp);
        free(tmp);
    }
    return st;
}

/* What the quantize options may not hold with a search, and the output paths: checked before
 * the search, so a mistake costs nothing. */
static enum qp_status check_inputs(const struct qp_quantize_options *q,
                                   const struct qp_autotune_options *a, struct qp_error *err) {
    if (!q->onnx_path || !a->backend)
        return qp_error_set(err, QP_ERR_USAGE,
                            "quantize --autotune: the model path and a latency backend are needed");
    if (a->onnx_path && strcmp(a->onnx_path, q->onnx_path) != 0)
        return qp_error_set(err, QP_ERR_USAGE,
                            "quantize --autotune: the search and quantize name different models "
                            "('%s', '%s')",
                            a->onnx_path, q->onnx_path);
    if (q->placement_in || q->placement || q->select || q->rules_path || q->disable_mha_qdq)
        return qp_error_set(err, QP_ERR_USAGE,
                            "quantize --autotune: the search chooses the placement; it cannot be "
                            "combined with --placement_in, include/exclude lists, --rules or "
                            "--disable_mha_qdq (give a Q/DQ model to --autotune_qdq_baseline "
                            "to seed the search instead)");
    char *out = q->output_path ? NULL : qp_quant_default_output(q->onnx_path);
    if (!q->output_path && !out)
        return qp_error_set(err, QP_ERR_NOMEM, "quantize --autotune: out of memory");
    enum qp_status st =
        qp_file_check_output(q->output_path ? q->output_path : out, "quantize: --output_path", err);
    free(out);
    if (st == QP_OK) st = qp_file_check_output(q->placement_out, "quantize: --placement_out", err);
    return st;
}

/* The quantization of the chosen placement: the search's best when the guard kept it, else the
 * empty placement (what the search's placement.json says). */
static enum qp_status quantize_chosen(const struct qp_quantize_options *q,
                                      struct qp_quantize_autotune_report *r, struct qp_error *err) {
    struct qp_placement *none = NULL;
    const struct qp_placement *pl = r->search->best;
    if (!r->search->guard_passed) {
        if (!(none = qp_placement_create()))
            return qp_error_set(err, QP_ERR_NOMEM, "quantize --autotune: out of memory");
        pl = none;
        r->empty_placement = 1;
    }
    struct qp_quantize_options qo = *q;
    qo.placement = pl;
    qo.placement_label =
        r->empty_placement ? "autotune (guard failed: the empty placement)" : "autotune";
    enum qp_status st = qp_quantize(&qo, &r->quantize, err);
    qp_placement_free(none);
    return st;
}

enum qp_status qp_quantize_autotune_search(const struct qp_quantize_options *q,
                                           const struct qp_autotune_options *a,
                                           struct qp_quantize_autotune_report **report_out,
                                           struct qp_error *err) {
    if (report_out) *report_out = NULL;
    if (!q || !a || !report_out)
        return qp_error_set(err, QP_ERR_USAGE, "quantize --autotune: options are needed");
    enum qp_status st = check_inputs(q, a, err);
    if (st != QP_OK) return st;
    struct qp_quantize_autotune_report *r = calloc(1, sizeof *r);
    if (!r) return qp_error_set(err, QP_ERR_NOMEM, "quantize --autotune: out of memory");
    if ((st = search(a, q->onnx_path, &r->temporary_dir, &r->search, err)) != QP_OK) {
        qp_quantize_autotune_report_free(r);
        return st;
    }
    r->interrupted = r->search->interrupted || (a->stop && *a->stop);
    *report_out = r;
    return QP_OK;
}

enum qp_status qp_quantize_autotune_apply(const struct qp_quantize_options *q,
                                          struct qp_quantize_autotune_report *r,
                                          struct qp_error *err) {
    if (!q || !r || !r->search || r->interrupted || r->quantize)
        return qp_error_set(err, QP_ERR_USAGE,
                            "quantize --autotune: no finished search to quantize");
    return quantize_chosen(q, r, err);
}

enum qp_status qp_quantize_autotune(const struct qp_quantize_options *q,
                                    const struct qp_autotune_options *a,
                                    struct qp_quantize_autotune_report **report_out,
                                    struct qp_error *err) {
    if (report_out) *report_out = NULL;
    struct qp_quantize_autotune_report *r = NULL;
    enum qp_status st = qp_quantize_autotune_search(q, a, &r, err);
    if (st == QP_OK && !r->interrupted) st = qp_quantize_autotune_apply(q, r, err);
    if (st == QP_OK && report_out)
        *report_out = r;
    else
        qp_quantize_autotune_report_free(r);
    return st;
}

/* ---- qplace/autotune.h ---------------------------------------------------------------------- */

void qp_autotune_config_default(struct qp_autotune_config *c) {
    memset(c, 0, sizeof *c);
    c->warmup_runs = -1;
    c->quantize_mode = QP_QUANT_INT8;
    c->high_precision_dtype = QP_DTYPE_FLOAT;
}

void qp_autotune_summary_free(struct qp_autotune_summary *s) {
    if (!s) return;
    qp_placement_free(s->placement);
    free(s);
}

/* The backend a configuration names. */
static enum qp_status config_backend(const struct qp_autotune_config *c,
                                     struct qp_latency_backend **out, struct qp_error *err) {
    const char *name = c->backend ? c->backend : "builtin";
    int trt = strcmp(name, "trtexec") == 0;
    if (!trt && (c->timing_cache || c->trtexec_args))
        return qp_error_set(err, QP_ERR_USAGE,
                            "autotune: timing_cache and trtexec_args need the trtexec backend");
    if (trt && c->warmup_runs >= 0)
        return qp_error_set(err, QP_ERR_USAGE,
                            "autotune: warmup_runs counts runs of builtin and ort; trtexec warms "
                            "up for a time");
    if (strcmp(name, "builtin") == 0) {
        struct qp_latency_builtin_options o;
        qp_latency_builtin_options_default(&o);
        o.n_threads = c->n_threads;
        if (c->warmup_runs >= 0) o.warmup = c->warmup_runs;
        o.shapes = c->calibration_shapes;
        return qp_latency_builtin_create(&o, out, err);
    }
    if (strcmp(name, "ort") == 0) {
        struct qp_latency_ort_options o;
        qp_latency_ort_options_default(&o);
        o.n_threads = c->n_threads;
        if (c->warmup_runs >= 0) o.warmup = c->warmup_runs;
        o.shapes = c->calibration_shapes;
        return qp_latency_ort_create(&o, out, err);
    }
    if (trt) {
        struct qp_latency_trtexec_options o;
        qp_latency_trtexec_options_default(&o);
        o.timing_cache = c->timing_cache;
        o.extra_args = c->trtexec_args;
        return qp_latency_trtexec_create(&o, out, err);
    }
    return qp_error_set(err, QP_ERR_USAGE,
                        "autotune: backend must be builtin, trtexec or ort, not '%s'", name);
}

/* The search's options from a configuration (the backend set by the caller). */
static enum qp_status config_options(const struct qp_autotune_config *c,
                                     struct qp_autotune_options *o, struct qp_error *err) {
    qp_autotune_options_default(o);
    int m = qp_autotune_mode_parse(c->mode ? c->mode : "default");
    if (m < 0)
        return qp_error_set(err, QP_ERR_USAGE,
                            "autotune: mode must be quick, default or extensive, not '%s'",
                            c->mode);
    if (c->timing_runs != 0 && c->timing_runs < 4)
        return qp_error_set(err, QP_ERR_USAGE, "autotune: timing_runs %d is below 4",
                            c->timing_runs);
    o->mode = (enum qp_autotune_mode)m;
    o->schemes_per_pattern = c->schemes_per_region;
    o->output_dir = c->output_dir;
    o->pattern_cache_in = c->pattern_cache;
    o->qdq_baseline = c->qdq_baseline;
    o->state_file = c->state_file;
    if (c->timing_runs) o->race.runs_per_round = (size_t)c->timing_runs;
    o->quant_mode = (enum qp_quant_mode)c->quantize_mode;
    o->high_precision = (enum qp_dtype)c->high_precision_dtype;
    o->calibration_shapes = c->calibration_shapes;
    o->n_threads = c->n_threads;
    return QP_OK;
}

static enum qp_status summary_of(const struct qp_autotune_report *r,
                                 struct qp_autotune_summary **out, struct qp_error *err) {
    struct qp_autotune_summary *s = calloc(1, sizeof *s);
    if (!s) return qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
    s->n_regions = r->n_regions;
    s->n_patterns = r->n_patterns;
    s->n_points = r->n_points;
    s->n_measured = r->n_measured;
    s->n_replayed = r->n_replayed;
    s->n_adopted = r->n_adopted;
    s->n_skipped = r->n_skipped;
    s->seed_median_ms = r->seed_median_ms;
    s->best_median_ms = r->best_median_ms;
    s->reference_median_ms = r->reference_median_ms;
    s->guard_passed = r->guard_passed;
    s->seconds = r->seconds;
    enum qp_status st = QP_OK;
    if (r->guard_passed)
        st = qp_placement_copy(r->best, &s->placement, err);
    else if (!(s->placement = qp_placement_create()))
        st = qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
    if (st != QP_OK) {
        qp_autotune_summary_free(s);
        return st;
    }
    *out = s;
    return QP_OK;
}

enum qp_status qp_autotune_file(const char *onnx_path, struct qp_provider *calibration_data,
                                const struct qp_autotune_config *c,
                                struct qp_autotune_summary **out, struct qp_error *err) {
    if (out) *out = NULL;
    if (!onnx_path || !c || !out)
        return qp_error_set(err, QP_ERR_USAGE,
                            "autotune: a model path, a configuration and an "
                            "output pointer are needed");
    struct qp_autotune_options o;
    struct qp_latency_backend *b = NULL;
    struct qp_autotune_report *r = NULL;
    int temporary = 0;
    enum qp_status st = config_options(c, &o, err);
    if (st == QP_OK) st = config_backend(c, &b, err);
    if (st == QP_OK) {
        o.backend = b;
        o.calibration_provider = calibration_data;
        st = search(&o, onnx_path, &temporary, &r, err);
    }
    if (st == QP_OK) st = summary_of(r, out, err);
    qp_autotune_report_free(r);
    qp_latency_backend_free(b);
    return st;
}
