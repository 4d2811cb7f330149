/* The oneDNN kernels (Conv, ConvTranspose, MatMul, Gemm) against the reference kernels on many
 * shapes (|a-b| <= 1e-5 + 1e-4*|b|), and bit-identical results with 1 and 2 threads. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/dnnl_conv.h"
#include "kernels/dnnl_matmul.h"
#include "kernels/dnnl_binary.h"
#include "kernels/dnnl_softmax.h"
#include "kernels/dnnl_util.h"
#include "kernels/kernels.h"

#include "kharness.h"

static uint32_t rng_state = 12345u;

static int test_opset = 17;
static int expect_dnnl = 1;  /* the fast rows must really run on oneDNN */
static int expect_exact = 0; /* elementwise: bit-identical to the reference */

static struct qp_kt kt(int rank, const int64_t *dims, void *data, int is_const) {
    struct qp_kt t;
    memset(&t, 0, sizeof t);
    assert_int_equal(qp_kt_set(&t, QP_DTYPE_FLOAT, rank, dims, NULL), QP_OK);
    t.data = data;
    t.is_const = is_const;
    return t;
}

/* Prepares and runs one kernel; output 0 is malloc'd into *y_out (numel in *n_out). */
static void run_kernel(qp_kprepare_fn prep, qp_krun_fn run, const char *op, struct qp_attr *attrs,
                       int n_attrs, int n_in, struct qp_kt *in, int threads, float **y_out,
                       uint64_t *n_out, struct qp_kt *out_shape) {
    struct qp_node node = {
        .name = "n", .op_type = op, .domain = "", .n_attrs = n_attrs, .attrs = attrs};
    const struct qp_kt *ins[3] = {&in[0], n_in > 1 ? &in[1] : NULL, n_in > 2 ? &in[2] : NULL};
    struct qp_kt out;
    memset(&out, 0, sizeof out);
    struct qp_kt *outs[1] = {&out};
    struct qp_error err = {0};
    struct qp_kprep p = {.node = &node,
                         .opset = test_opset,
                         .n_in = n_in,
                         .n_out = 1,
                         .in = ins,
                         .out = outs,
                         .err = &err,
                         .missing_const = -1};
    enum qp_status st = prep(&p);
    if (st) fprintf(stderr, "prepare %s: %s\n", op, err.msg);
    assert_int_equal(st, QP_OK);
    float *y = malloc(out.nbytes ? out.nbytes : 4);
    assert_non_null(y);
    memset(y, 0xCD, out.nbytes); /* catch unwritten elements */
    out.data = y;
    void *scratch = p.scratch ? aligned_alloc(64, (p.scratch + 63) / 64 * 64) : NULL;
    struct qp_krun r = {.node = &node,
                        .state = p.state,
                        .n_in = n_in,
                        .n_out = 1,
                        .in = ins,
                        .out = outs,
                        .scratch = scratch,
                        .n_threads = threads,
                        .err = &err};
    st = run(&r);
    if (st) fprintf(stderr, "run %s: %s\n", op, err.msg);
    assert_int_equal(st, QP_OK);
    if (prep != qp_k_conv_prepare && prep != qp_k_conv_transpose_prepare &&
        prep != qp_k_softmax_prepare && expect_dnnl) {
        int uses = strcmp(op, "Softmax") == 0    ? qp_dnnl_softmax_state_uses_dnnl(p.state)
                   : strncmp(op, "Conv", 4) == 0 ? qp_dnnl_conv_state_uses_dnnl(p.state)
                                                 : 1;
        if (!uses) fprintf(stderr, "%s: the oneDNN row fell back to the reference kernel\n", op);
        assert_true(uses);
    }
    free(scratch);
    free(p.state);
    *y_out = y;
    *n_out = out.numel;
    if (out_shape) *out_shape = out;
}

/* Reference vs oneDNN (1 and 2 threads; those two bit-identical). */
static void check(qp_kprepare_fn ref_prep, qp_krun_fn ref_run, const char *op,
                  struct qp_attr *attrs, int n_attrs, int n_in, struct qp_kt *in, double red,
                  const char *what) {
    const struct qp_kernel *k = qp_kernel_find("", op, test_opset);
    assert_non_null(k);
    float *want, *y1, *y2;
    uint64_t n0, n1, n2;
    run_kernel(ref_prep, ref_run, op, attrs, n_attrs, n_in, in, 1, &want, &n0, NULL);
    run_kernel(k->prepare, k->run, op, attrs, n_attrs, n_in, in, 1, &y1, &n1, NULL);
    run_kernel(k->prepare, k->run, op, attrs, n_attrs, n_in, in, 2, &y2, &n2, NULL);
    assert_int_equal(n0, n1);
    assert_int_equal(n0, n2);
    kh_assert_close(y1, want, n0, red, what);
    if (expect_exact && memcmp(y1, want, n0 * sizeof(float)) != 0) {
        fprintf(stderr, "%s: not bit-identical to the reference\n", what);
        fail();
    }
    if (memcmp(y1, y2, n0 * sizeof(float)) != 0) {
        fprintf(stderr, "%s: 1 and 2 threads differ\n", what);
        fail();
    }
    free(want);
    free(y1);
    free(y2);
}

struct conv_case {
    int nsp;
    int64_t n, c, m, group, size, k, stride, dil, pad_b, pad_e, out_pad;
    int bias;
};

static void conv_case_run(const struct conv_case *cc, int transpose) {
    int64_t dx[5] = {cc->n, cc->c}, dw[5], db[1] = {cc->m};
    uint64_t nx = (uint64_t)(cc->n * cc->c), nw;
    if (!transpose) {
        dw[0] = cc->m;
        dw[1] = cc->c / cc->group;
    } else {
        dw[0] = cc->c;
        dw[1] = cc->m / cc->group;
    }
    nw = (uint64_t)(dw[0] * dw[1]);
    int64_t strides[3], dils[3], pads[6], opad[3];
    for (int i = 0; i < cc->nsp; i++) {
        dx[2 + i] = cc->size + i; /* non-square */
        dw[2 + i] = cc->k;
        nx *= (uint64_t)dx[2 + i];
        nw *= (uint64_t)cc->k;
        strides[i] = cc->stride;
        dils[i] = cc->dil;
        pads[i] = cc->pad_b;
        pads[cc->nsp + i] = cc->pad_e;
        opad[i] = cc->out_pad;
    }
    float *x = kh_rand_buf(&rng_state, nx), *w = kh_rand_buf(&rng_state, nw),
          *b = kh_rand_buf(&rng_state, (uint64_t)cc->m);
    double red = (double)nw / (double)cc->m * (transpose ? (double)cc->m / (double)cc->c : 1.0);
    struct qp_kt in[3] = {kt(2 + cc->nsp, dx, x, 0), kt(2 + cc->nsp, dw, w, 1), kt(1, db, b, 1)};
    struct qp_attr attrs[5] = {
        {.name = "strides", .type = QP_ATTR_INTS, .n = (size_t)cc->nsp, .ints = strides},
        {.name = "dilations", .type = QP_ATTR_INTS, .n = (size_t)cc->nsp, .ints = dils},
        {.name = "pads", .type = QP_ATTR_INTS, .n = (size_t)(2 * cc->nsp), .ints = pads},
        {.name = "group", .type = QP_ATTR_INT, .i = cc->group},
        {.name = "output_padding", .type = QP_ATTR_INTS, .n = (size_t)cc->nsp, .ints = opad}};
    char what[160];
    snprintf(what, sizeof what,
             "%s nsp %d n %lld c %lld m %lld g %lld size %lld k %lld s %lld d %lld p %lld/%lld",
             transpose ? "ConvTranspose" : "Conv", cc->nsp, (long long)cc->n, (long long)cc->c,
             (long long)cc->m, (long long)cc->group, (long long)cc->size, (long long)cc->k,
             (long long)cc->stride, (long long)cc->dil, (long long)cc->pad_b, (long long)cc->pad_e);
    if (!transpose)
        check(qp_k_conv_prepare, qp_k_conv_run, "Conv", attrs, 4, cc->bias ? 3 : 2, in, red, what);
    else
        check(qp_k_conv_transpose_prepare, qp_k_conv_transpose_run, "ConvTranspose", attrs, 5,
              cc->bias ? 3 : 2, in, red, what);
    free(x);
    free(w);
    free(b);
}

static void test_conv_shapes(void **state) {
    (void)state;
    static const struct conv_case cases[] = {
        /* nsp n c m g size k stride dil pad_b pad_e out_pad bias */
        {2, 1, 3, 16, 1, 20, 7, 2, 1, 3, 3, 0, 1},    /* ResNet stem-like */
        {2, 1, 64, 64, 1, 14, 3, 1, 1, 1, 1, 0, 1},   /* 3x3 */
        {2, 1, 64, 256, 1, 14, 1, 1, 1, 0, 0, 0, 1},  /* 1x1 expand */
        {2, 1, 256, 128, 1, 14, 1, 2, 1, 0, 0, 0, 0}, /* 1x1 stride 2, no bias */
        {2, 2, 32, 32, 32, 9, 3, 1, 1, 1, 1, 0, 1},   /* depthwise, batch 2 */
        {2, 1, 24, 36, 3, 11, 3, 2, 2, 2, 1, 0, 1},   /* groups, dilation, asymmetric pads */
        {2, 1, 5, 7, 1, 9, 4, 3, 1, 0, 2, 0, 1},      /* odd channels, stride 3 */
        {1, 2, 8, 12, 1, 30, 5, 2, 1, 2, 2, 0, 1},    /* 1-D */
        {1, 1, 16, 16, 4, 25, 3, 1, 3, 3, 3, 0, 0},   /* 1-D groups + dilation */
        {3, 1, 4, 8, 1, 6, 3, 1, 1, 1, 1, 0, 1},      /* 3-D */
        {2, 1, 3, 192, 1, 32, 16, 16, 1, 0, 0, 0, 1}, /* patch embed shape class */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        conv_case_run(&cases[i], 0);
}

static void test_conv_transpose_shapes(void **state) {
    (void)state;
    static const struct conv_case cases[] = {
        {2, 1, 16, 8, 1, 10, 2, 2, 1, 0, 0, 0, 1}, /* 2x upsampling (PaddleOCR det head) */
        /* kernel == stride: the GEMM-and-scatter path (deconv_patch.h) */
        {2, 2, 24, 1, 1, 13, 2, 2, 1, 0, 0, 0, 1},  /* det's last layer, batch 2 */
        {2, 1, 24, 24, 1, 40, 2, 2, 1, 0, 0, 0, 0}, /* det's first, no bias, 2 threads split */
        {2, 1, 5, 3, 1, 7, 3, 3, 1, 0, 0, 0, 1},    /* 3x3 stride 3 */
        {1, 1, 6, 4, 1, 9, 4, 4, 1, 0, 0, 0, 1},    /* 1-D */
        {3, 1, 3, 2, 1, 4, 2, 2, 1, 0, 0, 0, 1},    /* 3-D */
        {2, 1, 8, 4, 1, 7, 3, 2, 1, 1, 1, 1, 1},    /* output_padding */
        {2, 1, 12, 6, 3, 6, 4, 2, 1, 1, 1, 0, 0},   /* groups */
        {1, 2, 6, 10, 2, 12, 3, 1, 2, 1, 1, 0, 1},  /* 1-D, dilation */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        conv_case_run(&cases[i], 1);
}

static void matmul_case(int ra, const int64_t *da, int rb, const int64_t *db) {
    uint64_t na = 1, nb = 1;
    for (int i = 0; i < ra; i++)
        na *= (uint64_t)da[i];
    for (int i = 0; i < rb; i++)
        nb *= (uint64_t)db[i];
    float *a = kh_rand_buf(&rng_state, na), *b = kh_rand_buf(&rng_state, nb);
    struct qp_kt in[2] = {kt(ra, da, a, 0), kt(rb, db, b, 1)};
    char what[64];
    snprintf(what, sizeof what, "MatMul rank %d x rank %d, k %lld", ra, rb, (long long)da[ra - 1]);
    check(qp_k_matmul_prepare, qp_k_matmul_run, "MatMul", NULL, 0, 2, in, (double)da[ra - 1], what);
    free(a);
    free(b);
}

static void test_matmul_shapes(void **state) {
    (void)state;
    { /* ViT qkv projection: [1,197,192] x [192,576] */
        int64_t a[3] = {1, 197, 192}, b[2] = {192, 576};
        matmul_case(3, a, 2, b);
    }
    { /* attention scores: [1,3,197,64] x [1,3,64,197] */
        int64_t a[4] = {1, 3, 197, 64}, b[4] = {1, 3, 64, 197};
        matmul_case(4, a, 4, b);
    }
    { /* small M, large K (GEMM would split K across threads) */
        int64_t a[2] = {1, 4096}, b[2] = {4096, 300};
        matmul_case(2, a, 2, b);
    }
    { /* broadcast batch: [2,1,5,33] x [3,33,17] */
        int64_t a[4] = {2, 1, 5, 33}, b[3] = {3, 33, 17};
        matmul_case(4, a, 3, b);
    }
    { /* folded batch: [4,40,64] x [64,70] */
        int64_t a[3] = {4, 40, 64}, b[2] = {64, 70};
        matmul_case(3, a, 2, b);
    }
    { /* vectors */
        int64_t a[1] = {50}, b[2] = {50, 9};
        matmul_case(1, a, 2, b);
        int64_t c[3] = {2, 7, 50}, d[1] = {50};
        matmul_case(3, c, 1, d);
    }
}

static void gemm_case(int64_t m, int64_t n, int64_t k, int ta, int tb, float alpha, float beta,
                      int c_rank, int c_rows) {
    int64_t da[2] = {ta ? k : m, ta ? m : k}, db[2] = {tb ? n : k, tb ? k : n};
    int64_t dc[2] = {c_rows, n};
    if (c_rank == 1) dc[0] = n;
    float *a = kh_rand_buf(&rng_state, (uint64_t)(m * k)),
          *b = kh_rand_buf(&rng_state, (uint64_t)(k * n)),
          *c = kh_rand_buf(&rng_state, (uint64_t)(m * n));
    struct qp_kt in[3] = {kt(2, da, a, 0), kt(2, db, b, 1), kt(c_rank, dc, c, 1)};
    struct qp_attr attrs[4] = {{.name = "transA", .type = QP_ATTR_INT, .i = ta},
                               {.name = "transB", .type = QP_ATTR_INT, .i = tb},
                               {.name = "alpha", .type = QP_ATTR_FLOAT, .f = alpha},
                               {.name = "beta", .type = QP_ATTR_FLOAT, .f = beta}};
    char what[96];
    snprintf(what, sizeof what, "Gemm %lldx%lldx%lld tA %d tB %d C rank %d", (long long)m,
             (long long)n, (long long)k, ta, tb, c_rank);
    check(qp_k_gemm_prepare, qp_k_gemm_run, "Gemm", attrs, 4, c_rank ? 3 : 2, in, (double)k, what);
    free(a);
    free(b);
    free(c);
}

static void test_gemm_shapes(void **state) {
    (void)state;
    gemm_case(1, 1000, 2048, 0, 1, 1.0f, 1.0f, 1, 1); /* ResNet FC */
    gemm_case(197, 192, 768, 0, 1, 1.0f, 1.0f, 1, 1);
    gemm_case(33, 45, 17, 1, 0, 0.5f, 2.0f, 2, 33);  /* full C */
    gemm_case(40, 300, 9, 1, 1, -1.5f, 0.25f, 2, 1); /* C row broadcast */
    gemm_case(5, 7, 300, 0, 0, 1.0f, 1.0f, 0, 1);    /* no C */
}

static void softmax_case(int rank, const int64_t *dims, int64_t axis, int opset) {
    uint64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= (uint64_t)dims[i];
    float *x = kh_rand_buf(&rng_state, n);
    for (uint64_t i = 0; i < n; i++)
        x[i] *= 8.0f; /* a wide range, so exp's accuracy matters */
    struct qp_kt in[1] = {kt(rank, dims, x, 0)};
    struct qp_attr attrs[1] = {{.name = "axis", .type = QP_ATTR_INT, .i = axis}};
    char what[64];
    snprintf(what, sizeof what, "Softmax rank %d axis %lld opset %d", rank, (long long)axis, opset);
    test_opset = opset;
    check(qp_k_softmax_prepare, qp_k_softmax_run, "Softmax", attrs, 1, 1, in, 1.0, what);
    test_opset = 17;
    free(x);
}

static void test_softmax_shapes(void **state) {
    (void)state;
    int64_t att[4] = {1, 3, 197, 197}, mid[3] = {2, 5, 7}, small[3] = {2, 3, 4};
    softmax_case(4, att, -1, 13);  /* ViT attention */
    softmax_case(3, mid, 1, 13);   /* inner > 1 */
    softmax_case(3, small, 1, 11); /* coerced to 2-D at axis 1 */
    softmax_case(3, mid, 0, 17);
}

static void binary_case(const char *op, int ra, const int64_t *da, int rb, const int64_t *db,
                        int dnnl) {
    uint64_t na = 1, nb = 1;
    for (int i = 0; i < ra; i++)
        na *= (uint64_t)da[i];
    for (int i = 0; i < rb; i++)
        nb *= (uint64_t)db[i];
    float *a = kh_rand_buf(&rng_state, na), *b = kh_rand_buf(&rng_state, nb);
    for (uint64_t i = 0; i < nb; i++) /* keep divisors away from 0 */
        b[i] += b[i] < 0 ? -0.5f : 0.5f;
    struct qp_kt in[2] = {kt(ra, da, a, 0), kt(rb, db, b, 1)};
    char what[64];
    snprintf(what, sizeof what, "%s rank %d x rank %d (%llu x %llu)", op, ra, rb,
             (unsigned long long)na, (unsigned long long)nb);
    expect_exact = 1;
    expect_dnnl = dnnl;
    check(qp_k_binary_prepare, qp_k_binary_run, op, NULL, 0, 2, in, 1.0, what);
    expect_exact = 0;
    expect_dnnl = 1;
    free(a);
    free(b);
}

static void test_binary_shapes(void **state) {
    (void)state;
    int64_t big[4] = {1, 32, 80, 80}, chan[4] = {1, 32, 1, 1}, row[1] = {80},
            same[4] = {1, 32, 80, 80};
    int64_t small[3] = {2, 3, 5}, scalar0[1] = {1}, mid[2] = {3, 1};
    static const char *const ops[] = {"Add", "Sub", "Mul", "Div"};
    for (int i = 0; i < 4; i++) {
        binary_case(ops[i], 4, big, 4, chan, 1);      /* per-channel, parallel size */
        binary_case(ops[i], 4, big, 1, row, 1);       /* last-axis broadcast */
        binary_case(ops[i], 4, big, 4, same, 1);      /* same shape */
        binary_case(ops[i], 3, small, 0, scalar0, 1); /* scalar */
        binary_case(ops[i], 3, small, 2, mid, 1);     /* middle broadcast */
    }
    /* First operand broadcasts: Add/Mul swap operands, Sub/Div use the reference kernel. */
    binary_case("Add", 4, chan, 4, big, 1);
    binary_case("Mul", 1, row, 4, big, 1);
    binary_case("Sub", 4, chan, 4, big, 0);
    binary_case("Div", 1, row, 4, big, 0);
    /* Both broadcast: reference. */
    int64_t col[2] = {7, 1}, line[2] = {1, 9};
    binary_case("Add", 2, col, 2, line, 0);
}

/* A session-level check: bias-free Conv whose weights are not constants falls back to the
 * reference kernel and still matches it. */
static void test_conv_nonconst_weights(void **state) {
    (void)state;
    int64_t dx[4] = {1, 8, 9, 9}, dw[4] = {4, 8, 3, 3};
    float *x = kh_rand_buf(&rng_state, 8 * 81), *w = kh_rand_buf(&rng_state, 4 * 8 * 9);
    struct qp_kt in[2] = {kt(4, dx, x, 0), kt(4, dw, w, 0)};
    expect_dnnl = 0;
    check(qp_k_conv_prepare, qp_k_conv_run, "Conv", NULL, 0, 2, in, 72.0, "Conv non-const W");
    expect_dnnl = 1;
    free(x);
    free(w);
}

/* Prepares a fused Conv or ConvTranspose (transpose 1) with attributes `attrs` and `post` and
 * runs it on x (and residual r) with `threads`; returns the output (malloc'd) and whether
 * oneDNN (or a hand path: Winograd, the kernel == stride GEMM) ran it, and in *patch_out the
 * latter. */
static float *fused_run(int transpose, struct qp_attr *attrs, int n_attrs, struct qp_kt *in,
                        const struct qp_kt *res, int n_post, const struct qp_conv_post *post,
                        int threads, int *uses_out, int *patch_out) {
    struct qp_node node = {.name = "n",
                           .op_type = transpose ? "ConvTranspose" : "Conv",
                           .domain = "",
                           .n_attrs = n_attrs,
                           .attrs = attrs};
    const struct qp_kt *ins[4] = {&in[0], &in[1], &in[2], res};
    struct qp_kt out;
    memset(&out, 0, sizeof out);
    struct qp_kt *outs[1] = {&out};
    struct qp_error err = {0};
    struct qp_kprep p = {.node = &node,
                         .opset = test_opset,
                         .n_in = 3,
                         .n_out = 1,
                         .in = ins,
                         .out = outs,
                         .err = &err,
                         .missing_const = -1};
    assert_int_equal(qp_dnnl_conv_fused_prepare(&p, transpose, n_post, post), QP_OK);
    float *y = malloc(out.nbytes);
    assert_non_null(y);
    memset(y, 0xCD, out.nbytes);
    out.data = y;
    void *scratch = p.scratch ? aligned_alloc(64, (p.scratch + 63) / 64 * 64) : NULL;
    struct qp_krun r = {.node = &node,
                        .state = p.state,
                        .n_in = 4,
                        .n_out = 1,
                        .in = ins,
                        .out = outs,
                        .scratch = scratch,
                        .n_threads = threads,
                        .err = &err};
    assert_int_equal(transpose ? qp_k_dnnl_conv_transpose_run(&r) : qp_k_dnnl_conv_run(&r), QP_OK);
    *uses_out = qp_dnnl_conv_state_uses_dnnl(p.state);
    if (patch_out) *patch_out = qp_dnnl_conv_state_uses_patch(p.state);
    free(scratch);
    free(p.state);
    return y;
}

/* A fused ConvTranspose with kernel == stride (the GEMM-and-scatter path, deconv_patch.h): the
 * bias and an affine + Sigmoid after it (PaddleOCR det's head) against the reference
 * ConvTranspose and qp_conv_post_ref, 1 and 2 threads bit for bit. */
static void test_conv_transpose_patch_fused(void **state) {
    (void)state;
    int64_t dx[4] = {2, 24, 13, 11}, dw[4] = {24, 3, 2, 2}, db[1] = {3}, st[2] = {2, 2};
    uint64_t nx = 2 * 24 * 13 * 11, ny = 2 * 3 * 26 * 22;
    float *x = kh_rand_buf(&rng_state, nx), *w = kh_rand_buf(&rng_state, 24 * 3 * 4),
          *b = kh_rand_buf(&rng_state, 3);
    struct qp_kt in[3] = {kt(4, dx, x, 0), kt(4, dw, w, 1), kt(1, db, b, 1)};
    struct qp_attr attrs[1] = {{.name = "strides", .type = QP_ATTR_INTS, .n = 2, .ints = st}};
    static const struct qp_conv_post post[2] = {{QP_CONV_POST_LINEAR, 1.3f, 0.25f},
                                                {QP_CONV_POST_SIGMOID, 0, 0}};
    float *want;
    uint64_t n;
    run_kernel(qp_k_conv_transpose_prepare, qp_k_conv_transpose_run, "ConvTranspose", attrs, 1, 3,
               in, 1, &want, &n, NULL);
    assert_int_equal(n, ny);
    for (uint64_t i = 0; i < n; i++)
        want[i] = qp_conv_post_ref(2, post, want[i], 0.0f);
    int u1, u2, p1, p2;
    float *y1 = fused_run(1, attrs, 1, in, NULL, 2, post, 1, &u1, &p1);
    float *y2 = fused_run(1, attrs, 1, in, NULL, 2, post, 2, &u2, &p2);
    assert_true(u1 && u2 && p1 && p2);
    kh_assert_close(y1, want, n, 24.0, "ConvTranspose kernel == stride, fused");
    assert_memory_equal(y1, y2, n * sizeof *y1);
    free(y1);
    free(y2);
    free(want);
    free(x);
    free(w);
    free(b);
}

/* Fused Conv and ConvTranspose post-operations (the runtime's fusion pass): oneDNN's post-ops
 * against the reference convolution followed by qp_conv_post_ref (rtol 1e-4), 1 == 2 threads bit
 * for bit, and the C fallback (weights not constant) equal to the reference exactly. */
static void conv_fused_post(int transpose) {
    int64_t dx[4] = {1, 16, 7, 9}, dw[4] = {16, 16, 3, 3}, db[1] = {16};
    uint64_t nx = 16 * 7 * 9;
    float *x = kh_rand_buf(&rng_state, nx), *w = kh_rand_buf(&rng_state, 16 * 16 * 9),
          *b = kh_rand_buf(&rng_state, 16), *res = kh_rand_buf(&rng_state, nx);
    struct qp_kt resk = kt(4, dx, res, 0);
    static const struct qp_conv_post lists[][4] = {
        {{QP_CONV_POST_RELU, 0, 0}},
        {{QP_CONV_POST_RELU, 0.1f, 0}, {QP_CONV_POST_SIGMOID, 0, 0}},
        {{QP_CONV_POST_LINEAR, 1.3f, 0.25f}, {QP_CONV_POST_HARDSWISH, 0, 0}},
        {{QP_CONV_POST_LINEAR, 0.2f, 0.5f}, {QP_CONV_POST_CLIP, 0, 1}},
        {{QP_CONV_POST_SUM, 1, 0}, {QP_CONV_POST_RELU, 0, 0}},
        {{QP_CONV_POST_CLIP, -0.5f, 0.5f}, {QP_CONV_POST_SUM, 1, 0}, {QP_CONV_POST_LINEAR, 2, -1}},
    };
    static const int counts[] = {1, 2, 2, 2, 2, 3};
    for (size_t l = 0; l < sizeof counts / sizeof counts[0]; l++) {
        int has_sum = 0;
        for (int i = 0; i < counts[l]; i++)
            has_sum |= lists[l][i].kind == QP_CONV_POST_SUM;
        struct qp_kt in[3] = {kt(4, dx, x, 0), kt(4, dw, w, 1), kt(1, db, b, 1)};
        if (transpose && has_sum) {
            /* A ConvTranspose takes no residual: the fusion pass then fuses a shorter chain. */
            struct qp_node node = {.name = "n", .op_type = "ConvTranspose", .domain = ""};
            const struct qp_kt *ins[3] = {&in[0], &in[1], &in[2]};
            struct qp_kt out;
            memset(&out, 0, sizeof out);
            struct qp_kt *outs[1] = {&out};
            struct qp_error err = {0};
            struct qp_kprep p = {.node = &node,
                                 .opset = test_opset,
                                 .n_in = 3,
                                 .n_out = 1,
                                 .in = ins,
                                 .out = outs,
                                 .err = &err,
                                 .missing_const = -1};
            assert_int_equal(qp_dnnl_conv_fused_prepare(&p, 1, counts[l], lists[l]),
                             QP_ERR_INTERNAL);
            assert_null(p.state);
            continue;
        }
        float *want;
        uint64_t n;
        int64_t pads[4] = {1, 1, 1, 1};
        struct qp_attr attrs[1] = {{.name = "pads", .type = QP_ATTR_INTS, .n = 4, .ints = pads}};
        if (transpose)
            run_kernel(qp_k_conv_transpose_prepare, qp_k_conv_transpose_run, "ConvTranspose", attrs,
                       1, 3, in, 1, &want, &n, NULL);
        else
            run_kernel(qp_k_conv_prepare, qp_k_conv_run, "Conv", attrs, 1, 3, in, 1, &want, &n,
                       NULL);
        assert_int_equal(n, nx);
        for (uint64_t i = 0; i < n; i++)
            want[i] = qp_conv_post_ref(counts[l], lists[l], want[i], res[i]);
        int u1, u2, u3;
        const struct qp_kt *r = has_sum ? &resk : NULL;
        float *y1 = fused_run(transpose, attrs, 1, in, r, counts[l], lists[l], 1, &u1, NULL);
        float *y2 = fused_run(transpose, attrs, 1, in, r, counts[l], lists[l], 2, &u2, NULL);
        assert_true(u1 && u2);
        char what[64];
        snprintf(what, sizeof what, "fused %s, post-op list %zu",
                 transpose ? "ConvTranspose" : "Conv", l);
        kh_assert_close(y1, want, n, 144.0, what);
        assert_memory_equal(y1, y2, n * sizeof *y1);
        in[1].is_const = 0; /* no oneDNN: the reference convolution and the post-ops in C */
        float *y3 = fused_run(transpose, attrs, 1, in, r, counts[l], lists[l], 2, &u3, NULL);
        assert_false(u3);
        assert_memory_equal(y3, want, n * sizeof *y3);
        free(want);
        free(y1);
        free(y2);
        free(y3);
    }
    free(x);
    free(w);
    free(b);
    free(res);
}

static void test_conv_fused_post(void **state) {
    (void)state;
    conv_fused_post(0);
}

static void test_conv_transpose_fused_post(void **state) {
    (void)state;
    conv_fused_post(1);
}

/* A deferred prepare (what the fusion pass gives a convolution it may fuse) validates the node
 * and sets the output's shape as the full prepare does, but makes nothing to run: running the
 * state is an error that leaves the output alone. */
static void test_conv_defer(void **state) {
    (void)state;
    int64_t dx[4] = {1, 4, 5, 6}, dw[4] = {4, 2, 3, 3}, strides[2] = {2, 2};
    float *x = kh_rand_buf(&rng_state, 4 * 30), *w = kh_rand_buf(&rng_state, 4 * 2 * 9);
    struct qp_attr attrs[2] = {{.name = "strides", .type = QP_ATTR_INTS, .n = 2, .ints = strides},
                               {.name = "group", .type = QP_ATTR_INT, .i = 2}};
    for (int t = 0; t < 2; t++) {
        struct qp_node node = {.name = "n",
                               .op_type = t ? "ConvTranspose" : "Conv",
                               .domain = "",
                               .n_attrs = 2,
                               .attrs = attrs};
        struct qp_kt in[2] = {kt(4, dx, x, 0), kt(4, dw, w, 1)};
        const struct qp_kt *ins[2] = {&in[0], &in[1]};
        struct qp_kt out[2];
        memset(out, 0, sizeof out);
        struct qp_kt *o0[1] = {&out[0]}, *o1[1] = {&out[1]};
        struct qp_error err = {0};
        struct qp_kprep p = {.node = &node,
                             .opset = test_opset,
                             .n_in = 2,
                             .n_out = 1,
                             .in = ins,
                             .out = o0,
                             .err = &err,
                             .missing_const = -1};
        assert_int_equal(qp_dnnl_conv_defer_prepare(&p, t), QP_OK);
        assert_true(qp_dnnl_conv_state_deferred(p.state));
        assert_false(qp_dnnl_conv_state_uses_dnnl(p.state));
        assert_int_equal(p.scratch, 0);
        struct qp_kprep q = p;
        q.out = o1;
        q.state = NULL;
        assert_int_equal(t ? qp_k_dnnl_conv_transpose_prepare(&q) : qp_k_dnnl_conv_prepare(&q),
                         QP_OK);
        assert_false(qp_dnnl_conv_state_deferred(q.state));
        assert_int_equal(out[0].rank, 4);
        assert_memory_equal(out[0].dims, out[1].dims, sizeof(int64_t) * 4);
        /* 4 output channels both ways (Conv: W's dim 0; ConvTranspose: dim 1 times group). */
        assert_int_equal(out[0].dims[1], 4);
        assert_int_equal(out[0].dims[2], t ? 11 : 2);
        assert_int_equal(out[0].dims[3], t ? 13 : 2);
        float y[4 * 11 * 13];
        y[0] = 42.0f;
        out[0].data = y;
        struct qp_krun r = {.node = &node,
                            .state = p.state,
                            .n_in = 2,
                            .n_out = 1,
                            .in = ins,
                            .out = o0,
                            .n_threads = 1,
                            .err = &err};
        assert_int_equal(t ? qp_k_dnnl_conv_transpose_run(&r) : qp_k_dnnl_conv_run(&r),
                         QP_ERR_INTERNAL);
        assert_non_null(strstr(err.msg, "before it was prepared"));
        assert_true(y[0] == 42.0f);
        free(p.state);
        free(q.state);
    }
    free(x);
    free(w);
}

/* The primitive cache builds a key once, a failing one too: a kernel asks for its variant on
 * every run, and a build that fails (a one-thread variant oneDNN cannot make with the primary's
 * layouts) cost a primitive-descriptor attempt per run. */
static int n_builds;
static void *build_odd(const void *key, void *ctx) {
    (void)ctx;
    n_builds++;
    static int made;
    return *(const int *)key % 2 ? &made : NULL;
}

static void test_cache_builds_once(void **state) {
    (void)state;
    int fails = 424242, works = 424243; /* keys no kernel uses (another builder anyway) */
    for (int i = 0; i < 3; i++) {
        assert_null(qp_dnnl_cache_get(&fails, sizeof fails, build_odd, NULL));
        assert_non_null(qp_dnnl_cache_get(&works, sizeof works, build_odd, NULL));
    }
    assert_int_equal(n_builds, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_shapes),
        cmocka_unit_test(test_conv_transpose_shapes),
        cmocka_unit_test(test_conv_transpose_patch_fused),
        cmocka_unit_test(test_matmul_shapes),
        cmocka_unit_test(test_gemm_shapes),
        cmocka_unit_test(test_conv_nonconst_weights),
        cmocka_unit_test(test_softmax_shapes),
        cmocka_unit_test(test_binary_shapes),
        cmocka_unit_test(test_conv_fused_post),
        cmocka_unit_test(test_conv_transpose_fused_post),
        cmocka_unit_test(test_conv_defer),
        cmocka_unit_test(test_cache_builds_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
