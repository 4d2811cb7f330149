/*
 * Liveness-based placement of a plan's intermediate tensors in one arena. Each request lives
 * from the step that produces it (`first`) to the last step that reads it (`last`, inclusive);
 * requests whose lifetimes do not overlap may share bytes. Greedy in step order: a step's
 * outputs are placed (best fit among free holes, else at the top), then the tensors whose last
 * reader is that step are freed — so a step's inputs and outputs never alias.
 */
#ifndef QP_RUNTIME_MEMPLAN_H
#define QP_RUNTIME_MEMPLAN_H

#include <stddef.h>

#include "qplace/status.h"

struct qp_mem_req {
    size_t size;
    int first, last; /* first <= last */
    size_t offset;   /* output */
};

/* Fills every req's offset (multiples of `align`, a power of two) and *total_out, the arena
 * size. QP_ERR_NOMEM on overflow or allocation failure, QP_ERR_INTERNAL for first > last. */
enum qp_status qp_memplan(struct qp_mem_req *reqs, size_t n, size_t align, size_t *total_out,
                          struct qp_error *err);

#endif
