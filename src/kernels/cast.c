/* Cast and CastLike between all numeric types, bool, float16/bfloat16 and the FP8 types (with
 * opset 19's `saturate`). Strings are not supported. */
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "kernels/kernels.h"

struct cast_state {
    enum qp_dtype to;
    int saturate;
};

static int castable(enum qp_dtype dt) {
    return qp_dtype_valid(dt) && dt != QP_DTYPE_STRING && dt != QP_DTYPE_COMPLEX64 &&
           dt != QP_DTYPE_COMPLEX128 && qp_dtype_traits(dt)->bits >= 8;
}

static enum qp_status cast_common(struct qp_kprep *p, int64_t to) {
    enum qp_status st = qp_kneed(p, 0);
    if (st) return st;
    if (!qp_dtype_valid((int)to) || !castable((enum qp_dtype)to))
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "cast to dtype %lld (%s)", (long long)to,
                            qp_dtype_valid((int)to) ? qp_dtype_name((enum qp_dtype)to) : "invalid");
    if (!castable(p->in[0]->dtype))
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "cast from %s",
                            qp_dtype_name(p->in[0]->dtype));
    struct cast_state *s = malloc(sizeof *s);
    if (!s) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    s->to = (enum qp_dtype)to;
    s->saturate = p->opset >= 19 ? (int)qp_kattr_int(p->node, "saturate", 1) : 1;
    p->state = s;
    return qp_kt_set(p->out[0], s->to, p->in[0]->rank, p->in[0]->dims, p->err);
}

enum qp_status qp_k_cast_prepare(struct qp_kprep *p) {
    if (!qp_kattr(p->node, "to"))
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "attribute 'to' is required");
    return cast_common(p, qp_kattr_int(p->node, "to", 0));
}

enum qp_status qp_k_castlike_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed(p, 1);
    if (st) return st;
    return cast_common(p, p->in[1]->dtype);
}

static int is_fp8(enum qp_dtype dt) {
    return dt == QP_DTYPE_FLOAT8E4M3FN || dt == QP_DTYPE_FLOAT8E4M3FNUZ ||
           dt == QP_DTYPE_FLOAT8E5M2 || dt == QP_DTYPE_FLOAT8E5M2FNUZ;
}

enum qp_status qp_k_cast_run(const struct qp_krun *r) {
    const struct cast_state *s = r->state;
    const struct qp_kt *x = r->in[0];
    struct qp_kt *y = r->out[0];
    uint64_t n = x->numel;
    if (x->dtype == y->dtype) {
        if (x->nbytes) memcpy(y->data, x->data, x->nbytes);
        return QP_OK;
    }
    int from_int = !qp_dtype_traits(x->dtype)->is_float;
    int to_int = !qp_dtype_traits(y->dtype)->is_float;
    if (x->dtype == QP_DTYPE_FLOAT && y->dtype == QP_DTYPE_FLOAT16) {
        qp_f32_to_fp16_n(x->data, y->data, (size_t)n); /* F16C where the CPU has it */
    } else if (x->dtype == QP_DTYPE_FLOAT16 && y->dtype == QP_DTYPE_FLOAT) {
        qp_fp16_to_f32_n(x->data, y->data, (size_t)n);
    } else if (x->dtype == QP_DTYPE_FLOAT && y->dtype == QP_DTYPE_BFLOAT16) {
        for (uint64_t i = 0; i < n; i++)
            ((uint16_t *)y->data)[i] = qp_f32_to_bf16(((const float *)x->data)[i]);
    } else if (is_fp8(y->dtype)) {
        for (uint64_t i = 0; i < n; i++)
            ((uint8_t *)y->data)[i] =
                qp_f32_to_fp8(y->dtype, (float)qp_kt_get_f64(x, i), s->saturate);
    } else if (from_int && to_int) {
        if (y->dtype == QP_DTYPE_BOOL)
            for (uint64_t i = 0; i < n; i++)
                ((uint8_t *)y->data)[i] = qp_kt_get_i64(x, i) != 0;
        else
            for (uint64_t i = 0; i < n; i++)
                qp_kt_set_i64(y, i, qp_kt_get_i64(x, i));
    } else {
        for (uint64_t i = 0; i < n; i++)
            qp_kt_set_f64(y, i, qp_kt_get_f64(x, i));
    }
    return QP_OK;
}

/* QP_INT8_DOMAIN "RoundFloat16" (x): float32 in and out, each element rounded to float16 (to
 * nearest even, beyond the range to infinity, NaN quieted) and back -- what storing x as
 * float16 and converting it for the next kernel gives (runtime/narrow.h). Any other dtype is
 * copied as it is (an output narrow.c took for float16 that is not float). */
enum qp_status qp_k_round_f16_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    return qp_kt_set(p->out[0], x->dtype, x->rank, x->dims, p->err);
}

/* Pieces of the rounding that threads take (a plain per-element map: the split cannot change
 * results). Below four pieces one thread beats a parallel region. */
#define ROUND_PIECE 8192

enum qp_status qp_k_round_f16_run(const struct qp_krun *r) {
    if (r->in[0]->dtype != QP_DTYPE_FLOAT) {
        if (r->in[0]->nbytes) memcpy(r->out[0]->data, r->in[0]->data, r->in[0]->nbytes);
        return QP_OK;
    }
    int64_t n = (int64_t)r->in[0]->numel, pieces = (n + ROUND_PIECE - 1) / ROUND_PIECE;
    const float *x = r->in[0]->data;
    float *y = r->out[0]->data;
    int nt = pieces < 4 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t k = 0; k < pieces; k++) {
        int64_t o = k * ROUND_PIECE, len = n - o < ROUND_PIECE ? n - o : ROUND_PIECE;
        qp_round_fp16_n(x + o, y + o, (size_t)len);
    }
    return QP_OK;
}
