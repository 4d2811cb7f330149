/*
 * Window generators (opset 17): HannWindow, HammingWindow, BlackmanWindow. The window of
 * `size` (input 0, a plan-time value: it is the output shape) is
 *   w[n] = a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N),  N = size (periodic) or size - 1,
 * computed in float32 in the order of the ops' ONNX function bodies (Hann 0.5, 0.5, 0;
 * Hamming 25/46, 21/46, 0; Blackman 0.42, 0.5, 0.08), then cast to output_datatype.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kcheck.h"
#include "kernels/kernels.h"

struct window_state {
    float a0, a1, a2, den;
};

enum qp_status qp_k_window_prepare(struct qp_kprep *p) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    enum qp_status st = qp_kneed_const(p, 0, "size (the output shape)");
    if (st) return st;
    const struct qp_kt *sz = p->in[0];
    if ((sz->dtype != QP_DTYPE_INT32 && sz->dtype != QP_DTYPE_INT64) || sz->numel != 1)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "size must be one int32/int64 value");
    int64_t n = qp_kt_get_i64(sz, 0);
    if (n < 0 || n > ((int64_t)1 << 32))
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "size %lld is not in [0, 2^32]",
                            (long long)n);
    int64_t odt = qp_kattr_int(p->node, "output_datatype", QP_DTYPE_FLOAT);
    if (!qp_dtype_valid((int)odt) || odt != (int)odt)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "output_datatype %lld", (long long)odt);
    enum qp_dtype dt = (enum qp_dtype)odt;
    if (dt == QP_DTYPE_STRING || dt == QP_DTYPE_BOOL || dt == QP_DTYPE_COMPLEX64 ||
        dt == QP_DTYPE_COMPLEX128 || qp_dtype_traits(dt)->bits < 8)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "output_datatype %s", qp_dtype_name(dt));
    struct window_state s;
    const char *op = p->node->op_type;
    if (strcmp(op, "HannWindow") == 0) {
        s.a0 = 0.5f;
        s.a1 = 0.5f;
        s.a2 = 0.0f;
    } else if (strcmp(op, "HammingWindow") == 0) {
        s.a0 = 25.0f / 46.0f;
        s.a1 = 1.0f - 25.0f / 46.0f;
        s.a2 = 0.0f;
    } else {
        s.a0 = 0.42f;
        s.a1 = 0.5f;
        s.a2 = 0.08f;
    }
    s.den = qp_kattr_int(p->node, "periodic", 1) ? (float)n : (float)n - 1.0f;
    if ((st = qp_kt_set(p->out[0], dt, 1, &n, p->err))) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_window_run(const struct qp_krun *r) {
    const struct window_state *s = r->state;
    struct qp_kt *y = r->out[0];
    float inc = 6.2831855f / s->den; /* a size-1 symmetric window divides by 0: NaN, as ONNX */
    for (uint64_t n = 0; n < y->numel; n++) {
        float ang = (float)n * inc;
        float v = s->a0 - s->a1 * cosf(ang);
        v = v + s->a2 * cosf(ang * 2.0f);
        qp_kt_set_f64(y, n, v);
    }
    return QP_OK;
}
