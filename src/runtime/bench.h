/*
 * Latency of a model on the engine: what `qplace bench` reports and what autotune compares
 * (bench/README.md).
 *
 * Inputs are deterministic: every graph input gets a concrete shape (the caller's, else the
 * model's static one) and seeded pseudo-random contents (floats uniform in [0, 1), integers 0,
 * bool false), the same on every machine. A measurement is `warmup` untimed runs (the first run
 * may plan) and then `iterations` timed runs on the same inputs; each run is timed on the
 * monotonic clock (core/clock.h).
 *
 *     struct qp_bench_options o;
 *     qp_bench_options_default(&o);          // 3 warm-up runs, 20 timed, all cores
 *     o.n_threads = 2;
 *     struct qp_shape sh = {.name = "x", .rank = 4, .dims = {1, 3, 224, 224}};
 *     struct qp_bench_result r;
 *     if (qp_bench_measure(model, 1, &sh, &o, &r, &err) != QP_OK) ...
 *     ... r.median_ms, r.min_ms, r.run_ms[i] ...
 *     qp_bench_result_release(&r);
 *
 * The steps qp_bench_measure takes are exported too, for a caller that keeps the session (to
 * read the outputs of the last run, as `qplace bench --check` does) or brings its own inputs:
 * qp_bench_input_shapes -> qp_session_create -> qp_bench_inputs_create -> qp_bench_session.
 */
#ifndef QP_RUNTIME_BENCH_H
#define QP_RUNTIME_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "qplace/array.h"
#include "qplace/model.h"
#include "qplace/session.h"
#include "qplace/status.h"

struct qp_bench_options {
    int warmup;     /* untimed runs first, >= 0 (default 3) */
    int iterations; /* timed runs, >= 1 (default 20) */
    int n_threads;  /* kernel threads, 0: all cores (default); only where a session is created */
};

void qp_bench_options_default(struct qp_bench_options *o);

struct qp_bench_result {
    size_t n_runs;  /* the timed runs: options.iterations */
    double *run_ms; /* n_runs wall times in milliseconds, in run order; owned by the result */
    double median_ms, min_ms, max_ms, mean_ms;
    int64_t items;      /* the first input's leading dimension (1 for a scalar or no input) */
    double items_per_s; /* items per second from the median (0 when the median is 0) */
};

/* Frees run_ms and zeroes `r`. NULL-safe. */
void qp_bench_result_release(struct qp_bench_result *r);

/* Concrete shapes for every graph input the caller feeds (initializers excluded): the `given`
 * ones first, in their order (names borrowed from `given`), then the other inputs in model
 * order with the model's static shapes (names borrowed from the model). On success
 * *shapes_out is a new array of *n_out shapes (free()). Returns QP_ERR_BAD_INPUT (a given shape
 * names no graph input; the message names it), QP_ERR_USAGE (an input without a given shape
 * whose rank or a dimension is not static; the message names the input and the dimension),
 * QP_ERR_UNSUPPORTED (a rank above QP_MAX_RANK), QP_ERR_NOMEM. */
enum qp_status qp_bench_input_shapes(const struct qp_model *m, size_t n_given,
                                     const struct qp_shape *given, struct qp_shape **shapes_out,
                                     size_t *n_out, struct qp_error *err);

/* Fills `a` (contents only: dtype and nbytes as allocated) with the deterministic values of
 * input number `index`: floats and doubles uniform in [0, 1) from a seeded xorshift64*
 * stream; other dtypes are left as they are (qp_array_alloc zeroes). */
void qp_bench_fill_input(struct qp_array *a, size_t index);

/* Deterministic inputs for session `s` (borrowed for the call): inputs[i] feeds its input i
 * (qp_session_input_name) with the session's dtype and the shape of that name in
 * `shapes[0..n_shapes)` (borrowed for the call), filled by qp_bench_fill_input(&inputs[i], i).
 * On success *inputs_out is a new array of qp_session_n_inputs(s) owned arrays (release with
 * qp_bench_inputs_free). Returns QP_ERR_USAGE (an input without a shape; the message names
 * it), QP_ERR_NOMEM, and qp_array_alloc's statuses. */
enum qp_status qp_bench_inputs_create(const struct qp_session *s, size_t n_shapes,
                                      const struct qp_shape *shapes, struct qp_array **inputs_out,
                                      struct qp_error *err);

/* Releases inputs[0..n) and frees the array. NULL-safe. */
void qp_bench_inputs_free(struct qp_array *inputs, size_t n);

/* Times `s` on inputs[0..n_inputs) (borrowed for the call): o->warmup untimed runs, then
 * o->iterations timed ones; o->n_threads is not applied (the session keeps its own). `o` may be
 * NULL for the defaults. The outputs of the last run stay readable with qp_session_output. On
 * success fills *result_out (release with qp_bench_result_release); on failure it is zeroed.
 * Returns QP_ERR_USAGE (iterations < 1, warmup < 0, NULL arguments), QP_ERR_NOMEM, and what
 * qp_session_run returns (its message unchanged). */
enum qp_status qp_bench_session(struct qp_session *s, size_t n_inputs,
                                const struct qp_array *inputs, const struct qp_bench_options *o,
                                struct qp_bench_result *result_out, struct qp_error *err);

/* The whole measurement: shapes (qp_bench_input_shapes with `shapes`, borrowed for the call),
 * a session with o->n_threads, deterministic inputs, qp_bench_session. `m` is borrowed for the
 * call; `o` may be NULL for the defaults. On success fills *result_out (release with
 * qp_bench_result_release); on failure it is zeroed. Returns the statuses of the steps above
 * and of qp_session_create (QP_ERR_USAGE for a bad option before anything is built). */
enum qp_status qp_bench_measure(const struct qp_model *m, size_t n_shapes,
                                const struct qp_shape *shapes, const struct qp_bench_options *o,
                                struct qp_bench_result *result_out, struct qp_error *err);

#endif
