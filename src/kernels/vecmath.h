/*
 * Vectorized float32 transcendental functions for the elementwise and activation kernels.
 *
 * Each function is written once (vecmath_body.h) over a small set of operations and compiled
 * three times: for AVX-512F (16 lanes, chosen at run time when qp_kernel_isa is QP_ISA_AVX512:
 * Erf and Softmax about 1.9x and 1.25x the AVX2 code's speed on the AMD EPYC with AVX-512,
 * whose 512-bit units are 256 bits wide), for AVX2+FMA (8 lanes,
 * `__attribute__((target("avx2,fma")))`, chosen when the CPU has both) and for plain C (one
 * lane, fmaf for each fused multiply-add). All perform the same IEEE operations on every
 * element, so they give bit-identical results, and an element's result does not depend on its
 * position in the array (tails are computed in a padded vector): splitting an array among
 * threads cannot change any result.
 *
 * Accuracy against the exact result (measured on every 101st float, tests/unit/kernels/
 * test_fast.c checks a sample): Exp 1.0 ulp, Erf 1.2 ulp, Tanh 1.5 ulp, Sigmoid 2.3 ulp. Gelu
 * evaluates u = x/sqrt2 and w = sqrt(2/pi) (x + 0.044715 x^3) in float as the reference kernel
 * does, and for large negative x the exponential magnifies that rounding: up to 44 ulp where
 * |y| >= 1e-7 and 5e-8 absolute below (Gelu is 0 from x = -4 sqrt2, where float erf is -1) —
 * still well inside the conformance tolerance |a-b| <= 1e-7 + 1e-3*|b|, and closer to the exact
 * value than the reference kernel's 1 + erff(u), which cancels.
 * NaN in gives NaN out; infinities give the limits (Exp(-inf) = 0, Erf(inf) = 1, ...).
 * Gelu(-inf) is NaN, as the formula evaluated in IEEE arithmetic gives (0.5*x*(1+erf(x/sqrt2))
 * = -inf * 0), matching the reference kernel.
 */
#ifndef QP_KERNELS_VECMATH_H
#define QP_KERNELS_VECMATH_H

#include <stdint.h>

enum qp_vfn {
    QP_VF_EXP,
    QP_VF_ERF,
    QP_VF_TANH,
    QP_VF_SIGMOID,
    QP_VF_GELU,      /* 0.5 x (1 + erf(x / sqrt 2)) */
    QP_VF_GELU_TANH, /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    QP_VF_COUNT
};

/* y[i] = f(x[i]) for i < n with the AVX-512 or AVX2+FMA code when the CPU has it (whole
 * vectors of 16, the rest through the AVX2 code), else with the plain-C
 * code where fmaf is a hardware instruction (FP_FAST_FMAF), and returns 1; returns 0 without
 * touching y otherwise (an x86 CPU without AVX2 or FMA, where the plain-C code would call fmaf
 * ~25 times per element): the caller then runs its libm loop. x and y may be the same array
 * (not otherwise overlapping). */
int qp_vf_apply(enum qp_vfn f, const float *x, float *y, int64_t n);
/* The plain-C code, always (bit-identical to the AVX2 code; the tests compare the two). */
void qp_vf_apply_portable(enum qp_vfn f, const float *x, float *y, int64_t n);
/* Softmax of `rows` rows of n contiguous floats: y = exp(x - max) / sum, with the exponential
 * above, partial sums over 8 interleaved lanes combined pairwise, then one reciprocal (the
 * AVX-512 code adds each 16-lane vector's halves into those 8 sums in turn: the same order).
 * Returns 0 without touching y where qp_vf_apply would return 0. Rows holding NaN or +inf, or only
 * -inf, come out as garbage: the caller fixes them (ONNX Runtime gives NaN rows).
 * x and y may be the same array. */
int qp_vf_softmax_rows(const float *x, float *y, int64_t rows, int64_t n);
/* 1 when qp_vf_softmax_rows computes (it would not return 0). */
int qp_vf_softmax_available(void);
/* The plain-C twin (bit-identical to the AVX2 code). */
void qp_vf_softmax_rows_portable(const float *x, float *y, int64_t rows, int64_t n);
/* 1 when qp_vf_apply runs the AVX2+FMA code: the CPU has it and qp_kernel_isa (isa.h, which
 * honours ONEDNN_MAX_CPU_ISA) is at least QP_ISA_AVX2. */
int qp_vf_have_avx2(void);

#endif
