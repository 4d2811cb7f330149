/*
 * Integer and quantized-linear ops of ONNX's operator-oriented quantization (the form ONNX
 * Runtime's quantizer writes): DynamicQuantizeLinear, MatMulInteger, QLinearMatMul,
 * ConvInteger, QLinearConv. Reference kernels on int8/uint8 data:
 *
 *   MatMulInteger / ConvInteger   y = sum (a - a_zp) * (b - b_zp), int32 (accumulated in 64 bits
 *                                 and wrapped to 32, so no input traps)
 *   QLinearMatMul / QLinearConv   y = saturate(round_half_even(acc * (a_scale * b_scale /
 *                                 y_scale)) + y_zp), the multiplier and product in float as
 *                                 ONNX Runtime computes them; QLinearConv adds its int32 bias
 *                                 to acc first
 *   DynamicQuantizeLinear         uint8 scale and zero point of [min(x, 0), max(x, 0)]
 *
 * Zero points and scales: per tensor (one value) or per row of A / per column of B / per
 * output channel of W. Rounding, saturation and the range-to-qparams rule are
 * src/qmath/qparams's, the module every other quantized value in qplace goes through.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kcheck.h"
#include "kernels/kernels.h"
#include "kernels/spatial.h"
#include "qmath/qparams.h"

static int is_q8(enum qp_dtype dt) {
    return dt == QP_DTYPE_INT8 || dt == QP_DTYPE_UINT8;
}

static int32_t q8_get(const struct qp_kt *t, int64_t i) {
    return t->dtype == QP_DTYPE_INT8 ? ((const int8_t *)t->data)[i]
                                     : (int32_t)((const uint8_t *)t->data)[i];
}

static enum qp_status need_q8(const struct qp_kprep *p, int i, const char *what) {
    enum qp_status st = qp_kneed(p, i);
    if (st) return st;
    if (!is_q8(p->in[i]->dtype))
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "input %d (%s) is %s (int8/uint8 only)", i,
                            what, qp_dtype_name(p->in[i]->dtype));
    return QP_OK;
}

/* An optional zero point of input i: absent, or int8/uint8 matching `like`, with 1 or `per`
 * values. */
static enum qp_status check_zp(const struct qp_kprep *p, int i, enum qp_dtype like, int64_t per,
                               const char *what) {
    if (i >= p->n_in || !p->in[i]) return QP_OK;
    const struct qp_kt *z = p->in[i];
    if (z->dtype != like)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "%s is %s, its tensor is %s", what,
                            qp_dtype_name(z->dtype), qp_dtype_name(like));
    if (z->numel != 1 && (int64_t)z->numel != per)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "%s has %llu values, expected 1 or %lld",
                            what, (unsigned long long)z->numel, (long long)per);
    return QP_OK;
}

/* A float scale of input i with 1 or `per` values. */
static enum qp_status check_scale(const struct qp_kprep *p, int i, int64_t per, const char *what) {
    enum qp_status st = qp_kneed(p, i);
    if (st) return st;
    const struct qp_kt *s = p->in[i];
    if (s->dtype != QP_DTYPE_FLOAT)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "%s is %s (float only)", what,
                            qp_dtype_name(s->dtype));
    if (s->numel != 1 && (int64_t)s->numel != per)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "%s has %llu values, expected 1 or %lld",
                            what, (unsigned long long)s->numel, (long long)per);
    return QP_OK;
}

/* Where the two operands are. MatMulInteger/ConvInteger: a, b, a's zero point, b's = inputs 0,
 * 1, 2, 3. QLinearMatMul/QLinearConv: a, a_scale, a_zero_point, b, b_scale, b_zero_point,
 * y_scale, y_zero_point = inputs 0 to 7. */
struct qio {
    int qlinear;
    int a_ix, b_ix, azp_ix, bzp_ix;
};

/* Sane shapes, the layout of node p (qlinear_op names the QLinear form) and both operands
 * present and 8-bit (names for messages). */
static enum qp_status q_operands(const struct qp_kprep *p, const char *qlinear_op,
                                 const char *a_name, const char *b_name, struct qio *io) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    io->qlinear = strcmp(p->node->op_type, qlinear_op) == 0;
    io->a_ix = 0;
    io->b_ix = io->qlinear ? 3 : 1;
    io->azp_ix = 2;
    io->bzp_ix = io->qlinear ? 5 : 3;
    enum qp_status st = need_q8(p, io->a_ix, a_name);
    if (!st) st = need_q8(p, io->b_ix, b_name);
    return st;
}

/* The zero points of both operands (of the operand's dtype, with 1 or per[o] values) and, for
 * the QLinear forms, their scales (inputs 1 and 4, as many values), y_scale (6) and
 * y_zero_point (7), whose dtype is the output's. names: the zero points', then the scales'. */
static enum qp_status check_qparams(const struct qp_kprep *p, const struct qio *io,
                                    const int64_t per[2], const char *const names[4],
                                    enum qp_dtype *ydt_out) {
    enum qp_status st;
    if ((st = check_zp(p, io->azp_ix, p->in[io->a_ix]->dtype, per[0], names[0])) ||
        (st = check_zp(p, io->bzp_ix, p->in[io->b_ix]->dtype, per[1], names[1])))
        return st;
    *ydt_out = QP_DTYPE_INT32;
    if (!io->qlinear) return QP_OK;
    if ((st = check_scale(p, 1, per[0], names[2])) || (st = check_scale(p, 4, per[1], names[3])) ||
        (st = check_scale(p, 6, 1, "y_scale")) || (st = qp_kneed(p, 7)))
        return st;
    *ydt_out = p->in[7]->dtype;
    if (!is_q8(*ydt_out) || p->in[7]->numel != 1)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "y_zero_point must be one int8/uint8 value");
    return QP_OK;
}

/* dst[0..2] = src[0..nsp-1] right-aligned, the leading dims (3 - nsp of them) set to `fill`. */
static void to3(int64_t dst[3], const int64_t *src, int nsp, int64_t fill) {
    for (int i = 0; i < 3; i++)
        dst[i] = i >= 3 - nsp ? src[i - (3 - nsp)] : fill;
}

/* Input i of a run, NULL when the node has fewer inputs. */
static const struct qp_kt *opt_in(const struct qp_krun *r, int i) {
    return i < r->n_in ? r->in[i] : NULL;
}

/* Value j of a per-tensor-or-per-index parameter (absent: 0). */
static int32_t zp_at(const struct qp_kt *z, int64_t j) {
    if (!z) return 0;
    return q8_get(z, z->numel == 1 ? 0 : j);
}

static float scale_at(const struct qp_kt *s, int64_t j) {
    return ((const float *)s->data)[s->numel == 1 ? 0 : j];
}

/* The QLinear requantization multiplier of output row i, column j: a_scale * b_scale / y_scale
 * (inputs 1, 4 and 6 of both QLinearMatMul and QLinearConv). */
static float qmult(const struct qp_krun *r, int64_t i, int64_t j) {
    return scale_at(r->in[1], i) * scale_at(r->in[4], j) / ((const float *)r->in[6]->data)[0];
}

/* saturate(round_half_even(acc * mult) + zp) into the 8-bit output type. */
static void requant(struct qp_kt *y, int64_t i, int64_t acc, float mult, int32_t zp) {
    int64_t lo, hi;
    qp_qtype_int_range(y->dtype, &lo, &hi);
    float v = qp_round_half_even((float)acc * mult);
    double q = (double)v + zp;
    if (!(q >= (double)lo)) q = (double)lo; /* NaN too */
    if (q > (double)hi) q = (double)hi;
    if (y->dtype == QP_DTYPE_INT8)
        ((int8_t *)y->data)[i] = (int8_t)q;
    else
        ((uint8_t *)y->data)[i] = (uint8_t)q;
}

/* ---- DynamicQuantizeLinear (opset 11) ------------------------------------------------------ */

enum qp_status qp_k_dynquant_prepare(struct qp_kprep *p) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    enum qp_status st = qp_kneed(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    if (x->dtype != QP_DTYPE_FLOAT)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "input is %s (float only)",
                            qp_dtype_name(x->dtype));
    if ((st = qp_kt_set(p->out[0], QP_DTYPE_UINT8, x->rank, x->dims, p->err))) return st;
    if (p->n_out > 1 && p->out[1] && (st = qp_kt_set(p->out[1], QP_DTYPE_FLOAT, 0, NULL, p->err)))
        return st;
    if (p->n_out > 2 && p->out[2] && (st = qp_kt_set(p->out[2], QP_DTYPE_UINT8, 0, NULL, p->err)))
        return st;
    return QP_OK;
}

enum qp_status qp_k_dynquant_run(const struct qp_krun *r) {
    const struct qp_kt *x = r->in[0];
    const float *xv = x->data;
    float lo = 0, hi = 0;
    for (uint64_t i = 0; i < x->numel; i++) {
        if (isnan(xv[i]))
            return qp_error_set(r->err, QP_ERR_BAD_INPUT, "input element %llu is NaN",
                                (unsigned long long)i);
        if (xv[i] < lo) lo = xv[i];
        if (xv[i] > hi) hi = xv[i];
    }
    float scale;
    int32_t zp;
    enum qp_status st = qp_qparams_from_range(QP_DTYPE_UINT8, lo, hi, 0, &scale, &zp, r->err);
    if (st) return st;
    uint8_t zp8 = (uint8_t)zp;
    struct qp_qspec s = {.qtype = QP_DTYPE_UINT8,
                         .saturate = 1,
                         .outer = 1,
                         .axis_len = 1,
                         .inner = (int64_t)x->numel,
                         .n_params = 1,
                         .scale = &scale,
                         .zero_point = &zp8};
    qp_quantize_f32(&s, xv, r->out[0]->data, 0, (int64_t)x->numel);
    if (r->n_out > 1 && r->out[1]) *(float *)r->out[1]->data = scale;
    if (r->n_out > 2 && r->out[2]) *(uint8_t *)r->out[2]->data = zp8;
    return QP_OK;
}

/* ---- MatMulInteger (opset 10), QLinearMatMul (opset 10, 21) -------------------------------- */

struct qmm_state {
    struct qio io;
    int64_t m, k, n, batch;
    int brank;
    int64_t bdims[QP_MAX_RANK], astr[QP_MAX_RANK], bstr[QP_MAX_RANK]; /* batch strides, in
                                                                         matrices (0: broadcast) */
};

enum qp_status qp_k_qmatmul_prepare(struct qp_kprep *p) {
    struct qmm_state s;
    memset(&s, 0, sizeof s);
    enum qp_status st = q_operands(p, "QLinearMatMul", "A", "B", &s.io);
    if (st) return st;
    const struct qp_kt *a = p->in[s.io.a_ix], *b = p->in[s.io.b_ix];
    if (a->rank < 1 || b->rank < 1)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "A and B must have rank >= 1");
    /* numpy matmul: a 1-D A is a row, a 1-D B a column; both are squeezed from the output */
    int ar = a->rank, br = b->rank;
    s.m = ar >= 2 ? a->dims[ar - 2] : 1;
    s.k = a->dims[ar - 1];
    int64_t kb = br >= 2 ? b->dims[br - 2] : b->dims[0];
    s.n = br >= 2 ? b->dims[br - 1] : 1;
    if (kb != s.k)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "A has %lld columns, B %lld rows",
                            (long long)s.k, (long long)kb);
    int abr = ar > 2 ? ar - 2 : 0, bbr = br > 2 ? br - 2 : 0;
    int r;
    if ((st = qp_kbroadcast(abr, a->dims, bbr, b->dims, &r, s.bdims, p->err))) return st;
    s.brank = r;
    int64_t sa = 1, sb = 1;
    s.batch = 1;
    for (int i = r - 1; i >= 0; i--) {
        int ia = i - (r - abr), ib = i - (r - bbr);
        s.astr[i] = ia >= 0 && a->dims[ia] != 1 ? sa : 0;
        s.bstr[i] = ib >= 0 && b->dims[ib] != 1 ? sb : 0;
        if (ia >= 0) sa *= a->dims[ia];
        if (ib >= 0) sb *= b->dims[ib];
        s.batch *= s.bdims[i];
    }
    static const char *const qnames[4] = {"A's zero point", "B's zero point", "a_scale", "b_scale"};
    enum qp_dtype ydt;
    if ((st = check_qparams(p, &s.io, (const int64_t[2]){s.m, s.n}, qnames, &ydt))) return st;
    int64_t od[QP_MAX_RANK];
    int orank = 0;
    for (int i = 0; i < r; i++)
        od[orank++] = s.bdims[i];
    if (ar >= 2) od[orank++] = s.m;
    if (br >= 2) od[orank++] = s.n;
    if ((st = qp_kt_set(p->out[0], ydt, orank, od, p->err))) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_qmatmul_run(const struct qp_krun *r) {
    const struct qmm_state *s = r->state;
    const struct qp_kt *a = r->in[s->io.a_ix], *b = r->in[s->io.b_ix];
    const struct qp_kt *azp = opt_in(r, s->io.azp_ix), *bzp = opt_in(r, s->io.bzp_ix);
    struct qp_kt *y = r->out[0];
    int64_t rows = s->batch * s->m;
    int nt = rows * s->n * s->k < 65536 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t row = 0; row < rows; row++) {
        int64_t bt = row / s->m, i = row % s->m, rem = bt, ao = 0, bo = 0;
        for (int d = s->brank - 1; d >= 0; d--) {
            int64_t c = rem % s->bdims[d];
            rem /= s->bdims[d];
            ao += c * s->astr[d];
            bo += c * s->bstr[d];
        }
        const int64_t abase = (ao * s->m + i) * s->k, bbase = bo * s->k * s->n;
        int32_t za = zp_at(azp, i);
        for (int64_t j = 0; j < s->n; j++) {
            int32_t zb = zp_at(bzp, j);
            int64_t acc = 0;
            for (int64_t q = 0; q < s->k; q++)
                acc +=
                    (int64_t)(q8_get(a, abase + q) - za) * (q8_get(b, bbase + q * s->n + j) - zb);
            int64_t o = row * s->n + j;
            if (s->io.qlinear) {
                requant(y, o, (int32_t)(uint32_t)(uint64_t)acc, qmult(r, i, j),
                        q8_get(r->in[7], 0));
            } else {
                ((int32_t *)y->data)[o] = (int32_t)(uint32_t)(uint64_t)acc;
            }
        }
    }
    return QP_OK;
}

/* ---- ConvInteger (opset 10), QLinearConv (opset 10) --------------------------------------- */

struct qconv_state {
    struct qio io;
    int64_t n, c, m, group, cg, mg;
    int64_t in3[3], out3[3], k3[3], s3[3], d3[3], p3[3];
};

enum qp_status qp_k_qconv_prepare(struct qp_kprep *p) {
    struct qconv_state s;
    memset(&s, 0, sizeof s);
    enum qp_status st = q_operands(p, "QLinearConv", "x", "w", &s.io);
    if (st) return st;
    const struct qp_kt *x = p->in[s.io.a_ix], *w = p->in[s.io.b_ix];
    if (x->rank < 3 || w->rank != x->rank)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "x rank %d and w rank %d (need equal, >= 3)",
                            x->rank, w->rank);
    int nsp = x->rank - 2;
    s.group = qp_kattr_int(p->node, "group", 1);
    s.n = x->dims[0];
    s.c = x->dims[1];
    s.m = w->dims[0];
    if (s.group < 1 || s.c % s.group || s.m % s.group || w->dims[1] != s.c / s.group)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "group %lld does not fit %lld input channels, w [%lld, %lld, ...]",
                            (long long)s.group, (long long)s.c, (long long)s.m,
                            (long long)w->dims[1]);
    s.cg = s.c / s.group;
    s.mg = s.m / s.group;
    const int64_t *ks;
    int64_t nks = qp_kattr_ints(p->node, "kernel_shape", &ks);
    if (nks >= 0 && (nks != nsp || memcmp(ks, w->dims + 2, sizeof(int64_t) * (size_t)nsp)))
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "kernel_shape disagrees with w");
    struct qp_window win;
    if ((st = qp_window_init(&win, p->node, nsp, x->dims + 2, w->dims + 2, 0, p->err))) return st;
    to3(s.in3, win.in, nsp, 1);
    to3(s.out3, win.out, nsp, 1);
    to3(s.k3, win.k, nsp, 1);
    to3(s.s3, win.stride, nsp, 1);
    to3(s.d3, win.dil, nsp, 1);
    to3(s.p3, win.pad_begin, nsp, 0);
    static const char *const qnames[4] = {"x's zero point", "w's zero point", "x_scale", "w_scale"};
    enum qp_dtype ydt;
    if ((st = check_qparams(p, &s.io, (const int64_t[2]){1, s.m}, qnames, &ydt))) return st;
    if (s.io.qlinear) {
        if (p->n_in > 8 && p->in[8] &&
            (p->in[8]->dtype != QP_DTYPE_INT32 || (int64_t)p->in[8]->numel != s.m))
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "B must be int32 with %lld values",
                                (long long)s.m);
    }
    int64_t od[QP_MAX_RANK];
    od[0] = s.n;
    od[1] = s.m;
    for (int i = 0; i < nsp; i++)
        od[i + 2] = win.out[i];
    if ((st = qp_kt_set(p->out[0], ydt, x->rank, od, p->err))) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_qconv_run(const struct qp_krun *r) {
    const struct qconv_state *s = r->state;
    const struct qp_kt *x = r->in[s->io.a_ix], *w = r->in[s->io.b_ix];
    const struct qp_kt *xzp = opt_in(r, s->io.azp_ix), *wzp = opt_in(r, s->io.bzp_ix);
    const struct qp_kt *bias = s->io.qlinear && r->n_in > 8 ? r->in[8] : NULL;
    struct qp_kt *y = r->out[0];
    int64_t in_sz = s->in3[0] * s->in3[1] * s->in3[2];
    int64_t out_sz = s->out3[0] * s->out3[1] * s->out3[2];
    int64_t k_sz = s->k3[0] * s->k3[1] * s->k3[2];
    int32_t zx = zp_at(xzp, 0);
    int64_t planes = s->n * s->m;
    int nt = planes * out_sz * s->cg * k_sz < 65536 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t pl = 0; pl < planes; pl++) {
        int64_t nn = pl / s->m, m = pl % s->m, g = m / s->mg;
        int32_t zw = zp_at(wzp, m);
        float mult = 0;
        if (s->io.qlinear) mult = qmult(r, 0, m);
        for (int64_t o0 = 0; o0 < s->out3[0]; o0++)
            for (int64_t o1 = 0; o1 < s->out3[1]; o1++)
                for (int64_t o2 = 0; o2 < s->out3[2]; o2++) {
                    int64_t acc = 0;
                    for (int64_t cc = 0; cc < s->cg; cc++) {
                        int64_t xb = (nn * s->c + g * s->cg + cc) * in_sz;
                        int64_t wb = (m * s->cg + cc) * k_sz;
                        for (int64_t k0 = 0; k0 < s->k3[0]; k0++) {
                            int64_t i0 = o0 * s->s3[0] - s->p3[0] + k0 * s->d3[0];
                            if (i0 < 0 || i0 >= s->in3[0]) continue;
                            for (int64_t k1 = 0; k1 < s->k3[1]; k1++) {
                                int64_t i1 = o1 * s->s3[1] - s->p3[1] + k1 * s->d3[1];
                                if (i1 < 0 || i1 >= s->in3[1]) continue;
                                for (int64_t k2 = 0; k2 < s->k3[2]; k2++) {
                                    int64_t i2 = o2 * s->s3[2] - s->p3[2] + k2 * s->d3[2];
                                    if (i2 < 0 || i2 >= s->in3[2]) continue;
                                    int64_t xi = xb + (i0 * s->in3[1] + i1) * s->in3[2] + i2;
                                    int64_t wi = wb + (k0 * s->k3[1] + k1) * s->k3[2] + k2;
                                    acc += (int64_t)(q8_get(x, xi) - zx) * (q8_get(w, wi) - zw);
                                }
                            }
                        }
                    }
                    int64_t o = pl * out_sz + (o0 * s->out3[1] + o1) * s->out3[2] + o2;
                    int32_t acc32 = (int32_t)(uint32_t)(uint64_t)acc;
                    if (s->io.qlinear) {
                        if (bias)
                            acc32 = (int32_t)((uint32_t)acc32 +
                                              (uint32_t)((const int32_t *)bias->data)[m]);
                        requant(y, o, acc32, mult, q8_get(r->in[7], 0));
                    } else {
                        ((int32_t *)y->data)[o] = acc32;
                    }
                }
    }
    return QP_OK;
}
