/*
 * winograd.h: Winograd F(2x2, 3x3), plain C and AVX2+FMA (chosen at run time, as vecmath.c).
 *
 * The tiles of the batch are cut into groups of wp->tg; a work item is a group and a run of
 * 16-channel output panels, and a thread doing one transforms the group's input into its own V
 * buffer (unless it holds that group already), runs the 16 GEMMs for its panels into its own M
 * buffer (each element summing all input channels in order) and applies the output transform,
 * bias and post-operations. Items are shared out dynamically with no barrier; no element's
 * computation depends on which thread does it or on how many there are.
 */
#include "kernels/winograd.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/vecmath.h"

/* Tiles per group: at most WG_TILES (a group's GEMMs read each transformed weight once per
 * group, 2 x 60 flops per 4 bytes: the weights stream from L3 or memory without limiting), and
 * fewer when the group's V buffer would pass WG_V_BYTES, half the 1 MB L2 of a core here: the
 * GEMMs read V again for every run of output channels (measured at 256 channels on 14x14: two
 * groups of 25 tiles about 10% faster than one of 49). */
#define WG_TILES     60
#define WG_MIN_TILES 12
#define WG_V_BYTES   (512 * 1024)

/* Largest channel count taken: keeps every size below computed in int64_t far from overflow. */
#define WG_MAX_CHANNELS 8192
/* Threads a run uses at most (each has its own V and M buffers in the scratch). */
#define WG_MAX_THREADS 256

int qp_wino_disabled(void) {
    const char *e = getenv("QP_NO_WINOGRAD");
    return e && *e && strcmp(e, "0") != 0;
}

int qp_wino_cpu_rule(enum qp_isa isa, int amx) {
    return isa != QP_ISA_AVX512 || !amx;
}

int qp_wino_cpu_prefers(void) {
    const char *e = getenv("QP_WINOGRAD");
    if (e && strcmp(e, "1") == 0) return 1;
    return qp_wino_cpu_rule(qp_kernel_isa(), qp_isa_has_amx());
}

int qp_wino_takes(const struct qp_conv_state *g) {
    const struct qp_window *w = &g->w;
    if (w->nsp != 2 || g->group != 1 || g->n < 1) return 0;
    for (int i = 0; i < 2; i++)
        if (w->k[i] != 3 || w->stride[i] != 1 || w->dil[i] != 1 || w->pad_begin[i] < 0 ||
            w->pad_begin[i] > 1 || w->pad_end[i] < 0 || w->pad_end[i] > 1 || w->out[i] < 1)
            return 0;
    if (g->c > WG_MAX_CHANNELS || g->m > WG_MAX_CHANNELS) return 0;
    /* The transformed weights (16 c m floats, m rounded up to 16) must be addressable. */
    if ((double)g->c * (double)(g->m + 15) * 64.0 > (double)(SIZE_MAX / 4)) return 0;
    /* Where it clearly beats oneDNN here (docs/engine.md, "Winograd 3x3 convolutions"): the
     * transforms cost per tile in proportion to c + m, the GEMMs to c * m, and at 32 channels
     * the two were within the noise of each other. */
    return g->c >= 64 && g->m >= 64 && g->c % 8 == 0 && g->m % 8 == 0;
}

void qp_wino_plan(const struct qp_conv_state *g, int max_threads, struct qp_wino *wp) {
    memset(wp, 0, sizeof *wp);
    wp->max_threads = max_threads < 1                ? 1
                      : max_threads > WG_MAX_THREADS ? WG_MAX_THREADS
                                                     : max_threads;
    wp->n = g->n;
    wp->c = g->c;
    wp->m = g->m;
    wp->h = g->w.in[0];
    wp->w = g->w.in[1];
    wp->ho = g->w.out[0];
    wp->wo = g->w.out[1];
    wp->pt = g->w.pad_begin[0];
    wp->pl = g->w.pad_begin[1];
    wp->cp = (wp->c + 7) / 8 * 8;
    wp->mp = (wp->m + 15) / 16 * 16;
    wp->th = (wp->ho + 1) / 2;
    wp->tw = (wp->wo + 1) / 2;
    wp->n_tiles = wp->n * wp->th * wp->tw;
    int64_t tg = WG_V_BYTES / (16 * wp->cp * (int64_t)sizeof(float));
    tg = tg > WG_TILES ? WG_TILES : tg < WG_MIN_TILES ? WG_MIN_TILES : tg;
    /* Groups of equal size (no short last group running the GEMMs on a few rows). */
    int64_t n_groups = (wp->n_tiles + tg - 1) / tg;
    wp->tg = (wp->n_tiles + n_groups - 1) / n_groups;
    /* A cache line more than the group's rows: the 16 positions of one tile, which the
     * transforms load or store together, then fall in 16 different L1 sets (at tg * cp floats
     * apart, a power of two times 64 bytes, they would compete for the same 8 ways). */
    wp->vs = wp->tg * wp->cp + 16;
    wp->ms = wp->tg * wp->mp + 16;
}

size_t qp_wino_weight_bytes(const struct qp_wino *wp) {
    return (size_t)(16 * wp->mp * wp->c) * sizeof(float);
}

size_t qp_wino_scratch_bytes(const struct qp_wino *wp) {
    return (size_t)(16 * (wp->vs + wp->ms)) * sizeof(float) * (size_t)wp->max_threads;
}

/* u: for each position p (4 a + b of the 4x4 transformed kernel), for each run of 16 output
 * channels, c rows of 16 floats (zero beyond m): the B panels the GEMM streams. */
void qp_wino_weights(const struct qp_wino *wp, const float *w, float *u) {
    static const double gm[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
    int64_t c = wp->c, m = wp->m, nj = wp->mp / 16;
    memset(u, 0, qp_wino_weight_bytes(wp));
    for (int64_t o = 0; o < m; o++)
        for (int64_t i = 0; i < c; i++) {
            const float *g = w + (o * c + i) * 9;
            double t[4][3];
            for (int a = 0; a < 4; a++)
                for (int k = 0; k < 3; k++)
                    t[a][k] = gm[a][0] * g[k] + gm[a][1] * g[3 + k] + gm[a][2] * g[6 + k];
            for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++) {
                    double v = t[a][0] * gm[b][0] + t[a][1] * gm[b][1] + t[a][2] * gm[b][2];
                    int64_t p = 4 * a + b;
                    u[((p * nj + o / 16) * c + i) * 16 + o % 16] = (float)v;
                }
        }
}

/* ---- shared by both paths ------------------------------------------------------------------ */

struct wg_tile {
    int64_t b, y0, x0; /* image; top-left output pixel of the tile */
};

/* Tiles [t0, t0 + cnt), in order (divisions once per run of tiles, not per tile). */
static void tiles_at(const struct qp_wino *wp, int64_t t0, int64_t cnt, struct wg_tile *tl) {
    int64_t per = wp->th * wp->tw, r = t0 % per;
    int64_t b = t0 / per, ty = r / wp->tw, tx = r % wp->tw;
    for (int64_t i = 0; i < cnt; i++) {
        tl[i] = (struct wg_tile){b, ty * 2, tx * 2};
        if (++tx == wp->tw) {
            tx = 0;
            if (++ty == wp->th) {
                ty = 0;
                b++;
            }
        }
    }
}

/* Offset of channel ch in a pixel's elements. */
static inline int64_t chan_off(const struct qp_wino_layout *l, int64_t ch) {
    return l->blk == 1 ? ch * l->sc : ch / l->blk * l->sc + ch % l->blk;
}

static inline int64_t lanes(int64_t total, int64_t blk8) {
    int64_t n = total - blk8 * 8;
    return n < 8 ? n : 8;
}

/* The 4x4 patch of input channels [8 cb, 8 cb + 8) under output tile tl, zero outside the image
 * and beyond c, in any layout. */
static void load_patch(const struct qp_wino *wp, const float *x, const struct qp_wino_layout *l,
                       struct wg_tile tl, int64_t cb, float d[16][8]) {
    int64_t nl = lanes(wp->c, cb);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            float *dd = d[4 * i + j];
            int64_t yy = tl.y0 - wp->pt + i, xx = tl.x0 - wp->pl + j;
            memset(dd, 0, 8 * sizeof(float));
            if (yy < 0 || yy >= wp->h || xx < 0 || xx >= wp->w) continue;
            const float *s = x + tl.b * l->sn + (yy * wp->w + xx) * l->sp;
            for (int64_t k = 0; k < nl; k++) {
                int64_t ch = cb * 8 + k;
                dd[k] = s[chan_off(l, ch)];
            }
        }
}

/* Offset of channel 8 mb of output pixel (y, x) of image b (lane_step: to the next channel). */
static inline int64_t pix_off(const struct qp_wino *wp, const struct qp_wino_layout *l, int64_t b,
                              int64_t mb, int64_t y, int64_t x) {
    return b * l->sn + chan_off(l, mb * 8) + (y * wp->wo + x) * l->sp;
}

static inline int64_t lane_step(const struct qp_wino_layout *l) {
    return l->blk == 1 ? l->sc : 1;
}

/* A blocked output's zeros after the nl channels written at dst (channel 8 mb of a pixel): the
 * rest of the 8-channel group and, after the last group, the rest of the last block (channels
 * [8 ceil(m / 8), m rounded up to blk) that no group covers when blk is 16). */
static inline void pad_zeros(const struct qp_wino *wp, const struct qp_wino_layout *l, float *dst,
                             int64_t mb, int64_t nl) {
    if (l->blk == 1) return;
    int64_t end = 8;
    if (mb == (wp->m + 7) / 8 - 1) end = (wp->m + l->blk - 1) / l->blk * l->blk - mb * 8;
    for (int64_t k = nl; k < end; k++)
        dst[k] = 0.0f;
}

/* ---- plain C --------------------------------------------------------------------------------- */

static void in_tile_c(const struct qp_wino *wp, const float *x, const struct qp_wino_layout *l,
                      struct wg_tile tl, int64_t cb, float *v, int64_t vs) {
    float d[16][8], e[16][8];
    load_patch(wp, x, l, tl, cb, d);
    for (int j = 0; j < 4; j++)
        for (int k = 0; k < 8; k++) {
            float d0 = d[j][k], d1 = d[4 + j][k], d2 = d[8 + j][k], d3 = d[12 + j][k];
            e[j][k] = d0 - d2;
            e[4 + j][k] = d1 + d2;
            e[8 + j][k] = d2 - d1;
            e[12 + j][k] = d1 - d3;
        }
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 8; k++) {
            float e0 = e[4 * i][k], e1 = e[4 * i + 1][k], e2 = e[4 * i + 2][k],
                  e3 = e[4 * i + 3][k];
            v[(4 * i) * vs + k] = e0 - e2;
            v[(4 * i + 1) * vs + k] = e1 + e2;
            v[(4 * i + 2) * vs + k] = e2 - e1;
            v[(4 * i + 3) * vs + k] = e1 - e3;
        }
}

static void gemm_c(int64_t rows, int64_t k, const float *a, int64_t lda, const float *b, float *c,
                   int64_t ldc) {
    for (int64_t r = 0; r < rows; r++) {
        float acc[16] = {0};
        for (int64_t kk = 0; kk < k; kk++) {
            float av = a[r * lda + kk];
            for (int l = 0; l < 16; l++)
                acc[l] = acc[l] + av * b[kk * 16 + l];
        }
        memcpy(c + r * ldc, acc, sizeof acc);
    }
}

/* The output transform of tile t, channels [8 mb, 8 mb + 8), then bias, post-operations and
 * the store. m: the tile's row of position 0 at channel 8 mb; ms: the stride between
 * positions. */
static void out_tile_c(const struct qp_wino *wp, const struct qp_wino_io *io, struct wg_tile tl,
                       int64_t mb, const float *m, int64_t ms) {
    int64_t nl = lanes(wp->m, mb);
    float s[8][8], y[4][8];
    for (int j = 0; j < 4; j++)
        for (int k = 0; k < 8; k++) {
            float m0 = m[j * ms + k], m1 = m[(4 + j) * ms + k], m2 = m[(8 + j) * ms + k],
                  m3 = m[(12 + j) * ms + k];
            s[j][k] = m0 + m1 + m2;
            s[4 + j][k] = m1 - m2 - m3;
        }
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 8; k++) {
            float s0 = s[4 * i][k], s1 = s[4 * i + 1][k], s2 = s[4 * i + 2][k],
                  s3 = s[4 * i + 3][k];
            y[2 * i][k] = s0 + s1 + s2;
            y[2 * i + 1][k] = s1 - s2 - s3;
        }
    for (int q = 0; q < 4; q++) {
        int64_t oy = tl.y0 + q / 2, ox = tl.x0 + q % 2;
        if (oy >= wp->ho || ox >= wp->wo) continue;
        float *dst = io->y + pix_off(wp, &io->ly, tl.b, mb, oy, ox);
        const float *res = io->res ? io->res + pix_off(wp, &io->lres, tl.b, mb, oy, ox) : NULL;
        int64_t ys = lane_step(&io->ly), rs = lane_step(&io->lres);
        for (int64_t k = 0; k < nl; k++) {
            float v = y[q][k] + (io->bias ? io->bias[mb * 8 + k] : 0.0f);
            dst[k * ys] = qp_conv_post_ref(io->n_post, io->post, v, res ? res[k * rs] : 0.0f);
        }
        pad_zeros(wp, &io->ly, dst, mb, nl);
    }
}

/* ---- AVX2 + FMA ------------------------------------------------------------------------------ */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define WG_AVX __attribute__((target("avx2,fma")))

WG_AVX static void in_tile_avx(const struct qp_wino *wp, const float *x,
                               const struct qp_wino_layout *l, struct wg_tile tl, int64_t cb,
                               float *v, int64_t vs) {
    int64_t y0 = tl.y0 - wp->pt, x0 = tl.x0 - wp->pl;
    __m256 d[16];
    if (l->blk != 1 && cb * 8 + 8 <= wp->c) {
        /* 8 channels of a pixel from a multiple of 8 on are adjacent in any channel-blocked or
         * channels-last layout */
        const float *s = x + tl.b * l->sn + chan_off(l, cb * 8);
        int64_t px = l->sp;
        if (y0 >= 0 && x0 >= 0 && y0 + 4 <= wp->h && x0 + 4 <= wp->w) {
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                    d[4 * i + j] = _mm256_loadu_ps(s + ((y0 + i) * wp->w + x0 + j) * px);
        } else {
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) {
                    int64_t yy = y0 + i, xx = x0 + j;
                    d[4 * i + j] = yy >= 0 && yy < wp->h && xx >= 0 && xx < wp->w
                                       ? _mm256_loadu_ps(s + (yy * wp->w + xx) * px)
                                       : _mm256_setzero_ps();
                }
        }
    } else {
        float buf[16][8];
        load_patch(wp, x, l, tl, cb, buf);
        for (int p = 0; p < 16; p++)
            d[p] = _mm256_loadu_ps(buf[p]);
    }
    __m256 e[16];
    for (int j = 0; j < 4; j++) {
        e[j] = _mm256_sub_ps(d[j], d[8 + j]);
        e[4 + j] = _mm256_add_ps(d[4 + j], d[8 + j]);
        e[8 + j] = _mm256_sub_ps(d[8 + j], d[4 + j]);
        e[12 + j] = _mm256_sub_ps(d[4 + j], d[12 + j]);
    }
    for (int i = 0; i < 4; i++) {
        __m256 e0 = e[4 * i], e1 = e[4 * i + 1], e2 = e[4 * i + 2], e3 = e[4 * i + 3];
        _mm256_storeu_ps(v + (4 * i) * vs, _mm256_sub_ps(e0, e2));
        _mm256_storeu_ps(v + (4 * i + 1) * vs, _mm256_add_ps(e1, e2));
        _mm256_storeu_ps(v + (4 * i + 2) * vs, _mm256_sub_ps(e2, e1));
        _mm256_storeu_ps(v + (4 * i + 3) * vs, _mm256_sub_ps(e1, e3));
    }
}

/* The post-operations on 8 channels of one pixel, in qp_conv_post_ref's float operations. */
WG_AVX static __m256 post_avx(__m256 v, const float *res, int64_t rs, int64_t nl, int n_post,
                              const struct qp_conv_post *post) {
    for (int k = 0; k < n_post; k++) {
        const struct qp_conv_post *q = &post[k];
        __m256 al = _mm256_set1_ps(q->alpha), be = _mm256_set1_ps(q->beta);
        switch (q->kind) {
        case QP_CONV_POST_LINEAR:
            v = _mm256_add_ps(_mm256_mul_ps(al, v), be);
            break;
        case QP_CONV_POST_RELU: {
            __m256 pos = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ);
            v = _mm256_blendv_ps(_mm256_mul_ps(al, v), v, pos);
            break;
        }
        case QP_CONV_POST_CLIP:
            v = _mm256_blendv_ps(v, be, _mm256_cmp_ps(v, be, _CMP_GT_OQ));
            v = _mm256_blendv_ps(v, al, _mm256_cmp_ps(v, al, _CMP_LT_OQ));
            break;
        case QP_CONV_POST_HARDSWISH: {
            __m256 h = _mm256_add_ps(v, _mm256_set1_ps(3.0f)), six = _mm256_set1_ps(6.0f);
            h = _mm256_blendv_ps(h, six, _mm256_cmp_ps(h, six, _CMP_GT_OQ));
            h = _mm256_blendv_ps(h, _mm256_setzero_ps(),
                                 _mm256_cmp_ps(h, _mm256_setzero_ps(), _CMP_LT_OQ));
            v = _mm256_div_ps(_mm256_mul_ps(v, h), six);
            break;
        }
        case QP_CONV_POST_SUM: {
            __m256 r;
            if (rs == 1 && nl == 8) {
                r = _mm256_loadu_ps(res);
            } else {
                float buf[8] = {0};
                for (int64_t i = 0; i < nl; i++)
                    buf[i] = res[i * rs];
                r = _mm256_loadu_ps(buf);
            }
            v = _mm256_add_ps(v, r);
            break;
        }
        default: { /* SIGMOID: expf, one lane at a time */
            float buf[8];
            _mm256_storeu_ps(buf, v);
            for (int i = 0; i < 8; i++)
                buf[i] = qp_conv_post_ref(1, q, buf[i], 0.0f);
            v = _mm256_loadu_ps(buf);
            break;
        }
        }
    }
    return v;
}

WG_AVX static void out_tile_avx(const struct qp_wino *wp, const struct qp_wino_io *io,
                                struct wg_tile tl, int64_t mb, const float *m, int64_t ms) {
    int64_t nl = lanes(wp->m, mb);
    __m256 s[8];
    for (int j = 0; j < 4; j++) {
        __m256 m0 = _mm256_loadu_ps(m + j * ms), m1 = _mm256_loadu_ps(m + (4 + j) * ms),
               m2 = _mm256_loadu_ps(m + (8 + j) * ms), m3 = _mm256_loadu_ps(m + (12 + j) * ms);
        s[j] = _mm256_add_ps(_mm256_add_ps(m0, m1), m2);
        s[4 + j] = _mm256_sub_ps(_mm256_sub_ps(m1, m2), m3);
    }
    __m256 y[4];
    for (int i = 0; i < 2; i++) {
        __m256 s0 = s[4 * i], s1 = s[4 * i + 1], s2 = s[4 * i + 2], s3 = s[4 * i + 3];
        y[2 * i] = _mm256_add_ps(_mm256_add_ps(s0, s1), s2);
        y[2 * i + 1] = _mm256_sub_ps(_mm256_sub_ps(s1, s2), s3);
    }
    if (io->bias) {
        float buf[8] = {0};
        memcpy(buf, io->bias + mb * 8, (size_t)nl * sizeof(float));
        __m256 bv = _mm256_loadu_ps(buf);
        for (int q = 0; q < 4; q++)
            y[q] = _mm256_add_ps(y[q], bv);
    }
    int64_t ys = lane_step(&io->ly), rs = lane_step(&io->lres);
    for (int q = 0; q < 4; q++) {
        int64_t oy = tl.y0 + q / 2, ox = tl.x0 + q % 2;
        if (oy >= wp->ho || ox >= wp->wo) continue;
        const float *res = io->res ? io->res + pix_off(wp, &io->lres, tl.b, mb, oy, ox) : NULL;
        __m256 v = io->n_post ? post_avx(y[q], res, rs, nl, io->n_post, io->post) : y[q];
        float *dst = io->y + pix_off(wp, &io->ly, tl.b, mb, oy, ox);
        if (ys == 1 && nl == 8) {
            _mm256_storeu_ps(dst, v);
        } else {
            float buf[8];
            _mm256_storeu_ps(buf, v);
            for (int64_t k = 0; k < nl; k++)
                dst[k * ys] = buf[k];
        }
        pad_zeros(wp, &io->ly, dst, mb, nl);
    }
}

static int have_avx2(void) {
    return qp_vf_have_avx2();
}
#else
static int have_avx2(void) {
    return 0;
}
#endif

/* ---- the run ------------------------------------------------------------------------------- */

/* One work item: tiles [t0, t0 + cnt) and the output channel panels [j0, j1) (16 each). The
 * input transform fills vb unless it holds these tiles already (*have == t0). */
static void run_item(const struct qp_wino *wp, const float *u, const struct qp_wino_io *io, int avx,
                     int64_t t0, int64_t cnt, int64_t j0, int64_t j1, float *vb, float *mbuf,
                     int64_t *have) {
    int64_t ncb = wp->cp / 8, nj = wp->mp / 16;
    int64_t vs = wp->vs, ms = wp->ms;
    struct wg_tile tls[WG_TILES];
    tiles_at(wp, t0, cnt, tls);
    (void)avx;
    if (*have != t0) {
        for (int64_t cb = 0; cb < ncb; cb++)
            for (int64_t tl = 0; tl < cnt; tl++) {
                float *v = vb + tl * wp->cp + cb * 8;
#if defined(__x86_64__) || defined(__i386__)
                if (avx) {
                    in_tile_avx(wp, io->x, &io->lx, tls[tl], cb, v, vs);
                    continue;
                }
#endif
                in_tile_c(wp, io->x, &io->lx, tls[tl], cb, v, vs);
            }
        *have = t0;
    }
    for (int64_t p = 0; p < 16; p++) {
        const float *a = vb + p * vs, *b = u + (p * nj + j0) * wp->c * 16;
        float *c = mbuf + p * ms + j0 * 16;
#if defined(__x86_64__) || defined(__i386__)
        if (avx) {
            qp_gemm_panels(cnt, wp->c, a, wp->cp, b, wp->c * 16, j1 - j0, c, wp->mp);
            continue;
        }
#endif
        for (int64_t j = 0; j < j1 - j0; j++)
            gemm_c(cnt, wp->c, a, wp->cp, b + j * wp->c * 16, c + j * 16, wp->mp);
    }
    int64_t mb1 = j1 * 2 < (wp->m + 7) / 8 ? j1 * 2 : (wp->m + 7) / 8;
    for (int64_t mb = j0 * 2; mb < mb1; mb++)
        for (int64_t tl = 0; tl < cnt; tl++) {
            const float *m = mbuf + tl * wp->mp + mb * 8;
#if defined(__x86_64__) || defined(__i386__)
            if (avx) {
                out_tile_avx(wp, io, tls[tl], mb, m, ms);
                continue;
            }
#endif
            out_tile_c(wp, io, tls[tl], mb, m, ms);
        }
}

void qp_wino_run(const struct qp_wino *wp, const float *u, const struct qp_wino_io *io,
                 void *scratch, int n_threads) {
    int64_t tg = wp->tg, n_groups = (wp->n_tiles + tg - 1) / tg, nj = wp->mp / 16;
    int nt = n_threads < 1 ? 1 : n_threads > wp->max_threads ? wp->max_threads : n_threads;
    /* Work items (tile group, run of output channels), shared out dynamically: no barrier
     * between the phases (each item transforms its own input), and a thread the machine
     * deschedules holds up no other. Few groups are split by output channels, each thread then
     * transforming the group's input once for all its items. */
    int64_t split = (4 * (int64_t)nt + n_groups - 1) / n_groups;
    if (split > nj) split = nj;
    if (split < 1) split = 1;
    int64_t items = n_groups * split;
    if (nt > items) nt = (int)items;
    size_t per = qp_wino_scratch_bytes(wp) / (size_t)wp->max_threads / sizeof(float);
    int avx = !io->portable && have_avx2();
    /* The residual is read only by a SUM post-operation. */
    struct qp_wino_io jo = *io;
    int has_sum = 0;
    for (int k = 0; k < io->n_post; k++)
        has_sum |= io->post[k].kind == QP_CONV_POST_SUM;
    if (!has_sum) jo.res = NULL;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int me = nt > 1 ? omp_get_thread_num() : 0;
        float *vb = (float *)scratch + (size_t)me * per, *mbuf = vb + 16 * wp->vs;
        int64_t have = -1;
#pragma omp for schedule(dynamic, 1) nowait
        for (int64_t it = 0; it < items; it++) {
            int64_t g = it / split, k = it % split, t0 = g * tg;
            int64_t cnt = wp->n_tiles - t0 < tg ? wp->n_tiles - t0 : tg;
            run_item(wp, u, &jo, avx, t0, cnt, k * nj / split, (k + 1) * nj / split, vb, mbuf,
                     &have);
        }
    }
}
