#include "calib/calibrator.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "qmath/qparams.h"

static const char *const method_names[] = {
    [QP_CALIB_MAX] = "max", [QP_CALIB_ENTROPY] = "entropy", [QP_CALIB_PERCENTILE] = "percentile",
    [QP_CALIB_MSE] = "mse", [QP_CALIB_AUTO] = "auto",
};
_Static_assert(sizeof(method_names) / sizeof(method_names[0]) == QP_CALIB_METHOD_COUNT,
               "every calibration method needs a name");

const char *qp_calib_method_name(enum qp_calib_method m) {
    if ((unsigned)m >= QP_CALIB_METHOD_COUNT) return "unknown";
    return method_names[m];
}

enum qp_status qp_calib_method_parse(const char *s, enum qp_calib_method *out,
                                     struct qp_error *err) {
    for (int m = 0; s && m < QP_CALIB_METHOD_COUNT; m++) {
        if (strcmp(s, method_names[m]) == 0) {
            *out = (enum qp_calib_method)m;
            return QP_OK;
        }
    }
    return qp_error_set(err, QP_ERR_USAGE,
                        "calibration method '%s' is not one of max, entropy, percentile, mse, auto",
                        s ? s : "(null)");
}

void qp_calib_options_default(struct qp_calib_options *o, enum qp_calib_method m) {
    memset(o, 0, sizeof *o);
    o->method = m;
    o->n_quantized_bins = QP_CALIB_DEFAULT_QUANTIZED_BINS;
    o->percentile = QP_CALIB_DEFAULT_PERCENTILE;
    o->qtype = QP_DTYPE_INT8;
    if (m == QP_CALIB_PERCENTILE || m == QP_CALIB_MSE) {
        o->n_bins = QP_STATS_DEFAULT_ABS_BINS;
        o->max_bins = QP_STATS_DEFAULT_MAX_ABS_BINS;
    } else {
        o->n_bins = QP_STATS_DEFAULT_BINS;
        o->max_bins = QP_STATS_DEFAULT_MAX_BINS;
    }
}

void qp_calib_stats_config(const struct qp_calib_options *o, struct qp_stats_config *cfg) {
    qp_stats_config_default(cfg, 0);
    if (o->method == QP_CALIB_ENTROPY) {
        cfg->flags = QP_STATS_HIST;
        cfg->n_bins = o->n_bins;
        cfg->max_bins = o->max_bins;
    } else if (o->method == QP_CALIB_AUTO) { /* every method's candidate: both histograms */
        cfg->flags = QP_STATS_HIST | QP_STATS_ABS_HIST;
        cfg->n_bins = o->n_bins;
        cfg->max_bins = o->max_bins;
    } else if (o->method == QP_CALIB_PERCENTILE || o->method == QP_CALIB_MSE) {
        cfg->flags = QP_STATS_ABS_HIST;
        cfg->n_abs_bins = o->n_bins;
        cfg->max_abs_bins = o->max_bins;
    }
}

/* ---- float32 arithmetic as numpy does it ----------------------------------------------- */

/* numpy's pairwise summation of a contiguous float32 run (8 accumulators, blocks of 128). */
static float pairwise_f32(const float *a, int64_t n) {
    if (n < 8) {
        float res = 0.0f;
        for (int64_t i = 0; i < n; i++)
            res += a[i];
        return res;
    }
    if (n <= 128) {
        float r[8];
        for (int j = 0; j < 8; j++)
            r[j] = a[j];
        int64_t i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++)
                r[j] += a[i + j];
        float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += a[i];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_f32(a, n2) + pairwise_f32(a + n2, n - n2);
}

/* np.sum of a float32 vector: the reduction's inner loop sees runs of at most 8192 elements
 * (the iterator's buffer size), each summed pairwise and added in order to 0. */
static float np_sum_f32(const float *a, int64_t n) {
    float res = 0.0f;
    for (int64_t i = 0; i < n; i += 8192)
        res += pairwise_f32(a + i, n - i < 8192 ? n - i : 8192);
    return res;
}

/* ORT's smooth_distribution in float32: zeros get eps, the non-zeros give up eps1 each.
 * Returns 0 when every entry is 0 (ORT: None, KL = inf) or when eps1 >= 1 (ORT asserts;
 * we drop the candidate instead). */
static int smooth(const uint64_t *p, int64_t n, float *out) {
    int64_t n_zeros = 0;
    for (int64_t i = 0; i < n; i++)
        n_zeros += p[i] == 0;
    int64_t n_nonzeros = n - n_zeros;
    if (n_nonzeros == 0) return 0;
    double eps1 = 0.0001 * (double)n_zeros / (double)n_nonzeros;
    if (!(eps1 < 1.0)) return 0;
    const float add_zero = (float)0.0001, add_nonzero = (float)(-eps1);
    for (int64_t i = 0; i < n; i++)
        out[i] = (float)p[i] + (p[i] == 0 ? add_zero : add_nonzero);
    return 1;
}

/* scipy.stats.entropy(p, q) for float32 inputs: both normalised in float32, rel_entr computed
 * in double and rounded to float32, summed as np.sum does. Overwrites p and q. */
static float kl_f32(float *p, float *q, int64_t n) {
    float sp = np_sum_f32(p, n), sq = np_sum_f32(q, n);
    for (int64_t i = 0; i < n; i++) {
        p[i] = p[i] / sp;
        q[i] = q[i] / sq;
    }
    for (int64_t i = 0; i < n; i++) {
        double x = p[i], y = q[i];
        double r;
        if (x > 0.0 && y > 0.0)
            r = x * log(x / y);
        else if (x == 0.0 && y >= 0.0)
            r = 0.0;
        else
            r = INFINITY;
        p[i] = (float)r;
    }
    return np_sum_f32(p, n);
}

enum qp_status qp_calib_entropy_window(const struct qp_stats_hist *h, int64_t n_quantized_bins,
                                       int64_t *start_out, int64_t *end_out, double *kl_out,
                                       struct qp_error *err) {
    int64_t nb = h->n, nq = n_quantized_bins;
    if (nq < 2 || nq % 2)
        return qp_error_set(err, QP_ERR_USAGE,
                            "entropy: quantized bin count %lld must be even and >= 2",
                            (long long)nq);
    if (nb < nq || !h->counts)
        return qp_error_set(err, QP_ERR_USAGE,
                            "entropy: histogram has %lld bins, fewer than %lld quantized bins",
                            (long long)nb, (long long)nq);
    size_t nb2;
    if (!qp_size_mul((size_t)nb, 2, &nb2))
        return qp_error_set(err, QP_ERR_NOMEM, "entropy: histogram too large");
    uint64_t *prefix = qp_malloc_n((size_t)nb + 1, sizeof *prefix);
    uint64_t *pq = qp_malloc_n(nb2, sizeof *pq);
    float *pf = qp_malloc_n(nb2, sizeof *pf);
    uint64_t *qbins = qp_malloc_n((size_t)nq, sizeof *qbins);
    if (!prefix || !pq || !pf || !qbins) {
        free(prefix);
        free(pq);
        free(pf);
        free(qbins);
        return qp_error_set(err, QP_ERR_NOMEM, "entropy: out of memory");
    }
    uint64_t *p = pq, *q = pq + nb;
    float *ps = pf, *qs = pf + nb;
    prefix[0] = 0;
    for (int64_t i = 0; i < nb; i++)
        prefix[i + 1] = prefix[i] + h->counts[i];

    const int64_t z = nb / 2, half = nq / 2;
    int64_t best_start = 0, best_end = nb;
    float best_kl = INFINITY;
    int have_best = 0;
    for (int64_t i = half; i <= z; i++) {
        int64_t start = z - i;
        int64_t end = z + i + 1 < nb ? z + i + 1 : nb;
        int64_t len = end - start;
        const uint64_t *slice = h->counts + start;

        /* reference p: the window with the outliers folded into its edge bins */
        memcpy(p, slice, (size_t)len * sizeof *p);
        p[0] += prefix[start];
        p[len - 1] += prefix[nb] - prefix[end];

        /* candidate q: the window WITHOUT outliers merged into nq groups of len / nq bins
         * (remainder into the last group), each group's sum divided (truncating) by the
         * group's non-zero count in p and written to every position of the group; the
         * remainder positions stay 0 — all as ORT does it. */
        int64_t merged = len / nq;
        for (int64_t g = 0; g < nq; g++) {
            uint64_t sum = 0;
            for (int64_t j = g * merged; j < (g + 1) * merged; j++)
                sum += slice[j];
            qbins[g] = sum;
        }
        for (int64_t j = nq * merged; j < len; j++)
            qbins[nq - 1] += slice[j];
        memset(q, 0, (size_t)len * sizeof *q);
        for (int64_t g = 0; g < nq; g++) {
            int64_t norm = 0;
            for (int64_t j = g * merged; j < (g + 1) * merged; j++)
                norm += p[j] != 0;
            if (norm == 0) continue;
            uint64_t v = (uint64_t)((double)qbins[g] / (double)norm);
            for (int64_t j = g * merged; j < (g + 1) * merged; j++)
                q[j] = v;
        }

        float kl = INFINITY;
        if (smooth(p, len, ps) && smooth(q, len, qs)) kl = kl_f32(ps, qs, len);
        /* np.argmin: the first minimum; a NaN, once seen, wins (as in numpy) */
        if (!have_best || (!isnan(best_kl) && (isnan(kl) || kl < best_kl))) {
            best_kl = kl;
            best_start = start;
            best_end = end;
            have_best = 1;
        }
    }
    free(prefix);
    free(pq);
    free(pf);
    free(qbins);
    *start_out = best_start;
    *end_out = best_end;
    if (kl_out) *kl_out = best_kl;
    return QP_OK;
}

enum qp_status qp_calib_percentile_index(const struct qp_stats_abs_hist *h, double percentile,
                                         int64_t *index_out, struct qp_error *err) {
    if (!(percentile >= 0.0 && percentile <= 100.0))
        return qp_error_set(err, QP_ERR_USAGE, "percentile %g is outside [0, 100]", percentile);
    uint64_t total = 0;
    for (int64_t i = 0; i < h->n; i++)
        total += h->counts[i];
    if (h->n == 0 || total == 0)
        return qp_error_set(err, QP_ERR_USAGE, "percentile: empty histogram");
    /* cdf = np.cumsum(hist / total) in double; np.searchsorted(cdf, p / 100) (side left) */
    double target = percentile / 100.0, cdf = 0.0;
    for (int64_t i = 0; i < h->n; i++) {
        cdf += (double)h->counts[i] / (double)total;
        if (cdf >= target) {
            *index_out = i;
            return QP_OK;
        }
    }
    *index_out = h->n;
    return QP_OK;
}

enum qp_status qp_calib_mse_amax(const struct qp_stats_abs_hist *h, enum qp_dtype qtype,
                                 double absmax, double *amax_out, struct qp_error *err) {
    if (h->n == 0 || !(absmax > 0.0)) {
        *amax_out = absmax > 0.0 ? absmax : 0.0;
        return h->n == 0 ? qp_error_set(err, QP_ERR_USAGE, "mse: empty histogram") : QP_OK;
    }
    /* the bin centers weighted by their counts, and the values below the first edge at half
     * that edge */
    int64_t nc = h->n + 1;
    float *c = qp_malloc_n((size_t)nc, sizeof *c), *q = qp_malloc_n((size_t)nc, sizeof *q);
    double *wt = qp_malloc_n((size_t)nc, sizeof *wt);
    if (!c || !q || !wt) {
        free(c);
        free(q);
        free(wt);
        return qp_error_set(err, QP_ERR_NOMEM, "mse: out of memory");
    }
    for (int64_t i = 0; i < h->n; i++) {
        c[i] = (float)(h->lo + ((double)i + 0.5) * h->width);
        wt[i] = (double)h->counts[i];
    }
    c[h->n] = (float)(h->lo / 2);
    wt[h->n] = (double)h->n_below;
    /* Candidates: the upper edges of bins n/64 .. n (the last one the observed absmax), every
     * 8th, then every one within 8 of the best. */
    int64_t first = h->n / 64 > 1 ? h->n / 64 : 1, best = h->n, step = 8;
    double best_mse = INFINITY;
    for (int pass = 0; pass < 2; pass++) {
        int64_t from = pass ? best - step : first, to = pass ? best + step : h->n;
        for (int64_t i = from < first ? first : from; i <= (to > h->n ? h->n : to);
             i += pass ? 1 : step) {
            double a = i == h->n ? absmax : fmin(qp_stats_abs_hist_edge(h, i), absmax);
            double m = qp_symmetric_sq_error(qtype, (float)a, c, wt, nc, q);
            if (m < best_mse) {
                best_mse = m;
                best = i;
            }
        }
    }
    *amax_out = best == h->n ? absmax : fmin(qp_stats_abs_hist_edge(h, best), absmax);
    free(c);
    free(q);
    free(wt);
    return QP_OK;
}

static double clip_lo(double v, double min) {
    return v < min ? min : v;
}
static double clip_hi(double v, double max) {
    return v > max ? max : v;
}

enum qp_status qp_calib_compute(const struct qp_calib_options *o, const struct qp_stats *s,
                                struct qp_calib_range *out, struct qp_error *err) {
    if (!o || !s || !out) return qp_error_set(err, QP_ERR_USAGE, "calibrate: NULL argument");
    struct qp_stats_summary sum;
    qp_stats_summary(s, &sum);
    if (!sum.has_range)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "calibrate: no finite value seen in %llu batch(es) (%llu NaN, %llu "
                            "Inf)",
                            (unsigned long long)sum.n_batches, (unsigned long long)sum.n_nan,
                            (unsigned long long)sum.n_inf);
    struct qp_calib_range r = {0};
    r.n_nan = sum.n_nan;
    r.n_inf = sum.n_inf;
    switch (o->method) {
    case QP_CALIB_MAX:
        r.lo = sum.min;
        r.hi = sum.max;
        break;
    case QP_CALIB_AUTO: /* chosen by the collector (collect.h); on statistics alone, entropy */
    case QP_CALIB_ENTROPY: {
        struct qp_stats_hist h;
        qp_stats_hist(s, &h);
        if (h.n == 0)
            return qp_error_set(err, QP_ERR_USAGE,
                                "calibrate: entropy needs the signed histogram (QP_STATS_HIST)");
        int64_t start, end;
        enum qp_status st =
            qp_calib_entropy_window(&h, o->n_quantized_bins, &start, &end, NULL, err);
        if (st != QP_OK) return st;
        r.lo = clip_lo(qp_stats_hist_edge(&h, start), sum.min);
        r.hi = clip_hi(qp_stats_hist_edge(&h, end), sum.max);
        break;
    }
    case QP_CALIB_PERCENTILE:
    case QP_CALIB_MSE: { /* a symmetric threshold on the |x| histogram */
        struct qp_stats_abs_hist h;
        qp_stats_abs_hist(s, &h);
        if (h.n == 0)
            return qp_error_set(err, QP_ERR_USAGE,
                                "calibrate: %s needs the |x| histogram (QP_STATS_ABS_HIST)",
                                qp_calib_method_name(o->method));
        double e = 0;
        int64_t idx;
        enum qp_status st = o->method == QP_CALIB_MSE
                                ? qp_calib_mse_amax(&h, o->qtype, sum.absmax, &e, err)
                                : qp_calib_percentile_index(&h, o->percentile, &idx, err);
        if (st != QP_OK) return st;
        if (o->method == QP_CALIB_PERCENTILE) e = qp_stats_abs_hist_edge(&h, idx);
        r.lo = clip_lo(-e, sum.min);
        r.hi = clip_hi(e, sum.max);
        break;
    }
    default:
        return qp_error_set(err, QP_ERR_USAGE, "calibrate: unknown method %d", (int)o->method);
    }
    r.amax = fmax(fabs(r.lo), fabs(r.hi));
    *out = r;
    return QP_OK;
}

void qp_calib_range_pin(struct qp_calib_range *r, double lo, double hi) {
    r->lo = lo;
    r->hi = hi;
    r->amax = fmax(fabs(lo), fabs(hi));
    r->pinned = 1;
}

void qp_calib_group_share(struct qp_calib_range *ranges, size_t n) {
    if (n == 0) return;
    double lo = ranges[0].lo, hi = ranges[0].hi, amax = ranges[0].amax;
    for (size_t i = 1; i < n; i++) {
        if (ranges[i].lo < lo) lo = ranges[i].lo;
        if (ranges[i].hi > hi) hi = ranges[i].hi;
        if (ranges[i].amax > amax) amax = ranges[i].amax;
    }
    for (size_t i = 0; i < n; i++) {
        ranges[i].lo = lo;
        ranges[i].hi = hi;
        ranges[i].amax = amax;
    }
}

int qp_calib_weight_axis(const char *op_type, int trans_b, int *axis_out) {
    if (!op_type) return 0;
    int axis;
    if (strcmp(op_type, "Conv") == 0)
        axis = 0;
    else if (strcmp(op_type, "ConvTranspose") == 0 || strcmp(op_type, "MatMul") == 0)
        axis = 1;
    else if (strcmp(op_type, "Gemm") == 0)
        axis = trans_b ? 0 : 1;
    else
        return 0;
    *axis_out = axis;
    return 1;
}
