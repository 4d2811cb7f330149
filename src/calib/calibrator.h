/*
 * Calibrators: turn a tensor's streaming statistics (calib/stats.h) into a range [lo, hi] and the
 * symmetric amax the quantizer uses. Scales come from that amax through the one home of
 * quantization math, qp_qparams_from_range (src/qmath/qparams.h): INT8 scale = amax / 127, FP8
 * E4M3FN scale = amax / 448, zero point 0.
 *
 *     struct qp_calib_options o;
 *     qp_calib_options_default(&o, QP_CALIB_ENTROPY);
 *     struct qp_stats_config cfg;
 *     qp_calib_stats_config(&o, &cfg);              // what the method needs collected
 *     ... qp_stats_create(&cfg, &s, &err); qp_stats_update(s, batch, &err) per batch ...
 *     struct qp_calib_range r;
 *     if (qp_calib_compute(&o, s, &r, &err) != QP_OK) goto fail;
 *     qp_qparams_from_range(QP_DTYPE_INT8, -r.amax, r.amax, 1, &scale, &zp, &err);
 *
 * The methods follow ONNX Runtime's calibrators as ModelOpt drives them
 * (shared/reference/modelopt-onnx-ptq.md §5, docs/calibration.md):
 * - max: [min, max] of every batch; amax = max(|min|, |max|).
 * - entropy: ORT's `get_entropy_threshold` on the signed histogram, 128 quantized bins. The
 *   candidate windows, the merge into quantized bins (outliers excluded, remainder into the
 *   last group), the expansion of q (integer division truncated, written to every position of
 *   a group, remainder positions left 0), the smoothing (eps = 1e-4 in float32) and the KL
 *   divergence (scipy's `entropy`, which normalises, in float32 with numpy's pairwise sums) are
 *   reproduced, so the chosen window matches ORT's for the same histogram. The window edges
 *   are clipped to the observed [min, max].
 * - percentile (default 99.999): ORT's symmetric `compute_percentile` on the |x| histogram:
 *   cdf = cumsum(hist / total), idx = first bin with cdf >= p / 100, threshold = the LEFT edge
 *   of that bin; range (-threshold, threshold) clipped to the observed [min, max].
 * - mse: on the same |x| histogram, the amax whose symmetric quantization to `qtype` (scale
 *   amax / 127 for int8, amax / 448 for FP8 E4M3) gives the least squared error summed over
 *   the bin centers weighted by their counts, values beyond amax clipped to it (as NVIDIA's
 *   pytorch-quantization "mse" calibrator computes it). Candidates: the upper edges of bins
 *   n/64 .. n (the last being the observed absmax), every 8th, then each within 8 of the best.
 * - auto: keeps both histograms; the collector computes every method above per tensor and
 *   keeps the one with the least error at the tensor's consumers (collect.h, calib/auto.h).
 *   qp_calib_compute alone, without an engine, gives the entropy range (auto's fallback).
 */
#ifndef QP_CALIB_CALIBRATOR_H
#define QP_CALIB_CALIBRATOR_H

#include <stddef.h>
#include <stdint.h>

#include "calib/stats.h"
#include "qplace/calib.h"
#include "qplace/dtype.h"
#include "qplace/status.h"

/* enum qp_calib_method, its names and QP_CALIB_DEFAULT_PERCENTILE: qplace/calib.h. */

#define QP_CALIB_DEFAULT_QUANTIZED_BINS 128

struct qp_calib_options {
    enum qp_calib_method method;
    int64_t n_bins;           /* initial histogram bins: 128 (entropy), 2048 (percentile) */
    int64_t max_bins;         /* histogram cap (calib/stats.h) */
    int64_t n_quantized_bins; /* entropy: 128 */
    double percentile;        /* percentile: in (0, 100] */
    enum qp_dtype qtype;      /* mse: the type the range is for (default INT8) */
};

void qp_calib_options_default(struct qp_calib_options *o, enum qp_calib_method m);
/* The collector configuration the method needs (no histogram for max). */
void qp_calib_stats_config(const struct qp_calib_options *o, struct qp_stats_config *cfg);

struct qp_calib_range {
    double lo, hi;  /* the calibrator's range (before symmetrisation) */
    double amax;    /* max(|lo|, |hi|): what the symmetric quantizer uses */
    int pinned;     /* set by qp_calib_range_pin */
    uint64_t n_nan; /* non-finite values seen (left out of the range) */
    uint64_t n_inf;
};

/* Range of one tensor from its statistics (borrowed). QP_ERR_BAD_INPUT when no finite value was
 * ever seen (the message says how many NaN/Inf there were); QP_ERR_USAGE when the collector
 * lacks the histogram the method needs or the options are invalid; QP_ERR_NOMEM (entropy
 * needs scratch memory proportional to the bin count). `out` is written only on success. */
enum qp_status qp_calib_compute(const struct qp_calib_options *o, const struct qp_stats *s,
                                struct qp_calib_range *out, struct qp_error *err);

/* Entropy threshold search on a signed histogram (borrowed): the chosen window is bins
 * [*start_out, *end_out), its edges are qp_stats_hist_edge(h, start) and (h, end). Also
 * returns the window's KL divergence in *kl_out (may be NULL). QP_ERR_USAGE when
 * n_quantized_bins is odd, < 2 or larger than h->n; QP_ERR_NOMEM. */
enum qp_status qp_calib_entropy_window(const struct qp_stats_hist *h, int64_t n_quantized_bins,
                                       int64_t *start_out, int64_t *end_out, double *kl_out,
                                       struct qp_error *err);

/* Percentile edge index on an |x| histogram: the first bin i whose cumulative fraction reaches
 * percentile / 100 (h->n when none does); the threshold is qp_stats_abs_hist_edge(h, i).
 * QP_ERR_USAGE for an empty histogram or a percentile outside [0, 100]. */
enum qp_status qp_calib_percentile_index(const struct qp_stats_abs_hist *h, double percentile,
                                         int64_t *index_out, struct qp_error *err);

/* The mse method's amax on an |x| histogram (borrowed), at most `absmax` (the observed one).
 * QP_ERR_USAGE for an empty histogram; QP_ERR_NOMEM. */
enum qp_status qp_calib_mse_amax(const struct qp_stats_abs_hist *h, enum qp_dtype qtype,
                                 double absmax, double *amax_out, struct qp_error *err);

/* Forces a range, e.g. Softmax outputs to [0, 1] (ModelOpt's override; int8 scale 1/127). */
void qp_calib_range_pin(struct qp_calib_range *r, double lo, double hi);

/* Concat grouping for ranges computed separately: every member gets lo = min of los, hi = max
 * of his, amax = max of amaxes, so the group shares one scale. (For histogram methods, feeding
 * the members to one collector with qp_stats_update_pooled is what ModelOpt does; this is the
 * max-method shortcut and the fallback.) `ranges` has n entries; n == 0 is a no-op. */
void qp_calib_group_share(struct qp_calib_range *ranges, size_t n);

/* Per-channel weight quantization axis for a weight initializer feeding `op_type` (ORT and
 * ModelOpt: Conv 0, ConvTranspose 1, MatMul 1, Gemm 0 when transB else 1). Returns 1 and sets
 * *axis_out, or 0 for an op type without a per-channel rule (per-tensor). */
int qp_calib_weight_axis(const char *op_type, int trans_b, int *axis_out);

#endif
