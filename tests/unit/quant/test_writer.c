/*
 * The Q/DQ writer (src/quant/writer.h) and the quantize pipeline (src/pipeline/quantize.h).
 *
 * Hand-built graphs check values: scales from the ranges and from the weights, explicit zero
 * points, the one shared pair per tensor, an unplaced consumer of a placed tensor reading the
 * float tensor, Constant weights folded, --dq_only, and the engine running the written model
 * equal to the same arithmetic done by hand with qparams.
 *
 * Preservation: for a ResNet-like and a ViT-like model (tests/integration/quantize_models) and the
 * PaddleOCR models (.cache/models, from scripts/setup.sh), random placements — including LayerNorm,
 * Sqrt, Gelu and Softmax inputs and a tensor shared by two consumers with only one placed — go
 * through placement file -> qp_quantize -> saved model -> diff against the placement, which must
 * report only SAME. Every written model then runs in the engine, and tests/integration/
 * quantize_ort.js checks that ONNX Runtime loads it and agrees with the engine. Missing models or
 * onnxruntime-node are skipped unless QP_REQUIRE_REAL_MODELS=1, which makes them fail.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "qgraph.h"

#include "calib/ranges.h"
#include "core/arena.h"
#include "ir/ir.h"
#include "ir/opset_convert.h"
#include "qplace/model.h"
#include "qplace/session.h"
#include "placement/diff.h"
#include "placement/placement.h"
#include "qmath/qparams.h"
#include "pipeline/quantize.h"
#include "placement/select.h"
#include "quant/writer.h"

#define SRC_ROOT QP_TEST_DATA_DIR "/../.."

static int require_real(void) {
    const char *e = getenv("QP_REQUIRE_REAL_MODELS");
    return e && strcmp(e, "1") == 0;
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* ---- hand-built graphs -------------------------------------------------------------------- */

static const float W1[3 * 2] = {0.5f, -1.0f, 0.25f, 0.125f, -2.0f, 1.5f}; /* [3,2,1,1] */
static const float B1[3] = {0.1f, -0.2f, 0.3f};

/* x[1,2,2,2] -> Conv(W1, B1) -> y ; x -> Relu -> r.  W1 may be a Constant node. */
static struct qp_model *conv_relu(int weight_as_constant) {
    struct qp_model *m = qp_model_create();
    assert_non_null(m);
    qg_set_opset(m, 13);
    qg_shape(m, "x", QP_DTYPE_FLOAT, 4, QG_DIMS(1, 2, 2, 2));
    qg_input(m, "x");
    if (weight_as_constant) {
        int n = qg_node(m, "w_const", "Constant", "", "W");
        struct qp_attr *a = qp_node_add_attr(m->graph, n, "value", QP_ATTR_TENSOR);
        assert_non_null(a);
        a->t = qp_arena_calloc(m->arena, 1, sizeof *a->t);
        int64_t *dims = qp_arena_calloc(m->arena, 4, sizeof *dims);
        float *data = qp_arena_calloc(m->arena, 6, sizeof *data);
        dims[0] = 3, dims[1] = 2, dims[2] = dims[3] = 1;
        memcpy(data, W1, sizeof W1);
        *a->t = (struct qp_tensor){.name = "",
                                   .dtype = QP_DTYPE_FLOAT,
                                   .rank = 4,
                                   .dims = dims,
                                   .numel = 6,
                                   .data = data,
                                   .nbytes = sizeof W1};
        qg_shape(m, "W", QP_DTYPE_FLOAT, 4, QG_DIMS(3, 2, 1, 1));
    } else {
        qg_init_data(m, "W", 4, QG_DIMS(3, 2, 1, 1), W1);
    }
    qg_init_data(m, "B", 1, QG_DIMS(3), B1);
    int c = qg_node(m, "conv", "Conv", "x,W,B", "y");
    (void)c;
    qg_node(m, "relu", "Relu", "x", "r");
    qg_shape(m, "y", QP_DTYPE_FLOAT, 4, QG_DIMS(1, 3, 2, 2));
    qg_shape(m, "r", QP_DTYPE_FLOAT, 4, QG_DIMS(1, 2, 2, 2));
    qg_output(m, "y");
    qg_output(m, "r");
    qg_sort(m);
    return m;
}

static int fixed_amax(void *user, const char *tensor, float *amax_out) {
    if (strcmp(tensor, "x") != 0) return 0;
    *amax_out = *(const float *)user;
    return 1;
}

static struct qp_placement *conv_placement(void) {
    struct qp_error err = {0};
    struct qp_placement *p = qp_placement_create();
    assert_non_null(p);
    assert_int_equal(qp_placement_add_edge(p, "x", "conv", 0, "test", &err), QP_OK);
    assert_int_equal(qp_placement_add_weight(p, "W", "conv", 1, 0, "test", &err), QP_OK);
    return p;
}

static const struct qp_tensor *init_of(const struct qp_graph *g, const char *name) {
    int v = qp_graph_find_value(g, name);
    if (v < 0 || g->values[v].initializer < 0) return NULL;
    return &g->inits[g->values[v].initializer];
}

static int producer_op_is(const struct qp_graph *g, int v, const char *op) {
    int p = g->values[v].producer;
    return p >= 0 && !g->nodes[p].dead && strcmp(g->nodes[p].op_type, op) == 0;
}

static size_t count_live(const struct qp_graph *g, const char *op) {
    size_t n = 0;
    for (size_t i = 0; i < g->n_nodes; i++)
        n += !g->nodes[i].dead && strcmp(g->nodes[i].op_type, op) == 0;
    return n;
}

static float read_f32(const void *p, size_t i) {
    float f;
    memcpy(&f, (const unsigned char *)p + i * 4, 4);
    return f;
}

static void check_conv_relu_written(struct qp_model *m, float amax, int dq_only) {
    struct qp_graph *g = m->graph;
    int conv = qp_graph_find_node(g, "conv"), relu = qp_graph_find_node(g, "relu");
    int x = qp_graph_find_value(g, "x");
    assert_true(conv >= 0 && relu >= 0 && x >= 0);
    /* The placed slot reads the DQ; the unplaced consumer of the same tensor reads x. */
    int cin = g->nodes[conv].inputs[0];
    assert_true(producer_op_is(g, cin, "DequantizeLinear"));
    assert_int_equal(g->nodes[relu].inputs[0], x);
    int dq = g->values[cin].producer;
    int q = g->values[g->nodes[dq].inputs[0]].producer;
    assert_string_equal(g->nodes[q].op_type, "QuantizeLinear");
    assert_int_equal(g->nodes[q].inputs[0], x);
    assert_int_equal(g->nodes[q].n_inputs, 3);
    /* Activation scale from the range, through qparams; zero point an explicit int8 zero. */
    float want = 0;
    int32_t zp = 1;
    struct qp_error err = {0};
    assert_int_equal(qp_qparams_from_range(QP_DTYPE_INT8, -amax, amax, 1, &want, &zp, &err), QP_OK);
    const struct qp_tensor *s = init_of(g, g->values[g->nodes[q].inputs[1]].name);
    const struct qp_tensor *z = init_of(g, g->values[g->nodes[q].inputs[2]].name);
    assert_non_null(s);
    assert_non_null(z);
    assert_int_equal(s->rank, 0);
    assert_true(read_f32(s->data, 0) == want);
    assert_true(fabsf(want - amax / 127.0f) <= 1e-9f);
    assert_int_equal(z->dtype, QP_DTYPE_INT8);
    assert_int_equal(((const int8_t *)z->data)[0], 0);
    assert_string_equal(s->name, "x_scale");
    /* The weight: per channel along axis 0, scale = absmax / 127. */
    int win = g->nodes[conv].inputs[1];
    assert_true(producer_op_is(g, win, "DequantizeLinear"));
    int wdq = g->values[win].producer;
    const struct qp_attr *axis = qp_node_attr(&g->nodes[wdq], "axis");
    assert_non_null(axis);
    assert_int_equal(axis->i, 0);
    const struct qp_tensor *ws = init_of(g, g->values[g->nodes[wdq].inputs[1]].name);
    assert_non_null(ws);
    assert_int_equal(ws->rank, 1);
    assert_int_equal(ws->dims[0], 3);
    const float absmax[3] = {1.0f, 0.25f, 2.0f};
    for (int c = 0; c < 3; c++)
        assert_true(fabsf(read_f32(ws->data, (size_t)c) - absmax[c] / 127.0f) <= 1e-9f);
    int wsrc = g->nodes[wdq].inputs[0];
    if (dq_only) {
        /* Stored quantized, same name, no Q: round half to even of W / scale. */
        assert_string_equal(g->values[wsrc].name, "W");
        const struct qp_tensor *wq = init_of(g, "W");
        assert_non_null(wq);
        assert_int_equal(wq->dtype, QP_DTYPE_INT8);
        const int8_t *qv = wq->data;
        for (int k = 0; k < 6; k++) {
            double e = nearbyint((double)W1[k] / (double)read_f32(ws->data, (size_t)k / 2));
            assert_int_equal(qv[k], (int)fmax(-128, fmin(127, e)));
        }
        assert_int_equal(qv[1], -127); /* -1.0 at absmax 1.0 */
        assert_int_equal(qv[4], -127);
        assert_int_equal(count_live(g, "QuantizeLinear"), 1);
    } else {
        assert_true(producer_op_is(g, wsrc, "QuantizeLinear"));
        int wq = g->values[wsrc].producer;
        assert_string_equal(g->values[g->nodes[wq].inputs[0]].name, "W");
        assert_int_equal(count_live(g, "QuantizeLinear"), 2);
    }
    /* The bias stays float and is read directly. */
    assert_string_equal(g->values[g->nodes[conv].inputs[2]].name, "B");
    assert_int_equal(init_of(g, "B")->dtype, QP_DTYPE_FLOAT);
    assert_int_equal(count_live(g, "DequantizeLinear"), 2);
    assert_true(qp_model_opset(m, "") >= 19);
}

/* Runs the written model in the engine and compares y with the same arithmetic by hand. */
static void check_conv_engine(struct qp_model *m, float amax) {
    struct qp_error err = {0};
    struct qp_session *s = NULL;
    assert_int_equal(qp_session_create(m, NULL, 0, NULL, &s, &err), QP_OK);
    struct qp_array in;
    assert_int_equal(qp_array_alloc(&in, QP_DTYPE_FLOAT, 4, QG_DIMS(1, 2, 2, 2), &err), QP_OK);
    float *x = in.data;
    const float xs[8] = {0.3f, -1.7f, 2.5f, 0.01f, -0.6f, 1.1f, 3.0f, -2.2f};
    memcpy(x, xs, sizeof xs);
    assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
    struct qp_array y, r;
    assert_int_equal(qp_session_output(s, 0, &y, &err), QP_OK);
    assert_int_equal(qp_session_output(s, 1, &r, &err), QP_OK);
    float scale = 0, wscale[3];
    int32_t zp = 0;
    assert_int_equal(qp_qparams_from_range(QP_DTYPE_INT8, -amax, amax, 1, &scale, &zp, &err),
                     QP_OK);
    for (int c = 0; c < 3; c++) {
        float a = fmaxf(fabsf(W1[2 * c]), fabsf(W1[2 * c + 1]));
        assert_int_equal(qp_qparams_from_range(QP_DTYPE_INT8, -a, a, 1, &wscale[c], &zp, &err),
                         QP_OK);
    }
    struct qp_qspec xsp = {.qtype = QP_DTYPE_INT8,
                           .saturate = 1,
                           .outer = 1,
                           .axis_len = 1,
                           .inner = 8,
                           .scale = &scale,
                           .n_params = 1};
    struct qp_qspec wsp = {.qtype = QP_DTYPE_INT8,
                           .saturate = 1,
                           .outer = 1,
                           .axis_len = 3,
                           .inner = 2,
                           .scale = wscale,
                           .n_params = 3};
    float fx[8], fw[6];
    qp_fake_quantize_f32(&xsp, xs, fx, 0, 8);
    qp_fake_quantize_f32(&wsp, W1, fw, 0, 6);
    /* fx of 3.0 with amax 2.5 saturates at 127 * scale. */
    assert_true(fx[6] == 127 * scale);
    const float *yo = y.data, *ro = r.data;
    for (int c = 0; c < 3; c++)
        for (int p = 0; p < 4; p++) {
            float want = fw[2 * c] * fx[p] + fw[2 * c + 1] * fx[4 + p] + B1[c];
            assert_true(fabsf(yo[c * 4 + p] - want) <= 1e-6f + 1e-5f * fabsf(want));
        }
    /* The Relu reads the float tensor: no quantization error at all. */
    for (int k = 0; k < 8; k++)
        assert_true(ro[k] == fmaxf(xs[k], 0.0f));
    qp_array_release(&in);
    qp_session_free(s);
}

static void test_write_conv(void **state) {
    (void)state;
    for (int dq_only = 0; dq_only < 2; dq_only++) {
        struct qp_model *m = conv_relu(0);
        struct qp_placement *p = conv_placement();
        float amax = 2.5f;
        struct qp_writer_options o;
        qp_writer_options_default(&o);
        o.amax = fixed_amax;
        o.amax_user = &amax;
        o.dq_only = dq_only;
        struct qp_writer_stats st;
        struct qp_error err = {0};
        assert_int_equal(qp_qdq_write(m, p, &o, &st, &err), QP_OK);
        assert_int_equal(st.n_edges, 1);
        assert_int_equal(st.n_tensors, 1);
        assert_int_equal(st.n_weights, 1);
        assert_int_equal(st.n_ops, 1);
        assert_string_equal(st.by_op[0].op_type, "Conv");
        assert_int_equal(st.opset_from, 13);
        assert_int_equal(st.opset_to, 19);
        check_conv_relu_written(m, amax, dq_only);
        check_conv_engine(m, amax);
        /* diff against the placement: only SAME. */
        struct qp_qdq_slots *a = NULL, *b = NULL;
        assert_int_equal(qp_qdq_slots_from_model(m->graph, &a, &err), QP_OK);
        assert_int_equal(qp_qdq_slots_from_placement(p, m->graph, &b, &err), QP_OK);
        struct qp_qdq_diff d;
        assert_int_equal(qp_qdq_diff(a, b, &d, &err), QP_OK);
        assert_true(qp_qdq_diff_same(&d));
        assert_int_equal(d.same[0], 1);
        assert_int_equal(d.same[1], 1);
        qp_qdq_diff_release(&d);
        qp_qdq_slots_free(a);
        qp_qdq_slots_free(b);
        qp_placement_free(p);
        qp_model_free(m);
    }
}

/* weight_clip_mse: a channel whose weights lie on the grid of 0.8 x its absmax, but for the
 * absmax weight itself, gets a clipped scale (its many weights then quantize exactly; clipping
 * the one costs less) with less error than absmax's, checked against the error computed here;
 * a channel whose weights lie on absmax's own grid keeps absmax / 127; the stats count one
 * clipped channel. */
/* x [1, k, 1, 1] -> Conv with weight W [c, k, 1, 1] = w -> y, and a placement quantizing W per
 * output channel (*p). */
static struct qp_model *conv_weight_model(int c, int k, const float *w, struct qp_placement **p) {
    struct qp_model *m = qp_model_create();
    assert_non_null(m);
    qg_set_opset(m, 13);
    qg_shape(m, "x", QP_DTYPE_FLOAT, 4, QG_DIMS(1, k, 1, 1));
    qg_input(m, "x");
    qg_init_data(m, "W", 4, QG_DIMS(c, k, 1, 1), w);
    qg_node(m, "conv", "Conv", "x,W", "y");
    qg_shape(m, "y", QP_DTYPE_FLOAT, 4, QG_DIMS(1, c, 1, 1));
    qg_output(m, "y");
    qg_sort(m);
    struct qp_error err = {0};
    *p = qp_placement_create();
    assert_int_equal(qp_placement_add_weight(*p, "W", "conv", 1, 0, "test", &err), QP_OK);
    return m;
}

/* The weight scales of a Conv with C channels of K weights each (channel c's outlier at c),
 * written with weight clipping on n_threads; stats into *st. Caller frees. */
static float *clipped_scales(int n_threads, struct qp_writer_stats *st) {
    enum { C = 48, K = 2048 }; /* 98304 weights: over QP_CLIP_PARALLEL_MIN */
    static float w[C * K];
    for (int c = 0; c < C; c++)
        for (int i = 0; i < K; i++)
            w[c * K + i] = (float)((i * (31 + 2 * c)) % 255 - 127) * (0.5f + 0.01f * c) / 127.0f;
    for (int c = 0; c < C; c++)
        w[c * K + c] = 1.0f + 0.05f * (float)(c % 7);
    struct qp_error err = {0};
    struct qp_placement *p = NULL;
    struct qp_model *m = conv_weight_model(C, K, w, &p);
    struct qp_writer_options o;
    qp_writer_options_default(&o);
    o.weight_clip_mse = 1;
    o.n_threads = n_threads;
    assert_int_equal(qp_qdq_write(m, p, &o, st, &err), QP_OK);
    const struct qp_graph *g = m->graph;
    int conv = qp_graph_find_node(g, "conv");
    int wdq = g->values[g->nodes[conv].inputs[1]].producer;
    const struct qp_tensor *ws = init_of(g, g->values[g->nodes[wdq].inputs[1]].name);
    assert_int_equal(ws->numel, C);
    float *out = malloc(C * sizeof *out);
    assert_non_null(out);
    for (int c = 0; c < C; c++)
        out[c] = read_f32(ws->data, c);
    qp_placement_free(p);
    qp_model_free(m);
    return out;
}

/* Channels clipped side by side on several threads give the one-thread scales and stats. */
static void test_weight_clipping_threads(void **state) {
    (void)state;
    struct qp_writer_stats a, b;
    float *one = clipped_scales(1, &a), *four = clipped_scales(4, &b);
    assert_memory_equal(one, four, 48 * sizeof *one);
    assert_int_equal(a.n_weight_channels, 48);
    assert_int_equal(a.n_weight_channels_clipped, b.n_weight_channels_clipped);
    assert_true(a.n_weight_channels_clipped > 24); /* outliers: most channels clip */
    assert_memory_equal(&a.weight_clip_mean_ratio, &b.weight_clip_mean_ratio, sizeof(double));
    free(one);
    free(four);
}

static void test_weight_clipping(void **state) {
    (void)state;
    enum { K = 1 << 14 };
    static float w[2 * K];
    for (int i = 0; i < K; i++) {
        w[i] = (float)((i * 37) % 255 - 127) * (0.8f / 127.0f);
        w[K + i] = (float)((i * 29) % 255 - 127) / 127.0f;
    }
    w[17] = 1.0f;
    struct qp_error err = {0};
    struct qp_placement *p = NULL;
    struct qp_model *m = conv_weight_model(2, K, w, &p);
    struct qp_writer_options o;
    qp_writer_options_default(&o);
    o.weight_clip_mse = 1;
    struct qp_writer_stats st;
    assert_int_equal(qp_qdq_write(m, p, &o, &st, &err), QP_OK);
    assert_int_equal(st.n_weight_channels, 2);
    assert_int_equal(st.n_weight_channels_clipped, 1);
    assert_true(st.weight_clip_mean_ratio > 0.5 && st.weight_clip_mean_ratio < 1.0);
    const struct qp_graph *g = m->graph;
    int conv = qp_graph_find_node(g, "conv");
    int wdq = g->values[g->nodes[conv].inputs[1]].producer;
    const struct qp_tensor *ws = init_of(g, g->values[g->nodes[wdq].inputs[1]].name);
    float s0 = read_f32(ws->data, 0), s1 = read_f32(ws->data, 1);
    assert_true(s1 == 1.0f / 127.0f);
    assert_true(s0 < 1.0f / 127.0f && s0 >= 0.5f / 127.0f);
    double e_clip = 0, e_abs = 0;
    for (int i = 0; i < K; i++) {
        double qc = fmax(-128, fmin(127, nearbyint(w[i] / s0))) * s0;
        double qa = fmax(-128, fmin(127, nearbyint(w[i] * 127.0f))) / 127.0;
        e_clip += (qc - w[i]) * (qc - w[i]);
        e_abs += (qa - w[i]) * (qa - w[i]);
    }
    if (!(e_clip < e_abs)) fail_msg("clipped error %g, absmax error %g", e_clip, e_abs);
    qp_placement_free(p);
    qp_model_free(m);
}

static void test_constant_weight_folded(void **state) {
    (void)state;
    struct qp_model *m = conv_relu(1);
    struct qp_placement *p = conv_placement();
    float amax = 2.5f;
    struct qp_writer_options o;
    qp_writer_options_default(&o);
    o.amax = fixed_amax;
    o.amax_user = &amax;
    struct qp_writer_stats st;
    struct qp_error err = {0};
    assert_int_equal(qp_qdq_write(m, p, &o, &st, &err), QP_OK);
    assert_int_equal(st.n_folded_constants, 1);
    assert_int_equal(count_live(m->graph, "Constant"), 0);
    assert_non_null(init_of(m->graph, "W"));
    check_conv_relu_written(m, amax, 0);
    check_conv_engine(m, amax);
    qp_placement_free(p);
    qp_model_free(m);
}

/* Two consumers of one tensor both placed: one shared pair. */
static void test_one_pair_per_tensor(void **state) {
    (void)state;
    struct qp_model *m = conv_relu(0);
    struct qp_placement *p = conv_placement();
    struct qp_error err = {0};
    assert_int_equal(qp_placement_add_edge(p, "x", "relu", 0, "test", &err), QP_OK);
    float amax = 1.0f;
    struct qp_writer_options o;
    qp_writer_options_default(&o);
    o.amax = fixed_amax;
    o.amax_user = &amax;
    struct qp_writer_stats st;
    assert_int_equal(qp_qdq_write(m, p, &o, &st, &err), QP_OK);
    assert_int_equal(st.n_edges, 2);
    assert_int_equal(st.n_tensors, 1);
    struct qp_graph *g = m->graph;
    int conv = qp_graph_find_node(g, "conv"), relu = qp_graph_find_node(g, "relu");
    assert_int_equal(g->nodes[conv].inputs[0], g->nodes[relu].inputs[0]);
    assert_int_equal(count_live(g, "QuantizeLinear"), 2); /* x and W */
    qp_placement_free(p);
    qp_model_free(m);
}

static void test_errors(void **state) {
    (void)state;
    float amax = 1.0f;
    struct qp_writer_options o;
    qp_writer_options_default(&o);
    o.amax = fixed_amax;
    o.amax_user = &amax;
    struct qp_error err = {0};
    /* A placement naming a missing node. */
    struct qp_model *m = conv_relu(0);
    struct qp_placement *p = qp_placement_create();
    assert_int_equal(qp_placement_add_edge(p, "x", "no_such_node", 0, "test", &err), QP_OK);
    assert_int_equal(qp_qdq_write(m, p, &o, NULL, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "no_such_node"));
    assert_int_equal(count_live(m->graph, "QuantizeLinear"), 0);
    qp_placement_free(p);
    /* A missing tensor. */
    p = qp_placement_create();
    assert_int_equal(qp_placement_add_edge(p, "ghost", "conv", 0, "test", &err), QP_OK);
    assert_int_equal(qp_qdq_write(m, p, &o, NULL, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "ghost"));
    qp_placement_free(p);
    /* No calibrated range. */
    qp_model_free(m);
    m = conv_relu(0);
    qg_node(m, "relu2", "Relu", "y", "y2");
    qg_output(m, "y2");
    qg_sort(m);
    p = qp_placement_create();
    assert_int_equal(qp_placement_add_edge(p, "y", "relu2", 0, "test", &err), QP_OK);
    assert_int_equal(qp_qdq_write(m, p, &o, NULL, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "no calibrated range"));
    qp_placement_free(p);
    /* Already quantized: refused. */
    p = conv_placement();
    assert_int_equal(qp_qdq_write(m, p, &o, NULL, &err), QP_OK);
    assert_true(qp_model_has_qdq(m));
    assert_int_equal(qp_qdq_write(m, p, &o, NULL, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "already quantized"));
    qp_placement_free(p);
    qp_model_free(m);
    /* High precision other than float/float16/bfloat16 (test_f16.c covers those). */
    m = conv_relu(0);
    p = conv_placement();
    o.high_precision = QP_DTYPE_DOUBLE;
    assert_int_equal(qp_qdq_write(m, p, &o, NULL, &err), QP_ERR_UNSUPPORTED);
    qp_placement_free(p);
    qp_model_free(m);
}

static void test_default_output(void **state) {
    (void)state;
    char *s = qp_quant_default_output("dir/model.onnx");
    assert_string_equal(s, "dir/model.quant.onnx");
    free(s);
    s = qp_quant_default_output("model");
    assert_string_equal(s, "model.quant.onnx");
    free(s);
}

/* ---- preservation over real models ------------------------------------------------------- */

struct name_set {
    size_t n, cap;
    char **names;
};

static int set_has(const struct name_set *s, const char *name) {
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0) return 1;
    return 0;
}

static int observe_float(const char *tensor, const char *node, const struct qp_array *v,
                         void *user) {
    (void)node;
    struct name_set *s = user;
    if (v->dtype != QP_DTYPE_FLOAT || set_has(s, tensor)) return 0;
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 256;
        s->names = realloc(s->names, s->cap * sizeof *s->names);
        assert_non_null(s->names);
    }
    s->names[s->n++] = strdup(tensor);
    return 0;
}

static uint32_t lcg(uint32_t *st) {
    *st = *st * 1664525u + 1013904223u;
    return *st >> 8;
}

static void fill_input(struct qp_array *a, uint32_t seed) {
    float *x = a->data;
    size_t n = a->nbytes / 4;
    for (size_t k = 0; k < n; k++)
        x[k] = (float)(lcg(&seed) % 20001) / 10000.0f - 1.0f;
}

static int is_special(const char *op) {
    return strcmp(op, "LayerNormalization") == 0 || strcmp(op, "Sqrt") == 0 ||
           strcmp(op, "Gelu") == 0 || strcmp(op, "Softmax") == 0;
}

static int weight_op(const char *op) {
    static const char *const ops[] = {"Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Mul"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(op, ops[i]) == 0) return 1;
    return 0;
}

/* Inputs that must stay exact for shapes or parameters (Resize scales, Pad values, Clip bounds). */
static int param_slot(const char *op, int input) {
    return input > 0 && (strcmp(op, "Resize") == 0 || strcmp(op, "Upsample") == 0 ||
                         strcmp(op, "Pad") == 0 || strcmp(op, "Clip") == 0);
}

struct model_case {
    const char *path;
    const char *label;
    int rank;
    int64_t dims[4];
    int n_seeds;
};

/* A random placement over the float tensors the engine computes, with the special cases. */
static struct qp_placement *random_placement(struct qp_model *m, const struct model_case *mc,
                                             uint32_t seed, size_t *n_special, int *shared) {
    struct qp_error err = {0};
    struct qp_graph *g = m->graph;
    struct name_set floats = {0};
    struct qp_session *s = NULL;
    struct qp_shape shape = {.name = g->values[g->inputs[0]].name, .rank = mc->rank};
    memcpy(shape.dims, mc->dims, sizeof mc->dims);
    assert_int_equal(qp_session_create(m, NULL, 1, &shape, &s, &err), QP_OK);
    struct qp_array in;
    assert_int_equal(qp_array_alloc(&in, QP_DTYPE_FLOAT, mc->rank, mc->dims, &err), QP_OK);
    fill_input(&in, 5);
    qp_session_set_observer(s, observe_float, &floats);
    assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
    qp_array_release(&in);
    qp_session_free(s);
    observe_float(shape.name, "", &(struct qp_array){.dtype = QP_DTYPE_FLOAT}, &floats);

    struct qp_placement *p = qp_placement_create();
    assert_non_null(p);
    uint32_t st = seed;
    *n_special = 0;
    for (size_t k = 0; k < g->n_topo; k++) {
        const struct qp_node *n = &g->nodes[g->topo[k]];
        if (strcmp(n->op_type, "Constant") == 0) continue;
        for (int i = 0; i < n->n_inputs; i++) {
            int v = n->inputs[i];
            if (v < 0 || param_slot(n->op_type, i)) continue;
            const char *name = g->values[v].name;
            const struct qp_tensor *t = qp_placement_weight_tensor(g, v);
            int pick = lcg(&st) % 100 < 40;
            if (t) {
                if (!pick || !weight_op(n->op_type) || t->dtype != QP_DTYPE_FLOAT || !t->data ||
                    t->rank < 1 || t->numel < 2)
                    continue;
                int axis = qp_weight_axis(n, i, t->rank);
                assert_int_equal(qp_placement_add_weight(p, name, n->name, i, axis, "test", &err),
                                 QP_OK);
            } else if (set_has(&floats, name)) {
                int special = i == 0 && is_special(n->op_type);
                if (!pick && !special) continue;
                assert_int_equal(qp_placement_add_edge(p, name, n->name, i, "test", &err), QP_OK);
                *n_special += special;
            }
        }
    }
    /* A tensor read by two or more slots: exactly the first of them placed. */
    *shared = 0;
    for (size_t v = 0; v < g->n_values && !*shared; v++) {
        const struct qp_value *val = &g->values[v];
        if (val->n_uses < 2 || !set_has(&floats, val->name)) continue;
        int ok = 1;
        for (size_t u = 0; u < val->n_uses; u++) {
            const struct qp_node *n = &g->nodes[val->uses[u].node];
            if (n->dead || param_slot(n->op_type, val->uses[u].input) || is_special(n->op_type))
                ok = 0;
        }
        if (!ok) continue;
        for (size_t u = 0; u < val->n_uses; u++)
            qp_placement_remove(p, g->nodes[val->uses[u].node].name, val->uses[u].input);
        const struct qp_use *u0 = &val->uses[0];
        assert_int_equal(qp_placement_add_edge(p, val->name, g->nodes[u0->node].name, u0->input,
                                               "test.shared", &err),
                         QP_OK);
        *shared = 1;
    }
    for (size_t i = 0; i < floats.n; i++)
        free(floats.names[i]);
    free(floats.names);
    return p;
}

static void write_f32(const char *path, const void *data, size_t nbytes) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, nbytes, f), nbytes);
    assert_int_equal(fclose(f), 0);
}

static void dims_json(FILE *f, const struct qp_array *a) {
    fprintf(f, "[");
    for (int d = 0; d < a->rank; d++)
        fprintf(f, "%s%lld", d ? "," : "", (long long)a->dims[d]);
    fprintf(f, "]");
}

/* Runs the written model in the engine and leaves an ORT case beside it. */
/* Runs `path` in the engine on `in`; output i is written to <stem>.<tag><i>.bin. */
static void engine_outputs(const char *path, const struct qp_array *in, const char *stem,
                           const char *tag) {
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    assert_int_equal(qp_model_load_file(path, NULL, &m, &err), QP_OK);
    struct qp_session *s = NULL;
    struct qp_shape shape = {.name = m->graph->values[m->graph->inputs[0]].name, .rank = in->rank};
    memcpy(shape.dims, in->dims, sizeof shape.dims);
    if (qp_session_create(m, NULL, 1, &shape, &s, &err) != QP_OK) fail_msg("%s: %s", path, err.msg);
    if (qp_session_run(s, 1, in, &err) != QP_OK) fail_msg("%s: %s", path, err.msg);
    for (size_t i = 0; i < qp_session_n_outputs(s); i++) {
        struct qp_array out;
        char file[1200];
        assert_int_equal(qp_session_output(s, i, &out, &err), QP_OK);
        snprintf(file, sizeof file, "%s.%s%zu.bin", stem, tag, i);
        write_f32(file, out.data, out.nbytes);
    }
    qp_session_free(s);
    qp_model_free(m);
}

/* An activation QuantizeLinear: its input is computed, not an initializer or a Constant. */
static int is_activation_q(const struct qp_graph *g, const struct qp_node *n) {
    if (n->dead || strcmp(n->op_type, "QuantizeLinear") != 0 || n->inputs[0] < 0) return 0;
    const struct qp_value *x = &g->values[n->inputs[0]];
    return x->initializer < 0 && !producer_op_is(g, n->inputs[0], "Constant");
}

/* Per-quantizer dump for a deep model (quantize_ort.js explains why): <stem>.dump.onnx is the
 * model at `model_path` with every activation QuantizeLinear's input and output added as graph
 * outputs; the engine runs it on `in` (the file `in_file`), and for the i-th such Q in topological
 * order its input and output go to <stem>.q<i>.x.bin / .y.bin (raw bytes). Appends `"dump": {...}`
 * to the case JSON `f`, with each Q's scale and zero point. The dump model's original outputs
 * must equal `want` (the case's outputs) bit for bit: the dumped tensors are those of that run. */
static void dump_quantizers(const char *model_path, const struct qp_array *in, const char *in_file,
                            const char *stem, const struct qp_array *want, size_t n_want, FILE *f) {
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    assert_int_equal(qp_model_load_file(model_path, NULL, &m, &err), QP_OK);
    struct qp_graph *g = m->graph;
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    int *qs = calloc(g->n_topo ? g->n_topo : 1, sizeof *qs);
    assert_non_null(qs);
    size_t n_q = 0;
    for (size_t k = 0; k < g->n_topo; k++) {
        const struct qp_node *n = &g->nodes[g->topo[k]];
        if (!is_activation_q(g, n)) continue;
        qs[n_q++] = g->topo[k];
        assert_int_equal(n->n_inputs, 3);
        const struct qp_tensor *zt = init_of(g, g->values[n->inputs[2]].name);
        assert_non_null(zt);
        int vs[2] = {n->inputs[0], n->outputs[0]};
        enum qp_dtype types[2] = {QP_DTYPE_FLOAT, zt->dtype};
        for (int j = 0; j < 2; j++) {
            struct qp_value *v = &g->values[vs[j]];
            if (v->dtype == QP_DTYPE_UNDEFINED) v->dtype = types[j]; /* ORT needs the type */
            if (!v->is_graph_input && !v->is_graph_output)
                assert_int_equal(qp_graph_add_output(g, vs[j], &err), QP_OK);
        }
    }
    assert_true(n_q > 0);
    char dump[1200], file[1200];
    snprintf(dump, sizeof dump, "%s.dump.onnx", stem);
    if (qp_model_save_file(m, dump, NULL, &err) != QP_OK) fail_msg("%s: %s", dump, err.msg);

    struct qp_model *dm = NULL;
    assert_int_equal(qp_model_load_file(dump, NULL, &dm, &err), QP_OK);
    struct qp_session *s = NULL;
    struct qp_shape shape = {.name = dm->graph->values[dm->graph->inputs[0]].name,
                             .rank = in->rank};
    memcpy(shape.dims, in->dims, sizeof shape.dims);
    if (qp_session_create(dm, NULL, 1, &shape, &s, &err) != QP_OK)
        fail_msg("%s: %s", dump, err.msg);
    if (qp_session_run(s, 1, in, &err) != QP_OK) fail_msg("%s: %s", dump, err.msg);
    for (size_t i = 0; i < n_want; i++) {
        struct qp_array o;
        assert_int_equal(qp_session_output(s, i, &o, &err), QP_OK);
        assert_int_equal(o.nbytes, want[i].nbytes);
        assert_memory_equal(o.data, want[i].data, o.nbytes);
    }
    fprintf(f, ",\n \"dump\": {\"model\": \"%s\", \"quantizers\": [", dump);
    for (size_t i = 0; i < n_q; i++) {
        const struct qp_node *n = &g->nodes[qs[i]];
        const struct qp_tensor *st = init_of(g, g->values[n->inputs[1]].name);
        const struct qp_tensor *zt = init_of(g, g->values[n->inputs[2]].name);
        assert_non_null(st);
        assert_true(st->dtype == QP_DTYPE_FLOAT && st->numel == 1 && zt->numel == 1);
        int zp = 0;
        if (zt->dtype == QP_DTYPE_INT8)
            zp = ((const int8_t *)zt->data)[0];
        else if (zt->dtype == QP_DTYPE_UINT8)
            zp = ((const uint8_t *)zt->data)[0];
        else /* the JS check knows these grids; an FP8 zero point is +0 */
            assert_true(zt->dtype == QP_DTYPE_FLOAT8E4M3FN && ((const uint8_t *)zt->data)[0] == 0);
        fprintf(f,
                "%s\n  {\"node\": \"%s\", \"dtype\": %d, \"scale\": %.9g, \"zero_point\": %d, "
                "\"dims\": ",
                i ? "," : "", n->name, (int)zt->dtype, (double)read_f32(st->data, 0), zp);
        const char *names[2] = {g->values[n->inputs[0]].name, g->values[n->outputs[0]].name};
        for (int j = 0; j < 2; j++) {
            struct qp_array a;
            size_t o = 0;
            while (o < qp_session_n_outputs(s) && strcmp(qp_session_output_name(s, o), names[j]))
                o++;
            if (o == qp_session_n_outputs(s)) {
                assert_true(j == 0 && strcmp(names[0], shape.name) == 0); /* the graph input */
                a = *in;
                snprintf(file, sizeof file, "%s", in_file);
            } else {
                assert_int_equal(qp_session_output(s, o, &a, &err), QP_OK);
                snprintf(file, sizeof file, "%s.q%zu.%s.bin", stem, i, j ? "y" : "x");
                write_f32(file, a.data, a.nbytes);
            }
            assert_int_equal(a.dtype, j ? zt->dtype : QP_DTYPE_FLOAT);
            if (!j) dims_json(f, &a);
            fprintf(f, ", \"%s\": \"%s\", \"%s_file\": \"%s\"", j ? "y" : "x", names[j],
                    j ? "y" : "x", file);
        }
        fprintf(f, "}");
    }
    fprintf(f, "]}");
    qp_session_free(s);
    qp_model_free(dm);
    qp_model_free(m);
    free(qs);
}

/* Runs the written model in the engine and leaves an ORT case beside it. Deep models with many
 * quantizers (`float_ref`) also record the float model's output and every activation quantizer's
 * input and output (dump_quantizers): there ORT is checked per quantizer, bit-identical up to the
 * first differing one, whose flips must be one-step sub-ulp ties, and not at the final output. A
 * float32 value within an ulp of a rounding midpoint rounds either way by summation order (PP-OCRv4
 * rec: 2 of 49152 elements at the 19th quantizer, x / scale -9.49999943 and -4.50000007), and
 * each flip compounds through the ~190 later quantizers until the output moves by 0.25, as much as
 * the engine moves between AVX2 and AVX-512 (0.32). quantize_ort.js says exactly what is checked.
 */
static void engine_case(const char *model_path, const struct model_case *mc, const char *stem,
                        int float_ref, int fp8, char *case_out, size_t case_size) {
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    assert_int_equal(qp_model_load_file(model_path, NULL, &m, &err), QP_OK);
    struct qp_session *s = NULL;
    struct qp_shape shape = {.name = m->graph->values[m->graph->inputs[0]].name, .rank = mc->rank};
    memcpy(shape.dims, mc->dims, sizeof mc->dims);
    if (qp_session_create(m, NULL, 1, &shape, &s, &err) != QP_OK) fail_msg("%s: %s", stem, err.msg);
    struct qp_array in;
    assert_int_equal(qp_array_alloc(&in, QP_DTYPE_FLOAT, mc->rank, mc->dims, &err), QP_OK);
    fill_input(&in, 11);
    if (qp_session_run(s, 1, &in, &err) != QP_OK) fail_msg("%s: %s", stem, err.msg);
    char path[1200], in_file[1200];
    snprintf(in_file, sizeof in_file, "%s.in.bin", stem);
    write_f32(in_file, in.data, in.nbytes);
    snprintf(case_out, case_size, "%s.case.json", stem);
    FILE *f = fopen(case_out, "w");
    assert_non_null(f);
    fprintf(f,
            "{\"model\": \"%s\", \"atol\": 1e-3, \"rtol\": 0.05,\n \"inputs\": [{\"name\": \"%s\", "
            "\"dims\": ",
            model_path, shape.name);
    dims_json(f, &in);
    fprintf(f, ", \"file\": \"%s\"}],\n \"fp8\": %s, \"outputs\": [", in_file,
            fp8 ? "true" : "false");
    struct qp_array outs[8];
    size_t n_out = qp_session_n_outputs(s);
    assert_true(n_out <= sizeof outs / sizeof outs[0]);
    for (size_t i = 0; i < n_out; i++) {
        struct qp_array out;
        assert_int_equal(qp_session_output(s, i, &out, &err), QP_OK);
        outs[i] = out;
        assert_int_equal(out.dtype, QP_DTYPE_FLOAT);
        snprintf(path, sizeof path, "%s.out%zu.bin", stem, i);
        write_f32(path, out.data, out.nbytes);
        fprintf(f, "%s{\"name\": \"%s\", \"dims\": ", i ? ", " : "", qp_session_output_name(s, i));
        dims_json(f, &out);
        fprintf(f, ", \"file\": \"%s\"", path);
        if (float_ref) fprintf(f, ", \"float_file\": \"%s.float%zu.bin\"", stem, i);
        fprintf(f, "}");
    }
    fprintf(f, "]");
    if (float_ref) {
        engine_outputs(mc->path, &in, stem, "float");
        dump_quantizers(model_path, &in, in_file, stem, outs, n_out, f);
    }
    fprintf(f, "}\n");
    assert_int_equal(fclose(f), 0);
    qp_array_release(&in);
    qp_session_free(s);
    qp_model_free(m);
}

static void test_preservation(void **state) {
    (void)state;
    static const struct model_case cases[] = {
        {SRC_ROOT "/tests/integration/quantize_models/resnet_like.onnx",
         "resnet_like",
         4,
         {1, 3, 32, 32},
         3},
        {SRC_ROOT "/tests/integration/quantize_models/vit_like.onnx",
         "vit_like",
         4,
         {1, 3, 16, 16},
         3},
        {SRC_ROOT "/.cache/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
         "ocr_cls",
         4,
         {1, 3, 48, 96},
         1},
        {SRC_ROOT "/.cache/models/ch_PP-OCRv4_rec_infer.onnx", "ocr_rec", 4, {1, 3, 48, 64}, 1},
        {SRC_ROOT "/.cache/models/ch_PP-OCRv4_det_infer.onnx", "ocr_det", 4, {1, 3, 32, 32}, 1},
    };
    char dir[512];
    snprintf(dir, sizeof dir, "%s/quantize-preservation", QP_TEST_BINARY_DIR);
    mkdir(dir, 0755);
    char cmd[16384];
    int n_cmd = snprintf(cmd, sizeof cmd,
                         "node '%s/tests/integration/quantize_ort.js' --npm "
                         "'%s/.cache/npm'",
                         SRC_ROOT, SRC_ROOT);
    size_t n_models = 0, total_special = 0, n_shared = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const struct model_case *mc = &cases[c];
        if (!file_exists(mc->path)) {
            if (require_real()) fail_msg("missing %s (QP_REQUIRE_REAL_MODELS=1)", mc->path);
            printf("skip %s: missing %s (run scripts/setup.sh)\n", mc->label, mc->path);
            continue;
        }
        for (int k = 0; k < mc->n_seeds; k++) {
            struct qp_error err = {0};
            struct qp_model *m = NULL;
            assert_int_equal(qp_model_load_file(mc->path, NULL, &m, &err), QP_OK);
            if (qp_model_opset(m, "") < 19)
                assert_int_equal(qp_model_convert_opset(m, 19, &err), QP_OK);
            assert_int_equal(qp_graph_toposort(m->graph, &err), QP_OK);
            size_t n_special = 0;
            int shared = 0;
            struct qp_placement *p = random_placement(m, mc, 1000u + (uint32_t)(c * 10 + (size_t)k),
                                                      &n_special, &shared);
            qp_model_free(m);
            total_special += n_special;
            n_shared += (size_t)shared;
            char ppath[1100], qpath[1100], stem[1000], shapes[128];
            snprintf(ppath, sizeof ppath, "%s/%s_%d.placement.json", dir, mc->label, k);
            snprintf(qpath, sizeof qpath, "%s/%s_%d.quant.onnx", dir, mc->label, k);
            snprintf(stem, sizeof stem, "%s/%s_%d", dir, mc->label, k);
            snprintf(shapes, sizeof shapes, "x:%lldx%lldx%lldx%lld", (long long)mc->dims[0],
                     (long long)mc->dims[1], (long long)mc->dims[2], (long long)mc->dims[3]);
            assert_int_equal(qp_placement_save_file(p, ppath, &err), QP_OK);
            struct qp_quantize_options o;
            qp_quantize_options_default(&o);
            o.onnx_path = mc->path;
            o.output_path = qpath;
            o.placement_in = ppath;
            o.method = QP_CALIB_MAX;
            o.calibration_shapes = shapes;
            o.dq_only = k == 1;                /* one of the seeds stores weights quantized, */
            if (k == 2) o.mode = QP_QUANT_FP8; /* another is FP8 */
            struct qp_quantize_report *r = NULL;
            if (qp_quantize(&o, &r, &err) != QP_OK)
                fail_msg("%s seed %d: %s", mc->label, k, err.msg);
            assert_int_equal(r->writer.n_edges, p->n_edges);
            assert_int_equal(r->writer.n_weights, p->n_weights);
            assert_true(r->n_outputs >= 1);
            assert_true(r->outputs[0].cosine > 0.5);
            qp_quantize_report_free(r);
            /* diff: the written model against the placement file, only SAME. */
            struct qp_model *q = NULL;
            struct qp_placement *pf = NULL;
            assert_int_equal(qp_model_load_file(qpath, NULL, &q, &err), QP_OK);
            assert_int_equal(qp_placement_load_file(ppath, &pf, &err), QP_OK);
            for (size_t i = 0; i < q->graph->n_nodes; i++) { /* zero points of the mode's type */
                const struct qp_node *n = &q->graph->nodes[i];
                if (n->dead || strcmp(n->op_type, "DequantizeLinear") != 0) continue;
                const struct qp_tensor *zt = init_of(q->graph, q->graph->values[n->inputs[2]].name);
                assert_non_null(zt);
                assert_int_equal(zt->dtype, k == 2 ? QP_DTYPE_FLOAT8E4M3FN : QP_DTYPE_INT8);
            }
            struct qp_qdq_slots *sa = NULL, *sb = NULL;
            assert_int_equal(qp_qdq_slots_from_model(q->graph, &sa, &err), QP_OK);
            assert_int_equal(qp_qdq_slots_from_placement(pf, q->graph, &sb, &err), QP_OK);
            struct qp_qdq_diff d;
            assert_int_equal(qp_qdq_diff(sa, sb, &d, &err), QP_OK);
            if (!qp_qdq_diff_same(&d)) {
                char *text = NULL;
                qp_qdq_diff_format(&d, qpath, ppath, 0, &text, &err);
                fail_msg("%s seed %d: diff not SAME:\n%s", mc->label, k, text ? text : "");
            }
            assert_int_equal(d.same[0], p->n_edges);
            assert_int_equal(d.same[1], p->n_weights);
            printf("%s seed %d: %zu edges (%zu LayerNorm/Sqrt/Gelu/Softmax inputs%s), %zu weights:"
                   " SAME\n",
                   mc->label, k, p->n_edges, n_special,
                   shared ? ", one shared tensor half placed" : "", p->n_weights);
            qp_qdq_diff_release(&d);
            qp_qdq_slots_free(sa);
            qp_qdq_slots_free(sb);
            qp_placement_free(pf);
            qp_model_free(q);
            qp_placement_free(p);
            char case_path[1200];
            engine_case(qpath, mc, stem, strncmp(mc->label, "ocr_", 4) == 0, k == 2, case_path,
                        sizeof case_path);
            n_cmd += snprintf(cmd + n_cmd, sizeof cmd - (size_t)n_cmd, " '%s'", case_path);
            assert_true((size_t)n_cmd < sizeof cmd);
            n_models++;
        }
    }
    assert_true(n_models >= 6); /* the two small models are always there */
    assert_true(total_special >= 6);
    assert_true(n_shared == n_models);
    /* ONNX Runtime loads and runs every written model, agreeing with the engine. */
    if (system("command -v node > /dev/null 2>&1") != 0) {
        if (require_real()) fail_msg("node not found (QP_REQUIRE_REAL_MODELS=1)");
        printf("skip ORT check: node not found\n");
        return;
    }
    fflush(stdout);
    int rc = system(cmd);
    assert_true(WIFEXITED(rc));
    int code = WEXITSTATUS(rc);
    if (code == 77 && !require_real()) return;
    assert_int_equal(code, 0);
}

/* ---- the commands at the process level ----------------------------------------------------- */

#define QPLACE_BIN QP_TEST_BINARY_DIR "/../qplace"

/* Runs `qplace ARGS` (stdout and stderr into <dir>/out.txt) and returns its exit status. */
static int qplace(const char *dir, const char *fmt, ...) {
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "'%s' %s > '%s/out.txt' 2>&1", QPLACE_BIN, args, dir);
    int rc = system(cmd);
    assert_true(WIFEXITED(rc));
    return WEXITSTATUS(rc);
}

static char *slurp(const char *path, size_t *len_out) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (len_out) *len_out = (size_t)n;
    return buf;
}

static int output_has(const char *dir, const char *needle) {
    char path[700];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    char *text = slurp(path, NULL);
    int found = text && strstr(text, needle) != NULL;
    if (!found) printf("output without '%s':\n%s\n", needle, text ? text : "(none)");
    free(text);
    return found;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void test_cli(void **state) {
    (void)state;
    if (!file_exists(QPLACE_BIN)) fail_msg("%s not built", QPLACE_BIN);
    const char *model = SRC_ROOT "/tests/integration/quantize_models/resnet_like.onnx";
    char dir[512], q[700], pl[700], bad[700], dq[700];
    snprintf(dir, sizeof dir, "%s/quantize-cli", QP_TEST_BINARY_DIR);
    mkdir(dir, 0755);
    snprintf(q, sizeof q, "%s/r.quant.onnx", dir);
    snprintf(pl, sizeof pl, "%s/r.placement.json", dir);
    snprintf(bad, sizeof bad, "%s/bad.json", dir);
    snprintf(dq, sizeof dq, "%s/r.dq.onnx", dir);
    unlink(q);
    size_t n_before = 0;
    char *before = slurp(model, &n_before);
    assert_non_null(before);

    /* Placements naming a missing node / tensor: exit 2, named, nothing written. */
    write_text(bad, "{\"format\": \"qplace.placement\", \"version\": 1, \"edges\": [{\"tensor\": "
                    "\"x\", \"node\": \"no_such_conv\", \"input\": 0, \"reason\": \"t\"}], "
                    "\"weights\": []}\n");
    assert_int_equal(qplace(dir, "quantize --onnx_path '%s' --placement_in '%s' --output_path '%s'",
                            model, bad, q),
                     2);
    assert_true(output_has(dir, "no_such_conv"));
    assert_false(file_exists(q));
    write_text(bad, "{\"format\": \"qplace.placement\", \"version\": 1, \"edges\": [{\"tensor\": "
                    "\"ghost\", \"node\": \"conv_stem\", \"input\": 0, \"reason\": \"t\"}], "
                    "\"weights\": []}\n");
    assert_int_equal(qplace(dir, "quantize --onnx_path '%s' --placement_in '%s' --output_path '%s'",
                            model, bad, q),
                     2);
    assert_true(output_has(dir, "ghost"));
    assert_false(file_exists(q));
    /* The output path equal to the input. */
    assert_int_equal(qplace(dir, "quantize --onnx_path '%s' --output_path '%s'", model, model), 2);
    assert_true(output_has(dir, "is the input model"));
    /* A high precision dtype other than fp16/bf16/fp32: usage error, nothing written. */
    assert_int_equal(qplace(dir,
                            "quantize --onnx_path '%s' --output_path '%s' "
                            "--high_precision_dtype fp64",
                            model, q),
                     1);
    assert_false(file_exists(q));

    /* A good run prints the summary; the input is untouched. */
    assert_int_equal(qplace(dir,
                            "quantize --onnx-path '%s' --output_path '%s' --placement-out '%s' "
                            "--calibration_method max",
                            model, q, pl),
                     0);
    assert_true(output_has(dir, "activation edges"));
    assert_true(output_has(dir, "cosine"));
    assert_true(output_has(dir, "calibration: synthetic data, method max"));
    size_t n_after = 0;
    char *after = slurp(model, &n_after);
    assert_int_equal(n_before, n_after);
    assert_memory_equal(before, after, n_before);
    free(after);
    free(before);
    /* Quantizing the quantized model: refused. */
    char q2[700];
    snprintf(q2, sizeof q2, "%s/r2.onnx", dir);
    assert_int_equal(qplace(dir, "quantize --onnx_path '%s' --output_path '%s'", q, q2), 2);
    assert_true(output_has(dir, "already quantized"));
    assert_false(file_exists(q2));

    /* diff: the model against its placement is SAME (exit 0); against another placement, 4. */
    assert_int_equal(qplace(dir, "diff '%s' '%s'", q, pl), 0);
    assert_true(output_has(dir, "result: SAME"));
    write_text(bad, "{\"format\": \"qplace.placement\", \"version\": 1, \"edges\": [{\"tensor\": "
                    "\"x\", \"node\": \"conv_stem\", \"input\": 0, \"reason\": \"t\"}], "
                    "\"weights\": []}\n");
    assert_int_equal(qplace(dir, "diff '%s' '%s' --json", q, bad), 4);
    assert_true(output_has(dir, "\"same\":\tfalse"));
    assert_int_equal(qplace(dir, "diff '%s' '%s'", q, "/nonexistent/x.onnx"), 2);

    /* qdq-to-dq: refuses OUT == IN; the DQ-only model has the same Q/DQ topology. */
    assert_int_equal(qplace(dir, "qdq-to-dq '%s' '%s'", q, q), 2);
    assert_int_equal(qplace(dir, "qdq-to-dq '%s' '%s'", q, dq), 0);
    assert_true(output_has(dir, "weight QuantizeLinear nodes folded"));
    assert_int_equal(qplace(dir, "diff '%s' '%s'", q, dq), 0);
    assert_int_equal(qplace(dir, "diff '%s' '%s'", dq, pl), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_conv),          cmocka_unit_test(test_constant_weight_folded),
        cmocka_unit_test(test_weight_clipping),     cmocka_unit_test(test_weight_clipping_threads),
        cmocka_unit_test(test_one_pair_per_tensor), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_default_output),      cmocka_unit_test(test_cli),
        cmocka_unit_test(test_preservation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
