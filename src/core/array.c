#include "qplace/array.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"

uint64_t qp_array_numel(const struct qp_array *a, int *ok) {
    uint64_t n = 1;
    *ok = 0;
    if (a->rank < 0 || a->rank > QP_MAX_RANK) return 0;
    for (int i = 0; i < a->rank; i++) {
        if (a->dims[i] < 0) return 0;
        uint64_t d = (uint64_t)a->dims[i];
        if (d && n > UINT64_MAX / d) return 0;
        n *= d;
    }
    *ok = 1;
    return n;
}

static enum qp_status array_shape(struct qp_array *a, enum qp_dtype dtype, int rank,
                                  const int64_t *dims, size_t *nbytes_out, struct qp_error *err) {
    memset(a, 0, sizeof *a);
    if (!qp_dtype_valid(dtype) || dtype == QP_DTYPE_STRING)
        return qp_error_set(err, QP_ERR_USAGE, "array: dtype %d (%s) cannot be held in an array",
                            (int)dtype, qp_dtype_name(dtype));
    if (rank < 0 || rank > QP_MAX_RANK)
        return qp_error_set(err, QP_ERR_UNSUPPORTED, "array: rank %d is outside 0..%d", rank,
                            QP_MAX_RANK);
    a->dtype = dtype;
    a->rank = rank;
    for (int i = 0; i < rank; i++)
        a->dims[i] = dims[i];
    int ok;
    uint64_t n = qp_array_numel(a, &ok);
    if (!ok) {
        memset(a, 0, sizeof *a);
        return qp_error_set(err, QP_ERR_USAGE, "array: negative or overflowing shape");
    }
    size_t nb = qp_dtype_nbytes(dtype, n, &ok);
    if (!ok) {
        memset(a, 0, sizeof *a);
        return qp_error_set(err, QP_ERR_NOMEM, "array: %llu elements of %s overflow size_t",
                            (unsigned long long)n, qp_dtype_name(dtype));
    }
    *nbytes_out = nb;
    return QP_OK;
}

enum qp_status qp_array_alloc(struct qp_array *a, enum qp_dtype dtype, int rank,
                              const int64_t *dims, struct qp_error *err) {
    size_t nb;
    enum qp_status st = array_shape(a, dtype, rank, dims, &nb, err);
    if (st != QP_OK) return st;
    void *p = qp_zalloc64(nb);
    if (!p) {
        memset(a, 0, sizeof *a);
        return qp_error_set(err, QP_ERR_NOMEM, "array: cannot allocate %zu bytes", nb);
    }
    a->data = p;
    a->nbytes = nb;
    a->owned = 1;
    return QP_OK;
}

enum qp_status qp_array_view(struct qp_array *a, enum qp_dtype dtype, int rank, const int64_t *dims,
                             void *data, size_t nbytes, struct qp_error *err) {
    size_t nb;
    enum qp_status st = array_shape(a, dtype, rank, dims, &nb, err);
    if (st != QP_OK) return st;
    if (nb != nbytes) {
        char shape[128];
        qp_array_shape_str(a, shape, sizeof shape);
        memset(a, 0, sizeof *a);
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "array: %zu bytes given for a %s %s array that needs %zu", nbytes,
                            qp_dtype_name(dtype), shape, nb);
    }
    a->data = data;
    a->nbytes = nbytes;
    a->owned = 0;
    return QP_OK;
}

void qp_array_release(struct qp_array *a) {
    if (!a) return;
    if (a->owned) free(a->data);
    memset(a, 0, sizeof *a);
}

const char *qp_array_shape_str(const struct qp_array *a, char *buf, size_t size) {
    if (!size) return buf;
    buf[0] = 0;
    if (a->rank == 0) {
        snprintf(buf, size, "scalar");
        return buf;
    }
    size_t off = 0;
    for (int i = 0; i < a->rank && off < size; i++) {
        int n = snprintf(buf + off, size - off, i ? "x%lld" : "%lld", (long long)a->dims[i]);
        if (n < 0) break;
        off += (size_t)n;
    }
    return buf;
}
