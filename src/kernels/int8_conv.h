/*
 * The INT8 convolution of the engine's integer path (src/runtime/int8.c writes its nodes): one
 * kernel for what TensorRT fuses around a Conv in a Q/DQ model,
 *
 *   y = Q( post2( Add( post1( Conv(DQ(x), DQ(w), bias) ), residual ) ) )
 *
 * as the internal op QP_INT8_DOMAIN "QConv". Inputs, by position (optional ones may be absent):
 *   0 x (int8/uint8)   1 x_scale (1 value)   2 x_zero_point
 *   3 w (int8, plan-time constant, [M, C/group, k...])   4 w_scale (1 or M values)   5 w_zero_point
 *   6 bias (float, constant)   7 y_scale   8 y_zero_point (absent: a float output)
 *   9 residual (int8/uint8 with 10 r_scale and 11 r_zero_point, or float, of the output's shape)
 * Attributes: Conv's own (ConvTranspose's with `transposed` 1: then w is [C, M/group, k...] and
 * w_scale has 1 or M values), `post` (ints: enum qp_conv_post_kind, QP_CONV_POST_SUM marks where
 * the residual is added), `post_alpha` / `post_beta` (floats), `out_dtype` (the float output's
 * dtype when no Q follows), `src_nhwc` / `dst_nhwc` / `res_nhwc` (1: that tensor -- the int8
 * source, the output, int8 or float, the int8 residual -- is stored channels last, NHWC, as the
 * integer kernels exchange it; only QConv, Pointwise (int8_pw.h, attribute nhwc) and a MaxPool
 * between QConv nodes read such tensors).
 *
 * A ConvTranspose (`transposed`) runs oneDNN's int8 deconvolution, or where its kernel equals
 * its stride without padding, dilation, groups or residual (upsampling heads: PaddleOCR det's)
 * a 1x1 int8 convolution to K x M channels whose pixels are scattered to the output; the AVX2
 * path takes that patch only (the runtime keeps other ConvTranspose nodes in float on CPUs
 * without VNNI).
 *
 * Paths, chosen when the node is prepared (qp_int8_conv_path):
 *   - QP_INT8_PATH_DNNL_INT8: oneDNN's int8 convolution (s8/u8 source, s8 weights, int32
 *     accumulation, per-channel output scales, the post-operations, requantized on store). Only
 *     where the CPU has VNNI (AVX-512 VNNI or AVX-VNNI): without it oneDNN sums u8 x s8 pairs
 *     into saturating int16 (vpmaddubsw) or halves the weights to avoid that, and neither is exact.
 *   - QP_INT8_PATH_AVX2: qplace's own exact integer kernels (kernels/int8_gemm.h) where the CPU
 *     has AVX2 but not VNNI: int32 sums through vpmaddubsw where a scan of the source shows the
 *     pair sums cannot saturate (every byte below 128; or int8 without -128, as |w| and
 *     sign(w) x; or int8 with -128 and no weight -128, as |x| and sign(x) w), else vpmaddwd on
 *     int16, and the reference's epilogue arithmetic vectorized:
 *     the same bytes as the reference path. Group 1 convolutions (1x1 as a GEMM on the
 * channels-last source, the others through an int8 im2col) and depthwise ones (group == channels ==
 * outputs, a direct channels-last kernel summing exactly in float32); other groups take the next
 * path.
 *   - QP_INT8_PATH_DNNL_F32: oneDNN's convolution in float on the dequantized values (AVX2
 *     without VNNI where the AVX2 path does not take the geometry, or below AVX2; exact in the
 *     sense that matters: no saturation, float rounding only).
 *   - QP_INT8_PATH_REF: plain C, int64 accumulation (oneDNN disabled or unable): the oracle.
 */
#ifndef QP_KERNELS_INT8_CONV_H
#define QP_KERNELS_INT8_CONV_H

#include "kernels/kernel.h"

#define QP_INT8_DOMAIN "qplace.int8"

enum qp_int8_path {
    QP_INT8_PATH_REF = 0,
    QP_INT8_PATH_DNNL_INT8,
    QP_INT8_PATH_DNNL_F32,
    QP_INT8_PATH_AVX2
};

/* The path's name in logs ("reference", "oneDNN int8", "oneDNN float", "AVX2 int8"). */
const char *qp_int8_path_name(enum qp_int8_path path);

/* The path a QConv / QMatMul state runs (tests). QMatMul (int8_matmul.c) is the same fusion
 * around MatMul and Gemm: DQ(a) @ DQ(b) [+ bias] [-> activations] [-> residual Add] [-> Q],
 * b a constant [K, N] (per column) or a computed int8 tensor (per tensor); it takes the same
 * paths (AVX2 for a constant b only). */
enum qp_int8_path qp_int8_conv_path(const void *state);
/* 1 when a QConv state runs a ConvTranspose as a 1x1 convolution and a scatter (tests). */
int qp_int8_conv_patch(const void *state);
enum qp_int8_path qp_int8_matmul_path(const void *state);

/* 1 when a QConv state's int8 residual (input 9) may share the output's bytes: oneDNN's int8
 * convolution adds the residual, copied into its channels-last destination before it runs, so
 * where the memory plan gives the output the residual's own bytes (the convolution being the
 * residual's last reader, and not reading it as its source) the copy is skipped. The run
 * compares the pointers: a residual elsewhere (a partial run's cache) is copied as before. */
int qp_int8_conv_sum_in_place(const void *state);

/* 1 when the ISA oneDNN runs with (kernels/isa.h: ONEDNN_MAX_CPU_ISA honoured) has VNNI, so
 * u8 x s8 dot products accumulate exactly in int32, and oneDNN is on. QP_INT8_VNNI=0/1 in the
 * environment overrides it (tests of both selections on one machine). */
int qp_int8_cpu_has_vnni(void);

/* Test switches, read when a node is prepared: QP_INT8_AVX2=0 in the environment keeps QConv and
 * QMatMul off the AVX2 path (oneDNN float then, as before it existed); QP_INT8_REF=1 runs every
 * QConv and QMatMul on the reference path, the oracle the others are compared with in one process
 * (QP_NO_DNNL gives the same, but for the whole process and every kernel). */
int qp_int8_avx2_allowed(void);
int qp_int8_ref_forced(void);

#endif
