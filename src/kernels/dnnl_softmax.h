/* The Softmax reference kernel (norm.c; LogSoftmax and Hardmax keep its registry rows): the
 * oracle and fallback of the oneDNN Softmax row (dnnl_softmax.c). */
#ifndef QP_KERNELS_DNNL_SOFTMAX_H
#define QP_KERNELS_DNNL_SOFTMAX_H

#include "kernels/kernel.h"

enum qp_status qp_k_softmax_prepare(struct qp_kprep *p);
enum qp_status qp_k_softmax_run(const struct qp_krun *r);

/* 1 when a state made by the Softmax registry row runs on oneDNN (tests). */
int qp_dnnl_softmax_state_uses_dnnl(const void *state);

#endif
