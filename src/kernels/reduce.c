/* Reductions (ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
 * ReduceSumSquare, ReduceLogSum, ReduceLogSumExp), ArgMax/ArgMin and TopK. Axes come from the
 * attribute or, from ReduceSum-13 and the others' opset 18, from input 1 (plan-time constant).
 * Accumulation is in double, in input order. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "kernels/kcheck.h"
#include "kernels/kernels.h"

enum red_op { R_MEAN, R_SUM, R_MAX, R_MIN, R_PROD, R_L1, R_L2, R_SUMSQ, R_LOGSUM, R_LOGSUMEXP };

struct red_state {
    enum red_op op;
    int rank;
    int64_t dims[QP_MAX_RANK];
    int reduced[QP_MAX_RANK];
    int64_t ostride[QP_MAX_RANK]; /* output stride of each input dim (0 when reduced) */
    int64_t count;                /* elements per output */
    int identity;                 /* no axes and noop_with_empty_axes: copy */
    /* float32 sums whose reduced axes are adjacent (size-1 axes aside): the input is outer x
     * red x inner, the output outer x inner (red_fast) */
    int fast;
    int64_t outer, red, inner;
};

static const struct {
    const char *name;
    enum red_op op;
    int axes_input_since; /* opset from which axes are an input */
} red_ops[] = {{"ReduceMean", R_MEAN, 18},     {"ReduceSum", R_SUM, 13},
               {"ReduceMax", R_MAX, 18},       {"ReduceMin", R_MIN, 18},
               {"ReduceProd", R_PROD, 18},     {"ReduceL1", R_L1, 18},
               {"ReduceL2", R_L2, 18},         {"ReduceSumSquare", R_SUMSQ, 18},
               {"ReduceLogSum", R_LOGSUM, 18}, {"ReduceLogSumExp", R_LOGSUMEXP, 18}};

/* Sets s->fast (and outer, red, inner) for a float32 mean, sum or sum of squares whose
 * reduced axes are adjacent once axes of size 1 are set aside. */
static void plan_fast(struct red_state *s, enum qp_dtype dt) {
    if (dt != QP_DTYPE_FLOAT || s->identity ||
        (s->op != R_MEAN && s->op != R_SUM && s->op != R_SUMSQ))
        return;
    int seen = 0, after = 0; /* a reduced axis was seen; a kept axis followed it */
    s->outer = s->red = s->inner = 1;
    for (int i = 0; i < s->rank; i++) {
        if (s->dims[i] == 1) continue;
        if (s->reduced[i]) {
            if (after) return; /* a second run of reduced axes */
            seen = 1;
            s->red *= s->dims[i];
        } else {
            after |= seen;
            *(seen ? &s->inner : &s->outer) *= s->dims[i];
        }
    }
    s->fast = 1;
}

/* acc[o][i] = the sum over r of x[o][r][i] (of its square for R_SUMSQ), in double, in input
 * order: the general loop's values, without its per-element index walk. */
static void red_fast(const struct red_state *s, const float *x, double *acc) {
    int sq = s->op == R_SUMSQ;
    for (int64_t o = 0; o < s->outer; o++) {
        const float *xo = x + o * s->red * s->inner;
        double *a = acc + o * s->inner;
        if (s->inner == 1) {
            double t = 0;
            for (int64_t r = 0; r < s->red; r++)
                t += sq ? (double)xo[r] * (double)xo[r] : (double)xo[r];
            a[0] = t;
            continue;
        }
        for (int64_t i = 0; i < s->inner; i++)
            a[i] = 0;
        for (int64_t r = 0; r < s->red; r++)
            for (int64_t i = 0; i < s->inner; i++) {
                double v = xo[r * s->inner + i];
                a[i] += sq ? v * v : v;
            }
    }
}

enum qp_status qp_k_reduce_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    struct red_state s;
    memset(&s, 0, sizeof s);
    size_t oi;
    for (oi = 0; oi < sizeof red_ops / sizeof red_ops[0]; oi++)
        if (strcmp(red_ops[oi].name, p->node->op_type) == 0) break;
    if (oi == sizeof red_ops / sizeof red_ops[0])
        return qp_error_set(p->err, QP_ERR_INTERNAL, "not a reduction");
    s.op = red_ops[oi].op;
    if (x->dtype == QP_DTYPE_BOOL ||
        !(qp_dtype_traits(x->dtype)->is_float || qp_dtype_traits(x->dtype)->is_integer) ||
        qp_dtype_traits(x->dtype)->bits < 8)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "dtype %s", qp_dtype_name(x->dtype));
    int keep = (int)qp_kattr_int(p->node, "keepdims", 1);
    int noop = (int)qp_kattr_int(p->node, "noop_with_empty_axes", 0);
    int64_t axes[QP_MAX_RANK * 2];
    int na = -1;
    if (p->opset >= red_ops[oi].axes_input_since) {
        if (p->n_in > 1 && p->in[1]) {
            st = qp_kneed_const(p, 1, "axes");
            if (st) return st;
            if (p->in[1]->numel > QP_MAX_RANK * 2)
                return qp_error_set(p->err, QP_ERR_BAD_INPUT, "too many axes");
            na = (int)p->in[1]->numel;
            for (int i = 0; i < na; i++)
                axes[i] = qp_kt_get_i64(p->in[1], (uint64_t)i);
        }
    } else {
        const int64_t *v;
        int64_t n = qp_kattr_ints(p->node, "axes", &v);
        if (n > QP_MAX_RANK * 2) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "too many axes");
        if (n >= 0) {
            na = (int)n;
            memcpy(axes, v, sizeof(int64_t) * (size_t)n);
        }
    }
    s.rank = x->rank;
    memcpy(s.dims, x->dims, sizeof s.dims);
    if (na <= 0) {
        if (noop && na == 0) s.identity = 1;
        if (noop && na < 0 && p->opset >= red_ops[oi].axes_input_since) s.identity = 1;
        if (!s.identity)
            for (int i = 0; i < x->rank; i++)
                s.reduced[i] = 1;
    } else {
        for (int i = 0; i < na; i++) {
            int64_t a;
            st = qp_kaxis(axes[i], x->rank, &a, "axis", p->err);
            if (st) return st;
            s.reduced[a] = 1;
        }
    }
    int64_t od[QP_MAX_RANK];
    int orank = 0;
    s.count = 1;
    for (int i = 0; i < x->rank; i++) {
        if (s.reduced[i]) {
            s.count *= x->dims[i];
            if (keep) od[orank++] = 1;
        } else {
            od[orank++] = x->dims[i];
        }
    }
    int64_t acc = 1;
    for (int i = x->rank - 1; i >= 0; i--) {
        s.ostride[i] = s.reduced[i] ? 0 : acc;
        if (!s.reduced[i]) acc *= x->dims[i];
    }
    plan_fast(&s, x->dtype);
    st = qp_kt_set(p->out[0], x->dtype, orank, od, p->err);
    if (st) return st;
    if (!qp_size_mul((size_t)p->out[0]->numel, sizeof(double), &p->scratch))
        return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    return qp_ksave_state(p, &s, sizeof s);
}

/* acc[o] for every output o: the op over its elements in input order (any dtype, any axes). */
static void red_general(const struct red_state *s, const struct qp_kt *x, double *acc,
                        uint64_t n_out) {
    double init = 0;
    if (s->op == R_MAX) init = -INFINITY;
    if (s->op == R_MIN) init = INFINITY;
    if (s->op == R_PROD) init = 1;
    for (uint64_t i = 0; i < n_out; i++)
        acc[i] = init;
    int64_t idx[QP_MAX_RANK] = {0};
    int64_t o = 0;
    for (uint64_t i = 0; i < x->numel; i++) {
        double v = qp_kt_get_f64(x, i);
        switch (s->op) {
        case R_MEAN:
        case R_SUM:
        case R_LOGSUM:
            acc[o] += v;
            break;
        case R_MAX:
            acc[o] = (v > acc[o] || v != v) ? v : acc[o];
            break;
        case R_MIN:
            acc[o] = (v < acc[o] || v != v) ? v : acc[o];
            break;
        case R_PROD:
            acc[o] *= v;
            break;
        case R_L1:
            acc[o] += fabs(v);
            break;
        case R_L2:
        case R_SUMSQ:
            acc[o] += v * v;
            break;
        case R_LOGSUMEXP:
            acc[o] += exp(v);
            break;
        }
        for (int d = s->rank - 1; d >= 0; d--) {
            idx[d]++;
            o += s->ostride[d];
            if (idx[d] < s->dims[d]) break;
            o -= s->ostride[d] * s->dims[d];
            idx[d] = 0;
        }
    }
}

enum qp_status qp_k_reduce_run(const struct qp_krun *r) {
    const struct red_state *s = r->state;
    const struct qp_kt *x = r->in[0];
    struct qp_kt *y = r->out[0];
    if (s->identity) {
        if (x->nbytes) memcpy(y->data, x->data, x->nbytes);
        return QP_OK;
    }
    double *acc = r->scratch;
    if (s->fast)
        red_fast(s, x->data, acc);
    else
        red_general(s, x, acc, y->numel);
    for (uint64_t i = 0; i < y->numel; i++) {
        double v = acc[i];
        switch (s->op) {
        case R_MEAN:
            v = s->count ? v / (double)s->count : NAN;
            break;
        case R_L2:
            v = sqrt(v);
            break;
        case R_LOGSUM:
        case R_LOGSUMEXP:
            v = log(v);
            break;
        default:
            break;
        }
        qp_kt_set_f64(y, i, v);
    }
    return QP_OK;
}

/* ---- ArgMax, ArgMin -------------------------------------------------------------------- */

struct arg_state {
    int is_max, last;
    int64_t outer, n, inner;
};

enum qp_status qp_k_arg_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    if (x->rank == 0) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "scalar input");
    struct arg_state s = {0};
    s.is_max = strcmp(p->node->op_type, "ArgMax") == 0;
    s.last = (int)qp_kattr_int(p->node, "select_last_index", 0);
    int keep = (int)qp_kattr_int(p->node, "keepdims", 1);
    int64_t axis;
    st = qp_kaxis(qp_kattr_int(p->node, "axis", 0), x->rank, &axis, "axis", p->err);
    if (st) return st;
    s.outer = s.inner = 1;
    for (int i = 0; i < axis; i++)
        s.outer *= x->dims[i];
    s.n = x->dims[axis];
    for (int i = (int)axis + 1; i < x->rank; i++)
        s.inner *= x->dims[i];
    if (s.n == 0) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "empty axis");
    int64_t od[QP_MAX_RANK];
    int r = 0;
    for (int i = 0; i < x->rank; i++)
        if (i != axis)
            od[r++] = x->dims[i];
        else if (keep)
            od[r++] = 1;
    st = qp_kt_set(p->out[0], QP_DTYPE_INT64, r, od, p->err);
    if (st) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_arg_run(const struct qp_krun *r) {
    const struct arg_state *s = r->state;
    int64_t *y = r->out[0]->data;
    for (int64_t o = 0; o < s->outer; o++)
        for (int64_t i = 0; i < s->inner; i++) {
            int64_t best = 0;
            double bv = qp_kt_get_f64(r->in[0], (uint64_t)(o * s->n * s->inner + i));
            for (int64_t k = 1; k < s->n; k++) {
                double v = qp_kt_get_f64(r->in[0], (uint64_t)((o * s->n + k) * s->inner + i));
                int better =
                    s->is_max ? (v > bv || (s->last && v == bv)) : (v < bv || (s->last && v == bv));
                if (better) {
                    bv = v;
                    best = k;
                }
            }
            y[o * s->inner + i] = best;
        }
    return QP_OK;
}

/* ---- TopK -------------------------------------------------------------------------------- */

struct topk_state {
    int largest, sorted;
    int64_t outer, n, inner, k;
};

enum qp_status qp_k_topk_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    if (x->rank == 0) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "scalar input");
    struct topk_state s = {0};
    s.largest = p->opset >= 11 ? (int)qp_kattr_int(p->node, "largest", 1) : 1;
    s.sorted = p->opset >= 11 ? (int)qp_kattr_int(p->node, "sorted", 1) : 1;
    int64_t axis;
    st = qp_kaxis(qp_kattr_int(p->node, "axis", -1), x->rank, &axis, "axis", p->err);
    if (st) return st;
    if (p->opset < 10) {
        s.k = qp_kattr_int(p->node, "k", -1);
    } else {
        st = qp_kneed_const(p, 1, "K");
        if (st) return st;
        if (p->in[1]->numel != 1)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "K must have one element");
        s.k = qp_kt_get_i64(p->in[1], 0);
    }
    s.outer = s.inner = 1;
    for (int i = 0; i < axis; i++)
        s.outer *= x->dims[i];
    s.n = x->dims[axis];
    for (int i = (int)axis + 1; i < x->rank; i++)
        s.inner *= x->dims[i];
    if (s.k < 0 || s.k > s.n)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "k = %lld for an axis of %lld",
                            (long long)s.k, (long long)s.n);
    int64_t od[QP_MAX_RANK];
    memcpy(od, x->dims, sizeof od);
    od[axis] = s.k;
    st = qp_kt_set(p->out[0], x->dtype, x->rank, od, p->err);
    if (!st && p->n_out > 1 && p->out[1])
        st = qp_kt_set(p->out[1], QP_DTYPE_INT64, x->rank, od, p->err);
    if (st) return st;
    if (!qp_size_mul3((size_t)s.n, sizeof(int64_t), 2, &p->scratch))
        return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_topk_run(const struct qp_krun *r) {
    const struct topk_state *s = r->state;
    int64_t *order = r->scratch;
    for (int64_t o = 0; o < s->outer; o++)
        for (int64_t i = 0; i < s->inner; i++) {
            uint64_t base = (uint64_t)(o * s->n * s->inner + i);
            for (int64_t k = 0; k < s->n; k++)
                order[k] = k;
            /* Selection of the k best, stable: ties keep the lower index first. */
            for (int64_t a = 0; a < s->k; a++) {
                int64_t best = a;
                double bv = qp_kt_get_f64(r->in[0], base + (uint64_t)(order[a] * s->inner));
                for (int64_t b = a + 1; b < s->n; b++) {
                    double v = qp_kt_get_f64(r->in[0], base + (uint64_t)(order[b] * s->inner));
                    int better = s->largest ? v > bv : v < bv;
                    if (better || (v == bv && order[b] < order[best])) {
                        best = b;
                        bv = v;
                    }
                }
                int64_t t = order[a];
                order[a] = order[best];
                order[best] = t;
            }
            for (int64_t a = 0; a < s->k; a++) {
                uint64_t oi = (uint64_t)((o * s->k + a) * s->inner + i);
                qp_kt_set_f64(r->out[0], oi,
                              qp_kt_get_f64(r->in[0], base + (uint64_t)(order[a] * s->inner)));
                if (r->n_out > 1 && r->out[1]) ((int64_t *)r->out[1]->data)[oi] = order[a];
            }
        }
    return QP_OK;
}
