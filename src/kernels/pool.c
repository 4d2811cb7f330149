/* Pools: MaxPool (with the optional Indices output), AveragePool, GlobalAveragePool,
 * GlobalMaxPool. float32; MaxPool also int8/uint8; and the integer path's QGlobalAveragePool
 * (int8 in and out, requantized). The integer path's layout pass may mark an
 * int8 MaxPool, a float32 GlobalAveragePool or a 2-D float32 AveragePool `nhwc`: its input is
 * stored channels last (the AveragePool's output stays channels first); the
 * float layout pass (runtime/layout.c, pool.h) may do so with a float32 MaxPool between two
 * convolutions, whose output is then channels last too. */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/clones.h"
#include "kernels/kcheck.h"
#include "kernels/fast.h"
#include "kernels/isa.h"
#include "kernels/kernels.h"
#include "kernels/pool.h"
#include "kernels/spatial.h"
#include "kernels/vecmath.h"
#include "qmath/qparams.h"

struct pool_state {
    int is_max, count_pad, storage_order;
    int nhwc; /* int8 MaxPool, float (Global)AveragePool: the input is stored channels last
               * (attribute nhwc; the integer path's layout pass sets it) */
    int64_t planes, c;
    int64_t in3[3], out3[3], k3[3], s3[3], d3[3], p3[3], pe3[3];
    int64_t in_sz, out_sz;
};

enum qp_status qp_k_pool_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    if (x->dtype != QP_DTYPE_FLOAT)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "dtype %s", qp_dtype_name(x->dtype));
    if (x->rank < 3) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "input rank %d < 3", x->rank);
    int nsp = x->rank - 2;
    struct pool_state s;
    memset(&s, 0, sizeof s);
    s.is_max =
        strcmp(p->node->op_type, "MaxPool") == 0 || strcmp(p->node->op_type, "GlobalMaxPool") == 0;
    int global = strncmp(p->node->op_type, "Global", 6) == 0;
    struct qp_window w;
    int64_t ks[QP_MAX_SPATIAL];
    if (global) {
        if (nsp > QP_MAX_SPATIAL) return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "spatial rank");
        memset(&w, 0, sizeof w);
        w.nsp = nsp;
        for (int i = 0; i < nsp; i++) {
            w.in[i] = w.k[i] = x->dims[i + 2];
            w.out[i] = 1;
            w.stride[i] = w.dil[i] = 1;
        }
    } else {
        const int64_t *v;
        int64_t nk = qp_kattr_ints(p->node, "kernel_shape", &v);
        if (nk != nsp)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                "kernel_shape has %lld entries for %d "
                                "spatial dims",
                                (long long)nk, nsp);
        if (nsp > QP_MAX_SPATIAL) return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "spatial rank");
        memcpy(ks, v, sizeof(int64_t) * (size_t)nsp);
        st = qp_window_init(&w, p->node, nsp, x->dims + 2, ks, 1, p->err);
        if (st) return st;
        s.count_pad = (int)qp_kattr_int(p->node, "count_include_pad", 0);
        s.storage_order = (int)qp_kattr_int(p->node, "storage_order", 0);
    }
    for (int i = 0; i < 3; i++) {
        int j = i - (3 - nsp);
        s.in3[i] = j >= 0 ? w.in[j] : 1;
        s.out3[i] = j >= 0 ? w.out[j] : 1;
        s.k3[i] = j >= 0 ? w.k[j] : 1;
        s.s3[i] = j >= 0 ? w.stride[j] : 1;
        s.d3[i] = j >= 0 ? w.dil[j] : 1;
        s.p3[i] = j >= 0 ? w.pad_begin[j] : 0;
        s.pe3[i] = j >= 0 ? w.pad_end[j] : 0;
    }
    s.planes = x->dims[0] * x->dims[1];
    s.c = x->dims[1];
    s.in_sz = s.in3[0] * s.in3[1] * s.in3[2];
    s.out_sz = s.out3[0] * s.out3[1] * s.out3[2];
    int64_t od[QP_MAX_RANK];
    od[0] = x->dims[0];
    od[1] = x->dims[1];
    for (int i = 0; i < nsp; i++)
        od[i + 2] = w.out[i];
    st = qp_kt_set(p->out[0], QP_DTYPE_FLOAT, x->rank, od, p->err);
    if (st) return st;
    if (p->n_out > 1 && p->out[1]) {
        if (!s.is_max) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "second output");
        st = qp_kt_set(p->out[1], QP_DTYPE_INT64, x->rank, od, p->err);
        if (st) return st;
    }
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_pool_run(const struct qp_krun *r) {
    const struct pool_state *s = r->state;
    const float *x = r->in[0]->data;
    float *y = r->out[0]->data;
    int64_t *ind = (r->n_out > 1 && r->out[1]) ? r->out[1]->data : NULL;
    int nt = s->planes * s->out_sz < 4096 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t pl = 0; pl < s->planes; pl++) {
        const float *xp = x + pl * s->in_sz;
        for (int64_t o0 = 0; o0 < s->out3[0]; o0++)
            for (int64_t o1 = 0; o1 < s->out3[1]; o1++)
                for (int64_t o2 = 0; o2 < s->out3[2]; o2++) {
                    float best = -INFINITY;
                    int64_t best_i = -1;
                    double sum = 0;
                    int64_t cnt = 0, cnt_pad = 0;
                    for (int64_t k0 = 0; k0 < s->k3[0]; k0++) {
                        int64_t i0 = o0 * s->s3[0] - s->p3[0] + k0 * s->d3[0];
                        int in0 = i0 >= 0 && i0 < s->in3[0];
                        int pad0 = i0 >= -s->p3[0] && i0 < s->in3[0] + s->pe3[0];
                        for (int64_t k1 = 0; k1 < s->k3[1]; k1++) {
                            int64_t i1 = o1 * s->s3[1] - s->p3[1] + k1 * s->d3[1];
                            int in1 = i1 >= 0 && i1 < s->in3[1];
                            int pad1 = i1 >= -s->p3[1] && i1 < s->in3[1] + s->pe3[1];
                            for (int64_t k2 = 0; k2 < s->k3[2]; k2++) {
                                int64_t i2 = o2 * s->s3[2] - s->p3[2] + k2 * s->d3[2];
                                int in2 = i2 >= 0 && i2 < s->in3[2];
                                int pad2 = i2 >= -s->p3[2] && i2 < s->in3[2] + s->pe3[2];
                                if (pad0 && pad1 && pad2) cnt_pad++;
                                if (!(in0 && in1 && in2)) continue;
                                int64_t idx = (i0 * s->in3[1] + i1) * s->in3[2] + i2;
                                float v = xp[idx];
                                cnt++;
                                sum += v;
                                if (v > best || best_i < 0) {
                                    best = v;
                                    best_i = idx;
                                }
                            }
                        }
                    }
                    int64_t o = (o0 * s->out3[1] + o1) * s->out3[2] + o2;
                    if (s->is_max) {
                        y[pl * s->out_sz + o] = best;
                        if (ind) {
                            int64_t gi = best_i;
                            if (s->storage_order && best_i >= 0) {
                                /* column-major index within the plane (2-D pools) */
                                int64_t h = best_i / s->in3[2], w = best_i % s->in3[2];
                                gi = w * s->in3[1] + h;
                            }
                            ind[pl * s->out_sz + o] = pl * s->in_sz + gi;
                        }
                    } else {
                        int64_t d = s->count_pad ? cnt_pad : cnt;
                        y[pl * s->out_sz + o] = d ? (float)(sum / (double)d) : 0.0f;
                    }
                }
    }
    return QP_OK;
}

/* ---- MaxPool on int8 / uint8 (opset 12) ----------------------------------------------------
 * The row's prepare and run: float inputs go to the pools above; 8-bit integers reuse their
 * window geometry (planned as if the input were float) and take the maximum exactly. */

static int is_int8_pool(enum qp_dtype dt) {
    return dt == QP_DTYPE_INT8 || dt == QP_DTYPE_UINT8;
}

enum qp_status qp_k_maxpool_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    if (!is_int8_pool(x->dtype)) return qp_k_pool_prepare(p);
    struct qp_kt xf = *x;
    xf.dtype = QP_DTYPE_FLOAT;
    const struct qp_kt *ins[1] = {&xf};
    struct qp_kprep q = *p;
    q.in = ins;
    q.n_in = 1;
    st = qp_k_pool_prepare(&q);
    p->state = q.state;
    p->scratch = q.scratch;
    if (st) return st;
    struct pool_state *s = p->state;
    s->nhwc = qp_kattr_int(p->node, "nhwc", 0) != 0;
    if (s->nhwc && p->n_out > 1 && p->out[1])
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "indices of a channels-last MaxPool");
    struct qp_kt *y = p->out[0];
    return qp_kt_set(y, x->dtype, y->rank, y->dims, p->err);
}

/* Channels-last max pooling keeps blocks of channels of one output pixel in registers while it
 * walks the window's taps (at most NHWC_TAPS; larger windows go tap by tap through memory).
 * Float takes its window's first tap as it is, then v > best (maxps(v, best): a NaN stays where
 * it is first met, the general loop's values); int8/uint8 (`flip`: int8 compares as uint8 with
 * the sign bit flipped, an order-preserving map) start from 0, the type's minimum once flipped
 * back. AVX-512 and AVX2 forms, chosen by qp_kernel_isa, and a plain C one: a maximum does not
 * round, so all give the same bits (unit/kernels/fast runs each). */
#define NHWC_TAPS 64

static int64_t max_taps_f32_c(const float *const *tap, int n, float *y, int64_t c, int64_t C) {
    for (; c < C; c++) {
        float best = tap[0][c];
        for (int t = 1; t < n; t++)
            best = tap[t][c] > best ? tap[t][c] : best;
        y[c] = best;
    }
    return c;
}

static void max_taps_u8_c(const uint8_t *const *tap, int n, uint8_t *y, int64_t c, int64_t C,
                          uint8_t flip) {
    for (; c < C; c++) {
        uint8_t best = 0;
        for (int t = 0; t < n; t++) {
            uint8_t v = (uint8_t)(tap[t][c] ^ flip);
            best = v > best ? v : best;
        }
        y[c] = (uint8_t)(best ^ flip);
    }
}

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx512f"))) static void max_taps_f32_512(const float *const *tap, int n,
                                                                float *y, int64_t C) {
    int64_t c = 0;
    for (; c + 64 <= C; c += 64) {
        __m512 a0 = _mm512_loadu_ps(tap[0] + c), a1 = _mm512_loadu_ps(tap[0] + c + 16);
        __m512 a2 = _mm512_loadu_ps(tap[0] + c + 32), a3 = _mm512_loadu_ps(tap[0] + c + 48);
        for (int t = 1; t < n; t++) {
            const float *x = tap[t] + c;
            a0 = _mm512_max_ps(_mm512_loadu_ps(x), a0);
            a1 = _mm512_max_ps(_mm512_loadu_ps(x + 16), a1);
            a2 = _mm512_max_ps(_mm512_loadu_ps(x + 32), a2);
            a3 = _mm512_max_ps(_mm512_loadu_ps(x + 48), a3);
        }
        _mm512_storeu_ps(y + c, a0);
        _mm512_storeu_ps(y + c + 16, a1);
        _mm512_storeu_ps(y + c + 32, a2);
        _mm512_storeu_ps(y + c + 48, a3);
    }
    for (; c + 16 <= C; c += 16) {
        __m512 a = _mm512_loadu_ps(tap[0] + c);
        for (int t = 1; t < n; t++)
            a = _mm512_max_ps(_mm512_loadu_ps(tap[t] + c), a);
        _mm512_storeu_ps(y + c, a);
    }
    max_taps_f32_c(tap, n, y, c, C);
}

__attribute__((target("avx2"))) static void max_taps_f32_256(const float *const *tap, int n,
                                                             float *y, int64_t C) {
    int64_t c = 0;
    for (; c + 32 <= C; c += 32) {
        __m256 a0 = _mm256_loadu_ps(tap[0] + c), a1 = _mm256_loadu_ps(tap[0] + c + 8);
        __m256 a2 = _mm256_loadu_ps(tap[0] + c + 16), a3 = _mm256_loadu_ps(tap[0] + c + 24);
        for (int t = 1; t < n; t++) {
            const float *x = tap[t] + c;
            a0 = _mm256_max_ps(_mm256_loadu_ps(x), a0);
            a1 = _mm256_max_ps(_mm256_loadu_ps(x + 8), a1);
            a2 = _mm256_max_ps(_mm256_loadu_ps(x + 16), a2);
            a3 = _mm256_max_ps(_mm256_loadu_ps(x + 24), a3);
        }
        _mm256_storeu_ps(y + c, a0);
        _mm256_storeu_ps(y + c + 8, a1);
        _mm256_storeu_ps(y + c + 16, a2);
        _mm256_storeu_ps(y + c + 24, a3);
    }
    for (; c + 8 <= C; c += 8) {
        __m256 a = _mm256_loadu_ps(tap[0] + c);
        for (int t = 1; t < n; t++)
            a = _mm256_max_ps(_mm256_loadu_ps(tap[t] + c), a);
        _mm256_storeu_ps(y + c, a);
    }
    max_taps_f32_c(tap, n, y, c, C);
}

__attribute__((target("avx512f,avx512bw"))) static void
max_taps_u8_512(const uint8_t *const *tap, int n, uint8_t *y, int64_t C, uint8_t flip) {
    __m512i f = _mm512_set1_epi8((char)flip);
    int64_t c = 0;
    for (; c + 64 <= C; c += 64) {
        __m512i a = _mm512_setzero_si512();
        for (int t = 0; t < n; t++)
            a = _mm512_max_epu8(_mm512_xor_si512(_mm512_loadu_si512(tap[t] + c), f), a);
        _mm512_storeu_si512(y + c, _mm512_xor_si512(a, f));
    }
    max_taps_u8_c(tap, n, y, c, C, flip);
}

__attribute__((target("avx2"))) static void max_taps_u8_256(const uint8_t *const *tap, int n,
                                                            uint8_t *y, int64_t C, uint8_t flip) {
    __m256i f = _mm256_set1_epi8((char)flip);
    int64_t c = 0;
    for (; c + 32 <= C; c += 32) {
        __m256i a = _mm256_setzero_si256();
        for (int t = 0; t < n; t++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(tap[t] + c));
            a = _mm256_max_epu8(_mm256_xor_si256(v, f), a);
        }
        _mm256_storeu_si256((__m256i *)(y + c), _mm256_xor_si256(a, f));
    }
    max_taps_u8_c(tap, n, y, c, C, flip);
}
#endif

static void max_taps_f32(const float *const *tap, int n, float *y, int64_t C) {
#if defined(__x86_64__)
    enum qp_isa isa = qp_kernel_isa();
    if (isa >= QP_ISA_AVX512) {
        max_taps_f32_512(tap, n, y, C);
        return;
    }
    if (isa >= QP_ISA_AVX2) {
        max_taps_f32_256(tap, n, y, C);
        return;
    }
#endif
    max_taps_f32_c(tap, n, y, 0, C);
}

static void max_taps_u8(const uint8_t *const *tap, int n, uint8_t *y, int64_t C, uint8_t flip) {
#if defined(__x86_64__)
    enum qp_isa isa = qp_kernel_isa();
    if (isa >= QP_ISA_AVX512) {
        max_taps_u8_512(tap, n, y, C, flip);
        return;
    }
    if (isa >= QP_ISA_AVX2) {
        max_taps_u8_256(tap, n, y, C, flip);
        return;
    }
#endif
    max_taps_u8_c(tap, n, y, 0, C, flip);
}

/* One tap at a time through memory (windows of more than NHWC_TAPS taps): the running maxima
 * at yp, the same comparisons as above. */
static void max_tap(const void *xp, void *yp, int64_t C, int flt, uint8_t flip, int first) {
    if (flt && first) {
        memcpy(yp, xp, (size_t)C * sizeof(float));
    } else if (flt) {
        const float *x = xp;
        float *y = yp;
        for (int64_t c = 0; c < C; c++)
            y[c] = x[c] > y[c] ? x[c] : y[c];
    } else {
        const uint8_t *x = xp;
        uint8_t *y = yp;
        for (int64_t c = 0; c < C; c++) {
            uint8_t v = (uint8_t)(x[c] ^ flip);
            y[c] = v > y[c] ? v : y[c];
        }
    }
}

/* The window of output position o along axis a, clipped to the input: taps k in [*ka, *kb). */
static void window_taps(const struct pool_state *s, int a, int64_t o, int64_t *ka, int64_t *kb) {
    int64_t i0 = o * s->s3[a] - s->p3[a], d = s->d3[a], n = s->in3[a];
    int64_t lo = i0 >= 0 ? 0 : (-i0 + d - 1) / d, hi = i0 < n ? (n - 1 - i0) / d + 1 : 0;
    *ka = lo;
    *kb = hi < s->k3[a] ? hi : s->k3[a];
}

/* One output pixel px (batch b, output position o) of a channels-last max pool. */
static void maxpool_nhwc_px(const struct pool_state *s, const char *x, char *y, int64_t px, int flt,
                            uint8_t flip) {
    int64_t C = s->c, b = px / s->out_sz, o = px % s->out_sz;
    int64_t oc[3] = {o / (s->out3[1] * s->out3[2]), o / s->out3[2] % s->out3[1], o % s->out3[2]};
    int64_t ka[3], kb[3];
    for (int a = 0; a < 3; a++)
        window_taps(s, a, oc[a], &ka[a], &kb[a]);
    size_t es = flt ? sizeof(float) : 1;
    char *yp = y + (size_t)(px * C) * es;
    int64_t n = 1;
    for (int a = 0; a < 3; a++)
        n *= kb[a] > ka[a] ? kb[a] - ka[a] : 0;
    const void *tap[NHWC_TAPS];
    int nt = 0, first = 1;
    for (int64_t k0 = ka[0]; k0 < kb[0]; k0++)
        for (int64_t k1 = ka[1]; k1 < kb[1]; k1++)
            for (int64_t k2 = ka[2]; k2 < kb[2]; k2++) {
                int64_t i0 = oc[0] * s->s3[0] - s->p3[0] + k0 * s->d3[0];
                int64_t i1 = oc[1] * s->s3[1] - s->p3[1] + k1 * s->d3[1];
                int64_t i2 = oc[2] * s->s3[2] - s->p3[2] + k2 * s->d3[2];
                const char *xp =
                    x + (size_t)((b * s->in_sz + (i0 * s->in3[1] + i1) * s->in3[2] + i2) * C) * es;
                if (n <= NHWC_TAPS) {
                    tap[nt++] = xp;
                } else {
                    if (first && !flt) memset(yp, 0, (size_t)C);
                    max_tap(xp, yp, C, flt, flip, first);
                    first = 0;
                }
            }
    if (n == 0) { /* the window lies in the padding: the type's minimum */
        for (int64_t c = 0; c < C; c++)
            if (flt)
                ((float *)yp)[c] = -INFINITY;
            else
                ((uint8_t *)yp)[c] = flip;
    } else if (n <= NHWC_TAPS) {
        if (flt)
            max_taps_f32((const float *const *)tap, nt, (float *)yp, C);
        else
            max_taps_u8((const uint8_t *const *)tap, nt, (uint8_t *)yp, C, flip);
    } else if (!flt) {
        for (int64_t c = 0; c < C; c++)
            ((uint8_t *)yp)[c] ^= flip;
    }
}

/* Max pooling on channels-last tensors: int8/uint8 (attribute nhwc: the integer path keeps the
 * tensors between QConv nodes so, kernels/int8_conv.h) or float32 (qp_pool_set_nhwc: the float
 * layout pass, pool.h). Per output pixel, the maximum over the window's pixels, channel by
 * channel; a window entirely in the padding gives the type's minimum (-inf for float), as the
 * general loop does. The pixels are split between the threads in order (row bands). */
static void maxpool_nhwc(const struct qp_krun *r) {
    const struct pool_state *s = r->state;
    int flt = r->in[0]->dtype == QP_DTYPE_FLOAT;
    uint8_t flip = r->in[0]->dtype == QP_DTYPE_INT8 ? 0x80 : 0;
    int64_t C = s->c, pix = s->planes / (C ? C : 1) * s->out_sz;
    int nt = pix * C < 4096 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t px = 0; px < pix; px++)
        maxpool_nhwc_px(s, r->in[0]->data, r->out[0]->data, px, flt, flip);
}

int qp_pool_nhwc_capable(const void *state) {
    const struct pool_state *s = state;
    return s && s->is_max && s->c > 0;
}

void qp_pool_set_nhwc(void *state) {
    struct pool_state *s = state;
    if (s) s->nhwc = 1;
}

static void max_inner(int64_t n_out, int64_t k, int64_t st, int64_t p, int64_t n, int64_t *lo,
                      int64_t *hi);

/* 2-D int8/uint8 max pooling without indices or dilation (the integer path's MaxPool between
 * a Q and a DQ, planar): a row of outputs at a time, rows of the window clipped once; for the
 * columns whose windows lie inside the input (max_inner), each window tap is one pass over the
 * row's outputs, which the compiler vectorizes; the clipped columns at the ends one by one. int8
 * compares as uint8 with the sign bit flipped (an order-preserving map). The same values as the
 * generic loop: a maximum does not depend on the order. 0 when the node is not that case. */
static int maxpool8_fast(const struct qp_krun *r) {
    const struct pool_state *s = r->state;
    if (!s->is_max || (r->n_out > 1 && r->out[1]) || s->in3[0] != 1 || s->k3[0] != 1 ||
        s->out3[0] != 1 || s->p3[0] != 0 || s->pe3[0] != 0 || s->d3[1] != 1 || s->d3[2] != 1)
        return 0;
    const uint8_t *x = r->in[0]->data;
    uint8_t *y = r->out[0]->data;
    uint8_t flip = r->in[0]->dtype == QP_DTYPE_INT8 ? 0x80 : 0;
    int64_t oh_n = s->out3[1], ow_n = s->out3[2], in_h = s->in3[1], in_w = s->in3[2];
    int64_t kw_n = s->k3[2], sw = s->s3[2], pw = s->p3[2], rows = s->planes * oh_n, lo, hi;
    max_inner(ow_n, kw_n, sw, pw, in_w, &lo, &hi);
    const int64_t in_lo = lo, in_hi = hi; /* not addressed: no reload after each byte store */
    int nt = s->planes * s->out_sz < 4096 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t row = 0; row < rows; row++) {
        int64_t pl = row / oh_n, oh = row % oh_n;
        const uint8_t *xp = x + pl * s->in_sz;
        uint8_t *restrict yr = y + row * ow_n;
        int64_t h0 = oh * s->s3[1] - s->p3[1];
        int64_t ha = h0 < 0 ? 0 : h0, hb = h0 + s->k3[1] > in_h ? in_h : h0 + s->k3[1];
        memset(yr, 0, (size_t)ow_n);
        for (int64_t h = ha; h < hb; h++) {
            const uint8_t *xr = xp + h * in_w;
            for (int64_t kw = 0; kw < kw_n; kw++) {
                const uint8_t *restrict xc = xr + kw - pw;
                for (int64_t ow = in_lo; ow < in_hi; ow++) {
                    uint8_t v = (uint8_t)(xc[ow * sw] ^ flip);
                    yr[ow] = v > yr[ow] ? v : yr[ow];
                }
            }
            for (int64_t ow = 0; ow < ow_n; ow++) { /* the clipped columns */
                if (ow == in_lo) ow = in_hi;
                if (ow >= ow_n) break;
                int64_t w0 = ow * sw - pw;
                int64_t wa = w0 < 0 ? 0 : w0, wb = w0 + kw_n > in_w ? in_w : w0 + kw_n;
                for (int64_t w = wa; w < wb; w++) {
                    uint8_t v = (uint8_t)(xr[w] ^ flip);
                    yr[ow] = v > yr[ow] ? v : yr[ow];
                }
            }
        }
        for (int64_t ow = 0; ow < ow_n; ow++)
            yr[ow] ^= flip;
    }
    return 1;
}

enum qp_status qp_k_maxpool_run(const struct qp_krun *r) {
    enum qp_dtype dt = r->in[0]->dtype;
    if (!is_int8_pool(dt)) return qp_k_pool_run(r);
    const struct pool_state *s = r->state;
    if (s->nhwc) {
        maxpool_nhwc(r);
        return QP_OK;
    }
    const uint8_t *x = r->in[0]->data;
    uint8_t *y = r->out[0]->data;
    int is_signed = dt == QP_DTYPE_INT8;
    int64_t *ind = (r->n_out > 1 && r->out[1]) ? r->out[1]->data : NULL;
    int nt = s->planes * s->out_sz < 4096 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t pl = 0; pl < s->planes; pl++) {
        const uint8_t *xp = x + pl * s->in_sz;
        for (int64_t o0 = 0; o0 < s->out3[0]; o0++)
            for (int64_t o1 = 0; o1 < s->out3[1]; o1++)
                for (int64_t o2 = 0; o2 < s->out3[2]; o2++) {
                    int best = is_signed ? INT8_MIN : 0;
                    int64_t best_i = -1;
                    for (int64_t k0 = 0; k0 < s->k3[0]; k0++) {
                        int64_t i0 = o0 * s->s3[0] - s->p3[0] + k0 * s->d3[0];
                        if (i0 < 0 || i0 >= s->in3[0]) continue;
                        for (int64_t k1 = 0; k1 < s->k3[1]; k1++) {
                            int64_t i1 = o1 * s->s3[1] - s->p3[1] + k1 * s->d3[1];
                            if (i1 < 0 || i1 >= s->in3[1]) continue;
                            for (int64_t k2 = 0; k2 < s->k3[2]; k2++) {
                                int64_t i2 = o2 * s->s3[2] - s->p3[2] + k2 * s->d3[2];
                                if (i2 < 0 || i2 >= s->in3[2]) continue;
                                int64_t idx = (i0 * s->in3[1] + i1) * s->in3[2] + i2;
                                int v = is_signed ? (int)(int8_t)xp[idx] : (int)xp[idx];
                                if (v > best || best_i < 0) {
                                    best = v;
                                    best_i = idx;
                                }
                            }
                        }
                    }
                    int64_t o = (o0 * s->out3[1] + o1) * s->out3[2] + o2;
                    y[pl * s->out_sz + o] = (uint8_t)best;
                    if (ind) {
                        int64_t gi = best_i;
                        if (s->storage_order && best_i >= 0) {
                            int64_t h = best_i / s->in3[2], w = best_i % s->in3[2];
                            gi = w * s->in3[1] + h;
                        }
                        ind[pl * s->out_sz + o] = pl * s->in_sz + gi;
                    }
                }
    }
    return QP_OK;
}

/* ---- GlobalAveragePool fast path ------------------------------------------------------------
 * A plane's sum in double over 8 interleaved accumulators (the reference adds one element at a
 * time, a chain of dependent additions), combined in a fixed order: the same value for any
 * thread count. Compiled twice, plain and with AVX2 (which vectorizes the 8 accumulators), with
 * identical arithmetic. */

/* The mean of n elements from the 8 accumulators (acc[j * as], each the sum of elements i + j
 * for i < done, a multiple of 8) and the elements from `done` on (x[t * xs]): one order of
 * additions for the planar and the channels-last paths. */
static inline __attribute__((always_inline)) float
gap_mean(const double *acc, int64_t as, const float *x, int64_t xs, int64_t done, int64_t n) {
    double sum = ((acc[0] + acc[as]) + (acc[2 * as] + acc[3 * as])) +
                 ((acc[4 * as] + acc[5 * as]) + (acc[6 * as] + acc[7 * as]));
    for (int64_t t = done; t < n; t++)
        sum += (double)x[t * xs];
    return n ? (float)(sum / (double)n) : 0.0f;
}

static inline __attribute__((always_inline)) void
gap_planes_body(const float *x, float *y, int64_t lo, int64_t hi, int64_t n) {
    for (int64_t pl = lo; pl < hi; pl++) {
        const float *xp = x + pl * n;
        double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            for (int j = 0; j < 8; j++)
                acc[j] += (double)xp[i + j];
        y[pl] = gap_mean(acc, 1, xp, 1, i, n);
    }
}

static void gap_planes(const float *x, float *y, int64_t lo, int64_t hi, int64_t n) {
    gap_planes_body(x, y, lo, hi, n);
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2"))) static void gap_planes_avx2(const float *x, float *y, int64_t lo,
                                                            int64_t hi, int64_t n) {
    gap_planes_body(x, y, lo, hi, n);
}
#endif

/* gap_planes_body on a channels-last input (n pixels of c channels per batch item): channel ch
 * gets the same sum, accumulator by accumulator, as its plane would (so the same bits), 64
 * channels at a time across the pixels. Items [lo, hi) of (batch, block of 64 channels). */
#define GAP_CB 64
QP_CLONES
static void gap_nhwc(const float *x, float *y, int64_t c, int64_t n, int64_t lo, int64_t hi) {
    int64_t blocks = (c + GAP_CB - 1) / GAP_CB;
    for (int64_t it = lo; it < hi; it++) {
        int64_t b = it / blocks, c0 = it % blocks * GAP_CB;
        int64_t w = c - c0 < GAP_CB ? c - c0 : GAP_CB;
        const float *xb = x + b * n * c + c0;
        double acc[8][GAP_CB];
        memset(acc, 0, sizeof acc);
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            for (int j = 0; j < 8; j++)
                for (int64_t k = 0; k < w; k++)
                    acc[j][k] += (double)xb[(i + j) * c + k];
        for (int64_t k = 0; k < w; k++)
            y[b * c + c0 + k] = gap_mean(&acc[0][k], GAP_CB, xb + k, c, i, n);
    }
}

enum qp_status qp_k_global_avgpool_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_k_pool_prepare(p);
    if (st) return st;
    struct pool_state *s = p->state;
    s->nhwc = qp_kattr_int(p->node, "nhwc", 0) != 0;
    return QP_OK;
}

enum qp_status qp_k_global_avgpool_run(const struct qp_krun *r) {
    const struct pool_state *s = r->state;
    if (s->nhwc) {
        int64_t nb = r->in[0]->dims[0], c = r->in[0]->dims[1],
                items = nb * ((c + GAP_CB - 1) / GAP_CB);
        int nt = s->planes * s->in_sz < 131072 ? 1 : r->n_threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
        {
            int64_t lo, hi;
            qp_ksplit(items, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
            gap_nhwc(r->in[0]->data, r->out[0]->data, c, s->in_sz, lo, hi);
        }
        return QP_OK;
    }
    if (s->is_max || s->out_sz != 1 || r->in[0]->dtype != QP_DTYPE_FLOAT) return qp_k_pool_run(r);
    const float *x = r->in[0]->data;
    float *y = r->out[0]->data;
    int64_t n = s->in_sz;
    int nt = s->planes * n < 131072 ? 1 : r->n_threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t lo, hi;
        qp_ksplit(s->planes, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
#if defined(__x86_64__) || defined(__i386__)
        if (qp_vf_have_avx2())
            gap_planes_avx2(x, y, lo, hi, n);
        else
#endif
            gap_planes(x, y, lo, hi, n);
    }
    return QP_OK;
}

/* ---- QGlobalAveragePool (the integer path) ---------------------------------------------------
 * y = Q(GlobalAveragePool(DQ(x))), per-tensor parameters: each plane's bytes summed exactly in
 * integers, the mean x_scale (sum - n x_zero_point) / n computed in double and rounded to float,
 * then quantized as QuantizeLinear does (qmath). The oracle sums the dequantized floats, so the
 * two differ only where that float rounding moves a value across a rounding tie: within one
 * step. Inputs: 0 x (int8/uint8 [N, C, spatial...]), 1 x_scale, 2 x_zero_point, 3 y_scale,
 * 4 y_zero_point (absent: uint8, 0); attribute nhwc: x stored channels last. */

struct qgap_state {
    int nhwc;
    int64_t nb, c, n; /* batch items, channels, pixels per plane */
    float xs, ys;
    int64_t xz;
};

enum qp_status qp_k_qgap_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed(p, 0);
    if (!st) st = qp_kneed_const(p, 1, "x_scale");
    if (!st) st = qp_kneed_const(p, 3, "y_scale");
    if (st) return st;
    const struct qp_kt *x = p->in[0], *xz = p->in[2], *yz = p->n_in > 4 ? p->in[4] : NULL;
    enum qp_dtype ydt = yz ? yz->dtype : QP_DTYPE_UINT8;
    if ((x->dtype != QP_DTYPE_INT8 && x->dtype != QP_DTYPE_UINT8) || x->rank < 3 ||
        (ydt != QP_DTYPE_INT8 && ydt != QP_DTYPE_UINT8) || p->in[1]->numel != 1 ||
        p->in[3]->numel != 1 || p->in[1]->dtype != QP_DTYPE_FLOAT ||
        p->in[3]->dtype != QP_DTYPE_FLOAT || (xz && (xz->numel != 1 || xz->dtype != x->dtype)) ||
        (yz && yz->numel != 1))
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED,
                            "QGlobalAveragePool takes int8/uint8 [N, C, ...] with per-tensor "
                            "float scales");
    if (xz && !xz->is_const) return qp_kneed_const(p, 2, "x_zero_point");
    struct qgap_state s = {.nhwc = qp_kattr_int(p->node, "nhwc", 0) != 0,
                           .nb = x->dims[0],
                           .c = x->dims[1],
                           .n = 1,
                           .xs = *(const float *)p->in[1]->data,
                           .ys = *(const float *)p->in[3]->data,
                           .xz = xz ? qp_kt_get_i64(xz, 0) : 0};
    int64_t od[QP_MAX_RANK];
    od[0] = x->dims[0];
    od[1] = x->dims[1];
    for (int i = 2; i < x->rank; i++) {
        s.n *= x->dims[i];
        od[i] = 1;
    }
    if ((st = qp_kt_set(p->out[0], ydt, x->rank, od, p->err))) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

/* Sums of channels [c0, c0 + w) over n pixels of c channels (channels last), exact: int32
 * partial sums of at most 2^23 pixels (255 * 2^23 < 2^31), added into int64. */
#define QGAP_CB 256
QP_CLONES
static void qgap_sums_nhwc(const void *x, int sgn, int64_t c, int64_t n, int64_t c0, int64_t w,
                           int64_t *sum) {
    int32_t acc[QGAP_CB];
    for (int64_t k = 0; k < w; k++)
        sum[k] = 0;
    for (int64_t i0 = 0; i0 < n; i0 += (int64_t)1 << 23) {
        int64_t i1 = n - i0 < ((int64_t)1 << 23) ? n : i0 + ((int64_t)1 << 23);
        memset(acc, 0, sizeof acc);
        if (sgn) {
            const int8_t *xb = (const int8_t *)x + c0;
            for (int64_t i = i0; i < i1; i++)
                for (int64_t k = 0; k < w; k++)
                    acc[k] += xb[i * c + k];
        } else {
            const uint8_t *xb = (const uint8_t *)x + c0;
            for (int64_t i = i0; i < i1; i++)
                for (int64_t k = 0; k < w; k++)
                    acc[k] += xb[i * c + k];
        }
        for (int64_t k = 0; k < w; k++)
            sum[k] += acc[k];
    }
}

/* The sum of one plane of n bytes. */
static int64_t qgap_sum_plane(const void *x, int sgn, int64_t n) {
    int64_t sum = 0;
    if (sgn)
        for (int64_t i = 0; i < n; i++)
            sum += ((const int8_t *)x)[i];
    else
        for (int64_t i = 0; i < n; i++)
            sum += ((const uint8_t *)x)[i];
    return sum;
}

enum qp_status qp_k_qgap_run(const struct qp_krun *r) {
    const struct qgap_state *s = r->state;
    const struct qp_kt *x = r->in[0];
    int sgn = x->dtype == QP_DTYPE_INT8;
    struct qp_qspec q = qp_qspec_per_tensor(r->out[0]->dtype, (int64_t)r->out[0]->numel, &s->ys,
                                            r->n_in > 4 && r->in[4] ? r->in[4]->data : NULL);
    int64_t blocks = (s->c + QGAP_CB - 1) / QGAP_CB, items = s->nb * blocks;
    int nt = (int64_t)x->numel < 131072 ? 1 : r->n_threads;
    const double k = s->n ? (double)s->xs / (double)s->n : 0.0;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t lo, hi, sum[QGAP_CB];
        float mean[QGAP_CB];
        qp_ksplit(items, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        for (int64_t it = lo; it < hi; it++) {
            int64_t b = it / blocks, c0 = it % blocks * QGAP_CB;
            int64_t w = s->c - c0 < QGAP_CB ? s->c - c0 : QGAP_CB;
            const uint8_t *xb = (const uint8_t *)x->data + b * s->c * s->n;
            if (s->nhwc)
                qgap_sums_nhwc(xb, sgn, s->c, s->n, c0, w, sum);
            else
                for (int64_t j = 0; j < w; j++)
                    sum[j] = qgap_sum_plane(xb + (c0 + j) * s->n, sgn, s->n);
            for (int64_t j = 0; j < w; j++)
                mean[j] = (float)(k * (double)(sum[j] - s->n * s->xz));
            qp_quantize_f32(&q, mean, (uint8_t *)r->out[0]->data + b * s->c + c0, 0, w);
        }
    }
    return QP_OK;
}

/* ---- AveragePool fast path ------------------------------------------------------------------
 * 1-D and 2-D windows without dilation: each output's in-bounds tap range is computed once
 * instead of testing every tap, and the taps are summed in the reference's order (rows, then
 * columns, in double), so the results are bit-identical to it. */

/* Taps [lo, hi) of a window starting at input index `start` that fall inside [0, n); *pad: how
 * many fall inside the padded range [-pb, n + pe). */
static void avg_range(int64_t start, int64_t k, int64_t n, int64_t pb, int64_t pe, int64_t *lo,
                      int64_t *hi, int64_t *pad) {
    int64_t a = -start > 0 ? -start : 0, b = n - start < k ? n - start : k;
    *lo = a;
    *hi = b > a ? b : a;
    int64_t pa = -pb - start > 0 ? -pb - start : 0, pz = n + pe - start < k ? n + pe - start : k;
    *pad = pz > pa ? pz - pa : 0;
}

/* The fast paths' geometry: 1-D or 2-D, no dilation (avgpool_nhwc: the 2-D case). */
static int avg_fast_geometry(const struct pool_state *s) {
    return s->in3[0] == 1 && s->k3[0] == 1 && s->out3[0] == 1 && s->p3[0] == 0 && s->pe3[0] == 0 &&
           s->d3[1] == 1 && s->d3[2] == 1;
}

enum qp_status qp_k_avgpool_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_k_pool_prepare(p);
    if (st) return st;
    struct pool_state *s = p->state;
    s->nhwc = qp_kattr_int(p->node, "nhwc", 0) != 0;
    if (s->nhwc && (!avg_fast_geometry(s) || p->in[0]->rank != 4))
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED,
                            "a channels-last AveragePool must be 2-D without dilation");
    return QP_OK;
}

/* Channels-last input [N, H, W, C], channels-first output [N, C, OH, OW]: each output's taps
 * summed in double in the planar loop's order (rows, then columns) and divided as it divides,
 * so the same bits; 64 channels of one output pixel at a time. Output pixels [lo, hi) (image,
 * oh, ow in row order). */
#define AVG_CB 64
QP_CLONES
static void avgpool_nhwc(const struct pool_state *s, const float *x, float *y, int64_t lo,
                         int64_t hi) {
    int64_t ow_n = s->out3[2], c = s->c, iw = s->in3[2];
    for (int64_t px = lo; px < hi; px++) {
        int64_t b = px / s->out_sz, oh = px % s->out_sz / ow_n, ow = px % ow_n;
        int64_t h0 = oh * s->s3[1] - s->p3[1], w0 = ow * s->s3[2] - s->p3[2];
        int64_t h_lo, h_hi, h_pad, w_lo, w_hi, w_pad;
        avg_range(h0, s->k3[1], s->in3[1], s->p3[1], s->pe3[1], &h_lo, &h_hi, &h_pad);
        avg_range(w0, s->k3[2], iw, s->p3[2], s->pe3[2], &w_lo, &w_hi, &w_pad);
        int64_t d = s->count_pad ? h_pad * w_pad : (h_hi - h_lo) * (w_hi - w_lo);
        const float *xb = x + b * s->in_sz * c;
        float *yo = y + b * c * s->out_sz + oh * ow_n + ow;
        for (int64_t c0 = 0; c0 < c; c0 += AVG_CB) {
            int64_t w = c - c0 < AVG_CB ? c - c0 : AVG_CB;
            double acc[AVG_CB];
            for (int64_t k = 0; k < w; k++)
                acc[k] = 0;
            for (int64_t kh = h_lo; kh < h_hi; kh++)
                for (int64_t kw = w_lo; kw < w_hi; kw++) {
                    const float *xp = xb + ((h0 + kh) * iw + w0 + kw) * c + c0;
                    for (int64_t k = 0; k < w; k++)
                        acc[k] += xp[k];
                }
            for (int64_t k = 0; k < w; k++)
                yo[(c0 + k) * s->out_sz] = d ? (float)(acc[k] / (double)d) : 0.0f;
        }
    }
}

enum qp_status qp_k_avgpool_run(const struct qp_krun *r) {
    const struct pool_state *s = r->state;
    if (s->nhwc) {
        int64_t pixels = r->in[0]->dims[0] * s->out_sz;
        int nt = s->planes * s->out_sz < 4096 ? 1 : r->n_threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
        {
            int64_t lo, hi;
            qp_ksplit(pixels, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
            avgpool_nhwc(s, r->in[0]->data, r->out[0]->data, lo, hi);
        }
        return QP_OK;
    }
    if (s->is_max || r->in[0]->dtype != QP_DTYPE_FLOAT || !avg_fast_geometry(s))
        return qp_k_pool_run(r);
    const float *x = r->in[0]->data;
    float *y = r->out[0]->data;
    int64_t oh_n = s->out3[1], ow_n = s->out3[2], rows = s->planes * oh_n;
    int nt = s->planes * s->out_sz < 4096 ? 1 : r->n_threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t lo, hi;
        qp_ksplit(rows, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        for (int64_t row = lo; row < hi; row++) {
            int64_t pl = row / oh_n, oh = row % oh_n;
            const float *xp = x + pl * s->in_sz;
            int64_t h_lo, h_hi, h_pad;
            avg_range(oh * s->s3[1] - s->p3[1], s->k3[1], s->in3[1], s->p3[1], s->pe3[1], &h_lo,
                      &h_hi, &h_pad);
            for (int64_t ow = 0; ow < ow_n; ow++) {
                int64_t w0 = ow * s->s3[2] - s->p3[2], w_lo, w_hi, w_pad;
                avg_range(w0, s->k3[2], s->in3[2], s->p3[2], s->pe3[2], &w_lo, &w_hi, &w_pad);
                double sum = 0;
                int64_t h0 = oh * s->s3[1] - s->p3[1];
                for (int64_t kh = h_lo; kh < h_hi; kh++) {
                    const float *xr = xp + (h0 + kh) * s->in3[2] + w0;
                    for (int64_t kw = w_lo; kw < w_hi; kw++)
                        sum += xr[kw];
                }
                int64_t d = s->count_pad ? h_pad * w_pad : (h_hi - h_lo) * (w_hi - w_lo);
                y[row * ow_n + ow] = d ? (float)(sum / (double)d) : 0.0f;
            }
        }
    }
    return QP_OK;
}

/* ---- MaxPool fast path ----------------------------------------------------------------------
 * float, 1-D and 2-D windows without dilation, no Indices output: each output's in-bounds tap
 * range is computed once, and the taps are visited in the reference's order (rows, then
 * columns) with the reference's rule (the first tap, then any strictly greater one), so NaN,
 * -0 and +0 come out as in the reference. Outputs whose window lies inside the row are computed
 * 8 at a time with AVX2 for strides 1 and 2: _mm256_max_ps(v, best) is `v > best ? v : best`,
 * the same rule lane by lane. OpenMP over output rows of all planes. */

/* Outputs [*lo, *hi) of a row whose window [o * s - p, o * s - p + k) lies inside [0, n). */
static void max_inner(int64_t n_out, int64_t k, int64_t st, int64_t p, int64_t n, int64_t *lo,
                      int64_t *hi) {
    int64_t a = (p + st - 1) / st, b = n - k + p >= 0 ? (n - k + p) / st + 1 : 0;
    if (b > n_out) b = n_out;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

/* One output: rows [h_lo, h_hi) and columns [w_lo, w_hi) of the window at (h0, w0). */
static inline float max_one(const float *xp, int64_t in_w, int64_t h0, int64_t h_lo, int64_t h_hi,
                            int64_t w0, int64_t w_lo, int64_t w_hi) {
    float best = -INFINITY;
    int first = 1;
    for (int64_t kh = h_lo; kh < h_hi; kh++) {
        const float *xr = xp + (h0 + kh) * in_w + w0;
        for (int64_t kw = w_lo; kw < w_hi; kw++)
            if (first || xr[kw] > best) {
                best = xr[kw];
                first = 0;
            }
    }
    return best;
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/* 8 outputs at columns w0, w0 + st, ... (st 1 or 2), all window columns in bounds. */
__attribute__((target("avx2"))) static void max8_avx2(const float *xp, int64_t in_w, int64_t h0,
                                                      int64_t h_lo, int64_t h_hi, int64_t w0,
                                                      int64_t kw_n, int64_t st, float *y) {
    __m256 best = _mm256_setzero_ps();
    const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    int first = 1;
    for (int64_t kh = h_lo; kh < h_hi; kh++) {
        const float *xr = xp + (h0 + kh) * in_w + w0;
        for (int64_t kw = 0; kw < kw_n; kw++) {
            __m256 v;
            if (st == 1) {
                v = _mm256_loadu_ps(xr + kw);
            } else {
                /* even lanes of 16 floats: the last one read is xr[kw + 14] */
                __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(xr + kw), even);
                __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(xr + kw + 8), even);
                v = _mm256_permute2f128_ps(lo, hi, 0x20);
            }
            best = first ? v : _mm256_max_ps(v, best);
            first = 0;
        }
    }
    _mm256_storeu_ps(y, best);
}
#endif

enum qp_status qp_k_maxpool_fast_run(const struct qp_krun *r) {
    const struct pool_state *s = r->state;
    int has_ind = r->n_out > 1 && r->out[1];
    if (s->nhwc && r->in[0]->dtype == QP_DTYPE_FLOAT) {
        maxpool_nhwc(r);
        return QP_OK;
    }
    if (is_int8_pool(r->in[0]->dtype) && !s->nhwc && maxpool8_fast(r)) return QP_OK;
    if (!s->is_max || has_ind || r->in[0]->dtype != QP_DTYPE_FLOAT || s->in3[0] != 1 ||
        s->k3[0] != 1 || s->out3[0] != 1 || s->p3[0] != 0 || s->pe3[0] != 0 || s->d3[1] != 1 ||
        s->d3[2] != 1)
        return qp_k_maxpool_run(r);
    const float *x = r->in[0]->data;
    float *y = r->out[0]->data;
    int64_t oh_n = s->out3[1], ow_n = s->out3[2], rows = s->planes * oh_n;
    int64_t in_h = s->in3[1], in_w = s->in3[2], kh_n = s->k3[1], kw_n = s->k3[2];
    int64_t sh = s->s3[1], sw = s->s3[2], ph = s->p3[1], pw = s->p3[2];
    int64_t in_lo, in_hi;
    max_inner(ow_n, kw_n, sw, pw, in_w, &in_lo, &in_hi);
    int vec = 0;
#if defined(__x86_64__) || defined(__i386__)
    vec = (sw == 1 || sw == 2) && kw_n >= 1 && qp_vf_have_avx2();
#endif
    int nt = s->planes * s->out_sz < 4096 ? 1 : r->n_threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t lo, hi;
        qp_ksplit(rows, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        for (int64_t row = lo; row < hi; row++) {
            int64_t pl = row / oh_n, oh = row % oh_n;
            const float *xp = x + pl * s->in_sz;
            float *yr = y + row * ow_n;
            int64_t h0 = oh * sh - ph, h_lo, h_hi, h_pad;
            avg_range(h0, kh_n, in_h, ph, s->pe3[1], &h_lo, &h_hi, &h_pad);
            int64_t ow = 0;
            for (; ow < ow_n; ow++) {
                if (vec && ow >= in_lo && ow + 8 <= in_hi - (sw == 2) && h_hi > h_lo) break;
                int64_t w0 = ow * sw - pw, w_lo, w_hi, w_pad;
                avg_range(w0, kw_n, in_w, pw, s->pe3[2], &w_lo, &w_hi, &w_pad);
                yr[ow] = max_one(xp, in_w, h0, h_lo, h_hi, w0, w_lo, w_hi);
            }
#if defined(__x86_64__) || defined(__i386__)
            /* with stride 2 a vector reads one float past its last window, so it also needs
             * the next output's window inside the row */
            int64_t v_hi = in_hi - (sw == 2);
            for (; vec && ow + 8 <= v_hi; ow += 8)
                max8_avx2(xp, in_w, h0, h_lo, h_hi, ow * sw - pw, kw_n, sw, yr + ow);
            /* the rest of the inner outputs: one more vector, overlapping the last one (the
             * outputs it recomputes get the same values) */
            if (vec && ow < v_hi && v_hi - 8 >= in_lo && h_hi > h_lo) {
                max8_avx2(xp, in_w, h0, h_lo, h_hi, (v_hi - 8) * sw - pw, kw_n, sw, yr + v_hi - 8);
                ow = v_hi;
            }
#endif
            for (; ow < ow_n; ow++) {
                int64_t w0 = ow * sw - pw, w_lo, w_hi, w_pad;
                avg_range(w0, kw_n, in_w, pw, s->pe3[2], &w_lo, &w_hi, &w_pad);
                yr[ow] = max_one(xp, in_w, h0, h_lo, h_hi, w0, w_lo, w_hi);
            }
        }
    }
    return QP_OK;
}
