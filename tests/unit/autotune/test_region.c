/* Autotune regions and pattern signatures (autotune/region.h, autotune/pattern.h) on the
 * integration models: coverage, insertion points against the trt placement, signatures shared
 * by repeated blocks and independent of node names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "autotune/pattern.h"
#include "autotune/region.h"
#include "ir/ir.h"
#include "placement/placement.h"
#include "quant/policy_trt.h"
#include "qplace/model.h"

#define MODELS QP_TEST_DATA_DIR "/../integration/quantize_models"

static struct qp_model *load(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", MODELS, name);
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    assert_int_equal(qp_model_load_file(path, NULL, &m, &err), QP_OK);
    return m;
}

static size_t n_points(const struct qp_regions *rs) {
    size_t k = 0;
    for (size_t r = 0; r < rs->n_regions; r++)
        k += rs->regions[r].n_points;
    return k;
}

/* Every live non-Constant node is in exactly one region; every trt entry is a point. */
static void check_cover(struct qp_model *m, const struct qp_regions *rs) {
    struct qp_graph *g = m->graph;
    size_t seen = 0;
    for (size_t r = 0; r < rs->n_regions; r++) {
        for (size_t k = 0; k < rs->regions[r].n_nodes; k++)
            assert_int_equal(rs->region_of[rs->regions[r].nodes[k]], (int)r);
        seen += rs->regions[r].n_nodes;
    }
    size_t live = 0;
    for (size_t n = 0; n < g->n_nodes; n++)
        if (!g->nodes[n].dead && !qp_node_is(&g->nodes[n], "Constant")) live++;
    assert_int_equal(seen, live);

    struct qp_error err = {0};
    struct qp_placement *p = qp_placement_create();
    struct qp_policy_options o = {.mode = QP_QUANT_INT8};
    assert_int_equal(qp_policy_trt(g, &o, p, NULL, &err), QP_OK);
    assert_true(p->n_edges + p->n_weights > 0);
    for (size_t e = 0; e < p->n_edges + p->n_weights; e++) {
        int w = e >= p->n_edges;
        const char *node = w ? p->weights[e - p->n_edges].node : p->edges[e].node;
        int input = w ? p->weights[e - p->n_edges].input : p->edges[e].input;
        int n = qp_graph_find_node(g, node), found = 0;
        const struct qp_region *reg = &rs->regions[rs->region_of[n]];
        for (size_t k = 0; k < reg->n_points; k++)
            if (reg->points[k].node == n && reg->points[k].input == input) {
                found = 1;
                assert_int_equal(reg->points[k].is_weight, w);
                if (w) assert_int_equal(reg->points[k].axis, p->weights[e - p->n_edges].axis);
            }
        if (!found) fail_msg("trt entry %s:%d is no insertion point", node, input);
    }
    qp_placement_free(p);
}

/* Renaming every node keeps every signature. */
static void test_rename(void **state) {
    (void)state;
    const char *files[] = {"resnet_like.onnx", "vit_like.onnx"};
    for (int f = 0; f < 2; f++) {
        struct qp_model *m = load(files[f]);
        struct qp_regions *a = NULL, *b = NULL;
        struct qp_error err = {0};
        assert_int_equal(qp_regions_build(m->graph, &a, &err), QP_OK);
        static char names[256][32];
        assert_true(m->graph->n_nodes <= 256);
        for (size_t n = 0; n < m->graph->n_nodes; n++) {
            snprintf(names[n], sizeof names[n], "zz%zu", m->graph->n_nodes - n);
            m->graph->nodes[n].name = names[n];
        }
        assert_int_equal(qp_regions_build(m->graph, &b, &err), QP_OK);
        assert_int_equal(a->n_regions, b->n_regions);
        for (size_t r = 0; r < a->n_regions; r++)
            assert_string_equal(a->patterns[a->regions[r].pattern].signature,
                                b->patterns[b->regions[r].pattern].signature);
        qp_regions_free(a);
        qp_regions_free(b);
        qp_model_free(m);
    }
}

/* Levenshtein over op types. */
static void test_distance(void **state) {
    (void)state;
    char *a[] = {"Conv", "Relu", "Conv", "Add"}, *b[] = {"Conv", "Conv", "Add", "Relu"};
    assert_int_equal(qp_pattern_distance(a, 4, b, 4), 2);
    assert_int_equal(qp_pattern_distance(a, 4, a, 4), 0);
    assert_int_equal(qp_pattern_distance(a, 4, b, 0), 4);
}

static void print_regions(const struct qp_regions *rs) {
    for (size_t r = 0; r < rs->n_regions; r++)
        printf("  region %zu (%s, %zu points): %s\n", r,
               rs->regions[r].kind == QP_REGION_CONVERGED ? "converged" : "sequence",
               rs->regions[r].n_points, rs->patterns[rs->regions[r].pattern].signature);
}

static void test_resnet_like(void **state) {
    (void)state;
    struct qp_model *m = load("resnet_like.onnx");
    struct qp_regions *rs = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_regions_build(m->graph, &rs, &err), QP_OK);
    print_regions(rs);
    check_cover(m, rs);
    assert_true(n_points(rs) > 0);
    /* each bottleneck block is one converged region: from the fan-out to the Add and its Relu */
    int b1 = rs->region_of[qp_graph_find_node(m->graph, "add_b1")];
    assert_int_equal(rs->regions[b1].kind, QP_REGION_CONVERGED);
    assert_int_equal(rs->region_of[qp_graph_find_node(m->graph, "conv_b1_a")], b1);
    assert_int_equal(rs->region_of[qp_graph_find_node(m->graph, "conv_b1_p")], b1);
    assert_int_equal(rs->region_of[qp_graph_find_node(m->graph, "relu_b1")], b1);
    int b2 = rs->region_of[qp_graph_find_node(m->graph, "add_b2")];
    assert_int_equal(rs->region_of[qp_graph_find_node(m->graph, "conv_b2_a")], b2);
    /* b1 has a projection Conv, b2 does not: different patterns */
    assert_int_not_equal(rs->regions[b1].pattern, rs->regions[b2].pattern);
    qp_regions_free(rs);
    qp_model_free(m);
}

static void test_vit_like(void **state) {
    (void)state;
    struct qp_model *m = load("vit_like.onnx");
    struct qp_regions *rs = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_regions_build(m->graph, &rs, &err), QP_OK);
    print_regions(rs);
    check_cover(m, rs);
    /* the residual attention block: pos_add fans out to ln1 and residual1, which its branches
     * reach within 10 steps (ln1, v's chain, attn_pv, the output projection), so LayerNorm,
     * q/k/v, scores, softmax and the projection form one converged region up to residual1 */
    int attn = rs->region_of[qp_graph_find_node(m->graph, "attn_pv")];
    assert_int_equal(rs->region_of[qp_graph_find_node(m->graph, "residual1")], attn);
    assert_int_equal(rs->region_of[qp_graph_find_node(m->graph, "mm_o")], attn);
    assert_int_equal(rs->regions[attn].kind, QP_REGION_CONVERGED);
    assert_int_equal(rs->region_of[qp_graph_find_node(m->graph, "mm_k")], attn);
    assert_int_equal(rs->region_of[qp_graph_find_node(m->graph, "attn_softmax")], attn);
    assert_int_equal(rs->region_of[qp_graph_find_node(m->graph, "ln_ln1")], attn);
    qp_regions_free(rs);
    qp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resnet_like),
        cmocka_unit_test(test_vit_like),
        cmocka_unit_test(test_rename),
        cmocka_unit_test(test_distance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
