/* Streaming statistics: ranges, NaN/Inf accounting, histogram growth across batches (against a
 * one-shot histogram and against ORT's documented re-binning), caps, per-channel absmax and
 * memory that does not depend on the number of batches. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calib/stats.h"
#include "qplace/dtype.h"

static struct qp_array view_f32(float *x, int64_t n) {
    struct qp_array a;
    struct qp_error err = {0};
    int64_t dims[1] = {n};
    assert_int_equal(qp_array_view(&a, QP_DTYPE_FLOAT, 1, dims, x, (size_t)n * sizeof *x, &err),
                     QP_OK);
    return a;
}

static struct qp_stats *make(int flags, int64_t n_bins, int64_t max_bins, int64_t n_abs,
                             int64_t max_abs) {
    struct qp_stats_config cfg;
    qp_stats_config_default(&cfg, flags);
    if (n_bins) cfg.n_bins = n_bins;
    if (max_bins) cfg.max_bins = max_bins;
    if (n_abs) cfg.n_abs_bins = n_abs;
    if (max_abs) cfg.max_abs_bins = max_abs;
    struct qp_stats *s = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_stats_create(&cfg, &s, &err), QP_OK);
    return s;
}

static void feed(struct qp_stats *s, float *x, int64_t n) {
    struct qp_array a = view_f32(x, n);
    struct qp_error err = {0};
    assert_int_equal(qp_stats_update(s, &a, &err), QP_OK);
}

static void test_ranges_and_nonfinite(void **state) {
    (void)state;
    struct qp_stats *s = make(QP_STATS_HIST | QP_STATS_ABS_HIST, 0, 0, 0, 0);
    float b1[] = {0.5f, NAN, -2.0f, 1.0f, INFINITY};
    float b2[] = {-INFINITY, 3.0f, NAN, 0.25f};
    feed(s, b1, 5);
    feed(s, b2, 4);
    struct qp_stats_summary sum;
    qp_stats_summary(s, &sum);
    assert_int_equal(sum.n_batches, 2);
    assert_int_equal(sum.n_values, 5);
    assert_int_equal(sum.n_nan, 2);
    assert_int_equal(sum.n_inf, 2);
    assert_true(sum.has_range);
    assert_true(sum.min == -2.0 && sum.max == 3.0 && sum.absmax == 3.0);
    /* the histograms hold only the finite values */
    struct qp_stats_hist h;
    qp_stats_hist(s, &h);
    uint64_t total = 0;
    for (int64_t i = 0; i < h.n; i++)
        total += h.counts[i];
    assert_int_equal(total, 5);
    struct qp_stats_abs_hist ah;
    qp_stats_abs_hist(s, &ah);
    total = 0;
    for (int64_t i = 0; i < ah.n; i++)
        total += ah.counts[i];
    assert_int_equal(total + ah.n_below, 5);
    qp_stats_free(s);

    /* a batch of only NaN/Inf gives no range */
    s = make(0, 0, 0, 0, 0);
    float b3[] = {NAN, INFINITY};
    feed(s, b3, 2);
    qp_stats_summary(s, &sum);
    assert_false(sum.has_range);
    assert_int_equal(sum.n_nan, 1);
    assert_int_equal(sum.n_inf, 1);
    qp_stats_free(s);
}

static void test_dtypes(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_stats *s = make(0, 0, 0, 0, 0);
    uint16_t h16[3] = {qp_f32_to_fp16(-1.5f), qp_f32_to_fp16(2.0f), 0x7e00 /* NaN */};
    uint16_t b16[2] = {qp_f32_to_bf16(-7.0f), qp_f32_to_bf16(0.5f)};
    double d[2] = {4.0, -0.125};
    int64_t dims3[1] = {3}, dims2[1] = {2};
    struct qp_array a;
    assert_int_equal(qp_array_view(&a, QP_DTYPE_FLOAT16, 1, dims3, h16, sizeof h16, &err), QP_OK);
    assert_int_equal(qp_stats_update(s, &a, &err), QP_OK);
    assert_int_equal(qp_array_view(&a, QP_DTYPE_BFLOAT16, 1, dims2, b16, sizeof b16, &err), QP_OK);
    assert_int_equal(qp_stats_update(s, &a, &err), QP_OK);
    assert_int_equal(qp_array_view(&a, QP_DTYPE_DOUBLE, 1, dims2, d, sizeof d, &err), QP_OK);
    assert_int_equal(qp_stats_update(s, &a, &err), QP_OK);
    struct qp_stats_summary sum;
    qp_stats_summary(s, &sum);
    assert_true(sum.min == -7.0 && sum.max == 4.0);
    assert_int_equal(sum.n_nan, 1);
    int32_t ints[2] = {1, 2};
    assert_int_equal(qp_array_view(&a, QP_DTYPE_INT32, 1, dims2, ints, sizeof ints, &err), QP_OK);
    assert_int_equal(qp_stats_update(s, &a, &err), QP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "int32"));
    qp_stats_free(s);
}

/* No growth needed: batch 1 holds the global absmax, so feeding in two batches gives exactly
 * the one-shot histogram of all the data. */
static void test_hist_no_growth_equals_one_shot(void **state) {
    (void)state;
    enum { N = 1000 };
    static float all[N];
    uint32_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        all[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 3.0f;
    }
    all[0] = -4.0f; /* the global absmax, in batch 1 */
    struct qp_stats *one = make(QP_STATS_HIST, 0, 0, 0, 0);
    struct qp_stats *two = make(QP_STATS_HIST, 0, 0, 0, 0);
    feed(one, all, N);
    feed(two, all, 400);
    feed(two, all + 400, N - 400);
    struct qp_stats_hist h1, h2;
    qp_stats_hist(one, &h1);
    qp_stats_hist(two, &h2);
    assert_int_equal(h1.n, 128);
    assert_int_equal(h2.n, 128);
    assert_true(h1.threshold == 4.0 && h2.threshold == 4.0);
    assert_memory_equal(h1.counts, h2.counts, 128 * sizeof(uint64_t));
    uint64_t total = 0;
    for (int i = 0; i < 128; i++)
        total += h2.counts[i];
    assert_int_equal(total, N);
    qp_stats_free(one);
    qp_stats_free(two);
}

/* Growth, checked by hand against §5.4: T = 1, stride 1/64; a batch with t = 2.3 adds
 * k = floor(1.3 / (1/64)) + 1 = 84 bins per side: 296 bins over [-2.3125, 2.3125]. */
static void test_hist_growth_rebin(void **state) {
    (void)state;
    struct qp_stats *s = make(QP_STATS_HIST, 0, 0, 0, 0);
    float b1[] = {-1.0f, 1.0f, 0.5f};
    float b2[] = {2.3f, -0.1f};
    feed(s, b1, 3);
    struct qp_stats_hist h;
    qp_stats_hist(s, &h);
    assert_int_equal(h.n, 128);
    assert_int_equal(h.counts[0], 1);   /* -1: first bin */
    assert_int_equal(h.counts[127], 1); /* 1: the last bin includes its right edge */
    assert_int_equal(h.counts[96], 1);  /* 0.5: (0.5 + 1) / 2 * 128 */
    feed(s, b2, 2);
    qp_stats_hist(s, &h);
    assert_int_equal(h.n, 296);
    assert_float_equal(h.threshold, 2.3125, 1e-12);
    assert_float_equal(h.stride, 1.0 / 64, 1e-15);
    uint64_t expect[296] = {0};
    expect[84] = expect[84 + 127] = expect[84 + 96] = 1; /* old counts, in the middle */
    expect[295] = 1;                                     /* 2.3: (2.3 + 2.3125) * 64 = 295.2 */
    expect[141] = 1;                                     /* -0.1: 2.2125 * 64 = 141.6 */
    assert_memory_equal(h.counts, expect, sizeof expect);
    assert_float_equal(qp_stats_hist_edge(&h, 84), -1.0, 1e-12);
    /* a later batch inside the range does not grow it */
    float b3[] = {-2.0f};
    feed(s, b3, 1);
    qp_stats_hist(s, &h);
    assert_int_equal(h.n, 296);
    assert_int_equal(h.counts[20], 1); /* (-2 + 2.3125) * 64 = 20 exactly: bin 20 */
    qp_stats_free(s);
}

/* Zeros first: T stays 0 and the zeros sit in the middle bin, which becomes [0, stride) once
 * a real range arrives (ORT: same bin count, old counts added bin for bin). */
static void test_hist_zero_first(void **state) {
    (void)state;
    struct qp_stats *s = make(QP_STATS_HIST, 0, 0, 0, 0);
    float z[4] = {0};
    float b[] = {-2.0f, 2.0f};
    feed(s, z, 4);
    struct qp_stats_hist h;
    qp_stats_hist(s, &h);
    assert_true(h.threshold == 0.0);
    assert_int_equal(h.counts[64], 4);
    feed(s, b, 2);
    qp_stats_hist(s, &h);
    assert_int_equal(h.n, 128);
    assert_true(h.threshold == 2.0);
    assert_int_equal(h.counts[64], 4);
    assert_int_equal(h.counts[0], 1);
    assert_int_equal(h.counts[127], 1);
    qp_stats_free(s);
}

/* The cap: growth that would pass it merges pairs of bins first, keeping 0 on an edge. */
static void test_hist_cap_coarsens(void **state) {
    (void)state;
    struct qp_stats *s = make(QP_STATS_HIST, 8, 20, 0, 0);
    float b1[] = {-1.0f, 1.0f, 0.1f};
    feed(s, b1, 3);
    float b2[] = {3.9f};
    /* without the cap: stride 0.25, k = floor(2.9 / 0.25) + 1 = 12 -> 32 bins > 20.
     * Halve: 8 bins, half count 4 even -> 4 bins of 0.5 over [-1, 1]; k = floor(2.9/0.5)+1 = 6
     * -> 16 bins over [-4, 4]. */
    feed(s, b2, 1);
    struct qp_stats_hist h;
    qp_stats_hist(s, &h);
    assert_int_equal(h.n, 16);
    assert_int_equal(h.n_coarsened, 1);
    assert_float_equal(h.threshold, 4.0, 1e-12);
    uint64_t expect[16] = {0};
    expect[6] = 1;  /* -1 in [-1, -0.5) */
    expect[8] = 1;  /* 0.1 in [0, 0.5) */
    expect[9] = 1;  /* 1 in the old last bin [0.5, 1] */
    expect[15] = 1; /* 3.9 */
    assert_memory_equal(h.counts, expect, sizeof expect);
    assert_true(qp_stats_bytes(s) <= sizeof(uint64_t) * 20 + 4096);
    qp_stats_free(s);
}

/* The |x| histogram (percentile): range [min|x|, max|x|] of the first batch, bins appended on
 * the right, later values below the first edge are not binned (as ORT). */
static void test_abs_hist_growth(void **state) {
    (void)state;
    struct qp_stats *s = make(QP_STATS_ABS_HIST, 0, 0, 4, 0);
    float b1[] = {1.0f, -5.0f, 2.0f, 3.5f}; /* |x| in [1, 5], width 1 */
    feed(s, b1, 4);
    struct qp_stats_abs_hist h;
    qp_stats_abs_hist(s, &h);
    assert_int_equal(h.n, 4);
    assert_true(h.lo == 1.0 && h.width == 1.0);
    uint64_t e1[4] = {1, 1, 1, 1}; /* 1 | 2 | 3.5 | 5 (closed last bin) */
    assert_memory_equal(h.counts, e1, sizeof e1);
    float b2[] = {7.5f, 0.5f, -4.5f}; /* grows by ceil((7.5 - 5) / 1) = 3 bins */
    feed(s, b2, 3);
    qp_stats_abs_hist(s, &h);
    assert_int_equal(h.n, 7);
    uint64_t e2[7] = {1, 1, 1, 2, 0, 0, 1};
    assert_memory_equal(h.counts, e2, sizeof e2);
    assert_int_equal(h.n_below, 1);
    assert_float_equal(qp_stats_abs_hist_edge(&h, 7), 8.0, 1e-12);
    qp_stats_free(s);
}

static void test_memory_independent_of_batches(void **state) {
    (void)state;
    struct qp_stats *s = make(QP_STATS_HIST | QP_STATS_ABS_HIST, 0, 0, 0, 0);
    float b[256];
    uint32_t x = 7;
    size_t after_first = 0;
    for (int it = 0; it < 2000; it++) {
        for (int i = 0; i < 256; i++) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            b[i] = (float)(x % 2001) / 1000.0f - 1.0f; /* always within [-1, 1] */
        }
        b[0] = 1.0f;
        feed(s, b, 256);
        if (it == 0) after_first = qp_stats_bytes(s);
        assert_int_equal(qp_stats_bytes(s), after_first);
    }
    struct qp_stats_summary sum;
    qp_stats_summary(s, &sum);
    assert_int_equal(sum.n_values, 2000 * 256);
    /* and with ranges that keep growing, memory stays under the caps (each histogram and the
     * last batch's counts kept for qp_stats_update_derived) */
    for (int it = 0; it < 200; it++) {
        b[0] = (float)(it + 2) * 10.0f;
        feed(s, b, 256);
    }
    assert_true(qp_stats_bytes(s) <=
                2 * sizeof(uint64_t) * (QP_STATS_DEFAULT_MAX_BINS + QP_STATS_DEFAULT_MAX_ABS_BINS) +
                    4096);
    qp_stats_free(s);
}

static void test_pooled_batch(void **state) {
    (void)state;
    /* Pooled: the growth decision is taken over both arrays at once (one batch). */
    struct qp_stats *s = make(QP_STATS_HIST, 0, 0, 0, 0);
    float a1[] = {-1.0f, 0.5f}, a2[] = {2.0f};
    struct qp_array arr[2] = {view_f32(a1, 2), view_f32(a2, 1)};
    struct qp_error err = {0};
    assert_int_equal(qp_stats_update_pooled(s, arr, 2, &err), QP_OK);
    struct qp_stats_hist h;
    qp_stats_hist(s, &h);
    assert_int_equal(h.n, 128);
    assert_true(h.threshold == 2.0);
    struct qp_stats_summary sum;
    qp_stats_summary(s, &sum);
    assert_int_equal(sum.n_batches, 1);
    assert_int_equal(sum.n_values, 3);
    qp_stats_free(s);
}

static void test_channel_absmax(void **state) {
    (void)state;
    struct qp_error err = {0};
    /* w[2][3][2] */
    float w[12] = {1, -2, 3, -4, 5, -6, -7, 8, NAN, 10, 11, -12};
    int64_t dims[3] = {2, 3, 2};
    struct qp_array a;
    assert_int_equal(qp_array_view(&a, QP_DTYPE_FLOAT, 3, dims, w, sizeof w, &err), QP_OK);
    float o0[2], o1[3], o2[2];
    uint64_t bad = 0;
    assert_int_equal(qp_stats_channel_absmax(&a, 0, o0, 2, &bad, &err), QP_OK);
    assert_true(o0[0] == 6.0f && o0[1] == 12.0f);
    assert_int_equal(bad, 1);
    assert_int_equal(qp_stats_channel_absmax(&a, 1, o1, 3, NULL, &err), QP_OK);
    assert_true(o1[0] == 8.0f && o1[1] == 10.0f && o1[2] == 12.0f);
    assert_int_equal(qp_stats_channel_absmax(&a, -1, o2, 2, NULL, &err), QP_OK);
    assert_true(o2[0] == 11.0f && o2[1] == 12.0f);
    assert_int_equal(qp_stats_channel_absmax(&a, 3, o2, 2, NULL, &err), QP_ERR_USAGE);
    assert_int_equal(qp_stats_channel_absmax(&a, 1, o2, 2, NULL, &err), QP_ERR_USAGE);
}

static void test_bad_config(void **state) {
    (void)state;
    struct qp_stats_config cfg;
    struct qp_stats *s = NULL;
    struct qp_error err = {0};
    qp_stats_config_default(&cfg, QP_STATS_HIST);
    cfg.n_bins = 127;
    assert_int_equal(qp_stats_create(&cfg, &s, &err), QP_ERR_USAGE);
    qp_stats_config_default(&cfg, QP_STATS_HIST);
    cfg.max_bins = 200;
    assert_int_equal(qp_stats_create(&cfg, &s, &err), QP_ERR_USAGE);
    assert_null(s);
}

/* Large batches (many parallel blocks, NaN/Inf/-0 scattered, growth and a cap) give
 * bit-identical ranges and histograms on 1, 2 and 3 threads, and the float32 fast path gives
 * exactly what the generic path gives for the same values as double. */
#define BIG_N 300000

struct snap {
    struct qp_stats_summary sum;
    struct qp_stats_hist h;
    struct qp_stats_abs_hist a;
};

static void fill_big(float *x, int64_t n, unsigned seed, float scale) {
    uint32_t r = seed * 2654435761u + 1u;
    for (int64_t i = 0; i < n; i++) {
        r = r * 1664525u + 1013904223u;
        x[i] = scale * ((float)(r >> 8) / 16777216.0f - 0.4f);
    }
    x[7] = NAN;
    x[n / 2] = INFINITY;
    x[n - 3] = -INFINITY;
    x[40000] = -0.0f;
    x[100001] = NAN;
}

/* Updates s with each of the n_batches float arrays of shape dims (as float64 copies when
 * as_double). */
static void feed_batches(struct qp_stats *s, float **batches, int n_batches, int rank,
                         const int64_t *dims, int as_double) {
    struct qp_error err = {0};
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    double *d = as_double ? malloc((size_t)n * sizeof *d) : NULL;
    if (as_double) assert_non_null(d);
    for (int b = 0; b < n_batches; b++) {
        struct qp_array a;
        if (as_double) {
            for (int64_t i = 0; i < n; i++)
                d[i] = batches[b][i];
            assert_int_equal(
                qp_array_view(&a, QP_DTYPE_DOUBLE, rank, dims, d, (size_t)n * sizeof *d, &err),
                QP_OK);
        } else {
            assert_int_equal(qp_array_view(&a, QP_DTYPE_FLOAT, rank, dims, batches[b],
                                           (size_t)n * sizeof(float), &err),
                             QP_OK);
        }
        assert_int_equal(qp_stats_update(s, &a, &err), QP_OK);
    }
    free(d);
}

static struct qp_stats *run_big(int threads, int as_double, float **batches, int n_batches) {
    struct qp_stats_config cfg;
    qp_stats_config_default(&cfg, QP_STATS_HIST | QP_STATS_ABS_HIST);
    cfg.max_bins = 260; /* the third batch's growth must coarsen */
    cfg.n_threads = threads;
    struct qp_stats *s = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_stats_create(&cfg, &s, &err), QP_OK);
    int64_t dims[2] = {3, BIG_N / 3};
    feed_batches(s, batches, n_batches, 2, dims, as_double);
    return s;
}

static void snap_of(const struct qp_stats *s, struct snap *o) {
    qp_stats_summary(s, &o->sum);
    qp_stats_hist(s, &o->h);
    qp_stats_abs_hist(s, &o->a);
}

static void assert_same(const struct snap *x, const struct snap *y) {
    assert_memory_equal(&x->sum, &y->sum, sizeof x->sum);
    assert_int_equal(x->h.n, y->h.n);
    assert_memory_equal(&x->h.threshold, &y->h.threshold, sizeof(double));
    assert_int_equal(x->h.n_coarsened, y->h.n_coarsened);
    assert_memory_equal(x->h.counts, y->h.counts, (size_t)x->h.n * sizeof(uint64_t));
    assert_int_equal(x->a.n, y->a.n);
    assert_memory_equal(&x->a.lo, &y->a.lo, sizeof(double));
    assert_memory_equal(&x->a.width, &y->a.width, sizeof(double));
    assert_int_equal(x->a.n_below, y->a.n_below);
    assert_memory_equal(x->a.counts, y->a.counts, (size_t)x->a.n * sizeof(uint64_t));
}

/* assert_same of `ref` and the results of `s`, which is then freed. */
static void assert_same_and_free(const struct snap *ref, struct qp_stats *s) {
    struct snap o;
    snap_of(s, &o);
    assert_same(ref, &o);
    qp_stats_free(s);
}

/* A pooled batch of arrays cut unevenly (a piece shorter than a block, one of whole blocks, an
 * empty one, one element, the rest; float and double mixed) is one batch of all their values:
 * on 1, 2 and 3 threads the results equal the single-array ones (`r`). The
 * threads take blocks from one counter across the arrays, so this checks that every block of
 * every array is binned exactly once. */
static void check_pooled_threads(float *b[3], const struct snap *r) {
    const int64_t cut[] = {0,      5000, 5000 + 3 * 8192, 5000 + 3 * 8192, 5000 + 3 * 8192 + 1,
                           200000, BIG_N};
    enum { N_PARTS = sizeof cut / sizeof *cut - 1 };
    double *dpart = malloc((size_t)(cut[6] - cut[5]) * sizeof *dpart);
    assert_non_null(dpart);
    for (int threads = 1; threads <= 3; threads++) {
        struct qp_stats_config cfg;
        qp_stats_config_default(&cfg, QP_STATS_HIST | QP_STATS_ABS_HIST);
        cfg.max_bins = 260; /* as run_big */
        cfg.n_threads = threads;
        struct qp_stats *s = NULL;
        struct qp_error err = {0};
        assert_int_equal(qp_stats_create(&cfg, &s, &err), QP_OK);
        for (int bi = 0; bi < 3; bi++) {
            struct qp_array parts[N_PARTS];
            for (int k = 0; k < N_PARTS; k++) {
                int64_t dims[1] = {cut[k + 1] - cut[k]};
                if (k == N_PARTS - 1) { /* the last piece as double */
                    for (int64_t i = 0; i < dims[0]; i++)
                        dpart[i] = b[bi][cut[k] + i];
                    assert_int_equal(qp_array_view(&parts[k], QP_DTYPE_DOUBLE, 1, dims, dpart,
                                                   (size_t)dims[0] * sizeof *dpart, &err),
                                     QP_OK);
                } else {
                    assert_int_equal(qp_array_view(&parts[k], QP_DTYPE_FLOAT, 1, dims,
                                                   b[bi] + cut[k], (size_t)dims[0] * sizeof(float),
                                                   &err),
                                     QP_OK);
                }
            }
            assert_int_equal(qp_stats_update_pooled(s, parts, N_PARTS, &err), QP_OK);
        }
        assert_same_and_free(r, s);
    }
    free(dpart);
}

static void test_threads_bit_identical(void **state) {
    (void)state;
    float *b[3];
    const float scale[3] = {1.0f, 1.5f, 40.0f};
    for (int i = 0; i < 3; i++) {
        b[i] = malloc(BIG_N * sizeof(float));
        assert_non_null(b[i]);
        fill_big(b[i], BIG_N, (unsigned)i + 1, scale[i]);
    }
    struct qp_stats *ref = run_big(1, 0, b, 3);
    struct snap r;
    snap_of(ref, &r);
    /* The data really exercises what it should: non-finite values, growth, the cap. */
    assert_int_equal(r.sum.n_batches, 3);
    assert_int_equal(r.sum.n_nan, 6);
    assert_int_equal(r.sum.n_inf, 6);
    assert_int_equal(r.sum.n_values, 3 * (BIG_N - 4));
    assert_true(r.h.n_coarsened >= 1);
    assert_true(r.sum.min < -15.0 && r.sum.max > 23.0);
    uint64_t total = 0, atotal = r.a.n_below;
    for (int64_t i = 0; i < r.h.n; i++)
        total += r.h.counts[i];
    for (int64_t i = 0; i < r.a.n; i++)
        atotal += r.a.counts[i];
    assert_int_equal(total, r.sum.n_values);
    assert_int_equal(atotal, r.sum.n_values);
    for (int threads = 2; threads <= 3; threads++) {
        struct qp_stats *t = run_big(threads, 0, b, 3);
        assert_same_and_free(&r, t);
    }
    struct qp_stats *dbl = run_big(2, 1, b, 3);
    assert_same_and_free(&r, dbl);
    check_pooled_threads(b, &r);
    qp_stats_free(ref);
    for (int i = 0; i < 3; i++)
        free(b[i]);
}

/* Batches that stay inside the first batch's range take the one-pass path (scan and bin on the
 * standing geometry): ReLU-like halves of zeros, values on and next to every interior bin edge
 * of both histograms, NaN and Inf. Same results on 1 and 2 threads and as double (the generic
 * path); with and without zeros in the first batch (|x| below the first edge, or zero binned). */
static void test_no_growth_one_pass(void **state) {
    (void)state;
    for (int variant = 0; variant < 2; variant++) {
        float *b[4];
        for (int i = 0; i < 4; i++) {
            b[i] = malloc(BIG_N * sizeof(float));
            assert_non_null(b[i]);
        }
        fill_big(b[0], BIG_N, 11, 2.0f);
        if (variant) b[0][40000] = 0.25f; /* no zero: min|x| > 0, later zeros fall below */
        struct qp_stats *probe = run_big(1, 0, b, 1);
        struct snap p0;
        snap_of(probe, &p0);
        fill_big(b[1], BIG_N, 12, 1.5f);
        for (int64_t i = 0; i < BIG_N; i += 2)
            b[1][i] = b[1][i] > 0.0f ? b[1][i] : 0.0f; /* ReLU on every other value */
        for (int64_t i = 0; i < BIG_N; i++) {          /* interior edges, one ulp either side */
            int64_t k = i / 3;
            double e = k % 2 ? qp_stats_hist_edge(&p0.h, 1 + (k / 2) % (p0.h.n - 1))
                             : qp_stats_abs_hist_edge(&p0.a, 1 + (k / 2) % (p0.a.n - 1));
            float f = (float)e;
            b[2][i] = i % 3 == 0 ? f : nextafterf(f, i % 3 == 1 ? -INFINITY : INFINITY);
        }
        fill_big(b[3], BIG_N, 13, 0.5f);
        b[3][5] = -0.0f;
        struct qp_stats *ref = run_big(1, 0, b, 4);
        struct snap r;
        snap_of(ref, &r);
        assert_int_equal(r.h.n, p0.h.n); /* really no growth */
        assert_int_equal(r.a.n, p0.a.n);
        assert_int_equal(r.sum.n_nan, 6); /* batches 0, 1, 3 */
        assert_true(variant ? r.a.n_below > (uint64_t)BIG_N / 8 : r.a.n_below == 0);
        uint64_t total = 0, atotal = r.a.n_below;
        for (int64_t i = 0; i < r.h.n; i++)
            total += r.h.counts[i];
        for (int64_t i = 0; i < r.a.n; i++)
            atotal += r.a.counts[i];
        assert_int_equal(total, r.sum.n_values);
        assert_int_equal(atotal, r.sum.n_values);
        for (int k = 0; k < 2; k++) {
            struct qp_stats *o = run_big(2, k, b, 4);
            assert_same_and_free(&r, o);
        }
        qp_stats_free(ref);
        qp_stats_free(probe);
        for (int i = 0; i < 4; i++)
            free(b[i]);
    }
}

/* Values on and next to every bin edge bin the same through the float32 fast path as through
 * the generic (double) path: feeds the same float batches as float and as double. */
static void test_edges_float_vs_double(void **state) {
    (void)state;
    enum { NE = 3 * 8192 };
    float *x = malloc(NE * sizeof *x);
    double *d = malloc(NE * sizeof *d);
    assert_non_null(x);
    assert_non_null(d);
    struct qp_stats *sf = make(QP_STATS_HIST | QP_STATS_ABS_HIST, 0, 0, 256, 0);
    struct qp_stats *sd = make(QP_STATS_HIST | QP_STATS_ABS_HIST, 0, 0, 256, 0);
    struct qp_error err = {0};
    for (int pass = 0; pass < 2; pass++) {
        struct qp_stats_hist h;
        struct qp_stats_abs_hist ah;
        qp_stats_hist(sf, &h);
        qp_stats_abs_hist(sf, &ah);
        for (int i = 0; i < NE / 3; i++) {
            double e;
            if (pass == 0) /* first batch: spread over [-1.7, 1.3] (not on edges yet) */
                e = -1.7 + 3.0 * i / (NE / 3.0);
            else if (i % 2) /* then every signed edge and every |x| edge */
                e = qp_stats_hist_edge(&h, (i / 2) % (h.n + 1));
            else
                e = qp_stats_abs_hist_edge(&ah, (i / 2) % (ah.n + 1));
            float f = (float)e;
            x[3 * i] = f;
            x[3 * i + 1] = nextafterf(f, -INFINITY);
            x[3 * i + 2] = nextafterf(f, INFINITY);
        }
        for (int i = 0; i < NE; i++)
            d[i] = x[i];
        struct qp_array af, ad;
        int64_t dims[1] = {NE};
        assert_int_equal(qp_array_view(&af, QP_DTYPE_FLOAT, 1, dims, x, NE * sizeof *x, &err),
                         QP_OK);
        assert_int_equal(qp_array_view(&ad, QP_DTYPE_DOUBLE, 1, dims, d, NE * sizeof *d, &err),
                         QP_OK);
        assert_int_equal(qp_stats_update(sf, &af, &err), QP_OK);
        assert_int_equal(qp_stats_update(sd, &ad, &err), QP_OK);
    }
    struct snap a, b;
    snap_of(sf, &a);
    snap_of(sd, &b);
    assert_same(&a, &b);
    qp_stats_free(sf);
    qp_stats_free(sd);
    free(x);
    free(d);
}

/* The AVX2 binning kernel against the portable vector loops (qp_stats_set_simd) and against the
 * generic double path, on adversarial float32 data: values on and one ulp either side of every
 * edge of both histograms, the outermost edges +-T and just beyond, NaN, +-Inf, +0 and -0 (in
 * whole vectors, in runs and alone), denormals of both signs, lengths that are not a multiple
 * of 8 (the tail) nor of a chunk, and a batch that outgrows the histogram in its last values
 * (the one-pass counts are dropped and the batch is binned again). Every flag combination, on 1
 * and 2 threads; histograms, ranges and counts must be identical. */
#define ADV_N 70001 /* > 2 blocks: the 2-thread runs split it; odd: a tail */

static void fill_adversarial(float *x, int64_t n, const struct qp_stats *probe, int kind) {
    struct qp_stats_hist h;
    struct qp_stats_abs_hist ah;
    qp_stats_hist(probe, &h);
    qp_stats_abs_hist(probe, &ah);
    uint32_t r = 12345u + (uint32_t)kind;
    for (int64_t i = 0; i < n; i++) {
        r = r * 1664525u + 1013904223u;
        int64_t k = i / 3;
        double e;
        /* One 64-value segment in three is adversarial; the others are ordinary values with
         * zeros in some (whole vectors then take the fast path, packing zeros or not). */
        unsigned pick = (i / 64) % 3 == 0   ? (r >> 24) % 8
                        : (i / 64) % 3 == 1 ? 4
                                            : 2 + 2 * (r >> 31);
        switch (pick) {
        case 0: /* a signed edge (including -T, 0 and T) */
            e = h.n ? qp_stats_hist_edge(&h, k % (h.n + 1)) : 0.5;
            break;
        case 1: /* an |x| edge, either sign */
            e = ah.n ? qp_stats_abs_hist_edge(&ah, k % (ah.n + 1)) : 0.25;
            if (r & 1) e = -e;
            break;
        case 2: /* zeros of both signs */
            e = (r & 2) ? -0.0 : 0.0;
            break;
        case 3: /* denormals of both signs */
            e = ((r & 2) ? -1.0 : 1.0) * ldexp((double)((r >> 4) % 1000 + 1), -149);
            break;
        default: /* ordinary values inside the range */
            e = ((double)(r >> 8) / 16777216.0 - 0.5) * 1.9;
            break;
        }
        float f = (float)e;
        int ulp = (int)(i % 3);
        x[i] = ulp == 0 || f == 0.0f ? f : nextafterf(f, ulp == 1 ? -INFINITY : INFINITY);
    }
    /* Whole vectors and runs of zeros, as in a ReLU output. */
    for (int64_t i = 1024; i < 1024 + 64; i++)
        x[i] = 0.0f;
    for (int64_t i = 2048; i < 2048 + 8; i++)
        x[i] = -0.0f;
    x[3] = NAN;
    x[4100] = INFINITY;
    x[4101] = -INFINITY;
    x[n - 1] = NAN;
    if (kind == 1) { /* beyond the standing range, at the very end: the batch grows it */
        x[n - 2] = 3.5f;
        x[n - 3] = -2.75f;
    }
}

static struct qp_stats *adv_run(int flags, int threads, int simd, int as_double, float **b,
                                int n_batches) {
    struct qp_stats_config cfg;
    qp_stats_config_default(&cfg, flags);
    cfg.n_threads = threads;
    struct qp_stats *s = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_stats_create(&cfg, &s, &err), QP_OK);
    int prev = qp_stats_set_simd(simd);
    int64_t dims[1] = {ADV_N};
    feed_batches(s, b, n_batches, 1, dims, as_double);
    qp_stats_set_simd(prev);
    return s;
}

static void test_simd_kernel_adversarial(void **state) {
    (void)state;
    static const int flag_sets[3] = {QP_STATS_HIST, QP_STATS_ABS_HIST,
                                     QP_STATS_HIST | QP_STATS_ABS_HIST};
    float *b[5];
    for (int i = 0; i < 5; i++) {
        b[i] = malloc(ADV_N * sizeof(float));
        assert_non_null(b[i]);
    }
    for (int fi = 0; fi < 3; fi++) {
        int flags = flag_sets[fi];
        /* Batch 0 sets the geometry ([-1.25, 1.25] signed, [2^-20, 1.25] for |x|: no zero, so
         * later zeros fall below the first |x| edge); the others are built on its edges. */
        for (int64_t i = 0; i < ADV_N; i++)
            b[0][i] = (float)(((double)i / (ADV_N - 1) - 0.5) * 2.5);
        b[0][ADV_N / 2] = 0x1p-20f;
        struct qp_stats *probe = adv_run(flags, 1, 1, 0, b, 1);
        fill_adversarial(b[1], ADV_N, probe, 0);
        fill_adversarial(b[2], ADV_N, probe, 0);
        for (int64_t i = 0; i < ADV_N; i += 2) /* ReLU on every other value of batch 2 */
            b[2][i] = b[2][i] > 0.0f ? b[2][i] : 0.0f;
        fill_adversarial(b[3], ADV_N, probe, 1);
        /* Batch 4, on the grown edges: whole chunks of ordinary nonzero values (after which
         * the signed histogram's kernel drops its zero handling) alternate with adversarial
         * chunks, whose zeros, edges and non-finite values then meet that kernel first. */
        struct qp_stats *grown = adv_run(flags, 1, 1, 0, b, 4);
        fill_adversarial(b[4], ADV_N, grown, 0);
        qp_stats_free(grown);
        for (int64_t i = 0; i < ADV_N; i++)
            if ((i / 1024) % 2 == 0) b[4][i] = 0.125f + (float)(i % 1000) * 1e-3f;
        b[4][1024 + 5] = NAN;
        b[4][3072 + 9] = INFINITY;
        struct qp_stats *ref = adv_run(flags, 1, 0, 0, b, 5);
        struct snap r;
        snap_of(ref, &r);
        /* The data does what it should: NaN/Inf seen, the last batch grew the histograms. */
        assert_int_equal(r.sum.n_nan, 6); /* the ReLU of batch 2 zeroed its last NaN */
        assert_int_equal(r.sum.n_inf, 7);
        float lo4 = -2.75f, hi4 = 3.5f; /* batch 3's, then batch 4's own */
        for (int64_t i = 0; i < ADV_N; i++)
            if (isfinite(b[4][i])) {
                lo4 = b[4][i] < lo4 ? b[4][i] : lo4;
                hi4 = b[4][i] > hi4 ? b[4][i] : hi4;
            }
        assert_true(r.sum.min == lo4 && r.sum.max == hi4);
        struct snap p;
        snap_of(probe, &p);
        if (flags & QP_STATS_HIST) assert_true(r.h.n > p.h.n);
        if (flags & QP_STATS_ABS_HIST) {
            assert_true(r.a.n > p.a.n);
            assert_true(r.a.n_below > 0);
        }
        for (int threads = 1; threads <= 2; threads++)
            for (int mode = 0; mode < 3; mode++) { /* AVX2, portable, double */
                struct qp_stats *o = adv_run(flags, threads, mode == 0, mode == 2, b, 5);
                assert_same_and_free(&r, o);
            }
        qp_stats_free(ref);
        qp_stats_free(probe);
    }
    for (int i = 0; i < 5; i++)
        free(b[i]);
}

/* qp_stats_update_derived against feeding y's values (Relu of x's, or x's own): after every
 * batch the derived statistics equal the fed ones bit for bit, and the derivation is taken or
 * refused where it should be. x's batches: 0 sets a geometry that Relu shares (max > |min|); 1 and
 * 2 put values on and one ulp beside every signed edge (zero's bin from both sides, +-0,
 * denormals), 2 also all-negative runs; 3 holds NaN; 4 is all negative; 5 grows x's histogram by
 * its minimum (Relu's need not grow), after which the geometries differ; 6 is ordinary again. 7 is
 * a pooled update of x. */
#define RELU_N 70001

static void test_derived_from_input(void **state) {
    (void)state;
    static const int flag_sets[4] = {QP_STATS_HIST, 0, QP_STATS_ABS_HIST,
                                     QP_STATS_HIST | QP_STATS_ABS_HIST};
    /* derived (1) or refused (0), batch by batch, per kind and flag set; after x grows, a
     * copy (SAME) grows the same way and lines up again, a Relu does not */
    static const int expect[2][4][8] = {{{0, 1, 1, 0, 1, 0, 1, 0},
                                         {1, 1, 1, 0, 1, 1, 1, 0},
                                         {0, 1, 1, 0, 1, 0, 1, 0},
                                         {0, 1, 1, 0, 1, 0, 1, 0}},
                                        {{0, 1, 1, 0, 1, 0, 0, 0},
                                         {1, 1, 1, 0, 1, 1, 1, 0},
                                         {0, 0, 0, 0, 0, 0, 0, 0},
                                         {0, 0, 0, 0, 0, 0, 0, 0}}};
    float *b[8], *r = malloc(2 * RELU_N * sizeof(float));
    assert_non_null(r);
    for (int i = 0; i < 8; i++) {
        b[i] = malloc(2 * RELU_N * sizeof(float));
        assert_non_null(b[i]);
    }
    for (int64_t i = 0; i < RELU_N; i++)
        /* [-1, 1.5] shifted off 0: later zeros and denormals fall below the first |x| edge */
        b[0][i] = (float)(((double)i / (RELU_N - 1) - 0.4) * 2.5 + 0x1p-20);
    struct qp_stats *probe = make(QP_STATS_HIST, 0, 0, 0, 0);
    feed(probe, b[0], RELU_N);
    for (int k = 1; k <= 2; k++) {
        fill_adversarial(b[k], RELU_N, probe, 0);
        for (int64_t i = 0; i < RELU_N; i++) /* inside x's range, NaN/Inf out */
            if (!isfinite(b[k][i]) || fabsf(b[k][i]) > 1.4f) b[k][i] = 0.5f;
    }
    for (int64_t i = 0; i < 4096; i++) /* negatives only, in whole vectors */
        b[2][i] = -fabsf(b[2][i]) - 0x1p-30f;
    for (int64_t i = 0; i < RELU_N; i++) {
        b[3][i] = b[1][RELU_N - 1 - i];
        b[4][i] = -fabsf(b[2][i]) * 0.5f;
        b[5][i] = b[1][i];
        b[6][i] = b[2][(i * 7) % RELU_N];
    }
    b[3][100] = NAN;
    b[5][RELU_N / 2] = -2.75f;
    memcpy(b[7], b[1], RELU_N * sizeof(float));
    memcpy(b[7] + RELU_N, b[2], RELU_N * sizeof(float));
    for (int how = QP_STATS_SAME; how <= QP_STATS_RELU; how++)
        for (int fi = 0; fi < 4; fi++) {
            int flags = flag_sets[fi];
            struct qp_stats *x = make(flags, 0, 0, 0, 0), *fed = make(flags, 0, 0, 0, 0);
            struct qp_stats *derived = make(flags, 0, 0, 0, 0);
            struct qp_stats *chain = make(flags, 0, 0, 0, 0);
            int chained = 0;
            for (int k = 0; k < 8; k++) {
                struct qp_error err = {0};
                int64_t n = k == 7 ? 2 * RELU_N : RELU_N;
                if (k == 7) { /* x takes batch 7 as two pooled arrays */
                    struct qp_array parts[2] = {view_f32(b[7], RELU_N),
                                                view_f32(b[7] + RELU_N, RELU_N)};
                    assert_int_equal(qp_stats_update_pooled(x, parts, 2, &err), QP_OK);
                } else {
                    feed(x, b[k], n);
                }
                for (int64_t i = 0; i < n; i++)
                    r[i] =
                        how == QP_STATS_SAME || b[k][i] > 0.0f || isnan(b[k][i]) ? b[k][i] : 0.0f;
                feed(fed, r, n);
                int took = qp_stats_update_derived(derived, x, (uint64_t)n, how);
                if (!took) feed(derived, r, n);
                assert_int_equal(took, expect[how][fi][k]);
                /* a copy of the derived tensor (Transpose after Reshape, say) follows in turn */
                if (qp_stats_update_derived(chain, derived, (uint64_t)n, QP_STATS_SAME))
                    chained++;
                else
                    feed(chain, r, n);
                struct snap sf, sd, sc;
                snap_of(fed, &sf);
                snap_of(derived, &sd);
                snap_of(chain, &sc);
                assert_same(&sf, &sd);
                assert_same(&sf, &sc);
                /* Wrong element count or itself: refused. */
                assert_int_equal(qp_stats_update_derived(derived, x, (uint64_t)n + 1, how), 0);
                assert_int_equal(qp_stats_update_derived(x, x, (uint64_t)n, how), 0);
            }
            if ((flags & QP_STATS_ABS_HIST) && how == QP_STATS_SAME) { /* |x| below lo seen */
                struct qp_stats_abs_hist ah;
                qp_stats_abs_hist(derived, &ah);
                assert_true(ah.n_below > 0);
            }
            /* the chain refuses the first batch (no histogram yet), the NaN batch and (SAME)
             * the batch its source grew on; (RELU) it follows its source even where that was
             * fed values, since those batches did not grow it */
            static const int want_chained[2][4] = {{5, 7, 5, 5}, {6, 7, 6, 6}};
            assert_int_equal(chained, want_chained[how][fi]);
            qp_stats_free(chain);
            struct qp_stats_summary sum;
            qp_stats_summary(derived, &sum);
            assert_true(sum.max == (double)(float)(1.5 + 0x1p-20));
            if (how == QP_STATS_RELU)
                assert_true(sum.min == 0.0 && !signbit(sum.min));
            else
                assert_true(sum.min == -2.75);
            qp_stats_free(x);
            qp_stats_free(fed);
            qp_stats_free(derived);
        }
    /* A first batch whose minimum dominates: same bin count, other thresholds: refused. */
    struct qp_stats *x = make(QP_STATS_HIST, 0, 0, 0, 0), *y = make(QP_STATS_HIST, 0, 0, 0, 0);
    for (int k = 0; k < 2; k++) {
        for (int64_t i = 0; i < RELU_N; i++) {
            b[0][i] = (float)(((double)i / (RELU_N - 1) - 0.6) * 2.5); /* [-1.5, 1] */
            r[i] = b[0][i] > 0.0f ? b[0][i] : 0.0f;
        }
        feed(x, b[0], RELU_N);
        if (k == 0) feed(y, r, RELU_N);
    }
    assert_int_equal(qp_stats_update_derived(y, x, RELU_N, QP_STATS_RELU), 0);
    qp_stats_free(x);
    qp_stats_free(y);
    qp_stats_free(probe);
    for (int i = 0; i < 8; i++)
        free(b[i]);
    free(r);
}

/* A batch whose minimum is a zero reports +0 whichever zero comes first. */
static void test_zero_min_sign(void **state) {
    (void)state;
    struct qp_stats *s = make(0, 0, 0, 0, 0);
    float x[4] = {-0.0f, 1.0f, 0.0f, 2.0f};
    feed(s, x, 4);
    struct qp_stats_summary sum;
    qp_stats_summary(s, &sum);
    assert_true(sum.min == 0.0 && !signbit(sum.min));
    assert_true(sum.max == 2.0);
    qp_stats_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranges_and_nonfinite),
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_hist_no_growth_equals_one_shot),
        cmocka_unit_test(test_hist_growth_rebin),
        cmocka_unit_test(test_hist_zero_first),
        cmocka_unit_test(test_hist_cap_coarsens),
        cmocka_unit_test(test_abs_hist_growth),
        cmocka_unit_test(test_memory_independent_of_batches),
        cmocka_unit_test(test_pooled_batch),
        cmocka_unit_test(test_channel_absmax),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_threads_bit_identical),
        cmocka_unit_test(test_edges_float_vs_double),
        cmocka_unit_test(test_no_growth_one_pass),
        cmocka_unit_test(test_zero_min_sign),
        cmocka_unit_test(test_simd_kernel_adversarial),
        cmocka_unit_test(test_derived_from_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
