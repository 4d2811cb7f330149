/*
 * Weight rounding by layer-output error (src/adjust/adaround.h) on hand-built layers with
 * random weights and inputs: a Conv (stride 2, pads), a depthwise Conv, a Conv on a graph input
 * read through its Q/DQ and a MatMul with a per-column weight. After qp_adaround every weight sits
 * on a level just below or above its own (w / s floored or ceiled, s the writer's scale, within
 * -127 .. 127), the writer gives the rewritten weight the same scales, and the layer's output
 * error against the float layer, computed here over every output of every batch (not only the
 * rows the step sampled), is lower than with nearest rounding. A shared weight is left alone, a
 * time bound of ~0 leaves everything at nearest, fp8 is refused, and through qp_quantize_model
 * the caller's model stays as it was while the summary reports the step.
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
#include "adjust_data.h"

#include "adjust/adaround.h"
#include "ir/ir.h"
#include "placement/placement.h"
#include "qmath/qparams.h"
#include "qplace/calib.h"
#include "qplace/model.h"
#include "qplace/quantize.h"
#include "quant/writer.h"

/* n random weights in [-1, 1). */
static void random_weights(float *w, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++)
        w[i] = (float)adj_lcg(&seed) / 8388608.0f - 1.0f;
}

/* A layer as the test computes it: a grouped 2-D Conv (pads p, stride s; MatMul: kh = 0). */
struct layer {
    int64_t ci, co, h, w, k, s, p, groups; /* Conv */
    int64_t rows, kin;                     /* MatMul: rows x kin times kin x co */
};

/* y = layer(x, w) for one batch; returns the output count. */
static size_t forward(const struct layer *L, const float *x, const float *w, float *y) {
    if (!L->k) {
        for (int64_t r = 0; r < L->rows; r++)
            for (int64_t o = 0; o < L->co; o++) {
                double acc = 0;
                for (int64_t k = 0; k < L->kin; k++)
                    acc += (double)x[r * L->kin + k] * w[k * L->co + o];
                y[r * L->co + o] = (float)acc;
            }
        return (size_t)(L->rows * L->co);
    }
    int64_t oh = (L->h + 2 * L->p - L->k) / L->s + 1, ow = (L->w + 2 * L->p - L->k) / L->s + 1;
    int64_t cg = L->ci / L->groups, og = L->co / L->groups;
    for (int64_t o = 0; o < L->co; o++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++) {
                double acc = 0;
                for (int64_t c = 0; c < cg; c++)
                    for (int64_t ky = 0; ky < L->k; ky++)
                        for (int64_t kx = 0; kx < L->k; kx++) {
                            int64_t iy = oy * L->s - L->p + ky, ix = ox * L->s - L->p + kx;
                            if (iy < 0 || iy >= L->h || ix < 0 || ix >= L->w) continue;
                            acc += (double)w[((o * cg + c) * L->k + ky) * L->k + kx] *
                                   x[((o / og) * cg + c) * L->h * L->w + iy * L->w + ix];
                        }
                y[(o * oh + oy) * ow + ox] = (float)acc;
            }
    return (size_t)(L->co * oh * ow);
}

/* Sum over the data of (float layer - layer on fake-quantized input with weights wq)^2. */
static double output_error(const struct layer *L, const struct data *d, const float *w,
                           const float *wq) {
    float s = 1;
    int32_t zp = 0;
    struct qp_error err = {0};
    assert_int_equal(qp_qparams_from_range(QP_DTYPE_INT8, -1.0f, 1.0f, 1, &s, &zp, &err), QP_OK);
    static float xq[MAX_ELEMS], yf[MAX_ELEMS * 4], yq[MAX_ELEMS * 4];
    double e = 0;
    for (int b = 0; b < NB; b++) {
        const float *x = d->buf + (size_t)b * d->n;
        for (size_t i = 0; i < d->n; i++) {
            float q = rintf(x[i] / s);
            xq[i] = s * (q > 127 ? 127 : q < -128 ? -128 : q);
        }
        size_t n = forward(L, x, w, yf);
        forward(L, xq, wq, yq);
        for (size_t i = 0; i < n; i++)
            e += ((double)yf[i] - yq[i]) * ((double)yf[i] - yq[i]);
    }
    return e;
}

static const struct qp_tensor *weight_of(const struct qp_model *m, const char *name) {
    int v = qp_graph_find_value(m->graph, name);
    assert_true(v >= 0);
    const struct qp_tensor *t = qp_placement_weight_tensor(m->graph, v);
    assert_non_null(t);
    return t;
}

/* Rounds `wname` of m and checks the levels, the scales and the error (see the top). */
static struct qp_adaround_stats round_and_check(struct qp_model *m, const char *wname, int axis,
                                                const struct qp_placement *pl,
                                                const struct layer *L, struct data *d) {
    struct qp_error err = {0};
    const struct qp_tensor *t0 = weight_of(m, wname);
    size_t n = (size_t)t0->numel;
    float *w = malloc(n * sizeof *w), *wnear = malloc(n * sizeof *wnear);
    assert_true(w && wnear);
    memcpy(w, t0->data, n * sizeof *w);
    float *sc = NULL;
    int64_t ns = 0;
    assert_int_equal(qp_qdq_weight_scales(t0, axis, QP_DTYPE_INT8, 0, &sc, &ns, &err), QP_OK);
    int64_t inner = 1; /* elements between channels along `axis` */
    for (int r = axis + 1; r < t0->rank; r++)
        inner *= t0->dims[r];
    for (size_t i = 0; i < n; i++) {
        float s = sc[ns == 1 ? 0 : (int64_t)i / inner % ns];
        float q = rintf(w[i] / s);
        wnear[i] = s * (q > 127 ? 127 : q < -127 ? -127 : q);
    }
    struct qp_writer_options wo;
    writer_opts(&wo);
    struct qp_adaround_options ao = {.writer = &wo};
    struct qp_adaround_stats st;
    struct qp_provider *p = provider(d);
    if (qp_adaround(m, pl, p, &ao, &st, &err) != QP_OK) fail_msg("adaround: %s", err.msg);
    qp_provider_free(p);
    const struct qp_tensor *t1 = weight_of(m, wname);
    const float *wc = t1->data;
    size_t off_nearest = 0;
    for (size_t i = 0; i < n; i++) {
        float s = sc[ns == 1 ? 0 : (int64_t)i / inner % ns], v = wc[i] / s;
        assert_true(fabsf(v - rintf(v)) < 1e-3f);
        float q = rintf(v);
        if (!(q == floorf(w[i] / s) || q == ceilf(w[i] / s)) || fabsf(q) > 127)
            fail_msg("weight %zu: level %g for w / s = %g", i, q, w[i] / s);
        off_nearest += wc[i] != wnear[i];
    }
    float *sc1 = NULL;
    int64_t ns1 = 0;
    assert_int_equal(qp_qdq_weight_scales(t1, axis, QP_DTYPE_INT8, 0, &sc1, &ns1, &err), QP_OK);
    assert_int_equal(ns1, ns);
    for (int64_t i = 0; i < ns; i++)
        assert_true(fabsf(sc1[i] - sc[i]) <= 1e-6f * sc[i]);
    double e_near = output_error(L, d, w, wnear), e_chosen = output_error(L, d, w, wc);
    print_message("%s: %llu of %llu off nearest (%zu here), error %.6g -> %.6g (step: %.4g -> "
                  "%.4g)\n",
                  wname, (unsigned long long)st.n_flipped, (unsigned long long)st.n_weights,
                  off_nearest, e_near, e_chosen, st.error_before, st.error_after);
    assert_int_equal(st.n_layers, 1);
    assert_int_equal(st.n_flipped, off_nearest);
    assert_true(st.n_flipped > 0);
    assert_true(st.error_after < st.error_before);
    if (!(e_chosen < 0.97 * e_near))
        fail_msg("error %g with the chosen levels, %g nearest", e_chosen, e_near);
    free(sc);
    free(sc1);
    free(w);
    free(wnear);
    return st;
}

static struct qp_model *model_create(void) {
    struct qp_model *m = qp_model_create();
    assert_non_null(m);
    qg_set_opset(m, 19);
    return m;
}

static void conv_attrs(struct qp_model *m, int node, int64_t pad, int64_t stride, int64_t group) {
    struct qp_attr *a = qp_node_add_attr(m->graph, node, "pads", QP_ATTR_INTS);
    int64_t *pads = qp_arena_calloc(m->arena, 4, sizeof *pads);
    for (int i = 0; i < 4; i++)
        pads[i] = pad;
    a->ints = pads;
    a->n = 4;
    a = qp_node_add_attr(m->graph, node, "strides", QP_ATTR_INTS);
    int64_t *st = qp_arena_calloc(m->arena, 2, sizeof *st);
    st[0] = st[1] = stride;
    a->ints = st;
    a->n = 2;
    if (group > 1) qg_attr_i(m, node, "group", group);
}

/* x[1, ci, h, w] -> Relu -> r -> conv(W) -> y (the Conv reads a computed tensor). */
static struct qp_model *conv_model(const struct layer *L, float *w) {
    struct qp_model *m = model_create();
    int64_t oh = (L->h + 2 * L->p - L->k) / L->s + 1;
    qg_shape(m, "x", QP_DTYPE_FLOAT, 4, QG_DIMS(1, L->ci, L->h, L->w));
    qg_input(m, "x");
    qg_node(m, "relu", "Relu", "x", "r");
    qg_shape(m, "r", QP_DTYPE_FLOAT, 4, QG_DIMS(1, L->ci, L->h, L->w));
    qg_init_data(m, "W", 4, QG_DIMS(L->co, L->ci / L->groups, L->k, L->k), w);
    int n = qg_node(m, "conv", "Conv", "r,W", "y");
    conv_attrs(m, n, L->p, L->s, L->groups);
    qg_shape(m, "y", QP_DTYPE_FLOAT, 4, QG_DIMS(1, L->co, oh, oh));
    qg_output(m, "y");
    qg_sort(m);
    return m;
}

static struct qp_placement *place(const char *tensor, const char *node, const char *weight,
                                  int axis) {
    struct qp_placement *p = qp_placement_create();
    struct qp_error err = {0};
    assert_non_null(p);
    assert_int_equal(qp_placement_add_edge(p, tensor, node, 0, "test", &err), QP_OK);
    assert_int_equal(qp_placement_add_weight(p, weight, node, 1, axis, "test", &err), QP_OK);
    return p;
}

/* Conv layer L after a Relu, random weights from `seed`, its input and weight placed. */
static void conv_case(const struct layer *L, uint32_t seed) {
    static struct data d;
    static float w[MAX_ELEMS];
    size_t n = (size_t)(L->co * (L->ci / L->groups) * L->k * L->k);
    assert_true(n <= MAX_ELEMS);
    data_init(&d, 4, QG_DIMS(1, L->ci, L->h, L->w));
    random_weights(w, n, seed);
    struct qp_model *m = conv_model(L, w);
    struct qp_placement *pl = place("r", "conv", "W", 0);
    round_and_check(m, "W", 0, pl, L, &d);
    qp_placement_free(pl);
    qp_model_free(m);
}

/* The strided Conv of test_conv: 4 -> 6 channels, 16 x 16, 3 x 3, stride 2, pads 1. */
#define STRIDED                                                                                    \
    { .ci = 4, .co = 6, .h = 16, .w = 16, .k = 3, .s = 2, .p = 1, .groups = 1 }

static void test_conv(void **state) {
    (void)state;
    conv_case(&(struct layer)STRIDED, 7);
}

/* Its model with the weights test_conv uses (w: 6 x 4 x 3 x 3) and its data in d. */
static struct qp_model *strided_fixture(struct data *d, float *w) {
    struct layer L = STRIDED;
    data_init(d, 4, QG_DIMS(1, L.ci, L.h, L.w));
    random_weights(w, (size_t)(L.co * L.ci * L.k * L.k), 7);
    return conv_model(&L, w);
}

static void test_depthwise(void **state) {
    (void)state;
    conv_case(
        &(struct layer){.ci = 6, .co = 6, .h = 8, .w = 8, .k = 3, .s = 1, .p = 1, .groups = 6}, 11);
}

/* The Conv reads the graph input through its Q/DQ: the float rows come from the fed batch. */
static void test_graph_input(void **state) {
    (void)state;
    static struct data d;
    struct layer L = {.ci = 4, .co = 5, .h = 8, .w = 8, .k = 3, .s = 1, .p = 0, .groups = 1};
    data_init(&d, 4, QG_DIMS(1, 4, 8, 8));
    static float w[5 * 4 * 9];
    random_weights(w, 5 * 4 * 9, 13);
    struct qp_model *m = model_create();
    qg_shape(m, "x", QP_DTYPE_FLOAT, 4, QG_DIMS(1, 4, 8, 8));
    qg_input(m, "x");
    qg_init_data(m, "W", 4, QG_DIMS(5, 4, 3, 3), w);
    int n = qg_node(m, "conv", "Conv", "x,W", "y");
    conv_attrs(m, n, 0, 1, 1);
    qg_shape(m, "y", QP_DTYPE_FLOAT, 4, QG_DIMS(1, 5, 6, 6));
    qg_output(m, "y");
    qg_sort(m);
    struct qp_placement *pl = place("x", "conv", "W", 0);
    round_and_check(m, "W", 0, pl, &L, &d);
    qp_placement_free(pl);
    qp_model_free(m);
}

/* x[2, 16, 24] -> Relu -> r -> MatMul(W[24, 10]) -> y, W per column (axis 1). */
static void test_matmul(void **state) {
    (void)state;
    static struct data d;
    struct layer L = {.rows = 32, .kin = 24, .co = 10};
    data_init(&d, 3, QG_DIMS(2, 16, 24));
    static float w[24 * 10];
    random_weights(w, 24 * 10, 17);
    struct qp_model *m = model_create();
    qg_shape(m, "x", QP_DTYPE_FLOAT, 3, QG_DIMS(2, 16, 24));
    qg_input(m, "x");
    qg_node(m, "relu", "Relu", "x", "r");
    qg_shape(m, "r", QP_DTYPE_FLOAT, 3, QG_DIMS(2, 16, 24));
    qg_init_data(m, "W", 2, QG_DIMS(24, 10), w);
    qg_node(m, "mm", "MatMul", "r,W", "y");
    qg_shape(m, "y", QP_DTYPE_FLOAT, 3, QG_DIMS(2, 16, 10));
    qg_output(m, "y");
    qg_sort(m);
    struct qp_placement *pl = place("r", "mm", "W", 1);
    round_and_check(m, "W", 1, pl, &L, &d);
    qp_placement_free(pl);
    qp_model_free(m);
}

/* Two Convs read W: both left at nearest; a time bound of ~0 and too few rows leave everything;
 * fp8 is refused. */
static void test_left_alone(void **state) {
    (void)state;
    static struct data d;
    static float w[6 * 4 * 9];
    struct layer L = STRIDED;
    struct qp_model *m = strided_fixture(&d, w);
    int n = qg_node(m, "conv2", "Conv", "r,W", "y2");
    conv_attrs(m, n, 1, 2, 1);
    qg_shape(m, "y2", QP_DTYPE_FLOAT, 4, QG_DIMS(1, 6, 8, 8));
    qg_output(m, "y2");
    qg_sort(m);
    struct qp_placement *pl = place("r", "conv", "W", 0);
    struct qp_error err = {0};
    assert_int_equal(qp_placement_add_weight(pl, "W", "conv2", 1, 0, "test", &err), QP_OK);
    struct qp_writer_options wo;
    writer_opts(&wo);
    struct qp_adaround_options ao = {.writer = &wo};
    struct qp_adaround_stats st;
    struct qp_provider *p = provider(&d);
    assert_int_equal(qp_adaround(m, pl, p, &ao, &st, &err), QP_OK);
    assert_int_equal(st.n_layers, 0);
    assert_int_equal(st.n_skipped, 2);
    assert_memory_equal(weight_of(m, "W")->data, w, sizeof w);
    qp_placement_free(pl);
    qp_model_free(m);

    m = conv_model(&L, w);
    pl = place("r", "conv", "W", 0);
    ao.seconds = 1e-12;
    assert_int_equal(qp_adaround(m, pl, p, &ao, &st, &err), QP_OK);
    assert_int_equal(st.n_layers, 0);
    assert_int_equal(st.n_timed_out, 1);
    assert_memory_equal(weight_of(m, "W")->data, w, sizeof w);
    ao.seconds = 0; /* 50 rows for 36 inputs per output: too few to choose by */
    ao.max_rows = 50;
    assert_int_equal(qp_adaround(m, pl, p, &ao, &st, &err), QP_OK);
    assert_int_equal(st.n_layers, 0);
    assert_int_equal(st.n_skipped, 1);
    assert_memory_equal(weight_of(m, "W")->data, w, sizeof w);
    wo.qtype = QP_DTYPE_FLOAT8E4M3FN;
    assert_int_equal(qp_adaround(m, pl, p, &ao, &st, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "int8"));
    qp_provider_free(p);
    qp_placement_free(pl);
    qp_model_free(m);
}

/* qp_quantize_model with weight_rounding: the summary reports it, the caller's model is kept. */
static void test_quantize_model(void **state) {
    (void)state;
    static struct data d;
    static float w[6 * 4 * 9];
    struct qp_model *m = strided_fixture(&d, w), *out = NULL;
    struct qp_quantize_config c;
    qp_quantize_config_default(&c);
    c.weight_rounding = QP_WEIGHT_ROUND_ADAROUND;
    c.bias_correction = QP_BIAS_CORRECTION_OFF;
    c.high_precision_dtype = QP_DTYPE_FLOAT;
    struct qp_placement *pl = place("r", "conv", "W", 0); /* the trt policy skips tiny Convs */
    c.placement = pl;
    struct qp_quantize_summary *s = NULL;
    struct qp_error err = {0};
    struct qp_provider *p = provider(&d);
    if (qp_quantize_model(m, p, &c, &out, &s, &err) != QP_OK) fail_msg("quantize: %s", err.msg);
    assert_int_equal(s->weight_rounding, QP_WEIGHT_ROUND_ADAROUND);
    assert_int_equal(s->n_rounded_layers, 1);
    assert_true(s->n_rounded_flipped > 0);
    assert_true(s->rounding_error_after < s->rounding_error_before);
    assert_non_null(s->outputs_unrounded);
    assert_memory_equal(weight_of(m, "W")->data, w, sizeof w);
    qp_quantize_summary_free(s);
    qp_model_free(out);
    c.weight_rounding = 2;
    assert_int_equal(qp_quantize_model(m, p, &c, &out, NULL, &err), QP_ERR_USAGE);
    c.weight_rounding = QP_WEIGHT_ROUND_ADAROUND;
    c.trt.quantize_mode = QP_QUANT_FP8;
    assert_int_equal(qp_quantize_model(m, p, &c, &out, NULL, &err), QP_ERR_USAGE);
    qp_provider_free(p);
    qp_placement_free(pl);
    qp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv),        cmocka_unit_test(test_depthwise),
        cmocka_unit_test(test_graph_input), cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_left_alone),  cmocka_unit_test(test_quantize_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
