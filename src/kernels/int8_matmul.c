/*
 * QMatMul: the integer path's fused MatMul / Gemm (int8_conv.h describes the paths; the inputs
 * are int8_util.h's, with w the right-hand operand):
 *
 *   y = Q( post2( Add( post1( DQ(a) @ DQ(b) + bias ), residual ) ) )
 *
 * a is [..., M, K] (int8/uint8, per tensor). b is either a plan-time constant [K, N] (int8,
 * per tensor or per column; a Gemm's transposed B is transposed at prepare, attribute
 * `trans_b`) or a computed int8 tensor [..., K, N] of per-tensor scale whose leading dimensions
 * are a's or absent. bias is [N]. Attribute `b_const` says which (the rewrite knows).
 *
 * With a constant b, a's leading dimensions fold into M: one [M', K] x [K, N] product with the
 * weights reordered once (oneDNN) or packed once for kernels/int8_gemm.h (the AVX2 path, CPUs
 * with AVX2 but not VNNI); with a computed b, a batched product of plain tensors on oneDNN.
 */
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "kernels/dnnl_util.h"
#include "kernels/int8_conv.h"
#include "kernels/int8_gemm.h"
#include "kernels/int8_util.h"
#include "kernels/isa.h"
#include "kernels/kcheck.h"
#include "kernels/kernels.h"

struct mm_key {
    int32_t path, nthr, lane, b_const;
    int32_t src_dt, dst_dt, per_n, src_zp_on;
    int64_t B, Bb, M, K, N;
    struct qp_i8_posts posts;
    uint64_t osc_hash;
};

struct mm_entry {
    char impl[QP_DNNL_IMPL_NAME];
    dnnl_primitive_t prim;
    dnnl_memory_desc_t wei, scr;
    size_t wei_bytes, scr_bytes;
    dnnl_memory_t m_src, m_wei, m_bias, m_dst, m_scr, m_zp;
    dnnl_stream_t stream;
    pthread_mutex_t lock;
};

struct mm_state {
    struct qp_i8_io io;
    enum qp_int8_path path;
    int b_const;
    enum qp_dtype bdt;
    int64_t B, Bb, M, K, N; /* a is [B, M, K] (B: product of its leading dims), b [Bb, K, N] */
    struct mm_key key;
    struct mm_entry *entry;
    size_t off_osc, off_psc, off_bias, off_bsc, off_wraw, off_wei; /* in the state blob */
    size_t off_a, off_b, off_dst;                                  /* in scratch */
    size_t off_scr;
    size_t off_pack; /* the AVX2 path: packed b (blob) */
    int64_t lda;     /* the AVX2 path: a's rows, padded to 4 bytes in scratch when K is not */
};

struct mm_ctx {
    const dnnl_memory_desc_t *wei; /* a secondary entry keeps the primary's weights layout */
    const char *impl;
    const float *osc; /* the output scales the primitive applies */
};

static void entry_free(struct mm_entry *e) {
    dnnl_primitive_destroy(e->prim);
    dnnl_memory_t ms[] = {e->m_src, e->m_wei, e->m_bias, e->m_dst, e->m_scr, e->m_zp};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        dnnl_memory_destroy(ms[i]);
    dnnl_stream_destroy(e->stream);
    free(e);
}

/* Source, weights, bias and destination descriptors of key k (weights `any` when constant). */
static int key_mds(const struct mm_key *k, dnnl_memory_desc_t *src, dnnl_memory_desc_t *wei,
                   dnnl_memory_desc_t *bias, dnnl_memory_desc_t *dst) {
    int f32 = k->path == QP_INT8_PATH_DNNL_F32;
    dnnl_data_type_t sdt = f32 ? dnnl_f32 : (dnnl_data_type_t)k->src_dt;
    dnnl_data_type_t wdt = f32 ? dnnl_f32 : dnnl_s8;
    if (k->b_const) {
        dnnl_dims_t sd = {k->B * k->M, k->K}, wd = {k->K, k->N}, bd = {1, k->N},
                    dd = {k->B * k->M, k->N};
        return !dnnl_memory_desc_init_by_tag(src, 2, sd, sdt, dnnl_ab) &&
               !dnnl_memory_desc_init_by_tag(wei, 2, wd, wdt, dnnl_format_tag_any) &&
               !dnnl_memory_desc_init_by_tag(bias, 2, bd, dnnl_f32, dnnl_ab) &&
               !dnnl_memory_desc_init_by_tag(dst, 2, dd, (dnnl_data_type_t)k->dst_dt, dnnl_ab);
    }
    dnnl_dims_t sd = {k->B, k->M, k->K}, wd = {k->Bb, k->K, k->N}, bd = {1, 1, k->N},
                dd = {k->B, k->M, k->N};
    return !dnnl_memory_desc_init_by_tag(src, 3, sd, sdt, dnnl_abc) &&
           !dnnl_memory_desc_init_by_tag(wei, 3, wd, wdt, dnnl_abc) &&
           !dnnl_memory_desc_init_by_tag(bias, 3, bd, dnnl_f32, dnnl_abc) &&
           !dnnl_memory_desc_init_by_tag(dst, 3, dd, (dnnl_data_type_t)k->dst_dt, dnnl_abc);
}

static int make_pd(const struct mm_key *k, const struct mm_ctx *c, dnnl_primitive_desc_t *pd,
                   dnnl_memory_desc_t *bias_md) {
    dnnl_memory_desc_t src, wei, dst;
    if (!key_mds(k, &src, &wei, bias_md, &dst)) return 0;
    if (c->wei) wei = *c->wei;
    dnnl_matmul_desc_t md;
    if (dnnl_matmul_desc_init(&md, &src, &wei, bias_md, &dst) != dnnl_success) return 0;
    dnnl_primitive_attr_t attr = NULL;
    int ok = dnnl_primitive_attr_create(&attr) == dnnl_success &&
             !dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) &&
             qp_i8_attr_posts(attr, &k->posts);
    if (ok && k->path == QP_INT8_PATH_DNNL_INT8) {
        int nd = k->b_const ? 2 : 3;
        ok = !dnnl_primitive_attr_set_output_scales(attr, k->per_n ? k->N : 1,
                                                    k->per_n ? 1 << (nd - 1) : 0, c->osc);
        int32_t zp = DNNL_RUNTIME_S32_VAL;
        if (ok && k->src_zp_on)
            ok = !dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_SRC, 1, 0, &zp);
    }
    ok = ok && qp_dnnl_pd_create(pd, &md, attr, c->impl) == dnnl_success;
    dnnl_primitive_attr_destroy(attr);
    return ok;
}

static void *entry_build(const void *key_, void *ctx) {
    const struct mm_key *k = key_;
    struct mm_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    int saved = qp_dnnl_threads_push(k->nthr);
    dnnl_primitive_desc_t pd = NULL;
    dnnl_memory_desc_t bias;
    int ok = make_pd(k, ctx, &pd, &bias);
    if (ok) {
        qp_dnnl_pd_impl_name(pd, e->impl, sizeof e->impl);
        ok = strncmp(e->impl, "ref", 3) != 0; /* slower than the float path */
    }
    dnnl_memory_desc_t src, dst;
    if (ok) {
        src = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
        e->wei = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        dst = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
        e->scr = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        e->wei_bytes = qp_dnnl_md_bytes(&e->wei);
        e->scr_bytes = qp_dnnl_md_bytes(&e->scr);
        ok = dnnl_primitive_create(&e->prim, pd) == dnnl_success;
    }
    dnnl_primitive_desc_destroy(pd);
    dnnl_engine_t eng = qp_dnnl_engine();
    dnnl_memory_desc_t zmd;
    dnnl_dims_t one = {1};
    ok = ok && !dnnl_memory_desc_init_by_tag(&zmd, 1, one, dnnl_s32, dnnl_x) &&
         !dnnl_memory_create(&e->m_zp, &zmd, eng, DNNL_MEMORY_NONE) &&
         !dnnl_memory_create(&e->m_src, &src, eng, DNNL_MEMORY_NONE) &&
         !dnnl_memory_create(&e->m_wei, &e->wei, eng, DNNL_MEMORY_NONE) &&
         !dnnl_memory_create(&e->m_bias, &bias, eng, DNNL_MEMORY_NONE) &&
         !dnnl_memory_create(&e->m_dst, &dst, eng, DNNL_MEMORY_NONE) &&
         !dnnl_memory_create(&e->m_scr, &e->scr, eng, DNNL_MEMORY_NONE) &&
         !dnnl_stream_create(&e->stream, eng, dnnl_stream_default_flags) &&
         pthread_mutex_init(&e->lock, NULL) == 0;
    qp_dnnl_threads_pop(saved);
    if (!ok) {
        entry_free(e);
        return NULL;
    }
    return e;
}

static struct mm_entry *entry_for(const struct mm_state *s, int nthr, int lane) {
    if (nthr == s->key.nthr && lane == s->key.lane) return s->entry;
    struct mm_key k = s->key;
    k.nthr = nthr;
    k.lane = lane;
    struct mm_ctx c = {s->b_const ? &s->entry->wei : NULL, s->entry->impl,
                       (const float *)((const char *)s + s->off_psc)};
    struct mm_entry *e = qp_dnnl_cache_get(&k, sizeof k, entry_build, &c);
    return e && e->scr_bytes <= s->entry->scr_bytes ? e : s->entry;
}

/* Reorders the plain constant weights w ([K, N], int8 or float) into the entry's layout. */
static int reorder_weights(const struct mm_key *k, const struct mm_entry *e, const void *w,
                           void *to) {
    dnnl_dims_t wd = {k->K, k->N};
    dnnl_memory_desc_t uw;
    dnnl_data_type_t dt = k->path == QP_INT8_PATH_DNNL_F32 ? dnnl_f32 : dnnl_s8;
    if (dnnl_memory_desc_init_by_tag(&uw, 2, wd, dt, dnnl_ab)) return 0;
    return qp_dnnl_reorder_once(&uw, w, &e->wei, to);
}

/* ---- prepare -------------------------------------------------------------------------------- */

static int64_t lead(const struct qp_kt *t) {
    int64_t b = 1;
    for (int i = 0; i < t->rank - 2; i++)
        b *= t->dims[i];
    return b;
}

/* Shapes: a [..., M, K]; b [K, N] (constant; [N, K] with trans_b) or [..., K, N]. */
static enum qp_status shapes(struct qp_kprep *p, struct mm_state *s, int trans_b) {
    const struct qp_kt *a = p->in[0], *b = qp_i8_in(p, 3);
    if (!b || b->dtype != QP_DTYPE_INT8 || a->rank < 2 || b->rank < 2)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "QMatMul needs int8 operands of rank >= 2");
    s->b_const = b->is_const && b->rank == 2;
    s->M = a->dims[a->rank - 2];
    s->K = a->dims[a->rank - 1];
    s->B = lead(a);
    int64_t bk = b->dims[b->rank - (trans_b ? 1 : 2)];
    s->N = b->dims[b->rank - (trans_b ? 2 : 1)];
    s->Bb = lead(b);
    if (bk != s->K)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "a has %lld columns, b %lld rows",
                            (long long)s->K, (long long)bk);
    if (trans_b && !s->b_const)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "a transposed computed b");
    if (!s->b_const && s->Bb != 1 &&
        (b->rank != a->rank || memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)(a->rank - 2))))
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "b's leading dimensions are not a's");
    int64_t d[QP_MAX_RANK];
    memcpy(d, a->dims, sizeof(int64_t) * (size_t)a->rank);
    d[a->rank - 1] = s->N;
    const struct qp_kt *r = qp_i8_in(p, 9);
    if (r && (r->rank != a->rank || memcmp(r->dims, d, sizeof(int64_t) * (size_t)a->rank)))
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "the residual's shape is not the output's");
    return qp_kt_set(p->out[0], s->io.ydt, a->rank, d, p->err);
}

/* Per-column scales of b (1 or N values) and the bias (N or absent) into the blob arrays. */
static enum qp_status constants(struct qp_kprep *p, struct mm_state *s, char *blob) {
    const struct qp_kt *bs = qp_i8_in(p, 4), *bz = qp_i8_in(p, 5), *bias = qp_i8_in(p, 6);
    if (!bs || !bs->is_const || (bs->numel != 1 && (!s->b_const || bs->numel != (uint64_t)s->N)))
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "b_scale must be 1 or %lld constants",
                            (long long)s->N);
    for (uint64_t i = 0; bz && i < bz->numel; i++)
        if (!bz->is_const || qp_kt_get_i64(bz, i) != 0)
            return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "b with a zero point");
    if (bias && (!bias->is_const || bias->numel != (uint64_t)s->N))
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "bias must be %lld constants",
                            (long long)s->N);
    float *osc = (float *)(blob + s->off_osc), *psc = (float *)(blob + s->off_psc);
    float *bf = (float *)(blob + s->off_bias), *bsc = (float *)(blob + s->off_bsc);
    for (int64_t n = 0; n < s->N; n++) {
        bsc[n] = (float)qp_kt_get_f64(bs, bs->numel == 1 ? 0 : (uint64_t)n);
        osc[n] = s->io.xs * bsc[n];
        float b = bias ? (float)qp_kt_get_f64(bias, (uint64_t)n) : 0.0f;
        bf[n] = s->path == QP_INT8_PATH_DNNL_INT8 ? qp_i8_acc_bias(b, &osc[n]) : b;
        psc[n] = osc[n] * s->io.oscale_mul;
    }
    return QP_OK;
}

static size_t blob_layout(struct mm_state *s) {
    size_t fl = qp_dnnl_align((size_t)s->N * sizeof(float)), base = qp_dnnl_align(sizeof *s);
    s->off_osc = base;
    s->off_psc = base + fl;
    s->off_bias = base + 2 * fl;
    s->off_bsc = base + 3 * fl;
    s->off_wraw = base + 4 * fl;
    s->off_wei = s->off_wraw + qp_dnnl_align(s->b_const ? (size_t)(s->K * s->N) : 0);
    return s->off_wei + (s->entry && s->b_const ? s->entry->wei_bytes : 0) + 64;
}

/* The constant b as [K, N] int8 at `to` (transposed from [N, K] with trans_b). */
static void copy_b(const struct qp_kt *b, int trans_b, int64_t K, int64_t N, int8_t *to) {
    const int8_t *w = b->data;
    for (int64_t k = 0; k < K; k++)
        for (int64_t n = 0; n < N; n++)
            to[k * N + n] = trans_b ? w[n * K + k] : w[k * N + n];
}

static enum qp_status weights(struct qp_kprep *p, struct mm_state *s, char *blob) {
    if (!s->b_const || !s->entry) return QP_OK;
    const int8_t *w = (const int8_t *)(blob + s->off_wraw);
    const float *bsc = (const float *)(blob + s->off_bsc);
    const void *src = w;
    float *wf = NULL;
    if (s->path == QP_INT8_PATH_DNNL_F32) { /* dequantized */
        wf = qp_malloc_n((size_t)(s->K * s->N), sizeof *wf);
        if (!wf) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
        const struct qp_kt *bs = qp_i8_in(p, 4);
        for (int64_t i = 0; i < s->K * s->N; i++)
            wf[i] = (float)w[i] * bsc[bs->numel == 1 ? 0 : i % s->N];
        src = wf;
    }
    int ok = reorder_weights(&s->key, s->entry, src, blob + s->off_wei);
    free(wf);
    return ok ? QP_OK : qp_error_set(p->err, QP_ERR_INTERNAL, "oneDNN weight reorder failed");
}

static void fill_key(struct mm_state *s, const struct qp_kprep *p) {
    struct mm_key *k = &s->key;
    memset(k, 0, sizeof *k);
    k->path = (int32_t)s->path;
    k->nthr = qp_dnnl_default_threads();
    k->b_const = s->b_const;
    k->src_dt = s->io.xdt == QP_DTYPE_INT8 ? dnnl_s8 : dnnl_u8;
    k->src_zp_on = s->path == QP_INT8_PATH_DNNL_INT8 && s->io.xzp != 0;
    k->per_n = qp_i8_in(p, 4)->numel > 1;
    k->B = s->B;
    k->Bb = s->Bb;
    k->M = s->M;
    k->K = s->K;
    k->N = s->N;
    qp_i8_key_posts(&s->io, s->path == QP_INT8_PATH_DNNL_INT8, &k->posts);
    k->dst_dt = s->io.dst_f32 ? dnnl_f32 : s->io.ydt == QP_DTYPE_INT8 ? dnnl_s8 : dnnl_u8;
}

/* The AVX2 path takes a constant b (and a residual it reads: int8, uint8 or float). */
static int avx2_takes(const struct qp_kprep *p, const struct mm_state *s) {
    const struct qp_kt *r = qp_i8_in(p, 9);
    return s->b_const && qp_kernel_isa() >= QP_ISA_AVX2 && qp_int8_avx2_allowed() &&
           qp_i8g_pack_bytes(s->K, s->N) > 0 && (!r || r->dtype != QP_DTYPE_FLOAT16);
}

/* The AVX2 path's blob: the constants (blob_layout's arrays are padded to the kernels' 16
 * columns), the plain [K, N] weights, then the packed ones. */
static enum qp_status prepare_avx2(struct qp_kprep *p, struct mm_state *s, int trans_b) {
    s->off_pack = qp_dnnl_align(blob_layout(s));
    char *blob = qp_zalloc64(s->off_pack + qp_i8g_pack_bytes(s->K, s->N) + 64);
    int8_t *bt = qp_malloc_n((size_t)(s->K * s->N), 1);
    enum qp_status st =
        !blob || !bt ? qp_error_set(p->err, QP_ERR_NOMEM, "out of memory") : constants(p, s, blob);
    if (!st) {
        int8_t *w = (int8_t *)(blob + s->off_wraw);
        copy_b(p->in[3], trans_b, s->K, s->N, w);
        for (int64_t k = 0; k < s->K; k++)
            for (int64_t n = 0; n < s->N; n++)
                bt[n * s->K + k] = w[k * s->N + n];
        qp_i8g_pack(bt, s->K, s->K, s->N, blob + s->off_pack);
    }
    free(bt);
    if (st) {
        free(blob);
        return st;
    }
    s->lda = (s->K + 3) / 4 * 4;
    p->scratch = s->lda == s->K ? 0 : qp_dnnl_align((size_t)(s->B * s->M * s->lda));
    qp_log(QP_LOG_DEBUG, "QMatMul '%s': path %d (%s), M %lld K %lld N %lld",
           p->node->name ? p->node->name : "", (int)s->path, qp_int8_path_name(s->path),
           (long long)(s->B * s->M), (long long)s->K, (long long)s->N);
    memcpy(blob, s, sizeof *s);
    p->state = blob;
    return QP_OK;
}

enum qp_status qp_k_qmatmul_fused_prepare(struct qp_kprep *p) {
    struct mm_state s;
    memset(&s, 0, sizeof s);
    int trans_b = (int)qp_kattr_int(p->node, "trans_b", 0);
    enum qp_status st = qp_i8_read_io(p, &s.io);
    if (st || (st = shapes(p, &s, trans_b))) return st;
    const struct qp_kt *b = p->in[3];
    s.bdt = b->dtype;
    s.path = !qp_dnnl_enabled() || qp_int8_ref_forced() ? QP_INT8_PATH_REF
             : qp_int8_cpu_has_vnni()                   ? QP_INT8_PATH_DNNL_INT8
             : avx2_takes(p, &s)                        ? QP_INT8_PATH_AVX2
                                                        : QP_INT8_PATH_DNNL_F32;
    if (s.path == QP_INT8_PATH_AVX2) return prepare_avx2(p, &s, trans_b);
    /* The constants first (the primitive bakes the output scales in), then the primitive. */
    char *blob = NULL;
    for (;;) {
        if (s.path != QP_INT8_PATH_REF) fill_key(&s, p);
        free(blob);
        blob = qp_zalloc64(blob_layout(&s));
        if (!blob) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
        if ((st = constants(p, &s, blob))) break;
        if (s.path == QP_INT8_PATH_REF) break;
        const float *psc = (const float *)(blob + s.off_psc);
        s.key.osc_hash = qp_i8_hash(psc, s.N);
        struct mm_ctx c = {NULL, NULL, psc};
        s.entry = qp_dnnl_cache_get(&s.key, sizeof s.key, entry_build, &c);
        if (s.entry) {
            free(blob); /* again, with room for the reordered weights */
            blob = qp_zalloc64(blob_layout(&s));
            if (!blob) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
            st = constants(p, &s, blob);
            break;
        }
        s.path = s.path == QP_INT8_PATH_DNNL_INT8 ? QP_INT8_PATH_DNNL_F32 : QP_INT8_PATH_REF;
    }
    if (s.path == QP_INT8_PATH_REF) s.io.dst_f32 = 1;
    if (!st && s.b_const) copy_b(b, trans_b, s.K, s.N, (int8_t *)(blob + s.off_wraw));
    if (!st) st = weights(p, &s, blob);
    if (st) {
        free(blob);
        return st;
    }
    int f32 = s.path == QP_INT8_PATH_DNNL_F32;
    size_t na = (size_t)(s.B * s.M * s.K), nb = (size_t)(s.Bb * s.K * s.N),
           ny = (size_t)(s.B * s.M * s.N);
    s.off_a = 0;
    s.off_b = qp_dnnl_align(f32 ? na * sizeof(float) : 0);
    s.off_dst = s.off_b + qp_dnnl_align(f32 && !s.b_const ? nb * sizeof(float) : 0);
    int convert = s.path != QP_INT8_PATH_REF && s.io.dst_f32 && s.io.ydt != QP_DTYPE_FLOAT;
    s.off_scr = s.off_dst + qp_dnnl_align(convert ? ny * 4 : 0);
    p->scratch = s.off_scr + (s.entry ? qp_dnnl_align(s.entry->scr_bytes) : 0);
    memcpy(blob, &s, sizeof s);
    p->state = blob;
    return QP_OK;
}

/* ---- run ------------------------------------------------------------------------------------ */

static enum qp_status run_ref(const struct qp_krun *r) {
    const struct mm_state *s = r->state;
    const char *blob = r->state;
    const float *osc = (const float *)(blob + s->off_osc),
                *bias = (const float *)(blob + s->off_bias);
    const struct qp_kt *a = r->in[0], *b = r->in[3], *res = s->io.has_res ? r->in[9] : NULL;
    const int8_t *w = s->b_const ? (const int8_t *)(blob + s->off_wraw) : b->data;
    int64_t rows = s->B * s->M;
#pragma omp parallel for num_threads(r->n_threads) schedule(static)
    for (int64_t row = 0; row < rows; row++) {
        int64_t bi = row / s->M, bb = s->Bb == 1 ? 0 : bi;
        for (int64_t n = 0; n < s->N; n++) {
            int64_t acc = 0;
            for (int64_t k = 0; k < s->K; k++)
                acc += ((int64_t)qp_i8_q8_at(a->data, s->io.xdt, row * s->K + k) - s->io.xzp) *
                       w[(bb * s->K + k) * s->N + n];
            float v = (float)acc * osc[n] + bias[n];
            int64_t yi = row * s->N + n;
            float rv = res ? qp_i8_real_at(res, yi, s->io.rs, s->io.rzp) : 0.0f;
            qp_i8_store(&s->io, r->out[0]->data, yi, qp_i8_posts_ref(&s->io, v, rv));
        }
    }
    return QP_OK;
}

static void to_f32(const struct qp_kt *t, float scale, int32_t zp, float *dst, int nthr) {
    int64_t n = (int64_t)t->numel;
    int nt = n < 65536 ? 1 : nthr;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < n; i++)
        dst[i] = scale * (qp_i8_q8_at(t->data, t->dtype, i) - (float)zp);
}

/* Before the primitive: the float path's operands, the residual in the destination. */
static void stage(const struct qp_krun *r, const struct mm_state *s, void **src, void **wei,
                  void *dbuf) {
    char *scr = r->scratch;
    const float *bsc = (const float *)((const char *)s + s->off_bsc);
    *src = r->in[0]->data;
    *wei = s->b_const ? (char *)s + s->off_wei : r->in[3]->data;
    if (s->path == QP_INT8_PATH_DNNL_F32) {
        *src = scr + s->off_a;
        to_f32(r->in[0], s->io.xs, s->io.xzp, *src, r->n_threads);
        if (!s->b_const) {
            *wei = scr + s->off_b;
            to_f32(r->in[3], bsc[0], 0, *wei, r->n_threads);
        }
    }
    if (!s->io.has_res) return;
    const struct qp_kt *res = r->in[9];
    if (s->io.res_in_dst) {
        memcpy(dbuf, res->data, res->nbytes);
        return;
    }
    float *d = dbuf;
    for (int64_t i = 0; i < (int64_t)res->numel; i++)
        d[i] = qp_i8_real_at(res, i, s->io.rs, s->io.rzp);
}

/* The AVX2 kernels on the constant b: a's rows (padded to 4 bytes in scratch when K is not),
 * the epilogue writing the output (and reading the residual) in place. */
static enum qp_status run_avx2(const struct qp_krun *r) {
    const struct mm_state *s = r->state;
    const char *blob = r->state;
    enum qp_isa isa = qp_kernel_isa();
    int64_t rows = s->B * s->M;
    const struct qp_kt *x = r->in[0], *res = s->io.has_res ? r->in[9] : NULL;
    unsigned range = qp_i8g_range(isa, x->data, x->nbytes, r->n_threads);
    const void *a = x->data;
    if (s->lda != s->K) {
        uint8_t *pad = r->scratch;
        for (int64_t i = 0; i < rows; i++) {
            memcpy(pad + i * s->lda, (const uint8_t *)x->data + i * s->K, (size_t)s->K);
            memset(pad + i * s->lda + s->K, 0, (size_t)(s->lda - s->K));
        }
        a = pad;
    }
    struct qp_i8g_b b;
    qp_i8g_b_view(blob + s->off_pack, s->K, s->N, &b);
    struct qp_i8g_a av = {a, s->lda, s->io.xdt == QP_DTYPE_INT8, s->io.xzp, range};
    struct qp_i8g_epi e = {&s->io,
                           (const float *)(blob + s->off_osc),
                           (const float *)(blob + s->off_bias),
                           s->io.ydt,
                           r->out[0]->data,
                           s->N,
                           res ? res->data : NULL,
                           res ? res->dtype : QP_DTYPE_FLOAT,
                           s->N};
    qp_i8g_gemm(isa, rows, &av, &b, &e, r->n_threads);
    return QP_OK;
}

enum qp_status qp_k_qmatmul_fused_run(const struct qp_krun *r) {
    const struct mm_state *s = r->state;
    if (s->path == QP_INT8_PATH_REF) return run_ref(r);
    if (s->path == QP_INT8_PATH_AVX2) return run_avx2(r);
    struct mm_entry *e = entry_for(s, r->n_threads, r->lane);
    char *scr = r->scratch, *blob = (char *)r->state;
    /* A float32 output is the primitive's destination itself. */
    int convert = s->io.dst_f32 && s->io.ydt != QP_DTYPE_FLOAT;
    void *dbuf = convert ? scr + s->off_dst : r->out[0]->data, *src, *wei;
    stage(r, s, &src, &wei, dbuf);
    pthread_mutex_lock(&e->lock);
    int saved = qp_dnnl_threads_push(e == s->entry ? s->key.nthr : r->n_threads);
    dnnl_memory_set_data_handle(e->m_src, src);
    dnnl_memory_set_data_handle(e->m_wei, wei);
    dnnl_memory_set_data_handle(e->m_bias, blob + s->off_bias);
    dnnl_memory_set_data_handle(e->m_dst, dbuf);
    if (e->scr_bytes) dnnl_memory_set_data_handle(e->m_scr, scr + s->off_scr);
    dnnl_memory_set_data_handle(e->m_zp, (void *)&s->io.xzp);
    dnnl_exec_arg_t a[6] = {
        {DNNL_ARG_SRC, e->m_src},        {DNNL_ARG_WEIGHTS, e->m_wei},
        {DNNL_ARG_BIAS, e->m_bias},      {DNNL_ARG_DST, e->m_dst},
        {DNNL_ARG_SCRATCHPAD, e->m_scr}, {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, e->m_zp}};
    dnnl_status_t rc = dnnl_primitive_execute(e->prim, e->stream, s->key.src_zp_on ? 6 : 5, a);
    if (rc == dnnl_success) rc = dnnl_stream_wait(e->stream);
    qp_dnnl_threads_pop(saved);
    pthread_mutex_unlock(&e->lock);
    if (rc != dnnl_success)
        return qp_error_set(r->err, QP_ERR_INTERNAL, "oneDNN int8 matmul failed (status %d)",
                            (int)rc);
    if (convert)
        qp_i8_store_n(&s->io, r->out[0]->data, dbuf, (int64_t)r->out[0]->numel, r->n_threads);
    return QP_OK;
}

enum qp_int8_path qp_int8_matmul_path(const void *state) {
    return state ? ((const struct mm_state *)state)->path : QP_INT8_PATH_REF;
}
