#include "kernels/bcast.h"

#include <string.h>

enum qp_status qp_bcast_init(struct qp_bcast *b, int n, const struct qp_kt *const *ops, int rank,
                             const int64_t *dims, struct qp_error *err) {
    memset(b, 0, sizeof *b);
    b->n_ops = n;
    int64_t st[QP_BCAST_MAX_OPS][QP_MAX_RANK];
    uint64_t numel = 1;
    for (int i = 0; i < rank; i++)
        numel *= (uint64_t)dims[i];
    for (int k = 0; k < n; k++) {
        const struct qp_kt *t = ops[k];
        if (t->rank > rank)
            return qp_error_set(err, QP_ERR_INTERNAL, "broadcast operand rank exceeds output");
        int64_t s = 1;
        for (int i = rank - 1; i >= 0; i--) {
            int ti = i - (rank - t->rank);
            int64_t d = ti >= 0 ? t->dims[ti] : 1;
            if (d != dims[i] && d != 1)
                return qp_error_set(err, QP_ERR_BAD_INPUT,
                                    "operand %d cannot be broadcast to the output shape", k);
            st[k][i] = (d == 1 && dims[i] != 1) ? 0 : s;
            if (d == 1) st[k][i] = 0;
            s *= d;
        }
    }
    /* Collapse: drop size-1 output dims, merge neighbours whose operands are all contiguous
     * across the boundary (stride[i] == stride[i+1] * dims[i+1]) or all broadcast. */
    int r = 0;
    int64_t cd[QP_MAX_RANK];
    int64_t cs[QP_BCAST_MAX_OPS][QP_MAX_RANK];
    for (int i = 0; i < rank; i++) {
        if (dims[i] == 1) continue;
        if (r > 0) {
            int merge = 1;
            for (int k = 0; k < n; k++) {
                int64_t prev = cs[k][r - 1];
                if (!(prev == st[k][i] * dims[i])) merge = 0;
            }
            if (merge) {
                cd[r - 1] *= dims[i];
                for (int k = 0; k < n; k++)
                    cs[k][r - 1] = st[k][i];
                continue;
            }
        }
        cd[r] = dims[i];
        for (int k = 0; k < n; k++)
            cs[k][r] = st[k][i];
        r++;
    }
    if (r == 0) {
        cd[0] = 1;
        for (int k = 0; k < n; k++)
            cs[k][0] = 1;
        r = 1;
    }
    b->rank = r;
    memcpy(b->dims, cd, sizeof(int64_t) * (size_t)r);
    for (int k = 0; k < n; k++)
        memcpy(b->strides[k], cs[k], sizeof(int64_t) * (size_t)r);
    b->numel = numel;
    return QP_OK;
}

void qp_bcast_walk(const struct qp_bcast *b, int64_t begin, int64_t end, qp_bcast_row_fn fn,
                   void *ctx) {
    int r = b->rank;
    int64_t row = b->dims[r - 1];
    int64_t step[QP_BCAST_MAX_OPS];
    for (int k = 0; k < b->n_ops; k++)
        step[k] = b->strides[k][r - 1];
    int64_t idx = begin;
    while (idx < end) {
        int64_t rowi = idx / row, j = idx % row;
        int64_t len = row - j;
        if (len > end - idx) len = end - idx;
        int64_t off[QP_BCAST_MAX_OPS];
        for (int k = 0; k < b->n_ops; k++)
            off[k] = j * step[k];
        int64_t q = rowi;
        for (int i = r - 2; i >= 0 && q; i--) {
            int64_t c = q % b->dims[i];
            q /= b->dims[i];
            for (int k = 0; k < b->n_ops; k++)
                off[k] += c * b->strides[k][i];
        }
        fn(ctx, off, step, idx, len);
        idx += len;
    }
}
