/*
 * qplace/array.h — a dense host tensor: what callers hand to the engine, what the engine and
 * the npy/npz readers hand back.
 *
 *     struct qp_array a;
 *     int64_t dims[4] = {1, 3, 224, 224};
 *     if (qp_array_alloc(&a, QP_DTYPE_FLOAT, 4, dims, &err) != QP_OK) ...
 *     float *px = a.data;  // a.nbytes bytes, C order, little-endian, zeroed
 *     qp_array_release(&a);
 */
#ifndef QPLACE_ARRAY_H
#define QPLACE_ARRAY_H

#include <stddef.h>
#include <stdint.h>

#include "qplace/dtype.h"
#include "qplace/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QP_MAX_RANK 8

struct qp_array {
    enum qp_dtype dtype; /* no STRING arrays */
    int rank;            /* 0 for a scalar */
    int64_t dims[QP_MAX_RANK];
    void *data; /* packed C-order elements (sub-byte types two per byte) */
    size_t nbytes;
    int owned; /* 1: `data` was malloc'd for this array and qp_array_release frees it */
};

/* Element count (1 for rank 0). Returns 0 and *ok = 0 on overflow or a negative dim. */
uint64_t qp_array_numel(const struct qp_array *a, int *ok);

/* Fills `a` with a new zeroed owned array whose data starts on a 64-byte boundary. Rank above
 * QP_MAX_RANK, negative dims, STRING dtype or a size overflow is QP_ERR_USAGE / QP_ERR_NOMEM with a
 * message. On failure `a` is zeroed. */
enum qp_status qp_array_alloc(struct qp_array *a, enum qp_dtype dtype, int rank,
                              const int64_t *dims, struct qp_error *err);

/* Fills `a` as a view of `data` (borrowed; caller keeps it alive). Checks that nbytes matches
 * the shape and dtype. */
enum qp_status qp_array_view(struct qp_array *a, enum qp_dtype dtype, int rank, const int64_t *dims,
                             void *data, size_t nbytes, struct qp_error *err);

/* Frees owned data and zeroes `a`. NULL-safe. */
void qp_array_release(struct qp_array *a);

/* "1x3x224x224" (rank 0: "scalar"), written into buf (always NUL-terminated). */
const char *qp_array_shape_str(const struct qp_array *a, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
