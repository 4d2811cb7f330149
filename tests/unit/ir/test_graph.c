/* Unit tests of the graph IR: building, lookups, topological order, naming and edits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/arena.h"
#include "ir/ir.h"

static int add(struct qp_graph *g, const char *name, const char *op, int ni, const char *in0,
               const char *in1, const char *out) {
    const char *ins[2] = {in0, in1};
    int node = -1;
    struct qp_error err = {0};
    enum qp_status st = qp_graph_add_node(g, name, op, "", ni, ins, 1, &out, &node, &err);
    assert_int_equal(st, QP_OK);
    return node;
}

static struct qp_model *linear_model(void) {
    /* x -> Conv(w) -> y -> Relu -> z */
    struct qp_model *m = qp_model_create();
    assert_non_null(m);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    static const int64_t dims[1] = {4};
    static const float w[4] = {1, 2, 3, 4};
    struct qp_tensor t = {.name = "w",
                          .dtype = QP_DTYPE_FLOAT,
                          .rank = 1,
                          .dims = dims,
                          .numel = 4,
                          .data = w,
                          .nbytes = sizeof w};
    assert_int_equal(qp_graph_add_initializer(g, &t, NULL, &err), QP_OK);
    assert_int_equal(qp_graph_add_input(g, qp_graph_value(g, "x"), &err), QP_OK);
    add(g, "conv", "Conv", 2, "x", "w", "y");
    add(g, "relu", "Relu", 1, "y", NULL, "z");
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "z"), &err), QP_OK);
    return m;
}

static void test_build_and_lookup(void **state) {
    (void)state;
    struct qp_model *m = linear_model();
    struct qp_graph *g = m->graph;
    int y = qp_graph_find_value(g, "y");
    assert_true(y >= 0);
    assert_int_equal(g->values[y].producer, qp_graph_find_node(g, "conv"));
    assert_int_equal(g->values[y].n_uses, 1);
    assert_int_equal(g->values[y].uses[0].node, qp_graph_find_node(g, "relu"));
    int w = qp_graph_find_value(g, "w");
    assert_int_equal(g->values[w].initializer, 0);
    assert_int_equal(g->values[w].dtype, QP_DTYPE_FLOAT);
    assert_int_equal(g->values[w].rank, 1);
    assert_int_equal(g->values[w].dims[0].value, 4);
    assert_int_equal(qp_graph_find_value(g, "nope"), -1);
    assert_int_equal(qp_graph_find_node(g, "nope"), -1);
    struct qp_error err = {0};
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    assert_int_equal(g->n_topo, 2);
    qp_model_free(m);
}

static void test_many_values_hash(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    struct qp_graph *g = m->graph;
    char name[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof name, "v%d", i);
        assert_int_equal(qp_graph_value(g, name), i);
    }
    for (int i = 0; i < 5000; i += 7) {
        snprintf(name, sizeof name, "v%d", i);
        assert_int_equal(qp_graph_find_value(g, name), i);
    }
    qp_model_free(m);
}

static void test_toposort_reorders_stably(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    qp_graph_add_input(g, qp_graph_value(g, "x"), &err);
    add(g, "c", "Relu", 1, "b", NULL, "c"); /* 0: needs b */
    add(g, "a", "Relu", 1, "x", NULL, "a"); /* 1: ready */
    add(g, "b", "Relu", 1, "a", NULL, "b"); /* 2: needs a */
    add(g, "d", "Relu", 1, "x", NULL, "d"); /* 3: ready */
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    assert_int_equal(g->n_topo, 4);
    /* ready nodes are taken in file order: a(1), then b(2) and d(3) are ready; b first */
    assert_int_equal(g->topo[0], 1);
    assert_int_equal(g->topo[1], 2);
    assert_int_equal(g->topo[2], 0);
    assert_int_equal(g->topo[3], 3);
    qp_model_free(m);
}

static void test_cycle_and_undefined(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    add(g, "A", "Relu", 1, "b", NULL, "a");
    add(g, "B", "Relu", 1, "a", NULL, "b");
    assert_int_equal(qp_graph_toposort(g, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "cycle"));
    assert_non_null(strstr(err.msg, "'A'"));
    qp_model_free(m);

    m = qp_model_create();
    g = m->graph;
    add(g, "N", "Add", 2, "p", "q", "r");
    qp_graph_add_input(g, qp_graph_value(g, "p"), &err);
    assert_int_equal(qp_graph_toposort(g, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "node 'N' (Add): input 1 'q'"));
    qp_model_free(m);
}

static void test_producer_conflict(void **state) {
    (void)state;
    struct qp_model *m = linear_model();
    struct qp_graph *g = m->graph;
    const char *in = "x", *out = "y";
    struct qp_error err = {0};
    assert_int_equal(qp_graph_add_node(g, "dup", "Relu", "", 1, &in, 1, &out, NULL, &err),
                     QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "produced by both node 'conv' and node 'dup'"));
    /* the failed add left the graph unchanged */
    assert_int_equal(g->n_nodes, 2);
    assert_int_equal(g->values[qp_graph_find_value(g, "x")].n_uses, 1);
    out = "w";
    assert_int_equal(qp_graph_add_node(g, "dup", "Relu", "", 1, &in, 1, &out, NULL, &err),
                     QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "initializer"));
    qp_model_free(m);
}

static void test_naming(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    qp_graph_add_input(g, qp_graph_value(g, "x"), &err);
    add(g, "", "Relu", 1, "x", NULL, "a");       /* unnamed */
    add(g, "n", "Relu", 1, "a", NULL, "b");      /* named */
    add(g, "n", "Relu", 1, "b", NULL, "c");      /* duplicate */
    add(g, "Relu_2", "Relu", 1, "c", NULL, "d"); /* collides with a generated name */
    add(g, "", "Sigmoid", 1, "d", NULL, "e");    /* unnamed */
    assert_int_equal(qp_graph_name_nodes(g, &err), QP_OK);
    /* two distinct names exist ("n", "Relu_2"), so k starts at 2; Relu_2 is taken -> Relu_3 */
    assert_string_equal(g->nodes[0].name, "Relu_3");
    assert_string_equal(g->nodes[1].name, "n");
    assert_string_equal(g->nodes[2].name, "n_1");
    assert_string_equal(g->nodes[3].name, "Relu_2");
    assert_string_equal(g->nodes[4].name, "Sigmoid_4");
    assert_int_equal(qp_graph_find_node(g, "n_1"), 2);
    assert_int_equal(qp_graph_find_node(g, "Sigmoid_4"), 4);
    qp_model_free(m);
}

static void test_insert_on_edge_and_value(void **state) {
    (void)state;
    struct qp_model *m = linear_model();
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    /* a second consumer of y */
    int sig = add(g, "sig", "Sigmoid", 1, "y", NULL, "s");
    int y = qp_graph_find_value(g, "y");
    g->values[y].dtype = QP_DTYPE_FLOAT;
    int relu = qp_graph_find_node(g, "relu");
    int q = -1;
    const char *extra[2] = {"scale", "zp"};
    assert_int_equal(
        qp_graph_insert_on_edge(g, relu, 0, "QuantizeLinear", "y_Q", 2, extra, &q, &err), QP_OK);
    int qo = g->nodes[q].outputs[0];
    assert_string_equal(g->nodes[q].name, "y_Q");
    assert_string_equal(g->values[qo].name, "y_Q_output");
    assert_int_equal(g->values[qo].dtype, QP_DTYPE_FLOAT);
    assert_int_equal(g->nodes[relu].inputs[0], qo);
    assert_int_equal(g->nodes[sig].inputs[0], y); /* the other consumer is untouched */
    assert_int_equal(g->values[y].n_uses, 2);     /* sig and the new Q */
    assert_int_equal(g->values[qo].n_uses, 1);
    assert_string_equal(g->values[g->nodes[q].inputs[1]].name, "scale");

    /* on the whole tensor: every consumer moves, graph output z stays */
    int z = qp_graph_find_value(g, "z");
    int idn = add(g, "tail", "Identity", 1, "z", NULL, "t");
    int n2 = -1;
    assert_int_equal(qp_graph_insert_on_value(g, z, "Identity", "y_Q", 0, NULL, &n2, &err), QP_OK);
    assert_string_equal(g->nodes[n2].name, "y_Q_1"); /* unique */
    assert_int_equal(g->nodes[idn].inputs[0], g->nodes[n2].outputs[0]);
    assert_int_equal(g->outputs[0], z);
    assert_int_equal(g->values[z].n_uses, 1);
    assert_int_equal(g->values[z].uses[0].node, n2);
    /* inserted nodes come after their inputs in topological order */
    const struct qp_value *sc = &g->values[qp_graph_find_value(g, "scale")];
    assert_int_equal(sc->producer, -1);
    qp_graph_add_input(g, qp_graph_find_value(g, "scale"), &err);
    qp_graph_add_input(g, qp_graph_find_value(g, "zp"), &err);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    int pos_q = -1, pos_relu = -1;
    for (size_t i = 0; i < g->n_topo; i++) {
        if (g->topo[i] == q) pos_q = (int)i;
        if (g->topo[i] == relu) pos_relu = (int)i;
    }
    assert_true(pos_q >= 0 && pos_q < pos_relu);
    qp_model_free(m);
}

static void test_remove_node(void **state) {
    (void)state;
    struct qp_model *m = linear_model();
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    int conv = qp_graph_find_node(g, "conv");
    assert_int_equal(qp_graph_remove_node(g, conv, &err), QP_OK);
    assert_int_equal(qp_graph_find_node(g, "conv"), -1);
    assert_int_equal(g->values[qp_graph_find_value(g, "y")].producer, -1);
    assert_int_equal(g->values[qp_graph_find_value(g, "x")].n_uses, 0);
    /* relu now reads an undefined tensor */
    assert_int_equal(qp_graph_toposort(g, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "'relu'"));
    /* rewire relu to x: valid again */
    assert_int_equal(
        qp_graph_set_input(g, qp_graph_find_node(g, "relu"), 0, qp_graph_find_value(g, "x"), &err),
        QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    assert_int_equal(g->n_topo, 1);
    qp_model_free(m);
}

static void test_subgraph_outer_reference(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    qp_graph_add_input(g, qp_graph_value(g, "cond"), &err);
    qp_graph_add_input(g, qp_graph_value(g, "x"), &err);
    /* file order: If first, then the producer of the tensor its branch reads */
    const char *in = "cond", *out = "r";
    int ifn = -1;
    assert_int_equal(qp_graph_add_node(g, "if", "If", "", 1, &in, 1, &out, &ifn, &err), QP_OK);
    add(g, "p", "Relu", 1, "x", NULL, "outer_t");
    struct qp_graph *sg = qp_graph_create(m, g);
    struct qp_attr *at = qp_node_add_attr(g, ifn, "then_branch", QP_ATTR_GRAPH);
    at->g = sg;
    add(sg, "inner", "Identity", 1, "outer_t", NULL, "then_out");
    qp_graph_add_output(sg, qp_graph_value(sg, "then_out"), &err);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    assert_int_equal(g->topo[0], qp_graph_find_node(g, "p"));
    assert_int_equal(g->topo[1], ifn);
    assert_true(sg->values[qp_graph_find_value(sg, "outer_t")].is_outer);
    /* a name defined nowhere is an error inside the subgraph */
    add(sg, "bad", "Identity", 1, "ghost", NULL, "g2");
    assert_int_equal(qp_graph_toposort(g, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "'ghost'"));
    /* unique names span subgraphs */
    assert_string_equal(qp_graph_unique_value_name(g, "then_out"), "then_out_1");
    assert_string_equal(qp_graph_unique_node_name(g, "inner"), "inner_1");
    qp_model_free(m);
}

static void test_opset_lookup(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    static struct qp_opset ops[2] = {{"", 13}, {"com.microsoft", 1}};
    m->opsets = ops;
    m->n_opsets = 2;
    assert_int_equal(qp_model_opset(m, ""), 13);
    assert_int_equal(qp_model_opset(m, "ai.onnx"), 13);
    assert_int_equal(qp_model_opset(m, "com.microsoft"), 1);
    assert_int_equal(qp_model_opset(m, "ai.onnx.ml"), 0);
    m->opsets = NULL;
    m->n_opsets = 0;
    qp_model_free(m);
}

static void test_many_attrs_and_inputs(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    int node = add(g, "big", "Custom", 0, NULL, NULL, "o");
    size_t before = qp_arena_bytes(m->arena);
    char name[32];
    for (int i = 0; i < 20000; i++) {
        snprintf(name, sizeof name, "a%d", i);
        struct qp_attr *at = qp_node_add_attr(g, node, name, QP_ATTR_INT);
        assert_non_null(at);
        at->i = i;
    }
    assert_int_equal(g->nodes[node].n_attrs, 20000);
    assert_int_equal(g->nodes[node].attrs[12345].i, 12345);
    assert_string_equal(qp_node_attr(&g->nodes[node], "a19999")->name, "a19999");
    /* geometric growth: the arrays ever allocated sum to under 4x the final one (plus names) */
    size_t grown = qp_arena_bytes(m->arena) - before;
    assert_true(grown < 4 * 20000 * sizeof(struct qp_attr) + 20000 * 64 + 256 * 1024);
    /* inputs: duplicates refused by flag, many inputs accepted */
    for (int i = 0; i < 20000; i++) {
        snprintf(name, sizeof name, "in%d", i);
        assert_int_equal(qp_graph_add_input(g, qp_graph_value(g, name), &err), QP_OK);
    }
    assert_int_equal(qp_graph_add_input(g, qp_graph_find_value(g, "in7"), &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "'in7' is listed twice"));
    assert_int_equal(g->n_inputs, 20000);
    qp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_build_and_lookup),         cmocka_unit_test(test_many_values_hash),
        cmocka_unit_test(test_toposort_reorders_stably), cmocka_unit_test(test_cycle_and_undefined),
        cmocka_unit_test(test_producer_conflict),        cmocka_unit_test(test_naming),
        cmocka_unit_test(test_insert_on_edge_and_value), cmocka_unit_test(test_remove_node),
        cmocka_unit_test(test_subgraph_outer_reference), cmocka_unit_test(test_opset_lookup),
        cmocka_unit_test(test_many_attrs_and_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
