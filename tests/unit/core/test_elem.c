/* core/elem.h: integer elements by dtype, including packed int4/uint4 and bool. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "core/elem.h"

/* Every integer type stores and reads back values at its limits, truncating like a C cast. */
static void test_roundtrip(void **state) {
    (void)state;
    static const struct {
        enum qp_dtype dt;
        int64_t in, out;
    } cases[] = {
        {QP_DTYPE_INT8, -128, -128},
        {QP_DTYPE_INT8, 200, -56},
        {QP_DTYPE_UINT8, 255, 255},
        {QP_DTYPE_UINT8, -1, 255},
        {QP_DTYPE_BOOL, 7, 1},
        {QP_DTYPE_BOOL, 0, 0},
        {QP_DTYPE_INT16, -32768, -32768},
        {QP_DTYPE_UINT16, 65535, 65535},
        {QP_DTYPE_INT32, INT32_MIN, INT32_MIN},
        {QP_DTYPE_UINT32, 4294967295LL, 4294967295LL},
        {QP_DTYPE_INT64, INT64_MIN, INT64_MIN},
        {QP_DTYPE_UINT64, -1, -1},
        {QP_DTYPE_INT4, -8, -8},
        {QP_DTYPE_INT4, 7, 7},
        {QP_DTYPE_INT4, 9, -7},
        {QP_DTYPE_UINT4, 15, 15},
        {QP_DTYPE_UINT4, 16, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        uint8_t buf[32];
        memset(buf, 0xA5, sizeof buf);
        assert_int_equal(qp_elem_set_int(cases[k].dt, buf, 1, cases[k].in), 1);
        int64_t v = 12345;
        assert_int_equal(qp_elem_get_int(cases[k].dt, buf, 1, &v), 1);
        assert_true(v == cases[k].out);
    }
}

/* Nibbles: element 0 in the low half, the neighbour kept on a store. */
static void test_int4_packing(void **state) {
    (void)state;
    uint8_t b[2] = {0, 0};
    assert_int_equal(qp_elem_set_int(QP_DTYPE_INT4, b, 0, -1), 1);
    assert_int_equal(qp_elem_set_int(QP_DTYPE_INT4, b, 1, 3), 1);
    assert_int_equal(qp_elem_set_int(QP_DTYPE_UINT4, b, 2, 10), 1);
    assert_int_equal(b[0], 0x3F);
    assert_int_equal(b[1], 0x0A);
    assert_int_equal(qp_elem_set_int(QP_DTYPE_INT4, b, 0, 2), 1);
    assert_int_equal(b[0], 0x32);
    int64_t v;
    assert_int_equal(qp_elem_get_int(QP_DTYPE_UINT4, b, 1, &v), 1);
    assert_true(v == 3);
}

/* Float types are not integers: nothing read, nothing written. */
static void test_non_integer(void **state) {
    (void)state;
    static const enum qp_dtype dts[] = {QP_DTYPE_FLOAT,        QP_DTYPE_DOUBLE,
                                        QP_DTYPE_FLOAT16,      QP_DTYPE_BFLOAT16,
                                        QP_DTYPE_FLOAT8E4M3FN, QP_DTYPE_FLOAT8E5M2};
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
        uint8_t buf[16];
        memset(buf, 0x11, sizeof buf);
        int64_t v = 99;
        assert_int_equal(qp_elem_get_int(dts[k], buf, 0, &v), 0);
        assert_true(v == 99);
        assert_int_equal(qp_elem_set_int(dts[k], buf, 0, 5), 0);
        for (size_t i = 0; i < sizeof buf; i++)
            assert_int_equal(buf[i], 0x11);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_int4_packing),
        cmocka_unit_test(test_non_integer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
