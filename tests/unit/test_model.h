/* Model-building helpers shared by the unit tests (include after <cmocka.h>): a model of one
 * opset whose graph inputs are added by name, dtype and dims (both borrowed, usually static:
 * qp_model_free frees neither). */
#ifndef QP_TESTS_UNIT_TEST_MODEL_H
#define QP_TESTS_UNIT_TEST_MODEL_H

#include "ir/ir.h"

/* An empty model importing `opset` (borrowed, usually static). */
static inline struct qp_model *test_model_create(struct qp_opset *opset) {
    struct qp_model *m = qp_model_create();
    assert_non_null(m);
    m->opsets = opset;
    m->n_opsets = 1;
    return m;
}

/* Adds graph input `name` of `dtype` with `rank` dims (borrowed; NULL when rank is 0). */
static inline void test_model_add_input(struct qp_model *m, const char *name, enum qp_dtype dtype,
                                        int rank, struct qp_dim *dims) {
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    int v = qp_graph_value(g, name);
    assert_true(v >= 0);
    g->values[v].dtype = dtype;
    g->values[v].rank = rank;
    g->values[v].dims = dims;
    assert_int_equal(qp_graph_add_input(g, v, &err), QP_OK);
}

#endif
