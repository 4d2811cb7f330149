/* Latency measurement of a model on the engine (runtime/bench.h). */
#include "runtime/bench.h"

#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/size.h"
#include "ir/ir.h"
#include "runtime/profile.h"
#include "runtime/runtime.h"

void qp_bench_options_default(struct qp_bench_options *o) {
    o->warmup = 3;
    o->iterations = 20;
    o->n_threads = 0;
}

void qp_bench_result_release(struct qp_bench_result *r) {
    if (!r) return;
    free(r->run_ms);
    memset(r, 0, sizeof *r);
}

static int is_fed_input(const struct qp_value *v) {
    return v->is_graph_input && v->initializer < 0 && v->name;
}

static const struct qp_value *find_input(const struct qp_graph *g, const char *name) {
    for (size_t i = 0; i < g->n_values; i++)
        if (is_fed_input(&g->values[i]) && strcmp(g->values[i].name, name) == 0)
            return &g->values[i];
    return NULL;
}

static int is_given(size_t n_given, const struct qp_shape *given, const char *name) {
    for (size_t k = 0; k < n_given; k++)
        if (strcmp(given[k].name, name) == 0) return 1;
    return 0;
}

/* The model's static shape of input `v` into *sh, or QP_ERR_USAGE naming what is open. */
static enum qp_status static_shape(const struct qp_value *v, struct qp_shape *sh,
                                   struct qp_error *err) {
    if (v->rank < 0)
        return qp_error_set(err, QP_ERR_USAGE,
                            "bench: input '%s' has an unknown rank: give its shape", v->name);
    if (v->rank > QP_MAX_RANK)
        return qp_error_set(err, QP_ERR_UNSUPPORTED, "bench: input '%s' has rank %d (at most %d)",
                            v->name, v->rank, QP_MAX_RANK);
    sh->name = v->name;
    sh->rank = v->rank;
    for (int d = 0; d < v->rank; d++) {
        if (v->dims[d].value < 0)
            return qp_error_set(
                err, QP_ERR_USAGE, "bench: input '%s' dimension %d is %s%s%s: give its shape",
                v->name, d, v->dims[d].param ? "'" : "unknown",
                v->dims[d].param ? v->dims[d].param : "", v->dims[d].param ? "'" : "");
        sh->dims[d] = v->dims[d].value;
    }
    return QP_OK;
}

enum qp_status qp_bench_input_shapes(const struct qp_model *m, size_t n_given,
                                     const struct qp_shape *given, struct qp_shape **shapes_out,
                                     size_t *n_out, struct qp_error *err) {
    if (!m || !shapes_out || !n_out || (n_given && !given))
        return qp_error_set(err, QP_ERR_USAGE, "bench: input shapes: NULL argument");
    const struct qp_graph *g = qp_model_graph(m);
    for (size_t k = 0; k < n_given; k++)
        if (!given[k].name || !find_input(g, given[k].name))
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "bench: a shape is given for '%s', which is not an input of the "
                                "model",
                                given[k].name ? given[k].name : "(null)");
    size_t n_inputs = 0;
    for (size_t i = 0; i < g->n_values; i++)
        n_inputs += is_fed_input(&g->values[i]);
    size_t cap = 0;
    struct qp_shape *shapes = NULL;
    if (!qp_size_add(n_given, n_inputs, &cap) ||
        !(shapes = qp_malloc_n(cap ? cap : 1, sizeof *shapes)))
        return qp_error_set(err, QP_ERR_NOMEM, "bench: input shapes: out of memory");
    if (n_given) memcpy(shapes, given, n_given * sizeof *shapes);
    size_t n = n_given;
    for (size_t i = 0; i < g->n_values; i++) {
        const struct qp_value *v = &g->values[i];
        if (!is_fed_input(v) || is_given(n_given, given, v->name)) continue;
        enum qp_status st = static_shape(v, &shapes[n++], err);
        if (st != QP_OK) {
            free(shapes);
            return st;
        }
    }
    *shapes_out = shapes;
    *n_out = n;
    return QP_OK;
}

/* xorshift64*: the same stream on every machine. */
static uint64_t next_rand(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

void qp_bench_fill_input(struct qp_array *a, size_t index) {
    uint64_t s = 0x9E3779B97F4A7C15ull ^ (uint64_t)(index + 1);
    if (a->dtype == QP_DTYPE_FLOAT) {
        float *f = a->data;
        size_t n = a->nbytes / sizeof(float);
        for (size_t i = 0; i < n; i++)
            f[i] = (float)(next_rand(&s) >> 40) / 16777216.0f;
    } else if (a->dtype == QP_DTYPE_DOUBLE) {
        double *f = a->data;
        size_t n = a->nbytes / sizeof(double);
        for (size_t i = 0; i < n; i++)
            f[i] = (double)(next_rand(&s) >> 40) / 16777216.0;
    } /* integers and bool stay zero (qp_array_alloc zeroes) */
}

void qp_bench_inputs_free(struct qp_array *inputs, size_t n) {
    for (size_t i = 0; inputs && i < n; i++)
        qp_array_release(&inputs[i]);
    free(inputs);
}

enum qp_status qp_bench_inputs_create(const struct qp_session *s, size_t n_shapes,
                                      const struct qp_shape *shapes, struct qp_array **inputs_out,
                                      struct qp_error *err) {
    if (!s || !inputs_out || (n_shapes && !shapes))
        return qp_error_set(err, QP_ERR_USAGE, "bench: inputs: NULL argument");
    size_t n_in = qp_session_n_inputs(s);
    struct qp_array *inputs = calloc(n_in ? n_in : 1, sizeof *inputs);
    if (!inputs) return qp_error_set(err, QP_ERR_NOMEM, "bench: inputs: out of memory");
    enum qp_status st = QP_OK;
    for (size_t i = 0; i < n_in && st == QP_OK; i++) {
        const char *nm = qp_session_input_name(s, i);
        const struct qp_shape *sh = NULL;
        for (size_t k = 0; k < n_shapes; k++)
            if (strcmp(shapes[k].name, nm) == 0) sh = &shapes[k];
        if (!sh) {
            st = qp_error_set(err, QP_ERR_USAGE, "bench: no shape for input '%s'", nm);
            break;
        }
        st = qp_array_alloc(&inputs[i], qp_session_input_dtype(s, i), sh->rank, sh->dims, err);
        if (st == QP_OK) qp_bench_fill_input(&inputs[i], i);
    }
    if (st != QP_OK) {
        qp_bench_inputs_free(inputs, n_in);
        return st;
    }
    *inputs_out = inputs;
    return QP_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static enum qp_status check_options(const struct qp_bench_options *o, struct qp_error *err) {
    if (o->iterations < 1)
        return qp_error_set(err, QP_ERR_USAGE, "bench: iterations is %d, expected at least 1",
                            o->iterations);
    if (o->warmup < 0)
        return qp_error_set(err, QP_ERR_USAGE, "bench: warmup is %d, expected at least 0",
                            o->warmup);
    if (o->n_threads < 0)
        return qp_error_set(err, QP_ERR_USAGE, "bench: n_threads is %d, expected at least 0",
                            o->n_threads);
    return QP_OK;
}

/* Median, min, max and mean of r->run_ms (the mean summed in run order). */
static enum qp_status summarize(struct qp_bench_result *r, struct qp_error *err) {
    size_t n = r->n_runs;
    double *sorted = qp_malloc_n(n, sizeof *sorted);
    if (!sorted) return qp_error_set(err, QP_ERR_NOMEM, "bench: out of memory");
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += r->run_ms[i];
    memcpy(sorted, r->run_ms, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_double);
    r->min_ms = sorted[0];
    r->max_ms = sorted[n - 1];
    r->median_ms = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    r->mean_ms = sum / (double)n;
    r->items_per_s = r->median_ms > 0 ? (double)r->items * 1e3 / r->median_ms : 0;
    free(sorted);
    return QP_OK;
}

enum qp_status qp_bench_session(struct qp_session *s, size_t n_inputs,
                                const struct qp_array *inputs, const struct qp_bench_options *o,
                                struct qp_bench_result *result_out, struct qp_error *err) {
    struct qp_bench_options dflt;
    qp_bench_options_default(&dflt);
    if (!o) o = &dflt;
    if (!s || !result_out || (n_inputs && !inputs))
        return qp_error_set(err, QP_ERR_USAGE, "bench: NULL argument");
    memset(result_out, 0, sizeof *result_out);
    enum qp_status st = check_options(o, err);
    if (st != QP_OK) return st;
    struct qp_bench_result r = {.n_runs = (size_t)o->iterations, .items = 1};
    if (n_inputs > 0 && inputs[0].rank > 0) r.items = inputs[0].dims[0];
    r.run_ms = qp_malloc_n(r.n_runs, sizeof *r.run_ms);
    if (!r.run_ms) return qp_error_set(err, QP_ERR_NOMEM, "bench: out of memory");
    /* Warm-up (the first run may plan), then timed runs. */
    for (int i = 0; i < o->warmup; i++)
        if ((st = qp_session_run(s, n_inputs, inputs, err)) != QP_OK) goto fail;
    rt_profile_clear(s->prof); /* QP_PROFILE: the timed runs only */
    for (size_t i = 0; i < r.n_runs; i++) {
        double t0 = (1e3 * qp_clock_seconds());
        if ((st = qp_session_run(s, n_inputs, inputs, err)) != QP_OK) goto fail;
        r.run_ms[i] = (1e3 * qp_clock_seconds()) - t0;
    }
    if ((st = summarize(&r, err)) != QP_OK) goto fail;
    *result_out = r;
    return QP_OK;
fail:
    qp_bench_result_release(&r);
    return st;
}

enum qp_status qp_bench_measure(const struct qp_model *m, size_t n_shapes,
                                const struct qp_shape *shapes, const struct qp_bench_options *o,
                                struct qp_bench_result *result_out, struct qp_error *err) {
    struct qp_bench_options dflt;
    qp_bench_options_default(&dflt);
    if (!o) o = &dflt;
    if (!m || !result_out) return qp_error_set(err, QP_ERR_USAGE, "bench: NULL argument");
    memset(result_out, 0, sizeof *result_out);
    enum qp_status st = check_options(o, err);
    if (st != QP_OK) return st;
    struct qp_shape *all = NULL;
    size_t n_all = 0;
    struct qp_session *s = NULL;
    struct qp_array *inputs = NULL;
    struct qp_session_options so = {.n_threads = o->n_threads};
    if ((st = qp_bench_input_shapes(m, n_shapes, shapes, &all, &n_all, err)) != QP_OK) goto done;
    if ((st = qp_session_create(m, &so, n_all, all, &s, err)) != QP_OK) goto done;
    if ((st = qp_bench_inputs_create(s, n_all, all, &inputs, err)) != QP_OK) goto done;
    st = qp_bench_session(s, qp_session_n_inputs(s), inputs, o, result_out, err);
done:
    qp_bench_inputs_free(inputs, s ? qp_session_n_inputs(s) : 0);
    qp_session_free(s);
    free(all);
    return st;
}
