/*
 * Liveness-based placement of a plan's intermediate tensors in one arena. Each request lives
 * from the step that produces it (`first`) to the last step that reads it (`last`, inclusive);
 * requests whose lifetimes do not overlap may share bytes. Greedy in step order: a step's
 * outputs are placed (best fit among free holes, else at the top), then the tensors whose last
 * reader is that step are freed — so a step's inputs and outputs never alias, except where a
 * request takes over the bytes of another (`take`): a step that may write its output over an
 * input it reads for the last time (a convolution's fused residual sum accumulates onto it).
 */
#ifndef QP_RUNTIME_MEMPLAN_H
#define QP_RUNTIME_MEMPLAN_H

#include <stddef.h>

#include "qplace/status.h"

struct qp_mem_req {
    size_t size;
    int first, last; /* first <= last */
    size_t offset;   /* output */
    /* 1 + the index of a request whose bytes this one takes over, 0 for none: honoured when
     * that request's last step is this one's first, it started earlier, it is at least as large
     * and nothing else took it; the bytes are then freed after this request's last step. */
    size_t take;
};

/* Fills every req's offset (multiples of `align`, a power of two) and *total_out, the arena
 * size. QP_ERR_NOMEM on overflow or allocation failure, QP_ERR_INTERNAL for first > last. */
enum qp_status qp_memplan(struct qp_mem_req *reqs, size_t n, size_t align, size_t *total_out,
                          struct qp_error *err);

#endif
