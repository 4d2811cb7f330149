/*
 * Weight Q folding (src/quant/qdq_to_dq.h): INT8 round half to even with saturation, FP8
 * saturating, DQ reading the stored weight, Q removed, a shared float weight kept, activation
 * Q/DQ untouched, and the engine giving bit-identical outputs before and after.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "qgraph.h"

#include "core/arena.h"
#include "ir/ir.h"
#include "qplace/dtype.h"
#include "qplace/session.h"
#include "quant/qdq_to_dq.h"

static void set_opset(struct qp_model *m) {
    m->opsets = qp_arena_calloc(m->arena, 1, sizeof *m->opsets);
    m->opsets[0].domain = "";
    m->opsets[0].version = 19;
    m->n_opsets = 1;
    m->ir_version = 9;
}

static void add_init(struct qp_model *m, const char *name, enum qp_dtype dt, int rank,
                     const int64_t *d, const void *data, size_t elem) {
    int64_t *dims = qp_arena_calloc(m->arena, (size_t)(rank ? rank : 1), sizeof *dims);
    uint64_t numel = 1;
    for (int i = 0; i < rank; i++) {
        dims[i] = d[i];
        numel *= (uint64_t)d[i];
    }
    void *copy = qp_arena_calloc(m->arena, numel, elem);
    memcpy(copy, data, numel * elem);
    struct qp_tensor t = {.name = name,
                          .dtype = dt,
                          .rank = rank,
                          .dims = dims,
                          .numel = numel,
                          .data = copy,
                          .nbytes = numel * elem};
    struct qp_error err = {0};
    assert_int_equal(qp_graph_add_initializer(m->graph, &t, NULL, &err), QP_OK);
}

/* W[2,3] per row scales {0.5, 0.25}: ties, saturation at both ends. */
static const float W[6] = {0.25f, 0.75f, 1.25f, -0.625f, 100.0f, -100.0f};
static const float S[2] = {0.5f, 0.25f};
static const int8_t EXPECT[6] = {0, 2, 2, -2, 127, -128}; /* 0.5->0, 1.5->2, 2.5->2, -2.5->-2 */

/* x[1,2] -> Q/DQ (activation, per tensor) -> MatMul(DQ(Q(W))) -> y; optionally W -> Identity. */
static struct qp_model *model(enum qp_dtype qtype, int shared_weight) {
    struct qp_model *m = qp_model_create();
    set_opset(m);
    qg_shape(m, "x", QP_DTYPE_FLOAT, 2, QG_DIMS(1, 2));
    qg_input(m, "x");
    uint8_t zeros[2] = {0, 0};
    if (qtype == QP_DTYPE_INT8) {
        add_init(m, "W", QP_DTYPE_FLOAT, 2, QG_DIMS(2, 3), W, 4);
        add_init(m, "W_scale", QP_DTYPE_FLOAT, 1, QG_DIMS(2), S, 4);
        add_init(m, "W_zp", qtype, 1, QG_DIMS(2), zeros, 1);
        int q = qg_node(m, "W_Q", "QuantizeLinear", "W,W_scale,W_zp", "W_q");
        int d = qg_node(m, "W_DQ", "DequantizeLinear", "W_q,W_scale,W_zp", "W_dq");
        qg_attr_i(m, q, "axis", 0);
        qg_attr_i(m, d, "axis", 0);
    } else {
        const float one = 1.0f;
        const float wf[6] = {1000.0f, 0.3f, -1000.0f, 2.0f, -0.1f, 447.0f};
        add_init(m, "W", QP_DTYPE_FLOAT, 2, QG_DIMS(2, 3), wf, 4);
        add_init(m, "W_scale", QP_DTYPE_FLOAT, 0, NULL, &one, 4);
        add_init(m, "W_zp", qtype, 0, NULL, zeros, 1);
        qg_node(m, "W_Q", "QuantizeLinear", "W,W_scale,W_zp", "W_q");
        qg_node(m, "W_DQ", "DequantizeLinear", "W_q,W_scale,W_zp", "W_dq");
    }
    const float xs = 0.05f;
    add_init(m, "x_scale", QP_DTYPE_FLOAT, 0, NULL, &xs, 4);
    add_init(m, "x_zp", qtype, 0, NULL, zeros, 1);
    qg_node(m, "x_Q", "QuantizeLinear", "x,x_scale,x_zp", "x_q");
    qg_node(m, "x_DQ", "DequantizeLinear", "x_q,x_scale,x_zp", "x_dq");
    qg_node(m, "mm", "MatMul", "x_dq,W_dq", "y");
    qg_shape(m, "y", QP_DTYPE_FLOAT, 2, QG_DIMS(1, 3));
    qg_output(m, "y");
    if (shared_weight) {
        qg_node(m, "keep", "Identity", "W", "w_copy");
        qg_shape(m, "w_copy", QP_DTYPE_FLOAT, 2, QG_DIMS(2, 3));
        qg_output(m, "w_copy");
    }
    qg_sort(m);
    return m;
}

static void run(struct qp_model *m, float *y_out) {
    struct qp_error err = {0};
    struct qp_session *s = NULL;
    assert_int_equal(qp_session_create(m, NULL, 0, NULL, &s, &err), QP_OK);
    struct qp_array in;
    assert_int_equal(qp_array_alloc(&in, QP_DTYPE_FLOAT, 2, QG_DIMS(1, 2), &err), QP_OK);
    ((float *)in.data)[0] = 0.7f;
    ((float *)in.data)[1] = -1.3f;
    assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
    struct qp_array y;
    assert_int_equal(qp_session_output(s, 0, &y, &err), QP_OK);
    memcpy(y_out, y.data, 3 * sizeof *y_out);
    qp_array_release(&in);
    qp_session_free(s);
}

static size_t count_live(const struct qp_graph *g, const char *op) {
    size_t n = 0;
    for (size_t i = 0; i < g->n_nodes; i++)
        n += !g->nodes[i].dead && strcmp(g->nodes[i].op_type, op) == 0;
    return n;
}

static const struct qp_tensor *init_of(const struct qp_graph *g, const char *name) {
    int v = qp_graph_find_value(g, name);
    return v >= 0 && g->values[v].initializer >= 0 ? &g->inits[g->values[v].initializer] : NULL;
}

static void test_int8(void **state) {
    (void)state;
    struct qp_model *m = model(QP_DTYPE_INT8, 0);
    float before[3], after[3];
    run(m, before);
    struct qp_error err = {0};
    size_t n = 0;
    assert_int_equal(qp_qdq_to_dq(m, &n, &err), QP_OK);
    assert_int_equal(n, 1);
    struct qp_graph *g = m->graph;
    assert_int_equal(count_live(g, "QuantizeLinear"), 1); /* the activation's stays */
    assert_int_equal(qp_graph_find_node(g, "W_Q"), -1);
    int dq = qp_graph_find_node(g, "W_DQ");
    assert_true(dq >= 0);
    /* Replaced in place: same name, int8, what the Q would have produced. */
    assert_string_equal(g->values[g->nodes[dq].inputs[0]].name, "W");
    const struct qp_tensor *t = init_of(g, "W");
    assert_int_equal(t->dtype, QP_DTYPE_INT8);
    assert_int_equal(t->nbytes, 6);
    for (int k = 0; k < 6; k++)
        assert_int_equal(((const int8_t *)t->data)[k], EXPECT[k]);
    run(m, after);
    for (int k = 0; k < 3; k++)
        assert_true(before[k] == after[k]);
    qp_model_free(m);
}

static void test_shared_weight_kept(void **state) {
    (void)state;
    struct qp_model *m = model(QP_DTYPE_INT8, 1);
    struct qp_error err = {0};
    size_t n = 0;
    assert_int_equal(qp_qdq_to_dq(m, &n, &err), QP_OK);
    assert_int_equal(n, 1);
    struct qp_graph *g = m->graph;
    int dq = qp_graph_find_node(g, "W_DQ");
    assert_string_equal(g->values[g->nodes[dq].inputs[0]].name, "W" QP_QUANTIZED_SUFFIX);
    assert_int_equal(init_of(g, "W")->dtype, QP_DTYPE_FLOAT);
    const struct qp_tensor *t = init_of(g, "W" QP_QUANTIZED_SUFFIX);
    assert_non_null(t);
    for (int k = 0; k < 6; k++)
        assert_int_equal(((const int8_t *)t->data)[k], EXPECT[k]);
    qp_model_free(m);
}

static void test_fp8(void **state) {
    (void)state;
    struct qp_model *m = model(QP_DTYPE_FLOAT8E4M3FN, 0);
    float before[3], after[3];
    run(m, before);
    struct qp_error err = {0};
    assert_int_equal(qp_qdq_to_dq(m, NULL, &err), QP_OK);
    const struct qp_tensor *t = init_of(m->graph, "W");
    assert_int_equal(t->dtype, QP_DTYPE_FLOAT8E4M3FN);
    const uint8_t *q = t->data;
    assert_int_equal(q[0], 0x7E);                                      /* 1000 saturates to 448 */
    assert_int_equal(q[2], 0xFE);                                      /* -1000 to -448 */
    assert_true(qp_fp8_to_f32(QP_DTYPE_FLOAT8E4M3FN, q[5]) == 448.0f); /* 447 rounds to 448 */
    assert_int_equal(q[1], qp_f32_to_fp8(QP_DTYPE_FLOAT8E4M3FN, 0.3f, 1));
    assert_true(qp_fp8_to_f32(QP_DTYPE_FLOAT8E4M3FN, q[3]) == 2.0f);
    run(m, after);
    for (int k = 0; k < 3; k++)
        assert_true(before[k] == after[k]);
    qp_model_free(m);
}

static void test_bad_scale(void **state) {
    (void)state;
    struct qp_model *m = model(QP_DTYPE_INT8, 0);
    struct qp_graph *g = m->graph;
    /* A scale count that does not match the weight's axis. */
    int q = qp_graph_find_node(g, "W_Q");
    struct qp_attr *a = (struct qp_attr *)qp_node_attr(&g->nodes[q], "axis");
    a->i = 1;
    struct qp_error err = {0};
    assert_int_equal(qp_qdq_to_dq(m, NULL, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "W_Q"));
    assert_int_equal(init_of(g, "W")->dtype, QP_DTYPE_FLOAT);
    qp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_int8),
        cmocka_unit_test(test_shared_weight_kept),
        cmocka_unit_test(test_fp8),
        cmocka_unit_test(test_bad_scale),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
