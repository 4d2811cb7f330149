/* Latency backends: the common entry point, builtin (the engine) and fixed (autotune/latency.h).
 */
#include "autotune/latency.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/provider.h"
#include "core/clock.h"
#include "core/size.h"
#include "qplace/model.h"
#include "qplace/session.h"
#include "runtime/bench.h"

/* 1 when every sample is a latency (finite, >= 0); else the error names the run. */
static int samples_ok(const struct qp_latency_backend *b, const char *path, const double *ms,
                      size_t n, struct qp_error *err) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(ms[i]) || ms[i] < 0) {
            qp_error_set(err, QP_ERR_BAD_INPUT, "latency: %s: run %zu of '%s' has latency %g ms",
                         b->name, i, path, ms[i]);
            return 0;
        }
    return 1;
}

enum qp_status qp_latency_measure(struct qp_latency_backend *b, const char *model_path,
                                  size_t n_runs, double *samples_ms, struct qp_error *err) {
    if (!b || !b->measure || !model_path || !samples_ms)
        return qp_error_set(err, QP_ERR_USAGE, "latency: NULL argument");
    if (n_runs == 0) return qp_error_set(err, QP_ERR_USAGE, "latency: n_runs is 0");
    /* The backend writes a scratch array: the caller's is written only on success. */
    double *tmp = qp_malloc_n(n_runs, sizeof *tmp);
    if (!tmp) return qp_error_set(err, QP_ERR_NOMEM, "latency: out of memory");
    enum qp_status st = b->measure(b, model_path, n_runs, tmp, err);
    if (st == QP_OK && !samples_ok(b, model_path, tmp, n_runs, err)) st = QP_ERR_BAD_INPUT;
    if (st == QP_OK) memcpy(samples_ms, tmp, n_runs * sizeof *tmp);
    free(tmp);
    return st;
}

enum qp_status qp_latency_measure_pair(struct qp_latency_backend *b, const char *a_path,
                                       const char *b_path, size_t n_runs, double *a_ms,
                                       double *b_ms, struct qp_error *err) {
    if (!b || !b->measure || !a_path || !b_path || !a_ms || !b_ms)
        return qp_error_set(err, QP_ERR_USAGE, "latency: NULL argument");
    if (n_runs == 0) return qp_error_set(err, QP_ERR_USAGE, "latency: n_runs is 0");
    double *tmp = qp_malloc_n(n_runs, 2 * sizeof *tmp);
    if (!tmp) return qp_error_set(err, QP_ERR_NOMEM, "latency: out of memory");
    enum qp_status st;
    if (b->measure_pair) {
        st = b->measure_pair(b, a_path, b_path, n_runs, tmp, tmp + n_runs, err);
        if (st == QP_OK && (!samples_ok(b, a_path, tmp, n_runs, err) ||
                            !samples_ok(b, b_path, tmp + n_runs, n_runs, err)))
            st = QP_ERR_BAD_INPUT;
    } else if ((st = qp_latency_measure(b, a_path, n_runs, tmp, err)) == QP_OK) {
        st = qp_latency_measure(b, b_path, n_runs, tmp + n_runs, err);
    }
    if (st == QP_OK) {
        memcpy(a_ms, tmp, n_runs * sizeof *tmp);
        memcpy(b_ms, tmp + n_runs, n_runs * sizeof *tmp);
    }
    free(tmp);
    return st;
}

void qp_latency_backend_free(struct qp_latency_backend *b) {
    if (b && b->free) b->free(b);
}

/* ---- builtin ---------------------------------------------------------------------------- */

struct builtin {
    struct qp_latency_backend base; /* first: the backend pointer is this struct's */
    struct qp_latency_builtin_options o;
    struct qp_calib_shapes shapes;
};

void qp_latency_builtin_options_default(struct qp_latency_builtin_options *o) {
    o->n_threads = 0;
    o->warmup = 3;
    o->shapes = NULL;
    o->int8 = QP_INT8_AUTO;
}

/* The parsed shapes as the session API's (names borrowed from `c`); *out is free()d. */
static enum qp_status session_shapes(const struct qp_calib_shapes *c, struct qp_shape **out,
                                     struct qp_error *err) {
    struct qp_shape *sh = qp_malloc_n(c->n ? c->n : 1, sizeof *sh);
    if (!sh) return qp_error_set(err, QP_ERR_NOMEM, "latency: builtin: out of memory");
    for (size_t i = 0; i < c->n; i++) {
        memset(&sh[i], 0, sizeof sh[i]);
        sh[i].name = c->items[i].name;
        sh[i].rank = c->items[i].rank;
        memcpy(sh[i].dims, c->items[i].dims, sizeof sh[i].dims);
    }
    *out = sh;
    return QP_OK;
}

/* One model ready to run: its session and deterministic inputs (runtime/bench.h). */
struct ready {
    struct qp_model *m;
    struct qp_session *s;
    struct qp_array *inputs;
};

static void ready_close(struct ready *r) {
    qp_bench_inputs_free(r->inputs, r->s ? qp_session_n_inputs(r->s) : 0);
    qp_session_free(r->s);
    qp_model_free(r->m);
    memset(r, 0, sizeof *r);
}

/* Loads `path` and makes its session with the backend's options and its inputs; errors are
 * prefixed with the path. */
static enum qp_status ready_open(const struct builtin *b, const char *path, struct ready *r,
                                 struct qp_error *err) {
    memset(r, 0, sizeof *r);
    struct qp_shape *given = NULL, *all = NULL;
    size_t n_all = 0;
    struct qp_session_options so = {.n_threads = b->o.n_threads, .int8 = b->o.int8};
    enum qp_status st = qp_model_load_file(path, NULL, &r->m, err);
    if (st == QP_OK) st = session_shapes(&b->shapes, &given, err);
    if (st == QP_OK) st = qp_bench_input_shapes(r->m, b->shapes.n, given, &all, &n_all, err);
    if (st == QP_OK) st = qp_session_create(r->m, &so, n_all, all, &r->s, err);
    if (st == QP_OK) st = qp_bench_inputs_create(r->s, n_all, all, &r->inputs, err);
    free(all);
    free(given);
    if (st != QP_OK) {
        ready_close(r);
        qp_error_prefix(err, "latency: builtin: '%s': ", path);
    }
    return st;
}

static enum qp_status builtin_measure(struct qp_latency_backend *base, const char *model_path,
                                      size_t n_runs, double *samples_ms, struct qp_error *err) {
    struct builtin *b = (struct builtin *)base;
    if (n_runs > INT_MAX)
        return qp_error_set(err, QP_ERR_USAGE, "latency: builtin: %zu runs is too many", n_runs);
    struct ready r;
    struct qp_bench_result res = {0};
    struct qp_bench_options bo = {
        .warmup = b->o.warmup, .iterations = (int)n_runs, .n_threads = b->o.n_threads};
    enum qp_status st = ready_open(b, model_path, &r, err);
    if (st == QP_OK &&
        (st = qp_bench_session(r.s, qp_session_n_inputs(r.s), r.inputs, &bo, &res, err)) != QP_OK)
        qp_error_prefix(err, "latency: builtin: '%s': ", model_path);
    if (st == QP_OK) memcpy(samples_ms, res.run_ms, n_runs * sizeof *samples_ms);
    qp_bench_result_release(&res);
    ready_close(&r);
    return st;
}

/* One run of r, its wall time into *ms (when ms is not NULL). */
static enum qp_status timed_run(const struct ready *r, const char *path, double *ms,
                                struct qp_error *err) {
    double t0 = 1e3 * qp_clock_seconds();
    enum qp_status st = qp_session_run(r->s, qp_session_n_inputs(r->s), r->inputs, err);
    if (st != QP_OK) return qp_error_prefix(err, "latency: builtin: '%s': ", path);
    if (ms) *ms = 1e3 * qp_clock_seconds() - t0;
    return QP_OK;
}

/* Both sessions open at once; warm-up and timed runs alternate, the order swapping each pair
 * (a b, b a, ...) so that neither side always runs on the other's caches. */
static enum qp_status builtin_measure_pair(struct qp_latency_backend *base, const char *a_path,
                                           const char *b_path, size_t n_runs, double *a_ms,
                                           double *b_ms, struct qp_error *err) {
    struct builtin *b = (struct builtin *)base;
    struct ready r[2];
    const char *path[2] = {a_path, b_path};
    double *out[2] = {a_ms, b_ms};
    enum qp_status st = ready_open(b, a_path, &r[0], err);
    if (st == QP_OK && (st = ready_open(b, b_path, &r[1], err)) != QP_OK) ready_close(&r[0]);
    if (st != QP_OK) return st;
    for (int i = 0; st == QP_OK && i < b->o.warmup; i++)
        for (int k = 0; st == QP_OK && k < 2; k++)
            st = timed_run(&r[(i + k) % 2], path[(i + k) % 2], NULL, err);
    for (size_t i = 0; st == QP_OK && i < n_runs; i++)
        for (size_t k = 0; st == QP_OK && k < 2; k++) {
            size_t w = (i + k) % 2;
            st = timed_run(&r[w], path[w], &out[w][i], err);
        }
    ready_close(&r[0]);
    ready_close(&r[1]);
    return st;
}

static void builtin_free(struct qp_latency_backend *base) {
    struct builtin *b = (struct builtin *)base;
    qp_calib_shapes_release(&b->shapes);
    free(b);
}

enum qp_status qp_latency_builtin_create(const struct qp_latency_builtin_options *o,
                                         struct qp_latency_backend **out, struct qp_error *err) {
    struct qp_latency_builtin_options dflt;
    qp_latency_builtin_options_default(&dflt);
    if (!o) o = &dflt;
    if (!out) return qp_error_set(err, QP_ERR_USAGE, "latency: builtin: NULL argument");
    if (o->n_threads < 0 || o->warmup < 0)
        return qp_error_set(err, QP_ERR_USAGE,
                            "latency: builtin: n_threads %d and warmup %d must be >= 0",
                            o->n_threads, o->warmup);
    if (o->int8 != QP_INT8_OFF && o->int8 != QP_INT8_AUTO)
        return qp_error_set(err, QP_ERR_USAGE, "latency: builtin: int8 mode %d", o->int8);
    struct builtin *b = calloc(1, sizeof *b);
    if (!b) return qp_error_set(err, QP_ERR_NOMEM, "latency: builtin: out of memory");
    if (o->shapes && o->shapes[0]) {
        enum qp_status st = qp_calib_shapes_parse(o->shapes, &b->shapes, err);
        if (st != QP_OK) {
            free(b);
            return qp_error_prefix(err, "latency: builtin: shapes: ");
        }
    }
    b->o = *o;
    b->o.shapes = NULL; /* parsed above; the string is only borrowed */
    b->base.name = "builtin";
    snprintf(b->base.detail, sizeof b->base.detail, "%s, %d threads%s, int8 %s", qp_session_isa(),
             o->n_threads, o->n_threads ? "" : " (all cores)",
             o->int8 == QP_INT8_AUTO ? "auto" : "off");
    b->base.measure = builtin_measure;
    b->base.measure_pair = builtin_measure_pair;
    b->base.free = builtin_free;
    *out = &b->base;
    return QP_OK;
}

/* ---- fixed ------------------------------------------------------------------------------ */

struct fixed {
    struct qp_latency_backend base;
    qp_latency_fixed_fn fn;
    void *ctx;
    size_t k; /* samples handed out so far */
};

static enum qp_status fixed_measure(struct qp_latency_backend *base, const char *model_path,
                                    size_t n_runs, double *samples_ms, struct qp_error *err) {
    struct fixed *f = (struct fixed *)base;
    for (size_t i = 0; i < n_runs; i++) {
        double v = f->fn(f->ctx, model_path, f->k++);
        if (!isfinite(v) || v < 0)
            return qp_error_set(err, QP_ERR_BAD_INPUT, "latency: fixed: sample %zu of '%s' is %g",
                                f->k - 1, model_path, v);
        samples_ms[i] = v;
    }
    return QP_OK;
}

static void fixed_free(struct qp_latency_backend *base) {
    free(base);
}

enum qp_status qp_latency_fixed_create(qp_latency_fixed_fn fn, void *ctx,
                                       struct qp_latency_backend **out, struct qp_error *err) {
    if (!fn || !out) return qp_error_set(err, QP_ERR_USAGE, "latency: fixed: NULL argument");
    struct fixed *f = calloc(1, sizeof *f);
    if (!f) return qp_error_set(err, QP_ERR_NOMEM, "latency: fixed: out of memory");
    f->fn = fn;
    f->ctx = ctx;
    f->base.name = "fixed";
    snprintf(f->base.detail, sizeof f->base.detail, "a caller's latencies");
    f->base.measure = fixed_measure;
    f->base.free = fixed_free;
    *out = &f->base;
    return QP_OK;
}
