/* matrix.c: Trilu, EyeLike, CumSum. Values against naive loops, extreme k values, integer
 * wrap-around, refusals of unsupported dtypes and bad inputs, 1 vs 2 threads bit for bit. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kharness.h"

static void check_trilu(int upper, int64_t k) {
    enum { B = 2, R = 3, C = 5 };
    int32_t x[B * R * C], y[B * R * C];
    for (int i = 0; i < B * R * C; i++)
        x[i] = i + 1;
    int64_t dx[3] = {B, R, C}, dk[1] = {1};
    struct qp_kt X = kh_t(QP_DTYPE_INT32, 3, dx, x), K = kh_t(QP_DTYPE_INT64, 0, dk, &k), Y = {0};
    struct qp_attr up = kh_int("upper", upper);
    struct kh_call c = KH_CALL("Trilu", 14, &up, 1, &Y, y, &X, &K);
    assert_int_equal(kh_run(&c), QP_OK);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < R; i++)
            for (int j = 0; j < C; j++) {
                /* j - i vs k in wide arithmetic */
                double d = (double)j - (double)i;
                int keep = upper ? d >= (double)k : d <= (double)k;
                int at = (b * R + i) * C + j;
                assert_int_equal(y[at], keep ? x[at] : 0);
            }
}

static void test_trilu(void **state) {
    (void)state;
    const int64_t ks[] = {0, 1, -1, 2, -2, 4, -4, 5, -5, 100, INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        check_trilu(1, ks[i]);
        check_trilu(0, ks[i]);
    }
    /* k must be one integer; upper 0 or 1; rank >= 2 */
    float x[4] = {0}, y[4];
    float kf = 1;
    int64_t dx[2] = {2, 2}, d1[1] = {2};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 2, dx, x), K = kh_t(QP_DTYPE_FLOAT, 0, d1, &kf), Y = {0};
    struct kh_call c = KH_CALL("Trilu", 14, NULL, 0, &Y, y, &X, &K);
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    c.n_in = 1;
    struct qp_attr up = kh_int("upper", 2);
    c.attrs = &up;
    c.n_attrs = 1;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    c.n_attrs = 0;
    struct qp_kt X1 = kh_t(QP_DTYPE_FLOAT, 1, d1, x);
    c.in[0] = &X1;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
}

static void test_eyelike(void **state) {
    (void)state;
    int32_t x[12] = {0};
    int64_t dx[2] = {3, 4};
    float y[12];
    struct qp_kt X = kh_t(QP_DTYPE_INT32, 2, dx, x), Y = {0};
    struct qp_attr a[2] = {kh_int("dtype", QP_DTYPE_FLOAT), kh_int("k", -1)};
    struct kh_call c = KH_CALL("EyeLike", 9, a, 2, &Y, y, &X);
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(Y.dtype, QP_DTYPE_FLOAT);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            assert_true(y[i * 4 + j] == (j - i == -1 ? 1.0f : 0.0f));
    /* k beyond the matrix: all zeros, no out-of-bounds write (ASan) */
    const int64_t far[] = {4, -3, INT64_MAX, INT64_MIN};
    for (size_t t = 0; t < 4; t++) {
        a[1] = kh_int("k", far[t]);
        assert_int_equal(kh_run(&c), QP_OK);
        for (int i = 0; i < 12; i++)
            assert_true(y[i] == 0.0f);
    }
    /* bool output; default dtype is the input's */
    uint8_t yb[12];
    a[0] = kh_int("dtype", QP_DTYPE_BOOL);
    a[1] = kh_int("k", 1);
    c.out_data[0] = yb;
    assert_int_equal(kh_run(&c), QP_OK);
    assert_true(yb[1] == 1 && yb[6] == 1 && yb[11] == 1 && yb[0] == 0);
    int32_t yi[12];
    c.n_attrs = 0;
    c.out_data[0] = yi;
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(Y.dtype, QP_DTYPE_INT32);
    assert_true(yi[0] == 1 && yi[5] == 1 && yi[10] == 1 && yi[1] == 0);
    /* refusals */
    c.n_attrs = 1;
    a[0] = kh_int("dtype", QP_DTYPE_STRING);
    assert_int_equal(kh_run(&c), QP_ERR_UNSUPPORTED);
    a[0] = kh_int("dtype", 12345);
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    int64_t d3[3] = {1, 3, 4};
    struct qp_kt X3 = kh_t(QP_DTYPE_INT32, 3, d3, x);
    c.in[0] = &X3;
    c.n_attrs = 0;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
}

static void test_cumsum(void **state) {
    (void)state;
    double x[6] = {1, 2, 3, 4, 5, 6}, y[6];
    int32_t axis = 1;
    int64_t dx[2] = {2, 3}, da[1] = {1};
    struct qp_kt X = kh_t(QP_DTYPE_DOUBLE, 2, dx, x), A = kh_t(QP_DTYPE_INT32, 0, da, &axis),
                 Y = {0};
    struct qp_attr a[2] = {kh_int("exclusive", 1), kh_int("reverse", 1)};
    struct kh_call c = KH_CALL("CumSum", 14, a, 0, &Y, y, &X, &A);
    assert_int_equal(kh_run(&c), QP_OK);
    const double w[6] = {1, 3, 6, 4, 9, 15};
    assert_memory_equal(y, w, sizeof w);
    c.n_attrs = 2; /* exclusive + reverse */
    assert_int_equal(kh_run(&c), QP_OK);
    const double wer[6] = {5, 3, 0, 11, 6, 0};
    assert_memory_equal(y, wer, sizeof wer);
    axis = -2;
    c.n_attrs = 1; /* exclusive along axis 0 */
    assert_int_equal(kh_run(&c), QP_OK);
    const double we0[6] = {0, 0, 0, 1, 2, 3};
    assert_memory_equal(y, we0, sizeof we0);
    /* int32 wraps */
    int32_t xi[2] = {INT32_MAX, 1}, yi[2];
    int64_t d1[1] = {2};
    axis = 0;
    struct qp_kt XI = kh_t(QP_DTYPE_INT32, 1, d1, xi);
    struct kh_call ci = KH_CALL("CumSum", 14, NULL, 0, &Y, yi, &XI, &A);
    assert_int_equal(kh_run(&ci), QP_OK);
    assert_true(yi[0] == INT32_MAX && yi[1] == INT32_MIN);
    /* refusals: axis out of range, axis not constant, axis not integer, int8 data */
    axis = 2;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    axis = 0;
    A.is_const = 0;
    assert_int_equal(kh_run(&c), QP_ERR_UNSUPPORTED);
    A.is_const = 1;
    float af = 0;
    struct qp_kt AF = kh_t(QP_DTYPE_FLOAT, 0, da, &af);
    c.in[1] = &AF;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    c.in[1] = &A;
    int8_t x8[2] = {1, 2};
    struct qp_kt X8 = kh_t(QP_DTYPE_INT8, 1, d1, x8);
    ci.in[0] = &X8;
    assert_int_equal(kh_run(&ci), QP_ERR_UNSUPPORTED);
}

static void test_cumsum_threads(void **state) {
    (void)state;
    enum { N = 64, L = 2048 };
    float *x = kh_alloc(sizeof(float) * N * L), *y1 = kh_alloc(sizeof(float) * N * L),
          *y2 = kh_alloc(sizeof(float) * N * L);
    srand(3);
    for (int i = 0; i < N * L; i++)
        x[i] = (float)rand() / RAND_MAX - 0.5f;
    int64_t axis = 1, dx[2] = {N, L}, da[1] = {1};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 2, dx, x), A = kh_t(QP_DTYPE_INT64, 1, da, &axis),
                 Y = {0};
    struct kh_call c = KH_CALL("CumSum", 14, NULL, 0, &Y, y1, &X, &A);
    kh_run_threads(&c, y1, y2, sizeof(float) * N * L);
    double acc = 0;
    for (int j = 0; j < L; j++) {
        acc += x[5 * L + j];
        assert_true(fabs(acc - y1[5 * L + j]) <= 1e-5);
    }
    free(x);
    free(y1);
    free(y2);
}

static void test_det(void **state) {
    (void)state;
    /* [3, 3, 3]: a general matrix, a singular one, a permutation (det -1) */
    double x[27] = {2,       -1, 0, 1, 3, 4, 0, 5, -2, /* */ 1, 2, 3, 2, 4, 6, 7, 8, 9,
                    /* */ 0, 1,  0, 1, 0, 0, 0, 0, 1};
    double y[3];
    int64_t dx[3] = {3, 3, 3};
    struct qp_kt X = kh_t(QP_DTYPE_DOUBLE, 3, dx, x), Y = {0};
    struct kh_call c = KH_CALL("Det", 11, NULL, 0, &Y, y, &X);
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(Y.rank, 1);
    /* 2(3*-2 - 4*5) + 1(1*-2 - 4*0) = -52 - 2 = -54 */
    assert_true(fabs(y[0] + 54) < 1e-9);
    assert_true(fabs(y[1]) < 1e-9);
    assert_true(fabs(y[2] + 1) < 1e-12);
    int64_t dn[2] = {3, 9};
    struct qp_kt XN = kh_t(QP_DTYPE_DOUBLE, 2, dn, x);
    c.in[0] = &XN;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    int32_t xi[9] = {0};
    int64_t d2[2] = {3, 3};
    struct qp_kt XI = kh_t(QP_DTYPE_INT32, 2, d2, xi);
    c.in[0] = &XI;
    assert_int_equal(kh_run(&c), QP_ERR_UNSUPPORTED);
}

static void test_empty_huge_dims(void **state) {
    (void)state;
    /* no elements, but dimensions whose product overflows: refused, not looped over */
    int64_t dx[3] = {0, (int64_t)1 << 40, (int64_t)1 << 40}, k = 0, d1[1] = {1};
    float y[1];
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 3, dx, y), K = kh_t(QP_DTYPE_INT64, 0, d1, &k), Y = {0};
    struct kh_call c = KH_CALL("Trilu", 14, NULL, 0, &Y, y, &X, &K);
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(c.err.msg, "2^62"));
    c.op = "CumSum";
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    /* a zero dim with modest others is fine and writes nothing */
    int64_t ds[3] = {3, 1000, 0};
    struct qp_kt XS = kh_t(QP_DTYPE_FLOAT, 3, ds, y);
    c.in[0] = &XS;
    c.op = "Trilu";
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(Y.numel, 0);
}

static void test_windows(void **state) {
    (void)state;
    int32_t n = 8;
    int64_t d1[1] = {1};
    float y[8];
    double yd[8];
    struct qp_kt N = kh_t(QP_DTYPE_INT32, 0, d1, &n), Y = {0};
    const char *ops[3] = {"HannWindow", "HammingWindow", "BlackmanWindow"};
    const double a[3][3] = {{0.5, 0.5, 0}, {25.0 / 46, 21.0 / 46, 0}, {0.42, 0.5, 0.08}};
    for (int o = 0; o < 3; o++)
        for (int periodic = 0; periodic < 2; periodic++) {
            struct qp_attr at[2] = {kh_int("periodic", periodic),
                                    kh_int("output_datatype", QP_DTYPE_DOUBLE)};
            struct kh_call c = KH_CALL(ops[o], 17, at, 1, &Y, y, &N);
            assert_int_equal(kh_run(&c), QP_OK);
            assert_int_equal(Y.dims[0], 8);
            double den = periodic ? 8 : 7;
            for (int k = 0; k < 8; k++) {
                double want =
                    a[o][0] - a[o][1] * cos(2 * M_PI * k / den) + a[o][2] * cos(4 * M_PI * k / den);
                assert_true(fabs(y[k] - want) < 1e-6);
            }
            if (!periodic) assert_true(fabs(y[0] - y[7]) < 1e-6); /* symmetric */
            c.n_attrs = 2;
            c.out_data[0] = yd;
            assert_int_equal(kh_run(&c), QP_OK);
            assert_int_equal(Y.dtype, QP_DTYPE_DOUBLE);
            assert_true(fabs(yd[3] - y[3]) < 1e-7);
        }
    struct kh_call c = KH_CALL("HannWindow", 17, NULL, 0, &Y, y, &N);
    n = -1;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    n = 8;
    N.is_const = 0;
    assert_int_equal(kh_run(&c), QP_ERR_UNSUPPORTED);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trilu),   cmocka_unit_test(test_eyelike),
        cmocka_unit_test(test_cumsum),  cmocka_unit_test(test_cumsum_threads),
        cmocka_unit_test(test_det),     cmocka_unit_test(test_empty_huge_dims),
        cmocka_unit_test(test_windows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
