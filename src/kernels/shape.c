/*
 * Shape and data-movement ops: Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Identity,
 * Dropout (inference, and training mode with ratio 0), Transpose, Concat, Split, Slice, Gather,
 * GatherElements, Expand, Tile, Pad, Constant, ConstantOfShape, Range. Data movement is
 * dtype-agnostic (element size only), so every type of 8 bits or more works; shape inputs
 * (Reshape's shape, Slice's starts, ...) must be plan-time constants.
 */
#include <math.h>
#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#endif
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bcast.h"
#include "kernels/gather.h"
#include "kernels/kcheck.h"
#include "kernels/kernels.h"

static size_t esize(enum qp_dtype dt) {
    return (size_t)qp_dtype_traits(dt)->bits / 8;
}

static enum qp_status need_int_vector(struct qp_kprep *p, int i, const char *what) {
    enum qp_status st = qp_kneed_const(p, i, what);
    if (st) return st;
    const struct qp_kt *t = p->in[i];
    if (t->dtype != QP_DTYPE_INT64 && t->dtype != QP_DTYPE_INT32)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "input %d (%s) is %s, expected int64", i,
                            what, qp_dtype_name(t->dtype));
    if (t->rank > 1)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "input %d (%s) has rank %d, expected 1", i,
                            what, t->rank);
    if (t->numel > QP_MAX_RANK * 64)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "input %d (%s) has %llu elements", i, what,
                            (unsigned long long)t->numel);
    return QP_OK;
}

/* ---- Shape, Size ------------------------------------------------------------------------ */

struct shape_state {
    int64_t start, end;
};

enum qp_status qp_k_shape_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed(p, 0);
    if (st) return st;
    int r = p->in[0]->rank;
    int64_t start = qp_kattr_int(p->node, "start", 0);
    int64_t end = qp_kattr_int(p->node, "end", r);
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = start < 0 ? 0 : (start > r ? r : start);
    end = end < 0 ? 0 : (end > r ? r : end);
    if (end < start) end = start;
    struct shape_state s = {start, end};
    int64_t n = end - start;
    st = qp_kt_set(p->out[0], QP_DTYPE_INT64, 1, &n, p->err);
    if (st) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_shape_run(const struct qp_krun *r) {
    const struct shape_state *s = r->state;
    int64_t *o = r->out[0]->data;
    for (int64_t i = s->start; i < s->end; i++)
        o[i - s->start] = r->in[0]->dims[i];
    return QP_OK;
}

enum qp_status qp_k_size_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed(p, 0);
    if (st) return st;
    return qp_kt_set(p->out[0], QP_DTYPE_INT64, 0, NULL, p->err);
}

enum qp_status qp_k_size_run(const struct qp_krun *r) {
    *(int64_t *)r->out[0]->data = (int64_t)r->in[0]->numel;
    return QP_OK;
}

/* ---- copies: Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout -------------------- */

enum qp_status qp_k_copy_run(const struct qp_krun *r) {
    if (r->out[0]->data != r->in[0]->data && r->in[0]->nbytes)
        memcpy(r->out[0]->data, r->in[0]->data, r->in[0]->nbytes);
    if (r->n_out > 1 && r->out[1]) /* Dropout mask: all kept */
        memset(r->out[1]->data, 1, r->out[1]->nbytes);
    return QP_OK;
}

enum qp_status qp_k_identity_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed_bytes(p, 0);
    if (st) return st;
    return qp_kt_set(p->out[0], p->in[0]->dtype, p->in[0]->rank, p->in[0]->dims, p->err);
}

enum qp_status qp_k_dropout_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_k_identity_prepare(p);
    if (st) return st;
    /* Training mode draws a random mask unless the ratio is 0, where it keeps everything and
     * scales by 1/(1-0): the inference copy. The engine plans with the values of both inputs
     * (value-keyed when they come from the caller). */
    if (p->opset >= 12 && p->n_in > 2 && p->in[2]) {
        if ((st = qp_kneed_const(p, 2, "training_mode"))) return st;
        if (p->in[2]->numel != 1 || p->in[2]->dtype != QP_DTYPE_BOOL)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                "training_mode must be one bool, got %s with %llu elements",
                                qp_dtype_name(p->in[2]->dtype),
                                (unsigned long long)p->in[2]->numel);
        if (qp_kt_get_i64(p->in[2], 0)) {
            double ratio = 0.5;
            if (p->n_in > 1 && p->in[1]) {
                if ((st = qp_kneed_const(p, 1, "ratio"))) return st;
                const struct qp_kt *r = p->in[1];
                if (r->numel != 1 || !qp_dtype_traits(r->dtype)->is_float)
                    return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                        "ratio must be one float, got %s with %llu elements",
                                        qp_dtype_name(r->dtype), (unsigned long long)r->numel);
                ratio = qp_kt_get_f64(r, 0);
            }
            if (!(ratio >= 0 && ratio < 1))
                return qp_error_set(p->err, QP_ERR_BAD_INPUT, "ratio %g is outside [0, 1)", ratio);
            if (ratio != 0)
                return qp_error_set(p->err, QP_ERR_UNSUPPORTED,
                                    "training_mode=true with ratio %g draws a random mask", ratio);
        }
    }
    if (p->n_out > 1 && p->out[1])
        return qp_kt_set(p->out[1], QP_DTYPE_BOOL, p->in[0]->rank, p->in[0]->dims, p->err);
    return QP_OK;
}

enum qp_status qp_k_reshape_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed_bytes(p, 0);
    if (!st) st = need_int_vector(p, 1, "shape");
    if (st) return st;
    const struct qp_kt *x = p->in[0], *sh = p->in[1];
    int allowzero = p->opset >= 14 ? (int)qp_kattr_int(p->node, "allowzero", 0) : 0;
    if (sh->numel > QP_MAX_RANK)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "target rank %llu exceeds %d",
                            (unsigned long long)sh->numel, QP_MAX_RANK);
    int r = (int)sh->numel, infer = -1;
    int64_t d[QP_MAX_RANK];
    uint64_t known = 1;
    for (int i = 0; i < r; i++) {
        int64_t v = qp_kt_get_i64(sh, (uint64_t)i);
        if (v == 0 && !allowzero) {
            if (i >= x->rank)
                return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                    "shape[%d] = 0 copies a dimension the input lacks", i);
            v = x->dims[i];
        }
        if (v == -1) {
            if (infer >= 0)
                return qp_error_set(p->err, QP_ERR_BAD_INPUT, "shape has more than one -1");
            infer = i;
            d[i] = 1;
            continue;
        }
        if (v < 0)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "shape[%d] = %lld", i, (long long)v);
        d[i] = v;
        if (v && known > UINT64_MAX / (uint64_t)v)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "shape overflows");
        known *= (uint64_t)v;
    }
    if (infer >= 0) {
        if (known == 0 || x->numel % known)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                "cannot reshape %llu elements with a -1 dimension",
                                (unsigned long long)x->numel);
        d[infer] = (int64_t)(x->numel / known);
        known *= (uint64_t)d[infer];
    }
    if (known != x->numel) {
        char b[128];
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "cannot reshape input of shape %s (%llu elements) to %llu elements",
                            qp_kshape_str(x, b, sizeof b), (unsigned long long)x->numel,
                            (unsigned long long)known);
    }
    return qp_kt_set(p->out[0], x->dtype, r, d, p->err);
}

enum qp_status qp_k_flatten_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed_bytes(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    int64_t axis = qp_kattr_int(p->node, "axis", 1);
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis > x->rank)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "axis %lld out of range for rank %d",
                            (long long)qp_kattr_int(p->node, "axis", 1), x->rank);
    int64_t d[2] = {1, 1};
    for (int i = 0; i < x->rank; i++)
        d[i < axis ? 0 : 1] *= x->dims[i];
    return qp_kt_set(p->out[0], x->dtype, 2, d, p->err);
}

/* Axes from the attribute (opset < 13) or input 1. Returns count, or -1 when absent. */
static enum qp_status get_axes(struct qp_kprep *p, int from_input, int input, int64_t *axes,
                               int *n_out) {
    *n_out = -1;
    if (!from_input) {
        const int64_t *v;
        int64_t n = qp_kattr_ints(p->node, "axes", &v);
        if (n < 0) return QP_OK;
        if (n > QP_MAX_RANK * 2)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "%lld axes", (long long)n);
        for (int64_t i = 0; i < n; i++)
            axes[i] = v[i];
        *n_out = (int)n;
        return QP_OK;
    }
    if (input >= p->n_in || !p->in[input]) return QP_OK;
    enum qp_status st = need_int_vector(p, input, "axes");
    if (st) return st;
    if (p->in[input]->numel > QP_MAX_RANK * 2)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "too many axes");
    for (uint64_t i = 0; i < p->in[input]->numel; i++)
        axes[i] = qp_kt_get_i64(p->in[input], i);
    *n_out = (int)p->in[input]->numel;
    return QP_OK;
}

enum qp_status qp_k_squeeze_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed_bytes(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    int64_t axes[QP_MAX_RANK * 2];
    int n;
    st = get_axes(p, p->opset >= 13, 1, axes, &n);
    if (st) return st;
    int drop[QP_MAX_RANK] = {0};
    if (n < 0) {
        for (int i = 0; i < x->rank; i++)
            drop[i] = x->dims[i] == 1;
    } else {
        for (int k = 0; k < n; k++) {
            int64_t a;
            st = qp_kaxis(axes[k], x->rank, &a, "axis", p->err);
            if (st) return st;
            if (x->dims[a] != 1)
                return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                    "cannot squeeze axis %lld of size %lld", (long long)a,
                                    (long long)x->dims[a]);
            drop[a] = 1;
        }
    }
    int64_t d[QP_MAX_RANK];
    int r = 0;
    for (int i = 0; i < x->rank; i++)
        if (!drop[i]) d[r++] = x->dims[i];
    return qp_kt_set(p->out[0], x->dtype, r, d, p->err);
}

enum qp_status qp_k_unsqueeze_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed_bytes(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    int64_t axes[QP_MAX_RANK * 2];
    int n;
    st = get_axes(p, p->opset >= 13, 1, axes, &n);
    if (st) return st;
    if (n < 0) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "axes are required");
    int r = x->rank + n;
    if (r > QP_MAX_RANK)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "output rank %d exceeds %d", r,
                            QP_MAX_RANK);
    int ins[QP_MAX_RANK] = {0};
    for (int k = 0; k < n; k++) {
        int64_t a;
        st = qp_kaxis(axes[k], r, &a, "axis", p->err);
        if (st) return st;
        if (ins[a])
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "axis %lld repeated", (long long)a);
        ins[a] = 1;
    }
    int64_t d[QP_MAX_RANK];
    for (int i = 0, j = 0; i < r; i++)
        d[i] = ins[i] ? 1 : x->dims[j++];
    return qp_kt_set(p->out[0], x->dtype, r, d, p->err);
}

/* ---- Transpose ----------------------------------------------------------------------------- */

struct perm_state {
    int rank;
    int64_t odims[QP_MAX_RANK];
    int64_t istride[QP_MAX_RANK]; /* input stride of output dim i */
    size_t es;
};

enum qp_status qp_k_transpose_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed_bytes(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    int r = x->rank;
    const int64_t *pv;
    int64_t np = qp_kattr_ints(p->node, "perm", &pv);
    int64_t perm[QP_MAX_RANK];
    if (np < 0) {
        for (int i = 0; i < r; i++)
            perm[i] = r - 1 - i;
    } else {
        if (np != r)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "perm has %lld entries for rank %d",
                                (long long)np, r);
        int seen[QP_MAX_RANK] = {0};
        for (int i = 0; i < r; i++) {
            int64_t a;
            st = qp_kaxis(pv[i], r, &a, "perm entry", p->err);
            if (st) return st;
            if (seen[a])
                return qp_error_set(p->err, QP_ERR_BAD_INPUT, "perm repeats %lld", (long long)a);
            seen[a] = 1;
            perm[i] = a;
        }
    }
    struct perm_state s;
    memset(&s, 0, sizeof s);
    int64_t istr[QP_MAX_RANK], acc = 1;
    for (int i = r - 1; i >= 0; i--) {
        istr[i] = acc;
        acc *= x->dims[i];
    }
    s.rank = r;
    s.es = esize(x->dtype);
    for (int i = 0; i < r; i++) {
        s.odims[i] = x->dims[perm[i]];
        s.istride[i] = istr[perm[i]];
    }
    st = qp_kt_set(p->out[0], x->dtype, r, s.odims, p->err);
    if (st) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

#define PERM_COPY(T)                                                                               \
    do {                                                                                           \
        const T *src = in;                                                                         \
        T *dst = out;                                                                              \
        for (int64_t o = lo; o < hi;) {                                                            \
            int64_t rem = o, off = 0;                                                              \
            for (int i = r - 1; i >= 1; i--) {                                                     \
                off += (rem % s->odims[i]) * s->istride[i];                                        \
                rem /= s->odims[i];                                                                \
            }                                                                                      \
            off += rem * s->istride[0];                                                            \
            int64_t j = o % last, len = last - j;                                                  \
            if (len > hi - o) len = hi - o;                                                        \
            int64_t st_ = s->istride[r - 1];                                                       \
            if (st_ == 1) /* the last axis stays last: whole runs */                               \
                memcpy(dst + o, src + off, (size_t)len * sizeof(T));                               \
            else                                                                                   \
                for (int64_t k = 0; k < len; k++)                                                  \
                    dst[o + k] = src[off + k * st_];                                               \
            o += len;                                                                              \
        }                                                                                          \
    } while (0)

/* Fast paths. A transpose only moves data, so any split among threads gives the same bytes. */

/* perm swaps the last two axes, the others in order: *batch planes of h x c become c x h. */
static int perm_is_batched_2d(const struct perm_state *s, int64_t *batch, int64_t *h, int64_t *c) {
    int r = s->rank;
    if (r < 2) return 0;
    int64_t cc = s->odims[r - 2], hh = s->odims[r - 1];
    if (s->istride[r - 2] != 1 || s->istride[r - 1] != cc) return 0;
    int64_t acc = cc * hh, b = 1;
    for (int i = r - 3; i >= 0; i--) {
        if (s->odims[i] != 1 && s->istride[i] != acc) return 0;
        acc *= s->odims[i];
        b *= s->odims[i];
    }
    *batch = b;
    *h = hh;
    *c = cc;
    return 1;
}

#define TR_BLOCK 16

/* Output rows [c0, c1) of plane pl: y[i][j] = x[j][i] in 16x16 blocks (both sides stay in L1). */
static void tr_rows_u32(const uint32_t *x, uint32_t *y, int64_t h, int64_t c, int64_t pl,
                        int64_t c0, int64_t c1) {
    const uint32_t *xp = x + pl * h * c;
    uint32_t *yp = y + pl * h * c;
    for (int64_t j0 = 0; j0 < h; j0 += TR_BLOCK) {
        int64_t j1 = j0 + TR_BLOCK < h ? j0 + TR_BLOCK : h;
        for (int64_t i = c0; i < c1; i++)
            for (int64_t j = j0; j < j1; j++)
                yp[i * h + j] = xp[j * c + i];
    }
}

/* The same for bytes (int8 tensors between a Q and its DQ, e.g. a ViT's keys transposed for
 * the attention MatMul): 8x8 tiles through SSE2 unpacks, ragged edges one byte at a time. A
 * byte at a time throughout took about 1 ns per byte on ViT-tiny's 3x197x64 keys. */
static void tr_bytes_scalar(const uint8_t *xp, uint8_t *yp, int64_t h, int64_t c, int64_t i0,
                            int64_t i1, int64_t j0, int64_t j1) {
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = j0; j < j1; j++)
            yp[i * h + j] = xp[j * c + i];
}

#if defined(__x86_64__) || defined(__i386__)
/* y[i0 + m][j0 + k] = x[j0 + k][i0 + m] for m, k < 8. */
static void tr_bytes_8x8(const uint8_t *xp, uint8_t *yp, int64_t h, int64_t c, int64_t i0,
                         int64_t j0) {
    const uint8_t *s = xp + j0 * c + i0;
    __m128i r[8];
    for (int k = 0; k < 8; k++)
        r[k] = _mm_loadl_epi64((const __m128i *)(const void *)(s + k * c));
    /* pairs of rows interleaved, then pairs of pairs: u[q] holds columns 4(q&1)..+3 of rows
     * 4(q>>1)..+3, four bytes (one per row) per column */
    __m128i p0 = _mm_unpacklo_epi8(r[0], r[1]), p1 = _mm_unpacklo_epi8(r[2], r[3]);
    __m128i p2 = _mm_unpacklo_epi8(r[4], r[5]), p3 = _mm_unpacklo_epi8(r[6], r[7]);
    __m128i u0 = _mm_unpacklo_epi16(p0, p1), u1 = _mm_unpackhi_epi16(p0, p1);
    __m128i u2 = _mm_unpacklo_epi16(p2, p3), u3 = _mm_unpackhi_epi16(p2, p3);
    /* v[q]: output rows 2q and 2q+1, eight bytes each */
    __m128i v[4] = {_mm_unpacklo_epi32(u0, u2), _mm_unpackhi_epi32(u0, u2),
                    _mm_unpacklo_epi32(u1, u3), _mm_unpackhi_epi32(u1, u3)};
    uint8_t *d = yp + i0 * h + j0;
    for (int q = 0; q < 4; q++) {
        _mm_storel_epi64((__m128i *)(void *)(d + (2 * q) * h), v[q]);
        _mm_storel_epi64((__m128i *)(void *)(d + (2 * q + 1) * h), _mm_srli_si128(v[q], 8));
    }
}
#endif

/* Output rows [c0, c1) of plane pl, bytes. */
static void tr_rows_u8(const uint8_t *x, uint8_t *y, int64_t h, int64_t c, int64_t pl, int64_t c0,
                       int64_t c1) {
    const uint8_t *xp = x + pl * h * c;
    uint8_t *yp = y + pl * h * c;
    int64_t jf = 0, cf = c0;
#if defined(__x86_64__) || defined(__i386__)
    jf = h - h % 8;
    cf = c0 + (c1 - c0) - (c1 - c0) % 8;
    for (int64_t i0 = c0; i0 < cf; i0 += 8)
        for (int64_t j0 = 0; j0 < jf; j0 += 8)
            tr_bytes_8x8(xp, yp, h, c, i0, j0);
#endif
    tr_bytes_scalar(xp, yp, h, c, c0, cf, jf, h); /* the ragged columns of the full rows */
    tr_bytes_scalar(xp, yp, h, c, cf, c1, 0, h);  /* the ragged rows */
}

/* Where unit u's output rows start, in elements: units are consecutive in the output. */
static int64_t unit_start(int64_t u, int64_t cb, int64_t h, int64_t c) {
    int64_t c0 = (u % cb) * TR_BLOCK;
    return u / cb * h * c + (c0 < c ? c0 : c) * h;
}

static void transpose_batched_2d(const void *in, void *out, size_t es, int64_t batch, int64_t h,
                                 int64_t c, int nt) {
    int64_t cb = (c + TR_BLOCK - 1) / TR_BLOCK, units = batch * cb;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t lo, hi;
        qp_ksplit(units, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        /* The tiles below store a few bytes at a time into every output row in turn; into lines
         * this core does not hold, such stores wait for each line. Clearing the thread's whole
         * output run first brings the lines in with streaming whole-line stores: ViT-tiny's
         * 3x197x64 int8 key transposes took 0.011-0.016 ms where the memory plan had given their
         * output bytes another step had just used, 0.005 ms with the clearing (0.004 either way
         * where the lines were already here). */
        int64_t b0 = unit_start(lo, cb, h, c), b1 = unit_start(hi, cb, h, c);
        if (b1 > b0) memset((char *)out + (size_t)b0 * es, 0, (size_t)(b1 - b0) * es);
        for (int64_t u = lo; u < hi; u++) {
            int64_t pl = u / cb, c0 = (u % cb) * TR_BLOCK;
            int64_t c1 = c0 + TR_BLOCK < c ? c0 + TR_BLOCK : c;
            if (es == 4)
                tr_rows_u32(in, out, h, c, pl, c0, c1);
            else
                tr_rows_u8(in, out, h, c, pl, c0, c1);
        }
    }
}

/* Below this many bytes a transpose runs on one thread (a fork costs more than it saves). */
#define TR_PARALLEL_BYTES 131072

enum qp_status qp_k_transpose_run(const struct qp_krun *rr) {
    const struct perm_state *s = rr->state;
    int64_t n = (int64_t)rr->out[0]->numel;
    if (n == 0) return QP_OK;
    int r = s->rank;
    if (r == 0) {
        memcpy(rr->out[0]->data, rr->in[0]->data, s->es);
        return QP_OK;
    }
    int64_t batch, h, c;
    int nt = (size_t)n * s->es < TR_PARALLEL_BYTES ? 1 : rr->n_threads;
    if ((s->es == 4 || s->es == 1) && perm_is_batched_2d(s, &batch, &h, &c)) {
        transpose_batched_2d(rr->in[0]->data, rr->out[0]->data, s->es, batch, h, c, nt);
        return QP_OK;
    }
    const void *in = rr->in[0]->data;
    void *out = rr->out[0]->data;
    int64_t last = s->odims[r - 1];
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t lo, hi;
        qp_ksplit(n, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        switch (s->es) {
        case 1:
            PERM_COPY(uint8_t);
            break;
        case 2:
            PERM_COPY(uint16_t);
            break;
        case 4:
            PERM_COPY(uint32_t);
            break;
        default:
            PERM_COPY(uint64_t);
            break;
        }
    }
    return QP_OK;
}

/* ---- Concat, Split -------------------------------------------------------------------------- */

struct cat_state {
    int64_t axis, outer;
    size_t es;
};

enum qp_status qp_k_concat_prepare(struct qp_kprep *p) {
    if (p->n_in < 1) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "needs an input");
    for (int i = 0; i < p->n_in; i++) {
        enum qp_status st = qp_kneed_bytes(p, i);
        if (st) return st;
    }
    const struct qp_kt *x0 = p->in[0];
    if (x0->rank == 0) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "cannot concat scalars");
    int64_t axis;
    enum qp_status st = qp_kaxis(qp_kattr_int(p->node, "axis", 0), x0->rank, &axis, "axis", p->err);
    if (st) return st;
    int64_t d[QP_MAX_RANK];
    memcpy(d, x0->dims, sizeof d);
    d[axis] = 0;
    for (int i = 0; i < p->n_in; i++) {
        const struct qp_kt *x = p->in[i];
        if (x->dtype != x0->dtype || x->rank != x0->rank)
            return qp_error_set(
                p->err, QP_ERR_BAD_INPUT,
                "input %d differs in dtype or rank (%s rank %d, input 0: %s rank %d)", i,
                qp_dtype_name(x->dtype), x->rank, qp_dtype_name(x0->dtype), x0->rank);
        for (int k = 0; k < x->rank; k++)
            if (k != axis && x->dims[k] != x0->dims[k]) {
                char a[128], b[128];
                return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                    "input %d has shape %s, input 0 has %s (axis %lld)", i,
                                    qp_kshape_str(x, a, sizeof a), qp_kshape_str(x0, b, sizeof b),
                                    (long long)axis);
            }
        d[axis] += x->dims[axis];
    }
    struct cat_state s = {axis, 1, esize(x0->dtype)};
    for (int k = 0; k < axis; k++)
        s.outer *= x0->dims[k];
    st = qp_kt_set(p->out[0], x0->dtype, x0->rank, d, p->err);
    if (st) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_concat_run(const struct qp_krun *r) {
    const struct cat_state *s = r->state;
    unsigned char *o = r->out[0]->data;
    size_t orow = r->out[0]->nbytes / (size_t)(s->outer ? s->outer : 1);
    size_t off = 0;
    for (int i = 0; i < r->n_in; i++) {
        size_t row = r->in[i]->nbytes / (size_t)(s->outer ? s->outer : 1);
        const unsigned char *src = r->in[i]->data;
        for (int64_t k = 0; k < s->outer && row; k++)
            memcpy(o + (size_t)k * orow + off, src + (size_t)k * row, row);
        off += row;
    }
    return QP_OK;
}

struct split_state {
    int64_t axis, outer;
    size_t es;
};

enum qp_status qp_k_split_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed_bytes(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    int64_t axis;
    st = qp_kaxis(qp_kattr_int(p->node, "axis", 0), x->rank, &axis, "axis", p->err);
    if (st) return st;
    int64_t n = p->n_out, sizes_buf[64];
    if (n > 64) return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "%lld outputs", (long long)n);
    int have = 0;
    if (p->opset < 13) {
        const int64_t *v;
        int64_t k = qp_kattr_ints(p->node, "split", &v);
        if (k >= 0) {
            if (k != n)
                return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                    "split has %lld entries for %lld "
                                    "outputs",
                                    (long long)k, (long long)n);
            memcpy(sizes_buf, v, sizeof(int64_t) * (size_t)k);
            have = 1;
        }
    } else if (p->n_in > 1 && p->in[1]) {
        st = need_int_vector(p, 1, "split");
        if (st) return st;
        if ((int64_t)p->in[1]->numel != n)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "split has %llu entries for %lld outputs",
                                (unsigned long long)p->in[1]->numel, (long long)n);
        for (int64_t i = 0; i < n; i++)
            sizes_buf[i] = qp_kt_get_i64(p->in[1], (uint64_t)i);
        have = 1;
    }
    int64_t len = x->dims[axis];
    if (!have) {
        int64_t parts = p->opset >= 18 ? qp_kattr_int(p->node, "num_outputs", n) : n;
        if (parts != n || n < 1)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "num_outputs %lld with %lld outputs",
                                (long long)parts, (long long)n);
        int64_t chunk = (len + n - 1) / n;
        if (p->opset < 18 && len % n)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                "axis length %lld is not divisible "
                                "into %lld outputs",
                                (long long)len, (long long)n);
        for (int64_t i = 0; i < n; i++) {
            int64_t rest = len - i * chunk;
            sizes_buf[i] = rest < 0 ? 0 : (rest < chunk ? rest : chunk);
        }
    }
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        if (sizes_buf[i] < 0) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "negative split");
        total += sizes_buf[i];
    }
    if (total != len)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "split sizes sum to %lld, axis has %lld",
                            (long long)total, (long long)len);
    for (int64_t i = 0; i < n; i++) {
        if (!p->out[i]) continue;
        int64_t d[QP_MAX_RANK];
        memcpy(d, x->dims, sizeof d);
        d[axis] = sizes_buf[i];
        st = qp_kt_set(p->out[i], x->dtype, x->rank, d, p->err);
        if (st) return st;
    }
    struct split_state s = {axis, 1, esize(x->dtype)};
    for (int k = 0; k < axis; k++)
        s.outer *= x->dims[k];
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_split_run(const struct qp_krun *r) {
    const struct split_state *s = r->state;
    const unsigned char *src = r->in[0]->data;
    int64_t outer = s->outer ? s->outer : 1;
    size_t irow = r->in[0]->nbytes / (size_t)outer;
    size_t inner = 1;
    for (int k = (int)s->axis + 1; k < r->in[0]->rank; k++)
        inner *= (size_t)r->in[0]->dims[k];
    size_t off = 0;
    for (int i = 0; i < r->n_out; i++) {
        /* Omitted outputs still advance the offset: their size comes from the other outputs. */
        if (!r->out[i]) continue;
        size_t row = (size_t)r->out[i]->dims[s->axis] * inner * s->es;
        unsigned char *dst = r->out[i]->data;
        for (int64_t k = 0; k < outer && row; k++)
            memcpy(dst + (size_t)k * row, src + (size_t)k * irow + off, row);
        off += row;
    }
    return QP_OK;
}

/* ---- Slice ---------------------------------------------------------------------------------- */

struct slice_state {
    int rank;
    int64_t start[QP_MAX_RANK], step[QP_MAX_RANK], odims[QP_MAX_RANK], istride[QP_MAX_RANK];
    size_t es;
};

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

enum qp_status qp_k_slice_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed_bytes(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    int64_t starts[QP_MAX_RANK * 2], ends[QP_MAX_RANK * 2], axes[QP_MAX_RANK * 2],
        steps[QP_MAX_RANK * 2];
    int n;
    if (p->opset < 10) {
        const int64_t *v;
        int64_t k = qp_kattr_ints(p->node, "starts", &v);
        if (k < 0 || k > QP_MAX_RANK)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "starts attribute missing or too long");
        n = (int)k;
        memcpy(starts, v, sizeof(int64_t) * (size_t)n);
        if (qp_kattr_ints(p->node, "ends", &v) != k)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "ends has a different length");
        memcpy(ends, v, sizeof(int64_t) * (size_t)n);
        int64_t ka = qp_kattr_ints(p->node, "axes", &v);
        if (ka >= 0 && ka != k)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "axes has a different length");
        for (int i = 0; i < n; i++) {
            axes[i] = ka >= 0 ? v[i] : i;
            steps[i] = 1;
        }
    } else {
        st = need_int_vector(p, 1, "starts");
        if (!st) st = need_int_vector(p, 2, "ends");
        if (st) return st;
        n = (int)p->in[1]->numel;
        if (n > QP_MAX_RANK || p->in[2]->numel != (uint64_t)n)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "starts and ends differ in length");
        for (int i = 0; i < n; i++) {
            starts[i] = qp_kt_get_i64(p->in[1], (uint64_t)i);
            ends[i] = qp_kt_get_i64(p->in[2], (uint64_t)i);
            axes[i] = i;
            steps[i] = 1;
        }
        if (p->n_in > 3 && p->in[3]) {
            st = need_int_vector(p, 3, "axes");
            if (st) return st;
            if (p->in[3]->numel != (uint64_t)n)
                return qp_error_set(p->err, QP_ERR_BAD_INPUT, "axes differs in length");
            for (int i = 0; i < n; i++)
                axes[i] = qp_kt_get_i64(p->in[3], (uint64_t)i);
        }
        if (p->n_in > 4 && p->in[4]) {
            st = need_int_vector(p, 4, "steps");
            if (st) return st;
            if (p->in[4]->numel != (uint64_t)n)
                return qp_error_set(p->err, QP_ERR_BAD_INPUT, "steps differs in length");
            for (int i = 0; i < n; i++)
                steps[i] = qp_kt_get_i64(p->in[4], (uint64_t)i);
        }
    }
    struct slice_state s;
    memset(&s, 0, sizeof s);
    s.rank = x->rank;
    s.es = esize(x->dtype);
    int64_t acc = 1;
    for (int i = x->rank - 1; i >= 0; i--) {
        s.start[i] = 0;
        s.step[i] = 1;
        s.odims[i] = x->dims[i];
        s.istride[i] = acc;
        acc *= x->dims[i];
    }
    int seen[QP_MAX_RANK] = {0};
    for (int k = 0; k < n; k++) {
        int64_t a;
        st = qp_kaxis(axes[k], x->rank, &a, "axis", p->err);
        if (st) return st;
        if (seen[a])
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "axis %lld repeated", (long long)a);
        seen[a] = 1;
        int64_t dim = x->dims[a], stp = steps[k];
        if (stp == 0)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "step 0 on axis %lld", (long long)a);
        int64_t b = starts[k], e = ends[k];
        if (b < 0) b += dim;
        if (e < 0 && e > INT64_MIN / 2) e += dim;
        int64_t cnt;
        if (stp > 0) {
            b = clamp64(b, 0, dim);
            e = clamp64(e, 0, dim);
            cnt = e > b ? (e - b + stp - 1) / stp : 0;
        } else {
            b = clamp64(b, 0, dim - 1);
            e = clamp64(e, -1, dim - 1);
            cnt = b > e ? (b - e + (-stp) - 1) / (-stp) : 0;
        }
        s.start[a] = b;
        s.step[a] = stp;
        s.odims[a] = cnt;
    }
    st = qp_kt_set(p->out[0], x->dtype, x->rank, s.odims, p->err);
    if (st) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_slice_run(const struct qp_krun *r) {
    const struct slice_state *s = r->state;
    int64_t n = (int64_t)r->out[0]->numel;
    const unsigned char *src = r->in[0]->data;
    unsigned char *dst = r->out[0]->data;
    int rank = s->rank;
    if (n == 0) return QP_OK;
    if (rank == 0) {
        memcpy(dst, src, s->es);
        return QP_OK;
    }
    int64_t base = 0;
    for (int i = 0; i < rank; i++)
        base += s->start[i] * s->istride[i];
    int64_t last = s->odims[rank - 1], lstep = s->step[rank - 1] * s->istride[rank - 1];
    int64_t rows = n / last;
    for (int64_t row = 0; row < rows; row++) {
        int64_t rem = row, off = base;
        for (int i = rank - 2; i >= 0; i--) {
            off += (rem % s->odims[i]) * s->step[i] * s->istride[i];
            rem /= s->odims[i];
        }
        unsigned char *o = dst + (size_t)(row * last) * s->es;
        if (lstep == 1)
            memcpy(o, src + (size_t)off * s->es, (size_t)last * s->es);
        else
            for (int64_t j = 0; j < last; j++)
                memcpy(o + (size_t)j * s->es, src + (size_t)(off + j * lstep) * s->es, s->es);
    }
    return QP_OK;
}

/* ---- Gather, GatherElements ----------------------------------------------------------------- */

struct gather_state {
    struct qp_kgather g;
    size_t es;
};

/* Gather's and GatherElements' inputs: data of whole bytes, int32 or int64 indices. */
static enum qp_status gather_inputs(struct qp_kprep *p) {
    enum qp_status st = qp_kneed_bytes(p, 0);
    if (!st) st = qp_kneed(p, 1);
    if (st) return st;
    const struct qp_kt *idx = p->in[1];
    if (idx->dtype != QP_DTYPE_INT64 && idx->dtype != QP_DTYPE_INT32)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "indices are %s", qp_dtype_name(idx->dtype));
    return QP_OK;
}

enum qp_status qp_kgather_prepare(struct qp_kprep *p, struct qp_kgather *g) {
    enum qp_status st = gather_inputs(p);
    if (st) return st;
    const struct qp_kt *x = p->in[0], *idx = p->in[1];
    if (x->rank == 0) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "data is a scalar");
    int64_t axis;
    st = qp_kaxis(qp_kattr_int(p->node, "axis", 0), x->rank, &axis, "axis", p->err);
    if (st) return st;
    int r = x->rank - 1 + idx->rank;
    if (r > QP_MAX_RANK) return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "output rank %d", r);
    int64_t d[QP_MAX_RANK];
    int k = 0;
    for (int i = 0; i < axis; i++)
        d[k++] = x->dims[i];
    for (int i = 0; i < idx->rank; i++)
        d[k++] = idx->dims[i];
    for (int i = (int)axis + 1; i < x->rank; i++)
        d[k++] = x->dims[i];
    *g = (struct qp_kgather){axis, 1, x->dims[axis], 1};
    for (int i = 0; i < axis; i++)
        g->outer *= x->dims[i];
    for (int i = (int)axis + 1; i < x->rank; i++)
        g->inner *= x->dims[i];
    return qp_kt_set(p->out[0], x->dtype, r, d, p->err);
}

enum qp_status qp_kgather_check(const struct qp_kt *t, int64_t axis_len, struct qp_error *err) {
    for (uint64_t i = 0; i < t->numel; i++) {
        int64_t v = qp_kt_get_i64(t, i);
        if (v < -axis_len || v >= axis_len)
            return qp_error_set(err, QP_ERR_BAD_INPUT, "index %lld out of range [-%lld, %lld)",
                                (long long)v, (long long)axis_len, (long long)axis_len);
    }
    return QP_OK;
}

int64_t qp_kgather_index(const struct qp_kt *t, uint64_t i, int64_t axis_len) {
    int64_t v = qp_kt_get_i64(t, i);
    return v < 0 ? v + axis_len : v;
}

enum qp_status qp_k_gather_prepare(struct qp_kprep *p) {
    struct gather_state s;
    memset(&s, 0, sizeof s);
    enum qp_status st = qp_kgather_prepare(p, &s.g);
    if (st) return st;
    s.es = esize(p->in[0]->dtype);
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_gather_run(const struct qp_krun *r) {
    const struct gather_state *s = r->state;
    const struct qp_kt *idx = r->in[1];
    const unsigned char *src = r->in[0]->data;
    unsigned char *dst = r->out[0]->data;
    size_t chunk = (size_t)s->g.inner * s->es;
    int64_t ni = (int64_t)idx->numel, len = s->g.axis_len;
    enum qp_status st = qp_kgather_check(idx, len, r->err);
    if (st) return st;
    for (int64_t o = 0; o < s->g.outer; o++)
        for (int64_t i = 0; i < ni; i++) {
            int64_t v = qp_kgather_index(idx, (uint64_t)i, len);
            if (chunk)
                memcpy(dst + (size_t)(o * ni + i) * chunk, src + (size_t)(o * len + v) * chunk,
                       chunk);
        }
    return QP_OK;
}

struct gel_state {
    int rank;
    int64_t axis;
    int64_t idims[QP_MAX_RANK], xstride[QP_MAX_RANK];
    size_t es;
};

enum qp_status qp_k_gather_elements_prepare(struct qp_kprep *p) {
    enum qp_status st = gather_inputs(p);
    if (st) return st;
    const struct qp_kt *x = p->in[0], *idx = p->in[1];
    if (idx->rank != x->rank || x->rank == 0)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "indices rank %d, data rank %d", idx->rank,
                            x->rank);
    struct gel_state s;
    memset(&s, 0, sizeof s);
    st = qp_kaxis(qp_kattr_int(p->node, "axis", 0), x->rank, &s.axis, "axis", p->err);
    if (st) return st;
    s.rank = x->rank;
    s.es = esize(x->dtype);
    int64_t acc = 1;
    for (int i = x->rank - 1; i >= 0; i--) {
        s.xstride[i] = acc;
        acc *= x->dims[i];
        s.idims[i] = idx->dims[i];
        if (i != s.axis && idx->dims[i] > x->dims[i])
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "indices dim %d exceeds data", i);
    }
    st = qp_kt_set(p->out[0], x->dtype, idx->rank, idx->dims, p->err);
    if (st) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_gather_elements_run(const struct qp_krun *r) {
    const struct gel_state *s = r->state;
    const struct qp_kt *idx = r->in[1];
    const unsigned char *src = r->in[0]->data;
    unsigned char *dst = r->out[0]->data;
    int64_t alen = r->in[0]->dims[s->axis];
    for (uint64_t o = 0; o < idx->numel; o++) {
        int64_t rem = (int64_t)o, off = 0;
        for (int i = s->rank - 1; i >= 0; i--) {
            int64_t c = rem % s->idims[i];
            rem /= s->idims[i];
            if (i == s->axis) {
                int64_t v = qp_kt_get_i64(idx, o);
                if (v < 0) v += alen;
                if (v < 0 || v >= alen)
                    return qp_error_set(r->err, QP_ERR_BAD_INPUT, "index %lld out of range",
                                        (long long)qp_kt_get_i64(idx, o));
                c = v;
            }
            off += c * s->xstride[i];
        }
        memcpy(dst + o * s->es, src + (size_t)off * s->es, s->es);
    }
    return QP_OK;
}

/* ---- Expand, Tile ---------------------------------------------------------------------------- */

struct copy_ctx {
    const unsigned char *a;
    unsigned char *o;
    size_t es;
};

static void bcopy_row(void *ctx, const int64_t *off, const int64_t *step, int64_t o, int64_t len) {
    const struct copy_ctx *c = ctx;
    const unsigned char *pa = c->a + (size_t)off[0] * c->es;
    unsigned char *po = c->o + (size_t)o * c->es;
    if (step[0] == 1)
        memcpy(po, pa, (size_t)len * c->es);
    else
        for (int64_t j = 0; j < len; j++)
            memcpy(po + (size_t)j * c->es, pa, c->es);
}

enum qp_status qp_k_expand_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed_bytes(p, 0);
    if (!st) st = need_int_vector(p, 1, "shape");
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    if (p->in[1]->numel > QP_MAX_RANK)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "shape rank %llu",
                            (unsigned long long)p->in[1]->numel);
    int64_t sd[QP_MAX_RANK], d[QP_MAX_RANK];
    int sr = (int)p->in[1]->numel, r;
    for (int i = 0; i < sr; i++)
        sd[i] = qp_kt_get_i64(p->in[1], (uint64_t)i);
    st = qp_kbroadcast(x->rank, x->dims, sr, sd, &r, d, p->err);
    if (st) return st;
    st = qp_kt_set(p->out[0], x->dtype, r, d, p->err);
    if (st) return st;
    struct qp_bcast *b = malloc(sizeof *b);
    if (!b) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    const struct qp_kt *ops[1] = {x};
    st = qp_bcast_init(b, 1, ops, r, d, p->err);
    if (st) {
        free(b);
        return st;
    }
    p->state = b;
    return QP_OK;
}

enum qp_status qp_k_expand_run(const struct qp_krun *r) {
    struct copy_ctx c = {r->in[0]->data, r->out[0]->data, esize(r->in[0]->dtype)};
    qp_bcast_walk(r->state, 0, (int64_t)r->out[0]->numel, bcopy_row, &c);
    return QP_OK;
}

enum qp_status qp_k_tile_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed_bytes(p, 0);
    if (!st) st = need_int_vector(p, 1, "repeats");
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    if (p->in[1]->numel != (uint64_t)x->rank)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "repeats has %llu entries for rank %d",
                            (unsigned long long)p->in[1]->numel, x->rank);
    int64_t d[QP_MAX_RANK];
    for (int i = 0; i < x->rank; i++) {
        int64_t rep = qp_kt_get_i64(p->in[1], (uint64_t)i);
        if (rep < 0) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "negative repeat");
        if (rep && x->dims[i] > INT64_MAX / rep)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "output too large");
        d[i] = x->dims[i] * rep;
    }
    return qp_kt_set(p->out[0], x->dtype, x->rank, d, p->err);
}

enum qp_status qp_k_tile_run(const struct qp_krun *r) {
    const struct qp_kt *x = r->in[0];
    const struct qp_kt *o = r->out[0];
    size_t es = esize(x->dtype);
    int64_t xs[QP_MAX_RANK], acc = 1;
    for (int i = x->rank - 1; i >= 0; i--) {
        xs[i] = acc;
        acc *= x->dims[i];
    }
    const unsigned char *src = x->data;
    unsigned char *dst = o->data;
    for (uint64_t k = 0; k < o->numel; k++) {
        int64_t rem = (int64_t)k, off = 0;
        for (int i = o->rank - 1; i >= 0; i--) {
            off += (rem % o->dims[i]) % x->dims[i] * xs[i];
            rem /= o->dims[i];
        }
        memcpy(dst + k * es, src + (size_t)off * es, es);
    }
    return QP_OK;
}

/* ---- Pad ------------------------------------------------------------------------------------ */

enum pad_mode { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP };

struct pad_state {
    enum pad_mode mode;
    int rank;
    int64_t begin[QP_MAX_RANK];
    double value;
    int value_from_input;
};

enum qp_status qp_k_pad_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed_bytes(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    struct pad_state s;
    memset(&s, 0, sizeof s);
    char mode[16];
    qp_kattr_str(p->node, "mode", "constant", mode, sizeof mode);
    if (strcmp(mode, "constant") == 0)
        s.mode = PAD_CONSTANT;
    else if (strcmp(mode, "reflect") == 0)
        s.mode = PAD_REFLECT;
    else if (strcmp(mode, "edge") == 0)
        s.mode = PAD_EDGE;
    else if (strcmp(mode, "wrap") == 0)
        s.mode = PAD_WRAP;
    else
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "mode '%s'", mode);
    int r = x->rank;
    int64_t pads[2 * QP_MAX_RANK] = {0};
    if (p->opset < 11) {
        const int64_t *v;
        int64_t n = qp_kattr_ints(p->node, "pads", &v);
        if (n != 2 * r)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "pads has %lld entries for rank %d",
                                (long long)n, r);
        memcpy(pads, v, sizeof(int64_t) * (size_t)n);
        s.value = qp_kattr_float(p->node, "value", 0.0f);
    } else {
        st = need_int_vector(p, 1, "pads");
        if (st) return st;
        int64_t axes[QP_MAX_RANK];
        int na = r;
        for (int i = 0; i < r; i++)
            axes[i] = i;
        if (p->n_in > 3 && p->in[3]) {
            st = need_int_vector(p, 3, "axes");
            if (st) return st;
            if (p->in[3]->numel > (uint64_t)r)
                return qp_error_set(p->err, QP_ERR_BAD_INPUT, "too many axes");
            na = (int)p->in[3]->numel;
            for (int i = 0; i < na; i++) {
                st = qp_kaxis(qp_kt_get_i64(p->in[3], (uint64_t)i), r, &axes[i], "axis", p->err);
                if (st) return st;
            }
        }
        if (p->in[1]->numel != (uint64_t)(2 * na))
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "pads has %llu entries, expected %d",
                                (unsigned long long)p->in[1]->numel, 2 * na);
        for (int i = 0; i < na; i++) {
            pads[axes[i]] = qp_kt_get_i64(p->in[1], (uint64_t)i);
            pads[axes[i] + r] = qp_kt_get_i64(p->in[1], (uint64_t)(i + na));
        }
        if (p->n_in > 2 && p->in[2]) {
            if (p->in[2]->dtype != x->dtype || p->in[2]->numel > 1)
                return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                    "constant_value must be a scalar "
                                    "of the data type");
            if (p->in[2]->numel == 1) s.value_from_input = 1;
        }
    }
    int64_t d[QP_MAX_RANK];
    s.rank = r;
    for (int i = 0; i < r; i++) {
        d[i] = x->dims[i] + pads[i] + pads[i + r];
        s.begin[i] = pads[i];
        if (d[i] < 0) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "negative padded size");
        if (s.mode != PAD_CONSTANT && x->dims[i] == 0 && d[i] > 0)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "cannot %s-pad an empty axis", mode);
        if (s.mode == PAD_REFLECT && (pads[i] >= x->dims[i] || pads[i + r] >= x->dims[i]) &&
            (pads[i] > 0 || pads[i + r] > 0) && x->dims[i] < 2)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "reflect pad larger than the axis");
    }
    st = qp_kt_set(p->out[0], x->dtype, r, d, p->err);
    if (st) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

static int64_t pad_src(enum pad_mode m, int64_t i, int64_t n) {
    if (i >= 0 && i < n) return i;
    switch (m) {
    case PAD_EDGE:
        return i < 0 ? 0 : n - 1;
    case PAD_WRAP:
        return ((i % n) + n) % n;
    case PAD_REFLECT: {
        int64_t period = 2 * (n - 1);
        if (period <= 0) return 0;
        int64_t k = ((i % period) + period) % period;
        return k < n ? k : period - k;
    }
    default:
        return -1;
    }
}

enum qp_status qp_k_pad_run(const struct qp_krun *r) {
    const struct pad_state *s = r->state;
    const struct qp_kt *x = r->in[0];
    struct qp_kt *o = r->out[0];
    size_t es = esize(x->dtype);
    unsigned char fill[16] = {0};
    if (s->value_from_input) {
        memcpy(fill, r->in[2]->data, es);
    } else {
        struct qp_kt tmp = *o;
        tmp.data = fill;
        qp_kt_set_f64(&tmp, 0, s->value);
    }
    int64_t xs[QP_MAX_RANK], acc = 1;
    for (int i = x->rank - 1; i >= 0; i--) {
        xs[i] = acc;
        acc *= x->dims[i];
    }
    const unsigned char *src = x->data;
    unsigned char *dst = o->data;
    for (uint64_t k = 0; k < o->numel; k++) {
        int64_t rem = (int64_t)k, off = 0;
        int outside = 0;
        for (int i = o->rank - 1; i >= 0; i--) {
            int64_t c = rem % o->dims[i] - s->begin[i];
            rem /= o->dims[i];
            int64_t sc = pad_src(s->mode, c, x->dims[i]);
            if (sc < 0) {
                outside = 1;
                break;
            }
            off += sc * xs[i];
        }
        memcpy(dst + k * es, outside ? fill : src + (size_t)off * es, es);
    }
    return QP_OK;
}

/* ---- Constant, ConstantOfShape, Range ---------------------------------------------------------
 */

enum qp_status qp_k_constant_prepare(struct qp_kprep *p) {
    const struct qp_node *n = p->node;
    const struct qp_attr *a;
    if ((a = qp_kattr(n, "value")) && a->type == QP_ATTR_TENSOR && a->t) {
        const struct qp_tensor *t = a->t;
        if ((!t->data && t->nbytes) || t->dtype == QP_DTYPE_STRING)
            return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "value tensor of dtype %s",
                                qp_dtype_name(t->dtype));
        enum qp_status st = qp_kt_set(p->out[0], t->dtype, t->rank, t->dims, p->err);
        if (st) return st;
        if (p->out[0]->nbytes != t->nbytes)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                "value tensor has %zu bytes, shape "
                                "needs %zu",
                                t->nbytes, p->out[0]->nbytes);
        p->state = NULL;
        return QP_OK;
    }
    int64_t one = 1;
    if ((a = qp_kattr(n, "value_float")))
        return qp_kt_set(p->out[0], QP_DTYPE_FLOAT, 0, NULL, p->err);
    if ((a = qp_kattr(n, "value_int")))
        return qp_kt_set(p->out[0], QP_DTYPE_INT64, 0, NULL, p->err);
    if ((a = qp_kattr(n, "value_floats"))) {
        int64_t k = (int64_t)a->n;
        return qp_kt_set(p->out[0], QP_DTYPE_FLOAT, 1, &k, p->err);
    }
    if ((a = qp_kattr(n, "value_ints"))) {
        int64_t k = (int64_t)a->n;
        return qp_kt_set(p->out[0], QP_DTYPE_INT64, 1, &k, p->err);
    }
    (void)one;
    return qp_error_set(p->err, QP_ERR_UNSUPPORTED,
                        "no supported value attribute (sparse and string constants are not "
                        "supported)");
}

enum qp_status qp_k_constant_run(const struct qp_krun *r) {
    const struct qp_node *n = r->node;
    const struct qp_attr *a;
    void *o = r->out[0]->data;
    if ((a = qp_kattr(n, "value")) && a->type == QP_ATTR_TENSOR && a->t) {
        if (r->out[0]->nbytes) memcpy(o, a->t->data, r->out[0]->nbytes);
    } else if ((a = qp_kattr(n, "value_float"))) {
        *(float *)o = a->f;
    } else if ((a = qp_kattr(n, "value_int"))) {
        *(int64_t *)o = a->i;
    } else if ((a = qp_kattr(n, "value_floats"))) {
        if (a->n) memcpy(o, a->floats, a->n * sizeof(float));
    } else if ((a = qp_kattr(n, "value_ints"))) {
        if (a->n) memcpy(o, a->ints, a->n * sizeof(int64_t));
    }
    return QP_OK;
}

enum qp_status qp_k_constant_of_shape_prepare(struct qp_kprep *p) {
    enum qp_status st = need_int_vector(p, 0, "shape");
    if (st) return st;
    if (p->in[0]->numel > QP_MAX_RANK)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "rank %llu",
                            (unsigned long long)p->in[0]->numel);
    int64_t d[QP_MAX_RANK];
    for (uint64_t i = 0; i < p->in[0]->numel; i++)
        d[i] = qp_kt_get_i64(p->in[0], i);
    enum qp_dtype dt = QP_DTYPE_FLOAT;
    const struct qp_attr *a = qp_kattr(p->node, "value");
    if (a && a->type == QP_ATTR_TENSOR && a->t) {
        if (a->t->numel != 1 || !a->t->data || qp_dtype_traits(a->t->dtype)->bits < 8)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "value must be a one-element tensor");
        dt = a->t->dtype;
    }
    return qp_kt_set(p->out[0], dt, (int)p->in[0]->numel, d, p->err);
}

enum qp_status qp_k_constant_of_shape_run(const struct qp_krun *r) {
    const struct qp_attr *a = qp_kattr(r->node, "value");
    size_t es = esize(r->out[0]->dtype);
    unsigned char v[16] = {0};
    if (a && a->type == QP_ATTR_TENSOR && a->t) memcpy(v, a->t->data, es);
    unsigned char *o = r->out[0]->data;
    for (uint64_t i = 0; i < r->out[0]->numel; i++)
        memcpy(o + i * es, v, es);
    return QP_OK;
}

enum qp_status qp_k_range_prepare(struct qp_kprep *p) {
    for (int i = 0; i < 3; i++) {
        enum qp_status st = qp_kneed_const(p, i, i == 0 ? "start" : (i == 1 ? "limit" : "delta"));
        if (st) return st;
        if (p->in[i]->numel != 1 || p->in[i]->dtype != p->in[0]->dtype)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "input %d must be a scalar of one type",
                                i);
    }
    enum qp_dtype dt = p->in[0]->dtype;
    double n;
    if (qp_dtype_traits(dt)->is_float) {
        double a = qp_kt_get_f64(p->in[0], 0), b = qp_kt_get_f64(p->in[1], 0),
               d = qp_kt_get_f64(p->in[2], 0);
        if (d == 0.0) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "delta is 0");
        n = ceil((b - a) / d);
    } else {
        int64_t a = qp_kt_get_i64(p->in[0], 0), b = qp_kt_get_i64(p->in[1], 0),
                d = qp_kt_get_i64(p->in[2], 0);
        if (d == 0) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "delta is 0");
        n = ceil(((double)b - (double)a) / (double)d);
    }
    if (!(n > 0)) n = 0;
    if (n > 1e12) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "range too long");
    int64_t len = (int64_t)n;
    return qp_kt_set(p->out[0], dt, 1, &len, p->err);
}

enum qp_status qp_k_range_run(const struct qp_krun *r) {
    struct qp_kt *o = r->out[0];
    if (qp_dtype_traits(o->dtype)->is_float) {
        double a = qp_kt_get_f64(r->in[0], 0), d = qp_kt_get_f64(r->in[2], 0);
        if (o->dtype == QP_DTYPE_FLOAT) {
            /* ONNX's reference accumulates in the tensor type */
            float v = (float)a, fd = (float)d;
            for (uint64_t i = 0; i < o->numel; i++)
                ((float *)o->data)[i] = (float)a + (float)i * fd;
            (void)v;
        } else {
            for (uint64_t i = 0; i < o->numel; i++)
                qp_kt_set_f64(o, i, a + (double)i * d);
        }
    } else {
        int64_t a = qp_kt_get_i64(r->in[0], 0), d = qp_kt_get_i64(r->in[2], 0);
        for (uint64_t i = 0; i < o->numel; i++)
            qp_kt_set_i64(o, i, (int64_t)((uint64_t)a + i * (uint64_t)d));
    }
    return QP_OK;
}
