/*
 * Winograd F(2x2, 3x3) convolution for the Conv kernel state (dnnl_conv.c picks it).
 *
 * A 3x3, stride-1 convolution computes each 2x2 output tile from a 4x4 input patch d as
 * A^T [(G g G^T) .* (B^T d B)] A: the weights g are transformed once (U = G g G^T, 16 values
 * per output/input channel pair), each patch once per input channel (V = B^T d B), and the 16
 * element-wise products summed over input channels become 16 independent GEMMs
 * M_p[tile][m] = sum_c V_p[tile][c] U_p[c][m], which take 16 multiplies per tile and channel
 * pair instead of 36. A^T M A then gives the 2x2 outputs, to which the bias and the fused
 * post-operations (struct qp_conv_post, a residual SUM included) are applied.
 *
 * Activations are read and written in a layout given per tensor (struct qp_wino_layout): plain
 * NCHW or oneDNN's channel-blocked nChw8c / nChw16c, so the runtime's blocked chain between
 * convolutions stays unbroken. Every output element is computed by one thread in an order that does
 * not depend on the thread count; the tiling depends only on the shapes.
 */
#ifndef QP_KERNELS_WINOGRAD_H
#define QP_KERNELS_WINOGRAD_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dnnl_conv.h"
#include "kernels/isa.h"

/* The plan of one convolution, all derived from its geometry. */
struct qp_wino {
    int64_t n, c, m;      /* batch, input channels, output channels */
    int64_t h, w, ho, wo; /* input and output spatial sizes */
    int64_t pt, pl;       /* top and left padding */
    int64_t cp, mp;       /* c rounded up to 8, m to 16 */
    int64_t th, tw;       /* 2x2 output tiles per column and per row of one image */
    int64_t n_tiles, tg;  /* tiles of the whole batch; tiles per group (cache-sized) */
    int64_t vs, ms;       /* floats between positions in a group's V and M buffers */
    int max_threads;      /* threads a run uses at most (scratch for each) */
};

/* Where element (b, c, y, x) of an activation lives: b * sn + (c / blk) * sc + (y * width + x) * sp
 * + c % blk. blk is 1 (planar: NCHW has sc = height * width, sp = 1) or a multiple of 8 with
 * sp = blk (oneDNN's nChw8c on AVX2, nChw16c on AVX-512), or the whole padded channel count
 * with sp >= it (channels last: NHWC, oneDNN's choice for brgemm convolutions on AVX-512). In
 * the last two, 8 channels of a pixel from a multiple of 8 on are adjacent. */
struct qp_wino_layout {
    int64_t blk, sn, sc, sp;
};

/* 1 when the environment variable QP_NO_WINOGRAD is set to a non-empty value other than "0"
 * (read at every call): convolutions then stay on oneDNN, for A/B measurements. */
int qp_wino_disabled(void);

/* Whether Winograd beats oneDNN's direct kernels on a CPU of this kind, the shapes aside (see
 * docs/engine.md, "Winograd 3x3 convolutions"): yes below AVX-512 (oneDNN 2.6's jit:avx2 runs
 * 3x3 layers at a third of the FMA peak) and on AVX-512 without AMX (AMD EPYC Zen 4 and 5:
 * ResNet-50 1.11-1.16x faster with it); no on AVX-512 with AMX (Intel Xeon, Sapphire Rapids on),
 * where oneDNN's brgemm kernels run near the FMA peak and ResNet-50 is 4% faster without it.
 * Pure: tests call it with any values. */
int qp_wino_cpu_rule(enum qp_isa isa, int amx);

/* The process's answer: qp_wino_cpu_rule on the kernels' ISA and AMX (kernels/isa.h, so
 * ONEDNN_MAX_CPU_ISA caps it as it caps oneDNN), unless QP_WINOGRAD=1 in the environment (read
 * at every call) takes Winograd on any CPU: tests and A/B runs of both choices on one machine. */
int qp_wino_cpu_prefers(void);

/* 1 when the convolution (from qp_conv_geometry, not transposed) is one the Winograd path takes:
 * 2-D, 3x3 kernel, stride 1, dilation 1, group 1, pads 0 or 1, and the channel counts where it
 * was measured to beat oneDNN here (see docs/engine.md). Depends on the shapes only. */
int qp_wino_takes(const struct qp_conv_state *g);

/* Fills *wp for a geometry qp_wino_takes accepts, for runs on at most max_threads threads
 * (more are capped to it: the thread count changes no result). */
void qp_wino_plan(const struct qp_conv_state *g, int max_threads, struct qp_wino *wp);

/* Bytes of the transformed weights and of the run's scratch. */
size_t qp_wino_weight_bytes(const struct qp_wino *wp);
size_t qp_wino_scratch_bytes(const struct qp_wino *wp);

/* Transforms ONNX weights w ([m, c, 3, 3], borrowed) into u (qp_wino_weight_bytes, 32-byte
 * aligned): each U = G g G^T is computed in double and rounded once. */
void qp_wino_weights(const struct qp_wino *wp, const float *w, float *u);

/* One run's tensors, all borrowed for the call. res (the SUM operand, same shape as y) is read
 * only when post holds a SUM; bias may be NULL. */
struct qp_wino_io {
    const float *x, *bias, *res;
    float *y;
    struct qp_wino_layout lx, lres, ly;
    int n_post;
    const struct qp_conv_post *post;
    int portable; /* 1: the plain-C code even where AVX2+FMA is available (tests) */
};

/* Runs the convolution on n_threads OpenMP threads with the weights u from qp_wino_weights and
 * `scratch` (qp_wino_scratch_bytes, 64-byte aligned). Blocked outputs get zeros in the channels
 * of a partial last block. Does not allocate. */
void qp_wino_run(const struct qp_wino *wp, const float *u, const struct qp_wino_io *io,
                 void *scratch, int n_threads);

#endif
