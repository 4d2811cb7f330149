/* States of the MatMul and Gemm reference kernels (matmul.c), shared with their oneDNN variants
 * (dnnl_matmul.c), which reuse the reference prepare and fall back to the reference run. */
#ifndef QP_KERNELS_DNNL_MATMUL_H
#define QP_KERNELS_DNNL_MATMUL_H

#include "kernels/kernel.h"

struct qp_mm_state {
    int64_t m, n, k, batch;
    int brank;
    int64_t bdims[QP_MAX_RANK]; /* output batch dims */
    int64_t astr[QP_MAX_RANK];  /* A matrix index stride per batch dim (0: broadcast) */
    int64_t bstr[QP_MAX_RANK];
};

struct qp_gemm_state {
    int64_t m, n, k;
    int ta, tb;
    float alpha, beta;
    int has_c;
    int64_t c_sm, c_sn; /* strides of C broadcast to m x n */
};

/* The reference kernels (matmul.c); the registry rows use the qp_k_dnnl_* variants. */
enum qp_status qp_k_matmul_prepare(struct qp_kprep *p);
enum qp_status qp_k_matmul_run(const struct qp_krun *r);
enum qp_status qp_k_gemm_prepare(struct qp_kprep *p);
enum qp_status qp_k_gemm_run(const struct qp_krun *r);

#endif
