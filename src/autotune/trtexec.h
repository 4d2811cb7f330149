/*
 * The trtexec latency backend: TensorRT's benchmarking tool as a child process. Its three parts
 * are separate so the two pure ones are tested without TensorRT:
 *
 *   qp_trtexec_argv    the command line: the program, --onnx=MODEL, --stronglyTyped (the
 *                      precision the Q/DQ nodes say, nothing more), --warmUp=MS,
 *                      --iterations=N, --duration=0 (exactly the iterations asked),
 *                      --avgRuns=1 (one trace line per inference: the per-run samples),
 *                      --timingCacheFile=F, --staticPlugins=P per plugin library, then the
 *                      caller's arguments split as a POSIX shell would (quotes, backslashes; no
 *                      expansion). The program: the option, else $TRTEXEC, else `trtexec` on
 *                      PATH.
 *   qp_trtexec_parse   its stdout: the summary line "Latency: min = X ms, max = Y ms, mean = Z
 *                      ms, median = M ms, percentile(90%) = ..." (host latency, TensorRT 8 and
 *                      later) and, when present, the per-inference trace lines "Average on 1
 *                      runs - GPU latency: G ms - Host latency: H ms (...)": H is a sample.
 *   the backend        runs the argv (autotune/spawn.h); a non-zero exit, a missing Latency
 *                      line or fewer per-inference lines than runs asked is an error quoting
 *                      the last lines trtexec printed.
 *
 *     const char *plugins[] = {"libmy_plugin.so"};
 *     struct qp_latency_trtexec_options o;
 *     qp_latency_trtexec_options_default(&o);   // $TRTEXEC or trtexec, 200 ms warm-up
 *     o.timing_cache = "/tmp/tc.cache";
 *     o.plugins = plugins;
 *     o.n_plugins = 1;
 *     o.extra_args = "--memPoolSize=workspace:1024MiB";
 *     struct qp_latency_backend *b = NULL;
 *     if (qp_latency_trtexec_create(&o, &b, &err) != QP_OK) ...
 *     ... qp_latency_measure(b, "model.quant.onnx", 50, ms, &err) ...
 */
#ifndef QP_AUTOTUNE_TRTEXEC_H
#define QP_AUTOTUNE_TRTEXEC_H

#include <stddef.h>

#include "autotune/latency.h"
#include "qplace/status.h"

struct qp_latency_trtexec_options {
    const char *trtexec;        /* the program; NULL: $TRTEXEC when set, else "trtexec" */
    const char *timing_cache;   /* --timingCacheFile; NULL: none */
    const char *const *plugins; /* plugin libraries, one --staticPlugins each */
    size_t n_plugins;
    int warmup_ms;          /* --warmUp, in milliseconds as trtexec takes it, >= 0 (200) */
    const char *extra_args; /* appended last, shell-split; NULL: none */
};

void qp_latency_trtexec_options_default(struct qp_latency_trtexec_options *o);

/* Splits `s` into words as a POSIX shell does without expansion: blanks separate words; '...'
 * is literal; in "..." a backslash escapes \ " $ ` and newline; outside quotes a backslash
 * escapes any character. On success *words_out is a new NULL-terminated array of *n_out words
 * (free with qp_trtexec_argv_free). Returns QP_ERR_USAGE (an unterminated quote or a trailing
 * backslash; the message quotes `s`), QP_ERR_NOMEM. */
enum qp_status qp_trtexec_split_args(const char *s, char ***words_out, size_t *n_out,
                                     struct qp_error *err);

/* The command line for timing `model_path` n_runs (>= 1) times (both borrowed for the call).
 * On success *argv_out is a new NULL-terminated array of *argc_out strings (free with
 * qp_trtexec_argv_free). Returns QP_ERR_USAGE (NULL arguments, n_runs 0 or above INT_MAX, a
 * negative warm-up, qp_trtexec_split_args's errors), QP_ERR_NOMEM. */
enum qp_status qp_trtexec_argv(const struct qp_latency_trtexec_options *o, const char *model_path,
                               size_t n_runs, char ***argv_out, size_t *argc_out,
                               struct qp_error *err);

/* Frees an array from qp_trtexec_argv or qp_trtexec_split_args. NULL-safe. */
void qp_trtexec_argv_free(char **argv);

struct qp_trtexec_report {
    double min_ms, max_ms, mean_ms, median_ms; /* the summary's host latency */
    size_t n_runs;  /* per-inference trace lines ("Average on 1 runs"), 0 when none */
    double *run_ms; /* their host latencies, in order; owned (NULL when n_runs is 0) */
};

/* Parses trtexec's output text[0..len) (borrowed). On success fills *out (release with
 * qp_trtexec_report_release). Returns QP_ERR_BAD_INPUT (no "Latency: min = ..." line, or one
 * whose min/max/mean/median do not parse), QP_ERR_NOMEM. */
enum qp_status qp_trtexec_parse(const char *text, size_t len, struct qp_trtexec_report *out,
                                struct qp_error *err);

void qp_trtexec_report_release(struct qp_trtexec_report *r);

/* A trtexec backend (`o` may be NULL for the defaults; its strings are copied). `detail` gives
 * the program. Returns QP_ERR_USAGE (bad options, extra_args that do not split), QP_ERR_NOMEM.
 * Whether the program exists shows at the first measure (QP_ERR_IO). */
enum qp_status qp_latency_trtexec_create(const struct qp_latency_trtexec_options *o,
                                         struct qp_latency_backend **out, struct qp_error *err);

#endif
