/*
 * Conv and ConvTranspose on oneDNN (convolution / deconvolution forward primitives).
 *
 * prepare computes the ONNX geometry with the reference code (qp_conv_geometry), creates the
 * primitive with `format_tag any` for source, weights and destination so oneDNN picks its
 * blocked layouts, and reorders the (constant) weights once into that layout inside the state.
 * Activations stay plain NCHW at the kernel boundary: run reorders the input into the blocked
 * layout (kernel scratch), runs the primitive, and reorders the output back. Scratchpads are
 * user-managed (kernel scratch), so run does not allocate.
 *
 * Thread-count independence: primitives are cached per thread count, and a primitive for a
 * thread count other than the one prepare used is created with the same source, weights and
 * destination layouts, so every variant reads the same reordered weights; the unit tests check
 * 1 vs 2 threads bit for bit. Whatever oneDNN cannot do (non-constant weights, an asymmetric
 * padding it rejects, a full cache) runs the reference kernel with the same geometry.
 *
 * 3x3 stride-1 convolutions that qp_wino_takes accepts run Winograd F(2x2, 3x3) (winograd.c)
 * on CPUs where it pays (qp_wino_cpu_prefers) instead of the primitive, inside the same state: its
 * weights are transformed at prepare, and the primitive's descriptor only tells the blocked layouts
 * the state reads and writes.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/deconv_patch.h"
#include "kernels/dnnl_conv.h"
#include "kernels/dnnl_util.h"
#include "kernels/kernels.h"
#include "kernels/winograd.h"

struct conv_key {
    int32_t transpose, nthr, nsp, has_bias;
    int32_t lane; /* qp_krun.lane (0 for the primary entry) */
    int32_t sub;  /* 1: the stride-1 primitive of a subsampled 1x1 convolution (sub_prepare) */
    int64_t n, c, m, group;
    int64_t in[3], k[3], out[3], stride[3], dil[3], pb[3], pe[3];
    int32_t n_post, post_kind[QP_CONV_MAX_POST];
    float post_alpha[QP_CONV_MAX_POST], post_beta[QP_CONV_MAX_POST];
};

struct conv_entry {
    int nthr;
    char impl[QP_DNNL_IMPL_NAME]; /* oneDNN's implementation (a variant must run the same) */
    dnnl_primitive_t prim, rsrc, rdst, rwei; /* rsrc/rdst NULL: layout already plain */
    dnnl_primitive_t rres;                   /* plain residual into a blocked dst (SUM) */
    dnnl_memory_desc_t usrc, src, uwei, wei, bias, dst, udst, scr;
    size_t src_bytes, dst_bytes, wei_bytes, scr_bytes;
    dnnl_memory_t m_usrc, m_src, m_uwei, m_wei, m_bias, m_dst, m_udst, m_scr;
    dnnl_stream_t stream;
    pthread_mutex_t lock;
};

/* Layouts and implementation a secondary (other thread count or lane) entry must use: the
 * primary's. */
struct conv_force {
    const dnnl_memory_desc_t *src, *wei, *dst;
    const char *impl;
};

struct dnnl_conv_state {
    struct qp_conv_state ref; /* first member: the reference run reads the state as this */
    int use_dnnl;
    struct conv_key key; /* primary: nthr = the thread count prepare used */
    struct conv_entry *entry;
    struct conv_entry *entry1; /* the 1-thread variant (NULL: none) */
    size_t wei_off;            /* reordered weights at (char *)state + wei_off */
    size_t off_dst, off_scr;   /* scratch layout: [blocked src | blocked dst | scratchpad] */
    size_t scratch;
    int n_post, has_sum;
    struct qp_conv_post post[QP_CONV_MAX_POST];
    /* Set by the runtime (qp_dnnl_conv_set_blocked): the input, output and residual are in the
     * primitive's blocked layouts already, not NCHW. */
    int src_blocked, dst_blocked, res_blocked;
    int small; /* fewer multiply-adds than QP_CONV_SMALL_MACS: one thread */
    /* qp_dnnl_conv_defer_prepare: geometry only, no primitive, no weights; the runtime
     * replaces it by a full state (fused or plain) before anything runs. */
    int deferred;
    /* ConvTranspose: the bias and the post-operations run in C on the primitive's destination
     * (epilogue), whose layout is channel blocks of `blk` (1: plain) with outer strides
     * ep_sn (batch) and ep_sc (channel block), spatial positions `blk` apart. */
    int epilogue;
    int64_t blk, ep_sn, ep_sc;
    /* The Winograd path (winograd.h) instead of the primitive: `entry`, when not NULL, then
     * only gives the blocked layouts (no reordered weights: the transformed ones are at
     * wei_off), whose source and destination forms are wl_src and wl_dst. */
    int wino;
    struct qp_wino wp;
    struct qp_wino_layout wl_src, wl_dst;
    /* ConvTranspose with kernel == stride as a GEMM and a scatter (deconv_patch.h), its
     * rearranged weights at wei_off, NCHW in and out, the epilogue plain. */
    int patch;
    /* A 1x1 convolution with strides (sub_prepare): its source's strided pixels are gathered
     * into a dense tensor at off_sub in scratch, laid out as the primary's source on the output's
     * pixel grid, and the stride-1 primitive sub_entry (sub_entry1: one thread) runs on it with
     * the primary's weights and destination layout. */
    int sub;
    struct conv_key sub_key;
    struct conv_entry *sub_entry, *sub_entry1;
    size_t off_sub;
};

/* Weight reorders done by prepare, process-wide (qp_dnnl_conv_weight_reorders). */
static atomic_size_t n_weight_reorders;

/* Below this many multiply-adds (about 20 us on one AVX2 core) a convolution runs on one
 * thread. */
#define QP_CONV_SMALL_MACS (1 << 18)

static void dense_md(dnnl_memory_desc_t *md, int nd, const dnnl_dim_t *dims, int *ok) {
    dnnl_dims_t strides;
    dnnl_dim_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i];
    }
    if (dnnl_memory_desc_init_by_strides(md, nd, dims, dnnl_f32, strides) != dnnl_success) *ok = 0;
}

static void entry_free(struct conv_entry *e) {
    dnnl_primitive_destroy(e->prim);
    dnnl_primitive_destroy(e->rsrc);
    dnnl_primitive_destroy(e->rdst);
    dnnl_primitive_destroy(e->rwei);
    dnnl_primitive_destroy(e->rres);
    dnnl_memory_t *ms[] = {&e->m_usrc, &e->m_src, &e->m_uwei, &e->m_wei,
                           &e->m_bias, &e->m_dst, &e->m_udst, &e->m_scr};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        dnnl_memory_destroy(*ms[i]);
    dnnl_stream_destroy(e->stream);
    free(e);
}

static dnnl_primitive_t make_reorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                                     int *ok) {
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t p = NULL;
    dnnl_engine_t eng = qp_dnnl_engine();
    if (dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, NULL) != dnnl_success ||
        dnnl_primitive_create(&p, pd) != dnnl_success)
        *ok = 0;
    dnnl_primitive_desc_destroy(pd);
    return p;
}

static const dnnl_alg_kind_t post_alg[QP_CONV_POST_COUNT] = {
    [QP_CONV_POST_LINEAR] = dnnl_eltwise_linear,
    [QP_CONV_POST_RELU] = dnnl_eltwise_relu,
    [QP_CONV_POST_CLIP] = dnnl_eltwise_clip,
    [QP_CONV_POST_SIGMOID] = dnnl_eltwise_logistic,
    [QP_CONV_POST_HARDSWISH] = dnnl_eltwise_hardswish,
    [QP_CONV_POST_SUM] = dnnl_alg_kind_undef,
    [QP_CONV_POST_GELU] = dnnl_eltwise_gelu_erf,
    [QP_CONV_POST_GELU_TANH] = dnnl_eltwise_gelu_tanh,
};
_Static_assert(sizeof post_alg / sizeof post_alg[0] == QP_CONV_POST_COUNT, "post_alg rows");

dnnl_alg_kind_t qp_dnnl_post_alg(int kind) {
    return kind >= 0 && kind < QP_CONV_POST_COUNT ? post_alg[kind] : dnnl_alg_kind_undef;
}

/* The key's post-operations as the attribute's post-ops; 0 on failure. */
static int set_post_ops(dnnl_primitive_attr_t attr, const struct conv_key *k) {
    dnnl_post_ops_t po = NULL;
    if (dnnl_post_ops_create(&po) != dnnl_success) return 0;
    int ok = 1;
    for (int i = 0; ok && i < k->n_post; i++) {
        int kind = k->post_kind[i];
        dnnl_status_t rc = kind == QP_CONV_POST_SUM
                               ? dnnl_post_ops_append_sum(po, 1.0f)
                               : dnnl_post_ops_append_eltwise(po, 1.0f, post_alg[kind],
                                                              k->post_alpha[i], k->post_beta[i]);
        if (rc != dnnl_success) ok = 0;
    }
    if (ok && dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success) ok = 0;
    dnnl_post_ops_destroy(po);
    return ok;
}

static void *entry_build(const void *key_, void *ctx) {
    const struct conv_key *k = key_;
    const struct conv_force *force = ctx;
    dnnl_engine_t eng = qp_dnnl_engine();
    struct conv_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->nthr = k->nthr;
    int saved = qp_dnnl_threads_push(k->nthr);
    int ok = 1, nd = 2 + k->nsp;
    int64_t g = k->group, cg = k->c / g, mg = k->m / g;
    dnnl_dims_t sd = {k->n, k->c}, dd = {k->n, k->m}, wd, bd = {k->m};
    dnnl_dims_t strides, dil, pl, pr;
    int64_t ksz = 1;
    for (int i = 0; i < k->nsp; i++) {
        sd[2 + i] = k->in[i];
        dd[2 + i] = k->out[i];
        strides[i] = k->stride[i];
        dil[i] = k->dil[i] - 1;
        pl[i] = k->pb[i];
        pr[i] = k->pe[i];
        ksz *= k->k[i];
    }
    dense_md(&e->usrc, nd, sd, &ok);
    dense_md(&e->udst, nd, dd, &ok);
    dense_md(&e->bias, 1, bd, &ok);
    /* Weights as oneDNN indexes them: ([g,] oc, ic, k...). ONNX Conv stores [M, C/g, k...]
     * (dense in that order); ConvTranspose stores [C, M/g, k...], so o and i swap strides. */
    int wnd = (g > 1 ? 1 : 0) + nd, o = g > 1 ? 1 : 0;
    dnnl_dims_t ws;
    if (g > 1) wd[0] = g;
    wd[o] = mg;
    wd[o + 1] = cg;
    for (int i = 0; i < k->nsp; i++)
        wd[o + 2 + i] = k->k[i];
    int64_t s = 1;
    for (int i = k->nsp - 1; i >= 0; i--) {
        ws[o + 2 + i] = s;
        s *= k->k[i];
    }
    if (!k->transpose) {
        ws[o + 1] = ksz;
        ws[o] = cg * ksz;
    } else {
        ws[o] = ksz;
        ws[o + 1] = mg * ksz;
    }
    if (g > 1) ws[0] = mg * cg * ksz;
    if (dnnl_memory_desc_init_by_strides(&e->uwei, wnd, wd, dnnl_f32, ws) != dnnl_success) ok = 0;
    dnnl_memory_desc_t src_any, wei_any, dst_any;
    if (ok && (dnnl_memory_desc_init_by_tag(&src_any, nd, sd, dnnl_f32, dnnl_format_tag_any) ||
               dnnl_memory_desc_init_by_tag(&wei_any, wnd, wd, dnnl_f32, dnnl_format_tag_any) ||
               dnnl_memory_desc_init_by_tag(&dst_any, nd, dd, dnnl_f32, dnnl_format_tag_any)))
        ok = 0;
    if (force) {
        src_any = *force->src;
        wei_any = *force->wei;
        dst_any = *force->dst;
    }
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    if (ok && (dnnl_primitive_attr_create(&attr) ||
               dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)))
        ok = 0;
    if (ok && k->n_post && !set_post_ops(attr, k)) ok = 0;
    if (ok) {
        dnnl_status_t rc;
        if (!k->transpose) {
            dnnl_convolution_desc_t cd;
            rc = dnnl_dilated_convolution_forward_desc_init(
                &cd, dnnl_forward_inference, dnnl_convolution_direct, &src_any, &wei_any,
                k->has_bias ? &e->bias : NULL, &dst_any, strides, dil, pl, pr);
            if (rc == dnnl_success)
                rc = qp_dnnl_pd_create(&pd, &cd, attr, force ? force->impl : NULL);
        } else {
            dnnl_deconvolution_desc_t cd;
            rc = dnnl_dilated_deconvolution_forward_desc_init(
                &cd, dnnl_forward_inference, dnnl_deconvolution_direct, &src_any, &wei_any,
                k->has_bias ? &e->bias : NULL, &dst_any, strides, dil, pl, pr);
            if (rc == dnnl_success)
                rc = qp_dnnl_pd_create(&pd, &cd, attr, force ? force->impl : NULL);
        }
        if (rc != dnnl_success) ok = 0;
    }
    if (ok) {
        qp_dnnl_pd_impl_name(pd, e->impl, sizeof e->impl);
        e->src = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
        e->wei = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        e->dst = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
        e->scr = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        e->src_bytes = qp_dnnl_md_bytes(&e->src);
        e->dst_bytes = qp_dnnl_md_bytes(&e->dst);
        e->wei_bytes = qp_dnnl_md_bytes(&e->wei);
        e->scr_bytes = qp_dnnl_md_bytes(&e->scr);
        if (dnnl_primitive_create(&e->prim, pd) != dnnl_success) ok = 0;
    }
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    if (ok && !dnnl_memory_desc_equal(&e->usrc, &e->src))
        e->rsrc = make_reorder(&e->usrc, &e->src, &ok);
    if (ok && !dnnl_memory_desc_equal(&e->udst, &e->dst))
        e->rdst = make_reorder(&e->dst, &e->udst, &ok);
    if (ok) e->rwei = make_reorder(&e->uwei, &e->wei, &ok);
    int has_sum = 0;
    for (int i = 0; i < k->n_post; i++)
        has_sum |= k->post_kind[i] == QP_CONV_POST_SUM;
    if (ok && has_sum && e->rdst) e->rres = make_reorder(&e->udst, &e->dst, &ok);
    struct {
        dnnl_memory_t *m;
        const dnnl_memory_desc_t *md;
    } mems[] = {{&e->m_usrc, &e->usrc}, {&e->m_src, &e->src},   {&e->m_uwei, &e->uwei},
                {&e->m_wei, &e->wei},   {&e->m_bias, &e->bias}, {&e->m_dst, &e->dst},
                {&e->m_udst, &e->udst}, {&e->m_scr, &e->scr}};
    for (size_t i = 0; ok && i < sizeof mems / sizeof mems[0]; i++)
        if (dnnl_memory_create(mems[i].m, mems[i].md, eng, DNNL_MEMORY_NONE) != dnnl_success)
            ok = 0;
    if (ok && dnnl_stream_create(&e->stream, eng, dnnl_stream_default_flags) != dnnl_success)
        ok = 0;
    if (ok && pthread_mutex_init(&e->lock, NULL) != 0) ok = 0;
    qp_dnnl_threads_pop(saved);
    if (!ok) {
        entry_free(e);
        return NULL;
    }
    return e;
}

/* The entry for `nthr` threads on `lane`: the primary's layouts, its own primitive objects and
 * lock (qp_session_options.lane). */
static struct conv_entry *entry_for(const struct conv_key *primary, int nthr, int lane) {
    struct conv_entry *pe = qp_dnnl_cache_get(primary, sizeof *primary, entry_build, NULL);
    if (!pe || (nthr == primary->nthr && lane == primary->lane)) return pe;
    struct conv_key k = *primary;
    k.nthr = nthr;
    k.lane = lane;
    struct conv_force f = {&pe->src, &pe->wei, &pe->dst, pe->impl};
    return qp_dnnl_cache_get(&k, sizeof k, entry_build, &f);
}

static size_t entry_scratch(const struct conv_entry *e, size_t *off_dst, size_t *off_scr) {
    size_t a = e->rsrc ? qp_dnnl_align(e->src_bytes) : 0;
    size_t b = e->rdst ? qp_dnnl_align(e->dst_bytes) : 0;
    *off_dst = a;
    *off_scr = a + b;
    return a + b + qp_dnnl_align(e->scr_bytes);
}

/* How an activation layout addresses element (b, c, pixel): b * sn + (c / blk) * sc + pixel * sp
 * + c % blk, the pixels (spatial positions) dense and in order. */
enum act_kind { ACT_PLANAR, ACT_BLOCKED, ACT_CHANNELS_LAST };
struct act_layout {
    enum act_kind kind;
    int64_t blk, sn, sc, sp;
};

/* Reads md as one of: planar (NCHW...: blk 1, sp 1), one inner block over channels (nChw8c,
 * nChw16c: sp = blk) or channels last (NHWC: blk = the padded channel count, sp >= it). 0 for
 * anything else. */
static int act_layout_of(const dnnl_memory_desc_t *md, struct act_layout *l) {
    if (md->format_kind != dnnl_blocked || md->ndims < 3) return 0;
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    const dnnl_dim_t *st = b->strides;
    int nd = md->ndims;
    if (b->inner_nblks == 1 && b->inner_idxs[0] == 1)
        *l = (struct act_layout){ACT_BLOCKED, b->inner_blks[0], 0, 0, b->inner_blks[0]};
    else if (b->inner_nblks == 0 && st[nd - 1] == 1)
        *l = (struct act_layout){ACT_PLANAR, 1, 0, 0, 1};
    else if (b->inner_nblks == 0 && st[1] == 1 && st[nd - 1] >= md->padded_dims[1])
        *l = (struct act_layout){ACT_CHANNELS_LAST, md->padded_dims[1], 0, 0, st[nd - 1]};
    else
        return 0;
    if (st[nd - 1] != l->sp) return 0;
    for (int i = nd - 2; i >= 2; i--)
        if (st[i] != st[i + 1] * md->padded_dims[i + 1]) return 0;
    l->sn = st[0];
    l->sc = st[1]; /* channels last: never used (every channel is in block 0) */
    return 1;
}

/* The epilogue's view of a destination layout: planar or channels in blocks of one size, the
 * spatial positions `blk` elements apart. */
static int epilogue_layout(const dnnl_memory_desc_t *md, int64_t *blk, int64_t *sn, int64_t *sc) {
    struct act_layout l;
    if (!act_layout_of(md, &l) || l.kind == ACT_CHANNELS_LAST) return 0;
    *blk = l.blk;
    *sn = l.sn;
    *sc = l.sc;
    return 1;
}

/* A source or destination layout the Winograd path reads and writes (struct qp_wino_layout):
 * 4-D, plain NCHW, channel blocks of a multiple of 8 (nChw8c on AVX2, nChw16c on AVX-512) or
 * channels last (NHWC, which oneDNN's brgemm convolutions pick on AVX-512). */
static int wino_layout(const dnnl_memory_desc_t *md, struct qp_wino_layout *w) {
    struct act_layout l;
    if (md->ndims != 4 || !act_layout_of(md, &l)) return 0;
    if (l.kind == ACT_BLOCKED && l.blk % 8 != 0) return 0;
    /* planar: the channel planes dense too (qp_wino_layout has no other channel stride) */
    if (l.kind == ACT_PLANAR && l.sc != md->format_desc.blocking.strides[2] * md->padded_dims[2])
        return 0;
    *w = (struct qp_wino_layout){l.blk, l.sn, l.sc, l.sp};
    return 1;
}

/* ---- subsampled 1x1 convolutions -------------------------------------------------------------
 * oneDNN runs a 1x1 convolution with stride 2 (ResNet's projections: 512 -> 1024 channels from
 * 28x28 to 14x14) by copying the strided source pixels per thread inside the primitive, which
 * scaled badly to two cores on the AVX-512 EPYC (0.9-1.2 ms against 0.8 for the same product at
 * stride 1). Gathering the pixels first, then running a stride-1 primitive on the dense result
 * (the same weights, destination layout and implementation; none where that implementation
 * does not take the dense form) computes the same sums faster.
 * QP_CONV_SUBSAMPLE=0 in the environment turns it off. */

static int sub_off(void) {
    const char *e = getenv("QP_CONV_SUBSAMPLE");
    return e && strcmp(e, "0") == 0;
}

/* The dense source of the stride-1 primitive: the primary's source layout (channels last or
 * channel blocks of 8 or 16) on the output's pixel grid; 0 for other layouts. */
static int sub_src_md(const struct conv_key *k, const dnnl_memory_desc_t *src,
                      dnnl_memory_desc_t *out) {
    struct act_layout l;
    if (src->ndims != 4 || !act_layout_of(src, &l)) return 0;
    dnnl_format_tag_t tag = l.kind == ACT_CHANNELS_LAST && l.sp == src->padded_dims[1] ? dnnl_acdb
                            : l.kind == ACT_BLOCKED && l.blk == 16 ? dnnl_aBcd16b
                            : l.kind == ACT_BLOCKED && l.blk == 8  ? dnnl_aBcd8b
                                                                   : 0;
    dnnl_dims_t d = {k->n, k->c, k->out[0], k->out[1]};
    return tag && dnnl_memory_desc_init_by_tag(out, 4, d, dnnl_f32, tag) == dnnl_success;
}

/* Whether key k (with primary entry e) is a subsampled 1x1 convolution this path takes; fills
 * the stride-1 key sk and returns its primary entry (the primary's weights and destination
 * layouts, the dense source), or NULL. */
static struct conv_entry *sub_prepare(const struct conv_key *k, const struct conv_entry *e,
                                      struct conv_key *sk) {
    if (sub_off() || k->transpose || k->group != 1 || k->nsp != 2) return NULL;
    int strided = 0;
    for (int i = 0; i < 2; i++) {
        if (k->k[i] != 1 || k->dil[i] != 1 || k->pb[i] != 0) return NULL;
        strided |= k->stride[i] > 1;
    }
    dnnl_memory_desc_t src;
    if (!strided || !sub_src_md(k, &e->src, &src)) return NULL;
    *sk = *k;
    sk->sub = 1;
    for (int i = 0; i < 2; i++) {
        sk->in[i] = k->out[i];
        sk->stride[i] = 1;
        sk->pe[i] = 0;
    }
    struct conv_force f = {&src, &e->wei, &e->dst, e->impl}; /* never a slower fallback */
    struct conv_entry *se = qp_dnnl_cache_get(sk, sizeof *sk, entry_build, &f);
    if (!se || !dnnl_memory_desc_equal(&se->src, &src) ||
        !dnnl_memory_desc_equal(&se->wei, &e->wei) || !dnnl_memory_desc_equal(&se->dst, &e->dst))
        return NULL;
    return se;
}

/* The source's strided pixels (layout `from`, the primary's) into the dense `to` (layout of
 * sub_src_md): per image, channel block and output row, each output pixel's block of channels
 * copied; rows split over the threads. */
static void sub_gather(const struct dnnl_conv_state *s, const dnnl_memory_desc_t *from,
                       const dnnl_memory_desc_t *to, const float *x, float *y, int n_threads) {
    struct act_layout a, b;
    if (!act_layout_of(from, &a) || !act_layout_of(to, &b)) return; /* sub_src_md made both */
    const struct conv_key *k = &s->key;
    int64_t blk = a.blk, nb = a.kind == ACT_CHANNELS_LAST ? 1 : from->padded_dims[1] / blk;
    int64_t oh = k->out[0], ow = k->out[1], iw = k->in[1], sh = k->stride[0], sw = k->stride[1];
    int64_t rows = k->n * nb * oh;
    int nt = rows * ow * blk < 65536 ? 1 : n_threads;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t n = r / (nb * oh), cb = r / oh % nb, y0 = r % oh;
        const float *src = x + n * a.sn + cb * a.sc + y0 * sh * iw * a.sp;
        float *dst = y + n * b.sn + cb * b.sc + y0 * ow * b.sp;
        for (int64_t x0 = 0; x0 < ow; x0++)
            memcpy(dst + x0 * b.sp, src + x0 * sw * a.sp, (size_t)blk * sizeof *dst);
    }
}

/* The stride-1 entry for nthr threads on lane (as entry_for does for the primary). */
static struct conv_entry *sub_for(const struct dnnl_conv_state *s, int nthr, int lane) {
    if (!s->sub) return NULL;
    struct conv_entry *e = lane                         ? entry_for(&s->sub_key, nthr, lane)
                           : nthr == s->sub_key.nthr    ? s->sub_entry
                           : nthr == 1 && s->sub_entry1 ? s->sub_entry1
                                                        : entry_for(&s->sub_key, nthr, 0);
    return e && s->off_scr + qp_dnnl_align(e->scr_bytes) <= s->off_sub ? e : NULL;
}

/* memcpy split over threads in fixed 64 KB pieces (a plain copy: the result does not depend on
 * the split). The residual of a fused sum is copied into the destination before every run (up
 * to 3 MB per convolution on ResNet-50: one thread's copy cost ~2% of the network) unless the
 * memory plan gave the output the residual's bytes (qp_dnnl_conv_sum_in_place). */
#define COPY_PIECE 65536

static void par_copy(void *dst, const void *src, size_t n, int n_threads) {
    int64_t pieces = (int64_t)((n + COPY_PIECE - 1) / COPY_PIECE);
    int nt = pieces < 4 ? 1 : n_threads;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t k = 0; k < pieces; k++) {
        size_t off = (size_t)k * COPY_PIECE, len = n - off < COPY_PIECE ? n - off : COPY_PIECE;
        memcpy((char *)dst + off, (const char *)src + off, len);
    }
}

/* Pixels per epilogue task. */
#define EP_CHUNK 1024

/* bias + post-operations on a destination laid out as epilogue_layout describes, in memory
 * order, one operation at a time over a chunk (the same float operations, in the same order, as
 * qp_conv_post_ref), channels of a partial last block (padding) left alone. Every element is
 * computed alike whatever the thread count. */
static void run_epilogue(const struct dnnl_conv_state *s, float *y, const float *bias,
                         int n_threads) {
    int64_t n = s->ref.n, m = s->ref.m, sp = s->ref.out_sz, blk = s->blk;
    int64_t nb = (m + blk - 1) / blk, nch = (sp + EP_CHUNK - 1) / EP_CHUNK, tasks = n * nb * nch;
    int nt = n * m * sp < 65536 ? 1 : n_threads;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t ch = t % nch, cb = t / nch % nb, b = t / nch / nb, c0 = cb * blk;
        int64_t p0 = ch * EP_CHUNK, p1 = p0 + EP_CHUNK < sp ? p0 + EP_CHUNK : sp;
        float *v = y + b * s->ep_sn + cb * s->ep_sc + p0 * blk;
        int64_t len = (p1 - p0) * blk;
        if (m - c0 < blk) { /* the partial last block */
            for (int64_t i = 0; i < len; i += blk)
                for (int64_t j = 0; j < m - c0; j++)
                    v[i + j] = qp_conv_post_ref(s->n_post, s->post,
                                                v[i + j] + (bias ? bias[c0 + j] : 0.0f), 0.0f);
            continue;
        }
        if (bias && blk == 1) {
            float a = bias[c0];
#pragma omp simd
            for (int64_t i = 0; i < len; i++)
                v[i] = v[i] + a;
        } else if (bias) {
            const float *bb = bias + c0;
            for (int64_t i = 0; i < len; i += blk)
#pragma omp simd
                for (int64_t j = 0; j < blk; j++)
                    v[i + j] = v[i + j] + bb[j];
        }
        for (int k = 0; k < s->n_post; k++) {
            const struct qp_conv_post *q = &s->post[k];
            float al = q->alpha, be = q->beta;
            switch (q->kind) {
            case QP_CONV_POST_LINEAR:
#pragma omp simd
                for (int64_t i = 0; i < len; i++)
                    v[i] = al * v[i] + be;
                break;
            case QP_CONV_POST_RELU:
                /* x > 0 ? x : al * x as a bit select: GCC does not vectorize the conditional
                 * ("control flow in loop"), and a max would change -0 and NaN. */
#pragma omp simd
                for (int64_t i = 0; i < len; i++) {
                    float x = v[i], neg = al * x;
                    uint32_t xb, negb, keep = 0u - (uint32_t)(x > 0);
                    memcpy(&xb, &x, sizeof xb);
                    memcpy(&negb, &neg, sizeof negb);
                    uint32_t r = (xb & keep) | (negb & ~keep);
                    memcpy(&v[i], &r, sizeof r);
                }
                break;
            default: /* the rest, one operation at a time through the reference */
                for (int64_t i = 0; i < len; i++)
                    v[i] = qp_conv_post_ref(1, q, v[i], 0.0f);
                break;
            }
        }
    }
}

/* QP_DECONV_PATCH=0 keeps kernel == stride ConvTranspose on oneDNN (for measurements). */
static int patch_off(void) {
    const char *e = getenv("QP_DECONV_PATCH");
    return e && strcmp(e, "0") == 0;
}

/* The kernel == stride ConvTranspose state: rearranged weights, the plain epilogue. */
static enum qp_status prepare_patch(struct qp_kprep *p, const struct qp_conv_state *ref, int n_post,
                                    const struct qp_conv_post *post) {
    size_t head = qp_dnnl_align(sizeof(struct dnnl_conv_state));
    struct dnnl_conv_state *s = aligned_alloc(64, head + qp_dnnl_align(qp_patch_weight_bytes(ref)));
    if (!s) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    memset(s, 0, sizeof *s);
    s->ref = *ref;
    s->n_post = n_post;
    if (n_post) memcpy(s->post, post, (size_t)n_post * sizeof *post);
    s->epilogue = ref->has_bias || n_post;
    s->blk = 1;
    s->ep_sn = ref->m * ref->out_sz;
    s->ep_sc = ref->out_sz;
    s->small =
        (double)ref->n * (double)ref->m * (double)ref->in_sz * (double)ref->c * (double)ref->k_sz <
        (double)QP_CONV_SMALL_MACS;
    s->patch = 1;
    s->use_dnnl = 1; /* the fast path, as Winograd's: fusable; no blocked layouts (no entry) */
    s->wei_off = head;
    qp_patch_weights(ref, p->in[1]->data, (float *)((char *)s + head));
    s->scratch = qp_patch_scratch_bytes(ref);
    p->scratch = s->scratch;
    p->state = s;
    return QP_OK;
}

static enum qp_status prepare(struct qp_kprep *p, int transpose, int n_post,
                              const struct qp_conv_post *post) {
    struct qp_conv_state ref;
    enum qp_status st = qp_conv_geometry(p, transpose, &ref);
    if (st) return st;
    struct conv_key key;
    memset(&key, 0, sizeof key);
    int has_sum = 0;
    if (n_post < 0 || n_post > QP_CONV_MAX_POST)
        return qp_error_set(p->err, QP_ERR_INTERNAL, "%d post-operations", n_post);
    for (int i = 0; i < n_post; i++) {
        if (post[i].kind < 0 || post[i].kind >= QP_CONV_POST_COUNT ||
            (post[i].kind == QP_CONV_POST_SUM && has_sum++))
            return qp_error_set(p->err, QP_ERR_INTERNAL, "bad post-operation %d", i);
        key.post_kind[i] = post[i].kind;
        key.post_alpha[i] = post[i].alpha;
        key.post_beta[i] = post[i].beta;
    }
    key.n_post = n_post;
    /* oneDNN 2.6 computes a deconvolution as a backward-data convolution and adds the bias and
     * post-ops with reference loops (PaddleOCR det's 320x320x24 layer: 250 ms instead of
     * 2.5 ms), so a ConvTranspose gives neither to oneDNN: the epilogue does both in C. A
     * residual (SUM) is not taken there. */
    if (transpose) {
        if (has_sum)
            return qp_error_set(p->err, QP_ERR_INTERNAL, "ConvTranspose: no residual post-op");
        memset(key.post_kind, 0, sizeof key.post_kind);
        memset(key.post_alpha, 0, sizeof key.post_alpha);
        memset(key.post_beta, 0, sizeof key.post_beta);
        key.n_post = 0;
    }
    int usable = qp_dnnl_enabled() && p->in[1]->is_const && (!ref.has_bias || p->in[2]->is_const);
    if (usable && transpose && !patch_off() && qp_patch_takes(&ref))
        return prepare_patch(p, &ref, n_post, post);
    struct conv_entry *e = NULL;
    if (usable) {
        key.transpose = transpose;
        key.nthr = qp_dnnl_default_threads();
        key.nsp = ref.w.nsp;
        key.has_bias = transpose ? 0 : ref.has_bias;
        key.n = ref.n;
        key.c = ref.c;
        key.m = ref.m;
        key.group = ref.group;
        for (int i = 0; i < ref.w.nsp; i++) {
            key.in[i] = ref.w.in[i];
            key.k[i] = ref.w.k[i];
            key.out[i] = ref.w.out[i];
            key.stride[i] = ref.w.stride[i];
            key.dil[i] = ref.w.dil[i];
            key.pb[i] = ref.w.pad_begin[i];
            /* oneDNN wants the right padding that makes its size formula give ONNX's output. */
            int64_t ek = (ref.w.k[i] - 1) * ref.w.dil[i] + 1;
            key.pe[i] =
                transpose
                    ? (ref.w.in[i] - 1) * ref.w.stride[i] + ek - ref.w.pad_begin[i] - ref.w.out[i]
                    : (ref.w.out[i] - 1) * ref.w.stride[i] + ek - ref.w.in[i] - ref.w.pad_begin[i];
        }
        e = entry_for(&key, key.nthr, 0);
    }
    int64_t blk = 1, ep_sn = 0, ep_sc = 0;
    if (e && transpose && (ref.has_bias || n_post) &&
        !epilogue_layout(&e->dst, &blk, &ep_sn, &ep_sc))
        e = NULL; /* reference kernel */
    /* Winograd: chosen from the shapes and the CPU (and QP_NO_WINOGRAD / QP_WINOGRAD), never
     * from timings, so that every run of the node, fused or not, overlaid or not, computes
     * alike. It joins the runtime's blocked chain when it can read and write the layouts
     * oneDNN picked (wino_layout): else it advertises none and works on NCHW only. */
    struct qp_wino wp = {0};
    struct qp_wino_layout wl_src = {0, 0, 0, 0}, wl_dst = {0, 0, 0, 0};
    int wino =
        usable && !transpose && !qp_wino_disabled() && qp_wino_cpu_prefers() && qp_wino_takes(&ref);
    int wino_blocked = wino && e && wino_layout(&e->src, &wl_src) && wino_layout(&e->dst, &wl_dst);
    size_t off_dst = 0, off_scr = 0, scratch = 0, wei_bytes = 0, off_sub = 0;
    struct conv_entry *e1 = NULL, *se = NULL, *se1 = NULL;
    struct conv_key sub_key;
    memset(&sub_key, 0, sizeof sub_key);
    if (wino) {
        qp_wino_plan(&ref, qp_dnnl_default_threads(), &wp);
        scratch = qp_wino_scratch_bytes(&wp);
        wei_bytes = qp_wino_weight_bytes(&wp);
    } else if (e) {
        scratch = entry_scratch(e, &off_dst, &off_scr);
        /* The 1-thread variant (the common other count) is made now too, so its scratchpad is
         * known; it has the primary's layouts, hence the same reorders and offsets. Counts whose
         * scratchpad does not fit run the reference kernel. */
        e1 = key.nthr != 1 ? entry_for(&key, 1, 0) : e;
        if (e1 && qp_dnnl_align(e1->scr_bytes) > qp_dnnl_align(e->scr_bytes))
            scratch = off_scr + qp_dnnl_align(e1->scr_bytes);
        se = sub_prepare(&key, e, &sub_key);
        se1 = se && key.nthr != 1 ? entry_for(&sub_key, 1, 0) : se;
        for (int i = 0; se && i < 2; i++) {
            struct conv_entry *v = i ? se1 : se;
            if (v && off_scr + qp_dnnl_align(v->scr_bytes) > scratch)
                scratch = off_scr + qp_dnnl_align(v->scr_bytes);
        }
        off_sub = scratch;
        if (se) scratch += qp_dnnl_align(se->src_bytes);
    }
    if (e && !wino) wei_bytes = e->wei_bytes;
    size_t head = qp_dnnl_align(sizeof(struct dnnl_conv_state));
    struct dnnl_conv_state *s = aligned_alloc(64, head + qp_dnnl_align(wei_bytes));
    if (!s) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    memset(s, 0, sizeof *s);
    s->ref = ref;
    s->n_post = n_post;
    s->has_sum = has_sum;
    s->small = (double)ref.n * (double)ref.m * (double)ref.out_sz * (double)(ref.c / ref.group) *
                   (double)ref.k_sz <
               (double)QP_CONV_SMALL_MACS;
    if (n_post) memcpy(s->post, post, (size_t)n_post * sizeof *post);
    s->epilogue = transpose && (ref.has_bias || n_post);
    s->blk = blk;
    s->ep_sn = ep_sn;
    s->ep_sc = ep_sc;
    p->state = s;
    if (wino) {
        s->wino = 1;
        s->wp = wp;
        s->entry = wino_blocked ? e : NULL; /* the layouts only */
        s->wl_src = wl_src;
        s->wl_dst = wl_dst;
        s->wei_off = head;
        s->scratch = scratch;
        atomic_fetch_add(&n_weight_reorders, 1);
        qp_wino_weights(&wp, p->in[1]->data, (float *)((char *)s + head));
        s->use_dnnl = 1;
        p->scratch = scratch;
        return QP_OK;
    }
    if (!e) return QP_OK;
    s->key = key;
    s->entry = e;
    s->entry1 = e1;
    s->sub = se != NULL;
    s->sub_key = sub_key;
    s->sub_entry = se;
    s->sub_entry1 = se1;
    s->off_sub = off_sub;
    s->wei_off = head;
    s->off_dst = off_dst;
    s->off_scr = off_scr;
    s->scratch = scratch;
    /* Weights into the primitive's layout, once. */
    pthread_mutex_lock(&e->lock);
    int saved = qp_dnnl_threads_push(e->nthr);
    dnnl_memory_set_data_handle(e->m_uwei, p->in[1]->data);
    dnnl_memory_set_data_handle(e->m_wei, (char *)s + head);
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, e->m_uwei}, {DNNL_ARG_TO, e->m_wei}};
    atomic_fetch_add(&n_weight_reorders, 1);
    dnnl_status_t rc = dnnl_primitive_execute(e->rwei, e->stream, 2, args);
    if (rc == dnnl_success) rc = dnnl_stream_wait(e->stream);
    qp_dnnl_threads_pop(saved);
    pthread_mutex_unlock(&e->lock);
    if (rc != dnnl_success) return QP_OK; /* reference kernel */
    s->use_dnnl = 1;
    p->scratch = scratch;
    return QP_OK;
}

enum qp_status qp_k_dnnl_conv_prepare(struct qp_kprep *p) {
    return prepare(p, 0, 0, NULL);
}

enum qp_status qp_k_dnnl_conv_transpose_prepare(struct qp_kprep *p) {
    return prepare(p, 1, 0, NULL);
}

enum qp_status qp_dnnl_conv_fused_prepare(struct qp_kprep *p, int transpose, int n_post,
                                          const struct qp_conv_post *post) {
    if (n_post && !post) return qp_error_set(p->err, QP_ERR_INTERNAL, "no post-operations");
    return prepare(p, transpose ? 1 : 0, n_post, post);
}

enum qp_status qp_dnnl_conv_defer_prepare(struct qp_kprep *p, int transpose) {
    struct qp_conv_state ref;
    enum qp_status st = qp_conv_geometry(p, transpose ? 1 : 0, &ref);
    if (st) return st;
    struct dnnl_conv_state *s = calloc(1, sizeof *s);
    if (!s) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    s->ref = ref;
    s->deferred = 1;
    p->state = s;
    p->scratch = 0;
    return QP_OK;
}

int qp_dnnl_conv_state_deferred(const void *state) {
    return state && ((const struct dnnl_conv_state *)state)->deferred;
}

float qp_conv_post_ref(int n_post, const struct qp_conv_post *post, float x, float residual) {
    for (int i = 0; i < n_post; i++) {
        const struct qp_conv_post *q = &post[i];
        switch (q->kind) {
        case QP_CONV_POST_LINEAR:
            x = q->alpha * x + q->beta;
            break;
        case QP_CONV_POST_RELU:
            x = x > 0 ? x : q->alpha * x;
            break;
        case QP_CONV_POST_CLIP:
            x = x < q->alpha ? q->alpha : x > q->beta ? q->beta : x;
            break;
        case QP_CONV_POST_SIGMOID:
            x = 1.0f / (1.0f + expf(-x));
            break;
        case QP_CONV_POST_HARDSWISH: {
            float h = x + 3.0f;
            h = h < 0 ? 0 : h > 6 ? 6 : h;
            x = x * h / 6.0f;
            break;
        }
        case QP_CONV_POST_SUM:
            x += residual;
            break;
        case QP_CONV_POST_GELU:
            x = 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
            break;
        case QP_CONV_POST_GELU_TANH: {
            float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
            x = 0.5f * x * (1.0f + tanhf(u));
            break;
        }
        default:
            break;
        }
    }
    return x;
}

/* The reference convolution, then the post-operations in C. */
static enum qp_status run_ref(const struct qp_krun *r, int transpose) {
    const struct dnnl_conv_state *s = r->state;
    enum qp_status st = transpose ? qp_k_conv_transpose_run(r) : qp_k_conv_run(r);
    if (st != QP_OK || !s->n_post) return st;
    float *y = r->out[0]->data;
    const float *res = s->has_sum ? r->in[3]->data : NULL;
    int64_t n = (int64_t)r->out[0]->numel;
    int nt = n < 65536 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < n; i++)
        y[i] = qp_conv_post_ref(s->n_post, s->post, y[i], res ? res[i] : 0.0f);
    return QP_OK;
}

static struct qp_wino_layout plain_layout(int64_t channels, int64_t size) {
    struct qp_wino_layout l = {1, channels * size, size, 1};
    return l;
}

static enum qp_status run_wino(const struct qp_krun *r) {
    const struct dnnl_conv_state *s = r->state;
    const struct qp_wino *wp = &s->wp;
    struct qp_wino_io io = {
        .x = r->in[0]->data,
        .bias = s->ref.has_bias ? r->in[2]->data : NULL,
        .res = s->has_sum ? r->in[3]->data : NULL,
        .y = r->out[0]->data,
        .lx = s->src_blocked ? s->wl_src : plain_layout(wp->c, wp->h * wp->w),
        .lres = s->res_blocked ? s->wl_dst : plain_layout(wp->m, wp->ho * wp->wo),
        .ly = s->dst_blocked ? s->wl_dst : plain_layout(wp->m, wp->ho * wp->wo),
        .n_post = s->n_post,
        .post = s->post,
    };
    qp_wino_run(wp, (const float *)((const char *)s + s->wei_off), &io, r->scratch,
                s->small ? 1 : r->n_threads);
    return QP_OK;
}

static enum qp_status run_patch(const struct qp_krun *r) {
    const struct dnnl_conv_state *s = r->state;
    int nthr = s->small ? 1 : r->n_threads;
    float *y = r->out[0]->data;
    qp_patch_run(&s->ref, r->in[0]->data, (const float *)((const char *)s + s->wei_off), y,
                 r->scratch, nthr);
    if (s->epilogue) run_epilogue(s, y, s->ref.has_bias ? r->in[2]->data : NULL, nthr);
    return QP_OK;
}

static enum qp_status run(const struct qp_krun *r, int transpose) {
    const struct dnnl_conv_state *s = r->state;
    if (s->deferred)
        return qp_error_set(r->err, QP_ERR_INTERNAL, "%s run before it was prepared",
                            transpose ? "ConvTranspose" : "Conv");
    if (s->patch) return run_patch(r);
    if (s->wino) return run_wino(r);
    struct conv_entry *e = NULL;
    /* A small convolution runs on one thread whatever the session's count: a parallel region
     * (wake-up, barrier) would cost more than it saves. Same layouts, same results. */
    int nthr = s->small ? 1 : r->n_threads;
    if (s->use_dnnl) {
        e = r->lane                  ? entry_for(&s->key, nthr, r->lane)
            : nthr == s->key.nthr    ? s->entry
            : nthr == 1 && s->entry1 ? s->entry1
                                     : entry_for(&s->key, nthr, 0);
        if (e && s->off_scr + qp_dnnl_align(e->scr_bytes) > s->scratch) e = NULL;
        /* No variant for this count (oneDNN's implementation of the primary does not take it,
         * or its scratchpad does not fit): the primary primitive runs with its own thread count
         * instead. The reference kernel would sum in another order, so results would depend on
         * the thread count, and it cannot read blocked tensors. */
        if (!e) e = s->entry;
    }
    if (!e) return run_ref(r, transpose);
    char *scratch = r->scratch;
    void *x = r->in[0]->data, *y = r->out[0]->data;
    /* A subsampled 1x1 convolution whose source arrives in the primary's layout: the gathered
     * pixels and the stride-1 primitive. */
    struct conv_entry *se = e->rsrc && !s->src_blocked ? NULL : sub_for(s, e->nthr, r->lane);
    if (se) {
        sub_gather(s, &e->src, &se->src, x, (float *)(void *)(scratch + s->off_sub), e->nthr);
        x = scratch + s->off_sub;
        e = se;
    }
    int rsrc = !se && e->rsrc && !s->src_blocked, rdst = e->rdst && !s->dst_blocked;
    void *dbuf = rdst ? scratch + s->off_dst : y;
    pthread_mutex_lock(&e->lock);
    int saved = qp_dnnl_threads_push(e->nthr);
    dnnl_status_t rc = dnnl_success;
    dnnl_memory_set_data_handle(e->m_usrc, x);
    dnnl_memory_set_data_handle(e->m_src, rsrc ? scratch : x);
    dnnl_memory_set_data_handle(e->m_wei, (char *)s + s->wei_off);
    if (s->key.has_bias) dnnl_memory_set_data_handle(e->m_bias, r->in[2]->data);
    dnnl_memory_set_data_handle(e->m_dst, dbuf);
    dnnl_memory_set_data_handle(e->m_udst, y);
    if (e->scr_bytes) dnnl_memory_set_data_handle(e->m_scr, scratch + s->off_scr);
    if (rsrc) {
        dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, e->m_usrc}, {DNNL_ARG_TO, e->m_src}};
        rc = dnnl_primitive_execute(e->rsrc, e->stream, 2, a);
    }
    if (s->has_sum) {
        /* The sum post-op accumulates onto what the destination holds: the residual (already
         * there when the memory plan gave the output the residual's bytes). */
        const struct qp_kt *res = r->in[3];
        if (dbuf == res->data) {
            /* in place (qp_dnnl_conv_sum_in_place) */
        } else if (s->res_blocked) {
            par_copy(dbuf, res->data, e->dst_bytes, e->nthr);
        } else if (e->rres) {
            dnnl_memory_set_data_handle(e->m_udst, res->data);
            dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, e->m_udst}, {DNNL_ARG_TO, e->m_dst}};
            if (rc == dnnl_success) rc = dnnl_primitive_execute(e->rres, e->stream, 2, a);
            dnnl_memory_set_data_handle(e->m_udst, y);
        } else if (res->nbytes) {
            par_copy(dbuf, res->data, res->nbytes, e->nthr);
        }
    }
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, e->m_src},
                               {DNNL_ARG_WEIGHTS, e->m_wei},
                               {DNNL_ARG_DST, e->m_dst},
                               {DNNL_ARG_SCRATCHPAD, e->m_scr},
                               {DNNL_ARG_BIAS, e->m_bias}};
    if (rc == dnnl_success)
        rc = dnnl_primitive_execute(e->prim, e->stream, s->key.has_bias ? 5 : 4, args);
    if (rc == dnnl_success && s->epilogue) {
        rc = dnnl_stream_wait(e->stream);
        /* The primitive ran with e->nthr threads; the epilogue's split cannot change results. */
        if (rc == dnnl_success)
            run_epilogue(s, dbuf, s->ref.has_bias ? r->in[2]->data : NULL, e->nthr);
    }
    if (rc == dnnl_success && rdst) {
        dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, e->m_dst}, {DNNL_ARG_TO, e->m_udst}};
        rc = dnnl_primitive_execute(e->rdst, e->stream, 2, a);
    }
    if (rc == dnnl_success) rc = dnnl_stream_wait(e->stream);
    qp_dnnl_threads_pop(saved);
    pthread_mutex_unlock(&e->lock);
    if (rc != dnnl_success)
        return qp_error_set(r->err, QP_ERR_INTERNAL, "oneDNN %s failed (status %d)",
                            transpose ? "deconvolution" : "convolution", (int)rc);
    return QP_OK;
}

enum qp_status qp_k_dnnl_conv_run(const struct qp_krun *r) {
    return run(r, 0);
}

enum qp_status qp_k_dnnl_conv_transpose_run(const struct qp_krun *r) {
    return run(r, 1);
}

size_t qp_dnnl_conv_weight_reorders(void) {
    return atomic_load(&n_weight_reorders);
}

int qp_dnnl_conv_state_uses_dnnl(const void *state) {
    return state && ((const struct dnnl_conv_state *)state)->use_dnnl;
}

int qp_dnnl_conv_state_uses_winograd(const void *state) {
    return state && ((const struct dnnl_conv_state *)state)->wino;
}

int qp_dnnl_conv_state_uses_patch(const void *state) {
    return state && ((const struct dnnl_conv_state *)state)->patch;
}

int qp_dnnl_conv_state_uses_subsample(const void *state) {
    return state && ((const struct dnnl_conv_state *)state)->sub;
}

const void *qp_dnnl_conv_blocked_dst(const void *state, size_t *bytes_out) {
    const struct dnnl_conv_state *s = state;
    if (!s || !s->use_dnnl || !s->entry || !s->entry->rdst) return NULL;
    *bytes_out = s->entry->dst_bytes;
    return &s->entry->dst;
}

int qp_dnnl_conv_accepts(const void *state, int input, const void *md) {
    const struct dnnl_conv_state *s = state;
    if (!s || !s->use_dnnl || !s->entry || !md) return 0;
    if (input == 0) return s->entry->rsrc && dnnl_memory_desc_equal(&s->entry->src, md);
    if (input == 3)
        return s->has_sum && s->entry->rdst && dnnl_memory_desc_equal(&s->entry->dst, md);
    return 0;
}

int qp_dnnl_conv_sum_in_place(const void *state) {
    const struct dnnl_conv_state *s = state;
    return s && s->has_sum && !s->deferred && !s->patch && (s->use_dnnl || s->wino) &&
           s->res_blocked == s->dst_blocked;
}

int qp_dnnl_conv_md_equal(const void *a, const void *b) {
    return a && b && (a == b || dnnl_memory_desc_equal(a, b));
}

void qp_dnnl_conv_set_blocked(void *state, int input, int on) {
    struct dnnl_conv_state *s = state;
    if (!s) return;
    if (input == 0)
        s->src_blocked = on;
    else if (input == 3)
        s->res_blocked = on;
    else if (input == -1)
        s->dst_blocked = on;
}
