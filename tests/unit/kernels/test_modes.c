/* Modes the inference kernels gained for conformance: BatchNormalization with training_mode=1
 * (batch statistics, running-statistics outputs), Dropout in training mode with ratio 0 (the
 * random-mask cases refused with a clear error), MaxPool on int8/uint8 (padding, Indices). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kharness.h"

static void test_batchnorm_training(void **state) {
    (void)state;
    enum { N = 2, C = 3, S = 4 };
    float x[N * C * S], sc[C] = {1.0f, 0.5f, 2.0f}, b[C] = {0.0f, 1.0f, -1.0f},
                        mean[C] = {0.1f, 0.2f, 0.3f}, var[C] = {1.0f, 2.0f, 3.0f};
    for (int i = 0; i < N * C * S; i++)
        x[i] = (float)((i * 7) % 13) - 6.0f;
    float y[N * C * S], rm[C], rv[C];
    int64_t dx[3] = {N, C, S}, dc[1] = {C};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 3, dx, x), SC = kh_t(QP_DTYPE_FLOAT, 1, dc, sc),
                 B = kh_t(QP_DTYPE_FLOAT, 1, dc, b), M = kh_t(QP_DTYPE_FLOAT, 1, dc, mean),
                 V = kh_t(QP_DTYPE_FLOAT, 1, dc, var), Y = {0}, RM = {0}, RV = {0};
    struct qp_attr a[3] = {kh_int("training_mode", 1), kh_float("epsilon", 1e-3f),
                           kh_float("momentum", 0.8f)};
    struct kh_call c = kh_call_io("BatchNormalization", 15, a, 3, KH_INS(&X, &SC, &B, &M, &V),
                                  KH_OUTS(&Y, &RM, &RV), KH_DATA(y, rm, rv));
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(RM.rank, 1);
    assert_int_equal(RM.dims[0], C);
    for (int ch = 0; ch < C; ch++) {
        double mu = 0, v = 0;
        for (int n = 0; n < N; n++)
            for (int s = 0; s < S; s++)
                mu += x[(n * C + ch) * S + s];
        mu /= N * S;
        for (int n = 0; n < N; n++)
            for (int s = 0; s < S; s++) {
                double d = x[(n * C + ch) * S + s] - mu;
                v += d * d;
            }
        v /= N * S; /* population variance */
        for (int n = 0; n < N; n++)
            for (int s = 0; s < S; s++) {
                int i = (n * C + ch) * S + s;
                double want = (x[i] - mu) / sqrt(v + 1e-3) * sc[ch] + b[ch];
                assert_true(fabs(y[i] - want) <= 1e-5 * (1 + fabs(want)));
            }
        assert_true(fabs(rm[ch] - (mean[ch] * 0.8 + mu * 0.2)) <= 1e-6);
        assert_true(fabs(rv[ch] - (var[ch] * 0.8 + v * 0.2)) <= 1e-5);
    }
    /* Y alone is fine; a fourth output is not part of opset 14+ training mode */
    c.n_out = 1;
    assert_int_equal(kh_run(&c), QP_OK);
    struct qp_kt EX = {0};
    float ex[C];
    c.n_out = 4;
    c.out[3] = &EX;
    c.out_data[3] = ex;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    /* statistics of the wrong size */
    c.n_out = 3;
    int64_t d2[1] = {2};
    struct qp_kt M2 = kh_t(QP_DTYPE_FLOAT, 1, d2, mean);
    c.in[3] = &M2;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
}

static void test_dropout_training(void **state) {
    (void)state;
    float x[6] = {1, -2, 3, -4, 5, -6}, y[6], ratio = 0.0f;
    uint8_t mask[6], training = 1;
    int64_t dx[2] = {2, 3}, d1[1] = {1};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 2, dx, x), R = kh_t(QP_DTYPE_FLOAT, 0, d1, &ratio),
                 T = kh_t(QP_DTYPE_BOOL, 0, d1, &training), Y = {0}, MK = {0};
    struct kh_call c =
        kh_call_io("Dropout", 13, NULL, 0, KH_INS(&X, &R, &T), KH_OUTS(&Y, &MK), KH_DATA(y, mask));
    memset(mask, 0, sizeof mask);
    assert_int_equal(kh_run(&c), QP_OK);
    assert_memory_equal(y, x, sizeof x);
    for (int i = 0; i < 6; i++)
        assert_int_equal(mask[i], 1);
    /* a random mask is refused, and says why */
    ratio = 0.5f;
    assert_int_equal(kh_run(&c), QP_ERR_UNSUPPORTED);
    assert_non_null(strstr(c.err.msg, "random"));
    /* ratio outside [0, 1) */
    ratio = 1.0f;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    ratio = -0.1f;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    /* training off: any ratio is the identity */
    training = 0;
    ratio = 0.9f;
    assert_int_equal(kh_run(&c), QP_OK);
    assert_memory_equal(y, x, sizeof x);
    /* training_mode must be known at plan time (the runtime keys plans on it) */
    T.is_const = 0;
    assert_int_equal(kh_run(&c), QP_ERR_UNSUPPORTED);
    T.is_const = 1;
    int64_t d2[1] = {2};
    uint8_t two[2] = {1, 1};
    struct qp_kt T2 = kh_t(QP_DTYPE_BOOL, 1, d2, two);
    c.in[2] = &T2;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
}

static void test_maxpool_int8(void **state) {
    (void)state;
    /* 1x1x3x3 with pads 1, kernel 3, stride 2: 2x2 output windows clipped at the border */
    int8_t x[9] = {-5, 7, -128, 3, -1, 2, 127, -9, 4}, y[4];
    uint8_t xu[9] = {5, 7, 200, 3, 255, 2, 0, 9, 4}, yu[4];
    int64_t ind[4];
    int64_t dx[4] = {1, 1, 3, 3};
    static const int64_t ks[2] = {3, 3}, pads[4] = {1, 1, 1, 1}, strides[2] = {2, 2};
    struct qp_attr a[3] = {kh_ints("kernel_shape", ks, 2), kh_ints("pads", pads, 4),
                           kh_ints("strides", strides, 2)};
    struct qp_kt X = kh_t(QP_DTYPE_INT8, 4, dx, x), Y = {0}, I = {0};
    struct kh_call c =
        kh_call_io("MaxPool", 12, a, 3, KH_INS(&X), KH_OUTS(&Y, &I), KH_DATA(y, ind));
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(Y.dtype, QP_DTYPE_INT8);
    assert_int_equal(Y.dims[2], 2);
    /* windows: rows/cols {0,1} x {0,1}, {0,1} x {1,2}, {1,2} x {0,1}, {1,2} x {1,2} */
    const int8_t want[4] = {7, 7, 127, 4};
    assert_memory_equal(y, want, sizeof want);
    const int64_t want_i[4] = {1, 1, 6, 8};
    assert_memory_equal(ind, want_i, sizeof want_i);
    struct qp_kt XU = kh_t(QP_DTYPE_UINT8, 4, dx, xu);
    c.in[0] = &XU;
    c.out_data[0] = yu;
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(Y.dtype, QP_DTYPE_UINT8);
    const uint8_t want_u[4] = {255, 255, 255, 255};
    assert_memory_equal(yu, want_u, sizeof want_u);
    /* int16 is not a MaxPool type */
    int16_t x16[9] = {0};
    struct qp_kt X16 = kh_t(QP_DTYPE_INT16, 4, dx, x16);
    c.in[0] = &X16;
    assert_int_equal(kh_run(&c), QP_ERR_UNSUPPORTED);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batchnorm_training),
        cmocka_unit_test(test_dropout_training),
        cmocka_unit_test(test_maxpool_int8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
