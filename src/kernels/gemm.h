/*
 * A float32 GEMM on AVX2+FMA or AVX-512 for MatMul (dnnl_matmul.c): C = A B, row-major.
 *
 * B is packed into 16-column panels (in caller-provided memory), then register tiles of C are
 * computed: 6x16 (two ymm per row) with AVX2, 6x32 (two panels, one zmm each per row) when
 * qp_kernel_isa (isa.h) is QP_ISA_AVX512 (twice the multiply-adds per instruction; on this
 * AMD EPYC with AVX-512 about 1.5x faster on ViT-tiny's MatMuls). Every element of C is one chain
 * of fused multiply-adds over k = 0, 1, ..., K-1 in order (K blocks continue the chain through C),
 * whatever the tiling or the thread that computes it: results do not depend on the thread count,
 * and work can be shared out dynamically (which helps on a loaded machine).
 */
#ifndef QP_KERNELS_GEMM_H
#define QP_KERNELS_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/isa.h"

/* 1 when the CPU has AVX2 and FMA and qp_kernel_isa allows them (qp_gemm_f32 may only be called
 * then). */
int qp_gemm_available(void);

/* The register tile the functions below run: QP_ISA_AVX512 or QP_ISA_AVX2, as qp_kernel_isa
 * says (ONEDNN_MAX_CPU_ISA=AVX2 gives the AVX2 tile on an AVX-512 CPU); QP_ISA_PORTABLE when
 * qp_gemm_available is 0. Both tiles give the same bits. */
enum qp_isa qp_gemm_isa(void);

/* Bytes of packing memory qp_gemm_f32 needs for a k x n B; 0 on size overflow. */
size_t qp_gemm_pack_bytes(int64_t k, int64_t n);

/* C[m x n] (row stride ldc) = A[m x k] (row stride lda) * B[k x n] (row stride ldb), with
 * `pack` (qp_gemm_pack_bytes(k, n) bytes, 32-byte aligned) as scratch, on n_threads OpenMP
 * threads. k may be 0 (C is zeroed). A, B and C must not overlap. */
void qp_gemm_f32(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                 int64_t ldb, float *c, int64_t ldc, float *pack, int n_threads);

/* Packs a k x n B (row stride ldb) into `pack` (qp_gemm_pack_bytes(k, n) bytes), once, for
 * qp_gemm_f32_packed: a constant B is packed when the kernel is prepared. */
void qp_gemm_pack(int64_t k, int64_t n, const float *b, int64_t ldb, float *pack);
/* qp_gemm_f32 on a B packed by qp_gemm_pack (borrowed for the call; not written). */
void qp_gemm_f32_packed(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                        const float *pack, float *c, int64_t ldc, int n_threads);

/* C[m x 16 np] = A[m x k] B on the calling thread (no OpenMP region), B given as np panels of
 * k rows of 16 floats, `bs` floats apart (qp_gemm_pack's panel layout), C's panel j at column
 * 16 j. Each element of C is one multiply-add chain over k from zero, as in qp_gemm_f32. For
 * callers that share out their own work (winograd.c). */
void qp_gemm_panels(int64_t m, int64_t k, const float *a, int64_t lda, const float *b, int64_t bs,
                    int64_t np, float *c, int64_t ldc);

/* Finds matrix i of a batch: its A, B and C (B unused when the batch's B is packed). */
typedef void (*qp_gemm_locate_fn)(const void *ctx, int64_t i, const float **a, const float **b,
                                  float **c);

/* n_mats products C_i[m x n] = A_i[m x k] B_i[k x n] (row strides lda, ldb, ldc), located by
 * `locate(ctx, i, ...)`, in one OpenMP region on n_threads threads (small batches of large
 * matrices and large batches of small ones alike share out evenly). With `packed` (a B packed
 * by qp_gemm_pack, borrowed for the call) every product uses it; otherwise each B_i is packed
 * into `pack`, which holds n_mats * qp_gemm_pack_bytes(k, n) bytes (32-byte aligned). Each
 * element of C is the same multiply-add chain as in qp_gemm_f32. The A_i, B_i and C_i must not
 * overlap each other's C. */
void qp_gemm_f32_batch(int64_t n_mats, int64_t m, int64_t n, int64_t k, qp_gemm_locate_fn locate,
                       const void *ctx, int64_t lda, int64_t ldb, int64_t ldc, float *pack,
                       const float *packed, int n_threads);

#endif
