/* x86 SIMD blocks of the int8/uint8 quantizers (qsimd.h). */
#include "qmath/qsimd.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QSIMD_X86 1
#endif

#ifdef QSIMD_X86

#define ROUND_NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* ---- AVX-512F -------------------------------------------------------------------------------- */

static inline __mmask16 tail16(int64_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

/* One vector of saturate(round_half_even(x / sc) + zp, lo, hi), quantize_one's value for every
 * input: a quotient of 2^23 or more is an integer already and saturates (so do infinities),
 * and a NaN gives the zero point. */
__attribute__((target("avx512f"))) static inline __m512 level512(__m512 x, __m512 s, __m512 z,
                                                                 __m512 lo, __m512 hi) {
    __m512 q = _mm512_div_ps(x, s);
    __mmask16 nan = _mm512_cmp_ps_mask(q, q, _CMP_UNORD_Q);
    __m512 v = _mm512_mask_mov_ps(_mm512_add_ps(_mm512_roundscale_ps(q, ROUND_NEAREST), z), nan, z);
    return _mm512_min_ps(_mm512_max_ps(v, lo), hi);
}

/* level512 for a zero point of 0 and a vector without NaN: the same values in fewer operations
 * (the block is bound by its floating-point operations: about two a cycle on 512-bit vectors).
 * Adding +0 turns a -0 from rounding into the +0 that adding the zero point gives. */
__attribute__((target("avx512f"))) static inline __m512 level512_z0(__m512 x, __m512 s, __m512 lo,
                                                                    __m512 hi) {
    __m512 v = _mm512_roundscale_ps(_mm512_div_ps(x, s), ROUND_NEAREST);
    return _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(v, _mm512_setzero_ps()), lo), hi);
}

/* level512_z0 for a store as integers: the -0 that rounding may give converts to 0 like +0, so
 * the +0 is not added (one operation fewer a vector). */
__attribute__((target("avx512f"))) static inline __m512 level512_int(__m512 x, __m512 s, __m512 lo,
                                                                     __m512 hi) {
    __m512 v = _mm512_roundscale_ps(_mm512_div_ps(x, s), ROUND_NEAREST);
    return _mm512_min_ps(_mm512_max_ps(v, lo), hi);
}

__attribute__((target("avx512f"))) static void fq512(const float *x, float *y, int64_t n, float sc,
                                                     float zp, float lo, float hi) {
    __m512 s = _mm512_set1_ps(sc), z = _mm512_set1_ps(zp), l = _mm512_set1_ps(lo),
           h = _mm512_set1_ps(hi);
    int64_t k = 0;
    if (zp == 0.0f) /* symmetric: the usual int8 activation; NaN vectors take the general path */
        for (; k + 16 <= n; k += 16) {
            __m512 v = _mm512_loadu_ps(x + k);
            if (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)) break;
            _mm512_storeu_ps(y + k, _mm512_mul_ps(level512_z0(v, s, l, h), s));
        }
    for (; k < n; k += 16) {
        __mmask16 m = tail16(n - k);
        __m512 v = level512(_mm512_maskz_loadu_ps(m, x + k), s, z, l, h);
        _mm512_mask_storeu_ps(y + k, m, _mm512_mul_ps(_mm512_sub_ps(v, z), s));
    }
}

__attribute__((target("avx512f"))) static void q8_512(const float *x, void *out, int64_t n,
                                                      float sc, float zp, float lo, float hi) {
    __m512 s = _mm512_set1_ps(sc), z = _mm512_set1_ps(zp), l = _mm512_set1_ps(lo),
           h = _mm512_set1_ps(hi);
    int64_t k = 0;
    if (zp == 0.0f)
        for (; k + 16 <= n; k += 16) {
            __m512 v = _mm512_loadu_ps(x + k);
            if (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)) break;
            __m512i q = _mm512_cvtps_epi32(level512_int(v, s, l, h));
            _mm_storeu_si128((__m128i *)((char *)out + k), _mm512_cvtepi32_epi8(q));
        }
    for (; k < n; k += 16) {
        __mmask16 m = tail16(n - k);
        __m512i v = _mm512_cvtps_epi32(level512(_mm512_maskz_loadu_ps(m, x + k), s, z, l, h));
        _mm512_mask_cvtepi32_storeu_epi8((char *)out + k, m, v); /* low bytes */
    }
}

/* ---- the integer path's scaled steps (qp_qsimd_levels, qp_qsimd_quantize_affine_q8) --------- */

/* clamp(round_half_even(x * m [+ o]), lo, hi): the product, then the sum when o is not 0. */
__attribute__((target("avx512f"))) static inline __m512 affine512(__m512 x, __m512 m, __m512 o,
                                                                  int add, __m512 lo, __m512 hi) {
    __m512 t = _mm512_mul_ps(x, m);
    if (add) t = _mm512_add_ps(t, o);
    return _mm512_min_ps(_mm512_max_ps(_mm512_roundscale_ps(t, ROUND_NEAREST), lo), hi);
}

__attribute__((target("avx512f"))) static void levels512(const float *x, float *y, int64_t n,
                                                         float mf, float of, float lo, float hi) {
    __m512 m = _mm512_set1_ps(mf), o = _mm512_set1_ps(of), l = _mm512_set1_ps(lo),
           h = _mm512_set1_ps(hi);
    int add = of != 0.0f;
    int64_t k = 0;
    for (; k + 16 <= n; k += 16)
        _mm512_storeu_ps(y + k, affine512(_mm512_loadu_ps(x + k), m, o, add, l, h));
    if (k < n) {
        __mmask16 t = tail16(n - k);
        _mm512_mask_storeu_ps(y + k, t,
                              affine512(_mm512_maskz_loadu_ps(t, x + k), m, o, add, l, h));
    }
}

__attribute__((target("avx512f"))) static void aq8_512(const float *x, void *out, int64_t n,
                                                       float mf, float of, float lo, float hi) {
    __m512 m = _mm512_set1_ps(mf), o = _mm512_set1_ps(of), l = _mm512_set1_ps(lo),
           h = _mm512_set1_ps(hi);
    int add = of != 0.0f;
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        __m512i q = _mm512_cvtps_epi32(affine512(_mm512_loadu_ps(x + k), m, o, add, l, h));
        _mm_storeu_si128((__m128i *)((char *)out + k), _mm512_cvtepi32_epi8(q));
    }
    if (k < n) {
        __mmask16 t = tail16(n - k);
        __m512i q = _mm512_cvtps_epi32(affine512(_mm512_maskz_loadu_ps(t, x + k), m, o, add, l, h));
        _mm512_mask_cvtepi32_storeu_epi8((char *)out + k, t, q);
    }
}

/* ---- AVX2 ------------------------------------------------------------------------------------ */

__attribute__((target("avx2"))) static inline __m256i tail8(int64_t left) {
    int32_t l = left >= 8 ? 8 : (int32_t)left;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(l), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* level512 on AVX2. */
__attribute__((target("avx2"))) static inline __m256 level256(__m256 x, __m256 s, __m256 z,
                                                              __m256 lo, __m256 hi) {
    __m256 q = _mm256_div_ps(x, s);
    __m256 nan = _mm256_cmp_ps(q, q, _CMP_UNORD_Q);
    __m256 v = _mm256_blendv_ps(_mm256_add_ps(_mm256_round_ps(q, ROUND_NEAREST), z), z, nan);
    return _mm256_min_ps(_mm256_max_ps(v, lo), hi);
}

/* level512_z0 on AVX2. */
__attribute__((target("avx2"))) static inline __m256 level256_z0(__m256 x, __m256 s, __m256 lo,
                                                                 __m256 hi) {
    __m256 v = _mm256_round_ps(_mm256_div_ps(x, s), ROUND_NEAREST);
    return _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(v, _mm256_setzero_ps()), lo), hi);
}

/* level512_int on AVX2. */
__attribute__((target("avx2"))) static inline __m256 level256_int(__m256 x, __m256 s, __m256 lo,
                                                                  __m256 hi) {
    __m256 v = _mm256_round_ps(_mm256_div_ps(x, s), ROUND_NEAREST);
    return _mm256_min_ps(_mm256_max_ps(v, lo), hi);
}

__attribute__((target("avx2"))) static void fq256(const float *x, float *y, int64_t n, float sc,
                                                  float zp, float lo, float hi) {
    __m256 s = _mm256_set1_ps(sc), z = _mm256_set1_ps(zp), l = _mm256_set1_ps(lo),
           h = _mm256_set1_ps(hi);
    int64_t k = 0;
    if (zp == 0.0f)
        for (; k + 8 <= n; k += 8) {
            __m256 v = _mm256_loadu_ps(x + k);
            if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) break;
            _mm256_storeu_ps(y + k, _mm256_mul_ps(level256_z0(v, s, l, h), s));
        }
    for (; k < n; k += 8) {
        __m256i m = tail8(n - k);
        __m256 v = level256(_mm256_maskload_ps(x + k, m), s, z, l, h);
        _mm256_maskstore_ps(y + k, m, _mm256_mul_ps(_mm256_sub_ps(v, z), s));
    }
}

/* Eight levels (integers in [lo, hi], within int8 or uint8) as bytes in the low 64 bits. */
__attribute__((target("avx2"))) static inline __m128i bytes8(__m256 v, int sgn) {
    __m256i w = _mm256_cvtps_epi32(v);
    __m128i a = _mm256_castsi256_si128(w), b = _mm256_extracti128_si256(w, 1);
    __m128i p = _mm_packs_epi32(a, b); /* values are in range: no saturation happens */
    return sgn ? _mm_packs_epi16(p, p) : _mm_packus_epi16(p, p);
}

/* Whole vectors stored as 8 bytes each (a variable-length copy per vector, a library call,
 * took most of the block's time), the zero point 0 without NaN as fq256 does, the tail masked. */
__attribute__((target("avx2"))) static void q8_256(const float *x, void *out, int sgn, int64_t n,
                                                   float sc, float zp, float lo, float hi) {
    __m256 s = _mm256_set1_ps(sc), z = _mm256_set1_ps(zp), l = _mm256_set1_ps(lo),
           h = _mm256_set1_ps(hi);
    char *o = out;
    int64_t k = 0;
    if (zp == 0.0f)
        for (; k + 8 <= n; k += 8) {
            __m256 v = _mm256_loadu_ps(x + k);
            if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) break;
            _mm_storel_epi64((__m128i *)(o + k), bytes8(level256_int(v, s, l, h), sgn));
        }
    for (; k + 8 <= n; k += 8)
        _mm_storel_epi64((__m128i *)(o + k),
                         bytes8(level256(_mm256_loadu_ps(x + k), s, z, l, h), sgn));
    if (k < n) {
        unsigned char b[16];
        __m256 v = level256(_mm256_maskload_ps(x + k, tail8(n - k)), s, z, l, h);
        _mm_storeu_si128((__m128i *)b, bytes8(v, sgn));
        memcpy(o + k, b, (size_t)(n - k));
    }
}

/* affine512 on AVX2. */
__attribute__((target("avx2"))) static inline __m256 affine256(__m256 x, __m256 m, __m256 o,
                                                               int add, __m256 lo, __m256 hi) {
    __m256 t = _mm256_mul_ps(x, m);
    if (add) t = _mm256_add_ps(t, o);
    return _mm256_min_ps(_mm256_max_ps(_mm256_round_ps(t, ROUND_NEAREST), lo), hi);
}

__attribute__((target("avx2"))) static void levels256(const float *x, float *y, int64_t n, float mf,
                                                      float of, float lo, float hi) {
    __m256 m = _mm256_set1_ps(mf), o = _mm256_set1_ps(of), l = _mm256_set1_ps(lo),
           h = _mm256_set1_ps(hi);
    int add = of != 0.0f;
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        _mm256_storeu_ps(y + k, affine256(_mm256_loadu_ps(x + k), m, o, add, l, h));
    if (k < n) {
        __m256i t = tail8(n - k);
        _mm256_maskstore_ps(y + k, t, affine256(_mm256_maskload_ps(x + k, t), m, o, add, l, h));
    }
}

__attribute__((target("avx2"))) static void aq8_256(const float *x, void *out, int sgn, int64_t n,
                                                    float mf, float of, float lo, float hi) {
    __m256 m = _mm256_set1_ps(mf), o = _mm256_set1_ps(of), l = _mm256_set1_ps(lo),
           h = _mm256_set1_ps(hi);
    int add = of != 0.0f;
    char *c = out;
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        _mm_storel_epi64((__m128i *)(c + k),
                         bytes8(affine256(_mm256_loadu_ps(x + k), m, o, add, l, h), sgn));
    if (k < n) {
        unsigned char b[16];
        __m256 v = affine256(_mm256_maskload_ps(x + k, tail8(n - k)), m, o, add, l, h);
        _mm_storeu_si128((__m128i *)b, bytes8(v, sgn));
        memcpy(c + k, b, (size_t)(n - k));
    }
}

/* The CPU's level, capped as the kernels' ISA is (kernels/isa.h): ONEDNN_MAX_CPU_ISA=AVX2... gives
 * at most AVX2, a lower cap none; QP_QSIMD=0, 1 or 2 caps it too. */
static int detect(void) {
    __builtin_cpu_init();
    int l = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
    const char *cap = getenv("ONEDNN_MAX_CPU_ISA");
    if (cap && cap[0] && strncasecmp(cap, "AVX512", 6) != 0 && strcasecmp(cap, "ALL") != 0)
        l = strncasecmp(cap, "AVX2", 4) == 0 ? (l < 1 ? l : 1) : 0;
    const char *e = getenv("QP_QSIMD");
    if (e && e[0] >= '0' && e[0] <= '2' && !e[1] && e[0] - '0' < l) l = e[0] - '0';
    return l;
}

int qp_qsimd_level(void) {
    static int level = -1; /* a benign race: every thread computes the same value */
    int l = __atomic_load_n(&level, __ATOMIC_RELAXED);
    if (l < 0) {
        l = detect();
        __atomic_store_n(&level, l, __ATOMIC_RELAXED);
    }
    return l;
}

/* The block's AVX-512 call or its AVX2 call for a block of n elements (1), or nothing when n
 * is out of range or the CPU has neither (0). */
#define DISPATCH(n, CALL512, CALL256)                                                              \
    do {                                                                                           \
        if ((n) <= 0 || (n) > QP_QSIMD_BLOCK) return 0;                                            \
        int l_ = qp_qsimd_level();                                                                 \
        if (l_ == 2) CALL512;                                                                      \
        if (l_ == 1) CALL256;                                                                      \
        return l_ > 0;                                                                             \
    } while (0)

int qp_qsimd_fake_quantize(const float *x, float *y, int64_t n, float sc, float zp, float lo,
                           float hi) {
    DISPATCH(n, fq512(x, y, n, sc, zp, lo, hi), fq256(x, y, n, sc, zp, lo, hi));
}

int qp_qsimd_quantize_q8(const float *x, void *out, int sgn, int64_t n, float sc, float zp,
                         float lo, float hi) {
    DISPATCH(n, q8_512(x, out, n, sc, zp, lo, hi), q8_256(x, out, sgn, n, sc, zp, lo, hi));
}

int qp_qsimd_levels(const float *x, float *y, int64_t n, float m, float o, float lo, float hi) {
    DISPATCH(n, levels512(x, y, n, m, o, lo, hi), levels256(x, y, n, m, o, lo, hi));
}

int qp_qsimd_quantize_affine_q8(const float *x, void *out, int sgn, int64_t n, float m, float o,
                                float lo, float hi) {
    DISPATCH(n, aq8_512(x, out, n, m, o, lo, hi), aq8_256(x, out, sgn, n, m, o, lo, hi));
}

#else /* not x86: the scalar paths run everything */

int qp_qsimd_level(void) {
    return 0;
}

int qp_qsimd_fake_quantize(const float *x, float *y, int64_t n, float sc, float zp, float lo,
                           float hi) {
    (void)x, (void)y, (void)n, (void)sc, (void)zp, (void)lo, (void)hi;
    return 0;
}

int qp_qsimd_quantize_q8(const float *x, void *out, int sgn, int64_t n, float sc, float zp,
                         float lo, float hi) {
    (void)x, (void)out, (void)sgn, (void)n, (void)sc, (void)zp, (void)lo, (void)hi;
    return 0;
}

int qp_qsimd_levels(const float *x, float *y, int64_t n, float m, float o, float lo, float hi) {
    (void)x, (void)y, (void)n, (void)m, (void)o, (void)lo, (void)hi;
    return 0;
}

int qp_qsimd_quantize_affine_q8(const float *x, void *out, int sgn, int64_t n, float m, float o,
                                float lo, float hi) {
    (void)x, (void)out, (void)sgn, (void)n, (void)m, (void)o, (void)lo, (void)hi;
    return 0;
}

#endif
