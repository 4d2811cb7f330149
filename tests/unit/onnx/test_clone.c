/* qp_model_clone_shared: the clone's initializers borrow the source's bytes (no copy of the
 * weights), hold the same values, and the clone serializes to the very bytes the source does
 * (structure, attributes, subgraphs, external data as read). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ir/ir.h"
#include "qplace/model.h"
#include "../test_model.h"

/* Compares the clone's initializers with the source's and their serializations; returns how
 * many the clone borrows. */
static size_t compare(const struct qp_model *m, const struct qp_model *c) {
    struct qp_error err = {0};
    const struct qp_graph *g = qp_model_graph(m), *h = qp_model_graph(c);
    assert_int_equal(g->n_inits, h->n_inits);
    size_t shared = 0;
    for (size_t i = 0; i < g->n_inits; i++) {
        const struct qp_tensor *a = &g->inits[i], *b = &h->inits[i];
        assert_string_equal(a->name, b->name);
        assert_int_equal(a->dtype, b->dtype);
        assert_int_equal(a->nbytes, b->nbytes);
        if (a->data && a->nbytes) assert_memory_equal(a->data, b->data, a->nbytes);
        shared += a->data && a->data == b->data;
    }
    void *ba = NULL, *bb = NULL;
    size_t na = 0, nb = 0;
    assert_int_equal(qp_model_save_buffer(m, &ba, &na, &err), QP_OK);
    assert_int_equal(qp_model_save_buffer(c, &bb, &nb, &err), QP_OK);
    assert_int_equal(na, nb);
    assert_memory_equal(ba, bb, na);
    free(ba);
    free(bb);
    return shared;
}

static void check(const char *file) {
    char path[1024];
    snprintf(path, sizeof path, "%s/onnx/%s", QP_TEST_DATA_DIR, file);
    struct qp_error err = {0};
    struct qp_model *m = NULL, *c = NULL;
    assert_int_equal(qp_model_load_file(path, NULL, &m, &err), QP_OK);
    assert_int_equal(qp_model_clone_shared(m, &c, &err), QP_OK);
    size_t shared = compare(m, c);
    print_message("%s: %zu of %zu initializers shared\n", file, shared, qp_model_graph(m)->n_inits);
    qp_model_free(c);
    qp_model_free(m);
}

/* A model made in memory with a weight of 16 KB and a small one: the large one is borrowed,
 * the small one (under 256 bytes) copied. */
static void test_weights_borrowed(void **state) {
    (void)state;
    static struct qp_opset op = {"", 17};
    static struct qp_dim xd[2] = {{4, NULL}, {1024, NULL}};
    struct qp_model *m = test_model_create(&op);
    test_model_add_input(m, "x", QP_DTYPE_FLOAT, 2, xd);
    static float w[4096], b[4];
    static const int64_t wd[2] = {4, 1024}, bd[1] = {4};
    for (int i = 0; i < 4096; i++)
        w[i] = (float)i * 0.5f;
    struct qp_error err = {0};
    struct qp_tensor tw = {.name = "w",
                           .dtype = QP_DTYPE_FLOAT,
                           .rank = 2,
                           .dims = wd,
                           .numel = 4096,
                           .data = w,
                           .nbytes = sizeof w};
    struct qp_tensor tb = {.name = "b",
                           .dtype = QP_DTYPE_FLOAT,
                           .rank = 1,
                           .dims = bd,
                           .numel = 4,
                           .data = b,
                           .nbytes = sizeof b};
    assert_int_equal(qp_graph_add_initializer(m->graph, &tw, NULL, &err), QP_OK);
    assert_int_equal(qp_graph_add_initializer(m->graph, &tb, NULL, &err), QP_OK);
    const char *in[2] = {"x", "w"}, *out = "y";
    int n;
    assert_int_equal(qp_graph_add_node(m->graph, "add", "Add", "", 2, in, 1, &out, &n, &err),
                     QP_OK);
    assert_int_equal(qp_graph_add_output(m->graph, qp_graph_find_value(m->graph, "y"), &err),
                     QP_OK);
    struct qp_model *c = NULL;
    assert_int_equal(qp_model_clone_shared(m, &c, &err), QP_OK);
    assert_int_equal(compare(m, c), 1);
    assert_ptr_equal(qp_model_graph(c)->inits[0].data, w);
    assert_ptr_not_equal(qp_model_graph(c)->inits[1].data, b);
    /* an edit of the clone leaves the source as it was */
    assert_int_equal(qp_graph_remove_node(qp_model_graph(c), 0, &err), QP_OK);
    assert_false(m->graph->nodes[0].dead);
    qp_model_free(c);
    qp_model_free(m);
}

static void test_dtypes(void **state) {
    (void)state;
    check("dtypes.onnx");
}

static void test_external(void **state) {
    (void)state;
    check("ext_good.onnx");
}

static void test_subgraphs(void **state) {
    (void)state;
    check("control_flow.onnx");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_external),
        cmocka_unit_test(test_subgraphs),
        cmocka_unit_test(test_weights_borrowed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
