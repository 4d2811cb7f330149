/* Dtype traits and the narrow float conversions (fp16, bf16, the four FP8 types).
 * Reference values come from fp8_table.h (computed from the ONNX bit layouts by
 * gen_fp8_table.py) and fp16_table.h (numpy's float16 conversion, gen_fp16_table.py). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qplace/dtype.h"

#include "fp16_table.h"
#include "fp8_table.h"

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

struct fp8_case {
    enum qp_dtype dt;
    const uint32_t *table;
    uint8_t max_code; /* largest finite positive code */
    int has_inf;
    int uz;
};

static const struct fp8_case fp8_types[] = {
    {QP_DTYPE_FLOAT8E4M3FN, fp8_e4m3fn_f32, 0x7e, 0, 0},
    {QP_DTYPE_FLOAT8E4M3FNUZ, fp8_e4m3fnuz_f32, 0x7f, 0, 1},
    {QP_DTYPE_FLOAT8E5M2, fp8_e5m2_f32, 0x7b, 1, 0},
    {QP_DTYPE_FLOAT8E5M2FNUZ, fp8_e5m2fnuz_f32, 0x7f, 0, 1},
};
#define N_FP8 (sizeof fp8_types / sizeof fp8_types[0])

/* ---- traits ---------------------------------------------------------------------------- */

static void test_traits(void **state) {
    (void)state;
    assert_int_equal(qp_dtype_valid(0), 0);
    assert_int_equal(qp_dtype_valid(-1), 0);
    assert_int_equal(qp_dtype_valid(1), 1);
    assert_int_equal(qp_dtype_valid(QP_DTYPE_COUNT - 1), 1);
    assert_int_equal(qp_dtype_valid(QP_DTYPE_COUNT), 0);
    for (int v = 0; v < QP_DTYPE_COUNT; v++) {
        const struct qp_dtype_traits *t = qp_dtype_traits((enum qp_dtype)v);
        assert_non_null(t);
        assert_non_null(t->name);
        assert_true(strlen(t->name) > 0);
        /* names are unique */
        for (int w = 0; w < v; w++)
            assert_string_not_equal(t->name, qp_dtype_name(w));
    }
    assert_string_equal(qp_dtype_name(QP_DTYPE_FLOAT), "float");
    assert_string_equal(qp_dtype_name(QP_DTYPE_FLOAT8E4M3FN), "float8e4m3fn");
    assert_string_equal(qp_dtype_name(QP_DTYPE_FLOAT8E5M2FNUZ), "float8e5m2fnuz");
    assert_string_equal(qp_dtype_name(QP_DTYPE_INT4), "int4");
    assert_string_equal(qp_dtype_name(QP_DTYPE_BFLOAT16), "bfloat16");
    assert_string_equal(qp_dtype_name((enum qp_dtype)99), "undefined");
    assert_string_equal(qp_dtype_name((enum qp_dtype) - 5), "undefined");

    const struct qp_dtype_traits *t = qp_dtype_traits(QP_DTYPE_FLOAT16);
    assert_int_equal(t->bits, 16);
    assert_int_equal(t->is_float, 1);
    assert_int_equal(t->is_integer, 0);
    t = qp_dtype_traits(QP_DTYPE_UINT4);
    assert_int_equal(t->bits, 4);
    assert_int_equal(t->is_integer, 1);
    assert_int_equal(t->is_signed, 0);
    t = qp_dtype_traits(QP_DTYPE_INT4);
    assert_int_equal(t->is_signed, 1);
    t = qp_dtype_traits(QP_DTYPE_BOOL);
    assert_int_equal(t->bits, 8);
    assert_int_equal(t->is_integer, 0);
    t = qp_dtype_traits(QP_DTYPE_STRING);
    assert_int_equal(t->bits, 0);
    t = qp_dtype_traits(QP_DTYPE_COMPLEX128);
    assert_int_equal(t->bits, 128);
    t = qp_dtype_traits(QP_DTYPE_FLOAT4E2M1);
    assert_int_equal(t->bits, 4);
    assert_int_equal(t->is_float, 1);
    for (size_t k = 0; k < N_FP8; k++) {
        t = qp_dtype_traits(fp8_types[k].dt);
        assert_int_equal(t->bits, 8);
        assert_int_equal(t->is_float, 1);
    }
}

static void test_nbytes(void **state) {
    (void)state;
    int ok = -1;
    assert_int_equal(qp_dtype_nbytes(QP_DTYPE_FLOAT, 3, &ok), 12);
    assert_int_equal(ok, 1);
    assert_int_equal(qp_dtype_nbytes(QP_DTYPE_INT64, 0, &ok), 0);
    assert_int_equal(ok, 1);
    assert_int_equal(qp_dtype_nbytes(QP_DTYPE_BOOL, 5, &ok), 5);
    assert_int_equal(qp_dtype_nbytes(QP_DTYPE_COMPLEX128, 2, &ok), 32);
    assert_int_equal(qp_dtype_nbytes(QP_DTYPE_FLOAT8E5M2, 7, &ok), 7);
    /* sub-byte types: two per byte, rounded up */
    static const enum qp_dtype packed[] = {QP_DTYPE_INT4, QP_DTYPE_UINT4, QP_DTYPE_FLOAT4E2M1};
    for (size_t k = 0; k < 3; k++) {
        assert_int_equal(qp_dtype_nbytes(packed[k], 0, &ok), 0);
        assert_int_equal(ok, 1);
        assert_int_equal(qp_dtype_nbytes(packed[k], 1, &ok), 1);
        assert_int_equal(qp_dtype_nbytes(packed[k], 2, &ok), 1);
        assert_int_equal(qp_dtype_nbytes(packed[k], 3, &ok), 2);
        assert_int_equal(qp_dtype_nbytes(packed[k], 17, &ok), 9);
        assert_int_equal(ok, 1);
        /* no wrap at the top of the range */
        size_t nb = qp_dtype_nbytes(packed[k], UINT64_MAX, &ok);
        if (sizeof(size_t) >= 8) {
            assert_int_equal(ok, 1);
            assert_true(nb == (size_t)(UINT64_MAX / 2 + 1));
        } else {
            assert_int_equal(ok, 0);
        }
    }
    /* overflow */
    ok = -1;
    assert_int_equal(qp_dtype_nbytes(QP_DTYPE_FLOAT, UINT64_MAX / 4 + 1, &ok), 0);
    assert_int_equal(ok, 0);
    ok = -1;
    assert_int_equal(qp_dtype_nbytes(QP_DTYPE_COMPLEX128, UINT64_MAX / 8, &ok), 0);
    assert_int_equal(ok, 0);
    ok = -1;
    assert_int_equal(qp_dtype_nbytes(QP_DTYPE_DOUBLE, (UINT64_MAX / 8) + 1, &ok), 0);
    assert_int_equal(ok, 0);
    assert_int_equal(qp_dtype_nbytes(QP_DTYPE_DOUBLE, UINT64_MAX / 8, &ok), UINT64_MAX / 8 * 8);
    assert_int_equal(ok, 1);
    /* strings and undefined/invalid types have no fixed size */
    ok = -1;
    assert_int_equal(qp_dtype_nbytes(QP_DTYPE_STRING, 4, &ok), 0);
    assert_int_equal(ok, 0);
    ok = -1;
    qp_dtype_nbytes(QP_DTYPE_UNDEFINED, 4, &ok);
    assert_int_equal(ok, 0);
    ok = -1;
    qp_dtype_nbytes((enum qp_dtype)77, 4, &ok);
    assert_int_equal(ok, 0);
}

/* ---- fp8 ------------------------------------------------------------------------------- */

static void test_fp8_decode_all_codes(void **state) {
    (void)state;
    for (size_t k = 0; k < N_FP8; k++) {
        const struct fp8_case *c = &fp8_types[k];
        int n_nan = 0;
        for (int v = 0; v < 256; v++) {
            float got = qp_fp8_to_f32(c->dt, (uint8_t)v);
            uint32_t want = c->table[v];
            if (want == FP8_TABLE_NAN) {
                if (!isnan(got))
                    fail_msg("%s code 0x%02x: want NaN, got %g", qp_dtype_name(c->dt), v, got);
                n_nan++;
            } else if (f2u(got) != want) {
                fail_msg("%s code 0x%02x: want %a (0x%08x), got %a (0x%08x)", qp_dtype_name(c->dt),
                         v, u2f(want), want, got, f2u(got));
            }
        }
        /* NaN counts from the spec: E4M3FN S.1111.111 (2), E5M2 S.11111.{01,10,11} (6),
         * FNUZ 0x80 only (1). */
        int want_nan = c->uz ? 1 : (c->has_inf ? 6 : 2);
        assert_int_equal(n_nan, want_nan);
        float mx = qp_fp8_to_f32(c->dt, c->max_code);
        float mn = qp_fp8_to_f32(c->dt, (uint8_t)(0x80 | c->max_code));
        assert_true(mx == -mn);
    }
    assert_true(qp_fp8_to_f32(QP_DTYPE_FLOAT8E4M3FN, 0x7e) == 448.0f);
    assert_true(qp_fp8_to_f32(QP_DTYPE_FLOAT8E4M3FNUZ, 0x7f) == 240.0f);
    assert_true(qp_fp8_to_f32(QP_DTYPE_FLOAT8E5M2, 0x7b) == 57344.0f);
    assert_true(qp_fp8_to_f32(QP_DTYPE_FLOAT8E5M2FNUZ, 0x7f) == 57344.0f);
    assert_true(isinf(qp_fp8_to_f32(QP_DTYPE_FLOAT8E5M2, 0x7c)));
    assert_true(qp_fp8_to_f32(QP_DTYPE_FLOAT8E5M2, 0xfc) < 0);
    /* smallest subnormals */
    assert_true(qp_fp8_to_f32(QP_DTYPE_FLOAT8E4M3FN, 0x01) == ldexpf(1, -9));
    assert_true(qp_fp8_to_f32(QP_DTYPE_FLOAT8E4M3FNUZ, 0x01) == ldexpf(1, -10));
    assert_true(qp_fp8_to_f32(QP_DTYPE_FLOAT8E5M2, 0x01) == ldexpf(1, -16));
    assert_true(qp_fp8_to_f32(QP_DTYPE_FLOAT8E5M2FNUZ, 0x01) == ldexpf(1, -17));
    /* negative zero exists only in the non-UZ types */
    assert_true(signbit(qp_fp8_to_f32(QP_DTYPE_FLOAT8E4M3FN, 0x80)));
    assert_true(isnan(qp_fp8_to_f32(QP_DTYPE_FLOAT8E4M3FNUZ, 0x80)));
    /* a non-FP8 dtype is not decodable */
    assert_true(isnan(qp_fp8_to_f32(QP_DTYPE_FLOAT, 0x10)));
}

static void test_fp8_roundtrip(void **state) {
    (void)state;
    for (size_t k = 0; k < N_FP8; k++) {
        const struct fp8_case *c = &fp8_types[k];
        for (int v = 0; v < 256; v++) {
            if (c->table[v] == FP8_TABLE_NAN) continue;
            float f = qp_fp8_to_f32(c->dt, (uint8_t)v);
            uint8_t back = qp_f32_to_fp8(c->dt, f, 0);
            if (back != v)
                fail_msg("%s code 0x%02x -> %g -> 0x%02x (saturate=0)", qp_dtype_name(c->dt), v, f,
                         back);
            if (isinf(f)) continue; /* saturation maps inf to max, checked below */
            back = qp_f32_to_fp8(c->dt, f, 1);
            if (back != v)
                fail_msg("%s code 0x%02x -> %g -> 0x%02x (saturate=1)", qp_dtype_name(c->dt), v, f,
                         back);
        }
    }
}

/* The oracle: the nearest finite code by exhaustive search in double precision, ties to the
 * even code (neighbouring codes differ by one, so the even code has the even mantissa), then
 * ONNX's saturate rules. Independent of the bit manipulation in dtype.c. */
static uint8_t fp8_oracle(const struct fp8_case *c, float x, int saturate) {
    uint8_t nan = c->uz ? 0x80 : (uint8_t)(signbit(x) ? 0xff : 0x7f);
    if (isnan(x)) return nan;
    double ax = fabs((double)x);
    uint8_t sign = signbit(x) ? 0x80 : 0;
    uint8_t overflow =
        saturate ? (uint8_t)(sign | c->max_code) : (c->has_inf ? (uint8_t)(sign | 0x7c) : nan);
    if (isinf(x)) return overflow;
    int best = -1;
    double best_d = 0;
    for (int v = 0; v <= c->max_code; v++) {
        double d = fabs((double)u2f(c->table[v]) - ax);
        if (best < 0 || d < best_d || (d == best_d && (v & 1) == 0)) {
            best = v;
            best_d = d;
        }
    }
    /* Above the largest code: the rounding goes to the (virtual) next code up, one step of the
     * top binade further, when the value is past the midpoint, or at it with an odd top code. */
    double top = u2f(c->table[c->max_code]);
    double next_step = top - u2f(c->table[c->max_code - 1]);
    double mid = top + next_step / 2;
    if (ax > mid || (ax == mid && (c->max_code & 1))) return overflow;
    if (best == 0 && c->uz) return 0;
    return (uint8_t)(sign | best);
}

static uint32_t lcg_state = 12345u;
static uint32_t lcg(void) {
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return lcg_state;
}

static void check_fp8_value(const struct fp8_case *c, float x) {
    for (int sat = 0; sat <= 1; sat++) {
        uint8_t want = fp8_oracle(c, x, sat);
        uint8_t got = qp_f32_to_fp8(c->dt, x, sat);
        if (got != want)
            fail_msg("%s(%a = %.9g, saturate=%d): want 0x%02x, got 0x%02x", qp_dtype_name(c->dt), x,
                     x, sat, want, got);
    }
}

static void test_fp8_encode_vs_oracle(void **state) {
    (void)state;
    for (size_t k = 0; k < N_FP8; k++) {
        const struct fp8_case *c = &fp8_types[k];
        for (int v = 0; v < c->max_code; v++) {
            float lo = u2f(c->table[v]), hi = u2f(c->table[v + 1]);
            float mid = (float)(((double)lo + (double)hi) / 2); /* exact in float32 */
            float probes[] = {lo,
                              mid,
                              nextafterf(mid, 0),
                              nextafterf(mid, INFINITY),
                              lo + (hi - lo) * 0.25f,
                              lo + (hi - lo) * 0.75f};
            for (size_t p = 0; p < sizeof probes / sizeof probes[0]; p++) {
                check_fp8_value(c, probes[p]);
                check_fp8_value(c, -probes[p]);
            }
        }
        /* around and above the largest value */
        float top = u2f(c->table[c->max_code]);
        for (float x = top * 0.9f; x < top * 1.3f; x = nextafterf(x, INFINITY) + top / 4096)
            check_fp8_value(c, x), check_fp8_value(c, -x);
        float big[] = {1e6f, 3.4e38f, ldexpf(1, 100), INFINITY, ldexpf(1, -140), 1e-30f};
        for (size_t p = 0; p < sizeof big / sizeof big[0]; p++) {
            check_fp8_value(c, big[p]);
            check_fp8_value(c, -big[p]);
        }
        /* random bit patterns over the whole float32 range and concentrated on the fp8 range */
        for (int i = 0; i < 20000; i++) {
            uint32_t r = lcg();
            check_fp8_value(c, u2f(r));
            uint32_t e = 100 + (lcg() >> 8) % 50; /* 2^-27 .. 2^22 */
            check_fp8_value(c, u2f((r & 0x807fffffu) | (e << 23)));
        }
    }
}

static void test_fp8_special_cases(void **state) {
    (void)state;
    const enum qp_dtype E4 = QP_DTYPE_FLOAT8E4M3FN, E4UZ = QP_DTYPE_FLOAT8E4M3FNUZ,
                        E5 = QP_DTYPE_FLOAT8E5M2, E5UZ = QP_DTYPE_FLOAT8E5M2FNUZ;
    /* E4M3FN: max 448 (0x7e); 464 is the tie with the (NaN) code above: to even = 448 */
    assert_int_equal(qp_f32_to_fp8(E4, 448.0f, 0), 0x7e);
    assert_int_equal(qp_f32_to_fp8(E4, 464.0f, 0), 0x7e);
    assert_int_equal(qp_f32_to_fp8(E4, nextafterf(464.0f, 1e9f), 0), 0x7f);
    assert_int_equal(qp_f32_to_fp8(E4, nextafterf(464.0f, 1e9f), 1), 0x7e);
    assert_int_equal(qp_f32_to_fp8(E4, -1000.0f, 0), 0xff);
    assert_int_equal(qp_f32_to_fp8(E4, -1000.0f, 1), 0xfe);
    assert_int_equal(qp_f32_to_fp8(E4, INFINITY, 1), 0x7e);
    assert_int_equal(qp_f32_to_fp8(E4, -INFINITY, 1), 0xfe);
    assert_int_equal(qp_f32_to_fp8(E4, INFINITY, 0), 0x7f);
    assert_int_equal(qp_f32_to_fp8(E4, -INFINITY, 0), 0xff);
    assert_int_equal(qp_f32_to_fp8(E4, NAN, 1), 0x7f);
    assert_int_equal(qp_f32_to_fp8(E4, -NAN, 1), 0xff);
    assert_int_equal(qp_f32_to_fp8(E4, u2f(0x7f800001u), 1), 0x7f); /* signalling NaN */
    assert_int_equal(qp_f32_to_fp8(E4, -0.0f, 1), 0x80);
    assert_int_equal(qp_f32_to_fp8(E4, -1e-9f, 1), 0x80);
    /* E4M3FN subnormals: step 2^-9 */
    assert_int_equal(qp_f32_to_fp8(E4, ldexpf(1, -9), 1), 0x01);
    assert_int_equal(qp_f32_to_fp8(E4, ldexpf(1, -10), 1), 0x00); /* tie -> even 0 */
    assert_int_equal(qp_f32_to_fp8(E4, nextafterf(ldexpf(1, -10), 1), 1), 0x01);
    assert_int_equal(qp_f32_to_fp8(E4, ldexpf(3, -10), 1), 0x02);  /* tie 1|2 -> 2 */
    assert_int_equal(qp_f32_to_fp8(E4, ldexpf(5, -10), 1), 0x02);  /* tie 2|3 -> 2 */
    assert_int_equal(qp_f32_to_fp8(E4, ldexpf(7, -9), 1), 0x07);   /* largest subnormal */
    assert_int_equal(qp_f32_to_fp8(E4, ldexpf(15, -10), 1), 0x08); /* tie 7|8 -> 8 (normal) */
    assert_int_equal(qp_f32_to_fp8(E4, ldexpf(1, -6), 1), 0x08);   /* smallest normal */
    /* normal ties: 1.0 = 0x38, step 1/8 */
    assert_int_equal(qp_f32_to_fp8(E4, 1.0625f, 1), 0x38);
    assert_int_equal(qp_f32_to_fp8(E4, 1.1875f, 1), 0x3a);
    assert_int_equal(qp_f32_to_fp8(E4, 1.9375f, 1), 0x40); /* carry into the exponent */

    /* E4M3FNUZ: max 240 (0x7f, odd): the tie 248 rounds up -> overflow */
    assert_int_equal(qp_f32_to_fp8(E4UZ, 240.0f, 0), 0x7f);
    assert_int_equal(qp_f32_to_fp8(E4UZ, nextafterf(248.0f, 0), 0), 0x7f);
    assert_int_equal(qp_f32_to_fp8(E4UZ, 248.0f, 0), 0x80);
    assert_int_equal(qp_f32_to_fp8(E4UZ, 248.0f, 1), 0x7f);
    assert_int_equal(qp_f32_to_fp8(E4UZ, -248.0f, 1), 0xff);
    assert_int_equal(qp_f32_to_fp8(E4UZ, -248.0f, 0), 0x80);
    assert_int_equal(qp_f32_to_fp8(E4UZ, INFINITY, 1), 0x7f);
    assert_int_equal(qp_f32_to_fp8(E4UZ, -INFINITY, 1), 0xff);
    assert_int_equal(qp_f32_to_fp8(E4UZ, INFINITY, 0), 0x80);
    assert_int_equal(qp_f32_to_fp8(E4UZ, -INFINITY, 0), 0x80);
    assert_int_equal(qp_f32_to_fp8(E4UZ, NAN, 1), 0x80);
    assert_int_equal(qp_f32_to_fp8(E4UZ, -NAN, 0), 0x80);
    assert_int_equal(qp_f32_to_fp8(E4UZ, -0.0f, 1), 0x00); /* no negative zero */
    assert_int_equal(qp_f32_to_fp8(E4UZ, -ldexpf(1, -12), 1), 0x00);
    assert_int_equal(qp_f32_to_fp8(E4UZ, -ldexpf(1, -11), 1), 0x00); /* tie -> 0 */
    assert_int_equal(qp_f32_to_fp8(E4UZ, -ldexpf(3, -11), 1), 0x82); /* tie -> 2 */
    assert_int_equal(qp_f32_to_fp8(E4UZ, 1.0f, 1), 0x40);

    /* E5M2: max 57344 (0x7b, odd): 61440 is the tie with inf -> overflow */
    assert_int_equal(qp_f32_to_fp8(E5, 57344.0f, 0), 0x7b);
    assert_int_equal(qp_f32_to_fp8(E5, nextafterf(61440.0f, 0), 0), 0x7b);
    assert_int_equal(qp_f32_to_fp8(E5, 61440.0f, 0), 0x7c);
    assert_int_equal(qp_f32_to_fp8(E5, 61440.0f, 1), 0x7b);
    assert_int_equal(qp_f32_to_fp8(E5, -1e6f, 0), 0xfc);
    assert_int_equal(qp_f32_to_fp8(E5, -1e6f, 1), 0xfb);
    assert_int_equal(qp_f32_to_fp8(E5, INFINITY, 0), 0x7c);
    assert_int_equal(qp_f32_to_fp8(E5, -INFINITY, 0), 0xfc);
    assert_int_equal(qp_f32_to_fp8(E5, INFINITY, 1), 0x7b);
    assert_int_equal(qp_f32_to_fp8(E5, -INFINITY, 1), 0xfb);
    assert_true(isnan(qp_fp8_to_f32(E5, qp_f32_to_fp8(E5, NAN, 1))));
    assert_true(isnan(qp_fp8_to_f32(E5, qp_f32_to_fp8(E5, -NAN, 0))));
    assert_int_equal(qp_f32_to_fp8(E5, -0.0f, 0), 0x80);
    assert_int_equal(qp_f32_to_fp8(E5, ldexpf(1, -16), 0), 0x01);
    assert_int_equal(qp_f32_to_fp8(E5, ldexpf(1, -17), 0), 0x00);
    assert_int_equal(qp_f32_to_fp8(E5, ldexpf(3, -17), 0), 0x02);
    assert_int_equal(qp_f32_to_fp8(E5, 1.0f, 0), 0x3c);

    /* E5M2FNUZ */
    assert_int_equal(qp_f32_to_fp8(E5UZ, 57344.0f, 0), 0x7f);
    assert_int_equal(qp_f32_to_fp8(E5UZ, 61440.0f, 0), 0x80);
    assert_int_equal(qp_f32_to_fp8(E5UZ, 1e6f, 1), 0x7f);
    assert_int_equal(qp_f32_to_fp8(E5UZ, -1e6f, 1), 0xff);
    assert_int_equal(qp_f32_to_fp8(E5UZ, -1e6f, 0), 0x80);
    assert_int_equal(qp_f32_to_fp8(E5UZ, INFINITY, 1), 0x7f);
    assert_int_equal(qp_f32_to_fp8(E5UZ, INFINITY, 0), 0x80);
    assert_int_equal(qp_f32_to_fp8(E5UZ, -0.0f, 0), 0x00);
    assert_int_equal(qp_f32_to_fp8(E5UZ, ldexpf(1, -17), 0), 0x01);
    assert_int_equal(qp_f32_to_fp8(E5UZ, 1.0f, 0), 0x40);

    /* a non-FP8 dtype encodes nothing */
    assert_int_equal(qp_f32_to_fp8(QP_DTYPE_INT8, 1.0f, 1), 0);
}

/* ---- fp16 ------------------------------------------------------------------------------ */

static void test_fp16(void **state) {
    (void)state;
    /* every code: decode, then encode back */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = qp_fp16_to_f32((uint16_t)h);
        int is_nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
        if (is_nan) {
            if (!isnan(f)) fail_msg("fp16 0x%04x: want NaN, got %g", h, f);
            uint16_t back = qp_f32_to_fp16(f);
            assert_true((back & 0x7c00u) == 0x7c00u && (back & 0x3ffu));
            assert_int_equal(back & 0x8000u, h & 0x8000u);
            continue;
        }
        if (qp_f32_to_fp16(f) != h)
            fail_msg("fp16 0x%04x -> %a -> 0x%04x", h, f, qp_f32_to_fp16(f));
    }
    assert_true(qp_fp16_to_f32(0x3c00) == 1.0f);
    assert_true(qp_fp16_to_f32(0x7bff) == 65504.0f);
    assert_true(qp_fp16_to_f32(0x0001) == ldexpf(1, -24));
    assert_true(qp_fp16_to_f32(0xc000) == -2.0f);
    assert_true(isinf(qp_fp16_to_f32(0xfc00)) && qp_fp16_to_f32(0xfc00) < 0);
    /* ties to even */
    assert_int_equal(qp_f32_to_fp16(1.0f + ldexpf(1, -11)), 0x3c00);
    assert_int_equal(qp_f32_to_fp16(1.0f + ldexpf(3, -11)), 0x3c02);
    assert_int_equal(qp_f32_to_fp16(nextafterf(1.0f + ldexpf(1, -11), 2)), 0x3c01);
    assert_int_equal(qp_f32_to_fp16(65519.0f), 0x7bff);
    assert_int_equal(qp_f32_to_fp16(65520.0f), 0x7c00); /* tie with odd max -> inf */
    assert_int_equal(qp_f32_to_fp16(-1e9f), 0xfc00);
    assert_int_equal(qp_f32_to_fp16(ldexpf(1, -24)), 0x0001);
    assert_int_equal(qp_f32_to_fp16(ldexpf(1, -25)), 0x0000);
    assert_int_equal(qp_f32_to_fp16(ldexpf(3, -25)), 0x0002);
    assert_int_equal(qp_f32_to_fp16(-ldexpf(1, -26)), 0x8000);
    assert_int_equal(qp_f32_to_fp16(ldexpf(2047, -25)), 0x0400); /* subnormal -> normal */
    /* NaN whose payload lives only in low bits stays NaN */
    uint16_t n = qp_f32_to_fp16(u2f(0x7f800001u));
    assert_true((n & 0x7c00u) == 0x7c00u && (n & 0x3ffu));
    n = qp_f32_to_fp16(u2f(0xff800001u));
    assert_true((n & 0xfc00u) == 0xfc00u && (n & 0x3ffu));
    /* numpy reference */
    size_t n_cases = sizeof fp16_cases / sizeof fp16_cases[0];
    assert_true(n_cases > 3000);
    for (size_t i = 0; i < n_cases; i++) {
        uint16_t got = qp_f32_to_fp16(u2f(fp16_cases[i].f32));
        if (got != fp16_cases[i].f16)
            fail_msg("fp16(%a): numpy 0x%04x, got 0x%04x", u2f(fp16_cases[i].f32),
                     fp16_cases[i].f16, got);
    }
}

/* ---- bf16 ------------------------------------------------------------------------------ */

static void test_bf16(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = qp_bf16_to_f32((uint16_t)h);
        assert_int_equal(f2u(f), h << 16);
        uint16_t back = qp_f32_to_bf16(f);
        if (isnan(f)) {
            assert_true(isnan(qp_bf16_to_f32(back)));
            assert_int_equal(back & 0x8000u, h & 0x8000u);
        } else if (back != h) {
            fail_msg("bf16 0x%04x -> %a -> 0x%04x", h, f, back);
        }
    }
    /* ties to even: 1.0 = 0x3f80, step 2^-7 */
    assert_int_equal(qp_f32_to_bf16(1.0f + ldexpf(1, -8)), 0x3f80);
    assert_int_equal(qp_f32_to_bf16(1.0f + ldexpf(3, -8)), 0x3f82);
    assert_int_equal(qp_f32_to_bf16(nextafterf(1.0f + ldexpf(1, -8), 2)), 0x3f81);
    assert_int_equal(qp_f32_to_bf16(nextafterf(1.0f + ldexpf(1, -8), 0)), 0x3f80);
    assert_int_equal(qp_f32_to_bf16(-1.0f - ldexpf(3, -8)), 0xbf82);
    /* overflow rounds to infinity, infinity stays */
    assert_int_equal(qp_f32_to_bf16(3.4028235e38f), 0x7f80);
    assert_int_equal(qp_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(qp_f32_to_bf16(-INFINITY), 0xff80);
    /* subnormals round like everything else */
    assert_int_equal(qp_f32_to_bf16(u2f(0x00008000u)), 0x0000);
    assert_int_equal(qp_f32_to_bf16(u2f(0x00018000u)), 0x0002);
    /* NaN preserved, even with the payload only in the dropped bits */
    assert_true(isnan(qp_bf16_to_f32(qp_f32_to_bf16(u2f(0x7f800001u)))));
    assert_true(isnan(qp_bf16_to_f32(qp_f32_to_bf16(u2f(0x7fffffffu)))));
    assert_int_equal(qp_f32_to_bf16(u2f(0xffc00000u)), 0xffc0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_traits),
        cmocka_unit_test(test_nbytes),
        cmocka_unit_test(test_fp8_decode_all_codes),
        cmocka_unit_test(test_fp8_roundtrip),
        cmocka_unit_test(test_fp8_encode_vs_oracle),
        cmocka_unit_test(test_fp8_special_cases),
        cmocka_unit_test(test_fp16),
        cmocka_unit_test(test_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
