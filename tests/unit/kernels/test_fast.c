/* The plain-C fast kernels against their reference kernels, with 1 and 2 threads bit for bit,
 * on many shapes, modes and values including NaN, infinities, -0 and denormals:
 *   vecmath (Exp, Erf, Tanh, Sigmoid, Gelu): accuracy against double-precision libm, AVX2 and
 *   plain-C code bit-identical, results independent of an element's position; the Exp, Erf,
 *   Sigmoid, Tanh and Gelu rows against their libm reference;
 *   gemm.c (MatMul) against a double-precision product on edge shapes, 1, 2 and 3 threads bit
 *   for bit, and equal to a sequential float fused multiply-add chain; MatMul's batched paths
 *   (B packed at prepare, every batch's B packed in one region) likewise;
 *   LayerNormalization and GlobalAveragePool (sums over 8 accumulators) against their
 *   references;
 *   AveragePool's and MaxPool's 1-D/2-D paths, bit-identical to the general kernel;
 *   Softmax on vecmath (AVX2 and plain C bit for bit, against double precision) and its
 *   finite pre-check (skips the NaN-row scan) on large tensors, against the reference;
 *   Transpose's batched 2-D and whole-run paths against a naive permutation;
 *   Resize's plane path, bit-identical to the general kernel. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/fast.h"
#include "kernels/pool.h"
#include "kernels/gemm.h"
#include "kernels/kernels.h"
#include "kernels/isa.h"
#include "kernels/vecmath.h"

static uint32_t rng_state = 777u;
static uint32_t urand(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return rng_state;
}
static float frand(void) {
    return (float)((urand() >> 8) & 0xFFFF) / 16384.0f - 2.0f;
}

static struct qp_kt kt(enum qp_dtype dt, int rank, const int64_t *dims, void *data) {
    struct qp_kt t;
    memset(&t, 0, sizeof t);
    assert_int_equal(qp_kt_set(&t, dt, rank, dims, NULL), QP_OK);
    t.data = data;
    t.is_const = 1;
    return t;
}

/* Random floats with special values sprinkled in (NaN, +-inf, -0, denormals, huge). */
static void fill_special(float *x, uint64_t n) {
    static const float special[] = {NAN,    INFINITY, -INFINITY, -0.0f,  0.0f,
                                    1e-40f, -3e-39f,  3e38f,     -3e38f, 1e-30f};
    for (uint64_t i = 0; i < n; i++)
        x[i] =
            urand() % 13 == 0 ? special[urand() % (sizeof special / sizeof special[0])] : frand();
}

/* A prepared node, ready to run with different run functions. */
struct prepared {
    struct qp_node node;
    const struct qp_kt *ins[4];
    struct qp_kt out;
    struct qp_kt *outs[1];
    struct qp_error err;
    struct qp_kprep p;
};

static void prep_node(struct prepared *pp, const char *op, int opset, struct qp_attr *attrs,
                      int n_attrs, int n_in, struct qp_kt *in) {
    memset(pp, 0, sizeof *pp);
    pp->node = (struct qp_node){
        .name = "n", .op_type = op, .domain = "", .n_attrs = n_attrs, .attrs = attrs};
    for (int i = 0; i < n_in && i < 4; i++)
        pp->ins[i] = in[i].rank >= 0 ? &in[i] : NULL;
    pp->outs[0] = &pp->out;
    const struct qp_kernel *k = qp_kernel_find("", op, opset);
    assert_non_null(k);
    pp->p = (struct qp_kprep){.node = &pp->node,
                              .opset = opset,
                              .n_in = n_in,
                              .n_out = 1,
                              .in = pp->ins,
                              .out = pp->outs,
                              .err = &pp->err,
                              .missing_const = -1};
    enum qp_status st = k->prepare(&pp->p);
    if (st) fprintf(stderr, "prepare %s: %s\n", op, pp->err.msg);
    assert_int_equal(st, QP_OK);
}

/* Runs `run` on the prepared node into a fresh buffer (poisoned first). */
static float *run_prepared(struct prepared *pp, qp_krun_fn run, int threads) {
    float *y = malloc(pp->out.nbytes ? pp->out.nbytes : 4);
    assert_non_null(y);
    memset(y, 0xCD, pp->out.nbytes);
    pp->out.data = y;
    void *scratch = pp->p.scratch ? malloc(pp->p.scratch) : NULL;
    struct qp_krun r = {.node = &pp->node,
                        .state = pp->p.state,
                        .n_in = pp->p.n_in,
                        .n_out = 1,
                        .in = pp->ins,
                        .out = pp->outs,
                        .scratch = scratch,
                        .n_threads = threads,
                        .err = &pp->err};
    enum qp_status st = run(&r);
    free(scratch);
    assert_int_equal(st, QP_OK);
    return y;
}

/* ---- vecmath ------------------------------------------------------------------------------- */

static double vf_exact(enum qp_vfn f, double x) {
    switch (f) {
    case QP_VF_EXP:
        return exp(x);
    case QP_VF_ERF:
        return erf(x);
    case QP_VF_TANH:
        return tanh(x);
    case QP_VF_SIGMOID:
        return 1.0 / (1.0 + exp(-x));
    case QP_VF_GELU:
        return 0.5 * x * erfc(-x / sqrt(2.0));
    case QP_VF_GELU_TANH:
        return x / (1.0 + exp(-2.0 * sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    default:
        return NAN;
    }
}

static const char *vf_name[QP_VF_COUNT] = {"Exp", "Erf", "Tanh", "Sigmoid", "Gelu", "GeluTanh"};

static double ulp_at(double v) {
    float f = (float)fabs(v);
    if (f == 0.0f) return ldexp(1.0, -149);
    if (isinf(f)) f = 3.4028235e38f;
    return (double)nextafterf(f, INFINITY) - (double)f;
}

/* Inputs: a sweep of bit patterns over the whole float range, a dense sweep of [-12, 12], and
 * special values. */
static float *vf_inputs(uint64_t *n_out) {
    enum { N_BITS = 1 << 20, N_DENSE = 1 << 18 };
    static const float special[] = {
        NAN,    -NAN,   INFINITY, -INFINITY, 0.0f,    -0.0f,   1e-45f, -1e-45f, 1e-40f, -1e-38f,
        1e-20f, -1e-8f, 0.875f,   -0.875f,   0.55f,   -0.55f,  4.0f,   -4.0f,   3.9f,   9.5f,
        -9.5f,  88.7f,  89.0f,    -87.4f,    -103.9f, -104.5f, 200.0f, -200.0f, 3e38f,  -3e38f};
    uint64_t ns = sizeof special / sizeof special[0], n = N_BITS + N_DENSE + ns;
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (uint64_t i = 0; i < N_BITS; i++) {
        uint32_t u = (uint32_t)(i * 4093u + 17u);
        memcpy(&x[i], &u, sizeof u);
    }
    for (uint64_t i = 0; i < N_DENSE; i++)
        x[N_BITS + i] = -12.0f + 24.0f * (float)i / (float)N_DENSE;
    memcpy(x + N_BITS + N_DENSE, special, sizeof special);
    *n_out = n;
    return x;
}

static void test_vecmath_accuracy(void **state) {
    (void)state;
    /* ulp bounds where |exact| >= 1e-7 (measured: 1.0, 1.2, 1.5, 2.3; Gelu see vecmath.h) */
    static const double max_ulp[QP_VF_COUNT] = {1.5, 1.5, 2.0, 3.0, 64.0, 64.0};
    uint64_t n;
    float *x = vf_inputs(&n), *y = malloc(n * sizeof(float));
    assert_non_null(y);
    for (int f = 0; f < QP_VF_COUNT; f++) {
        /* the plain-C code: every machine can run it; AVX2 equals it (next test) */
        qp_vf_apply_portable((enum qp_vfn)f, x, y, n);
        double worst = 0;
        for (uint64_t i = 0; i < n; i++) {
            double want = vf_exact((enum qp_vfn)f, x[i]);
            int ok;
            if (isnan(want))
                ok = isnan(y[i]);
            else if (isinf((float)want) || isinf(y[i]))
                ok = (float)want == y[i];
            else {
                double e = fabs((double)y[i] - want), u = e / ulp_at(want);
                ok = fabs(want) >= 1e-7 ? u <= max_ulp[f] : e <= 5e-8;
                if (fabs(want) >= 1e-7 && u > worst) worst = u;
                /* exact zero and sign for the odd functions at 0 */
                if ((f == QP_VF_ERF || f == QP_VF_TANH) && x[i] == 0.0f)
                    ok = ok && y[i] == 0.0f && signbit(y[i]) == signbit(x[i]);
            }
            if (!ok) {
                fprintf(stderr, "%s(%.9g) = %.9g, exact %.17g\n", vf_name[f], x[i], y[i], want);
                fail();
            }
        }
        fprintf(stderr, "%s: max %.2f ulp\n", vf_name[f], worst);
    }
    free(x);
    free(y);
}

static void test_vecmath_avx2_equals_portable(void **state) {
    (void)state;
    uint64_t n;
    float *x = vf_inputs(&n), *y = malloc(n * sizeof(float)), *z = malloc(n * sizeof(float));
    assert_non_null(y);
    assert_non_null(z);
    for (int f = 0; f < QP_VF_COUNT; f++) {
        qp_vf_apply_portable((enum qp_vfn)f, x, z, n);
        if (qp_vf_apply((enum qp_vfn)f, x, y, n)) {
            for (uint64_t i = 0; i < n; i++)
                if (memcmp(&y[i], &z[i], sizeof(float)) && !(isnan(y[i]) && isnan(z[i]))) {
                    fprintf(stderr, "%s(%.9g): %.9g vs plain C %.9g\n", vf_name[f], x[i], y[i],
                            z[i]);
                    fail();
                }
        }
        /* Position independence: every prefix length and offset (AVX2 tails) gives the same
         * element results, also in place. */
        for (int64_t off = 0; off < 9; off++)
            for (int64_t len = 0; len < 19; len++) {
                float buf[32];
                memcpy(buf, x + 1000 + off, (size_t)len * sizeof(float));
                if (!qp_vf_apply((enum qp_vfn)f, buf, buf, len)) continue;
                for (int64_t i = 0; i < len; i++) {
                    float want = z[1000 + off + i];
                    if (memcmp(&buf[i], &want, sizeof want) && !(isnan(buf[i]) && isnan(want)))
                        fail();
                }
            }
    }
    fprintf(stderr, "%s code tested\n",
            qp_kernel_isa() >= QP_ISA_AVX512 ? "AVX-512"
            : qp_vf_have_avx2()              ? "AVX2+FMA"
                                             : "no vector");
    free(x);
    free(y);
    free(z);
}

/* The registry rows that use vecmath against their libm reference (tolerance), and 1 vs 2
 * threads bit for bit. */
static void test_vecmath_rows(void **state) {
    (void)state;
    static const struct {
        const char *op, *approx;
        int act;
    } rows[] = {{"Exp", NULL, 0},  {"Erf", NULL, 0},    {"Sigmoid", NULL, 1}, {"Tanh", NULL, 1},
                {"Gelu", NULL, 1}, {"Gelu", "tanh", 1}, {"Gelu", "none", 1}};
    int64_t sizes[] = {1, 7, 8, 9, 100, 16383, 16384, 40001};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            int64_t d[2] = {1, sizes[k]};
            float *x = malloc((size_t)sizes[k] * sizeof *x);
            assert_non_null(x);
            fill_special(x, (uint64_t)sizes[k]);
            for (int64_t i = 0; i < sizes[k]; i += 5)
                x[i] *= 3.0f; /* reach the large-argument branches too */
            struct qp_kt in[1] = {kt(QP_DTYPE_FLOAT, 2, d, x)};
            in[0].is_const = 0;
            struct qp_attr attr = {.name = "approximate", .type = QP_ATTR_STRING};
            if (rows[r].approx)
                attr.s = (struct qp_bytes){(const uint8_t *)rows[r].approx, strlen(rows[r].approx)};
            int opset = strcmp(rows[r].op, "Gelu") == 0 ? 20 : 17;
            struct prepared pp;
            prep_node(&pp, rows[r].op, opset, &attr, rows[r].approx ? 1 : 0, 1, in);
            const struct qp_kernel *kr = qp_kernel_find("", rows[r].op, opset);
            float *want = run_prepared(&pp, rows[r].act ? qp_k_act_ref_run : qp_k_unary_ref_run, 1);
            float *y1 = run_prepared(&pp, kr->run, 1);
            float *y2 = run_prepared(&pp, kr->run, 2);
            assert_memory_equal(y1, y2, pp.out.nbytes);
            for (int64_t i = 0; i < sizes[k]; i++) {
                int ok = isnan(want[i]) ? isnan(y1[i])
                                        : (y1[i] == want[i] || fabsf(y1[i] - want[i]) <=
                                                                   1e-7f + 1e-5f * fabsf(want[i]));
                if (!ok) {
                    fprintf(stderr, "%s(%.9g) = %.9g, reference %.9g\n", rows[r].op, x[i], y1[i],
                            want[i]);
                    fail();
                }
            }
            free(want);
            free(y1);
            free(y2);
            free(pp.p.state);
            free(x);
        }
}

/* ---- gemm ---------------------------------------------------------------------------------- */

static void gemm_case(int64_t m, int64_t n, int64_t k, int64_t pad) {
    int64_t lda = k + pad, ldb = n + pad, ldc = n + pad;
    float *a = malloc((size_t)(m * lda + 1) * sizeof(float));
    float *b = malloc((size_t)(k * ldb + 1) * sizeof(float));
    float *c[3];
    size_t cbytes = (size_t)(m * ldc + 1) * sizeof(float);
    float *pack = aligned_alloc(64, (qp_gemm_pack_bytes(k, n) + 63) / 64 * 64);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(pack);
    for (int64_t i = 0; i < m * lda; i++)
        a[i] = frand();
    for (int64_t i = 0; i < k * ldb; i++)
        b[i] = frand();
    for (int t = 0; t < 3; t++) {
        c[t] = malloc(cbytes);
        assert_non_null(c[t]);
        for (int64_t i = 0; i < m * ldc; i++)
            c[t][i] = 12345.0f; /* the padding columns must keep it */
        qp_gemm_f32(m, n, k, a, lda, b, ldb, c[t], ldc, pack, t + 1);
    }
    assert_memory_equal(c[0], c[1], (size_t)(m * ldc) * sizeof(float));
    assert_memory_equal(c[0], c[2], (size_t)(m * ldc) * sizeof(float));
    /* B packed once (a constant B is packed at prepare) gives the same bits */
    qp_gemm_pack(k, n, b, ldb, pack);
    for (int64_t i = 0; i < m * ldc; i++)
        c[1][i] = 12345.0f;
    qp_gemm_f32_packed(m, n, k, a, lda, pack, c[1], ldc, 2);
    assert_memory_equal(c[0], c[1], (size_t)(m * ldc) * sizeof(float));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++) {
            float got = c[0][i * ldc + j];
            if (j >= n) {
                assert_true(got == 12345.0f);
                continue;
            }
            double want = 0.0, mag = 0.0;
            float chain = 0.0f;
            for (int64_t q = 0; q < k; q++) {
                want += (double)a[i * lda + q] * (double)b[q * ldb + j];
                mag += fabs((double)a[i * lda + q] * (double)b[q * ldb + j]);
                chain = fmaf(a[i * lda + q], b[q * ldb + j], chain);
            }
            /* the worst-case bound of a float sum of k products, k eps sum |a b| */
            if (fabs((double)got - want) > (double)k * 6e-8 * mag ||
                memcmp(&got, &chain, sizeof got)) {
                fprintf(stderr,
                        "gemm %lldx%lldx%lld: C[%lld,%lld] = %.9g, fma chain %.9g, exact %.9g\n",
                        (long long)m, (long long)n, (long long)k, (long long)i, (long long)j, got,
                        chain, want);
                fail();
            }
        }
    for (int t = 0; t < 3; t++)
        free(c[t]);
    free(a);
    free(b);
    free(pack);
}

static void test_gemm(void **state) {
    (void)state;
    if (!qp_gemm_available()) {
        fprintf(stderr, "gemm: no AVX2+FMA on this CPU, MatMul runs oneDNN\n");
        return;
    }
    static const int64_t dims[][3] = {{1, 1, 1},      {1, 16, 1},     {6, 16, 3},    {7, 17, 5},
                                      {5, 15, 0},     {13, 33, 257},  {48, 64, 256}, {49, 65, 513},
                                      {197, 192, 64}, {197, 64, 197}, {1, 300, 600}, {100, 3, 40},
                                      {12, 1, 300},   {50, 80, 255},  {97, 200, 31}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        gemm_case(dims[i][0], dims[i][1], dims[i][2], 0);
        gemm_case(dims[i][0], dims[i][1], dims[i][2], 3);
    }
    /* NaN and infinities propagate as in any sum of products */
    float a[2] = {INFINITY, 1.0f}, b[2] = {0.0f, 2.0f}, c[1] = {0};
    float *pack = aligned_alloc(64, qp_gemm_pack_bytes(2, 1));
    assert_non_null(pack);
    qp_gemm_f32(1, 1, 2, a, 2, b, 1, c, 1, pack, 1);
    assert_true(isnan(c[0]));
    b[0] = 1.0f;
    qp_gemm_f32(1, 1, 2, a, 2, b, 1, c, 1, pack, 1);
    assert_true(isinf(c[0]) && c[0] > 0);
    free(pack);
}

/* qp_gemm_panels (Winograd's GEMMs): B as panels bs floats apart, an odd panel count (the
 * AVX-512 tile takes two at a time), row counts off the tile height: each element the fma chain
 * bit for bit, the columns beyond the panels untouched. */
static void test_gemm_panels(void **state) {
    (void)state;
    if (!qp_gemm_available()) return;
    static const int64_t dims[][3] = {{13, 37, 3}, {6, 1, 1}, {1, 64, 2}, {25, 128, 5}, {60, 9, 4}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        int64_t m = dims[i][0], k = dims[i][1], np = dims[i][2];
        int64_t lda = k + 3, bs = k * 16 + 8, ldc = np * 16 + 5;
        float *a = malloc((size_t)(m * lda) * sizeof(float));
        /* aligned_alloc wants a size that is a multiple of the alignment */
        size_t b_bytes = ((size_t)(np * bs) * sizeof(float) + 63) / 64 * 64;
        float *b = aligned_alloc(64, b_bytes);
        float *c = malloc((size_t)(m * ldc) * sizeof(float));
        assert_non_null(a);
        assert_non_null(b);
        assert_non_null(c);
        for (int64_t q = 0; q < m * lda; q++)
            a[q] = frand();
        for (int64_t q = 0; q < np * bs; q++)
            b[q] = frand();
        for (int64_t q = 0; q < m * ldc; q++)
            c[q] = 12345.0f;
        qp_gemm_panels(m, k, a, lda, b, bs, np, c, ldc);
        for (int64_t r = 0; r < m; r++)
            for (int64_t j = 0; j < ldc; j++) {
                float got = c[r * ldc + j], chain = 0.0f;
                if (j >= np * 16) {
                    assert_true(got == 12345.0f);
                    continue;
                }
                for (int64_t q = 0; q < k; q++)
                    chain = fmaf(a[r * lda + q], b[j / 16 * bs + q * 16 + j % 16], chain);
                if (memcmp(&got, &chain, sizeof got)) {
                    fprintf(stderr,
                            "panels %lldx%lldx%lld (%s tile): C[%lld,%lld] %.9g, chain %.9g\n",
                            (long long)m, (long long)k, (long long)np, qp_isa_name(qp_gemm_isa()),
                            (long long)r, (long long)j, got, chain);
                    fail();
                }
            }
        free(a);
        free(b);
        free(c);
    }
}

/* MatMul's row on gemm.c with batches: B packed at prepare (shared constant B), every batch's
 * B packed into the scratch in one region (per-batch or broadcast B), and a shared non-constant
 * B; 1, 2 and 3 threads bit for bit, every element the in-order fused multiply-add chain. */
static void test_matmul_batched(void **state) {
    (void)state;
    if (!qp_gemm_available()) return;
    static const struct {
        int ra, rb;
        int64_t da[4], db[4];
        int b_const;
    } cases[] = {
        {4, 4, {1, 3, 197, 64}, {1, 3, 64, 197}, 0},  /* ViT attention scores */
        {4, 4, {1, 3, 197, 197}, {1, 3, 197, 64}, 0}, /* attention times V */
        {4, 3, {2, 1, 5, 33}, {3, 33, 17}, 1},        /* broadcast batch, constant B */
        {3, 2, {4, 40, 64}, {64, 70}, 1},             /* folded, B packed at prepare */
        {3, 2, {3, 7, 20}, {20, 9}, 0},               /* folded, non-constant B */
        {3, 3, {1, 5, 8}, {6, 8, 3}, 0},              /* A broadcast over B's batch */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint64_t na = 1, nb = 1;
        for (int i = 0; i < cases[c].ra; i++)
            na *= (uint64_t)cases[c].da[i];
        for (int i = 0; i < cases[c].rb; i++)
            nb *= (uint64_t)cases[c].db[i];
        float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b);
        assert_non_null(a);
        assert_non_null(b);
        for (uint64_t i = 0; i < na; i++)
            a[i] = frand();
        for (uint64_t i = 0; i < nb; i++)
            b[i] = frand();
        struct qp_kt in[2] = {kt(QP_DTYPE_FLOAT, cases[c].ra, cases[c].da, a),
                              kt(QP_DTYPE_FLOAT, cases[c].rb, cases[c].db, b)};
        in[0].is_const = 0;
        in[1].is_const = cases[c].b_const;
        struct prepared pp;
        prep_node(&pp, "MatMul", 13, NULL, 0, 2, in);
        const struct qp_kernel *k = qp_kernel_find("", "MatMul", 13);
        float *y1 = run_prepared(&pp, k->run, 1);
        float *y2 = run_prepared(&pp, k->run, 2);
        float *y3 = run_prepared(&pp, k->run, 3);
        assert_memory_equal(y1, y2, pp.out.nbytes);
        assert_memory_equal(y1, y3, pp.out.nbytes);
        /* C[bi] = A[bi] B[bi] with numpy broadcasting of the batch dims (rank <= 4 here) */
        int ro = pp.out.rank;
        int64_t m = pp.out.dims[ro - 2], n = pp.out.dims[ro - 1],
                kk = cases[c].db[cases[c].rb - 1 - 1];
        int64_t ob[2] = {1, 1}, ab[2] = {1, 1}, bb[2] = {1, 1};
        for (int d = 0; d < ro - 2; d++)
            ob[2 - (ro - 2) + d] = pp.out.dims[d];
        for (int d = 0; d < cases[c].ra - 2; d++)
            ab[2 - (cases[c].ra - 2) + d] = cases[c].da[d];
        for (int d = 0; d < cases[c].rb - 2; d++)
            bb[2 - (cases[c].rb - 2) + d] = cases[c].db[d];
        for (int64_t i0 = 0; i0 < ob[0]; i0++)
            for (int64_t i1 = 0; i1 < ob[1]; i1++) {
                int64_t ai = (ab[0] > 1 ? i0 : 0) * ab[1] + (ab[1] > 1 ? i1 : 0);
                int64_t bi = (bb[0] > 1 ? i0 : 0) * bb[1] + (bb[1] > 1 ? i1 : 0);
                const float *am = a + ai * m * kk, *bm = b + bi * kk * n;
                const float *cm = y1 + (i0 * ob[1] + i1) * m * n;
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < n; j++) {
                        float chain = 0.0f;
                        for (int64_t q = 0; q < kk; q++)
                            chain = fmaf(am[i * kk + q], bm[q * n + j], chain);
                        if (memcmp(&chain, &cm[i * n + j], sizeof chain)) {
                            fprintf(stderr,
                                    "MatMul case %zu batch %lld: C[%lld,%lld] %.9g vs %.9g\n", c,
                                    (long long)(i0 * ob[1] + i1), (long long)i, (long long)j,
                                    cm[i * n + j], chain);
                            fail();
                        }
                    }
            }
        free(y1);
        free(y2);
        free(y3);
        free(pp.p.state);
        free(a);
        free(b);
    }
}

/* ---- LayerNormalization, GlobalAveragePool ------------------------------------------------- */

/* got vs reference: NaN where the reference has NaN, else close (the sums are reordered). */
static void assert_near(const float *got, const float *want, uint64_t n, const char *what) {
    for (uint64_t i = 0; i < n; i++) {
        int ok = isnan(want[i]) ? isnan(got[i])
                                : (got[i] == want[i] ||
                                   fabsf(got[i] - want[i]) <= 1e-6f + 1e-5f * fabsf(want[i]));
        if (!ok) {
            fprintf(stderr, "%s: element %llu: %.9g vs reference %.9g\n", what,
                    (unsigned long long)i, got[i], want[i]);
            fail();
        }
    }
}

static void test_layernorm_fast(void **state) {
    (void)state;
    static const int64_t shapes[][3] = {{1, 197, 192}, {2, 5, 7}, {3, 4, 8},    {1, 1, 1},
                                        {4, 100, 33},  {1, 3, 0}, {2, 300, 64}, {4, 256, 192}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
        for (int variant = 0; variant < 4; variant++) {
            int64_t d[3] = {shapes[c][0], shapes[c][1], shapes[c][2]};
            uint64_t n = (uint64_t)(d[0] * d[1] * d[2]);
            int64_t ns = d[2], one = 1;
            float *x = malloc((n ? n : 1) * sizeof *x), *sc = malloc((size_t)(ns + 1) * 4),
                  *b = malloc((size_t)(ns + 1) * 4);
            assert_non_null(x);
            assert_non_null(sc);
            assert_non_null(b);
            for (uint64_t i = 0; i < n; i++)
                x[i] = frand() * (variant == 3 ? 1000.0f : 1.0f) + (variant == 2 ? 50.0f : 0.0f);
            if (variant == 1 && n > 3) x[3] = NAN; /* one row of NaN */
            for (int64_t i = 0; i <= ns; i++) {
                sc[i] = frand();
                b[i] = frand();
            }
            /* variant 2: scalar scale and bias; 3: no bias */
            struct qp_kt in[3] = {kt(QP_DTYPE_FLOAT, 3, d, x),
                                  kt(QP_DTYPE_FLOAT, 1, variant == 2 ? &one : &ns, sc),
                                  kt(QP_DTYPE_FLOAT, 1, variant == 2 ? &one : &ns, b)};
            in[0].is_const = 0;
            struct prepared pp;
            prep_node(&pp, "LayerNormalization", 17, NULL, 0, variant == 3 ? 2 : 3, in);
            const struct qp_kernel *k = qp_kernel_find("", "LayerNormalization", 17);
            float *want = run_prepared(&pp, qp_k_layernorm_ref_run, 1);
            float *y1 = run_prepared(&pp, k->run, 1);
            float *y2 = run_prepared(&pp, k->run, 2);
            assert_memory_equal(y1, y2, pp.out.nbytes);
            assert_near(y1, want, pp.out.numel, "LayerNormalization");
            free(want);
            free(y1);
            free(y2);
            free(pp.p.state);
            free(x);
            free(sc);
            free(b);
        }
}

static void test_global_avgpool_fast(void **state) {
    (void)state;
    static const int64_t shapes[][4] = {
        {1, 96, 160, 160}, {2, 3, 5, 5}, {1, 7, 1, 1}, {1, 4, 3, 0}, {3, 40, 17, 9}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const int64_t *d = shapes[c];
        uint64_t n = (uint64_t)(d[0] * d[1] * d[2] * d[3]);
        float *x = malloc((n ? n : 1) * sizeof *x);
        assert_non_null(x);
        fill_special(x, n);
        for (uint64_t i = 0; i < n; i++) /* keep most planes finite */
            if (!isfinite(x[i]) && urand() % 64) x[i] = 0.5f;
        struct qp_kt in[1] = {kt(QP_DTYPE_FLOAT, 4, d, x)};
        in[0].is_const = 0;
        struct prepared pp;
        prep_node(&pp, "GlobalAveragePool", 17, NULL, 0, 1, in);
        const struct qp_kernel *k = qp_kernel_find("", "GlobalAveragePool", 17);
        float *want = run_prepared(&pp, qp_k_pool_run, 1);
        float *y1 = run_prepared(&pp, k->run, 1);
        float *y2 = run_prepared(&pp, k->run, 2);
        assert_memory_equal(y1, y2, pp.out.nbytes);
        assert_near(y1, want, pp.out.numel, "GlobalAveragePool");
        free(want);
        free(y1);
        free(y2);
        free(pp.p.state);
        free(x);
    }
}

/* ---- AveragePool ------------------------------------------------------------------------- */

static void test_avgpool_fast(void **state) {
    (void)state;
    static const struct {
        int rank;
        int64_t dims[5], k[3], stride[3], pads[6], dil[3];
        int count_pad, ceil;
    } cases[] = {
        {4, {1, 480, 3, 80}, {3, 2}, {3, 2}, {0, 0, 0, 0}, {1, 1}, 0, 0}, /* PaddleOCR rec */
        {4, {2, 3, 9, 11}, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 0, 0},
        {4, {2, 3, 9, 11}, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, 0},
        {4, {1, 4, 10, 7}, {2, 3}, {2, 2}, {0, 1, 1, 2}, {1, 1}, 1, 1},
        {4, {1, 4, 10, 7}, {2, 3}, {2, 2}, {0, 1, 1, 2}, {1, 1}, 0, 1},
        {4, {1, 2, 5, 5}, {5, 5}, {1, 1}, {2, 2, 2, 2}, {1, 1}, 0, 0},
        {3, {2, 5, 31}, {4}, {3}, {2, 1}, {1}, 1, 0},
        {3, {2, 5, 31}, {4}, {3}, {2, 1}, {1}, 0, 1},
        {4, {1, 3, 12, 12}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {2, 2}, 0, 0}, /* dilated: general */
        {5, {1, 2, 4, 5, 6}, {2, 2, 2}, {1, 2, 2}, {0, 0, 0, 1, 1, 1}, {1, 1, 1}, 1, 0},
        {4, {1, 64, 48, 40}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 0, 0}, /* 2 threads */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int nsp = cases[c].rank - 2;
        uint64_t n = 1;
        for (int i = 0; i < cases[c].rank; i++)
            n *= (uint64_t)cases[c].dims[i];
        float *x = malloc(n * sizeof *x);
        assert_non_null(x);
        fill_special(x, n);
        struct qp_kt in[1] = {kt(QP_DTYPE_FLOAT, cases[c].rank, cases[c].dims, x)};
        in[0].is_const = 0;
        struct qp_attr attrs[6] = {
            {.name = "kernel_shape", .type = QP_ATTR_INTS, .n = (size_t)nsp, .ints = cases[c].k},
            {.name = "strides", .type = QP_ATTR_INTS, .n = (size_t)nsp, .ints = cases[c].stride},
            {.name = "pads", .type = QP_ATTR_INTS, .n = (size_t)(2 * nsp), .ints = cases[c].pads},
            {.name = "dilations", .type = QP_ATTR_INTS, .n = (size_t)nsp, .ints = cases[c].dil},
            {.name = "count_include_pad", .type = QP_ATTR_INT, .i = cases[c].count_pad},
            {.name = "ceil_mode", .type = QP_ATTR_INT, .i = cases[c].ceil}};
        struct prepared pp;
        prep_node(&pp, "AveragePool", 19, attrs, 6, 1, in);
        const struct qp_kernel *k = qp_kernel_find("", "AveragePool", 19);
        float *want = run_prepared(&pp, qp_k_pool_run, 1);
        float *y1 = run_prepared(&pp, k->run, 1);
        float *y2 = run_prepared(&pp, k->run, 2);
        if (memcmp(y1, want, pp.out.nbytes) || memcmp(y2, want, pp.out.nbytes)) {
            fprintf(stderr, "AveragePool case %zu differs from the general kernel\n", c);
            fail();
        }
        free(want);
        free(y1);
        free(y2);
        free(pp.p.state);
        free(x);
    }
}

/* ---- MaxPool ------------------------------------------------------------------------------ */

static void check_maxpool_nhwc(struct prepared *pp, const struct qp_kernel *k, const int64_t *dims,
                               const float *x, const float *want, size_t c);

/* The float 1-D/2-D path (AVX2 for strides 1 and 2) against the general kernel, bit for bit
 * (NaN, -inf, -0 and +0 included: the first tap wins ties), and int8/uint8 through the same
 * row; every case also channels last (check_maxpool_nhwc). */
static void test_maxpool_fast(void **state) {
    (void)state;
    static const struct {
        int rank;
        int64_t dims[5], k[3], stride[3], pads[6], dil[3];
        int ceil;
        enum qp_dtype dt;
    } cases[] = {
        {4, {1, 64, 112, 112}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0, QP_DTYPE_FLOAT}, /* ResNet
                                                                                          */
        {4, {2, 3, 9, 41}, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 0, QP_DTYPE_FLOAT},
        {4, {1, 4, 10, 37}, {2, 3}, {2, 2}, {0, 1, 1, 2}, {1, 1}, 1, QP_DTYPE_FLOAT},
        {4, {1, 4, 10, 38}, {2, 3}, {2, 2}, {0, 1, 1, 2}, {1, 1}, 0, QP_DTYPE_FLOAT},
        {4, {1, 2, 5, 40}, {5, 5}, {1, 1}, {2, 2, 2, 2}, {1, 1}, 0, QP_DTYPE_FLOAT},
        {4, {1, 3, 20, 50}, {2, 4}, {3, 3}, {1, 1, 1, 1}, {1, 1}, 1, QP_DTYPE_FLOAT}, /* scalar */
        {4, {1, 3, 8, 34}, {1, 1}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 0, QP_DTYPE_FLOAT},
        {3, {2, 5, 67}, {4}, {2}, {2, 1}, {1}, 1, QP_DTYPE_FLOAT},
        {3, {2, 5, 67}, {3}, {1}, {1, 1}, {1}, 0, QP_DTYPE_FLOAT},
        {4, {1, 3, 12, 12}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {2, 2}, 0, QP_DTYPE_FLOAT}, /* dilated */
        {5,
         {1, 2, 4, 5, 6},
         {2, 2, 2},
         {1, 2, 2},
         {0, 0, 0, 1, 1, 1},
         {1, 1, 1},
         0,
         QP_DTYPE_FLOAT}, /* 3-D: general */
        {4, {1, 8, 30, 30}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0, QP_DTYPE_INT8},
        {4, {1, 8, 30, 30}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 1, QP_DTYPE_UINT8},
        {4, {1, 64, 112, 112}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0, QP_DTYPE_INT8}, /* ResNet */
        {4, {2, 3, 9, 41}, {2, 3}, {2, 1}, {0, 1, 1, 2}, {1, 1}, 1, QP_DTYPE_INT8},
        {4, {1, 3, 12, 12}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {2, 2}, 0, QP_DTYPE_UINT8}, /* dilated */
        {4, {1, 5, 7, 33}, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 0, QP_DTYPE_UINT8},
        {4, {1, 2, 6, 5}, {3, 7}, {1, 3}, {1, 3, 1, 3}, {1, 1}, 1, QP_DTYPE_INT8}, /* no interior */
        /* channel counts that take every register block and tail of the channels-last forms
         * (64, 32, 16 and 8 lanes), and a window of 81 taps (beyond the registers' 64) */
        {4, {1, 83, 9, 11}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0, QP_DTYPE_FLOAT},
        {4, {2, 120, 7, 6}, {2, 2}, {1, 1}, {0, 0, 1, 1}, {1, 1}, 1, QP_DTYPE_FLOAT},
        {4, {1, 17, 12, 12}, {9, 9}, {1, 1}, {4, 4, 4, 4}, {1, 1}, 0, QP_DTYPE_FLOAT},
        {4, {1, 83, 9, 11}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0, QP_DTYPE_INT8},
        {4, {2, 160, 7, 6}, {2, 2}, {1, 1}, {0, 0, 1, 1}, {1, 1}, 1, QP_DTYPE_UINT8},
        {4, {1, 17, 12, 12}, {9, 9}, {1, 1}, {4, 4, 4, 4}, {1, 1}, 0, QP_DTYPE_INT8},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int nsp = cases[c].rank - 2;
        uint64_t n = 1;
        for (int i = 0; i < cases[c].rank; i++)
            n *= (uint64_t)cases[c].dims[i];
        float *x = malloc(n * sizeof *x);
        assert_non_null(x);
        fill_special(x, n);
        if (c == 1) /* a plane of -inf, and zeros of both signs competing */
            for (uint64_t i = 0; i < n; i++)
                x[i] = i < 9 * 41 ? -INFINITY : (urand() % 2 ? -0.0f : 0.0f);
        if (cases[c].dt != QP_DTYPE_FLOAT)
            for (uint64_t i = 0; i < n; i++)
                ((uint8_t *)x)[i] = (uint8_t)urand();
        struct qp_kt in[1] = {kt(cases[c].dt, cases[c].rank, cases[c].dims, x)};
        in[0].is_const = 0;
        struct qp_attr attrs[5] = {
            {.name = "kernel_shape", .type = QP_ATTR_INTS, .n = (size_t)nsp, .ints = cases[c].k},
            {.name = "strides", .type = QP_ATTR_INTS, .n = (size_t)nsp, .ints = cases[c].stride},
            {.name = "pads", .type = QP_ATTR_INTS, .n = (size_t)(2 * nsp), .ints = cases[c].pads},
            {.name = "dilations", .type = QP_ATTR_INTS, .n = (size_t)nsp, .ints = cases[c].dil},
            {.name = "ceil_mode", .type = QP_ATTR_INT, .i = cases[c].ceil}};
        struct prepared pp;
        prep_node(&pp, "MaxPool", 12, attrs, 5, 1, in);
        const struct qp_kernel *k = qp_kernel_find("", "MaxPool", 12);
        float *want = run_prepared(&pp, qp_k_maxpool_run, 1);
        float *y1 = run_prepared(&pp, k->run, 1);
        float *y2 = run_prepared(&pp, k->run, 2);
        float *y3 = run_prepared(&pp, k->run, 3);
        if (memcmp(y1, want, pp.out.nbytes) || memcmp(y2, want, pp.out.nbytes) ||
            memcmp(y3, want, pp.out.nbytes)) {
            fprintf(stderr, "MaxPool case %zu differs from the general kernel\n", c);
            fail();
        }
        if (qp_pool_nhwc_capable(pp.p.state)) check_maxpool_nhwc(&pp, k, cases[c].dims, x, want, c);
        free(want);
        free(y1);
        free(y2);
        free(y3);
        free(pp.p.state);
        free(x);
    }
}

/* (N, C, S) <-> (N, S, C) for elements of es bytes: to_last 1 from channels first. */
static void swap_channels(const void *a, void *b, size_t es, int64_t n, int64_t c, int64_t sp,
                          int to_last) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < c; j++)
            for (int64_t k = 0; k < sp; k++) {
                int64_t first = (i * c + j) * sp + k, last = (i * sp + k) * c + j;
                memcpy((char *)b + (size_t)(to_last ? last : first) * es,
                       (const char *)a + (size_t)(to_last ? first : last) * es, es);
            }
}

/* The same state marked channels last (kernels/pool.h, as the layout pass does) on the input
 * transposed: the transposed output of the general kernel, bit for bit, on 1 and 2 threads. */
static void check_maxpool_nhwc(struct prepared *pp, const struct qp_kernel *k, const int64_t *dims,
                               const float *x, const float *want, size_t c) {
    const struct qp_kt *xin = pp->ins[0];
    int64_t n = dims[0], ch = dims[1], isp = (int64_t)xin->numel / (n * ch);
    int64_t osp = (int64_t)pp->out.numel / (n * ch);
    size_t es = xin->dtype == QP_DTYPE_FLOAT ? sizeof(float) : 1;
    float *xt = malloc(xin->numel * sizeof *xt), *wt = malloc(pp->out.numel * sizeof *wt);
    assert_true(xt && wt);
    swap_channels(x, xt, es, n, ch, isp, 1);
    swap_channels(want, wt, es, n, ch, osp, 1);
    struct qp_kt xl = *xin;
    xl.data = xt;
    pp->ins[0] = &xl;
    qp_pool_set_nhwc(pp->p.state);
    for (int t = 1; t <= 2; t++) {
        float *y = run_prepared(pp, k->run, t);
        if (memcmp(y, wt, pp->out.nbytes)) {
            fprintf(stderr, "MaxPool case %zu channels last (%d threads) differs\n", c, t);
            fail();
        }
        free(y);
    }
    pp->ins[0] = xin;
    free(xt);
    free(wt);
}

/* ---- Softmax ------------------------------------------------------------------------------- */

/* vecmath's softmax rows: AVX2 and plain C bit for bit, close to a double-precision softmax. */
static void test_softmax_rows(void **state) {
    (void)state;
    static const int64_t lens[] = {1, 2, 7, 8, 9, 15, 16, 17, 24, 40, 64, 197, 1000};
    for (size_t c = 0; c < sizeof lens / sizeof lens[0]; c++) {
        int64_t n = lens[c], rows = 5;
        float *x = malloc((size_t)(rows * n) * sizeof *x), *y = malloc((size_t)(rows * n) * 4),
              *z = malloc((size_t)(rows * n) * 4);
        assert_non_null(x);
        assert_non_null(y);
        assert_non_null(z);
        /* rows 0-2 spread (a few terms decide each sum), rows 3-4 close together (every term
         * counts: another order of the partial sums gives other bits) */
        for (int64_t i = 0; i < rows * n; i++)
            x[i] = frand() * (i < 3 * n ? (float)(1 + i % 3) * 10.0f : 0.5f);
        if (n > 1) x[n / 2] = -INFINITY; /* a -inf in a finite row gives 0 */
        qp_vf_softmax_rows_portable(x, z, rows, n);
        if (qp_vf_softmax_rows(x, y, rows, n)) assert_memory_equal(y, z, (size_t)(rows * n) * 4);
        for (int64_t r = 0; r < rows; r++) {
            double m = -INFINITY, sum = 0;
            for (int64_t i = 0; i < n; i++)
                m = x[r * n + i] > m ? x[r * n + i] : m;
            for (int64_t i = 0; i < n; i++)
                sum += exp((double)x[r * n + i] - m);
            for (int64_t i = 0; i < n; i++) {
                double want = exp((double)x[r * n + i] - m) / sum;
                if (!(fabs(z[r * n + i] - want) <= 1e-7 + 1e-5 * want)) {
                    fprintf(stderr, "softmax n %lld row %lld element %lld: %.9g vs %.9g\n",
                            (long long)n, (long long)r, (long long)i, z[r * n + i], want);
                    fail();
                }
            }
        }
        free(x);
        free(y);
        free(z);
    }
}

static void test_softmax_finite_check(void **state) {
    (void)state;
    int64_t d[3] = {3, 197, 197};
    uint64_t n = 3 * 197 * 197;
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (int c = 0; c < 4; c++) {
        for (uint64_t i = 0; i < n; i++)
            x[i] = frand() * 4.0f;
        /* c 0: all finite; 1: a NaN past the first blocks; 2: +inf; 3: a row of -inf */
        if (c == 1) x[50001] = NAN;
        if (c == 2) x[n - 3] = INFINITY;
        if (c == 3)
            for (int i = 0; i < 197; i++)
                x[197 * 300 + i] = -INFINITY;
        struct qp_kt in[1] = {kt(QP_DTYPE_FLOAT, 3, d, x)};
        in[0].is_const = 0;
        struct prepared pp;
        prep_node(&pp, "Softmax", 13, NULL, 0, 1, in);
        const struct qp_kernel *k = qp_kernel_find("", "Softmax", 13);
        float *y1 = run_prepared(&pp, k->run, 1);
        float *y2 = run_prepared(&pp, k->run, 2);
        assert_memory_equal(y1, y2, pp.out.nbytes);
        free(pp.p.state);
        /* the reference kernel, prepared through its own prepare */
        struct qp_node node = {.name = "n", .op_type = "Softmax", .domain = ""};
        const struct qp_kt *ins[1] = {&in[0]};
        struct qp_kt out;
        memset(&out, 0, sizeof out);
        struct qp_kt *outs[1] = {&out};
        struct qp_error err = {0};
        struct qp_kprep p = {.node = &node,
                             .opset = 13,
                             .n_in = 1,
                             .n_out = 1,
                             .in = ins,
                             .out = outs,
                             .err = &err,
                             .missing_const = -1};
        assert_int_equal(qp_k_softmax_prepare(&p), QP_OK);
        float *want = malloc(out.nbytes);
        assert_non_null(want);
        out.data = want;
        struct qp_krun r = {.node = &node,
                            .state = p.state,
                            .n_in = 1,
                            .n_out = 1,
                            .in = ins,
                            .out = outs,
                            .n_threads = 1,
                            .err = &err};
        assert_int_equal(qp_k_softmax_run(&r), QP_OK);
        free(p.state);
        uint64_t nan_count = 0;
        for (uint64_t i = 0; i < n; i++)
            nan_count += isnan(want[i]) != 0;
        assert_true(c == 0 ? nan_count == 0 : nan_count == 197);
        assert_near(y1, want, n, "Softmax");
        free(want);
        free(y1);
        free(y2);
    }
    free(x);
}

/* ---- Transpose ----------------------------------------------------------------------------- */

static void transpose_case(int rank, const int64_t *dims, const int64_t *perm, enum qp_dtype dt) {
    size_t es = dt == QP_DTYPE_INT64 ? 8 : (dt == QP_DTYPE_UINT8 ? 1 : 4);
    uint64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= (uint64_t)dims[i];
    unsigned char *x = malloc(n * es + 1), *want = malloc(n * es + 1);
    assert_non_null(x);
    assert_non_null(want);
    for (uint64_t i = 0; i < n * es; i++)
        x[i] = (unsigned char)urand();
    /* naive: output index -> input index */
    int64_t od[QP_MAX_RANK], istr[QP_MAX_RANK], acc = 1;
    for (int i = rank - 1; i >= 0; i--) {
        istr[i] = acc;
        acc *= dims[i];
    }
    for (int i = 0; i < rank; i++)
        od[i] = dims[perm[i]];
    for (uint64_t o = 0; o < n; o++) {
        uint64_t rem = o, off = 0;
        for (int i = rank - 1; i >= 0; i--) {
            off += (rem % (uint64_t)od[i]) * (uint64_t)istr[perm[i]];
            rem /= (uint64_t)od[i];
        }
        memcpy(want + o * es, x + off * es, es);
    }
    struct qp_kt in[1] = {kt(dt, rank, dims, x)};
    in[0].is_const = 0;
    struct qp_attr attr = {.name = "perm", .type = QP_ATTR_INTS, .n = (size_t)rank, .ints = perm};
    struct prepared pp;
    prep_node(&pp, "Transpose", 17, &attr, 1, 1, in);
    const struct qp_kernel *k = qp_kernel_find("", "Transpose", 17);
    for (int t = 1; t <= 2; t++) {
        float *y = run_prepared(&pp, k->run, t);
        if (memcmp(y, want, n * es)) {
            fprintf(stderr, "Transpose rank %d dtype %d threads %d differs\n", rank, (int)dt, t);
            fail();
        }
        free(y);
    }
    free(pp.p.state);
    free(x);
    free(want);
}

static void test_transpose_fast(void **state) {
    (void)state;
    static const struct {
        int rank;
        int64_t dims[5], perm[5];
    } cases[] = {
        {4, {1, 3, 197, 64}, {0, 1, 3, 2}}, /* ViT K^T: batched 2-D */
        {2, {33, 17}, {1, 0}},
        {3, {5, 1, 7}, {0, 2, 1}},
        {4, {2, 3, 300, 250}, {0, 1, 3, 2}}, /* large: 2 threads */
        {4, {1, 5, 300, 250}, {0, 1, 3, 2}}, /* 2 threads, split inside a plane (80 units) */
        {4, {3, 1, 40, 9}, {1, 0, 3, 2}},    /* size-1 leading dims reordered */
        {4, {1, 197, 3, 64}, {0, 2, 1, 3}},  /* last axis stays: whole runs */
        {5, {1, 197, 3, 3, 64}, {2, 0, 3, 1, 4}},
        {3, {64, 70, 40}, {2, 0, 1}},
        {3, {4, 5, 6}, {0, 1, 2}},
        {4, {2, 3, 4, 5}, {1, 0, 3, 2}}, /* not a batched 2-D: general */
        {3, {2, 16, 24}, {0, 2, 1}},     /* whole 8x8 byte tiles only */
        {3, {3, 9, 23}, {0, 2, 1}},      /* a tile and ragged edges on both sides */
        {2, {7, 8}, {1, 0}},             /* fewer rows than a tile */
    };
    static const enum qp_dtype dts[3] = {QP_DTYPE_FLOAT, QP_DTYPE_INT64, QP_DTYPE_UINT8};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int d = 0; d < 3; d++)
            transpose_case(cases[i].rank, cases[i].dims, cases[i].perm, dts[d]);
}

/* ---- Resize -------------------------------------------------------------------------------- */

struct rs_case {
    const char *mode, *ctm, *nearest;
    int rank;
    int64_t dims[4];
    float scales[4];
    int fast; /* expected to take the plane path */
};

static void resize_case(const struct rs_case *c, int opset) {
    uint64_t n = 1;
    for (int d = 0; d < c->rank; d++)
        n *= (uint64_t)c->dims[d];
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    fill_special(x, n);
    int64_t dr[1] = {0}, ds[1] = {c->rank};
    struct qp_kt in[3] = {kt(QP_DTYPE_FLOAT, c->rank, c->dims, x), kt(QP_DTYPE_FLOAT, 1, dr, NULL),
                          kt(QP_DTYPE_FLOAT, 1, ds, (void *)c->scales)};
    in[0].is_const = 0;
    struct qp_attr attrs[3] = {
        {.name = "mode", .type = QP_ATTR_STRING, .s = {(const uint8_t *)c->mode, strlen(c->mode)}},
        {.name = "coordinate_transformation_mode",
         .type = QP_ATTR_STRING,
         .s = {(const uint8_t *)c->ctm, strlen(c->ctm)}},
        {.name = "nearest_mode",
         .type = QP_ATTR_STRING,
         .s = {(const uint8_t *)c->nearest, strlen(c->nearest)}}};
    struct prepared pp;
    prep_node(&pp, "Resize", opset, attrs, 3, 3, in);
    if (qp_k_resize_state_is_fast(pp.p.state) != c->fast) {
        fprintf(stderr, "Resize %s %s: fast path %d, expected %d\n", c->mode, c->ctm,
                qp_k_resize_state_is_fast(pp.p.state), c->fast);
        fail();
    }
    const struct qp_kernel *k = qp_kernel_find("", "Resize", opset);
    float *want = run_prepared(&pp, qp_k_resize_ref_run, 1);
    float *y1 = run_prepared(&pp, k->run, 1);
    float *y2 = run_prepared(&pp, k->run, 2);
    if (memcmp(y1, want, pp.out.nbytes) || memcmp(y2, want, pp.out.nbytes)) {
        for (uint64_t i = 0; i < pp.out.numel; i++)
            if (memcmp(&y1[i], &want[i], 4) || memcmp(&y2[i], &want[i], 4)) {
                fprintf(stderr, "Resize %s %s rank %d: element %llu: %.9g / %.9g vs %.9g\n",
                        c->mode, c->ctm, c->rank, (unsigned long long)i, y1[i], y2[i], want[i]);
                break;
            }
        fail();
    }
    free(want);
    free(y1);
    free(y2);
    free(pp.p.state);
    free(x);
}

static void test_resize_fast(void **state) {
    (void)state;
    static const struct rs_case cases[] = {
        /* PaddleOCR det: nearest, asymmetric, floor, x2 / x4 / x8 */
        {"nearest", "asymmetric", "floor", 4, {1, 5, 20, 20}, {1, 1, 2, 2}, 1},
        {"nearest", "asymmetric", "floor", 4, {1, 3, 10, 12}, {1, 1, 4, 4}, 1},
        {"nearest", "asymmetric", "floor", 4, {2, 8, 40, 40}, {1, 1, 8, 8}, 1},
        {"nearest", "half_pixel", "round_prefer_floor", 4, {1, 3, 7, 9}, {1, 1, 2.5f, 1.5f}, 1},
        {"nearest", "align_corners", "round_prefer_ceil", 4, {2, 2, 9, 7}, {1, 1, 0.5f, 3}, 1},
        {"nearest", "pytorch_half_pixel", "ceil", 3, {4, 6, 5}, {1, 3, 0.7f}, 1},
        {"nearest", "tf_half_pixel_for_nn", "floor", 2, {33, 17}, {2, 3}, 1},
        {"linear", "half_pixel", "floor", 4, {1, 4, 16, 24}, {1, 1, 2, 2}, 1},
        {"linear", "align_corners", "floor", 4, {2, 3, 9, 11}, {1, 1, 1.7f, 0.6f}, 1},
        {"linear", "asymmetric", "floor", 4, {1, 2, 64, 64}, {1, 1, 2, 2}, 1},
        {"linear", "pytorch_half_pixel", "floor", 4, {1, 1, 1, 37}, {1, 1, 3, 1.25f}, 1},
        {"linear", "half_pixel_symmetric", "floor", 3, {5, 8, 8}, {1, 2.5f, 0.75f}, 1},
        /* cubic: an identity outer dim still has 4 taps (weights 0 1 0 0): the general kernel */
        {"cubic", "half_pixel", "floor", 4, {1, 3, 12, 10}, {1, 1, 2, 1.5f}, 0},
        {"cubic", "align_corners", "floor", 4, {1, 2, 6, 6}, {1, 1, 0.5f, 3}, 0},
        /* an outer dim resized too: the general kernel */
        {"nearest", "asymmetric", "floor", 4, {1, 4, 6, 6}, {1, 2, 2, 2}, 0},
        {"linear", "half_pixel", "floor", 3, {3, 5, 7}, {2, 1, 1}, 0},
        /* rank 1: the general kernel */
        {"linear", "half_pixel", "floor", 1, {50}, {3}, 0},
        /* large enough for 2 threads */
        {"nearest", "asymmetric", "floor", 4, {1, 16, 40, 40}, {1, 1, 2, 2}, 1},
        {"linear", "half_pixel", "floor", 4, {1, 16, 40, 40}, {1, 1, 2, 2}, 1},
        {"cubic", "pytorch_half_pixel", "floor", 4, {1, 8, 32, 32}, {1, 1, 1.5f, 2}, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        resize_case(&cases[i], 13);
        resize_case(&cases[i], 19);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vecmath_accuracy),
        cmocka_unit_test(test_vecmath_avx2_equals_portable),
        cmocka_unit_test(test_vecmath_rows),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_gemm_panels),
        cmocka_unit_test(test_matmul_batched),
        cmocka_unit_test(test_transpose_fast),
        cmocka_unit_test(test_softmax_rows),
        cmocka_unit_test(test_softmax_finite_check),
        cmocka_unit_test(test_avgpool_fast),
        cmocka_unit_test(test_maxpool_fast),
        cmocka_unit_test(test_layernorm_fast),
        cmocka_unit_test(test_global_avgpool_fast),
        cmocka_unit_test(test_resize_fast),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
