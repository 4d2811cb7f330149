/* Window geometry shared by Conv, ConvTranspose and the pools: kernel shape, strides, dilations,
 * pads (explicit or auto_pad), output sizes. Up to 3 spatial dimensions. */
#ifndef QP_KERNELS_SPATIAL_H
#define QP_KERNELS_SPATIAL_H

#include "kernels/kernel.h"

#define QP_MAX_SPATIAL 3

struct qp_window {
    int nsp; /* spatial dims */
    int64_t in[QP_MAX_SPATIAL], out[QP_MAX_SPATIAL], k[QP_MAX_SPATIAL];
    int64_t stride[QP_MAX_SPATIAL], dil[QP_MAX_SPATIAL];
    int64_t pad_begin[QP_MAX_SPATIAL], pad_end[QP_MAX_SPATIAL];
};

/* Reads strides, dilations, pads, auto_pad (and ceil_mode when `pool`) for input spatial sizes
 * `in` and kernel sizes `k`, and computes output sizes. */
enum qp_status qp_window_init(struct qp_window *w, const struct qp_node *n, int nsp,
                              const int64_t *in, const int64_t *k, int pool, struct qp_error *err);

#endif
