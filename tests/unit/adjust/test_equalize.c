/*
 * Equalization folded into the weights (src/adjust/equalize.h), on hand-built graphs run in
 * the engine:
 * - CLE on Conv -> Relu -> Conv with badly balanced channels: the float outputs are those of the
 *   original model (within float rounding), each channel's weight ranges are balanced
 *   (r1_c / s_c == r2_c * s_c), and the int8 fake-quantized output (per-channel weights,
 *   per-tensor activation) is closer to the float one than without;
 * - Conv -> BatchNormalization -> Relu -> Conv (the BN's scale and bias rescaled, Conv1 not);
 * - Conv -> HardSwish -> Conv, Conv -> Clip(0, 6) -> Conv and a decomposed HardSwish are skipped
 *   with the op and reason;
 * - a depthwise Conv2 (group = channels, two outputs per channel);
 * - SmoothQuant on LayerNormalization -> MatMul and on the decomposed form -> Gemm: float output
 *   unchanged, the activation's outlier channel moved into the weights; skipped (with the
 *   reason) when the LN output also feeds a residual Add;
 * - a weight shared with a node outside the pair is copied, the other reader keeps the original;
 * - usage errors.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../quant/qgraph.h"

#include "adjust/equalize.h"
#include "calib/provider.h"
#include "core/arena.h"
#include "ir/ir.h"
#include "qplace/array.h"
#include "qplace/model.h"
#include "qplace/session.h"

static const struct qp_tensor *init_of(const struct qp_model *m, const char *node, int input) {
    const struct qp_graph *g = m->graph;
    int n = qp_graph_find_node(g, node);
    assert_true(n >= 0);
    int v = g->nodes[n].inputs[input];
    assert_true(g->values[v].initializer >= 0);
    return &g->inits[g->values[v].initializer];
}

static float at(const struct qp_tensor *t, size_t i) {
    float f;
    memcpy(&f, (const unsigned char *)t->data + 4 * i, 4);
    return f;
}

/* Deterministic pseudo-random values in [-1, 1). */
static float rnd(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

enum { C0 = 3, C = 4, H = 6 };
/* Conv1 output-channel magnitudes and Conv2 input-channel magnitudes: badly balanced. */
static const float K1[C] = {0.01f, 1.0f, 8.0f, 0.1f};
static const float K2[C] = {4.0f, 0.25f, 0.05f, 1.0f};

/* x[1,3,6,6] -> conv1 (3x3, C out, bias) -> [bn] -> act (op, or none) -> conv2 -> y.
 * conv2: 1x1 with 2 outputs (dw 0), or depthwise 3x3 (group C, 2 outputs per channel). */
static struct qp_model *conv_pair(const char *act, int bn, int dw) {
    struct qp_model *m = qp_model_create();
    assert_non_null(m);
    qg_set_opset(m, 19);
    qg_shape(m, "x", QP_DTYPE_FLOAT, 4, QG_DIMS(1, C0, H, H));
    qg_input(m, "x");
    uint32_t s = 7;
    float w1[C * C0 * 9], b1[C], w2[2 * C * 9], b2[2 * C];
    for (int c = 0; c < C; c++) {
        for (int k = 0; k < C0 * 9; k++)
            w1[c * C0 * 9 + k] = K1[c] * rnd(&s);
        b1[c] = 0.5f * K1[c] * rnd(&s);
    }
    int m2 = dw ? 2 * C : 2, cg = dw ? 1 : C, kk = dw ? 9 : 1;
    for (int o = 0; o < m2; o++)
        for (int l = 0; l < cg; l++)
            for (int k = 0; k < kk; k++)
                w2[(o * cg + l) * kk + k] = K2[dw ? o / 2 : l] * rnd(&s);
    for (int o = 0; o < m2; o++)
        b2[o] = 0.1f * rnd(&s);
    qg_init_data(m, "W1", 4, QG_DIMS(C, C0, 3, 3), w1);
    qg_init_data(m, "B1", 1, QG_DIMS(C), b1);
    qg_init_data(m, "W2", 4, QG_DIMS(m2, cg, kk == 9 ? 3 : 1, kk == 9 ? 3 : 1), w2);
    qg_init_data(m, "B2", 1, QG_DIMS(m2), b2);
    qg_node(m, "conv1", "Conv", "x,W1,B1", "c1");
    const char *cur = "c1";
    if (bn) {
        float sc[C] = {2.0f, -0.5f, 0.1f, 3.0f}, bb[C] = {0.1f, 0.2f, -0.3f, 0.05f};
        float mean[C] = {0.01f, -0.02f, 0.5f, 0.0f}, var[C] = {0.5f, 2.0f, 30.0f, 0.01f};
        qg_init_data(m, "bn_s", 1, QG_DIMS(C), sc);
        qg_init_data(m, "bn_b", 1, QG_DIMS(C), bb);
        qg_init_data(m, "bn_m", 1, QG_DIMS(C), mean);
        qg_init_data(m, "bn_v", 1, QG_DIMS(C), var);
        qg_node(m, "bn", "BatchNormalization", "c1,bn_s,bn_b,bn_m,bn_v", "n1");
        cur = "n1";
    }
    char ins[64];
    if (act) {
        if (strcmp(act, "Clip") == 0) {
            qg_init_data(m, "lo", 0, NULL, (const float[]){0.0f});
            qg_init_data(m, "hi", 0, NULL, (const float[]){6.0f});
            snprintf(ins, sizeof ins, "%s,lo,hi", cur);
        } else {
            snprintf(ins, sizeof ins, "%s", cur);
        }
        qg_node(m, "act", act, ins, "a1");
        cur = "a1";
    }
    snprintf(ins, sizeof ins, "%s,W2,B2", cur);
    int c2 = qg_node(m, "conv2", "Conv", ins, "y");
    if (dw) qg_attr_i(m, c2, "group", C);
    qg_output(m, "y");
    qg_sort(m);
    return m;
}

static int observe(const char *t, const char *nd, const struct qp_array *v, void *u) {
    (void)t;
    (void)nd;
    float *amax = u;
    const float *x = v->data;
    for (size_t i = 0; i < v->nbytes / 4; i++)
        *amax = fmaxf(*amax, fabsf(x[i]));
    return 0;
}

/* The model's output for input x (copied into out, n floats). With `q`: int8 fake quantization
 * of every Conv weight per output channel (absmax / 127) and of conv2's input per tensor (its
 * float amax over this input). */
static size_t run(const struct qp_model *m, const float *x, size_t nx, const int64_t *xdims,
                  int xrank, int q, float *out, size_t cap) {
    struct qp_error err = {0};
    struct qp_session *s = NULL;
    struct qp_session_options so = {.n_threads = 1, .no_fusion = 1};
    assert_int_equal(qp_session_create(m, &so, 0, NULL, &s, &err), QP_OK);
    struct qp_array in;
    assert_int_equal(qp_array_alloc(&in, QP_DTYPE_FLOAT, xrank, xdims, &err), QP_OK);
    memcpy(in.data, x, nx * 4);
    if (q) {
        const struct qp_graph *g = m->graph;
        int c2 = qp_graph_find_node(g, "conv2");
        const char *a = g->values[g->nodes[c2].inputs[0]].name;
        /* amax of conv2's input from a float run with an observer. */
        struct qp_session *f = NULL;
        assert_int_equal(qp_session_create(m, &so, 0, NULL, &f, &err), QP_OK);
        assert_int_equal(qp_session_set_observed(f, 1, &a, &err), QP_OK);
        float amax = 0;
        qp_session_set_observer(f, observe, &amax);
        assert_int_equal(qp_session_run(f, 1, &in, &err), QP_OK);
        qp_session_free(f);
        static float sw1[64], sw2[64], sa;
        struct qp_overlay ov[3];
        const char *names[2] = {"conv1", "conv2"};
        float *sws[2] = {sw1, sw2};
        for (int k = 0; k < 2; k++) {
            const struct qp_tensor *w = init_of(m, names[k], 1);
            size_t per = (size_t)(w->numel / (uint64_t)w->dims[0]);
            for (int64_t o = 0; o < w->dims[0]; o++) {
                float mx = 0;
                for (size_t e = 0; e < per; e++)
                    mx = fmaxf(mx, fabsf(at(w, (size_t)o * per + e)));
                sws[k][o] = mx > 0 ? mx / 127.0f : 1.0f;
            }
            ov[k] = (struct qp_overlay){.node = names[k],
                                        .input = 1,
                                        .qtype = QP_DTYPE_INT8,
                                        .axis = 0,
                                        .n_params = (size_t)w->dims[0],
                                        .scale = sws[k]};
        }
        sa = amax / 127.0f;
        ov[2] = (struct qp_overlay){
            .node = "conv2", .input = 0, .qtype = QP_DTYPE_INT8, .n_params = 1, .scale = &sa};
        assert_int_equal(qp_session_set_overlays(s, 3, ov, &err), QP_OK);
    }
    assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
    struct qp_array y;
    assert_int_equal(qp_session_output(s, 0, &y, &err), QP_OK);
    size_t n = y.nbytes / 4;
    assert_true(n <= cap);
    memcpy(out, y.data, y.nbytes);
    qp_array_release(&in);
    qp_session_free(s);
    return n;
}

/* |a - b| <= 1e-5 * max|b| for every element. */
static void assert_same(const float *a, const float *b, size_t n) {
    float mx = 0;
    for (size_t i = 0; i < n; i++)
        mx = fmaxf(mx, fabsf(b[i]));
    assert_true(mx > 0);
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(a[i] - b[i]) <= 1e-5f * mx))
            fail_msg("element %zu: %g after equalization, %g before", i, a[i], b[i]);
}

static double sq_err(const float *a, const float *b, size_t n) {
    double e = 0;
    for (size_t i = 0; i < n; i++)
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return e;
}

static struct qp_model *equalized(const struct qp_model *m, unsigned methods,
                                  struct qp_provider *data, struct qp_equalize_report **rep) {
    struct qp_error err = {0};
    struct qp_model *e = NULL;
    assert_int_equal(qp_model_clone(m, &e, &err), QP_OK);
    struct qp_equalize_options o;
    qp_equalize_options_default(&o);
    o.methods = methods;
    o.n_threads = 1;
    struct qp_equalize_plan *plan = NULL;
    if (qp_equalize_plan(m, data, &o, &plan, rep, &err) != QP_OK) fail_msg("%s", err.msg);
    if (qp_equalize_apply(plan, e, &err) != QP_OK) fail_msg("%s", err.msg);
    qp_equalize_plan_free(plan);
    return e;
}

static float xin[C0 * H * H];

static void fill_x(void) {
    uint32_t s = 99;
    for (size_t i = 0; i < C0 * H * H; i++)
        xin[i] = rnd(&s);
}

/* r1_c (Conv1 row c absmax, times |BN scale / sqrt(var + eps)|) and r2_c (the absmax of the
 * Conv2 weights reading channel c). */
static void ranges(const struct qp_model *m, int bn, int dw, float *r1, float *r2) {
    const struct qp_tensor *w1 = init_of(m, "conv1", 1), *w2 = init_of(m, "conv2", 1);
    size_t per = C0 * 9;
    for (int c = 0; c < C; c++) {
        r1[c] = r2[c] = 0;
        for (size_t e = 0; e < per; e++)
            r1[c] = fmaxf(r1[c], fabsf(at(w1, c * per + e)));
        if (bn) {
            const struct qp_tensor *s = init_of(m, "bn", 1), *v = init_of(m, "bn", 4);
            r1[c] *= fabsf(at(s, (size_t)c)) / sqrtf(at(v, (size_t)c) + 1e-5f);
        }
    }
    if (dw) {
        for (int o = 0; o < 2 * C; o++)
            for (int k = 0; k < 9; k++)
                r2[o / 2] = fmaxf(r2[o / 2], fabsf(at(w2, (size_t)o * 9 + k)));
    } else {
        for (int o = 0; o < 2; o++)
            for (int c = 0; c < C; c++)
                r2[c] = fmaxf(r2[c], fabsf(at(w2, (size_t)o * C + c)));
    }
}

static void check_cle(const char *act, int bn, int dw) {
    fill_x();
    struct qp_model *m = conv_pair(act, bn, dw);
    struct qp_equalize_report *rep = NULL;
    struct qp_model *e = equalized(m, QP_EQUALIZE_CLE, NULL, &rep);
    assert_int_equal(rep->n_cle_pairs, 1);
    assert_int_equal(rep->n_cle_skipped, 0);
    float y0[256], y1[256], q0[256], q1[256];
    const int64_t *xd = QG_DIMS(1, C0, H, H);
    size_t n = run(m, xin, C0 * H * H, xd, 4, 0, y0, 256);
    run(e, xin, C0 * H * H, xd, 4, 0, y1, 256);
    assert_same(y1, y0, n);
    /* Balanced: before, r1/r2 spans orders of magnitude; after, equal per channel. */
    float r1[C], r2[C], o1[C], o2[C];
    ranges(m, bn, dw, o1, o2);
    ranges(e, bn, dw, r1, r2);
    for (int c = 0; c < C; c++) {
        if (!(fabsf(r1[c] - r2[c]) <= 1e-4f * r1[c]))
            fail_msg("channel %d: r1 %g, r2 %g after equalization (before %g, %g)", c, r1[c], r2[c],
                     o1[c], o2[c]);
        /* s_c = sqrt(r1/r2): both become sqrt(r1 r2). */
        float want = sqrtf(o1[c] * o2[c]);
        assert_true(fabsf(r1[c] - want) <= 1e-4f * want);
    }
    if (bn) {
        /* The BN absorbs the scale exactly; Conv1 keeps its weights. */
        const struct qp_tensor *a = init_of(m, "conv1", 1), *b = init_of(e, "conv1", 1);
        assert_memory_equal(a->data, b->data, a->nbytes);
    }
    /* int8 fake quantization drifts less after. */
    run(m, xin, C0 * H * H, xd, 4, 1, q0, 256);
    run(e, xin, C0 * H * H, xd, 4, 1, q1, 256);
    double e0 = sq_err(q0, y0, n), e1 = sq_err(q1, y0, n);
    if (!(e1 < 0.5 * e0)) fail_msg("int8 error %g after equalization, %g before", e1, e0);
    qp_equalize_report_free(rep);
    qp_model_free(e);
    qp_model_free(m);
}

static void test_cle_relu(void **state) {
    (void)state;
    check_cle("Relu", 0, 0);
}

static void test_cle_bn(void **state) {
    (void)state;
    check_cle("Relu", 1, 0);
}

static void test_cle_depthwise(void **state) {
    (void)state;
    check_cle("Relu", 0, 1);
}

static void test_cle_no_activation(void **state) {
    (void)state;
    check_cle(NULL, 0, 0);
}

/* HardSwish and Clip(0, 6) do not commute with a per-channel scale: skipped, said why, and the
 * weights stay bit for bit. */
static void test_cle_skipped(void **state) {
    (void)state;
    const char *acts[] = {"HardSwish", "Clip"};
    for (int k = 0; k < 2; k++) {
        struct qp_model *m = conv_pair(acts[k], 0, 0);
        struct qp_equalize_report *rep = NULL;
        struct qp_model *e = equalized(m, QP_EQUALIZE_CLE, NULL, &rep);
        assert_int_equal(rep->n_cle_pairs, 0);
        assert_int_equal(rep->n_cle_skipped, 1);
        assert_int_equal(rep->n_skips, 1);
        assert_string_equal(rep->skips[0].method, "cle");
        assert_string_equal(rep->skips[0].node, "conv1");
        if (!strstr(rep->skips[0].reason, acts[k]) || !strstr(rep->skips[0].reason, "commute"))
            fail_msg("reason: %s", rep->skips[0].reason);
        const char *nodes[] = {"conv1", "conv2"};
        for (int i = 0; i < 2; i++) {
            const struct qp_tensor *a = init_of(m, nodes[i], 1), *b = init_of(e, nodes[i], 1);
            assert_memory_equal(a->data, b->data, a->nbytes);
        }
        qp_equalize_report_free(rep);
        qp_model_free(e);
        qp_model_free(m);
    }
}

/* A decomposed HardSwish (y * Clip(y + 3, 0, 6) / 6: Conv1's output read twice) is skipped with
 * the reason too. */
static void test_cle_decomposed_hardswish_skipped(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    assert_non_null(m);
    qg_set_opset(m, 19);
    qg_shape(m, "x", QP_DTYPE_FLOAT, 4, QG_DIMS(1, 2, 3, 3));
    qg_input(m, "x");
    qg_init_data(m, "W1", 4, QG_DIMS(2, 2, 1, 1), (const float[]){1, 2, 3, 4});
    qg_init_data(m, "W2", 4, QG_DIMS(2, 2, 1, 1), (const float[]){1, 2, 3, 4});
    qg_init_data(m, "three", 0, NULL, (const float[]){3.0f});
    qg_init_data(m, "zero", 0, NULL, (const float[]){0.0f});
    qg_init_data(m, "six", 0, NULL, (const float[]){6.0f});
    qg_node(m, "conv1", "Conv", "x,W1", "y");
    qg_node(m, "add3", "Add", "y,three", "y3");
    qg_node(m, "clip", "Clip", "y3,zero,six", "c");
    qg_node(m, "mul", "Mul", "y,c", "yc");
    qg_node(m, "div", "Div", "yc,six", "h");
    qg_node(m, "conv2", "Conv", "h,W2", "out");
    qg_output(m, "out");
    qg_sort(m);
    struct qp_equalize_report *rep = NULL;
    struct qp_model *e = equalized(m, QP_EQUALIZE_CLE, NULL, &rep);
    assert_int_equal(rep->n_cle_pairs, 0);
    assert_int_equal(rep->n_cle_skipped, 1);
    assert_string_equal(rep->skips[0].node, "conv1");
    if (!strstr(rep->skips[0].reason, "2 readers") || !strstr(rep->skips[0].reason, "'conv2'"))
        fail_msg("reason: %s", rep->skips[0].reason);
    qp_equalize_report_free(rep);
    qp_model_free(e);
    qp_model_free(m);
}

/* W2 is also read by conv3 (outside the pair): conv2 gets a copy, conv3 keeps the original. */
static void test_cle_shared_weight_copied(void **state) {
    (void)state;
    fill_x();
    struct qp_model *m = conv_pair("Relu", 0, 0);
    qg_init_data(m, "W3", 4, QG_DIMS(C, C0, 1, 1),
                 (const float[C * C0]){1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
    qg_node(m, "conv0", "Conv", "x,W3", "z0");
    qg_node(m, "sig", "Sigmoid", "z0", "z");
    qg_node(m, "conv3", "Conv", "z,W2", "y3");
    qg_output(m, "y3");
    qg_sort(m);
    struct qp_equalize_report *rep = NULL;
    struct qp_model *e = equalized(m, QP_EQUALIZE_CLE, NULL, &rep);
    assert_int_equal(rep->n_cle_pairs, 1);
    assert_int_equal(rep->n_cle_skipped, 1); /* conv0 -> Sigmoid -> conv3 */
    const struct qp_graph *g = e->graph;
    int c2 = qp_graph_find_node(g, "conv2"), c3 = qp_graph_find_node(g, "conv3");
    assert_string_equal(g->values[g->nodes[c3].inputs[1]].name, "W2");
    assert_string_not_equal(g->values[g->nodes[c2].inputs[1]].name, "W2");
    assert_memory_equal(init_of(m, "conv3", 1)->data, init_of(e, "conv3", 1)->data, 2 * C * 4);
    float y0[256], y1[256];
    const int64_t *xd = QG_DIMS(1, C0, H, H);
    size_t n = run(m, xin, C0 * H * H, xd, 4, 0, y0, 256);
    run(e, xin, C0 * H * H, xd, 4, 0, y1, 256);
    assert_same(y1, y0, n);
    qp_equalize_report_free(rep);
    qp_model_free(e);
    qp_model_free(m);
}

/* ---- SmoothQuant -------------------------------------------------------------------------- */

enum { T = 6, D = 8, N = 5 };
static float sq_x[2][T * D];

static enum qp_status sq_batch(void *user, uint64_t index, struct qp_array *inputs,
                               struct qp_error *err) {
    (void)user;
    return qp_array_view(&inputs[0], QP_DTYPE_FLOAT, 3, QG_DIMS(1, T, D), sq_x[index],
                         sizeof sq_x[0], err);
}

/* x[1,T,D] (channel 3 an outlier ~50x) -> LN (LayerNormalization or decomposed) -> MatMul
 * (W[D,N]) or Gemm (transB, on x reshaped: here MatMul for the node, Gemm for the decomposed
 * form's second consumer) -> y; `residual`: the LN output also feeds an Add. */
static struct qp_model *ln_model(int decomposed, int residual) {
    struct qp_model *m = qp_model_create();
    assert_non_null(m);
    qg_set_opset(m, 17);
    qg_shape(m, "x", QP_DTYPE_FLOAT, 3, QG_DIMS(1, T, D));
    qg_input(m, "x");
    uint32_t s = 3;
    float gamma[D], beta[D], w[D * N], w2[N * D];
    for (int j = 0; j < D; j++) {
        gamma[j] = j == 3 ? 40.0f : 1.0f + 0.2f * rnd(&s);
        beta[j] = 0.3f * rnd(&s);
    }
    for (int i = 0; i < D * N; i++)
        w[i] = rnd(&s);
    for (int i = 0; i < N * D; i++)
        w2[i] = 0.5f * rnd(&s);
    qg_init_data(m, "gamma", 1, QG_DIMS(D), gamma);
    qg_init_data(m, "beta", 1, QG_DIMS(D), beta);
    qg_init_data(m, "W", 2, QG_DIMS(D, N), w);
    if (!decomposed) {
        qg_node(m, "ln", "LayerNormalization", "x,gamma,beta", "h");
        qg_node(m, "mm", "MatMul", "h,W", "y");
        qg_node(m, "shape", "Shape", "h", "hs"); /* reads only dims: no obstacle */
        qg_output(m, "hs");
    } else {
        qg_init_data(m, "two", 0, NULL, (const float[]){2.0f});
        qg_init_data(m, "eps", 0, NULL, (const float[]){1e-5f});
        int r1 = qg_node(m, "rm1", "ReduceMean", "x", "mu");
        int r2 = qg_node(m, "rm2", "ReduceMean", "sq", "var");
        for (int k = 0; k < 2; k++) {
            struct qp_attr *a = qp_node_add_attr(m->graph, k ? r2 : r1, "axes", QP_ATTR_INTS);
            int64_t *ax = qp_arena_calloc(m->arena, 1, sizeof *ax);
            ax[0] = -1;
            a->ints = ax;
            a->n = 1;
        }
        qg_node(m, "sub", "Sub", "x,mu", "d");
        qg_node(m, "pow", "Pow", "d,two", "sq");
        qg_node(m, "addeps", "Add", "var,eps", "ve");
        qg_node(m, "sqrt", "Sqrt", "ve", "sd");
        qg_node(m, "div", "Div", "d,sd", "xh");
        qg_node(m, "mulg", "Mul", "gamma,xh", "xg");
        qg_node(m, "addb", "Add", "xg,beta", "h");
        qg_node(m, "mm", "MatMul", "h,W", "y");
        /* A second consumer: Gemm with transB on the 2-D view is not possible on a 3-D tensor,
         * so a second MatMul reads the same LN output. */
        qg_init_data(m, "W2", 2, QG_DIMS(D, N), w2);
        qg_node(m, "mm2", "MatMul", "h,W2", "y2");
    }
    qg_output(m, "y");
    if (decomposed) qg_output(m, "y2");
    if (residual) {
        qg_node(m, "res", "Add", "x,h", "r");
        qg_output(m, "r");
    }
    qg_sort(m);
    return m;
}

static void fill_sq(void) {
    uint32_t s = 11;
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < T * D; i++)
            sq_x[b][i] = rnd(&s) * (i % D == 3 ? 50.0f : 1.0f);
}

static void check_sq(int decomposed) {
    fill_sq();
    struct qp_error err = {0};
    struct qp_provider *p = NULL;
    const char *names[] = {"x"};
    assert_int_equal(qp_provider_callback_create(names, 1, 2, sq_batch, NULL, &p, &err), QP_OK);
    struct qp_model *m = ln_model(decomposed, 0);
    struct qp_equalize_report *rep = NULL;
    struct qp_model *e = equalized(m, QP_EQUALIZE_ALL, p, &rep);
    assert_int_equal(rep->n_smoothquant_pairs, 1);
    assert_int_equal(rep->n_smoothquant_skipped, 0);
    assert_int_equal(rep->n_cle_pairs, 0);
    const int64_t *xd = QG_DIMS(1, T, D);
    for (int b = 0; b < 2; b++) {
        float y0[T * N], y1[T * N];
        size_t n = run(m, sq_x[b], T * D, xd, 3, 0, y0, T * N);
        run(e, sq_x[b], T * D, xd, 3, 0, y1, T * N);
        assert_same(y1, y0, n);
    }
    /* The outlier channel's gamma shrinks the most, and its weight row grows by the same s. */
    const char *gnode = decomposed ? "mulg" : "ln";
    int gslot = decomposed ? 0 : 1;
    const struct qp_tensor *g0 = init_of(m, gnode, gslot), *g1 = init_of(e, gnode, gslot);
    const struct qp_tensor *w0 = init_of(m, "mm", 1), *w1 = init_of(e, "mm", 1);
    float s3 = at(g0, 3) / at(g1, 3);
    for (int j = 0; j < D; j++) {
        float sj = at(g0, (size_t)j) / at(g1, (size_t)j);
        assert_true(sj > 0);
        if (j != 3) assert_true(sj < s3);
        for (int k = 0; k < N; k++) {
            float want = at(w0, (size_t)(j * N + k)) * sj;
            assert_true(fabsf(at(w1, (size_t)(j * N + k)) - want) <= 1e-5f * fabsf(want) + 1e-7f);
        }
    }
    assert_true(s3 > 2.0f);
    qp_equalize_report_free(rep);
    qp_model_free(e);
    qp_model_free(m);
    qp_provider_free(p);
}

static void test_smoothquant_layernorm(void **state) {
    (void)state;
    check_sq(0);
}

static void test_smoothquant_decomposed(void **state) {
    (void)state;
    check_sq(1);
}

static void test_smoothquant_residual_skipped(void **state) {
    (void)state;
    fill_sq();
    struct qp_error err = {0};
    struct qp_provider *p = NULL;
    const char *names[] = {"x"};
    assert_int_equal(qp_provider_callback_create(names, 1, 2, sq_batch, NULL, &p, &err), QP_OK);
    for (int dec = 0; dec < 2; dec++) {
        struct qp_model *m = ln_model(dec, 1);
        struct qp_equalize_report *rep = NULL;
        struct qp_model *e = equalized(m, QP_EQUALIZE_SMOOTHQUANT, p, &rep);
        assert_int_equal(rep->n_smoothquant_pairs, 0);
        assert_int_equal(rep->n_smoothquant_skipped, 1);
        assert_string_equal(rep->skips[0].method, "smoothquant");
        assert_string_equal(rep->skips[0].node, dec ? "div" : "ln");
        if (!strstr(rep->skips[0].reason, "'res' (Add)"))
            fail_msg("reason: %s", rep->skips[0].reason);
        assert_memory_equal(init_of(m, "mm", 1)->data, init_of(e, "mm", 1)->data, D * N * 4);
        qp_equalize_report_free(rep);
        qp_model_free(e);
        qp_model_free(m);
    }
    qp_provider_free(p);
}

/* The values of m's graph the plan of `methods` changes (qp_equalize_changed), as a
 * comma-separated list in value order, into buf. */
static void changed_list(const struct qp_model *m, unsigned methods, struct qp_provider *data,
                         char *buf, size_t cap) {
    struct qp_error err = {0};
    struct qp_equalize_options o;
    qp_equalize_options_default(&o);
    o.methods = methods;
    o.n_threads = 1;
    struct qp_equalize_plan *plan = NULL;
    if (qp_equalize_plan(m, data, &o, &plan, NULL, &err) != QP_OK) fail_msg("%s", err.msg);
    const struct qp_graph *g = m->graph;
    unsigned char *mark = malloc(g->n_values);
    assert_non_null(mark);
    memset(mark, 7, g->n_values); /* every byte is set */
    if (qp_equalize_changed(plan, g, mark, &err) != QP_OK) fail_msg("%s", err.msg);
    buf[0] = 0;
    for (size_t v = 0; v < g->n_values; v++) {
        assert_true(mark[v] <= 1);
        if (mark[v])
            snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", *buf ? "," : "",
                     g->values[v].name);
    }
    free(mark);
    qp_equalize_plan_free(plan);
}

/* What a plan changes: from the node whose constants it divides to the one that multiplies the
 * scale back (exclusive); that one's output and everything after it compute what they did. */
static void test_changed_values(void **state) {
    (void)state;
    char got[512];
    struct qp_model *m = conv_pair("Relu", 1, 0); /* conv1 -> bn (divided) -> act -> conv2 */
    changed_list(m, QP_EQUALIZE_CLE, NULL, got, sizeof got);
    assert_string_equal(got, "n1,a1");
    qp_model_free(m);
    m = conv_pair("Relu", 0, 1); /* conv1 (divided) -> act -> depthwise conv2 */
    changed_list(m, QP_EQUALIZE_CLE, NULL, got, sizeof got);
    assert_string_equal(got, "c1,a1");
    qp_model_free(m);
    m = conv_pair("HardSwish", 0, 0); /* skipped: nothing changes */
    changed_list(m, QP_EQUALIZE_CLE, NULL, got, sizeof got);
    assert_string_equal(got, "");
    qp_model_free(m);
    fill_sq();
    struct qp_error err = {0};
    struct qp_provider *p = NULL;
    const char *names[] = {"x"};
    assert_int_equal(qp_provider_callback_create(names, 1, 2, sq_batch, NULL, &p, &err), QP_OK);
    m = ln_model(1, 0); /* ... Div -> Mul(gamma) -> Add(beta) -> two MatMuls */
    changed_list(m, QP_EQUALIZE_SMOOTHQUANT, p, got, sizeof got);
    assert_string_equal(got, "xg,h");
    qp_model_free(m);
    m = ln_model(0, 0);
    changed_list(m, QP_EQUALIZE_ALL, p, got, sizeof got);
    assert_string_equal(got, "h");
    /* A graph without the plan's nodes: an error naming the node. */
    struct qp_equalize_options o;
    qp_equalize_options_default(&o);
    o.methods = QP_EQUALIZE_CLE;
    struct qp_equalize_plan *plan = NULL;
    struct qp_model *cm = conv_pair("Relu", 0, 0);
    assert_int_equal(qp_equalize_plan(cm, NULL, &o, &plan, NULL, &err), QP_OK);
    unsigned char mark[64];
    assert_true(m->graph->n_values <= sizeof mark);
    assert_int_equal(qp_equalize_changed(plan, m->graph, mark, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "conv1"));
    assert_int_equal(qp_equalize_changed(NULL, m->graph, mark, &err), QP_ERR_USAGE);
    qp_equalize_plan_free(plan);
    qp_model_free(cm);
    qp_model_free(m);
    qp_provider_free(p);
}

static void test_errors(void **state) {
    (void)state;
    struct qp_model *m = conv_pair("Relu", 0, 0);
    struct qp_error err = {0};
    struct qp_equalize_options o;
    qp_equalize_options_default(&o);
    struct qp_equalize_plan *plan = NULL;
    o.methods = QP_EQUALIZE_SMOOTHQUANT;
    assert_int_equal(qp_equalize_plan(m, NULL, &o, &plan, NULL, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "calibration data"));
    o.methods = QP_EQUALIZE_CLE;
    o.alpha = 1.5;
    assert_int_equal(qp_equalize_plan(m, NULL, &o, &plan, NULL, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "alpha"));
    o.alpha = 0.5;
    assert_int_equal(qp_equalize_plan(m, NULL, &o, &plan, NULL, &err), QP_OK);
    /* Applied to a model without the pair's nodes: an error naming the node. */
    struct qp_model *lnm = ln_model(0, 0);
    assert_int_equal(qp_equalize_apply(plan, lnm, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "conv1"));
    qp_model_free(lnm);
    qp_equalize_plan_free(plan);
    qp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cle_relu),
        cmocka_unit_test(test_cle_bn),
        cmocka_unit_test(test_cle_depthwise),
        cmocka_unit_test(test_cle_no_activation),
        cmocka_unit_test(test_cle_skipped),
        cmocka_unit_test(test_cle_decomposed_hardswish_skipped),
        cmocka_unit_test(test_cle_shared_weight_copied),
        cmocka_unit_test(test_smoothquant_layernorm),
        cmocka_unit_test(test_smoothquant_decomposed),
        cmocka_unit_test(test_smoothquant_residual_skipped),
        cmocka_unit_test(test_changed_values),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
