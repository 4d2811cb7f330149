/* Input sanity shared by the index, space, matrix, channel, mvn, detect, sample, qlinear, rnn
 * and Einsum kernels. A tensor with a zero dimension has no elements whatever its other
 * dimensions are, so products of those (strides, plane counts, loop bounds) are not bounded
 * by a size that was checked: refuse shapes whose non-zero dimensions multiply past 2^62. */
#ifndef QP_KERNELS_KCHECK_H
#define QP_KERNELS_KCHECK_H

#include "kernels/kernel.h"

static inline enum qp_status qp_kinputs_sane(const struct qp_kprep *p) {
    for (int i = 0; i < p->n_in; i++) {
        const struct qp_kt *t = p->in[i];
        if (!t || t->numel) continue;
        uint64_t n = 1;
        for (int d = 0; d < t->rank; d++) {
            uint64_t v = t->dims[d] > 0 ? (uint64_t)t->dims[d] : 1;
            if (n > (UINT64_C(1) << 62) / v)
                return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                    "input %d: its non-zero dimensions multiply past 2^62", i);
            n *= v;
        }
    }
    return QP_OK;
}

#endif
