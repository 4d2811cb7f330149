/* The Add/Sub/Mul/Div rows on oneDNN's binary primitive (dnnl_binary.c); the reference
 * qp_k_binary_* kernels (elementwise.c) are their oracle and fallback. */
#ifndef QP_KERNELS_DNNL_BINARY_H
#define QP_KERNELS_DNNL_BINARY_H

/* 1 when a state made by the Add/Sub/Mul/Div rows runs on oneDNN (tests). */
int qp_dnnl_binary_state_uses_dnnl(const void *state);

#endif
