/*
 * Broadcast iteration shared by the elementwise family: up to 3 operands read with numpy
 * broadcasting into one output. Prepare builds a `qp_bcast` (shapes collapsed so that the
 * innermost run is as long as possible); run walks flat output ranges, one row at a time.
 */
#ifndef QP_KERNELS_BCAST_H
#define QP_KERNELS_BCAST_H

#include "kernels/kernel.h"

#define QP_BCAST_MAX_OPS 3

struct qp_bcast {
    int n_ops;
    int rank; /* >= 1 after collapsing */
    int64_t dims[QP_MAX_RANK];
    int64_t strides[QP_BCAST_MAX_OPS][QP_MAX_RANK]; /* element strides, 0 where broadcast */
    uint64_t numel;
};

/* Output shape of broadcasting `n` tensors (out rank/dims), then the collapsed iteration. */
enum qp_status qp_bcast_init(struct qp_bcast *b, int n, const struct qp_kt *const *ops, int rank,
                             const int64_t *dims, struct qp_error *err);

/* Calls fn(ctx, off[], stride_last[], out_offset, len) for every row piece of output elements
 * [begin, end). Offsets are element offsets per operand. */
typedef void (*qp_bcast_row_fn)(void *ctx, const int64_t *off, const int64_t *step, int64_t o,
                                int64_t len);
void qp_bcast_walk(const struct qp_bcast *b, int64_t begin, int64_t end, qp_bcast_row_fn fn,
                   void *ctx);

#endif
