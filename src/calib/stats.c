#include "calib/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qplace/dtype.h"

struct qp_stats {
    struct qp_stats_config cfg;
    uint64_t n_batches, n_values, n_nan, n_inf;
    int has_range;
    double min, max;

    /* signed histogram */
    uint64_t *h;
    int64_t h_n, h_cap;
    double h_t;
    int64_t h_coarsened;

    /* |x| histogram */
    uint64_t *a;
    int64_t a_n, a_cap;
    double a_lo, a_width;
    uint64_t a_below;
    int64_t a_coarsened;
};

void qp_stats_config_default(struct qp_stats_config *cfg, int flags) {
    cfg->flags = flags;
    cfg->n_bins = QP_STATS_DEFAULT_BINS;
    cfg->max_bins = QP_STATS_DEFAULT_MAX_BINS;
    cfg->n_abs_bins = QP_STATS_DEFAULT_ABS_BINS;
    cfg->max_abs_bins = QP_STATS_DEFAULT_MAX_ABS_BINS;
}

enum qp_status qp_stats_create(const struct qp_stats_config *cfg, struct qp_stats **out,
                               struct qp_error *err) {
    if (!cfg || !out) return qp_error_set(err, QP_ERR_USAGE, "stats: NULL argument");
    if (cfg->flags & ~(QP_STATS_HIST | QP_STATS_ABS_HIST))
        return qp_error_set(err, QP_ERR_USAGE, "stats: unknown flags 0x%x", (unsigned)cfg->flags);
    if (cfg->flags & QP_STATS_HIST) {
        if (cfg->n_bins < 2 || cfg->n_bins % 2 || cfg->n_bins > ((int64_t)1 << 40))
            return qp_error_set(err, QP_ERR_USAGE,
                                "stats: histogram bin count %lld must be even and >= 2",
                                (long long)cfg->n_bins);
        if (cfg->max_bins < 2 * cfg->n_bins + 4 || cfg->max_bins > ((int64_t)1 << 40))
            return qp_error_set(err, QP_ERR_USAGE,
                                "stats: histogram cap %lld must be at least 2 * %lld + 4",
                                (long long)cfg->max_bins, (long long)cfg->n_bins);
    }
    if (cfg->flags & QP_STATS_ABS_HIST) {
        if (cfg->n_abs_bins < 1 || cfg->n_abs_bins > ((int64_t)1 << 40))
            return qp_error_set(err, QP_ERR_USAGE, "stats: |x| histogram bin count %lld < 1",
                                (long long)cfg->n_abs_bins);
        if (cfg->max_abs_bins < 2 * cfg->n_abs_bins + 2 || cfg->max_abs_bins > ((int64_t)1 << 40))
            return qp_error_set(err, QP_ERR_USAGE,
                                "stats: |x| histogram cap %lld must be at least 2 * %lld + 2",
                                (long long)cfg->max_abs_bins, (long long)cfg->n_abs_bins);
    }
    struct qp_stats *s = calloc(1, sizeof *s);
    if (!s) return qp_error_set(err, QP_ERR_NOMEM, "stats: out of memory");
    s->cfg = *cfg;
    *out = s;
    return QP_OK;
}

void qp_stats_free(struct qp_stats *s) {
    if (!s) return;
    free(s->h);
    free(s->a);
    free(s);
}

void qp_stats_reset(struct qp_stats *s) {
    if (!s) return;
    s->n_batches = s->n_values = s->n_nan = s->n_inf = 0;
    s->has_range = 0;
    s->min = s->max = 0.0;
    s->h_n = 0;
    s->h_t = 0.0;
    s->h_coarsened = 0;
    s->a_n = 0;
    s->a_lo = s->a_width = 0.0;
    s->a_below = 0;
    s->a_coarsened = 0;
}

/* ---- reading elements ---------------------------------------------------------------- */

#define CHUNK 512

static enum qp_status check_array(const struct qp_array *a, uint64_t *numel_out,
                                  struct qp_error *err) {
    if (a->dtype != QP_DTYPE_FLOAT && a->dtype != QP_DTYPE_FLOAT16 &&
        a->dtype != QP_DTYPE_BFLOAT16 && a->dtype != QP_DTYPE_DOUBLE)
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "stats: cannot collect statistics of a %s tensor (float, float16, "
                            "bfloat16 or double expected)",
                            qp_dtype_name(a->dtype));
    int ok = 0;
    uint64_t n = qp_array_numel(a, &ok);
    size_t nb = ok ? qp_dtype_nbytes(a->dtype, n, &ok) : 0;
    if (!ok || nb != a->nbytes || (n && !a->data))
        return qp_error_set(err, QP_ERR_USAGE, "stats: array data does not match its shape");
    *numel_out = n;
    return QP_OK;
}

/* Converts elements [off, off + n) of `a` to double. */
static void load(const struct qp_array *a, uint64_t off, size_t n, double *buf) {
    switch (a->dtype) {
    case QP_DTYPE_FLOAT: {
        const float *p = (const float *)a->data + off;
        for (size_t i = 0; i < n; i++)
            buf[i] = p[i];
        break;
    }
    case QP_DTYPE_DOUBLE:
        memcpy(buf, (const double *)a->data + off, n * sizeof *buf);
        break;
    case QP_DTYPE_FLOAT16: {
        const uint16_t *p = (const uint16_t *)a->data + off;
        for (size_t i = 0; i < n; i++)
            buf[i] = qp_fp16_to_f32(p[i]);
        break;
    }
    default: {
        const uint16_t *p = (const uint16_t *)a->data + off;
        for (size_t i = 0; i < n; i++)
            buf[i] = qp_bf16_to_f32(p[i]);
        break;
    }
    }
}

/* ---- histogram geometry -------------------------------------------------------------- */

/* Python's / numpy's float floor division (divmod-based, not floor(a / b)). */
static double floor_div(double a, double b) {
    double mod = fmod(a, b);
    double div = (a - mod) / b;
    if (mod != 0.0 && ((b < 0) != (mod < 0))) div -= 1.0;
    double fl = floor(div);
    if (div - fl > 0.5) fl += 1.0;
    return fl;
}

static double hist_stride(double t, int64_t n) {
    return t > 0.0 ? 2.0 * t / (double)n : 1.0 / (double)n;
}

double qp_stats_hist_edge(const struct qp_stats_hist *h, int64_t i) {
    double t = h->threshold > 0.0 ? h->threshold : 0.5;
    if (i >= h->n) return t;
    return (double)i * (2.0 * t / (double)h->n) - t;
}

double qp_stats_abs_hist_edge(const struct qp_stats_abs_hist *h, int64_t i) {
    return h->lo + (double)i * h->width;
}

/* numpy's np.histogram bin of x on n equal bins over [lo, hi] (hi > lo): the estimate
 * (x - lo) / (hi - lo) * n, corrected against the edges; the last bin is closed. x outside
 * [lo, hi] is clamped (it can only get there by rounding of the grown range). */
static int64_t bin_of(double x, double lo, double hi, int64_t n) {
    double step = (hi - lo) / (double)n;
    double f = (x - lo) / (hi - lo) * (double)n;
    int64_t i = f <= 0.0 ? 0 : f >= (double)n ? n - 1 : (int64_t)f;
    double e0 = (double)i * step + lo;
    double e1 = i + 1 >= n ? hi : (double)(i + 1) * step + lo;
    if (x < e0 && i > 0)
        i--;
    else if (x >= e1 && i < n - 1)
        i++;
    return i;
}

static enum qp_status reserve(uint64_t **p, int64_t *cap, int64_t need, struct qp_error *err) {
    if (need <= *cap) return QP_OK;
    if ((uint64_t)need > SIZE_MAX / sizeof(uint64_t))
        return qp_error_set(err, QP_ERR_NOMEM, "stats: histogram too large");
    uint64_t *np = realloc(*p, (size_t)need * sizeof(uint64_t));
    if (!np) return qp_error_set(err, QP_ERR_NOMEM, "stats: out of memory growing a histogram");
    *p = np;
    *cap = need;
    return QP_OK;
}

/* Signed histogram: merges pairs of bins. When the half count is odd, the pairs are taken as if
 * one empty bin were padded on each side (T grows by one stride), so that 0 stays on an edge;
 * done in place, no extra room is needed. */
static void hist_coarsen(struct qp_stats *s) {
    int64_t n = s->h_n;
    if ((n / 2) % 2) {
        int64_t n2 = (n + 2) / 2;
        s->h_t += hist_stride(s->h_t, n);
        for (int64_t j = 0; j < n2; j++) {
            int64_t l = 2 * j - 1, r = 2 * j;
            s->h[j] = (l >= 0 ? s->h[l] : 0) + (r < n ? s->h[r] : 0);
        }
        s->h_n = n2;
    } else {
        for (int64_t i = 0; i < n / 2; i++)
            s->h[i] = s->h[2 * i] + s->h[2 * i + 1];
        s->h_n = n / 2;
    }
    s->h_coarsened++;
}

/* Plans the growth of the signed histogram for a batch threshold t > T > 0: returns the half
 * increase k on the final geometry (bin count before growth in *n_out), coarsening first while
 * the result would pass the cap. */
static int64_t hist_grow_plan(const struct qp_stats *s, double t, double T, int64_t n,
                              int *n_coarsen_out, int64_t *n_out) {
    int n_coarsen = 0;
    for (;;) {
        double stride = hist_stride(T, n);
        double k = floor_div(t - T, stride) + 1.0;
        if (k < 1.0) k = 1.0;
        if ((double)n + 2.0 * k <= (double)s->cfg.max_bins) {
            *n_coarsen_out = n_coarsen;
            *n_out = n;
            return (int64_t)k;
        }
        if ((n / 2) % 2) {
            T += stride;
            n += 2;
        }
        n /= 2;
        n_coarsen++;
    }
}

static void abs_coarsen(struct qp_stats *s) {
    int64_t n = s->a_n;
    int64_t n2 = (n + 1) / 2;
    for (int64_t i = 0; i < n2; i++)
        s->a[i] = s->a[2 * i] + (2 * i + 1 < n ? s->a[2 * i + 1] : 0);
    s->a_n = n2;
    s->a_width *= 2.0;
    s->a_coarsened++;
}

/* ---- update -------------------------------------------------------------------------- */

struct batch_scan {
    uint64_t n_finite, n_nan, n_inf;
    double min, max, amin, amax;
};

static void scan(const struct qp_array *a, uint64_t numel, struct batch_scan *b) {
    double buf[CHUNK];
    for (uint64_t off = 0; off < numel; off += CHUNK) {
        size_t n = numel - off < CHUNK ? (size_t)(numel - off) : CHUNK;
        load(a, off, n, buf);
        for (size_t i = 0; i < n; i++) {
            double x = buf[i];
            if (isnan(x)) {
                b->n_nan++;
                continue;
            }
            if (isinf(x)) {
                b->n_inf++;
                continue;
            }
            double ax = fabs(x);
            if (b->n_finite++ == 0) {
                b->min = b->max = x;
                b->amin = b->amax = ax;
                continue;
            }
            if (x < b->min) b->min = x;
            if (x > b->max) b->max = x;
            if (ax < b->amin) b->amin = ax;
            if (ax > b->amax) b->amax = ax;
        }
    }
}

static void bin_values(struct qp_stats *s, const struct qp_array *a, uint64_t numel) {
    double buf[CHUNK];
    int do_h = (s->cfg.flags & QP_STATS_HIST) != 0;
    int do_a = (s->cfg.flags & QP_STATS_ABS_HIST) != 0;
    double T = s->h_t;
    int64_t hn = s->h_n;
    double a_lo = s->a_lo, a_hi = s->a_lo + (double)s->a_n * s->a_width;
    for (uint64_t off = 0; off < numel; off += CHUNK) {
        size_t n = numel - off < CHUNK ? (size_t)(numel - off) : CHUNK;
        load(a, off, n, buf);
        for (size_t i = 0; i < n; i++) {
            double x = buf[i];
            if (!isfinite(x)) continue;
            if (do_h) {
                /* T == 0 means every value so far, this one included, is 0: numpy bins it
                 * on [-0.5, 0.5], i.e. into the middle bin. */
                int64_t b = T > 0.0 ? bin_of(x, -T, T, hn) : hn / 2;
                s->h[b]++;
            }
            if (do_a) {
                double ax = fabs(x);
                if (ax < a_lo) {
                    s->a_below++;
                    continue;
                }
                s->a[bin_of(ax, a_lo, a_hi, s->a_n)]++;
            }
        }
    }
}

enum qp_status qp_stats_update_pooled(struct qp_stats *s, const struct qp_array *arrays, size_t n,
                                      struct qp_error *err) {
    if (!s || (n && !arrays)) return qp_error_set(err, QP_ERR_USAGE, "stats: NULL argument");
    uint64_t numel[64];
    uint64_t *numels = numel;
    if (n > 64) {
        numels = malloc(n * sizeof *numels);
        if (!numels) return qp_error_set(err, QP_ERR_NOMEM, "stats: out of memory");
    }
    enum qp_status st = QP_OK;
    struct batch_scan b = {0};
    for (size_t i = 0; i < n; i++) {
        if ((st = check_array(&arrays[i], &numels[i], err)) != QP_OK) goto done;
    }
    for (size_t i = 0; i < n; i++)
        scan(&arrays[i], numels[i], &b);

    if (b.n_finite) {
        /* Plan both histograms and reserve their memory before touching any state, so a
         * failed allocation leaves the collector as it was. */
        int h_first = 0, h_zero_to_range = 0, a_first = 0, h_coarsen = 0;
        int64_t h_k = 0, a_m = 0;
        double t = fmax(fabs(b.min), fabs(b.max));
        if (s->cfg.flags & QP_STATS_HIST) {
            if (s->h_n == 0) {
                h_first = 1;
                st = reserve(&s->h, &s->h_cap, s->cfg.n_bins, err);
            } else if (t > s->h_t) {
                if (s->h_t == 0.0) {
                    h_zero_to_range = 1;
                } else {
                    int64_t n_final = 0;
                    h_k = hist_grow_plan(s, t, s->h_t, s->h_n, &h_coarsen, &n_final);
                    st = reserve(&s->h, &s->h_cap, n_final + 2 * h_k, err);
                }
            }
            if (st != QP_OK) goto done;
        }
        int a_coarsen = 0;
        if (s->cfg.flags & QP_STATS_ABS_HIST) {
            if (s->a_n == 0) {
                a_first = 1;
                st = reserve(&s->a, &s->a_cap, s->cfg.n_abs_bins, err);
            } else {
                double last = s->a_lo + (double)s->a_n * s->a_width;
                if (b.amax > last) {
                    double w = s->a_width;
                    int64_t n_cur = s->a_n;
                    for (;;) {
                        double m = ceil((b.amax - last) / w);
                        if (m < 1.0) m = 1.0;
                        if ((double)n_cur + m <= (double)s->cfg.max_abs_bins) {
                            a_m = (int64_t)m;
                            break;
                        }
                        n_cur = (n_cur + 1) / 2;
                        w *= 2.0;
                        last = s->a_lo + (double)n_cur * w;
                        a_coarsen++;
                    }
                    st = reserve(&s->a, &s->a_cap, n_cur + a_m, err);
                }
            }
            if (st != QP_OK) goto done;
        }

        /* Commit the geometry. */
        if (h_first) {
            s->h_n = s->cfg.n_bins;
            s->h_t = t;
            memset(s->h, 0, (size_t)s->h_n * sizeof *s->h);
        } else if (h_zero_to_range) {
            s->h_t = t; /* old counts (zeros, in the middle bin) stay where they are */
        } else if (h_k > 0 || h_coarsen) {
            for (int c = 0; c < h_coarsen; c++)
                hist_coarsen(s);
            double stride = hist_stride(s->h_t, s->h_n);
            h_k = (int64_t)(floor_div(t - s->h_t, stride) + 1.0);
            if (h_k < 1) h_k = 1;
            int64_t n_old = s->h_n;
            memmove(s->h + h_k, s->h, (size_t)n_old * sizeof *s->h);
            memset(s->h, 0, (size_t)h_k * sizeof *s->h);
            memset(s->h + h_k + n_old, 0, (size_t)h_k * sizeof *s->h);
            s->h_n = n_old + 2 * h_k;
            s->h_t = (double)h_k * stride + s->h_t;
        }
        if (a_first) {
            double lo = b.amin, hi = b.amax;
            if (lo == hi) {
                lo -= 0.5;
                hi += 0.5;
            }
            s->a_n = s->cfg.n_abs_bins;
            s->a_lo = lo;
            s->a_width = (hi - lo) / (double)s->a_n;
            memset(s->a, 0, (size_t)s->a_n * sizeof *s->a);
        } else if (a_m > 0) {
            for (int c = 0; c < a_coarsen; c++)
                abs_coarsen(s);
            memset(s->a + s->a_n, 0, (size_t)a_m * sizeof *s->a);
            s->a_n += a_m;
        }
        for (size_t i = 0; i < n; i++)
            bin_values(s, &arrays[i], numels[i]);

        if (!s->has_range) {
            s->min = b.min;
            s->max = b.max;
            s->has_range = 1;
        } else {
            if (b.min < s->min) s->min = b.min;
            if (b.max > s->max) s->max = b.max;
        }
    }
    s->n_batches++;
    s->n_values += b.n_finite;
    s->n_nan += b.n_nan;
    s->n_inf += b.n_inf;
done:
    if (numels != numel) free(numels);
    return st;
}

enum qp_status qp_stats_update(struct qp_stats *s, const struct qp_array *a, struct qp_error *err) {
    if (!a) return qp_error_set(err, QP_ERR_USAGE, "stats: NULL array");
    return qp_stats_update_pooled(s, a, 1, err);
}

/* ---- results ------------------------------------------------------------------------- */

void qp_stats_summary(const struct qp_stats *s, struct qp_stats_summary *out) {
    memset(out, 0, sizeof *out);
    if (!s) return;
    out->n_batches = s->n_batches;
    out->n_values = s->n_values;
    out->n_nan = s->n_nan;
    out->n_inf = s->n_inf;
    out->has_range = s->has_range;
    out->min = s->min;
    out->max = s->max;
    out->absmax = fmax(fabs(s->min), fabs(s->max));
}

void qp_stats_hist(const struct qp_stats *s, struct qp_stats_hist *out) {
    memset(out, 0, sizeof *out);
    if (!s) return;
    out->counts = s->h;
    out->n = s->h_n;
    out->threshold = s->h_t;
    out->stride = s->h_n ? hist_stride(s->h_t, s->h_n) : 0.0;
    out->n_coarsened = s->h_coarsened;
}

void qp_stats_abs_hist(const struct qp_stats *s, struct qp_stats_abs_hist *out) {
    memset(out, 0, sizeof *out);
    if (!s) return;
    out->counts = s->a;
    out->n = s->a_n;
    out->lo = s->a_lo;
    out->width = s->a_width;
    out->n_below = s->a_below;
    out->n_coarsened = s->a_coarsened;
}

size_t qp_stats_bytes(const struct qp_stats *s) {
    if (!s) return 0;
    return sizeof *s + (size_t)s->h_cap * sizeof(uint64_t) + (size_t)s->a_cap * sizeof(uint64_t);
}

/* ---- per-channel weights ------------------------------------------------------------- */

enum qp_status qp_stats_channel_absmax(const struct qp_array *w, int axis, float *out,
                                       int64_t n_out, uint64_t *n_nonfinite_out,
                                       struct qp_error *err) {
    if (!w || !out) return qp_error_set(err, QP_ERR_USAGE, "stats: NULL argument");
    uint64_t numel;
    enum qp_status st = check_array(w, &numel, err);
    if (st != QP_OK) return st;
    int ax = axis < 0 ? axis + w->rank : axis;
    if (w->rank < 1 || ax < 0 || ax >= w->rank)
        return qp_error_set(err, QP_ERR_USAGE, "stats: axis %d is out of range for rank %d", axis,
                            w->rank);
    if (n_out != w->dims[ax])
        return qp_error_set(err, QP_ERR_USAGE,
                            "stats: %lld channel outputs given for axis %d of length %lld",
                            (long long)n_out, axis, (long long)w->dims[ax]);
    uint64_t inner = 1;
    for (int i = ax + 1; i < w->rank; i++)
        inner *= (uint64_t)w->dims[i];
    uint64_t len = (uint64_t)w->dims[ax];
    for (int64_t c = 0; c < n_out; c++)
        out[c] = 0.0f;
    uint64_t bad = 0;
    double buf[CHUNK];
    for (uint64_t off = 0; off < numel; off += CHUNK) {
        size_t n = numel - off < CHUNK ? (size_t)(numel - off) : CHUNK;
        load(w, off, n, buf);
        for (size_t i = 0; i < n; i++) {
            double x = buf[i];
            if (!isfinite(x)) {
                bad++;
                continue;
            }
            uint64_t c = ((off + i) / inner) % len;
            float ax_v = (float)fabs(x);
            if (ax_v > out[c]) out[c] = ax_v;
        }
    }
    if (n_nonfinite_out) *n_nonfinite_out = bad;
    return QP_OK;
}
