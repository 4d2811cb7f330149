/* The Softmax reference kernel (norm.c; LogSoftmax and Hardmax keep its registry rows): the
 * oracle and fallback of the oneDNN Softmax row (dnnl_softmax.c). */
#ifndef QP_KERNELS_DNNL_SOFTMAX_H
#define QP_KERNELS_DNNL_SOFTMAX_H

#include "kernels/kernel.h"

enum qp_status qp_k_softmax_prepare(struct qp_kprep *p);
enum qp_status qp_k_softmax_run(const struct qp_krun *r);
/* norm.c: sets every row of y ([outer, axis_len, inner]) whose row of x holds a NaN or +Inf, or
 * only -Inf, to NaN, as ONNX Runtime's softmax gives; returns the number of such rows. */
int64_t qp_k_softmax_nan_rows(const float *x, float *y, int64_t outer, int64_t axis_len,
                              int64_t inner);

/* 1 when the integer path's SoftmaxQuantize (dnnl_softmax.c) can run here: it computes rows with
 * vecmath's softmax, the code the Softmax row runs on rows, and has no other. */
int qp_softmax_quantize_available(void);

/* 1 when a state made by the Softmax registry row runs on oneDNN (tests). */
int qp_dnnl_softmax_state_uses_dnnl(const void *state);

#endif
