/* The fusion pass (src/runtime/fuse.c) on a small ResNet/PP-LCNet-like graph built with the IR:
 *  - fused results are close to the unfused ones (QP_NO_FUSE=1: the ONNX semantics), the
 *    expected groups form, 1 and 2 threads agree bit for bit;
 *  - an observer without a set sees every tensor (nothing fuses); with a set, only the named
 *    tensors, which then stay materialized; removing it fuses again;
 *  - overlay runs equal runs of the graph rewritten with real Q/DQ nodes, bit for bit, with
 *    overlays on a group's first input, on its weights, on a residual and on a chain edge;
 *  - partial re-execution equals a full run bit for bit and computes whole fused steps;
 *  - a fused residual sum accumulates in its residual's bytes where the residual dies there (and
 *    not where the residual is also the convolution's input), with the same results as copies;
 *  - bypass toggles of constant overlays inside fused groups (weights, bias, BatchNormalization
 *    parameters, folded Mul/Add) switch variants of the fused steps without re-planning and
 *    equal fresh plans bit for bit in any order; a constant that decides what fuses re-plans. */
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
#include "qplace/session.h"
#include "kernels/dnnl_conv.h"
#include "runtime/runtime.h"

#include "rt_testmodel.h"

#define C  8
#define HW 6
#define NX (C * HW * HW)

static struct qp_dim x_dims[4] = {{1, NULL}, {C, NULL}, {HW, NULL}, {HW, NULL}};

static uint32_t rnd(void); /* next value of rt_rng's generator (below) */

static void scalar(struct qp_model *m, const char *name, float v) {
    graph_add_init(m, m->graph, name, QP_DTYPE_FLOAT, 0, NULL, &v, sizeof v);
}

static int node(struct qp_graph *g, const char *name, const char *op, int ni, const char *a,
                const char *b, const char *c, const char *out) {
    const char *ins[3] = {a, b, c};
    struct qp_error err = {0};
    int id;
    assert_int_equal(qp_graph_add_node(g, name, op, "", ni, ins, 1, &out, &id, &err), QP_OK);
    return id;
}

static void conv(struct qp_model *m, const char *name, const char *x, const char *w, const char *b,
                 int k, int group, const char *out) {
    struct qp_graph *g = m->graph;
    int id = node(g, name, "Conv", b ? 3 : 2, x, w, b, out);
    if (k > 1) {
        struct qp_attr *a = qp_node_add_attr(g, id, "pads", QP_ATTR_INTS);
        assert_non_null(a);
        int64_t *pads = model_alloc(m, 4 * sizeof *pads);
        pads[0] = pads[1] = pads[2] = pads[3] = k / 2;
        a->ints = pads;
        a->n = 4;
    }
    if (group > 1) {
        struct qp_attr *a = qp_node_add_attr(g, id, "group", QP_ATTR_INT);
        assert_non_null(a);
        a->i = group;
    }
}

static void bn(struct qp_model *m, const char *name, const char *x, const char *out) {
    char n[5][32];
    const char *suffix[4] = {"s", "b", "m", "v"};
    int64_t d = C;
    for (int i = 0; i < 4; i++) {
        snprintf(n[i], sizeof n[i], "%s_%s", name, suffix[i]);
        rt_rand_init(m, n[i], 1, &d, i == 3 ? 0.5f : -0.5f, i == 3 ? 2.0f : 1.5f);
    }
    const char *ins[5] = {x, n[0], n[1], n[2], n[3]};
    struct qp_error err = {0};
    assert_int_equal(
        qp_graph_add_node(m->graph, name, "BatchNormalization", "", 5, ins, 1, &out, NULL, &err),
        QP_OK);
}

/* x -> [c1 bn1 r1] -> [c2 bn2 a2(+x) r2] -> [c3 m3 ad3 hardswish(4 nodes) lm la] -> [c4 hs] -> y1
 *                                        -> [c5 lr sg] -> y2
 *                                        -> [c6 m6(per channel) cl] -> y3
 * Six groups, 24 nodes. */
static struct qp_model *conv_model(void) {
    rt_rng = 7;
    struct qp_model *m = model_with_x(4, x_dims);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    const int64_t w3[4] = {C, C, 3, 3}, w1[4] = {C, C, 1, 1}, wg[4] = {C, C / 2, 3, 3};
    const int64_t bd[1] = {C}, pc[4] = {1, C, 1, 1};
    rt_rand_init(m, "w1", 4, w3, -0.3f, 0.3f);
    rt_rand_init(m, "b1", 1, bd, -0.2f, 0.2f);
    rt_rand_init(m, "w2", 4, w3, -0.3f, 0.3f);
    rt_rand_init(m, "b2", 1, bd, -0.2f, 0.2f);
    rt_rand_init(m, "w3", 4, w1, -0.5f, 0.5f);
    rt_rand_init(m, "w4", 4, wg, -0.3f, 0.3f);
    rt_rand_init(m, "w5", 4, w1, -0.5f, 0.5f);
    rt_rand_init(m, "b5", 1, bd, -0.2f, 0.2f);
    rt_rand_init(m, "w6", 4, w1, -0.5f, 0.5f);
    rt_rand_init(m, "k6", 4, pc, 0.5f, 1.5f);
    scalar(m, "k_mul", 1.3f);
    scalar(m, "k_add", 0.25f);
    scalar(m, "three", 3.0f);
    scalar(m, "zero", 0.0f);
    scalar(m, "six", 6.0f);
    scalar(m, "k2", 0.7f);
    scalar(m, "k3", -0.1f);
    scalar(m, "lo", -0.5f);
    scalar(m, "hi", 0.5f);
    conv(m, "c1", "x", "w1", "b1", 3, 1, "c1o");
    bn(m, "bn1", "c1o", "bn1o");
    node(g, "r1", "Relu", 1, "bn1o", NULL, NULL, "r1o");
    conv(m, "c2", "r1o", "w2", "b2", 3, 1, "c2o");
    bn(m, "bn2", "c2o", "bn2o");
    node(g, "a2", "Add", 2, "bn2o", "x", NULL, "a2o");
    node(g, "r2", "Relu", 1, "a2o", NULL, NULL, "r2o");
    conv(m, "c3", "r2o", "w3", NULL, 1, 1, "c3o");
    node(g, "m3", "Mul", 2, "c3o", "k_mul", NULL, "m3o");
    node(g, "ad3", "Add", 2, "m3o", "k_add", NULL, "ad3o");
    node(g, "h1", "Add", 2, "ad3o", "three", NULL, "h1o");
    node(g, "h2", "Clip", 3, "h1o", "zero", "six", "h2o");
    node(g, "h3", "Mul", 2, "ad3o", "h2o", NULL, "h3o");
    node(g, "h4", "Div", 2, "h3o", "six", NULL, "h4o");
    node(g, "lm", "Mul", 2, "k2", "h4o", NULL, "lmo");
    node(g, "la", "Add", 2, "lmo", "k3", NULL, "lao");
    conv(m, "c4", "lao", "w4", NULL, 3, 2, "c4o");
    int hs = node(g, "hs", "HardSigmoid", 1, "c4o", NULL, NULL, "y1");
    struct qp_attr *a = qp_node_add_attr(g, hs, "alpha", QP_ATTR_FLOAT);
    assert_non_null(a);
    a->f = 0.25f;
    conv(m, "c5", "r2o", "w5", "b5", 1, 1, "c5o");
    int lr = node(g, "lr", "LeakyRelu", 1, "c5o", NULL, NULL, "lro");
    a = qp_node_add_attr(g, lr, "alpha", QP_ATTR_FLOAT);
    assert_non_null(a);
    a->f = 0.1f;
    node(g, "sg", "Sigmoid", 1, "lro", NULL, NULL, "y2");
    conv(m, "c6", "r2o", "w6", NULL, 1, 1, "c6o");
    node(g, "m6", "Mul", 2, "c6o", "k6", NULL, "m6o");
    node(g, "cl", "Clip", 3, "m6o", "lo", "hi", "y3");
    const char *outs[3] = {"y1", "y2", "y3"};
    for (int i = 0; i < 3; i++)
        assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, outs[i]), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

#define N_NODES  24
#define N_GROUPS 6

static float xin[NX];

static void fill_x(uint32_t seed) {
    rt_rng = seed;
    for (int i = 0; i < NX; i++)
        xin[i] = rt_frand() * 2.0f;
}

/* Runs s on xin: fully, or partially from its reference run. */
static void run_xin(struct qp_session *s, int partial) {
    struct qp_error err = {0};
    struct qp_array in;
    int64_t dims[4] = {1, C, HW, HW};
    assert_int_equal(qp_array_view(&in, QP_DTYPE_FLOAT, 4, dims, xin, sizeof xin, &err), QP_OK);
    if (partial)
        assert_int_equal(qp_session_run_partial(s, &err), QP_OK);
    else
        assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
}

/* Copies output o of s's last run, n floats, into out; returns its view. */
static struct qp_array copy_output(const struct qp_session *s, size_t o, float *out, size_t n) {
    struct qp_error err = {0};
    struct qp_array a;
    assert_int_equal(qp_session_output(s, o, &a, &err), QP_OK);
    assert_int_equal(a.nbytes, sizeof(float) * n);
    memcpy(out, a.data, a.nbytes);
    return a;
}

/* Runs s (fully or partially) and copies the three outputs into out[3][NX]. */
static void run3(struct qp_session *s, int partial, float out[3][NX]) {
    run_xin(s, partial);
    for (size_t o = 0; o < 3; o++)
        copy_output(s, o, out[o], NX);
}

static size_t fused_steps(const struct qp_session *s) {
    return s->last ? s->last->n_fused : 0;
}

static void assert_close(float a[3][NX], float b[3][NX], double rtol, double atol) {
    for (int o = 0; o < 3; o++)
        for (int i = 0; i < NX; i++)
            if (!(fabs((double)a[o][i] - b[o][i]) <= atol + rtol * fabs((double)b[o][i])))
                fail_msg("output %d element %d: %.9g vs %.9g", o, i, (double)a[o][i],
                         (double)b[o][i]);
}

static struct qp_session *session(const struct qp_model *m, int n_threads) {
    struct qp_session_options opts = {.n_threads = n_threads};
    struct qp_session *s = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_session_create(m, &opts, 0, NULL, &s, &err), QP_OK);
    return s;
}

static float out_f[3][NX], out_u[3][NX], out_t[3][NX];

static void test_fused_close_to_unfused(void **state) {
    (void)state;
    struct qp_model *m = conv_model();
    for (uint32_t seed = 1; seed <= 3; seed++) {
        fill_x(seed);
        struct qp_session *f = session(m, 2), *f1 = session(m, 1);
        setenv("QP_NO_FUSE", "1", 1);
        struct qp_session *u = session(m, 2);
        unsetenv("QP_NO_FUSE");
        run3(f, 0, out_f);
        assert_int_equal(fused_steps(f), N_GROUPS);
        /* Blocked tensors between steps: r1o (read by c2) and r2o (c3, c5, c6) on AVX2 (which
         * layouts oneDNN picks depends on the CPU; lao, read by the grouped c4, stays plain). */
        assert_true(f->last->n_blocked >= 1);
        assert_int_equal(qp_session_nodes_executed(f), N_NODES);
        run3(u, 0, out_u);
        assert_int_equal(fused_steps(u), 0);
        assert_int_equal(qp_session_nodes_executed(u), N_NODES);
        assert_close(out_f, out_u, 1e-4, 1e-5);
        /* The fusion changes results (folded BatchNormalization rounds differently): the test
         * would notice a pass that fused nothing. */
        assert_true(memcmp(out_f, out_u, sizeof out_f) != 0);
        run3(f1, 0, out_t);
        assert_memory_equal(out_t, out_f, sizeof out_f);
        qp_session_free(f);
        qp_session_free(f1);
        qp_session_free(u);
    }
    qp_model_free(m);
}

struct seen {
    int calls;
    int bn2o;
    float bn2[NX];
};

static int observer(const char *tensor, const char *node, const struct qp_array *v, void *user) {
    (void)node;
    struct seen *s = user;
    s->calls++;
    if (strcmp(tensor, "bn2o") == 0 && v->nbytes == sizeof s->bn2) {
        memcpy(s->bn2, v->data, v->nbytes);
        s->bn2o++;
    }
    return 0;
}

static void test_fuse_observer(void **state) {
    (void)state;
    struct qp_model *m = conv_model();
    struct qp_error err = {0};
    fill_x(11);
    struct qp_session *s = session(m, 2);
    setenv("QP_NO_FUSE", "1", 1);
    struct qp_session *u = session(m, 2);
    unsetenv("QP_NO_FUSE");
    struct seen ref = {0}, got = {0};
    qp_session_set_observer(u, observer, &ref);
    run3(u, 0, out_u);
    assert_int_equal(ref.calls, N_NODES);

    /* No set: every tensor, as unfused (bit for bit: nothing fuses). */
    qp_session_set_observer(s, observer, &got);
    run3(s, 0, out_f);
    assert_int_equal(fused_steps(s), 0);
    assert_int_equal(got.calls, N_NODES);
    assert_int_equal(got.bn2o, 1);
    assert_memory_equal(got.bn2, ref.bn2, sizeof got.bn2);
    assert_memory_equal(out_f, out_u, sizeof out_f);

    /* A set: only those; bn2o stays materialized (group 2 ends there, the rest still fuse). */
    const char *names[2] = {"bn2o", "y1"};
    assert_int_equal(qp_session_set_observed(s, 2, names, &err), QP_OK);
    memset(&got, 0, sizeof got);
    run3(s, 0, out_f);
    assert_int_equal(got.calls, 2);
    assert_int_equal(got.bn2o, 1);
    assert_int_equal(fused_steps(s), N_GROUPS);
    for (int i = 0; i < NX; i++)
        assert_true(fabsf(got.bn2[i] - ref.bn2[i]) <= 1e-5f + 1e-4f * fabsf(ref.bn2[i]));
    assert_close(out_f, out_u, 1e-4, 1e-5);

    /* No observer: everything fuses again (the plans were dropped), and the last run's outputs
     * stay readable until the next run. */
    qp_session_set_observer(s, NULL, NULL);
    struct qp_array o;
    assert_int_equal(qp_session_output(s, 0, &o, &err), QP_OK);
    assert_memory_equal(o.data, out_f[0], sizeof out_f[0]);
    run3(s, 0, out_t);
    assert_int_equal(fused_steps(s), N_GROUPS);
    assert_close(out_t, out_u, 1e-4, 1e-5);
    qp_session_free(s);
    qp_session_free(u);
    qp_model_free(m);
}

/* One overlay with storage. */
struct ovp {
    struct qp_overlay ov;
    float scale[C];
    uint8_t zp[C];
};

static void make_ov(struct ovp *o, const char *node_name, int input, enum qp_dtype qt,
                    size_t n_params, float scale) {
    memset(o, 0, sizeof *o);
    o->ov.node = node_name;
    o->ov.input = input;
    o->ov.qtype = qt;
    o->ov.saturate = 1;
    o->ov.axis = 0;
    o->ov.n_params = n_params;
    for (size_t i = 0; i < n_params; i++) {
        o->scale[i] = scale * (1.0f + 0.1f * (float)i);
        o->zp[i] = qt == QP_DTYPE_UINT8 ? 120 : (uint8_t)(int8_t)(-3 + (int)i);
    }
    o->ov.scale = o->scale;
    o->ov.zero_point = o->zp;
}

/* Rewrites m with QuantizeLinear -> DequantizeLinear on every overlay's edge. */
static void rewrite_qdq(struct qp_model *m, const struct ovp *ovs, int n) {
    struct qp_error err = {0};
    for (int i = 0; i < n; i++)
        insert_qdq(m, &ovs[i].ov, i);
    assert_int_equal(qp_graph_toposort(m->graph, &err), QP_OK);
}

#define N_OV 6

static void overlay_set(struct ovp *o) {
    make_ov(&o[0], "c1", 0, QP_DTYPE_INT8, 1, 0.02f);    /* a group's first input */
    make_ov(&o[1], "c2", 1, QP_DTYPE_INT8, C, 0.003f);   /* weights, per output channel */
    make_ov(&o[2], "a2", 1, QP_DTYPE_UINT8, 1, 0.015f);  /* the residual */
    make_ov(&o[3], "r1", 0, QP_DTYPE_INT8, 1, 0.03f);    /* a chain edge: splits group 1 */
    make_ov(&o[4], "c4", 0, QP_DTYPE_INT8, 1, 0.01f);    /* between two groups */
    make_ov(&o[5], "bn2", 1, QP_DTYPE_UINT8, 1, 0.004f); /* a folded BatchNormalization scale */
}

/* qp_session_options.no_fusion: nothing fuses, and the results are QP_NO_FUSE=1's bit for bit. */
static void test_no_fusion_option(void **state) {
    (void)state;
    struct qp_model *m = conv_model();
    struct qp_error err = {0};
    fill_x(3);
    struct qp_session_options opts = {.n_threads = 2, .no_fusion = 1};
    struct qp_session *a = NULL;
    assert_int_equal(qp_session_create(m, &opts, 0, NULL, &a, &err), QP_OK);
    setenv("QP_NO_FUSE", "1", 1);
    struct qp_session *u = session(m, 2);
    unsetenv("QP_NO_FUSE");
    struct qp_session *f = session(m, 2);
    run3(a, 0, out_f);
    run3(u, 0, out_u);
    run3(f, 0, out_t);
    assert_int_equal(fused_steps(a), 0);
    assert_int_equal(fused_steps(f), N_GROUPS);
    assert_memory_equal(out_f, out_u, sizeof out_f);
    qp_session_free(a);
    qp_session_free(u);
    qp_session_free(f);
    qp_model_free(m);
}

/* Bypass flags toggled on a planned session with fused steps (whose input 0 and residual
 * choose the overlay output or the original per run, and whose overlaid constants are baked in,
 * so toggling those re-plans) equal a fresh session planned with the same flags, bit for bit,
 * in full and in partial runs. */
static void test_fuse_bypass_toggles(void **state) {
    (void)state;
    struct ovp o[N_OV];
    overlay_set(o);
    struct qp_overlay ov[N_OV];
    struct qp_model *m = conv_model();
    struct qp_error err = {0};
    fill_x(7);
    struct qp_session *a = session(m, 2);
    qp_session_set_cache(a, (size_t)1 << 26);
    for (int mask = 0; mask < (1 << N_OV); mask++) {
        for (int i = 0; i < N_OV; i++) {
            ov[i] = o[i].ov;
            ov[i].bypass = mask >> i & 1;
        }
        assert_int_equal(qp_session_set_overlays(a, N_OV, ov, &err), QP_OK);
        run3(a, mask != 0, out_f);
        struct qp_session *b = session(m, 2);
        assert_int_equal(qp_session_set_overlays(b, N_OV, ov, &err), QP_OK);
        run3(b, 0, out_t);
        if (memcmp(out_f, out_t, sizeof out_f) != 0)
            fail_msg("bypass mask 0x%x: toggled session differs from a fresh plan", mask);
        assert_int_equal(fused_steps(a), fused_steps(b));
        assert_true(fused_steps(b) > 0);
        qp_session_free(b);
    }
    qp_session_free(a);
    qp_model_free(m);
}

/* The step computing node `name` in the last run's plan. */
static const struct rt_step *step_of(const struct qp_session *s, const char *name) {
    for (size_t k = 0; s->last && k < s->last->n_steps; k++) {
        const struct rt_step *st = &s->last->steps[k];
        if (st->kind == RT_STEP_OVERLAY) continue;
        for (int i = 0; i < (st->nodes ? st->n_nodes : 1); i++)
            if (strcmp(s->g->nodes[st->nodes ? st->nodes[i] : st->node].name, name) == 0) return st;
    }
    fail_msg("no step computes node '%s'", name);
    return NULL;
}

#define N_WV 8

/* Overlays on fused groups' constants: weights, a bias, BatchNormalization parameters and
 * per-channel/scalar multipliers folded into the weights, plus a group input and a residual. */
static void weight_overlays(struct ovp *o) {
    make_ov(&o[0], "c1", 0, QP_DTYPE_INT8, 1, 0.02f);   /* a group's input (per run) */
    make_ov(&o[1], "c1", 1, QP_DTYPE_INT8, C, 0.003f);  /* weights, per output channel */
    make_ov(&o[2], "c1", 2, QP_DTYPE_INT8, C, 0.002f);  /* the bias */
    make_ov(&o[3], "bn1", 4, QP_DTYPE_UINT8, C, 0.01f); /* a BatchNormalization variance */
    make_ov(&o[4], "c2", 1, QP_DTYPE_INT8, 1, 0.004f);  /* weights, per tensor */
    make_ov(&o[5], "bn2", 1, QP_DTYPE_UINT8, 1, 0.004f);
    make_ov(&o[6], "m3", 1, QP_DTYPE_INT8, 1, 0.03f);   /* a scalar Mul folded into c3 */
    make_ov(&o[7], "a2", 1, QP_DTYPE_UINT8, 1, 0.015f); /* the residual (per run) */
}

static float wv_fresh[1 << N_WV][3][NX];

/* Toggling the bypass flags of constant overlays inside fused groups switches variants of the
 * fused steps (prepared on first use) instead of re-planning: in every order (ascending,
 * descending, Gray code, random with revisits), full and partial runs equal a fresh session
 * planned with the same flags bit for bit, the session builds no plan after the first run, and each
 * fused step has at most one variant per combination of its constant overlays. */
static void test_fuse_weight_variants(void **state) {
    (void)state;
    struct ovp o[N_WV];
    weight_overlays(o);
    struct qp_overlay ov[N_WV];
    struct qp_model *m = conv_model();
    struct qp_error err = {0};
    fill_x(13);
    const int n_mask = 1 << N_WV;
    for (int mask = 0; mask < n_mask; mask++) {
        for (int i = 0; i < N_WV; i++) {
            ov[i] = o[i].ov;
            ov[i].bypass = mask >> i & 1;
        }
        struct qp_session *b = session(m, 1 + (mask & 1));
        assert_int_equal(qp_session_set_overlays(b, N_WV, ov, &err), QP_OK);
        run3(b, 0, wv_fresh[mask]);
        assert_int_equal(fused_steps(b), N_GROUPS);
        qp_session_free(b);
    }
    /* The weights matter: applying c1's weight overlay alone changes the outputs. */
    assert_true(memcmp(wv_fresh[0xff], wv_fresh[0xff & ~2], sizeof wv_fresh[0]) != 0);
    assert_true(memcmp(wv_fresh[0xff], wv_fresh[0xff & ~8], sizeof wv_fresh[0]) != 0);
    assert_true(memcmp(wv_fresh[0xff], wv_fresh[0xff & ~64], sizeof wv_fresh[0]) != 0);

    int seq[4 * (1 << N_WV) + 300], n_seq = 0;
    for (int i = 0; i < n_mask; i++)
        seq[n_seq++] = i;
    for (int i = n_mask; i-- > 0;)
        seq[n_seq++] = i;
    for (int i = 0; i < n_mask; i++)
        seq[n_seq++] = i ^ (i >> 1);
    rt_rng = 99;
    for (int i = 0; i < 300; i++)
        seq[n_seq++] = (int)(rnd() % (unsigned)n_mask);
    for (int nt = 1; nt <= 2; nt++) {
        struct qp_session *a = session(m, nt);
        size_t built = 0;
        qp_session_set_cache(a, (size_t)1 << 26);
        for (int k = 0; k < n_seq; k++) {
            int mask = seq[k];
            for (int i = 0; i < N_WV; i++) {
                ov[i] = o[i].ov;
                ov[i].bypass = mask >> i & 1;
            }
            assert_int_equal(qp_session_set_overlays(a, N_WV, ov, &err), QP_OK);
            run3(a, k > 0 && k % 3 != 0, out_f); /* every third a full run (a new reference) */
            if (memcmp(out_f, wv_fresh[mask], sizeof out_f) != 0)
                fail_msg("%d threads, step %d, bypass mask 0x%x: differs from a fresh plan", nt, k,
                         mask);
            assert_int_equal(fused_steps(a), N_GROUPS);
            if (k == 0) built = a->n_plans_built; /* planned at creation, then for the overlays */
            assert_int_equal(a->n_plans_built, built);
        }
        /* c1's group: weights, bias, variance (8 combinations); c2's: weights, scale (4);
         * c3's: the folded Mul (2). */
        const struct rt_step *g1 = step_of(a, "c1"), *g2 = step_of(a, "c2"), *g3 = step_of(a, "c3");
        assert_non_null(g1->fuse);
        assert_int_equal(g1->n_nodes, 3); /* c1 bn1 r1 */
        assert_int_equal(g1->n_var, 8);
        assert_int_equal(g2->n_var, 4);
        assert_int_equal(g3->n_var, 2);
        assert_null(step_of(a, "c5")->fuse); /* no constant overlay: no variants */
        qp_session_free(a);
    }
    qp_model_free(m);
}

/* Constant overlays whose value decides what fuses (here the decomposed HardSwish's 6, which
 * the overlay moves to 6.02 so the HardSwish no longer fuses) keep the bypass flags of their
 * whole group baked: toggling one of them re-plans, and results still equal a fresh plan. */
static void test_fuse_baked_constants(void **state) {
    (void)state;
    struct ovp o[3];
    make_ov(&o[0], "h4", 1, QP_DTYPE_UINT8, 1, 0.07f); /* the Div's 6 */
    make_ov(&o[1], "c3", 1, QP_DTYPE_INT8, 1, 0.004f); /* c3's weights: same group */
    make_ov(&o[2], "c6", 1, QP_DTYPE_INT8, 1, 0.004f); /* another group: switches */
    struct qp_overlay ov[3];
    struct qp_model *m = conv_model();
    struct qp_error err = {0};
    fill_x(17);
    struct qp_session *a = session(m, 2);
    static const int masks[] = {0, 1, 3, 2, 6, 7, 5, 4, 0, 4, 0, 2, 3, 1, 5, 7, 6};
    size_t plans = 0;
    for (size_t k = 0; k < sizeof masks / sizeof masks[0]; k++) {
        int mask = masks[k];
        for (int i = 0; i < 3; i++) {
            ov[i] = o[i].ov;
            ov[i].bypass = mask >> i & 1;
        }
        assert_int_equal(qp_session_set_overlays(a, 3, ov, &err), QP_OK);
        run3(a, 0, out_f);
        struct qp_session *b = session(m, 2);
        assert_int_equal(qp_session_set_overlays(b, 3, ov, &err), QP_OK);
        run3(b, 0, out_t);
        assert_memory_equal(out_f, out_t, sizeof out_f);
        assert_int_equal(fused_steps(a), fused_steps(b));
        qp_session_free(b);
        assert_null(step_of(a, "c3")->fuse);
        assert_non_null(step_of(a, "c6")->fuse);
        if (k > 0) assert_int_equal(a->n_plans_built, plans + (((masks[k - 1] ^ mask) & 3) != 0));
        plans = a->n_plans_built;
    }
    /* The 6.02 (applied last) splits c3's group before the HardSwish; 9 nodes without it. */
    assert_int_equal(step_of(a, "c3")->n_nodes, 3);
    qp_session_free(a);
    qp_model_free(m);
}

static void test_fuse_overlay_equals_qdq(void **state) {
    (void)state;
    struct ovp o[N_OV];
    overlay_set(o);
    struct qp_overlay ov[N_OV];
    for (int i = 0; i < N_OV; i++)
        ov[i] = o[i].ov;
    struct qp_model *m = conv_model(), *mq = conv_model();
    rewrite_qdq(mq, o, N_OV);
    struct qp_error err = {0};
    for (uint32_t seed = 1; seed <= 3; seed++) {
        fill_x(seed);
        for (int nt = 1; nt <= 2; nt++) {
            struct qp_session *s = session(m, nt), *q = session(mq, nt);
            assert_int_equal(qp_session_set_overlays(s, N_OV, ov, &err), QP_OK);
            run3(s, 0, out_f);
            run3(q, 0, out_t);
            assert_memory_equal(out_f, out_t, sizeof out_f);
            /* Group 1 split at the overlaid chain edge: c1+bn1 still fuse, r1 alone. */
            assert_int_equal(fused_steps(s), N_GROUPS);
            assert_int_equal(fused_steps(q), N_GROUPS);
            qp_session_free(s);
            qp_session_free(q);
        }
    }
    qp_model_free(m);
    qp_model_free(mq);
}

static void test_fuse_partial(void **state) {
    (void)state;
    struct ovp o[N_OV];
    overlay_set(o);
    struct qp_model *m = conv_model();
    struct qp_error err = {0};
    fill_x(5);
    struct qp_session *s = session(m, 2), *full = session(m, 2);
    qp_session_set_cache(s, (size_t)64 << 20);
    struct qp_overlay ov[N_OV];
    ov[0] = o[0].ov;
    assert_int_equal(qp_session_set_overlays(s, 1, ov, &err), QP_OK);
    run3(s, 0, out_f); /* the reference */

    /* A residual overlay added: group 2 (4 nodes, only a2 and r2 downstream of the edge) and
     * everything after it: 4 + 9 + 2 + 3 + 3 nodes; group 1 is restored. */
    ov[1] = o[2].ov;
    assert_int_equal(qp_session_set_overlays(s, 2, ov, &err), QP_OK);
    assert_int_equal(qp_session_set_overlays(full, 2, ov, &err), QP_OK);
    run3(s, 1, out_f);
    assert_int_equal(qp_session_nodes_executed(s), 21);
    assert_int_equal(fused_steps(s), N_GROUPS);
    run3(full, 0, out_t);
    assert_memory_equal(out_f, out_t, sizeof out_f);

    /* An overlay on a chain edge (r1's input): the plan splits group 1, whose new tail bn1o was
     * absorbed in the reference and is computed again: every node runs. */
    ov[1] = o[3].ov;
    assert_int_equal(qp_session_set_overlays(s, 2, ov, &err), QP_OK);
    assert_int_equal(qp_session_set_overlays(full, 2, ov, &err), QP_OK);
    run3(s, 1, out_f);
    assert_int_equal(qp_session_nodes_executed(s), N_NODES);
    run3(full, 0, out_t);
    assert_memory_equal(out_f, out_t, sizeof out_f);

    /* Only c4's input changes: groups 4 (2 nodes) computed, the rest restored. */
    ov[1] = o[4].ov;
    assert_int_equal(qp_session_set_overlays(s, 2, ov, &err), QP_OK);
    assert_int_equal(qp_session_set_overlays(full, 2, ov, &err), QP_OK);
    run3(s, 1, out_f);
    assert_int_equal(qp_session_nodes_executed(s), 2);
    run3(full, 0, out_t);
    assert_memory_equal(out_f, out_t, sizeof out_f);
    qp_session_free(s);
    qp_session_free(full);
    qp_model_free(m);
}

/* x -> c1 -> r1o; [c2(r1o) + r1o, relu] -> r2o; c3(r2o) -> c3o; [c4(c3o) + r2o, relu] -> r4o;
 * c5(r4o) -> y: c2's residual is its own input (never in place: the convolution reads around
 * each pixel after writing), c4's dies at c4 (in place: the output takes its bytes; both in
 * the layout the convolutions exchange). */
static struct qp_model *residual_model(void) {
    rt_rng = 9;
    struct qp_model *m = model_with_x(4, x_dims);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    const int64_t w3[4] = {C, C, 3, 3}, bd[1] = {C};
    const char *w[4] = {"w1", "w2", "w3", "w4"}, *b[4] = {"b1", "b2", "b3", "b4"};
    for (int i = 0; i < 4; i++) {
        rt_rand_init(m, w[i], 4, w3, -0.3f, 0.3f);
        rt_rand_init(m, b[i], 1, bd, -0.2f, 0.2f);
    }
    conv(m, "c1", "x", "w1", "b1", 3, 1, "c1o");
    node(g, "r1", "Relu", 1, "c1o", NULL, NULL, "r1o");
    conv(m, "c2", "r1o", "w2", "b2", 3, 1, "c2o");
    node(g, "a2", "Add", 2, "c2o", "r1o", NULL, "a2o");
    node(g, "r2", "Relu", 1, "a2o", NULL, NULL, "r2o");
    conv(m, "c3", "r2o", "w3", "b3", 3, 1, "c3o");
    conv(m, "c4", "c3o", "w4", "b4", 3, 1, "c4o");
    node(g, "a4", "Add", 2, "r2o", "c4o", NULL, "a4o");
    node(g, "r4", "Relu", 1, "a4o", NULL, NULL, "r4o");
    conv(m, "c5", "r4o", "w1", "b1", 3, 1, "y");
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "y"), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

static void run1(struct qp_session *s, int partial, float *out) {
    run_xin(s, partial);
    copy_output(s, 0, out, NX);
}

/* Fused steps with a residual (4 inputs): how many write their output over it. */
static void sums_in_place(const struct qp_session *s, int *n_sum, int *n_in_place) {
    *n_sum = *n_in_place = 0;
    for (size_t k = 0; s->last && k < s->last->n_steps; k++) {
        const struct rt_step *st = &s->last->steps[k];
        if (st->kind != RT_STEP_NODE || !st->k || !(st->k->flags & QP_KF_DNNL_CONV) ||
            st->n_in < 4 || !st->in[3])
            continue;
        (*n_sum)++;
        *n_in_place += st->out[0]->data == st->in[3]->data;
    }
}

static void test_fuse_sum_in_place(void **state) {
    (void)state;
    struct qp_model *m = residual_model();
    struct qp_error err = {0};
    static float got[NX], ref[NX], one[NX], unfused[NX];
    fill_x(3);
    struct qp_session *s = session(m, 2), *s1 = session(m, 1);
    run1(s, 0, got);
    int n_sum, n_in;
    sums_in_place(s, &n_sum, &n_in);
    assert_int_equal(n_sum, 2);
    assert_int_equal(n_in, 1);
    run1(s1, 0, one);
    assert_memory_equal(got, one, sizeof got);
    setenv("QP_NO_FUSE", "1", 1);
    struct qp_session *u = session(m, 2);
    unsetenv("QP_NO_FUSE");
    run1(u, 0, unfused);
    for (int i = 0; i < NX; i++)
        assert_true(fabsf(got[i] - unfused[i]) <= 1e-4f + 1e-4f * fabsf(unfused[i]));
    /* Partial runs: an overlay on c4's input recomputes c4 with the residual restored from the
     * cache (a copy into the destination), one on c3's input recomputes c3 and c4; both equal
     * a full run of a session with the same overlays, and a full run again equals the first. */
    struct ovp o[2];
    make_ov(&o[0], "c4", 0, QP_DTYPE_INT8, 1, 0.02f);
    make_ov(&o[1], "c3", 0, QP_DTYPE_UINT8, 1, 0.02f);
    struct qp_session *full = session(m, 2);
    qp_session_set_cache(s, (size_t)64 << 20);
    run1(s, 0, ref);
    assert_memory_equal(ref, got, sizeof got);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(qp_session_set_overlays(s, 1, &o[k].ov, &err), QP_OK);
        assert_int_equal(qp_session_set_overlays(full, 1, &o[k].ov, &err), QP_OK);
        run1(s, 1, got);
        run1(full, 0, ref);
        assert_memory_equal(got, ref, sizeof got);
    }
    assert_int_equal(qp_session_set_overlays(s, 0, NULL, &err), QP_OK);
    run1(s, 0, got);
    assert_memory_equal(got, one, sizeof got);
    qp_session_free(full);
    qp_session_free(u);
    qp_session_free(s1);
    qp_session_free(s);
    qp_model_free(m);
}

/* ---- ConvTranspose groups (PaddleOCR det's head) ------------------------------------------- */

#define TM 4                   /* y's channels */
#define TN (TM * 16 * HW * HW) /* y: [1, TM, 4 HW, 4 HW] */

static void convt(struct qp_model *m, const char *name, const char *x, const char *w, const char *b,
                  int pad, int group, int out_pad, const char *out) {
    struct qp_graph *g = m->graph;
    int id = node(g, name, "ConvTranspose", b ? 3 : 2, x, w, b, out);
    struct qp_attr *a = qp_node_add_attr(g, id, "strides", QP_ATTR_INTS);
    assert_non_null(a);
    int64_t *v = model_alloc(m, 4 * sizeof *v);
    v[0] = v[1] = 2;
    a->ints = v;
    a->n = 2;
    if (pad) {
        a = qp_node_add_attr(g, id, "pads", QP_ATTR_INTS);
        assert_non_null(a);
        v = model_alloc(m, 4 * sizeof *v);
        v[0] = v[1] = v[2] = v[3] = pad;
        a->ints = v;
        a->n = 4;
    }
    if (out_pad) {
        a = qp_node_add_attr(g, id, "output_padding", QP_ATTR_INTS);
        assert_non_null(a);
        v = model_alloc(m, 2 * sizeof *v);
        v[0] = v[1] = out_pad;
        a->ints = v;
        a->n = 2;
    }
    if (group > 1) {
        a = qp_node_add_attr(g, id, "group", QP_ATTR_INT);
        assert_non_null(a);
        a->i = group;
    }
}

/* x [1, 8, 6, 6] -> [ct1 (grouped, 6 outputs) ad1 (per channel) bn1 r1] -> [1, 6, 12, 12]
 *                -> [ct2 (bias, output_padding) ad2 (per channel, first operand) sg] -> y
 * [1, 4, 24, 24]: two groups, 7 nodes, as PaddleOCR det's ConvTranspose -> Add -> BN -> Relu
 * and ConvTranspose -> Add -> Sigmoid. */
static struct qp_model *convt_model(void) {
    rt_rng = 17;
    struct qp_model *m = model_with_x(4, x_dims);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    const int64_t w1[4] = {C, 3, 2, 2}, k1[4] = {1, 6, 1, 1}, d6[1] = {6};
    const int64_t w2[4] = {6, TM, 3, 3}, b2[1] = {TM}, k2[3] = {TM, 1, 1};
    rt_rand_init(m, "w1", 4, w1, -0.5f, 0.5f);
    rt_rand_init(m, "k1", 4, k1, -0.3f, 0.3f);
    const char *bnn[4] = {"bn1_s", "bn1_b", "bn1_m", "bn1_v"};
    for (int i = 0; i < 4; i++)
        rt_rand_init(m, bnn[i], 1, d6, i == 3 ? 0.5f : -0.5f, i == 3 ? 2.0f : 1.5f);
    rt_rand_init(m, "w2", 4, w2, -0.3f, 0.3f);
    rt_rand_init(m, "b2", 1, b2, -0.2f, 0.2f);
    rt_rand_init(m, "k2", 3, k2, -0.3f, 0.3f);
    convt(m, "ct1", "x", "w1", NULL, 0, 2, 0, "ct1o");
    node(g, "ad1", "Add", 2, "ct1o", "k1", NULL, "ad1o");
    const char *bin[5] = {"ad1o", bnn[0], bnn[1], bnn[2], bnn[3]}, *bout = "bn1o";
    assert_int_equal(
        qp_graph_add_node(g, "bn1", "BatchNormalization", "", 5, bin, 1, &bout, NULL, &err), QP_OK);
    node(g, "r1", "Relu", 1, "bn1o", NULL, NULL, "r1o");
    convt(m, "ct2", "r1o", "w2", "b2", 1, 1, 1, "ct2o");
    node(g, "ad2", "Add", 2, "k2", "ct2o", NULL, "ad2o");
    node(g, "sg", "Sigmoid", 1, "ad2o", NULL, NULL, "y");
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "y"), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

static float ty_a[TN], ty_b[TN];

static void run_t(struct qp_session *s, int partial, float *y) {
    run_xin(s, partial);
    struct qp_array a = copy_output(s, 0, y, TN);
    assert_int_equal(a.rank, 4);
    assert_int_equal(a.dims[1], TM);
    assert_int_equal(a.dims[2], 4 * HW);
}

/* Fused steps computing a ConvTranspose. */
static int convt_steps(const struct qp_session *s) {
    int n = 0;
    for (size_t k = 0; s->last && k < s->last->n_steps; k++) {
        const struct rt_step *st = &s->last->steps[k];
        n += st->nodes && strcmp(s->g->nodes[st->node].op_type, "ConvTranspose") == 0;
    }
    return n;
}

static void test_fuse_convt(void **state) {
    (void)state;
    struct qp_model *m = convt_model();
    for (uint32_t seed = 1; seed <= 3; seed++) {
        fill_x(seed);
        /* A fused convolution is prepared once: one weight reorder per ConvTranspose, none
         * for a plain variant. */
        size_t reorders = qp_dnnl_conv_weight_reorders();
        struct qp_session *f = session(m, 2);
        run_t(f, 0, ty_a);
        assert_int_equal(qp_dnnl_conv_weight_reorders() - reorders, 2);
        struct qp_session *f1 = session(m, 1);
        setenv("QP_NO_FUSE", "1", 1);
        struct qp_session *u = session(m, 2);
        unsetenv("QP_NO_FUSE");
        assert_int_equal(fused_steps(f), 2);
        assert_int_equal(convt_steps(f), 2);
        assert_int_equal(qp_session_nodes_executed(f), 7);
        run_t(u, 0, ty_b);
        assert_int_equal(fused_steps(u), 0);
        for (int i = 0; i < TN; i++)
            if (!(fabsf(ty_a[i] - ty_b[i]) <= 1e-5f + 1e-4f * fabsf(ty_b[i])))
                fail_msg("element %d: fused %.9g, unfused %.9g", i, (double)ty_a[i],
                         (double)ty_b[i]);
        assert_true(memcmp(ty_a, ty_b, sizeof ty_a) != 0); /* folding rounds differently */
        run_t(f1, 0, ty_b);
        assert_memory_equal(ty_a, ty_b, sizeof ty_a);
        qp_session_free(f);
        qp_session_free(f1);
        qp_session_free(u);
    }
    qp_model_free(m);
}

static void convt_overlays(struct ovp *o) {
    make_ov(&o[0], "ct1", 0, QP_DTYPE_INT8, 1, 0.02f);   /* the first group's input */
    make_ov(&o[1], "ct2", 1, QP_DTYPE_INT8, 6, 0.003f);  /* weights, per input channel */
    make_ov(&o[2], "bn1", 1, QP_DTYPE_UINT8, 1, 0.004f); /* a folded BatchNormalization scale */
    make_ov(&o[3], "sg", 0, QP_DTYPE_INT8, 1, 0.03f);    /* a chain edge: splits group 2 */
}

static void test_fuse_convt_overlay_partial(void **state) {
    (void)state;
    struct ovp o[4];
    convt_overlays(o);
    struct qp_overlay ov[4];
    for (int i = 0; i < 4; i++)
        ov[i] = o[i].ov;
    struct qp_model *m = convt_model(), *mq = convt_model();
    rewrite_qdq(mq, o, 4);
    struct qp_error err = {0};
    fill_x(9);
    for (int nt = 1; nt <= 2; nt++) {
        struct qp_session *s = session(m, nt), *q = session(mq, nt);
        assert_int_equal(qp_session_set_overlays(s, 4, ov, &err), QP_OK);
        run_t(s, 0, ty_a);
        run_t(q, 0, ty_b);
        assert_memory_equal(ty_a, ty_b, sizeof ty_a);
        /* Group 2 split at sg's overlaid input: ct2 + ad2 still fuse. */
        assert_int_equal(fused_steps(s), 2);
        assert_int_equal(fused_steps(q), 2);
        assert_int_equal(convt_steps(s), 2);
        qp_session_free(s);
        qp_session_free(q);
    }
    /* Partial runs from a reference with the first overlay == full runs. */
    struct qp_session *s = session(m, 2), *full = session(m, 2);
    qp_session_set_cache(s, (size_t)16 << 20);
    assert_int_equal(qp_session_set_overlays(s, 1, ov, &err), QP_OK);
    run_t(s, 0, ty_a);
    for (int k = 1; k < 4; k++) {
        struct qp_overlay two[2] = {ov[0], ov[k]};
        assert_int_equal(qp_session_set_overlays(s, 2, two, &err), QP_OK);
        assert_int_equal(qp_session_set_overlays(full, 2, two, &err), QP_OK);
        run_t(s, 1, ty_a);
        run_t(full, 0, ty_b);
        assert_memory_equal(ty_a, ty_b, sizeof ty_a);
        /* ct2's weights: group 2 (3 nodes, sg inside it); bn1's scale: both groups (7). */
        if (k == 1) assert_int_equal(qp_session_nodes_executed(s), 3);
        if (k == 2) assert_int_equal(qp_session_nodes_executed(s), 7);
    }
    qp_session_free(s);
    qp_session_free(full);
    qp_model_free(m);
    qp_model_free(mq);
}

/* ConvTranspose groups: the weights, a folded per-channel Add and BatchNormalization scale
 * switch per run too, in any order, equal to fresh plans, one plan built. */
static void test_fuse_convt_variants(void **state) {
    (void)state;
    struct ovp o[4];
    make_ov(&o[0], "ct1", 1, QP_DTYPE_INT8, 1, 0.004f);  /* weights */
    make_ov(&o[1], "ad1", 1, QP_DTYPE_INT8, 1, 0.003f);  /* the per-channel Add's constant */
    make_ov(&o[2], "bn1", 1, QP_DTYPE_UINT8, 1, 0.004f); /* a BatchNormalization scale */
    make_ov(&o[3], "ct2", 1, QP_DTYPE_INT8, 6, 0.003f);  /* weights, per input channel */
    struct qp_overlay ov[4];
    struct qp_model *m = convt_model();
    struct qp_error err = {0};
    fill_x(21);
    static float fresh[16][TN];
    for (int mask = 0; mask < 16; mask++) {
        for (int i = 0; i < 4; i++) {
            ov[i] = o[i].ov;
            ov[i].bypass = mask >> i & 1;
        }
        struct qp_session *b = session(m, 2);
        assert_int_equal(qp_session_set_overlays(b, 4, ov, &err), QP_OK);
        run_t(b, 0, fresh[mask]);
        assert_int_equal(convt_steps(b), 2);
        qp_session_free(b);
    }
    for (int i = 0; i < 4; i++)
        assert_true(memcmp(fresh[15], fresh[15 & ~(1 << i)], sizeof fresh[0]) != 0);
    struct qp_session *a = session(m, 2);
    qp_session_set_cache(a, (size_t)16 << 20);
    size_t built = 0;
    rt_rng = 5;
    for (int k = 0; k < 80; k++) {
        int mask = k < 16 ? k ^ (k >> 1) : (int)(rnd() % 16u);
        for (int i = 0; i < 4; i++) {
            ov[i] = o[i].ov;
            ov[i].bypass = mask >> i & 1;
        }
        assert_int_equal(qp_session_set_overlays(a, 4, ov, &err), QP_OK);
        run_t(a, k % 2, ty_a);
        if (memcmp(ty_a, fresh[mask], sizeof ty_a) != 0)
            fail_msg("step %d, bypass mask 0x%x: differs from a fresh plan", k, mask);
        if (k == 0) built = a->n_plans_built;
        assert_int_equal(a->n_plans_built, built);
    }
    qp_session_free(a);
    qp_model_free(m);
}

/* ---- random graphs ------------------------------------------------------------------------ */

static uint32_t rnd(void) {
    rt_rng = rt_rng * 1664525u + 1013904223u;
    return rt_rng >> 8;
}

/* A random graph of n steps on [1, C, HW, HW] tensors: Conv (1x1, 3x3, grouped), Batch-
 * Normalization, Mul/Add by scalar or per-channel constants, ConvTranspose (stride 1), residual
 * Add, Relu, LeakyRelu, Clip, Sigmoid, HardSigmoid, HardSwish and its decomposed form; each step
 * reads the latest tensor mostly (chains), sometimes an earlier one (branches, several readers).
 * Outputs: the last tensor and one from the middle. Same seed, same graph. */
static struct qp_model *random_conv_model(uint32_t seed, int n) {
    rt_rng = seed;
    struct qp_model *m = model_with_x(4, x_dims);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    scalar(m, "three", 3.0f);
    scalar(m, "zero", 0.0f);
    scalar(m, "six", 6.0f);
    char(*act)[16] = model_alloc(m, (size_t)(n + 1) * 16);
    snprintf(act[0], 16, "x");
    for (int k = 1; k <= n; k++) {
        char nm[16], o[16], c1[16], t[4][16];
        snprintf(nm, sizeof nm, "n%d", k);
        snprintf(o, sizeof o, "a%d", k);
        snprintf(c1, sizeof c1, "k%d", k);
        for (int i = 0; i < 4; i++)
            snprintf(t[i], sizeof t[i], "t%d_%d", k, i);
        const char *in = act[rnd() % 4 ? (unsigned)(k - 1) : rnd() % (unsigned)k];
        int op = (int)(rnd() % 11);
        if (k == 1) op = 0;
        switch (op) {
        case 0:
        case 1: {
            int kk = rnd() % 2 ? 3 : 1, grp = rnd() % 4 == 0 ? 2 : 1;
            int64_t wd[4] = {C, C / grp, kk, kk}, bd[1] = {C};
            rt_rand_init(m, c1, 4, wd, -0.6f / (float)kk, 0.6f / (float)kk);
            char bn_[16];
            snprintf(bn_, sizeof bn_, "b%d", k);
            int bias = rnd() % 2;
            if (bias) rt_rand_init(m, bn_, 1, bd, -0.2f, 0.2f);
            if (k % 4 == 3) { /* ConvTranspose, same shape (stride 1); no rnd(): same graphs */
                int id = node(g, nm, "ConvTranspose", bias ? 3 : 2, in, c1, bias ? bn_ : NULL, o);
                if (kk > 1) {
                    struct qp_attr *a = qp_node_add_attr(g, id, "pads", QP_ATTR_INTS);
                    assert_non_null(a);
                    int64_t *pads = model_alloc(m, 4 * sizeof *pads);
                    pads[0] = pads[1] = pads[2] = pads[3] = kk / 2;
                    a->ints = pads;
                    a->n = 4;
                }
                if (grp > 1) {
                    struct qp_attr *a = qp_node_add_attr(g, id, "group", QP_ATTR_INT);
                    assert_non_null(a);
                    a->i = grp;
                }
                break;
            }
            conv(m, nm, in, c1, bias ? bn_ : NULL, kk, grp, o);
            break;
        }
        case 2:
            bn(m, nm, in, o);
            break;
        case 3:
        case 4: {
            int pc = rnd() % 2;
            int64_t d4[4] = {1, C, 1, 1}, d3[3] = {C, 1, 1};
            if (pc && rnd() % 2)
                rt_rand_init(m, c1, 4, d4, 0.5f, 1.5f);
            else if (pc)
                rt_rand_init(m, c1, 3, d3, -0.5f, 0.5f);
            else
                scalar(m, c1, op == 3 ? 0.8f : 0.3f);
            int swap = rnd() % 2;
            node(g, nm, op == 3 ? "Mul" : "Add", 2, swap ? c1 : in, swap ? in : c1, NULL, o);
            break;
        }
        case 5: /* residual */
            node(g, nm, "Add", 2, in, act[rnd() % (unsigned)k], NULL, o);
            break;
        case 6: {
            static const char *const un[5] = {"Relu", "LeakyRelu", "Sigmoid", "HardSigmoid",
                                              "HardSwish"};
            node(g, nm, un[rnd() % 5], 1, in, NULL, NULL, o);
            break;
        }
        case 7: {
            char lo[16], hi[16];
            snprintf(lo, sizeof lo, "lo%d", k);
            snprintf(hi, sizeof hi, "hi%d", k);
            scalar(m, lo, -0.7f);
            scalar(m, hi, 0.9f);
            node(g, nm, "Clip", 3, in, lo, hi, o);
            break;
        }
        default: { /* x * Clip(x + 3, 0, 6) / 6 */
            char n2[4][20];
            for (int i = 0; i < 4; i++)
                snprintf(n2[i], sizeof n2[i], "%s_%d", nm, i);
            node(g, n2[0], "Add", 2, in, "three", NULL, t[0]);
            node(g, n2[1], "Clip", 3, t[0], "zero", "six", t[1]);
            node(g, n2[2], "Mul", 2, in, t[1], NULL, t[2]);
            node(g, nm, "Div", 2, t[2], "six", NULL, o);
        }
        }
        snprintf(act[k], 16, "%s", o);
    }
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, act[n]), &err), QP_OK);
    int mid = n / 2 + (int)(rnd() % (unsigned)(n / 2));
    if (mid != n)
        assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, act[mid]), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

/* Runs s and copies every output into out (n_out outputs of NX floats); returns n_out. */
static size_t run_all(struct qp_session *s, int partial, float *out) {
    struct qp_error err = {0};
    struct qp_array in;
    int64_t dims[4] = {1, C, HW, HW};
    assert_int_equal(qp_array_view(&in, QP_DTYPE_FLOAT, 4, dims, xin, sizeof xin, &err), QP_OK);
    if (partial)
        assert_int_equal(qp_session_run_partial(s, &err), QP_OK);
    else
        assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
    size_t n = qp_session_n_outputs(s);
    for (size_t o = 0; o < n; o++) {
        struct qp_array a;
        assert_int_equal(qp_session_output(s, o, &a, &err), QP_OK);
        assert_int_equal(a.nbytes, sizeof(float) * NX);
        memcpy(out + o * NX, a.data, a.nbytes);
    }
    return n;
}

/* A random overlay on an input of a random node: activations per tensor or per channel (axis
 * 1), constants per tensor or, for 4-D weights, per output channel. */
static void random_ov(const struct qp_graph *g, struct ovp *o, char *name) {
    const struct qp_node *nd;
    int k;
    do {
        k = g->topo[rnd() % (unsigned)g->n_topo];
        nd = &g->nodes[k];
    } while (nd->n_inputs == 0);
    snprintf(name, 20, "%s", nd->name);
    int input = (int)(rnd() % (unsigned)nd->n_inputs);
    const struct qp_value *v = &g->values[nd->inputs[input]];
    int is_w = v->initializer >= 0;
    const struct qp_tensor *t = is_w ? &g->inits[v->initializer] : NULL;
    size_t np = 1;
    int axis = 0;
    if (!is_w && rnd() % 2) {
        np = C;
        axis = 1;
    } else if (is_w && t->rank == 4 && rnd() % 2) {
        np = (size_t)t->dims[0];
    }
    make_ov(o, name, input, rnd() % 2 ? QP_DTYPE_INT8 : QP_DTYPE_UINT8, np, is_w ? 0.004f : 0.02f);
    o->ov.axis = axis;
}

#ifndef SEEDS
#define SEEDS 40
#endif

static float big_a[4 * NX], big_b[4 * NX];

static void test_fuse_random_graphs(void **state) {
    (void)state;
    struct qp_error err = {0};
    size_t total_fused = 0, total_convt = 0, total_fvar = 0;
    for (uint32_t seed = 1; seed <= SEEDS; seed++) {
        int n = 6 + (int)(seed % 9);
        struct qp_model *m = random_conv_model(seed, n);
        fill_x(seed + 100);
        /* Fused == unfused within tolerance; 1 == 2 threads. */
        struct qp_session *f = session(m, 2), *f1 = session(m, 1);
        setenv("QP_NO_FUSE", "1", 1);
        struct qp_session *u = session(m, 2);
        unsetenv("QP_NO_FUSE");
        size_t no = run_all(f, 0, big_a);
        total_fused += fused_steps(f);
        total_convt += (size_t)convt_steps(f);
        run_all(u, 0, big_b);
        for (size_t i = 0; i < no * NX; i++)
            if (!(fabsf(big_a[i] - big_b[i]) <= 1e-5f + 1e-4f * fabsf(big_b[i])))
                fail_msg("seed %u element %zu: fused %.9g, unfused %.9g", seed, i, (double)big_a[i],
                         (double)big_b[i]);
        run_all(f1, 0, big_b);
        assert_memory_equal(big_a, big_b, no * NX * sizeof(float));
        qp_session_free(f);
        qp_session_free(f1);
        qp_session_free(u);

        /* Overlays == Q/DQ graph, bit for bit. */
        struct ovp o[4];
        char names[4][20];
        struct qp_overlay ov[4];
        int n_ov = 0;
        rt_rng = seed * 7919u;
        for (int tries = 0; n_ov < 4 && tries < 20; tries++) {
            random_ov(m->graph, &o[n_ov], names[n_ov]);
            int dup = 0;
            for (int j = 0; j < n_ov; j++)
                dup |= strcmp(names[j], names[n_ov]) == 0 && o[j].ov.input == o[n_ov].ov.input;
            if (!dup) {
                o[n_ov].ov.node = names[n_ov];
                n_ov++;
            }
        }
        for (int j = 0; j < n_ov; j++)
            ov[j] = o[j].ov;
        struct qp_model *mq = random_conv_model(seed, n);
        rewrite_qdq(mq, o, n_ov);
        struct qp_session *s = session(m, 2), *q = session(mq, 2);
        assert_int_equal(qp_session_set_overlays(s, (size_t)n_ov, ov, &err), QP_OK);
        run_all(s, 0, big_a);
        run_all(q, 0, big_b);
        if (memcmp(big_a, big_b, no * NX * sizeof(float)) != 0)
            fail_msg("seed %u: overlay run differs from the Q/DQ graph", seed);
        assert_int_equal(fused_steps(s), fused_steps(q));

        /* Partial re-execution from a reference without the last overlays == full runs. */
        struct qp_session *full = session(m, 2);
        qp_session_set_cache(s, (size_t)16 << 20);
        for (int k = 0; k <= n_ov; k++) {
            assert_int_equal(qp_session_set_overlays(s, (size_t)(n_ov - k), ov, &err), QP_OK);
            if (k == 0) {
                run_all(s, 0, big_a); /* the reference: every overlay */
                continue;
            }
            assert_int_equal(qp_session_set_overlays(full, (size_t)(n_ov - k), ov, &err), QP_OK);
            run_all(s, 1, big_a);
            run_all(full, 0, big_b);
            if (memcmp(big_a, big_b, no * NX * sizeof(float)) != 0)
                fail_msg("seed %u: partial run without the last %d overlays differs", seed, k);
        }
        /* Bypass flags toggled in random order (fused steps switching variants, or re-planning
         * where a constant decides what fuses) == a fresh session with the same flags. */
        for (int k = 0; k < 12; k++) {
            unsigned mask = rnd() % (1u << n_ov);
            for (int j = 0; j < n_ov; j++) {
                ov[j] = o[j].ov;
                ov[j].bypass = (int)(mask >> j & 1u);
            }
            assert_int_equal(qp_session_set_overlays(s, (size_t)n_ov, ov, &err), QP_OK);
            run_all(s, k % 2, big_a);
            struct qp_session *b = session(m, 2);
            assert_int_equal(qp_session_set_overlays(b, (size_t)n_ov, ov, &err), QP_OK);
            run_all(b, 0, big_b);
            if (memcmp(big_a, big_b, no * NX * sizeof(float)) != 0)
                fail_msg("seed %u: bypass mask 0x%x toggled differs from a fresh plan", seed, mask);
            qp_session_free(b);
        }
        for (size_t k = 0; s->last && k < s->last->n_steps; k++)
            total_fvar += s->last->steps[k].fuse && s->last->steps[k].n_var >= 2;
        qp_session_free(s);
        qp_session_free(q);
        qp_session_free(full);
        qp_model_free(mq);
        qp_model_free(m);
    }
    assert_true(total_fused >= 40); /* the graphs do fuse */
    assert_true(total_convt >= 5);  /* ConvTranspose groups too */
    assert_true(total_fvar >= 5);   /* fused steps that switched constant overlays (8) */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fused_close_to_unfused),
        cmocka_unit_test(test_fuse_observer),
        cmocka_unit_test(test_fuse_overlay_equals_qdq),
        cmocka_unit_test(test_fuse_partial),
        cmocka_unit_test(test_fuse_sum_in_place),
        cmocka_unit_test(test_fuse_convt),
        cmocka_unit_test(test_fuse_convt_overlay_partial),
        cmocka_unit_test(test_fuse_random_graphs),
        cmocka_unit_test(test_fuse_bypass_toggles),
        cmocka_unit_test(test_no_fusion_option),
        cmocka_unit_test(test_fuse_weight_variants),
        cmocka_unit_test(test_fuse_baked_constants),
        cmocka_unit_test(test_fuse_convt_variants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
