/* Unit tests of src/qmath/qparams: rounding, saturation, per-tensor/per-axis/blocked layouts,
 * int4 packing, FP8, and fake quantization being bit-identical to quantize + dequantize. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "qmath/qparams.h"

static void test_round_half_even(void **state) {
    (void)state;
    assert_true(qp_round_half_even(0.5f) == 0.0f);
    assert_true(qp_round_half_even(1.5f) == 2.0f);
    assert_true(qp_round_half_even(2.5f) == 2.0f);
    assert_true(qp_round_half_even(-0.5f) == -0.0f);
    assert_true(qp_round_half_even(-1.5f) == -2.0f);
    assert_true(qp_round_half_even(-2.5f) == -2.0f);
    assert_true(qp_round_half_even(2.4999998f) == 2.0f);
    assert_true(qp_round_half_even(1e10f) == 1e10f);
}

static void test_int8_per_tensor(void **state) {
    (void)state;
    float scale = 0.5f;
    int8_t zp = 3;
    struct qp_qspec s = {.qtype = QP_DTYPE_INT8,
                         .outer = 1,
                         .axis_len = 1,
                         .inner = 6,
                         .n_params = 1,
                         .scale = &scale,
                         .zero_point = &zp};
    assert_int_equal(qp_qspec_check(&s, NULL), QP_OK);
    const float x[6] = {0.25f, 0.75f, -1000.0f, 1000.0f, 1.0f, -0.25f};
    int8_t q[6];
    qp_quantize_f32(&s, x, q, 0, 6);
    /* 0.25/0.5 = 0.5 -> 0 (even) + 3; 0.75/0.5 = 1.5 -> 2 + 3; saturation; 2 + 3; -0.5 -> -0 + 3 */
    const int8_t want[6] = {3, 5, -128, 127, 5, 3};
    assert_memory_equal(q, want, sizeof want);
    float y[6];
    qp_dequantize_f32(&s, q, y, 0, 6);
    assert_true(y[1] == 1.0f && y[2] == -65.5f && y[3] == 62.0f);
    float f[6];
    qp_fake_quantize_f32(&s, x, f, 0, 6);
    assert_memory_equal(f, y, sizeof y);
}

static void test_uint8_per_axis_and_blocked(void **state) {
    (void)state;
    /* x is 2x4, axis 1 per-axis (4 params) */
    const float x[8] = {1, 2, 3, 4, -1, -2, -3, -4};
    const float sc[4] = {1, 2, 4, 8};
    const uint8_t zp[4] = {128, 128, 128, 128};
    struct qp_qspec s = {.qtype = QP_DTYPE_UINT8,
                         .outer = 2,
                         .axis_len = 4,
                         .inner = 1,
                         .n_params = 4,
                         .scale = sc,
                         .zero_point = zp};
    assert_int_equal(qp_qspec_check(&s, NULL), QP_OK);
    uint8_t q[8];
    qp_quantize_f32(&s, x, q, 0, 8);
    const uint8_t want[8] = {129, 129, 129, 128, 127, 127, 127, 128}; /* 0.5 -> 0 */
    assert_memory_equal(q, want, sizeof want);
    /* blocked along axis 1 with block 2: params [2 x 2] */
    const float bsc[4] = {1, 10, 100, 1000};
    struct qp_qspec b = {.qtype = QP_DTYPE_INT8,
                         .outer = 2,
                         .axis_len = 4,
                         .inner = 1,
                         .block = 2,
                         .n_params = 4,
                         .scale = bsc};
    assert_int_equal(qp_qspec_check(&b, NULL), QP_OK);
    assert_int_equal(qp_qspec_param(&b, 0), 0);
    assert_int_equal(qp_qspec_param(&b, 3), 1);
    assert_int_equal(qp_qspec_param(&b, 5), 2);
    assert_int_equal(qp_qspec_param(&b, 7), 3);
    b.n_params = 3;
    assert_int_equal(qp_qspec_check(&b, NULL), QP_ERR_BAD_INPUT);
}

static void test_int4_packing(void **state) {
    (void)state;
    float scale = 1.0f;
    struct qp_qspec s = {.qtype = QP_DTYPE_INT4,
                         .outer = 1,
                         .axis_len = 1,
                         .inner = 5,
                         .n_params = 1,
                         .scale = &scale};
    const float x[5] = {-9, -8, 7, 8, 1};
    uint8_t q[3] = {0};
    qp_quantize_f32(&s, x, q, 0, 5);
    assert_int_equal(qp_int4_get(q, 0, 1), -8);
    assert_int_equal(qp_int4_get(q, 1, 1), -8);
    assert_int_equal(qp_int4_get(q, 2, 1), 7);
    assert_int_equal(qp_int4_get(q, 3, 1), 7);
    assert_int_equal(qp_int4_get(q, 4, 1), 1);
    assert_int_equal(q[0], 0x88); /* low nibble is element 0 */
    float y[5];
    qp_dequantize_f32(&s, q, y, 0, 5);
    assert_true(y[0] == -8.0f && y[2] == 7.0f && y[4] == 1.0f);
}

static void test_fp8(void **state) {
    (void)state;
    float scale = 1.0f;
    struct qp_qspec s = {.qtype = QP_DTYPE_FLOAT8E4M3FN,
                         .saturate = 1,
                         .outer = 1,
                         .axis_len = 1,
                         .inner = 3,
                         .n_params = 1,
                         .scale = &scale};
    const float x[3] = {1000.0f, -1000.0f, 1.0f};
    uint8_t q[3];
    qp_quantize_f32(&s, x, q, 0, 3);
    assert_true(qp_fp8_to_f32(QP_DTYPE_FLOAT8E4M3FN, q[0]) == 448.0f);
    assert_true(qp_fp8_to_f32(QP_DTYPE_FLOAT8E4M3FN, q[1]) == -448.0f);
    assert_true(qp_fp8_to_f32(QP_DTYPE_FLOAT8E4M3FN, q[2]) == 1.0f);
    float f[3], y[3];
    qp_dequantize_f32(&s, q, y, 0, 3);
    qp_fake_quantize_f32(&s, x, f, 0, 3);
    assert_memory_equal(f, y, sizeof y);
}

static void test_qparams_from_range(void **state) {
    (void)state;
    float sc;
    int32_t zp;
    assert_int_equal(qp_qparams_from_range(QP_DTYPE_INT8, -2.0f, 1.0f, 1, &sc, &zp, NULL), QP_OK);
    assert_true(sc == 2.0f / 127.0f && zp == 0);
    assert_int_equal(qp_qparams_from_range(QP_DTYPE_UINT8, 0.0f, 2.55f, 0, &sc, &zp, NULL), QP_OK);
    assert_int_equal(zp, 0);
    assert_int_equal(qp_qparams_from_range(QP_DTYPE_UINT8, 1.0f, 1.0f, 0, &sc, &zp, NULL), QP_OK);
    assert_int_equal(qp_qparams_from_range(QP_DTYPE_INT8, 1.0f, 0.0f, 0, &sc, &zp, NULL),
                     QP_ERR_BAD_INPUT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_half_even),
        cmocka_unit_test(test_int8_per_tensor),
        cmocka_unit_test(test_uint8_per_axis_and_blocked),
        cmocka_unit_test(test_int4_packing),
        cmocka_unit_test(test_fp8),
        cmocka_unit_test(test_qparams_from_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
