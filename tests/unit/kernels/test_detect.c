/* detect.c and sample.c: NonMaxSuppression (ordering, ties, IoU threshold, per-class limit,
 * zero-area boxes, plan-time inputs), RoiAlign (a constant map gives the constant, bad batch
 * index is QP_ERR_BAD_INPUT at run, max mode refused), GridSample (identity grid, padding
 * modes against hand values, 1 vs 2 threads bit for bit). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kharness.h"

static void test_nms(void **state) {
    (void)state;
    /* boxes (y1, x1, y2, x2): 0 and 1 overlap heavily (IoU 0.81), 2 is apart, 3 has no area */
    float boxes[16] = {0, 0, 10, 10, 1, 1, 10, 10, 20, 20, 30, 30, 5, 5, 5, 9};
    float scores[8] = {0.9f, 0.95f, 0.5f, 0.99f, /* class 1: */ 0.3f, 0.3f, 0.1f, 0.3f};
    int64_t maxo = 10, out[24];
    float iou = 0.5f, thr = 0.2f;
    int64_t db[3] = {1, 4, 4}, ds[3] = {1, 2, 4}, d1[1] = {1};
    struct qp_kt B = kh_t(QP_DTYPE_FLOAT, 3, db, boxes), S = kh_t(QP_DTYPE_FLOAT, 3, ds, scores),
                 M = kh_t(QP_DTYPE_INT64, 1, d1, &maxo), I = kh_t(QP_DTYPE_FLOAT, 1, d1, &iou),
                 T = kh_t(QP_DTYPE_FLOAT, 1, d1, &thr), Y = {0};
    struct kh_call c = KH_CALL("NonMaxSuppression", 11, NULL, 0, &Y, out, &B, &S, &M, &I, &T);
    assert_int_equal(kh_run(&c), QP_OK);
    /* class 0: 3 (0.99, no area: never suppresses), 1 (0.95) suppresses 0, then 2;
     * class 1: ties at 0.3 in index order 0, 1 (suppressed by 0), 3; 2 is below 0.2 */
    assert_int_equal(Y.dims[0], 5);
    const int64_t want[15] = {0, 0, 3, 0, 0, 1, 0, 0, 2, 0, 1, 0, 0, 1, 3};
    assert_memory_equal(out, want, sizeof want);
    /* per-class limit */
    maxo = 1;
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(Y.dims[0], 2);
    assert_true(out[2] == 3 && out[5] == 0);
    /* center format: (xc, yc, w, h) */
    maxo = 10;
    struct qp_attr cp = kh_int("center_point_box", 1);
    c.attrs = &cp;
    c.n_attrs = 1;
    float cboxes[16] = {5, 5, 10, 10, 5.5f, 5.5f, 9, 9, 25, 25, 10, 10, 7, 5, 4, 0};
    B.data = cboxes;
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(Y.dims[0], 5);
    assert_memory_equal(out, want, sizeof want);
    /* plan-time values and shapes */
    B.is_const = 0;
    assert_int_equal(kh_run(&c), QP_ERR_UNSUPPORTED);
    B.is_const = 1;
    cp = kh_int("center_point_box", 2);
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    c.n_attrs = 0;
    iou = 1.5f;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    iou = 0.5f;
    int64_t dbad[3] = {1, 3, 4};
    struct qp_kt BB = kh_t(QP_DTYPE_FLOAT, 3, dbad, boxes);
    c.in[0] = &BB;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    /* no max_output_boxes_per_class: nothing is selected */
    c.in[0] = &B;
    c.n_in = 2;
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(Y.dims[0], 0);
}

static void test_roialign(void **state) {
    (void)state;
    float x[2 * 1 * 4 * 4], y[2 * 3 * 3];
    for (int i = 0; i < 16; i++) {
        x[i] = 2.5f;                /* batch 0: constant */
        x[16 + i] = (float)(i % 4); /* batch 1: x coordinate */
    }
    float rois[8] = {0.5f, 0.5f, 2.5f, 2.5f, 0, 0, 3, 3};
    int64_t bi[2] = {0, 1};
    int64_t dx[4] = {2, 1, 4, 4}, dr[2] = {2, 4}, db[1] = {2};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 4, dx, x), R = kh_t(QP_DTYPE_FLOAT, 2, dr, rois),
                 BI = kh_t(QP_DTYPE_INT64, 1, db, bi), Y = {0};
    struct qp_attr a[4] = {kh_int("output_height", 3), kh_int("output_width", 3),
                           kh_int("sampling_ratio", 2),
                           kh_str("coordinate_transformation_mode", "output_half_pixel")};
    struct kh_call c = KH_CALL("RoiAlign", 16, a, 4, &Y, y, &X, &R, &BI);
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(Y.dims[0], 2);
    assert_int_equal(Y.dims[2], 3);
    for (int i = 0; i < 9; i++)
        assert_true(fabs(y[i] - 2.5f) < 1e-6);
    /* on the ramp, bilinear sampling is exact: bin column pw covers x in [pw, pw + 1] */
    for (int ph = 0; ph < 3; ph++)
        for (int pw = 0; pw < 3; pw++)
            assert_true(fabs(y[9 + ph * 3 + pw] - (pw + 0.5)) < 1e-5);
    bi[1] = 2;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(c.err.msg, "batch_indices"));
    bi[1] = 1;
    a[3] = kh_str("mode", "max");
    assert_int_equal(kh_run(&c), QP_ERR_UNSUPPORTED);
    a[3] = kh_str("coordinate_transformation_mode", "corners");
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
}

static void test_gridsample(void **state) {
    (void)state;
    float x[2 * 3] = {1, 2, 3, 4, 5, 6}, y[4];
    int64_t dx[4] = {1, 1, 2, 3}, dg[4] = {1, 1, 4, 2};
    /* align_corners=1: (-1,-1) is pixel (0,0), (1,1) pixel (1,2); far outside */
    float g[8] = {-1, -1, 1, 1, 0, -1, 3, 0};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 4, dx, x), G = kh_t(QP_DTYPE_FLOAT, 4, dg, g), Y = {0};
    struct qp_attr a[3] = {kh_int("align_corners", 1), kh_str("mode", "bilinear"),
                           kh_str("padding_mode", "zeros")};
    struct kh_call c = KH_CALL("GridSample", 16, a, 3, &Y, y, &X, &G);
    assert_int_equal(kh_run(&c), QP_OK);
    assert_true(fabsf(y[0] - 1) < 1e-6 && fabsf(y[1] - 6) < 1e-6 && fabsf(y[2] - 2) < 1e-6);
    /* x = 3 -> column 4: two columns beyond the last; zeros padding reads 0 there */
    assert_true(fabsf(y[3]) < 1e-6);
    a[2] = kh_str("padding_mode", "border"); /* clamps to column 2, row 0.5: (3 + 6) / 2 */
    assert_int_equal(kh_run(&c), QP_OK);
    assert_true(fabsf(y[3] - 4.5f) < 1e-6);
    a[2] = kh_str("padding_mode", "reflection"); /* column 4 reflects to column 0 */
    assert_int_equal(kh_run(&c), QP_OK);
    assert_true(fabsf(y[3] - 2.5f) < 1e-6);
    a[1] = kh_str("mode", "nearest");
    a[2] = kh_str("padding_mode", "zeros");
    assert_int_equal(kh_run(&c), QP_OK);
    assert_true(y[0] == 1 && y[1] == 6 && y[2] == 2 && y[3] == 0);
    a[1] = kh_str("mode", "bicubic");
    assert_int_equal(kh_run(&c), QP_OK);
    assert_true(fabsf(y[0] - 1) < 1e-5 && fabsf(y[1] - 6) < 1e-5);
    a[1] = kh_str("mode", "area");
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    a[1] = kh_str("mode", "bilinear");
    a[2] = kh_str("padding_mode", "wrap");
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    int64_t dgb[4] = {1, 2, 2, 3};
    struct qp_kt GB = kh_t(QP_DTYPE_FLOAT, 4, dgb, g);
    c.in[1] = &GB;
    a[2] = kh_str("padding_mode", "zeros");
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
}

static void test_gridsample_threads(void **state) {
    (void)state;
    enum { C = 8, H = 32, W = 32, OH = 24, OW = 24 };
    float *x = kh_alloc(sizeof(float) * C * H * W), *g = kh_alloc(sizeof(float) * OH * OW * 2);
    float *y1 = kh_alloc(sizeof(float) * C * OH * OW), *y2 = kh_alloc(sizeof(float) * C * OH * OW);
    for (int i = 0; i < C * H * W; i++)
        x[i] = (float)((i * 7919) % 1009) / 500.0f - 1.0f;
    for (int i = 0; i < OH * OW * 2; i++)
        g[i] = (float)((i * 104729) % 2203) / 1000.0f - 1.1f;
    int64_t dx[4] = {1, C, H, W}, dg[4] = {1, OH, OW, 2};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 4, dx, x), G = kh_t(QP_DTYPE_FLOAT, 4, dg, g), Y = {0};
    struct qp_attr a = kh_str("mode", "bicubic");
    struct kh_call c = KH_CALL("GridSample", 16, &a, 1, &Y, y1, &X, &G);
    kh_run_threads(&c, y1, y2, sizeof(float) * C * OH * OW);
    free(x);
    free(g);
    free(y1);
    free(y2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nms),
        cmocka_unit_test(test_roialign),
        cmocka_unit_test(test_gridsample),
        cmocka_unit_test(test_gridsample_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
