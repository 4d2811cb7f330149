#include "qplace/dtype.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- traits ------------------------------------------------------------------------------ */

static const struct qp_dtype_traits traits_table[] = {
    [QP_DTYPE_UNDEFINED] = {"undefined", 0, 0, 0, 0},
    [QP_DTYPE_FLOAT] = {"float", 32, 1, 0, 1},
    [QP_DTYPE_UINT8] = {"uint8", 8, 0, 1, 0},
    [QP_DTYPE_INT8] = {"int8", 8, 0, 1, 1},
    [QP_DTYPE_UINT16] = {"uint16", 16, 0, 1, 0},
    [QP_DTYPE_INT16] = {"int16", 16, 0, 1, 1},
    [QP_DTYPE_INT32] = {"int32", 32, 0, 1, 1},
    [QP_DTYPE_INT64] = {"int64", 64, 0, 1, 1},
    [QP_DTYPE_STRING] = {"string", 0, 0, 0, 0},
    [QP_DTYPE_BOOL] = {"bool", 8, 0, 0, 0},
    [QP_DTYPE_FLOAT16] = {"float16", 16, 1, 0, 1},
    [QP_DTYPE_DOUBLE] = {"double", 64, 1, 0, 1},
    [QP_DTYPE_UINT32] = {"uint32", 32, 0, 1, 0},
    [QP_DTYPE_UINT64] = {"uint64", 64, 0, 1, 0},
    [QP_DTYPE_COMPLEX64] = {"complex64", 64, 1, 0, 1},
    [QP_DTYPE_COMPLEX128] = {"complex128", 128, 1, 0, 1},
    [QP_DTYPE_BFLOAT16] = {"bfloat16", 16, 1, 0, 1},
    [QP_DTYPE_FLOAT8E4M3FN] = {"float8e4m3fn", 8, 1, 0, 1},
    [QP_DTYPE_FLOAT8E4M3FNUZ] = {"float8e4m3fnuz", 8, 1, 0, 1},
    [QP_DTYPE_FLOAT8E5M2] = {"float8e5m2", 8, 1, 0, 1},
    [QP_DTYPE_FLOAT8E5M2FNUZ] = {"float8e5m2fnuz", 8, 1, 0, 1},
    [QP_DTYPE_UINT4] = {"uint4", 4, 0, 1, 0},
    [QP_DTYPE_INT4] = {"int4", 4, 0, 1, 1},
    [QP_DTYPE_FLOAT4E2M1] = {"float4e2m1", 4, 1, 0, 1},
};
_Static_assert(sizeof(traits_table) / sizeof(traits_table[0]) == QP_DTYPE_COUNT,
               "every dtype needs a traits row");

int qp_dtype_valid(int v) {
    return v > QP_DTYPE_UNDEFINED && v < QP_DTYPE_COUNT;
}

const struct qp_dtype_traits *qp_dtype_traits(enum qp_dtype dt) {
    if (!qp_dtype_valid((int)dt)) return &traits_table[QP_DTYPE_UNDEFINED];
    return &traits_table[dt];
}

const char *qp_dtype_name(enum qp_dtype dt) {
    return qp_dtype_traits(dt)->name;
}

size_t qp_dtype_nbytes(enum qp_dtype dt, uint64_t n, int *ok) {
    int dummy;
    if (!ok) ok = &dummy;
    *ok = 0;
    int bits = qp_dtype_traits(dt)->bits;
    if (bits <= 0) return 0; /* undefined, invalid, string */
    uint64_t bytes;
    if (bits < 8) {
        /* Sub-byte types pack 8/bits elements per byte; written without n + 1 so that
         * n = UINT64_MAX cannot wrap. */
        uint64_t per = (uint64_t)(8 / bits);
        bytes = n / per + (n % per != 0);
    } else {
        uint64_t width = (uint64_t)(bits / 8);
        if (n > UINT64_MAX / width) return 0;
        bytes = n * width;
    }
    if (bytes > (uint64_t)SIZE_MAX) return 0;
    *ok = 1;
    return (size_t)bytes;
}

/* ---- bit helpers ------------------------------------------------------------------------- */

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/*
 * Rounds the magnitude of a finite float32 (its bits without the sign) to a binary format with
 * `man_bits` stored mantissa bits and exponent bias `bias`, to nearest with ties to even, and
 * returns the magnitude code (exponent field << man_bits | mantissa field). The code is not
 * range-checked: anything above the format's largest finite code means overflow. Because
 * codes are monotonic in the value, a mantissa carry simply moves to the next exponent.
 */
static uint32_t round_magnitude(uint32_t abs_bits, int man_bits, int bias) {
    int e32 = (int)(abs_bits >> 23);
    uint32_t mant = abs_bits & 0x7fffffu;
    int ue; /* unbiased exponent of the leading bit */
    if (e32 == 0) {
        ue = -126; /* float32 subnormal: no implicit bit */
    } else {
        mant |= 0x800000u;
        ue = e32 - 127;
    }
    int min_normal = 1 - bias;
    int shift = 23 - man_bits; /* float32 mantissa bits dropped for a normal result */
    int normal = ue >= min_normal;
    if (!normal) shift += min_normal - ue;
    uint32_t q;
    if (shift >= 32) {
        q = 0; /* far below half of the smallest subnormal */
    } else if (shift == 0) {
        q = mant;
    } else {
        q = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) q++;
    }
    if (!normal) return q; /* q == 1 << man_bits is the smallest normal code: still right */
    /* q is in [2^m, 2^(m+1)]; the implicit bit folds into the exponent field. */
    return ((uint32_t)(ue + bias - 1) << man_bits) + q;
}

/* ---- fp16 -------------------------------------------------------------------------------- */

float qp_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) /* inf or NaN: keep the payload (NaN stays NaN, quiet bit included) */
        return bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        float v = ldexpf((float)man, -24);
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t qp_f32_to_fp16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) {
        /* NaN: keep the top payload bits and force the quiet bit so it cannot become inf. */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x1ffu));
    }
    if (a == 0x7f800000u) return (uint16_t)(sign | 0x7c00u);
    uint32_t code = round_magnitude(a, 10, 15);
    if (code >= 0x7c00u) code = 0x7c00u; /* IEEE overflow rounds to infinity */
    return (uint16_t)(sign | code);
}

/* ---- bf16 -------------------------------------------------------------------------------- */

float qp_bf16_to_f32(uint16_t h) {
    return bits_f32((uint32_t)h << 16);
}

uint16_t qp_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: truncating could clear the payload */
        return (uint16_t)((u >> 16) | 0x0040u);
    /* Round to nearest even on the dropped 16 bits; a carry into the exponent (including up to
     * infinity) is the correct IEEE result. */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* ---- fp8 --------------------------------------------------------------------------------- */

struct fp8_format {
    int man_bits;
    int bias;
    uint8_t max_code; /* largest finite magnitude code */
    int has_inf;      /* E5M2: 0x7c is infinity */
    int uz;           /* FNUZ: single zero, 0x80 is the only NaN */
};

static const struct fp8_format *fp8_format_of(enum qp_dtype dt) {
    static const struct fp8_format e4m3fn = {3, 7, 0x7e, 0, 0};
    static const struct fp8_format e4m3fnuz = {3, 8, 0x7f, 0, 1};
    static const struct fp8_format e5m2 = {2, 15, 0x7b, 1, 0};
    static const struct fp8_format e5m2fnuz = {2, 16, 0x7f, 0, 1};
    switch (dt) {
    case QP_DTYPE_FLOAT8E4M3FN:
        return &e4m3fn;
    case QP_DTYPE_FLOAT8E4M3FNUZ:
        return &e4m3fnuz;
    case QP_DTYPE_FLOAT8E5M2:
        return &e5m2;
    case QP_DTYPE_FLOAT8E5M2FNUZ:
        return &e5m2fnuz;
    default:
        return NULL;
    }
}

float qp_fp8_to_f32(enum qp_dtype dt, uint8_t v) {
    const struct fp8_format *fmt = fp8_format_of(dt);
    if (!fmt) return NAN;
    int neg = (v & 0x80u) != 0;
    unsigned mag = v & 0x7fu;
    if (fmt->uz) {
        if (v == 0x80u) return NAN;
    } else if (fmt->has_inf) {
        if (mag == 0x7cu) return neg ? -INFINITY : INFINITY;
        if (mag > 0x7cu) return neg ? -NAN : NAN;
    } else if (mag == 0x7fu) {
        return neg ? -NAN : NAN;
    }
    unsigned exp = mag >> fmt->man_bits;
    unsigned man = mag & ((1u << fmt->man_bits) - 1u);
    float r;
    if (exp == 0)
        r = ldexpf((float)man, 1 - fmt->bias - fmt->man_bits);
    else
        r = ldexpf((float)((1u << fmt->man_bits) | man), (int)exp - fmt->bias - fmt->man_bits);
    return neg ? -r : r;
}

/* Follows the saturate tables of the ONNX Cast operator (opset 19+): with saturation, +-Inf and
 * values whose rounding exceeds the largest finite value become +-max for all four types; without
 * it, they become NaN (E4M3FN keeps the sign, the FNUZ types have only 0x80) or +-Inf (E5M2).
 * ONNX's docs/technical/float8.md maps +-Inf to NaN for the FNUZ types even with saturation; the
 * operator spec (and ONNX's and ONNX Runtime's reference code) say +-max, which we follow. */
uint8_t qp_f32_to_fp8(enum qp_dtype dt, float f, int saturate) {
    const struct fp8_format *fmt = fp8_format_of(dt);
    uint32_t u = f32_bits(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t a = u & 0x7fffffffu;
    if (!fmt) return 0;
    uint8_t nan_code = fmt->uz ? 0x80u : (uint8_t)(sign | 0x7fu);
    uint8_t overflow_code;
    if (saturate)
        overflow_code = (uint8_t)(sign | fmt->max_code);
    else if (fmt->has_inf)
        overflow_code = (uint8_t)(sign | 0x7cu);
    else
        overflow_code = nan_code;
    if (a > 0x7f800000u) return nan_code;
    if (a == 0x7f800000u) return overflow_code;
    uint32_t code = round_magnitude(a, fmt->man_bits, fmt->bias);
    if (code > fmt->max_code) return overflow_code;
    if (code == 0 && fmt->uz) return 0; /* no negative zero: 0x80 is NaN */
    return (uint8_t)(sign | code);
}

/* ---- bulk fp16 (core/half.h) --------------------------------------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

__attribute__((target("avx,f16c"))) static void h2f_f16c(const uint16_t *src, float *dst,
                                                         size_t n) {
    const __m128i expo = _mm_set1_epi16(0x7c00);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        /* Infinities and NaNs the scalar way: F16C quiets signalling NaNs, qplace keeps them. */
        if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, expo), expo))) {
            for (size_t k = i; k < i + 8; k++)
                dst[k] = qp_fp16_to_f32(src[k]);
            continue;
        }
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++)
        dst[i] = qp_fp16_to_f32(src[i]);
}

__attribute__((target("avx,f16c"))) static void f2h_f16c(const float *src, uint16_t *dst,
                                                         size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        dst[i] = qp_f32_to_fp16(src[i]);
}

/* Each float rounded to fp16 and back in registers: for a NaN, cvtps_ph quiets it first, so
 * cvtph_ps then meets a quiet NaN, which it widens as qp_fp16_to_f32 does. */
__attribute__((target("avx,f16c"))) static void round_f16c(const float *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i a = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        __m128i b = _mm256_cvtps_ph(_mm256_loadu_ps(src + i + 8), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(a));
        _mm256_storeu_ps(dst + i + 8, _mm256_cvtph_ps(b));
    }
    for (; i < n; i++)
        dst[i] = qp_fp16_to_f32(qp_f32_to_fp16(src[i]));
}

/* F16C and AVX, with the OS saving the AVX state (CPUID leaf 1 ECX bits 29, 28 and 27, and
 * XCR0's SSE and AVX bits): what the two functions above need. */
static int cpu_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    if (!(c & (1u << 29)) || !(c & (1u << 28)) || !(c & (1u << 27))) return 0;
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    return (lo & 6u) == 6u;
}

static int have_f16c(void) {
    static int v = -1;
    int h = __atomic_load_n(&v, __ATOMIC_RELAXED);
    if (h < 0) {
        h = cpu_f16c();
        __atomic_store_n(&v, h, __ATOMIC_RELAXED);
    }
    return h;
}
#else
static int have_f16c(void) {
    return 0;
}
#define h2f_f16c(s, d, n)   ((void)0)
#define f2h_f16c(s, d, n)   ((void)0)
#define round_f16c(s, d, n) ((void)0)
#endif

void qp_fp16_to_f32_n(const uint16_t *src, float *dst, size_t n) {
    if (have_f16c()) {
        h2f_f16c(src, dst, n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        dst[i] = qp_fp16_to_f32(src[i]);
}

void qp_f32_to_fp16_n(const float *src, uint16_t *dst, size_t n) {
    if (have_f16c()) {
        f2h_f16c(src, dst, n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        dst[i] = qp_f32_to_fp16(src[i]);
}

void qp_round_fp16_n(const float *src, float *dst, size_t n) {
    if (have_f16c()) {
        round_f16c(src, dst, n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        dst[i] = qp_fp16_to_f32(qp_f32_to_fp16(src[i]));
}
