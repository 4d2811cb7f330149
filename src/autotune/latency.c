/* Latency backends: the common entry point, builtin (the engine) and fixed (autotune/latency.h).
 */
#include "autotune/latency.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

/* One model ready to run: its session and deterministic inputs (runtime/bench.h). */
struct ready {
    struct qp_model *m;
    struct qp_session *s;
    struct qp_array *inputs;
};

/* What stat(2) says of a file, to tell whether a file at a path is still the one a session
 * was made from (as make and git's index do): device, inode, size and modification time. A
 * rewrite (autotune writes its files whole and renames them into place) changes the inode or
 * the time; a rename keeps them (not the change time, hence not compared), so a candidate
 * renamed to the best file keeps its session. */
struct file_id {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
};

/* measure_pair keeps the last two models' sessions open between calls: a race's rounds, and
 * the races that share the best model, do not load and prepare them again (a ResNet-50 load
 * and integer-path session cost about a quarter of a second each, and autotune's quick mode
 * opened some 340 of them). */
#define BUILTIN_KEEP 2

struct kept {
    struct ready r;
    struct file_id id;
    char *path;         /* where the file was last seen */
    int used, known;    /* known: id identifies the file the session was made from */
    unsigned long last; /* use order */
};

struct builtin {
    struct qp_latency_backend base; /* first: the backend pointer is this struct's */
    struct qp_latency_builtin_options o;
    struct qp_calib_shapes shapes;
    struct kept keep[BUILTIN_KEEP];
    unsigned long tick;
    size_t n_opened; /* sessions made (qp_latency_builtin_opened) */
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

static void ready_close(struct ready *r) {
    qp_bench_inputs_free(r->inputs, r->s ? qp_session_n_inputs(r->s) : 0);
    qp_session_free(r->s);
    qp_model_free(r->m);
    memset(r, 0, sizeof *r);
}

/* Loads `path` and makes its session with the backend's options and its inputs; errors are
 * prefixed with the path. */
static enum qp_status ready_open(struct builtin *b, const char *path, struct ready *r,
                                 struct qp_error *err) {
    memset(r, 0, sizeof *r);
    b->n_opened++;
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

/* Kept sessions: defined below, with measure_pair. */
static int kept_find(struct builtin *b, const char *path);
static enum qp_status kept_open(struct builtin *b, const char *path, int spare, int *slot,
                                struct qp_error *err);
static void kept_drop(struct kept *k);

/* The session is kept as measure_pair keeps its two (a later call on the same file, either
 * kind, reuses it: autotune times a pattern's best sub-model once, then races it); a kept one
 * gets one warm-up run instead of the backend's warm-up. */
static enum qp_status builtin_measure(struct qp_latency_backend *base, const char *model_path,
                                      size_t n_runs, double *samples_ms, struct qp_error *err) {
    struct builtin *b = (struct builtin *)base;
    if (n_runs > INT_MAX)
        return qp_error_set(err, QP_ERR_USAGE, "latency: builtin: %zu runs is too many", n_runs);
    struct qp_bench_result res = {0};
    int slot = kept_find(b, model_path), fresh = slot < 0;
    enum qp_status st = fresh ? kept_open(b, model_path, -1, &slot, err) : QP_OK;
    if (st != QP_OK) return st;
    const struct ready *r = &b->keep[slot].r;
    struct qp_bench_options bo = {.warmup = fresh || b->o.warmup < 1 ? b->o.warmup : 1,
                                  .iterations = (int)n_runs,
                                  .n_threads = b->o.n_threads};
    if ((st = qp_bench_session(r->s, qp_session_n_inputs(r->s), r->inputs, &bo, &res, err)) !=
        QP_OK) {
        qp_error_prefix(err, "latency: builtin: '%s': ", model_path);
        kept_drop(&b->keep[slot]); /* a session that failed is not kept */
    }
    if (st == QP_OK) memcpy(samples_ms, res.run_ms, n_runs * sizeof *samples_ms);
    qp_bench_result_release(&res);
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

static int file_id_of(const char *path, struct file_id *id) {
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    memset(id, 0, sizeof *id);
    id->dev = st.st_dev;
    id->ino = st.st_ino;
    id->size = st.st_size;
    id->mtime = st.st_mtim;
    return 1;
}

static int same_file(const struct file_id *a, const struct file_id *b) {
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

static void kept_drop(struct kept *k) {
    ready_close(&k->r);
    free(k->path);
    k->path = NULL;
    k->used = 0;
}

/* The slot to open a model in, other than `spare` (the pair's other side): one that held an
 * earlier file at the same path (stale now), else a free one, else the least recently used. */
static int kept_victim(const struct builtin *b, const char *path, int spare) {
    int at = -1;
    for (int i = 0; i < BUILTIN_KEEP; i++)
        if (i != spare && b->keep[i].used && b->keep[i].path && strcmp(b->keep[i].path, path) == 0)
            return i;
    for (int i = 0; i < BUILTIN_KEEP; i++) {
        if (i == spare) continue;
        if (!b->keep[i].used) return i;
        if (at < 0 || b->keep[i].last < b->keep[at].last) at = i;
    }
    return at;
}

/* The slot whose session was made from the very file now at `path` (its path updated: the
 * file may have been renamed), or -1. */
static int kept_find(struct builtin *b, const char *path) {
    struct file_id id;
    if (!file_id_of(path, &id)) return -1;
    for (int i = 0; i < BUILTIN_KEEP; i++)
        if (b->keep[i].used && b->keep[i].known && same_file(&b->keep[i].id, &id)) {
            char *dup = strdup(path);
            if (dup) {
                free(b->keep[i].path);
                b->keep[i].path = dup;
            }
            b->keep[i].last = ++b->tick;
            return i;
        }
    return -1;
}

/* Opens the file at `path` into kept_victim's slot (never `spare`). */
static enum qp_status kept_open(struct builtin *b, const char *path, int spare, int *slot,
                                struct qp_error *err) {
    struct file_id id, after;
    int known = file_id_of(path, &id);
    int at = kept_victim(b, path, spare);
    kept_drop(&b->keep[at]);
    enum qp_status st = ready_open(b, path, &b->keep[at].r, err);
    if (st != QP_OK) return st;
    /* Known only when the file did not change while it was read (else it is opened again on
     * the next call). */
    b->keep[at].known = known && file_id_of(path, &after) && same_file(&id, &after);
    b->keep[at].id = id;
    b->keep[at].path = strdup(path); /* NULL: never preferred as stale */
    b->keep[at].used = 1;
    b->keep[at].last = ++b->tick;
    *slot = at;
    return QP_OK;
}

/* The sessions of a pair call: both files looked up first, so that opening one never evicts
 * the other's session (after autotune renames an adopted candidate to the best file, the next
 * race's candidate takes the old best's slot); fresh[k]: made for this call. */
static enum qp_status kept_pair(struct builtin *b, const char *const *path, int *slot, int *fresh,
                                struct qp_error *err) {
    for (int k = 0; k < 2; k++) {
        slot[k] = kept_find(b, path[k]);
        fresh[k] = 0;
    }
    for (int k = 0; k < 2; k++) {
        if (slot[k] < 0 && k == 1) slot[1] = kept_find(b, path[1]); /* the same file as a's */
        if (slot[k] >= 0) continue;
        enum qp_status st = kept_open(b, path[k], slot[1 - k], &slot[k], err);
        if (st != QP_OK) return st;
        fresh[k] = 1;
    }
    return QP_OK;
}

/* Both sessions open at once (kept from earlier calls where the files are the same); warm-up
 * and timed runs alternate, the order swapping each pair (a b, b a, ...) so that neither side
 * always runs on the other's caches. A session made for this call gets the backend's warm-up
 * runs; a kept one, warmed up before, one run (to bring its data back into the caches after
 * whatever ran in between). */
static enum qp_status builtin_measure_pair(struct qp_latency_backend *base, const char *a_path,
                                           const char *b_path, size_t n_runs, double *a_ms,
                                           double *b_ms, struct qp_error *err) {
    struct builtin *b = (struct builtin *)base;
    const char *path[2] = {a_path, b_path};
    double *out[2] = {a_ms, b_ms};
    int slot[2], fresh[2];
    enum qp_status st = kept_pair(b, path, slot, fresh, err);
    if (st != QP_OK) return st;
    const struct ready *r[2] = {&b->keep[slot[0]].r, &b->keep[slot[1]].r};
    int warm[2];
    for (int k = 0; k < 2; k++)
        warm[k] = fresh[k] || b->o.warmup < 1 ? b->o.warmup : 1;
    for (int i = 0; st == QP_OK && (i < warm[0] || i < warm[1]); i++)
        for (int k = 0; st == QP_OK && k < 2; k++) {
            int w = (i + k) % 2;
            if (i < warm[w]) st = timed_run(r[w], path[w], NULL, err);
        }
    for (size_t i = 0; st == QP_OK && i < n_runs; i++)
        for (size_t k = 0; st == QP_OK && k < 2; k++) {
            size_t w = (i + k) % 2;
            st = timed_run(r[w], path[w], &out[w][i], err);
        }
    if (st != QP_OK) /* a session that failed is not kept */
        for (int k = 0; k < 2; k++)
            kept_drop(&b->keep[slot[k]]);
    return st;
}

static void builtin_reset(struct qp_latency_backend *base) {
    struct builtin *b = (struct builtin *)base;
    for (int i = 0; i < BUILTIN_KEEP; i++)
        kept_drop(&b->keep[i]);
}

int qp_latency_reset(struct qp_latency_backend *b) {
    if (!b || !b->reset) return 0;
    b->reset(b);
    return 1;
}

size_t qp_latency_builtin_opened(const struct qp_latency_backend *base) {
    if (!base || !base->name || strcmp(base->name, "builtin") != 0) return 0;
    return ((const struct builtin *)base)->n_opened;
}

static void builtin_free(struct qp_latency_backend *base) {
    struct builtin *b = (struct builtin *)base;
    for (int i = 0; i < BUILTIN_KEEP; i++)
        kept_drop(&b->keep[i]);
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
    b->base.reset = builtin_reset;
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
