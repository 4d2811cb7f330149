/*
 * Channel-wise ops on NC... tensors, float32: LRN (local response normalization across
 * channels) and the opset 1-6 PRelu, whose slope of C values applies per channel (dim 1), as
 * its spec ("if Slope is of size 1, the value is shared across different channels") and the
 * PyTorch exporter of that time meant; opset 7 replaced this with unidirectional broadcasting
 * (elementwise.c).
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kcheck.h"
#include "kernels/kernels.h"

/* ---- LRN (opset 1, 13) ---------------------------------------------------------------------
 * y = x / (bias + alpha / size * sum of x^2 over channels [c - (size-1)/2, c + size/2])^beta,
 * the window clipped to the channels that exist. */

struct lrn_state {
    int64_t n, c, inner, lo, hi; /* window [c - lo, c + hi] */
    double alpha, beta, bias;
    int64_t size;
};

enum qp_status qp_k_lrn_prepare(struct qp_kprep *p) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    enum qp_status st = qp_kneed_f32(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    if (x->rank < 3)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "input rank %d < 3 (N, C, spatial...)",
                            x->rank);
    if (!qp_kattr(p->node, "size"))
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "attribute 'size' is required");
    struct lrn_state s;
    memset(&s, 0, sizeof s);
    s.size = qp_kattr_int(p->node, "size", 0);
    if (s.size < 1 || s.size > 1 << 20)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "size %lld is not in [1, 2^20]",
                            (long long)s.size);
    s.alpha = qp_kattr_float(p->node, "alpha", 1e-4f);
    s.beta = qp_kattr_float(p->node, "beta", 0.75f);
    s.bias = qp_kattr_float(p->node, "bias", 1.0f);
    s.lo = (s.size - 1) / 2;
    s.hi = s.size / 2; /* ceil((size - 1) / 2) */
    s.n = x->dims[0];
    s.c = x->dims[1];
    s.inner = 1;
    for (int i = 2; i < x->rank; i++)
        s.inner *= x->dims[i];
    if ((st = qp_kt_set(p->out[0], QP_DTYPE_FLOAT, x->rank, x->dims, p->err))) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_lrn_run(const struct qp_krun *r) {
    const struct lrn_state *s = r->state;
    const float *x = r->in[0]->data;
    float *y = r->out[0]->data;
    int64_t planes = s->n * s->c;
    int nt = planes * s->inner * s->size < 65536 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t pl = 0; pl < planes; pl++) {
        int64_t n = pl / s->c, c = pl % s->c;
        int64_t c0 = c - s->lo < 0 ? 0 : c - s->lo;
        int64_t c1 = c + s->hi >= s->c ? s->c - 1 : c + s->hi;
        for (int64_t i = 0; i < s->inner; i++) {
            double sq = 0;
            for (int64_t k = c0; k <= c1; k++) {
                double v = x[(n * s->c + k) * s->inner + i];
                sq += v * v;
            }
            double v = x[pl * s->inner + i];
            y[pl * s->inner + i] =
                (float)(v / pow(s->bias + s->alpha / (double)s->size * sq, s->beta));
        }
    }
    return QP_OK;
}

/* ---- PRelu, opset 1-6 ------------------------------------------------------------------------
 * The slope is one value, C values for dim 1 (rank-1 slope on an input of rank >= 2), or
 * otherwise a shape that broadcasts unidirectionally to X (as from opset 7). */

struct prelu6_state {
    int rank;
    int64_t dims[QP_MAX_RANK];    /* X's */
    int64_t sstride[QP_MAX_RANK]; /* slope element stride per X dim (0: broadcast) */
};

enum qp_status qp_k_prelu_legacy_prepare(struct qp_kprep *p) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    enum qp_status st = qp_kneed_f32(p, 0);
    if (!st) st = qp_kneed_f32(p, 1);
    if (st) return st;
    const struct qp_kt *x = p->in[0], *sl = p->in[1];
    struct prelu6_state s;
    memset(&s, 0, sizeof s);
    s.rank = x->rank;
    memcpy(s.dims, x->dims, sizeof(int64_t) * (size_t)x->rank);
    if (sl->numel == 1) {
        /* shared: all strides 0 */
    } else if (sl->rank == 1 && x->rank >= 2 && sl->dims[0] == x->dims[1]) {
        s.sstride[1] = 1; /* one value per channel, shared over the other dims */
    } else {
        if (sl->rank > x->rank)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "slope rank %d exceeds input rank %d",
                                sl->rank, x->rank);
        int64_t acc = 1;
        for (int i = sl->rank - 1; i >= 0; i--) {
            int xi = x->rank - sl->rank + i;
            if (sl->dims[i] != 1 && sl->dims[i] != x->dims[xi])
                return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                    "slope dim %d is %lld: neither 1, nor C = %lld values per "
                                    "channel, nor input dim %lld",
                                    i, (long long)sl->dims[i],
                                    (long long)(x->rank >= 2 ? x->dims[1] : 0),
                                    (long long)x->dims[xi]);
            s.sstride[xi] = sl->dims[i] == 1 ? 0 : acc;
            acc *= sl->dims[i];
        }
    }
    if ((st = qp_kt_set(p->out[0], QP_DTYPE_FLOAT, x->rank, x->dims, p->err))) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_prelu_legacy_run(const struct qp_krun *r) {
    const struct prelu6_state *s = r->state;
    const float *x = r->in[0]->data, *sl = r->in[1]->data;
    float *y = r->out[0]->data;
    int64_t n = (int64_t)r->in[0]->numel;
    int nt = n < 65536 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i, so = 0;
        for (int d = s->rank - 1; d >= 0; d--) {
            so += (rem % s->dims[d]) * s->sstride[d];
            rem /= s->dims[d];
        }
        y[i] = x[i] < 0 ? x[i] * sl[so] : x[i];
    }
    return QP_OK;
}
