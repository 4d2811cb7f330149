/* The public graph API (qplace/graph.h) on a model built here: nodes in topological order,
 * inputs and outputs, attributes, tensors' types and shapes, consumers in order (and a short
 * buffer), initializer views, a com.microsoft node named like an ONNX op, and bad names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "../test_model.h"
#include "ir/ir.h"
#include "qplace/graph.h"

static struct qp_opset opset17 = {"", 17};
static struct qp_dim x_dims[2] = {{-1, "batch"}, {3, NULL}};
static const float w_data[6] = {1, 2, 3, 4, 5, 6};
static const int64_t w_dims[2] = {3, 2};
static const float alpha[2] = {0.5f, 0.25f};

static int add(struct qp_graph *g, const char *name, const char *op, const char *domain, int ni,
               const char *a, const char *b, const char *out) {
    const char *ins[2] = {a, b};
    struct qp_error err = {0};
    int n = -1;
    assert_int_equal(qp_graph_add_node(g, name, op, domain, ni, ins, 1, &out, &n, &err), QP_OK);
    return n;
}

/* x[batch, 3] @ w[3, 2] -> h; Relu(h) -> r; com.microsoft Relu(h) -> q; Add(r, h) -> y. Nodes
 * are added out of order (add first) so the topological order is not the index order. */
static struct qp_model *model(void) {
    struct qp_model *m = test_model_create(&opset17);
    test_model_add_input(m, "x", QP_DTYPE_FLOAT, 2, x_dims);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    struct qp_tensor w = {.name = "w",
                          .dtype = QP_DTYPE_FLOAT,
                          .rank = 2,
                          .dims = w_dims,
                          .numel = 6,
                          .data = w_data,
                          .nbytes = sizeof w_data};
    assert_int_equal(qp_graph_add_initializer(g, &w, NULL, &err), QP_OK);
    add(g, "add", "Add", "", 2, "r", "h", "y");
    int relu = add(g, "relu", "Relu", "", 1, "h", NULL, "r");
    add(g, "mm", "MatMul", "", 2, "x", "w", "h");
    add(g, "ms_relu", "Relu", "com.microsoft", 1, "h", NULL, "q");
    struct qp_attr *a = qp_node_add_attr(g, relu, "alphas", QP_ATTR_FLOATS);
    assert_non_null(a);
    a->n = 2;
    a->floats = alpha;
    a = qp_node_add_attr(g, relu, "mode", QP_ATTR_INT);
    assert_non_null(a);
    a->i = 7;
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "y"), &err), QP_OK);
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "q"), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

static void nodes_in_order(void **state) {
    (void)state;
    struct qp_model *m = model();
    struct qp_error err = {0};
    assert_int_equal(qp_model_n_nodes(m), 4);
    struct qp_node_info n;
    assert_int_equal(qp_model_node(m, 0, &n, &err), QP_OK);
    assert_string_equal(n.name, "mm");
    assert_string_equal(n.op_type, "MatMul");
    assert_int_equal(n.n_inputs, 2);
    assert_string_equal(qp_model_node_input(m, 0, 1), "w");
    assert_string_equal(qp_model_node_output(m, 0, 0), "h");
    assert_null(qp_model_node_input(m, 0, 2));
    size_t add_pos = 99, ms = 99, relu = 99;
    assert_true(qp_model_find_node(m, "add", &add_pos));
    assert_true(qp_model_find_node(m, "ms_relu", &ms));
    assert_true(qp_model_find_node(m, "relu", &relu));
    size_t mm = 99;
    assert_true(qp_model_find_node(m, "mm", &mm));
    assert_true(add_pos > relu && add_pos > mm); /* after both of its producers */
    assert_false(qp_model_find_node(m, "nope", NULL));
    assert_int_equal(qp_model_node(m, 4, &n, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "out of range"));
    /* A com.microsoft node named like an ONNX op is not the ONNX op. */
    assert_int_equal(qp_model_node(m, ms, &n, &err), QP_OK);
    assert_string_equal(n.domain, "com.microsoft");
    assert_false(qp_model_node_is(m, ms, "Relu"));
    assert_true(qp_model_node_is(m, relu, "Relu"));
    qp_model_free(m);
}

static void attributes(void **state) {
    (void)state;
    struct qp_model *m = model();
    struct qp_error err = {0};
    size_t relu = 0;
    assert_true(qp_model_find_node(m, "relu", &relu));
    struct qp_attribute_info a;
    assert_int_equal(qp_model_node_attribute(m, relu, 0, &a, &err), QP_OK);
    assert_string_equal(a.name, "alphas");
    assert_int_equal(a.type, QP_ATTRIBUTE_FLOATS);
    assert_int_equal(a.n, 2);
    assert_true(a.floats[1] == 0.25f);
    assert_true(qp_model_node_find_attribute(m, relu, "mode", &a));
    assert_int_equal(a.type, QP_ATTRIBUTE_INT);
    assert_int_equal(a.i, 7);
    assert_false(qp_model_node_find_attribute(m, relu, "nope", &a));
    assert_int_equal(qp_model_node_attribute(m, relu, 2, &a, &err), QP_ERR_USAGE);
    qp_model_free(m);
}

static void values_and_consumers(void **state) {
    (void)state;
    struct qp_model *m = model();
    struct qp_error err = {0};
    struct qp_value_info v;
    assert_int_equal(qp_model_value(m, "x", &v, &err), QP_OK);
    assert_true(v.is_input && !v.is_initializer && v.is_tensor);
    assert_int_equal(v.rank, 2);
    assert_int_equal(v.dims[0], -1);
    assert_string_equal(v.dim_params[0], "batch");
    assert_int_equal(v.dims[1], 3);
    assert_null(v.producer);
    assert_int_equal(qp_model_value(m, "h", &v, &err), QP_OK);
    assert_string_equal(v.producer, "mm");
    assert_int_equal(v.n_consumers, 3);
    assert_int_equal(v.rank, -1);
    assert_int_equal(qp_model_value(m, "missing", &v, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "'missing'"));

    assert_int_equal(qp_model_n_inputs(m), 1);
    assert_string_equal(qp_model_input_name(m, 0), "x");
    assert_null(qp_model_input_name(m, 1));
    assert_int_equal(qp_model_n_outputs(m), 2);
    assert_string_equal(qp_model_output_name(m, 1), "q");

    struct qp_consumer c[3];
    size_t n = 0;
    assert_int_equal(qp_model_consumers(m, "h", c, 3, &n, &err), QP_OK);
    assert_int_equal(n, 3);
    for (size_t k = 1; k < 3; k++)
        assert_true(c[k - 1].node < c[k].node);
    size_t add_pos = 0;
    assert_true(qp_model_find_node(m, "add", &add_pos));
    int seen_add = 0;
    for (size_t k = 0; k < 3; k++)
        if (c[k].node == add_pos) {
            assert_string_equal(c[k].node_name, "add");
            assert_int_equal(c[k].input, 1);
            seen_add = 1;
        }
    assert_true(seen_add);
    struct qp_consumer first;
    assert_int_equal(qp_model_consumers(m, "h", &first, 1, &n, &err), QP_OK);
    assert_int_equal(n, 3); /* the total, though one was asked for */
    assert_int_equal(first.node, c[0].node);
    assert_int_equal(qp_model_consumers(m, "h", NULL, 0, &n, &err), QP_OK);
    assert_int_equal(n, 3);
    assert_int_equal(qp_model_consumers(m, "y", c, 3, &n, &err), QP_OK);
    assert_int_equal(n, 0);
    assert_int_equal(qp_model_consumers(m, "zz", c, 3, &n, &err), QP_ERR_BAD_INPUT);
    qp_model_free(m);
}

static void initializers(void **state) {
    (void)state;
    struct qp_model *m = model();
    struct qp_error err = {0};
    assert_int_equal(qp_model_n_initializers(m), 1);
    assert_string_equal(qp_model_initializer_name(m, 0), "w");
    struct qp_array w;
    assert_int_equal(qp_model_initializer(m, "w", &w, &err), QP_OK);
    assert_int_equal(w.dtype, QP_DTYPE_FLOAT);
    assert_int_equal(w.rank, 2);
    assert_int_equal(w.dims[0], 3);
    assert_int_equal(w.nbytes, sizeof w_data);
    assert_int_equal(w.owned, 0);
    assert_true(((const float *)w.data)[5] == 6.0f);
    qp_array_release(&w); /* a view: releases nothing */
    assert_int_equal(qp_model_initializer(m, "x", &w, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "no initializer 'x'"));
    struct qp_value_info v;
    assert_int_equal(qp_model_value(m, "w", &v, &err), QP_OK);
    assert_true(v.is_initializer && !v.is_input);
    qp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nodes_in_order),
        cmocka_unit_test(attributes),
        cmocka_unit_test(values_and_consumers),
        cmocka_unit_test(initializers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
