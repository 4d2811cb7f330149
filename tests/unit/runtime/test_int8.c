/*
 * The integer path (runtime/int8.c + kernels/int8_conv.c): fusion decisions per TensorRT
 * pattern, results against the fake-quantization oracle (QP_INT8_OFF) within one quantization
 * step, exact results with weights beyond +-64 and large activations on every kernel path
 * (oneDNN int8 where the CPU has VNNI, the AVX2 integer kernels and oneDNN float without, plain
 * C), and the path selection.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/half.h"
#include "ir/ir.h"
#include "kernels/dnnl_util.h"
#include "kernels/int8_conv.h"
#include "kernels/isa.h"
#include "kernels/kernel.h"
#include "qplace/session.h"
#include "runtime/int8.h"
#include "runtime/runtime.h"

#include "rt_testmodel.h"

#define C  8
#define M  16
#define HW 10

static struct qp_dim x_dims[4] = {{1, NULL}, {C, NULL}, {HW, NULL}, {HW, NULL}};
static float xin[C * HW * HW];
static float y_off[M * HW * HW], y_on[M * HW * HW];

static void int_attr(struct qp_model *m, const char *node_name, const char *name, int64_t v) {
    int n = qp_graph_find_node(m->graph, node_name);
    struct qp_attr *a = qp_node_add_attr(m->graph, n, name, QP_ATTR_INT);
    assert_non_null(a);
    a->i = v;
}

/* Initializers `name` (float weights w of the given rank and dims wd), `name`_ws (ns scales: rank
 * 1, or a scalar when ns is 1), `name`_wz (zeros), `name`_b (nb biases), and `name`_wQ ->
 * `name`_wDQ into `out`, along `axis` when ns > 1. */
static void weight_qdq(struct qp_model *m, const char *name, const char *out, int rank,
                       const int64_t *wd, const float *w, int64_t ns, const float *sc, int64_t nb,
                       const float *b, int axis) {
    int64_t nw = 1, sd[1] = {ns}, bd[1] = {nb};
    for (int d = 0; d < rank; d++)
        nw *= wd[d];
    int8_t *z = model_alloc(m, (size_t)ns);
    char ws[96], wz[96], wq[96], wqo[96], wdq[96], bn[96];
    snprintf(ws, sizeof ws, "%s_ws", name);
    snprintf(wz, sizeof wz, "%s_wz", name);
    snprintf(wq, sizeof wq, "%s_wQ", name);
    snprintf(wqo, sizeof wqo, "%s_wq", name);
    snprintf(wdq, sizeof wdq, "%s_wDQ", name);
    snprintf(bn, sizeof bn, "%s_b", name);
    graph_add_init(m, m->graph, name, QP_DTYPE_FLOAT, rank, wd, w, sizeof(float) * (size_t)nw);
    graph_add_init(m, m->graph, ws, QP_DTYPE_FLOAT, ns > 1, sd, sc, sizeof(float) * (size_t)ns);
    graph_add_init(m, m->graph, wz, QP_DTYPE_INT8, ns > 1, sd, z, (size_t)ns);
    graph_add_init(m, m->graph, bn, QP_DTYPE_FLOAT, 1, bd, b, sizeof(float) * (size_t)nb);
    const char *qi[3] = {name, ws, wz}, *di[3] = {wqo, ws, wz};
    rt_node(m, wq, "QuantizeLinear", 3, qi, wqo);
    rt_node(m, wdq, "DequantizeLinear", 3, di, out);
    if (ns > 1) {
        int_attr(m, wq, "axis", axis);
        int_attr(m, wdq, "axis", axis);
    }
}

/* Conv weights `name` [M, C, 3, 3] as DQ(Q(W float)) per output channel; values integers times
 * a power-of-two scale per channel when `exact`, |q| up to 127. */
static void conv_weights(struct qp_model *m, const char *name, int exact) {
    int64_t wd[4] = {M, C, 3, 3};
    float *w = model_alloc(m, sizeof(float) * M * C * 9), *s = model_alloc(m, sizeof(float) * M);
    float *b = model_alloc(m, sizeof(float) * M);
    for (int oc = 0; oc < M; oc++) {
        s[oc] = exact ? ldexpf(1.0f, -6 - oc % 3) : 0.01f + 0.001f * oc;
        b[oc] = exact ? ldexpf((float)(oc - 8), -3) : 0.1f * rt_frand();
        for (int i = 0; i < C * 9; i++) {
            int q = exact ? ((oc * 37 + i * 11) % 255) - 127 : (int)(127 * rt_frand());
            w[oc * C * 9 + i] = (float)q * s[oc];
        }
    }
    weight_qdq(m, name, name[0] == 'w' ? "wf" : "wf2", 4, wd, w, M, s, M, b, 0);
}

static void conv(struct qp_model *m, const char *name, const char *x, const char *w, const char *b,
                 const char *out) {
    const char *in[3] = {x, w, b};
    rt_node(m, name, "Conv", 3, in, out);
    int n = qp_graph_find_node(m->graph, name);
    struct qp_attr *a = qp_node_add_attr(m->graph, n, "pads", QP_ATTR_INTS);
    static const int64_t pads[4] = {1, 1, 1, 1};
    a->ints = pads;
    a->n = 4;
}

static void finish(struct qp_model *m, const char *out) {
    struct qp_error err = {0};
    assert_int_equal(qp_graph_add_output(m->graph, qp_graph_find_value(m->graph, out), &err),
                     QP_OK);
    assert_int_equal(qp_graph_toposort(m->graph, &err), QP_OK);
}

/* x -> QDQ -> Conv(w) -> Relu -> Add(QDQ(Conv(w2) of the same input)) -> QDQ -> y: ResNet's
 * residual block, as the trt policy writes it. */
static struct qp_model *residual_model(int exact, float xs, float ys) {
    struct qp_model *m = model_with_x(4, x_dims);
    rt_qdq(m, "x", "xd", xs, 0);
    conv_weights(m, "w", exact);
    conv_weights(m, "v", exact);
    conv(m, "conv_a", "xd", "wf", "w_b", "a");
    const char *r[1] = {"a"};
    rt_node(m, "relu_a", "Relu", 1, r, "ar");
    conv(m, "conv_b", "xd", "wf2", "v_b", "bo");
    rt_qdq(m, "bo", "bd", ys * 2, 0);
    const char *add[2] = {"ar", "bd"};
    rt_node(m, "add", "Add", 2, add, "s");
    const char *r2[1] = {"s"};
    rt_node(m, "relu_s", "Relu", 1, r2, "sr");
    rt_qdq(m, "sr", "y", ys, 0);
    finish(m, "y");
    return m;
}

/* Runs m on x [1, C, hw, hw] with 2 threads, copies output 0 (ny floats) into y; keeps the
 * session in *keep when given. */
static void run_hw(struct qp_model *m, int int8, int64_t hw, const float *x, float *y, size_t ny,
                   struct qp_session **keep) {
    struct qp_error err = {0};
    struct qp_session_options o = {.n_threads = 2, .int8 = int8};
    struct qp_session *s = NULL;
    assert_int_equal(qp_session_create(m, &o, 0, NULL, &s, &err), QP_OK);
    struct qp_array in, out;
    int64_t d[4] = {1, C, hw, hw};
    assert_int_equal(qp_array_view(&in, QP_DTYPE_FLOAT, 4, d, (void *)x,
                                   sizeof(float) * (size_t)(C * hw * hw), &err),
                     QP_OK);
    assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
    assert_int_equal(qp_session_output(s, 0, &out, &err), QP_OK);
    assert_int_equal(out.nbytes, ny * sizeof *y);
    memcpy(y, out.data, out.nbytes);
    if (keep)
        *keep = s;
    else
        qp_session_free(s);
}

static void run(struct qp_model *m, int int8, const float *x, float *y, size_t ny,
                struct qp_session **keep) {
    run_hw(m, int8, HW, x, y, ny, keep);
}

static const struct qp_int8_decision *find(const struct qp_session *s, const char *name) {
    const struct qp_int8_decision *d;
    size_t n = qp_session_int8_decisions(s, &d, NULL);
    for (size_t i = 0; i < n; i++)
        if (strcmp(d[i].node, name) == 0) return &d[i];
    fail_msg("no decision for %s", name);
    return NULL;
}

static void fill_x(float amp) {
    rt_rng = 7;
    for (size_t i = 0; i < sizeof xin / sizeof xin[0]; i++)
        xin[i] = amp * rt_frand();
}

/* The residual block fuses as TensorRT fuses it and agrees with the oracle within one step. */
static void test_residual_block(void **state) {
    (void)state;
    rt_rng = 1;
    float ys = 0.05f;
    struct qp_model *m = residual_model(0, 0.02f, ys);
    fill_x(2.0f);
    struct qp_session *s;
    run(m, QP_INT8_OFF, xin, y_off, M * HW * HW, NULL);
    run(m, QP_INT8_AUTO, xin, y_on, M * HW * HW, &s);
    const char *fb;
    qp_session_int8_decisions(s, NULL, &fb);
    assert_string_equal(fb, "");
    assert_int_equal(s->int8->n_qconv, 2);
    const struct qp_int8_decision *d = find(s, "xd_DQ");
    assert_true(d->fused);
    assert_non_null(strstr(find(s, "y_Q")->into, "residual add"));
    assert_non_null(strstr(find(s, "bd_DQ")->into, "conv_a"));
    assert_non_null(strstr(find(s, "bd_Q")->into, "conv_b"));
    /* the final DQ feeds the graph output: its own pass */
    assert_false(find(s, "y_DQ")->fused);
    int off_by_one = 0;
    for (size_t i = 0; i < M * HW * HW; i++) {
        float diff = fabsf(y_on[i] - y_off[i]);
        assert_true(diff <= ys * 1.001f);
        off_by_one += diff > 0;
    }
    assert_true(off_by_one < M * HW * HW / 20);
    qp_session_free(s);
    qp_model_free(m);
}

/* x -> QDQ -> Conv -> HardSigmoid -> QDQ -> y: PaddleOCR's squeeze-excitation gate. */
static struct qp_model *gate_model(void) {
    struct qp_model *m = model_with_x(4, x_dims);
    rt_qdq(m, "x", "xd", 0.02f, 0);
    conv_weights(m, "w", 0);
    conv(m, "conv", "xd", "wf", "w_b", "a");
    const char *h[1] = {"a"};
    rt_node(m, "hsig", "HardSigmoid", 1, h, "g");
    rt_qdq(m, "g", "y", 1.0f / 127, 0);
    finish(m, "y");
    return m;
}

/* Activations oneDNN runs as several post-ops before the requantization stay within one step
 * (oneDNN 2.6's int8 convolution got HardSigmoid + Q wrong when it requantized itself). */
static void test_gate_requantized(void **state) {
    (void)state;
    rt_rng = 5;
    struct qp_model *m = gate_model();
    fill_x(2.0f);
    run(m, QP_INT8_OFF, xin, y_off, M * HW * HW, NULL);
    struct qp_session *s;
    run(m, QP_INT8_AUTO, xin, y_on, M * HW * HW, &s);
    assert_int_equal(s->int8->n_qconv, 1);
    size_t n_diff = 0;
    for (size_t i = 0; i < M * HW * HW; i++) {
        float d = fabsf(y_on[i] - y_off[i]);
        if (d > 1.001f / 127)
            fail_msg("element %zu: int8 %g, oracle %g", i, (double)y_on[i], (double)y_off[i]);
        n_diff += d > 0;
    }
    assert_true(n_diff < M * HW * HW / 20);
    qp_session_free(s);
    qp_model_free(m);
}

/* A scalar float constant `name`. */
static void scalar(struct qp_model *m, const char *name, float v) {
    graph_add_init(m, m->graph, name, QP_DTYPE_FLOAT, 0, NULL, &v, sizeof v);
}

/* x -> QDQ -> Conv -> Mul(a) -> Add(b) -> x' * Clip(x' + 3, 0, 6) / 6 -> Mul(c) -> Add(d) -> QDQ:
 * PaddleOCR's block (LearnableAffineBlock, the hard-swish as it exports it, another affine) as
 * the trt policy places it, no Q/DQ inside. */
static struct qp_model *paddle_block_model(float ys) {
    struct qp_model *m = model_with_x(4, x_dims);
    rt_qdq(m, "x", "xd", 0.02f, 0);
    conv_weights(m, "w", 0);
    conv(m, "conv", "xd", "wf", "w_b", "a");
    static const struct {
        const char *name, *op, *in, *k, *out;
        float v;
    } chain[] = {
        {"aff_mul", "Mul", "a", "k_a", "am", 1.7f},   {"aff_add", "Add", "am", "k_b", "h", -0.4f},
        {"hs_add", "Add", "h", "k_3", "h3", 3.0f},    {"hs_clip", "Clip", "h3", "k_0", "hc", 0.0f},
        {"hs_mul", "Mul", "h", "hc", "hm", 0.0f},     {"hs_div", "Div", "hm", "k_6", "hs", 6.0f},
        {"post_mul", "Mul", "hs", "k_c", "pm", 0.8f}, {"post_add", "Add", "pm", "k_d", "p", 0.05f}};
    scalar(m, "k_6c", 6.0f);
    for (size_t i = 0; i < sizeof chain / sizeof chain[0]; i++) {
        const char *k = chain[i].k;
        if (strcmp(k, "hc") != 0) scalar(m, k, chain[i].v);
        const char *in2[3] = {chain[i].in, k, "k_6c"};
        if (strcmp(chain[i].name, "post_mul") == 0) in2[0] = k, in2[1] = chain[i].in;
        rt_node(m, chain[i].name, chain[i].op, strcmp(chain[i].op, "Clip") == 0 ? 3 : 2, in2,
                chain[i].out);
    }
    rt_qdq(m, "p", "y", ys, 0);
    finish(m, "y");
    return m;
}

/* The whole block is one QConv with an int8 output (oneDNN's hardswish and linear post-ops, the
 * requantization a last linear post-op on VNNI), within one step of the oracle on every path:
 * the requantizing post-op, the float epilogue (QP_INT8_TAIL=0), the AVX2 kernels and plain C. */
static void test_paddle_block(void **state) {
    (void)state;
    static const char *const envs[][2] = {
        {NULL, NULL}, {"QP_INT8_TAIL", "0"}, {"QP_INT8_VNNI", "0"}, {"QP_INT8_REF", "1"}};
    const float ys = 0.04f;
    for (size_t e = 0; e < sizeof envs / sizeof envs[0]; e++) {
        if (envs[e][0]) setenv(envs[e][0], envs[e][1], 1);
        rt_rng = 29;
        struct qp_model *m = paddle_block_model(ys);
        fill_x(2.0f);
        run(m, QP_INT8_OFF, xin, y_off, M * HW * HW, NULL);
        struct qp_session *s;
        run(m, QP_INT8_AUTO, xin, y_on, M * HW * HW, &s);
        assert_int_equal(s->int8->n_qconv, 1);
        const char *into = find(s, "y_Q")->into;
        assert_non_null(strstr(into, "QConv 'conv' (10 nodes"));
        assert_non_null(strstr(into, "int8 output"));
        size_t n_diff = 0, nz = 0;
        for (size_t i = 0; i < M * HW * HW; i++) {
            float d = fabsf(y_on[i] - y_off[i]);
            if (d > ys * 1.001f)
                fail_msg("%s: element %zu: int8 %g, oracle %g", envs[e][0] ? envs[e][0] : "auto", i,
                         (double)y_on[i], (double)y_off[i]);
            n_diff += d > 0;
            nz += y_off[i] != y_off[0];
        }
        assert_true(n_diff < M * HW * HW / 20);
        assert_true(nz > M * HW * HW / 2); /* the outputs vary: not all clipped */
        qp_session_free(s);
        qp_model_free(m);
        if (envs[e][0]) unsetenv(envs[e][0]);
    }
}

/* Conv -> BatchNormalization (some channels with a negative scale) -> Relu -> Q, as PaddleOCR
 * exports its blocks: the BatchNormalization folds into the QConv's scales and bias. */
static void test_conv_bn(void **state) {
    (void)state;
    rt_rng = 17;
    struct qp_model *m = model_with_x(4, x_dims);
    rt_qdq(m, "x", "xd", 0.02f, 0);
    conv_weights(m, "w", 0);
    conv(m, "conv", "xd", "wf", "w_b", "a");
    int64_t md[1] = {M};
    float ga[M], be[M], mu[M], va[M];
    for (int i = 0; i < M; i++) {
        ga[i] = (i % 5 == 0 ? -1.0f : 1.0f) * (0.5f + 0.05f * i);
        be[i] = 0.1f * rt_frand();
        mu[i] = 0.2f * rt_frand();
        va[i] = 0.5f + 0.03f * i;
    }
    graph_add_init(m, m->graph, "bn_g", QP_DTYPE_FLOAT, 1, md, ga, sizeof ga);
    graph_add_init(m, m->graph, "bn_b", QP_DTYPE_FLOAT, 1, md, be, sizeof be);
    graph_add_init(m, m->graph, "bn_m", QP_DTYPE_FLOAT, 1, md, mu, sizeof mu);
    graph_add_init(m, m->graph, "bn_v", QP_DTYPE_FLOAT, 1, md, va, sizeof va);
    const char *bn[5] = {"a", "bn_g", "bn_b", "bn_m", "bn_v"};
    rt_node(m, "bn", "BatchNormalization", 5, bn, "n");
    const char *r[1] = {"n"};
    rt_node(m, "relu", "Relu", 1, r, "nr");
    rt_qdq(m, "nr", "y", 0.03f, 0);
    finish(m, "y");
    fill_x(2.0f);
    run(m, QP_INT8_OFF, xin, y_off, M * HW * HW, NULL);
    struct qp_session *s;
    run(m, QP_INT8_AUTO, xin, y_on, M * HW * HW, &s);
    assert_non_null(strstr(find(s, "y_Q")->into, "BatchNormalization folded"));
    size_t nz = 0;
    for (size_t i = 0; i < M * HW * HW; i++) {
        if (fabsf(y_on[i] - y_off[i]) > 0.03f * 1.001f)
            fail_msg("element %zu: int8 %g, oracle %g", i, (double)y_on[i], (double)y_off[i]);
        nz += y_off[i] != 0;
    }
    assert_true(nz > M * HW * HW / 4);
    qp_session_free(s);
    qp_model_free(m);
}

/* MatMul weights `name` [K, N] as DQ(Q(W)) per column (axis 1) and a bias [N]. */
#define MK 32
#define MN 24
static void matmul_weights(struct qp_model *m, const char *name, const char *out) {
    int64_t wd[2] = {MK, MN};
    static float w[MK * MN], sc[MN], b[MN];
    for (int n = 0; n < MN; n++) {
        sc[n] = 0.004f + 0.0003f * n;
        b[n] = 0.2f * rt_frand();
    }
    for (int i = 0; i < MK * MN; i++)
        w[i] = (float)(int)(127 * rt_frand()) * sc[i % MN];
    weight_qdq(m, name, out, 2, wd, w, MN, sc, MN, b, 1);
}

static void run_dims(struct qp_model *m, int int8, int rank, const int64_t *d, const float *x,
                     size_t nx, float *y, size_t ny, struct qp_session **keep) {
    struct qp_error err = {0};
    struct qp_session_options o = {.n_threads = 2, .int8 = int8};
    struct qp_session *s = NULL;
    assert_int_equal(qp_session_create(m, &o, 0, NULL, &s, &err), QP_OK);
    struct qp_array in, out;
    assert_int_equal(qp_array_view(&in, QP_DTYPE_FLOAT, rank, d, (void *)x, nx * 4, &err), QP_OK);
    assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
    assert_int_equal(qp_session_output(s, 0, &out, &err), QP_OK);
    assert_int_equal(out.nbytes, ny * sizeof *y);
    memcpy(y, out.data, out.nbytes);
    if (keep)
        *keep = s;
    else
        qp_session_free(s);
}

/* A transformer's projection: DQ(x) @ DQ(W) + b, plus a residual that is another projection's
 * int8 output, Relu, Q: two QMatMul nodes, within one step of the oracle. */
static void test_matmul_projection(void **state) {
    (void)state;
    static struct qp_dim d3[3] = {{2, NULL}, {6, NULL}, {MK, NULL}};
    rt_rng = 11;
    struct qp_model *m = test_model_create(&rt_test_opset19);
    test_model_add_input(m, "x", QP_DTYPE_FLOAT, 3, d3);
    rt_qdq(m, "x", "xd", 0.01f, 0);
    matmul_weights(m, "w", "wf");
    matmul_weights(m, "v", "vf");
    const char *mm1[2] = {"xd", "wf"}, *mm2[2] = {"xd", "vf"};
    rt_node(m, "mm_a", "MatMul", 2, mm1, "a0");
    const char *ab[2] = {"a0", "w_b"};
    rt_node(m, "bias_a", "Add", 2, ab, "a");
    rt_node(m, "mm_b", "MatMul", 2, mm2, "b0");
    rt_qdq(m, "b0", "bd", 0.02f, 0);
    const char *add[2] = {"bd", "a"};
    rt_node(m, "add", "Add", 2, add, "s");
    const char *rl[1] = {"s"};
    rt_node(m, "relu", "Relu", 1, rl, "sr");
    rt_qdq(m, "sr", "y", 0.02f, 0);
    finish(m, "y");
    static float x[2 * 6 * MK], a[2 * 6 * MN], b[2 * 6 * MN];
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
        x[i] = rt_frand();
    int64_t d[3] = {2, 6, MK};
    run_dims(m, QP_INT8_OFF, 3, d, x, 2 * 6 * MK, b, 2 * 6 * MN, NULL);
    struct qp_session *s;
    run_dims(m, QP_INT8_AUTO, 3, d, x, 2 * 6 * MK, a, 2 * 6 * MN, &s);
    assert_int_equal(s->int8->n_qmatmul, 2);
    assert_non_null(strstr(find(s, "y_Q")->into, "QMatMul 'mm_a' (5 nodes, residual add"));
    assert_non_null(strstr(find(s, "bd_Q")->into, "QMatMul 'mm_b'"));
    size_t nz = 0;
    for (size_t i = 0; i < 2 * 6 * MN; i++) {
        assert_true(fabsf(a[i] - b[i]) <= 0.02f * 1.001f);
        nz += b[i] != 0;
    }
    assert_true(nz > 2 * 6 * MN / 4);
    qp_session_free(s);
    qp_model_free(m);
}

/* DQ(x) @ DQ(W) + b -> GELU -> QDQ(0.02), the GELU as `form` writes it: 0 PyTorch's export
 * (Div by sqrt 2, Erf, Add 1, Mul by the input, Mul 0.5), 1 Hugging Face's (Mul by 1/sqrt 2,
 * the input times 0.5 first), 2 the Gelu op (opset 20), 3 Gelu approximate "tanh", 4 form 0
 * dividing by 1.5 (not a GELU). */
static struct qp_model *gelu_model(int form) {
    static struct qp_opset opset20 = {"", 20};
    static struct qp_dim d3[3] = {{2, NULL}, {6, NULL}, {MK, NULL}};
    struct qp_model *m = test_model_create(form >= 2 && form <= 3 ? &opset20 : &rt_test_opset19);
    test_model_add_input(m, "x", QP_DTYPE_FLOAT, 3, d3);
    rt_qdq(m, "x", "xd", 0.01f, 0);
    matmul_weights(m, "w", "wf");
    const char *mm[2] = {"xd", "wf"}, *ab[2] = {"a0", "w_b"};
    rt_node(m, "mm", "MatMul", 2, mm, "a0");
    rt_node(m, "bias", "Add", 2, ab, "a");
    if (form == 2 || form == 3) {
        const char *g[1] = {"a"};
        rt_node(m, "gelu", "Gelu", 1, g, "y0");
        if (form == 3) {
            struct qp_attr *at = qp_node_add_attr(m->graph, qp_graph_find_node(m->graph, "gelu"),
                                                  "approximate", QP_ATTR_STRING);
            assert_non_null(at);
            at->s = (struct qp_bytes){(const uint8_t *)"tanh", 4};
        }
    } else {
        scalar(m, "k_s", form == 1 ? 0.70710678f : form == 4 ? 1.5f : 1.41421356f);
        scalar(m, "k_1", 1.0f);
        scalar(m, "k_h", 0.5f);
        const char *sc[2] = {"a", "k_s"}, *er[1] = {"u"}, *ad[2] = {"e", "k_1"};
        rt_node(m, "scale", form == 1 ? "Mul" : "Div", 2, sc, "u");
        rt_node(m, "erf", "Erf", 1, er, "e");
        rt_node(m, "one", "Add", 2, ad, "t");
        if (form == 1) {
            const char *h[2] = {"k_h", "a"}, *p[2] = {"t", "h"};
            rt_node(m, "half", "Mul", 2, h, "h");
            rt_node(m, "prod", "Mul", 2, p, "y0");
        } else {
            const char *p[2] = {"a", "t"}, *h[2] = {"p", "k_h"};
            rt_node(m, "prod", "Mul", 2, p, "p");
            rt_node(m, "half", "Mul", 2, h, "y0");
        }
    }
    rt_qdq(m, "y0", "y", 0.02f, 0);
    finish(m, "y");
    return m;
}

/* A GELU after a MatMul and its bias, in each form exporters write, joins the QMatMul as
 * oneDNN's gelu post-operation (the AVX2 kernels and plain C compute it as vecmath and erff do)
 * and the Q after it too: every value within one step of the oracle on every path. Dividing by
 * 1.5 is no GELU: the MatMul keeps a float output and the rest runs on its own. */
static void test_matmul_gelu(void **state) {
    (void)state;
    static const char *const envs[][2] = {
        {NULL, NULL}, {"QP_INT8_TAIL", "0"}, {"QP_INT8_VNNI", "0"}, {"QP_INT8_REF", "1"}};
    static float x[2 * 6 * MK], a[2 * 6 * MN], b[2 * 6 * MN];
    static const char *const into[] = {
        "QMatMul 'mm' (8 nodes, int8 output)", "QMatMul 'mm' (8 nodes, int8 output)",
        "QMatMul 'mm' (4 nodes, int8 output)", "QMatMul 'mm' (4 nodes, int8 output)", NULL};
    int64_t d[3] = {2, 6, MK};
    for (int form = 0; form < 5; form++)
        for (size_t e = 0; e < sizeof envs / sizeof envs[0]; e++) {
            if (envs[e][0]) setenv(envs[e][0], envs[e][1], 1);
            rt_rng = 13;
            struct qp_model *m = gelu_model(form);
            for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
                x[i] = rt_frand();
            run_dims(m, QP_INT8_OFF, 3, d, x, 2 * 6 * MK, b, 2 * 6 * MN, NULL);
            struct qp_session *s;
            run_dims(m, QP_INT8_AUTO, 3, d, x, 2 * 6 * MK, a, 2 * 6 * MN, &s);
            const struct qp_int8_decision *q = find(s, "y_Q");
            if (into[form]) {
                if (!strstr(q->into, into[form]))
                    fail_msg("form %d, %s: y_Q fused into '%s'", form,
                             envs[e][0] ? envs[e][0] : "-", q->into);
            } else {
                assert_null(strstr(q->into, "QMatMul"));
                assert_non_null(
                    strstr(find(s, "xd_DQ")->into, "QMatMul 'mm' (2 nodes, float output)"));
            }
            size_t nz = 0, neg = 0;
            for (size_t i = 0; i < 2 * 6 * MN; i++) {
                if (!(fabsf(a[i] - b[i]) <= 0.02f * 1.001f))
                    fail_msg("form %d, %s: element %zu: %g, oracle %g", form,
                             envs[e][0] ? envs[e][0] : "-", i, (double)a[i], (double)b[i]);
                nz += b[i] != 0;
                neg += b[i] < 0;
            }
            assert_true(nz > 2 * 6 * MN / 2);
            assert_true(neg > 2 * 6 * MN / 8); /* GELU's negative lobe is exercised */
            qp_session_free(s);
            qp_model_free(m);
            if (envs[e][0]) unsetenv(envs[e][0]);
        }
}

static int count_steps(const struct qp_session *s, const char *op);

/* A ResNet's head: [x -> QDQ -> Conv -> Relu] (conv 1) or x itself -> QDQ(zero point) ->
 * GlobalAveragePool -> QDQ -> y [1, ch, 1, 1]; uint8 parameters (u8) or int8; x is
 * [1, C, hw, hw], hw HW or 128. */
static struct qp_model *gap_model(int conv_first, int u8, int64_t hw) {
    static struct qp_dim big_dims[4] = {{1, NULL}, {C, NULL}, {128, NULL}, {128, NULL}};
    struct qp_model *m = model_with_x(4, hw == 128 ? big_dims : x_dims);
    const char *src = "x";
    if (conv_first) {
        rt_qdq(m, "x", "xd", 0.02f, 0);
        conv_weights(m, "w", 0);
        conv(m, "conv", "xd", "wf", "w_b", "a");
        const char *r[1] = {"a"};
        rt_node(m, "relu", "Relu", 1, r, "ar");
        src = "ar";
    }
    const uint8_t za = 9, zy = 20;
    if (u8)
        rt_qdq_dt(m, src, "ad", 0.013f, QP_DTYPE_UINT8, &za);
    else
        rt_qdq(m, src, "ad", 0.013f, 3);
    const char *g[1] = {"ad"};
    rt_node(m, "gap", "GlobalAveragePool", 1, g, "p");
    if (u8)
        rt_qdq_dt(m, "p", "y", 0.008f, QP_DTYPE_UINT8, &zy);
    else
        rt_qdq(m, "p", "y", 0.008f, -7);
    finish(m, "y");
    return m;
}

/* DQ -> GlobalAveragePool -> Q runs as one QGlobalAveragePool (integer sums, requantized):
 * channels last after a QConv (which then writes channels last), planar on a graph input's Q,
 * int8 and uint8, one thread and several (a 131072-element input); every value within one step
 * of the oracle, most of them equal. Not where the pooled tensor has another reader. */
static void test_global_avgpool_int8(void **state) {
    (void)state;
    static float big[C * 128 * 128], ya[M], yb[M];
    for (int conv_first = 1; conv_first >= 0; conv_first--)
        for (int u8 = 0; u8 < 2; u8++)
            for (int hw = HW; hw <= (conv_first ? HW : 128); hw += 128 - HW) {
                rt_rng = 5;
                struct qp_model *m = gap_model(conv_first, u8, hw);
                float *x = hw == HW ? xin : big;
                size_t nx = (size_t)(C * hw * hw), ny = conv_first ? M : C;
                for (size_t i = 0; i < nx; i++) /* channel-dependent means, both signs */
                    x[i] = 0.9f * rt_frand() + 0.05f * (float)(i / (size_t)(hw * hw) % 7) - 0.1f;
                run_hw(m, QP_INT8_OFF, hw, x, yb, ny, NULL);
                struct qp_session *s;
                run_hw(m, QP_INT8_AUTO, hw, x, ya, ny, &s);
                assert_int_equal(count_steps(s, "QGlobalAveragePool"), 1);
                assert_int_equal(count_steps(s, "GlobalAveragePool"), 0);
                assert_non_null(strstr(find(s, "ad_DQ")->into, "GlobalAveragePool 'gap'"));
                assert_non_null(strstr(find(s, "y_Q")->into, "GlobalAveragePool 'gap'"));
                int gap = qp_graph_find_node(s->g, "gap");
                assert_true(gap >= 0);
                assert_int_equal(qp_kattr_int(&s->g->nodes[gap], "nhwc", 0), conv_first);
                size_t same = 0, distinct = 0;
                for (size_t i = 0; i < ny; i++) {
                    if (!(fabsf(ya[i] - yb[i]) <= 0.008f * 1.001f))
                        fail_msg("conv %d u8 %d hw %d: channel %zu: %g, oracle %g", conv_first, u8,
                                 hw, i, (double)ya[i], (double)yb[i]);
                    same += ya[i] == yb[i];
                    distinct += i && yb[i] != yb[i - 1];
                }
                assert_true(same >= ny - 1);
                if (distinct <= ny / 2)
                    fail_msg("conv %d u8 %d hw %d: %zu distinct of %zu: %g %g %g", conv_first, u8,
                             hw, distinct, ny, (double)yb[0], (double)yb[1], (double)yb[2]);
                qp_session_free(s);
                qp_model_free(m);
            }
    /* The pooled tensor read elsewhere too (an SE block's gate product): the pool stays float. */
    rt_rng = 5;
    struct qp_model *m = gap_model(1, 0, HW);
    const char *mul[2] = {"ad", "ad"};
    rt_node(m, "gate", "Mul", 2, mul, "g");
    finish(m, "g");
    struct qp_session *s;
    run_hw(m, QP_INT8_AUTO, HW, xin, ya, M, &s);
    assert_int_equal(count_steps(s, "QGlobalAveragePool"), 0);
    qp_session_free(s);
    qp_model_free(m);
}

/* The paths of a session's QMatMul steps, in plan order, into paths[] (at most n); the count. */
static int qmatmul_paths(const struct qp_session *s, enum qp_int8_path *paths, int n) {
    int k = 0;
    for (size_t i = 0; s->last && i < s->last->n_steps; i++) {
        const struct rt_step *st = &s->last->steps[i];
        if (st->kind == RT_STEP_OVERLAY || !st->k || strcmp(st->k->op, "QMatMul") != 0) continue;
        if (k < n) paths[k] = qp_int8_matmul_path(st->state);
        k++;
    }
    return k;
}

/* MatMul weights [kk, nn] over the whole int8 range, per column scales, into `out`; bias. */
static void matmul_weights_kn(struct qp_model *m, const char *name, const char *out, int64_t kk,
                              int64_t nn) {
    int64_t wd[2] = {kk, nn};
    float *w = model_alloc(m, sizeof(float) * (size_t)(kk * nn));
    float *sc = model_alloc(m, sizeof(float) * (size_t)nn), *b = model_alloc(m, 4 * (size_t)nn);
    for (int64_t n = 0; n < nn; n++) {
        sc[n] = 0.004f + 0.0003f * (float)n;
        b[n] = 0.2f * rt_frand();
    }
    for (int64_t i = 0; i < kk * nn; i++)
        w[i] = (float)((i * 37 + i / nn * 11) % 255 - 127) * sc[i % nn];
    weight_qdq(m, name, out, 2, wd, w, nn, sc, nn, b, 1);
}

/* DQ(x) @ DQ(W) + b + DQ(x @ V) residual, Relu, Q (two QMatMul nodes) with k = kk: the AVX2
 * kernels give the reference path's bytes, a's rows padded in scratch when kk is not a
 * multiple of 4. */
static void check_matmul_avx2(int64_t kk) {
    struct qp_dim d3[3] = {{2, NULL}, {6, NULL}, {kk, NULL}};
    struct qp_model *m = test_model_create(&rt_test_opset19);
    test_model_add_input(m, "x", QP_DTYPE_FLOAT, 3, d3);
    rt_qdq(m, "x", "xd", 0.01f, 0);
    matmul_weights_kn(m, "w", "wf", kk, 40);
    matmul_weights_kn(m, "v", "vf", kk, 40);
    const char *mm1[2] = {"xd", "wf"}, *mm2[2] = {"xd", "vf"}, *ab[2] = {"a0", "w_b"};
    rt_node(m, "mm_a", "MatMul", 2, mm1, "a0");
    rt_node(m, "bias_a", "Add", 2, ab, "a");
    rt_node(m, "mm_b", "MatMul", 2, mm2, "b0");
    rt_qdq(m, "b0", "bd", 0.02f, 0);
    const char *add[2] = {"bd", "a"}, *rl[1] = {"s"};
    rt_node(m, "add", "Add", 2, add, "s");
    rt_node(m, "relu", "Relu", 1, rl, "sr");
    rt_qdq(m, "sr", "y", 0.02f, 0);
    finish(m, "y");
    static float x[2 * 6 * 64], ya[2 * 6 * 40], yr[2 * 6 * 40];
    for (int64_t i = 0; i < 2 * 6 * kk; i++)
        x[i] = 1.3f * rt_frand(); /* up to +-127 after Q */
    int64_t d[3] = {2, 6, kk};
    struct qp_session *s;
    enum qp_int8_path paths[3];
    setenv("QP_INT8_REF", "1", 1);
    run_dims(m, QP_INT8_AUTO, 3, d, x, (size_t)(2 * 6 * kk), yr, 2 * 6 * 40, &s);
    assert_int_equal(qmatmul_paths(s, paths, 3), 2);
    assert_int_equal(paths[0], QP_INT8_PATH_REF);
    qp_session_free(s);
    unsetenv("QP_INT8_REF");
    run_dims(m, QP_INT8_AUTO, 3, d, x, (size_t)(2 * 6 * kk), ya, 2 * 6 * 40, &s);
    assert_int_equal(qmatmul_paths(s, paths, 3), 2);
    assert_int_equal(paths[0], QP_INT8_PATH_AVX2);
    assert_int_equal(paths[1], QP_INT8_PATH_AVX2);
    qp_session_free(s);
    size_t nz = 0;
    for (size_t i = 0; i < 2 * 6 * 40; i++) {
        if (ya[i] != yr[i])
            fail_msg("k %lld: element %zu: AVX2 %g, reference %g", (long long)kk, i, (double)ya[i],
                     (double)yr[i]);
        nz += ya[i] != 0;
    }
    assert_true(nz > 2 * 6 * 40 / 4);
    qp_model_free(m);
}

static void test_exact_avx2_matmul(void **state) {
    (void)state;
    if (getenv("QP_NO_DNNL") || qp_kernel_isa() < QP_ISA_AVX2) skip();
    setenv("QP_INT8_VNNI", "0", 1);
    rt_rng = 41;
    check_matmul_avx2(32);
    check_matmul_avx2(37);
    unsetenv("QP_INT8_VNNI");
}

/* x [2, 6, 8] -> QDQ -> q; Transpose -> QDQ -> k^T; MatMul(q, k^T) -> "p" (not finished). */
static struct qp_model *scores_model(void) {
    static struct qp_dim d3[3] = {{2, NULL}, {6, NULL}, {8, NULL}};
    struct qp_model *m = test_model_create(&rt_test_opset19);
    test_model_add_input(m, "x", QP_DTYPE_FLOAT, 3, d3);
    rt_qdq(m, "x", "xd", 0.01f, 0);
    const char *t[1] = {"x"};
    rt_node(m, "tr", "Transpose", 1, t, "xt");
    struct qp_attr *pa =
        qp_node_add_attr(m->graph, qp_graph_find_node(m->graph, "tr"), "perm", QP_ATTR_INTS);
    static const int64_t perm[3] = {0, 2, 1};
    pa->ints = perm;
    pa->n = 3;
    rt_qdq(m, "xt", "kd", 0.01f, 0);
    const char *mm[2] = {"xd", "kd"};
    rt_node(m, "mm", "MatMul", 2, mm, "p");
    return m;
}

/* Runs a scores_model graph on random x (seed `rng`) with the oracle into off[72] and the
 * integer path into on[72]; the integer session, which holds one QMatMul. */
static struct qp_session *run_scores(struct qp_model *m, uint32_t rng, float *off, float *on) {
    static float x[2 * 6 * 8];
    rt_rng = rng;
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
        x[i] = rt_frand();
    int64_t d[3] = {2, 6, 8};
    run_dims(m, QP_INT8_OFF, 3, d, x, 96, off, 72, NULL);
    struct qp_session *s;
    run_dims(m, QP_INT8_AUTO, 3, d, x, 96, on, 72, &s);
    assert_int_equal(s->int8->n_qmatmul, 1);
    return s;
}

/* Attention's product of two computed tensors: DQ(q) @ DQ(k^T), int8 x int8 per tensor. */
static void test_matmul_two_activations(void **state) {
    (void)state;
    struct qp_model *m = scores_model();
    rt_qdq(m, "p", "y", 0.002f, 0);
    finish(m, "y");
    float a[72], b[72];
    struct qp_session *s = run_scores(m, 13, b, a);
    for (size_t i = 0; i < 72; i++)
        assert_true(fabsf(a[i] - b[i]) <= 0.002f * 1.001f);
    qp_session_free(s);
    qp_model_free(m);
}

/* Attention's scores as exporters write them: DQ(q) @ DQ(k^T), then Div by
 * Sqrt(Cast(Gather(Shape(q), -1))). The divisor is fixed by q's static dims, so the Div joins the
 * QMatMul as a linear post-op (MatMul, Div and Q: 3 nodes); within one step of the oracle. With
 * `int_div`, the dim is first divided by 3 in int64 (8 / 3 = 2, as ONNX's integer Div truncates:
 * a float quotient would give another scale and fail the comparison). */
/* A tensor whose shape the graph fixes only through its producers (no declared dims): x
 * [2, 6, 8] -> Reshape [2, 0, 2, 4] -> Transpose (2, 0, 1, 3) -> Gather index 1 on axis 0 ->
 * "xs" [2, 6, 4], as a ViT's q is sliced from its projection. */
static void traced_tensor(struct qp_model *m) {
    static const int64_t shape[4] = {2, 0, 2, 4}, four = 4, one = 1;
    graph_add_init(m, m->graph, "rs_shape", QP_DTYPE_INT64, 1, &four, shape, sizeof shape);
    graph_add_init(m, m->graph, "one", QP_DTYPE_INT64, 0, NULL, &one, sizeof one);
    const char *ri[2] = {"x", "rs_shape"}, *ti[1] = {"xr"}, *gi[2] = {"xtr", "one"};
    rt_node(m, "rs", "Reshape", 2, ri, "xr");
    rt_node(m, "tr4", "Transpose", 1, ti, "xtr");
    struct qp_attr *pa =
        qp_node_add_attr(m->graph, qp_graph_find_node(m->graph, "tr4"), "perm", QP_ATTR_INTS);
    static const int64_t perm[4] = {2, 0, 1, 3};
    pa->ints = perm;
    pa->n = 4;
    rt_node(m, "slice", "Gather", 2, gi, "xs");
}

/* QMatMul -> Div by sqrt(a dim of Shape(t)) (divided by 3 first with int_div): the Div joins the
 * QMatMul as a linear post-operation; t is x (declared dims) or, with `traced`, traced_tensor's
 * "xs" (dims traced through Reshape, Transpose and Gather: int8_graph.c, traced_dim). */
static void check_shape_scale(int int_div, int traced) {
    struct qp_model *m = scores_model();
    if (traced) traced_tensor(m);
    const char *t[1] = {traced ? "xs" : "x"};
    rt_node(m, "shape", "Shape", 1, t, "sh");
    int64_t last = -1, three = 3;
    graph_add_init(m, m->graph, "last", QP_DTYPE_INT64, 0, NULL, &last, sizeof last);
    graph_add_init(m, m->graph, "three", QP_DTYPE_INT64, 0, NULL, &three, sizeof three);
    const char *gi[2] = {"sh", "last"}, *qi[2] = {"d", "three"};
    rt_node(m, "dim", "Gather", 2, gi, "d");
    if (int_div) rt_node(m, "idiv", "Div", 2, qi, "d3");
    const char *ci[1] = {int_div ? "d3" : "d"};
    rt_node(m, "cast", "Cast", 1, ci, "df");
    int_attr(m, "cast", "to", QP_DTYPE_FLOAT);
    const char *si[1] = {"df"};
    rt_node(m, "sqrt", "Sqrt", 1, si, "sd");
    const char *di[2] = {"p", "sd"};
    rt_node(m, "div", "Div", 2, di, "ps");
    rt_qdq(m, "ps", "y", 0.001f, 0);
    finish(m, "y");
    float a[72], b[72];
    struct qp_session *s = run_scores(m, 17, b, a);
    assert_non_null(strstr(find(s, "xd_DQ")->into, "QMatMul 'mm' (3 nodes"));
    size_t nz = 0;
    for (size_t i = 0; i < 72; i++) {
        if (fabsf(a[i] - b[i]) > 0.001f * 1.001f)
            fail_msg("int_div %d: element %zu: int8 %g, oracle %g", int_div, i, (double)a[i],
                     (double)b[i]);
        nz += b[i] != 0;
    }
    assert_true(nz > 36);
    qp_session_free(s);
    qp_model_free(m);
}

static void test_matmul_shape_scale(void **state) {
    (void)state;
    check_shape_scale(0, 0);
    check_shape_scale(1, 0);
    check_shape_scale(0, 1);
    check_shape_scale(1, 1);
}

/* Weights over the whole int8 range and activations near +-127: on AVX2 without VNNI u8 x s8
 * pair sums would saturate int16. Scales are powers of two and sums below 2^24, so the float
 * oracle is exact and every path must give the very same bytes. */
static void check_exact(const char *vnni) {
    setenv("QP_INT8_VNNI", vnni, 1);
    rt_rng = 3;
    struct qp_model *m = residual_model(1, 0.0078125f, 0.5f);
    fill_x(0.99f);
    run(m, QP_INT8_OFF, xin, y_off, M * HW * HW, NULL);
    struct qp_session *s;
    run(m, QP_INT8_AUTO, xin, y_on, M * HW * HW, &s);
    assert_int_equal(s->int8->n_qconv, 2);
    for (size_t i = 0; i < M * HW * HW; i++)
        if (y_on[i] != y_off[i])
            fail_msg("element %zu: int8 %g, oracle %g (QP_INT8_VNNI=%s)", i, (double)y_on[i],
                     (double)y_off[i], vnni);
    size_t nonzero = 0, large = 0;
    for (size_t i = 0; i < M * HW * HW; i++) {
        nonzero += y_on[i] != 0;
        large += y_on[i] >= 4.0f;
    }
    assert_true(nonzero > M * HW * HW / 4);
    assert_true(large > 0);
    qp_session_free(s);
    qp_model_free(m);
    unsetenv("QP_INT8_VNNI");
}

static void test_exact_vnni_path(void **state) {
    (void)state;
    if (!qp_int8_cpu_has_vnni()) skip(); /* forcing it on AVX2 would show the saturation */
    check_exact("1");
}

static void test_exact_float_path(void **state) {
    (void)state;
    setenv("QP_INT8_AVX2", "0", 1); /* oneDNN float, not the AVX2 kernels */
    check_exact("0");
    unsetenv("QP_INT8_AVX2");
}

/* The paths of a session's QConv steps, in plan order, into paths[] (at most n); the count. */
static int qconv_paths(const struct qp_session *s, enum qp_int8_path *paths, int n) {
    int k = 0;
    for (size_t i = 0; s->last && i < s->last->n_steps; i++) {
        const struct rt_step *st = &s->last->steps[i];
        if (st->kind == RT_STEP_OVERLAY || !st->k || strcmp(st->k->op, "QConv") != 0) continue;
        if (k < n) paths[k] = qp_int8_conv_path(st->state);
        k++;
    }
    return k;
}

/* Conv weights [M, cin, k, k] as DQ(Q(W)) per output channel into `out`: integers over the
 * whole int8 range (|q| up to 127) times a power-of-two scale per channel, a power-of-two bias. */
static void conv_weights_k(struct qp_model *m, const char *name, const char *out, int64_t cin,
                           int64_t k) {
    int64_t wd[4] = {M, cin, k, k};
    float *w = model_alloc(m, sizeof(float) * (size_t)(M * cin * k * k));
    float *sc = model_alloc(m, sizeof(float) * M), *b = model_alloc(m, sizeof(float) * M);
    for (int oc = 0; oc < M; oc++) {
        sc[oc] = ldexpf(1.0f, -6 - oc % 3);
        b[oc] = ldexpf((float)(oc - 8), -4);
        for (int64_t i = 0; i < cin * k * k; i++) {
            int q = (int)((oc * 53 + i * 29 + oc * i) % 255) - 127;
            w[oc * cin * k * k + i] = (float)q * sc[oc];
        }
    }
    weight_qdq(m, name, out, 4, wd, w, M, sc, M, b, 0);
}

static void ints_attr(struct qp_model *m, const char *node_name, const char *name, const int64_t *v,
                      int n) {
    struct qp_attr *a =
        qp_node_add_attr(m->graph, qp_graph_find_node(m->graph, node_name), name, QP_ATTR_INTS);
    assert_non_null(a);
    a->ints = v;
    a->n = n;
}

/* x -> QDQ -> c1 (3x3, pad 1, `stride1`; C -> M) -> Relu -> QDQ (a) -> c2 (k2 x k2 of `group`
 * groups; 3x3: pad 1) -> Relu -> QDQ (b) -> c3 (1x1, reading b, or a itself with own) -> Add(a)
 * -> Relu = "sr", exact with power-of-two scales; the caller ends the graph. */
static void chain_core(struct qp_model *m, int64_t stride1, int64_t group, int64_t k2, int own) {
    static const int64_t pads[4] = {1, 1, 1, 1}, s2[2] = {2, 2};
    rt_qdq(m, "x", "xd", 0.0078125f, 0);
    conv_weights_k(m, "w1", "w1f", C, 3);
    conv_weights_k(m, "w2", "w2f", M / group, k2);
    conv_weights_k(m, "w3", "w3f", M, 1);
    const char *c1[3] = {"xd", "w1f", "w1_b"}, *c2[3] = {"ad", "w2f", "w2_b"},
               *c3[3] = {own ? "ad" : "bd", "w3f", "w3_b"};
    rt_node(m, "c1", "Conv", 3, c1, "a0");
    ints_attr(m, "c1", "pads", pads, 4);
    if (stride1 == 2) ints_attr(m, "c1", "strides", s2, 2);
    const char *r1[1] = {"a0"}, *r2[1] = {"b1"}, *r3[1] = {"s"};
    rt_node(m, "r1", "Relu", 1, r1, "a");
    rt_qdq(m, "a", "ad", 0.125f, 0);
    rt_node(m, "c2", "Conv", 3, c2, "b1");
    if (k2 == 3) {
        ints_attr(m, "c2", "pads", pads, 4);
        int_attr(m, "c2", "group", group);
    }
    rt_node(m, "r2", "Relu", 1, r2, "b0");
    rt_qdq(m, "b0", "bd", 0.25f, 0);
    rt_node(m, "c3", "Conv", 3, c3, "c");
    const char *add[2] = {"c", "ad"};
    rt_node(m, "add", "Add", 2, add, "s");
    rt_node(m, "r3", "Relu", 1, r3, "sr");
}

/* chain_core with c1 at stride 2 and c2 3x3 of `group` groups (M = group: depthwise), then QDQ
 * -> y: the AVX2 path's geometries (im2col GEMM, depthwise, 1x1 GEMM with an int8 residual, int8
 * output into NCHW). */
static struct qp_model *chain_model(int64_t group) {
    struct qp_model *m = model_with_x(4, x_dims);
    chain_core(m, 2, group, 3, 0);
    rt_qdq(m, "sr", "y", 0.5f, 0);
    finish(m, "y");
    return m;
}

#define HO 5 /* the chain's output size: stride 2 on HW */

/* The chain on the AVX2 kernels for the input in xin: the reference path's bytes (and the float
 * oracle's: every sum is exact). */
static void check_chain(struct qp_model *m, const char *what) {
    static float y_ref[M * HO * HO], y_avx[M * HO * HO], y_fq[M * HO * HO];
    struct qp_session *s;
    setenv("QP_INT8_REF", "1", 1);
    run(m, QP_INT8_AUTO, xin, y_ref, M * HO * HO, &s);
    enum qp_int8_path paths[4];
    assert_int_equal(qconv_paths(s, paths, 4), 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(paths[i], QP_INT8_PATH_REF);
    qp_session_free(s);
    unsetenv("QP_INT8_REF");
    run(m, QP_INT8_AUTO, xin, y_avx, M * HO * HO, &s);
    assert_int_equal(qconv_paths(s, paths, 4), 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(paths[i], QP_INT8_PATH_AVX2);
    qp_session_free(s);
    run(m, QP_INT8_OFF, xin, y_fq, M * HO * HO, NULL);
    size_t nonzero = 0, large = 0;
    for (size_t i = 0; i < M * HO * HO; i++) {
        if (y_avx[i] != y_ref[i] || y_avx[i] != y_fq[i])
            fail_msg("%s: element %zu: AVX2 %g, reference %g, float oracle %g", what, i,
                     (double)y_avx[i], (double)y_ref[i], (double)y_fq[i]);
        nonzero += y_avx[i] != 0;
        large += y_avx[i] >= 16.0f;
    }
    assert_true(nonzero > M * HO * HO / 4);
    assert_true(large > 0);
}

/* QConv steps whose output took over their int8 residual's bytes (the same address). */
static int qconv_in_place(const struct qp_session *s) {
    int k = 0;
    for (size_t i = 0; s->last && i < s->last->n_steps; i++) {
        const struct rt_step *st = &s->last->steps[i];
        if (st->kind == RT_STEP_OVERLAY || !st->k || !(st->k->flags & QP_KF_QCONV) ||
            st->n_in < 10 || !st->in[9])
            continue;
        k += st->out[0]->data == st->in[9]->data;
    }
    return k;
}

/* chain_core at stride 1 with a 1x1 c2 (c3 reading a itself with own: y = conv(a) + a), then
 * QDQ -> c4 (1x1) -> QDQ -> y: c3's int8 residual a comes from a QConv (channels last) and c3 is
 * its last reader, its output a QConv's channels-last source. */
static struct qp_model *in_place_model(int own) {
    struct qp_model *m = model_with_x(4, x_dims);
    chain_core(m, 1, 1, 1, own);
    rt_qdq(m, "sr", "sd", 0.5f, 0);
    conv_weights_k(m, "w4", "w4f", M, 1);
    const char *c4[3] = {"sd", "w4f", "w4_b"};
    rt_node(m, "c4", "Conv", 3, c4, "o");
    rt_qdq(m, "o", "y", 1.0f, 0);
    finish(m, "y");
    return m;
}

/* Where oneDNN's int8 convolution adds an int8 residual (VNNI), the output takes over the
 * residual's bytes when the convolution is its last reader (qp_int8_conv_sum_in_place): the
 * copy into the destination goes, the bits stay those of a plan without the take-over
 * (QP_SUM_IN_PLACE=0), on one thread and two; never when the residual is also the convolution's
 * source, nor on the AVX2 kernels (which read the residual where it is). */
static void test_qconv_sum_in_place(void **state) {
    (void)state;
    if (getenv("QP_NO_DNNL")) skip();
    int vnni = qp_int8_cpu_has_vnni();
    fill_x(1.0f);
    for (int own = 0; own < 2; own++) {
        struct qp_model *m = in_place_model(own);
        static float y_in[M * HW * HW], y_copy[M * HW * HW], y_one[M * HW * HW];
        struct qp_session *s;
        run(m, QP_INT8_AUTO, xin, y_in, M * HW * HW, &s);
        assert_int_equal(qconv_in_place(s), vnni && !own);
        struct qp_error err = {0};
        struct qp_array in, out;
        int64_t d[4] = {1, C, HW, HW};
        qp_session_set_threads(s, 1);
        assert_int_equal(qp_array_view(&in, QP_DTYPE_FLOAT, 4, d, xin, sizeof xin, &err), QP_OK);
        assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
        assert_int_equal(qp_session_output(s, 0, &out, &err), QP_OK);
        memcpy(y_one, out.data, out.nbytes);
        qp_session_free(s);
        setenv("QP_SUM_IN_PLACE", "0", 1);
        run(m, QP_INT8_AUTO, xin, y_copy, M * HW * HW, &s);
        unsetenv("QP_SUM_IN_PLACE");
        assert_int_equal(qconv_in_place(s), 0);
        qp_session_free(s);
        assert_memory_equal(y_in, y_copy, sizeof y_in);
        assert_memory_equal(y_in, y_one, sizeof y_in);
        size_t nonzero = 0;
        for (size_t i = 0; i < M * HW * HW; i++)
            nonzero += y_in[i] != 0;
        assert_true(nonzero > M * HW * HW / 4);
        qp_model_free(m);
    }
}

/* The AVX2 kernels with weights over the whole int8 range and activations up to +-127: the first
 * convolution's source has negative values (without -128 it takes the |w|, sign(w) x kernel, with
 * it the int16 one), the others are Relu outputs (the unsigned-byte kernel). */
static void test_exact_avx2_path(void **state) {
    (void)state;
    if (getenv("QP_NO_DNNL") || qp_kernel_isa() < QP_ISA_AVX2) skip();
    setenv("QP_INT8_VNNI", "0", 1);
    rt_rng = 21;
    struct qp_model *m = chain_model(M);
    fill_x(0.99f); /* x / x_scale within +-127 */
    check_chain(m, "source without -128");
    xin[5] = -1.0f; /* -128 */
    xin[77] = -1.5f;
    check_chain(m, "source with -128");
    qp_model_free(m);
    unsetenv("QP_INT8_VNNI");
}

/* QConv -> MaxPool 3x3 stride 2 pad 1 (between Q/DQ of one scale) -> QConv: the MaxPool runs on
 * the channels-last int8 tensors the QConv nodes exchange (attribute nhwc), and the result is
 * the float oracle's exactly (power-of-two scales). */
static void test_maxpool_nhwc(void **state) {
    (void)state;
    static const int64_t pads[4] = {1, 1, 1, 1}, s2[2] = {2, 2}, k3[2] = {3, 3};
    rt_rng = 31;
    struct qp_model *m = model_with_x(4, x_dims);
    rt_qdq(m, "x", "xd", 0.0078125f, 0);
    conv_weights_k(m, "w1", "w1f", C, 3);
    conv_weights_k(m, "w2", "w2f", M, 1);
    const char *c1[3] = {"xd", "w1f", "w1_b"}, *c2[3] = {"pd", "w2f", "w2_b"};
    rt_node(m, "c1", "Conv", 3, c1, "a0");
    ints_attr(m, "c1", "pads", pads, 4);
    const char *r1[1] = {"a0"}, *mp[1] = {"ad"};
    rt_node(m, "r1", "Relu", 1, r1, "a");
    rt_qdq(m, "a", "ad", 0.125f, 0);
    rt_node(m, "pool", "MaxPool", 1, mp, "p");
    ints_attr(m, "pool", "kernel_shape", k3, 2);
    ints_attr(m, "pool", "strides", s2, 2);
    ints_attr(m, "pool", "pads", pads, 4);
    rt_qdq(m, "p", "pd", 0.125f, 0);
    rt_node(m, "c2", "Conv", 3, c2, "b");
    rt_qdq(m, "b", "y", 0.5f, 0);
    finish(m, "y");
    fill_x(0.99f);
    static float y_mp[M * HO * HO], y_fq[M * HO * HO];
    struct qp_session *s;
    run(m, QP_INT8_AUTO, xin, y_mp, M * HO * HO, &s);
    assert_int_equal(s->int8->n_qconv, 2);
    int pool = qp_graph_find_node(s->g, "pool");
    assert_true(pool >= 0);
    assert_int_equal(qp_kattr_int(&s->g->nodes[pool], "nhwc", 0), 1);
    qp_session_free(s);
    run(m, QP_INT8_OFF, xin, y_fq, M * HO * HO, NULL);
    size_t nonzero = 0;
    for (size_t i = 0; i < M * HO * HO; i++) {
        if (y_mp[i] != y_fq[i])
            fail_msg("element %zu: int8 %g, float oracle %g", i, (double)y_mp[i], (double)y_fq[i]);
        nonzero += y_mp[i] != 0;
    }
    assert_true(nonzero > M * HO * HO / 4);
    qp_model_free(m);
}

/* A Conv whose output channel 0 has weights near 0 (w_scale 2.5e-41, as an all-zero channel of
 * a real model gets) and a bias of 0.75, float output: on every path that channel is its bias
 * (oneDNN's int8 convolution adds the bias before the output scales, and bias / (x_scale *
 * w_scale) overflowed to inf), and the other channels agree with the oracle. */
static void check_tiny_scale(const char *path) {
    static const int64_t pads[4] = {1, 1, 1, 1};
    int64_t wd[4] = {M, C, 3, 3}, sd[1] = {M};
    static float w[M * C * 9], sc[M], b[M], y_fq[M * HW * HW], y_q[M * HW * HW];
    static int8_t z[M];
    rt_rng = 41;
    for (int oc = 0; oc < M; oc++) {
        sc[oc] = oc == 0 ? 2.5e-41f : 0.01f;
        b[oc] = oc == 0 ? 0.75f : 0.1f * rt_frand();
        for (int i = 0; i < C * 9; i++)
            w[oc * C * 9 + i] = (float)(int)(127 * rt_frand()) * sc[oc];
    }
    struct qp_model *m = model_with_x(4, x_dims);
    rt_qdq(m, "x", "xd", 0.0078125f, 0);
    graph_add_init(m, m->graph, "w", QP_DTYPE_FLOAT, 4, wd, w, sizeof w);
    graph_add_init(m, m->graph, "ws", QP_DTYPE_FLOAT, 1, sd, sc, sizeof sc);
    graph_add_init(m, m->graph, "wz", QP_DTYPE_INT8, 1, sd, z, sizeof z);
    graph_add_init(m, m->graph, "b", QP_DTYPE_FLOAT, 1, sd, b, sizeof b);
    const char *qi[3] = {"w", "ws", "wz"}, *di[3] = {"wq", "ws", "wz"}, *ci[3] = {"xd", "wf", "b"};
    rt_node(m, "wQ", "QuantizeLinear", 3, qi, "wq");
    rt_node(m, "wDQ", "DequantizeLinear", 3, di, "wf");
    int_attr(m, "wQ", "axis", 0);
    int_attr(m, "wDQ", "axis", 0);
    rt_node(m, "c", "Conv", 3, ci, "y");
    ints_attr(m, "c", "pads", pads, 4);
    finish(m, "y");
    fill_x(0.99f);
    run(m, QP_INT8_OFF, xin, y_fq, M * HW * HW, NULL);
    struct qp_session *s;
    run(m, QP_INT8_AUTO, xin, y_q, M * HW * HW, &s);
    assert_int_equal(s->int8->n_qconv, 1);
    qp_session_free(s);
    for (size_t i = 0; i < M * HW * HW; i++) {
        float want = y_fq[i], tol = i < HW * HW ? 1e-6f : 1e-4f + 1e-3f * fabsf(want);
        if (!(fabsf(y_q[i] - want) <= tol))
            fail_msg("%s path, element %zu: int8 %g, oracle %g", path, i, (double)y_q[i],
                     (double)want);
    }
    assert_true(fabsf(y_q[0] - 0.75f) < 1e-6f);
    qp_model_free(m);
}

static void test_tiny_weight_scale(void **state) {
    (void)state;
    if (qp_int8_cpu_has_vnni()) check_tiny_scale("oneDNN int8");
    setenv("QP_INT8_VNNI", "0", 1);
    if (qp_kernel_isa() >= QP_ISA_AVX2) check_tiny_scale("AVX2");
    setenv("QP_INT8_AVX2", "0", 1);
    check_tiny_scale("oneDNN float");
    setenv("QP_INT8_REF", "1", 1);
    check_tiny_scale("reference");
    unsetenv("QP_INT8_REF");
    unsetenv("QP_INT8_AVX2");
    unsetenv("QP_INT8_VNNI");
}

/* An fp16 model: x -> Cast fp16 -> Q/DQ -> Conv -> Softmax -> Q/DQ -> Cast float -> y, and, when
 * `conv_out`, the Conv's output as a second graph output. The integer path widens the model to
 * float32 (rt_int8_widen): the QConv writes float32 either way (a Cast makes the fp16 graph
 * output), and the result is within fp16 rounding of one step of the oracle. */
static void check_fp16_out(int conv_out) {
    static const int64_t pads[4] = {1, 1, 1, 1};
    int64_t wd[4] = {M, C, 3, 3}, sd[1] = {M};
    static int8_t w[M * C * 9], wz[M];
    static uint16_t ws[M], b[M];
    rt_rng = 43;
    for (int oc = 0; oc < M; oc++) {
        ws[oc] = qp_f32_to_fp16(0.004f + 0.0005f * (float)oc);
        b[oc] = qp_f32_to_fp16(0.1f * rt_frand());
    }
    for (int i = 0; i < M * C * 9; i++)
        w[i] = (int8_t)(int)(127 * rt_frand());
    struct qp_model *m = model_with_x(4, x_dims);
    uint16_t xs = qp_f32_to_fp16(0.0078125f), ys = qp_f32_to_fp16(1.0f / 256);
    int8_t z = 0;
    graph_add_init(m, m->graph, "xs", QP_DTYPE_FLOAT16, 0, NULL, &xs, sizeof xs);
    graph_add_init(m, m->graph, "ys", QP_DTYPE_FLOAT16, 0, NULL, &ys, sizeof ys);
    graph_add_init(m, m->graph, "z", QP_DTYPE_INT8, 0, NULL, &z, 1);
    graph_add_init(m, m->graph, "w", QP_DTYPE_INT8, 4, wd, w, sizeof w);
    graph_add_init(m, m->graph, "ws", QP_DTYPE_FLOAT16, 1, sd, ws, sizeof ws);
    graph_add_init(m, m->graph, "wz", QP_DTYPE_INT8, 1, sd, wz, sizeof wz);
    graph_add_init(m, m->graph, "b", QP_DTYPE_FLOAT16, 1, sd, b, sizeof b);
    const char *c0[1] = {"x"}, *q0[3] = {"xh", "xs", "z"}, *d0[3] = {"xq", "xs", "z"};
    const char *wi[3] = {"w", "ws", "wz"}, *ci[3] = {"xd", "wf", "b"}, *si[1] = {"c"};
    const char *q1[3] = {"sm", "ys", "z"}, *d1[3] = {"sq", "ys", "z"}, *c1[1] = {"sd"};
    rt_node(m, "to16", "Cast", 1, c0, "xh");
    int_attr(m, "to16", "to", QP_DTYPE_FLOAT16);
    rt_node(m, "xQ", "QuantizeLinear", 3, q0, "xq");
    rt_node(m, "xDQ", "DequantizeLinear", 3, d0, "xd");
    rt_node(m, "wDQ", "DequantizeLinear", 3, wi, "wf");
    int_attr(m, "wDQ", "axis", 0);
    rt_node(m, "c", "Conv", 3, ci, "c");
    ints_attr(m, "c", "pads", pads, 4);
    rt_node(m, "sm", "Softmax", 1, si, "sm");
    int_attr(m, "sm", "axis", 1);
    rt_node(m, "sQ", "QuantizeLinear", 3, q1, "sq");
    rt_node(m, "sDQ", "DequantizeLinear", 3, d1, "sd");
    rt_node(m, "to32", "Cast", 1, c1, "y");
    int_attr(m, "to32", "to", QP_DTYPE_FLOAT);
    finish(m, "y");
    struct qp_error err = {0};
    if (conv_out) {
        int cv = qp_graph_find_value(m->graph, "c");
        assert_int_equal(qp_graph_add_output(m->graph, cv, &err), QP_OK);
        m->graph->values[cv].dtype = QP_DTYPE_FLOAT16; /* graph outputs declare their type */
    }
    fill_x(0.99f);
    static float y_fq[M * HW * HW], y_q[M * HW * HW];
    run(m, QP_INT8_OFF, xin, y_fq, M * HW * HW, NULL);
    struct qp_session *s;
    run(m, QP_INT8_AUTO, xin, y_q, M * HW * HW, &s);
    assert_int_equal(s->int8->n_qconv, 1);
    int k = qp_graph_find_node(s->g, "c");
    assert_true(k >= 0);
    assert_int_equal(qp_kattr_int(&s->g->nodes[k], "out_dtype", 0), QP_DTYPE_FLOAT);
    const char *why = "";
    assert_true(qp_session_int8_widened(s, &why) > 0);
    assert_null(why);
    int c = qp_graph_find_value(s->g, "c");
    assert_int_equal(s->g->values[c].dtype, QP_DTYPE_FLOAT16 * conv_out);
    qp_session_free(s);
    size_t nonzero = 0;
    for (size_t i = 0; i < M * HW * HW; i++) {
        if (fabsf(y_q[i] - y_fq[i]) > (1.0f / 256) * 1.01f)
            fail_msg("element %zu: int8 %g, oracle %g (conv output %d)", i, (double)y_q[i],
                     (double)y_fq[i], conv_out);
        nonzero += y_q[i] != 0;
    }
    assert_true(nonzero > M * HW * HW / 4);
    qp_model_free(m);
}

static void test_fp16_float_out(void **state) {
    (void)state;
    check_fp16_out(0);
    check_fp16_out(1);
}

/* rt_int8_widen on x16 (fp16 input) -> Add(Constant fp16) -> Cast fp16 -> Mul(init fp16) -> y16
 * (fp16 output): a Cast up after the input, constants converted, the inner Cast retargeted, a
 * Cast down before the output, every inner value float32; declined with a reason when a node
 * holds a subgraph or QP_INT8_FP16_OUT=1. */
static void check_widen(int keep) {
    struct qp_model *m = test_model_create(&rt_test_opset19);
    struct qp_dim d1[1] = {{4, NULL}};
    test_model_add_input(m, "x16", QP_DTYPE_FLOAT16, 1, d1);
    int64_t n4 = 4;
    uint16_t k[4], w[4];
    for (int i = 0; i < 4; i++) {
        k[i] = qp_f32_to_fp16(0.5f * (float)i);
        w[i] = qp_f32_to_fp16(1.0f / 3);
    }
    graph_add_init(m, m->graph, "w16", QP_DTYPE_FLOAT16, 1, &n4, w, sizeof w);
    const char *a_in[2] = {"x16", "k16"}, *c_in[1] = {"a"}, *m_in[2] = {"c", "w16"};
    rt_node(m, "k", "Constant", 0, NULL, "k16");
    struct qp_attr *at =
        qp_node_add_attr(m->graph, qp_graph_find_node(m->graph, "k"), "value", QP_ATTR_TENSOR);
    struct qp_tensor *t = model_alloc(m, sizeof *t);
    int64_t *dims = model_alloc(m, sizeof *dims);
    uint16_t *kd = model_alloc(m, sizeof k);
    memcpy(kd, k, sizeof k);
    dims[0] = 4;
    *t = (struct qp_tensor){.name = "k16",
                            .dtype = QP_DTYPE_FLOAT16,
                            .rank = 1,
                            .dims = dims,
                            .numel = 4,
                            .data = kd,
                            .nbytes = sizeof k};
    at->t = t;
    rt_node(m, "a", "Add", 2, a_in, "a");
    rt_node(m, "c", "Cast", 1, c_in, "c");
    int_attr(m, "c", "to", QP_DTYPE_FLOAT16);
    rt_node(m, "mul", "Mul", 2, m_in, "y16");
    struct qp_graph *g = m->graph;
    g->values[qp_graph_find_value(g, "a")].dtype = QP_DTYPE_FLOAT16;
    g->values[qp_graph_find_value(g, "y16")].dtype = QP_DTYPE_FLOAT16;
    finish(m, "y16");
    if (keep) setenv("QP_INT8_FP16_OUT", "1", 1);
    const char *why = NULL;
    size_t n = 0;
    struct qp_error err = {0};
    assert_int_equal(rt_int8_widen(g, &why, &n, &err), QP_OK);
    unsetenv("QP_INT8_FP16_OUT");
    int x = qp_graph_find_value(g, "x16"), y = qp_graph_find_value(g, "y16");
    if (keep) {
        assert_non_null(why);
        assert_int_equal(n, 0);
        assert_int_equal(g->values[qp_graph_find_value(g, "a")].dtype, QP_DTYPE_FLOAT16);
        qp_model_free(m);
        return;
    }
    assert_null(why);
    assert_int_equal(n, 5); /* w16, k16, the Cast's `to`, a's and c's declared types */
    assert_int_equal(g->values[x].dtype, QP_DTYPE_FLOAT16);
    assert_int_equal(g->values[y].dtype, QP_DTYPE_FLOAT16);
    assert_int_equal(g->values[x].n_uses, 1);
    const struct qp_node *up = &g->nodes[g->values[x].uses[0].node];
    assert_true(qp_node_is(up, "Cast") && qp_kattr_int(up, "to", 0) == QP_DTYPE_FLOAT);
    assert_int_equal(g->values[up->outputs[0]].dtype, QP_DTYPE_FLOAT);
    const struct qp_node *down = &g->nodes[g->values[y].producer];
    assert_true(qp_node_is(down, "Cast") && qp_kattr_int(down, "to", 0) == QP_DTYPE_FLOAT16);
    assert_int_equal(g->values[down->inputs[0]].dtype, QP_DTYPE_FLOAT);
    assert_string_equal(g->nodes[g->values[down->inputs[0]].producer].name, "mul");
    const struct qp_node *cast = &g->nodes[qp_graph_find_node(g, "c")];
    assert_int_equal(qp_kattr_int(cast, "to", 0), QP_DTYPE_FLOAT);
    const struct qp_tensor *wi = &g->inits[g->values[qp_graph_find_value(g, "w16")].initializer];
    assert_int_equal(wi->dtype, QP_DTYPE_FLOAT);
    assert_true(((const float *)wi->data)[0] == qp_fp16_to_f32(w[0]));
    const struct qp_tensor *kt = qp_node_attr(&g->nodes[qp_graph_find_node(g, "k")], "value")->t;
    assert_int_equal(kt->dtype, QP_DTYPE_FLOAT);
    assert_true(((const float *)kt->data)[3] == 1.5f);
    /* the widened graph runs: y = (x + k) / 3 as float32, returned as fp16 */
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    struct qp_session_options o = {.n_threads = 1, .int8 = QP_INT8_OFF};
    struct qp_session *s;
    assert_int_equal(qp_session_create(m, &o, 0, NULL, &s, &err), QP_OK);
    uint16_t xv[4] = {qp_f32_to_fp16(1), qp_f32_to_fp16(2), qp_f32_to_fp16(3), qp_f32_to_fp16(4)};
    struct qp_array in, out;
    assert_int_equal(qp_array_view(&in, QP_DTYPE_FLOAT16, 1, &n4, xv, sizeof xv, &err), QP_OK);
    assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
    assert_int_equal(qp_session_output(s, 0, &out, &err), QP_OK);
    assert_int_equal(out.dtype, QP_DTYPE_FLOAT16);
    for (int i = 0; i < 4; i++)
        assert_true(fabsf(qp_fp16_to_f32(((const uint16_t *)out.data)[i]) -
                          (float)(i + 1 + 0.5 * i) / 3) < 2e-3f);
    qp_session_free(s);
    qp_model_free(m);
}

/* Nearest Resize on the integer path: x -> Q/DQ(0.02) -> Resize x2 -> Add 0.25 -> Q/DQ(0.03) and
 * x's DQ -> Resize x2; both Concat -> Q/DQ(0.05) -> y. The Resize read by the Add gets its DQ
 * after it (the Add's Pointwise reads int8), the Concat's Q moves onto its inputs and then
 * before the second Resize: both Resize nodes and the Concat run on int8, and y is within one
 * step of the oracle. */
static void test_resize_moves(void **state) {
    (void)state;
    struct qp_model *m = model_with_x(4, x_dims);
    rt_qdq(m, "x", "xd", 0.02f, 0);
    static const float sc[4] = {1, 1, 2, 2};
    static const int64_t four = 4;
    float quarter = 0.25f;
    graph_add_init(m, m->graph, "sc", QP_DTYPE_FLOAT, 1, &four, sc, sizeof sc);
    graph_add_init(m, m->graph, "qtr", QP_DTYPE_FLOAT, 0, NULL, &quarter, sizeof quarter);
    const char *r_in[3] = {"xd", "", "sc"}, *a_in[2] = {"r1", "qtr"}, *c_in[2] = {"r2", "ad"};
    rt_node(m, "rs1", "Resize", 3, r_in, "r1");
    rt_node(m, "rs2", "Resize", 3, r_in, "r2");
    rt_node(m, "add", "Add", 2, a_in, "a");
    rt_qdq(m, "a", "ad", 0.03f, 0);
    rt_node(m, "cat", "Concat", 2, c_in, "c");
    int_attr(m, "cat", "axis", 1);
    rt_qdq(m, "c", "y", 0.05f, 0);
    finish(m, "y");
    fill_x(1.5f);
    static float y_fq[2 * C * 4 * HW * HW], y_q[2 * C * 4 * HW * HW];
    size_t ny = sizeof y_q / sizeof y_q[0];
    run(m, QP_INT8_OFF, xin, y_fq, ny, NULL);
    struct qp_session *s;
    run(m, QP_INT8_AUTO, xin, y_q, ny, &s);
    assert_non_null(strstr(find(s, "y_Q")->into, "Concat 'cat' on int8"));
    assert_non_null(strstr(find(s, "xd_DQ")->into, "Resize 'rs1' on int8 (the DQ moved after it)"));
    assert_non_null(strstr(find(s, "ad_Q")->into, "Pointwise"));
    int movers = 0;
    for (int k = 0; k < (int)s->g->n_nodes; k++) {
        const struct qp_node *n = &s->g->nodes[k];
        if (n->dead || !(qp_node_is(n, "Resize") || qp_node_is(n, "Concat"))) continue;
        const struct qp_node *p = &s->g->nodes[s->g->values[n->inputs[0]].producer];
        assert_false(qp_node_is(p, "DequantizeLinear")); /* reads an int8 tensor */
        movers++;
    }
    assert_int_equal(movers, 3);
    qp_session_free(s);
    size_t differ = 0;
    for (size_t i = 0; i < ny; i++) {
        if (fabsf(y_q[i] - y_fq[i]) > 0.05f * 1.01f)
            fail_msg("element %zu: int8 %g, oracle %g", i, (double)y_q[i], (double)y_fq[i]);
        differ += y_q[i] != y_fq[i];
    }
    assert_true(differ < ny / 50);
    qp_model_free(m);
}

/* A Q after Transpose -> Reshape of a Conv's output moves before them (int8_move.c): the Conv
 * writes int8, the Transpose and Reshape copy int8, and the result is within one step of the
 * oracle. */
static void test_reshape_moves(void **state) {
    (void)state;
    static const int64_t perm[4] = {0, 2, 3, 1}, shape[3] = {1, HW * HW, M}, sd[1] = {3};
    struct qp_model *m = model_with_x(4, x_dims);
    rt_rng = 5;
    rt_qdq(m, "x", "xd", 0.02f, 0);
    conv_weights(m, "w", 0);
    conv(m, "conv", "xd", "wf", "w_b", "o");
    graph_add_init(m, m->graph, "shape", QP_DTYPE_INT64, 1, sd, shape, sizeof shape);
    const char *ti[1] = {"o"}, *ri[2] = {"t", "shape"};
    rt_node(m, "tr", "Transpose", 1, ti, "t");
    ints_attr(m, "tr", "perm", perm, 4);
    rt_node(m, "rs", "Reshape", 2, ri, "r");
    rt_qdq(m, "r", "y", 0.05f, 0);
    finish(m, "y");
    fill_x(1.0f);
    static float y_q[M * HW * HW], y_fq[M * HW * HW];
    struct qp_session *s;
    run(m, QP_INT8_OFF, xin, y_fq, M * HW * HW, NULL);
    run(m, QP_INT8_AUTO, xin, y_q, M * HW * HW, &s);
    assert_non_null(strstr(find(s, "y_Q")->into, "QConv 'conv'"));
    assert_non_null(strstr(find(s, "y_Q")->into, "int8 output"));
    int copies = 0;
    for (int k = 0; k < (int)s->g->n_nodes; k++) {
        const struct qp_node *n = &s->g->nodes[k];
        if (n->dead) continue;
        if (qp_node_is(n, "QuantizeLinear") && strcmp(n->name, "y_Q") == 0)
            fail_msg("Q '%s' runs on its own", n->name);
        if (!qp_node_is(n, "Transpose") && !qp_node_is(n, "Reshape")) continue;
        const struct qp_node *p = &s->g->nodes[s->g->values[n->inputs[0]].producer];
        assert_string_equal(p->op_type, qp_node_is(n, "Transpose") ? "QConv" : "Transpose");
        copies++;
    }
    assert_int_equal(copies, 2);
    qp_session_free(s);
    size_t differ = 0;
    for (size_t i = 0; i < M * HW * HW; i++) {
        if (fabsf(y_q[i] - y_fq[i]) > 0.05f * 1.01f)
            fail_msg("element %zu: int8 %g, oracle %g", i, (double)y_q[i], (double)y_fq[i]);
        differ += y_q[i] != y_fq[i];
    }
    assert_true(differ < M * HW * HW / 50);
    qp_model_free(m);
}

static void test_fp16_widen(void **state) {
    (void)state;
    check_widen(0);
    check_widen(1);
}

/* A QConv above the one-thread size (I8_SMALL_MACS: 16 x 72 x 48^2 multiply-adds) runs on the
 * session's 2 threads and gives the reference path's and the oracle's bytes (power-of-two
 * scales: every path is exact). */
static void test_large_conv_threads(void **state) {
    (void)state;
    enum { LH = 48 };
    static const int64_t pads[4] = {1, 1, 1, 1};
    static struct qp_dim ld[4] = {{1, NULL}, {C, NULL}, {LH, NULL}, {LH, NULL}};
    static float x[C * LH * LH], y_q[M * LH * LH], y_ref[M * LH * LH], y_fq[M * LH * LH];
    rt_rng = 47;
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
        x[i] = 0.99f * rt_frand();
    struct qp_model *m = model_with_x(4, ld);
    rt_qdq(m, "x", "xd", 0.0078125f, 0);
    conv_weights_k(m, "wl", "wlf", C, 3);
    const char *ci[3] = {"xd", "wlf", "wl_b"};
    rt_node(m, "cl", "Conv", 3, ci, "o");
    ints_attr(m, "cl", "pads", pads, 4);
    rt_qdq(m, "o", "y", 0.5f, 0);
    finish(m, "y");
    run_hw(m, QP_INT8_AUTO, LH, x, y_q, M * LH * LH, NULL);
    setenv("QP_INT8_REF", "1", 1);
    run_hw(m, QP_INT8_AUTO, LH, x, y_ref, M * LH * LH, NULL);
    unsetenv("QP_INT8_REF");
    run_hw(m, QP_INT8_OFF, LH, x, y_fq, M * LH * LH, NULL);
    size_t nonzero = 0;
    for (size_t i = 0; i < M * LH * LH; i++) {
        if (y_q[i] != y_ref[i] || y_q[i] != y_fq[i])
            fail_msg("element %zu: int8 %g, reference %g, oracle %g", i, (double)y_q[i],
                     (double)y_ref[i], (double)y_fq[i]);
        nonzero += y_q[i] != 0;
    }
    assert_true(nonzero > M * LH * LH / 4);
    qp_model_free(m);
}

/* ConvTranspose weights [cin, cout / group, k, k] as DQ(Q(W)) into `out`: per output channel
 * (axis 1) for one group, per tensor for more; integers over the whole int8 range times a
 * power-of-two scale; `name`_b a power-of-two bias of cout values. */
static void convt_weights(struct qp_model *m, const char *name, const char *out, int64_t cin,
                          int64_t cout, int64_t group, int64_t k) {
    int64_t mg = cout / group, ns = group == 1 ? cout : 1, nw = cin * mg * k * k;
    int64_t wd[4] = {cin, mg, k, k};
    float *w = model_alloc(m, sizeof(float) * (size_t)nw),
          *b = model_alloc(m, sizeof(float) * cout);
    float *sc = model_alloc(m, sizeof(float) * (size_t)ns);
    for (int64_t i = 0; i < ns; i++)
        sc[i] = ldexpf(1.0f, -6 - (int)(i % 3));
    for (int64_t oc = 0; oc < cout; oc++)
        b[oc] = ldexpf((float)(oc - 3), -4);
    for (int64_t i = 0; i < nw; i++) {
        int64_t oc = i / (k * k) % mg;
        int q = (int)((i * 29 + oc * 53 + i / 7) % 255) - 127;
        w[i] = (float)q * sc[ns == 1 ? 0 : oc];
    }
    weight_qdq(m, name, out, 4, wd, w, ns, sc, cout, b, 1);
}

/* m on xin through the integer path's reference kernels (QP_INT8_REF) into y_ref and as
 * written (the fake-quantization oracle) into y_fq, n values each. */
static void run_ref_and_oracle(struct qp_model *m, float *y_ref, float *y_fq, size_t n) {
    setenv("QP_INT8_REF", "1", 1);
    run(m, QP_INT8_AUTO, xin, y_ref, n, NULL);
    unsetenv("QP_INT8_REF");
    run(m, QP_INT8_OFF, xin, y_fq, n, NULL);
}

/* x -> QDQ -> ConvTranspose 2x2 stride 2 (C -> M) -> Add, Mul by constants per channel -> Relu
 * -> QDQ -> ConvTranspose 3x3 stride 2 pads 1 output_padding 1, 2 groups (M -> 4) -> Sigmoid
 * -> y (float): PaddleOCR det's head, and the general deconvolution. */
enum { CT_OUT = 4, CT_HW = 4 * HW };
static struct qp_model *convt_model(void) {
    static const int64_t s2[2] = {2, 2}, k2[2] = {2, 2}, pads[4] = {1, 1, 1, 1}, op[2] = {1, 1};
    struct qp_model *m = model_with_x(4, x_dims);
    rt_qdq(m, "x", "xd", 0.0078125f, 0);
    convt_weights(m, "ta", "taf", C, M, 1, 2);
    convt_weights(m, "tb", "tbf", M, CT_OUT, 2, 3);
    static float add[M], mul[M];
    for (int i = 0; i < M; i++) {
        add[i] = ldexpf((float)(i % 5) - 2.0f, -3);
        mul[i] = i % 2 ? 0.5f : 2.0f;
    }
    int64_t cd[3] = {M, 1, 1};
    graph_add_init(m, m->graph, "ct_add", QP_DTYPE_FLOAT, 3, cd, add, sizeof add);
    graph_add_init(m, m->graph, "ct_mul", QP_DTYPE_FLOAT, 3, cd, mul, sizeof mul);
    const char *ta[2] = {"xd", "taf"}, *tb[3] = {"ad", "tbf", "tb_b"};
    const char *ai[2] = {"t0", "ct_add"}, *mi[2] = {"t1", "ct_mul"}, *ri[1] = {"t2"},
               *si[1] = {"u"};
    rt_node(m, "cta", "ConvTranspose", 2, ta, "t0");
    ints_attr(m, "cta", "strides", s2, 2);
    ints_attr(m, "cta", "kernel_shape", k2, 2);
    rt_node(m, "ct_a", "Add", 2, ai, "t1");
    rt_node(m, "ct_m", "Mul", 2, mi, "t2");
    rt_node(m, "ct_r", "Relu", 1, ri, "t3");
    rt_qdq(m, "t3", "ad", 0.0625f, 0);
    rt_node(m, "ctb", "ConvTranspose", 3, tb, "u");
    ints_attr(m, "ctb", "strides", s2, 2);
    ints_attr(m, "ctb", "pads", pads, 4);
    ints_attr(m, "ctb", "output_padding", op, 2);
    int_attr(m, "ctb", "group", 2);
    rt_node(m, "ct_s", "Sigmoid", 1, si, "y");
    finish(m, "y");
    return m;
}

/* ConvTranspose fuses (with its constant Add/Mul, activations and Q) where the CPU has VNNI or
 * the reference path runs: the 2x2 stride-2 one as the 1x1-and-scatter patch, the other on
 * oneDNN's deconvolution. Without VNNI the patch runs on the AVX2 kernels (QP_INT8_AVX2=0: it
 * stays float) and the other stays float; each says why. Results of the integer path, its
 * reference and the oracle agree (power-of-two scales: the int8 tensor between is exact, the
 * sigmoid within float rounding). */
static void check_conv_transpose(struct qp_model *m, int pass) {
    enum { NY = CT_OUT * CT_HW * CT_HW };
    static float y_q[NY], y_ref[NY], y_fq[NY];
    int dnnl = qp_dnnl_enabled(), vnni = qp_int8_cpu_has_vnni();
    int avx2 = qp_kernel_isa() >= QP_ISA_AVX2 && qp_int8_avx2_allowed();
    int fuse_b = !dnnl || vnni, fuse_a = fuse_b || avx2;
    struct qp_session *s;
    run(m, QP_INT8_AUTO, xin, y_q, NY, &s);
    const struct qp_int8_decision *a = find(s, "xd_DQ"), *b = find(s, "ad_DQ");
    assert_int_equal(a->fused, fuse_a);
    assert_int_equal(b->fused && strstr(b->into, "QConv") != NULL, fuse_b);
    if (fuse_a) {
        assert_non_null(strstr(a->into, "QConv 'cta' (5 nodes, constant Mul/Add folded"));
        assert_non_null(strstr(a->into, "int8 output"));
    } else {
        assert_non_null(strstr(a->reason, "ConvTranspose 'cta', which runs in float"));
        assert_non_null(strstr(a->reason, "without VNNI"));
    }
    if (fuse_b) { /* else its DQ joins a Pointwise pass as a fake quantization */
        assert_non_null(strstr(b->into, "QConv 'ctb' (2 nodes"));
        assert_non_null(strstr(b->into, "float output"));
    }
    int k = 0;
    for (size_t i = 0; s->last && i < s->last->n_steps; i++) {
        const struct rt_step *st = &s->last->steps[i];
        if (st->kind == RT_STEP_OVERLAY || !st->k || strcmp(st->k->op, "QConv") != 0) continue;
        enum qp_int8_path path = qp_int8_conv_path(st->state);
        assert_int_equal(qp_int8_conv_patch(st->state), path != QP_INT8_PATH_REF && k == 0);
        if (k == 0 && dnnl && !vnni) assert_int_equal(path, QP_INT8_PATH_AVX2);
        k++;
    }
    assert_int_equal(k, fuse_a + fuse_b);
    qp_session_free(s);
    run_ref_and_oracle(m, y_ref, y_fq, NY);
    int spread = 0;
    for (size_t i = 0; i < NY; i++) {
        if (fabsf(y_q[i] - y_fq[i]) > 2e-6f || fabsf(y_ref[i] - y_fq[i]) > 2e-6f)
            fail_msg("pass %d, element %zu: int8 %.9g, reference %.9g, oracle %.9g", pass, i,
                     (double)y_q[i], (double)y_ref[i], (double)y_fq[i]);
        spread += y_fq[i] > 0.05f && y_fq[i] < 0.95f;
    }
    assert_true(spread > NY / 10);
}

static void test_conv_transpose(void **state) {
    (void)state;
    struct qp_model *m = convt_model();
    fill_x(1.0f);
    check_conv_transpose(m, 0);
    if (!getenv("QP_NO_DNNL")) { /* the reference path fuses whatever the CPU */
        setenv("QP_INT8_VNNI", "0", 1);
        check_conv_transpose(m, 1);
        setenv("QP_INT8_AVX2", "0", 1);
        check_conv_transpose(m, 2);
        unsetenv("QP_INT8_AVX2");
        unsetenv("QP_INT8_VNNI");
    }
    qp_model_free(m);
}

/* x -> QDQ -> ConvTranspose 2x2 stride 2 (C -> M) -> Relu -> QDQ -> Conv 1x1 (M -> M) -> y: the
 * patch's int8 output read by a QConv only, so stored channels last (its scatter's NHWC
 * branch; the head above writes channels first). The integer path, its reference and the
 * oracle agree (power-of-two scales). */
static void test_conv_transpose_nhwc(void **state) {
    (void)state;
    enum { NY = M * 2 * HW * 2 * HW };
    static const int64_t s2[2] = {2, 2}, k2[2] = {2, 2};
    static float y_q[NY], y_ref[NY], y_fq[NY];
    struct qp_model *m = model_with_x(4, x_dims);
    rt_qdq(m, "x", "xd", 0.0078125f, 0);
    convt_weights(m, "ta", "taf", C, M, 1, 2);
    conv_weights_k(m, "w2", "w2f", M, 1);
    const char *ta[2] = {"xd", "taf"}, *ri[1] = {"t0"}, *ci[3] = {"ad", "w2f", "w2_b"};
    rt_node(m, "cta", "ConvTranspose", 2, ta, "t0");
    ints_attr(m, "cta", "strides", s2, 2);
    ints_attr(m, "cta", "kernel_shape", k2, 2);
    rt_node(m, "ct_r", "Relu", 1, ri, "t1");
    rt_qdq(m, "t1", "ad", 0.0625f, 0);
    rt_node(m, "c2", "Conv", 3, ci, "y");
    finish(m, "y");
    fill_x(1.0f);
    struct qp_session *s;
    run(m, QP_INT8_AUTO, xin, y_q, NY, &s);
    int patch = 0;
    for (size_t i = 0; s->last && i < s->last->n_steps; i++) {
        const struct rt_step *st = &s->last->steps[i];
        if (st->kind != RT_STEP_OVERLAY && st->k && strcmp(st->k->op, "QConv") == 0)
            patch += qp_int8_conv_patch(st->state);
    }
    if (qp_dnnl_enabled() && (qp_int8_cpu_has_vnni() || qp_int8_avx2_allowed()))
        assert_int_equal(patch, 1);
    qp_session_free(s);
    run_ref_and_oracle(m, y_ref, y_fq, NY);
    int nonzero = 0;
    for (size_t i = 0; i < NY; i++) {
        if (y_q[i] != y_fq[i] || y_ref[i] != y_fq[i])
            fail_msg("element %zu: int8 %.9g, reference %.9g, oracle %.9g", i, (double)y_q[i],
                     (double)y_ref[i], (double)y_fq[i]);
        nonzero += y_fq[i] != 0.0f;
    }
    assert_true(nonzero > NY / 2);
    qp_model_free(m);
}

/* The path follows the CPU: oneDNN int8 only with VNNI (ONEDNN_MAX_CPU_ISA=AVX2 in the @avx2
 * variant of this test takes the other branch on an AVX-512 VNNI machine); without VNNI the AVX2
 * kernels for the geometries they take (group 1, depthwise), oneDNN float for the rest or when
 * QP_INT8_AVX2=0. */
static void test_path_selection(void **state) {
    (void)state;
    if (getenv("QP_NO_DNNL")) skip(); /* the reference path only */
    const char *isa = qp_session_isa();
    int vnni = qp_int8_cpu_has_vnni();
    assert_int_equal(vnni, strstr(isa, "VNNI") != NULL);
    setenv("QP_INT8_VNNI", "0", 1);
    assert_false(qp_int8_cpu_has_vnni());
    int avx2 = qp_kernel_isa() >= QP_ISA_AVX2;
    enum qp_int8_path want = avx2 ? QP_INT8_PATH_AVX2 : QP_INT8_PATH_DNNL_F32, paths[4];
    fill_x(0.5f);
    static float y[M * HO * HO];
    struct qp_model *m = chain_model(2); /* c2 has 2 groups: not the AVX2 path's */
    struct qp_session *s;
    run(m, QP_INT8_AUTO, xin, y, M * HO * HO, &s);
    assert_int_equal(qconv_paths(s, paths, 4), 3);
    assert_int_equal(paths[0], want);
    assert_int_equal(paths[1], QP_INT8_PATH_DNNL_F32);
    assert_int_equal(paths[2], want);
    qp_session_free(s);
    setenv("QP_INT8_AVX2", "0", 1);
    run(m, QP_INT8_AUTO, xin, y, M * HO * HO, &s);
    assert_int_equal(qconv_paths(s, paths, 4), 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(paths[i], QP_INT8_PATH_DNNL_F32);
    qp_session_free(s);
    unsetenv("QP_INT8_AVX2");
    unsetenv("QP_INT8_VNNI");
    if (vnni) { /* VNNI: oneDNN's int8 convolution, whatever the groups */
        run(m, QP_INT8_AUTO, xin, y, M * HO * HO, &s);
        assert_int_equal(qconv_paths(s, paths, 4), 3);
        for (int i = 0; i < 3; i++)
            assert_int_equal(paths[i], QP_INT8_PATH_DNNL_INT8);
        qp_session_free(s);
    }
    qp_model_free(m);
    const char *max = getenv("ONEDNN_MAX_CPU_ISA");
    if (max && strcmp(max, "AVX2") == 0) assert_false(vnni);
}

/* MaxPool between Q/DQ of one scale runs on int8; of two scales it stays float; a Concat of two
 * scales runs on int8 with its Q moved onto each input (int8_move.c); a DQ into Softmax runs on
 * its own. */
static void test_flow_decisions(void **state) {
    (void)state;
    struct qp_model *m = model_with_x(4, x_dims);
    rt_qdq(m, "x", "xd", 0.02f, 0);
    const char *p1[1] = {"xd"};
    rt_node(m, "pool_same", "MaxPool", 1, p1, "p1");
    rt_node(m, "pool_other", "MaxPool", 1, p1, "p2");
    for (int i = 0; i < 2; i++) {
        static const int64_t k[2] = {2, 2};
        int n = qp_graph_find_node(m->graph, i ? "pool_other" : "pool_same");
        struct qp_attr *a = qp_node_add_attr(m->graph, n, "kernel_shape", QP_ATTR_INTS);
        a->ints = k;
        a->n = 2;
    }
    rt_qdq(m, "p1", "p1d", 0.02f, 0);
    rt_qdq(m, "p2", "p2d", 0.03f, 0);
    const char *cc[2] = {"p1d", "p2d"};
    rt_node(m, "cat", "Concat", 2, cc, "c");
    int_attr(m, "cat", "axis", 1);
    rt_qdq(m, "c", "cd", 0.03f, 0);
    const char *sm[1] = {"cd"};
    rt_node(m, "soft", "Softmax", 1, sm, "y");
    finish(m, "y");
    struct qp_error err = {0};
    struct qp_session_options o = {.n_threads = 1, .int8 = QP_INT8_AUTO};
    struct qp_session *s = NULL;
    assert_int_equal(qp_session_create(m, &o, 0, NULL, &s, &err), QP_OK);
    assert_true(find(s, "p1d_Q")->fused);
    assert_non_null(strstr(find(s, "p1d_Q")->into, "MaxPool 'pool_same' on int8"));
    /* MaxPool of another scale stays float; its Q/DQ then joins the Q that the Concat's Q
     * became on that input (one Pointwise pass); the Concat runs on int8 */
    assert_non_null(strstr(find(s, "p2d_Q")->into, "Pointwise"));
    assert_non_null(strstr(find(s, "cd_Q")->into, "Concat 'cat' on int8"));
    assert_non_null(strstr(find(s, "cd_DQ")->reason, "DQ feeds Softmax 'soft': no int8 kernel"));
    assert_int_equal(s->int8->n_flow, 1);
    assert_int_equal(s->int8->n_fakequant, 1);
    /* the rewritten graph runs and agrees with the oracle within one step */
    fill_x(1.0f);
    float a[C * 9 * 9 * 2], b[C * 9 * 9 * 2];
    struct qp_array in, out;
    int64_t d[4] = {1, C, HW, HW};
    assert_int_equal(qp_array_view(&in, QP_DTYPE_FLOAT, 4, d, xin, sizeof xin, &err), QP_OK);
    assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
    assert_int_equal(qp_session_output(s, 0, &out, &err), QP_OK);
    assert_int_equal(out.nbytes, sizeof a);
    memcpy(a, out.data, sizeof a);
    qp_session_free(s);
    o.int8 = QP_INT8_OFF;
    assert_int_equal(qp_session_create(m, &o, 0, NULL, &s, &err), QP_OK);
    assert_int_equal(qp_session_int8_decisions(s, NULL, NULL), 0);
    assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
    assert_int_equal(qp_session_output(s, 0, &out, &err), QP_OK);
    memcpy(b, out.data, sizeof b);
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
        assert_true(fabsf(a[i] - b[i]) <= 1e-6f);
    qp_session_free(s);
    qp_model_free(m);
}

/* The integer path's first n outputs (y_on) are the oracle's (y_off) bit for bit, more than
 * `min` of them nonzero. */
static void assert_oracle_bits(size_t n, size_t min) {
    assert_memory_equal(y_on, y_off, n * sizeof(float));
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++)
        nonzero += y_on[i] != 0;
    assert_true(nonzero > min);
}

/* x -> Relu -> [Transpose(perm)] -> Gather(axis 1, index `ia`) -> QDQ(0.02) and Gather(index
 * `ib`) -> QDQ(0.05) -> Add -> y; the first Gather's output is also read by a Shape (graph
 * output "sh"), as a ViT's q is by the Shape of its sqrt(head_dim). */
static struct qp_model *gather_q_model(int64_t ia, int64_t ib, const int64_t *perm) {
    struct qp_model *m = model_with_x(4, x_dims);
    const char *r[1] = {"x"}, *tr[1] = {"xr"};
    rt_node(m, "relu", "Relu", 1, r, "xr");
    if (perm) {
        rt_node(m, "tr", "Transpose", 1, tr, "xt");
        struct qp_attr *pa =
            qp_node_add_attr(m->graph, qp_graph_find_node(m->graph, "tr"), "perm", QP_ATTR_INTS);
        pa->ints = perm;
        pa->n = 4;
    }
    int64_t idx[2] = {ia, ib};
    const char *names[2] = {"ga", "gb"}, *outs[2] = {"a", "b"}, *dq[2] = {"ad", "bd"};
    for (int i = 0; i < 2; i++) {
        char iname[64];
        rt_name(iname, names[i], "_i");
        graph_add_init(m, m->graph, iname, QP_DTYPE_INT64, 0, NULL, &idx[i], sizeof idx[i]);
        const char *gi[2] = {perm ? "xt" : "xr", iname};
        rt_node(m, names[i], "Gather", 2, gi, outs[i]);
        int_attr(m, names[i], "axis", 1);
        rt_qdq(m, outs[i], dq[i], i ? 0.05f : 0.02f, 0);
    }
    const char *sh[1] = {"a"};
    rt_node(m, "shape", "Shape", 1, sh, "sh");
    rt_node(m, "add", "Add", 2, dq, "y");
    finish(m, "y");
    struct qp_error err = {0};
    assert_int_equal(qp_graph_add_output(m->graph, qp_graph_find_value(m->graph, "sh"), &err),
                     QP_OK);
    return m;
}

/* Steps of session s running kernel `op`. */
static int count_steps(const struct qp_session *s, const char *op) {
    int n = 0;
    for (size_t i = 0; i < s->last->n_steps; i++) {
        const struct rt_step *st = &s->last->steps[i];
        n += st->kind == RT_STEP_NODE && st->k && strcmp(st->k->op, op) == 0;
    }
    return n;
}

/* A Gather of float data whose only reader (besides a Shape) is a per-tensor Q runs as one
 * GatherQuantize (int8_move.c): each Q is reported fused into its Gather, the Shape still gives
 * the slice's dims, and the output is the oracle's bit for bit (the same quantization, no
 * arithmetic moved); a negative index too. With a Transpose before the Gathers (the last axis
 * kept last: whole runs; moved: strided reads) the GatherQuantize nodes read through its perm
 * and the Transpose goes. */
static void test_gather_quantize(void **state) {
    (void)state;
    static const int64_t idx[4][2] = {{1, 5}, {-1, 0}, {3, -2}, {0, 9}};
    static const int64_t keep_last[4] = {0, 2, 1, 3}, move_last[4] = {0, 3, 1, 2};
    const int64_t *perms[4] = {NULL, NULL, keep_last, move_last};
    fill_x(2.0f);
    for (int t = 0; t < 4; t++) {
        struct qp_model *m = gather_q_model(idx[t][0], idx[t][1], perms[t]);
        struct qp_session *s;
        int64_t ny = perms[t] ? C * HW : HW * HW;
        run(m, QP_INT8_OFF, xin, y_off, (size_t)ny, NULL);
        run(m, QP_INT8_AUTO, xin, y_on, (size_t)ny, &s);
        const char *fb;
        qp_session_int8_decisions(s, NULL, &fb);
        assert_string_equal(fb, "");
        assert_non_null(strstr(find(s, "ad_Q")->into, "Gather 'ga'"));
        assert_non_null(strstr(find(s, "bd_Q")->into, "Gather 'gb'"));
        assert_int_equal(count_steps(s, "GatherQuantize"), 2);
        assert_int_equal(count_steps(s, "Transpose"), 0);
        struct qp_array sh;
        struct qp_error err = {0};
        assert_int_equal(qp_session_output(s, 1, &sh, &err), QP_OK);
        const int64_t *d = sh.data, want[3] = {1, perms[t] ? C : HW, HW};
        assert_int_equal(sh.nbytes, sizeof want);
        assert_memory_equal(d, want, sizeof want);
        assert_oracle_bits((size_t)ny, (size_t)ny / 4);
        qp_session_free(s);
        qp_model_free(m);
    }
}

/* x -> Softmax(axis) -> QDQ(1/127) -> y. */
static struct qp_model *softmax_q_model(int64_t axis) {
    struct qp_model *m = model_with_x(4, x_dims);
    const char *in[1] = {"x"};
    rt_node(m, "soft", "Softmax", 1, in, "p");
    int_attr(m, "soft", "axis", axis);
    rt_qdq(m, "p", "y", 1.0f / 127.0f, 0);
    finish(m, "y");
    return m;
}

/* A Softmax over axis -1 whose only reader is a per-tensor Q runs as one SoftmaxQuantize with the
 * oracle's bits, a row holding NaN included (ONNX Runtime's NaN row, quantized); axis 3, the same
 * axis spelt otherwise, is left to the two nodes (the rewrite does not know ranks). */
static void test_softmax_quantize(void **state) {
    (void)state;
    if (getenv("QP_NO_DNNL")) skip(); /* the oracle's Softmax is then the reference kernel */
    for (int t = 0; t < 3; t++) {
        fill_x(4.0f);
        if (t == 1) xin[HW * 3 + 2] = NAN;
        struct qp_model *m = softmax_q_model(t == 2 ? 3 : -1);
        struct qp_session *s;
        run(m, QP_INT8_OFF, xin, y_off, C * HW * HW, NULL);
        run(m, QP_INT8_AUTO, xin, y_on, C * HW * HW, &s);
        assert_int_equal(count_steps(s, "SoftmaxQuantize"), t == 2 ? 0 : 1);
        if (t < 2) assert_non_null(strstr(find(s, "y_Q")->into, "Softmax 'soft'"));
        assert_oracle_bits(C * HW * HW, C * HW * HW / 8);
        qp_session_free(s);
        qp_model_free(m);
    }
}

/* x -> LayerNormalization(axis 1: rows of C * HW * HW, quantized in several chunks; scale and B
 * [C, HW, HW], no B unless `bias`) -> QDQ(0.03) -> y; with `mean`, its Mean output is a graph
 * output too. */
static struct qp_model *layernorm_q_model(int bias, int mean) {
    struct qp_model *m = model_with_x(4, x_dims);
    int64_t sd[3] = {C, HW, HW};
    rt_rand_init(m, "ln_s", 3, sd, 0.5f, 1.5f);
    rt_rand_init(m, "ln_b", 3, sd, -0.5f, 0.5f);
    const char *in[3] = {"x", "ln_s", "ln_b"}, *outs[2] = {"n", "mu"};
    struct qp_error err = {0};
    int idx;
    assert_int_equal(qp_graph_add_node(m->graph, "ln", "LayerNormalization", "", bias ? 3 : 2, in,
                                       mean ? 2 : 1, outs, &idx, &err),
                     QP_OK);
    int_attr(m, "ln", "axis", 1);
    rt_qdq(m, "n", "y", 0.03f, 0);
    finish(m, "y");
    if (mean)
        assert_int_equal(qp_graph_add_output(m->graph, qp_graph_find_value(m->graph, "mu"), &err),
                         QP_OK);
    return m;
}

/* A LayerNormalization whose Y only a per-tensor Q reads runs as one LayerNormQuantize with the
 * oracle's bits, with and without B; not while its Mean is read. */
static void test_layernorm_quantize(void **state) {
    (void)state;
    static const int cases[3][2] = {{1, 0}, {0, 0}, {1, 1}};
    for (int t = 0; t < 3; t++) {
        rt_rng = 41;
        fill_x(3.0f);
        struct qp_model *m = layernorm_q_model(cases[t][0], cases[t][1]);
        struct qp_session *s;
        run(m, QP_INT8_OFF, xin, y_off, C * HW * HW, NULL);
        run(m, QP_INT8_AUTO, xin, y_on, C * HW * HW, &s);
        int fused = !cases[t][1];
        assert_int_equal(count_steps(s, "LayerNormQuantize"), fused);
        assert_int_equal(find(s, "y_Q")->fused, fused);
        if (fused) assert_non_null(strstr(find(s, "y_Q")->into, "LayerNormalization 'ln'"));
        assert_oracle_bits(C * HW * HW, C * HW * HW / 2);
        qp_session_free(s);
        qp_model_free(m);
    }
}

/* A Split whose outputs are each quantized with its input's parameters runs on int8 (the
 * results equal the oracle's: the same values, copied); one whose Q has another scale stays
 * float and says so. */
static void test_split_flow(void **state) {
    (void)state;
    struct qp_model *m = model_with_x(4, x_dims);
    rt_qdq(m, "x", "xd", 0.02f, 0);
    rt_qdq(m, "x", "xe", 0.02f, 0);
    const char *si[1] = {"xd"}, *ti[1] = {"xe"};
    const char *so[2] = {"s1", "s2"}, *to[2] = {"t1", "t2"};
    struct qp_error err = {0};
    int nn;
    assert_int_equal(qp_graph_add_node(m->graph, "sp", "Split", "", 1, si, 2, so, &nn, &err),
                     QP_OK);
    int_attr(m, "sp", "axis", 1);
    int_attr(m, "sp", "num_outputs", 2);
    assert_int_equal(qp_graph_add_node(m->graph, "sq", "Split", "", 1, ti, 2, to, &nn, &err),
                     QP_OK);
    int_attr(m, "sq", "axis", 1);
    int_attr(m, "sq", "num_outputs", 2);
    rt_qdq(m, "s1", "a1", 0.02f, 0);
    rt_qdq(m, "s2", "a2", 0.02f, 0);
    rt_qdq(m, "t1", "b1", 0.02f, 0);
    rt_qdq(m, "t2", "b2", 0.04f, 0);
    const char *p1[2] = {"a1", "b2"}, *p2[2] = {"a2", "b1"}, *p3[2] = {"u", "v"};
    rt_node(m, "add1", "Add", 2, p1, "u");
    rt_node(m, "add2", "Sub", 2, p2, "v");
    rt_node(m, "mul", "Mul", 2, p3, "y");
    finish(m, "y");
    fill_x(1.5f);
    enum { NY = C / 2 * HW * HW };
    static float y_q[NY], y_fq[NY];
    struct qp_session *s;
    run(m, QP_INT8_OFF, xin, y_fq, NY, NULL);
    run(m, QP_INT8_AUTO, xin, y_q, NY, &s);
    assert_true(find(s, "xd_DQ")->fused);
    assert_non_null(strstr(find(s, "xd_DQ")->into, "Split 'sp' on int8"));
    assert_non_null(strstr(find(s, "a2_Q")->into, "Split 'sp' on int8"));
    assert_non_null(strstr(find(s, "b2_Q")->reason, "Split 'sq' runs in float: the Q after an "
                                                    "output has another scale"));
    int splits = 0;
    for (int k = 0; k < (int)s->g->n_nodes; k++) {
        const struct qp_node *n = &s->g->nodes[k];
        if (n->dead || !qp_node_is(n, "Split")) continue;
        const struct qp_node *p = &s->g->nodes[s->g->values[n->inputs[0]].producer];
        /* sp reads the int8 tensor of x's Q; sq a float one (DQ or its fake quantization) */
        assert_int_equal(qp_node_is(p, "QuantizeLinear"), strcmp(n->name, "sp") == 0);
        splits++;
    }
    assert_int_equal(splits, 2);
    qp_session_free(s);
    size_t nonzero = 0;
    for (size_t i = 0; i < NY; i++) {
        if (fabsf(y_q[i] - y_fq[i]) > 1e-6f)
            fail_msg("element %zu: int8 %g, oracle %g", i, (double)y_q[i], (double)y_fq[i]);
        nonzero += y_q[i] != 0.0f;
    }
    assert_true(nonzero > NY / 2);
    qp_model_free(m);
}

int main(void) {
    (void)insert_qdq;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_residual_block),
        cmocka_unit_test(test_qconv_sum_in_place),
        cmocka_unit_test(test_exact_vnni_path),
        cmocka_unit_test(test_exact_float_path),
        cmocka_unit_test(test_exact_avx2_path),
        cmocka_unit_test(test_maxpool_nhwc),
        cmocka_unit_test(test_path_selection),
        cmocka_unit_test(test_flow_decisions),
        cmocka_unit_test(test_gather_quantize),
        cmocka_unit_test(test_softmax_quantize),
        cmocka_unit_test(test_layernorm_quantize),
        cmocka_unit_test(test_gate_requantized),
        cmocka_unit_test(test_conv_bn),
        cmocka_unit_test(test_paddle_block),
        cmocka_unit_test(test_matmul_projection),
        cmocka_unit_test(test_matmul_gelu),
        cmocka_unit_test(test_global_avgpool_int8),
        cmocka_unit_test(test_exact_avx2_matmul),
        cmocka_unit_test(test_matmul_two_activations),
        cmocka_unit_test(test_matmul_shape_scale),
        cmocka_unit_test(test_tiny_weight_scale),
        cmocka_unit_test(test_fp16_float_out),
        cmocka_unit_test(test_fp16_widen),
        cmocka_unit_test(test_resize_moves),
        cmocka_unit_test(test_reshape_moves),
        cmocka_unit_test(test_large_conv_threads),
        cmocka_unit_test(test_conv_transpose),
        cmocka_unit_test(test_conv_transpose_nhwc),
        cmocka_unit_test(test_split_flow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
