/*
 * Gather's geometry, shared by the Gather row (shape.c) and the integer path's GatherQuantize
 * (qdq.c: a Gather whose output only a per-tensor QuantizeLinear reads, quantizing each run as
 * it copies it). Data is viewed as [outer, axis_len, inner]; each index picks one run of inner
 * elements per outer.
 */
#ifndef QP_KERNELS_GATHER_H
#define QP_KERNELS_GATHER_H

#include <stdint.h>

#include "kernels/kernel.h"

struct qp_kgather {
    int64_t axis, outer, axis_len, inner;
};

/* Checks prepare p's data (input 0, whole bytes, not a scalar) and indices (input 1, int32 or
 * int64) and attribute axis, fills *g and sets output 0's shape with data's dtype. */
enum qp_status qp_kgather_prepare(struct qp_kprep *p, struct qp_kgather *g);

/* Checks every index of t against [-axis_len, axis_len) (QP_ERR_BAD_INPUT naming the first
 * outside). */
enum qp_status qp_kgather_check(const struct qp_kt *t, int64_t axis_len, struct qp_error *err);

/* Index i of t, made non-negative (checked by qp_kgather_check). */
int64_t qp_kgather_index(const struct qp_kt *t, uint64_t i, int64_t axis_len);

#endif
