#include "calib/stats.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "kernels/vecmath.h"
#include "qplace/dtype.h"

/* min/max/counts of one batch (per thread, then merged). */
struct batch_scan {
    uint64_t n_finite, n_nan, n_inf;
    double min, max, amin, amax;
};

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

    /* The last update, for qp_stats_update_derived: valid (last_ok) when it was one array whose
     * values were binned on the geometry that is still current (no growth), or when there are
     * no histograms. last_h holds that batch's signed-histogram counts (h_n of them), last_a
     * and last_below its |x| counts (a_n of them) and values below the first |x| edge. */
    int last_ok;
    uint64_t last_numel;
    struct batch_scan last_scan;
    uint64_t *last_h, *last_a;
    int64_t last_cap, last_acap;
    uint64_t last_below;
};

void qp_stats_config_default(struct qp_stats_config *cfg, int flags) {
    cfg->flags = flags;
    cfg->n_bins = QP_STATS_DEFAULT_BINS;
    cfg->max_bins = QP_STATS_DEFAULT_MAX_BINS;
    cfg->n_abs_bins = QP_STATS_DEFAULT_ABS_BINS;
    cfg->max_abs_bins = QP_STATS_DEFAULT_MAX_ABS_BINS;
    cfg->n_threads = 0;
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
    free(s->last_h);
    free(s->last_a);
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
    s->last_ok = 0;
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

static enum qp_status reserve(uint64_t **p, int64_t *cap, int64_t need, struct qp_error *err) {
    if (need <= *cap) return QP_OK;
    uint64_t *np = (uint64_t)need > SIZE_MAX ? NULL : qp_realloc_n(*p, (size_t)need, sizeof **p);
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

/* The two vector loops (the batch scan and the fast bin estimate) are also compiled for AVX2,
 * chosen at load time on CPUs that have it: the same IEEE operations in wider registers, so
 * the results are identical, and SSE2 lacks the blend the selects need. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define QP_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define QP_SIMD_CLONES
#endif

/* The unit of parallel work: a fixed number of elements, so how an array is cut does not depend
 * on the thread count. Arrays below PAR_MIN elements (some 25 us of binning, about what waking
 * the other threads costs) are done on the calling thread; the blocks are small enough that
 * mid-sized arrays (ResNet's 50176-value tensors) still split evenly between two threads. */
#define BLOCK    8192
#define PAR_MIN  (1u << 15)
#define MAX_PART 64

static void scan_add(struct batch_scan *b, double x) {
    if (isnan(x)) {
        b->n_nan++;
        return;
    }
    if (isinf(x)) {
        b->n_inf++;
        return;
    }
    double ax = fabs(x);
    if (b->n_finite++ == 0) {
        b->min = b->max = x;
        b->amin = b->amax = ax;
        return;
    }
    if (x < b->min) b->min = x;
    if (x > b->max) b->max = x;
    if (ax < b->amin) b->amin = ax;
    if (ax > b->amax) b->amax = ax;
}

/* Merges two partial scans. min/max/counts are exact, so the result does not depend on the
 * order of merging (up to the sign of a zero, which the caller normalises). */
static void scan_merge(struct batch_scan *b, const struct batch_scan *p) {
    b->n_nan += p->n_nan;
    b->n_inf += p->n_inf;
    if (!p->n_finite) return;
    if (!b->n_finite) {
        uint64_t nn = b->n_nan, ni = b->n_inf;
        *b = *p;
        b->n_nan = nn;
        b->n_inf = ni;
        return;
    }
    b->n_finite += p->n_finite;
    if (p->min < b->min) b->min = p->min;
    if (p->max > b->max) b->max = p->max;
    if (p->amin < b->amin) b->amin = p->amin;
    if (p->amax > b->amax) b->amax = p->amax;
}

static void scan_block_f32(const float *p, size_t n, struct batch_scan *b);

static void scan_block(const struct qp_array *a, uint64_t off, uint64_t n, struct batch_scan *b) {
    if (a->dtype == QP_DTYPE_FLOAT) {
        scan_block_f32((const float *)a->data + off, (size_t)n, b);
        return;
    }
    double buf[CHUNK];
    for (uint64_t o = 0; o < n; o += CHUNK) {
        size_t m = n - o < CHUNK ? (size_t)(n - o) : CHUNK;
        load(a, off + o, m, buf);
        for (size_t i = 0; i < m; i++)
            scan_add(b, buf[i]);
    }
}

/* Threads for one array of `numel` elements. */
static int n_threads_for(const struct qp_stats *s, uint64_t numel) {
    if (numel < PAR_MIN || omp_in_parallel()) return 1;
    int nt = s->cfg.n_threads > 0 ? s->cfg.n_threads : omp_get_max_threads();
    uint64_t n_blocks = (numel + BLOCK - 1) / BLOCK;
    if (nt > MAX_PART) nt = MAX_PART;
    if ((uint64_t)nt > n_blocks) nt = (int)n_blocks;
    return nt < 1 ? 1 : nt;
}

/* The next block of a pass for the calling thread: blocks are numbered across the pass's arrays
 * and handed out in order from a shared counter, so a thread that is held up (another job on
 * its core, a slower block) leaves the rest to the others instead of making them wait at the
 * end of the pass. Which thread bins a block changes no result (see run_pass). A thread's
 * blocks come in increasing order, so its cursor (*ai, with *base blocks before array *ai)
 * only moves forward. */
static int next_block(uint64_t *next, const uint64_t *numels, size_t n, size_t *ai, uint64_t *base,
                      uint64_t *blk) {
    uint64_t k = __atomic_fetch_add(next, 1, __ATOMIC_RELAXED);
    for (; *ai < n; ++*ai) {
        uint64_t nb = (numels[*ai] + BLOCK - 1) / BLOCK;
        if (k < *base + nb) {
            *blk = k - *base;
            return 1;
        }
        *base += nb;
    }
    return 0;
}

/* One histogram's fast float32 binning (from struct bin_geom, see geom_prepare). The bin is
 * estimated as trunc((v - lo) * norm) in float, v = x or |x|. The estimate's error is below
 * `eps` bins (float rounding of the difference, the product, lo and norm: at most
 * 2^-24 * (3 n + norm * |lo|) plus the rounding of lo itself), so a fractional part in
 * (eps, 1 - eps) proves the estimate is numpy's bin. Anything else (near an edge, outside,
 * non-finite) takes bin_table, which is exact; +-0 (half of a ReLU output) has its bin
 * precomputed. Bin n (one past the last) collects the |x| values below lo ("below"). */
struct fast_hist {
    int on;
    int absval;
    const float *t; /* thresholds (bin_geom.th or .ta) */
    int64_t n;
    float lo, norm, nmax, last;
    float eps, eps1; /* accept a fraction in (eps, eps1): eps rounded up, 1 - eps rounded down */
    double lo_d;
    int32_t zbin;
};

/* Histogram geometry fixed for one batch. */
struct bin_geom {
    int do_h, do_a;
    double T, h_step, h_norm; /* signed: [-T, T] over hn bins; T == 0: middle bin */
    int64_t hn;
    double a_lo, a_hi, a_step, a_norm;
    int64_t an;
    /* float32 fast path (NULL: not used): th[i] (ta[i]) is the smallest float >= edge i, with
     * -Inf and +Inf at both ends, so a float x is in bin i exactly when th[i] <= x < th[i+1];
     * a float estimate of i is then corrected by one step either way. */
    float *th, *ta;
    float h_lo_f, h_norm_f, a_lo_f, a_norm_f;
    float *tables; /* owns th and ta */
    struct fast_hist fh, fa;
};

/* numpy's np.histogram bin of x on n equal bins over [lo, hi] (hi > lo), step = (hi - lo) / n,
 * norm = n / (hi - lo): the estimate (x - lo) * norm, corrected against the edges
 * i * step + lo; the last bin is closed. x outside [lo, hi] is clamped (it can only get there
 * by rounding of the grown range). */
static int64_t bin_exact(double x, double lo, double hi, double step, double norm, int64_t n) {
    double f = (x - lo) * norm;
    int64_t i = f <= 0.0 ? 0 : f >= (double)n ? n - 1 : (int64_t)f;
    double e0 = (double)i * step + lo;
    double e1 = i + 1 >= n ? hi : (double)(i + 1) * step + lo;
    if (x < e0 && i > 0)
        i--;
    else if (x >= e1 && i < n - 1)
        i++;
    return i;
}

/* The same bin, cheaper: the estimate and numpy's edges are both within ~1e-12 bins of exact
 * (double rounding, at most 2^40 bins), so an estimate further than 1e-6 bins from every edge
 * already is numpy's answer; only values that close to an edge (or outside) take the check. */
static inline int64_t bin_fast(double x, double lo, double hi, double step, double norm,
                               int64_t n) {
    double f = (x - lo) * norm;
    if (f > 1e-6 && f < (double)n - 1e-6) {
        int64_t i = (int64_t)f;
        double fr = f - (double)i;
        if (fr > 1e-6 && fr < 1.0 - 1e-6) return i;
    }
    return bin_exact(x, lo, hi, step, norm, n);
}

/* Adds `c` values equal to x (finite) to the histograms. */
static inline void bin_add(const struct bin_geom *g, double x, uint64_t c, uint64_t *h,
                           uint64_t *ah, uint64_t *below) {
    if (g->do_h) {
        /* T == 0 means every value so far, this one included, is 0: numpy bins it on
         * [-0.5, 0.5], i.e. into the middle bin. */
        int64_t b = g->T > 0.0 ? bin_fast(x, -g->T, g->T, g->h_step, g->h_norm, g->hn) : g->hn / 2;
        h[b] += c;
    }
    if (g->do_a) {
        double ax = fabs(x);
        if (ax < g->a_lo)
            *below += c;
        else
            ah[bin_fast(ax, g->a_lo, g->a_hi, g->a_step, g->a_norm, g->an)] += c;
    }
}

/* Bin of a finite float x given the thresholds t of n bins (see struct bin_geom). The float
 * estimate is within a fraction of a bin of exact (n <= 2^20, ranges checked by the caller), so
 * one step of correction either way gives the same bin as bin_exact. */
static inline int64_t bin_table(float x, float lo, float norm, float last, const float *t) {
    float f = (x - lo) * norm;
    f = f > 0.0f ? f : 0.0f;
    f = f < last ? f : last; /* last = n - 1 */
    int64_t i = (int64_t)f;
    i -= x < t[i];
    i += x >= t[i + 1];
    return i;
}

/* Thresholds for `n` bins with edges i * step + lo (i < n) and hi (i == n). */
static void fill_thresholds(float *t, double lo, double hi, double step, int64_t n) {
    t[0] = -INFINITY;
    t[n] = INFINITY;
    for (int64_t i = 1; i < n; i++) {
        double e = (double)i * step + lo;
        float f = (float)e;
        if ((double)f < e) f = nextafterf(f, INFINITY);
        t[i] = f;
    }
    (void)hi; /* the last edge only closes the last bin, which the +Inf sentinel does */
}

static void bin_block(const struct bin_geom *g, const struct qp_array *a, uint64_t off, uint64_t n,
                      uint64_t *h, uint64_t *ah, uint64_t *below) {
    if (a->dtype == QP_DTYPE_FLOAT && (g->th || g->ta) && (g->th || !g->do_h) &&
        (g->ta || !g->do_a)) {
        const float *p = (const float *)a->data + off;
        const float *th = g->th, *ta = g->ta;
        const float h_lo = g->h_lo_f, h_norm = g->h_norm_f, a_lo = g->a_lo_f, a_norm = g->a_norm_f;
        const double a_lo_d = g->a_lo;
        const float h_last = (float)(g->hn - 1), a_last = (float)(g->an - 1);
        uint64_t n_below = 0;
        if (th && !ta) {
            for (uint64_t i = 0; i < n; i++) {
                float x = p[i];
                if (isfinite(x)) h[bin_table(x, h_lo, h_norm, h_last, th)]++;
            }
        } else if (!th) {
            for (uint64_t i = 0; i < n; i++) {
                float ax = fabsf(p[i]);
                if (!isfinite(ax)) continue;
                if ((double)ax < a_lo_d)
                    n_below++;
                else
                    ah[bin_table(ax, a_lo, a_norm, a_last, ta)]++;
            }
        } else {
            for (uint64_t i = 0; i < n; i++) {
                float x = p[i];
                if (!isfinite(x)) continue;
                h[bin_table(x, h_lo, h_norm, h_last, th)]++;
                float ax = fabsf(x);
                if ((double)ax < a_lo_d)
                    n_below++;
                else
                    ah[bin_table(ax, a_lo, a_norm, a_last, ta)]++;
            }
        }
        *below += n_below;
        return;
    }
    if (a->dtype == QP_DTYPE_FLOAT) {
        /* Zeros (half of a ReLU output) are counted in a register: incrementing one bin again
         * and again would chain every element on the previous store. */
        const float *p = (const float *)a->data + off;
        uint64_t zeros = 0;
        for (uint64_t i = 0; i < n; i++) {
            float x = p[i];
            if (x == 0.0f)
                zeros++;
            else if (isfinite(x))
                bin_add(g, x, 1, h, ah, below);
        }
        if (zeros) bin_add(g, 0.0, zeros, h, ah, below);
        return;
    }
    double buf[CHUNK];
    for (uint64_t o = 0; o < n; o += CHUNK) {
        size_t m = n - o < CHUNK ? (size_t)(n - o) : CHUNK;
        load(a, off + o, m, buf);
        for (size_t i = 0; i < m; i++)
            if (isfinite(buf[i])) bin_add(g, buf[i], 1, h, ah, below);
    }
}

/* ---- the float32 fast path ------------------------------------------------------------- */

/* Values per inner step: the index buffer lives on the stack and the chunk stays in L1 between
 * the scan, the index pass and the count pass. */
#define FAST_CHUNK 1024

static int32_t fast_slow(const struct fast_hist *f, float x) {
    if (!isfinite(x)) return -1;
    if (f->absval) {
        x = fabsf(x);
        if ((double)x < f->lo_d) return (int32_t)f->n;
    }
    return (int32_t)bin_table(x, f->lo, f->norm, f->last, f->t);
}

static void fast_setup(struct fast_hist *f, int absval, const float *t, int64_t n, double lo,
                       double norm) {
    memset(f, 0, sizeof *f);
    if (!t || n > ((int64_t)1 << 20)) return;
    f->absval = absval;
    f->t = t;
    f->n = n;
    f->lo = (float)lo;
    f->lo_d = lo;
    f->norm = (float)norm;
    f->nmax = (float)n;
    f->last = (float)(n - 1);
    double eps =
        ldexp(4.0 * (double)n + 2.0 * norm * fabs(lo), -24) + 2.0 * norm * fabs(lo - (double)f->lo);
    f->zbin =
        absval && 0.0 < lo ? (int32_t)n : (int32_t)bin_table(0.0f, f->lo, f->norm, f->last, t);
    if (!(eps < 0.25)) return; /* only bin_table then: still exact */
    f->eps = (float)eps;
    if ((double)f->eps < eps) f->eps = nextafterf(f->eps, INFINITY);
    f->eps1 = (float)(1.0 - eps);
    if ((double)f->eps1 > 1.0 - eps) f->eps1 = nextafterf(f->eps1, 0.0f);
    f->on = 1;
}

/* The counter of value x at position k (v: what is binned, x or |x|): 4 * bin + k % 4 when
 * the float estimate proves the bin of v (or x is +-0), else -1. Branch-free, so the loops
 * calling it vectorise. */
static inline int32_t fast_estimate(const struct fast_hist *f, float x, float v, size_t k) {
    float e = (v - f->lo) * f->norm;
    e = e > 0.0f ? e : 0.0f; /* NaN and -Inf land on 0, +Inf on n: fraction 0 */
    e = e < f->nmax ? e : f->nmax;
    int32_t i = (int32_t)e;
    float fr = e - (float)i;
    int ok = (fr > f->eps) & (fr < f->eps1); /* & keeps it vectorisable */
    int32_t lane = (int32_t)(k & 3u);
    int32_t r = ok ? 4 * i + lane : -1;
    return x == 0.0f ? 4 * f->zbin + lane : r;
}

/* idx[k] = 4 * bin + k % 4 (its counter in the lanes, see fast_count) when the float estimate
 * proves the bin of p[k] (or p[k] is +-0), else -1. */
QP_SIMD_CLONES static void fast_index(const struct fast_hist *f, const float *p, size_t m,
                                      int32_t *idx) {
    const struct fast_hist g = *f; /* a local copy: idx's stores cannot alias its fields */
    if (g.absval) {
#pragma omp simd
        for (size_t k = 0; k < m; k++)
            idx[k] = fast_estimate(&g, p[k], fabsf(p[k]), k);
    } else {
#pragma omp simd
        for (size_t k = 0; k < m; k++)
            idx[k] = fast_estimate(&g, p[k], p[k], k);
    }
}

/* The float32 batch scan: branch-free min/max/|x| reductions the compiler vectorises, plus a
 * count of non-finite elements (exponent all ones) from the bits. Only a block that holds NaN
 * or Inf is scanned again element by element. With `idx` (and the histogram `g`) it also does
 * fast_index's work for the signed histogram in the same loop: one read of the chunk instead of
 * two. Always inlined with a constant `with_idx`, so each caller gets its own branch-free loop
 * (compiled for its own SIMD clone). */
__attribute__((always_inline)) static inline void scan_f32(const float *p, size_t n, int with_idx,
                                                           const struct fast_hist *g, int32_t *idx,
                                                           struct batch_scan *b) {
    float mn = INFINITY, mx = -INFINITY, amn = INFINITY, amx = 0.0f;
    uint32_t bad = 0;
#pragma omp simd reduction(min : mn, amn) reduction(max : mx, amx) reduction(+ : bad)
    for (size_t k = 0; k < n; k++) {
        float x = p[k];
        uint32_t u;
        memcpy(&u, &p[k], sizeof u);
        bad += (u & 0x7f800000u) == 0x7f800000u;
        float ax = fabsf(x);
        mn = x < mn ? x : mn;
        mx = x > mx ? x : mx;
        amn = ax < amn ? ax : amn;
        amx = ax > amx ? ax : amx;
        if (with_idx) idx[k] = fast_estimate(g, x, x, k);
    }
    if (bad) {
        for (size_t k = 0; k < n; k++)
            scan_add(b, p[k]);
        return;
    }
    if (!n) return;
    struct batch_scan blk = {.n_finite = n, .min = mn, .max = mx, .amin = amn, .amax = amx};
    scan_merge(b, &blk);
}

QP_SIMD_CLONES static void scan_block_f32(const float *p, size_t n, struct batch_scan *b) {
    scan_f32(p, n, 0, NULL, NULL, b);
}

/* fast_index for the signed histogram with the batch scan (scan_block_f32) in the same loop. */
QP_SIMD_CLONES static void fast_index_scan(const struct fast_hist *f, const float *p, size_t m,
                                           int32_t *idx, struct batch_scan *b) {
    const struct fast_hist g = *f; /* as in fast_index */
    scan_f32(p, m, 1, &g, idx, b);
}

static inline void count_one(const struct fast_hist *f, const float *p, const int32_t *idx,
                             size_t k, uint32_t *lanes) {
    int32_t b = idx[k];
    if (b < 0) {
        b = fast_slow(f, p[k]);
        if (b < 0) return;
        b = 4 * b + (int32_t)(k & 3u);
    }
    lanes[b]++;
}

/* Counts the chunk into 4 interleaved 32-bit sub-histograms (element k in lane k % 4 of its
 * bin, lanes[4 * bin + lane]): a run of values in one bin then updates 4 counters in turn
 * instead of waiting on the previous store to the same one. */
static void fast_count(const struct fast_hist *f, const float *p, const int32_t *idx, size_t m,
                       uint32_t *lanes) {
    size_t k = 0;
    /* Four at a time, with one test for "one of them needs the exact path" (rare). */
    for (; k + 4 <= m; k += 4) {
        int32_t b0 = idx[k], b1 = idx[k + 1], b2 = idx[k + 2], b3 = idx[k + 3];
        if ((b0 | b1 | b2 | b3) < 0) {
            for (size_t j = k; j < k + 4; j++)
                count_one(f, p, idx, j, lanes);
            continue;
        }
        lanes[b0]++;
        lanes[b1]++;
        lanes[b2]++;
        lanes[b3]++;
    }
    for (; k < m; k++)
        count_one(f, p, idx, k, lanes);
}

/* Adds the 4 lanes of `n` bins into h and clears them. */
static void flush_lanes(uint32_t *sh, int64_t n, uint64_t *h) {
    for (int64_t i = 0; i < n; i++) {
        h[i] += (uint64_t)sh[4 * i] + sh[4 * i + 1] + sh[4 * i + 2] + sh[4 * i + 3];
        sh[4 * i] = sh[4 * i + 1] = sh[4 * i + 2] = sh[4 * i + 3] = 0;
    }
}

/* ---- the AVX2 kernel: estimate, scan and compaction in one vector loop ------------------ */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QP_STATS_X86 1

/* Byte k of entry m is the position of the k-th set bit of m (the rest 0): the vpermd pattern
 * that packs the lanes of an 8-lane vector selected by mask m to its front. */
static const uint64_t keep_lanes[256] = {
    0x0000000000000000u, 0x0000000000000000u, 0x0000000000000001u, 0x0000000000000100u,
    0x0000000000000002u, 0x0000000000000200u, 0x0000000000000201u, 0x0000000000020100u,
    0x0000000000000003u, 0x0000000000000300u, 0x0000000000000301u, 0x0000000000030100u,
    0x0000000000000302u, 0x0000000000030200u, 0x0000000000030201u, 0x0000000003020100u,
    0x0000000000000004u, 0x0000000000000400u, 0x0000000000000401u, 0x0000000000040100u,
    0x0000000000000402u, 0x0000000000040200u, 0x0000000000040201u, 0x0000000004020100u,
    0x0000000000000403u, 0x0000000000040300u, 0x0000000000040301u, 0x0000000004030100u,
    0x0000000000040302u, 0x0000000004030200u, 0x0000000004030201u, 0x0000000403020100u,
    0x0000000000000005u, 0x0000000000000500u, 0x0000000000000501u, 0x0000000000050100u,
    0x0000000000000502u, 0x0000000000050200u, 0x0000000000050201u, 0x0000000005020100u,
    0x0000000000000503u, 0x0000000000050300u, 0x0000000000050301u, 0x0000000005030100u,
    0x0000000000050302u, 0x0000000005030200u, 0x0000000005030201u, 0x0000000503020100u,
    0x0000000000000504u, 0x0000000000050400u, 0x0000000000050401u, 0x0000000005040100u,
    0x0000000000050402u, 0x0000000005040200u, 0x0000000005040201u, 0x0000000504020100u,
    0x0000000000050403u, 0x0000000005040300u, 0x0000000005040301u, 0x0000000504030100u,
    0x0000000005040302u, 0x0000000504030200u, 0x0000000504030201u, 0x0000050403020100u,
    0x0000000000000006u, 0x0000000000000600u, 0x0000000000000601u, 0x0000000000060100u,
    0x0000000000000602u, 0x0000000000060200u, 0x0000000000060201u, 0x0000000006020100u,
    0x0000000000000603u, 0x0000000000060300u, 0x0000000000060301u, 0x0000000006030100u,
    0x0000000000060302u, 0x0000000006030200u, 0x0000000006030201u, 0x0000000603020100u,
    0x0000000000000604u, 0x0000000000060400u, 0x0000000000060401u, 0x0000000006040100u,
    0x0000000000060402u, 0x0000000006040200u, 0x0000000006040201u, 0x0000000604020100u,
    0x0000000000060403u, 0x0000000006040300u, 0x0000000006040301u, 0x0000000604030100u,
    0x0000000006040302u, 0x0000000604030200u, 0x0000000604030201u, 0x0000060403020100u,
    0x0000000000000605u, 0x0000000000060500u, 0x0000000000060501u, 0x0000000006050100u,
    0x0000000000060502u, 0x0000000006050200u, 0x0000000006050201u, 0x0000000605020100u,
    0x0000000000060503u, 0x0000000006050300u, 0x0000000006050301u, 0x0000000605030100u,
    0x0000000006050302u, 0x0000000605030200u, 0x0000000605030201u, 0x0000060503020100u,
    0x0000000000060504u, 0x0000000006050400u, 0x0000000006050401u, 0x0000000605040100u,
    0x0000000006050402u, 0x0000000605040200u, 0x0000000605040201u, 0x0000060504020100u,
    0x0000000006050403u, 0x0000000605040300u, 0x0000000605040301u, 0x0000060504030100u,
    0x0000000605040302u, 0x0000060504030200u, 0x0000060504030201u, 0x0006050403020100u,
    0x0000000000000007u, 0x0000000000000700u, 0x0000000000000701u, 0x0000000000070100u,
    0x0000000000000702u, 0x0000000000070200u, 0x0000000000070201u, 0x0000000007020100u,
    0x0000000000000703u, 0x0000000000070300u, 0x0000000000070301u, 0x0000000007030100u,
    0x0000000000070302u, 0x0000000007030200u, 0x0000000007030201u, 0x0000000703020100u,
    0x0000000000000704u, 0x0000000000070400u, 0x0000000000070401u, 0x0000000007040100u,
    0x0000000000070402u, 0x0000000007040200u, 0x0000000007040201u, 0x0000000704020100u,
    0x0000000000070403u, 0x0000000007040300u, 0x0000000007040301u, 0x0000000704030100u,
    0x0000000007040302u, 0x0000000704030200u, 0x0000000704030201u, 0x0000070403020100u,
    0x0000000000000705u, 0x0000000000070500u, 0x0000000000070501u, 0x0000000007050100u,
    0x0000000000070502u, 0x0000000007050200u, 0x0000000007050201u, 0x0000000705020100u,
    0x0000000000070503u, 0x0000000007050300u, 0x0000000007050301u, 0x0000000705030100u,
    0x0000000007050302u, 0x0000000705030200u, 0x0000000705030201u, 0x0000070503020100u,
    0x0000000000070504u, 0x0000000007050400u, 0x0000000007050401u, 0x0000000705040100u,
    0x0000000007050402u, 0x0000000705040200u, 0x0000000705040201u, 0x0000070504020100u,
    0x0000000007050403u, 0x0000000705040300u, 0x0000000705040301u, 0x0000070504030100u,
    0x0000000705040302u, 0x0000070504030200u, 0x0000070504030201u, 0x0007050403020100u,
    0x0000000000000706u, 0x0000000000070600u, 0x0000000000070601u, 0x0000000007060100u,
    0x0000000000070602u, 0x0000000007060200u, 0x0000000007060201u, 0x0000000706020100u,
    0x0000000000070603u, 0x0000000007060300u, 0x0000000007060301u, 0x0000000706030100u,
    0x0000000007060302u, 0x0000000706030200u, 0x0000000706030201u, 0x0000070603020100u,
    0x0000000000070604u, 0x0000000007060400u, 0x0000000007060401u, 0x0000000706040100u,
    0x0000000007060402u, 0x0000000706040200u, 0x0000000706040201u, 0x0000070604020100u,
    0x0000000007060403u, 0x0000000706040300u, 0x0000000706040301u, 0x0000070604030100u,
    0x0000000706040302u, 0x0000070604030200u, 0x0000070604030201u, 0x0007060403020100u,
    0x0000000000070605u, 0x0000000007060500u, 0x0000000007060501u, 0x0000000706050100u,
    0x0000000007060502u, 0x0000000706050200u, 0x0000000706050201u, 0x0000070605020100u,
    0x0000000007060503u, 0x0000000706050300u, 0x0000000706050301u, 0x0000070605030100u,
    0x0000000706050302u, 0x0000070605030200u, 0x0000070605030201u, 0x0007060503020100u,
    0x0000000007060504u, 0x0000000706050400u, 0x0000000706050401u, 0x0000070605040100u,
    0x0000000706050402u, 0x0000070605040200u, 0x0000070605040201u, 0x0007060504020100u,
    0x0000000706050403u, 0x0000070605040300u, 0x0000070605040301u, 0x0007060504030100u,
    0x0000070605040302u, 0x0007060504030200u, 0x0007060504030201u, 0x0706050403020100u,
};

/* The constants of an 8-lane bin estimate (struct fast_hist's, broadcast). */
struct est8 {
    __m256 lo, norm, nmax, eps, eps1, zero;
};

__attribute__((target("avx2"))) static inline void est8_setup(const struct fast_hist *f,
                                                              struct est8 *c) {
    c->lo = _mm256_set1_ps(f->lo);
    c->norm = _mm256_set1_ps(f->norm);
    c->nmax = _mm256_set1_ps(f->nmax);
    c->eps = _mm256_set1_ps(f->eps);
    c->eps1 = _mm256_set1_ps(f->eps1);
    c->zero = _mm256_setzero_ps();
}

/* The estimated bins of 8 values v (x or |x|) and in *ok the lanes whose fraction proves them
 * (see struct fast_hist). */
__attribute__((target("avx2"), always_inline)) static inline __m256i
est8_bins(const struct est8 *c, __m256 v, __m256 *ok) {
    /* No clamp at 0: below lo the estimate is negative and so is its fraction (truncation is
     * toward zero), which fails the proof like NaN (which the clamp at n turns into n,
     * fraction 0) and -Inf (fraction -Inf); +Inf lands on n. */
    __m256 e = _mm256_mul_ps(_mm256_sub_ps(v, c->lo), c->norm);
    e = _mm256_min_ps(e, c->nmax);
    __m256i i = _mm256_cvttps_epi32(e);
    __m256 fr = _mm256_sub_ps(e, _mm256_cvtepi32_ps(i));
    *ok = _mm256_and_ps(_mm256_cmp_ps(fr, c->eps, _CMP_GT_OQ),
                        _mm256_cmp_ps(fr, c->eps1, _CMP_LT_OQ));
    return i;
}

/* Counts the bins an AVX2 kernel buffered (4 * bin each): consecutive entries go to the 4 lanes
 * in turn. */
static inline void count_buffered(uint32_t *lanes, const int32_t *buf, size_t nb) {
    size_t j = 0;
    for (; j + 4 <= nb; j += 4) {
        lanes[buf[j]]++;
        lanes[buf[j + 1] + 1]++;
        lanes[buf[j + 2] + 2]++;
        lanes[buf[j + 3] + 3]++;
    }
    for (; j < nb; j++)
        lanes[buf[j]]++;
}

/* Merges into b the scan of an AVX2 kernel's proven vectors: n_fast finite values whose lane
 * minima, maxima and |x| minima are mn, mx and amn. */
__attribute__((target("avx2"))) static inline void
merge_lane_scan(__m256 mn, __m256 mx, __m256 amn, size_t n_fast, struct batch_scan *b) {
    if (!n_fast) return;
    float v[3][8];
    _mm256_storeu_ps(v[0], mn);
    _mm256_storeu_ps(v[1], mx);
    _mm256_storeu_ps(v[2], amn);
    struct batch_scan blk = {.n_finite = n_fast, .min = v[0][0], .max = v[1][0], .amin = v[2][0]};
    for (int l = 1; l < 8; l++) {
        if (v[0][l] < blk.min) blk.min = v[0][l];
        if (v[1][l] > blk.max) blk.max = v[1][l];
        if (v[2][l] < blk.amin) blk.amin = v[2][l];
    }
    blk.amax = fmax(-blk.min, blk.max); /* exact: the largest |x| is -min or max */
    scan_merge(b, &blk);
}

/* The exact path for values [k, k + n) of a chunk: bins and scans one value at a time. */
static void fast_chunk_slow(const struct fast_hist *f, const float *p, size_t k, size_t n,
                            uint32_t *lanes, struct batch_scan *b) {
    for (size_t j = k; j < k + n; j++) {
        scan_add(b, p[j]);
        int32_t bin = fast_slow(f, p[j]);
        if (bin >= 0) lanes[4 * bin]++;
    }
}

/* Bins m <= FAST_CHUNK float32 values into the 4-lane sub-histograms and scans them
 * (min/max/NaN/Inf into `b`), with the same results as fast_index(_scan) + fast_count +
 * scan_block_f32; returns the number of zeros seen. Per 8 values, with one well-predicted
 * branch: when every lane is either ±0 or has a proven estimate (the usual case), the bins go
 * to a buffer that a plain loop then counts. With `compact` (for data with many zeros, such
 * as a ReLU output) the zeros are instead counted in a vector register (bin zbin, added once
 * per chunk) and only the other lanes' bins are packed into the buffer (a table-driven
 * vpermd), so a zero costs no scattered increment; without it (for data with few zeros,
 * where the packing would cost more than it saves) all 8 bins are stored, zeros as zbin. Any
 * other vector (a value near an edge, outside the range, or non-finite) is only noted, and
 * binned and scanned one value at a time by the exact path after the loop, which keeps the
 * loop small. The scan of the fast vectors is exact (min/max of finite floats). */
__attribute__((target("avx2,popcnt"))) static size_t fast_chunk_avx2(const struct fast_hist *f,
                                                                     const float *p, size_t m,
                                                                     int compact, uint32_t *lanes,
                                                                     struct batch_scan *b) {
    struct est8 c;
    est8_setup(f, &c);
    const __m256 zero = c.zero;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 vmask = f->absval ? absmask : _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    __m256 mn = _mm256_set1_ps(INFINITY), mx = _mm256_set1_ps(-INFINITY);
    __m256 amn = _mm256_set1_ps(INFINITY);
    const __m256i zbin4 = _mm256_set1_epi32(4 * f->zbin);
    __m256i zc = _mm256_setzero_si256();
    _Alignas(32) int32_t buf[FAST_CHUNK + 8];
    uint16_t slow_at[FAST_CHUNK / 8];
    size_t nb = 0, n_slow = 0, k = 0, n_zeros = 0, m_all = m;
    if (m > FAST_CHUNK) m = FAST_CHUNK; /* callers cut chunks; the buffers hold one */
    for (; k + 8 <= m; k += 8) {
        __m256 x = _mm256_loadu_ps(p + k), ok;
        __m256i i = est8_bins(&c, _mm256_and_ps(x, vmask), &ok);
        __m256 z = _mm256_cmp_ps(x, zero, _CMP_EQ_OQ);
        int mz = _mm256_movemask_ps(z);
        if (__builtin_expect((_mm256_movemask_ps(ok) | mz) != 0xff, 0)) {
            slow_at[n_slow++] = (uint16_t)k;
            continue;
        }
        /* Every lane is finite here. */
        mn = _mm256_min_ps(x, mn);
        mx = _mm256_max_ps(x, mx);
        amn = _mm256_min_ps(_mm256_and_ps(x, absmask), amn);
        __m256i b4 = _mm256_slli_epi32(i, 2);
        n_zeros += (size_t)__builtin_popcount((unsigned)mz);
        if (compact) {
            zc = _mm256_sub_epi32(zc, _mm256_castps_si256(z));
            unsigned keep = (unsigned)~mz & 0xffu;
            __m256i perm =
                _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)&keep_lanes[keep]));
            _mm256_storeu_si256((__m256i *)(buf + nb), _mm256_permutevar8x32_epi32(b4, perm));
            nb += (size_t)__builtin_popcount(keep);
        } else {
            b4 = _mm256_blendv_epi8(b4, zbin4, _mm256_castps_si256(z));
            _mm256_store_si256((__m256i *)(buf + nb), b4);
            nb += 8;
        }
    }
    size_t n_fast = k - 8 * n_slow;
    count_buffered(lanes, buf, nb);
    if (compact) { /* the zeros counted in zc */
        int32_t zl[8];
        _mm256_storeu_si256((__m256i *)zl, zc);
        uint32_t zeros = 0;
        for (int l = 0; l < 8; l++)
            zeros += (uint32_t)zl[l];
        lanes[4 * f->zbin] += zeros;
    }
    merge_lane_scan(mn, mx, amn, n_fast, b);
    for (size_t q = 0; q < n_slow; q++)
        fast_chunk_slow(f, p, slow_at[q], 8, lanes, b);
    fast_chunk_slow(f, p, k, m_all - k, lanes, b); /* the tail (and anything past a chunk) */
    return n_zeros;
}

/* fast_chunk_avx2 for the signed histogram of a chunk with no zeros expected (the previous one
 * had none, as in convolution and Add outputs): nothing to test, pack or count for zeros. A
 * zero that does come is not proven (its estimate lies on the middle edge, fraction 0), so it
 * goes to the exact path like any value near an edge: the counts are the same. Returns the
 * number of values that took the exact path, which tells the caller when to switch back. */
__attribute__((target("avx2,popcnt"))) static size_t fast_chunk_avx2_nz(const struct fast_hist *f,
                                                                        const float *p, size_t m,
                                                                        uint32_t *lanes,
                                                                        struct batch_scan *b) {
    struct est8 c;
    est8_setup(f, &c);
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 mn = _mm256_set1_ps(INFINITY), mx = _mm256_set1_ps(-INFINITY);
    __m256 amn = _mm256_set1_ps(INFINITY);
    _Alignas(32) int32_t buf[FAST_CHUNK + 8];
    uint16_t slow_at[FAST_CHUNK / 8];
    size_t nb = 0, n_slow = 0, k = 0, m_all = m;
    if (m > FAST_CHUNK) m = FAST_CHUNK; /* callers cut chunks; the buffers hold one */
    for (; k + 8 <= m; k += 8) {
        __m256 x = _mm256_loadu_ps(p + k), ok;
        __m256i i = est8_bins(&c, x, &ok);
        if (__builtin_expect(_mm256_movemask_ps(ok) != 0xff, 0)) {
            slow_at[n_slow++] = (uint16_t)k;
            continue;
        }
        mn = _mm256_min_ps(x, mn);
        mx = _mm256_max_ps(x, mx);
        amn = _mm256_min_ps(_mm256_and_ps(x, absmask), amn);
        _mm256_store_si256((__m256i *)(buf + nb), _mm256_slli_epi32(i, 2));
        nb += 8;
    }
    size_t n_fast = k - 8 * n_slow;
    count_buffered(lanes, buf, nb);
    merge_lane_scan(mn, mx, amn, n_fast, b);
    for (size_t q = 0; q < n_slow; q++)
        fast_chunk_slow(f, p, slow_at[q], 8, lanes, b);
    fast_chunk_slow(f, p, k, m_all - k, lanes, b); /* the tail (and anything past a chunk) */
    return 8 * n_slow + (m_all - k);
}

/* 1 when fast_chunk_avx2 may run (the kernels' AVX2 probe, which also initialises the CPU
 * model that __builtin_cpu_supports reads, plus POPCNT; and tests did not turn it off). Read
 * from OpenMP threads: a relaxed atomic, every writer stores the same. */
static int simd_allowed = 1;

static int use_avx2(void) {
    return qp_vf_have_avx2() && __builtin_cpu_supports("popcnt") &&
           __atomic_load_n(&simd_allowed, __ATOMIC_RELAXED);
}
#else
static int simd_allowed = 1;
static int use_avx2(void) {
    return 0;
}
static size_t fast_chunk_avx2(const struct fast_hist *f, const float *p, size_t m, int compact,
                              uint32_t *lanes, struct batch_scan *b) {
    (void)f, (void)p, (void)m, (void)compact, (void)lanes, (void)b;
    return 0;
}
static size_t fast_chunk_avx2_nz(const struct fast_hist *f, const float *p, size_t m,
                                 uint32_t *lanes, struct batch_scan *b) {
    (void)f, (void)p, (void)m, (void)lanes, (void)b;
    return 0;
}
#endif

int qp_stats_set_simd(int allow) {
    int prev = __atomic_load_n(&simd_allowed, __ATOMIC_RELAXED);
    __atomic_store_n(&simd_allowed, allow != 0, __ATOMIC_RELAXED);
    return prev;
}

/* The geometry of the collector's current histograms, with float32 tables when `tables`
 * (they are then malloc'd into g->th / g->ta; free g->tables). */
static void geom_prepare(const struct qp_stats *s, int tables, struct bin_geom *g) {
    memset(g, 0, sizeof *g);
    g->do_h = (s->cfg.flags & QP_STATS_HIST) != 0;
    g->do_a = (s->cfg.flags & QP_STATS_ABS_HIST) != 0;
    g->T = s->h_t;
    g->hn = g->do_h ? s->h_n : 0;
    if (g->do_h && g->T > 0.0) {
        g->h_step = (2.0 * g->T) / (double)g->hn;
        g->h_norm = (double)g->hn / (2.0 * g->T);
    }
    g->an = g->do_a ? s->a_n : 0;
    g->a_lo = s->a_lo;
    g->a_hi = s->a_lo + (double)s->a_n * s->a_width;
    if (g->do_a) {
        g->a_step = (g->a_hi - g->a_lo) / (double)g->an;
        g->a_norm = (double)g->an / (g->a_hi - g->a_lo);
    }
    if (!tables) return;
    /* Without tables (extreme ranges, huge bin counts, no memory) every value takes
     * bin_exact. */
    int h_ok = g->do_h && g->T >= 1e-30 && g->T <= 1e36 && g->hn <= ((int64_t)1 << 20);
    int a_ok = g->do_a && g->a_lo >= 0.0 && g->a_hi <= 1e36 && g->a_step >= 1e-30 &&
               g->an <= ((int64_t)1 << 20);
    if ((!h_ok && g->do_h) || (!a_ok && g->do_a)) return;
    size_t nt_h = h_ok ? (size_t)g->hn + 1 : 0, nt_a = a_ok ? (size_t)g->an + 1 : 0;
    g->tables = malloc((nt_h + nt_a) * sizeof *g->tables);
    if (!g->tables) return;
    if (h_ok) {
        g->th = g->tables;
        fill_thresholds(g->th, -g->T, g->T, g->h_step, g->hn);
        g->h_lo_f = (float)-g->T;
        g->h_norm_f = (float)g->h_norm;
        fast_setup(&g->fh, 0, g->th, g->hn, -g->T, g->h_norm);
    }
    if (a_ok) {
        g->ta = g->tables + nt_h;
        fill_thresholds(g->ta, g->a_lo, g->a_hi, g->a_step, g->an);
        g->a_lo_f = (float)g->a_lo;
        g->a_norm_f = (float)g->a_norm;
        fast_setup(&g->fa, 1, g->ta, g->an, g->a_lo, g->a_norm);
    }
}

/* Per-thread scratch of one pass: counts acc[per] (signed bins, |x| bins, below), then the
 * 4-lane sub-histograms (4 * per uint32) when the fast path may be taken. */
struct pass_scratch {
    int nt;
    size_t per, bytes; /* per thread */
    unsigned char *mem;
};

static void scratch_free(struct pass_scratch *ps) {
    free(ps->mem);
    memset(ps, 0, sizeof *ps);
}

/* Scratch for `nt` threads (fewer when memory is short) and the given bin counts. QP_ERR_NOMEM
 * when not even one thread's fits. */
static enum qp_status scratch_alloc(struct pass_scratch *ps, int nt, int64_t hn, int64_t an,
                                    struct qp_error *err) {
    memset(ps, 0, sizeof *ps);
    ps->per = (size_t)hn + (size_t)an + 1;
    if (ps->per > SIZE_MAX / 32 / MAX_PART)
        return qp_error_set(err, QP_ERR_NOMEM, "stats: histogram too large");
    ps->bytes = ps->per * (sizeof(uint64_t) + 4 * sizeof(uint32_t));
    for (ps->nt = nt; ps->nt >= 1; ps->nt = ps->nt > 1 ? 1 : 0) {
        ps->mem = calloc((size_t)ps->nt, ps->bytes);
        if (ps->mem) return QP_OK;
    }
    return qp_error_set(err, QP_ERR_NOMEM, "stats: out of memory for histogram scratch");
}

/* One parallel pass over the arrays: the batch scan (min/max/counts) when `scan_out`, and the
 * binning on geometry `g` into `acc` (ps->per entries, added to) when `g`. Blocks of BLOCK
 * elements are split among the threads; partial scans are exact and partial counts are integer
 * sums, so the results do not depend on the thread count. */
static void run_pass(const struct qp_array *arrays, const uint64_t *numels, size_t n,
                     const struct bin_geom *g, struct pass_scratch *ps, struct batch_scan *scan_out,
                     uint64_t *acc_out) {
    int nt = g ? ps->nt : ps->nt > 0 ? ps->nt : 1;
    int64_t hn = g ? g->hn : 0, an = g ? g->an : 0;
    int fast_geom = g && (g->fh.on || !g->do_h) && (g->fa.on || !g->do_a);
    int avx2 = fast_geom && use_avx2();
    struct batch_scan part[MAX_PART];
    memset(part, 0, sizeof part);
    uint64_t next = 0; /* the shared block counter (next_block) */
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int t = omp_get_thread_num();
        uint64_t *acc = g ? (uint64_t *)(void *)(ps->mem + (size_t)t * ps->bytes) : NULL;
        uint32_t *lanes = g ? (uint32_t *)(void *)(acc + ps->per) : NULL;
        int32_t idx[FAST_CHUNK];
        uint64_t since_flush = 0, k, base = 0;
        size_t ai = 0;
        enum { ZERO_NONE, ZERO_FEW, ZERO_MANY } zmode = ZERO_FEW;
        while (next_block(&next, numels, n, &ai, &base, &k)) {
            const struct qp_array *a = &arrays[ai];
            int is_f32 = a->dtype == QP_DTYPE_FLOAT;
            int fast = fast_geom && is_f32;
            uint64_t off = k * BLOCK, m = numels[ai] - off < BLOCK ? numels[ai] - off : BLOCK;
            if (is_f32 && (fast || !g)) {
                const float *p = (const float *)a->data + off;
                for (uint64_t c = 0; c < m; c += FAST_CHUNK) {
                    size_t cm = m - c < FAST_CHUNK ? (size_t)(m - c) : FAST_CHUNK;
                    if (fast && avx2) {
                        /* The scan goes with the first histogram binned. How zeros are handled
                         * follows the previous chunk (the counts are the same either way):
                         * none seen, the signed histogram alone takes the kernel without zero
                         * handling (until values start taking its exact path); few, their bins
                         * are stored like any; many (a ReLU output), they are packed out and
                         * counted at once, which pays from ~30% zeros (measured). */
                        struct batch_scan unused = {0};
                        size_t zeros = 0;
                        if (zmode == ZERO_NONE && g->do_h && !g->do_a) {
                            size_t slow = fast_chunk_avx2_nz(&g->fh, p + c, cm, lanes,
                                                             scan_out ? &part[t] : &unused);
                            if (32 * slow > cm) zmode = ZERO_FEW;
                            continue;
                        }
                        if (g->do_h)
                            zeros = fast_chunk_avx2(&g->fh, p + c, cm, zmode == ZERO_MANY, lanes,
                                                    scan_out ? &part[t] : &unused);
                        if (g->do_a)
                            zeros = fast_chunk_avx2(&g->fa, p + c, cm, zmode == ZERO_MANY,
                                                    lanes + 4 * (size_t)hn,
                                                    scan_out && !g->do_h ? &part[t] : &unused);
                        zmode = zeros == 0 ? ZERO_NONE : 4 * zeros > cm ? ZERO_MANY : ZERO_FEW;
                        continue;
                    }
                    if (scan_out && g && g->do_h) {
                        fast_index_scan(&g->fh, p + c, cm, idx, &part[t]);
                        fast_count(&g->fh, p + c, idx, cm, lanes);
                    } else {
                        if (scan_out) scan_block_f32(p + c, cm, &part[t]);
                        if (g && g->do_h) {
                            fast_index(&g->fh, p + c, cm, idx);
                            fast_count(&g->fh, p + c, idx, cm, lanes);
                        }
                    }
                    if (g && g->do_a) {
                        fast_index(&g->fa, p + c, cm, idx);
                        fast_count(&g->fa, p + c, idx, cm, lanes + 4 * (size_t)hn);
                    }
                }
                since_flush += m;
                if (g && since_flush > ((uint64_t)1 << 31)) { /* 32-bit lanes */
                    flush_lanes(lanes, (int64_t)ps->per, acc);
                    since_flush = 0;
                }
                continue;
            }
            if (scan_out) scan_block(a, off, m, &part[t]);
            if (g) bin_block(g, a, off, m, acc, acc + hn, &acc[hn + an]);
        }
        if (g && since_flush) flush_lanes(lanes, (int64_t)ps->per, acc);
    }
    if (scan_out)
        for (int t = 0; t < nt; t++)
            scan_merge(scan_out, &part[t]);
    if (g)
        for (int t = 0; t < nt; t++) {
            const uint64_t *acc = (const uint64_t *)(void *)(ps->mem + (size_t)t * ps->bytes);
            for (size_t i = 0; i < ps->per; i++)
                acc_out[i] += acc[i];
        }
}

/* Adds a pass's counts to the collector's histograms. */
static void commit_counts(struct qp_stats *s, const struct bin_geom *g, const uint64_t *acc) {
    for (int64_t i = 0; i < g->hn; i++)
        s->h[i] += acc[i];
    for (int64_t i = 0; i < g->an; i++)
        s->a[i] += acc[g->hn + i];
    s->a_below += acc[g->hn + g->an];
}

/* Adds a batch's scan to the ranges and counts (a zero min/max as +0), and keeps it as the
 * last batch when last_ok says that batch's counts were kept (qp_stats_update_derived). */
static void commit_batch(struct qp_stats *s, struct batch_scan *b, uint64_t numel) {
    if (b->n_finite) {
        if (b->min == 0.0) b->min = 0.0;
        if (b->max == 0.0) b->max = 0.0;
        if (!s->has_range) {
            s->min = b->min;
            s->max = b->max;
            s->has_range = 1;
        } else {
            if (b->min < s->min) s->min = b->min;
            if (b->max > s->max) s->max = b->max;
        }
    }
    s->n_batches++;
    s->n_values += b->n_finite;
    s->n_nan += b->n_nan;
    s->n_inf += b->n_inf;
    if (s->last_ok) {
        s->last_numel = numel;
        s->last_scan = *b;
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
    struct bin_geom g = {0};
    struct pass_scratch ps = {0};
    uint64_t *acc = NULL;
    uint64_t total = 0;
    int any_f32 = 0, scanned = 0;
    for (size_t i = 0; i < n; i++) {
        if ((st = check_array(&arrays[i], &numels[i], err)) != QP_OK) goto done;
        total += numels[i];
        any_f32 |= arrays[i].dtype == QP_DTYPE_FLOAT;
    }
    s->last_ok = 0;
    int nt = n_threads_for(s, total);
    int hists = s->cfg.flags & (QP_STATS_HIST | QP_STATS_ABS_HIST);
    int tables = any_f32 && total >= 4096;

    /* Histograms that exist already: scan and bin in one pass on the current geometry, which
     * stands unless the batch reaches beyond it (then the counts are dropped and the batch is
     * binned again after growing, below). Most batches after the first few do not grow. */
    if (hists && (!(hists & QP_STATS_HIST) || (s->h_n > 0 && s->h_t > 0.0)) &&
        (!(hists & QP_STATS_ABS_HIST) || s->a_n > 0)) {
        geom_prepare(s, tables, &g);
        if (scratch_alloc(&ps, nt, g.hn, g.an, err) == QP_OK &&
            (acc = calloc(ps.per, sizeof *acc)) != NULL) {
            run_pass(arrays, numels, n, &g, &ps, &b, acc);
            scanned = 1;
            double t = fmax(fabs(b.min), fabs(b.max));
            double last = s->a_lo + (double)s->a_n * s->a_width;
            int grows = b.n_finite && (((hists & QP_STATS_HIST) && t > s->h_t) ||
                                       ((hists & QP_STATS_ABS_HIST) && b.amax > last));
            if (!grows) {
                commit_counts(s, &g, acc);
                /* Kept for qp_stats_update_derived (room made with the histogram's). */
                if (n == 1 && (!g.do_h || s->last_cap >= g.hn) &&
                    (!g.do_a || s->last_acap >= g.an)) {
                    if (g.do_h) memcpy(s->last_h, acc, (size_t)g.hn * sizeof *acc);
                    if (g.do_a) {
                        memcpy(s->last_a, acc + g.hn, (size_t)g.an * sizeof *acc);
                        s->last_below = acc[g.hn + g.an];
                    }
                    s->last_ok = 1;
                }
                goto ranges;
            }
        } else {
            st = QP_OK; /* try again the plain way, which reports a real shortage */
        }
        free(acc);
        acc = NULL;
        scratch_free(&ps);
        free(g.tables);
        memset(&g, 0, sizeof g);
    }
    if (!scanned) {
        ps.nt = nt;
        run_pass(arrays, numels, n, NULL, &ps, &b, NULL);
        ps.nt = 0;
    }
    /* -0 and +0 compare equal, so which one a scan keeps depends on the order: report +0. */
    if (b.n_finite) {
        if (b.min == 0.0) b.min = 0.0;
        if (b.max == 0.0) b.max = 0.0;
        if (b.amin == 0.0) b.amin = 0.0;
    }

    if (b.n_finite && hists) {
        /* Plan both histograms and reserve their memory before touching any state, so a
         * failed allocation leaves the collector as it was. */
        int h_first = 0, h_zero_to_range = 0, a_first = 0, h_coarsen = 0;
        int64_t h_k = 0, a_m = 0, h_n_new = s->h_n, a_n_new = s->a_n;
        double t = fmax(fabs(b.min), fabs(b.max));
        if (s->cfg.flags & QP_STATS_HIST) {
            if (s->h_n == 0) {
                h_first = 1;
                h_n_new = s->cfg.n_bins;
                st = reserve(&s->h, &s->h_cap, s->cfg.n_bins, err);
            } else if (t > s->h_t) {
                if (s->h_t == 0.0) {
                    h_zero_to_range = 1;
                } else {
                    int64_t n_final = 0;
                    h_k = hist_grow_plan(s, t, s->h_t, s->h_n, &h_coarsen, &n_final);
                    h_n_new = n_final + 2 * h_k;
                    st = reserve(&s->h, &s->h_cap, n_final + 2 * h_k, err);
                }
            }
            /* Room for one batch's counts, kept for qp_stats_update_derived. */
            if (st == QP_OK) st = reserve(&s->last_h, &s->last_cap, h_n_new, err);
            if (st != QP_OK) goto done;
        }
        int a_coarsen = 0;
        if (s->cfg.flags & QP_STATS_ABS_HIST) {
            if (s->a_n == 0) {
                a_first = 1;
                a_n_new = s->cfg.n_abs_bins;
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
                    a_n_new = n_cur + a_m;
                    st = reserve(&s->a, &s->a_cap, n_cur + a_m, err);
                }
            }
            if (st == QP_OK) st = reserve(&s->last_a, &s->last_acap, a_n_new, err);
            if (st != QP_OK) goto done;
        }
        /* The binning scratch too (bin counts only grow, so the planned ones bound it). */
        if ((st = scratch_alloc(&ps, nt, (hists & QP_STATS_HIST) ? h_n_new : 0,
                                (hists & QP_STATS_ABS_HIST) ? a_n_new : 0, err)) != QP_OK)
            goto done;
        if (!(acc = calloc(ps.per, sizeof *acc))) {
            st = qp_error_set(err, QP_ERR_NOMEM, "stats: out of memory");
            goto done;
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
        geom_prepare(s, tables, &g);
        run_pass(arrays, numels, n, &g, &ps, NULL, acc);
        commit_counts(s, &g, acc);
    }
ranges:
    if (n == 1 && !hists) s->last_ok = 1;
    commit_batch(s, &b, total);
done:
    free(acc);
    scratch_free(&ps);
    free(g.tables);
    if (numels != numel) free(numels);
    return st;
}

enum qp_status qp_stats_update(struct qp_stats *s, const struct qp_array *a, struct qp_error *err) {
    if (!a) return qp_error_set(err, QP_ERR_USAGE, "stats: NULL array");
    return qp_stats_update_pooled(s, a, 1, err);
}

int qp_stats_update_derived(struct qp_stats *y, const struct qp_stats *x, uint64_t numel,
                            enum qp_stats_derive how) {
    if (!y || !x || x == y || !x->last_ok || !numel || x->last_numel != numel) return 0;
    if (how != QP_STATS_SAME && how != QP_STATS_RELU) return 0;
    const struct batch_scan *b = &x->last_scan;
    if (b->n_nan || b->n_inf || b->n_finite != numel) return 0;
    /* Field by field: a struct's padding bytes need not match. */
    const struct qp_stats_config *cy = &y->cfg, *cx = &x->cfg;
    if (cy->flags != cx->flags || cy->n_bins != cx->n_bins || cy->max_bins != cx->max_bins ||
        cy->n_abs_bins != cx->n_abs_bins || cy->max_abs_bins != cx->max_abs_bins)
        return 0;
    int hist = (y->cfg.flags & QP_STATS_HIST) != 0,
        abs_hist = (y->cfg.flags & QP_STATS_ABS_HIST) != 0;
    /* A Relu's |x| histogram starts at its own smallest |value| (often 0), not its input's. A
     * copy's has x's geometry (same history), which x's batch did not grow. */
    if (abs_hist && !(how == QP_STATS_SAME && y->a_n > 0 && y->a_n == x->a_n &&
                      y->a_lo == x->a_lo && y->a_width == x->a_width && y->last_acap >= y->a_n))
        return 0;
    /* The same signed geometry, and one that y's batch cannot grow: its largest |value| is at
     * most x's, which was within x's threshold. A first batch or an all-zero history takes the
     * values. */
    if (hist && !(y->h_n > 0 && y->h_t > 0.0 && y->h_n == x->h_n && y->h_t == x->h_t &&
                  y->last_cap >= y->h_n))
        return 0;
    int64_t z = -1; /* Relu: bins up to 0's fold into it */
    if (hist && how == QP_STATS_RELU) {
        /* Bins left of 0's bin hold only negatives (0's bin starts at or below 0), which
         * become 0; the rest keep their values and so their bins. */
        double T = y->h_t;
        int64_t n = y->h_n;
        z = bin_exact(0.0, -T, T, (2.0 * T) / (double)n, (double)n / (2.0 * T), n);
        uint64_t zeros = 0;
        for (int64_t i = 0; i <= z; i++) {
            zeros += x->last_h[i];
            y->last_h[i] = 0;
        }
        y->h[z] += zeros;
        y->last_h[z] = zeros;
    }
    /* y's own batch counts are kept too (its histogram's room includes them), so that a
     * tensor derived from y can follow in turn (Reshape then Transpose, say). */
    if (hist)
        for (int64_t i = z + 1; i < y->h_n; i++) {
            y->h[i] += x->last_h[i];
            y->last_h[i] = x->last_h[i];
        }
    if (abs_hist) {
        for (int64_t i = 0; i < y->a_n; i++) {
            y->a[i] += x->last_a[i];
            y->last_a[i] = x->last_a[i];
        }
        y->a_below += x->last_below;
        y->last_below = x->last_below;
    }
    double mn = b->min, mx = b->max;
    if (how == QP_STATS_RELU) { /* the zeros are +0 */
        mn = mn > 0.0 ? mn : 0.0;
        mx = mx > 0.0 ? mx : 0.0;
    }
    struct batch_scan yb = {.n_finite = numel,
                            .min = mn,
                            .max = mx,
                            .amin = how == QP_STATS_SAME ? b->amin : mn,
                            .amax = fmax(fabs(mn), fabs(mx))};
    y->last_ok = 1;
    commit_batch(y, &yb, numel);
    return 1;
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
    return sizeof *s +
           (size_t)(s->h_cap + s->a_cap + s->last_cap + s->last_acap) * sizeof(uint64_t);
}

/* ---- per-channel weights ------------------------------------------------------------- */

enum qp_status qp_stats_channel_absmax(const struct qp_array *w, int axis, float *out,
                                       int64_t n_out, uint64_t *n_nonfinite_out,
                                       struct qp_error *err) {
    if (!w || !out) return qp_error_set(err, QP_ERR_USAGE, "stats: NULL argument");
    uint64_t numel = 0;
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
