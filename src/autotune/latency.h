/*
 * Latency backends: one C interface for "how long does this model take to run", whatever runs
 * it. Autotune compares placements by what a backend measures (compare.h), never by a model.
 *
 * A backend is a small struct of function pointers (as ggml's backends are). `measure` times
 * `n_runs` runs of the ONNX file at `model_path` after the backend's own warm-up and writes one
 * latency per timed run, in milliseconds, in run order. Four constructors:
 *
 *   builtin  qplace's engine through the public session API (runtime/bench.h: deterministic
 *            inputs, warm-up, timed runs), Q/DQ models on the integer path by default; `detail`
 *            names the ISA the kernels run with (qp_session_isa). It keeps two models' sessions
 *            open to time them run by run in turn (measure_pair), and keeps them open after the
 *            call, as it keeps a measure's: a later call on the same files (the same device,
 *            inode, size and times, whatever the path: a file renamed keeps its session)
 *            reuses them, with one warm-up run instead of the backend's, until
 *            qp_latency_reset.
 *   trtexec  TensorRT's trtexec as a child process: --stronglyTyped, a timing cache, plugin
 *            libraries, the caller's extra arguments; the per-inference host latencies it prints
 *            with --avgRuns=1 are the samples (trtexec.h: the argv builder and the parser).
 *   ort      ONNX Runtime for Node.js (onnxruntime-node) as a `node` child process running
 *            src/autotune/ort_latency.js, which prints the per-run times as JSON.
 *   fixed    latencies from a caller's callback: deterministic tests of what consumes samples.
 *
 *     struct qp_error err = {0};
 *     struct qp_latency_builtin_options o;
 *     qp_latency_builtin_options_default(&o);    // all cores, 3 warm-up runs, int8 auto
 *     o.n_threads = 2;
 *     o.shapes = "input:1x3x224x224";            // --calibration_shapes' grammar
 *     struct qp_latency_backend *b = NULL;
 *     if (qp_latency_builtin_create(&o, &b, &err) != QP_OK) goto fail;
 *     double ms[20];
 *     if (qp_latency_measure(b, "model.quant.onnx", 20, ms, &err) != QP_OK) goto fail;
 *     printf("%s (%s): first run %.3f ms\n", b->name, b->detail, ms[0]);
 *     qp_latency_backend_free(b);
 *
 * Backends are not safe to use from two threads at once. Every constructor copies the strings
 * of its options: they are borrowed for the call only.
 */
#ifndef QP_AUTOTUNE_LATENCY_H
#define QP_AUTOTUNE_LATENCY_H

#include <stddef.h>

#include "qplace/dtype.h"
#include "qplace/status.h"

#define QP_LATENCY_DETAIL_SIZE 160

struct qp_latency_backend {
    const char *name;                    /* "builtin", "trtexec", "ort", "fixed" */
    char detail[QP_LATENCY_DETAIL_SIZE]; /* what it runs on: "AVX2, 2 threads, int8 auto" */
    /* Times n_runs (>= 1) runs of the model at model_path and writes samples_ms[0..n_runs).
     * Called through qp_latency_measure, which checks the arguments and writes the caller's
     * array only on success. */
    enum qp_status (*measure)(struct qp_latency_backend *b, const char *model_path, size_t n_runs,
                              double *samples_ms, struct qp_error *err);
    /* Releases the backend (the struct included). */
    void (*free)(struct qp_latency_backend *b);
    /* Optional (NULL: a backend that cannot hold two models ready at once, as trtexec and ort):
     * times n_runs runs of each of two models in turn, run by run (a b, b a, a b, ...), after
     * warming both up, into a_ms[0..n_runs) and b_ms[0..n_runs). Called through
     * qp_latency_measure_pair, which checks the arguments and the samples. */
    enum qp_status (*measure_pair)(struct qp_latency_backend *b, const char *a_path,
                                   const char *b_path, size_t n_runs, double *a_ms, double *b_ms,
                                   struct qp_error *err);
    /* Optional (NULL: a backend that keeps nothing between calls): forgets what it keeps
     * between calls (builtin: its open sessions), so that the next call loads and prepares the
     * models afresh. A session is a draw of the memory layout its runs meet, and two sessions
     * of one file can time a few percent apart for as long as they live (docs/autotune.md
     * "Sessions that disagreed with themselves"); a race replicated on new sessions draws
     * again (compare.h, `replicate`). */
    void (*reset)(struct qp_latency_backend *b);
};

/* Times n_runs runs of `model_path` (borrowed for the call) on `b`. On success
 * samples_ms[0..n_runs) holds one latency per timed run in ms (every one finite and >= 0);
 * on failure samples_ms is untouched. Returns QP_ERR_USAGE (NULL arguments, n_runs 0),
 * QP_ERR_NOMEM, and the backend's statuses: QP_ERR_IO (a model or program that cannot be
 * read or run, a child process that failed; the message quotes its last output lines),
 * QP_ERR_BAD_INPUT (output without latencies, a negative or non-finite latency), and what
 * loading and running the model return for builtin. */
enum qp_status qp_latency_measure(struct qp_latency_backend *b, const char *model_path,
                                  size_t n_runs, double *samples_ms, struct qp_error *err);

/* Times n_runs runs of each of `a_path` and `b_path` so that both meet the same machine: with
 * the backend's measure_pair run by run (a b, b a, ...: a step in the machine's speed lands on
 * both sides), else as two qp_latency_measure calls, a's first. On success a_ms and b_ms hold
 * n_runs latencies each (finite, >= 0); on failure neither is touched. Statuses as
 * qp_latency_measure. */
enum qp_status qp_latency_measure_pair(struct qp_latency_backend *b, const char *a_path,
                                       const char *b_path, size_t n_runs, double *a_ms,
                                       double *b_ms, struct qp_error *err);

/* b->reset when the backend has one; 0 when it has none (nothing kept to forget), else 1.
 * NULL-safe (0). */
int qp_latency_reset(struct qp_latency_backend *b);

/* NULL-safe. */
void qp_latency_backend_free(struct qp_latency_backend *b);

/* ---- builtin: the engine --------------------------------------------------------------- */

struct qp_latency_builtin_options {
    int n_threads;      /* kernel threads; 0: all cores (default) */
    int warmup;         /* untimed runs before the timed ones, >= 0 (default 3) */
    const char *shapes; /* shapes of dynamic inputs, "NAME:1x3x224x224,..."; NULL: none */
    int int8;           /* enum qp_int8_mode: QP_INT8_AUTO (default) or QP_INT8_OFF */
};

void qp_latency_builtin_options_default(struct qp_latency_builtin_options *o);

/* A builtin backend (`o` may be NULL for the defaults). Each measure loads the model, creates
 * a session with the options, feeds runtime/bench.h's deterministic inputs and times the runs;
 * measure and measure_pair keep the last two sessions for the next call (above). Returns
 * QP_ERR_USAGE (a bad option; the shape string's errors as qp_calib_shapes_parse gives them),
 * QP_ERR_NOMEM. */
enum qp_status qp_latency_builtin_create(const struct qp_latency_builtin_options *o,
                                         struct qp_latency_backend **out, struct qp_error *err);
/* Sessions a builtin backend has made so far (0 for another backend): tests, and the search's
 * log. */
size_t qp_latency_builtin_opened(const struct qp_latency_backend *b);

/* ---- ort: ONNX Runtime for Node.js --------------------------------------------------------- */

struct qp_latency_ort_options {
    const char *node;   /* the program; NULL: $QP_NODE when set, else "node" on PATH */
    const char *script; /* NULL: $QP_ORT_LATENCY_SCRIPT, else src/autotune/ort_latency.js of
                           the source tree the running program was built in (the executable's
                           folder's parent, as `qplace bench --compare-ort` finds its script) */
    const char *npm;    /* the folder holding node_modules/onnxruntime-node; NULL: $QP_ORT_NPM,
                           else .cache/npm of that source tree */
    int n_threads;      /* ORT's intra-op threads; 0: ORT's default */
    int warmup;         /* untimed runs, >= 0 (default 3) */
    const char *shapes; /* shapes of dynamic inputs, "NAME:1x3x224x224,..."; NULL: none */
};

void qp_latency_ort_options_default(struct qp_latency_ort_options *o);

/* onnxruntime-node's tensor type name of dt ("float32", "int64", ...); NULL for a dtype the
 * ort scripts (this backend's and `qplace bench --compare-ort`'s) do not feed. */
const char *qp_latency_ort_type(enum qp_dtype dt);

/* An ort backend. Each measure loads the model (for its inputs' names, dtypes and shapes, as
 * builtin resolves them), runs `node SCRIPT --npm DIR --spec JSON` and reads the run times
 * from the JSON line it prints. Returns QP_ERR_USAGE (bad options, a bad shape string),
 * QP_ERR_NOMEM. Whether node, the script and onnxruntime-node exist shows at the first
 * measure (QP_ERR_IO, quoting the child's last lines). */
enum qp_status qp_latency_ort_create(const struct qp_latency_ort_options *o,
                                     struct qp_latency_backend **out, struct qp_error *err);

/* ---- fixed: a caller's latencies (tests) ------------------------------------------------ */

/* Returns the latency of the k-th sample the backend hands out (k counts every sample of every
 * measure since creation, from 0) for model_path; a negative or non-finite value is an error. */
typedef double (*qp_latency_fixed_fn)(void *ctx, const char *model_path, size_t k);

/* A backend whose samples come from `fn` (ctx is borrowed for the backend's lifetime).
 * Returns QP_ERR_USAGE (fn NULL), QP_ERR_NOMEM. */
enum qp_status qp_latency_fixed_create(qp_latency_fixed_fn fn, void *ctx,
                                       struct qp_latency_backend **out, struct qp_error *err);

#endif
