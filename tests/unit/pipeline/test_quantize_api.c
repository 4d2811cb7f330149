/* The in-memory quantize (qplace/quantize.h) on a model built here, x[2, 16] @ w[16, 16] -> y:
 * the trt policy's placement with batches from memory, the input model left unchanged, given
 * ranges (the written scale is amax / 127) and a range missing from them, a given (empty)
 * placement, and the config's checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../test_model.h"
#include "ir/ir.h"
#include "qplace/calib.h"
#include "qplace/graph.h"
#include "qplace/quantize.h"

static struct qp_opset opset19 = {"", 19};
static struct qp_dim x_dims[2] = {{2, NULL}, {16, NULL}};
static float w_data[256]; /* K = N = 16: smaller MatMuls stay float (ModelOpt) */
static const int64_t w_dims[2] = {16, 16};
static float x_data[3][32];

static struct qp_model *model(void) {
    struct qp_model *m = test_model_create(&opset19);
    test_model_add_input(m, "x", QP_DTYPE_FLOAT, 2, x_dims);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    for (int i = 0; i < 256; i++)
        w_data[i] = (float)(i % 5) - 2.0f;
    struct qp_tensor w = {.name = "w",
                          .dtype = QP_DTYPE_FLOAT,
                          .rank = 2,
                          .dims = w_dims,
                          .numel = 256,
                          .data = w_data,
                          .nbytes = sizeof w_data};
    assert_int_equal(qp_graph_add_initializer(g, &w, NULL, &err), QP_OK);
    const char *ins[2] = {"x", "w"}, *y = "y";
    assert_int_equal(qp_graph_add_node(g, "mm", "MatMul", "", 2, ins, 1, &y, NULL, &err), QP_OK);
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "y"), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

static enum qp_status give(void *user, uint64_t index, struct qp_array *inputs,
                           struct qp_error *err) {
    (void)user;
    int64_t dims[2] = {2, 16};
    return qp_array_view(&inputs[0], QP_DTYPE_FLOAT, 2, dims, x_data[index], sizeof x_data[0], err);
}

static struct qp_provider *data(void) {
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < 32; i++)
            x_data[b][i] = (float)((b * 32 + i) % 7) - 3.0f; /* in [-3, 3] */
    const char *names[] = {"x"};
    struct qp_provider *p = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_provider_callback_create(names, 1, 3, give, NULL, &p, &err), QP_OK);
    return p;
}

static size_t count_op(const struct qp_model *m, const char *op) {
    size_t n = 0;
    for (size_t i = 0; i < qp_model_n_nodes(m); i++)
        n += qp_model_node_is(m, i, op);
    return n;
}

/* The scale of the QuantizeLinear reading `tensor`. */
static float q_scale_of(const struct qp_model *m, const char *tensor) {
    struct qp_error err = {0};
    for (size_t i = 0; i < qp_model_n_nodes(m); i++) {
        if (!qp_model_node_is(m, i, "QuantizeLinear")) continue;
        if (strcmp(qp_model_node_input(m, i, 0), tensor) != 0) continue;
        struct qp_array s;
        assert_int_equal(qp_model_initializer(m, qp_model_node_input(m, i, 1), &s, &err), QP_OK);
        assert_int_equal(s.dtype, QP_DTYPE_FLOAT);
        return *(const float *)s.data;
    }
    fail_msg("no QuantizeLinear reads '%s'", tensor);
    return 0;
}

static void quantize_from_memory(void **state) {
    (void)state;
    struct qp_model *m = model(), *q = NULL;
    struct qp_provider *p = data();
    struct qp_error err = {0};
    struct qp_quantize_config c;
    qp_quantize_config_default(&c);
    c.trt.op_types_to_quantize = (const char *[]){"MatMul"};
    c.trt.n_op_types_to_quantize = 1;
    c.calibration_method = QP_CALIB_MAX;
    c.high_precision_dtype = QP_DTYPE_FLOAT;
    c.n_threads = 1;
    struct qp_quantize_summary *s = NULL;
    assert_int_equal(qp_quantize_model(m, p, &c, &q, &s, &err), QP_OK);
    assert_int_equal(s->n_calib_batches, 3);
    assert_int_equal(s->n_calib_samples, 6);
    assert_string_equal(s->calibration_source, "memory");
    assert_true(s->eval_on_calibration);
    assert_int_equal(s->n_tensors, 1);
    assert_int_equal(s->n_weight_tensors, 1);
    assert_int_equal(s->n_outputs, 1);
    assert_true(s->outputs[0].cosine > 0.99);
    assert_true(count_op(q, "QuantizeLinear") >= 1);
    assert_int_equal(count_op(m, "QuantizeLinear"), 0); /* the input model is unchanged */
    assert_int_equal(qp_model_n_nodes(m), 1);
    assert_true(fabsf(q_scale_of(q, "x") - 3.0f / 127.0f) < 1e-7f); /* max |x| = 3 */
    qp_quantize_summary_free(s);
    qp_model_free(q);
    q = NULL;

    /* Given ranges: the scale is theirs, no calibration. */
    struct qp_ranges *r = qp_ranges_create();
    assert_int_equal(
        qp_ranges_set(r, &(struct qp_range){.tensor = "x", .lo = -5, .hi = 5, .amax = 5}, &err),
        QP_OK);
    c.ranges = r;
    assert_int_equal(qp_quantize_model(m, p, &c, &q, NULL, &err), QP_OK);
    assert_true(fabsf(q_scale_of(q, "x") - 5.0f / 127.0f) < 1e-7f);
    qp_model_free(q);
    q = NULL;
    qp_ranges_free(r);
    r = qp_ranges_create();
    assert_int_equal(
        qp_ranges_set(r, &(struct qp_range){.tensor = "y", .lo = -1, .hi = 1, .amax = 1}, &err),
        QP_OK);
    c.ranges = r;
    assert_int_equal(qp_quantize_model(m, p, &c, &q, NULL, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "'x'"));
    assert_null(q);
    qp_ranges_free(r);
    c.ranges = NULL;

    /* A given placement is applied as it is: an empty one writes no Q/DQ. */
    struct qp_placement *pl = qp_placement_create();
    c.placement = pl;
    assert_int_equal(qp_quantize_model(m, p, &c, &q, NULL, &err), QP_OK);
    assert_int_equal(count_op(q, "QuantizeLinear") + count_op(q, "DequantizeLinear"), 0);
    qp_model_free(q);
    qp_placement_free(pl);
    qp_provider_free(p);
    qp_model_free(m);
}

static void config_checks(void **state) {
    (void)state;
    struct qp_model *m = model(), *q = NULL;
    struct qp_error err = {0};
    struct qp_quantize_config c;
    qp_quantize_config_default(&c);
    c.percentile = 101;
    assert_int_equal(qp_quantize_model(m, NULL, &c, &q, NULL, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "percentile"));
    qp_quantize_config_default(&c);
    c.opset = 12;
    assert_int_equal(qp_quantize_model(m, NULL, &c, &q, NULL, &err), QP_ERR_USAGE);
    qp_quantize_config_default(&c);
    c.high_precision_dtype = QP_DTYPE_INT8;
    assert_int_equal(qp_quantize_model(m, NULL, &c, &q, NULL, &err), QP_ERR_USAGE);
    qp_quantize_config_default(&c);
    c.trt.quantize_mode = QP_QUANT_MODE_COUNT;
    assert_int_equal(qp_quantize_model(m, NULL, &c, &q, NULL, &err), QP_ERR_USAGE);
    assert_int_equal(qp_quantize_model(NULL, NULL, NULL, &q, NULL, &err), QP_ERR_USAGE);
    assert_null(q);
    qp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(quantize_from_memory),
        cmocka_unit_test(config_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
