/*
 * int8_gemm.h: exact integer GEMM, im2col and depthwise convolution, AVX2 and plain C.
 *
 * GEMM blocking: a tile is MR (4) rows x one 16-column panel, summed over the whole of k in
 * registers (a panel's slice of B is 16 x k bytes, from L1 or L2; the arithmetic per byte loaded
 * is high enough that k needs no blocking), then the epilogue stores it. Work items are (row
 * block, panel group) pairs shared out dynamically; each tile's sums and epilogue run in one
 * thread in k order, so the partition changes nothing.
 */
#include "kernels/int8_gemm.h"
#include "kernels/kernel.h"
#include "kernels/vecmath.h"

#include <omp.h>
#include <string.h>

#include "core/half.h"
#include "core/size.h"
#include "qmath/qparams.h"

#define NR       16 /* columns per panel */
#define QB       64 /* bytes per quad of k in a panel: NR x 4 */
#define MR       4  /* rows per tile */
#define MC       64 /* rows per work item (at most) */
#define PG       4  /* panels per work item (at most) */
#define DW_MAX_K 81

int64_t qp_i8g_npad(int64_t n) {
    return (n + NR - 1) / NR * NR;
}

static int64_t kquads(int64_t k) {
    return (k + 3) / 4;
}

/* ---- packing ------------------------------------------------------------------------------ */

size_t qp_i8g_pack_bytes(int64_t k, int64_t n) {
    if (k < 1 || k > QP_I8G_MAX_K || n < 1 || n > (INT64_C(1) << 40)) return 0;
    size_t panels, sums, total;
    if (!qp_size_mul3((size_t)(qp_i8g_npad(n) / NR), (size_t)kquads(k), QB, &panels) ||
        !qp_size_mul((size_t)qp_i8g_npad(n) + 1, sizeof(int32_t), &sums) ||
        !qp_size_add(panels, sums, &total))
        return 0;
    return total; /* the last int32: 1 when no weight is -128 */
}

void qp_i8g_pack(const int8_t *bt, int64_t ldbt, int64_t k, int64_t n, void *packed) {
    int64_t kq = kquads(k), np = qp_i8g_npad(n) / NR;
    int8_t *d = packed;
    int32_t *sum = (int32_t *)(d + np * kq * QB);
    int min128 = 0;
    memset(packed, 0, qp_i8g_pack_bytes(k, n));
    for (int64_t j = 0; j < n; j++) {
        const int8_t *col = bt + j * ldbt;
        int8_t *pj = d + j / NR * kq * QB + j % NR * 4;
        int32_t s = 0;
        for (int64_t kk = 0; kk < k; kk++) {
            pj[kk / 4 * QB + kk % 4] = col[kk];
            s += col[kk];
            min128 |= col[kk] == -128;
        }
        sum[j] = s;
    }
    sum[qp_i8g_npad(n)] = !min128;
}

void qp_i8g_b_view(const void *packed, int64_t k, int64_t n, struct qp_i8g_b *b) {
    b->panels = packed;
    b->colsum = (const int32_t *)((const int8_t *)packed + qp_i8g_npad(n) / NR * kquads(k) * QB);
    b->k = k;
    b->n = n;
    b->no_min = b->colsum[qp_i8g_npad(n)] != 0;
}

/* Depthwise: blocks of 16 channels; per block and kernel position, the 16 channels' weights as
 * floats (zero beyond c). The kernel sums in float32, which is exact here: every product
 * (x - zp) * w is an integer of at most 255 * 128 in magnitude, and every partial sum of at
 * most DW_MAX_K of them stays below 2^24, where float32 holds every integer, so each
 * multiply-add rounds nothing and the order of the sums does not matter. */
size_t qp_i8g_dw_pack_bytes(int64_t c, int64_t k_sz) {
    if (c < 1 || c > (INT64_C(1) << 40) || k_sz < 1 || k_sz > DW_MAX_K) return 0;
    size_t w;
    if (!qp_size_mul3((size_t)qp_i8g_npad(c), (size_t)k_sz, sizeof(float), &w)) return 0;
    return w;
}

void qp_i8g_dw_pack(const int8_t *w, int64_t c, int64_t k_sz, void *packed) {
    float *wf = packed;
    memset(packed, 0, qp_i8g_dw_pack_bytes(c, k_sz));
    for (int64_t ch = 0; ch < c; ch++)
        for (int64_t k = 0; k < k_sz; k++)
            wf[(ch / NR * k_sz + k) * NR + ch % NR] = (float)w[ch * k_sz + k];
}

/* The source as floats x - zp, one row of npad(c) per pixel (channels beyond c 0), then one
 * row of zeros that kernel positions in the padding read. */
size_t qp_i8g_dw_scratch_bytes(const struct qp_conv_state *g) {
    size_t rows, total;
    if (!qp_size_mul((size_t)g->n, (size_t)g->in_sz, &rows) ||
        !qp_size_mul3(rows + 1, (size_t)qp_i8g_npad(g->c), sizeof(float), &total))
        return 0;
    return total;
}

/* ---- the epilogue, one element (the reference's arithmetic) ------------------------------- */

/* The sums' context: the column sums the zero point multiplies. */
struct epi_ctx {
    const struct qp_i8g_epi *e;
    const int32_t *colsum;
    int32_t zp;
};

static float res_real(const struct qp_i8g_epi *e, int64_t at) {
    if (e->rdt == QP_DTYPE_FLOAT) return ((const float *)e->res)[at];
    float q = e->rdt == QP_DTYPE_INT8 ? (float)((const int8_t *)e->res)[at]
                                      : (float)((const uint8_t *)e->res)[at];
    return e->io->rs * (q - (float)e->io->rzp);
}

static void store_one(const struct qp_i8g_epi *e, int64_t at, float v) {
    if (e->ydt == QP_DTYPE_FLOAT) {
        ((float *)e->y)[at] = v;
    } else if (e->ydt == QP_DTYPE_FLOAT16) {
        ((uint16_t *)e->y)[at] = qp_f32_to_fp16(v);
    } else {
        float q = qp_round_half_even(v / e->io->ys) + (float)e->io->yzp;
        float lo = e->ydt == QP_DTYPE_INT8 ? -128.0f : 0.0f, hi = lo + 255.0f;
        q = q < lo ? lo : q > hi ? hi : q;
        if (e->ydt == QP_DTYPE_INT8)
            ((int8_t *)e->y)[at] = (int8_t)q;
        else
            ((uint8_t *)e->y)[at] = (uint8_t)q;
    }
}

/* Row i, column j from the sum of x * w (before the zero point). */
static void epi_one(const struct epi_ctx *c, int64_t i, int64_t j, int64_t sum) {
    const struct qp_i8g_epi *e = c->e;
    int32_t acc = (int32_t)(c->zp ? sum - (int64_t)c->zp * c->colsum[j] : sum);
    if (!e->io) {
        ((int32_t *)e->y)[i * e->ldy + j] = acc;
        return;
    }
    float v = (float)acc * e->osc[j] + e->bias[j];
    float rv = e->res ? res_real(e, i * e->ldr + j) : 0.0f;
    store_one(e, i * e->ldy + j, qp_i8_posts_ref(e->io, v, rv));
}

/* ---- plain C ------------------------------------------------------------------------------ */

struct job {
    const struct qp_i8g_a *a;
    const struct qp_i8g_b *b;
    struct epi_ctx ctx;
    int64_t m, kq, np;
    int64_t a_row0; /* output row i reads A's row i - a_row0 (a chunk of im2col rows) */
};

static void tile_c(const struct job *jb, int64_t i0, int mr, int64_t p) {
    const int8_t *bp = jb->b->panels + p * jb->kq * QB;
    int64_t w = jb->b->n - p * NR < NR ? jb->b->n - p * NR : NR;
    for (int r = 0; r < mr; r++) {
        const uint8_t *row = (const uint8_t *)jb->a->data + (i0 + r - jb->a_row0) * jb->a->lda;
        int64_t acc[NR] = {0};
        for (int64_t q = 0; q < jb->kq; q++)
            for (int t = 0; t < 4; t++) {
                int32_t x = jb->a->is_signed ? (int8_t)row[4 * q + t] : row[4 * q + t];
                for (int c = 0; c < NR; c++)
                    acc[c] += x * bp[q * QB + 4 * c + t];
            }
        for (int64_t c = 0; c < w; c++)
            epi_one(&jb->ctx, i0 + r, p * NR + c, acc[c]);
    }
}

/* A source byte (int8 when is_signed, else uint8) minus the zero point, as a float (exact). */
static inline float byte_minus_zp(uint8_t b, int is_signed, int32_t zp) {
    return (float)((is_signed ? (int32_t)(int8_t)b : (int32_t)b) - zp);
}

/* One output pixel's depthwise sums: px[k] the float source row of kernel position k. */
static void dw_row_c(const struct qp_conv_state *g, const float *const *px, const float *wf,
                     const struct epi_ctx *ctx, int64_t row) {
    for (int64_t ch = 0; ch < g->c; ch++) {
        int64_t acc = 0;
        for (int64_t k = 0; k < g->k_sz; k++)
            acc += (int64_t)px[k][ch] * (int64_t)wf[(ch / NR * g->k_sz + k) * NR + ch % NR];
        epi_one(ctx, row, ch, acc);
    }
}

/* ---- AVX2 --------------------------------------------------------------------------------- */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define HAVE_AVX2  1
#define AVX        __attribute__((target("avx2,fma")))
#define AVX_INLINE static inline __attribute__((always_inline, target("avx2,fma")))
#define RNE        (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC) /* an immediate, also at -O0 */

AVX_INLINE int32_t load4(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The 4-byte words [0, n / 4) of a 16-byte vector (n < 16, a multiple of 4). */
AVX_INLINE __m128i words4(int64_t n) {
    return _mm_cmpgt_epi32(_mm_set1_epi32((int)(n / 4)), _mm_setr_epi32(0, 1, 2, 3));
}

/* The first n (< 16) bytes at p in a vector, the rest 0, reading no byte past p + n: whole
 * 4-byte words by a masked load (channel counts are multiples of 4 but for the odd model), else
 * through a buffer (a library call: measured at most of a small depthwise layer's time). */
AVX_INLINE __m128i load_part(const uint8_t *p, int64_t n) {
    if (n % 4 == 0) return _mm_maskload_epi32((const int *)(const void *)p, words4(n));
    uint8_t t[16] = {0};
    memcpy(t, p, (size_t)n);
    return _mm_loadu_si128((const __m128i *)t);
}

/* Lanes [0, n) of 8 (n may be <= 0 or >= 8). */
AVX_INLINE __m256i mask8(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n < 0   ? 0
                                                : n > 8 ? 8
                                                        : (int)n),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The vecmath function of a post-operation kind computed by one (Sigmoid, Gelu), or -1. */
static inline int post_vf(int kind) {
    return kind == QP_CONV_POST_SIGMOID     ? QP_VF_SIGMOID
           : kind == QP_CONV_POST_GELU      ? QP_VF_GELU
           : kind == QP_CONV_POST_GELU_TANH ? QP_VF_GELU_TANH
                                            : -1;
}

/* The post-operations on n vectors, one operation at a time over all of them:
 * qp_conv_post_ref's operations, lane by lane. q8: the values go to an int8 store, which does
 * not see the sign of a zero, so Relu may give +0 where the reference's alpha * x gives -0 (the
 * only difference a maximum makes on finite values, and the later operations keep it a zero). */
AVX_INLINE void posts_n(const struct qp_i8_io *io, __m256 *v, const __m256 *rv, int n, int q8,
                        int w) {
    const __m256 zero = _mm256_setzero_ps(), six = _mm256_set1_ps(6.0f);
    for (int k = 0; k < io->n_post; k++) {
        const struct qp_conv_post *q = &io->post[k];
        __m256 al = _mm256_set1_ps(q->alpha), be = _mm256_set1_ps(q->beta);
        switch (q->kind) {
        case QP_CONV_POST_LINEAR:
            for (int i = 0; i < n; i++)
                v[i] = _mm256_add_ps(_mm256_mul_ps(al, v[i]), be);
            break;
        case QP_CONV_POST_RELU:
            if (q8 && q->alpha == 0.0f) {
                for (int i = 0; i < n; i++)
                    v[i] = _mm256_max_ps(v[i], zero);
                break;
            }
            for (int i = 0; i < n; i++)
                v[i] = _mm256_blendv_ps(_mm256_mul_ps(al, v[i]), v[i],
                                        _mm256_cmp_ps(v[i], zero, _CMP_GT_OQ));
            break;
        case QP_CONV_POST_CLIP:
            for (int i = 0; i < n; i++) {
                __m256 lt = _mm256_cmp_ps(v[i], al, _CMP_LT_OQ);
                __m256 gt = _mm256_cmp_ps(v[i], be, _CMP_GT_OQ);
                v[i] = _mm256_blendv_ps(_mm256_blendv_ps(v[i], be, gt), al, lt);
            }
            break;
        case QP_CONV_POST_HARDSWISH:
            for (int i = 0; i < n; i++) {
                __m256 h = _mm256_add_ps(v[i], _mm256_set1_ps(3.0f));
                __m256 lt = _mm256_cmp_ps(h, zero, _CMP_LT_OQ);
                __m256 gt = _mm256_cmp_ps(h, six, _CMP_GT_OQ);
                h = _mm256_blendv_ps(_mm256_blendv_ps(h, six, gt), zero, lt);
                v[i] = _mm256_div_ps(_mm256_mul_ps(v[i], h), six);
            }
            break;
        case QP_CONV_POST_SUM: /* rv is NULL only without a residual, hence without a SUM */
            for (int i = 0; rv && i < n; i++)
                v[i] = _mm256_add_ps(v[i], rv[i]);
            break;
        default: { /* Sigmoid, Gelu: the float engine's (vecmath.h), else the reference's */
            float t[8 * 32];
            int f = post_vf(q->kind);
            if (n <= 32 && f >= 0) {
                for (int i = 0; i < n; i++)
                    _mm256_storeu_ps(t + 8 * i, v[i]);
                if (w < 16 && n % 2 == 0) {
                    /* only the w columns stored of each row's 16 (a few-channel head: 1 of 16) */
                    float c[8 * 32];
                    int cnt = 0;
                    for (int r = 0; r < n / 2; r++)
                        for (int l = 0; l < w; l++)
                            c[cnt++] = t[16 * r + l];
                    if (qp_vf_apply((enum qp_vfn)f, c, c, cnt)) {
                        cnt = 0;
                        for (int r = 0; r < n / 2; r++)
                            for (int l = 0; l < w; l++)
                                t[16 * r + l] = c[cnt++];
                        for (int i = 0; i < n; i++)
                            v[i] = _mm256_loadu_ps(t + 8 * i);
                        break;
                    }
                } else if (qp_vf_apply((enum qp_vfn)f, t, t, 8 * n)) {
                    for (int i = 0; i < n; i++)
                        v[i] = _mm256_loadu_ps(t + 8 * i);
                    break;
                }
            }
            for (int i = 0; i < n; i++) {
                _mm256_storeu_ps(t, v[i]);
                for (int l = 0; l < 8; l++)
                    t[l] = qp_conv_post_ref(1, q, t[l], 0.0f);
                v[i] = _mm256_loadu_ps(t);
            }
            break;
        }
        }
    }
}

/* The residual's real values at element `at`, w (<= 16) of them, into r[0] and r[1] (the
 * lanes beyond w are 0). */
AVX_INLINE void res_load(const struct qp_i8g_epi *e, int64_t at, int w, __m256 *r) {
    if (e->rdt == QP_DTYPE_FLOAT) {
        const float *p = (const float *)e->res + at;
        if (w == 16) {
            r[0] = _mm256_loadu_ps(p);
            r[1] = _mm256_loadu_ps(p + 8);
            return;
        }
        r[0] = _mm256_maskload_ps(p, mask8(w));
        r[1] = _mm256_maskload_ps(p + 8, mask8(w - 8));
        return;
    }
    const uint8_t *p = (const uint8_t *)e->res + at;
    __m128i b = w == 16 ? _mm_loadu_si128((const __m128i *)p) : load_part(p, w);
    __m128i b1 = _mm_srli_si128(b, 8);
    int sgn = e->rdt == QP_DTYPE_INT8;
    __m256i q0 = sgn ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
    __m256i q1 = sgn ? _mm256_cvtepi8_epi32(b1) : _mm256_cvtepu8_epi32(b1);
    __m256 zp = _mm256_set1_ps((float)e->io->rzp), sc = _mm256_set1_ps(e->io->rs);
    __m256 f0 = _mm256_cvtepi32_ps(q0), f1 = _mm256_cvtepi32_ps(q1);
    if (e->io->rzp) { /* q - 0.0f is q: integers, never -0 */
        f0 = _mm256_sub_ps(f0, zp);
        f1 = _mm256_sub_ps(f1, zp);
    }
    r[0] = _mm256_mul_ps(sc, f0);
    r[1] = _mm256_mul_ps(sc, f1);
}

/* Float and fp16 outputs: 16 values (w of them) at element `at` of y. */
AVX_INLINE void store16_float(const struct qp_i8g_epi *e, int64_t at, const __m256 *v, int w) {
    if (e->ydt == QP_DTYPE_FLOAT) { /* no copy through a buffer */
        float *y = (float *)e->y + at;
        if (w == 16) {
            _mm256_storeu_ps(y, v[0]);
            _mm256_storeu_ps(y + 8, v[1]);
        } else {
            _mm256_maskstore_ps(y, mask8(w), v[0]);
            _mm256_maskstore_ps(y + 8, mask8(w - 8), v[1]);
        }
        return;
    }
    float t[16];
    _mm256_storeu_ps(t, v[0]);
    _mm256_storeu_ps(t + 8, v[1]);
    qp_f32_to_fp16_n(t, (uint16_t *)e->y + at, (size_t)w);
}

/* round_half_even(v / y_scale) for n vectors into v, exactly as the reference rounds the
 * quotient (a division is slow: 8 of them cost more than the rest of the epilogue). The quotient
 * is taken as t = v * fl(1 / y_scale), within 3 * 2^-24 |t| of the correctly rounded v / y_scale
 * (two roundings of 2^-24 each, one more for the reference's own quotient), so both round to
 * the same integer unless t is within that of a half-integer: then, or for NaN or |t| >= 2^23
 * (where t - round(t) is not exact), the tile divides. The margin checked is 8 * 2^-24 |t|. */
AVX_INLINE void quotient_rounded(const struct qp_i8g_epi *e, const __m256 *v, __m256 *t, int n) {
    const __m256 inv = _mm256_set1_ps(1.0f / e->io->ys), half = _mm256_set1_ps(0.5f);
    const __m256 sign = _mm256_set1_ps(-0.0f), eps = _mm256_set1_ps(0x1p-21f);
    __m256 ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for (int i = 0; i < n; i++) {
        t[i] = _mm256_mul_ps(v[i], inv);
        __m256 r = _mm256_round_ps(t[i], RNE);
        __m256 off = _mm256_andnot_ps(sign, _mm256_sub_ps(t[i], r)); /* exact: |t| < 2^23 */
        __m256 lim = _mm256_sub_ps(half, _mm256_mul_ps(_mm256_andnot_ps(sign, t[i]), eps));
        ok = _mm256_and_ps(ok, _mm256_cmp_ps(off, lim, _CMP_LT_OQ));
        t[i] = r;
    }
    if (_mm256_movemask_ps(ok) == 0xff) return;
    const __m256 ys = _mm256_set1_ps(e->io->ys);
    for (int i = 0; i < n; i++)
        t[i] = _mm256_round_ps(_mm256_div_ps(v[i], ys), RNE);
}

/* Int8 outputs: rows i0 .. i0 + mr of 16 real values each (w of them) at column j of y,
 * requantized as store_one does. */
AVX_INLINE void store_q8(const struct qp_i8g_epi *e, int64_t i0, int mr, int64_t j, int w,
                         const __m256 *v) {
    float lo = e->ydt == QP_DTYPE_INT8 ? -128.0f : 0.0f;
    const __m256 zp = _mm256_set1_ps((float)e->io->yzp), vlo = _mm256_set1_ps(lo),
                 vhi = _mm256_set1_ps(lo + 255.0f);
    __m256 rq[2 * MR];
    quotient_rounded(e, v, rq, 2 * mr);
    int sgn = e->ydt == QP_DTYPE_INT8;
    for (int r = 0; r < mr; r++) {
        __m256i q[2];
        for (int h = 0; h < 2; h++) {
            __m256 t = _mm256_add_ps(rq[2 * r + h], zp);
            q[h] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(t, vlo), vhi));
        }
        /* in range already: the packs saturate nothing */
        __m256i p16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xD8);
        __m128i a = _mm256_castsi256_si128(p16), b = _mm256_extracti128_si256(p16, 1);
        __m128i p8 = sgn ? _mm_packs_epi16(a, b) : _mm_packus_epi16(a, b);
        uint8_t *y = (uint8_t *)e->y + (i0 + r) * e->ldy + j;
        if (w == 16) {
            _mm_storeu_si128((__m128i *)y, p8);
        } else if (w % 4 == 0) { /* whole words: no library call */
            _mm_maskstore_epi32((int *)(void *)y, words4(w), p8);
        } else {
            uint8_t t[16];
            _mm_storeu_si128((__m128i *)t, p8);
            memcpy(y, t, (size_t)w);
        }
    }
}

/* Rows i0 .. i0 + mr, columns j .. j + w (w <= 16) from the sums of x * w (acc[r][h]: columns
 * j + 8 h ..): epi_one's arithmetic, each step over the whole tile. */
AVX static void epi_tile(const struct epi_ctx *c, int64_t i0, int mr, int64_t j, int w,
                         __m256i (*acc)[2]) {
    const struct qp_i8g_epi *e = c->e;
    if (c->zp) {
        __m256i z = _mm256_set1_epi32(c->zp);
        __m256i z0 = _mm256_mullo_epi32(z, _mm256_loadu_si256((const __m256i *)(c->colsum + j)));
        __m256i z1 =
            _mm256_mullo_epi32(z, _mm256_loadu_si256((const __m256i *)(c->colsum + j + 8)));
        for (int r = 0; r < mr; r++) {
            acc[r][0] = _mm256_sub_epi32(acc[r][0], z0);
            acc[r][1] = _mm256_sub_epi32(acc[r][1], z1);
        }
    }
    if (!e->io) {
        for (int r = 0; r < mr; r++) {
            int32_t t[16];
            _mm256_storeu_si256((__m256i *)t, acc[r][0]);
            _mm256_storeu_si256((__m256i *)(t + 8), acc[r][1]);
            memcpy((int32_t *)e->y + (i0 + r) * e->ldy + j, t, (size_t)w * sizeof *t);
        }
        return;
    }
    __m256 osc0 = _mm256_loadu_ps(e->osc + j), osc1 = _mm256_loadu_ps(e->osc + j + 8);
    __m256 b0 = _mm256_loadu_ps(e->bias + j), b1 = _mm256_loadu_ps(e->bias + j + 8);
    __m256 v[2 * MR], rv[2 * MR];
    for (int r = 0; r < mr; r++) {
        v[2 * r] = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc[r][0]), osc0), b0);
        v[2 * r + 1] = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc[r][1]), osc1), b1);
    }
    if (e->res)
        for (int r = 0; r < mr; r++)
            res_load(e, (i0 + r) * e->ldr + j, w, rv + 2 * r);
    posts_n(e->io, v, e->res ? rv : NULL, 2 * mr,
            e->ydt == QP_DTYPE_INT8 || e->ydt == QP_DTYPE_UINT8, w);
    if (e->ydt == QP_DTYPE_INT8 || e->ydt == QP_DTYPE_UINT8) {
        store_q8(e, i0, mr, j, w, v);
        return;
    }
    for (int r = 0; r < mr; r++)
        store16_float(e, (i0 + r) * e->ldy + j, v + 2 * r, w);
}

#define ROWS4(X) X(0) X(1) X(2) X(3)

/* Rows [0, mr) of A (a, lda apart) times the panel bp over kq quads, every A byte below 128:
 * vpmaddubsw (pair sums within +-32512: no saturation), vpmaddwd with ones into int32. The
 * accumulators are named variables so that they stay in registers. nh: the panel's 8-column
 * halves to compute (1 where the panel holds 8 columns or fewer, as the last of n = 24 does:
 * the other half's products would be of zero weights; its sums stay 0). */
AVX_INLINE void micro_u8(int mr, int nh, int64_t kq, const uint8_t *a, int64_t lda,
                         const int8_t *bp, __m256i acc[MR][2]) {
    const __m256i one = _mm256_set1_epi16(1);
#define U8_DECL(r) __m256i c##r##0 = _mm256_setzero_si256(), c##r##1 = _mm256_setzero_si256();
    ROWS4(U8_DECL)
#pragma GCC unroll 4
    for (int64_t q = 0; q < kq; q++) {
        __m256i b0 = _mm256_loadu_si256((const __m256i *)(bp + q * QB));
        __m256i b1 = nh > 1 ? _mm256_loadu_si256((const __m256i *)(bp + q * QB + 32)) : b0;
#define U8_STEP(r)                                                                                 \
    if (mr > r) {                                                                                  \
        __m256i av = _mm256_set1_epi32(load4(a + r * lda + 4 * q));                                \
        c##r##0 = _mm256_add_epi32(c##r##0, _mm256_madd_epi16(_mm256_maddubs_epi16(av, b0), one)); \
        if (nh > 1)                                                                                \
            c##r##1 =                                                                              \
                _mm256_add_epi32(c##r##1, _mm256_madd_epi16(_mm256_maddubs_epi16(av, b1), one));   \
    }
        ROWS4(U8_STEP)
    }
#define U8_OUT(r)                                                                                  \
    acc[r][0] = c##r##0;                                                                           \
    acc[r][1] = c##r##1;
    ROWS4(U8_OUT)
#undef U8_STEP
}

/* The same for int8 A, as vpmaddubsw of an unsigned magnitude and a signed factor whose
 * products are x * w, pair sums within +-32512:
 *   by_x 0, A without -128: |w| (0..128) and sign(w) * x (vpsignb, -127..127);
 *   by_x 1, no weight -128: |x| and sign(x) * w. Sources with -128 (activations that saturate
 *   at the bottom of their range, as entropy calibration makes them) then avoid the int16
 *   kernel, half the speed. */
AVX_INLINE void micro_sgn(int by_x, int mr, int nh, int64_t kq, const uint8_t *a, int64_t lda,
                          const int8_t *bp, __m256i acc[MR][2]) {
    const __m256i one = _mm256_set1_epi16(1);
    ROWS4(U8_DECL)
#pragma GCC unroll 2
    for (int64_t q = 0; q < kq; q++) {
        __m256i b0 = _mm256_loadu_si256((const __m256i *)(bp + q * QB));
        __m256i b1 = nh > 1 ? _mm256_loadu_si256((const __m256i *)(bp + q * QB + 32)) : b0;
        __m256i m0 = by_x ? b0 : _mm256_abs_epi8(b0),
                m1 = by_x || nh < 2 ? b1 : _mm256_abs_epi8(b1);
#define SG_PROD(w, m) /* w: the weights, m: their magnitudes (by_x 0) */                           \
    (by_x ? _mm256_maddubs_epi16(ax, _mm256_sign_epi8(w, av))                                      \
          : _mm256_maddubs_epi16(m, _mm256_sign_epi8(av, w)))
#define SG_STEP(r)                                                                                 \
    if (mr > r) {                                                                                  \
        __m256i av = _mm256_set1_epi32(load4(a + r * lda + 4 * q));                                \
        __m256i ax = by_x ? _mm256_abs_epi8(av) : av;                                              \
        c##r##0 = _mm256_add_epi32(c##r##0, _mm256_madd_epi16(SG_PROD(b0, m0), one));              \
        if (nh > 1) c##r##1 = _mm256_add_epi32(c##r##1, _mm256_madd_epi16(SG_PROD(b1, m1), one));  \
    }
        ROWS4(SG_STEP)
    }
    ROWS4(U8_OUT)
#undef SG_STEP
#undef SG_PROD
}
#define MICRO_SGN(...)  micro_sgn(0, __VA_ARGS__)
#define MICRO_ABSX(...) micro_sgn(1, __VA_ARGS__)

AVX_INLINE __m256i ext16(int is_signed, __m128i v) {
    return is_signed ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v);
}

/* Rows [0, mr) (mr <= 2) for any A: bytes and weights widened to int16, vpmaddwd. Each
 * accumulator holds two partial sums per column (quads' first and second pairs), added at the
 * end. */
AVX_INLINE void micro_s16(int is_signed, int mr, int64_t kq, const uint8_t *a, int64_t lda,
                          const int8_t *bp, __m256i acc[2][2]) {
    __m256i d00 = _mm256_setzero_si256(), d01 = d00, d02 = d00, d03 = d00;
    __m256i d10 = d00, d11 = d00, d12 = d00, d13 = d00;
    for (int64_t q = 0; q < kq; q++) {
        const int8_t *bq = bp + q * QB;
        __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)bq));
        __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(bq + 16)));
        __m256i w2 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(bq + 32)));
        __m256i w3 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(bq + 48)));
        __m256i a0 = ext16(is_signed, _mm_set1_epi32(load4(a + 4 * q)));
        d00 = _mm256_add_epi32(d00, _mm256_madd_epi16(a0, w0));
        d01 = _mm256_add_epi32(d01, _mm256_madd_epi16(a0, w1));
        d02 = _mm256_add_epi32(d02, _mm256_madd_epi16(a0, w2));
        d03 = _mm256_add_epi32(d03, _mm256_madd_epi16(a0, w3));
        if (mr > 1) {
            __m256i a1 = ext16(is_signed, _mm_set1_epi32(load4(a + lda + 4 * q)));
            d10 = _mm256_add_epi32(d10, _mm256_madd_epi16(a1, w0));
            d11 = _mm256_add_epi32(d11, _mm256_madd_epi16(a1, w1));
            d12 = _mm256_add_epi32(d12, _mm256_madd_epi16(a1, w2));
            d13 = _mm256_add_epi32(d13, _mm256_madd_epi16(a1, w3));
        }
    }
    /* hadd gives columns (0 1 4 5 | 2 3 6 7); the permute puts them in order */
    acc[0][0] = _mm256_permute4x64_epi64(_mm256_hadd_epi32(d00, d01), 0xD8);
    acc[0][1] = _mm256_permute4x64_epi64(_mm256_hadd_epi32(d02, d03), 0xD8);
    acc[1][0] = _mm256_permute4x64_epi64(_mm256_hadd_epi32(d10, d11), 0xD8);
    acc[1][1] = _mm256_permute4x64_epi64(_mm256_hadd_epi32(d12, d13), 0xD8);
}

/* The micro-kernel MICRO with mr (1..MR) and nh (1, 2) as constants, each case compiled on its
 * own. */
#define SUMS_CASE(MICRO, R, H)                                                                     \
    case R * 2 + H - 1:                                                                            \
        MICRO(R, H, kq, a, lda, bp, acc);                                                          \
        break;
#define SUMS_CASES(MICRO)                                                                          \
    switch (mr * 2 + nh - 1) {                                                                     \
        SUMS_CASE(MICRO, 4, 2)                                                                     \
        SUMS_CASE(MICRO, 4, 1)                                                                     \
        SUMS_CASE(MICRO, 3, 2)                                                                     \
        SUMS_CASE(MICRO, 3, 1)                                                                     \
        SUMS_CASE(MICRO, 2, 2)                                                                     \
        SUMS_CASE(MICRO, 2, 1)                                                                     \
        SUMS_CASE(MICRO, 1, 2)                                                                     \
    default:                                                                                       \
        MICRO(1, 1, kq, a, lda, bp, acc);                                                          \
        break;                                                                                     \
    }

AVX static void sums_u8(int mr, int nh, int64_t kq, const uint8_t *a, int64_t lda, const int8_t *bp,
                        __m256i acc[MR][2]) {
    SUMS_CASES(micro_u8);
}

AVX static void sums_sgn(int mr, int nh, int64_t kq, const uint8_t *a, int64_t lda,
                         const int8_t *bp, __m256i acc[MR][2]) {
    SUMS_CASES(MICRO_SGN);
}

AVX static void sums_absx(int mr, int nh, int64_t kq, const uint8_t *a, int64_t lda,
                          const int8_t *bp, __m256i acc[MR][2]) {
    SUMS_CASES(MICRO_ABSX);
}

AVX static void sums_s16(int is_signed, int mr, int64_t kq, const uint8_t *a, int64_t lda,
                         const int8_t *bp, __m256i acc[MR][2]) {
    for (int r = 0; r < mr; r += 2) {
        int two = mr - r >= 2;
        const uint8_t *ar = a + r * lda;
        if (is_signed && two)
            micro_s16(1, 2, kq, ar, lda, bp, acc + r);
        else if (is_signed)
            micro_s16(1, 1, kq, ar, lda, bp, acc + r);
        else if (two)
            micro_s16(0, 2, kq, ar, lda, bp, acc + r);
        else
            micro_s16(0, 1, kq, ar, lda, bp, acc + r);
    }
}

AVX static void tile_avx2(const struct job *jb, int64_t i0, int mr, int64_t p) {
    __m256i acc[MR + 1][2]; /* micro_s16 writes pairs of rows */
    const uint8_t *a = (const uint8_t *)jb->a->data + (i0 - jb->a_row0) * jb->a->lda;
    const int8_t *bp = jb->b->panels + p * jb->kq * QB;
    int w = (int)(jb->b->n - p * NR < NR ? jb->b->n - p * NR : NR), nh = w > 8 ? 2 : 1;
    if (jb->a->range & QP_I8G_BELOW_128)
        sums_u8(mr, nh, jb->kq, a, jb->a->lda, bp, acc);
    else if (jb->a->is_signed && (jb->a->range & QP_I8G_NO_MIN))
        sums_sgn(mr, nh, jb->kq, a, jb->a->lda, bp, acc);
    else if (jb->a->is_signed && jb->b->no_min)
        sums_absx(mr, nh, jb->kq, a, jb->a->lda, bp, acc);
    else
        sums_s16(jb->a->is_signed, mr, jb->kq, a, jb->a->lda, bp, acc);
    epi_tile(&jb->ctx, i0, mr, p * NR, w, acc);
}

AVX static unsigned range_avx2(const uint8_t *x, size_t n) {
    const __m256i min = _mm256_set1_epi8((char)0x80);
    __m256i top = _mm256_setzero_si256(), eq = top;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(x + i));
        top = _mm256_or_si256(top, v);
        eq = _mm256_or_si256(eq, _mm256_cmpeq_epi8(v, min));
    }
    int any_top = _mm256_movemask_epi8(top), any_min = _mm256_movemask_epi8(eq);
    for (; i < n; i++) {
        any_top |= x[i] & 0x80;
        any_min |= x[i] == 0x80;
    }
    return (any_top ? 0u : QP_I8G_BELOW_128) | (any_min ? 0u : QP_I8G_NO_MIN);
}

/* The depthwise sums of nq (1 or MR) consecutive output pixels, rows row .. row + nq - 1, in
 * float multiply-adds (exact: qp_i8g_dw_pack): pixel q reads px[k] + q * step (nq > 1 only
 * where every kernel position of the nq pixels lies inside the image along the last axis; the
 * padding row, zrow, stays zrow). Each position's 16 weights are loaded once for the nq pixels,
 * whose 2 nq sums are independent chains; one epilogue tile of nq rows stores them. Inlined
 * with nq a constant, so each case compiles on its own. */
AVX_INLINE void dw_rows(const struct qp_conv_state *g, const float *const *px, const float *zrow,
                        int64_t step, const float *wf, const struct epi_ctx *ctx, int64_t row,
                        const int nq) {
    int64_t ks = g->k_sz;
    for (int64_t c0 = 0; c0 < g->c; c0 += NR) {
        int64_t left = g->c - c0;
        __m256 lo[MR], hi[MR];
        for (int q = 0; q < nq; q++)
            lo[q] = hi[q] = _mm256_setzero_ps();
        const float *wb = wf + c0 * ks;
        for (int64_t k = 0; k < ks; k++) {
            const float *p = px[k] + c0;
            int64_t s = px[k] == zrow ? 0 : step;
            __m256 w0 = _mm256_loadu_ps(wb + k * NR), w1 = _mm256_loadu_ps(wb + k * NR + 8);
            for (int q = 0; q < nq; q++) {
                lo[q] = _mm256_fmadd_ps(_mm256_loadu_ps(p + q * s), w0, lo[q]);
                hi[q] = _mm256_fmadd_ps(_mm256_loadu_ps(p + q * s + 8), w1, hi[q]);
            }
        }
        __m256i a[MR][2];
        for (int q = 0; q < nq; q++) {
            a[q][0] = _mm256_cvtps_epi32(lo[q]);
            a[q][1] = _mm256_cvtps_epi32(hi[q]);
        }
        epi_tile(ctx, row, nq, c0, left < NR ? (int)left : NR, a);
    }
}

AVX static void dw_row_avx2(const struct qp_conv_state *g, const float *const *px,
                            const float *zrow, const float *wf, const struct epi_ctx *ctx,
                            int64_t row) {
    dw_rows(g, px, zrow, 0, wf, ctx, row, 1);
}

AVX static void dw_rows4_avx2(const struct qp_conv_state *g, const float *const *px,
                              const float *zrow, int64_t step, const float *wf,
                              const struct epi_ctx *ctx, int64_t row) {
    dw_rows(g, px, zrow, step, wf, ctx, row, MR);
}

/* 8 bytes at p (int8 or uint8) minus zp, as floats. */
AVX_INLINE __m256 dw_cvt8(const uint8_t *p, int is_signed, __m256i zp) {
    __m128i b = _mm_loadl_epi64((const __m128i *)p);
    __m256i v = is_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(v, zp));
}

/* Pixels [p0, p1) of the source into float rows of cp (qp_i8g_dw_scratch_bytes). */
AVX static void dw_convert_avx2(const uint8_t *x, int64_t c, int64_t cp, int is_signed, int32_t zp,
                                int64_t p0, int64_t p1, float *xf) {
    __m256i z = _mm256_set1_epi32(zp);
    for (int64_t p = p0; p < p1; p++) {
        const uint8_t *s = x + p * c;
        float *d = xf + p * cp;
        int64_t ch = 0;
        for (; ch + 8 <= c; ch += 8)
            _mm256_storeu_ps(d + ch, dw_cvt8(s + ch, is_signed, z));
        for (; ch < c; ch++)
            d[ch] = byte_minus_zp(s[ch], is_signed, zp);
        for (; ch < cp; ch++)
            d[ch] = 0.0f;
    }
}

#else
#define HAVE_AVX2 0
#endif

/* ---- drivers ------------------------------------------------------------------------------ */

static int use_avx2(enum qp_isa isa) {
    return HAVE_AVX2 && isa >= QP_ISA_AVX2;
}

static void item(enum qp_isa isa, const struct job *jb, int64_t r0, int64_t r1, int64_t p0,
                 int64_t p1) {
    for (int64_t p = p0; p < p1; p++)
        for (int64_t i = r0; i < r1; i += MR) {
            int mr = (int)(r1 - i < MR ? r1 - i : MR);
#if HAVE_AVX2
            if (use_avx2(isa)) {
                tile_avx2(jb, i, mr, p);
                continue;
            }
#endif
            tile_c(jb, i, mr, p);
        }
}

/* Threads for an m x n x k product: one below 2^18 multiply-adds (a parallel region costs more). */
static int gemm_threads(int64_t m, int64_t n, int64_t k, int n_threads) {
    return (double)m * (double)n * (double)k < 262144.0 ? 1 : n_threads;
}

void qp_i8g_gemm(enum qp_isa isa, int64_t m, const struct qp_i8g_a *a, const struct qp_i8g_b *b,
                 const struct qp_i8g_epi *e, int n_threads) {
    if (m <= 0 || b->n <= 0) return;
    struct job jb = {a, b, {e, b->colsum, a->zp}, m, kquads(b->k), qp_i8g_npad(b->n) / NR, 0};
    /* Smaller items when there would be too few for the threads (ResNet's 7x7 layers). */
    int64_t mc = MC, pg = PG;
    int nt = gemm_threads(m, b->n, b->k, n_threads);
    while (((m + mc - 1) / mc) * ((jb.np + pg - 1) / pg) < 4 * nt && (pg > 1 || mc > MR)) {
        if (pg > 1)
            pg /= 2;
        else
            mc /= 2;
    }
    /* Row blocks of equal size (a multiple of MR), so that the items are alike. */
    int64_t nrb = (m + mc - 1) / mc;
    mc = ((m + nrb - 1) / nrb + MR - 1) / MR * MR;
    nrb = (m + mc - 1) / mc;
    int64_t npg = (jb.np + pg - 1) / pg;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int64_t t = 0; t < nrb * npg; t++) {
        int64_t r0 = t / npg * mc, p0 = t % npg * pg;
        int64_t r1 = r0 + mc < m ? r0 + mc : m, p1 = p0 + pg < jb.np ? p0 + pg : jb.np;
        item(isa, &jb, r0, r1, p0, p1);
    }
}

#define SCAN_PIECE 65536

unsigned qp_i8g_range(enum qp_isa isa, const void *x, size_t n, int n_threads) {
    const uint8_t *b = x;
    int64_t pieces = (int64_t)((n + SCAN_PIECE - 1) / SCAN_PIECE);
    unsigned all = QP_I8G_BELOW_128 | QP_I8G_NO_MIN;
    int nt = n < 4 * SCAN_PIECE ? 1 : n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) reduction(& : all)
    for (int64_t k = 0; k < pieces; k++) {
        size_t at = (size_t)k * SCAN_PIECE, len = n - at < SCAN_PIECE ? n - at : SCAN_PIECE;
#if HAVE_AVX2
        if (use_avx2(isa)) {
            all &= range_avx2(b + at, len);
            continue;
        }
#endif
        uint8_t top = 0, min = 0;
        for (size_t i = 0; i < len; i++) {
            top |= b[at + i];
            min |= b[at + i] == 0x80;
        }
        all &= (top & 0x80 ? 0u : QP_I8G_BELOW_128) | (min ? 0u : QP_I8G_NO_MIN);
    }
    return all;
}

/* n bytes from s to d (apart), as a few fixed-size moves: im2col's pieces are a pixel's channels
 * (3 for an RGB image), too short for a memcpy call to pay. */
static inline void copy_short(uint8_t *d, const uint8_t *s, int64_t n) {
    if (n >= 16) {
        int64_t i = 0;
        for (; i + 16 <= n; i += 16)
            memcpy(d + i, s + i, 16);
        if (i < n) memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 8) {
        memcpy(d, s, 8);
        memcpy(d + n - 8, s + n - 8, 8);
    } else if (n >= 4) {
        memcpy(d, s, 4);
        memcpy(d + n - 4, s + n - 4, 4);
    } else {
        for (int64_t i = 0; i < n; i++)
            d[i] = s[i];
    }
}

static inline void fill_short(uint8_t *d, uint8_t v, int64_t n) {
    if (n > 64) {
        memset(d, v, (size_t)n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        d[i] = v;
}

/* Output pixel coordinates: image b, spatial o0, o1, o2 (walked in row order). */
struct pix_at {
    int64_t b, o0, o1, o2;
};

static struct pix_at pix_at_row(const struct qp_conv_state *g, int64_t row) {
    int64_t P = g->out_sz, o = row % P;
    struct pix_at a = {row / P, o / (g->out3[1] * g->out3[2]), o / g->out3[2] % g->out3[1],
                       o % g->out3[2]};
    return a;
}

static void pix_at_next(const struct qp_conv_state *g, struct pix_at *a) {
    if (++a->o2 < g->out3[2]) return;
    a->o2 = 0;
    if (++a->o1 < g->out3[1]) return;
    a->o1 = 0;
    if (++a->o0 < g->out3[0]) return;
    a->o0 = 0;
    a->b++;
}

/* One im2col row: output pixel a (its coordinates walked by the caller: three divisions per
 * row took a third of the row's time where pixels have few channels, as an RGB image's). */
static void im2col_row(const struct qp_conv_state *g, const uint8_t *x, uint8_t fill, uint8_t *dst,
                       const struct pix_at *a, int64_t ld) {
    int64_t C = g->c, o0 = a->o0, o1 = a->o1, o2 = a->o2;
    const uint8_t *xb = x + a->b * g->in_sz * C;
    uint8_t *d = dst;
    int64_t i2a = o2 * g->s3[2] - g->p3[2], run = g->k3[2] * C;
    int whole = g->d3[2] == 1 && i2a >= 0 && i2a + g->k3[2] <= g->in3[2];
    for (int64_t k0 = 0; k0 < g->k3[0]; k0++) {
        int64_t i0 = o0 * g->s3[0] - g->p3[0] + k0 * g->d3[0];
        for (int64_t k1 = 0; k1 < g->k3[1]; k1++) {
            int64_t i1 = o1 * g->s3[1] - g->p3[1] + k1 * g->d3[1];
            int in01 = i0 >= 0 && i0 < g->in3[0] && i1 >= 0 && i1 < g->in3[1];
            const uint8_t *xr = in01 ? xb + (i0 * g->in3[1] + i1) * g->in3[2] * C : xb;
            if (in01 && whole) {
                copy_short(d, xr + i2a * C, run);
                d += run;
                continue;
            }
            for (int64_t k2 = 0; k2 < g->k3[2]; k2++, d += C) {
                int64_t i2 = i2a + k2 * g->d3[2];
                if (in01 && i2 >= 0 && i2 < g->in3[2])
                    copy_short(d, xr + i2 * C, C);
                else
                    fill_short(d, fill, C);
            }
        }
    }
    fill_short(d, 0, ld - (d - dst));
}

void qp_i8g_im2col(const struct qp_conv_state *g, const void *x, uint8_t fill, void *col,
                   int64_t ld, int n_threads) {
    int64_t rows = g->n * g->out_sz;
    int nt = rows * ld < 65536 ? 1 : n_threads;
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        qp_ksplit(rows, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        struct pix_at a = pix_at_row(g, lo);
        for (int64_t r = lo; r < hi; r++, pix_at_next(g, &a))
            im2col_row(g, x, fill, (uint8_t *)col + r * ld, &a, ld);
    }
}

/* The packed B (bytes) up to which the chunked convolution GEMM pays: it runs every panel on
 * each chunk, so B is read once per chunk and must stay in the core's cache (about a 256 KiB
 * half of a Zen 3 L2); above, the plain GEMM's blocking (MC rows x PG panels) keeps B's
 * panels in cache instead. */
#define CONV_GEMM_MAX_B (256 << 10)

/* Rows of im2col a thread writes and multiplies at a time: about 128 KiB of them, so that the
 * panels' passes over them read the cache, not memory (at least 4 tiles' worth). */
static int64_t chunk_rows(int64_t ld) {
    int64_t r = ((int64_t)128 << 10) / (ld > 0 ? ld : 1);
    r = r < 4 * MR ? 4 * MR : r > 1024 ? 1024 : r;
    return r / MR * MR;
}

int qp_i8g_conv_gemm_pays(int64_t k, int64_t n) {
    return (double)qp_i8g_npad(n) * (double)kquads(k) * 4.0 <= (double)CONV_GEMM_MAX_B;
}

size_t qp_i8g_conv_gemm_scratch(const struct qp_conv_state *g, int64_t ld, int n_threads) {
    int64_t rows = g->n * g->out_sz, ch = chunk_rows(ld);
    int64_t per = rows < ch ? rows : ch, n_chunks = per > 0 ? (rows + per - 1) / per : 0;
    int64_t nt = n_threads < 1 ? 1 : n_threads < n_chunks ? n_threads : n_chunks;
    return (size_t)nt * (size_t)per * (size_t)ld;
}

void qp_i8g_conv_gemm(enum qp_isa isa, const struct qp_conv_state *g, const void *x, uint8_t fill,
                      int64_t ld, void *col, const struct qp_i8g_a *a, const struct qp_i8g_b *b,
                      const struct qp_i8g_epi *e, int n_threads) {
    int64_t m = g->n * g->out_sz, ch = chunk_rows(ld);
    if (m <= 0 || b->n <= 0) return;
    int64_t per = m < ch ? m : ch, n_chunks = (m + per - 1) / per;
    int nt = gemm_threads(m, b->n, b->k, n_threads);
    if (nt > n_chunks) nt = (int)n_chunks;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int64_t c = 0; c < n_chunks; c++) {
        int64_t r0 = c * per, r1 = r0 + per < m ? r0 + per : m;
        uint8_t *mine = (uint8_t *)col + (size_t)omp_get_thread_num() * (size_t)per * (size_t)ld;
        struct pix_at at = pix_at_row(g, r0);
        for (int64_t r = r0; r < r1; r++, pix_at_next(g, &at))
            im2col_row(g, x, fill, mine + (r - r0) * ld, &at, ld);
        struct qp_i8g_a ca = *a;
        ca.data = mine;
        ca.lda = ld;
        struct job jb = {&ca, b, {e, b->colsum, a->zp}, m, kquads(b->k), qp_i8g_npad(b->n) / NR,
                         r0};
        item(isa, &jb, r0, r1, 0, jb.np);
    }
}

/* The source rows (floats, cp apart) of output pixel a's kernel positions, the zero row for
 * those in the padding. */
static void dw_pixels(const struct qp_conv_state *g, const float *xf, int64_t cp, const float *zrow,
                      const struct pix_at *a, const float **px) {
    int64_t o0 = a->o0, o1 = a->o1, o2 = a->o2;
    const float *xb = xf + a->b * g->in_sz * cp;
    int64_t k = 0;
    for (int64_t k0 = 0; k0 < g->k3[0]; k0++) {
        int64_t i0 = o0 * g->s3[0] - g->p3[0] + k0 * g->d3[0];
        for (int64_t k1 = 0; k1 < g->k3[1]; k1++) {
            int64_t i1 = o1 * g->s3[1] - g->p3[1] + k1 * g->d3[1];
            for (int64_t k2 = 0; k2 < g->k3[2]; k2++, k++) {
                int64_t i2 = o2 * g->s3[2] - g->p3[2] + k2 * g->d3[2];
                int in = i0 >= 0 && i0 < g->in3[0] && i1 >= 0 && i1 < g->in3[1] && i2 >= 0 &&
                         i2 < g->in3[2];
                px[k] = in ? xb + ((i0 * g->in3[1] + i1) * g->in3[2] + i2) * cp : zrow;
            }
        }
    }
}

/* 1 when output pixels a .. a + MR - 1 lie on one line of the last spatial axis and every
 * kernel position of each is inside the image along that axis (dw_rows4_avx2's condition). */
static int dw_inside4(const struct qp_conv_state *g, const struct pix_at *a) {
    int64_t first = a->o2 * g->s3[2] - g->p3[2];
    int64_t last = (a->o2 + MR - 1) * g->s3[2] - g->p3[2] + (g->k3[2] - 1) * g->d3[2];
    return a->o2 + MR <= g->out3[2] && first >= 0 && last < g->in3[2];
}

/* The source into the scratch's float rows (and its zero row), threads over pixels. */
static void dw_convert(enum qp_isa isa, const struct qp_conv_state *g, const uint8_t *x,
                       int is_signed, int32_t zp, float *xf, int n_threads) {
    int64_t cp = qp_i8g_npad(g->c), pixels = g->n * g->in_sz;
    memset(xf + pixels * cp, 0, (size_t)cp * sizeof *xf);
    int nt = pixels * g->c < 65536 ? 1 : n_threads;
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        qp_ksplit(pixels, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
#if HAVE_AVX2
        if (use_avx2(isa)) {
            dw_convert_avx2(x, g->c, cp, is_signed, zp, lo, hi, xf);
        } else
#endif
        {
            (void)isa;
            for (int64_t p = lo; p < hi; p++)
                for (int64_t ch = 0; ch < cp; ch++)
                    xf[p * cp + ch] =
                        ch < g->c ? byte_minus_zp(x[p * g->c + ch], is_signed, zp) : 0.0f;
        }
    }
}

void qp_i8g_depthwise(enum qp_isa isa, const struct qp_conv_state *g, const void *x, int is_signed,
                      int32_t zp, const void *packed, void *scratch, const struct qp_i8g_epi *e,
                      int n_threads) {
    if (g->k_sz > DW_MAX_K) return; /* qp_i8g_dw_pack_bytes refused it */
    int64_t cp = qp_i8g_npad(g->c), rows = g->n * g->out_sz;
    float *xf = scratch;
    const float *zrow = xf + g->n * g->in_sz * cp, *wf = packed;
    dw_convert(isa, g, x, is_signed, zp, xf, n_threads);
    struct epi_ctx ctx = {e, NULL, 0}; /* the zero point is out of the float source */
    int nt = rows * g->c * g->k_sz < 65536 ? 1 : n_threads;
    /* Each thread a run of rows, its coordinates divided out once and then walked. */
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        qp_ksplit(rows, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        struct pix_at a = pix_at_row(g, lo);
        for (int64_t row = lo; row < hi; row++, pix_at_next(g, &a)) {
            const float *px[DW_MAX_K];
            dw_pixels(g, xf, cp, zrow, &a, px);
#if HAVE_AVX2
            if (use_avx2(isa) && row + MR <= hi && dw_inside4(g, &a)) {
                dw_rows4_avx2(g, px, zrow, g->s3[2] * cp, wf, &ctx, row);
                for (int q = 1; q < MR; q++, row++)
                    pix_at_next(g, &a);
                continue;
            }
            if (use_avx2(isa)) {
                dw_row_avx2(g, px, zrow, wf, &ctx, row);
                continue;
            }
#endif
            dw_row_c(g, px, wf, &ctx, row);
        }
    }
}
