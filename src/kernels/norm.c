/* Normalizations and softmax: BatchNormalization (inference and training mode),
 * InstanceNormalization, LayerNormalization, Softmax, LogSoftmax, Hardmax. float32; statistics in
 * double. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kcheck.h"
#include "kernels/dnnl_softmax.h"
#include "kernels/fast.h"
#include "kernels/isa.h"
#include "kernels/kernels.h"
#include "kernels/vecmath.h"
#include "qmath/qparams.h"

struct norm_state {
    int64_t outer, axis_len, inner; /* softmax: [outer, axis, inner]; BN: [N, C, spatial] */
    float eps;
    float momentum;    /* BN training mode */
    int kind;          /* 0 BN, 1 IN, 2 LN, 3 softmax, 4 logsoftmax, 5 hardmax */
    int64_t norm_size; /* LN: elements normalized together; scale/bias broadcast over it */
};

static enum qp_status save(struct qp_kprep *p, const struct norm_state *s) {
    return qp_ksave_state(p, s, sizeof *s);
}

static enum qp_status need_float(struct qp_kprep *p, int i) {
    enum qp_status st = qp_kneed(p, i);
    if (st) return st;
    if (p->in[i]->dtype != QP_DTYPE_FLOAT)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "input %d is %s (float only)", i,
                            qp_dtype_name(p->in[i]->dtype));
    return QP_OK;
}

/* Inputs 0..n-1 present and float. */
static enum qp_status need_floats(struct qp_kprep *p, int n) {
    for (int i = 0; i < n; i++) {
        enum qp_status st = need_float(p, i);
        if (st) return st;
    }
    return QP_OK;
}

/* A zeroed state of `kind` viewing x as [N, C, spatial]. */
static struct norm_state nc_state(const struct qp_kt *x, int kind) {
    struct norm_state s = {0};
    s.kind = kind;
    s.outer = x->dims[0];
    s.axis_len = x->dims[1];
    s.inner = 1;
    for (int i = 2; i < x->rank; i++)
        s.inner *= x->dims[i];
    return s;
}

/* BatchNormalization's scale, B, mean and var (inputs 1-4): one element per channel. */
static enum qp_status bn_check_params(struct qp_kprep *p, int64_t channels) {
    for (int i = 1; i < 5; i++)
        if (p->in[i]->numel != (uint64_t)channels)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                "input %d has %llu elements for %lld channels", i,
                                (unsigned long long)p->in[i]->numel, (long long)channels);
    return QP_OK;
}

/* BatchNormalization with training_mode=1 (opset 14+): normalizes with the batch statistics
 * (mean and population variance over every axis but 1) and outputs the updated running
 * statistics, input_mean * momentum + batch_mean * (1 - momentum) (likewise the variance). */
enum { BN_TRAIN = 6 };

static enum qp_status bn_train_prepare(struct qp_kprep *p) {
    const struct qp_kt *x = p->in[0];
    struct norm_state s = nc_state(x, BN_TRAIN);
    enum qp_status st = bn_check_params(p, s.axis_len);
    if (st) return st;
    s.eps = qp_kattr_float(p->node, "epsilon", 1e-5f);
    s.momentum = qp_kattr_float(p->node, "momentum", 0.9f);
    st = qp_kt_set(p->out[0], QP_DTYPE_FLOAT, x->rank, x->dims, p->err);
    if (st) return st;
    if (p->n_out > 3)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "%d outputs: training mode has Y, running_mean and running_var",
                            p->n_out);
    for (int i = 1; i < p->n_out; i++)
        if (p->out[i] && (st = qp_kt_set(p->out[i], QP_DTYPE_FLOAT, 1, &s.axis_len, p->err)))
            return st;
    return save(p, &s);
}

static enum qp_status bn_train_run(const struct qp_krun *r) {
    const struct norm_state *s = r->state;
    const float *x = r->in[0]->data, *sc = r->in[1]->data, *b = r->in[2]->data,
                *in_mean = r->in[3]->data, *in_var = r->in[4]->data;
    float *y = r->out[0]->data;
    float *run_mean = r->n_out > 1 && r->out[1] ? r->out[1]->data : NULL;
    float *run_var = r->n_out > 2 && r->out[2] ? r->out[2]->data : NULL;
    int64_t per_c = s->outer * s->inner;
    int nt = s->axis_len * per_c < 16384 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t c = 0; c < s->axis_len; c++) {
        double mean = 0, var = 0;
        for (int64_t n = 0; n < s->outer; n++) {
            const float *xp = x + (n * s->axis_len + c) * s->inner;
            for (int64_t i = 0; i < s->inner; i++)
                mean += xp[i];
        }
        mean /= (double)(per_c ? per_c : 1);
        for (int64_t n = 0; n < s->outer; n++) {
            const float *xp = x + (n * s->axis_len + c) * s->inner;
            for (int64_t i = 0; i < s->inner; i++)
                var += (xp[i] - mean) * (xp[i] - mean);
        }
        var /= (double)(per_c ? per_c : 1);
        double a = sc[c] / sqrt(var + s->eps);
        for (int64_t n = 0; n < s->outer; n++) {
            const float *xp = x + (n * s->axis_len + c) * s->inner;
            float *yp = y + (n * s->axis_len + c) * s->inner;
            for (int64_t i = 0; i < s->inner; i++)
                yp[i] = (float)((xp[i] - mean) * a + b[c]);
        }
        if (run_mean) run_mean[c] = (float)(in_mean[c] * s->momentum + mean * (1 - s->momentum));
        if (run_var) run_var[c] = (float)(in_var[c] * s->momentum + var * (1 - s->momentum));
    }
    return QP_OK;
}

enum qp_status qp_k_batchnorm_prepare(struct qp_kprep *p) {
    enum qp_status st = need_floats(p, 5);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    if (x->rank < 2) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "rank %d < 2", x->rank);
    if (p->opset >= 14 && qp_kattr_int(p->node, "training_mode", 0)) return bn_train_prepare(p);
    struct norm_state s = nc_state(x, 0);
    if ((st = bn_check_params(p, s.axis_len))) return st;
    s.eps = qp_kattr_float(p->node, "epsilon", 1e-5f);
    st = qp_kt_set(p->out[0], QP_DTYPE_FLOAT, x->rank, x->dims, p->err);
    if (st) return st;
    for (int i = 1; i < p->n_out; i++)
        if (p->out[i]) return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "training outputs");
    return save(p, &s);
}

enum qp_status qp_k_batchnorm_run(const struct qp_krun *r) {
    const struct norm_state *s = r->state;
    if (s->kind == BN_TRAIN) return bn_train_run(r);
    const float *x = r->in[0]->data, *sc = r->in[1]->data, *b = r->in[2]->data,
                *mean = r->in[3]->data, *var = r->in[4]->data;
    float *y = r->out[0]->data;
    int64_t planes = s->outer * s->axis_len;
    int nt = planes * s->inner < 16384 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t pl = 0; pl < planes; pl++) {
        int64_t c = pl % s->axis_len;
        float a = sc[c] / sqrtf(var[c] + s->eps);
        float bb = b[c] - mean[c] * a;
        const float *xp = x + pl * s->inner;
        float *yp = y + pl * s->inner;
        for (int64_t i = 0; i < s->inner; i++)
            yp[i] = xp[i] * a + bb;
    }
    return QP_OK;
}

enum qp_status qp_k_instnorm_prepare(struct qp_kprep *p) {
    enum qp_status st = need_floats(p, 3);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    if (x->rank < 3) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "rank %d < 3", x->rank);
    struct norm_state s = nc_state(x, 1);
    if (p->in[1]->numel != (uint64_t)s.axis_len || p->in[2]->numel != (uint64_t)s.axis_len)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "scale/B size");
    s.eps = qp_kattr_float(p->node, "epsilon", 1e-5f);
    st = qp_kt_set(p->out[0], QP_DTYPE_FLOAT, x->rank, x->dims, p->err);
    if (st) return st;
    return save(p, &s);
}

enum qp_status qp_k_instnorm_run(const struct qp_krun *r) {
    const struct norm_state *s = r->state;
    const float *x = r->in[0]->data, *sc = r->in[1]->data, *b = r->in[2]->data;
    float *y = r->out[0]->data;
    int64_t planes = s->outer * s->axis_len;
    int nt = planes * s->inner < 16384 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t pl = 0; pl < planes; pl++) {
        int64_t c = pl % s->axis_len;
        const float *xp = x + pl * s->inner;
        float *yp = y + pl * s->inner;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < s->inner; i++)
            mean += xp[i];
        mean /= (double)(s->inner ? s->inner : 1);
        for (int64_t i = 0; i < s->inner; i++)
            var += (xp[i] - mean) * (xp[i] - mean);
        var /= (double)(s->inner ? s->inner : 1);
        float inv = (float)(1.0 / sqrt(var + s->eps));
        for (int64_t i = 0; i < s->inner; i++)
            yp[i] = (float)(xp[i] - mean) * inv * sc[c] + b[c];
    }
    return QP_OK;
}

/* LayerNormalization: X viewed as [outer, norm_size] from `axis`; Scale and B broadcast over the
 * normalized dims (unidirectionally). Optional outputs Mean and InvStdDev. */
enum qp_status qp_k_layernorm_prepare(struct qp_kprep *p) {
    enum qp_status st = need_float(p, 0);
    if (!st) st = need_float(p, 1);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    int64_t axis;
    st = qp_kaxis(qp_kattr_int(p->node, "axis", -1), x->rank, &axis, "axis", p->err);
    if (st) return st;
    struct norm_state s = {0};
    s.kind = 2;
    s.outer = 1;
    s.norm_size = 1;
    for (int i = 0; i < x->rank; i++) {
        if (i < axis)
            s.outer *= x->dims[i];
        else
            s.norm_size *= x->dims[i];
    }
    /* Scale/B must broadcast to the normalized shape; we support full size or size 1. */
    for (int i = 1; i < 3 && i < p->n_in; i++) {
        if (!p->in[i]) continue;
        if (p->in[i]->dtype != QP_DTYPE_FLOAT)
            return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "input %d dtype", i);
        if (p->in[i]->numel != (uint64_t)s.norm_size && p->in[i]->numel != 1)
            return qp_error_set(p->err, QP_ERR_UNSUPPORTED,
                                "input %d has %llu elements; the normalized size is %lld", i,
                                (unsigned long long)p->in[i]->numel, (long long)s.norm_size);
    }
    s.eps = qp_kattr_float(p->node, "epsilon", 1e-5f);
    st = qp_kt_set(p->out[0], QP_DTYPE_FLOAT, x->rank, x->dims, p->err);
    if (st) return st;
    int64_t sd[QP_MAX_RANK];
    for (int i = 0; i < x->rank; i++)
        sd[i] = i < axis ? x->dims[i] : 1;
    for (int i = 1; i < 3 && i < p->n_out; i++)
        if (p->out[i] && (st = qp_kt_set(p->out[i], QP_DTYPE_FLOAT, x->rank, sd, p->err)))
            return st;
    return save(p, &s);
}

/* ---- LayerNormalization fast path ------------------------------------------------------------
 * The row statistics in double over 8 interleaved accumulators combined in a fixed order (the
 * reference adds one element at a time), then the reference's float expression. Compiled three
 * times, plain, with AVX2 (which vectorizes the accumulators) and with AVX-512 (the eight in one
 * register, the float expression sixteen at a time), with identical arithmetic. */

/* sum of x[i] (sq 0) or of (x[i] - m)^2 (sq 1) */
static inline __attribute__((always_inline)) double ln_sum8(const float *x, int64_t n, double m,
                                                            int sq) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) {
            double d = (double)x[i + j] - m;
            acc[j] += sq ? d * d : d;
        }
    double sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) {
        double d = (double)x[i] - m;
        sum += sq ? d * d : d;
    }
    return sum;
}

struct ln_args {
    const float *x, *sc, *b;
    int sc1, b1;
    float *y, *mo, *io;
    int64_t n;
    float eps;
    uint8_t *q;                /* LayerNormQuantize: the int8/uint8 output instead of y */
    const struct qp_qspec *qs; /* its per-tensor parameters */
};

#define LN_Q_CHUNK 256 /* LayerNormQuantize: values quantized this many at a time */

static inline __attribute__((always_inline)) void ln_rows_body(const struct ln_args *a, int64_t lo,
                                                               int64_t hi) {
    int64_t n = a->n;
    double dn = (double)(n ? n : 1);
    for (int64_t o = lo; o < hi; o++) {
        const float *xp = a->x + o * n;
        float *yp = a->y ? a->y + o * n : NULL;
        double mean = ln_sum8(xp, n, 0.0, 0) / dn;
        double var = ln_sum8(xp, n, mean, 1);
        var /= dn;
        float inv = (float)(1.0 / sqrt(var + a->eps));
        float fm = (float)mean;
        const float *sc = a->sc, *b = a->b;
        float buf[LN_Q_CHUNK];
        int64_t chunk = a->q ? LN_Q_CHUNK : (n ? n : 1);
        for (int64_t c = 0; c < n; c += chunk) {
            int64_t m = n - c < chunk ? n - c : chunk;
            float *dst = a->q ? buf : yp + c;
            const float *xc = xp + c;
            if (!a->sc1 && b && !a->b1) {
                for (int64_t i = 0; i < m; i++)
                    dst[i] = (xc[i] - fm) * inv * sc[c + i] + b[c + i];
            } else {
                for (int64_t i = 0; i < m; i++) {
                    float v = (xc[i] - fm) * inv * sc[a->sc1 ? 0 : c + i];
                    if (b) v += b[a->b1 ? 0 : c + i];
                    dst[i] = v;
                }
            }
            if (a->q) qp_quantize_f32(a->qs, buf, a->q + o * n + c, 0, m);
        }
        if (a->mo) a->mo[o] = fm;
        if (a->io) a->io[o] = inv;
    }
}

static void ln_rows(const struct ln_args *a, int64_t lo, int64_t hi) {
    ln_rows_body(a, lo, hi);
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2"))) static void ln_rows_avx2(const struct ln_args *a, int64_t lo,
                                                         int64_t hi) {
    ln_rows_body(a, lo, hi);
}

__attribute__((target("avx512f,avx512dq,avx512vl"))) static void
ln_rows_avx512(const struct ln_args *a, int64_t lo, int64_t hi) {
    ln_rows_body(a, lo, hi);
}
#endif

/* Rows of a on the session's threads, with the CPU's instance of the row kernel. */
static void ln_run_rows(const struct ln_args *a, int64_t outer, int n_threads) {
    /* ~0.8 ns/element: below ~100 us one thread beats a parallel region (activation.c) */
    int nt = outer * a->n < 131072 ? 1 : n_threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t lo, hi;
        qp_ksplit(outer, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
#if defined(__x86_64__) || defined(__i386__)
        if (qp_kernel_isa() >= QP_ISA_AVX512)
            ln_rows_avx512(a, lo, hi);
        else if (qp_vf_have_avx2())
            ln_rows_avx2(a, lo, hi);
        else
#endif
            ln_rows(a, lo, hi);
    }
}

static struct ln_args ln_args_of(const struct qp_krun *r, const struct norm_state *s) {
    struct ln_args a = {.x = r->in[0]->data,
                        .sc = r->in[1]->data,
                        .b = (r->n_in > 2 && r->in[2]) ? r->in[2]->data : NULL,
                        .sc1 = r->in[1]->numel == 1,
                        .n = s->norm_size,
                        .eps = s->eps};
    a.b1 = a.b && r->in[2]->numel == 1;
    return a;
}

enum qp_status qp_k_layernorm_run(const struct qp_krun *r) {
    const struct norm_state *s = r->state;
    struct ln_args a = ln_args_of(r, s);
    a.y = r->out[0]->data;
    a.mo = (r->n_out > 1 && r->out[1]) ? r->out[1]->data : NULL;
    a.io = (r->n_out > 2 && r->out[2]) ? r->out[2]->data : NULL;
    ln_run_rows(&a, s->outer, r->n_threads);
    return QP_OK;
}

/* QP_INT8_DOMAIN "LayerNormQuantize" (x, scale, B, y_scale, y_zero_point; LayerNormalization's
 * attributes): a LayerNormalization (output Y only) whose only reader is a QuantizeLinear with
 * per-tensor int8/uint8 parameters (runtime/int8_move.c), in one pass: each row's values are
 * quantized LN_Q_CHUNK at a time as the row kernel computes them. The same values as the two
 * nodes. */
enum qp_status qp_k_layernorm_quantize_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_k_layernorm_prepare(p);
    if (!st) st = qp_kneed_const(p, 3, "y_scale");
    if (st) return st;
    const struct qp_kt *x = p->in[0], *sc = p->in[3];
    const struct qp_kt *zp = p->n_in > 4 ? p->in[4] : NULL;
    enum qp_dtype qt = zp ? zp->dtype : QP_DTYPE_UINT8;
    if (sc->dtype != QP_DTYPE_FLOAT || sc->numel != 1 || (zp && zp->numel != 1) ||
        (qt != QP_DTYPE_INT8 && qt != QP_DTYPE_UINT8))
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED,
                            "LayerNormQuantize takes per-tensor int8/uint8 parameters");
    return qp_kt_set(p->out[0], qt, x->rank, x->dims, p->err);
}

enum qp_status qp_k_layernorm_quantize_run(const struct qp_krun *r) {
    const struct norm_state *s = r->state;
    struct qp_qspec q =
        qp_qspec_per_tensor(r->out[0]->dtype, (int64_t)r->out[0]->numel, r->in[3]->data,
                            r->n_in > 4 && r->in[4] ? r->in[4]->data : NULL);
    struct ln_args a = ln_args_of(r, s);
    a.q = r->out[0]->data;
    a.qs = &q;
    ln_run_rows(&a, s->outer, r->n_threads);
    return QP_OK;
}

enum qp_status qp_k_layernorm_ref_run(const struct qp_krun *r) {
    const struct norm_state *s = r->state;
    const float *x = r->in[0]->data, *sc = r->in[1]->data;
    const float *b = (r->n_in > 2 && r->in[2]) ? r->in[2]->data : NULL;
    int sc1 = r->in[1]->numel == 1, b1 = b && r->in[2]->numel == 1;
    float *y = r->out[0]->data;
    float *mo = (r->n_out > 1 && r->out[1]) ? r->out[1]->data : NULL;
    float *io = (r->n_out > 2 && r->out[2]) ? r->out[2]->data : NULL;
    int64_t n = s->norm_size;
    int nt = s->outer * n < 16384 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t o = 0; o < s->outer; o++) {
        const float *xp = x + o * n;
        float *yp = y + o * n;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < n; i++)
            mean += xp[i];
        mean /= (double)(n ? n : 1);
        for (int64_t i = 0; i < n; i++)
            var += (xp[i] - mean) * (xp[i] - mean);
        var /= (double)(n ? n : 1);
        float inv = (float)(1.0 / sqrt(var + s->eps));
        float fm = (float)mean;
        for (int64_t i = 0; i < n; i++) {
            float v = (xp[i] - fm) * inv * sc[sc1 ? 0 : i];
            if (b) v += b[b1 ? 0 : i];
            yp[i] = v;
        }
        if (mo) mo[o] = fm;
        if (io) io[o] = inv;
    }
    return QP_OK;
}

enum qp_status qp_k_softmax_prepare(struct qp_kprep *p) {
    enum qp_status st = need_float(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    struct norm_state s = {0};
    const char *op = p->node->op_type;
    s.kind = strcmp(op, "Softmax") == 0 ? 3 : (strcmp(op, "LogSoftmax") == 0 ? 4 : 5);
    int64_t axis;
    int64_t def = p->opset >= 13 ? -1 : 1;
    if (x->rank == 0) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "scalar input");
    st = qp_kaxis(qp_kattr_int(p->node, "axis", def), x->rank, &axis, "axis", p->err);
    if (st) return st;
    s.outer = 1;
    s.inner = 1;
    if (p->opset >= 13) {
        for (int i = 0; i < axis; i++)
            s.outer *= x->dims[i];
        s.axis_len = x->dims[axis];
        for (int i = (int)axis + 1; i < x->rank; i++)
            s.inner *= x->dims[i];
    } else {
        /* Opsets < 13 coerce the input to 2-D at `axis`. */
        s.axis_len = 1;
        for (int i = 0; i < axis; i++)
            s.outer *= x->dims[i];
        for (int i = (int)axis; i < x->rank; i++)
            s.axis_len *= x->dims[i];
    }
    st = qp_kt_set(p->out[0], QP_DTYPE_FLOAT, x->rank, x->dims, p->err);
    if (st) return st;
    return save(p, &s);
}

/* ONNX Runtime gives a whole row of NaN for a Softmax/LogSoftmax row that holds a NaN or +Inf, or
 * only -Inf (its max-subtracted exponentials are NaN there). The reference kernel below gets that
 * from plain IEEE arithmetic; a kernel computed elsewhere (oneDNN's softmax primitive drops NaN in
 * its max reduction) calls this after the fact. x and y are [outer, axis_len, inner]; returns the
 * number of rows set to NaN (declared in dnnl_softmax.h). */
int64_t qp_k_softmax_nan_rows(const float *x, float *y, int64_t outer, int64_t axis_len,
                              int64_t inner) {
    int64_t n_rows = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *xp = x + o * axis_len * inner + i;
            /* mx stays -Inf for a row of -Inf; NaN compares false and is counted apart. */
            float mx = -INFINITY;
            int nan = 0;
            for (int64_t k = 0; k < axis_len; k++) {
                float v = xp[k * inner];
                nan |= v != v;
                mx = v > mx ? v : mx;
            }
            if (!nan && mx != INFINITY && mx != -INFINITY) continue;
            if (axis_len == 0) continue;
            float *yp = y + o * axis_len * inner + i;
            for (int64_t k = 0; k < axis_len; k++)
                yp[k * inner] = NAN;
            n_rows++;
        }
    return n_rows;
}

enum qp_status qp_k_softmax_run(const struct qp_krun *r) {
    const struct norm_state *s = r->state;
    const float *x = r->in[0]->data;
    float *y = r->out[0]->data;
    int64_t rows = s->outer * s->inner, n = s->axis_len, in = s->inner;
    int nt = rows * n < 16384 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t row = 0; row < rows; row++) {
        int64_t o = row / in, i = row % in;
        const float *xp = x + o * n * in + i;
        float *yp = y + o * n * in + i;
        float mx = -INFINITY;
        int64_t amax = 0;
        for (int64_t k = 0; k < n; k++)
            if (xp[k * in] > mx) {
                mx = xp[k * in];
                amax = k;
            }
        if (s->kind == 5) {
            for (int64_t k = 0; k < n; k++)
                yp[k * in] = k == amax ? 1.0f : 0.0f;
            continue;
        }
        double sum = 0;
        for (int64_t k = 0; k < n; k++)
            sum += expf(xp[k * in] - mx);
        if (s->kind == 3) {
            float inv = (float)(1.0 / sum);
            for (int64_t k = 0; k < n; k++)
                yp[k * in] = expf(xp[k * in] - mx) * inv;
        } else {
            float ls = (float)log(sum);
            for (int64_t k = 0; k < n; k++)
                yp[k * in] = xp[k * in] - mx - ls;
        }
    }
    return QP_OK;
}
