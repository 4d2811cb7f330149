/* Calibration through the engine (calib/collect.h): which tensors, max ranges against values
 * computed by hand, Concat groups, the Softmax pin, NaN/Inf, placements, constant memory over
 * many batches, and the provider loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/collect.h"
#include "../test_model.h"
#include "ir/ir.h"
#include "placement/placement.h"

static struct qp_opset opset17 = {"", 17};
static struct qp_dim x_dims[2] = {{-1, "batch"}, {4, NULL}};

static int add(struct qp_graph *g, const char *name, const char *op, int ni, const char *a,
               const char *b, const char *out) {
    const char *ins[2] = {a, b};
    struct qp_error err = {0};
    int n = -1;
    assert_int_equal(qp_graph_add_node(g, name, op, "", ni, ins, 1, &out, &n, &err), QP_OK);
    return n;
}

/* An opset-17 model whose graph has one float input x[batch, 4]. */
static struct qp_model *model_x(void) {
    struct qp_model *m = test_model_create(&opset17);
    test_model_add_input(m, "x", QP_DTYPE_FLOAT, 2, x_dims);
    return m;
}

/* x[batch, 4] -> Relu -> r; Concat(r, x, axis 1) -> c; Softmax(c) -> s; Neg(s) -> y (output);
 */
static struct qp_model *model(void) {
    struct qp_model *m = model_x();
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    add(g, "relu", "Relu", 1, "x", NULL, "r");
    int cat = add(g, "cat", "Concat", 2, "r", "x", "c");
    struct qp_attr *a = qp_node_add_attr(g, cat, "axis", QP_ATTR_INT);
    assert_non_null(a);
    a->i = 1;
    add(g, "softmax", "Softmax", 1, "c", NULL, "s");
    add(g, "neg", "Neg", 1, "s", NULL, "y");
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "y"), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

static void batch(struct qp_array *a, float *buf, int64_t rows) {
    struct qp_error err = {0};
    int64_t dims[2] = {rows, 4};
    assert_int_equal(
        qp_array_view(a, QP_DTYPE_FLOAT, 2, dims, buf, sizeof(float) * 4 * (size_t)rows, &err),
        QP_OK);
}

/* A collector made with `o` that ran `n_batches` batches of `rows` rows each, batch k at
 * xb + k * rows * 4. */
static struct qp_collector *collect_batches(struct qp_model *m, const struct qp_collect_options *o,
                                            float *xb, int n_batches, int64_t rows) {
    struct qp_error err = {0};
    struct qp_collector *c = NULL;
    assert_int_equal(qp_collector_create(m, o, 0, NULL, &c, &err), QP_OK);
    for (int k = 0; k < n_batches; k++) {
        struct qp_array a;
        batch(&a, xb + (size_t)k * (size_t)rows * 4, rows);
        assert_int_equal(qp_collector_run(c, 1, &a, &err), QP_OK);
    }
    return c;
}

static const struct qp_range *get(const struct qp_ranges *r, const char *name) {
    const struct qp_range *x = qp_ranges_find(r, name);
    if (!x) fail_msg("no range for '%s'", name);
    return x;
}

static void run_max(int group, struct qp_ranges **out, struct qp_collect_report *rep) {
    struct qp_model *m = model();
    struct qp_collect_options o;
    qp_collect_options_default(&o, QP_CALIB_MAX);
    o.group_concat = group;
    o.n_threads = 1;
    struct qp_collector *c = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_collector_create(m, &o, 0, NULL, &c, &err), QP_OK);
    float b1[8] = {-3, 1, 2, 0.5f, 1, 1, 1, 1};
    float b2[12] = {-1, -2, 7, 0, 0, 0, 0, 0, 0.25f, -0.5f, 0, 0};
    struct qp_array a;
    batch(&a, b1, 2);
    assert_int_equal(qp_collector_run(c, 1, &a, &err), QP_OK);
    batch(&a, b2, 3); /* a second shape set */
    assert_int_equal(qp_collector_run(c, 1, &a, &err), QP_OK);
    assert_int_equal(qp_collector_finish(c, out, rep, &err), QP_OK);
    qp_collector_free(c);
    qp_model_free(m);
}

static void test_max_ranges(void **state) {
    (void)state;
    struct qp_ranges *r = NULL;
    struct qp_collect_report rep;
    run_max(0, &r, &rep);
    /* x, r, c, s: y feeds nothing */
    assert_int_equal(qp_ranges_count(r), 4);
    assert_string_equal(qp_ranges_at(r, 0)->tensor, "x");
    assert_string_equal(qp_ranges_at(r, 1)->tensor, "r");
    assert_string_equal(qp_ranges_at(r, 2)->tensor, "c");
    assert_string_equal(qp_ranges_at(r, 3)->tensor, "s");
    assert_null(qp_ranges_find(r, "y"));
    const struct qp_range *x = get(r, "x");
    assert_true(x->lo == -3 && x->hi == 7 && x->amax == 7 && x->n_values == 20);
    x = get(r, "r");
    assert_true(x->lo == 0 && x->hi == 7 && x->amax == 7);
    x = get(r, "c");
    assert_true(x->lo == -3 && x->hi == 7 && x->amax == 7 && x->n_values == 40);
    x = get(r, "s"); /* pinned */
    assert_true(x->lo == 0 && x->hi == 1 && x->amax == 1);
    assert_true(rep.n_batches == 2 && rep.n_samples == 5 && rep.n_tensors == 4);
    assert_true(rep.n_pinned == 1 && rep.n_grouped == 0 && rep.n_nonfinite_tensors == 0);
    qp_ranges_free(r);

    run_max(1, &r, &rep);
    assert_true(rep.n_grouped == 3);
    /* r, x, c share: lo -3, hi 7 */
    for (int i = 0; i < 3; i++) {
        x = qp_ranges_at(r, (size_t)i);
        assert_true(x->lo == -3 && x->hi == 7 && x->amax == 7);
    }
    qp_ranges_free(r);
}

static void test_nonfinite(void **state) {
    (void)state;
    struct qp_model *m = model();
    struct qp_collect_options o;
    qp_collect_options_default(&o, QP_CALIB_ENTROPY);
    o.group_concat = 0;
    struct qp_collector *c = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_collector_create(m, &o, 0, NULL, &c, &err), QP_OK);
    float b[8] = {NAN, 1, -INFINITY, 0.5f, 2, NAN, 1, -1};
    struct qp_array a;
    batch(&a, b, 2);
    assert_int_equal(qp_collector_run(c, 1, &a, &err), QP_OK);
    struct qp_ranges *r = NULL;
    struct qp_collect_report rep;
    assert_int_equal(qp_collector_finish(c, &r, &rep, &err), QP_OK);
    const struct qp_range *x = get(r, "x");
    assert_true(x->n_nan == 2 && x->n_inf == 1 && x->n_values == 5);
    assert_true(x->lo == -1 && x->hi == 2 && x->amax == 2); /* one batch: entropy == max */
    /* NaN reaches the Softmax output: counted there, the range is the pinned one */
    x = get(r, "s");
    assert_true(x->lo == 0 && x->hi == 1 && x->amax == 1 && x->n_nan > 0);
    assert_true(rep.n_nonfinite_tensors >= 2 && rep.n_nan >= 2 && rep.n_inf >= 1);
    qp_ranges_free(r);
    qp_collector_free(c);

    /* a tensor without any finite value is an error naming it */
    assert_int_equal(qp_collector_create(m, &o, 0, NULL, &c, &err), QP_OK);
    float allnan[4] = {NAN, NAN, NAN, NAN};
    batch(&a, allnan, 1);
    assert_int_equal(qp_collector_run(c, 1, &a, &err), QP_OK);
    r = NULL;
    assert_int_equal(qp_collector_finish(c, &r, NULL, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "tensor 'x'"));
    assert_null(r);
    qp_collector_free(c);
    qp_model_free(m);
}

static void test_placement(void **state) {
    (void)state;
    struct qp_model *m = model();
    struct qp_error err = {0};
    struct qp_placement *p = qp_placement_create();
    assert_int_equal(qp_placement_add_edge(p, "r", "cat", 0, "test", &err), QP_OK);
    assert_int_equal(qp_placement_add_edge(p, "x", "cat", 1, "test", &err), QP_OK);
    assert_int_equal(qp_placement_add_edge(p, "x", "relu", 0, "test", &err), QP_OK);
    assert_int_equal(qp_placement_validate(p, m->graph, &err), QP_OK);
    struct qp_collect_options o;
    qp_collect_options_default(&o, QP_CALIB_MAX);
    o.placement = p;
    o.group_concat = 0;
    struct qp_collector *c = NULL;
    assert_int_equal(qp_collector_create(m, &o, 0, NULL, &c, &err), QP_OK);
    float b[4] = {-2, 3, 0, 1};
    struct qp_array a;
    batch(&a, b, 1);
    assert_int_equal(qp_collector_run(c, 1, &a, &err), QP_OK);
    struct qp_ranges *r = NULL;
    assert_int_equal(qp_collector_finish(c, &r, NULL, &err), QP_OK);
    assert_int_equal(qp_ranges_count(r), 2); /* x once, r */
    assert_true(get(r, "x")->amax == 3 && get(r, "r")->lo == 0);
    assert_null(qp_ranges_find(r, "c"));
    qp_ranges_free(r);
    qp_collector_free(c);
    qp_placement_free(p);

    /* a placement naming a tensor the model lacks is refused */
    p = qp_placement_create();
    assert_int_equal(qp_placement_add_edge(p, "nope", "cat", 0, "test", &err), QP_OK);
    o.placement = p;
    c = NULL;
    assert_int_equal(qp_collector_create(m, &o, 0, NULL, &c, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "'nope'"));
    assert_null(c);
    qp_placement_free(p);
    qp_model_free(m);
}

/* x[batch, 4] -> ArgMax (int64 am) -> Cast to float -> y. */
static struct qp_model *int_model(void) {
    struct qp_model *m = model_x();
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    add(g, "argmax", "ArgMax", 1, "x", NULL, "am");
    int cast = add(g, "cast", "Cast", 1, "am", NULL, "y");
    struct qp_attr *a = qp_node_add_attr(g, cast, "to", QP_ATTR_INT);
    assert_non_null(a);
    a->i = QP_DTYPE_FLOAT;
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "y"), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

/* A placement tensor the engine computes as int64: an error naming it, unless
 * placement_float_only, which leaves it without a range. */
static void test_placement_float_only(void **state) {
    (void)state;
    struct qp_model *m = int_model();
    struct qp_error err = {0};
    struct qp_placement *p = qp_placement_create();
    assert_int_equal(qp_placement_add_edge(p, "x", "argmax", 0, "test", &err), QP_OK);
    assert_int_equal(qp_placement_add_edge(p, "am", "cast", 0, "test", &err), QP_OK);
    assert_int_equal(qp_placement_validate(p, m->graph, &err), QP_OK);
    float b[8] = {-2, 3, 0, 1, 4, -1, 0.5f, 2};
    struct qp_array a;
    batch(&a, b, 2);
    for (int float_only = 0; float_only <= 1; float_only++) {
        struct qp_collect_options o;
        qp_collect_options_default(&o, QP_CALIB_MAX);
        o.placement = p;
        o.placement_float_only = float_only;
        struct qp_collector *c = NULL;
        assert_int_equal(qp_collector_create(m, &o, 0, NULL, &c, &err), QP_OK);
        assert_int_equal(qp_collector_run(c, 1, &a, &err), QP_OK);
        struct qp_ranges *r = NULL;
        if (!float_only) {
            assert_int_equal(qp_collector_finish(c, &r, NULL, &err), QP_ERR_BAD_INPUT);
            assert_non_null(strstr(err.msg, "'am'"));
            assert_null(r);
        } else {
            assert_int_equal(qp_collector_finish(c, &r, NULL, &err), QP_OK);
            assert_int_equal(qp_ranges_count(r), 1);
            assert_true(get(r, "x")->amax == 4);
            qp_ranges_free(r);
        }
        qp_collector_free(c);
    }
    qp_placement_free(p);
    qp_model_free(m);
}

/* qp_provider_shapes and qp_provider_map_inputs: provider order -> session order by name. */
static void test_provider_map_inputs(void **state) {
    (void)state;
    struct qp_model *m = model();
    struct qp_error err = {0};
    struct qp_synthetic_input in[2] = {
        {.name = "y", .dtype = QP_DTYPE_FLOAT, .rank = 2, .dims = {3, 4}},
        {.name = "x", .dtype = QP_DTYPE_FLOAT, .rank = 2, .dims = {3, 4}}};
    struct qp_provider *both = NULL, *only_x = NULL, *only_y = NULL;
    assert_int_equal(qp_provider_synthetic_create(in, 2, 1, 1, &both, &err), QP_OK);
    assert_int_equal(qp_provider_synthetic_create(in + 1, 1, 1, 1, &only_x, &err), QP_OK);
    assert_int_equal(qp_provider_synthetic_create(in, 1, 1, 1, &only_y, &err), QP_OK);
    const struct qp_array *b = NULL;
    int end = 0;
    assert_int_equal(qp_provider_next(only_x, &b, &end, &err), QP_OK);
    struct qp_shape sh[1];
    qp_provider_shapes(only_x, b, sh);
    assert_string_equal(sh[0].name, "x");
    assert_int_equal(sh[0].rank, 2);
    assert_true(sh[0].dims[0] == 3 && sh[0].dims[1] == 4);
    struct qp_session *s = NULL;
    assert_int_equal(qp_session_create(m, NULL, 1, sh, &s, &err), QP_OK);
    size_t map[2] = {9, 9};
    assert_int_equal(qp_provider_map_inputs(only_x, s, "calibrate", map, &err), QP_OK);
    assert_int_equal(map[0], 0);
    assert_int_equal(qp_provider_map_inputs(only_y, s, "calibrate", map, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "calibrate: model input 'x' is missing from the data"));
    assert_int_equal(qp_provider_map_inputs(both, s, "sensitivity", map, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "sensitivity: the model has 1 inputs, the data 2"));
    qp_session_free(s);
    qp_provider_free(both);
    qp_provider_free(only_x);
    qp_provider_free(only_y);
    qp_model_free(m);
}

/* Entropy and percentile pool a Concat group: the members r, x and c share the range that one
 * histogram over all their values gives (fed as one pooled batch per run, as ORT pools a
 * batch), not the widest of their own ranges. Checked against qp_stats fed directly with the
 * same values: one batch against a one-shot histogram of the concatenation, three batches
 * against pooled updates of each batch's concatenation (growth included). */
static void test_pooled_groups(void **state) {
    (void)state;
    struct qp_error err = {0};
    enum { ROWS = 64 };
    static float xb[3][ROWS * 4];
    uint32_t seed = 11;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < ROWS * 4; i++) {
            seed = seed * 1664525u + 1013904223u;
            float u = (float)(seed >> 8) / 16777216.0f;
            xb[k][i] = (u - 0.3f) * (float)(k + 1) * (i % 7 ? 1.0f : 5.0f); /* grows */
        }
    for (int method = QP_CALIB_ENTROPY; method <= QP_CALIB_PERCENTILE; method++) {
        for (int n_batches = 1; n_batches <= 3; n_batches += 2) {
            struct qp_model *m = model();
            struct qp_collect_options o;
            qp_collect_options_default(&o, (enum qp_calib_method)method);
            o.n_threads = 1;
            struct qp_collector *c = NULL;
            assert_int_equal(qp_collector_create(m, &o, 0, NULL, &c, &err), QP_OK);
            /* the reference: the same values (x, relu(x), concat) straight into qp_stats */
            struct qp_stats_config cfg;
            qp_calib_stats_config(&o.calib, &cfg);
            cfg.n_threads = 1;
            struct qp_stats *ref = NULL;
            assert_int_equal(qp_stats_create(&cfg, &ref, &err), QP_OK);
            static float all[3][ROWS * 4 * 4];
            for (int k = 0; k < n_batches; k++) {
                struct qp_array a;
                batch(&a, xb[k], ROWS);
                assert_int_equal(qp_collector_run(c, 1, &a, &err), QP_OK);
                /* r = relu(x), c = [r, x] row by row; a batch holds all three */
                float *p = all[k];
                for (int i = 0; i < ROWS * 4; i++)
                    p[i] = xb[k][i];
                for (int i = 0; i < ROWS * 4; i++)
                    p[ROWS * 4 + i] = xb[k][i] > 0 ? xb[k][i] : 0.0f;
                for (int r = 0; r < ROWS; r++)
                    for (int e = 0; e < 8; e++)
                        p[2 * ROWS * 4 + 8 * r + e] =
                            e < 4 ? p[ROWS * 4 + 4 * r + e] : xb[k][4 * r + e - 4];
                struct qp_array one;
                int64_t d[1] = {ROWS * 4 * 4};
                assert_int_equal(qp_array_view(&one, QP_DTYPE_FLOAT, 1, d, p, sizeof all[k], &err),
                                 QP_OK);
                assert_int_equal(qp_stats_update(ref, &one, &err), QP_OK);
            }
            struct qp_calib_range want;
            assert_int_equal(qp_calib_compute(&o.calib, ref, &want, &err), QP_OK);
            struct qp_ranges *r = NULL;
            struct qp_collect_report rep;
            assert_int_equal(qp_collector_finish(c, &r, &rep, &err), QP_OK);
            assert_int_equal(rep.n_grouped, 3);
            const char *members[3] = {"x", "r", "c"};
            for (int i = 0; i < 3; i++) {
                const struct qp_range *x = get(r, members[i]);
                assert_true(x->lo == (float)want.lo && x->hi == (float)want.hi);
                assert_true(x->amax == (float)want.amax);
            }
            assert_true(get(r, "c")->n_values == (uint64_t)(2 * ROWS * 4 * n_batches));
            /* not what the widest of the members' own ranges gives (the test can tell the
             * two apart) */
            o.group_concat = 0;
            struct qp_collector *c2 = collect_batches(m, &o, xb[0], n_batches, ROWS);
            struct qp_ranges *r2 = NULL;
            assert_int_equal(qp_collector_finish(c2, &r2, NULL, &err), QP_OK);
            float widest = 0;
            for (int i = 0; i < 3; i++)
                if (get(r2, members[i])->amax > widest) widest = get(r2, members[i])->amax;
            /* (entropy on a single batch is max, the same either way) */
            if (method != QP_CALIB_ENTROPY || n_batches > 1)
                assert_true(widest != (float)want.amax);
            qp_ranges_free(r2);
            qp_collector_free(c2);
            qp_ranges_free(r);
            qp_stats_free(ref);
            qp_collector_free(c);
            qp_model_free(m);
        }
    }
}

/* x -> Neg -> n -> Relu -> r -> Neg -> y (output), plus n -> Sigmoid -> s (output) and
 * n -> Transpose -> t -> Neg -> z (output). */
static struct qp_model *relu_model(void) {
    struct qp_model *m = model_x();
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    add(g, "neg", "Neg", 1, "x", NULL, "n");
    add(g, "relu", "Relu", 1, "n", NULL, "r");
    add(g, "neg2", "Neg", 1, "r", NULL, "y");
    add(g, "sig", "Sigmoid", 1, "n", NULL, "s");
    add(g, "tr", "Transpose", 1, "n", NULL, "t");
    add(g, "neg3", "Neg", 1, "t", NULL, "z");
    const char *outs[3] = {"y", "s", "z"};
    for (int i = 0; i < 3; i++)
        assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, outs[i]), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

/* A Relu or Transpose output whose input is calibrated takes its statistics from the input's
 * (qp_stats_update_derived) when exact: every method gives the same ranges as reading the
 * values (values_only), and the derivation really ran where it should (percentile: not for
 * the Relu). A batch grows the histograms, so both paths are taken. */
static void test_derived_stats(void **state) {
    (void)state;
    struct qp_error err = {0};
    enum { ROWS = 2048, BATCHES = 6 };
    static float xb[BATCHES][ROWS * 4];
    uint32_t seed = 7;
    for (int k = 0; k < BATCHES; k++)
        for (int i = 0; i < ROWS * 4; i++) {
            seed = seed * 1664525u + 1013904223u;
            float u = (float)(seed >> 8) / 16777216.0f;
            xb[k][i] = (0.4f - u) * (k == 3 ? 3.0f : 2.0f); /* n = -x in [-0.8, 1.2] */
        }
    for (int method = 0; method < QP_CALIB_METHOD_COUNT; method++) {
        struct qp_ranges *r[2] = {NULL, NULL};
        struct qp_collect_report rep[2];
        for (int values_only = 0; values_only < 2; values_only++) {
            struct qp_model *m = relu_model();
            struct qp_collect_options o;
            qp_collect_options_default(&o, (enum qp_calib_method)method);
            o.values_only = values_only;
            o.n_threads = 2;
            struct qp_collector *c = collect_batches(m, &o, xb[0], BATCHES, ROWS);
            assert_int_equal(qp_collector_finish(c, &r[values_only], &rep[values_only], &err),
                             QP_OK);
            qp_collector_free(c);
            qp_model_free(m);
        }
        assert_int_equal(rep[1].n_derived, 0);
        /* all but the first (histograms) and the growing batch; percentile, mse and auto (which
         * keeps the |x| histogram too): only t (a Relu's |x| histogram starts at its own
         * smallest value) */
        uint64_t per = method == QP_CALIB_MAX ? BATCHES : BATCHES - 2;
        int abs_hist =
            method == QP_CALIB_PERCENTILE || method == QP_CALIB_MSE || method == QP_CALIB_AUTO;
        assert_int_equal(rep[0].n_derived, abs_hist ? per : 2 * per);
        assert_int_equal(qp_ranges_count(r[0]), qp_ranges_count(r[1]));
        for (size_t i = 0; i < qp_ranges_count(r[0]); i++) {
            const struct qp_range *a = qp_ranges_at(r[0], i), *b = get(r[1], a->tensor);
            assert_memory_equal(&a->lo, &b->lo, sizeof a->lo);
            assert_memory_equal(&a->hi, &b->hi, sizeof a->hi);
            assert_memory_equal(&a->amax, &b->amax, sizeof a->amax);
            assert_int_equal(a->n_values, b->n_values);
        }
        const struct qp_range *rr = get(r[0], "r"), *rt = get(r[0], "t"), *rn = get(r[0], "n");
        assert_true(rr->lo == 0.0f && rr->n_values == (uint64_t)BATCHES * ROWS * 4);
        assert_true(rt->lo == rn->lo && rt->hi == rn->hi && rt->amax == rn->amax);
        qp_ranges_free(r[0]);
        qp_ranges_free(r[1]);
    }
}

/* Many batches: the collector's memory does not grow with them. */
static void test_constant_memory(void **state) {
    (void)state;
    struct qp_model *m = model();
    struct qp_error err = {0};
    for (int method = 0; method < QP_CALIB_METHOD_COUNT; method++) {
        struct qp_collect_options o;
        qp_collect_options_default(&o, (enum qp_calib_method)method);
        struct qp_collector *c = NULL;
        assert_int_equal(qp_collector_create(m, &o, 0, NULL, &c, &err), QP_OK);
        /* Every batch holds the same 16 rows, shuffled, each row's values shuffled too: the
         * data differ from batch to batch, every tensor's per-batch range does not (Softmax is
         * permutation-equivariant), so no histogram has a reason to grow. */
        float rows[64], b[64];
        struct qp_array a;
        uint32_t seed = 7;
        for (int i = 0; i < 64; i++) {
            seed = seed * 1664525u + 1013904223u;
            rows[i] = ((float)(seed >> 8) / 16777216.0f) * 2 - 1;
        }
        size_t after_first = 0;
        for (int k = 0; k < 150; k++) {
            int perm[16];
            for (int i = 0; i < 16; i++)
                perm[i] = i;
            for (int i = 15; i > 0; i--) {
                seed = seed * 1664525u + 1013904223u;
                int j = (int)((seed >> 8) % (uint32_t)(i + 1)), t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
            for (int i = 0; i < 16; i++) {
                int rot = (k + i) % 4;
                for (int e = 0; e < 4; e++)
                    b[4 * i + e] = rows[4 * perm[i] + (e + rot) % 4];
            }
            batch(&a, b, 16);
            assert_int_equal(qp_collector_run(c, 1, &a, &err), QP_OK);
            if (k == 0) after_first = qp_collector_bytes(c);
            assert_int_equal(qp_collector_bytes(c), after_first);
        }
        struct qp_ranges *r = NULL;
        struct qp_collect_report rep;
        assert_int_equal(qp_collector_finish(c, &r, &rep, &err), QP_OK);
        assert_int_equal(rep.collector_bytes_max, after_first);
        assert_true(rep.n_samples == 150 * 16);
        qp_ranges_free(r);
        qp_collector_free(c);
    }
    /* Growing data (batch k scaled by k): histograms grow, but only up to their caps. */
    struct qp_collect_options o;
    qp_collect_options_default(&o, QP_CALIB_PERCENTILE);
    struct qp_collector *c = NULL;
    assert_int_equal(qp_collector_create(m, &o, 0, NULL, &c, &err), QP_OK);
    float b[8];
    struct qp_array a;
    size_t at150 = 0;
    for (int k = 1; k <= 200; k++) {
        for (int i = 0; i < 8; i++)
            b[i] = (float)k * (float)k * (i % 2 ? 1.0f : -0.5f);
        batch(&a, b, 2);
        assert_int_equal(qp_collector_run(c, 1, &a, &err), QP_OK);
        if (k == 150) at150 = qp_collector_bytes(c);
    }
    /* 4 tensors, each at most its capped |x| histogram (65536 bins of 8 bytes) plus overhead */
    size_t bound = 4 * ((size_t)QP_STATS_DEFAULT_MAX_ABS_BINS * 8 + 4096) + 4096;
    assert_true(qp_collector_bytes(c) <= bound);
    assert_true(qp_collector_bytes(c) == at150);
    qp_collector_free(c);
    qp_model_free(m);
}

static void progress(uint64_t done, uint64_t total, void *user) {
    uint64_t *seen = user;
    assert_true(done > seen[0]);
    seen[0] = done;
    seen[1] = total;
    seen[2]++;
}

static void test_calibrate_model(void **state) {
    (void)state;
    struct qp_model *m = model();
    struct qp_error err = {0};
    struct qp_synthetic_input in = {
        .name = "x", .dtype = QP_DTYPE_FLOAT, .rank = 2, .dims = {3, 4}};
    struct qp_provider *p = NULL;
    assert_int_equal(qp_provider_synthetic_create(&in, 1, 1, 5, &p, &err), QP_OK);
    struct qp_collect_options o;
    qp_collect_options_default(&o, QP_CALIB_MAX);
    o.group_concat = 0;
    uint64_t seen[3] = {0, 0, 0};
    o.progress = progress;
    o.progress_user = seen;
    struct qp_ranges *r = NULL;
    struct qp_collect_report rep;
    assert_int_equal(qp_calibrate_model(m, p, &o, &r, &rep, &err), QP_OK);
    assert_true(rep.n_batches == 5 && rep.n_samples == 15);
    assert_true(seen[0] == 15 && seen[1] == 15 && seen[2] == 5);
    const struct qp_range *x = get(r, "x");
    assert_true(x->lo >= 0 && x->hi < 1 && x->n_values == 60); /* uniform [0, 1) */
    assert_true(get(r, "r")->lo == x->lo); /* all positive: Relu is the identity */
    float hi = x->hi;
    qp_ranges_free(r);
    /* the same again from a rewound provider gives the same ranges */
    struct qp_ranges *r2 = NULL;
    o.progress = NULL;
    assert_int_equal(qp_calibrate_model(m, p, &o, &r2, NULL, &err), QP_OK);
    assert_true(get(r2, "x")->hi == hi);
    qp_ranges_free(r2);
    qp_provider_free(p);

    /* provider inputs that are not the model's */
    struct qp_synthetic_input wrong = {
        .name = "z", .dtype = QP_DTYPE_FLOAT, .rank = 2, .dims = {1, 4}};
    assert_int_equal(qp_provider_synthetic_create(&wrong, 1, 1, 1, &p, &err), QP_OK);
    r = NULL;
    assert_int_equal(qp_calibrate_model(m, p, &o, &r, NULL, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "'z'"));
    assert_null(r);
    qp_provider_free(p);

    /* a shape the model cannot take */
    struct qp_synthetic_input bad = {
        .name = "x", .dtype = QP_DTYPE_FLOAT, .rank = 2, .dims = {1, 5}};
    assert_int_equal(qp_provider_synthetic_create(&bad, 1, 1, 1, &p, &err), QP_OK);
    assert_int_equal(qp_calibrate_model(m, p, &o, &r, NULL, &err), QP_ERR_BAD_INPUT);
    assert_null(r);
    qp_provider_free(p);

    /* bad options */
    o.calib.method = QP_CALIB_PERCENTILE;
    o.calib.percentile = 0;
    struct qp_collector *c = NULL;
    assert_int_equal(qp_collector_create(m, &o, 0, NULL, &c, &err), QP_ERR_USAGE);
    qp_model_free(m);
}

/* A provider that gives batch j (j = 0 .. n-1) of COUNT_ROWS rows filled with the value j - 1,
 * always in the same buffer, and fails at batch `fail_at` (when < n). The calibration loop
 * reads ahead on another thread, so it must have copied batch j before the provider overwrites
 * it: the batches are large, so that the overwrite usually lands while batch j is still being
 * run (the graph input's statistics are taken after the run). */
#define COUNT_ROWS 40000
struct counting {
    int n, fail_at, done, reads_after_end;
};

static enum qp_status counting_next(struct qp_provider *p, int *end_out, struct qp_error *err) {
    struct counting *c = p->impl;
    if (c->done == c->n) {
        c->reads_after_end++;
        *end_out = 1;
        return QP_OK;
    }
    if (c->done == c->fail_at)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "counting: batch %d is broken", c->done);
    struct qp_array *a = &p->batch[0];
    if (!a->data) {
        int64_t dims[2] = {COUNT_ROWS, 4};
        enum qp_status st = qp_array_alloc(a, QP_DTYPE_FLOAT, 2, dims, err);
        if (st != QP_OK) return st;
    }
    for (int i = 0; i < 4 * COUNT_ROWS; i++)
        ((float *)a->data)[i] = (float)(c->done - 1);
    c->done++;
    *end_out = 0;
    return QP_OK;
}

static enum qp_status counting_reset(struct qp_provider *p, struct qp_error *err) {
    (void)err;
    ((struct counting *)p->impl)->done = 0;
    return QP_OK;
}

static void counting_destroy(struct qp_provider *p) {
    (void)p;
}

static const struct qp_provider_ops counting_ops = {counting_next, counting_reset,
                                                    counting_destroy};

static void test_read_ahead(void **state) {
    (void)state;
    struct qp_model *m = model();
    struct qp_error err = {0};
    const char *names[1] = {"x"};
    struct qp_collect_options o;
    qp_collect_options_default(&o, QP_CALIB_MAX);
    o.group_concat = 0;
    o.pin_softmax = 0;
    for (int rep = 0; rep < 10; rep++) { /* timing varies from run to run: repeat */
        struct counting cnt = {.n = 6, .fail_at = 99};
        struct qp_provider *p = NULL;
        assert_int_equal(qp_provider_alloc(&counting_ops, "npy", names, 1, &p, &err), QP_OK);
        p->impl = &cnt;
        struct qp_ranges *r = NULL;
        struct qp_collect_report rep_out;
        assert_int_equal(qp_calibrate_model(m, p, &o, &r, &rep_out, &err), QP_OK);
        assert_true(rep_out.n_batches == 6 && rep_out.n_samples == 6 * COUNT_ROWS);
        const struct qp_range *x = get(r, "x");
        /* every batch was seen once, as it was: -1 .. 4 */
        assert_true(x->lo == -1.0f && x->hi == 4.0f && x->n_values == 6 * 4 * COUNT_ROWS);
        assert_true(get(r, "r")->lo == 0.0f); /* Relu of -1 and 0 */
        assert_int_equal(cnt.reads_after_end, 1);
        qp_ranges_free(r);

        /* a read that fails mid-way: its error, no ranges, nothing read after it */
        struct counting bad = {.n = 6, .fail_at = 3};
        p->impl = &bad;
        r = NULL;
        assert_int_equal(qp_calibrate_model(m, p, &o, &r, NULL, &err), QP_ERR_BAD_INPUT);
        assert_non_null(strstr(err.msg, "batch 3 is broken"));
        assert_null(r);
        assert_int_equal(bad.done, 3);
        qp_provider_free(p);
    }
    qp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max_ranges),
        cmocka_unit_test(test_pooled_groups),
        cmocka_unit_test(test_nonfinite),
        cmocka_unit_test(test_placement),
        cmocka_unit_test(test_placement_float_only),
        cmocka_unit_test(test_provider_map_inputs),
        cmocka_unit_test(test_constant_memory),
        cmocka_unit_test(test_calibrate_model),
        cmocka_unit_test(test_read_ahead),
        cmocka_unit_test(test_derived_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
