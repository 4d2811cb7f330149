/*
 * Shared between the Conv/ConvTranspose reference kernels (conv.c) and their oneDNN variants
 * (dnnl_conv.c): the geometry every variant computes from the node, so the fast variant can fall
 * back to the reference kernel with the very same state.
 */
#ifndef QP_KERNELS_DNNL_CONV_H
#define QP_KERNELS_DNNL_CONV_H

#include "kernels/kernel.h"
#include "kernels/spatial.h"

struct qp_conv_state {
    struct qp_window w;
    int64_t n, c, m, group; /* batch, input channels, output channels */
    int has_bias;
    int64_t in_sz, out_sz, k_sz; /* spatial element counts */
    int64_t k3[3], in3[3], out3[3], s3[3], d3[3], p3[3];
};

/* Validates a Conv (transpose 0) or ConvTranspose (1) node, fills *s and sets output 0's dtype
 * and shape. Does not allocate p->state. */
enum qp_status qp_conv_geometry(struct qp_kprep *p, int transpose, struct qp_conv_state *s);

/* 1 when a state made by the Conv/ConvTranspose registry rows runs on oneDNN (tests). */
int qp_dnnl_conv_state_uses_dnnl(const void *state);

/* The reference kernels (conv.c): the oracle the oneDNN rows are tested against, and their
 * fallback. The registry rows use qp_k_dnnl_conv_* / qp_k_dnnl_conv_transpose_*. */
enum qp_status qp_k_conv_prepare(struct qp_kprep *p);
enum qp_status qp_k_conv_run(const struct qp_krun *r);
enum qp_status qp_k_conv_transpose_prepare(struct qp_kprep *p);
enum qp_status qp_k_conv_transpose_run(const struct qp_krun *r);

#endif
