/* Input checks shared by the shape, index, space, matrix, channel, mvn, detect, sample, qlinear,
 * rnn, window and Einsum kernels.
 *
 * qp_kinputs_sane: a tensor with a zero dimension has no elements whatever its other
 * dimensions are, so products of those (strides, plane counts, loop bounds) are not bounded
 * by a size that was checked: refuse shapes whose non-zero dimensions multiply past 2^62. */
#ifndef QP_KERNELS_KCHECK_H
#define QP_KERNELS_KCHECK_H

#include <stdlib.h>
#include <string.h>

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

/* Input i present and of a dtype the byte-moving kernels handle: whole bytes, not strings. */
static inline enum qp_status qp_kneed_bytes(const struct qp_kprep *p, int i) {
    enum qp_status st = qp_kneed(p, i);
    if (st) return st;
    if (qp_dtype_traits(p->in[i]->dtype)->bits < 8 || p->in[i]->dtype == QP_DTYPE_STRING)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "input %d has dtype %s", i,
                            qp_dtype_name(p->in[i]->dtype));
    return QP_OK;
}

/* Input i present and float32. */
static inline enum qp_status qp_kneed_f32(const struct qp_kprep *p, int i) {
    enum qp_status st = qp_kneed(p, i);
    if (st) return st;
    if (p->in[i]->dtype != QP_DTYPE_FLOAT)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "input %d is %s (float only)", i,
                            qp_dtype_name(p->in[i]->dtype));
    return QP_OK;
}

/* Copies the n-byte prepared state s into p->state (freed by the runtime). */
static inline enum qp_status qp_ksave_state(struct qp_kprep *p, const void *s, size_t n) {
    p->state = malloc(n ? n : 1);
    if (!p->state) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    memcpy(p->state, s, n);
    return QP_OK;
}

#endif
