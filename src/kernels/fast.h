/*
 * Reference kernels behind fast variants, for the tests that compare the two.
 *
 * Some registry rows run a fast variant of their op when the node allows it (a Resize of the
 * last two dims, ...) and their reference kernel otherwise. The functions here always run the
 * reference, on a state made by the row's own prepare, and tell whether a state takes the fast
 * path, so a test can check that it exercised it.
 */
#ifndef QP_KERNELS_FAST_H
#define QP_KERNELS_FAST_H

#include "kernels/kernel.h"

/* Resize / Upsample (resize.c): the general separable kernel. */
enum qp_status qp_k_resize_ref_run(const struct qp_krun *r);
int qp_k_resize_state_is_fast(const void *state);

/* Unary math (elementwise.c) and activations (activation.c): libm for every element, where the
 * registry rows run Exp, Erf, Sigmoid, Tanh and Gelu on vecmath.h. */
enum qp_status qp_k_unary_ref_run(const struct qp_krun *r);
enum qp_status qp_k_act_ref_run(const struct qp_krun *r);

/* MaxPool (pool.c): the general kernel (float, int8, uint8, Indices), where the registry row
 * runs 1-D and 2-D float windows without dilation or Indices on a fast path. */
enum qp_status qp_k_maxpool_run(const struct qp_krun *r);

/* LayerNormalization (norm.c): row statistics summed one element at a time. */
enum qp_status qp_k_layernorm_ref_run(const struct qp_krun *r);

#endif
