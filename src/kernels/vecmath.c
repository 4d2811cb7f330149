/*
 * vecmath.h: the functions of vecmath_body.h instantiated for plain C and for AVX2+FMA, and the
 * run-time choice between them.
 */
#include "kernels/vecmath.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/isa.h"

/* ---- plain C: one lane ---------------------------------------------------------------------- */

static inline float vm_bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint32_t vm_f_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
/* max keeping the first operand when the second is NaN (maxps's rule, with a NaN x dropped) */
#define VM_MAXF(a, b) ((b) > (a) ? (b) : (a))

static inline float vm_pow2i_c(float n) {
    /* n is integral in [-126, 127] except on NaN lanes, whose result is replaced. */
    if (!(n >= -126.0f && n <= 127.0f)) return 1.0f;
    return vm_bits_f((uint32_t)((int32_t)n + 127) << 23);
}

#define V              float
#define VM_ATTR        /* */
#define VM_NAME(n)     n##_c
#define VSET(c)        (c)
#define VADD(a, b)     ((a) + (b))
#define VSUB(a, b)     ((a) - (b))
#define VMUL(a, b)     ((a) * (b))
#define VDIV(a, b)     ((a) / (b))
#define VFMA(a, b, c)  fmaf((a), (b), (c))
#define VFNMA(a, b, c) fmaf(-(a), (b), (c))
#define VMIN(a, b)     ((a) < (b) ? (a) : (b))
#define VMAX(a, b)     ((a) > (b) ? (a) : (b))
#define VABS(a)        fabsf(a)
#define VROUND(a)      nearbyintf(a)
#define VLT(a, b)      ((a) < (b))
#define VNAN(a)        ((a) != (a))
#define VSEL(m, a, b)  ((m) ? (a) : (b))
#define VSIGN(a)       vm_bits_f(vm_f_bits(a) & 0x80000000u)
#define VXOR(a, b)     vm_bits_f(vm_f_bits(a) ^ vm_f_bits(b))
#define VPOW2I(n)      vm_pow2i_c(n)
#include "kernels/vecmath_body.h"
#undef V
#undef VM_ATTR
#undef VM_NAME

void qp_vf_apply_portable(enum qp_vfn f, const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = vm_eval_c(f, x[i]);
}

/* Softmax rows, one lane at a time in the AVX2 code's order: element i adds into partial sum
 * i % 8 (the tail's padding lanes would add exp(-inf) = +0, which changes no sum), the partial
 * sums combined pairwise. */
void qp_vf_softmax_rows_portable(const float *x, float *y, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        float m = -INFINITY;
        for (int64_t i = 0; i < n; i++)
            m = VM_MAXF(m, xr[i]);
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int64_t i = 0; i < n; i++) {
            yr[i] = vm_expf_c(xr[i] - m);
            acc[i % 8] += yr[i];
        }
        float sum =
            ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        float inv = 1.0f / sum;
        for (int64_t i = 0; i < n; i++)
            yr[i] *= inv;
    }
}

/* ---- AVX2 + FMA: eight lanes ---------------------------------------------------------------- */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define QP_VM_X86 1

#define V              __m256
#define VM_ATTR        __attribute__((target("avx2,fma")))
#define VM_NAME(n)     n##_avx2
#define VSET(c)        _mm256_set1_ps(c)
#define VADD(a, b)     _mm256_add_ps((a), (b))
#define VSUB(a, b)     _mm256_sub_ps((a), (b))
#define VMUL(a, b)     _mm256_mul_ps((a), (b))
#define VDIV(a, b)     _mm256_div_ps((a), (b))
#define VFMA(a, b, c)  _mm256_fmadd_ps((a), (b), (c))
#define VFNMA(a, b, c) _mm256_fnmadd_ps((a), (b), (c))
/* minps/maxps return the second operand when either is NaN: the C definitions above. */
#define VMIN(a, b)    _mm256_min_ps((a), (b))
#define VMAX(a, b)    _mm256_max_ps((a), (b))
#define VABS(a)       _mm256_andnot_ps(_mm256_set1_ps(-0.0f), (a))
#define VROUND(a)     _mm256_round_ps((a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VLT(a, b)     _mm256_cmp_ps((a), (b), _CMP_LT_OQ)
#define VNAN(a)       _mm256_cmp_ps((a), (a), _CMP_UNORD_Q)
#define VSEL(m, a, b) _mm256_blendv_ps((b), (a), (m))
#define VSIGN(a)      _mm256_and_ps(_mm256_set1_ps(-0.0f), (a))
#define VXOR(a, b)    _mm256_xor_ps((a), (b))
#define VPOW2I(n)                                                                                  \
    _mm256_castsi256_ps(                                                                           \
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23))
#include "kernels/vecmath_body.h"

/* The cases of a vf_apply instance: VF_LOOP over the instance's function of each qp_vfn. */
#define VF_CASES(SUF)                                                                              \
    case QP_VF_EXP:                                                                                \
        VF_LOOP(vm_expf_##SUF);                                                                    \
        break;                                                                                     \
    case QP_VF_ERF:                                                                                \
        VF_LOOP(vm_erf_##SUF);                                                                     \
        break;                                                                                     \
    case QP_VF_TANH:                                                                               \
        VF_LOOP(vm_tanh_##SUF);                                                                    \
        break;                                                                                     \
    case QP_VF_SIGMOID:                                                                            \
        VF_LOOP(vm_sigmoid_##SUF);                                                                 \
        break;                                                                                     \
    case QP_VF_GELU:                                                                               \
        VF_LOOP(vm_gelu_##SUF);                                                                    \
        break;                                                                                     \
    case QP_VF_GELU_TANH:                                                                          \
        VF_LOOP(vm_gelu_tanh_##SUF);                                                               \
        break;

/* The tail goes through a padded vector: every element is computed by the same lane code. */
VM_ATTR static void vf_apply_avx2(enum qp_vfn f, const float *x, float *y, int64_t n) {
    int64_t i = 0;
#define VF_LOOP(FN)                                                                                \
    for (; i + 8 <= n; i += 8)                                                                     \
        _mm256_storeu_ps(y + i, FN(_mm256_loadu_ps(x + i)));                                       \
    if (i < n) {                                                                                   \
        float buf[8] = {0};                                                                        \
        memcpy(buf, x + i, (size_t)(n - i) * sizeof(float));                                       \
        _mm256_storeu_ps(buf, FN(_mm256_loadu_ps(buf)));                                           \
        memcpy(y + i, buf, (size_t)(n - i) * sizeof(float));                                       \
    }
    switch (f) {
        VF_CASES(avx2)
    default:
        if (x != y) memmove(y, x, (size_t)n * sizeof(float));
        break;
    }
#undef VF_LOOP
}

/* One block of 8: the exponentials of xr[0..8) - m stored at yr and added into acc. */
VM_ATTR static __m256 exp_block8(const float *xr, float *yr, __m256 mv, __m256 acc) {
    __m256 e = vm_expf_avx2(_mm256_sub_ps(_mm256_loadu_ps(xr), mv));
    _mm256_storeu_ps(yr, e);
    return _mm256_add_ps(acc, e);
}

/* The last rem (< 8) elements through a block padded with -infinity (whose exponentials, 0,
 * add nothing), then the eight partial sums added in pairs: the row's sum. */
VM_ATTR static float exp_tail_sum(const float *xr, float *yr, int64_t rem, __m256 mv, __m256 acc) {
    if (rem) {
        float buf[8];
        for (int j = 0; j < 8; j++)
            buf[j] = j < rem ? xr[j] : -INFINITY;
        __m256 e = vm_expf_avx2(_mm256_sub_ps(_mm256_loadu_ps(buf), mv));
        acc = _mm256_add_ps(acc, e);
        _mm256_storeu_ps(buf, e);
        memcpy(yr, buf, (size_t)rem * sizeof(float));
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, acc);
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
           ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

VM_ATTR static void softmax_rows_avx2(const float *x, float *y, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        int64_t nb = n / 8 * 8;
        /* the maximum is exact whatever the order */
        __m256 vm = _mm256_set1_ps(-INFINITY);
        for (int64_t i = 0; i < nb; i += 8)
            vm = _mm256_max_ps(_mm256_loadu_ps(xr + i), vm);
        float lanes[8];
        _mm256_storeu_ps(lanes, vm);
        float m = -INFINITY;
        for (int j = 0; j < 8; j++)
            m = VM_MAXF(m, lanes[j]);
        for (int64_t i = nb; i < n; i++)
            m = VM_MAXF(m, xr[i]);
        __m256 mv = _mm256_set1_ps(m), acc = _mm256_setzero_ps();
        for (int64_t i = 0; i < nb; i += 8)
            acc = exp_block8(xr + i, yr + i, mv, acc);
        float inv = 1.0f / exp_tail_sum(xr + nb, yr + nb, n - nb, mv, acc);
        __m256 iv = _mm256_set1_ps(inv);
        for (int64_t i = 0; i < nb; i += 8)
            _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_loadu_ps(yr + i), iv));
        for (int64_t i = nb; i < n; i++)
            yr[i] *= inv;
    }
}

/* ---- AVX-512F: sixteen lanes, the same operations per lane ---------------------------------- */

#undef V
#undef VM_ATTR
#undef VM_NAME
#define V              __m512
#define VM_ATTR        __attribute__((target("avx512f,fma")))
#define VM_NAME(n)     n##_avx512
#define VSET(c)        _mm512_set1_ps(c)
#define VADD(a, b)     _mm512_add_ps((a), (b))
#define VSUB(a, b)     _mm512_sub_ps((a), (b))
#define VMUL(a, b)     _mm512_mul_ps((a), (b))
#define VDIV(a, b)     _mm512_div_ps((a), (b))
#define VFMA(a, b, c)  _mm512_fmadd_ps((a), (b), (c))
#define VFNMA(a, b, c) _mm512_fnmadd_ps((a), (b), (c))
/* minps/maxps return the second operand when either is NaN, as their AVX2 forms. */
#define VMIN(a, b)    _mm512_min_ps((a), (b))
#define VMAX(a, b)    _mm512_max_ps((a), (b))
#define VABS(a)       _mm512_abs_ps(a)
#define VROUND(a)     _mm512_roundscale_ps((a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VLT(a, b)     _mm512_cmp_ps_mask((a), (b), _CMP_LT_OQ)
#define VNAN(a)       _mm512_cmp_ps_mask((a), (a), _CMP_UNORD_Q)
#define VSEL(m, a, b) _mm512_mask_mov_ps((b), (m), (a))
#define VSIGN(a)                                                                                   \
    _mm512_castsi512_ps(                                                                           \
        _mm512_and_si512(_mm512_set1_epi32((int)0x80000000u), _mm512_castps_si512(a)))
#define VXOR(a, b)                                                                                 \
    _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)))
#define VPOW2I(n)                                                                                  \
    _mm512_castsi512_ps(                                                                           \
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23))
#include "kernels/vecmath_body.h"

/* vf_apply_avx2 sixteen at a time: whole vectors of 16, then the AVX2 code (whose lanes compute
 * the same values) on the rest. */
VM_ATTR static void vf_apply_avx512(enum qp_vfn f, const float *x, float *y, int64_t n) {
    int64_t i = 0;
#define VF_LOOP(FN)                                                                                \
    for (; i + 16 <= n; i += 16)                                                                   \
        _mm512_storeu_ps(y + i, FN(_mm512_loadu_ps(x + i)));
    switch (f) {
        VF_CASES(avx512)
    default:
        break;
    }
#undef VF_LOOP
    if (i < n) vf_apply_avx2(f, x + i, y + i, n - i);
}

/* softmax_rows_avx2 with the exponentials sixteen at a time: each vector's two halves are
 * added into the eight partial sums one after the other, the AVX2 code's order. */
VM_ATTR static void softmax_rows_avx512(const float *x, float *y, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        int64_t nb = n / 8 * 8, rem = n - nb, i = 0;
        __m512 vm = _mm512_set1_ps(-INFINITY);
        for (; i + 16 <= nb; i += 16)
            vm = _mm512_max_ps(_mm512_loadu_ps(xr + i), vm);
        float m = _mm512_reduce_max_ps(vm); /* the maximum is exact whatever the order */
        for (; i < n; i++)
            m = VM_MAXF(m, xr[i]);
        __m512 mv = _mm512_set1_ps(m);
        __m256 acc = _mm256_setzero_ps();
        for (i = 0; i + 16 <= nb; i += 16) {
            __m512 e = vm_expf_avx512(_mm512_sub_ps(_mm512_loadu_ps(xr + i), mv));
            _mm512_storeu_ps(yr + i, e);
            acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
            acc = _mm256_add_ps(acc,
                                _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
        }
        if (i < nb) acc = exp_block8(xr + i, yr + i, _mm256_set1_ps(m), acc); /* 8 left */
        float inv = 1.0f / exp_tail_sum(xr + nb, yr + nb, rem, _mm256_set1_ps(m), acc);
        __m512 iv = _mm512_set1_ps(inv);
        for (i = 0; i + 16 <= n; i += 16)
            _mm512_storeu_ps(yr + i, _mm512_mul_ps(_mm512_loadu_ps(yr + i), iv));
        for (; i < n; i++)
            yr[i] *= inv;
    }
}
#endif

static int have_avx512(void) {
#ifdef QP_VM_X86
    return qp_kernel_isa() >= QP_ISA_AVX512;
#else
    return 0;
#endif
}

int qp_vf_have_avx2(void) {
#ifdef QP_VM_X86
    return qp_kernel_isa() >= QP_ISA_AVX2;
#else
    return 0;
#endif
}

int qp_vf_softmax_available(void) {
#ifdef FP_FAST_FMAF
    return 1;
#else
    return qp_vf_have_avx2();
#endif
}

int qp_vf_softmax_rows(const float *x, float *y, int64_t rows, int64_t n) {
#ifdef QP_VM_X86
    if (have_avx512()) {
        softmax_rows_avx512(x, y, rows, n);
        return 1;
    }
    if (qp_vf_have_avx2()) {
        softmax_rows_avx2(x, y, rows, n);
        return 1;
    }
#endif
#ifdef FP_FAST_FMAF
    qp_vf_softmax_rows_portable(x, y, rows, n);
    return 1;
#else
    return 0;
#endif
}

int qp_vf_apply(enum qp_vfn f, const float *x, float *y, int64_t n) {
#ifdef QP_VM_X86
    if (have_avx512()) {
        vf_apply_avx512(f, x, y, n);
        return 1;
    }
    if (qp_vf_have_avx2()) {
        vf_apply_avx2(f, x, y, n);
        return 1;
    }
#endif
#ifdef FP_FAST_FMAF
    /* fmaf is an instruction here (aarch64, ...): the one-lane code is fast. */
    qp_vf_apply_portable(f, x, y, n);
    return 1;
#else
    /* fmaf would be a library call per operation, slower than the caller's libm loop. */
    return 0;
#endif
}