/* Unit tests of numbers as text that reads back exactly (core/numtext.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "core/numtext.h"

/* A latency sample (ms) whose %.15g text reads back one ulp away: cJSON keeps that text (it
 * compares within an epsilon), qp_double_text does not. */
static void test_cjson_loses_what_this_keeps(void **state) {
    (void)state;
    const double v = 0.07818873094883069;
    cJSON *n = cJSON_CreateNumber(v);
    char *s = cJSON_PrintUnformatted(n);
    assert_non_null(s);
    assert_true(strtod(s, NULL) != v); /* the loss the state file had */
    char b[QP_DOUBLE_TEXT];
    assert_true(strtod(qp_double_text(v, b), NULL) == v);
    assert_true(strlen(b) > strlen(s));
    free(s);
    cJSON_Delete(n);
}

static void test_short_when_it_can_be(void **state) {
    (void)state;
    char b[QP_DOUBLE_TEXT];
    assert_string_equal(qp_double_text(0.1, b), "0.1");
    assert_string_equal(qp_double_text(0.0, b), "0");
    assert_string_equal(qp_double_text(-2.5, b), "-2.5");
    assert_string_equal(qp_double_text(1e300, b), "1e+300");
}

/* Every bit pattern class reads back: random doubles over the whole exponent range, their
 * neighbours, subnormals and the extremes. */
static void test_reads_back_bit_for_bit(void **state) {
    (void)state;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    char b[QP_DOUBLE_TEXT];
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double v;
        memcpy(&v, &x, sizeof v);
        if (v != v || v - v != 0) continue; /* NaN, infinities */
        double back = strtod(qp_double_text(v, b), NULL);
        assert_memory_equal(&back, &v, sizeof v);
    }
    const double edge[] = {
        5e-324, 2.2250738585072009e-308, 2.2250738585072014e-308, 1.7976931348623157e308,
        -0.0,   0.30000000000000004};
    for (size_t i = 0; i < sizeof edge / sizeof *edge; i++) {
        double back = strtod(qp_double_text(edge[i], b), NULL);
        assert_memory_equal(&back, &edge[i], sizeof back);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cjson_loses_what_this_keeps),
        cmocka_unit_test(test_short_when_it_can_be),
        cmocka_unit_test(test_reads_back_bit_for_bit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
