/*
 * Pools' hooks for the runtime's float layout pass (runtime/layout.c): a float32 MaxPool
 * between two oneDNN convolutions that exchange channels-last (NHWC) tensors runs channels last
 * itself, so neither the convolution before it nor the one after reorders (ResNet's stem: a
 * 64 x 112 x 112 tensor each way).
 */
#ifndef QP_KERNELS_POOL_H
#define QP_KERNELS_POOL_H

/* 1 when a pool state made by the MaxPool row's prepare can run channels last (a max pool with
 * a channel axis); the caller checks that the step has no Indices output and float32 data. */
int qp_pool_nhwc_capable(const void *state);

/* Marks the state channels last: its input and its output are stored N, spatial..., C. */
void qp_pool_set_nhwc(void *state);

#endif
