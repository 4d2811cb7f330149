/* Session tests on small graphs built with the IR: plan-time shape subgraphs, plans per shape
 * set, unsupported ops reported at creation, observers, usage errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ir/ir.h"
#include "kernels/kernel.h"
#include "qplace/session.h"
#include "runtime/runtime.h"

static struct qp_opset opset17 = {"", 17};
static struct qp_dim dyn_dims[2] = {{-1, "batch"}, {3, NULL}};

static void node(struct qp_graph *g, const char *op, int ni, const char *a, const char *b,
                 const char *out) {
    const char *ins[2] = {a, b};
    struct qp_error err = {0};
    assert_int_equal(qp_graph_add_node(g, NULL, op, "", ni, ins, 1, &out, NULL, &err), QP_OK);
}

/* A model of opset 17 whose graph has the one input x[batch,3]. */
static struct qp_model *model_with_x(void) {
    struct qp_model *m = qp_model_create();
    assert_non_null(m);
    m->opsets = &opset17;
    m->n_opsets = 1;
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    int x = qp_graph_value(g, "x");
    g->values[x].dtype = QP_DTYPE_FLOAT;
    g->values[x].rank = 2;
    g->values[x].dims = dyn_dims;
    assert_int_equal(qp_graph_add_input(g, x, &err), QP_OK);
    return m;
}

/* x[batch,3] -> Relu -> r; Shape(r) -> s; Reshape(r, s) -> y; y + r -> z (output) */
static struct qp_model *model(const char *extra_op) {
    struct qp_model *m = model_with_x();
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    node(g, extra_op ? extra_op : "Relu", 1, "x", NULL, "r");
    node(g, "Shape", 1, "r", NULL, "s");
    node(g, "Reshape", 2, "r", "s", "y");
    node(g, "Add", 2, "y", "r", "z");
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "z"), &err), QP_OK);
    assert_int_equal(qp_graph_name_nodes(g, &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

static int n_observed;
static char last_observed[16];
static int observer(const char *tensor, const char *node_name, const struct qp_array *v,
                    void *user) {
    (void)node_name;
    (void)user;
    assert_non_null(tensor);
    assert_non_null(v->data);
    n_observed++;
    strncpy(last_observed, tensor, sizeof last_observed - 1);
    return 0;
}

static void test_run_dynamic_shapes(void **state) {
    (void)state;
    struct qp_model *m = model(NULL);
    struct qp_session *s = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_session_create(m, NULL, 0, NULL, &s, &err), QP_OK);
    assert_int_equal(qp_session_n_inputs(s), 1);
    assert_string_equal(qp_session_input_name(s, 0), "x");
    for (int batch = 1; batch <= 2; batch++) {
        float x[6] = {-1, 2, -3, 4, -5, 6};
        struct qp_array in;
        int64_t dims[2] = {batch, 3};
        assert_int_equal(
            qp_array_view(&in, QP_DTYPE_FLOAT, 2, dims, x, sizeof(float) * 3 * batch, &err), QP_OK);
        n_observed = 0;
        qp_session_set_observer(s, observer, NULL);
        assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
        /* Shape is evaluated at plan time: Relu, Reshape and Add are observed */
        assert_int_equal(n_observed, 3);
        struct qp_array out;
        assert_int_equal(qp_session_output(s, 0, &out, &err), QP_OK);
        assert_int_equal(out.rank, 2);
        assert_int_equal(out.dims[0], batch);
        const float *z = out.data;
        assert_true(z[0] == 0.0f && z[1] == 4.0f && z[2] == 0.0f);
        if (batch == 2) assert_true(z[5] == 12.0f);
    }
    /* wrong dtype and count are usage errors */
    struct qp_array bad;
    int64_t d[2] = {1, 3};
    int32_t xi[3] = {0};
    assert_int_equal(qp_array_view(&bad, QP_DTYPE_INT32, 2, d, xi, sizeof xi, &err), QP_OK);
    assert_int_equal(qp_session_run(s, 1, &bad, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "'x'"));
    assert_int_equal(qp_session_run(s, 0, NULL, &err), QP_ERR_USAGE);
    /* a static dim that disagrees with the model */
    int64_t d2[2] = {1, 4};
    float x4[4] = {0};
    assert_int_equal(qp_array_view(&bad, QP_DTYPE_FLOAT, 2, d2, x4, sizeof x4, &err), QP_OK);
    assert_int_equal(qp_session_run(s, 1, &bad, &err), QP_ERR_BAD_INPUT);
    qp_session_free(s);
    qp_model_free(m);
}

static void test_plan_at_create(void **state) {
    (void)state;
    struct qp_model *m = model(NULL);
    struct qp_session *s = NULL;
    struct qp_error err = {0};
    struct qp_shape shape = {.name = "x", .rank = 2, .dims = {4, 3}};
    assert_int_equal(qp_session_create(m, NULL, 1, &shape, &s, &err), QP_OK);
    /* r (48 bytes) and y/z fit in a few 64-byte slots, reused */
    assert_true(qp_session_arena_bytes(s) > 0);
    assert_true(qp_session_arena_bytes(s) <= 3 * 64);
    qp_session_free(s);
    struct qp_shape wrong = {.name = "nope", .rank = 2, .dims = {4, 3}};
    assert_int_equal(qp_session_create(m, NULL, 1, &wrong, &s, &err), QP_ERR_BAD_INPUT);
    assert_null(s);
    qp_model_free(m);
}

/* lazy_plan: shapes given but no plan until the first run, which then plans and computes as
 * usual; shapes that name no input are still refused at creation. */
static void test_lazy_plan(void **state) {
    (void)state;
    struct qp_model *m = model(NULL);
    struct qp_session *s = NULL;
    struct qp_error err = {0};
    struct qp_session_options so = {.n_threads = 1, .lazy_plan = 1};
    struct qp_shape shape = {.name = "x", .rank = 2, .dims = {4, 3}};
    assert_int_equal(qp_session_create(m, &so, 1, &shape, &s, &err), QP_OK);
    assert_int_equal(qp_session_arena_bytes(s), 0);
    enum qp_dtype dt;
    int computed;
    assert_int_equal(qp_session_value_info(s, "y", &dt, &computed, &err), QP_ERR_USAGE);
    float x[12];
    for (int i = 0; i < 12; i++)
        x[i] = (float)i - 5.0f;
    struct qp_array in;
    assert_int_equal(qp_array_view(&in, QP_DTYPE_FLOAT, 2, shape.dims, x, sizeof x, &err), QP_OK);
    assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
    assert_true(qp_session_arena_bytes(s) > 0);
    assert_int_equal(qp_session_value_info(s, "y", &dt, &computed, &err), QP_OK);
    qp_session_free(s);
    struct qp_shape wrong = {.name = "nope", .rank = 2, .dims = {4, 3}};
    assert_int_equal(qp_session_create(m, &so, 1, &wrong, &s, &err), QP_ERR_BAD_INPUT);
    assert_null(s);
    qp_model_free(m);
}

/* qp_session_value_info: what the plan knows without a run (dtype; computed at run time or a
 * plan-time constant); usage errors before a plan and for unknown names. */
static void test_value_info(void **state) {
    (void)state;
    struct qp_model *m = model(NULL);
    struct qp_session *s = NULL;
    struct qp_error err = {0};
    enum qp_dtype dt = QP_DTYPE_UNDEFINED;
    int computed = -1;
    /* the batch is symbolic: no plan yet */
    assert_int_equal(qp_session_create(m, NULL, 0, NULL, &s, &err), QP_OK);
    assert_int_equal(qp_session_value_info(s, "r", &dt, &computed, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "no plan"));
    struct qp_shape shape = {.name = "x", .rank = 2, .dims = {2, 3}};
    assert_int_equal(qp_session_plan(s, 1, &shape, &err), QP_OK);
    static const struct {
        const char *name;
        enum qp_dtype dt;
        int computed;
    } want[] = {{"x", QP_DTYPE_FLOAT, 1},
                {"r", QP_DTYPE_FLOAT, 1},
                {"s", QP_DTYPE_INT64, 0}, /* Shape: evaluated at plan time */
                {"y", QP_DTYPE_FLOAT, 1},
                {"z", QP_DTYPE_FLOAT, 1}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_int_equal(qp_session_value_info(s, want[i].name, &dt, &computed, &err), QP_OK);
        assert_int_equal(dt, want[i].dt);
        assert_int_equal(computed, want[i].computed);
    }
    assert_int_equal(qp_session_value_info(s, "nope", &dt, &computed, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "'nope'"));
    assert_int_equal(qp_session_value_info(s, "r", NULL, &computed, &err), QP_ERR_USAGE);
    qp_session_free(s);
    qp_model_free(m);
}

/* qp_session_set_observed: only the named tensors reach the observer; bad names are refused
 * and keep the previous set; n = 0 restores every tensor. */
static void test_observed_set(void **state) {
    (void)state;
    struct qp_model *m = model(NULL);
    struct qp_session *s = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_session_create(m, NULL, 0, NULL, &s, &err), QP_OK);
    float x[3] = {-1, 2, -3};
    struct qp_array in;
    int64_t dims[2] = {1, 3};
    assert_int_equal(qp_array_view(&in, QP_DTYPE_FLOAT, 2, dims, x, sizeof x, &err), QP_OK);
    qp_session_set_observer(s, observer, NULL);
    const char *only_y[] = {"y"};
    assert_int_equal(qp_session_set_observed(s, 1, only_y, &err), QP_OK);
    n_observed = 0;
    assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
    assert_int_equal(n_observed, 1);
    assert_string_equal(last_observed, "y");
    const char *bad[] = {"y", "nope"};
    assert_int_equal(qp_session_set_observed(s, 2, bad, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "'nope'"));
    const char *input[] = {"x"};
    assert_int_equal(qp_session_set_observed(s, 1, input, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "graph input"));
    n_observed = 0; /* the refused calls kept {y} */
    assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
    assert_int_equal(n_observed, 1);
    assert_int_equal(qp_session_set_observed(s, 0, NULL, &err), QP_OK);
    n_observed = 0;
    assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
    assert_int_equal(n_observed, 3);
    qp_session_free(s);
    qp_model_free(m);
}

static void test_unsupported_op_at_create(void **state) {
    (void)state;
    struct qp_model *m = model("FancyOp");
    struct qp_session *s = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_session_create(m, NULL, 0, NULL, &s, &err), QP_ERR_UNSUPPORTED);
    assert_null(s);
    assert_non_null(strstr(err.msg, "FancyOp"));
    assert_non_null(strstr(err.msg, "opset 17"));
    assert_non_null(strstr(err.msg, "ai.onnx"));
    assert_non_null(strstr(err.msg, "float"));
    qp_model_free(m);
}

/* x[batch,3] -> Relu -> r; Shape(x) -> s; Reshape(r, s) -> y; Relu(y) -> z (output), and with
 * `keep` also z + r -> out (r read after the Reshape). */
static struct qp_model *reshape_model(int keep) {
    struct qp_model *m = model_with_x();
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    node(g, "Relu", 1, "x", NULL, "r");
    node(g, "Shape", 1, "x", NULL, "s");
    node(g, "Reshape", 2, "r", "s", "y");
    node(g, "Relu", 1, "y", NULL, "z");
    if (keep) node(g, "Add", 2, "z", "r", "out");
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, keep ? "out" : "z"), &err), QP_OK);
    assert_int_equal(qp_graph_name_nodes(g, &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

/* The Reshape step's output shares its input's bytes (1) or not (0), and the session's output. */
static int reshape_shares(struct qp_model *m, float *out) {
    struct qp_session *s = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_session_create(m, NULL, 0, NULL, &s, &err), QP_OK);
    float x[6] = {-1, 2, -3, 4, 5, -6};
    struct qp_array in, o;
    int64_t dims[2] = {2, 3};
    assert_int_equal(qp_array_view(&in, QP_DTYPE_FLOAT, 2, dims, x, sizeof x, &err), QP_OK);
    assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
    assert_int_equal(qp_session_output(s, 0, &o, &err), QP_OK);
    memcpy(out, o.data, sizeof x);
    int shares = -1;
    for (size_t i = 0; i < s->last->n_steps; i++) {
        const struct rt_step *st = &s->last->steps[i];
        if (st->kind == RT_STEP_NODE && st->k && (st->k->flags & QP_KF_COPY))
            shares = st->out[0]->data == st->in[0]->data;
    }
    qp_session_free(s);
    return shares;
}

/* A Reshape that is its input's last reader takes over the input's bytes and copies nothing
 * (QP_KF_COPY, the plan's take-over); not when the input is read later or take-overs are off
 * (QP_SUM_IN_PLACE=0); the outputs are the same either way. */
static void test_reshape_takes_over(void **state) {
    (void)state;
    static const float want_z[6] = {0, 2, 0, 4, 5, 0}, want_out[6] = {0, 4, 0, 8, 10, 0};
    float out[6];
    struct qp_model *m = reshape_model(0);
    assert_int_equal(reshape_shares(m, out), 1);
    assert_memory_equal(out, want_z, sizeof out);
    setenv("QP_SUM_IN_PLACE", "0", 1);
    assert_int_equal(reshape_shares(m, out), 0);
    unsetenv("QP_SUM_IN_PLACE");
    assert_memory_equal(out, want_z, sizeof out);
    qp_model_free(m);
    m = reshape_model(1);
    assert_int_equal(reshape_shares(m, out), 0);
    assert_memory_equal(out, want_out, sizeof out);
    qp_model_free(m);
}

/* qp_array_alloc's data is zeroed and 64-byte aligned at every size, large (mmap'd) ones
 * included, so the first kernel's loads do not straddle cache lines (docs/engine.md). */
static void test_array_alloc_aligned(void **state) {
    (void)state;
    const int64_t sizes[] = {0, 1, 17, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        struct qp_error err = {0};
        struct qp_array a;
        int64_t dims[1] = {sizes[i]};
        assert_int_equal(qp_array_alloc(&a, QP_DTYPE_FLOAT, 1, dims, &err), QP_OK);
        assert_non_null(a.data);
        assert_int_equal((uintptr_t)a.data % 64, 0);
        const float *f = a.data;
        int64_t zeros = 0;
        for (int64_t j = 0; j < sizes[i]; j++)
            zeros += f[j] == 0.0f;
        assert_int_equal(zeros, sizes[i]);
        qp_array_release(&a);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_dynamic_shapes), cmocka_unit_test(test_plan_at_create),
        cmocka_unit_test(test_value_info),         cmocka_unit_test(test_lazy_plan),
        cmocka_unit_test(test_observed_set),       cmocka_unit_test(test_unsupported_op_at_create),
        cmocka_unit_test(test_reshape_takes_over), cmocka_unit_test(test_array_alloc_aligned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
