/* space.c: DepthToSpace (DCR and CRD) and SpaceToDepth against the index formulas of the
 * spec, SpaceToDepth undoing DepthToSpace (DCR), any element size, bad blocksizes refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kharness.h"

enum { N = 2, C = 8, H = 3, W = 2, B = 2, CO = C / (B * B) };

static void test_depth_to_space(void **state) {
    (void)state;
    int16_t x[N * C * H * W], y[N * C * H * W];
    for (int i = 0; i < N * C * H * W; i++)
        x[i] = (int16_t)i;
    int64_t dx[4] = {N, C, H, W};
    struct qp_kt X = kh_t(QP_DTYPE_INT16, 4, dx, x), Y = {0};
    for (int crd = 0; crd < 2; crd++) {
        struct qp_attr a[2] = {kh_int("blocksize", B), kh_str("mode", crd ? "CRD" : "DCR")};
        struct kh_call c = KH_CALL("DepthToSpace", 13, a, 2, &Y, y, &X);
        assert_int_equal(kh_run(&c), QP_OK);
        assert_int_equal(Y.dims[1], CO);
        assert_int_equal(Y.dims[2], H * B);
        assert_int_equal(Y.dims[3], W * B);
        for (int n = 0; n < N; n++)
            for (int co = 0; co < CO; co++)
                for (int h = 0; h < H; h++)
                    for (int i = 0; i < B; i++)
                        for (int w = 0; w < W; w++)
                            for (int j = 0; j < B; j++) {
                                int cin = crd ? co * B * B + i * B + j : (i * B + j) * CO + co;
                                int src = ((n * C + cin) * H + h) * W + w;
                                int dst = ((n * CO + co) * H * B + h * B + i) * W * B + w * B + j;
                                assert_int_equal(y[dst], x[src]);
                            }
    }
}

static void test_space_to_depth_inverts(void **state) {
    (void)state;
    int16_t x[N * C * H * W], y[N * C * H * W], z[N * C * H * W];
    for (int i = 0; i < N * C * H * W; i++)
        x[i] = (int16_t)(i * 7 - 100);
    int64_t dx[4] = {N, C, H, W};
    struct qp_kt X = kh_t(QP_DTYPE_INT16, 4, dx, x), Y = {0}, Z = {0};
    struct qp_attr bs = kh_int("blocksize", B);
    struct kh_call c = KH_CALL("DepthToSpace", 13, &bs, 1, &Y, y, &X);
    assert_int_equal(kh_run(&c), QP_OK);
    Y.data = y;
    Y.is_const = 1;
    struct kh_call d = KH_CALL("SpaceToDepth", 13, &bs, 1, &Z, z, &Y);
    assert_int_equal(kh_run(&d), QP_OK);
    assert_int_equal(Z.dims[1], C);
    assert_int_equal(Z.dims[2], H);
    assert_memory_equal(z, x, sizeof x);
}

static void test_space_refusals(void **state) {
    (void)state;
    float x[N * C * H * W] = {0}, y[N * C * H * W];
    int64_t dx[4] = {N, C, H, W};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 4, dx, x), Y = {0};
    struct qp_attr a[2] = {kh_int("blocksize", 3), kh_str("mode", "DCR")};
    struct kh_call c = KH_CALL("DepthToSpace", 13, a, 2, &Y, y, &X);
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT); /* 8 channels, 3x3 blocks */
    assert_non_null(strstr(c.err.msg, "blocksize"));
    a[0] = kh_int("blocksize", 0);
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    a[0] = kh_int("blocksize", 2);
    a[1] = kh_str("mode", "XYZ");
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    c.n_attrs = 0; /* blocksize is required */
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    c.op = "SpaceToDepth";
    c.n_attrs = 1;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT); /* H = 3 is not a multiple of 2 */
    int64_t d3[3] = {N, C, H * W};
    struct qp_kt X3 = kh_t(QP_DTYPE_FLOAT, 3, d3, x);
    c.in[0] = &X3;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_depth_to_space),
        cmocka_unit_test(test_space_to_depth_inverts),
        cmocka_unit_test(test_space_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
