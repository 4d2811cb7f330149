/*
 * Q/DQ topology diff (src/placement/diff.h): slots of hand-built Q/DQ graphs resolved back to the
 * original tensors (through Q, through a DQ-only weight and a `_quantized` copy),
 * SAME / A ONLY / B ONLY counts with weights apart, grouping by producer -> consumer op, and
 * the text and JSON reports.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "../quant/qgraph.h"

#include "ir/ir.h"
#include "placement/diff.h"
#include "placement/placement.h"

/* x -> Relu(r0) -> a ; a -Q/DQ-> Conv(c0, weight W through Q/DQ) -> y ; a -> Sigmoid(s0) (float);
 * y -Q/DQ-> Cast(cast0) -> Add(add0, input 0) ; Wq (stored quantized, "W2_quantized") -DQ->
 * MatMul(mm0, input 1). */
static struct qp_model *qdq_graph(void) {
    struct qp_model *m = qp_model_create();
    assert_non_null(m);
    qg_input(m, "x");
    qg_node(m, "r0", "Relu", "x", "a");
    qg_init(m, "a_scale", 0, NULL);
    qg_init(m, "W", 4, QG_DIMS(2, 2, 1, 1));
    qg_init(m, "W2", 2, QG_DIMS(2, 2));
    qg_init(m, "W2_quantized", 2, QG_DIMS(2, 2));
    qg_node(m, "a_Q", "QuantizeLinear", "a,a_scale", "a_q");
    qg_node(m, "a_DQ", "DequantizeLinear", "a_q,a_scale", "a_dq");
    qg_node(m, "W_Q", "QuantizeLinear", "W,a_scale", "W_q");
    qg_node(m, "W_DQ", "DequantizeLinear", "W_q,a_scale", "W_dq");
    qg_node(m, "c0", "Conv", "a_dq,W_dq", "y");
    qg_node(m, "s0", "Sigmoid", "a", "s");
    qg_node(m, "y_Q", "QuantizeLinear", "y,a_scale", "y_q");
    qg_node(m, "y_DQ", "DequantizeLinear", "y_q,a_scale", "y_dq");
    qg_node(m, "cast0", "Cast", "y_dq", "y_c");
    qg_node(m, "add0", "Add", "y_c,s", "z");
    qg_node(m, "W2_DQ", "DequantizeLinear", "W2_quantized,a_scale", "W2_dq");
    qg_node(m, "mm0", "MatMul", "z,W2_dq", "out");
    qg_node(m, "keep", "Identity", "W2", "w2_copy");
    qg_output(m, "out");
    qg_output(m, "w2_copy");
    qg_sort(m);
    return m;
}

static struct qp_placement *matching_placement(void) {
    struct qp_error err = {0};
    struct qp_placement *p = qp_placement_create();
    assert_int_equal(qp_placement_add_edge(p, "a", "c0", 0, "t", &err), QP_OK);
    assert_int_equal(qp_placement_add_weight(p, "W", "c0", 1, 0, "t", &err), QP_OK);
    assert_int_equal(qp_placement_add_edge(p, "y", "cast0", 0, "t", &err), QP_OK);
    assert_int_equal(qp_placement_add_weight(p, "W2", "mm0", 1, 1, "t", &err), QP_OK);
    return p;
}

static void diff_of(struct qp_model *m, const struct qp_placement *p, struct qp_qdq_diff *d,
                    struct qp_qdq_slots **a, struct qp_qdq_slots **b) {
    struct qp_error err = {0};
    assert_int_equal(qp_qdq_slots_from_model(m->graph, a, &err), QP_OK);
    assert_int_equal(qp_qdq_slots_from_placement(p, m->graph, b, &err), QP_OK);
    assert_int_equal(qp_qdq_diff(*a, *b, d, &err), QP_OK);
}

static void test_slots_resolved(void **state) {
    (void)state;
    struct qp_model *m = qdq_graph();
    struct qp_error err = {0};
    struct qp_qdq_slots *s = NULL;
    assert_int_equal(qp_qdq_slots_from_model(m->graph, &s, &err), QP_OK);
    assert_int_equal(s->n, 4); /* sorted by node name: c0 (x2), cast0, mm0 */
    assert_string_equal(s->slots[2].node, "cast0");
    assert_string_equal(s->slots[2].tensor, "y");
    assert_int_equal(s->slots[2].weight, 0);
    assert_string_equal(s->slots[2].producer_op, "Conv");
    assert_string_equal(s->slots[0].tensor, "a");
    assert_string_equal(s->slots[0].producer_op, "Relu");
    assert_string_equal(s->slots[1].tensor, "W");
    assert_int_equal(s->slots[1].weight, 1);
    assert_string_equal(s->slots[3].node, "mm0");
    assert_string_equal(s->slots[3].tensor, "W2"); /* the _quantized copy counts as W2 */
    assert_int_equal(s->slots[3].weight, 1);
    qp_qdq_slots_free(s);
    qp_model_free(m);
}

static void test_same(void **state) {
    (void)state;
    struct qp_model *m = qdq_graph();
    struct qp_placement *p = matching_placement();
    struct qp_qdq_diff d;
    struct qp_qdq_slots *a = NULL, *b = NULL;
    diff_of(m, p, &d, &a, &b);
    assert_true(qp_qdq_diff_same(&d));
    assert_int_equal(d.same[0], 2);
    assert_int_equal(d.same[1], 2);
    assert_int_equal(d.n_groups, 0);
    struct qp_error err = {0};
    char *text = NULL;
    assert_int_equal(qp_qdq_diff_format(&d, "m.onnx", "p.json", 0, &text, &err), QP_OK);
    assert_non_null(strstr(text, "result: SAME"));
    free(text);
    qp_qdq_diff_release(&d);
    qp_qdq_slots_free(a);
    qp_qdq_slots_free(b);
    qp_placement_free(p);
    qp_model_free(m);
}

static void test_differences(void **state) {
    (void)state;
    struct qp_model *m = qdq_graph();
    struct qp_placement *p = matching_placement();
    struct qp_error err = {0};
    /* B places the Sigmoid input too (an edge the model lacks), drops the Conv weight, and
     * quantizes y for the Add instead of the Cast. */
    assert_int_equal(qp_placement_add_edge(p, "a", "s0", 0, "t", &err), QP_OK);
    assert_int_equal(qp_placement_remove(p, "c0", 1), 1);
    assert_int_equal(qp_placement_remove(p, "cast0", 0), 1);
    assert_int_equal(qp_placement_add_edge(p, "y", "add0", 0, "t", &err), QP_OK);
    struct qp_qdq_diff d;
    struct qp_qdq_slots *a = NULL, *b = NULL;
    diff_of(m, p, &d, &a, &b);
    assert_false(qp_qdq_diff_same(&d));
    assert_int_equal(d.same[0], 1);   /* a -> c0 */
    assert_int_equal(d.same[1], 1);   /* W2 -> mm0 */
    assert_int_equal(d.a_only[0], 1); /* y -> cast0 */
    assert_int_equal(d.a_only[1], 1); /* W -> c0 */
    assert_int_equal(d.b_only[0], 2); /* a -> s0, y -> add0 */
    assert_int_equal(d.b_only[1], 0);
    /* Groups: A ONLY Conv->Cast edge, A ONLY initializer->Conv weight, B ONLY Relu->Sigmoid,
     * B ONLY Conv->Add. */
    assert_int_equal(d.n_groups, 4);
    int found = 0;
    for (size_t i = 0; i < d.n_groups; i++)
        if (d.groups[i].side == 1 && strcmp(d.groups[i].producer_op, "Relu") == 0 &&
            strcmp(d.groups[i].consumer_op, "Sigmoid") == 0) {
            assert_int_equal(d.groups[i].count, 1);
            assert_string_equal(d.groups[i].examples[0]->node, "s0");
            found = 1;
        }
    assert_true(found);
    char *text = NULL;
    assert_int_equal(qp_qdq_diff_format(&d, "m.onnx", "p.json", 0, &text, &err), QP_OK);
    assert_non_null(strstr(text, "B ONLY edge   Relu -> Sigmoid: 1"));
    assert_non_null(strstr(text, "A ONLY weight initializer -> Conv: 1"));
    assert_non_null(strstr(text, "result: DIFFERENT"));
    free(text);
    assert_int_equal(qp_qdq_diff_format(&d, "m.onnx", "p.json", 1, &text, &err), QP_OK);
    cJSON *j = cJSON_Parse(text);
    assert_non_null(j);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(j, "same")));
    cJSON *bo = cJSON_GetObjectItem(j, "b_only");
    assert_int_equal(cJSON_GetObjectItem(bo, "edges")->valueint, 2);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "differences")), 4);
    cJSON_Delete(j);
    free(text);
    qp_qdq_diff_release(&d);
    qp_qdq_slots_free(a);
    qp_qdq_slots_free(b);
    qp_placement_free(p);
    qp_model_free(m);
}

/* Two placements without a graph: op types unknown, counts still right. */
static void test_placements_only(void **state) {
    (void)state;
    struct qp_placement *p = matching_placement(), *q = matching_placement();
    struct qp_error err = {0};
    assert_int_equal(qp_placement_remove(q, "mm0", 1), 1);
    struct qp_qdq_slots *a = NULL, *b = NULL;
    assert_int_equal(qp_qdq_slots_from_placement(p, NULL, &a, &err), QP_OK);
    assert_int_equal(qp_qdq_slots_from_placement(q, NULL, &b, &err), QP_OK);
    struct qp_qdq_diff d;
    assert_int_equal(qp_qdq_diff(a, b, &d, &err), QP_OK);
    assert_int_equal(d.a_only[1], 1);
    assert_int_equal(d.same[0] + d.same[1], 3);
    assert_string_equal(d.groups[0].consumer_op, "?");
    qp_qdq_diff_release(&d);
    qp_qdq_slots_free(a);
    qp_qdq_slots_free(b);
    qp_placement_free(p);
    qp_placement_free(q);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slots_resolved),
        cmocka_unit_test(test_same),
        cmocka_unit_test(test_differences),
        cmocka_unit_test(test_placements_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
