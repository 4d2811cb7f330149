#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/elem.h"
#include "kernels/kernel.h"

const struct qp_attr *qp_kattr(const struct qp_node *n, const char *name) {
    for (int i = 0; i < n->n_attrs; i++)
        if (n->attrs[i].name && strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
    return NULL;
}

int64_t qp_kattr_int(const struct qp_node *n, const char *name, int64_t def) {
    const struct qp_attr *a = qp_kattr(n, name);
    if (!a) return def;
    if (a->type == QP_ATTR_FLOAT) return (int64_t)a->f;
    return a->i;
}

float qp_kattr_float(const struct qp_node *n, const char *name, float def) {
    const struct qp_attr *a = qp_kattr(n, name);
    if (!a) return def;
    if (a->type == QP_ATTR_INT) return (float)a->i;
    return a->f;
}

const char *qp_kattr_str(const struct qp_node *n, const char *name, const char *def, char *buf,
                         size_t size) {
    const struct qp_attr *a = qp_kattr(n, name);
    if (!size) return def;
    if (!a || a->type != QP_ATTR_STRING) {
        snprintf(buf, size, "%s", def ? def : "");
        return buf;
    }
    size_t len = a->s.len < size - 1 ? a->s.len : size - 1;
    if (len) memcpy(buf, a->s.data, len);
    buf[len] = 0;
    return buf;
}

int64_t qp_kattr_ints(const struct qp_node *n, const char *name, const int64_t **vals) {
    const struct qp_attr *a = qp_kattr(n, name);
    *vals = NULL;
    if (!a || a->type != QP_ATTR_INTS) return -1;
    *vals = a->ints;
    return (int64_t)a->n;
}

int64_t qp_kattr_floats(const struct qp_node *n, const char *name, const float **vals) {
    const struct qp_attr *a = qp_kattr(n, name);
    *vals = NULL;
    if (!a || a->type != QP_ATTR_FLOATS) return -1;
    *vals = a->floats;
    return (int64_t)a->n;
}

enum qp_status qp_kt_set(struct qp_kt *t, enum qp_dtype dt, int rank, const int64_t *dims,
                         struct qp_error *err) {
    if (rank < 0 || rank > QP_MAX_RANK)
        return qp_error_set(err, QP_ERR_UNSUPPORTED, "output rank %d exceeds %d", rank,
                            QP_MAX_RANK);
    uint64_t n = 1;
    int64_t tmp[QP_MAX_RANK];
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return qp_error_set(err, QP_ERR_BAD_INPUT, "output dimension %d is negative (%lld)", i,
                                (long long)dims[i]);
        tmp[i] = dims[i];
        if (dims[i] && n > UINT64_MAX / (uint64_t)dims[i])
            return qp_error_set(err, QP_ERR_NOMEM, "output size overflows");
        n *= (uint64_t)dims[i];
    }
    int ok;
    size_t nb = qp_dtype_nbytes(dt, n, &ok);
    if (!ok || nb > ((size_t)1 << 40))
        return qp_error_set(err, QP_ERR_NOMEM, "output of %llu %s elements is too large",
                            (unsigned long long)n, qp_dtype_name(dt));
    t->dtype = dt;
    t->rank = rank;
    memcpy(t->dims, tmp, sizeof(int64_t) * (size_t)rank);
    t->numel = n;
    t->nbytes = nb;
    return QP_OK;
}

int64_t qp_kt_get_i64(const struct qp_kt *t, uint64_t i) {
    int64_t v;
    if (qp_elem_get_int(t->dtype, t->data, i, &v)) return v;
    return (int64_t)qp_kt_get_f64(t, i);
}

double qp_kt_get_f64(const struct qp_kt *t, uint64_t i) {
    const void *p = t->data;
    switch (t->dtype) {
    case QP_DTYPE_FLOAT:
        return ((const float *)p)[i];
    case QP_DTYPE_DOUBLE:
        return ((const double *)p)[i];
    case QP_DTYPE_FLOAT16:
        return qp_fp16_to_f32(((const uint16_t *)p)[i]);
    case QP_DTYPE_BFLOAT16:
        return qp_bf16_to_f32(((const uint16_t *)p)[i]);
    case QP_DTYPE_UINT64:
        return (double)((const uint64_t *)p)[i];
    case QP_DTYPE_FLOAT8E4M3FN:
    case QP_DTYPE_FLOAT8E4M3FNUZ:
    case QP_DTYPE_FLOAT8E5M2:
    case QP_DTYPE_FLOAT8E5M2FNUZ:
        return qp_fp8_to_f32(t->dtype, ((const uint8_t *)p)[i]);
    default:
        return (double)qp_kt_get_i64(t, i);
    }
}

void qp_kt_set_f64(struct qp_kt *t, uint64_t i, double v) {
    void *p = t->data;
    switch (t->dtype) {
    case QP_DTYPE_FLOAT:
        ((float *)p)[i] = (float)v;
        break;
    case QP_DTYPE_DOUBLE:
        ((double *)p)[i] = v;
        break;
    case QP_DTYPE_FLOAT16:
        ((uint16_t *)p)[i] = qp_f32_to_fp16((float)v);
        break;
    case QP_DTYPE_BFLOAT16:
        ((uint16_t *)p)[i] = qp_f32_to_bf16((float)v);
        break;
    case QP_DTYPE_BOOL:
        ((uint8_t *)p)[i] = v != 0.0;
        break;
    case QP_DTYPE_FLOAT8E4M3FN:
    case QP_DTYPE_FLOAT8E4M3FNUZ:
    case QP_DTYPE_FLOAT8E5M2:
    case QP_DTYPE_FLOAT8E5M2FNUZ:
        ((uint8_t *)p)[i] = qp_f32_to_fp8(t->dtype, (float)v, 1);
        break;
    case QP_DTYPE_UINT64:
        /* Out-of-range float to integer is undefined in C: clamp first. */
        ((uint64_t *)p)[i] =
            isnan(v) || v <= 0 ? 0 : (v >= 1.8446744073709552e19 ? UINT64_MAX : (uint64_t)v);
        break;
    default:
        qp_kt_set_i64(t, i,
                      isnan(v) ? 0
                               : (v >= 9.2233720368547758e18
                                      ? INT64_MAX
                                      : (v <= -9.2233720368547758e18 ? INT64_MIN : (int64_t)v)));
        break;
    }
}

void qp_kt_set_i64(struct qp_kt *t, uint64_t i, int64_t v) {
    if (!qp_elem_set_int(t->dtype, t->data, i, v)) qp_kt_set_f64(t, i, (double)v);
}

enum qp_status qp_kaxis(int64_t axis, int rank, int64_t *out, const char *what,
                        struct qp_error *err) {
    int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "%s %lld is out of range for rank %d", what,
                            (long long)axis, rank);
    *out = a;
    return QP_OK;
}

enum qp_status qp_kneed(const struct qp_kprep *p, int i) {
    if (i >= p->n_in || !p->in[i])
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "input %d is required", i);
    return QP_OK;
}

enum qp_status qp_kneed_const(struct qp_kprep *p, int i, const char *what) {
    enum qp_status st = qp_kneed(p, i);
    if (st) return st;
    if (!p->in[i]->is_const) {
        p->missing_const = i;
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED,
                            "input %d (%s) is not computable at plan time; the engine needs it "
                            "to infer shapes",
                            i, what);
    }
    return QP_OK;
}

enum qp_status qp_kbroadcast(int ra, const int64_t *da, int rb, const int64_t *db, int *r_out,
                             int64_t *d_out, struct qp_error *err) {
    int r = ra > rb ? ra : rb;
    int64_t tmp[QP_MAX_RANK];
    if (r > QP_MAX_RANK)
        return qp_error_set(err, QP_ERR_UNSUPPORTED, "broadcast rank %d exceeds %d", r,
                            QP_MAX_RANK);
    for (int i = 0; i < r; i++) {
        int ia = i - (r - ra), ib = i - (r - rb);
        int64_t a = ia >= 0 ? da[ia] : 1, b = ib >= 0 ? db[ib] : 1;
        if (a == b || b == 1)
            tmp[i] = a;
        else if (a == 1)
            tmp[i] = b;
        else
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "shapes cannot be broadcast: dimension %d is %lld vs %lld", i,
                                (long long)a, (long long)b);
    }
    /* d_out may alias an input shape: write it only at the end. */
    for (int i = 0; i < r; i++)
        d_out[i] = tmp[i];
    *r_out = r;
    return QP_OK;
}

const char *qp_kshape_str(const struct qp_kt *t, char *buf, size_t size) {
    size_t off = 0;
    if (!size) return buf;
    buf[0] = 0;
    if (t->rank == 0) {
        snprintf(buf, size, "scalar");
        return buf;
    }
    for (int i = 0; i < t->rank && off < size; i++) {
        int w = snprintf(buf + off, size - off, i ? "x%lld" : "%lld", (long long)t->dims[i]);
        if (w < 0) break;
        off += (size_t)w;
    }
    return buf;
}

void qp_ksplit(int64_t n, int n_threads, int t, int64_t *begin, int64_t *end) {
    if (n_threads < 1) n_threads = 1;
    int64_t chunk = n / n_threads, rem = n % n_threads;
    *begin = t * chunk + (t < rem ? t : rem);
    *end = *begin + chunk + (t < rem ? 1 : 0);
}
