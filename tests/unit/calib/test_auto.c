/* The auto calibration method (calib/collect.h, calib/auto.h): per tensor, the candidate range
 * (max, entropy, percentile, mse) with the least squared error at its consumers' outputs on the
 * first QP_AUTO_SAMPLES samples, checked against a brute-force evaluation of the same candidates
 * done here with qmath's fake quantization. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/auto.h"
#include "calib/collect.h"
#include "../test_model.h"
#include "ir/ir.h"
#include "placement/placement.h"
#include "qmath/qparams.h"

enum { W = 1 << 16, ROWS = 2, BATCHES = 6 }; /* 4 batches of 2 rows are the kept 8 samples */

static struct qp_opset opset17 = {"", 17};
static struct qp_dim w_dims[2] = {{-1, "batch"}, {W, NULL}};
static struct qp_dim s_dims[2] = {{-1, "batch"}, {4, NULL}};

static float xb[BATCHES][ROWS * W], zb[BATCHES][ROWS * W], sb[BATCHES][ROWS * 4];

static void add(struct qp_graph *g, const char *name, const char *op, const char *in,
                const char *out) {
    struct qp_error err = {0};
    assert_int_equal(qp_graph_add_node(g, name, op, "", 1, &in, 1, &out, NULL, &err), QP_OK);
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, out), &err), QP_OK);
}

/* x[batch, W] -> Relu -> rx; z[batch, W] -> Relu -> rz; s[batch, 4] -> Shape -> sh (int64): x, z
 * and s are the calibrated tensors (every other value feeds nothing). */
static struct qp_model *model(void) {
    struct qp_model *m = test_model_create(&opset17);
    test_model_add_input(m, "x", QP_DTYPE_FLOAT, 2, w_dims);
    test_model_add_input(m, "z", QP_DTYPE_FLOAT, 2, w_dims);
    test_model_add_input(m, "s", QP_DTYPE_FLOAT, 2, s_dims);
    struct qp_graph *g = m->graph;
    add(g, "relu_x", "Relu", "x", "rx");
    add(g, "relu_z", "Relu", "z", "rz");
    add(g, "shape_s", "Shape", "s", "sh");
    struct qp_error err = {0};
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

/* x: Gaussian with one far outlier (100) in the first batch: clipping it is cheaper at the Relu
 * output than rounding half a million values with max's step. z: values on max's own int8 grid
 * (k * 3/127, both ends present), which max's range quantizes without error: max is best.
 * Batches after the 8th sample are spread wider, so a choice made on them would differ. */
static void make_data(void) {
    uint32_t rng = 99;
    for (int b = 0; b < BATCHES; b++) {
        float spread = b < 4 ? 1.0f : 3.0f;
        for (int i = 0; i < ROWS * W; i += 2) {
            rng = rng * 1664525u + 1013904223u;
            float u1 = ((rng >> 8) + 0.5f) / 16777216.0f;
            rng = rng * 1664525u + 1013904223u;
            float u2 = ((rng >> 8) + 0.5f) / 16777216.0f;
            float r = sqrtf(-2.0f * logf(u1));
            xb[b][i] = spread * r * cosf(6.2831853f * u2);
            xb[b][i + 1] = spread * r * sinf(6.2831853f * u2);
        }
        for (int i = 0; i < ROWS * W; i++) {
            rng = rng * 1664525u + 1013904223u;
            int k = (int)((rng >> 8) % 255u) - 127;
            zb[b][i] = (float)k * (3.0f / 127.0f);
        }
        for (int i = 0; i < ROWS * 4; i++)
            sb[b][i] = (float)(i + b) * 0.25f;
    }
    xb[0][12345] = 100.0f;
    zb[0][0] = 3.0f;
    zb[0][1] = -3.0f;
}

static struct qp_ranges *calibrate(struct qp_model *m, enum qp_calib_method method,
                                   struct qp_collect_report *rep) {
    struct qp_collect_options o;
    qp_collect_options_default(&o, method);
    o.n_threads = 1;
    struct qp_collector *c = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_collector_create(m, &o, 0, NULL, &c, &err), QP_OK);
    for (int b = 0; b < BATCHES; b++) {
        struct qp_array in[3];
        int64_t dw[2] = {ROWS, W}, ds[2] = {ROWS, 4};
        float *data[3] = {xb[b], zb[b], sb[b]};
        for (size_t i = 0; i < 3; i++) {
            const char *name = qp_session_input_name(qp_collector_session(c), i);
            int which = !strcmp(name, "x") ? 0 : !strcmp(name, "z") ? 1 : 2;
            assert_int_equal(qp_array_view(&in[i], QP_DTYPE_FLOAT, 2, which == 2 ? ds : dw,
                                           data[which], sizeof(float) * (which == 2 ? 4 : W) * ROWS,
                                           &err),
                             QP_OK);
        }
        if (qp_collector_run(c, 3, in, &err) != QP_OK) fail_msg("%s", err.msg);
    }
    struct qp_ranges *r = NULL;
    if (qp_collector_finish(c, &r, rep, &err) != QP_OK) fail_msg("%s", err.msg);
    qp_collector_free(c);
    return r;
}

static float amax_of(const struct qp_ranges *r, const char *name) {
    const struct qp_range *x = qp_ranges_find(r, name);
    if (!x) fail_msg("no range for '%s'", name);
    return x->amax;
}

/* sum((relu(fq(v)) - relu(v))^2) / sum(relu(v)^2) over the first 4 batches (8 samples). */
static double relu_error(float (*v)[ROWS * W], double amax) {
    static float y[ROWS * W];
    float scale;
    int32_t zp;
    struct qp_error err = {0};
    assert_int_equal(
        qp_qparams_from_range(QP_DTYPE_INT8, (float)-amax, (float)amax, 1, &scale, &zp, &err),
        QP_OK);
    uint8_t zero = 0;
    struct qp_qspec q = {.qtype = QP_DTYPE_INT8,
                         .saturate = 1,
                         .outer = 1,
                         .axis_len = 1,
                         .inner = ROWS * W,
                         .n_params = 1,
                         .scale = &scale,
                         .zero_point = &zero};
    double sse = 0, norm = 0;
    for (int b = 0; b < 4; b++) {
        qp_fake_quantize_f32(&q, v[b], y, 0, ROWS * W);
        for (int i = 0; i < ROWS * W; i++) {
            double a = v[b][i] > 0 ? v[b][i] : 0, d = (y[i] > 0 ? y[i] : 0) - a;
            sse += d * d;
            norm += a * a;
        }
    }
    return sse / norm;
}

static void test_auto_picks_least_consumer_error(void **state) {
    (void)state;
    make_data();
    struct qp_model *m = model();
    float cand[2][QP_AUTO_N_CAND];
    for (int meth = 0; meth < QP_AUTO_N_CAND; meth++) {
        struct qp_ranges *r = calibrate(m, (enum qp_calib_method)meth, NULL);
        cand[0][meth] = amax_of(r, "x");
        cand[1][meth] = amax_of(r, "z");
        if (meth == QP_CALIB_ENTROPY) {
            /* s's consumer (Shape) has no float output: auto falls back to entropy */
            struct qp_collect_report rep;
            struct qp_ranges *ra = calibrate(m, QP_CALIB_AUTO, &rep);
            assert_true(amax_of(ra, "s") == amax_of(r, "s"));
            assert_int_equal(rep.n_auto_fallback, 1);
            assert_int_equal(rep.n_auto[QP_CALIB_ENTROPY] + rep.n_auto[QP_CALIB_MAX] +
                                 rep.n_auto[QP_CALIB_PERCENTILE] + rep.n_auto[QP_CALIB_MSE],
                             3);
            qp_ranges_free(ra);
        }
        qp_ranges_free(r);
    }
    struct qp_collect_report rep;
    struct qp_ranges *ra = calibrate(m, QP_CALIB_AUTO, &rep);
    float(*data[2])[ROWS * W] = {xb, zb};
    const char *names[2] = {"x", "z"};
    for (int t = 0; t < 2; t++) {
        double e[QP_AUTO_N_CAND];
        int best = 0;
        for (int meth = 0; meth < QP_AUTO_N_CAND; meth++) {
            e[meth] = relu_error(data[t], cand[t][meth]);
            if (e[meth] < e[best]) best = meth;
        }
        float got = amax_of(ra, names[t]);
        if (got != cand[t][best])
            fail_msg("%s: auto chose amax %g (error %g); the least error is %g (%s, amax %g); "
                     "max %g, entropy %g, percentile %g, mse %g",
                     names[t], got, relu_error(data[t], got), e[best],
                     qp_calib_method_name((enum qp_calib_method)best), cand[t][best],
                     e[QP_CALIB_MAX], e[QP_CALIB_ENTROPY], e[QP_CALIB_PERCENTILE], e[QP_CALIB_MSE]);
        for (int meth = 0; meth < QP_AUTO_N_CAND; meth++) /* a real choice: one is worse */
            if (cand[t][meth] != cand[t][best]) assert_true(e[meth] > 1.01 * e[best]);
    }
    /* the outlier is clipped; z keeps max's range, which quantizes it exactly */
    assert_true(amax_of(ra, "x") < 0.7f * cand[0][QP_CALIB_MAX]);
    assert_true(amax_of(ra, "z") == cand[1][QP_CALIB_MAX]);
    assert_true(relu_error(zb, amax_of(ra, "z")) == 0.0);
    assert_int_equal(rep.n_auto_fallback, 1);
    qp_ranges_free(ra);
    qp_model_free(m);
}

/* The first batch of x, z and s as the model's inputs, in its session's order. */
static void first_batch(const struct qp_model *m, struct qp_array in[3]) {
    struct qp_error err = {0};
    int64_t dw[2] = {ROWS, W}, ds[2] = {ROWS, 4};
    struct qp_session *s = NULL;
    assert_int_equal(qp_session_create(m, NULL, 0, NULL, &s, &err), QP_OK);
    for (size_t i = 0; i < 3; i++) {
        const char *name = qp_session_input_name(s, i);
        int which = !strcmp(name, "x") ? 0 : !strcmp(name, "z") ? 1 : 2;
        float *d = which == 0 ? xb[0] : which == 1 ? zb[0] : sb[0];
        assert_int_equal(qp_array_view(&in[i], QP_DTYPE_FLOAT, 2, which == 2 ? ds : dw, d,
                                       sizeof(float) * (which == 2 ? 4 : W) * ROWS, &err),
                         QP_OK);
    }
    qp_session_free(s);
}

/* The evaluator alone: a consumer limited by a placement, and a tensor with no consumer in it. */
static void test_auto_evaluate_placement(void **state) {
    (void)state;
    make_data();
    struct qp_model *m = model();
    struct qp_error err = {0};
    struct qp_placement *pl = qp_placement_create();
    assert_non_null(pl);
    assert_int_equal(qp_placement_add_edge(pl, "x", "relu_x", 0, "test", &err), QP_OK);
    struct qp_auto_tensor t[2] = {{.value = qp_graph_find_value(m->graph, "x")},
                                  {.value = qp_graph_find_value(m->graph, "z")}};
    for (int k = 0; k < QP_AUTO_N_CAND; k++) {
        t[0].amax[k] = 100.0 / (k + 1);
        t[1].amax[k] = 3.0;
    }
    struct qp_array in[3];
    first_batch(m, in);
    assert_int_equal(qp_auto_evaluate(m, pl, QP_DTYPE_INT8, 1, 1, 3, in, 2, t, &err), QP_OK);
    assert_int_equal(t[0].n_consumers, 1);
    assert_int_equal(t[1].n_consumers, 0); /* z has no edge in the placement */
    for (int k = 0; k < QP_AUTO_N_CAND; k++) {
        double sse = 0, norm = 0;
        float scale;
        int32_t zp;
        assert_int_equal(qp_qparams_from_range(QP_DTYPE_INT8, (float)-t[0].amax[k],
                                               (float)t[0].amax[k], 1, &scale, &zp, &err),
                         QP_OK);
        for (int i = 0; i < ROWS * W; i++) {
            float v = xb[0][i], q = nearbyintf(v / scale);
            q = q > 127 ? 127 : q < -128 ? -128 : q;
            double a = v > 0 ? v : 0, d = (q * scale > 0 ? q * scale : 0) - a;
            sse += d * d;
            norm += a * a;
        }
        double got = t[0].error[k];
        if (fabs(got - sse / norm) > 1e-4 * sse / norm)
            fail_msg("candidate %d: %g, want %g", k, got, sse / norm);
    }
    qp_placement_free(pl);
    qp_model_free(m);
}

/* Two workers (n_threads 2: consumer nodes side by side, each on one thread and its own lane)
 * give the errors one worker gives, bit for bit, and the same consumer counts. */
static void test_auto_evaluate_workers(void **state) {
    (void)state;
    make_data();
    struct qp_model *m = model();
    struct qp_error err = {0};
    struct qp_array in[3];
    first_batch(m, in);
    struct qp_auto_tensor t[2][3];
    const char *names[3] = {"x", "z", "s"};
    for (int run = 0; run < 2; run++) {
        for (int i = 0; i < 3; i++) {
            t[run][i] = (struct qp_auto_tensor){.value = qp_graph_find_value(m->graph, names[i])};
            for (int k = 0; k < QP_AUTO_N_CAND; k++)
                t[run][i].amax[k] = (3.0 + i) / (k + 1);
        }
        assert_int_equal(
            qp_auto_evaluate(m, NULL, QP_DTYPE_INT8, run + 1, 1, 3, in, 3, t[run], &err), QP_OK);
    }
    assert_true(t[0][0].n_consumers > 0 && t[0][1].n_consumers > 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(t[0][i].n_consumers, t[1][i].n_consumers);
        assert_memory_equal(t[0][i].error, t[1][i].error, sizeof t[0][i].error);
    }
    qp_model_free(m);
}

/* A Concat group shares one range (the candidate with the least error summed over its members)
 * and a Softmax output stays pinned: x[b, 4] -> Relu -> r; Concat(r, x) -> c; Softmax(c) -> s;
 * Neg(s) -> y. */
static void concat_group_case(int variant) {
    static struct qp_dim d4[2] = {{-1, "batch"}, {4, NULL}};
    struct qp_model *m = test_model_create(&opset17);
    test_model_add_input(m, "x", QP_DTYPE_FLOAT, 2, d4);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    const char *cat_in[2] = {"r", "x"}, *cat_out = "c";
    add(g, "relu", "Relu", "x", "r");
    int cat = -1;
    assert_int_equal(qp_graph_add_node(g, "cat", "Concat", "", 2, cat_in, 1, &cat_out, &cat, &err),
                     QP_OK);
    qp_node_add_attr(g, cat, "axis", QP_ATTR_INT)->i = 1;
    add(g, "softmax", "Softmax", "c", "s");
    add(g, "neg", "Neg", "s", "y");
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    static float xs[3][16 * 4];
    uint32_t rng = 5;
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < 64; i++) {
            rng = rng * 1664525u + 1013904223u;
            xs[b][i] = (((rng >> 8) & 1023) - 100.0f * (float)(variant % 8)) / 100.0f;
        }
    xs[1][7] = 5.0f * (float)(1 + variant);
    float amax[QP_CALIB_METHOD_COUNT][3];
    struct qp_collect_report rep;
    const char *names[3] = {"x", "r", "c"};
    for (int meth = 0; meth < QP_CALIB_METHOD_COUNT; meth++) {
        struct qp_collect_options o;
        qp_collect_options_default(&o, (enum qp_calib_method)meth);
        o.n_threads = 1;
        struct qp_collector *c = NULL;
        assert_int_equal(qp_collector_create(m, &o, 0, NULL, &c, &err), QP_OK);
        for (int b = 0; b < 3; b++) {
            struct qp_array a;
            int64_t dims[2] = {16, 4};
            assert_int_equal(qp_array_view(&a, QP_DTYPE_FLOAT, 2, dims, xs[b], sizeof xs[b], &err),
                             QP_OK);
            assert_int_equal(qp_collector_run(c, 1, &a, &err), QP_OK);
        }
        struct qp_ranges *r = NULL;
        assert_int_equal(qp_collector_finish(c, &r, &rep, &err), QP_OK);
        for (int k = 0; k < 3; k++)
            amax[meth][k] = amax_of(r, names[k]);
        assert_true(amax_of(r, "s") == 1.0f);
        qp_ranges_free(r);
        qp_collector_free(c);
    }
    /* auto (the last run): one range for the group, one of its candidates */
    assert_true(amax[QP_CALIB_AUTO][0] == amax[QP_CALIB_AUTO][1] &&
                amax[QP_CALIB_AUTO][1] == amax[QP_CALIB_AUTO][2]);
    int found = 0;
    for (int meth = 0; meth < QP_AUTO_N_CAND; meth++)
        found |= amax[meth][0] == amax[QP_CALIB_AUTO][0];
    assert_true(found);
    /* x, r, c counted under one method; s (pinned) not at all */
    size_t total = 0, most = 0;
    for (int meth = 0; meth < QP_AUTO_N_CAND; meth++) {
        total += rep.n_auto[meth];
        if (rep.n_auto[meth] > most) most = rep.n_auto[meth];
    }
    assert_int_equal(total, 3);
    assert_int_equal(most, 3);
    assert_int_equal(rep.n_auto_fallback, 0);
    qp_model_free(m);
}

static void test_auto_concat_group_and_pin(void **state) {
    (void)state;
    for (int variant = 0; variant < 16; variant++)
        concat_group_case(variant);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto_picks_least_consumer_error),
        cmocka_unit_test(test_auto_evaluate_placement),
        cmocka_unit_test(test_auto_evaluate_workers),
        cmocka_unit_test(test_auto_concat_group_and_pin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
