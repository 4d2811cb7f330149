/* Calibrators against hand-computed ranges and against calib_cases.h (an independent numpy
 * statement of ORT's histogram calibrators, gen_calib_cases.py). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calib/calibrator.h"
#include "calib/stats.h"
#include "qmath/qparams.h"

#include "calib_cases.h"

#define N_OF(a) ((int64_t)(sizeof(a) / sizeof((a)[0])))

static void feed(struct qp_stats *s, const float *x, int64_t n) {
    struct qp_array a;
    struct qp_error err = {0};
    int64_t dims[1] = {n};
    assert_int_equal(qp_array_view(&a, QP_DTYPE_FLOAT, 1, dims, (void *)x, (size_t)n * 4, &err),
                     QP_OK);
    assert_int_equal(qp_stats_update(s, &a, &err), QP_OK);
}

static struct qp_stats *make_for(const struct qp_calib_options *o) {
    struct qp_stats_config cfg;
    qp_calib_stats_config(o, &cfg);
    struct qp_stats *s = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_stats_create(&cfg, &s, &err), QP_OK);
    return s;
}

static void test_method_names(void **state) {
    (void)state;
    enum qp_calib_method m;
    struct qp_error err = {0};
    assert_int_equal(qp_calib_method_parse("entropy", &m, &err), QP_OK);
    assert_int_equal(m, QP_CALIB_ENTROPY);
    assert_string_equal(qp_calib_method_name(QP_CALIB_PERCENTILE), "percentile");
    assert_int_equal(qp_calib_method_parse("minmax", &m, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "max, entropy, percentile, mse"));
    assert_int_equal(qp_calib_method_parse("mse", &m, &err), QP_OK);
    assert_int_equal(m, QP_CALIB_MSE);
    assert_string_equal(qp_calib_method_name(QP_CALIB_MSE), "mse");
    assert_non_null(strstr(err.msg, "mse, auto"));
    assert_int_equal(qp_calib_method_parse("auto", &m, &err), QP_OK);
    assert_int_equal(m, QP_CALIB_AUTO);
    assert_string_equal(qp_calib_method_name(QP_CALIB_AUTO), "auto");
}

static void test_max(void **state) {
    (void)state;
    struct qp_calib_options o;
    qp_calib_options_default(&o, QP_CALIB_MAX);
    struct qp_stats *s = make_for(&o);
    float b1[] = {0.5f, -1.25f, NAN}, b2[] = {3.0f, INFINITY};
    feed(s, b1, 3);
    feed(s, b2, 2);
    struct qp_calib_range r;
    struct qp_error err = {0};
    assert_int_equal(qp_calib_compute(&o, s, &r, &err), QP_OK);
    assert_true(r.lo == -1.25 && r.hi == 3.0 && r.amax == 3.0);
    assert_int_equal(r.n_nan, 1);
    assert_int_equal(r.n_inf, 1);
    /* INT8 scale = amax / 127, FP8 E4M3FN scale = amax / 448 (quant/qparams) */
    float scale;
    int32_t zp;
    assert_int_equal(
        qp_qparams_from_range(QP_DTYPE_INT8, (float)-r.amax, (float)r.amax, 1, &scale, &zp, &err),
        QP_OK);
    assert_float_equal(scale, 3.0f / 127.0f, 1e-9);
    assert_int_equal(zp, 0);
    assert_int_equal(qp_qparams_from_range(QP_DTYPE_FLOAT8E4M3FN, (float)-r.amax, (float)r.amax, 1,
                                           &scale, &zp, &err),
                     QP_OK);
    assert_float_equal(scale, 3.0f / 448.0f, 1e-9);
    qp_stats_free(s);

    /* no finite values: a clear error, not a range */
    s = make_for(&o);
    float b3[] = {NAN, NAN};
    feed(s, b3, 2);
    assert_int_equal(qp_calib_compute(&o, s, &r, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "2 NaN"));
    qp_stats_free(s);
}

/* With one batch the histogram keeps 128 bins: one candidate, the whole range, so entropy
 * equals max (reference §5.4). */
static void test_entropy_single_batch_is_max(void **state) {
    (void)state;
    struct qp_calib_options o;
    qp_calib_options_default(&o, QP_CALIB_ENTROPY);
    struct qp_stats *s = make_for(&o);
    float b[64];
    for (int i = 0; i < 64; i++)
        b[i] = (float)(i - 20) * 0.1f;
    feed(s, b, 64);
    struct qp_calib_range r;
    struct qp_error err = {0};
    assert_int_equal(qp_calib_compute(&o, s, &r, &err), QP_OK);
    assert_true(r.lo == (double)b[0] && r.hi == (double)b[63]);
    assert_true(r.amax == (double)b[63]);
    qp_stats_free(s);
}

/* Three batches with growth; histogram, window, KL and range all from the numpy statement. */
static void test_entropy_known_distribution(void **state) {
    (void)state;
    struct qp_calib_options o;
    qp_calib_options_default(&o, QP_CALIB_ENTROPY);
    struct qp_stats *s = make_for(&o);
    feed(s, ent_b1, N_OF(ent_b1));
    feed(s, ent_b2, N_OF(ent_b2));
    feed(s, ent_b3, N_OF(ent_b3));
    struct qp_stats_hist h;
    qp_stats_hist(s, &h);
    assert_int_equal(h.n, ENT_NBINS);
    assert_float_equal(h.threshold, ENT_T, 1e-12);
    assert_memory_equal(h.counts, ent_hist, sizeof ent_hist);
    int64_t start, end;
    double kl;
    struct qp_error err = {0};
    assert_int_equal(qp_calib_entropy_window(&h, 128, &start, &end, &kl, &err), QP_OK);
    assert_int_equal(start, ENT_START);
    assert_int_equal(end, ENT_END);
    assert_true(kl == ENT_KL); /* float32 arithmetic reproduced exactly */
    struct qp_calib_range r;
    assert_int_equal(qp_calib_compute(&o, s, &r, &err), QP_OK);
    assert_float_equal(r.lo, ENT_LO, 1e-9);
    assert_float_equal(r.hi, ENT_HI, 1e-9);
    assert_float_equal(r.amax, fmax(fabs(ENT_LO), fabs(ENT_HI)), 1e-9);
    assert_true(r.amax < h.threshold); /* an outlier-clipping threshold, not max */
    qp_stats_free(s);
}

/* The search on a histogram given directly: one spike plus a far outlier bin. The window
 * that keeps the outlier costs KL in the merged bins; hand check that the search does not
 * blow up and returns a window symmetric about the middle. */
static void test_entropy_window_shape(void **state) {
    (void)state;
    uint64_t c[132] = {0};
    for (int i = 60; i < 72; i++)
        c[i] = 1000;
    c[131] = 1;
    struct qp_stats_hist h = {.counts = c, .n = 132, .threshold = 1.0, .stride = 2.0 / 132};
    int64_t start, end;
    struct qp_error err = {0};
    assert_int_equal(qp_calib_entropy_window(&h, 128, &start, &end, NULL, &err), QP_OK);
    /* candidates: i = 64 -> [2, 131), i = 65 -> [1, 132), i = 66 -> [0, 132) */
    assert_true((start == 2 && end == 131) || (start == 1 && end == 132) ||
                (start == 0 && end == 132));
    assert_int_equal(qp_calib_entropy_window(&h, 127, &start, &end, NULL, &err), QP_ERR_USAGE);
    assert_int_equal(qp_calib_entropy_window(&h, 256, &start, &end, NULL, &err), QP_ERR_USAGE);
}

/* Percentile by hand: |x| = 1..10, 9 bins of width 1 over [1, 10]; cdf = .1 .2 ... .8 1.0;
 * 75% -> bin 7 -> left edge 8; range (-8, 8) clipped to [min, max] = [1, 10] -> [1, 8]. */
static void test_percentile_by_hand(void **state) {
    (void)state;
    struct qp_calib_options o;
    qp_calib_options_default(&o, QP_CALIB_PERCENTILE);
    o.n_bins = 9;
    o.percentile = 75.0;
    struct qp_stats *s = make_for(&o);
    float b[10];
    for (int i = 0; i < 10; i++)
        b[i] = (float)(i + 1);
    feed(s, b, 10);
    struct qp_calib_range r;
    struct qp_error err = {0};
    assert_int_equal(qp_calib_compute(&o, s, &r, &err), QP_OK);
    assert_float_equal(r.lo, 1.0, 1e-12);
    assert_float_equal(r.hi, 8.0, 1e-12);
    assert_float_equal(r.amax, 8.0, 1e-12);
    /* 100%: the cumulative sum reaches 1 at the last bin: its left edge, 9 */
    o.percentile = 100.0;
    assert_int_equal(qp_calib_compute(&o, s, &r, &err), QP_OK);
    assert_float_equal(r.hi, 9.0, 1e-12);
    o.percentile = 101.0;
    assert_int_equal(qp_calib_compute(&o, s, &r, &err), QP_ERR_USAGE);
    qp_stats_free(s);
}

static void test_percentile_known_sample(void **state) {
    (void)state;
    struct qp_calib_options o;
    qp_calib_options_default(&o, QP_CALIB_PERCENTILE);
    o.n_bins = 64;
    struct qp_stats *s = make_for(&o);
    feed(s, pct_b1, N_OF(pct_b1));
    feed(s, pct_b2, N_OF(pct_b2));
    struct qp_stats_abs_hist h;
    qp_stats_abs_hist(s, &h);
    assert_int_equal(h.n, PCT_NBINS);
    assert_float_equal(h.lo, PCT_LO, 1e-12);
    assert_float_equal(h.width, PCT_W, 1e-12);
    assert_int_equal(h.n_below, PCT_BELOW);
    assert_memory_equal(h.counts, pct_hist, sizeof pct_hist);
    struct {
        double pct;
        int64_t idx;
        double lo, hi;
    } cases[] = {{99.0, PCT_99_IDX, PCT_99_LO, PCT_99_HI},
                 {99.999, PCT_99999_IDX, PCT_99999_LO, PCT_99999_HI},
                 {90.0, PCT_90_IDX, PCT_90_LO, PCT_90_HI}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct qp_error err = {0};
        int64_t idx;
        assert_int_equal(qp_calib_percentile_index(&h, cases[i].pct, &idx, &err), QP_OK);
        assert_int_equal(idx, cases[i].idx);
        o.percentile = cases[i].pct;
        struct qp_calib_range r;
        assert_int_equal(qp_calib_compute(&o, s, &r, &err), QP_OK);
        assert_float_equal(r.lo, cases[i].lo, 1e-9);
        assert_float_equal(r.hi, cases[i].hi, 1e-9);
    }
    qp_stats_free(s);
}

/* The squared error of quantizing x[0..n) symmetrically to qtype with amax, on the raw
 * samples: the reference the histogram search is checked against. */
static double sample_mse(const float *x, int64_t n, enum qp_dtype qtype, double amax, float *y) {
    return qp_symmetric_sq_error(qtype, (float)amax, x, NULL, n, y);
}

/* mse on the raw samples: a Gaussian with one far outlier (int8: the best range clips it well
 * below max), a uniform distribution (nothing to clip: close to max), and the Gaussian for FP8
 * E4M3. The histogram search's amax must give an error within 2% of the best amax found by
 * brute force on the samples (every 1/400 of max), and differ from max as said. */
static void test_mse(void **state) {
    (void)state;
    enum { N = 1 << 18 };
    static float x[N], y[N];
    uint32_t rng = 12345;
    for (int kind = 0; kind < 3; kind++) {
        for (int i = 0; i < N; i += 2) { /* Box-Muller, or uniform [-1, 1) */
            float u1, u2;
            rng = rng * 1664525u + 1013904223u;
            u1 = ((rng >> 8) + 0.5f) / 16777216.0f;
            rng = rng * 1664525u + 1013904223u;
            u2 = ((rng >> 8) + 0.5f) / 16777216.0f;
            float r = sqrtf(-2.0f * logf(u1));
            x[i] = kind == 1 ? 2 * u1 - 1 : r * cosf(6.2831853f * u2);
            x[i + 1] = kind == 1 ? 2 * u2 - 1 : r * sinf(6.2831853f * u2);
        }
        if (kind != 1) x[997] = 100.0f; /* rarer than 1 in 127^2 * 12: the int8 best clips it */
        enum qp_dtype qt = kind == 2 ? QP_DTYPE_FLOAT8E4M3FN : QP_DTYPE_INT8;
        struct qp_calib_options o;
        qp_calib_options_default(&o, QP_CALIB_MSE);
        o.qtype = qt;
        struct qp_stats *s = make_for(&o);
        feed(s, x, N / 2);
        feed(s, x + N / 2, N / 2);
        struct qp_calib_range r;
        struct qp_error err = {0};
        assert_int_equal(qp_calib_compute(&o, s, &r, &err), QP_OK);
        double mx = 0, best = INFINITY, best_a = 0;
        for (int i = 0; i < N; i++)
            mx = fmax(mx, fabs(x[i]));
        for (int k = 1; k <= 400; k++) {
            double e = sample_mse(x, N, qt, mx * k / 400, y);
            if (e < best) {
                best = e;
                best_a = mx * k / 400;
            }
        }
        double got = sample_mse(x, N, qt, r.amax, y);
        if (got > best * 1.02)
            fail_msg("case %d: amax %g gives %g, the best (amax %g) %g", kind, r.amax, got, best_a,
                     best);
        /* one outlier at 100 among 2^18 Gaussian values: clipping it at a costs (100 - a)^2,
         * rounding the rest N (a / 127)^2 / 12: the best a is about 42 */
        if (kind == 0) assert_true(r.amax > 0.3 * mx && r.amax < 0.6 * mx);
        if (kind == 1) assert_true(r.amax > 0.9 * mx);
        assert_true(r.amax <= mx && r.lo >= -r.amax && r.hi <= r.amax &&
                    (r.lo == -r.amax || r.hi == r.amax));
        qp_stats_free(s);
    }
    struct qp_stats_abs_hist empty = {0};
    double a;
    struct qp_error err = {0};
    assert_int_equal(qp_calib_mse_amax(&empty, QP_DTYPE_INT8, 1.0, &a, &err), QP_ERR_USAGE);
}

static void test_missing_histogram(void **state) {
    (void)state;
    struct qp_calib_options o;
    qp_calib_options_default(&o, QP_CALIB_MAX);
    struct qp_stats *s = make_for(&o); /* no histogram */
    float b[] = {1.0f};
    feed(s, b, 1);
    qp_calib_options_default(&o, QP_CALIB_ENTROPY);
    struct qp_calib_range r;
    struct qp_error err = {0};
    assert_int_equal(qp_calib_compute(&o, s, &r, &err), QP_ERR_USAGE);
    qp_stats_free(s);
}

static void test_pin_and_group(void **state) {
    (void)state;
    struct qp_calib_range r = {.lo = -0.2, .hi = 0.97, .amax = 0.97};
    qp_calib_range_pin(&r, 0.0, 1.0); /* Softmax output */
    assert_true(r.lo == 0.0 && r.hi == 1.0 && r.amax == 1.0 && r.pinned);
    struct qp_calib_range g[3] = {{.lo = -1, .hi = 2, .amax = 2},
                                  {.lo = -5, .hi = 1, .amax = 5},
                                  {.lo = 0, .hi = 3, .amax = 3}};
    qp_calib_group_share(g, 3);
    for (int i = 0; i < 3; i++)
        assert_true(g[i].lo == -5 && g[i].hi == 3 && g[i].amax == 5);
}

static void test_weight_axes(void **state) {
    (void)state;
    int axis = -1;
    assert_true(qp_calib_weight_axis("Conv", 0, &axis) && axis == 0);
    assert_true(qp_calib_weight_axis("ConvTranspose", 0, &axis) && axis == 1);
    assert_true(qp_calib_weight_axis("MatMul", 0, &axis) && axis == 1);
    assert_true(qp_calib_weight_axis("Gemm", 1, &axis) && axis == 0);
    assert_true(qp_calib_weight_axis("Gemm", 0, &axis) && axis == 1);
    assert_false(qp_calib_weight_axis("Add", 0, &axis));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_method_names),
        cmocka_unit_test(test_max),
        cmocka_unit_test(test_entropy_single_batch_is_max),
        cmocka_unit_test(test_entropy_known_distribution),
        cmocka_unit_test(test_entropy_window_shape),
        cmocka_unit_test(test_percentile_by_hand),
        cmocka_unit_test(test_percentile_known_sample),
        cmocka_unit_test(test_mse),
        cmocka_unit_test(test_missing_histogram),
        cmocka_unit_test(test_pin_and_group),
        cmocka_unit_test(test_weight_axes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
