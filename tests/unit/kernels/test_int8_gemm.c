/* The exact integer cores (kernels/int8_gemm.h) against int64 references: the GEMM's raw sums on
 * random and extreme inputs (x = -128 / -127 / 127 / 255 with zero points, w = -128 / 127, k odd
 * and not a multiple of the vector width, rows and columns at tile edges, k at QP_I8G_MAX_K),
 * with each kernel the bytes allow (vpmaddubsw for bytes below 128, vpmaddubsw of |w| and
 * sign(w) x for int8 without -128, vpmaddwd for any), the AVX2 code and the plain C fallback, 1
 * and 2 threads; the epilogue against the reference path's functions (int8_util.h)
 * bit for bit; im2col and depthwise convolutions against direct loops; the byte scan. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/int8_gemm.h"
#include "kernels/isa.h"

static uint32_t rng = 99u;

static uint32_t next(void) {
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}

/* A value in [lo, hi]. */
static int32_t irand(int32_t lo, int32_t hi) {
    return lo + (int32_t)(next() % (uint32_t)(hi - lo + 1));
}

/* The ISAs this CPU can run: always the plain C one, AVX2 where the kernels' cap allows it. */
static int n_isas(enum qp_isa *out) {
    int n = 0;
    out[n++] = QP_ISA_PORTABLE;
    if (qp_kernel_isa() >= QP_ISA_AVX2) out[n++] = QP_ISA_AVX2;
    return n;
}

/* One GEMM problem: A m x k (lda = k rounded up to 4, exactly that much memory), B k x n given
 * transposed. */
struct prob {
    int64_t m, n, k, lda;
    int is_signed;
    int32_t zp;
    uint8_t *a;
    int8_t *bt;
    void *packed;
    struct qp_i8g_b b;
    int64_t *want;
};

static void prob_make(struct prob *p, int64_t m, int64_t n, int64_t k, int is_signed, int32_t zp) {
    memset(p, 0, sizeof *p);
    p->m = m;
    p->n = n;
    p->k = k;
    p->lda = (k + 3) / 4 * 4;
    p->is_signed = is_signed;
    p->zp = zp;
    p->a = calloc((size_t)(m * p->lda), 1);
    p->bt = calloc((size_t)(n * k), 1);
    size_t pb = qp_i8g_pack_bytes(k, n);
    assert_true(pb > 0);
    p->packed = aligned_alloc(64, (pb + 63) / 64 * 64);
    p->want = calloc((size_t)(m * n), sizeof *p->want);
    assert_non_null(p->a);
    assert_non_null(p->bt);
    assert_non_null(p->packed);
    assert_non_null(p->want);
}

/* Packs B and computes the int64 reference sum_k (x - zp) * w. */
static void prob_finish(struct prob *p) {
    qp_i8g_pack(p->bt, p->k, p->k, p->n, p->packed);
    qp_i8g_b_view(p->packed, p->k, p->n, &p->b);
    for (int64_t i = 0; i < p->m; i++)
        for (int64_t j = 0; j < p->n; j++) {
            int64_t s = 0;
            for (int64_t kk = 0; kk < p->k; kk++) {
                uint8_t byte = p->a[i * p->lda + kk];
                int64_t x = p->is_signed ? (int8_t)byte : byte;
                s += (x - p->zp) * p->bt[j * p->k + kk];
            }
            p->want[i * p->n + j] = s;
        }
}

static void prob_free(struct prob *p) {
    free(p->a);
    free(p->bt);
    free(p->packed);
    free(p->want);
}

/* The flags that hold for A's bytes (what a scan would give). */
static unsigned range_of(const struct prob *p) {
    int top = 0, min = 0;
    for (int64_t i = 0; i < p->m * p->lda; i++) {
        top |= p->a[i] >= 128;
        min |= p->a[i] == 0x80;
    }
    return (top ? 0u : QP_I8G_BELOW_128) | (min ? 0u : QP_I8G_NO_MIN);
}

/* The raw sums with every ISA, both thread counts, and the given kernel choice (range: flags the
 * caller's bytes satisfy), all equal to the reference. */
static void check_raw(const struct prob *p, unsigned range, const char *what) {
    enum qp_isa isas[2];
    int ni = n_isas(isas);
    int32_t *y = malloc((size_t)(p->m * p->n) * sizeof *y);
    assert_non_null(y);
    struct qp_i8g_a a = {p->a, p->lda, p->is_signed, p->zp, range};
    struct qp_i8g_epi e = {NULL, NULL, NULL, QP_DTYPE_INT32, y, p->n, NULL, QP_DTYPE_FLOAT, 0};
    for (int ii = 0; ii < ni; ii++)
        for (int nt = 1; nt <= 2; nt++) {
            memset(y, 0x5a, (size_t)(p->m * p->n) * sizeof *y);
            qp_i8g_gemm(isas[ii], p->m, &a, &p->b, &e, nt);
            for (int64_t i = 0; i < p->m * p->n; i++)
                if (y[i] != p->want[i])
                    fail_msg("%s: m %lld n %lld k %lld %s zp %d, %s, range %u, %d threads: "
                             "element %lld is %d, want %lld",
                             what, (long long)p->m, (long long)p->n, (long long)p->k,
                             p->is_signed ? "int8" : "uint8", p->zp, qp_isa_name(isas[ii]), range,
                             nt, (long long)i, y[i], (long long)p->want[i]);
        }
    free(y);
}

/* Random A bytes: any (kind 0), below 128 (1), any but 0x80 (2), or any with a 0x80 in every
 * row and weights without -128 (3: the |x| kernel for int8); random weights otherwise, with a
 * -128 in every column. */
static void fill_random(struct prob *p, int kind) {
    for (int64_t i = 0; i < p->m; i++)
        for (int64_t kk = 0; kk < p->k; kk++) {
            int v = kind == 1 ? irand(0, 127) : irand(0, 255);
            if (kind == 2 && v == 0x80) v = 0x81;
            if (kind == 3 && kk == i % p->k) v = 0x80;
            p->a[i * p->lda + kk] = (uint8_t)v;
        }
    for (int64_t i = 0; i < p->n * p->k; i++)
        p->bt[i] = (int8_t)(kind == 3 ? irand(-127, 127) : i % p->k == 0 ? -128 : irand(-128, 127));
}

static void test_gemm_random(void **state) {
    (void)state;
    static const int64_t ms[] = {1, 3, 4, 5, 17, 70}, ns[] = {1, 7, 16, 17, 24, 29, 33, 64},
                         ks[] = {1, 3, 4, 5, 63, 129, 300};
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
                for (int sg = 0; sg < 2; sg++) {
                    struct prob p;
                    int32_t zp = sg ? irand(-128, 127) : irand(0, 255);
                    prob_make(&p, ms[mi], ns[ni], ks[ki], sg, zp);
                    fill_random(&p, 0);
                    prob_finish(&p);
                    check_raw(&p, QP_I8G_ANY, "random");
                    fill_random(&p, 1); /* bytes below 128: every kernel */
                    prob_finish(&p);
                    check_raw(&p, QP_I8G_BELOW_128, "random, below 128");
                    check_raw(&p, QP_I8G_ANY, "random, below 128, any kernel");
                    if (sg) check_raw(&p, QP_I8G_NO_MIN, "random, below 128, no -128 kernel");
                    assert_false(p.b.no_min);
                    fill_random(&p, 2); /* no 0x80 byte */
                    prob_finish(&p);
                    check_raw(&p, sg ? QP_I8G_NO_MIN : QP_I8G_ANY, "random, no -128");
                    fill_random(&p, 3); /* 0x80 bytes, no -128 weight */
                    prob_finish(&p);
                    assert_true(p.b.no_min);
                    check_raw(&p, QP_I8G_ANY, "random, -128 bytes, no -128 weight");
                    prob_free(&p);
                }
}

/* The corners of the ranges, where vpmaddubsw on unsigned bytes of 128..255 would saturate:
 * every x and w at an extreme, zero points at both ends, sums at the int32 limit. */
static void test_gemm_extreme(void **state) {
    (void)state;
    static const struct {
        int is_signed;
        int x; /* value; 1000: alternate the two extremes (int8: 127 and -127 here); 1002: 127
                  and -128 */
        int32_t zp;
        int w; /* 1000: alternate -128 and 127; 1001: -127 and 127 */
    } cases[] = {
        {0, 255, 0, -128},
        {0, 255, 0, 127},
        {0, 255, 255, 127},
        {0, 0, 255, -128},
        {1, 127, 0, 127},
        {1, -128, 0, -128},
        {1, -128, 127, -128},
        {1, 127, -128, 127},
        {0, 1000, 3, 1000},
        {1, 1000, -5, 1000},
        {0, 127, 0, -128},
        {1, 127, 1, 1000},
        {1, -127, 0, -128},
        {1, -127, 127, 1000},
        {1, -127, -128, 127},
        {1, 1000, 0, -128},
        /* int8 -128 against weights without -128: the |x| kernel at its extremes */
        {1, -128, 0, -127},
        {1, -128, 127, 127},
        {1, -128, -128, 1001},
        {1, 1002, 5, 1001},
    };
    static const int64_t ks[] = {1, 5, 33, 1001};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            struct prob p;
            prob_make(&p, 9, 21, ks[ki], cases[c].is_signed, cases[c].zp);
            int alt_hi = cases[c].is_signed ? 127 : 255, alt_lo = cases[c].is_signed ? -127 : 0;
            for (int64_t i = 0; i < p.m; i++)
                for (int64_t kk = 0; kk < p.k; kk++) {
                    int x = cases[c].x == 1002   ? ((i + kk) % 2 ? 127 : -128)
                            : cases[c].x != 1000 ? cases[c].x
                            : (i + kk) % 2       ? alt_hi
                                                 : alt_lo;
                    p.a[i * p.lda + kk] = (uint8_t)x;
                }
            int w_lo = cases[c].w == 1001 ? -127 : -128;
            for (int64_t j = 0; j < p.n; j++)
                for (int64_t kk = 0; kk < p.k; kk++)
                    p.bt[j * p.k + kk] = (int8_t)(cases[c].w < 1000 ? cases[c].w
                                                  : (j + kk) % 3    ? 127
                                                                    : w_lo);
            prob_finish(&p);
            assert_int_equal(p.b.no_min, cases[c].w > -128 && cases[c].w != 1000);
            unsigned r = range_of(&p);
            check_raw(&p, QP_I8G_ANY, "extreme");
            if (r & QP_I8G_BELOW_128) check_raw(&p, QP_I8G_BELOW_128, "extreme, below 128");
            if (cases[c].is_signed && (r & QP_I8G_NO_MIN))
                check_raw(&p, QP_I8G_NO_MIN, "extreme, no -128");
            prob_free(&p);
        }
}

/* k at QP_I8G_MAX_K: sums within one step of the int32 limits. */
static void test_gemm_longest_k(void **state) {
    (void)state;
    static const struct {
        int is_signed;
        uint8_t x;
        int32_t zp;
        int8_t w;
    } cases[] = {{0, 255, 0, -128},
                 {0, 255, 0, 127},
                 {1, 0x80, 127, -128},
                 {1, 127, -128, 127},
                 {1, 0x81, 127, -128}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct prob p;
        prob_make(&p, 2, 3, QP_I8G_MAX_K, cases[c].is_signed, cases[c].zp);
        memset(p.a, cases[c].x, (size_t)(p.m * p.lda));
        memset(p.bt, (uint8_t)cases[c].w, (size_t)(p.n * p.k));
        prob_finish(&p);
        assert_true(llabs(p.want[0]) > 2000000000LL);
        check_raw(&p, QP_I8G_ANY, "longest k");
        check_raw(&p, range_of(&p) & (p.is_signed ? ~0u : ~(unsigned)QP_I8G_NO_MIN),
                  "longest k, the fastest kernel the bytes allow");
        prob_free(&p);
    }
    assert_int_equal(qp_i8g_pack_bytes(QP_I8G_MAX_K + 1, 3), 0);
    assert_int_equal(qp_i8g_pack_bytes(0, 3), 0);
    assert_int_equal(qp_i8g_pack_bytes(5, 0), 0);
}

/* ---- the epilogue ----------------------------------------------------------------------- */

/* The reference path's epilogue for one element (int8_conv.c's run_ref): v = acc * osc + bias,
 * the posts with the residual's real value, then qp_i8_store (io->ydt). */
static void ref_element(const struct qp_i8_io *io, int64_t acc, float osc, float bias,
                        const struct qp_kt *res, int64_t at, void *y) {
    float v = (float)acc * osc + bias;
    float rv = res ? qp_i8_real_at(res, at, io->rs, io->rzp) : 0.0f;
    qp_i8_store(io, y, at, qp_i8_posts_ref(io, v, rv));
}

static size_t dt_size(enum qp_dtype dt) {
    return dt == QP_DTYPE_FLOAT ? 4 : dt == QP_DTYPE_FLOAT16 ? 2 : 1;
}

struct epi_case {
    enum qp_dtype ydt, rdt; /* rdt UNDEFINED: no residual */
    int n_post;
    struct qp_conv_post post[4];
};

static void check_epilogue(const struct epi_case *ec) {
    struct prob p;
    prob_make(&p, 13, 37, 45, 1, 3);
    fill_random(&p, 0);
    prob_finish(&p);
    struct qp_i8_io io;
    memset(&io, 0, sizeof io);
    io.xdt = QP_DTYPE_INT8;
    io.ydt = ec->ydt;
    io.y_int8 = ec->ydt == QP_DTYPE_INT8 || ec->ydt == QP_DTYPE_UINT8;
    io.ys = 0.37f;
    io.yzp = ec->ydt == QP_DTYPE_UINT8 ? 121 : io.y_int8 ? -7 : 0;
    io.has_res = ec->rdt != QP_DTYPE_UNDEFINED;
    io.rdt = ec->rdt;
    io.rs = 0.11f;
    io.rzp = ec->rdt == QP_DTYPE_UINT8 ? 130 : -3;
    io.n_post = ec->n_post;
    memcpy(io.post, ec->post, sizeof ec->post);
    int64_t np = qp_i8g_npad(p.n), nel = p.m * p.n;
    float *osc = calloc((size_t)np, sizeof *osc), *bias = calloc((size_t)np, sizeof *bias);
    for (int64_t j = 0; j < p.n; j++) {
        osc[j] = 0.0013f * (float)(j + 1) * (j % 3 ? 1.0f : -1.0f);
        bias[j] = 0.05f * (float)(j % 11) - 0.2f;
    }
    void *res = NULL;
    struct qp_kt rt;
    memset(&rt, 0, sizeof rt);
    if (io.has_res) {
        int64_t d[2] = {p.m, p.n};
        assert_int_equal(qp_kt_set(&rt, ec->rdt, 2, d, NULL), QP_OK);
        res = malloc(rt.nbytes);
        for (int64_t i = 0; i < nel; i++) {
            if (ec->rdt == QP_DTYPE_FLOAT)
                ((float *)res)[i] = 3.0f * (float)irand(-1000, 1000) / 1000.0f;
            else
                ((uint8_t *)res)[i] = (uint8_t)irand(0, 255);
        }
        rt.data = res;
    }
    size_t es = dt_size(ec->ydt);
    char *want = calloc((size_t)nel, es), *got = calloc((size_t)nel, es);
    for (int64_t i = 0; i < p.m; i++)
        for (int64_t j = 0; j < p.n; j++)
            ref_element(&io, p.want[i * p.n + j], osc[j], bias[j], res ? &rt : NULL, i * p.n + j,
                        want);
    enum qp_isa isas[2];
    int ni = n_isas(isas);
    struct qp_i8g_a a = {p.a, p.lda, 1, p.zp, QP_I8G_ANY};
    struct qp_i8g_epi e = {&io, osc, bias, ec->ydt, got, p.n, res, ec->rdt, p.n};
    for (int ii = 0; ii < ni; ii++)
        for (int nt = 1; nt <= 2; nt++) {
            memset(got, 0x77, (size_t)nel * es);
            qp_i8g_gemm(isas[ii], p.m, &a, &p.b, &e, nt);
            for (int64_t i = 0; i < nel; i++)
                if (memcmp(got + i * (int64_t)es, want + i * (int64_t)es, es) != 0)
                    fail_msg("epilogue (y %s, residual %s, %d posts), %s, %d threads: element "
                             "%lld differs from the reference path",
                             qp_dtype_name(ec->ydt), qp_dtype_name(ec->rdt), ec->n_post,
                             qp_isa_name(isas[ii]), nt, (long long)i);
        }
    int nonconst = 0; /* the outputs must not all be one value (saturated, say) */
    for (int64_t i = 1; i < nel; i++)
        nonconst |= memcmp(want + i * (int64_t)es, want, es) != 0;
    assert_true(nonconst);
    free(want);
    free(got);
    free(res);
    free(osc);
    free(bias);
    prob_free(&p);
}

static void test_epilogue(void **state) {
    (void)state;
    const struct qp_conv_post relu = {QP_CONV_POST_RELU, 0.0f, 0.0f},
                              leaky = {QP_CONV_POST_RELU, 0.1f, 0.0f},
                              clip = {QP_CONV_POST_CLIP, -1.5f, 2.0f},
                              lin = {QP_CONV_POST_LINEAR, 0.2f, 0.5f},
                              hsw = {QP_CONV_POST_HARDSWISH, 0.0f, 0.0f},
                              sig = {QP_CONV_POST_SIGMOID, 0.0f, 0.0f},
                              sum = {QP_CONV_POST_SUM, 0.0f, 0.0f};
    const struct epi_case cases[] = {
        {QP_DTYPE_INT8, QP_DTYPE_UNDEFINED, 0, {relu}},
        {QP_DTYPE_INT8, QP_DTYPE_UNDEFINED, 1, {relu}},
        {QP_DTYPE_UINT8, QP_DTYPE_INT8, 3, {relu, sum, relu}},
        {QP_DTYPE_INT8, QP_DTYPE_UINT8, 2, {sum, leaky}},
        {QP_DTYPE_INT8, QP_DTYPE_FLOAT, 2, {lin, sum}},
        {QP_DTYPE_UINT8, QP_DTYPE_UNDEFINED, 2, {lin, clip}},
        {QP_DTYPE_FLOAT, QP_DTYPE_UNDEFINED, 1, {hsw}},
        {QP_DTYPE_FLOAT, QP_DTYPE_INT8, 3, {sig, sum, clip}},
        {QP_DTYPE_FLOAT16, QP_DTYPE_FLOAT, 2, {sum, hsw}},
        {QP_DTYPE_FLOAT16, QP_DTYPE_UNDEFINED, 0, {relu}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_epilogue(&cases[i]);
}

/* Quotients v / y_scale at and within a few ulps of half-integers, where a reciprocal's product
 * and the division may round apart: the requantized bytes are still the reference's. */
static void test_epilogue_ties(void **state) {
    (void)state;
    struct prob p;
    prob_make(&p, 64, 48, 1, 0, 0); /* acc = x: 0..255 */
    for (int64_t i = 0; i < p.m; i++)
        p.a[i * p.lda] = (uint8_t)(i * 4 + 1);
    for (int64_t j = 0; j < p.n; j++)
        p.bt[j] = (int8_t)(j % 2 ? 1 : -1);
    prob_finish(&p);
    static const float yss[] = {0.1f, 0.0517f, 0.3f, 1.0f / 3.0f, 0.25f};
    enum qp_isa isas[2];
    int ni = n_isas(isas);
    int64_t np = qp_i8g_npad(p.n), nel = p.m * p.n;
    float *osc = calloc((size_t)np, sizeof *osc), *bias = calloc((size_t)np, sizeof *bias);
    int8_t *want = malloc((size_t)nel), *got = malloc((size_t)nel);
    for (size_t c = 0; c < sizeof yss / sizeof yss[0]; c++) {
        struct qp_i8_io io;
        memset(&io, 0, sizeof io);
        io.ydt = QP_DTYPE_INT8;
        io.y_int8 = 1;
        io.ys = yss[c];
        for (int64_t j = 0; j < p.n; j++) { /* acc * osc / ys near k / 2, nudged by ulps */
            osc[j] = nextafterf(yss[c] * 0.5f, (j / 2) % 3 == 0 ? 0.0f : 1.0f);
            for (int64_t u = 0; u < j / 6; u++)
                osc[j] = nextafterf(osc[j], j % 4 < 2 ? 0.0f : 1.0f);
            bias[j] = (j % 3 - 1) * ldexpf(yss[c], -22);
        }
        for (int64_t i = 0; i < p.m; i++)
            for (int64_t j = 0; j < p.n; j++)
                ref_element(&io, p.want[i * p.n + j], osc[j], bias[j], NULL, i * p.n + j, want);
        struct qp_i8g_a a = {p.a, p.lda, 0, 0, QP_I8G_BELOW_128};
        struct qp_i8g_epi e = {&io, osc, bias, QP_DTYPE_INT8, got, p.n, NULL, QP_DTYPE_FLOAT, 0};
        for (int ii = 0; ii < ni; ii++) {
            qp_i8g_gemm(isas[ii], p.m, &a, &p.b, &e, 1);
            for (int64_t i = 0; i < nel; i++)
                if (got[i] != want[i])
                    fail_msg("ties, y_scale %g, %s: element %lld is %d, want %d", (double)yss[c],
                             qp_isa_name(isas[ii]), (long long)i, got[i], want[i]);
        }
    }
    free(osc);
    free(bias);
    free(want);
    free(got);
    prob_free(&p);
}

/* ---- convolutions ------------------------------------------------------------------------ */

/* A 2-D geometry as qp_conv_geometry fills it (3-D form, leading dim 1). */
static struct qp_conv_state geo2(int64_t n, int64_t c, int64_t m, int64_t group, int64_t h,
                                 int64_t w, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
    struct qp_conv_state g;
    memset(&g, 0, sizeof g);
    g.w.nsp = 2;
    g.n = n;
    g.c = c;
    g.m = m;
    g.group = group;
    int64_t in[3] = {1, h, w};
    for (int i = 0; i < 3; i++) {
        g.in3[i] = in[i];
        g.k3[i] = i ? k : 1;
        g.s3[i] = i ? stride : 1;
        g.d3[i] = i ? dil : 1;
        g.p3[i] = i ? pad : 0;
        g.out3[i] = i ? (in[i] + 2 * pad - dil * (k - 1) - 1) / stride + 1 : 1;
    }
    for (int i = 0; i < 2; i++) {
        g.w.in[i] = in[i + 1];
        g.w.out[i] = g.out3[i + 1];
        g.w.k[i] = k;
        g.w.stride[i] = stride;
        g.w.dil[i] = dil;
        g.w.pad_begin[i] = g.w.pad_end[i] = pad;
    }
    g.in_sz = h * w;
    g.out_sz = g.out3[1] * g.out3[2];
    g.k_sz = k * k;
    return g;
}

/* The direct convolution, int64: y[b][o][oc] (channels last) = sum over the channels of oc's
 * group and the positions inside the input of (x - zp) * w[oc][ci][kpos]. */
static int64_t conv_ref(const struct qp_conv_state *g, const uint8_t *x, int is_signed, int32_t zp,
                        const int8_t *w, int64_t b, int64_t o, int64_t oc) {
    int64_t cg = g->c / g->group, gi = oc / (g->m / g->group), s = 0;
    int64_t o1 = o / g->out3[2], o2 = o % g->out3[2];
    for (int64_t ci = 0; ci < cg; ci++)
        for (int64_t k1 = 0; k1 < g->k3[1]; k1++)
            for (int64_t k2 = 0; k2 < g->k3[2]; k2++) {
                int64_t i1 = o1 * g->s3[1] - g->p3[1] + k1 * g->d3[1];
                int64_t i2 = o2 * g->s3[2] - g->p3[2] + k2 * g->d3[2];
                if (i1 < 0 || i1 >= g->in3[1] || i2 < 0 || i2 >= g->in3[2]) continue;
                uint8_t byte = x[((b * g->in3[1] + i1) * g->in3[2] + i2) * g->c + gi * cg + ci];
                int64_t xv = is_signed ? (int8_t)byte : byte;
                s += (xv - zp) * w[(oc * cg + ci) * g->k_sz + k1 * g->k3[2] + k2];
            }
    return s;
}

/* Group-1 convolutions through im2col and the GEMM. */
/* y (rows x g->m int32 sums, channels last) against the direct sums; `what`, case c, the ISA
 * and the thread count (or variant) name a failure. */
static void check_conv(const char *what, size_t c, enum qp_isa isa, int nt,
                       const struct qp_conv_state *g, const uint8_t *x, int sg, int32_t zp,
                       const int8_t *w, const int32_t *y) {
    for (int64_t r = 0; r < g->n * g->out_sz; r++)
        for (int64_t oc = 0; oc < g->m; oc++) {
            int64_t want = conv_ref(g, x, sg, zp, w, r / g->out_sz, r % g->out_sz, oc);
            if (y[r * g->m + oc] != want)
                fail_msg("%s case %zu (%s, %d): row %lld channel %lld: %d, want %lld", what, c,
                         qp_isa_name(isa), nt, (long long)r, (long long)oc, y[r * g->m + oc],
                         (long long)want);
        }
}

static void test_im2col_conv(void **state) {
    (void)state;
    static const struct {
        int64_t n, c, m, h, w, k, stride, pad, dil;
    } cases[] = {{1, 3, 20, 11, 9, 7, 2, 3, 1},
                 {2, 8, 16, 6, 7, 3, 1, 1, 1},
                 {1, 5, 9, 9, 9, 3, 2, 1, 2},
                 {1, 16, 33, 5, 5, 1, 2, 0, 1},
                 {1, 13, 17, 8, 6, 3, 1, 2, 1},
                 /* several chunks of qp_i8g_conv_gemm (1024 rows; 224 at k = 576) */
                 {1, 8, 20, 40, 60, 3, 1, 1, 1},
                 {1, 64, 16, 24, 24, 3, 1, 1, 1}};
    enum qp_isa isas[2];
    int ni = n_isas(isas);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int sg = 0; sg < 2; sg++) {
            struct qp_conv_state g =
                geo2(cases[c].n, cases[c].c, cases[c].m, 1, cases[c].h, cases[c].w, cases[c].k,
                     cases[c].stride, cases[c].pad, cases[c].dil);
            int32_t zp = sg ? -100 : 200;
            int64_t K = g.c * g.k_sz, ld = (K + 3) / 4 * 4, rows = g.n * g.out_sz;
            size_t nx = (size_t)(g.n * g.in_sz * g.c);
            uint8_t *x = malloc(nx), *col = malloc((size_t)(rows * ld));
            int8_t *w = malloc((size_t)(g.m * K)), *bt = malloc((size_t)(g.m * K));
            for (size_t i = 0; i < nx; i++)
                x[i] = (uint8_t)irand(0, 255);
            for (int64_t i = 0; i < g.m * K; i++)
                w[i] = (int8_t)irand(-128, 127);
            for (int64_t oc = 0; oc < g.m; oc++) /* B's column: (kernel position, channel) */
                for (int64_t ci = 0; ci < g.c; ci++)
                    for (int64_t kp = 0; kp < g.k_sz; kp++)
                        bt[oc * K + kp * g.c + ci] = w[(oc * g.c + ci) * g.k_sz + kp];
            void *packed = malloc(qp_i8g_pack_bytes(K, g.m));
            qp_i8g_pack(bt, K, K, g.m, packed);
            struct qp_i8g_b b;
            qp_i8g_b_view(packed, K, g.m, &b);
            int32_t *y = malloc((size_t)(rows * g.m) * sizeof *y);
            for (int ii = 0; ii < ni; ii++) {
                qp_i8g_im2col(&g, x, (uint8_t)zp, col, ld, 2);
                struct qp_i8g_a a = {col, ld, sg, zp, QP_I8G_ANY};
                struct qp_i8g_epi e = {NULL, NULL,           NULL, QP_DTYPE_INT32, y, g.m,
                                       NULL, QP_DTYPE_FLOAT, 0};
                /* nt 0: im2col then the GEMM; 1, 2: the chunked qp_i8g_conv_gemm */
                for (int nt = 0; nt <= 2; nt++) {
                    memset(y, 0x5a, (size_t)(rows * g.m) * sizeof *y);
                    if (nt == 0) {
                        qp_i8g_gemm(isas[ii], rows, &a, &b, &e, 2);
                    } else {
                        uint8_t *chunks = malloc(qp_i8g_conv_gemm_scratch(&g, ld, nt));
                        qp_i8g_conv_gemm(isas[ii], &g, x, (uint8_t)zp, ld, chunks, &a, &b, &e, nt);
                        free(chunks);
                    }
                    check_conv("im2col", c, isas[ii], nt, &g, x, sg, zp, w, y);
                }
            }
            free(x);
            free(col);
            free(w);
            free(bt);
            free(packed);
            free(y);
        }
}

static void test_depthwise(void **state) {
    (void)state;
    static const struct {
        int64_t n, c, h, w, k, stride, pad;
    } cases[] = {{1, 19, 9, 8, 3, 1, 1},
                 {2, 32, 7, 7, 3, 2, 1},
                 {1, 40, 11, 10, 5, 2, 2},
                 {1, 16, 6, 6, 5, 1, 2},
                 {1, 5, 5, 4, 3, 1, 0},
                 /* wide rows: runs of four interior pixels (dw_rows4_avx2) at stride 2, and with
                  * a partial 8-channel block, a 5x5 kernel and two images */
                 {1, 40, 6, 20, 3, 2, 1},
                 {2, 24, 5, 12, 5, 1, 2},
                 /* the largest kernel (81 positions): the float sums' exactness bound */
                 {1, 20, 10, 13, 9, 1, 4}};
    enum qp_isa isas[2];
    int ni = n_isas(isas);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int sg = 0; sg < 2; sg++) {
            struct qp_conv_state g =
                geo2(cases[c].n, cases[c].c, cases[c].c, cases[c].c, cases[c].h, cases[c].w,
                     cases[c].k, cases[c].stride, cases[c].pad, 1);
            int32_t zp = sg ? 77 : 255;
            size_t nx = (size_t)(g.n * g.in_sz * g.c);
            int64_t rows = g.n * g.out_sz;
            uint8_t *x = malloc(nx);
            int8_t *w = malloc((size_t)(g.c * g.k_sz));
            for (size_t i = 0; i < nx; i++)
                x[i] = (uint8_t)(i % 5 == 0 ? (sg ? 0x80 : 255) : irand(0, 255));
            for (int64_t i = 0; i < g.c * g.k_sz; i++)
                w[i] = (int8_t)(i % 7 == 0 ? -128 : irand(-128, 127));
            void *packed = malloc(qp_i8g_dw_pack_bytes(g.c, g.k_sz));
            void *scratch = malloc(qp_i8g_dw_scratch_bytes(&g));
            qp_i8g_dw_pack(w, g.c, g.k_sz, packed);
            int32_t *y = malloc((size_t)(rows * g.c) * sizeof *y);
            for (int ii = 0; ii < ni; ii++)
                for (int nt = 1; nt <= 2; nt++) {
                    struct qp_i8g_epi e = {NULL, NULL,           NULL, QP_DTYPE_INT32, y, g.c,
                                           NULL, QP_DTYPE_FLOAT, 0};
                    qp_i8g_depthwise(isas[ii], &g, x, sg, zp, packed, scratch, &e, nt);
                    check_conv("depthwise", c, isas[ii], nt, &g, x, sg, zp, w, y);
                }
            free(x);
            free(w);
            free(packed);
            free(scratch);
            free(y);
        }
}

/* The float sums at their bound: the largest kernel (9x9), every product -255 x -128 (uint8 0
 * with zero point 255, int8 -128 with 127), so interior sums reach 81 x 32640 = 2643840. */
static void test_depthwise_extreme(void **state) {
    (void)state;
    enum qp_isa isas[2];
    int ni = n_isas(isas);
    struct qp_conv_state g = geo2(1, 24, 24, 24, 11, 14, 9, 1, 4, 1);
    size_t nx = (size_t)(g.in_sz * g.c);
    uint8_t *x = malloc(nx);
    int8_t *w = malloc((size_t)(g.c * g.k_sz));
    int32_t *y = malloc((size_t)(g.out_sz * g.c) * sizeof *y);
    void *packed = malloc(qp_i8g_dw_pack_bytes(g.c, g.k_sz));
    void *scratch = malloc(qp_i8g_dw_scratch_bytes(&g));
    memset(w, 0x80, (size_t)(g.c * g.k_sz));
    qp_i8g_dw_pack(w, g.c, g.k_sz, packed);
    for (int sg = 0; sg < 2; sg++) {
        int32_t zp = sg ? 127 : 255;
        memset(x, sg ? 0x80 : 0, nx);
        for (int ii = 0; ii < ni; ii++) {
            qp_i8g_depthwise(isas[ii], &g, x, sg, zp, packed, scratch,
                             &(struct qp_i8g_epi){NULL, NULL, NULL, QP_DTYPE_INT32, y, g.c, NULL,
                                                  QP_DTYPE_FLOAT, 0},
                             2);
            check_conv("depthwise extreme", (size_t)sg, isas[ii], 2, &g, x, sg, zp, w, y);
            int64_t centre = (g.out3[1] / 2) * g.out3[2] + g.out3[2] / 2;
            assert_int_equal(y[centre * g.c], 81 * 255 * 128);
        }
    }
    free(x);
    free(w);
    free(y);
    free(packed);
    free(scratch);
}

/* The scan finds one byte of 128 or more, or one 0x80, wherever it is. */
static void test_range_scan(void **state) {
    (void)state;
    enum qp_isa isas[2];
    int ni = n_isas(isas);
    static const size_t ns[] = {1, 31, 32, 33, 100, 65536 * 4 + 77};
    const unsigned both = QP_I8G_BELOW_128 | QP_I8G_NO_MIN;
    for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
        size_t n = ns[c];
        uint8_t *x = malloc(n);
        for (size_t i = 0; i < n; i++)
            x[i] = (uint8_t)irand(0, 127);
        size_t at[3] = {0, n / 2, n - 1};
        for (int ii = 0; ii < ni; ii++) {
            assert_int_equal(qp_i8g_range(isas[ii], x, n, 2), both);
            for (int k = 0; k < 3; k++) {
                uint8_t keep = x[at[k]];
                for (int nt = 1; nt <= 2; nt++) {
                    x[at[k]] = (uint8_t)(0x81 + k * 0x30);
                    assert_int_equal(qp_i8g_range(isas[ii], x, n, nt), QP_I8G_NO_MIN);
                    x[at[k]] = 0x80;
                    assert_int_equal(qp_i8g_range(isas[ii], x, n, nt), QP_I8G_ANY);
                }
                x[at[k]] = keep;
            }
        }
        free(x);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_random),    cmocka_unit_test(test_gemm_extreme),
        cmocka_unit_test(test_gemm_longest_k), cmocka_unit_test(test_epilogue),
        cmocka_unit_test(test_epilogue_ties),  cmocka_unit_test(test_im2col_conv),
        cmocka_unit_test(test_depthwise),      cmocka_unit_test(test_depthwise_extreme),
        cmocka_unit_test(test_range_scan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
