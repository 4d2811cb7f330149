/* The latency measurement (runtime/bench.h) on a small graph built with the IR: counts and
 * order of the times, shape resolution, deterministic inputs, and the usage errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../test_model.h"
#include "ir/ir.h"
#include "runtime/bench.h"
#include "qplace/session.h"

static struct qp_opset opset17 = {"", 17};
static struct qp_dim x_dims[2] = {{-1, "batch"}, {3, NULL}};
static struct qp_dim z_dims[1] = {{3, NULL}};

/* x[batch,3] + z[3] -> Relu -> y */
static struct qp_model *model(void) {
    struct qp_model *m = test_model_create(&opset17);
    test_model_add_input(m, "x", QP_DTYPE_FLOAT, 2, x_dims);
    test_model_add_input(m, "z", QP_DTYPE_FLOAT, 1, z_dims);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    const char *ins[2] = {"x", "z"}, *sum = "s", *y = "y";
    assert_int_equal(qp_graph_add_node(g, NULL, "Add", "", 2, ins, 1, &sum, NULL, &err), QP_OK);
    assert_int_equal(qp_graph_add_node(g, NULL, "Relu", "", 1, &sum, 1, &y, NULL, &err), QP_OK);
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "y"), &err), QP_OK);
    assert_int_equal(qp_graph_name_nodes(g, &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

static const struct qp_shape batch4 = {.name = "x", .rank = 2, .dims = {4, 3}};

static void test_measure(void **state) {
    (void)state;
    struct qp_model *m = model();
    struct qp_bench_options o;
    qp_bench_options_default(&o);
    assert_int_equal(o.warmup, 3);
    assert_int_equal(o.iterations, 20);
    assert_int_equal(o.n_threads, 0);
    o.iterations = 7;
    o.warmup = 1;
    o.n_threads = 1;
    struct qp_bench_result r;
    struct qp_error err = {0};
    assert_int_equal(qp_bench_measure(m, 1, &batch4, &o, &r, &err), QP_OK);
    assert_int_equal(r.n_runs, 7);
    assert_non_null(r.run_ms);
    double sum = 0;
    for (size_t i = 0; i < r.n_runs; i++) {
        assert_true(r.run_ms[i] > 0);
        assert_true(r.min_ms <= r.run_ms[i] && r.run_ms[i] <= r.max_ms);
        sum += r.run_ms[i];
    }
    assert_true(r.min_ms > 0);
    assert_true(r.min_ms <= r.median_ms && r.median_ms <= r.max_ms);
    assert_true(r.min_ms <= r.mean_ms && r.mean_ms <= r.max_ms);
    assert_true(r.mean_ms == sum / 7.0);
    assert_int_equal(r.items, 4);
    assert_true(r.items_per_s == 4 * 1e3 / r.median_ms);
    qp_bench_result_release(&r);
    assert_null(r.run_ms);
    assert_int_equal(r.n_runs, 0);
    qp_bench_result_release(NULL);
    /* NULL options: the defaults. */
    assert_int_equal(qp_bench_measure(m, 1, &batch4, NULL, &r, &err), QP_OK);
    assert_int_equal(r.n_runs, 20);
    qp_bench_result_release(&r);
    qp_model_free(m);
}

static void test_bad_options(void **state) {
    (void)state;
    struct qp_model *m = model();
    struct qp_bench_options o;
    qp_bench_options_default(&o);
    struct qp_bench_result r;
    struct qp_error err = {0};
    o.iterations = 0;
    assert_int_equal(qp_bench_measure(m, 1, &batch4, &o, &r, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "iterations is 0"));
    assert_null(r.run_ms);
    assert_int_equal(r.n_runs, 0);
    o.iterations = 2;
    o.warmup = -1;
    assert_int_equal(qp_bench_measure(m, 1, &batch4, &o, &r, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "warmup is -1"));
    o.warmup = 0;
    o.n_threads = -2;
    assert_int_equal(qp_bench_measure(m, 1, &batch4, &o, &r, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "n_threads is -2"));
    o.n_threads = 0;
    /* A shape for an input the model does not have. */
    struct qp_shape nope[2] = {batch4, {.name = "nope", .rank = 1, .dims = {3}}};
    assert_int_equal(qp_bench_measure(m, 2, nope, &o, &r, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "'nope'"));
    assert_null(r.run_ms);
    /* No shape for the input with a symbolic dimension. */
    assert_int_equal(qp_bench_measure(m, 0, NULL, &o, &r, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "input 'x' dimension 0 is 'batch'"));
    assert_int_equal(qp_bench_measure(NULL, 0, NULL, &o, &r, &err), QP_ERR_USAGE);
    qp_model_free(m);
}

static void test_input_shapes(void **state) {
    (void)state;
    struct qp_model *m = model();
    struct qp_shape *sh = NULL;
    size_t n = 0;
    struct qp_error err = {0};
    assert_int_equal(qp_bench_input_shapes(m, 1, &batch4, &sh, &n, &err), QP_OK);
    assert_int_equal(n, 2);
    assert_ptr_equal(sh[0].name, batch4.name); /* the given one first, borrowed */
    assert_int_equal(sh[0].rank, 2);
    assert_int_equal(sh[0].dims[0], 4);
    assert_string_equal(sh[1].name, "z"); /* then the model's static one */
    assert_int_equal(sh[1].rank, 1);
    assert_int_equal(sh[1].dims[0], 3);
    free(sh);
    /* Given shapes override static ones, in the caller's order. */
    struct qp_shape both[2] = {{.name = "z", .rank = 1, .dims = {3}}, batch4};
    assert_int_equal(qp_bench_input_shapes(m, 2, both, &sh, &n, &err), QP_OK);
    assert_int_equal(n, 2);
    assert_string_equal(sh[0].name, "z");
    assert_string_equal(sh[1].name, "x");
    free(sh);
    sh = NULL;
    struct qp_shape y = {.name = "y", .rank = 0};
    assert_int_equal(qp_bench_input_shapes(m, 1, &y, &sh, &n, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "'y'"));
    assert_null(sh);
    qp_model_free(m);
}

/* The steps one by one: deterministic inputs, and the last run's outputs stay readable. */
static void test_session_steps(void **state) {
    (void)state;
    struct qp_model *m = model();
    struct qp_error err = {0};
    struct qp_shape *sh = NULL;
    size_t n_sh = 0;
    assert_int_equal(qp_bench_input_shapes(m, 1, &batch4, &sh, &n_sh, &err), QP_OK);
    struct qp_session *s = NULL;
    assert_int_equal(qp_session_create(m, NULL, n_sh, sh, &s, &err), QP_OK);
    struct qp_array *a = NULL, *b = NULL;
    assert_int_equal(qp_bench_inputs_create(s, n_sh, sh, &a, &err), QP_OK);
    assert_int_equal(qp_bench_inputs_create(s, n_sh, sh, &b, &err), QP_OK);
    assert_int_equal(qp_session_n_inputs(s), 2);
    assert_int_equal(a[0].nbytes, 12 * sizeof(float));
    assert_int_equal(a[1].nbytes, 3 * sizeof(float));
    assert_memory_equal(a[0].data, b[0].data, a[0].nbytes); /* the same on every call */
    assert_memory_equal(a[1].data, b[1].data, a[1].nbytes);
    const float *x = a[0].data, *z = a[1].data;
    for (int i = 0; i < 12; i++)
        assert_true(x[i] >= 0.0f && x[i] < 1.0f);
    assert_true(x[0] != x[1]);
    assert_true(memcmp(x, z, 3 * sizeof(float)) != 0); /* each input its own stream */
    struct qp_bench_options o = {.warmup = 0, .iterations = 3};
    struct qp_bench_result r;
    assert_int_equal(qp_bench_session(s, 2, a, &o, &r, &err), QP_OK);
    assert_int_equal(r.n_runs, 3);
    assert_int_equal(r.items, 4);
    struct qp_array out;
    assert_int_equal(qp_session_output(s, 0, &out, &err), QP_OK);
    const float *yv = out.data;
    for (int i = 0; i < 12; i++)
        assert_true(yv[i] == x[i] + z[i % 3]);
    qp_bench_result_release(&r);
    o.iterations = 0;
    assert_int_equal(qp_bench_session(s, 2, a, &o, &r, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "iterations"));
    /* The session's own errors come through unchanged. */
    o.iterations = 1;
    assert_int_equal(qp_bench_session(s, 1, a, &o, &r, &err), QP_ERR_USAGE);
    assert_null(r.run_ms);
    /* An input without a shape. */
    struct qp_array *c = NULL;
    assert_int_equal(qp_bench_inputs_create(s, 1, sh, &c, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "input 'z'"));
    assert_null(c);
    qp_bench_inputs_free(a, 2);
    qp_bench_inputs_free(b, 2);
    qp_bench_inputs_free(NULL, 0);
    qp_session_free(s);
    free(sh);
    qp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_measure),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_input_shapes),
        cmocka_unit_test(test_session_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
