/* Index kernels (index.c): GatherND, ScatterElements/Scatter, ScatterND, OneHot, NonZero,
 * Compress. Values against hand-computed results; indices from data that fall outside the
 * tensor are QP_ERR_BAD_INPUT at run, bad attributes and shapes clear errors at prepare. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kharness.h"

static void test_gathernd(void **state) {
    (void)state;
    /* data [2,2,2], indices [2,1,2] pick rows: output [2,1,2] */
    float x[8] = {0, 1, 2, 3, 4, 5, 6, 7}, y[4];
    int64_t idx[4] = {0, 1, 1, 0};
    int64_t dx[3] = {2, 2, 2}, di[3] = {2, 1, 2};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 3, dx, x), I = kh_t(QP_DTYPE_INT64, 3, di, idx), Y = {0};
    struct kh_call c = KH_CALL("GatherND", 13, NULL, 0, &Y, y, &X, &I);
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(Y.rank, 3);
    assert_int_equal(Y.dims[2], 2);
    const float want[4] = {2, 3, 4, 5};
    assert_memory_equal(y, want, sizeof want);
    /* negative index wraps; out of range is a run-time error */
    idx[1] = -1;
    assert_int_equal(kh_run(&c), QP_OK);
    assert_true(y[0] == 2 && y[1] == 3);
    idx[3] = 2;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(c.err.msg, "out of range"));
    /* batch_dims=1: data [2,2,2], indices [2,1] -> output [2,2] */
    int64_t ib[2] = {1, 0}, dib[2] = {2, 1};
    struct qp_kt IB = kh_t(QP_DTYPE_INT64, 2, dib, ib);
    struct qp_attr bd = kh_int("batch_dims", 1);
    struct kh_call cb = KH_CALL("GatherND", 13, &bd, 1, &Y, y, &X, &IB);
    assert_int_equal(kh_run(&cb), QP_OK);
    assert_int_equal(Y.rank, 2);
    const float wantb[4] = {2, 3, 4, 5};
    assert_memory_equal(y, wantb, sizeof wantb);
    /* tuple longer than the data rank */
    int64_t dl[2] = {1, 4};
    struct qp_kt IL = kh_t(QP_DTYPE_INT64, 2, dl, idx);
    c.in[1] = &IL;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    /* float indices */
    struct qp_kt IF = kh_t(QP_DTYPE_FLOAT, 3, di, x);
    c.in[1] = &IF;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
}

static void test_scatter_elements(void **state) {
    (void)state;
    float x[5] = {1, 2, 3, 4, 5}, u[3] = {10, 20, 30}, y[5];
    int64_t idx[3] = {1, 1, -1};
    int64_t dx[2] = {1, 5}, di[2] = {1, 3};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 2, dx, x), I = kh_t(QP_DTYPE_INT64, 2, di, idx),
                 U = kh_t(QP_DTYPE_FLOAT, 2, di, u), Y = {0};
    struct qp_attr a[2] = {kh_int("axis", 1), kh_str("reduction", "none")};
    struct kh_call c = KH_CALL("ScatterElements", 18, a, 2, &Y, y, &X, &I, &U);
    assert_int_equal(kh_run(&c), QP_OK);
    const float w_none[5] = {1, 20, 3, 4, 30}; /* duplicates: the last write wins */
    assert_memory_equal(y, w_none, sizeof w_none);
    a[1] = kh_str("reduction", "add");
    assert_int_equal(kh_run(&c), QP_OK);
    const float w_add[5] = {1, 32, 3, 4, 35};
    assert_memory_equal(y, w_add, sizeof w_add);
    a[1] = kh_str("reduction", "mul");
    assert_int_equal(kh_run(&c), QP_OK);
    const float w_mul[5] = {1, 400, 3, 4, 150};
    assert_memory_equal(y, w_mul, sizeof w_mul);
    a[1] = kh_str("reduction", "max");
    u[1] = -7;
    assert_int_equal(kh_run(&c), QP_OK);
    const float w_max[5] = {1, 10, 3, 4, 30};
    assert_memory_equal(y, w_max, sizeof w_max);
    a[1] = kh_str("reduction", "min");
    assert_int_equal(kh_run(&c), QP_OK);
    const float w_min[5] = {1, -7, 3, 4, 5};
    assert_memory_equal(y, w_min, sizeof w_min);
    a[1] = kh_str("reduction", "avg");
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(c.err.msg, "avg"));
    a[1] = kh_str("reduction", "none");
    idx[0] = 5;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    idx[0] = -6;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    idx[0] = 0;
    /* int64 add wraps instead of overflowing */
    int64_t xi[5] = {INT64_MAX, 0, 0, 0, 0}, ui[3] = {1, 0, 0}, yi[5];
    int64_t idx2[3] = {0, 1, 2};
    struct qp_kt XI = kh_t(QP_DTYPE_INT64, 2, dx, xi), UI = kh_t(QP_DTYPE_INT64, 2, di, ui),
                 I2 = kh_t(QP_DTYPE_INT64, 2, di, idx2);
    a[1] = kh_str("reduction", "add");
    struct kh_call ci = KH_CALL("ScatterElements", 18, a, 2, &Y, yi, &XI, &I2, &UI);
    assert_int_equal(kh_run(&ci), QP_OK);
    assert_true(yi[0] == INT64_MIN);
    /* reductions need numbers */
    uint8_t xb[5] = {0}, ub[3] = {1, 1, 1}, yb[5];
    struct qp_kt XB = kh_t(QP_DTYPE_BOOL, 2, dx, xb), UB = kh_t(QP_DTYPE_BOOL, 2, di, ub);
    struct kh_call cbool = KH_CALL("ScatterElements", 18, a, 2, &Y, yb, &XB, &I2, &UB);
    assert_int_equal(kh_run(&cbool), QP_ERR_UNSUPPORTED);
    /* updates of another dtype */
    c.in[2] = &UI;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    /* opset-10 Scatter: same kernel, no reduction attribute */
    struct qp_attr ax = kh_int("axis", 1);
    struct kh_call cs = KH_CALL("Scatter", 10, &ax, 1, &Y, y, &X, &I2, &U);
    u[1] = 20;
    assert_int_equal(kh_run(&cs), QP_OK);
    const float w_s[5] = {10, 20, 30, 4, 5};
    assert_memory_equal(y, w_s, sizeof w_s);
}

static void test_scatternd(void **state) {
    (void)state;
    /* data [2,3], indices [[1]] replace row 1; [[0,2]] one element */
    float x[6] = {1, 2, 3, 4, 5, 6}, u[3] = {7, 8, 9}, y[6];
    int64_t idx[1] = {1}, dx[2] = {2, 3}, di[2] = {1, 1}, du[2] = {1, 3};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 2, dx, x), I = kh_t(QP_DTYPE_INT64, 2, di, idx),
                 U = kh_t(QP_DTYPE_FLOAT, 2, du, u), Y = {0};
    struct qp_attr red = kh_str("reduction", "none");
    struct kh_call c = KH_CALL("ScatterND", 18, &red, 1, &Y, y, &X, &I, &U);
    assert_int_equal(kh_run(&c), QP_OK);
    const float w1[6] = {1, 2, 3, 7, 8, 9};
    assert_memory_equal(y, w1, sizeof w1);
    red = kh_str("reduction", "mul");
    assert_int_equal(kh_run(&c), QP_OK);
    const float w2[6] = {1, 2, 3, 28, 40, 54};
    assert_memory_equal(y, w2, sizeof w2);
    idx[0] = 2;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    idx[0] = 1;
    /* updates of the wrong shape */
    int64_t dbad[2] = {1, 2};
    struct qp_kt UB = kh_t(QP_DTYPE_FLOAT, 2, dbad, u);
    c.in[2] = &UB;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(c.err.msg, "updates shape"));
}

static void test_onehot(void **state) {
    (void)state;
    int64_t idx[4] = {0, 2, -1, 7}, di[1] = {4};
    float depth = 3, vals[2] = {-1, 5}, y[12];
    int64_t dd[1] = {1}, dv[1] = {2};
    struct qp_kt I = kh_t(QP_DTYPE_INT64, 1, di, idx), D = kh_t(QP_DTYPE_FLOAT, 0, dd, &depth),
                 V = kh_t(QP_DTYPE_FLOAT, 1, dv, vals), Y = {0};
    struct qp_attr ax = kh_int("axis", 0);
    struct kh_call c = KH_CALL("OneHot", 11, &ax, 1, &Y, y, &I, &D, &V);
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(Y.rank, 2);
    assert_int_equal(Y.dims[0], 3);
    assert_int_equal(Y.dims[1], 4);
    /* axis 0: y[d][i]; -1 wraps to 2; 7 is out of range: all off */
    const float want[12] = {5, -1, -1, -1, -1, -1, -1, -1, -1, 5, 5, -1};
    assert_memory_equal(y, want, sizeof want);
    /* depth must be known at plan time, positive */
    D.is_const = 0;
    assert_int_equal(kh_run(&c), QP_ERR_UNSUPPORTED);
    D.is_const = 1;
    depth = 0;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    depth = NAN;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    depth = 3;
    int64_t dv3[1] = {3};
    struct qp_kt V3 = kh_t(QP_DTYPE_FLOAT, 1, dv3, y);
    c.in[2] = &V3;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    c.in[2] = &V;
    ax = kh_int("axis", 2);
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
}

static void test_nonzero(void **state) {
    (void)state;
    float x[6] = {0, 1, -0.0f, NAN, 0, 2};
    int64_t dx[2] = {2, 3}, y[6];
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 2, dx, x), Y = {0};
    struct kh_call c = KH_CALL("NonZero", 13, NULL, 0, &Y, y, &X);
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(Y.dims[0], 2);
    assert_int_equal(Y.dims[1], 3); /* 1, NaN and 2; -0.0 is zero */
    const int64_t want[6] = {0, 1, 1, 1, 0, 2};
    assert_memory_equal(y, want, sizeof want);
    X.is_const = 0;
    assert_int_equal(kh_run(&c), QP_ERR_UNSUPPORTED);
}

static void test_compress(void **state) {
    (void)state;
    float x[6] = {1, 2, 3, 4, 5, 6}, y[6];
    uint8_t cond[3] = {0, 1, 1};
    int64_t dx[2] = {3, 2}, dc[1] = {3};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 2, dx, x), C = kh_t(QP_DTYPE_BOOL, 1, dc, cond), Y = {0};
    struct qp_attr ax = kh_int("axis", 0);
    struct kh_call c = KH_CALL("Compress", 11, &ax, 1, &Y, y, &X, &C);
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(Y.dims[0], 2);
    const float want[4] = {3, 4, 5, 6};
    assert_memory_equal(y, want, sizeof want);
    /* no axis: the flattened input; a shorter condition drops the rest */
    c.n_attrs = 0;
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(Y.rank, 1);
    assert_int_equal(Y.dims[0], 2);
    assert_true(y[0] == 2 && y[1] == 3);
    /* longer than the axis */
    c.n_attrs = 1;
    ax = kh_int("axis", 1);
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    /* not bool, not constant */
    struct qp_kt CF = kh_t(QP_DTYPE_FLOAT, 1, dc, x);
    c.in[1] = &CF;
    ax = kh_int("axis", 0);
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    c.in[1] = &C;
    C.is_const = 0;
    assert_int_equal(kh_run(&c), QP_ERR_UNSUPPORTED);
}

static void test_reverse_sequence(void **state) {
    (void)state;
    /* [time 3, batch 2, 2]: batch 0 reverses 3 steps, batch 1 reverses 2 */
    int16_t x[12], y[12];
    for (int i = 0; i < 12; i++)
        x[i] = (int16_t)i;
    int64_t lens[2] = {3, 2}, dx[3] = {3, 2, 2}, dl[1] = {2};
    struct qp_kt X = kh_t(QP_DTYPE_INT16, 3, dx, x), L = kh_t(QP_DTYPE_INT64, 1, dl, lens), Y = {0};
    struct qp_attr a[2] = {kh_int("batch_axis", 1), kh_int("time_axis", 0)};
    struct kh_call c = KH_CALL("ReverseSequence", 10, a, 2, &Y, y, &X, &L);
    assert_int_equal(kh_run(&c), QP_OK);
    /* element (t, b, k) = t*4 + b*2 + k */
    const int16_t want[12] = {8, 9, 6, 7, 4, 5, 2, 3, 0, 1, 10, 11};
    assert_memory_equal(y, want, sizeof want);
    lens[1] = 4;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    lens[1] = -1;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    lens[1] = 2;
    a[0] = kh_int("batch_axis", 0);
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
}

static void test_maxunpool(void **state) {
    (void)state;
    float x[4] = {5, 6, 7, 8}, y[25];
    int64_t idx[4] = {5, 7, 13, 15}, dx[4] = {1, 1, 2, 2}, os[4] = {1, 1, 5, 5}, d4[1] = {4};
    static const int64_t ks[2] = {2, 2}, st[2] = {2, 2};
    struct qp_attr a[2] = {kh_ints("kernel_shape", ks, 2), kh_ints("strides", st, 2)};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 4, dx, x), I = kh_t(QP_DTYPE_INT64, 4, dx, idx),
                 OS = kh_t(QP_DTYPE_INT64, 1, d4, os), Y = {0};
    struct kh_call c = KH_CALL("MaxUnpool", 11, a, 2, &Y, y, &X, &I, &OS);
    c.n_in = 2;
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(Y.dims[2], 4);
    for (int i = 0; i < 16; i++)
        assert_true(y[i] == (i == 5 ? 5 : i == 7 ? 6 : i == 13 ? 7 : i == 15 ? 8 : 0));
    /* a larger output_shape keeps the coordinates of the default 4x4 layout */
    c.n_in = 3;
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(Y.dims[2], 5);
    for (int i = 0; i < 25; i++)
        assert_true(y[i] == (i == 6 ? 5 : i == 8 ? 6 : i == 16 ? 7 : i == 18 ? 8 : 0));
    os[2] = 3;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    os[2] = 5;
    OS.is_const = 0;
    assert_int_equal(kh_run(&c), QP_ERR_UNSUPPORTED);
    c.n_in = 2;
    idx[3] = 16;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    idx[3] = -1;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
}

static void test_unique(void **state) {
    (void)state;
    float x[7] = {2, 1, NAN, 2, -3, NAN, 1}, y[7];
    int64_t first[7], inv[7], cnt[7], dx[1] = {7};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 1, dx, x), Y = {0}, F = {0}, V = {0}, C = {0};
    struct kh_call c = kh_call_io("Unique", 11, NULL, 0, KH_INS(&X), KH_OUTS(&Y, &F, &V, &C),
                                  KH_DATA(y, first, inv, cnt));
    assert_int_equal(kh_run(&c), QP_OK);
    /* sorted: -3, 1, 2, NaN (NaNs collapse and go last) */
    assert_int_equal(Y.dims[0], 4);
    assert_true(y[0] == -3 && y[1] == 1 && y[2] == 2 && isnan(y[3]));
    const int64_t wf[4] = {4, 1, 0, 2}, wi[7] = {2, 1, 3, 2, 0, 3, 1}, wc[4] = {1, 2, 2, 2};
    assert_memory_equal(first, wf, sizeof wf);
    assert_memory_equal(inv, wi, sizeof wi);
    assert_memory_equal(cnt, wc, sizeof wc);
    /* first-occurrence order */
    struct qp_attr so = kh_int("sorted", 0);
    c.attrs = &so;
    c.n_attrs = 1;
    assert_int_equal(kh_run(&c), QP_OK);
    assert_true(y[0] == 2 && y[1] == 1 && isnan(y[2]) && y[3] == -3);
    const int64_t wi2[7] = {0, 1, 2, 0, 3, 2, 1};
    assert_memory_equal(inv, wi2, sizeof wi2);
    /* rows of a matrix (axis 0) */
    int32_t m[6] = {1, 2, 0, 5, 1, 2}, ym[6];
    int64_t dm[2] = {3, 2};
    struct qp_kt XM = kh_t(QP_DTYPE_INT32, 2, dm, m);
    struct qp_attr ax = kh_int("axis", 0);
    struct kh_call cm = KH_CALL("Unique", 11, &ax, 1, &Y, ym, &XM);
    assert_int_equal(kh_run(&cm), QP_OK);
    assert_int_equal(Y.dims[0], 2);
    const int32_t wm[4] = {0, 5, 1, 2};
    assert_memory_equal(ym, wm, sizeof wm);
    XM.is_const = 0;
    assert_int_equal(kh_run(&cm), QP_ERR_UNSUPPORTED);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gathernd),         cmocka_unit_test(test_scatter_elements),
        cmocka_unit_test(test_scatternd),        cmocka_unit_test(test_onehot),
        cmocka_unit_test(test_nonzero),          cmocka_unit_test(test_compress),
        cmocka_unit_test(test_reverse_sequence), cmocka_unit_test(test_maxunpool),
        cmocka_unit_test(test_unique),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
