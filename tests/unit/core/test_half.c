/* core/half.h: the bulk fp16 conversions and rounding give the scalar ones' bits, for every fp16
 * value and for float32 values around every rounding boundary, NaN and infinity included, at every
 * length (the vector body and the scalar tail). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/half.h"
#include "qplace/dtype.h"

static void test_fp16_to_f32_all(void **state) {
    (void)state;
    uint16_t *h = malloc(65536 * sizeof *h);
    float *f = malloc(65536 * sizeof *f);
    assert_non_null(h);
    assert_non_null(f);
    for (uint32_t i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    qp_fp16_to_f32_n(h, f, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        float want = qp_fp16_to_f32((uint16_t)i);
        if (memcmp(&want, &f[i], sizeof want) != 0) fail_msg("fp16 0x%04x", i);
    }
    free(h);
    free(f);
}

/* n float bit patterns: for the first n_rounds * 65536, every fp16 value's float bits plus one
 * of two tails per round (tails[2 * round + a random bit]: the 13 dropped bits at and around
 * the halfway point); then pseudo-random floats (NaNs and infinities among them). */
static void patterns(uint32_t *u, uint32_t n, uint32_t seed, const uint32_t *tails,
                     uint32_t n_rounds) {
    uint32_t x = seed;
    for (uint32_t i = 0; i < n; i++) {
        float f = qp_fp16_to_f32((uint16_t)(i & 0xffff));
        uint32_t b;
        memcpy(&b, &f, sizeof b);
        x = x * 1664525u + 1013904223u;
        u[i] = (i >> 16) < n_rounds ? b + tails[(i >> 16) * 2 + (x & 1)] : x;
    }
}

static void test_f32_to_fp16_boundaries(void **state) {
    (void)state;
    enum { N = 1 << 20 };
    uint32_t *u = malloc(N * sizeof *u);
    uint16_t *h = malloc(N * sizeof *h);
    assert_non_null(u);
    assert_non_null(h);
    static const uint32_t tails[16] = {0,     1,     0xfff, 0x1000, 0x1001, 0x17ff, 0x1800, 0x1fff,
                                       0x800, 0x7ff, 0x801, 0xfff,  0x1,    0x2,    0x1ffe, 0x1000};
    patterns(u, N, 12345, tails, 8);
    qp_f32_to_fp16_n((const float *)u, h, N);
    for (uint32_t i = 0; i < N; i++) {
        float f;
        memcpy(&f, &u[i], sizeof f);
        if (h[i] != qp_f32_to_fp16(f))
            fail_msg("f32 0x%08x: bulk 0x%04x, scalar 0x%04x", u[i], h[i], qp_f32_to_fp16(f));
    }
    for (size_t n = 0; n < 20; n++) { /* tails */
        uint16_t t[20];
        qp_f32_to_fp16_n((const float *)u, t, n);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(t[i], h[i]);
    }
    free(u);
    free(h);
}

/* qp_round_fp16_n gives the scalar round trip's bits, in place too, at every length. */
static void test_round_fp16(void **state) {
    (void)state;
    enum { N = 1 << 20 };
    uint32_t *u = malloc(N * sizeof *u);
    float *r = malloc(N * sizeof *r);
    assert_non_null(u);
    assert_non_null(r);
    static const uint32_t tails[8] = {0, 0, 0x1000, 0x1000, 0xfff, 0xfff, 0x1001, 0x1001};
    patterns(u, N, 777, tails, 4);
    qp_round_fp16_n((const float *)u, r, N);
    for (uint32_t i = 0; i < N; i++) {
        float f, want;
        memcpy(&f, &u[i], sizeof f);
        want = qp_fp16_to_f32(qp_f32_to_fp16(f));
        if (memcmp(&want, &r[i], sizeof want) != 0)
            fail_msg("f32 0x%08x: bulk %a, scalar %a", u[i], (double)r[i], (double)want);
    }
    for (size_t n = 0; n < 40; n++) { /* tails, in place */
        float t[40];
        memcpy(t, u, sizeof t);
        qp_round_fp16_n(t, t, n);
        for (size_t i = 0; i < 40; i++)
            assert_memory_equal(&t[i], i < n ? (const void *)&r[i] : (const void *)&u[i], 4);
    }
    free(u);
    free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16_to_f32_all),
        cmocka_unit_test(test_f32_to_fp16_boundaries),
        cmocka_unit_test(test_round_fp16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
