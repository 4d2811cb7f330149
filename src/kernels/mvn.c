/*
 * MeanVarianceNormalization (opset 9, 13), float32: y = (x - E[x]) / (sqrt(Var[x]) + 1e-9)
 * with the statistics over `axes` (default 0, 2, 3), as the op's function body defines it.
 * Statistics accumulate in double, one group after another in element order, so the result
 * does not depend on the thread count; the variance is E[(x - E[x])^2], which equals the
 * function body's E[x^2] - E[x]^2 without its cancellation.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "kernels/kcheck.h"
#include "kernels/kernels.h"

struct mvn_state {
    int rank;
    int64_t dims[QP_MAX_RANK];
    int64_t gstride[QP_MAX_RANK]; /* group index stride per dim (0 for reduced dims) */
    int64_t n_groups, per_group;
};

enum qp_status qp_k_mvn_prepare(struct qp_kprep *p) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    enum qp_status st = qp_kneed(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    if (x->dtype != QP_DTYPE_FLOAT)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "input 0 is %s (float only)",
                            qp_dtype_name(x->dtype));
    const int64_t *axes;
    static const int64_t def_axes[3] = {0, 2, 3};
    int64_t n_axes = qp_kattr_ints(p->node, "axes", &axes);
    if (n_axes < 0) {
        axes = def_axes;
        n_axes = 3;
    }
    struct mvn_state s;
    memset(&s, 0, sizeof s);
    s.rank = x->rank;
    int reduced[QP_MAX_RANK] = {0};
    for (int64_t i = 0; i < n_axes; i++) {
        int64_t a;
        if ((st = qp_kaxis(axes[i], x->rank, &a, "axes entry", p->err))) return st;
        if (reduced[a])
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "axis %lld is listed twice",
                                (long long)axes[i]);
        reduced[a] = 1;
    }
    s.n_groups = s.per_group = 1;
    for (int d = x->rank - 1; d >= 0; d--) {
        s.dims[d] = x->dims[d];
        if (reduced[d]) {
            s.per_group *= x->dims[d];
        } else {
            s.gstride[d] = s.n_groups;
            s.n_groups *= x->dims[d];
        }
    }
    if ((st = qp_kt_set(p->out[0], QP_DTYPE_FLOAT, x->rank, x->dims, p->err))) return st;
    if (!x->numel) s.n_groups = 0; /* nothing to normalize; other dims may be huge */
    if (!qp_size_mul3((size_t)s.n_groups, 2, sizeof(double), &p->scratch))
        return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    return qp_ksave_state(p, &s, sizeof s);
}

static int64_t mvn_group(const struct mvn_state *s, uint64_t i) {
    int64_t g = 0;
    for (int d = s->rank - 1; d >= 0; d--) {
        g += (int64_t)(i % (uint64_t)s->dims[d]) * s->gstride[d];
        i /= (uint64_t)s->dims[d];
    }
    return g;
}

enum qp_status qp_k_mvn_run(const struct qp_krun *r) {
    const struct mvn_state *s = r->state;
    const float *x = r->in[0]->data;
    float *y = r->out[0]->data;
    uint64_t n = r->in[0]->numel;
    double *mean = r->scratch, *sd = mean + s->n_groups;
    memset(mean, 0, sizeof(double) * (size_t)s->n_groups * 2);
    double inv = s->per_group ? 1.0 / (double)s->per_group : 0.0;
    for (uint64_t i = 0; i < n; i++)
        mean[mvn_group(s, i)] += x[i];
    for (int64_t g = 0; g < s->n_groups; g++)
        mean[g] *= inv;
    for (uint64_t i = 0; i < n; i++) {
        int64_t g = mvn_group(s, i);
        double d = x[i] - mean[g];
        sd[g] += d * d;
    }
    for (int64_t g = 0; g < s->n_groups; g++)
        sd[g] = sqrt(sd[g] * inv) + 1e-9;
    for (uint64_t i = 0; i < n; i++) {
        int64_t g = mvn_group(s, i);
        y[i] = (float)((x[i] - mean[g]) / sd[g]);
    }
    return QP_OK;
}
