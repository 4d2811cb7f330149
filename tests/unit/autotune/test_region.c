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
#include "autotune/scheme.h"
#include "ir/ir.h"
#include "placement/placement.h"
#include "quant/policy_trt.h"
#include "qplace/model.h"

#define MODELS QP_TEST_DATA_DIR "/../integration/quantize_models"

static struct qp_model *load(const char *name) {
    char path[512];
    /* the deep models are this test's own (data/gen_region_models.py) */
    snprintf(path, sizeof path, "%s/%s",
             strstr(name, "deep") ? QP_TEST_DATA_DIR "/../unit/autotune/data" : MODELS, name);
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

static int pattern_of(const struct qp_regions *rs, const char *node) {
    int n = qp_graph_find_node(rs->graph, node);
    assert_true(n >= 0);
    return rs->regions[rs->region_of[n]].pattern;
}

/* Repeated residual blocks share one pattern: b1..b3 (b4's tail takes the pooling instead of the
 * next block's fan-out, b0 has a projection). */
static void test_resnet_deep(void **state) {
    (void)state;
    struct qp_model *m = load("resnet_deep.onnx");
    struct qp_regions *rs = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_regions_build(m->graph, &rs, &err), QP_OK);
    print_regions(rs);
    check_cover(m, rs);
    int p = pattern_of(rs, "add_b1");
    assert_int_equal(pattern_of(rs, "conv_b2_a"), p);
    assert_int_equal(pattern_of(rs, "relu_b3"), p);
    assert_int_not_equal(pattern_of(rs, "add_b0"), p);
    assert_int_not_equal(pattern_of(rs, "add_b4"), p);
    assert_int_equal(rs->patterns[p].n_instances, 3);
    assert_int_equal(rs->n_regions, 7);
    assert_int_equal(rs->n_patterns, 5);
    qp_regions_free(rs);
    qp_model_free(m);
}

/* Repeated transformer layers share their patterns: the attention block of l0..l3 and the MLP of
 * l0..l2 (l3's MLP takes the pooling into its tail). */
static void test_vit_deep(void **state) {
    (void)state;
    struct qp_model *m = load("vit_deep.onnx");
    struct qp_regions *rs = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_regions_build(m->graph, &rs, &err), QP_OK);
    print_regions(rs);
    check_cover(m, rs);
    int attn = pattern_of(rs, "l1_softmax");
    assert_int_equal(pattern_of(rs, "l0_softmax"), attn);
    assert_int_equal(pattern_of(rs, "l2_softmax"), attn);
    assert_int_equal(pattern_of(rs, "l3_softmax"), attn);
    int mlp = pattern_of(rs, "l0_gelu");
    assert_int_equal(pattern_of(rs, "l1_gelu"), mlp);
    assert_int_equal(pattern_of(rs, "l2_gelu"), mlp);
    assert_true(rs->n_patterns * 2 <= rs->n_regions);
    qp_regions_free(rs);
    qp_model_free(m);
}

static struct qp_placement *trt_placement(struct qp_model *m) {
    struct qp_error err = {0};
    struct qp_placement *p = qp_placement_create();
    struct qp_policy_options o = {.mode = QP_QUANT_INT8};
    assert_int_equal(qp_policy_trt(m->graph, &o, p, NULL, &err), QP_OK);
    return p;
}

/* Same seed, same schemes; another seed, others; no duplicates; the seed scheme first. */
static void test_schemes(void **state) {
    (void)state;
    struct qp_model *m = load("resnet_deep.onnx");
    struct qp_regions *rs = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_regions_build(m->graph, &rs, &err), QP_OK);
    struct qp_placement *trt = trt_placement(m);
    int r = rs->region_of[qp_graph_find_node(m->graph, "add_b2")];
    size_t pat = (size_t)rs->regions[r].pattern, np = rs->patterns[pat].n_points;
    uint64_t *seed = qp_scheme_alloc(np);
    qp_scheme_from_placement(rs, (size_t)r, trt, seed);
    struct qp_scheme_list a = {0}, b = {0}, c = {0};
    assert_int_equal(qp_schemes_generate(rs, pat, seed, 1, 30, &a, &err), QP_OK);
    assert_int_equal(qp_schemes_generate(rs, pat, seed, 1, 30, &b, &err), QP_OK);
    assert_int_equal(qp_schemes_generate(rs, pat, seed, 2, 30, &c, &err), QP_OK);
    assert_int_equal(a.n, 30);
    assert_int_equal(b.n, 30);
    assert_memory_equal(a.bits, b.bits, a.n * a.words * sizeof *a.bits);
    assert_true(memcmp(a.bits, c.bits, a.n * a.words * sizeof *a.bits) != 0);
    assert_memory_equal(qp_scheme_list_at(&a, 0), seed, a.words * sizeof *seed);
    for (size_t i = 0; i < a.n; i++)
        for (size_t j = i + 1; j < a.n; j++)
            assert_true(memcmp(qp_scheme_list_at(&a, i), qp_scheme_list_at(&a, j),
                               a.words * sizeof *a.bits) != 0);
    /* the seed is the trt choice: not empty, not all points */
    size_t on = 0;
    for (size_t k = 0; k < np; k++)
        on += (size_t)qp_scheme_get(seed, k);
    assert_true(on > 0 && on < np);
    /* a pattern of 2 points has at most 4 schemes */
    size_t gemm = (size_t)rs->regions[rs->region_of[qp_graph_find_node(m->graph, "fc")]].pattern;
    struct qp_scheme_list d = {0};
    assert_int_equal(rs->patterns[gemm].n_points, 2);
    assert_int_equal(qp_schemes_generate(rs, gemm, NULL, 1, 30, &d, &err), QP_OK);
    assert_int_equal(d.n, 4);
    assert_int_equal(qp_schemes_generate(rs, rs->n_patterns, NULL, 1, 30, &d, &err), QP_ERR_USAGE);
    qp_scheme_list_free(&a);
    qp_scheme_list_free(&b);
    qp_scheme_list_free(&c);
    qp_scheme_list_free(&d);
    free(seed);
    qp_placement_free(trt);
    qp_regions_free(rs);
    qp_model_free(m);
}

/* Schemes of the trt placement per region and per pattern (first instance). */
static void trt_choices(const struct qp_regions *rs, const struct qp_placement *trt,
                        uint64_t **by_region, uint64_t **by_pattern) {
    for (size_t r = 0; r < rs->n_regions; r++) {
        size_t pat = (size_t)rs->regions[r].pattern;
        by_region[r] = qp_scheme_alloc(rs->regions[r].n_points);
        assert_non_null(by_region[r]);
        qp_scheme_from_placement(rs, r, trt, by_region[r]);
        if (by_pattern[pat]) continue;
        by_pattern[pat] = qp_scheme_alloc(rs->patterns[pat].n_points);
        assert_non_null(by_pattern[pat]);
        qp_scheme_from_placement(rs, r, trt, by_pattern[pat]);
    }
}

/* Regions whose trt scheme differs from their pattern's first instance's. */
static size_t n_disagreeing(const struct qp_regions *rs, uint64_t **by_region,
                            uint64_t **by_pattern) {
    size_t k = 0;
    for (size_t r = 0; r < rs->n_regions; r++) {
        size_t words = QP_SCHEME_WORDS(rs->regions[r].n_points);
        k += memcmp(by_region[r], by_pattern[rs->regions[r].pattern], words * 8) != 0;
    }
    return k;
}

/* The trt placement's own schemes, applied on an empty base, give the trt placement back: per
 * region always, per pattern where the trt policy treats every instance alike. On vit_deep it
 * does not: it quantizes the inputs of the first layer's two LayerNorms and of its second residual
 * Add's first input, and not the later layers' (a decision that depends on more than the region),
 * so 3 attention and 2 MLP regions disagree with their pattern's first instance. All-off on the
 * trt base leaves nothing. */
static void test_apply_trt(void **state) {
    (void)state;
    const char *files[] = {"resnet_like.onnx", "vit_like.onnx", "resnet_deep.onnx",
                           "vit_deep.onnx"};
    const size_t disagree[] = {0, 0, 0, 5};
    for (int f = 0; f < 4; f++) {
        struct qp_model *m = load(files[f]);
        struct qp_regions *rs = NULL;
        struct qp_error err = {0};
        assert_int_equal(qp_regions_build(m->graph, &rs, &err), QP_OK);
        struct qp_placement *trt = trt_placement(m), *empty = qp_placement_create(), *p = NULL;
        uint64_t **by_region = calloc(rs->n_regions, sizeof *by_region);
        uint64_t **by_pattern = calloc(rs->n_patterns, sizeof *by_pattern);
        uint64_t *off = qp_scheme_alloc(256);
        assert_true(by_region && by_pattern && off);
        trt_choices(rs, trt, by_region, by_pattern);
        assert_int_equal(
            qp_schemes_apply_regions(rs, empty, (const uint64_t *const *)by_region, &p, &err),
            QP_OK);
        if (!qp_placement_equal(p, trt)) fail_msg("%s: per-region trt schemes differ", files[f]);
        qp_placement_free(p);
        assert_int_equal(n_disagreeing(rs, by_region, by_pattern), disagree[f]);
        assert_int_equal(qp_schemes_apply(rs, empty, (const uint64_t *const *)by_pattern, &p, &err),
                         QP_OK);
        assert_int_equal(qp_placement_equal(p, trt), disagree[f] == 0);
        qp_placement_free(p);
        const uint64_t **offs = calloc(rs->n_patterns, sizeof *offs);
        assert_non_null(offs);
        for (size_t k = 0; k < rs->n_patterns; k++)
            offs[k] = off;
        assert_int_equal(qp_schemes_apply(rs, trt, offs, &p, &err), QP_OK);
        assert_int_equal(qp_placement_n_edges(p) + qp_placement_n_weights(p), 0);
        qp_placement_free(p);
        for (size_t k = 0; k < rs->n_regions; k++)
            free(by_region[k]);
        for (size_t k = 0; k < rs->n_patterns; k++)
            free(by_pattern[k]);
        free(by_region);
        free(by_pattern);
        free(offs);
        free(off);
        qp_placement_free(trt);
        qp_placement_free(empty);
        qp_regions_free(rs);
        qp_model_free(m);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resnet_like), cmocka_unit_test(test_vit_like),
        cmocka_unit_test(test_rename),      cmocka_unit_test(test_resnet_deep),
        cmocka_unit_test(test_vit_deep),    cmocka_unit_test(test_schemes),
        cmocka_unit_test(test_apply_trt),   cmocka_unit_test(test_distance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
