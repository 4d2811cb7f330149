/*
 * Streaming per-tensor statistics for calibration: one `struct qp_stats` per calibrated tensor
 * (or per Concat group), fed one batch at a time. Memory is fixed by the configuration (the
 * histogram caps), never by the number of batches or samples.
 *
 *     struct qp_stats_config cfg;
 *     qp_stats_config_default(&cfg, QP_STATS_HIST);        // entropy needs the signed histogram
 *     struct qp_stats *s = NULL;
 *     if (qp_stats_create(&cfg, &s, &err) != QP_OK) goto fail;
 *     while (more batches)
 *         if (qp_stats_update(s, &activation, &err) != QP_OK) goto fail;
 *     struct qp_stats_summary sum;
 *     qp_stats_summary(s, &sum);                            // min, max, absmax, NaN/Inf counts
 *     qp_stats_free(s);
 *
 * What is collected (docs/calibration.md has the reasons):
 * - min, max and absmax of the finite values; NaN and +-Inf are counted and left out of every
 *   range and histogram, so they never move a range silently.
 * - QP_STATS_HIST: ONNX Runtime's `HistogramCollector.collect_value` (the entropy calibrator, as
 *   ModelOpt patches it): the first batch is binned into `n_bins` (128) equal bins over [-t, t],
 *   t = max(|min|, |max|) of the batch. A later batch with t <= T is binned on the same bins. A
 *   later batch with t > T grows the histogram symmetrically by k = floor((t - T) / stride) + 1
 *   bins of the old stride on each side (T becomes T + k * stride, the old counts stay in the
 *   middle); so the bin count is 128 + 2 * (growth) and results follow ORT batch for batch. A
 *   histogram whose T is 0 (only zeros so far) keeps its bin count and takes the new range.
 * - QP_STATS_ABS_HIST: ONNX Runtime's `collect_absolute_value` (the percentile calibrator): the
 *   first batch's |x| is binned into `n_abs_bins` (2048) equal bins over [min|x|, max|x|] (a
 *   zero-width range becomes [v - 0.5, v + 0.5], as numpy does). A later batch whose max|x| is
 *   beyond the last edge appends ceil((max|x| - last) / width) bins of the same width. Later
 *   values below the first edge fall outside every bin, as in ORT; they are counted in
 *   `n_abs_below`.
 * - Both histograms are capped (`max_bins`, `max_abs_bins`). Growth past the cap merges pairs of
 *   adjacent bins (doubling the width, keeping 0 resp. the first edge on a bin edge) — the one
 *   place where results part from ORT, which would instead allocate without bound. The number
 *   of merges is reported (`n_coarsened`).
 * - Bin edges are computed in double. numpy computes them in float32 or float64 depending on
 *   its version, so a value within float32 rounding of an edge may land one bin apart from ORT.
 *
 * Accepted element types: float, float16, bfloat16, double (float has a vectorised fast path).
 * A `struct qp_stats` is not thread-safe; one update uses up to `n_threads` OpenMP threads on
 * large arrays (not when called inside a parallel region). The data is cut into fixed-size
 * blocks whatever the thread count, and per-thread partial counts are summed as integers, so
 * every result (ranges, counts, histograms) is bit-identical for any thread count. A zero
 * minimum or maximum is reported as +0.
 */
#ifndef QP_CALIB_STATS_H
#define QP_CALIB_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "qplace/array.h"
#include "qplace/status.h"

enum qp_stats_flag {
    QP_STATS_HIST = 1,     /* signed histogram over [-T, T] (entropy) */
    QP_STATS_ABS_HIST = 2, /* histogram of |x| (percentile) */
};

#define QP_STATS_DEFAULT_BINS         128
#define QP_STATS_DEFAULT_ABS_BINS     2048
#define QP_STATS_DEFAULT_MAX_BINS     8192
#define QP_STATS_DEFAULT_MAX_ABS_BINS 65536

struct qp_stats_config {
    int flags;            /* QP_STATS_HIST | QP_STATS_ABS_HIST, or 0 for ranges only */
    int64_t n_bins;       /* initial bins of the signed histogram; even, >= 2 */
    int64_t max_bins;     /* cap; >= 2 * n_bins + 4 */
    int64_t n_abs_bins;   /* initial bins of the |x| histogram; >= 1 */
    int64_t max_abs_bins; /* cap; >= 2 * n_abs_bins + 2 */
    int n_threads;        /* OpenMP threads per update; <= 0: omp_get_max_threads() */
};

/* Fills `cfg` with the defaults above, the given flags and n_threads = 0. */
void qp_stats_config_default(struct qp_stats_config *cfg, int flags);

struct qp_stats;

/* Makes a new, empty collector (`cfg` is copied). QP_ERR_USAGE for a bad configuration,
 * QP_ERR_NOMEM. `*out` is written only on success; free with qp_stats_free. */
enum qp_status qp_stats_create(const struct qp_stats_config *cfg, struct qp_stats **out,
                               struct qp_error *err);
/* NULL-safe. */
void qp_stats_free(struct qp_stats *s);
/* Back to the empty state; keeps the configuration and the memory already allocated. */
void qp_stats_reset(struct qp_stats *s);

/* Feeds one batch (`a` borrowed for the call). A batch without finite values updates only the
 * counts. QP_ERR_UNSUPPORTED for a dtype other than float/float16/bfloat16/double,
 * QP_ERR_USAGE for an array whose nbytes does not match its shape, QP_ERR_NOMEM when a
 * histogram cannot grow (the collector is then unchanged). */
enum qp_status qp_stats_update(struct qp_stats *s, const struct qp_array *a, struct qp_error *err);

/* Feeds the `n` arrays (borrowed) as one pooled batch: the batch's min/max and histogram
 * growth are decided over all of them, as ORT/ModelOpt do for the members of a Concat group.
 * Statuses as qp_stats_update. */
enum qp_status qp_stats_update_pooled(struct qp_stats *s, const struct qp_array *arrays, size_t n,
                                      struct qp_error *err);

/* How a tensor y follows from a tensor x, element for element. */
enum qp_stats_derive {
    QP_STATS_SAME, /* the same values, in any order (Reshape, Transpose, ...) */
    QP_STATS_RELU, /* max(v, 0) */
};

/* Feeds `y` the batch f(v) of the values v that `x` took in its last update (f as `how`), from
 * x's own statistics of that batch (its min/max and histogram counts) instead of the values,
 * when that gives exactly what qp_stats_update(y, f(v)) would, bit for bit. `numel` is the
 * element count of y's batch (it must equal x's). Returns 1 when it did; 0 (y unchanged) when
 * the caller must feed the values: x's last update was pooled, grew or coarsened a histogram,
 * or held NaN/Inf; the configurations differ; y has no histogram yet, only zeros so far, or
 * another geometry than x; a Relu with the |x| histogram (its first edge is its own). */
int qp_stats_update_derived(struct qp_stats *y, const struct qp_stats *x, uint64_t numel,
                            enum qp_stats_derive how);

struct qp_stats_summary {
    uint64_t n_batches; /* update calls (pooled calls count once) */
    uint64_t n_values;  /* finite values seen */
    uint64_t n_nan;
    uint64_t n_inf; /* +Inf and -Inf */
    int has_range;  /* 1 once a finite value was seen; min/max/absmax are 0 before */
    double min, max, absmax;
};
void qp_stats_summary(const struct qp_stats *s, struct qp_stats_summary *out);

/* The signed histogram: bin i covers [-threshold + i * stride, -threshold + (i+1) * stride),
 * the last bin includes its right edge. `counts` is owned by the collector and valid until the
 * next update/reset/free. n == 0 until a finite value was seen (or without QP_STATS_HIST). A
 * threshold of 0 means only zeros so far: they sit in bin n/2 (numpy's [-0.5, 0.5] range). */
struct qp_stats_hist {
    const uint64_t *counts;
    int64_t n;
    double threshold;
    double stride; /* 2 * threshold / n (1 / n when threshold is 0) */
    int64_t n_coarsened;
};
void qp_stats_hist(const struct qp_stats *s, struct qp_stats_hist *out);
/* Edge i (0 <= i <= n) of the signed histogram as numpy computes it: -T + i * stride, and T for
 * i == n. */
double qp_stats_hist_edge(const struct qp_stats_hist *h, int64_t i);

/* The |x| histogram: bin i covers [lo + i * width, lo + (i+1) * width), last bin closed. */
struct qp_stats_abs_hist {
    const uint64_t *counts;
    int64_t n;
    double lo, width;
    uint64_t n_below; /* values of later batches below `lo`, not binned (as ORT) */
    int64_t n_coarsened;
};
void qp_stats_abs_hist(const struct qp_stats *s, struct qp_stats_abs_hist *out);
double qp_stats_abs_hist_edge(const struct qp_stats_abs_hist *h, int64_t i);

/* Bytes the collector holds on the heap (struct, histograms and the last batch's counts kept
 * for qp_stats_update_derived). Bounded by twice the caps; does not grow with the number of
 * batches fed. */
size_t qp_stats_bytes(const struct qp_stats *s);

/* Per-channel absmax of a weight along `axis` (negative counts from the end): out[c] =
 * max |w| over the elements whose index on `axis` is c; out has dims[axis] entries (n_out must
 * equal it). Non-finite elements are left out and counted in *n_nonfinite_out (may be NULL); a
 * channel without finite values gets 0. `w` is borrowed. QP_ERR_USAGE for a bad axis or n_out,
 * QP_ERR_UNSUPPORTED for a dtype other than the four float types. */
enum qp_status qp_stats_channel_absmax(const struct qp_array *w, int axis, float *out,
                                       int64_t n_out, uint64_t *n_nonfinite_out,
                                       struct qp_error *err);

/* For tests: 0 keeps the float32 fast path off its AVX2 kernel (the portable vector loops
 * are taken instead), 1 allows it again on CPUs that have AVX2. Results are the same either
 * way. Returns the previous setting. Process-wide; do not call during an update. */
int qp_stats_set_simd(int allow);

#endif
