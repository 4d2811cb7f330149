/*
 * The integer path's pointwise pass (runtime/int8_pw.c + kernels/int8_pw.c): elementwise chains
 * with their Q/DQ become one Pointwise node, whose exact program is bit-identical to the
 * node-by-node run on float32 (QP_INT8_OFF) and whose fast program (int8_pw_fast.c) stays
 * within one output step of it, with each broadcast kind: per-channel and scalar constants over
 * NCHW, a computed SE gate [N,C,1,1], a [C] constant over [N,T,C], and an output smaller than the
 * group's shape (the gathering path). A Conv's constant Mul/Add folds into the QConv instead. A
 * malformed Pointwise node is refused at session create.
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

#include "ir/ir.h"
#include "kernels/int8_pw.h"
#include "kernels/kernel.h"
#include "qplace/session.h"
#include "quant/f16.h"
#include "runtime/int8_graph.h"
#include "runtime/runtime.h"

#include "rt_testmodel.h"

#define CH 6
#define HW 9
#define NX (CH * HW * HW)
#define MO 8 /* the Conv's output channels (conv_affine_model) */

static void scalar(struct qp_model *m, const char *name, float v) {
    graph_add_init(m, m->graph, name, QP_DTYPE_FLOAT, 0, NULL, &v, sizeof v);
}

static void bin(struct qp_model *m, const char *name, const char *op, const char *a, const char *b,
                const char *out) {
    const char *in[2] = {a, b};
    rt_node(m, name, op, 2, in, out);
}

static void finish(struct qp_model *m, int n_out, const char *const *outs) {
    struct qp_error err = {0};
    for (int i = 0; i < n_out; i++)
        assert_int_equal(
            qp_graph_add_output(m->graph, qp_graph_find_value(m->graph, outs[i]), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(m->graph, &err), QP_OK);
}

/* Runs m on x (shape d) with `int8`, copies output k into y (n floats); returns the session
 * when `keep`. */
static struct qp_session *run(struct qp_model *m, int int8, const float *x, int rank,
                              const int64_t *d, size_t nx, int n_out, float **y, size_t *ny,
                              int keep) {
    struct qp_error err = {0};
    struct qp_session_options o = {.n_threads = 2, .int8 = int8};
    struct qp_session *s = NULL;
    if (qp_session_create(m, &o, 0, NULL, &s, &err)) fail_msg("session: %s", err.msg);
    struct qp_array in, out;
    assert_int_equal(qp_array_view(&in, QP_DTYPE_FLOAT, rank, d, (void *)x, nx * sizeof *x, &err),
                     QP_OK);
    if (qp_session_run(s, 1, &in, &err)) fail_msg("run (int8 %d): %s", int8, err.msg);
    for (int k = 0; k < n_out; k++) {
        assert_int_equal(qp_session_output(s, (size_t)k, &out, &err), QP_OK);
        assert_int_equal(out.dtype, QP_DTYPE_FLOAT);
        assert_int_equal(out.nbytes, ny[k] * sizeof(float));
        memcpy(y[k], out.data, out.nbytes);
    }
    if (keep) return s;
    qp_session_free(s);
    return NULL;
}

/* The Pointwise nodes' decisions: how many Q/DQ nodes went into one. */
static size_t n_into_pointwise(const struct qp_session *s) {
    const struct qp_int8_decision *d;
    size_t n = qp_session_int8_decisions(s, &d, NULL), k = 0;
    for (size_t i = 0; i < n; i++)
        k += d[i].fused && strncmp(d[i].into, "Pointwise", 9) == 0;
    return k;
}

/* The debug lines of the Pointwise kernel's prepare: how many fast programs were compiled and
 * the instructions of the last one (kernels/int8_pw_impl.h). */
static int n_fast_programs, last_fast_len;

static void pw_log(enum qp_log_level level, const char *msg, void *user) {
    (void)level, (void)user;
    const char *f = strstr(msg, "(fast program: ");
    if (!f || strncmp(msg, "Pointwise", 9) != 0) return;
    int n = atoi(f + 15);
    if (n >= 0) {
        n_fast_programs++;
        last_fast_len = n;
    }
}

/* Runs m three ways: QP_INT8_OFF (the oracle), QP_INT8_AUTO without the fast program
 * (QP_PW_FAST=0: the pass's exact program, bit for bit the oracle's on quantized outputs; a
 * float output, step[k] < 1e-3, within step[k]: a Sigmoid may differ in the last bit) and
 * QP_INT8_AUTO, whose fast program must keep every output element k within step[k] (its
 * quantization step) of the oracle. `want` Q/DQ nodes fused into Pointwise. Returns the fast
 * programs compiled. */
static int check_pass(struct qp_model *m, const float *x, int rank, const int64_t *d, size_t nx,
                      int n_out, size_t *ny, size_t want, const float *step) {
    float *off[2], *ex[2], *on[2];
    for (int k = 0; k < n_out; k++) {
        off[k] = calloc(ny[k], sizeof(float));
        ex[k] = calloc(ny[k], sizeof(float));
        on[k] = calloc(ny[k], sizeof(float));
        assert_true(off[k] && ex[k] && on[k]);
    }
    run(m, QP_INT8_OFF, x, rank, d, nx, n_out, off, ny, 0);
    setenv("QP_PW_FAST", "0", 1);
    run(m, QP_INT8_AUTO, x, rank, d, nx, n_out, ex, ny, 0);
    unsetenv("QP_PW_FAST");
    n_fast_programs = 0;
    qp_log_set_hook(pw_log, NULL);
    struct qp_session *s = run(m, QP_INT8_AUTO, x, rank, d, nx, n_out, on, ny, 1);
    qp_log_set_hook(NULL, NULL);
    const char *why = "";
    qp_session_int8_decisions(s, NULL, &why);
    assert_string_equal(why, "");
    if (n_into_pointwise(s) != want) {
        const struct qp_int8_decision *dd;
        size_t nd = qp_session_int8_decisions(s, &dd, NULL);
        for (size_t i = 0; i < nd; i++)
            print_message("%s %s: %s%s\n", dd[i].op_type, dd[i].node, dd[i].into, dd[i].reason);
        fail_msg("%zu Q/DQ nodes fused into Pointwise, expected %zu", n_into_pointwise(s), want);
    }
    for (int k = 0; k < n_out; k++) {
        for (size_t i = 0; i < ny[k]; i++) {
            int bits = step[k] >= 1e-3f; /* a float output (a Sigmoid's): within its step */
            if (bits ? memcmp(&off[k][i], &ex[k][i], sizeof(float)) != 0
                     : !(fabsf(off[k][i] - ex[k][i]) <= step[k]))
                fail_msg("output %d element %zu: %g (int8 off) vs %g (exact program)", k, i,
                         (double)off[k][i], (double)ex[k][i]);
            if (!(fabsf(off[k][i] - on[k][i]) <= step[k] * 1.0001f))
                fail_msg("output %d element %zu: %g (int8 off) vs %g (fast program)", k, i,
                         (double)off[k][i], (double)on[k][i]);
        }
        free(off[k]);
        free(ex[k]);
        free(on[k]);
    }
    qp_session_free(s);
    return n_fast_programs;
}

static float xin[NX];

static void fill(float *v, size_t n, float amp) {
    rt_rng = 11;
    for (size_t i = 0; i < n; i++)
        v[i] = amp * rt_frand();
}

/* PaddleOCR's block after a Conv, as the trt policy writes it: a LearnableAffineBlock (here a
 * Mul, per channel or `scalar_mul`, and a scalar Add) then x * Clip(x + 3, 0, 6) / 6 with Q/DQ
 * on the Mul's and the Clip's inputs, then the Q of the next Conv; x is [1, ch, hw, hw]. */
static struct qp_model *hardswish_model_of(int64_t ch, int64_t hw, int scalar_mul) {
    static struct qp_dim xd[4];
    xd[0] = (struct qp_dim){1, NULL};
    xd[1] = (struct qp_dim){ch, NULL};
    xd[2] = xd[3] = (struct qp_dim){hw, NULL};
    struct qp_model *m = model_with_x(4, xd);
    rt_qdq(m, "x", "xd", 0.05f, 3);
    int64_t cd[4] = {1, scalar_mul ? 1 : ch, 1, 1};
    rt_rng = 5;
    rt_rand_init(m, "a", 4, cd, 0.5f, 2.0f);
    scalar(m, "b", 0.25f);
    scalar(m, "three", 3.0f);
    scalar(m, "zero", 0.0f);
    scalar(m, "six", 6.0f);
    bin(m, "lab_mul", "Mul", "xd", "a", "t0");
    bin(m, "lab_add", "Add", "t0", "b", "t");
    rt_qdq(m, "t", "td", 0.04f, 0);
    bin(m, "hs_add", "Add", "t", "three", "u");
    rt_qdq(m, "u", "ud", 0.05f, 0);
    const char *ci[3] = {"ud", "zero", "six"};
    rt_node(m, "hs_clip", "Clip", 3, ci, "c");
    rt_qdq(m, "c", "cd", 6.0f / 127, 0);
    bin(m, "hs_mul", "Mul", "td", "cd", "h");
    bin(m, "hs_div", "Div", "h", "six", "hs");
    rt_qdq(m, "hs", "y", 0.03f, 0);
    const char *outs[1] = {"y"};
    finish(m, 1, outs);
    return m;
}

static struct qp_model *hardswish_model(void) {
    return hardswish_model_of(CH, HW, 0);
}

static void test_hardswish_chain(void **state) {
    (void)state;
    struct qp_model *m = hardswish_model();
    fill(xin, NX, 4.0f);
    int64_t d[4] = {1, CH, HW, HW};
    size_t ny[1] = {NX};
    float step[1] = {0.03f};
    /* every Q/DQ node: the input's and the output's pairs are fake-quantize steps too; the
     * fast program: five levels, the per-channel Mul, the product of two levels and the float
     * output's scaling (eleven instructions in the exact program) */
    assert_int_equal(check_pass(m, xin, 4, d, NX, 1, ny, 10, step), 1);
    assert_int_equal(last_fast_len, 8);
    qp_model_free(m);
}

/* Inputs the fast program does not take (NaN, infinities, beyond 2^32): their tiles run the
 * exact program, so those elements get the oracle's values (a NaN quantizes to the zero point,
 * an infinity saturates) and the other tiles still run fast. */
static void test_fast_untame_tiles(void **state) {
    (void)state;
    const int64_t ch = 3, hw = 48, n = ch * hw * hw; /* 6.75 tiles */
    float *x = malloc((size_t)n * sizeof *x);
    assert_non_null(x);
    fill(x, (size_t)n, 4.0f);
    x[5] = NAN;
    x[2000] = INFINITY;
    x[3100] = -INFINITY;
    x[5000] = -1e20f;
    struct qp_model *m = hardswish_model_of(ch, hw, 1);
    int64_t d[4] = {1, ch, hw, hw};
    size_t ny[1] = {(size_t)n};
    float step[1] = {0.03f};
    assert_int_equal(check_pass(m, x, 4, d, (size_t)n, 1, ny, 10, step), 1);
    qp_model_free(m);
    free(x);
}

/* Tensors of many tiles, on two threads (>= 32768 elements), rows that end inside a tile: the
 * per-channel Mul reads the tile's coordinates (a constant per row), the scalar one does not
 * (the whole tensor is one row and the tiles skip computing them). */
static void test_hardswish_tiles(void **state) {
    (void)state;
    const int64_t ch = 7, hw = 75, n = ch * hw * hw; /* rows of 5625: 5.5 tiles of 1024 */
    float *x = malloc((size_t)n * sizeof *x);
    assert_non_null(x);
    fill(x, (size_t)n, 4.0f);
    for (int scalar_mul = 0; scalar_mul <= 1; scalar_mul++) {
        struct qp_model *m = hardswish_model_of(ch, hw, scalar_mul);
        int64_t d[4] = {1, ch, hw, hw};
        size_t ny[1] = {(size_t)n};
        float step[1] = {0.03f};
        assert_int_equal(check_pass(m, x, 4, d, (size_t)n, 1, ny, 10, step), 1);
        /* a scalar Mul costs no instruction */
        assert_int_equal(last_fast_len, scalar_mul ? 7 : 8);
        qp_model_free(m);
    }
    free(x);
}

/* A squeeze-and-excitation gate: DQ(x) * Sigmoid(GlobalAveragePool(DQ(x))), then a Q. The gate
 * is computed at [1,C,1,1] and read per row; with the gate also a graph output the group has an
 * output smaller than its shape (the gathering path). */
static void se_model(int gate_out, struct qp_model **out) {
    static struct qp_dim xd[4] = {{1, NULL}, {CH, NULL}, {HW, NULL}, {HW, NULL}};
    struct qp_model *m = model_with_x(4, xd);
    rt_qdq(m, "x", "xd", 0.05f, 0);
    const char *gi[1] = {"xd"};
    rt_node(m, "gap", "GlobalAveragePool", 1, gi, "g");
    const char *si[1] = {"g"};
    rt_node(m, "gate", "Sigmoid", 1, si, "s");
    bin(m, "se_mul", "Mul", "xd", "s", "e");
    rt_qdq(m, "e", "y", 0.02f, 0);
    const char *outs[2] = {"y", "s"};
    finish(m, gate_out ? 2 : 1, outs);
    *out = m;
}

static void test_se_gate(void **state) {
    (void)state;
    int64_t d[4] = {1, CH, HW, HW};
    fill(xin, NX, 4.0f);
    for (int gate_out = 0; gate_out < 2; gate_out++) {
        struct qp_model *m;
        se_model(gate_out, &m);
        size_t ny[2] = {NX, CH};
        float step[2] = {0.02f, 1e-6f};
        check_pass(m, xin, 4, d, NX, 1 + gate_out, ny, 2, step);
        qp_model_free(m);
    }
}

/* An affine [C] over [N, T, C] (a LayerNorm's scale and shift): the constants vary along the
 * innermost axis, read as one vector per row. */
static void test_last_axis_affine(void **state) {
    (void)state;
    enum { T = 7, CC = 40 };
    struct qp_dim xd[3] = {{2, NULL}, {T, NULL}, {CC, NULL}};
    struct qp_model *m = model_with_x(3, xd);
    rt_qdq(m, "x", "xd", 0.05f, 0);
    int64_t cd[1] = {CC};
    rt_rng = 9;
    rt_rand_init(m, "gamma", 1, cd, -2.0f, 2.0f);
    rt_rand_init(m, "beta", 1, cd, -1.0f, 1.0f);
    bin(m, "ln_mul", "Mul", "xd", "gamma", "p");
    bin(m, "ln_add", "Add", "p", "beta", "q");
    const char *ri[1] = {"q"};
    rt_node(m, "act", "Relu", 1, ri, "r");
    rt_qdq(m, "r", "y", 0.03f, 0);
    const char *outs[1] = {"y"};
    finish(m, 1, outs);
    static float x3[2 * T * CC];
    fill(x3, 2 * T * CC, 3.0f);
    int64_t d[3] = {2, T, CC};
    size_t ny[1] = {2 * T * CC};
    float step[1] = {0.03f};
    check_pass(m, x3, 3, d, 2 * T * CC, 1, ny, 4, step);
    qp_model_free(m);
}

/* Conv -> Mul by a per-channel constant -> Add of a scalar (PaddleOCR's LearnableAffineBlock)
 * -> Relu -> Q: the constant Mul and Add fold into the QConv's channel affine map (so the
 * Pointwise pass has nothing left to do there), within one quantization step of the oracle. */
static struct qp_model *conv_affine_model(void) {
    static struct qp_dim xd[4] = {{1, NULL}, {CH, NULL}, {HW, NULL}, {HW, NULL}};
    struct qp_model *m = model_with_x(4, xd);
    rt_qdq(m, "x", "xd", 0.05f, 0);
    static int8_t w[MO * CH];
    static float ws[MO];
    int8_t wz[MO] = {0};
    for (int i = 0; i < MO * CH; i++)
        w[i] = (int8_t)((i * 37) % 255 - 127);
    for (int oc = 0; oc < MO; oc++)
        ws[oc] = 0.002f * (float)(oc + 1);
    int64_t wd[4] = {MO, CH, 1, 1}, sd[1] = {MO}, cd[4] = {1, MO, 1, 1};
    graph_add_init(m, m->graph, "w", QP_DTYPE_INT8, 4, wd, w, sizeof w);
    graph_add_init(m, m->graph, "ws", QP_DTYPE_FLOAT, 1, sd, ws, sizeof ws);
    graph_add_init(m, m->graph, "wz", QP_DTYPE_INT8, 1, sd, wz, sizeof wz);
    const char *di[3] = {"w", "ws", "wz"};
    rt_node(m, "w_DQ", "DequantizeLinear", 3, di, "wf");
    struct qp_attr *ax =
        qp_node_add_attr(m->graph, qp_graph_find_node(m->graph, "w_DQ"), "axis", QP_ATTR_INT);
    assert_non_null(ax);
    ax->i = 0;
    bin(m, "conv", "Conv", "xd", "wf", "c");
    rt_rng = 3;
    rt_rand_init(m, "a", 4, cd, 0.5f, 1.5f);
    scalar(m, "b", -0.1f);
    bin(m, "lab_mul", "Mul", "c", "a", "c1");
    bin(m, "lab_add", "Add", "b", "c1", "c2");
    const char *ri[1] = {"c2"};
    rt_node(m, "relu", "Relu", 1, ri, "r");
    rt_qdq(m, "r", "y", 0.02f, 0);
    const char *outs[1] = {"y"};
    finish(m, 1, outs);
    return m;
}

static void test_conv_affine(void **state) {
    (void)state;
    struct qp_model *m = conv_affine_model();
    fill(xin, NX, 4.0f);
    int64_t d[4] = {1, CH, HW, HW};
    size_t ny[1] = {MO * HW * HW};
    float *off = calloc(ny[0], sizeof *off), *on = calloc(ny[0], sizeof *on);
    assert_true(off && on);
    run(m, QP_INT8_OFF, xin, 4, d, NX, 1, &off, ny, 0);
    struct qp_session *s = run(m, QP_INT8_AUTO, xin, 4, d, NX, 1, &on, ny, 1);
    const struct qp_int8_decision *dec;
    size_t nd = qp_session_int8_decisions(s, &dec, NULL);
    int found = 0;
    for (size_t i = 0; i < nd; i++)
        if (strcmp(dec[i].node, "y_Q") == 0) {
            found = 1;
            assert_true(dec[i].fused);
            assert_non_null(strstr(dec[i].into, "QConv 'conv'"));
            assert_non_null(strstr(dec[i].into, "constant Mul/Add folded"));
        }
    assert_true(found);
    for (size_t i = 0; i < ny[0]; i++)
        if (fabsf(off[i] - on[i]) > 0.02f * 1.001f)
            fail_msg("element %zu: %g (int8 off) vs %g (QConv)", i, (double)off[i], (double)on[i]);
    free(off);
    free(on);
    qp_session_free(s);
    qp_model_free(m);
}

/* Conv `name` 1x1 from `x` (CH channels) to CH channels, int8 weights per channel, into out. */
static void conv1x1(struct qp_model *m, const char *name, const char *x, const char *out,
                    int seed) {
    static int8_t w[2][CH * CH];
    static float ws[2][CH];
    int8_t wz[CH] = {0};
    for (int i = 0; i < CH * CH; i++)
        w[seed][i] = (int8_t)((i * 37 + seed * 11) % 255 - 127);
    for (int oc = 0; oc < CH; oc++)
        ws[seed][oc] = 0.002f * (float)(oc + 1);
    int64_t wd[4] = {CH, CH, 1, 1}, sd[1] = {CH};
    char wn[64], sn[64], zn[64], dn[64], fn[64];
    rt_name(wn, name, "_w");
    rt_name(sn, name, "_ws");
    rt_name(zn, name, "_wz");
    rt_name(dn, name, "_wDQ");
    rt_name(fn, name, "_wf");
    graph_add_init(m, m->graph, wn, QP_DTYPE_INT8, 4, wd, w[seed], sizeof w[seed]);
    graph_add_init(m, m->graph, sn, QP_DTYPE_FLOAT, 1, sd, ws[seed], sizeof ws[seed]);
    graph_add_init(m, m->graph, zn, QP_DTYPE_INT8, 1, sd, wz, sizeof wz);
    const char *di[3] = {wn, sn, zn};
    rt_node(m, dn, "DequantizeLinear", 3, di, fn);
    struct qp_attr *ax =
        qp_node_add_attr(m->graph, qp_graph_find_node(m->graph, dn), "axis", QP_ATTR_INT);
    assert_non_null(ax);
    ax->i = 0;
    bin(m, name, "Conv", x, fn, out);
}

static int64_t attr_of(const struct qp_session *s, const char *op, const char *attr) {
    for (size_t k = 0; k < s->g->n_nodes; k++)
        if (!s->g->nodes[k].dead && strcmp(s->g->nodes[k].op_type, op) == 0)
            return qp_kattr_int(&s->g->nodes[k], attr, -1);
    return -2;
}

/* The end of an SE block into a second QConv: gate = Sigmoid(GlobalAveragePool(pooled)),
 * x * gate -> Q (scale es) -> conv2 -> Q (scale ys) = y, the graph's output. */
static void se_into_conv2(struct qp_model *m, const char *x, const char *pooled, float es,
                          float ys) {
    const char *gi[1] = {pooled};
    rt_node(m, "gap", "GlobalAveragePool", 1, gi, "g");
    const char *si[1] = {"g"};
    rt_node(m, "gate", "Sigmoid", 1, si, "sg");
    bin(m, "se_mul", "Mul", x, "sg", "e");
    rt_qdq(m, "e", "ed", es, 0);
    conv1x1(m, "conv2", "ed", "o", 1);
    rt_qdq(m, "o", "y", ys, 0);
    const char *outs[1] = {"y"};
    finish(m, 1, outs);
}

/* Runs m (input [1,CH,HW,HW]: xin) on the integer path into y (ny elements), with
 * channels-last Pointwise nodes or without (QP_INT8_NHWC_POINTWISE=0); returns the session. */
static struct qp_session *run_layout_n(struct qp_model *m, float *y, int nhwc, size_t ny) {
    int64_t d[4] = {1, CH, HW, HW};
    size_t n[1] = {ny};
    if (!nhwc) setenv("QP_INT8_NHWC_POINTWISE", "0", 1);
    struct qp_session *s = run(m, QP_INT8_AUTO, xin, 4, d, NX, 1, &y, n, 1);
    unsetenv("QP_INT8_NHWC_POINTWISE");
    return s;
}

static struct qp_session *run_layout(struct qp_model *m, float *y, int nhwc) {
    return run_layout_n(m, y, nhwc, NX);
}

/* The channels-last run's output `on` is bit for bit the channels-first one's `tr`, within one
 * output step (ys) of the oracle's `off` when given, and mostly nonzero. */
static void check_layouts(const float *on, const float *tr, const float *off, float ys) {
    size_t nonzero = 0;
    for (size_t i = 0; i < NX; i++) {
        if (memcmp(&on[i], &tr[i], sizeof on[i]) != 0)
            fail_msg("element %zu: %g channels last, %g transposed", i, (double)on[i],
                     (double)tr[i]);
        if (off && fabsf(on[i] - off[i]) > ys * 1.001f)
            fail_msg("element %zu: %g (int8) vs %g (oracle)", i, (double)on[i], (double)off[i]);
        nonzero += on[i] != 0;
    }
    assert_true(nonzero > NX / 4);
}

/* x [1,CH,HW,HW] -> Q/DQ (0.05) -> xd -> conv1 -> c, the rest for the caller to add. */
static struct qp_model *conv1_model(void) {
    static struct qp_dim xd[4] = {{1, NULL}, {CH, NULL}, {HW, NULL}, {HW, NULL}};
    struct qp_model *m = model_with_x(4, xd);
    rt_qdq(m, "x", "xd", 0.05f, 0);
    conv1x1(m, "conv1", "xd", "c", 0);
    return m;
}

/* m run on xin (uniform, 4.0 wide) three ways: the oracle into off, the integer path without
 * channels-last Pointwise nodes into tr (checked to have none), and with them into on, whose
 * session is returned for the caller's checks. */
static struct qp_session *run_three(struct qp_model *m, float *off, float *on, float *tr) {
    fill(xin, NX, 4.0f);
    int64_t d[4] = {1, CH, HW, HW};
    size_t ny[1] = {NX};
    run(m, QP_INT8_OFF, xin, 4, d, NX, 1, &off, ny, 0);
    struct qp_session *s = run_layout(m, tr, 0);
    assert_int_equal(attr_of(s, "Pointwise", "nhwc"), -1);
    qp_session_free(s);
    return run_layout(m, on, 1);
}

static int64_t node_attr(const struct qp_session *s, const char *node, const char *attr) {
    return qp_kattr_int(&s->g->nodes[qp_graph_find_node(s->g, node)], attr, 0);
}

/* An exported hard-swish with a Q/DQ inside, as PaddleOCR writes it: out = td * Clip(Q/DQ(t +
 * 3), 0, 6) / 6, td the fake-quantized t. */
static void hard_swish_qdq(struct qp_model *m, const char *t, const char *td, const char *out) {
    scalar(m, "three", 3.0f);
    scalar(m, "zero", 0.0f);
    scalar(m, "six", 6.0f);
    bin(m, "hs_add", "Add", t, "three", "u");
    rt_qdq(m, "u", "ud", 0.05f, 0);
    const char *ci[3] = {"ud", "zero", "six"};
    rt_node(m, "hs_clip", "Clip", 3, ci, "cl");
    bin(m, "hs_mul", "Mul", td, "cl", "h");
    bin(m, "hs_div", "Div", "h", "six", out);
}

/* QConv (float output) -> Pointwise (per-channel affine, HardSwish with Q/DQ inside, times an
 * SE gate [1,C,1,1] computed from the source) -> QConv: the tensors between the QConv nodes and
 * the Pointwise node stay channels last (attributes dst_nhwc, nhwc, src_nhwc), the gate is read
 * as it is, and the output is bit for bit what QP_INT8_NHWC_POINTWISE=0 (transposed at each QConv)
 * gives, and within one step of the oracle. */
static void test_nhwc_between_qconv(void **state) {
    (void)state;
    struct qp_model *m = conv1_model();
    int64_t cd[4] = {1, CH, 1, 1};
    rt_rng = 13;
    rt_rand_init(m, "a", 4, cd, 0.5f, 1.5f);
    bin(m, "lab_mul", "Mul", "c", "a", "t");
    rt_qdq(m, "t", "td", 0.04f, 0);
    hard_swish_qdq(m, "t", "td", "hs");
    se_into_conv2(m, "hs", "xd", 0.02f, 0.01f);
    static float off[NX], on[NX], tr[NX];
    struct qp_session *s = run_three(m, off, on, tr);
    assert_int_equal(attr_of(s, "Pointwise", "nhwc"), 1);
    assert_int_equal(node_attr(s, "conv1", "dst_nhwc"), 1);
    assert_int_equal(node_attr(s, "conv2", "src_nhwc"), 1);
    qp_session_free(s);
    check_layouts(on, tr, off, 0.01f);
    qp_model_free(m);
}

/* A residual Add of a hard-swish of a QConv's channels-last output (a Pointwise node: its Q/DQ
 * inside keeps it out of the QConv) and the graph's planar float input (the
 * mixed layouts of an autotune sub-model's border): the Pointwise node runs channels last with
 * one input channels first (pw_in_nhwc 0), and with 6 channels its rows of 6 elements are
 * gathered into whole tiles (kernels/int8_pw.c, PW_MIN_INNER); the output is bit for bit what
 * QP_INT8_NHWC_POINTWISE=0 gives and within one step of the oracle. */
static void test_nhwc_mixed_layout_add(void **state) {
    (void)state;
    struct qp_model *m = conv1_model();
    rt_qdq(m, "c", "cd", 0.04f, 0);
    hard_swish_qdq(m, "c", "cd", "hs");
    bin(m, "res_add", "Add", "hs", "x", "t");
    rt_qdq(m, "t", "td", 0.04f, 0);
    conv1x1(m, "conv2", "td", "o", 1);
    rt_qdq(m, "o", "y", 0.01f, 0);
    const char *outs[1] = {"y"};
    finish(m, 1, outs);
    static float off[NX], on[NX], tr[NX];
    struct qp_session *s = run_three(m, off, on, tr);
    assert_int_equal(attr_of(s, "Pointwise", "nhwc"), 1);
    int planar_in = 0;
    for (size_t k = 0; k < s->g->n_nodes; k++) {
        const int64_t *f = NULL;
        int n = !s->g->nodes[k].dead && strcmp(s->g->nodes[k].op_type, "Pointwise") == 0
                    ? qp_kattr_ints(&s->g->nodes[k], "pw_in_nhwc", &f)
                    : 0;
        for (int i = 0; i < n; i++)
            planar_in += f[i] == 0;
    }
    assert_true(planar_in > 0);
    qp_session_free(s);
    check_layouts(on, tr, off, 0.01f);
    qp_model_free(m);
}

/* An SE block's pooling of a QConv's float output: conv1 -> GlobalAveragePool -> Sigmoid, and
 * conv1 * gate -> Q -> conv2. The Pointwise node runs channels last, so conv1 writes channels
 * last and the pooling averages that layout (attribute nhwc): the output is bit for bit what
 * QP_INT8_NHWC_POINTWISE=0 gives (conv1 channels first, the planar pooling). */
static void test_nhwc_gap_after_qconv(void **state) {
    (void)state;
    struct qp_model *m = conv1_model();
    se_into_conv2(m, "c", "c", 0.002f, 0.0005f);
    fill(xin, NX, 4.0f);
    static float on[NX], tr[NX];
    struct qp_session *s = run_layout(m, on, 1);
    assert_int_equal(attr_of(s, "GlobalAveragePool", "nhwc"), 1);
    assert_int_equal(node_attr(s, "conv1", "dst_nhwc"), 1);
    qp_session_free(s);
    s = run_layout(m, tr, 0);
    assert_int_equal(attr_of(s, "GlobalAveragePool", "nhwc"), -1);
    qp_session_free(s);
    check_layouts(on, tr, NULL, 0.0f);
    qp_model_free(m);
}

/* Channels-last values of nb images of c channels over np pixels into nhwc, the same values
 * channels first into nchw: pixel 0 of channel ch is 1e17 (ch + 1), pixel `neg` its negative,
 * the others small (rt_frand), so a sum over pixels depends on the order of its additions. */
static void cancelling_pair(int nb, int c, int np, int neg, float *nhwc, float *nchw) {
    for (int i = 0; i < nb * c * np; i++) {
        int p = i / c % np, ch = i % c;
        nhwc[i] = p == 0     ? 1e17f * (float)(ch + 1)
                  : p == neg ? -1e17f * (float)(ch + 1)
                             : rt_frand();
    }
    for (int b = 0; b < nb; b++)
        for (int p = 0; p < np; p++)
            for (int ch = 0; ch < c; ch++)
                nchw[(b * c + ch) * np + p] = nhwc[(b * np + p) * c + ch];
}

/* The channels-last GlobalAveragePool kernel alone (attribute nhwc on a float model), two batch
 * items of 70 channels (a block of 64 and a rest) over 5 x 7 pixels (four groups of eight and a
 * tail), against the planar kernel on the same values transposed: the same bits. Pixels 0 and 8
 * of each channel are +-1e17 around small values, so the sum depends on the order of the
 * additions (the planar kernel's eight interleaved accumulators cancel them first). */
static void test_gap_nhwc_kernel(void **state) {
    (void)state;
    enum { NB = 2, C = 70, H = 5, W = 7, N = NB * C * H * W };
    static float nhwc[N], nchw[N], y0[NB * C], y1[NB * C];
    rt_rng = 29;
    cancelling_pair(NB, C, H * W, 8, nhwc, nchw);
    float *out[2] = {y0, y1};
    for (int k = 0; k < 2; k++) {
        struct qp_dim xd[4] = {{NB, NULL}, {C, NULL}, {H, NULL}, {W, NULL}};
        struct qp_model *m = model_with_x(4, xd);
        const char *gi[1] = {"x"};
        rt_node(m, "gap", "GlobalAveragePool", 1, gi, "y");
        if (k == 0) {
            struct qp_attr *a = qp_node_add_attr(m->graph, qp_graph_find_node(m->graph, "gap"),
                                                 "nhwc", QP_ATTR_INT);
            assert_non_null(a);
            a->i = 1;
        }
        const char *outs[1] = {"y"};
        finish(m, 1, outs);
        int64_t d[4] = {NB, C, H, W};
        size_t ny[1] = {NB * C};
        run(m, QP_INT8_OFF, k == 0 ? nhwc : nchw, 4, d, N, 1, &out[k], ny, 0);
        qp_model_free(m);
    }
    for (int i = 0; i < NB * C; i++)
        if (memcmp(&y0[i], &y1[i], sizeof y0[i]) != 0)
            fail_msg("channel %d: %.9g channels last, %.9g planar", i, (double)y0[i],
                     (double)y1[i]);
}

/* Sets int-list attribute `name` of node `node` to the n values v. */
static void set_ints(struct qp_model *m, const char *node, const char *name, int n,
                     const int64_t *v) {
    struct qp_attr *a =
        qp_node_add_attr(m->graph, qp_graph_find_node(m->graph, node), name, QP_ATTR_INTS);
    assert_non_null(a);
    int64_t *ints = model_alloc(m, (size_t)n * sizeof *ints);
    memcpy(ints, v, (size_t)n * sizeof *ints);
    a->ints = ints;
    a->n = n;
}

/* A 3x2 AveragePool (stride 3x2) of a fake-quantized hard-swish of a QConv's float output, its
 * float output the graph's (PaddleOCR rec's neck pools so): the Pointwise node runs channels
 * last, so conv1 writes channels last and the pool reads that layout (attribute nhwc) and writes
 * channels first; the output is bit for bit what QP_INT8_NHWC_POINTWISE=0 gives (conv1 and
 * the pool channels first) and within one step of the oracle. */
static void test_nhwc_avgpool_after_pointwise(void **state) {
    (void)state;
    enum { NP = CH * 3 * 4 };
    struct qp_model *m = conv1_model();
    rt_qdq(m, "c", "cd", 0.04f, 0);
    hard_swish_qdq(m, "c", "cd", "hs");
    rt_qdq(m, "hs", "hsd", 0.02f, 0);
    const char *pi[1] = {"hsd"};
    rt_node(m, "pool", "AveragePool", 1, pi, "y");
    int64_t k[2] = {3, 2};
    set_ints(m, "pool", "kernel_shape", 2, k);
    set_ints(m, "pool", "strides", 2, k);
    const char *outs[1] = {"y"};
    finish(m, 1, outs);
    fill(xin, NX, 4.0f);
    int64_t d[4] = {1, CH, HW, HW};
    size_t ny[1] = {NP};
    static float on[NP], tr[NP], off[NP];
    float *yo[1] = {off};
    run(m, QP_INT8_OFF, xin, 4, d, NX, 1, yo, ny, 0);
    struct qp_session *s = run_layout_n(m, on, 1, NP);
    assert_int_equal(attr_of(s, "AveragePool", "nhwc"), 1);
    assert_int_equal(attr_of(s, "Pointwise", "nhwc"), 1);
    assert_int_equal(node_attr(s, "conv1", "dst_nhwc"), 1);
    qp_session_free(s);
    s = run_layout_n(m, tr, 0, NP);
    assert_int_equal(attr_of(s, "AveragePool", "nhwc"), -1);
    assert_int_equal(node_attr(s, "conv1", "dst_nhwc"), 0);
    qp_session_free(s);
    size_t nonzero = 0;
    for (int i = 0; i < NP; i++) {
        if (memcmp(&on[i], &tr[i], sizeof on[i]) != 0)
            fail_msg("element %d: %g channels last, %g channels first", i, (double)on[i],
                     (double)tr[i]);
        if (fabsf(on[i] - off[i]) > 0.02f * 1.001f)
            fail_msg("element %d: %g (int8) vs %g (oracle)", i, (double)on[i], (double)off[i]);
        nonzero += on[i] != 0;
    }
    assert_true(nonzero > NP / 2);
    qp_model_free(m);
}

/* The channels-last AveragePool kernel alone (attribute nhwc on a float model) against the
 * planar kernel on the same values transposed, the same bits: two batch items of 70 channels
 * (a block of 64 and a rest), 7 x 9 pixels, a 3x2 window at stride 2 with pads 1, 0, 1, 1 (the
 * border windows clipped), count_include_pad 0 and 1. Pixels 0 and 10 of each channel are
 * +-1e17 around small values, so a sum taken in another order would differ. */
static void test_avgpool_nhwc_kernel(void **state) {
    (void)state;
    enum {
        NB = 2,
        C = 70,
        H = 7,
        W = 9,
        N = NB * C * H * W,
        OH = 4,
        OW = 5,
        NY = NB * C * OH * OW
    };
    static float nhwc[N], nchw[N], y0[NY], y1[NY];
    rt_rng = 31;
    cancelling_pair(NB, C, H * W, 10, nhwc, nchw);
    for (int cip = 0; cip < 2; cip++) {
        float *out[2] = {y0, y1};
        for (int k = 0; k < 2; k++) {
            struct qp_dim xd[4] = {{NB, NULL}, {C, NULL}, {H, NULL}, {W, NULL}};
            struct qp_model *m = model_with_x(4, xd);
            const char *pi[1] = {"x"};
            rt_node(m, "pool", "AveragePool", 1, pi, "y");
            int64_t ks[2] = {3, 2}, st[2] = {2, 2}, pads[4] = {1, 0, 1, 1};
            set_ints(m, "pool", "kernel_shape", 2, ks);
            set_ints(m, "pool", "strides", 2, st);
            set_ints(m, "pool", "pads", 4, pads);
            int id = qp_graph_find_node(m->graph, "pool");
            struct qp_attr *a = qp_node_add_attr(m->graph, id, "count_include_pad", QP_ATTR_INT);
            assert_non_null(a);
            a->i = cip;
            if (k == 0) {
                a = qp_node_add_attr(m->graph, id, "nhwc", QP_ATTR_INT);
                assert_non_null(a);
                a->i = 1;
            }
            const char *outs[1] = {"y"};
            finish(m, 1, outs);
            int64_t d[4] = {NB, C, H, W};
            size_t ny[1] = {NY};
            run(m, QP_INT8_OFF, k == 0 ? nhwc : nchw, 4, d, N, 1, &out[k], ny, 0);
            qp_model_free(m);
        }
        for (int i = 0; i < NY; i++)
            if (memcmp(&y0[i], &y1[i], sizeof y0[i]) != 0)
                fail_msg("count_include_pad %d, output %d: %.9g channels last, %.9g planar", cip, i,
                         (double)y0[i], (double)y1[i]);
    }
}

/* ---- the exact path (QP_INT8_EXACT, runtime/int8.h rt_int8_exact_rewrite) ------------------ */

/* Live nodes of the session's graph with op type `op`. */
static int n_live(const struct qp_session *s, const char *op) {
    int k = 0;
    for (size_t i = 0; i < s->g->n_nodes; i++)
        k += !s->g->nodes[i].dead && strcmp(s->g->nodes[i].op_type, op) == 0;
    return k;
}

/* Instructions with op `op` in the session's Pointwise programs. */
static int n_pw_instr(const struct qp_session *s, int op) {
    int k = 0;
    for (size_t i = 0; i < s->g->n_nodes; i++) {
        const struct qp_node *n = &s->g->nodes[i];
        if (n->dead || strcmp(n->op_type, "Pointwise") != 0) continue;
        const int64_t *prog;
        int64_t np = qp_kattr_ints(n, "pw_prog", &prog);
        for (int64_t j = 0; j + 5 <= np; j += 5)
            k += prog[j] == op;
    }
    return k;
}

/* QP_INT8_EXACT against QP_INT8_OFF on x: every output bit for bit; returns the exact session. */
static struct qp_session *check_exact(struct qp_model *m, const float *x, size_t nx, size_t ny) {
    float *off = calloc(ny, sizeof *off), *ex = calloc(ny, sizeof *ex);
    assert_true(off && ex);
    int64_t d[4] = {1, CH, HW, HW};
    run(m, QP_INT8_OFF, x, 4, d, nx, 1, &off, &ny, 0);
    struct qp_session *s = run(m, QP_INT8_EXACT, x, 4, d, nx, 1, &ex, &ny, 1);
    for (size_t i = 0; i < ny; i++)
        if (memcmp(&off[i], &ex[i], sizeof *off) != 0)
            fail_msg("element %zu: %.9g (int8 off) vs %.9g (exact)", i, (double)off[i],
                     (double)ex[i]);
    free(off);
    free(ex);
    return s;
}

/* The hard-swish chain with its Q/DQ pairs: one Pointwise pass, no Q/DQ node left, the
 * oracle's bits (input values spread over the whole int8 range, so saturation is met too). */
static void test_exact_chain(void **state) {
    (void)state;
    struct qp_model *m = hardswish_model();
    fill(xin, NX, 9.0f);
    struct qp_session *s = check_exact(m, xin, NX, NX);
    assert_int_equal(n_live(s, "Pointwise"), 1);
    assert_int_equal(n_live(s, "QuantizeLinear") + n_live(s, "DequantizeLinear"), 0);
    assert_int_equal(n_pw_instr(s, QP_PW_FQ), 5);
    qp_session_free(s);
    qp_model_free(m);
}

/* The same chain in float16 (as `quantize` writes its default output, I/O float32): the
 * roundings to float16 become instructions of the pass, where the oracle rounds, and the
 * bits are the oracle's. */
static void test_exact_f16(void **state) {
    (void)state;
    struct qp_model *m = hardswish_model();
    struct qp_error err = {0};
    if (qp_model_convert_f16(m, NULL, &err) != QP_OK) fail_msg("convert: %s", err.msg);
    fill(xin, NX, 9.0f);
    struct qp_session *s = check_exact(m, xin, NX, NX);
    assert_true(n_live(s, "Pointwise") >= 1);
    assert_true(n_pw_instr(s, QP_PW_ROUND16) >= 5);
    /* The input's Q keeps the float32 scale of its float32 input, its DQ takes the float16 one:
     * not one fake quantization, so that Q stays (the pass reads its int8 output). */
    assert_int_equal(n_live(s, "DequantizeLinear"), 0);
    assert_int_equal(n_live(s, "QuantizeLinear"), 1);
    qp_session_free(s);
    qp_model_free(m);
}

/* The chain in float16 with float32 I/O on the integer path: widened to float32, the Cast to
 * the float32 output copies nothing any more, so it goes (the Pointwise node writes the graph
 * output). Against the model as written (`off`: float16 between nodes), where the integer
 * path computes in float32, an output moves by at most two steps of 0.03 and few move. */
static void test_f16_output_cast_dropped(void **state) {
    (void)state;
    struct qp_model *m = hardswish_model();
    struct qp_error err = {0};
    if (qp_model_convert_f16(m, NULL, &err) != QP_OK) fail_msg("convert: %s", err.msg);
    fill(xin, NX, 4.0f);
    int64_t d[4] = {1, CH, HW, HW};
    size_t ny[1] = {NX};
    float *off = calloc(NX, sizeof *off), *on = calloc(NX, sizeof *on);
    assert_true(off && on);
    run(m, QP_INT8_OFF, xin, 4, d, NX, 1, &off, ny, 0);
    struct qp_session *s = run(m, QP_INT8_AUTO, xin, 4, d, NX, 1, &on, ny, 1);
    int out_cast = 0;
    for (size_t i = 0; i < s->g->n_nodes; i++) {
        const struct qp_node *n = &s->g->nodes[i];
        if (!n->dead && strcmp(n->op_type, "Cast") == 0 &&
            s->g->values[n->outputs[0]].is_graph_output)
            out_cast++;
    }
    assert_int_equal(out_cast, 0);
    size_t moved = 0;
    for (size_t i = 0; i < NX; i++) {
        moved += fabsf(off[i] - on[i]) > 0.005f; /* beyond the float16 rounding of values */
        if (!(fabsf(off[i] - on[i]) <= 0.0601f))
            fail_msg("element %zu: %g (int8 off) vs %g (int8 auto)", i, (double)off[i],
                     (double)on[i]);
    }
    assert_true(moved < NX / 20);
    free(off);
    free(on);
    qp_session_free(s);
    qp_model_free(m);
}

/* Conv -> constant Mul -> Add -> Relu: the float fusion folds the Mul and Add into the Conv
 * (in double), so the exact path leaves them to it (a Pointwise pass would round differently):
 * the Mul is still a node, and the bits are the oracle's. */
static void test_exact_leaves_conv_chain(void **state) {
    (void)state;
    struct qp_model *m = conv_affine_model();
    fill(xin, NX, 4.0f);
    struct qp_session *s = check_exact(m, xin, NX, MO * HW * HW);
    assert_true(n_live(s, "Mul") == 1 && n_live(s, "Add") == 1 && n_live(s, "Relu") == 1);
    assert_int_equal(n_live(s, "Pointwise"), 0);
    qp_session_free(s);
    qp_model_free(m);
}

/* Sigmoid is not an exact member (the engine's kernel and the pass's differ in the last bit):
 * it stays a node and the gate's Mul with its Q/DQ still runs as one pass. */
static void test_exact_skips_sigmoid(void **state) {
    (void)state;
    struct qp_model *m;
    se_model(0, &m);
    fill(xin, NX, 4.0f);
    struct qp_session *s = check_exact(m, xin, NX, NX);
    assert_int_equal(n_live(s, "Sigmoid"), 1);
    assert_true(n_live(s, "Pointwise") >= 1);
    qp_session_free(s);
    qp_model_free(m);
}

/* A one-instruction Pointwise node (FakeQuant of x, scale 0.1, int8) on 16 floats, with
 * pw_in_tame on x or not; y receives its output. */
/* Adds Pointwise node "pw" (x -> y, one float input and output, program prog of one
 * instruction, with pw_in_tame 1 on x when tame) to m; returns its index. */
static int hand_pointwise(struct qp_model *m, const int64_t *prog, int tame) {
    struct qp_error err = {0};
    const char *in[1] = {"x"}, *out = "y";
    int n;
    assert_int_equal(
        qp_graph_add_node(m->graph, "pw", "Pointwise", "qplace.int8", 1, in, 1, &out, &n, &err),
        QP_OK);
    static const int64_t zero = 0, minus1 = -1, one = 1, f32 = 1;
    struct {
        const char *name;
        const int64_t *v;
        size_t n;
    } attrs[] = {{"pw_prog", prog, 5},     {"pw_in_q", &minus1, 1}, {"pw_out", &zero, 1},
                 {"pw_out_q", &minus1, 1}, {"pw_out_dt", &f32, 1},  {"pw_in_tame", &one, 1}};
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0] - (tame ? 0 : 1); i++) {
        struct qp_attr *a = qp_node_add_attr(m->graph, n, attrs[i].name, QP_ATTR_INTS);
        assert_non_null(a);
        a->ints = attrs[i].v;
        a->n = attrs[i].n;
    }
    return n;
}

static void run_fq_node(int tame, const float *x, float *y) {
    struct qp_dim xd[1] = {{16, NULL}};
    struct qp_model *m = model_with_x(1, xd);
    static const int64_t prog[5] = {QP_PW_FQ, 0, -1, 0, 0};
    static const float par[4] = {0.1f, 0.0f, (float)QP_DTYPE_INT8, 0.0f};
    int n = hand_pointwise(m, prog, tame);
    struct qp_attr *a = qp_node_add_attr(m->graph, n, "pw_params", QP_ATTR_FLOATS);
    a->floats = par;
    a->n = 4;
    a = qp_node_add_attr(m->graph, n, "pw_regs", QP_ATTR_INT);
    a->i = 1;
    a = qp_node_add_attr(m->graph, n, "pw_fast", QP_ATTR_INT);
    a->i = 1;
    const char *outs[1] = {"y"};
    finish(m, 1, outs);
    int64_t d[1] = {16};
    size_t ny[1] = {16};
    run(m, QP_INT8_AUTO, x, 1, d, 16, 1, &y, ny, 0);
    qp_model_free(m);
}

/* pw_in_tame: the kernel takes a marked input without checking its tiles, so a NaN there goes
 * through the fast program (its level clamps to a bound), where an unmarked one sends the tile
 * to the exact program (NaN quantizes to the zero point); finite elements agree either way. */
static void test_tame_input_unchecked(void **state) {
    (void)state;
    float x[16], checked[16], unchecked[16];
    for (int i = 0; i < 16; i++)
        x[i] = 0.37f * (float)(i - 8);
    x[3] = NAN;
    run_fq_node(0, x, checked);
    run_fq_node(1, x, unchecked);
    assert_true(checked[3] == 0.0f);
    assert_true(unchecked[3] != 0.0f);
    for (int i = 0; i < 16; i++)
        if (i != 3) assert_true(fabsf(checked[i] - unchecked[i]) <= 1e-6f);
}

/* Value v (its NX elements as run: vals) stays within bound, and the Pointwise node that reads
 * it has it marked tame. */
static void check_tame(const struct qp_session *s, int v, double bound, const float *vals) {
    float mx = 0.0f;
    for (size_t i = 0; i < NX; i++)
        mx = fmaxf(mx, fabsf(vals[i]));
    assert_true(mx > 0.0f && (double)mx <= bound);
    int found = 0;
    for (size_t k = 0; k < s->g->n_nodes; k++) {
        const struct qp_node *n = &s->g->nodes[k];
        if (n->dead || strcmp(n->op_type, "Pointwise") != 0) continue;
        const int64_t *t;
        int64_t nt = qp_kattr_ints(n, "pw_in_tame", &t);
        for (int i = 0; i < n->n_inputs; i++)
            if (n->inputs[i] == v) {
                found = 1;
                assert_true(nt == n->n_inputs && t[i] == 1);
            }
    }
    assert_true(found);
}

/* The plan marks a QConv's float output tame for the Pointwise node that reads it
 * (i8g_magnitude_bound), and the bound holds: no element of that output passes it. */
static void test_tame_from_qconv(void **state) {
    (void)state;
    struct qp_model *m = conv1_model();
    rt_qdq(m, "c", "cdq", 0.04f, 0);
    hard_swish_qdq(m, "c", "cdq", "hs");
    rt_qdq(m, "hs", "y", 0.03f, 0);
    const char *outs[2] = {"y", "c"};
    finish(m, 2, outs);
    fill(xin, NX, 400.0f); /* far beyond x's range: saturated levels */
    int64_t d[4] = {1, CH, HW, HW};
    size_t ny[2] = {NX, NX};
    static float yv[NX], cv[NX];
    float *ys[2] = {yv, cv};
    struct qp_session *s = run(m, QP_INT8_AUTO, xin, 4, d, NX, 2, ys, ny, 1);
    int c = qp_graph_find_value(s->g, "c");
    double bound = i8g_magnitude_bound(s->g, c);
    assert_true(bound > 0.0 && bound < 1e6);
    check_tame(s, c, bound, cv);
    assert_true(isinf(i8g_magnitude_bound(s->g, qp_graph_find_value(s->g, "x"))));
    qp_session_free(s);
    qp_model_free(m);
}

/* Through a Pointwise node: a squeeze-excitation Mul reads the hard-swish's float output (its
 * gate comes from that output, so it is a node of its own); the plan bounds that output by the
 * hard-swish's program (its FakeQuants) and marks it tame too, and the bound holds. */
static void test_tame_through_pointwise(void **state) {
    (void)state;
    struct qp_model *m = conv1_model();
    rt_qdq(m, "c", "cdq", 0.04f, 0);
    hard_swish_qdq(m, "c", "cdq", "hs");
    const char *gi[1] = {"hs"};
    rt_node(m, "gap", "GlobalAveragePool", 1, gi, "g");
    const char *si[1] = {"g"};
    rt_node(m, "gate", "Sigmoid", 1, si, "sg");
    bin(m, "se_mul", "Mul", "hs", "sg", "e");
    rt_qdq(m, "e", "y", 0.01f, 0);
    const char *outs[2] = {"y", "hs"};
    finish(m, 2, outs);
    fill(xin, NX, 400.0f);
    int64_t d[4] = {1, CH, HW, HW};
    size_t ny[2] = {NX, NX};
    static float yv[NX], hv[NX];
    float *ys[2] = {yv, hv};
    struct qp_session *s = run(m, QP_INT8_AUTO, xin, 4, d, NX, 2, ys, ny, 1);
    int hs = qp_graph_find_value(s->g, "hs");
    double bound = i8g_magnitude_bound(s->g, hs);
    assert_true(bound < 1e6);
    check_tame(s, hs, bound, hv);
    qp_session_free(s);
    qp_model_free(m);
}

/* The bound of a hand-written Pointwise node's output on the graph alone (no session): x read as
 * int8 (scale 0.5: 127.5) times a constant 10000, then divided by a constant; a float output
 * keeps the bound, a float16 one past 65504 has none, and a Div by a computed value has none. */
static void test_bound_of_program(void **state) {
    (void)state;
    for (int c = 0; c < 3; c++) {
        struct qp_dim xd[1] = {{4, NULL}};
        struct qp_model *m = model_with_x(1, xd);
        static const float k[1] = {10000.0f}, dv[1] = {4.0f};
        int64_t one = 1;
        graph_add_init(m, m->graph, "k", QP_DTYPE_FLOAT, 1, &one, k, sizeof k);
        graph_add_init(m, m->graph, "dv", QP_DTYPE_FLOAT, 1, &one, dv, sizeof dv);
        struct qp_error err = {0};
        const char *in[3] = {"x", "k", c == 2 ? "x" : "dv"}, *out = "y";
        int n;
        assert_int_equal(
            qp_graph_add_node(m->graph, "pw", "Pointwise", "qplace.int8", 3, in, 1, &out, &n, &err),
            QP_OK);
        static const int64_t prog[10] = {QP_PW_MUL, 0, -1, -2, -1, QP_PW_DIV, 0, 0, -3, -1};
        static const int64_t inq[3] = {0, -1, -1}, zero = 0, minus1 = -1, f32 = 1, f16 = 10;
        static const float par[2] = {0.5f, 0.0f};
        struct {
            const char *name;
            const int64_t *v;
            size_t n;
        } attrs[] = {{"pw_prog", prog, 10},
                     {"pw_in_q", inq, 3},
                     {"pw_out", &zero, 1},
                     {"pw_out_q", &minus1, 1},
                     {"pw_out_dt", c == 1 ? &f16 : &f32, 1}};
        for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
            struct qp_attr *a = qp_node_add_attr(m->graph, n, attrs[i].name, QP_ATTR_INTS);
            a->ints = attrs[i].v;
            a->n = attrs[i].n;
        }
        struct qp_attr *a = qp_node_add_attr(m->graph, n, "pw_params", QP_ATTR_FLOATS);
        a->floats = par;
        a->n = 2;
        a = qp_node_add_attr(m->graph, n, "pw_regs", QP_ATTR_INT);
        a->i = 1;
        double b = i8g_magnitude_bound(m->graph, qp_graph_find_value(m->graph, "y"));
        if (c == 0)
            assert_true(fabs(b - 127.5 * 10000.0 / 4.0) < 1e-6);
        else
            assert_true(isinf(b));
        qp_model_free(m);
    }
}

/* A Pointwise node written by hand with an instruction that reads an undefined register: the
 * session is refused with a message naming the node and the instruction. */
static void test_bad_program(void **state) {
    (void)state;
    struct qp_dim xd[2] = {{4, NULL}, {4, NULL}};
    struct qp_model *m = model_with_x(2, xd);
    struct qp_error err = {0};
    static const int64_t prog[5] = {2 /* MUL */, 0, 3 /* register 3: undefined */, -1, -1};
    int n = hand_pointwise(m, prog, 0);
    struct qp_attr *r = qp_node_add_attr(m->graph, n, "pw_regs", QP_ATTR_INT);
    r->i = 4;
    const char *outs[1] = {"y"};
    finish(m, 1, outs);
    struct qp_session_options so = {.n_threads = 1};
    struct qp_session *s = NULL;
    assert_int_not_equal(qp_session_create(m, &so, 0, NULL, &s, &err), QP_OK);
    assert_null(s);
    assert_non_null(strstr(err.msg, "pw"));
    assert_non_null(strstr(err.msg, "undefined"));
    qp_model_free(m);
}

int main(void) {
    (void)insert_qdq;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hardswish_chain),
        cmocka_unit_test(test_hardswish_tiles),
        cmocka_unit_test(test_fast_untame_tiles),
        cmocka_unit_test(test_tame_input_unchecked),
        cmocka_unit_test(test_tame_from_qconv),
        cmocka_unit_test(test_tame_through_pointwise),
        cmocka_unit_test(test_bound_of_program),
        cmocka_unit_test(test_se_gate),
        cmocka_unit_test(test_last_axis_affine),
        cmocka_unit_test(test_conv_affine),
        cmocka_unit_test(test_bad_program),
        cmocka_unit_test(test_nhwc_between_qconv),
        cmocka_unit_test(test_nhwc_mixed_layout_add),
        cmocka_unit_test(test_nhwc_gap_after_qconv),
        cmocka_unit_test(test_gap_nhwc_kernel),
        cmocka_unit_test(test_nhwc_avgpool_after_pointwise),
        cmocka_unit_test(test_avgpool_nhwc_kernel),
        cmocka_unit_test(test_exact_chain),
        cmocka_unit_test(test_exact_f16),
        cmocka_unit_test(test_f16_output_cast_dropped),
        cmocka_unit_test(test_exact_leaves_conv_chain),
        cmocka_unit_test(test_exact_skips_sigmoid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
