/* Einsum (matmul.c): explicit and implicit outputs, repeated letters (diagonals), ellipsis
 * with broadcasting, double, 1 vs 2 threads bit for bit, and clear errors for equations that
 * do not match the inputs. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kharness.h"

static enum qp_status einsum(const char *eq, int n_in, struct qp_kt **in, struct qp_kt *out,
                             void *data, int threads, struct qp_error *err) {
    struct qp_attr a = kh_str("equation", eq);
    struct kh_call c = {.op = "Einsum",
                        .opset = 12,
                        .attrs = &a,
                        .n_attrs = 1,
                        .n_in = n_in,
                        .n_out = 1,
                        .out = {out},
                        .out_data = {data},
                        .threads = threads};
    for (int i = 0; i < n_in; i++)
        c.in[i] = in[i];
    enum qp_status st = kh_run(&c);
    if (err) *err = c.err;
    return st;
}

static void test_einsum_ellipsis_broadcast(void **state) {
    (void)state;
    /* A [2,1,2,3] and B [3,3,4]: "...ij,...jk->...ik" broadcasts the batch to [2,3] */
    float a[12], b[36], y[2 * 3 * 2 * 4];
    for (int i = 0; i < 12; i++)
        a[i] = (float)i * 0.5f - 2;
    for (int i = 0; i < 36; i++)
        b[i] = (float)(i % 5) - 1;
    int64_t da[4] = {2, 1, 2, 3}, db[3] = {3, 3, 4};
    struct qp_kt A = kh_t(QP_DTYPE_FLOAT, 4, da, a), B = kh_t(QP_DTYPE_FLOAT, 3, db, b), Y = {0};
    struct qp_kt *in[2] = {&A, &B};
    assert_int_equal(einsum("...ij,...jk->...ik", 2, in, &Y, y, 1, NULL), QP_OK);
    assert_int_equal(Y.rank, 4);
    assert_int_equal(Y.dims[0], 2);
    assert_int_equal(Y.dims[1], 3);
    assert_int_equal(Y.dims[2], 2);
    assert_int_equal(Y.dims[3], 4);
    for (int p = 0; p < 2; p++)
        for (int q = 0; q < 3; q++)
            for (int i = 0; i < 2; i++)
                for (int k = 0; k < 4; k++) {
                    double acc = 0;
                    for (int j = 0; j < 3; j++)
                        acc += (double)a[(p * 2 + i) * 3 + j] * b[(q * 3 + j) * 4 + k];
                    assert_true(fabs(y[((p * 3 + q) * 2 + i) * 4 + k] - acc) <= 1e-5);
                }
    /* implicit output: ellipsis dims first, then letters seen once in ASCII order ("ki") */
    float y2[2 * 3 * 4 * 2];
    assert_int_equal(einsum("...ij,...jk", 2, in, &Y, y2, 1, NULL), QP_OK);
    assert_int_equal(Y.dims[2], 2); /* i before k */
    assert_int_equal(Y.dims[3], 4);
    assert_memory_equal(y, y2, sizeof y);
}

static void test_einsum_double_diag(void **state) {
    (void)state;
    double x[2 * 3 * 3], y[6], t;
    for (int i = 0; i < 18; i++)
        x[i] = i * 1.25 - 3;
    int64_t dx[3] = {2, 3, 3};
    struct qp_kt X = kh_t(QP_DTYPE_DOUBLE, 3, dx, x), Y = {0};
    struct qp_kt *in[1] = {&X};
    assert_int_equal(einsum("... i i -> ... i", 1, in, &Y, y, 1, NULL), QP_OK);
    assert_int_equal(Y.dtype, QP_DTYPE_DOUBLE);
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 3; i++)
            assert_true(y[b * 3 + i] == x[b * 9 + i * 4]);
    /* trace of every matrix summed: "bii->" */
    assert_int_equal(einsum("bii->", 1, in, &Y, &t, 1, NULL), QP_OK);
    assert_int_equal(Y.rank, 0);
    double want = 0;
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 3; i++)
            want += x[b * 9 + i * 4];
    assert_true(fabs(t - want) < 1e-12);
}

static void test_einsum_threads(void **state) {
    (void)state;
    enum { M = 48, K = 64, N = 40 };
    float *a = kh_alloc(sizeof(float) * M * K), *b = kh_alloc(sizeof(float) * K * N);
    float *y1 = kh_alloc(sizeof(float) * M * N), *y2 = kh_alloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++)
        a[i] = (float)((i * 31) % 17) / 8.0f - 1.0f;
    for (int i = 0; i < K * N; i++)
        b[i] = (float)((i * 13) % 19) / 9.0f - 1.0f;
    int64_t da[2] = {M, K}, db[2] = {K, N};
    struct qp_kt A = kh_t(QP_DTYPE_FLOAT, 2, da, a), B = kh_t(QP_DTYPE_FLOAT, 2, db, b), Y = {0};
    struct qp_kt *in[2] = {&A, &B};
    assert_int_equal(einsum("mk,kn->mn", 2, in, &Y, y1, 1, NULL), QP_OK);
    assert_int_equal(einsum("mk,kn->mn", 2, in, &Y, y2, 2, NULL), QP_OK);
    assert_memory_equal(y1, y2, sizeof(float) * M * N);
    free(a);
    free(b);
    free(y1);
    free(y2);
}

static void test_einsum_errors(void **state) {
    (void)state;
    float a[6] = {0}, b[6] = {0}, y[36];
    int64_t da[2] = {2, 3}, db[2] = {2, 3};
    struct qp_kt A = kh_t(QP_DTYPE_FLOAT, 2, da, a), B = kh_t(QP_DTYPE_FLOAT, 2, db, b), Y = {0};
    struct qp_kt *in[2] = {&A, &B};
    struct qp_error err;
    /* letter sizes disagree: j is 3 in A and 2 in B */
    assert_int_equal(einsum("ij,jk->ik", 2, in, &Y, y, 1, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "'j'"));
    /* wrong rank, wrong term count, bad characters, bad ellipsis, unknown output letter */
    assert_int_equal(einsum("ijk,jk->i", 2, in, &Y, y, 1, &err), QP_ERR_BAD_INPUT);
    assert_int_equal(einsum("ij->i", 2, in, &Y, y, 1, &err), QP_ERR_BAD_INPUT);
    assert_int_equal(einsum("ij,ij,ij->i", 2, in, &Y, y, 1, &err), QP_ERR_BAD_INPUT);
    assert_int_equal(einsum("i1,ij->i", 2, in, &Y, y, 1, &err), QP_ERR_BAD_INPUT);
    assert_int_equal(einsum("..i,ij->i", 2, in, &Y, y, 1, &err), QP_ERR_BAD_INPUT);
    assert_int_equal(einsum("ij,ij->z", 2, in, &Y, y, 1, &err), QP_ERR_BAD_INPUT);
    assert_int_equal(einsum("ij,ij->ii", 2, in, &Y, y, 1, &err), QP_ERR_BAD_INPUT);
    /* ellipsis dims that do not broadcast, or dropped from the output */
    int64_t dc[3] = {4, 2, 3};
    float c[24] = {0};
    struct qp_kt Cc = kh_t(QP_DTYPE_FLOAT, 3, dc, c);
    int64_t dd[3] = {3, 2, 3};
    float d[18] = {0};
    struct qp_kt D = kh_t(QP_DTYPE_FLOAT, 3, dd, d);
    struct qp_kt *in2[2] = {&Cc, &D};
    assert_int_equal(einsum("...ij,...ij->...i", 2, in2, &Y, y, 1, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "broadcast"));
    assert_int_equal(einsum("...ij->ij", 1, in2, &Y, y, 1, &err), QP_ERR_BAD_INPUT);
    /* mixed and unsupported dtypes */
    double e[6] = {0};
    struct qp_kt E = kh_t(QP_DTYPE_DOUBLE, 2, db, e);
    struct qp_kt *in3[2] = {&A, &E};
    assert_int_equal(einsum("ij,ij->i", 2, in3, &Y, y, 1, &err), QP_ERR_BAD_INPUT);
    int32_t f[6] = {0};
    struct qp_kt F = kh_t(QP_DTYPE_INT32, 2, db, f);
    struct qp_kt *in4[1] = {&F};
    assert_int_equal(einsum("ij->i", 1, in4, &Y, y, 1, &err), QP_ERR_UNSUPPORTED);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_einsum_ellipsis_broadcast),
        cmocka_unit_test(test_einsum_double_diag),
        cmocka_unit_test(test_einsum_threads),
        cmocka_unit_test(test_einsum_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
