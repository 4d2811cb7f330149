/* channel.c: LRN against the formula with a clipped channel window (even and odd sizes),
 * opset-6 PRelu with a per-channel slope, a shared slope and a broadcast slope; bad
 * attributes and slope shapes refused; 1 vs 2 threads bit for bit. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kharness.h"

enum { N = 2, C = 5, S = 3 };

static void test_lrn(void **state) {
    (void)state;
    float x[N * C * S], y[N * C * S];
    for (int i = 0; i < N * C * S; i++)
        x[i] = (float)((i * 37) % 11) - 5.0f;
    int64_t dx[3] = {N, C, S};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 3, dx, x), Y = {0};
    for (int size = 1; size <= 4; size++) {
        struct qp_attr a[4] = {kh_int("size", size), kh_float("alpha", 0.01f),
                               kh_float("beta", 0.6f), kh_float("bias", 1.5f)};
        struct kh_call c = KH_CALL("LRN", 13, a, 4, &Y, y, &X);
        assert_int_equal(kh_run(&c), QP_OK);
        for (int n = 0; n < N; n++)
            for (int ch = 0; ch < C; ch++)
                for (int s = 0; s < S; s++) {
                    double sq = 0;
                    /* window [c - floor((size-1)/2), c + ceil((size-1)/2)] */
                    for (int k = ch - (size - 1) / 2; k <= ch + size / 2; k++) {
                        if (k < 0 || k >= C) continue;
                        double v = x[(n * C + k) * S + s];
                        sq += v * v;
                    }
                    double want = x[(n * C + ch) * S + s] / pow(1.5 + 0.01 / size * sq, 0.6);
                    assert_true(fabs(y[(n * C + ch) * S + s] - want) <= 1e-6 * (1 + fabs(want)));
                }
    }
    struct qp_attr bad = kh_int("size", 0);
    struct kh_call c = KH_CALL("LRN", 13, &bad, 1, &Y, y, &X);
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    c.n_attrs = 0; /* size is required */
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(c.err.msg, "size"));
    c.n_attrs = 1;
    bad = kh_int("size", 3);
    int32_t xi[N * C * S] = {0};
    struct qp_kt XI = kh_t(QP_DTYPE_INT32, 3, dx, xi);
    c.in[0] = &XI;
    assert_int_equal(kh_run(&c), QP_ERR_UNSUPPORTED);
}

static void test_lrn_threads(void **state) {
    (void)state;
    enum { BC = 16, BS = 64 * 64 };
    float *x = kh_alloc(sizeof(float) * BC * BS), *y1 = kh_alloc(sizeof(float) * BC * BS),
          *y2 = kh_alloc(sizeof(float) * BC * BS);
    for (int i = 0; i < BC * BS; i++)
        x[i] = (float)((i * 7919) % 101) / 50.0f - 1.0f;
    int64_t dx[4] = {1, BC, 64, 64};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 4, dx, x), Y = {0};
    struct qp_attr a = kh_int("size", 5);
    struct kh_call c = KH_CALL("LRN", 13, &a, 1, &Y, y1, &X);
    kh_run_threads(&c, y1, y2, sizeof(float) * BC * BS);
    free(x);
    free(y1);
    free(y2);
}

static void test_prelu_opset6(void **state) {
    (void)state;
    float x[N * C * S], y[N * C * S], slope[C] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
    for (int i = 0; i < N * C * S; i++)
        x[i] = (float)(i % 7) - 3.0f;
    int64_t dx[3] = {N, C, S}, ds[1] = {C};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 3, dx, x), SL = kh_t(QP_DTYPE_FLOAT, 1, ds, slope),
                 Y = {0};
    struct kh_call c = KH_CALL("PRelu", 6, NULL, 0, &Y, y, &X, &SL);
    assert_int_equal(kh_run(&c), QP_OK);
    for (int n = 0; n < N; n++)
        for (int ch = 0; ch < C; ch++)
            for (int s = 0; s < S; s++) {
                int i = (n * C + ch) * S + s;
                assert_true(y[i] == (x[i] < 0 ? x[i] * slope[ch] : x[i]));
            }
    /* one shared value */
    int64_t d1[1] = {1};
    struct qp_kt S1 = kh_t(QP_DTYPE_FLOAT, 1, d1, slope);
    c.in[1] = &S1;
    assert_int_equal(kh_run(&c), QP_OK);
    for (int i = 0; i < N * C * S; i++)
        assert_true(y[i] == (x[i] < 0 ? x[i] * slope[0] : x[i]));
    /* a slope over the last dim broadcasts as from opset 7 */
    int64_t d2[2] = {1, S};
    struct qp_kt S2 = kh_t(QP_DTYPE_FLOAT, 2, d2, slope);
    c.in[1] = &S2;
    assert_int_equal(kh_run(&c), QP_OK);
    for (int i = 0; i < N * C * S; i++)
        assert_true(y[i] == (x[i] < 0 ? x[i] * slope[i % S] : x[i]));
    /* a slope that is none of these */
    int64_t d4[1] = {4};
    struct qp_kt S4 = kh_t(QP_DTYPE_FLOAT, 1, d4, slope);
    c.in[1] = &S4;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(c.err.msg, "slope"));
    /* opset 7 is the elementwise row: a [C] slope no longer means channels */
    c.in[1] = &SL;
    c.opset = 7;
    assert_int_not_equal(kh_run(&c), QP_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lrn),
        cmocka_unit_test(test_lrn_threads),
        cmocka_unit_test(test_prelu_opset6),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
