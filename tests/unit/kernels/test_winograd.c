/* The Winograd F(2x2, 3x3) convolution (winograd.h) against the reference convolution followed by
 * qp_conv_post_ref: directly (any channel counts, NCHW and nChw8c tensors, both code paths) and
 * through the Conv kernel state that picks it (selection, fused post-operations, the runtime's
 * blocked layouts). 1 and 2 threads give the same bits everywhere. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dnnl.h>

#include "kernels/dnnl_conv.h"
#include "kernels/kernels.h"
#include "kernels/winograd.h"

#include "kharness.h"

static uint32_t rng_state = 2024u;

static struct qp_kt kt(int rank, const int64_t *dims, void *data, int is_const) {
    struct qp_kt t;
    memset(&t, 0, sizeof t);
    assert_int_equal(qp_kt_set(&t, QP_DTYPE_FLOAT, rank, dims, NULL), QP_OK);
    t.data = data;
    t.is_const = is_const;
    return t;
}

/* One convolution: batch, channels in and out, input size, pads (top, left, bottom, right). */
struct shape {
    int64_t n, c, m, h, w, pt, pl, pb, pr;
    int bias;
};

/* The tensors and node of a shape, random data. */
struct conv {
    struct shape sh;
    int64_t pads[4], strides[2], dil[2], group, k;
    struct qp_attr attrs[4];
    struct qp_node node;
    float *x, *w, *b, *res;
    struct qp_kt in[4];
    int64_t ho, wo;
    uint64_t nx, ny;
};

static void conv_init(struct conv *cv, const struct shape *sh, int64_t k, int64_t stride,
                      int64_t dil, int64_t group) {
    memset(cv, 0, sizeof *cv);
    cv->sh = *sh;
    cv->k = k;
    cv->group = group;
    cv->pads[0] = sh->pt;
    cv->pads[1] = sh->pl;
    cv->pads[2] = sh->pb;
    cv->pads[3] = sh->pr;
    cv->strides[0] = cv->strides[1] = stride;
    cv->dil[0] = cv->dil[1] = dil;
    cv->attrs[0] = (struct qp_attr){.name = "pads", .type = QP_ATTR_INTS, .n = 4, .ints = cv->pads};
    cv->attrs[1] =
        (struct qp_attr){.name = "strides", .type = QP_ATTR_INTS, .n = 2, .ints = cv->strides};
    cv->attrs[2] =
        (struct qp_attr){.name = "dilations", .type = QP_ATTR_INTS, .n = 2, .ints = cv->dil};
    cv->attrs[3] = (struct qp_attr){.name = "group", .type = QP_ATTR_INT, .i = group};
    cv->node = (struct qp_node){
        .name = "conv", .op_type = "Conv", .domain = "", .n_attrs = 4, .attrs = cv->attrs};
    int64_t ek = (k - 1) * dil + 1;
    cv->ho = (sh->h + sh->pt + sh->pb - ek) / stride + 1;
    cv->wo = (sh->w + sh->pl + sh->pr - ek) / stride + 1;
    cv->nx = (uint64_t)(sh->n * sh->c * sh->h * sh->w);
    cv->ny = (uint64_t)(sh->n * sh->m * cv->ho * cv->wo);
    uint64_t nw = (uint64_t)(sh->m * (sh->c / group) * k * k);
    cv->x = kh_rand_buf(&rng_state, cv->nx);
    cv->w = kh_rand_buf(&rng_state, nw);
    cv->b = kh_rand_buf(&rng_state, (uint64_t)sh->m);
    cv->res = kh_rand_buf(&rng_state, cv->ny);
    int64_t dx[4] = {sh->n, sh->c, sh->h, sh->w}, dw[4] = {sh->m, sh->c / group, k, k};
    int64_t db[1] = {sh->m}, dy[4] = {sh->n, sh->m, cv->ho, cv->wo};
    cv->in[0] = kt(4, dx, cv->x, 0);
    cv->in[1] = kt(4, dw, cv->w, 1);
    cv->in[2] = kt(1, db, cv->b, 1);
    cv->in[3] = kt(4, dy, cv->res, 0);
}

static void conv_free(struct conv *cv) {
    free(cv->x);
    free(cv->w);
    free(cv->b);
    free(cv->res);
}

/* A prepare of the node (input 3, the residual, is not the node's). */
static struct qp_kprep prep_of(struct conv *cv, const struct qp_kt **ins, struct qp_kt *out,
                               struct qp_kt **outs, struct qp_error *err) {
    ins[0] = &cv->in[0];
    ins[1] = &cv->in[1];
    ins[2] = cv->sh.bias ? &cv->in[2] : NULL;
    ins[3] = &cv->in[3];
    memset(out, 0, sizeof *out);
    outs[0] = out;
    return (struct qp_kprep){.node = &cv->node,
                             .opset = 17,
                             .n_in = cv->sh.bias ? 3 : 2,
                             .n_out = 1,
                             .in = ins,
                             .out = outs,
                             .err = err,
                             .missing_const = -1};
}

/* The reference convolution, then the post-operations with the residual: NCHW, malloc'd. */
static float *reference(struct conv *cv, int n_post, const struct qp_conv_post *post) {
    const struct qp_kt *ins[4];
    struct qp_kt out, *outs[1];
    struct qp_error err = {0};
    struct qp_kprep p = prep_of(cv, ins, &out, outs, &err);
    assert_int_equal(qp_k_conv_prepare(&p), QP_OK);
    assert_int_equal(out.numel, cv->ny);
    float *y = malloc(out.nbytes);
    assert_non_null(y);
    out.data = y;
    void *scratch = p.scratch ? aligned_alloc(64, (p.scratch + 63) / 64 * 64) : NULL;
    struct qp_krun r = {.node = &cv->node,
                        .state = p.state,
                        .n_in = p.n_in,
                        .n_out = 1,
                        .in = ins,
                        .out = outs,
                        .scratch = scratch,
                        .n_threads = 1,
                        .err = &err};
    assert_int_equal(qp_k_conv_run(&r), QP_OK);
    for (uint64_t i = 0; i < cv->ny; i++)
        y[i] = qp_conv_post_ref(n_post, post, y[i], cv->res[i]);
    free(scratch);
    free(p.state);
    return y;
}

/* ---- layouts --------------------------------------------------------------------------------- */

/* The layouts the Winograd path reads and writes, whatever the CPU: this machine's oneDNN picks
 * one of them (nChw8c on AVX2, NHWC or nChw16c on AVX-512), these tests take each of them. */
enum lay_kind { LAY_NCHW, LAY_NCHW8C, LAY_NCHW16C, LAY_NHWC, LAY_COUNT };
static const char *const lay_names[] = {"NCHW", "nChw8c", "nChw16c", "NHWC"};
_Static_assert(sizeof lay_names / sizeof lay_names[0] == LAY_COUNT, "a name per layout");

static struct qp_wino_layout layout(int kind, int64_t c, int64_t hw) {
    switch (kind) {
    case LAY_NCHW8C:
        return (struct qp_wino_layout){8, (c + 7) / 8 * 8 * hw, 8 * hw, 8};
    case LAY_NCHW16C:
        return (struct qp_wino_layout){16, (c + 15) / 16 * 16 * hw, 16 * hw, 16};
    case LAY_NHWC:
        return (struct qp_wino_layout){c, c * hw, 1, c};
    default:
        return (struct qp_wino_layout){1, c * hw, hw, 1};
    }
}

static size_t layout_floats(const struct qp_wino_layout *l, int64_t n, int64_t c, int64_t hw) {
    (void)c;
    (void)hw;
    return (size_t)(n * l->sn);
}

static int64_t layout_off(const struct qp_wino_layout *l, int64_t b, int64_t ch, int64_t pix) {
    return b * l->sn + ch / l->blk * l->sc + pix * l->sp + ch % l->blk;
}

/* NCHW -> layout; the padding channels of a partial block get NaN, which must never leak. */
static float *to_layout(const float *src, int64_t n, int64_t c, int64_t hw,
                        const struct qp_wino_layout *l) {
    size_t nf = layout_floats(l, n, c, hw);
    float *d = malloc((nf ? nf : 1) * sizeof *d);
    assert_non_null(d);
    for (size_t i = 0; i < nf; i++)
        d[i] = NAN;
    for (int64_t b = 0; b < n; b++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t p = 0; p < hw; p++)
                d[layout_off(l, b, ch, p)] = src[(b * c + ch) * hw + p];
    return d;
}

static float *from_layout(const float *src, int64_t n, int64_t c, int64_t hw,
                          const struct qp_wino_layout *l) {
    float *d = malloc((size_t)(n * c * hw) * sizeof *d);
    assert_non_null(d);
    for (int64_t b = 0; b < n; b++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t p = 0; p < hw; p++)
                d[(b * c + ch) * hw + p] = src[layout_off(l, b, ch, p)];
    return d;
}

/* ---- post-operation lists -------------------------------------------------------------------- */

static const struct qp_conv_post post_lists[][4] = {
    {{0, 0, 0}},
    {{QP_CONV_POST_RELU, 0, 0}},
    {{QP_CONV_POST_RELU, 0.1f, 0}, {QP_CONV_POST_SIGMOID, 0, 0}},
    {{QP_CONV_POST_LINEAR, 1.3f, 0.25f}, {QP_CONV_POST_HARDSWISH, 0, 0}},
    {{QP_CONV_POST_LINEAR, 0.2f, 0.5f}, {QP_CONV_POST_CLIP, 0, 1}},
    {{QP_CONV_POST_SUM, 1, 0}, {QP_CONV_POST_RELU, 0, 0}},
    {{QP_CONV_POST_CLIP, -0.5f, 0.5f}, {QP_CONV_POST_SUM, 1, 0}, {QP_CONV_POST_LINEAR, 2, -1}},
};
static const int post_counts[] = {0, 1, 2, 2, 2, 2, 3};
#define N_POST_LISTS ((int)(sizeof post_counts / sizeof post_counts[0]))

/* ---- direct: qp_wino_plan / qp_wino_weights / qp_wino_run ---------------------------------- */

struct plan {
    struct qp_wino wp;
    float *u;
    void *scratch;
};

static void plan_make(struct conv *cv, struct plan *pl) {
    const struct qp_kt *ins[4];
    struct qp_kt out, *outs[1];
    struct qp_error err = {0};
    struct qp_kprep p = prep_of(cv, ins, &out, outs, &err);
    struct qp_conv_state g;
    assert_int_equal(qp_conv_geometry(&p, 0, &g), QP_OK);
    qp_wino_plan(&g, 2, &pl->wp);
    assert_int_equal(pl->wp.ho, cv->ho);
    assert_int_equal(pl->wp.wo, cv->wo);
    pl->u = aligned_alloc(64, (qp_wino_weight_bytes(&pl->wp) + 63) / 64 * 64);
    pl->scratch = aligned_alloc(64, (qp_wino_scratch_bytes(&pl->wp) + 63) / 64 * 64);
    assert_non_null(pl->u);
    assert_non_null(pl->scratch);
    qp_wino_weights(&pl->wp, cv->w, pl->u);
}

static void plan_free(struct plan *pl) {
    free(pl->u);
    free(pl->scratch);
}

/* Runs the plan on the tensors in the given layouts; returns y in layout ly (malloc'd, filled
 * with a marker first so that unwritten elements show). */
static float *direct_run(struct conv *cv, struct plan *pl, const struct qp_wino_layout *lx,
                         const struct qp_wino_layout *ly, const float *xl, const float *rl, int l,
                         int portable, int threads) {
    const struct shape *sh = &cv->sh;
    size_t ny = layout_floats(ly, sh->n, sh->m, cv->ho * cv->wo);
    float *y = malloc((ny ? ny : 1) * sizeof *y);
    assert_non_null(y);
    memset(y, 0xCD, ny * sizeof *y);
    struct qp_wino_io io = {.x = xl,
                            .bias = sh->bias ? cv->b : NULL,
                            .res = rl,
                            .y = y,
                            .lx = *lx,
                            .lres = *ly,
                            .ly = *ly,
                            .n_post = post_counts[l],
                            .post = post_lists[l],
                            .portable = portable};
    qp_wino_run(&pl->wp, pl->u, &io, pl->scratch, threads);
    return y;
}

/* One shape: post-operation list `only_l` and layout pair `only_lay` (x's enum lay_kind is
 * only_lay % LAY_COUNT, that of y and the residual only_lay / LAY_COUNT), or all of them for -1. */
static void direct_case(const struct shape *sh, int only_l, int only_lay) {
    struct conv cv;
    conv_init(&cv, sh, 3, 1, 1, 1);
    struct plan pl;
    plan_make(&cv, &pl);
    int64_t hw = sh->h * sh->w, ohw = cv.ho * cv.wo;
    for (int l = 0; l < N_POST_LISTS; l++) {
        if (only_l >= 0 && l != only_l) continue;
        float *want = reference(&cv, post_counts[l], post_lists[l]);
        for (int lay = 0; lay < LAY_COUNT * LAY_COUNT; lay++) {
            if (only_lay >= 0 && lay != only_lay) continue;
            int kx = lay % LAY_COUNT, ky = lay / LAY_COUNT;
            struct qp_wino_layout lx = layout(kx, sh->c, hw);
            struct qp_wino_layout ly = layout(ky, sh->m, ohw);
            float *xl = to_layout(cv.x, sh->n, sh->c, hw, &lx);
            float *rl = to_layout(cv.res, sh->n, sh->m, ohw, &ly);
            size_t ny = layout_floats(&ly, sh->n, sh->m, ohw);
            /* The plain-C twin on same-layout pairs only (the addressing is shared code). */
            for (int portable = 0; portable < (kx == ky || only_lay >= 0 ? 2 : 1); portable++) {
                float *y1 = direct_run(&cv, &pl, &lx, &ly, xl, rl, l, portable, 1);
                float *y2 = direct_run(&cv, &pl, &lx, &ly, xl, rl, l, portable, 2);
                char what[200];
                snprintf(what, sizeof what,
                         "n %lld c %lld m %lld %lldx%lld pads %lld,%lld,%lld,%lld bias %d, post "
                         "list %d, x %s, y %s, %s",
                         (long long)sh->n, (long long)sh->c, (long long)sh->m, (long long)sh->h,
                         (long long)sh->w, (long long)sh->pt, (long long)sh->pl, (long long)sh->pb,
                         (long long)sh->pr, sh->bias, l, lay_names[kx], lay_names[ky],
                         portable ? "plain C" : "dispatched");
                if (memcmp(y1, y2, ny * sizeof *y1) != 0) {
                    fprintf(stderr, "%s: 1 and 2 threads differ\n", what);
                    fail();
                }
                float *got = from_layout(y1, sh->n, sh->m, ohw, &ly);
                kh_assert_close(got, want, cv.ny, (double)(sh->c * 9), what);
                /* A blocked output's padding channels are zeros (oneDNN's convention): with 16
                 * channel blocks, also a whole 8-channel group past the last one computed. */
                int64_t padded = (sh->m + ly.blk - 1) / ly.blk * ly.blk;
                for (int64_t b = 0; ky != LAY_NCHW && b < sh->n; b++)
                    for (int64_t ch = sh->m; ch < padded; ch++)
                        for (int64_t p = 0; p < ohw; p++)
                            assert_true(y1[layout_off(&ly, b, ch, p)] == 0.0f);
                free(got);
                free(y1);
                free(y2);
            }
            free(xl);
            free(rl);
        }
        free(want);
    }
    plan_free(&pl);
    conv_free(&cv);
}

static void test_direct_shapes(void **state) {
    (void)state;
    static const struct shape shapes[] = {
        /* n  c   m   h   w  pt pl pb pr bias */
        {1, 32, 32, 9, 7, 1, 1, 1, 1, 1},   /* odd sizes */
        {3, 16, 24, 6, 11, 0, 1, 1, 0, 1},  /* batch 3, asymmetric pads */
        {1, 13, 20, 5, 5, 1, 0, 0, 1, 0},   /* channels not multiples of 8, no bias */
        {1, 8, 40, 3, 3, 0, 0, 0, 0, 1},    /* one output pixel */
        {2, 40, 9, 8, 10, 1, 1, 0, 0, 1},   /* a partial output block */
        {1, 8, 16, 40, 37, 1, 1, 1, 1, 1},  /* several tile groups */
        {2, 24, 16, 30, 29, 1, 0, 1, 0, 0}, /* groups across the two images */
        {1, 3, 5, 4, 6, 0, 1, 0, 1, 1},     /* fewer than 8 channels */
        {1, 64, 48, 14, 13, 1, 1, 1, 1, 1}, /* ResNet-like */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        direct_case(&shapes[i], -1, -1);
}

/* Random shapes (seeded: the same every run), one random post-operation list and layout pair
 * each. */
static void test_direct_random(void **state) {
    (void)state;
    uint32_t r = 77u;
    for (int i = 0; i < 24; i++) {
        uint32_t v[10];
        for (int k = 0; k < 10; k++) {
            r = r * 1664525u + 1013904223u;
            v[k] = r >> 8;
        }
        struct shape sh = {.n = 1 + (int64_t)(v[0] % 3),
                           .c = 1 + (int64_t)(v[1] % 72),
                           .m = 1 + (int64_t)(v[2] % 72),
                           .h = 1 + (int64_t)(v[3] % 23),
                           .w = 1 + (int64_t)(v[4] % 23),
                           .pt = v[5] & 1,
                           .pl = v[5] >> 1 & 1,
                           .pb = v[5] >> 2 & 1,
                           .pr = v[5] >> 3 & 1,
                           .bias = (int)(v[6] & 1)};
        /* The output must have a pixel: 3x3 needs h + pads >= 3. */
        if (sh.h + sh.pt + sh.pb < 3) sh.h = 3;
        if (sh.w + sh.pl + sh.pr < 3) sh.w = 3;
        direct_case(&sh, (int)(v[7] % N_POST_LISTS), (int)(v[8] % (LAY_COUNT * LAY_COUNT)));
    }
}

/* ---- accuracy on ResNet-50's shapes -----------------------------------------------------------
 */

/* Largest |y - exact| / max |exact| of the Winograd path and of the reference kernel, the exact
 * result computed in double (printed for the record: Winograd 3e-7 to 7e-7, the reference
 * kernel's float sums 8e-7 to 2e-6 on these shapes). The transforms add a few roundings per
 * output but each GEMM sums over c terms, not 9 c: the bound is the reference's level. No
 * element-wise comparison with the float reference here: at 4608 terms its own error on small
 * outputs passes the unit tests' tolerance. */
static void test_accuracy_resnet(void **state) {
    (void)state;
    static const struct shape shapes[] = {
        {1, 64, 64, 56, 56, 1, 1, 1, 1, 1},
        {1, 128, 128, 28, 28, 1, 1, 1, 1, 1},
        {1, 256, 256, 14, 14, 1, 1, 1, 1, 1},
        {1, 512, 512, 7, 7, 1, 1, 1, 1, 1},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const struct shape *sh = &shapes[i];
        struct conv cv;
        conv_init(&cv, sh, 3, 1, 1, 1);
        struct plan pl;
        plan_make(&cv, &pl);
        struct qp_wino_layout lx = layout(LAY_NCHW, sh->c, sh->h * sh->w);
        struct qp_wino_layout ly = layout(LAY_NCHW, sh->m, cv.ho * cv.wo);
        float *y = direct_run(&cv, &pl, &lx, &ly, cv.x, cv.res, 0, 0, 2);
        double maxv = 0, ew = 0, er = 0;
        /* Every 8th output channel (the sanitizer build runs this too); fr sums in float in the
         * reference kernel's order (conv.c). */
        for (int64_t m = 0; m < sh->m; m += 8)
            for (int64_t oy = 0; oy < cv.ho; oy++)
                for (int64_t ox = 0; ox < cv.wo; ox++) {
                    double acc = cv.b[m];
                    float fr = cv.b[m];
                    for (int64_t c = 0; c < sh->c; c++)
                        for (int64_t ky = 0; ky < 3; ky++)
                            for (int64_t kx = 0; kx < 3; kx++) {
                                int64_t iy = oy + ky - 1, ix = ox + kx - 1;
                                if (iy < 0 || iy >= sh->h || ix < 0 || ix >= sh->w) continue;
                                float wv = cv.w[((m * sh->c + c) * 3 + ky) * 3 + kx];
                                float xv = cv.x[(c * sh->h + iy) * sh->w + ix];
                                acc += (double)wv * xv;
                                fr += xv * wv;
                            }
                    int64_t o = (m * cv.ho + oy) * cv.wo + ox;
                    maxv = fmax(maxv, fabs(acc));
                    ew = fmax(ew, fabs(y[o] - acc));
                    er = fmax(er, fabs(fr - acc));
                }
        fprintf(stderr,
                "winograd accuracy %lld@%lldx%lld: max |y - exact| / max |exact|: Winograd %.3g, "
                "reference kernel %.3g\n",
                (long long)sh->c, (long long)sh->h, (long long)sh->w, ew / maxv, er / maxv);
        assert_true(ew / maxv < 2e-6);
        free(y);
        plan_free(&pl);
        conv_free(&cv);
    }
}

/* ---- through the Conv kernel state --------------------------------------------------------------
 */

static void *state_prepare(struct conv *cv, int fused, int n_post, const struct qp_conv_post *post,
                           size_t *scratch_out) {
    const struct qp_kt *ins[4];
    struct qp_kt out, *outs[1];
    struct qp_error err = {0};
    struct qp_kprep p = prep_of(cv, ins, &out, outs, &err);
    if (fused) {
        /* The fused prepare takes the bias always (the fusion pass makes one when absent). */
        p.n_in = 3;
        ins[2] = &cv->in[2];
    }
    enum qp_status st =
        fused ? qp_dnnl_conv_fused_prepare(&p, 0, n_post, post) : qp_k_dnnl_conv_prepare(&p);
    if (st) fprintf(stderr, "prepare: %s\n", err.msg);
    assert_int_equal(st, QP_OK);
    *scratch_out = p.scratch;
    return p.state;
}

static int takes(const struct shape *sh, int64_t k, int64_t stride, int64_t dil, int64_t group) {
    struct conv cv;
    conv_init(&cv, sh, k, stride, dil, group);
    size_t scratch;
    void *st = state_prepare(&cv, 0, 0, NULL, &scratch);
    assert_true(qp_dnnl_conv_state_uses_dnnl(st));
    int w = qp_dnnl_conv_state_uses_winograd(st);
    free(st);
    conv_free(&cv);
    return w;
}

/* The CPU part of the choice: a pure rule, then the process's answer and its override. */
static void test_cpu_rule(void **state) {
    (void)state;
    assert_true(qp_wino_cpu_rule(QP_ISA_PORTABLE, 0));
    assert_true(qp_wino_cpu_rule(QP_ISA_AVX2, 0));
    assert_true(qp_wino_cpu_rule(QP_ISA_AVX512, 0));  /* AMD EPYC Zen 4 / 5 */
    assert_false(qp_wino_cpu_rule(QP_ISA_AVX512, 1)); /* Intel Xeon with AMX */
    assert_true(qp_wino_cpu_rule(QP_ISA_AVX2, 1));    /* such a CPU capped at AVX2 */
    unsetenv("QP_WINOGRAD");
    assert_int_equal(qp_wino_cpu_prefers(), qp_wino_cpu_rule(qp_kernel_isa(), qp_isa_has_amx()));
    setenv("QP_WINOGRAD", "1", 1);
    assert_true(qp_wino_cpu_prefers());
    setenv("QP_WINOGRAD", "0", 1);
    assert_int_equal(qp_wino_cpu_prefers(), qp_wino_cpu_rule(qp_kernel_isa(), qp_isa_has_amx()));
    /* Through a state: on this CPU's own rule, then forced. */
    const struct shape base = {1, 64, 64, 14, 14, 1, 1, 1, 1, 1};
    unsetenv("QP_WINOGRAD");
    unsetenv("QP_NO_WINOGRAD");
    assert_int_equal(takes(&base, 3, 1, 1, 1), qp_wino_cpu_prefers());
    setenv("QP_WINOGRAD", "1", 1);
    assert_true(takes(&base, 3, 1, 1, 1));
}

/* The shapes' part of the choice (on any CPU: QP_WINOGRAD=1). */
static void test_selection(void **state) {
    (void)state;
    const struct shape base = {1, 64, 64, 14, 14, 1, 1, 1, 1, 1};
    setenv("QP_WINOGRAD", "1", 1);
    unsetenv("QP_NO_WINOGRAD");
    assert_true(takes(&base, 3, 1, 1, 1));
    struct shape s = base;
    s.pt = s.pl = 0;
    assert_true(takes(&s, 3, 1, 1, 1)); /* pads 0 on two sides */
    s = base;
    s.n = 3;
    s.c = 64;
    s.m = 72;
    assert_true(takes(&s, 3, 1, 1, 1));
    /* Not for these: stride, kernel size, dilation, groups, pads of 2, few or odd channels. */
    assert_false(takes(&base, 3, 2, 1, 1));
    assert_false(takes(&base, 5, 1, 1, 1));
    assert_false(takes(&base, 1, 1, 1, 1));
    assert_false(takes(&base, 3, 1, 2, 1));
    assert_false(takes(&base, 3, 1, 1, 2));
    s = base;
    s.pb = 2;
    assert_false(takes(&s, 3, 1, 1, 1));
    s = base;
    s.c = 56;
    assert_false(takes(&s, 3, 1, 1, 1));
    s = base;
    s.m = 32;
    assert_false(takes(&s, 3, 1, 1, 1));
    s = base;
    s.m = 68;
    assert_false(takes(&s, 3, 1, 1, 1));
    s = base;
    s.c = 76;
    assert_false(takes(&s, 3, 1, 1, 1));
    /* The switch for A/B runs ("0" or empty: not set). */
    setenv("QP_NO_WINOGRAD", "1", 1);
    assert_false(takes(&base, 3, 1, 1, 1));
    setenv("QP_NO_WINOGRAD", "0", 1);
    assert_true(takes(&base, 3, 1, 1, 1));
    setenv("QP_NO_WINOGRAD", "", 1);
    assert_true(takes(&base, 3, 1, 1, 1));
    unsetenv("QP_NO_WINOGRAD");
    /* The transformed weights count as the state's one weight reorder. */
    size_t before = qp_dnnl_conv_weight_reorders();
    assert_true(takes(&base, 3, 1, 1, 1));
    assert_int_equal(qp_dnnl_conv_weight_reorders(), before + 1);
}

/* Offset of (b, ch, pix) in a oneDNN blocked descriptor with at most one inner block. */
static int64_t md_off(const dnnl_memory_desc_t *md, int64_t b, int64_t ch, int64_t y, int64_t x) {
    const dnnl_blocking_desc_t *bd = &md->format_desc.blocking;
    int64_t blk = bd->inner_nblks ? bd->inner_blks[0] : 1;
    return b * bd->strides[0] + ch / blk * bd->strides[1] + y * bd->strides[2] +
           x * bd->strides[3] + ch % blk;
}

/* Runs a state on NCHW tensors or, blocked, on the tensors converted into the layout the state
 * advertises (input, residual and output: C == M and pads keep the size, so one layout);
 * returns y in NCHW. */
static float *state_run(struct conv *cv, void *st, size_t scratch_bytes, int blocked, int has_sum,
                        int threads) {
    const struct shape *sh = &cv->sh;
    int64_t hw = sh->h * sh->w, ohw = cv->ho * cv->wo;
    const float *x = cv->x, *res = cv->res;
    float *xb = NULL, *rb = NULL, *yb = NULL;
    const dnnl_memory_desc_t *md = NULL;
    size_t bytes = (size_t)cv->ny * sizeof(float);
    if (blocked) {
        size_t mdb = 0;
        md = qp_dnnl_conv_blocked_dst(st, &mdb);
        assert_non_null(md);
        assert_int_equal(md->format_kind, dnnl_blocked);
        assert_true(md->format_desc.blocking.inner_nblks <= 1);
        assert_true(qp_dnnl_conv_accepts(st, 0, md));
        assert_int_equal(qp_dnnl_conv_accepts(st, 3, md), has_sum);
        qp_dnnl_conv_set_blocked(st, 0, 1);
        qp_dnnl_conv_set_blocked(st, 3, has_sum);
        qp_dnnl_conv_set_blocked(st, -1, 1);
        bytes = mdb;
        size_t nf = mdb / sizeof(float);
        xb = malloc(mdb);
        rb = malloc(mdb);
        assert_non_null(xb);
        assert_non_null(rb);
        for (size_t i = 0; i < nf; i++)
            xb[i] = rb[i] = 0.0f;
        for (int64_t b = 0; b < sh->n; b++)
            for (int64_t c = 0; c < sh->c; c++)
                for (int64_t p = 0; p < hw; p++) {
                    xb[md_off(md, b, c, p / sh->w, p % sh->w)] = x[(b * sh->c + c) * hw + p];
                    rb[md_off(md, b, c, p / sh->w, p % sh->w)] = res[(b * sh->c + c) * hw + p];
                }
        x = xb;
        res = rb;
    }
    yb = malloc(bytes);
    assert_non_null(yb);
    memset(yb, 0xCD, bytes);
    struct qp_kt tx = cv->in[0], tr = cv->in[3], ty = cv->in[3];
    tx.data = (void *)x;
    tr.data = (void *)res;
    ty.data = yb;
    const struct qp_kt *ins[4] = {&tx, &cv->in[1], &cv->in[2], &tr};
    struct qp_kt *outs[1] = {&ty};
    void *scratch = scratch_bytes ? aligned_alloc(64, (scratch_bytes + 63) / 64 * 64) : NULL;
    struct qp_error err = {0};
    struct qp_krun r = {.node = &cv->node,
                        .state = st,
                        .n_in = 4,
                        .n_out = 1,
                        .in = ins,
                        .out = outs,
                        .scratch = scratch,
                        .n_threads = threads,
                        .err = &err};
    assert_int_equal(qp_k_dnnl_conv_run(&r), QP_OK);
    free(scratch);
    float *y = yb;
    if (blocked) {
        y = malloc((size_t)cv->ny * sizeof *y);
        assert_non_null(y);
        for (int64_t b = 0; b < sh->n; b++)
            for (int64_t m = 0; m < sh->m; m++)
                for (int64_t p = 0; p < ohw; p++)
                    y[(b * sh->m + m) * ohw + p] = yb[md_off(md, b, m, p / cv->wo, p % cv->wo)];
        free(yb);
        qp_dnnl_conv_set_blocked(st, 0, 0);
        qp_dnnl_conv_set_blocked(st, 3, 0);
        qp_dnnl_conv_set_blocked(st, -1, 0);
    }
    free(xb);
    free(rb);
    return y;
}

/* Fused post-operations through the state, NCHW and blocked: the reference within tolerance,
 * 1 == 2 threads and NCHW == blocked bit for bit (the same arithmetic, only the addressing
 * differs). */
static void test_state_fused(void **state) {
    (void)state;
    setenv("QP_WINOGRAD", "1", 1); /* on any CPU */
    unsetenv("QP_NO_WINOGRAD");
    static const struct shape shapes[] = {
        {1, 64, 64, 9, 7, 1, 1, 1, 1, 1},
        {3, 72, 72, 6, 5, 1, 1, 1, 1, 1},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        struct conv cv;
        conv_init(&cv, &shapes[i], 3, 1, 1, 1);
        for (int l = 0; l < N_POST_LISTS; l++) {
            size_t scratch;
            void *st = state_prepare(&cv, 1, post_counts[l], post_lists[l], &scratch);
            assert_true(qp_dnnl_conv_state_uses_winograd(st));
            float *want = reference(&cv, post_counts[l], post_lists[l]);
            int has_sum = 0;
            for (int k = 0; k < post_counts[l]; k++)
                has_sum |= post_lists[l][k].kind == QP_CONV_POST_SUM;
            float *y1 = state_run(&cv, st, scratch, 0, has_sum, 1);
            float *y2 = state_run(&cv, st, scratch, 0, has_sum, 2);
            /* The state joins the blocked chain in whatever layout oneDNN picks: nChw8c on AVX2
             * (NHWC there for an eltwise before a sum, list 6), NHWC or nChw16c on AVX-512. */
            size_t bytes = 0;
            int blocked = qp_dnnl_conv_blocked_dst(st, &bytes) != NULL;
            if (!blocked) fail_msg("shape %zu, post list %d: no blocked layout advertised", i, l);
            float *b1 = state_run(&cv, st, scratch, blocked, has_sum, 1);
            float *b2 = state_run(&cv, st, scratch, blocked, has_sum, 2);
            char what[80];
            snprintf(what, sizeof what, "state, shape %zu, post list %d", i, l);
            kh_assert_close(y1, want, cv.ny, (double)(cv.sh.c * 9), what);
            assert_memory_equal(y1, y2, cv.ny * sizeof *y1);
            assert_memory_equal(y1, b1, cv.ny * sizeof *y1);
            assert_memory_equal(y1, b2, cv.ny * sizeof *y1);
            free(want);
            free(y1);
            free(y2);
            free(b1);
            free(b2);
            free(st);
        }
        /* The plain Conv row takes the path too, with or without a bias. */
        for (int bias = 0; bias < 2; bias++) {
            cv.sh.bias = bias;
            size_t scratch;
            void *st = state_prepare(&cv, 0, 0, NULL, &scratch);
            assert_true(qp_dnnl_conv_state_uses_winograd(st));
            float *want = reference(&cv, 0, NULL);
            float *y1 = state_run(&cv, st, scratch, 0, 0, 2);
            kh_assert_close(y1, want, cv.ny, (double)(cv.sh.c * 9), "plain Conv row");
            free(want);
            free(y1);
            free(st);
        }
        conv_free(&cv);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_direct_shapes),   cmocka_unit_test(test_direct_random),
        cmocka_unit_test(test_accuracy_resnet), cmocka_unit_test(test_cpu_rule),
        cmocka_unit_test(test_selection),       cmocka_unit_test(test_state_fused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
