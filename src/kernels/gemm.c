/*
 * gemm.h: packed-B GEMM with a 6x16 AVX2+FMA register tile, or 6x32 with AVX-512.
 *
 * Blocking: K in blocks of GEMM_KC (a 16-column panel slice of B, KC x 16 floats = 16 KB, stays
 * in L1 while it meets GEMM_MC rows of A, which stay in L2). Work items are (GEMM_MC rows, or
 * half that when items would be few) x (GEMM_NG panels) of one matrix of a batch; an item runs
 * all K blocks, so each C element's multiply-add chain is computed in k order by one thread.
 */
#include "core/size.h"
#include "kernels/gemm.h"

#include <omp.h>
#include <string.h>

#include "kernels/isa.h"
#include "kernels/vecmath.h"

#define GEMM_MR 6
#define GEMM_NR 16
#define GEMM_KC 256
#define GEMM_MC 48
#define GEMM_NG 4

size_t qp_gemm_pack_bytes(int64_t k, int64_t n) {
    if (k < 0 || n < 0) return 0;
    uint64_t panels = (uint64_t)(n + GEMM_NR - 1) / GEMM_NR;
    uint64_t kk = (uint64_t)(k ? k : 1);
    size_t bytes;
    if (!qp_size_mul3((size_t)panels, GEMM_NR * sizeof(float), (size_t)kk, &bytes)) return 0;
    return bytes;
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

int qp_gemm_available(void) {
    return qp_vf_have_avx2();
}

#define GEMM_ATTR __attribute__((target("avx2,fma")))

/* Panel p: B's columns [16p, 16p + 16) as k rows of 16 floats, zero beyond n. */
GEMM_ATTR static void pack_panel(const float *b, int64_t ldb, int64_t k, int64_t n, int64_t p,
                                 float *dst) {
    int64_t c0 = p * GEMM_NR, w = n - c0 < GEMM_NR ? n - c0 : GEMM_NR;
    float *d = dst + p * k * GEMM_NR;
    if (w == GEMM_NR) {
        for (int64_t kk = 0; kk < k; kk++) {
            const float *s = b + kk * ldb + c0;
            _mm256_storeu_ps(d + kk * GEMM_NR, _mm256_loadu_ps(s));
            _mm256_storeu_ps(d + kk * GEMM_NR + 8, _mm256_loadu_ps(s + 8));
        }
        return;
    }
    for (int64_t kk = 0; kk < k; kk++) {
        float *dr = d + kk * GEMM_NR;
        memcpy(dr, b + kk * ldb + c0, (size_t)w * sizeof(float));
        memset(dr + w, 0, (size_t)(GEMM_NR - w) * sizeof(float));
    }
}

/* C[mr x w] (+)= A[mr x kc] * panel slice [kc x 16]; first: C starts from 0 (not read). The
 * accumulators are named variables, not arrays, so that they stay in registers. */
#define GEMM_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
static inline __attribute__((always_inline, target("avx2,fma"))) void
micro(int mr, int masked, int64_t kc, const float *a, int64_t lda, const float *bp, float *c,
      int64_t ldc, int first, int64_t w) {
    __m256i m0 = _mm256_setzero_si256(), m1 = _mm256_setzero_si256();
    if (masked) {
        __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)w), lane);
        m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)w - 8), lane);
    }
#define GEMM_DECL(r) __m256 c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps();
    GEMM_ROWS(GEMM_DECL)
#define GEMM_LOAD(r)                                                                               \
    if (mr > r && !first) {                                                                        \
        if (masked) {                                                                              \
            c##r##0 = _mm256_maskload_ps(c + r * ldc, m0);                                         \
            c##r##1 = _mm256_maskload_ps(c + r * ldc + 8, m1);                                     \
        } else {                                                                                   \
            c##r##0 = _mm256_loadu_ps(c + r * ldc);                                                \
            c##r##1 = _mm256_loadu_ps(c + r * ldc + 8);                                            \
        }                                                                                          \
    }
    GEMM_ROWS(GEMM_LOAD)
#pragma GCC unroll 4
    for (int64_t kk = 0; kk < kc; kk++) {
        __m256 b0 = _mm256_loadu_ps(bp + kk * GEMM_NR), b1 = _mm256_loadu_ps(bp + kk * GEMM_NR + 8);
#define GEMM_FMA(r)                                                                                \
    if (mr > r) {                                                                                  \
        __m256 av = _mm256_broadcast_ss(a + r * lda + kk);                                         \
        c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);                                                \
        c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);                                                \
    }
        GEMM_ROWS(GEMM_FMA)
    }
#define GEMM_STORE(r)                                                                              \
    if (mr > r) {                                                                                  \
        if (masked) {                                                                              \
            _mm256_maskstore_ps(c + r * ldc, m0, c##r##0);                                         \
            _mm256_maskstore_ps(c + r * ldc + 8, m1, c##r##1);                                     \
        } else {                                                                                   \
            _mm256_storeu_ps(c + r * ldc, c##r##0);                                                \
            _mm256_storeu_ps(c + r * ldc + 8, c##r##1);                                            \
        }                                                                                          \
    }
    GEMM_ROWS(GEMM_STORE)
#undef GEMM_DECL
#undef GEMM_LOAD
#undef GEMM_FMA
#undef GEMM_STORE
}

#define MICRO_CASE(MR)                                                                             \
    case MR:                                                                                       \
        if (w == GEMM_NR)                                                                          \
            micro(MR, 0, kc, a, lda, bp, c, ldc, first, w);                                        \
        else                                                                                       \
            micro(MR, 1, kc, a, lda, bp, c, ldc, first, w);                                        \
        break;

GEMM_ATTR static void micro_any(int mr, int64_t kc, const float *a, int64_t lda, const float *bp,
                                float *c, int64_t ldc, int first, int64_t w) {
    switch (mr) {
        MICRO_CASE(6)
        MICRO_CASE(5)
        MICRO_CASE(4)
        MICRO_CASE(3)
        MICRO_CASE(2)
        MICRO_CASE(1)
    default:
        break;
    }
}

/* The AVX-512 tile: up to 6 rows x two 16-column panels (32 columns), one zmm accumulator per
 * row and panel (12 hide the FMA latency; per k two loads of B and six broadcasts of A, and as
 * few address registers as the AVX2 tile). The same chain of fused multiply-adds per element as
 * micro(), so both tiles give the same bits. two: the second panel (bs floats after the first)
 * is computed too; w0, w1: the columns of each panel that exist. */
#define GEMM512_ATTR __attribute__((target("avx512f,fma")))
static inline __attribute__((always_inline, target("avx512f,fma"))) void
micro512(int mr, int two, int64_t kc, const float *a, int64_t lda, const float *bp, int64_t bs,
         float *c, int64_t ldc, int first, int64_t w0, int64_t w1) {
    __mmask16 m0 = (__mmask16)((1u << w0) - 1u), m1 = (__mmask16)((1u << w1) - 1u);
    const float *bq = bp + bs;
#define GEMM_DECL(r) __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = _mm512_setzero_ps();
    GEMM_ROWS(GEMM_DECL)
#define GEMM_LOAD(r)                                                                               \
    if (mr > r && !first) {                                                                        \
        c##r##0 = _mm512_maskz_loadu_ps(m0, c + r * ldc);                                          \
        if (two) c##r##1 = _mm512_maskz_loadu_ps(m1, c + r * ldc + GEMM_NR);                       \
    }
    GEMM_ROWS(GEMM_LOAD)
#pragma GCC unroll 4
    for (int64_t kk = 0; kk < kc; kk++) {
        __m512 b0 = _mm512_loadu_ps(bp + kk * GEMM_NR);
        __m512 b1 = two ? _mm512_loadu_ps(bq + kk * GEMM_NR) : b0;
#define GEMM_FMA(r)                                                                                \
    if (mr > r) {                                                                                  \
        __m512 av = _mm512_set1_ps(a[r * lda + kk]);                                               \
        c##r##0 = _mm512_fmadd_ps(av, b0, c##r##0);                                                \
        if (two) c##r##1 = _mm512_fmadd_ps(av, b1, c##r##1);                                       \
    }
        GEMM_ROWS(GEMM_FMA)
    }
#define GEMM_STORE(r)                                                                              \
    if (mr > r) {                                                                                  \
        _mm512_mask_storeu_ps(c + r * ldc, m0, c##r##0);                                           \
        if (two) _mm512_mask_storeu_ps(c + r * ldc + GEMM_NR, m1, c##r##1);                        \
    }
    GEMM_ROWS(GEMM_STORE)
#undef GEMM_DECL
#undef GEMM_LOAD
#undef GEMM_FMA
#undef GEMM_STORE
}

#define MICRO512_CASE(MR)                                                                          \
    case MR:                                                                                       \
        if (two)                                                                                   \
            micro512(MR, 1, kc, a, lda, bp, bs, c, ldc, first, w0, w1);                            \
        else                                                                                       \
            micro512(MR, 0, kc, a, lda, bp, bs, c, ldc, first, w0, 0);                             \
        break;

GEMM512_ATTR static void micro_any512(int mr, int two, int64_t kc, const float *a, int64_t lda,
                                      const float *bp, int64_t bs, float *c, int64_t ldc, int first,
                                      int64_t w0, int64_t w1) {
    switch (mr) {
        MICRO512_CASE(6)
        MICRO512_CASE(5)
        MICRO512_CASE(4)
        MICRO512_CASE(3)
        MICRO512_CASE(2)
        MICRO512_CASE(1)
    default:
        break;
    }
}

/* Rows [0, m) of C (row stride ldc) for panels [0, np) of B (bs floats apart, panel j at column
 * 16 j, the last one w_last columns wide), kc terms from A: the AVX-512 tile takes two panels at
 * a time, the AVX2 tile one. */
static void tiles(int wide, int64_t m, int64_t kc, const float *a, int64_t lda, const float *b,
                  int64_t bs, int64_t np, float *c, int64_t ldc, int first, int64_t w_last) {
    if (wide) {
        for (int64_t j = 0; j < np; j += 2) {
            int two = j + 1 < np;
            int64_t w0 = j == np - 1 ? w_last : GEMM_NR, w1 = j + 1 == np - 1 ? w_last : GEMM_NR;
            for (int64_t r = 0; r < m; r += GEMM_MR) {
                int mr = (int)(m - r < GEMM_MR ? m - r : GEMM_MR);
                micro_any512(mr, two, kc, a + r * lda, lda, b + j * bs, bs,
                             c + r * ldc + j * GEMM_NR, ldc, first, w0, w1);
            }
        }
        return;
    }
    for (int64_t j = 0; j < np; j++) {
        int64_t w = j == np - 1 ? w_last : GEMM_NR;
        for (int64_t r = 0; r < m; r += GEMM_MR) {
            int mr = (int)(m - r < GEMM_MR ? m - r : GEMM_MR);
            micro_any(mr, kc, a + r * lda, lda, b + j * bs, c + r * ldc + j * GEMM_NR, ldc, first,
                      w);
        }
    }
}

static int gemm_wide(void) {
    return qp_kernel_isa() >= QP_ISA_AVX512;
}

enum qp_isa qp_gemm_isa(void) {
    return !qp_gemm_available() ? QP_ISA_PORTABLE : gemm_wide() ? QP_ISA_AVX512 : QP_ISA_AVX2;
}

static void gemm_item(int64_t r0, int64_t r1, int64_t p0, int64_t p1, int64_t n, int64_t k,
                      const float *a, int64_t lda, const float *pack, float *c, int64_t ldc) {
    int wide = gemm_wide();
    int64_t w_last = n - (p1 - 1) * GEMM_NR < GEMM_NR ? n - (p1 - 1) * GEMM_NR : GEMM_NR;
    for (int64_t kb = 0; kb < k; kb += GEMM_KC) {
        int64_t kc = k - kb < GEMM_KC ? k - kb : GEMM_KC;
        tiles(wide, r1 - r0, kc, a + r0 * lda + kb, lda, pack + p0 * k * GEMM_NR + kb * GEMM_NR,
              k * GEMM_NR, p1 - p0, c + r0 * ldc + p0 * GEMM_NR, ldc, kb == 0, w_last);
    }
}

/* The matrices of a batch: `locate` finds matrix i's A, B and C; with `packed`, every matrix
 * uses that packed B (locate's B is ignored), otherwise matrix i's B is packed into
 * pack + i * (qp_gemm_pack_bytes / 4). One OpenMP region for the whole batch: the packing,
 * then the (matrix, row chunk, panel group) items, shared out dynamically. */
static void gemm_run(int64_t n_mats, int64_t m, int64_t n, int64_t k, qp_gemm_locate_fn locate,
                     const void *ctx, int64_t lda, int64_t ldb, int64_t ldc, float *pack,
                     const float *packed, int n_threads) {
    if (n_mats <= 0 || m <= 0 || n <= 0) return;
    if (k <= 0) {
        for (int64_t bi = 0; bi < n_mats; bi++) {
            const float *a, *b;
            float *c;
            locate(ctx, bi, &a, &b, &c);
            for (int64_t i = 0; i < m; i++)
                memset(c + i * ldc, 0, (size_t)n * sizeof(float));
        }
        return;
    }
    int64_t n_panels = (n + GEMM_NR - 1) / GEMM_NR;
    int64_t n_groups = (n_panels + GEMM_NG - 1) / GEMM_NG;
    int nt = (double)n_mats * (double)m * (double)n * (double)k < 65536.0 ? 1 : n_threads;
    /* Half-height chunks when there would be few items per thread (ViT's 197 x 64 outputs make
     * 5 items of 48 rows: 3 and 2 on 2 threads); the tiling does not change any result. */
    int64_t mc = GEMM_MC;
    if (nt > 1 && (m + mc - 1) / mc * n_groups * n_mats < 8 * (int64_t)nt) mc = GEMM_MC / 2;
    int64_t n_chunks = (m + mc - 1) / mc;
    int64_t per = n_chunks * n_groups, items = per * n_mats;
    int64_t stride = n_panels * GEMM_NR * k; /* floats of one packed B */
    int64_t to_pack = packed ? 0 : n_mats * n_panels;
    if (nt > items && nt > to_pack) nt = (int)(items > to_pack ? items : to_pack);
    if (nt < 1) nt = 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        /* Barriers cost most when the machine is loaded (a descheduled thread holds up the
         * others): one after the packing only when there is packing, none after the items (the
         * end of the region joins the threads). */
        if (to_pack > 0) {
#pragma omp for schedule(static)
            for (int64_t t = 0; t < to_pack; t++) {
                const float *a, *b;
                float *c;
                locate(ctx, t / n_panels, &a, &b, &c);
                pack_panel(b, ldb, k, n, t % n_panels, pack + t / n_panels * stride);
            }
        }
        /* Each C element is computed whole by whichever thread takes its item. */
#pragma omp for schedule(dynamic, 1) nowait
        for (int64_t it = 0; it < items; it++) {
            int64_t bi = it / per, ch = it % per / n_groups, g = it % n_groups;
            int64_t r0 = ch * mc, r1 = r0 + mc < m ? r0 + mc : m;
            int64_t p0 = g * GEMM_NG, p1 = p0 + GEMM_NG < n_panels ? p0 + GEMM_NG : n_panels;
            const float *a, *b;
            float *c;
            locate(ctx, bi, &a, &b, &c);
            gemm_item(r0, r1, p0, p1, n, k, a, lda, packed ? packed : pack + bi * stride, c, ldc);
        }
    }
}

/* One matrix: A, B and C as given. */
struct one_mat {
    const float *a, *b;
    float *c;
};

static void locate_one(const void *ctx, int64_t i, const float **a, const float **b, float **c) {
    const struct one_mat *o = ctx;
    (void)i;
    *a = o->a;
    *b = o->b;
    *c = o->c;
}

void qp_gemm_f32(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                 int64_t ldb, float *c, int64_t ldc, float *pack, int n_threads) {
    struct one_mat o = {a, b, c};
    gemm_run(1, m, n, k, locate_one, &o, lda, ldb, ldc, pack, NULL, n_threads);
}

void qp_gemm_pack(int64_t k, int64_t n, const float *b, int64_t ldb, float *pack) {
    for (int64_t p = 0; p < (n + GEMM_NR - 1) / GEMM_NR; p++)
        pack_panel(b, ldb, k, n, p, pack);
}

void qp_gemm_f32_packed(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                        const float *pack, float *c, int64_t ldc, int n_threads) {
    struct one_mat o = {a, NULL, c};
    gemm_run(1, m, n, k, locate_one, &o, lda, 0, ldc, NULL, pack, n_threads);
}

void qp_gemm_panels(int64_t m, int64_t k, const float *a, int64_t lda, const float *b, int64_t bs,
                    int64_t np, float *c, int64_t ldc) {
    /* AVX-512: each pair of panels meets every row block (measured a little faster on
     * ResNet-50's Winograd shapes); AVX2: each block of six rows meets every panel, the order
     * measured there (docs/engine.md). */
    if (gemm_wide()) {
        tiles(1, m, k, a, lda, b, bs, np, c, ldc, 1, GEMM_NR);
        return;
    }
    for (int64_t r = 0; r < m; r += GEMM_MR) {
        int mr = (int)(m - r < GEMM_MR ? m - r : GEMM_MR);
        tiles(0, mr, k, a + r * lda, lda, b, bs, np, c + r * ldc, ldc, 1, GEMM_NR);
    }
}

void qp_gemm_f32_batch(int64_t n_mats, int64_t m, int64_t n, int64_t k, qp_gemm_locate_fn locate,
                       const void *ctx, int64_t lda, int64_t ldb, int64_t ldc, float *pack,
                       const float *packed, int n_threads) {
    gemm_run(n_mats, m, n, k, locate, ctx, lda, ldb, ldc, pack, packed, n_threads);
}

#else

int qp_gemm_available(void) {
    return 0;
}

enum qp_isa qp_gemm_isa(void) {
    return QP_ISA_PORTABLE;
}

void qp_gemm_pack(int64_t k, int64_t n, const float *b, int64_t ldb, float *pack) {
    (void)k, (void)n, (void)b, (void)ldb, (void)pack;
}

void qp_gemm_f32_packed(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                        const float *pack, float *c, int64_t ldc, int n_threads) {
    (void)m, (void)n, (void)k, (void)a, (void)lda, (void)pack, (void)c, (void)ldc, (void)n_threads;
}

void qp_gemm_f32(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                 int64_t ldb, float *c, int64_t ldc, float *pack, int n_threads) {
    (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)c, (void)ldc;
    (void)pack, (void)n_threads;
}

void qp_gemm_panels(int64_t m, int64_t k, const float *a, int64_t lda, const float *b, int64_t bs,
                    int64_t np, float *c, int64_t ldc) {
    (void)m, (void)k, (void)a, (void)lda, (void)b, (void)bs, (void)np, (void)c, (void)ldc;
}

void qp_gemm_f32_batch(int64_t n_mats, int64_t m, int64_t n, int64_t k, qp_gemm_locate_fn locate,
                       const void *ctx, int64_t lda, int64_t ldb, int64_t ldc, float *pack,
                       const float *packed, int n_threads) {
    (void)n_mats, (void)m, (void)n, (void)k, (void)locate, (void)ctx, (void)lda, (void)ldb;
    (void)ldc, (void)pack, (void)packed, (void)n_threads;
}

#endif
