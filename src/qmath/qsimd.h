/*
 * x86 SIMD blocks of the per-tensor int8/uint8 quantizers (qparams.c's fake-quantize and
 * quantize loops; every QuantizeLinear pass, FakeQuant pass and Pointwise fake-quantize step of
 * the engine runs through them). The arithmetic is the scalar code's, operation for operation:
 * q = x / scale (IEEE division), q rounded half to even (vrndscaleps / vroundps, exact), + zero
 * point, saturated to [lo, hi], then for fake-quantize (- zero point) * scale. So the bits are the
 * same; the hardware rounding replaces the scalar code's integer rounding trick, a third of the
 * instructions (on AVX-512, 0.07 ns an element against 0.18 on one core). A multiplication by
 * 1 / scale, checked to round as the division does (as the AVX2 GEMM epilogue does), was tried
 * on AVX2 and measured slower than the division on AMD EPYC (Zen 3): 0.20 against 0.14 ns an
 * element for fake-quantize.
 *
 * Each call handles one block of n <= QP_QSIMD_BLOCK elements in one pass and returns 1, or
 * returns 0 having written nothing when the CPU has neither AVX2 nor AVX-512F (the caller's
 * scalar path then takes the block). Every input gets the scalar quantize_one's value: a
 * quotient of 2^23 or more (an infinity too) saturates, a NaN gives the zero point. x and y may
 * be the same array. lo and hi are the type's range, zp the zero point (all integers).
 */
#ifndef QP_QMATH_QSIMD_H
#define QP_QMATH_QSIMD_H

#include <stdint.h>

#define QP_QSIMD_BLOCK 1024

/* y = (saturate(round_half_even(x / sc) + zp, lo, hi) - zp) * sc. */
int qp_qsimd_fake_quantize(const float *x, float *y, int64_t n, float sc, float zp, float lo,
                           float hi);

/* out (int8 when sgn, else uint8) = saturate(round_half_even(x / sc) + zp, lo, hi). */
int qp_qsimd_quantize_q8(const float *x, void *out, int sgn, int64_t n, float sc, float zp,
                         float lo, float hi);

/* The integer path's scaled steps (kernels/int8_pw.c's fast program), not the quantizers' IEEE
 * division: t = x * m, plus o when o is not 0 (two roundings, no fused multiply-add, so that
 * every ISA and the scalar code give the same bits), rounded half to even and saturated to
 * [lo, hi]. The caller's inputs are finite (no NaN rule). qp_qsimd_levels writes the levels
 * as floats; qp_qsimd_quantize_affine_q8 stores them as int8 (sgn) or uint8 (lo, hi within
 * the type: a zero point is folded into o). */
int qp_qsimd_levels(const float *x, float *y, int64_t n, float m, float o, float lo, float hi);
int qp_qsimd_quantize_affine_q8(const float *x, void *out, int sgn, int64_t n, float m, float o,
                                float lo, float hi);

/* 2 for AVX-512F, 1 for AVX2, 0 for neither: the CPU's flags, capped like the kernels' ISA by
 * ONEDNN_MAX_CPU_ISA (AVX2: at most 1; lower: 0) and by QP_QSIMD=0/1/2 (for comparing paths). */
int qp_qsimd_level(void);

#endif
