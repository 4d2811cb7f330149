/* qp_fake_quantize_f32's integer path (parameters read once per run of elements, rounding
 * inline) against quantize then dequantize, bit for bit: every integer qtype, per tensor and per
 * axis, with and without zero points (negative ones too), on ties, near-ties, signed zeros and
 * random values (blocks that take the branch-free path), and with NaN, infinities and values
 * past 2^23 and 4e9 mixed in (blocks that go element by element); sub-ranges that start and end
 * inside a run of one parameter and inside a block; and y aliasing x. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qmath/qparams.h"
#include "qmath/qsimd.h"

#define N_AXIS 3
#define INNER  200
#define N      (2 * N_AXIS * INNER)

static uint32_t rng = 12345u;
static uint32_t next_u32(void) {
    rng = rng * 1664525u + 1013904223u;
    return rng;
}

/* Values around the quantization grid of `sc`, plus (with `with_special`) NaN, infinities and
 * values past 2^23 and 4e9, which send the block holding them down the per-element path. */
static void fill(float *x, const float *sc, int per_axis, int with_special) {
    static const float special[] = {0.0f,        -0.0f,      NAN,    INFINITY,
                                    -INFINITY,   1e10f,      -1e10f, 8388608.0f,
                                    -8388608.0f, 8388607.5f, 4.5e9f, -4.5e9f};
    size_t ns = sizeof special / sizeof special[0];
    for (int i = 0; i < N; i++) {
        float s = sc[per_axis ? (i / INNER) % N_AXIS : 0];
        uint32_t r = next_u32();
        int k = (int)(r % 600) - 300; /* beyond every 8-bit range, inside 16 bits */
        switch (with_special || r >> 29 != 2 ? r >> 29 : 1) {
        case 0: /* a tie: (k + 0.5) * scale, exact for these power-of-two scales */
            x[i] = ((float)k + 0.5f) * s;
            break;
        case 1: /* just below / above a tie */
            x[i] = nextafterf(((float)k + 0.5f) * s, (r & 1) ? INFINITY : -INFINITY);
            break;
        case 2:
            x[i] = special[r % ns];
            break;
        case 3: /* large multiples: 16-bit and 32-bit saturation */
            x[i] = (float)k * 300.0f * s;
            break;
        default:
            x[i] = ((float)(int32_t)(r & 0xffff) - 32768.0f) / 64.0f * s;
        }
    }
}

/* Reference: quantize the whole tensor, dequantize it. */
static void reference(const struct qp_qspec *s, const float *x, float *y) {
    int64_t q[N];
    qp_quantize_f32(s, x, q, 0, N);
    qp_dequantize_f32(s, q, y, 0, N);
}

static void check_type(enum qp_dtype qt, int with_zp, int per_axis) {
    /* Power-of-two scales make the ties exact; 0.3 makes the divisions inexact. */
    const float sc[N_AXIS] = {0.25f, 0.3f, 2.0f};
    unsigned char zp[N_AXIS * 4];
    memset(zp, 0, sizeof zp);
    if (with_zp) {
        switch (qt) {
        case QP_DTYPE_INT8: {
            const int8_t z[N_AXIS] = {-5, 0, 100};
            memcpy(zp, z, sizeof z);
            break;
        }
        case QP_DTYPE_UINT8: {
            const uint8_t z[N_AXIS] = {128, 0, 255};
            memcpy(zp, z, sizeof z);
            break;
        }
        case QP_DTYPE_INT16: {
            const int16_t z[N_AXIS] = {-300, 7, 32000};
            memcpy(zp, z, sizeof z);
            break;
        }
        case QP_DTYPE_UINT16: {
            const uint16_t z[N_AXIS] = {32768, 1, 65535};
            memcpy(zp, z, sizeof z);
            break;
        }
        case QP_DTYPE_INT32: {
            const int32_t z[N_AXIS] = {-7, 0, 1000};
            memcpy(zp, z, sizeof z);
            break;
        }
        case QP_DTYPE_INT4:
            zp[0] = 0xd3; /* 3, -3 */
            zp[1] = 0x07; /* 7 */
            break;
        case QP_DTYPE_UINT4:
            zp[0] = 0xf8; /* 8, 15 */
            zp[1] = 0x01;
            break;
        default:
            fail();
        }
    }
    struct qp_qspec s = {.qtype = qt,
                         .outer = per_axis ? 2 : 1,
                         .axis_len = per_axis ? N_AXIS : 1,
                         .inner = per_axis ? INNER : N,
                         .n_params = per_axis ? N_AXIS : 1,
                         .scale = sc,
                         .zero_point = with_zp ? zp : NULL};
    assert_int_equal(qp_qspec_check(&s, NULL), QP_OK);
    float x[N], want[N], got[N];
    for (int round = 0; round < 20; round++) {
        fill(x, sc, per_axis, round % 2);
        reference(&s, x, want);
        /* Sub-ranges starting and ending inside runs of one parameter. */
        memset(got, 0x7f, sizeof got);
        int64_t cut1 = (int64_t)(next_u32() % N), cut2 = (int64_t)(next_u32() % N);
        int64_t a = cut1 < cut2 ? cut1 : cut2, b = cut1 < cut2 ? cut2 : cut1;
        qp_fake_quantize_f32(&s, x, got, 0, a);
        qp_fake_quantize_f32(&s, x, got, a, b);
        qp_fake_quantize_f32(&s, x, got, b, N);
        for (int i = 0; i < N; i++)
            if (memcmp(&got[i], &want[i], sizeof got[i]) != 0)
                fail_msg("%s zp=%d per_axis=%d: x[%d] = %a gives %a, quantize+dequantize %a",
                         qp_dtype_name(qt), with_zp, per_axis, i, (double)x[i], (double)got[i],
                         (double)want[i]);
        /* In place. */
        memcpy(got, x, sizeof got);
        qp_fake_quantize_f32(&s, got, got, 0, N);
        assert_memory_equal(got, want, sizeof got);
    }
}

static void test_integer_types(void **state) {
    (void)state;
    static const enum qp_dtype types[] = {QP_DTYPE_INT8,   QP_DTYPE_UINT8, QP_DTYPE_INT16,
                                          QP_DTYPE_UINT16, QP_DTYPE_INT32, QP_DTYPE_INT4,
                                          QP_DTYPE_UINT4};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (int zp = 0; zp < 2; zp++)
            for (int axis = 0; axis < 2; axis++)
                check_type(types[t], zp, axis);
}

/* Hand-checked values: the ties round to even on both signs, saturation with a negative zero
 * point keeps quantize's order (clamp after adding the zero point). */
static void test_known_values(void **state) {
    (void)state;
    float sc = 1.0f;
    int8_t zp = -10;
    struct qp_qspec s = {.qtype = QP_DTYPE_INT8,
                         .outer = 1,
                         .axis_len = 1,
                         .inner = 8,
                         .n_params = 1,
                         .scale = &sc,
                         .zero_point = &zp};
    const float x[8] = {2.5f, 3.5f, -2.5f, -3.5f, 0.5f, -0.5f, 200.0f, -200.0f};
    /* q + zp clamped to [-128, 127], minus zp: 200 -> 127 - (-10) = 137; -200 -> -118 */
    const float want[8] = {2.0f, 4.0f, -2.0f, -4.0f, 0.0f, 0.0f, 137.0f, -118.0f};
    float y[8];
    qp_fake_quantize_f32(&s, x, y, 0, 8);
    for (int i = 0; i < 8; i++)
        assert_true(y[i] == want[i]);
}

/* The SIMD blocks against a scalar model of the same arithmetic (rintf: round half to even in
 * the default rounding mode), every length 1..256 (vector tails), int8 and uint8 with zero
 * points, ties, negative zeros and saturation; NaN, infinities and quotients of 2^23 or more get
 * quantize_one's values (the scalar path's, checked too). Runs whichever path the CPU has
 * (unit/qmath/fake_quant@avx2 and @sse41 cap it: AVX2 on an AVX-512 machine, none). */
static void test_simd_blocks(void **state) {
    (void)state;
    static const struct {
        float sc, zp, lo, hi;
        int sgn;
    } cfg[] = {{0.25f, 0.0f, -128.0f, 127.0f, 1},
               {0.3f, -5.0f, -128.0f, 127.0f, 1},
               {0.0371f, 128.0f, 0.0f, 255.0f, 0},
               {2.0f, 3.0f, 0.0f, 255.0f, 0},
               {0.05f, 0.0f, 0.0f, 255.0f, 0}}; /* zero point 0: the blocks' shorter path */
    int level = qp_qsimd_level();
    unsigned char zp8 = 0;
    print_message("SIMD level %d\n", level);
    float x[QP_QSIMD_BLOCK], y[QP_QSIMD_BLOCK], want[QP_QSIMD_BLOCK];
    unsigned char q8[QP_QSIMD_BLOCK + 1], qwant[QP_QSIMD_BLOCK];
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++)
        for (int64_t n = 1; n <= QP_QSIMD_BLOCK; n += n < 40 ? 1 : 23) {
            float sc = cfg[c].sc;
            for (int64_t i = 0; i < n; i++) {
                uint32_t r = next_u32();
                int k = (int)(r % 700) - 350;
                x[i] = r >> 30 == 0   ? ((float)k + 0.5f) * sc
                       : r >> 30 == 1 ? -0.0f * (float)(r & 1) - 0.1f * sc * (float)(r >> 31)
                                      : (float)k * sc * 0.37f;
                float v = rintf(x[i] / sc) + cfg[c].zp;
                v = v < cfg[c].lo ? cfg[c].lo : v > cfg[c].hi ? cfg[c].hi : v;
                want[i] = (v - cfg[c].zp) * sc;
                qwant[i] = (unsigned char)(cfg[c].sgn ? (unsigned char)(int8_t)v : (uint8_t)v);
            }
            int ok = qp_qsimd_fake_quantize(x, y, n, sc, cfg[c].zp, cfg[c].lo, cfg[c].hi);
            assert_int_equal(ok, level > 0);
            if (ok) assert_memory_equal(y, want, (size_t)n * sizeof *y);
            memcpy(y, x, (size_t)n * sizeof *y); /* in place */
            if (qp_qsimd_fake_quantize(y, y, n, sc, cfg[c].zp, cfg[c].lo, cfg[c].hi))
                assert_memory_equal(y, want, (size_t)n * sizeof *y);
            q8[n] = 0xa5;
            ok = qp_qsimd_quantize_q8(x, q8, cfg[c].sgn, n, sc, cfg[c].zp, cfg[c].lo, cfg[c].hi);
            assert_int_equal(ok, level > 0);
            if (ok) assert_memory_equal(q8, qwant, (size_t)n);
            assert_int_equal(q8[n], 0xa5); /* nothing past the block */
            /* NaN, infinities and quotients of 2^23 or more: quantize_one's values (the zero
             * point for a NaN, saturation otherwise) */
            static const float bad[] = {NAN, INFINITY, -INFINITY, 8388608.0f, 1e30f, -3e9f};
            int64_t at = (n - 1) / 2;
            x[at] = bad[n % 6] * (n % 6 == 3 ? sc : 1.0f);
            float v = isnan(x[at]) ? cfg[c].zp
                                   : fminf(fmaxf(x[at] / sc + cfg[c].zp, cfg[c].lo), cfg[c].hi);
            want[at] = (v - cfg[c].zp) * sc;
            qwant[at] = (unsigned char)(cfg[c].sgn ? (unsigned char)(int8_t)v : (uint8_t)v);
            ok = qp_qsimd_fake_quantize(x, y, n, sc, cfg[c].zp, cfg[c].lo, cfg[c].hi);
            assert_int_equal(ok, level > 0);
            if (ok) assert_memory_equal(y, want, (size_t)n * sizeof *y);
            ok = qp_qsimd_quantize_q8(x, q8, cfg[c].sgn, n, sc, cfg[c].zp, cfg[c].lo, cfg[c].hi);
            assert_int_equal(ok, level > 0);
            if (ok) assert_memory_equal(q8, qwant, (size_t)n);
            /* the scalar path (any level) agrees element by element */
            struct qp_qspec q = {.qtype = cfg[c].sgn ? QP_DTYPE_INT8 : QP_DTYPE_UINT8,
                                 .outer = 1,
                                 .axis_len = 1,
                                 .inner = n,
                                 .n_params = 1,
                                 .scale = &sc,
                                 .zero_point = &zp8};
            int8_t zs = (int8_t)cfg[c].zp;
            uint8_t zu = (uint8_t)cfg[c].zp;
            memcpy(&zp8, cfg[c].sgn ? (void *)&zs : (void *)&zu, 1);
            unsigned char q8s[QP_QSIMD_BLOCK];
            qp_quantize_f32(&q, x, q8s, 0, n);
            assert_memory_equal(q8s, qwant, (size_t)n);
        }
}

/* Values a few ulps either side of every tie, at scales over 18 decades (powers of two and
 * not): the SIMD blocks round them as the scalar division does, for fake-quantize and quantize
 * alike (a faster quotient than IEEE division would have to pass this). */
static void test_simd_near_ties(void **state) {
    (void)state;
    if (qp_qsimd_level() == 0) skip();
    float x[QP_QSIMD_BLOCK], y[QP_QSIMD_BLOCK], want[QP_QSIMD_BLOCK];
    signed char q8[QP_QSIMD_BLOCK], qwant[QP_QSIMD_BLOCK];
    int64_t n_ties = 0;
    for (int rep = 0; rep < 4000; rep++) {
        uint32_t r = next_u32();
        float sc = ldexpf(1.0f + (float)(r % 1000) / 1000.0f * (float)(rep % 3 != 0),
                          (int)(r >> 20) % 60 - 40);
        for (int i = 0; i < QP_QSIMD_BLOCK; i++) {
            uint32_t u = next_u32();
            float t = ((float)((int)(u % 300) - 150) + 0.5f) * sc; /* a tie, up to rounding */
            for (int k = (int)(u >> 28) % 9 - 4; k != 0; k += k > 0 ? -1 : 1)
                t = nextafterf(t, k > 0 ? INFINITY : -INFINITY);
            x[i] = t;
            float v = rintf(x[i] / sc);
            n_ties += v == x[i] / sc + 0.5f || v == x[i] / sc - 0.5f;
            v += 0.0f; /* + the zero point: a -0 becomes +0, as in the blocks */
            v = v < -128.0f ? -128.0f : v > 127.0f ? 127.0f : v;
            want[i] = v * sc;
            qwant[i] = (signed char)v;
        }
        assert_int_equal(qp_qsimd_fake_quantize(x, y, QP_QSIMD_BLOCK, sc, 0, -128, 127), 1);
        assert_memory_equal(y, want, sizeof y);
        assert_int_equal(qp_qsimd_quantize_q8(x, q8, 1, QP_QSIMD_BLOCK, sc, 0, -128, 127), 1);
        assert_memory_equal(q8, qwant, sizeof q8);
    }
    print_message("%lld exact ties among the values\n", (long long)n_ties);
    assert_true(n_ties > 1000);
}

/* The integer path's scaled steps (qp_qsimd_levels, qp_qsimd_quantize_affine_q8) against the
 * scalar model their header gives: x * m, + o when o is not 0 (two roundings), rint, clamp
 * (a bound that equals the value is the result: -0 clamped to [0, 255] is +0);
 * every length 1..QP_QSIMD_BLOCK's tails, offsets 0 and not, int8 and uint8, values at ties of
 * the product, -0 and saturation. Whichever path the CPU has (the @avx2 run caps it). */
static void test_simd_scaled_steps(void **state) {
    (void)state;
    static const struct {
        float m, o, lo, hi;
        int sgn;
    } cfg[] = {{4.0f, 0.0f, -128.0f, 127.0f, 1},
               {3.3f, 0.75f, -100.0f, 60.0f, 1},
               {26.95f, 128.0f, 0.0f, 255.0f, 0},
               {0.5f, -3.0f, 0.0f, 255.0f, 0}};
    int level = qp_qsimd_level();
    float x[QP_QSIMD_BLOCK], y[QP_QSIMD_BLOCK], want[QP_QSIMD_BLOCK];
    unsigned char q8[QP_QSIMD_BLOCK + 1], qwant[QP_QSIMD_BLOCK];
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++)
        for (int64_t n = 1; n <= QP_QSIMD_BLOCK; n += n < 40 ? 1 : 23) {
            for (int64_t i = 0; i < n; i++) {
                uint32_t r = next_u32();
                int k = (int)(r % 700) - 350;
                x[i] = r >> 30 == 0   ? ((float)k + 0.5f) / cfg[c].m
                       : r >> 30 == 1 ? -0.0f
                                      : (float)k * 0.37f / cfg[c].m;
                float t = x[i] * cfg[c].m;
                if (cfg[c].o != 0.0f) t = t + cfg[c].o;
                t = rintf(t);
                t = t > cfg[c].lo ? t : cfg[c].lo; /* vmaxps, vminps: a zero bound wins */
                want[i] = t < cfg[c].hi ? t : cfg[c].hi;
                qwant[i] =
                    (unsigned char)(cfg[c].sgn ? (unsigned char)(int8_t)want[i] : (uint8_t)want[i]);
            }
            int ok = qp_qsimd_levels(x, y, n, cfg[c].m, cfg[c].o, cfg[c].lo, cfg[c].hi);
            assert_int_equal(ok, level > 0);
            if (ok) assert_memory_equal(y, want, (size_t)n * sizeof *y);
            q8[n] = 0xa5;
            ok = qp_qsimd_quantize_affine_q8(x, q8, cfg[c].sgn, n, cfg[c].m, cfg[c].o, cfg[c].lo,
                                             cfg[c].hi);
            assert_int_equal(ok, level > 0);
            if (ok) assert_memory_equal(q8, qwant, (size_t)n);
            assert_int_equal(q8[n], 0xa5);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_integer_types),     cmocka_unit_test(test_known_values),
        cmocka_unit_test(test_simd_blocks),       cmocka_unit_test(test_simd_near_ties),
        cmocka_unit_test(test_simd_scaled_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
