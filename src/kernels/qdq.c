/*
 * QuantizeLinear and DequantizeLinear (opsets 10, 13, 19, 21): int8/uint8, int16/uint16, int32
 * (dequantize), int4/uint4 (packed), FP8 E4M3FN/E4M3FNUZ/E5M2/E5M2FNUZ with `saturate`;
 * per-tensor, per-axis and blocked. All arithmetic is src/qmath/qparams — the same code edge
 * overlays and the QDQ writer use. The integer path's GatherQuantize (a Gather and the
 * per-tensor QuantizeLinear that is its only reader) is here too.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gather.h"
#include "kernels/kcheck.h"
#include "kernels/kernels.h"
#include "qmath/qparams.h"

struct qdq_state {
    enum qp_dtype qtype;
    int saturate;
    int64_t outer, axis_len, inner, block, n_params;
};

static enum qp_status qdq_common(struct qp_kprep *p, int quantize) {
    enum qp_status st = qp_kneed(p, 0);
    if (!st) st = qp_kneed(p, 1);
    if (st) return st;
    const struct qp_kt *x = p->in[0], *sc = p->in[1];
    const struct qp_kt *zp = p->n_in > 2 ? p->in[2] : NULL;
    struct qdq_state s;
    memset(&s, 0, sizeof s);
    if (sc->dtype != QP_DTYPE_FLOAT)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "scale dtype %s", qp_dtype_name(sc->dtype));
    if (quantize) {
        if (x->dtype != QP_DTYPE_FLOAT)
            return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "input dtype %s",
                                qp_dtype_name(x->dtype));
        int64_t od = p->opset >= 21 ? qp_kattr_int(p->node, "output_dtype", 0) : 0;
        if (zp) {
            s.qtype = zp->dtype;
            if (od && od != zp->dtype)
                return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                    "output_dtype %lld disagrees with "
                                    "the zero point's %s",
                                    (long long)od, qp_dtype_name(zp->dtype));
        } else {
            s.qtype = od ? (enum qp_dtype)od : QP_DTYPE_UINT8;
        }
        if (!qp_dtype_valid((int)s.qtype) || !qp_qtype_supported(s.qtype) ||
            s.qtype == QP_DTYPE_INT32)
            return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "quantize to %s",
                                qp_dtype_valid((int)s.qtype) ? qp_dtype_name(s.qtype)
                                                             : "invalid dtype");
    } else {
        s.qtype = x->dtype;
        if (!qp_qtype_supported(s.qtype))
            return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "dequantize from %s",
                                qp_dtype_name(s.qtype));
        if (zp && zp->dtype != x->dtype)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "zero point is %s, input is %s",
                                qp_dtype_name(zp->dtype), qp_dtype_name(x->dtype));
    }
    s.saturate = p->opset >= 19 ? (int)qp_kattr_int(p->node, "saturate", 1) : 1;
    s.block = p->opset >= 21 ? qp_kattr_int(p->node, "block_size", 0) : 0;
    if (s.block < 0)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "block_size %lld", (long long)s.block);
    s.n_params = (int64_t)sc->numel;
    if (zp && zp->numel != sc->numel)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "zero point has %llu elements, scale %llu",
                            (unsigned long long)zp->numel, (unsigned long long)sc->numel);
    if (s.n_params == 1 && s.block == 0) {
        s.outer = 1;
        s.axis_len = 1;
        s.inner = (int64_t)x->numel;
    } else {
        int64_t axis;
        st = qp_kaxis(qp_kattr_int(p->node, "axis", 1), x->rank, &axis, "axis", p->err);
        if (st) return st;
        s.outer = s.inner = 1;
        for (int i = 0; i < axis; i++)
            s.outer *= x->dims[i];
        s.axis_len = x->dims[axis];
        for (int i = (int)axis + 1; i < x->rank; i++)
            s.inner *= x->dims[i];
        if (s.block > 0) {
            if (sc->rank != x->rank)
                return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                    "blocked scale must have the input's rank");
            for (int i = 0; i < x->rank; i++) {
                int64_t want = i == axis ? (x->dims[i] + s.block - 1) / s.block : x->dims[i];
                if (sc->dims[i] != want)
                    return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                        "scale dim %d is %lld, expected "
                                        "%lld for block_size %lld",
                                        i, (long long)sc->dims[i], (long long)want,
                                        (long long)s.block);
            }
        } else if (sc->rank != 1 || sc->dims[0] != s.axis_len) {
            char b[64];
            return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                "scale of shape %s does not match axis %lld of length %lld",
                                qp_kshape_str(sc, b, sizeof b), (long long)axis,
                                (long long)s.axis_len);
        }
    }
    struct qp_qspec q = {.qtype = s.qtype,
                         .saturate = s.saturate,
                         .outer = s.outer,
                         .axis_len = s.axis_len,
                         .inner = s.inner,
                         .block = s.block,
                         .n_params = s.n_params,
                         .scale = (const float *)""};
    st = qp_qspec_check(&q, p->err);
    if (st) return st;
    st = qp_kt_set(p->out[0], quantize ? s.qtype : QP_DTYPE_FLOAT, x->rank, x->dims, p->err);
    if (st) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_quantize_prepare(struct qp_kprep *p) {
    return qdq_common(p, 1);
}
enum qp_status qp_k_dequantize_prepare(struct qp_kprep *p) {
    return qdq_common(p, 0);
}

static struct qp_qspec spec(const struct qdq_state *s, const struct qp_krun *r) {
    struct qp_qspec q = {.qtype = s->qtype,
                         .saturate = s->saturate,
                         .outer = s->outer,
                         .axis_len = s->axis_len,
                         .inner = s->inner,
                         .block = s->block,
                         .n_params = s->n_params,
                         .scale = r->in[1]->data,
                         .zero_point = (r->n_in > 2 && r->in[2]) ? r->in[2]->data : NULL};
    return q;
}

static int split_threads(const struct qdq_state *s, int64_t n, int nt) {
    /* 4-bit outputs pack two elements per byte: one thread keeps byte writes disjoint. */
    if (qp_dtype_traits(s->qtype)->bits < 8 || n < 32768) return 1;
    return nt;
}

enum qp_status qp_k_quantize_run(const struct qp_krun *r) {
    const struct qdq_state *s = r->state;
    struct qp_qspec q = spec(s, r);
    int64_t n = (int64_t)r->in[0]->numel;
    int nt = split_threads(s, n, r->n_threads);
    const float *x = r->in[0]->data;
    void *y = r->out[0]->data;
    if (qp_dtype_traits(s->qtype)->bits < 8) memset(y, 0, r->out[0]->nbytes);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t lo, hi;
        qp_ksplit(n, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        qp_quantize_f32(&q, x, y, lo, hi);
    }
    return QP_OK;
}

enum qp_status qp_k_dequantize_run(const struct qp_krun *r) {
    const struct qdq_state *s = r->state;
    struct qp_qspec q = spec(s, r);
    int64_t n = (int64_t)r->in[0]->numel;
    int nt = n < 32768 ? 1 : r->n_threads;
    const void *x = r->in[0]->data;
    float *y = r->out[0]->data;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t lo, hi;
        qp_ksplit(n, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        qp_dequantize_f32(&q, x, y, lo, hi);
    }
    return QP_OK;
}

/* QP_INT8_DOMAIN "FakeQuant" (x, scale, zero_point): QuantizeLinear then DequantizeLinear in one
 * pass, float in and float out, for a Q whose only readers are DQs of the same parameters that
 * feed float ops (src/runtime/int8.c). The same values as the two nodes. */
enum qp_status qp_k_fakequant_prepare(struct qp_kprep *p) {
    enum qp_status st = qdq_common(p, 1);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    return qp_kt_set(p->out[0], QP_DTYPE_FLOAT, x->rank, x->dims, p->err);
}

enum qp_status qp_k_fakequant_run(const struct qp_krun *r) {
    const struct qdq_state *s = r->state;
    struct qp_qspec q = spec(s, r);
    int64_t n = (int64_t)r->in[0]->numel;
    int nt = split_threads(s, n, r->n_threads);
    const float *x = r->in[0]->data;
    float *y = r->out[0]->data;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t lo, hi;
        qp_ksplit(n, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        qp_fake_quantize_f32(&q, x, y, lo, hi);
    }
    return QP_OK;
}

/* QP_INT8_DOMAIN "GatherQuantize" (data, indices, scale, zero_point; Gather's axis): a Gather of
 * float data whose only reader is a QuantizeLinear with per-tensor int8/uint8 parameters
 * (runtime/int8_move.c), in one pass: each gathered run is quantized as it is copied, so the
 * float copy is neither written nor read again (a ViT's q, k and v, sliced from the attention
 * projection by three Gathers of their own scales). The same values as the two nodes.
 * Attribute `perm` (optional, scalar indices only): the data is read as Transpose(data, perm)
 * without that transposition being written (the ViT's [1, 197, 3, 3, 64] -> [3, 1, 3, 197, 64]
 * before the three Gathers); runs along the output's last axis are contiguous when the
 * permutation keeps the last axis last. */
struct gq_state {
    struct qp_kgather g;
    enum qp_dtype qtype;
    int permuted, ro;                                 /* perm given; the output's rank */
    int64_t odims[QP_MAX_RANK], ostride[QP_MAX_RANK]; /* permuted: data stride per output dim */
    int64_t astride, alen;                            /* permuted: the gathered axis */
};

/* The `perm` view: output dims and data strides (the indices must be a scalar). */
static enum qp_status gq_permute(struct qp_kprep *p, const int64_t *pv, int64_t np,
                                 struct gq_state *s) {
    const struct qp_kt *x = p->in[0];
    int r = x->rank, seen[QP_MAX_RANK] = {0};
    if (np != r || p->in[1]->rank != 0)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED,
                            "GatherQuantize: perm of %lld entries for rank %d, indices of rank %d",
                            (long long)np, r, p->in[1]->rank);
    int64_t xs[QP_MAX_RANK], acc = 1;
    for (int i = r - 1; i >= 0; i--) {
        xs[i] = acc;
        acc *= x->dims[i];
    }
    s->permuted = 1;
    s->ro = 0;
    for (int i = 0; i < r; i++) {
        if (pv[i] < 0 || pv[i] >= r || seen[pv[i]]++)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "GatherQuantize: bad perm");
        if (i == s->g.axis) {
            s->alen = x->dims[pv[i]];
            s->astride = xs[pv[i]];
        } else {
            s->odims[s->ro] = x->dims[pv[i]];
            s->ostride[s->ro++] = xs[pv[i]];
        }
    }
    return QP_OK;
}

enum qp_status qp_k_gather_quantize_prepare(struct qp_kprep *p) {
    struct gq_state s;
    memset(&s, 0, sizeof s);
    enum qp_status st = qp_kgather_prepare(p, &s.g);
    if (!st) st = qp_kneed_const(p, 2, "scale");
    if (st) return st;
    const struct qp_kt *x = p->in[0], *sc = p->in[2];
    const struct qp_kt *zp = p->n_in > 3 ? p->in[3] : NULL;
    if (x->dtype != QP_DTYPE_FLOAT || sc->dtype != QP_DTYPE_FLOAT || sc->numel != 1 ||
        (zp && zp->numel != 1))
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED,
                            "GatherQuantize takes float data and a per-tensor float scale");
    s.qtype = zp ? zp->dtype : QP_DTYPE_UINT8;
    if (s.qtype != QP_DTYPE_INT8 && s.qtype != QP_DTYPE_UINT8)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "GatherQuantize to %s",
                            qp_dtype_name(s.qtype));
    const int64_t *pv;
    int64_t np = qp_kattr_ints(p->node, "perm", &pv);
    if (np >= 0 && (st = gq_permute(p, pv, np, &s))) return st;
    const struct qp_kt *y = p->out[0];
    st = s.permuted ? qp_kt_set(p->out[0], s.qtype, s.ro, s.odims, p->err)
                    : qp_kt_set(p->out[0], s.qtype, y->rank, y->dims, p->err);
    if (st) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

#define GQ_BUF 4096

/* Output rows [lo, hi) of the permuted view (rows along the output's last axis), data offset
 * `base` for the gathered index: rows are gathered into a buffer of GQ_BUF floats, quantized a
 * buffer at a time (qp_quantize_f32 per short row costs more than the row). */
static void gq_rows(const struct gq_state *s, const struct qp_qspec *q, const float *x, uint8_t *y,
                    int64_t base, int64_t lo, int64_t hi) {
    int64_t len = s->ro ? s->odims[s->ro - 1] : 1, step = s->ro ? s->ostride[s->ro - 1] : 1;
    float buf[GQ_BUF];
    int64_t used = 0, first = lo * len; /* buffered elements; the output index of buf[0] */
    for (int64_t row = lo; row < hi; row++) {
        int64_t off = base, rem = row;
        for (int d = s->ro - 2; d >= 0; d--) {
            off += (rem % s->odims[d]) * s->ostride[d];
            rem /= s->odims[d];
        }
        for (int64_t c = 0; c < len;) {
            int64_t m = len - c < GQ_BUF - used ? len - c : GQ_BUF - used;
            if (step == 1)
                memcpy(buf + used, x + off + c, (size_t)m * sizeof *buf);
            else
                for (int64_t j = 0; j < m; j++)
                    buf[used + j] = x[off + (c + j) * step];
            used += m;
            c += m;
            if (used == GQ_BUF) {
                qp_quantize_f32(q, buf, y + first, 0, used);
                first += used;
                used = 0;
            }
        }
    }
    if (used) qp_quantize_f32(q, buf, y + first, 0, used);
}

enum qp_status qp_k_gather_quantize_run(const struct qp_krun *r) {
    const struct gq_state *s = r->state;
    const struct qp_kt *idx = r->in[1];
    int64_t ni = (int64_t)idx->numel, len = s->permuted ? s->alen : s->g.axis_len;
    int64_t inner = s->g.inner;
    enum qp_status st = qp_kgather_check(idx, len, r->err);
    if (st) return st;
    struct qp_qspec q = qp_qspec_per_tensor(s->qtype, (int64_t)r->out[0]->numel, r->in[2]->data,
                                            r->n_in > 3 && r->in[3] ? r->in[3]->data : NULL);
    const float *x = r->in[0]->data;
    uint8_t *y = r->out[0]->data;
    int64_t n = (int64_t)r->out[0]->numel;
    if (n == 0) return QP_OK;
    int nt = n < 65536 ? 1 : r->n_threads; /* a fork costs more than quantizing 64K elements */
    if (s->permuted) {
        int64_t rows = n / (s->ro ? s->odims[s->ro - 1] : 1);
        int64_t base = qp_kgather_index(idx, 0, len) * s->astride;
#pragma omp parallel num_threads(nt) if (nt > 1)
        {
            int64_t lo, hi;
            qp_ksplit(rows, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
            gq_rows(s, &q, x, y, base, lo, hi);
        }
        return QP_OK;
    }
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t lo, hi; /* output elements; a run may be shared (a scalar index gives one) */
        qp_ksplit(n, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        while (lo < hi) {
            int64_t k = lo / inner, j = lo % inner, end = inner - j < hi - lo ? inner : j + hi - lo;
            int64_t o = k / ni, v = qp_kgather_index(idx, (uint64_t)(k % ni), len);
            qp_quantize_f32(&q, x + (o * len + v) * inner, y + k * inner, j, end);
            lo += end - j;
        }
    }
    return QP_OK;
}
