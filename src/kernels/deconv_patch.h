/*
 * ConvTranspose whose kernel equals its stride (no padding, dilation 1, one group, no output
 * padding): every output pixel gets exactly one input pixel's contribution, so the op is a GEMM
 * and a scatter. For image n, Z[(m, d...), p] = sum_c W[c, m, d...] X[c, p] over input pixels p,
 * then Y[m, p * stride + d] = Z[(m, d), p]. The U-Net and FPN heads' 2x upsampling (PaddleOCR
 * det's 24 -> 24 and 24 -> 1 at 160 -> 320 -> 640) is this case; oneDNN 2.6 runs it as a
 * backward-data convolution (10 ms for det's last layer, 24 -> 1 channel, where this takes well
 * under 1 ms). The GEMM is gemm.c's (results independent of the thread count); the bias and the
 * post-operations are the caller's epilogue (dnnl_conv.c), on the plain NCHW output.
 */
#ifndef QP_KERNELS_DECONV_PATCH_H
#define QP_KERNELS_DECONV_PATCH_H

#include <stddef.h>

#include "kernels/dnnl_conv.h"

/* 1 when g (a ConvTranspose's geometry) is the kernel == stride case with 1 to 3 spatial dims,
 * and gemm.c runs on this CPU. */
int qp_patch_takes(const struct qp_conv_state *g);

/* Bytes of the rearranged weights (J x C floats, J = m * k_sz), and their fill from ONNX's
 * [C, M, k...] layout. */
size_t qp_patch_weight_bytes(const struct qp_conv_state *g);
void qp_patch_weights(const struct qp_conv_state *g, const float *w, float *out);

/* Scratch bytes of qp_patch_run (64-byte aligned offsets inside). */
size_t qp_patch_scratch_bytes(const struct qp_conv_state *g);

/* y (NCHW, without bias) from x (NCHW) and the rearranged weights, on n_threads threads. */
void qp_patch_run(const struct qp_conv_state *g, const float *x, const float *wt, float *y,
                  void *scratch, int n_threads);

#endif
