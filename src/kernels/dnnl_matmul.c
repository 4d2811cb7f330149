/*
 * MatMul and Gemm on oneDNN's sgemm.
 *
 * Thread-count independence: oneDNN's GEMM splits K across threads for small M, which makes the
 * rounding depend on the thread count. So the output is cut into tiles whose sizes depend on
 * the problem only, each tile is one single-threaded dnnl_sgemm call (the calling thread's
 * OpenMP thread limit is 1 inside the call), and the engine's OpenMP threads share out the
 * tiles. Every tile is then computed by the same call whatever the thread count.
 * Shapes, broadcasting and validation come from the reference prepare (matmul.c); when oneDNN is
 * disabled (QP_NO_DNNL) the reference run is used.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "kernels/dnnl_matmul.h"
#include "kernels/dnnl_util.h"
#include "kernels/gemm.h"
#include "kernels/kernels.h"

#define TILE_M 64
#define TILE_N 512

struct tiling {
    int64_t nr, nc;   /* row and column tiles */
    int64_t rq, rrem; /* rows per tile: rq, the first rrem tiles get one more */
    int64_t cq, crem;
};

static struct tiling make_tiling(int64_t m, int64_t n) {
    struct tiling t;
    t.nr = m > 0 ? (m + TILE_M - 1) / TILE_M : 1;
    t.nc = n > 0 ? (n + TILE_N - 1) / TILE_N : 1;
    t.rq = m / t.nr;
    t.rrem = m % t.nr;
    /* Column tiles in multiples of 16 floats, the last one taking the rest. */
    t.cq = (n / t.nc + 15) / 16 * 16;
    if (t.cq == 0) t.cq = n;
    t.crem = 0;
    return t;
}

static void tile_range(const struct tiling *t, int64_t m, int64_t n, int64_t ti, int64_t *r0,
                       int64_t *r1, int64_t *c0, int64_t *c1) {
    int64_t ri = ti / t->nc, ci = ti % t->nc;
    *r0 = ri * t->rq + (ri < t->rrem ? ri : t->rrem);
    *r1 = *r0 + t->rq + (ri < t->rrem ? 1 : 0);
    *c0 = ci * t->cq;
    *c1 = ci == t->nc - 1 ? n : (ci + 1) * t->cq;
    if (*c0 > n) *c0 = n;
    if (*c1 > n) *c1 = n;
    (void)m;
}

/* Threads for a problem of `flops` multiply-adds: 1 below the reference kernels' threshold. */
static int threads_for(int64_t flops, int n_threads) {
    return flops < 65536 ? 1 : n_threads;
}

/* The MatMul row's state: the reference state first (the reference run reads it), then, when
 * B is a plan-time constant shared by every batch, B packed for gemm.c once (`packed` is its
 * byte offset from the start of the block; 0: B is packed into the scratch at each run, every
 * batch's at once when that fits in MM_PREPACK_MAX, so a batched MatMul is one OpenMP region). */
struct mm_fast_state {
    struct qp_mm_state ref;
    size_t packed;
    int pack_all; /* the scratch holds every batch's packed B (else one at a time) */
};

/* A constant B larger than this is packed at run instead (plans may be cached 16 at a time). */
#define MM_PREPACK_MAX ((size_t)64 << 20)

enum qp_status qp_k_dnnl_matmul_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_k_matmul_prepare(p);
    if (st) return st;
    struct qp_mm_state ref = *(const struct qp_mm_state *)p->state;
    size_t bytes = qp_gemm_available() ? qp_gemm_pack_bytes(ref.k, ref.n) : 0;
    int shared_b = 1;
    for (int d = 0; d < ref.brank; d++)
        if (ref.bstr[d] != 0) shared_b = 0;
    int prepack = bytes && bytes <= MM_PREPACK_MAX && shared_b && p->in[1]->is_const &&
                  p->in[1]->data && ref.k > 0 && ref.n > 0;
    size_t off = (sizeof(struct mm_fast_state) + 63) / 64 * 64;
    struct mm_fast_state *fs = qp_zalloc64(prepack ? off + bytes : sizeof *fs);
    if (!fs) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    fs->ref = ref;
    fs->packed = prepack ? off : 0;
    fs->pack_all = !prepack && !shared_b && bytes && ref.batch > 1 &&
                   (uint64_t)ref.batch <= MM_PREPACK_MAX / bytes;
    if (prepack) qp_gemm_pack(ref.k, ref.n, p->in[1]->data, ref.n, (float *)((char *)fs + off));
    free(p->state);
    p->state = fs;
    /* gemm.c packs a non-constant B into the scratch. */
    p->scratch = prepack ? 0 : fs->pack_all ? bytes * (size_t)ref.batch : bytes;
    return QP_OK;
}

/* A MatMul's matrices for gemm.c: matrix bi's A, B and C by the broadcast strides (folded:
 * one tall matrix). */
struct mm_mats {
    const struct qp_mm_state *s;
    const float *a, *b;
    float *c;
    int64_t m; /* rows of each C (all batches' when folded) */
    int fold;
};

static void mm_locate(const void *ctx, int64_t bi, const float **a, const float **b, float **c) {
    const struct mm_mats *mm = ctx;
    const struct qp_mm_state *s = mm->s;
    int64_t rem = bi, ao = 0, bo = 0;
    for (int d = s->brank - 1; d >= 0 && !mm->fold; d--) {
        int64_t x = rem % s->bdims[d];
        rem /= s->bdims[d];
        ao += x * s->astr[d];
        bo += x * s->bstr[d];
    }
    *a = mm->a + ao * s->m * s->k;
    *b = mm->b + bo * s->k * s->n;
    *c = mm->c + bi * mm->m * s->n;
}

enum qp_status qp_k_dnnl_matmul_run(const struct qp_krun *r) {
    if (!qp_dnnl_enabled()) return qp_k_matmul_run(r);
    const struct qp_mm_state *s = r->state;
    const float *a = r->in[0]->data, *b = r->in[1]->data;
    float *c = r->out[0]->data;
    int64_t m = s->m, batch = s->batch, n_mats = batch;
    /* B shared by every batch and A's batches contiguous: one tall GEMM. */
    int fold = batch > 1;
    for (int d = 0; fold && d < s->brank; d++)
        if (s->bstr[d] != 0) fold = 0;
    if (fold) {
        int64_t want = 1;
        for (int d = s->brank - 1; d >= 0; d--) {
            if (s->astr[d] != want) fold = 0;
            want *= s->bdims[d];
        }
    }
    if (fold) {
        m *= batch;
        n_mats = 1;
    }
    if (m == 0 || s->n == 0) return QP_OK;
    if (s->k == 0) {
        memset(c, 0, (size_t)(n_mats * m * s->n) * sizeof(float));
        return QP_OK;
    }
    const struct mm_fast_state *fs = r->state;
    if (qp_gemm_available() && qp_gemm_pack_bytes(s->k, s->n) && (fs->packed || r->scratch)) {
        /* gemm.c: B packed at prepare or into the scratch; the whole batch in one region when
         * B is packed at prepare or the scratch holds every batch's B. */
        struct mm_mats mats = {s, a, b, c, m, fold};
        const float *packed = fs->packed ? (const float *)((const char *)fs + fs->packed) : NULL;
        if (packed || fs->pack_all) {
            qp_gemm_f32_batch(n_mats, m, s->n, s->k, mm_locate, &mats, s->k, s->n, s->n, r->scratch,
                              packed, r->n_threads);
            return QP_OK;
        }
        for (int64_t bi = 0; bi < n_mats; bi++) {
            const float *am, *bm;
            float *cm;
            mm_locate(&mats, bi, &am, &bm, &cm);
            qp_gemm_f32(m, s->n, s->k, am, s->k, bm, s->n, cm, s->n, r->scratch, r->n_threads);
        }
        return QP_OK;
    }
    struct tiling t = make_tiling(m, s->n);
    int64_t per = t.nr * t.nc, total = per * n_mats;
    int nt = threads_for(n_mats * m * s->n * s->k, r->n_threads);
    if (nt > total) nt = (int)total;
    int saved = qp_dnnl_threads_push(1);
    int bad = 0;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1) reduction(| : bad)
    for (int64_t ti = 0; ti < total; ti++) {
        if (omp_get_max_threads() != 1) omp_set_num_threads(1);
        int64_t bi = ti / per, r0, r1, c0, c1;
        tile_range(&t, m, s->n, ti % per, &r0, &r1, &c0, &c1);
        if (r1 <= r0 || c1 <= c0) continue;
        int64_t rem = bi, ao = 0, bo = 0;
        for (int d = s->brank - 1; d >= 0 && !fold; d--) {
            int64_t x = rem % s->bdims[d];
            rem /= s->bdims[d];
            ao += x * s->astr[d];
            bo += x * s->bstr[d];
        }
        const float *am = a + ao * s->m * s->k, *bm = b + bo * s->k * s->n;
        float *cm = c + bi * m * s->n;
        if (dnnl_sgemm('N', 'N', r1 - r0, c1 - c0, s->k, 1.0f, am + r0 * s->k, s->k, bm + c0, s->n,
                       0.0f, cm + r0 * s->n + c0, s->n) != dnnl_success)
            bad |= 1;
    }
    qp_dnnl_threads_pop(saved);
    if (bad) return qp_error_set(r->err, QP_ERR_INTERNAL, "oneDNN sgemm failed");
    return QP_OK;
}

enum qp_status qp_k_dnnl_gemm_prepare(struct qp_kprep *p) {
    return qp_k_gemm_prepare(p);
}

enum qp_status qp_k_dnnl_gemm_run(const struct qp_krun *r) {
    if (!qp_dnnl_enabled()) return qp_k_gemm_run(r);
    const struct qp_gemm_state *s = r->state;
    const float *a = r->in[0]->data, *b = r->in[1]->data;
    const float *cin = s->has_c ? r->in[2]->data : NULL;
    float *y = r->out[0]->data;
    if (s->m == 0 || s->n == 0) return QP_OK;
    struct tiling t = make_tiling(s->m, s->n);
    int64_t total = t.nr * t.nc;
    int nt = threads_for(s->m * s->n * (s->k ? s->k : 1), r->n_threads);
    if (nt > total) nt = (int)total;
    int64_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    float beta = cin ? s->beta : 0.0f;
    int saved = qp_dnnl_threads_push(1);
    int bad = 0;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1) reduction(| : bad)
    for (int64_t ti = 0; ti < total; ti++) {
        if (omp_get_max_threads() != 1) omp_set_num_threads(1);
        int64_t r0, r1, c0, c1;
        tile_range(&t, s->m, s->n, ti, &r0, &r1, &c0, &c1);
        if (r1 <= r0 || c1 <= c0) continue;
        float *yt = y + r0 * s->n + c0;
        for (int64_t i = r0; cin && i < r1; i++)
            for (int64_t j = c0; j < c1; j++)
                y[i * s->n + j] = cin[i * s->c_sm + j * s->c_sn];
        if (s->k == 0) {
            for (int64_t i = r0; i < r1; i++)
                for (int64_t j = c0; j < c1; j++)
                    y[i * s->n + j] *= beta;
            continue;
        }
        const float *at = s->ta ? a + r0 : a + r0 * lda;
        const float *bt = s->tb ? b + c0 * ldb : b + c0;
        if (dnnl_sgemm(s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', r1 - r0, c1 - c0, s->k, s->alpha, at,
                       lda, bt, ldb, beta, yt, s->n) != dnnl_success)
            bad |= 1;
    }
    qp_dnnl_threads_pop(saved);
    if (bad) return qp_error_set(r->err, QP_ERR_INTERNAL, "oneDNN sgemm failed");
    return QP_OK;
}
