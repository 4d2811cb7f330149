/*
 * Ops on the structure of a matrix or of one axis: Trilu (triangle of the last two dims),
 * EyeLike (identity-like 2-D tensor), CumSum (running sum along an axis), Det (determinant of
 * the last two dims, float32/double). Trilu and EyeLike
 * move or write elements of any type of 8 bits or more; CumSum adds float32/double (in
 * double) and integers (wrapping, in 64 bits).
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kcheck.h"
#include "kernels/kernels.h"

static size_t esize(enum qp_dtype dt) {
    return (size_t)qp_dtype_traits(dt)->bits / 8;
}

/* A scalar (or one-element) integer input, as int64. */
static enum qp_status scalar_int(const struct qp_kt *t, int i, const char *what,
                                 struct qp_error *err) {
    if ((t->dtype != QP_DTYPE_INT64 && t->dtype != QP_DTYPE_INT32) || t->numel != 1 || t->rank > 1)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "input %d (%s) must be one int32/int64 value, got %s with %llu "
                            "elements",
                            i, what, qp_dtype_name(t->dtype), (unsigned long long)t->numel);
    return QP_OK;
}

/* ---- Trilu (opset 14) ----------------------------------------------------------------------
 * upper=1 keeps the elements with j - i >= k, upper=0 those with j - i <= k; the rest are 0.
 * k (optional input 1) is data: read at run. */

struct trilu_state {
    int upper;
    int64_t rows, cols, mats;
    size_t es;
};

enum qp_status qp_k_trilu_prepare(struct qp_kprep *p) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    enum qp_status st = qp_kneed_bytes(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    if (x->rank < 2) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "input rank %d < 2", x->rank);
    if (p->n_in > 1 && p->in[1] && (st = scalar_int(p->in[1], 1, "k", p->err))) return st;
    struct trilu_state s;
    memset(&s, 0, sizeof s);
    int64_t upper = qp_kattr_int(p->node, "upper", 1);
    if (upper != 0 && upper != 1)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "upper is %lld, expected 0 or 1",
                            (long long)upper);
    s.upper = (int)upper;
    s.rows = x->dims[x->rank - 2];
    s.cols = x->dims[x->rank - 1];
    s.mats = 1;
    for (int i = 0; i < x->rank - 2; i++)
        s.mats *= x->dims[i];
    s.es = esize(x->dtype);
    if ((st = qp_kt_set(p->out[0], x->dtype, x->rank, x->dims, p->err))) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_trilu_run(const struct qp_krun *r) {
    const struct trilu_state *s = r->state;
    if (!r->in[0]->numel) return QP_OK; /* a zero dim: other dims may be huge */
    int64_t k = r->n_in > 1 && r->in[1] ? qp_kt_get_i64(r->in[1], 0) : 0;
    const unsigned char *x = r->in[0]->data;
    unsigned char *y = r->out[0]->data;
    size_t row = (size_t)s->cols * s->es;
    for (int64_t m = 0; m < s->mats; m++)
        for (int64_t i = 0; i < s->rows; i++) {
            size_t off = (size_t)(m * s->rows + i) * row;
            /* Columns kept: [lo, hi), with j - i compared to k without overflow. */
            int64_t lo, hi;
            if (s->upper) {
                lo = k >= s->cols ? s->cols : (k <= -i ? 0 : i + k);
                hi = s->cols;
            } else {
                lo = 0;
                hi = k >= s->cols ? s->cols : (k < -i ? 0 : i + k + 1);
                if (hi > s->cols) hi = s->cols;
            }
            if (lo > s->cols) lo = s->cols;
            memset(y + off, 0, row);
            if (hi > lo)
                memcpy(y + off + (size_t)lo * s->es, x + off + (size_t)lo * s->es,
                       (size_t)(hi - lo) * s->es);
        }
    return QP_OK;
}

/* ---- EyeLike (opset 9) ---------------------------------------------------------------------
 * A 2-D tensor of the input's shape with ones where j - i == k; `dtype` chooses the output
 * type (default: the input's). */

struct eye_state {
    int64_t k;
};

enum qp_status qp_k_eyelike_prepare(struct qp_kprep *p) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    enum qp_status st = qp_kneed(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    if (x->rank != 2)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "input rank %d, expected 2", x->rank);
    int64_t dt = qp_kattr_int(p->node, "dtype", x->dtype);
    if (!qp_dtype_valid((int)dt) || dt != (int)dt)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "dtype %lld is not an ONNX type",
                            (long long)dt);
    enum qp_dtype odt = (enum qp_dtype)dt;
    int is_int_or_bool = odt == QP_DTYPE_BOOL || odt == QP_DTYPE_INT8 || odt == QP_DTYPE_UINT8 ||
                         odt == QP_DTYPE_INT16 || odt == QP_DTYPE_UINT16 || odt == QP_DTYPE_INT32 ||
                         odt == QP_DTYPE_UINT32 || odt == QP_DTYPE_INT64 || odt == QP_DTYPE_UINT64;
    if (!is_int_or_bool && odt != QP_DTYPE_FLOAT && odt != QP_DTYPE_DOUBLE &&
        odt != QP_DTYPE_FLOAT16 && odt != QP_DTYPE_BFLOAT16)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "output dtype %s", qp_dtype_name(odt));
    struct eye_state s = {qp_kattr_int(p->node, "k", 0)};
    if ((st = qp_kt_set(p->out[0], odt, 2, x->dims, p->err))) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_eyelike_run(const struct qp_krun *r) {
    const struct eye_state *s = r->state;
    struct qp_kt *y = r->out[0];
    int64_t rows = y->dims[0], cols = y->dims[1];
    if (!y->numel) return QP_OK;
    memset(y->data, 0, y->nbytes);
    for (int64_t i = 0; i < rows; i++) {
        /* j = i + k, computed only when it lands inside [0, cols) */
        if (s->k >= cols - i || s->k < -i) continue;
        qp_kt_set_f64(y, (uint64_t)(i * cols + i + s->k), 1.0);
    }
    return QP_OK;
}

/* ---- CumSum (opset 11, 14) -----------------------------------------------------------------
 * Running sum along `axis` (input 1, a plan-time value); `exclusive` leaves out the element
 * itself, `reverse` runs from the end. Each line is summed by one thread in one order. */

struct cumsum_state {
    int64_t outer, len, inner;
    int exclusive, reverse;
};

enum qp_status qp_k_cumsum_prepare(struct qp_kprep *p) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    enum qp_status st = qp_kneed(p, 0);
    if (!st) st = qp_kneed_const(p, 1, "axis");
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    switch (x->dtype) {
    case QP_DTYPE_FLOAT:
    case QP_DTYPE_DOUBLE:
    case QP_DTYPE_INT32:
    case QP_DTYPE_INT64:
    case QP_DTYPE_UINT32:
    case QP_DTYPE_UINT64:
        break;
    default:
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "input 0 has dtype %s",
                            qp_dtype_name(x->dtype));
    }
    if ((st = scalar_int(p->in[1], 1, "axis", p->err))) return st;
    if (x->rank < 1) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "input 0 is a scalar");
    int64_t axis;
    if ((st = qp_kaxis(qp_kt_get_i64(p->in[1], 0), x->rank, &axis, "axis", p->err))) return st;
    struct cumsum_state s;
    memset(&s, 0, sizeof s);
    s.outer = s.inner = 1;
    for (int i = 0; i < axis; i++)
        s.outer *= x->dims[i];
    s.len = x->dims[axis];
    for (int i = (int)axis + 1; i < x->rank; i++)
        s.inner *= x->dims[i];
    s.exclusive = qp_kattr_int(p->node, "exclusive", 0) != 0;
    s.reverse = qp_kattr_int(p->node, "reverse", 0) != 0;
    if ((st = qp_kt_set(p->out[0], x->dtype, x->rank, x->dims, p->err))) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_cumsum_run(const struct qp_krun *r) {
    const struct cumsum_state *s = r->state;
    const struct qp_kt *x = r->in[0];
    struct qp_kt *y = r->out[0];
    int is_float = x->dtype == QP_DTYPE_FLOAT || x->dtype == QP_DTYPE_DOUBLE;
    if (!x->numel) return QP_OK;
    int64_t lines = s->outer * s->inner;
    int nt = lines * s->len < 65536 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t ln = 0; ln < lines; ln++) {
        int64_t o = ln / s->inner, in = ln % s->inner;
        uint64_t base = (uint64_t)(o * s->len * s->inner + in);
        double fsum = 0;
        uint64_t isum = 0; /* unsigned: wraps without undefined behaviour */
        for (int64_t q = 0; q < s->len; q++) {
            int64_t a = s->reverse ? s->len - 1 - q : q;
            uint64_t i = base + (uint64_t)(a * s->inner);
            if (is_float) {
                double v = qp_kt_get_f64(x, i);
                if (!s->exclusive) fsum += v;
                qp_kt_set_f64(y, i, fsum);
                if (s->exclusive) fsum += v;
            } else {
                uint64_t v = (uint64_t)qp_kt_get_i64(x, i);
                if (!s->exclusive) isum += v;
                qp_kt_set_i64(y, i, (int64_t)isum);
                if (s->exclusive) isum += v;
            }
        }
    }
    return QP_OK;
}

/* ---- Det (opset 11) ------------------------------------------------------------------------
 * Determinant of each [M, M] matrix of the last two dims: LU decomposition with partial
 * pivoting in double, in scratch. */

struct det_state {
    int64_t mats, m;
};

enum qp_status qp_k_det_prepare(struct qp_kprep *p) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    enum qp_status st = qp_kneed(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    if (x->dtype != QP_DTYPE_FLOAT && x->dtype != QP_DTYPE_DOUBLE)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "input 0 has dtype %s",
                            qp_dtype_name(x->dtype));
    if (x->rank < 2 || x->dims[x->rank - 1] != x->dims[x->rank - 2])
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "input must be [..., M, M]");
    struct det_state s;
    s.m = x->dims[x->rank - 1];
    s.mats = 1;
    for (int i = 0; i < x->rank - 2; i++)
        s.mats *= x->dims[i];
    if (s.m > 4096)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "matrix of %lld rows", (long long)s.m);
    if ((st = qp_kt_set(p->out[0], x->dtype, x->rank - 2, x->dims, p->err))) return st;
    p->scratch = (size_t)(s.m * s.m) * sizeof(double);
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_det_run(const struct qp_krun *r) {
    const struct det_state *s = r->state;
    const struct qp_kt *x = r->in[0];
    double *a = r->scratch;
    int64_t m = s->m;
    for (int64_t t = 0; t < s->mats; t++) {
        for (int64_t i = 0; i < m * m; i++)
            a[i] = qp_kt_get_f64(x, (uint64_t)(t * m * m + i));
        double det = 1;
        for (int64_t c = 0; c < m && det != 0; c++) {
            int64_t piv = c;
            for (int64_t i = c + 1; i < m; i++)
                if (fabs(a[i * m + c]) > fabs(a[piv * m + c])) piv = i;
            if (a[piv * m + c] == 0) {
                det = 0;
                break;
            }
            if (piv != c) {
                for (int64_t j = 0; j < m; j++) {
                    double v = a[c * m + j];
                    a[c * m + j] = a[piv * m + j];
                    a[piv * m + j] = v;
                }
                det = -det;
            }
            det *= a[c * m + c];
            for (int64_t i = c + 1; i < m; i++) {
                double f = a[i * m + c] / a[c * m + c];
                for (int64_t j = c; j < m; j++)
                    a[i * m + j] -= f * a[c * m + j];
            }
        }
        qp_kt_set_f64(r->out[0], (uint64_t)t, det);
    }
    return QP_OK;
}
