/*
 * QConv: the fused integer convolution (int8_conv.h describes the op and its paths).
 *
 * prepare reads the constants (scales, zero points, int8 weights, bias), picks the path and, on
 * oneDNN, creates the primitive with channels-last (NHWC) source and destination and weights in
 * oneDNN's own layout (reordered once into the state); on the AVX2 path it packs the weights
 * for kernels/int8_gemm.h. Tensors stored NCHW are transposed to and from NHWC in scratch at
 * run; the runtime's rewrite keeps tensors between two QConv nodes NHWC so that happens only at
 * the boundaries of the integer regions.
 *
 * Real-valued semantics on every path: acc[oc] = sum (x - x_zp) * w, v = acc * x_scale *
 * w_scale[oc] + bias[oc], the post-operations in order (SUM adds r_scale * (r - r_zp)), then
 * y = saturate(round_half_even(v / y_scale) + y_zp), or v itself as float.
 */
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "kernels/dnnl_conv.h"
#include "kernels/dnnl_util.h"
#include "kernels/int8_conv.h"
#include "kernels/int8_gemm.h"
#include "kernels/int8_util.h"
#include "kernels/isa.h"
#include "kernels/kcheck.h"
#include "kernels/kernels.h"
#include "qmath/qparams.h"

struct i8_key {
    int32_t path, nthr, lane, nsp;
    int32_t src_dt, dst_dt, has_bias, src_zp_on;
    int64_t n, c, m, group;
    int64_t in[3], k[3], out[3], stride[3], dil[3], pb[3], pe[3];
    struct qp_i8_posts posts;
    int32_t transposed; /* a ConvTranspose: oneDNN's deconvolution */
    uint64_t osc_hash;  /* the output scales (baked into the primitive: oneDNN 2.6's int8
                           convolutions take no run-time scales) */
};

struct i8_entry {
    char impl[QP_DNNL_IMPL_NAME];
    dnnl_primitive_t prim;
    dnnl_memory_desc_t src, wei, dst, scr;
    size_t wei_bytes, scr_bytes;
    dnnl_memory_t m_src, m_wei, m_bias, m_dst, m_scr, m_osc, m_zp;
    dnnl_stream_t stream;
    pthread_mutex_t lock;
};

/* Below this many multiply-adds a QConv runs on one thread whatever the session's count (an
 * SE block's 1x1 on a pooled tensor: waking a second thread and oneDNN's parallel setup cost
 * more than they save). 8x dnnl_conv.c's float threshold: an int8 multiply-add is several times
 * cheaper; on PaddleOCR cls (AVX-512 VNNI, 2 threads) 2^18 / 2^20 / 2^21 / 2^22 gave 2.1 / 1.7 /
 * 1.5 / 1.8 ms per run, rec and det best at 2^21 too. The thread count of every run is then the
 * same for the node, so results do not depend on the session's. */
#define I8_SMALL_MACS (1 << 21)
/* The AVX2 depthwise kernel (float sums, four output pixels at a time) does fewer
 * multiply-adds a cycle than the GEMMs, so it takes the second thread from 2^20: on PaddleOCR
 * cls (AVX2 EPYC, 2 threads) 2^18 / 2^20 / 2^21 / 2^22 gave 1.94-1.97 / 1.82-1.84 / 1.83-1.85 /
 * 1.81-1.84 ms per run (its 200-channel 5x5 layers on 192 pixels ran 0.074 ms on one thread and
 * 0.120 on two) and rec 11.9-12.2 / 12.0-12.1 / 12.2-12.4 / 12.4-12.8 (its depthwise layers
 * have 2^21 and more). 2^18 was chosen for the int16 kernel before, which was half as fast. */
#define I8_SMALL_DW_MACS (1 << 20)

struct i8_state {
    struct qp_conv_state geo;
    enum qp_int8_path path;
    struct qp_i8_io io;
    int src_nhwc, dst_nhwc, res_nhwc;
    int transposed; /* attribute `transposed` 1: ConvTranspose's meaning and weights */
    /* A ConvTranspose whose kernel equals its stride (no padding, dilation or group): a 1x1
     * convolution to K * M channels (channel k * M + m: kernel position k of output channel m;
     * K the kernel's size) whose output pixels are then scattered, each to its own K output
     * pixels (patch_out). oneDNN's int8 deconvolution is several times slower on few output
     * channels (PaddleOCR det's last layer, 24 -> 1). */
    int patch;
    int64_t pk;
    struct qp_conv_state pgeo; /* the patch's 1x1 convolution (kgeo) */
    int direct; /* the primitive writes the output tensor itself (int8 or float32, NHWC) */
    int small;  /* fewer multiply-adds than I8_SMALL_MACS: one thread (as dnnl_conv.c does) */
    struct i8_key key;
    struct i8_entry *entry;
    size_t off_wei, off_osc, off_psc, off_bias, off_wraw, off_wsc; /* in the state blob */
    size_t off_src, off_dst, off_scr, off_pat;                     /* in scratch */
    /* The AVX2 path: how (enum avx2_kind), the packed weights (blob), the residual and im2col
     * buffers (scratch), the im2col rows' length. */
    int avx2;
    size_t off_pack, off_res, off_col;
    int64_t ldk;
    int chunked;     /* im2col in chunks (qp_i8g_conv_gemm: the packed weights stay in cache) */
    int col_threads; /* threads the chunked im2col scratch holds chunks for */
};

enum avx2_kind { AVX2_NONE = 0, AVX2_GEMM, AVX2_IM2COL, AVX2_DEPTHWISE };

static int env_flag(const char *name, int def) {
    const char *e = getenv(name);
    if (!e || !e[0]) return def;
    return strcmp(e, "0") != 0;
}

int qp_int8_cpu_has_vnni(void) {
    return env_flag("QP_INT8_VNNI", qp_dnnl_enabled() && qp_isa_has_vnni());
}

int qp_int8_avx2_allowed(void) {
    return env_flag("QP_INT8_AVX2", 1);
}

int qp_int8_ref_forced(void) {
    return env_flag("QP_INT8_REF", 0);
}

const char *qp_int8_path_name(enum qp_int8_path path) {
    switch (path) {
    case QP_INT8_PATH_DNNL_INT8:
        return "oneDNN int8";
    case QP_INT8_PATH_DNNL_F32:
        return "oneDNN float";
    case QP_INT8_PATH_AVX2:
        return "AVX2 int8";
    default:
        return "reference";
    }
}

enum qp_int8_path qp_int8_conv_path(const void *state) {
    return state ? ((const struct i8_state *)state)->path : QP_INT8_PATH_REF;
}

/* ---- constants ------------------------------------------------------------------------------ */

/* Channels-last element offset of (b, c, pixel) for C channels and P pixels. */
static inline int64_t nhwc_at(int64_t b, int64_t c, int64_t px, int64_t C, int64_t P) {
    return (b * P + px) * C + c;
}

int qp_int8_conv_patch(const void *state) {
    return ((const struct i8_state *)state)->patch;
}

/* ---- oneDNN primitive ----------------------------------------------------------------------- */

static dnnl_data_type_t dnnl_dt(enum qp_dtype dt) {
    return dt == QP_DTYPE_INT8 ? dnnl_s8 : dt == QP_DTYPE_UINT8 ? dnnl_u8 : dnnl_f32;
}

static int attr_setup(dnnl_primitive_attr_t attr, const struct i8_key *k, const float *osc) {
    int ok =
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
        qp_i8_attr_posts(attr, &k->posts);
    if (ok && k->path == QP_INT8_PATH_DNNL_INT8) {
        if (!osc || dnnl_primitive_attr_set_output_scales(attr, k->m, 1 << 1, osc)) ok = 0;
        int32_t rz = DNNL_RUNTIME_S32_VAL;
        if (ok && k->src_zp_on &&
            dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_SRC, 1, 0, &rz))
            ok = 0;
    }
    return ok;
}

static void entry_free(struct i8_entry *e) {
    dnnl_primitive_destroy(e->prim);
    dnnl_memory_t ms[] = {e->m_src, e->m_wei, e->m_bias, e->m_dst, e->m_scr, e->m_osc, e->m_zp};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        dnnl_memory_destroy(ms[i]);
    dnnl_stream_destroy(e->stream);
    free(e);
}

/* Source/destination dims and the weights' dims ([g,] oc, ic, k...). */
static int key_dims(const struct i8_key *k, dnnl_dims_t sd, dnnl_dims_t dd, dnnl_dims_t wd) {
    int nd = 2 + k->nsp, o = k->group > 1;
    sd[0] = dd[0] = k->n;
    sd[1] = k->c;
    dd[1] = k->m;
    if (o) wd[0] = k->group;
    wd[o] = k->m / k->group;
    wd[o + 1] = k->c / k->group;
    for (int i = 0; i < k->nsp; i++) {
        sd[2 + i] = k->in[i];
        dd[2 + i] = k->out[i];
        wd[o + 2 + i] = k->k[i];
    }
    return nd;
}

static dnnl_format_tag_t nhwc_tag(int nd) {
    return nd == 3 ? dnnl_nwc : nd == 4 ? dnnl_nhwc : dnnl_ndhwc;
}

/* What a secondary entry (another thread count or lane) must keep: the primary's weights layout
 * and implementation. */
struct i8_force {
    const dnnl_memory_desc_t *wei;
    const char *impl;
    const float *osc; /* the per-channel output scales (int8 path) */
};

static int make_pd(const struct i8_key *k, const struct i8_force *f, dnnl_primitive_desc_t *pd) {
    dnnl_dims_t sd, dd, wd, bd = {k->m}, st, dil, pl, pr;
    int nd = key_dims(k, sd, dd, wd), wnd = nd + (k->group > 1);
    for (int i = 0; i < k->nsp; i++) {
        st[i] = k->stride[i];
        dil[i] = k->dil[i] - 1;
        pl[i] = k->pb[i];
        pr[i] = k->pe[i];
    }
    int f32 = k->path == QP_INT8_PATH_DNNL_F32;
    dnnl_memory_desc_t src, wei, dst, bias;
    if (dnnl_memory_desc_init_by_tag(&src, nd, sd, f32 ? dnnl_f32 : (dnnl_data_type_t)k->src_dt,
                                     nhwc_tag(nd)) ||
        dnnl_memory_desc_init_by_tag(&wei, wnd, wd, f32 ? dnnl_f32 : dnnl_s8,
                                     dnnl_format_tag_any) ||
        dnnl_memory_desc_init_by_tag(&dst, nd, dd, (dnnl_data_type_t)k->dst_dt, nhwc_tag(nd)) ||
        dnnl_memory_desc_init_by_tag(&bias, 1, bd, dnnl_f32, dnnl_x))
        return 0;
    if (f && f->wei) wei = *f->wei;
    dnnl_convolution_desc_t cd;
    dnnl_deconvolution_desc_t dd_;
    const dnnl_memory_desc_t *b = k->has_bias ? &bias : NULL;
    if (k->transposed
            ? dnnl_dilated_deconvolution_forward_desc_init(&dd_, dnnl_forward_inference,
                                                           dnnl_deconvolution_direct, &src, &wei, b,
                                                           &dst, st, dil, pl, pr) != dnnl_success
            : dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                         dnnl_convolution_direct, &src, &wei, b,
                                                         &dst, st, dil, pl, pr) != dnnl_success)
        return 0;
    dnnl_primitive_attr_t attr = NULL;
    int ok = dnnl_primitive_attr_create(&attr) == dnnl_success && attr_setup(attr, k, f->osc);
    ok = ok && qp_dnnl_pd_create(pd, k->transposed ? (const void *)&dd_ : (const void *)&cd, attr,
                                 f->impl) == dnnl_success;
    dnnl_primitive_attr_destroy(attr);
    return ok;
}

static void *entry_build(const void *key_, void *ctx) {
    const struct i8_key *k = key_;
    struct i8_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    int saved = qp_dnnl_threads_push(k->nthr);
    dnnl_primitive_desc_t pd = NULL;
    int ok = make_pd(k, ctx, &pd);
    dnnl_engine_t eng = qp_dnnl_engine();
    if (ok) {
        qp_dnnl_pd_impl_name(pd, e->impl, sizeof e->impl);
        /* The reference implementation is slower than the float path: not worth it. */
        ok = strncmp(e->impl, "ref", 3) != 0;
    }
    if (ok) {
        e->src = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
        e->wei = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        e->dst = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
        e->scr = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        e->wei_bytes = qp_dnnl_md_bytes(&e->wei);
        e->scr_bytes = qp_dnnl_md_bytes(&e->scr);
        ok = dnnl_primitive_create(&e->prim, pd) == dnnl_success;
    }
    dnnl_primitive_desc_destroy(pd);
    dnnl_memory_desc_t osc, zp, bias;
    dnnl_dims_t md = {k->m}, one = {1};
    ok = ok && !dnnl_memory_desc_init_by_tag(&osc, 1, md, dnnl_f32, dnnl_x) &&
         !dnnl_memory_desc_init_by_tag(&bias, 1, md, dnnl_f32, dnnl_x) &&
         !dnnl_memory_desc_init_by_tag(&zp, 1, one, dnnl_s32, dnnl_x);
    struct {
        dnnl_memory_t *m;
        const dnnl_memory_desc_t *md;
    } mems[] = {{&e->m_src, &e->src}, {&e->m_wei, &e->wei}, {&e->m_bias, &bias},
                {&e->m_dst, &e->dst}, {&e->m_scr, &e->scr}, {&e->m_osc, &osc},
                {&e->m_zp, &zp}};
    for (size_t i = 0; ok && i < sizeof mems / sizeof mems[0]; i++)
        ok = dnnl_memory_create(mems[i].m, mems[i].md, eng, DNNL_MEMORY_NONE) == dnnl_success;
    ok = ok && dnnl_stream_create(&e->stream, eng, dnnl_stream_default_flags) == dnnl_success;
    ok = ok && pthread_mutex_init(&e->lock, NULL) == 0;
    qp_dnnl_threads_pop(saved);
    if (!ok) {
        entry_free(e);
        return NULL;
    }
    return e;
}

static struct i8_entry *entry_for(const struct i8_state *s, int nthr, int lane) {
    if (nthr == s->key.nthr && lane == s->key.lane) return s->entry;
    struct i8_key k = s->key;
    k.nthr = nthr;
    k.lane = lane;
    const float *psc = (const float *)((const char *)s + s->off_psc);
    struct i8_force f = {&s->entry->wei, s->entry->impl, psc};
    struct i8_entry *e = qp_dnnl_cache_get(&k, sizeof k, entry_build, &f);
    return e && e->scr_bytes <= s->entry->scr_bytes ? e : s->entry;
}

/* Reorders the plain weights `w` (int8 or float; Conv's [M, C/g, k...], ConvTranspose's
 * [C, M/g, k...]) into the entry's layout at `to`. */
static int reorder_weights(const struct i8_key *k, const struct i8_entry *e, const void *w,
                           void *to) {
    dnnl_dims_t sd, dd, wd;
    int nd = key_dims(k, sd, dd, wd), wnd = nd + (k->group > 1);
    /* dims ([g,] o, i, k...); ConvTranspose's physical order swaps o and i */
    static const dnnl_format_tag_t plain[2][2][3] = {
        {{dnnl_oiw, dnnl_oihw, dnnl_oidhw}, {dnnl_goiw, dnnl_goihw, dnnl_goidhw}},
        {{dnnl_bac, dnnl_bacd, dnnl_bacde}, {dnnl_acbd, dnnl_acbde, dnnl_acbdef}}};
    dnnl_memory_desc_t uw;
    dnnl_data_type_t dt = k->path == QP_INT8_PATH_DNNL_F32 ? dnnl_f32 : dnnl_s8;
    if (dnnl_memory_desc_init_by_tag(&uw, wnd, wd, dt,
                                     plain[k->transposed != 0][k->group > 1][nd - 3]))
        return 0;
    return qp_dnnl_reorder_once(&uw, w, &e->wei, to);
}

/* ---- prepare -------------------------------------------------------------------------------- */

static enum qp_status read_io(struct qp_kprep *p, struct i8_state *s) {
    const struct qp_kt *w = qp_i8_in(p, 3), *r = qp_i8_in(p, 9);
    if (!w || !w->is_const || w->dtype != QP_DTYPE_INT8)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "weights must be a constant int8 tensor");
    enum qp_status st = qp_i8_read_io(p, &s->io);
    if (st) return st;
    s->src_nhwc = (int)qp_kattr_int(p->node, "src_nhwc", 0);
    s->dst_nhwc = (int)qp_kattr_int(p->node, "dst_nhwc", 0);
    s->transposed = qp_kattr_int(p->node, "transposed", 0) != 0;
    s->res_nhwc = r && qp_i8_is_q8(r->dtype) && qp_kattr_int(p->node, "res_nhwc", 0);
    return QP_OK;
}

/* Geometry from a float-typed view of x and w (qp_conv_geometry checks float dtypes). */
static enum qp_status geometry(struct qp_kprep *p, struct i8_state *s) {
    struct qp_kt xf = *p->in[0], wf = *p->in[3], bf, yf;
    xf.dtype = wf.dtype = QP_DTYPE_FLOAT;
    memset(&yf, 0, sizeof yf);
    if (qp_i8_in(p, 6)) {
        bf = *p->in[6];
        bf.dtype = QP_DTYPE_FLOAT;
    }
    const struct qp_kt *ins[3] = {&xf, &wf, qp_i8_in(p, 6) ? &bf : NULL};
    struct qp_kt *outs[1] = {&yf};
    struct qp_kprep g = *p;
    g.in = ins;
    g.n_in = 3;
    g.out = outs;
    g.n_out = 1;
    enum qp_status st = qp_conv_geometry(&g, s->transposed, &s->geo);
    if (st) return st;
    if (xf.rank - 2 > 3)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "spatial rank %d", xf.rank - 2);
    const struct qp_kt *b = qp_i8_in(p, 6);
    s->geo.has_bias = b != NULL;
    if (b && (!b->is_const || b->numel != (uint64_t)s->geo.m ||
              (b->dtype != QP_DTYPE_FLOAT && b->dtype != QP_DTYPE_FLOAT16)))
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "bias must be %lld constant floats",
                            (long long)s->geo.m);
    const struct qp_kt *r = qp_i8_in(p, 9);
    if (r && (r->rank != yf.rank || memcmp(r->dims, yf.dims, sizeof(int64_t) * (size_t)yf.rank)))
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "the residual's shape is not the output's");
    return qp_kt_set(p->out[0], s->io.ydt, yf.rank, yf.dims, p->err);
}

/* 1 when the primitive's output elements are the output tensor's (int8, or float32 reals). */
static int dst_final(const struct i8_state *s) {
    return !s->io.dst_f32 || s->io.ydt == QP_DTYPE_FLOAT;
}

/* 1 when ConvTranspose state s can run as a 1x1 convolution and a scatter (i8_state.patch). */
static int patch_takes(const struct i8_state *s) {
    const struct qp_conv_state *g = &s->geo;
    if (!s->transposed || g->group != 1 || s->io.has_res) return 0;
    for (int i = 0; i < g->w.nsp; i++)
        if (g->w.k[i] != g->w.stride[i] || g->w.dil[i] != 1 || g->w.pad_begin[i] ||
            g->w.pad_end[i] || g->w.out[i] != g->w.in[i] * g->w.stride[i])
            return 0;
    return 1;
}

/* The node's output channel of the kernels' channel oc (patch: K * M of them). */
static int64_t chan_of(const struct i8_state *s, int64_t oc) {
    return s->patch ? oc % s->geo.m : oc;
}

/* The geometry the kernels compute (oneDNN key, AVX2 kernels, per-channel arrays): the node's,
 * or the patch's 1x1 convolution. */
static const struct qp_conv_state *kgeo(const struct i8_state *s) {
    return s->patch ? &s->pgeo : &s->geo;
}

/* Fills s->pgeo: K * M output channels over the source's pixels, a 1x1 kernel. */
static void patch_geometry(struct i8_state *s) {
    struct qp_conv_state *p = &s->pgeo;
    const struct qp_conv_state *g = &s->geo;
    *p = *g;
    p->m = s->pk * g->m;
    p->k_sz = 1;
    p->out_sz = g->in_sz;
    for (int i = 0; i < 3; i++) {
        p->k3[i] = p->s3[i] = p->d3[i] = 1;
        p->p3[i] = 0;
        p->out3[i] = g->in3[i];
    }
    for (int i = 0; i < g->w.nsp; i++) {
        p->w.k[i] = p->w.stride[i] = p->w.dil[i] = 1;
        p->w.pad_begin[i] = p->w.pad_end[i] = 0;
        p->w.out[i] = g->w.in[i];
    }
}

static void fill_key(struct i8_state *s) {
    const struct qp_conv_state *g = kgeo(s); /* the patch: its 1x1 convolution */
    struct i8_key *k = &s->key;
    memset(k, 0, sizeof *k);
    k->path = (int32_t)s->path;
    k->nthr = s->small ? 1 : qp_dnnl_default_threads();
    k->nsp = g->w.nsp;
    k->n = g->n;
    k->c = g->c;
    k->m = g->m;
    k->group = g->group;
    k->has_bias = 1;
    k->transposed = s->transposed && !s->patch;
    k->src_dt = (int32_t)dnnl_dt(s->io.xdt);
    k->src_zp_on = s->path == QP_INT8_PATH_DNNL_INT8 && s->io.xzp != 0;
    for (int i = 0; i < g->w.nsp; i++) {
        k->in[i] = g->w.in[i];
        k->k[i] = g->w.k[i];
        k->out[i] = g->w.out[i];
        k->stride[i] = g->w.stride[i];
        k->dil[i] = g->w.dil[i];
        k->pb[i] = g->w.pad_begin[i];
        k->pe[i] = g->w.pad_end[i];
        if (k->transposed) /* the right padding that makes oneDNN's size formula ONNX's output */
            k->pe[i] = (g->w.in[i] - 1) * g->w.stride[i] + (g->w.k[i] - 1) * g->w.dil[i] + 1 -
                       g->w.pad_begin[i] - g->w.out[i];
    }
    qp_i8_key_posts(&s->io, s->path == QP_INT8_PATH_DNNL_INT8, &k->posts);
    k->dst_dt = s->io.dst_f32 ? dnnl_f32 : (int32_t)dnnl_dt(s->io.ydt);
    s->direct = s->dst_nhwc && dst_final(s) && !s->patch;
}

/* ConvTranspose weights [C, M, K] (elements of `size` bytes) as the patch convolution's
 * [K * M, C] (malloc'd). */
static void *patch_weights(const struct i8_state *s, const void *w, size_t size) {
    int64_t C = s->geo.c, M = s->geo.m, K = s->pk;
    char *t = qp_malloc_n((size_t)(C * M * K), size);
    for (int64_t c = 0; t && c < C; c++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t k = 0; k < K; k++)
                memcpy(t + ((k * M + m) * C + c) * size,
                       (const char *)w + ((c * M + m) * K + k) * size, size);
    return t;
}

/* A folded BatchNormalization (attributes ch_scale, ch_shift: m values each), or 1 and 0. */
static void channel_affine(const struct qp_kprep *p, int64_t oc, float *scale, float *shift) {
    const float *sc, *sh;
    if (qp_kattr_floats(p->node, "ch_scale", &sc) > oc &&
        qp_kattr_floats(p->node, "ch_shift", &sh) > oc) {
        *scale = sc[oc];
        *shift = sh[oc];
    } else {
        *scale = 1.0f;
        *shift = 0.0f;
    }
}

/* Weight scale of output channel oc, times a folded BatchNormalization's scale. */
static float weight_scale(const struct qp_kprep *p, const struct qp_kt *ws, int64_t oc) {
    float cs, ch;
    channel_affine(p, oc, &cs, &ch);
    return (float)qp_kt_get_f64(ws, ws->numel == 1 ? 0 : (uint64_t)oc) * cs;
}

/* Output channel oc's bias with a folded BatchNormalization or Mul/Add: bias * scale + shift. */
static float channel_bias(const struct qp_kprep *p, int64_t oc) {
    const struct qp_kt *b = qp_i8_in(p, 6);
    float cs, ch;
    channel_affine(p, oc, &cs, &ch);
    return (b ? (float)qp_kt_get_f64(b, (uint64_t)oc) : 0.0f) * cs + ch;
}

/* w_scale: 1 or m constants; w_zero_point: absent or constant int8 zeros. */
static enum qp_status check_wq(struct qp_kprep *p, int64_t m) {
    const struct qp_kt *ws = qp_i8_in(p, 4), *wz = qp_i8_in(p, 5);
    if (!ws || !ws->is_const || (ws->numel != 1 && ws->numel != (uint64_t)m))
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "w_scale must be 1 or %lld constants",
                            (long long)m);
    int wzero = 1;
    if (wz && (!wz->is_const || wz->dtype != QP_DTYPE_INT8))
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "w_zero_point must be constant int8");
    for (uint64_t i = 0; wz && i < wz->numel; i++)
        wzero &= qp_kt_get_i64(wz, i) == 0;
    if (!wzero) return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "weights with a zero point");
    return QP_OK;
}

/* The output channel of element i of the plain weights: Conv's [M, C/g, k...] or
 * ConvTranspose's [C, M/g, k...]. */
static int64_t weight_oc(const struct i8_state *s, int64_t i) {
    const struct qp_conv_state *g = &s->geo;
    if (!s->transposed) return i / ((g->c / g->group) * g->k_sz);
    int64_t mg = g->m / g->group, row = i / g->k_sz, c = row / mg;
    return c / (g->c / g->group) * mg + row % mg;
}

/* The state blob: the struct, then per-channel floats and the weights. */
static enum qp_status build_state(struct qp_kprep *p, struct i8_state *s) {
    const struct qp_kt *w = p->in[3], *ws = qp_i8_in(p, 4);
    enum qp_status st = check_wq(p, s->geo.m);
    if (st) return st;
    int64_t m = kgeo(s)->m;
    size_t base = qp_dnnl_align(sizeof *s), fl = qp_dnnl_align((size_t)m * sizeof(float));
    s->off_osc = base;
    s->off_bias = base + fl;
    s->off_wsc = base + 2 * fl;
    s->off_psc = base + 3 * fl;
    s->off_wraw = base + 4 * fl;
    /* The plain int8 weights only for the reference path: oneDNN keeps its own reorder. */
    int ref = s->path == QP_INT8_PATH_REF;
    s->off_wei = s->off_wraw + (ref ? qp_dnnl_align(w->nbytes) : 0);
    size_t wei_bytes = s->entry ? s->entry->wei_bytes : 0;
    char *blob = qp_zalloc64(s->off_wei + wei_bytes + 64);
    if (!blob) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    float *osc = (float *)(blob + s->off_osc), *bias = (float *)(blob + s->off_bias);
    float *wsc = (float *)(blob + s->off_wsc), *psc = (float *)(blob + s->off_psc);
    for (int64_t oc = 0; oc < m; oc++) {
        wsc[oc] = weight_scale(p, ws, chan_of(s, oc));
        osc[oc] = s->io.xs * wsc[oc];
        float bf = channel_bias(p, chan_of(s, oc));
        bias[oc] = s->path == QP_INT8_PATH_DNNL_INT8 ? qp_i8_acc_bias(bf, &osc[oc]) : bf;
        psc[oc] = osc[oc] * s->io.oscale_mul;
    }
    if (ref) memcpy(blob + s->off_wraw, w->data, w->nbytes);
    if (s->entry) {
        const void *src = w->data;
        float *wf = NULL;
        void *pw = NULL;
        int f32 = s->path == QP_INT8_PATH_DNNL_F32;
        if (f32) { /* dequantized float weights */
            wf = qp_malloc_n(w->numel, sizeof *wf);
            if (!wf) st = qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
            for (uint64_t i = 0; wf && i < w->numel; i++)
                wf[i] = (float)((const int8_t *)w->data)[i] * wsc[weight_oc(s, (int64_t)i)];
            src = wf;
        }
        if (!st && s->patch && !(src = pw = patch_weights(s, src, f32 ? sizeof(float) : 1)))
            st = qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
        if (!st && !reorder_weights(&s->key, s->entry, src, blob + s->off_wei))
            st = qp_error_set(p->err, QP_ERR_INTERNAL, "oneDNN weight reorder failed");
        free(wf);
        free(pw);
    }
    if (st) {
        free(blob);
        return st;
    }
    memcpy(blob, s, sizeof *s);
    p->state = blob;
    return QP_OK;
}

/* x_scale * w_scale[oc] (malloc'd; as raised by qp_i8_acc_bias, as build_state stores them for
 * the int8 primitive), or NULL for a bad w_scale. */
static float *output_scales(const struct qp_kprep *p, const struct i8_state *s) {
    const struct qp_kt *ws = qp_i8_in(p, 4);
    int64_t m = s->geo.m, km = kgeo(s)->m;
    if (!ws || !ws->is_const || (ws->numel != 1 && ws->numel != (uint64_t)m)) return NULL;
    const float *v;
    int64_t nb = qp_kattr_floats(p->node, "ch_scale", &v);
    if (nb >= 0 && (nb != m || qp_kattr_floats(p->node, "ch_shift", &v) != m)) return NULL;
    float *osc = qp_malloc_n((size_t)km, sizeof *osc);
    for (int64_t oc = 0; osc && oc < km; oc++) {
        osc[oc] = s->io.xs * weight_scale(p, ws, chan_of(s, oc));
        qp_i8_acc_bias(channel_bias(p, chan_of(s, oc)), &osc[oc]);
    }
    return osc;
}

static size_t plan_scratch(struct i8_state *s) {
    const struct qp_conv_state *g = &s->geo;
    size_t in_n = (size_t)(g->n * g->c * g->in_sz), out_n = (size_t)(g->n * g->m * g->out_sz);
    int f32 = s->path == QP_INT8_PATH_DNNL_F32;
    size_t a = s->path == QP_INT8_PATH_REF ? 0
               : f32                       ? in_n * sizeof(float)
               : s->src_nhwc               ? 0
                                           : in_n;
    size_t el = s->io.dst_f32 ? sizeof(float) : 1;
    size_t b = s->path == QP_INT8_PATH_REF || s->direct ? 0 : out_n * el;
    size_t c = s->patch && !dst_final(s) ? out_n * el : 0; /* the scatter's, channels last */
    s->off_src = 0;
    s->off_dst = qp_dnnl_align(a);
    s->off_pat = s->off_dst + qp_dnnl_align(b);
    s->off_scr = s->off_pat + qp_dnnl_align(c);
    return s->off_scr + (s->entry ? qp_dnnl_align(s->entry->scr_bytes) : 0);
}

/* ---- the AVX2 path ----------------------------------------------------------------------- */

/* How the AVX2 path computes the geometry (AVX2_NONE: it does not take it). */
static enum avx2_kind avx2_kind(const struct i8_state *s) {
    const struct qp_conv_state *g = kgeo(s);
    if (qp_kernel_isa() < QP_ISA_AVX2 || !qp_int8_avx2_allowed()) return AVX2_NONE;
    if (g->group > 1 && g->group == g->c && g->group == g->m)
        return qp_i8g_dw_pack_bytes(g->c, g->k_sz) && qp_i8g_dw_scratch_bytes(g) ? AVX2_DEPTHWISE
                                                                                 : AVX2_NONE;
    if (g->group != 1 || !qp_i8g_pack_bytes(g->c * g->k_sz, g->m)) return AVX2_NONE;
    int same = g->k_sz == 1 && g->c % 4 == 0; /* 1x1, stride 1, no padding: the source is A */
    for (int i = 0; i < 3; i++)
        same &= g->in3[i] == g->out3[i] && g->s3[i] == 1 && g->p3[i] == 0;
    return same ? AVX2_GEMM : AVX2_IM2COL;
}

/* Weights for the AVX2 kernels: depthwise [c][k_sz] as they are, or for the GEMM column oc as
 * (kernel position, channel), the order of the im2col rows. */
static enum qp_status pack_avx2(struct qp_kprep *p, const struct i8_state *s, const int8_t *w,
                                void *to) {
    const struct qp_conv_state *g = kgeo(s);
    if (s->avx2 == AVX2_DEPTHWISE) {
        qp_i8g_dw_pack(w, g->c, g->k_sz, to);
        return QP_OK;
    }
    int64_t k = g->c * g->k_sz;
    int8_t *bt = qp_malloc_n((size_t)(g->m * k), 1);
    if (!bt) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    for (int64_t oc = 0; oc < g->m; oc++)
        for (int64_t c = 0; c < g->c; c++)
            for (int64_t kp = 0; kp < g->k_sz; kp++)
                bt[oc * k + kp * g->c + c] = w[(oc * g->c + c) * g->k_sz + kp];
    qp_i8g_pack(bt, k, k, g->m, to);
    free(bt);
    return QP_OK;
}

/* The AVX2 path's blob: the struct, x_scale * w_scale and the bias per output channel (padded to
 * the kernels' 16-channel panels), the packed weights. */
static enum qp_status build_state_avx2(struct qp_kprep *p, struct i8_state *s) {
    const struct qp_kt *ws = qp_i8_in(p, 4);
    const struct qp_conv_state *g = kgeo(s);
    enum qp_status st = check_wq(p, s->geo.m);
    if (st) return st;
    size_t fl = qp_dnnl_align((size_t)qp_i8g_npad(g->m) * sizeof(float));
    size_t pack = s->avx2 == AVX2_DEPTHWISE ? qp_i8g_dw_pack_bytes(g->c, g->k_sz)
                                            : qp_i8g_pack_bytes(g->c * g->k_sz, g->m);
    s->off_osc = qp_dnnl_align(sizeof *s);
    s->off_bias = s->off_osc + fl;
    s->off_pack = s->off_bias + fl;
    char *blob = qp_zalloc64(s->off_pack + pack + 64);
    if (!blob) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    float *osc = (float *)(blob + s->off_osc), *bias = (float *)(blob + s->off_bias);
    for (int64_t oc = 0; oc < g->m; oc++) {
        osc[oc] = s->io.xs * weight_scale(p, ws, chan_of(s, oc));
        bias[oc] = channel_bias(p, chan_of(s, oc));
    }
    int8_t *pw = s->patch ? patch_weights(s, p->in[3]->data, 1) : NULL;
    if (s->patch && !pw)
        st = qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    else
        st = pack_avx2(p, s, pw ? pw : (const int8_t *)p->in[3]->data, blob + s->off_pack);
    free(pw);
    if (st) {
        free(blob);
        return st;
    }
    memcpy(blob, s, sizeof *s);
    p->state = blob;
    return QP_OK;
}

/* Scratch: the NHWC source, the NHWC destination (int8, or float reals), the residual (int8 or
 * float reals, NHWC), the im2col rows. */
static size_t plan_scratch_avx2(struct i8_state *s) {
    const struct qp_conv_state *g = kgeo(s);
    size_t in_n = (size_t)(g->n * g->c * g->in_sz), out_n = (size_t)(g->n * g->m * g->out_sz);
    int rq8 = s->io.has_res && qp_i8_is_q8(s->io.rdt);
    size_t el = s->io.y_int8 ? 1 : sizeof(float);
    size_t a = s->src_nhwc ? 0 : in_n;
    size_t b = s->direct ? 0 : out_n * el;
    size_t pat = s->patch && !dst_final(s) ? out_n * el : 0; /* the scatter's, channels last */
    size_t r = !s->io.has_res || (rq8 && s->res_nhwc) ? 0 : out_n * (rq8 ? 1 : sizeof(float));
    s->ldk = (g->c * g->k_sz + 3) / 4 * 4;
    int dt = qp_dnnl_default_threads();
    s->col_threads = dt < 1 ? 1 : dt > 64 ? 64 : dt;
    s->chunked = s->avx2 == AVX2_IM2COL && qp_i8g_conv_gemm_pays(g->c * g->k_sz, g->m);
    size_t col = s->chunked                  ? qp_i8g_conv_gemm_scratch(g, s->ldk, s->col_threads)
                 : s->avx2 == AVX2_IM2COL    ? (size_t)(g->n * g->out_sz) * (size_t)s->ldk
                 : s->avx2 == AVX2_DEPTHWISE ? qp_i8g_dw_scratch_bytes(g)
                                             : 0;
    s->off_src = 0;
    s->off_dst = qp_dnnl_align(a);
    s->off_res = s->off_dst + qp_dnnl_align(b);
    s->off_col = s->off_res + qp_dnnl_align(r);
    s->off_pat = s->off_col + qp_dnnl_align(col);
    return s->off_pat + qp_dnnl_align(pat);
}

/* The state's path: oneDNN int8 with VNNI, else the AVX2 kernels where they take the geometry,
 * else oneDNN in float; the reference without oneDNN (or when forced). */
static enum qp_int8_path choose_path(struct i8_state *s) {
    if (!qp_dnnl_enabled() || qp_int8_ref_forced()) return QP_INT8_PATH_REF;
    if (qp_int8_cpu_has_vnni()) return QP_INT8_PATH_DNNL_INT8;
    s->avx2 = s->transposed && !s->patch ? AVX2_NONE : avx2_kind(s);
    return s->avx2 ? QP_INT8_PATH_AVX2 : QP_INT8_PATH_DNNL_F32;
}

static const char *avx2_kind_name(int kind) {
    return kind == AVX2_GEMM ? "1x1 GEMM" : kind == AVX2_IM2COL ? "im2col GEMM" : "depthwise";
}

static enum qp_status prepare_avx2(struct qp_kprep *p, struct i8_state *s) {
    s->io.dst_f32 = !s->io.y_int8; /* dst_out: float reals, or int8 */
    s->direct = s->dst_nhwc && dst_final(s) && !s->patch;
    s->io.res_in_dst = s->io.has_res && qp_i8_is_q8(s->io.rdt); /* residual_into: int8 as is */
    qp_log(QP_LOG_DEBUG, "QConv '%s': path %d (%s, %s), output %s%s",
           p->node->name ? p->node->name : "", (int)s->path, qp_int8_path_name(s->path),
           avx2_kind_name(s->avx2), s->direct ? "direct" : "converted",
           s->src_nhwc ? ", NHWC source" : "");
    p->scratch = plan_scratch_avx2(s);
    return build_state_avx2(p, s);
}

enum qp_status qp_k_qconv_fused_prepare(struct qp_kprep *p) {
    struct i8_state s;
    memset(&s, 0, sizeof s);
    enum qp_status st;
    if ((st = read_io(p, &s)) || (st = geometry(p, &s))) return st;
    const struct qp_conv_state *g = &s.geo;
    s.small = (double)g->n * (double)g->m * (double)g->out_sz * (double)(g->c / g->group) *
                  (double)g->k_sz <
              (double)I8_SMALL_MACS;
    s.pk = g->k_sz;
    if ((s.patch = patch_takes(&s))) patch_geometry(&s);
    s.path = choose_path(&s);
    if (s.path == QP_INT8_PATH_AVX2 && s.avx2 == AVX2_DEPTHWISE)
        s.small = (double)g->n * (double)g->m * (double)g->out_sz * (double)g->k_sz <
                  (double)I8_SMALL_DW_MACS;
    if (s.path == QP_INT8_PATH_AVX2) return prepare_avx2(p, &s);
    float *osc = NULL, *psc = NULL;
    if (s.path != QP_INT8_PATH_REF) {
        osc = output_scales(p, &s);
        psc = osc ? qp_malloc_n((size_t)kgeo(&s)->m, sizeof *psc) : NULL;
        if (!psc) {
            free(osc);
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "w_scale must be 1 or %lld constants",
                                (long long)s.geo.m);
        }
    }
    while (s.path != QP_INT8_PATH_REF) {
        fill_key(&s);
        for (int64_t oc = 0; oc < kgeo(&s)->m; oc++) /* the scales the primitive applies */
            psc[oc] = osc[oc] * s.io.oscale_mul;
        s.key.osc_hash = qp_i8_hash(psc, kgeo(&s)->m);
        struct i8_force f = {NULL, NULL, psc};
        s.entry = qp_dnnl_cache_get(&s.key, sizeof s.key, entry_build, &f);
        if (s.entry) break;
        /* oneDNN cannot take it on int8 (an unusual zero point, a geometry): try float. */
        s.path = s.path == QP_INT8_PATH_DNNL_INT8 ? QP_INT8_PATH_DNNL_F32 : QP_INT8_PATH_REF;
    }
    free(osc);
    free(psc);
    if (s.path == QP_INT8_PATH_REF) {
        s.io.dst_f32 = 1;
        s.patch = 0;
    }
    qp_log(QP_LOG_DEBUG, "QConv '%s': path %d (%s, %s), output %s%s",
           p->node->name ? p->node->name : "", (int)s.path, qp_int8_path_name(s.path),
           s.entry ? s.entry->impl : "plain C", s.direct ? "direct" : "converted",
           s.src_nhwc ? ", NHWC source" : "");
    p->scratch = plan_scratch(&s);
    return build_state(p, &s);
}

/* ---- run ------------------------------------------------------------------------------------ */

/* ConvTranspose's sum at output o (spatial coordinates o3) of channel m, image b: output o
 * receives x[i] * w[c][m][k] where o = i * stride - pad + k * dilation. */
static int64_t ref_t_sum(const struct i8_state *s, const void *x, const int8_t *w, int64_t b,
                         int64_t m, const int64_t o3[3]) {
    const struct qp_conv_state *g = &s->geo;
    int64_t cg = g->c / g->group, mg = g->m / g->group, gi = m / mg, mm = m % mg, acc = 0;
    for (int64_t k = 0; k < g->k_sz; k++) {
        int64_t kk[3] = {k / (g->k3[1] * g->k3[2]), k / g->k3[2] % g->k3[1], k % g->k3[2]};
        int64_t i3[3], in = 1;
        for (int d = 0; d < 3 && in; d++) {
            int64_t t = o3[d] + g->p3[d] - kk[d] * g->d3[d];
            in = t >= 0 && t % g->s3[d] == 0 && t / g->s3[d] < g->in3[d];
            i3[d] = t / g->s3[d];
        }
        if (!in) continue;
        int64_t px = (i3[0] * g->in3[1] + i3[1]) * g->in3[2] + i3[2];
        for (int64_t ci = 0; ci < cg; ci++) {
            int64_t c = gi * cg + ci;
            int64_t xi =
                s->src_nhwc ? nhwc_at(b, c, px, g->c, g->in_sz) : (b * g->c + c) * g->in_sz + px;
            acc += ((int64_t)qp_i8_q8_at(x, s->io.xdt, xi) - s->io.xzp) *
                   w[(c * mg + mm) * g->k_sz + k];
        }
    }
    return acc;
}

/* Conv's sum at output o (spatial coordinates o3) of channel m, image b. */
static int64_t ref_sum(const struct i8_state *s, const void *x, const int8_t *w, int64_t b,
                       int64_t m, const int64_t o3[3]) {
    const struct qp_conv_state *g = &s->geo;
    int64_t cg = g->c / g->group, mg = g->m / g->group, gi = m / mg, IP = g->in_sz, acc = 0;
    for (int64_t ci = 0; ci < cg; ci++) {
        int64_t c = gi * cg + ci;
        const int8_t *wk = w + (m * cg + ci) * g->k_sz;
        for (int64_t k = 0; k < g->k_sz; k++) {
            int64_t k0 = k / (g->k3[1] * g->k3[2]), k1 = k / g->k3[2] % g->k3[1];
            int64_t k2 = k % g->k3[2];
            int64_t i0 = o3[0] * g->s3[0] - g->p3[0] + k0 * g->d3[0];
            int64_t i1 = o3[1] * g->s3[1] - g->p3[1] + k1 * g->d3[1];
            int64_t i2 = o3[2] * g->s3[2] - g->p3[2] + k2 * g->d3[2];
            if (i0 < 0 || i0 >= g->in3[0] || i1 < 0 || i1 >= g->in3[1] || i2 < 0 || i2 >= g->in3[2])
                continue;
            int64_t px = (i0 * g->in3[1] + i1) * g->in3[2] + i2;
            int64_t xi = s->src_nhwc ? nhwc_at(b, c, px, g->c, IP) : (b * g->c + c) * IP + px;
            acc += ((int64_t)qp_i8_q8_at(x, s->io.xdt, xi) - s->io.xzp) * wk[k];
        }
    }
    return acc;
}

/* The reference: int64 sums, then the real-valued epilogue, element by element. */
static enum qp_status run_ref(const struct qp_krun *r) {
    const struct i8_state *s = r->state;
    const struct qp_conv_state *g = &s->geo;
    const char *blob = r->state;
    const int8_t *w = (const int8_t *)(blob + s->off_wraw);
    const float *osc = (const float *)(blob + s->off_osc),
                *bias = (const float *)(blob + s->off_bias);
    const void *x = r->in[0]->data;
    const struct qp_kt *res = s->io.has_res ? r->in[9] : NULL;
    int64_t P = g->out_sz, planes = g->n * g->m;
#pragma omp parallel for num_threads(r->n_threads) schedule(static)
    for (int64_t pm = 0; pm < planes; pm++) {
        int64_t b = pm / g->m, m = pm % g->m;
        for (int64_t o = 0; o < P; o++) {
            int64_t o3[3] = {o / (g->out3[1] * g->out3[2]), o / g->out3[2] % g->out3[1],
                             o % g->out3[2]};
            int64_t acc = s->transposed ? ref_t_sum(s, x, w, b, m, o3) : ref_sum(s, x, w, b, m, o3);
            float v = (float)acc * osc[m] + bias[m];
            int64_t yi = (b * g->m + m) * P + o, yo = s->dst_nhwc ? nhwc_at(b, m, o, g->m, P) : yi;
            float rv = 0.0f;
            if (res)
                rv = qp_i8_real_at(res, s->res_nhwc ? nhwc_at(b, m, o, g->m, P) : yi, s->io.rs,
                                   s->io.rzp);
            qp_i8_store(&s->io, r->out[0]->data, yo, qp_i8_posts_ref(&s->io, v, rv));
        }
    }
    return QP_OK;
}

/* NCHW -> NHWC (or the reverse) of `n` images of C channels and P pixels of one byte, in tiles
 * of TILE x TILE so both sides stream; whole 16 x 16 blocks of a tile through SSE2 (t16x16),
 * the rest byte by byte. */
#define TILE 32

/* The 16 x 16 bytes at s (rows lds apart) transposed to d (rows ldd apart): four rounds of
 * interleaving, bytes, then 2-, 4- and 8-byte groups (SSE2, the x86-64 baseline), 64
 * instructions where the byte loop takes 512 loads and stores. */
#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
static void t16x16(const uint8_t *s, int64_t lds, uint8_t *d, int64_t ldd) {
    __m128i r[16], t[16];
    for (int i = 0; i < 16; i++)
        r[i] = _mm_loadu_si128((const __m128i *)(s + i * lds));
    for (int k = 0; k < 8; k++) { /* t[k]: columns 0..7 of rows 2k, 2k + 1; t[k + 8]: 8..15 */
        t[k] = _mm_unpacklo_epi8(r[2 * k], r[2 * k + 1]);
        t[k + 8] = _mm_unpackhi_epi8(r[2 * k], r[2 * k + 1]);
    }
    for (int h = 0; h < 2; h++) /* r[8h + 4b' + m]: columns 8h + 4b' .., rows 4m .. 4m + 3 */
        for (int m = 0; m < 4; m++) {
            r[8 * h + m] = _mm_unpacklo_epi16(t[8 * h + 2 * m], t[8 * h + 2 * m + 1]);
            r[8 * h + 4 + m] = _mm_unpackhi_epi16(t[8 * h + 2 * m], t[8 * h + 2 * m + 1]);
        }
    for (int b = 0; b < 4; b++) /* t[4b + 2p + hi]: columns 4b + 2hi .., rows 8p .. 8p + 7 */
        for (int p = 0; p < 2; p++) {
            t[4 * b + 2 * p] = _mm_unpacklo_epi32(r[4 * b + 2 * p], r[4 * b + 2 * p + 1]);
            t[4 * b + 2 * p + 1] = _mm_unpackhi_epi32(r[4 * b + 2 * p], r[4 * b + 2 * p + 1]);
        }
    for (int b = 0; b < 4; b++)
        for (int hi = 0; hi < 2; hi++) {
            __m128i lo8 = t[4 * b + hi], hi8 = t[4 * b + 2 + hi];
            _mm_storeu_si128((__m128i *)(d + (4 * b + 2 * hi) * ldd), _mm_unpacklo_epi64(lo8, hi8));
            _mm_storeu_si128((__m128i *)(d + (4 * b + 2 * hi + 1) * ldd),
                             _mm_unpackhi_epi64(lo8, hi8));
        }
}
#define HAVE_T16 1
#else
#define HAVE_T16 0
#endif

/* Rows [r0, r1) x columns [c0, c1) of the byte matrix s (rows lds apart) into d transposed
 * (d[c * ldd + r] = s[r * lds + c]). */
static void transpose_block(const uint8_t *s, int64_t lds, uint8_t *d, int64_t ldd, int64_t r0,
                            int64_t r1, int64_t c0, int64_t c1) {
    int64_t rf = r0;
#if HAVE_T16
    rf = r0 + (r1 - r0) / 16 * 16; /* whole blocks: rows [r0, rf) x columns [c0, cf) */
    int64_t cf = c0 + (c1 - c0) / 16 * 16;
    for (int64_t r = r0; r < rf; r += 16)
        for (int64_t c = c0; c < cf; c += 16)
            t16x16(s + r * lds + c, lds, d + c * ldd + r, ldd);
    for (int64_t r = r0; r < rf; r++) /* their rows' remaining columns */
        for (int64_t c = cf; c < c1; c++)
            d[c * ldd + r] = s[r * lds + c];
#endif
    for (int64_t c = c0; c < c1; c++) /* the remaining rows */
        for (int64_t r = rf; r < r1; r++)
            d[c * ldd + r] = s[r * lds + c];
}

static void transpose_cp(void *dst, const void *src, int64_t n, int64_t C, int64_t P, int to_nhwc,
                         int nthr) {
    int64_t pt = (P + TILE - 1) / TILE, ct = (C + TILE - 1) / TILE, tasks = n * pt * ct;
    int nt = n * P * C < 65536 ? 1 : nthr;
    const uint8_t *x = src;
    uint8_t *y = dst;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t b = t / (pt * ct), p0 = t / ct % pt * TILE, c0 = t % ct * TILE;
        int64_t p1 = p0 + TILE < P ? p0 + TILE : P, c1 = c0 + TILE < C ? c0 + TILE : C;
        const uint8_t *xb = x + b * C * P;
        uint8_t *yb = y + b * C * P;
        if (to_nhwc) /* x is C rows of P bytes */
            transpose_block(xb, P, yb, C, c0, c1, p0, p1);
        else /* x is P rows of C bytes */
            transpose_block(xb, C, yb, P, p0, p1, c0, c1);
    }
}

/* Float path: the source as real values, channels last. */
static void src_to_f32(const struct i8_state *s, const struct qp_kt *x, float *dst, int nthr) {
    const struct qp_conv_state *g = &s->geo;
    int64_t C = g->c, P = g->in_sz, rows = g->n * P;
    int nt = rows * C < 32768 ? 1 : nthr;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t rw = 0; rw < rows; rw++) {
        int64_t b = rw / P, px = rw % P;
        for (int64_t c = 0; c < C; c++) {
            int64_t xi = s->src_nhwc ? rw * C + c : (b * C + c) * P + px;
            dst[rw * C + c] = s->io.xs * (qp_i8_q8_at(x->data, s->io.xdt, xi) - (float)s->io.xzp);
        }
    }
}

/* qp_int8_conv_sum_in_place's condition: the residual's bytes as they are in the primitive's
 * own (channels-last) destination, the output tensor itself. */
static int in_place(const struct i8_state *s) {
    return s->path == QP_INT8_PATH_DNNL_INT8 && s->io.has_res && s->io.res_in_dst && s->res_nhwc &&
           s->direct && !s->patch;
}

int qp_int8_conv_sum_in_place(const void *state) {
    return state && in_place(state);
}

/* The destination buffer (channels last) before the primitive adds to it: the residual. */
static void residual_into(const struct i8_state *s, const struct qp_kt *res, void *dbuf, int nthr) {
    const struct qp_conv_state *g = &s->geo;
    int64_t C = g->m, P = g->out_sz;
    if (s->io.res_in_dst) { /* int8 as it is: the SUM post-op dequantizes it */
        if (s->res_nhwc)
            memcpy(dbuf, res->data, res->nbytes);
        else
            transpose_cp(dbuf, res->data, g->n, C, P, 1, nthr);
        return;
    }
    int64_t rows = g->n * P;
    int nt = rows * C < 32768 ? 1 : nthr;
    float *d = dbuf;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t rw = 0; rw < rows; rw++) {
        int64_t b = rw / P, px = rw % P;
        for (int64_t c = 0; c < C; c++) {
            int64_t ri = s->res_nhwc ? rw * C + c : (b * C + c) * P + px;
            d[rw * C + c] = qp_i8_real_at(res, ri, s->io.rs, s->io.rzp);
        }
    }
}

/* The primitive's channels-last destination into the output tensor. */
static void dst_out(const struct i8_state *s, const void *dbuf, void *y, int nthr) {
    const struct qp_conv_state *g = &s->geo;
    int64_t C = g->m, P = g->out_sz;
    if (!s->io.dst_f32) { /* int8 already: only the layout changes */
        transpose_cp(y, dbuf, g->n, C, P, 0, nthr);
        return;
    }
    const float *d = dbuf;
    if (s->dst_nhwc) { /* same order: store only */
        qp_i8_store_n(&s->io, y, d, g->n * P * C, nthr);
        return;
    }
    int64_t pt = (P + TILE - 1) / TILE, ct = (C + TILE - 1) / TILE, tasks = g->n * pt * ct;
    int nt = g->n * P * C < 65536 ? 1 : nthr;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t b = t / (pt * ct), p0 = t / ct % pt * TILE, c0 = t % ct * TILE;
        int64_t p1 = p0 + TILE < P ? p0 + TILE : P, c1 = c0 + TILE < C ? c0 + TILE : C;
        float tile[TILE];
        for (int64_t c = c0; c < c1; c++) {
            for (int64_t px = p0; px < p1; px++)
                tile[px - p0] = d[(b * P + px) * C + c];
            qp_i8_store_row(&s->io, y, (b * C + c) * P + p0, tile, p1 - p0);
        }
    }
}

/* The patch convolution's output (channels last, K * M channels per source pixel) scattered
 * to the ConvTranspose's output (channels last when nhwc, else NCHW), elements of type T:
 * source pixel i, kernel position k, channel m goes to output pixel i * stride + k, channel m. */
/* For each input pixel row and kernel row (k0, k1): the output row's pixels i2 * k3[2] + k2 in
 * order (channels last: M values each, copied; channels first: one value per channel plane),
 * so the writes of a channel plane are sequential (a 24 -> 1 upsampling head writes 1 value per
 * pixel: per-pixel index arithmetic was most of its time). */
#define PATCH_OUT(T)                                                                               \
    do {                                                                                           \
        const T *x = src;                                                                          \
        T *y = dst;                                                                                \
        _Pragma("omp parallel for num_threads(nt) schedule(static)") for (int64_t rw = 0;          \
                                                                          rw < rows; rw++) {       \
            int64_t b = rw / (g->in3[0] * g->in3[1]), i0 = rw / g->in3[1] % g->in3[0];             \
            int64_t i1 = rw % g->in3[1], k2n = g->k3[2];                                           \
            const T *from = x + rw * g->in3[2] * K * M;                                            \
            for (int64_t k0 = 0; k0 < g->k3[0]; k0++)                                              \
                for (int64_t k1 = 0; k1 < g->k3[1]; k1++) {                                        \
                    int64_t orow =                                                                 \
                        ((i0 * g->k3[0] + k0) * g->out3[1] + i1 * g->k3[1] + k1) * g->out3[2];     \
                    int64_t kk = (k0 * g->k3[1] + k1) * k2n;                                       \
                    for (int64_t i2 = 0; i2 < g->in3[2]; i2++) {                                   \
                        const T *f = from + (i2 * K + kk) * M;                                     \
                        int64_t o = orow + i2 * k2n;                                               \
                        if (nhwc)                                                                  \
                            memcpy(y + (b * g->out_sz + o) * M, f, (size_t)(k2n * M) * sizeof(T)); \
                        else                                                                       \
                            for (int64_t m = 0; m < M; m++)                                        \
                                for (int64_t k2 = 0; k2 < k2n; k2++)                               \
                                    y[(b * M + m) * g->out_sz + o + k2] = f[k2 * M + m];           \
                    }                                                                              \
                }                                                                                  \
        }                                                                                          \
    } while (0)

static void patch_out(const struct i8_state *s, const void *src, void *dst, int nhwc, int nthr) {
    const struct qp_conv_state *g = &s->geo;
    int64_t M = g->m, K = s->pk, rows = g->n * g->in3[0] * g->in3[1];
    int nt = g->n * g->in_sz * K * M < 65536 ? 1 : nthr;
    if (s->io.dst_f32)
        PATCH_OUT(float);
    else
        PATCH_OUT(uint8_t);
}

/* What holds for every byte of the source (and of the padding, the zero point's): the GEMM's
 * kernel choice (kernels/int8_gemm.h). */
static unsigned source_range(const struct i8_state *s, const void *x, enum qp_isa isa, int nthr) {
    const struct qp_conv_state *g = &s->geo;
    int padded = 0;
    for (int i = 0; i < g->w.nsp; i++)
        padded |= g->w.pad_begin[i] > 0 || g->w.pad_end[i] > 0;
    unsigned r = qp_i8g_range(isa, x, (size_t)(g->n * g->c * g->in_sz), nthr);
    uint8_t zb = (uint8_t)s->io.xzp;
    if (padded && zb >= 128) r &= ~(unsigned)QP_I8G_BELOW_128;
    if (padded && zb == 0x80) r &= ~(unsigned)QP_I8G_NO_MIN;
    return r;
}

/* The epilogue's residual: the int8 NHWC tensor itself, or a copy (NHWC int8 or float reals). */
static void residual_avx2(const struct i8_state *s, const struct qp_krun *r, struct qp_i8g_epi *e,
                          int nthr) {
    const struct qp_kt *res = r->in[9];
    int q8 = qp_i8_is_q8(res->dtype);
    e->rdt = q8 ? res->dtype : QP_DTYPE_FLOAT;
    if (q8 && s->res_nhwc) {
        e->res = res->data;
        return;
    }
    void *buf = (char *)r->scratch + s->off_res;
    residual_into(s, res, buf, nthr);
    e->res = buf;
}

/* The kernels' channels-last output in dbuf into the output tensor y: the patch's scatter,
 * then the layout or dtype conversion where y is not what they wrote. */
static void finish_out(const struct i8_state *s, void *dbuf, char *scr, void *y, int nthr) {
    if (s->patch && dst_final(s)) {
        patch_out(s, dbuf, y, s->dst_nhwc, nthr);
        return;
    }
    if (s->patch) {
        patch_out(s, dbuf, scr + s->off_pat, 1, nthr);
        dbuf = scr + s->off_pat;
    }
    if (!s->direct) dst_out(s, dbuf, y, nthr);
}

static enum qp_status run_avx2(const struct qp_krun *r) {
    const struct i8_state *s = r->state;
    const struct qp_conv_state *g = kgeo(s);
    const char *blob = r->state;
    char *scr = r->scratch;
    int nt = s->small ? 1 : r->n_threads, sgn = s->io.xdt == QP_DTYPE_INT8;
    enum qp_isa isa = qp_kernel_isa();
    const void *x = r->in[0]->data;
    if (!s->src_nhwc) {
        transpose_cp(scr + s->off_src, x, g->n, g->c, g->in_sz, 1, nt);
        x = scr + s->off_src;
    }
    void *dbuf = s->direct ? r->out[0]->data : scr + s->off_dst;
    struct qp_i8g_epi e = {&s->io,
                           (const float *)(blob + s->off_osc),
                           (const float *)(blob + s->off_bias),
                           s->io.y_int8 ? s->io.ydt : QP_DTYPE_FLOAT,
                           dbuf,
                           g->m,
                           NULL,
                           QP_DTYPE_FLOAT,
                           g->m};
    if (s->io.has_res) residual_avx2(s, r, &e, nt);
    if (s->avx2 == AVX2_DEPTHWISE) {
        qp_i8g_depthwise(isa, g, x, sgn, s->io.xzp, blob + s->off_pack, scr + s->off_col, &e, nt);
    } else {
        struct qp_i8g_b b;
        qp_i8g_b_view(blob + s->off_pack, g->c * g->k_sz, g->m, &b);
        struct qp_i8g_a a = {x, g->c, sgn, s->io.xzp, source_range(s, x, isa, nt)};
        if (s->chunked) {
            qp_i8g_conv_gemm(isa, g, x, (uint8_t)s->io.xzp, s->ldk, scr + s->off_col, &a, &b, &e,
                             nt < s->col_threads ? nt : s->col_threads);
        } else {
            if (s->avx2 == AVX2_IM2COL) {
                qp_i8g_im2col(g, x, (uint8_t)s->io.xzp, scr + s->off_col, s->ldk, nt);
                a.data = scr + s->off_col;
                a.lda = s->ldk;
            }
            qp_i8g_gemm(isa, g->n * g->out_sz, &a, &b, &e, nt);
        }
    }
    finish_out(s, dbuf, scr, r->out[0]->data, nt);
    return QP_OK;
}

enum qp_status qp_k_qconv_fused_run(const struct qp_krun *r) {
    const struct i8_state *s = r->state;
    if (s->path == QP_INT8_PATH_REF) return run_ref(r);
    if (s->path == QP_INT8_PATH_AVX2) return run_avx2(r);
    int nthr = s->small ? 1 : r->n_threads;
    struct i8_entry *e = entry_for(s, nthr, r->lane);
    const struct qp_conv_state *g = &s->geo;
    char *scr = r->scratch, *blob = (char *)r->state;
    const struct qp_kt *x = r->in[0];
    void *src = x->data, *dbuf = s->direct ? r->out[0]->data : scr + s->off_dst;
    if (s->path == QP_INT8_PATH_DNNL_F32) {
        src = scr + s->off_src;
        src_to_f32(s, x, src, nthr);
    } else if (!s->src_nhwc) {
        src = scr + s->off_src;
        transpose_cp(src, x->data, g->n, g->c, g->in_sz, 1, nthr);
    }
    if (s->io.has_res && !(in_place(s) && dbuf == r->in[9]->data))
        residual_into(s, r->in[9], dbuf, nthr);
    pthread_mutex_lock(&e->lock);
    int saved = qp_dnnl_threads_push(e == s->entry ? s->key.nthr : nthr);
    dnnl_memory_set_data_handle(e->m_src, src);
    dnnl_memory_set_data_handle(e->m_wei, blob + s->off_wei);
    dnnl_memory_set_data_handle(e->m_bias, blob + s->off_bias);
    dnnl_memory_set_data_handle(e->m_dst, dbuf);
    dnnl_memory_set_data_handle(e->m_osc, blob + s->off_osc);
    int32_t zp = s->io.xzp;
    dnnl_memory_set_data_handle(e->m_zp, &zp);
    if (e->scr_bytes) dnnl_memory_set_data_handle(e->m_scr, scr + s->off_scr);
    dnnl_exec_arg_t a[7] = {{DNNL_ARG_SRC, e->m_src},
                            {DNNL_ARG_WEIGHTS, e->m_wei},
                            {DNNL_ARG_BIAS, e->m_bias},
                            {DNNL_ARG_DST, e->m_dst},
                            {DNNL_ARG_SCRATCHPAD, e->m_scr},
                            {DNNL_ARG_ATTR_OUTPUT_SCALES, e->m_osc},
                            {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, e->m_zp}};
    int na = s->path == QP_INT8_PATH_DNNL_INT8 ? (s->key.src_zp_on ? 7 : 6) : 5;
    dnnl_status_t rc = dnnl_primitive_execute(e->prim, e->stream, na, a);
    if (rc == dnnl_success) rc = dnnl_stream_wait(e->stream);
    qp_dnnl_threads_pop(saved);
    pthread_mutex_unlock(&e->lock);
    if (rc != dnnl_success)
        return qp_error_set(r->err, QP_ERR_INTERNAL, "oneDNN int8 convolution failed (status %d)",
                            (int)rc);
    finish_out(s, dbuf, scr, r->out[0]->data, nthr);
    return QP_OK;
}
