/* The sensitivity driver (pipeline/sensitivity.h) and the public API (qplace/sensitivity.h) on
 * the small sensitivity model: the same ranking, scores, exclusions and placement both ways, and
 * the refusals of the public API. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "calib/data.h"
#include "calib/provider_npz.h"
#include "ir/ir.h"
#include "pipeline/sensitivity.h"
#include "qplace/model.h"
#include "qplace/sensitivity.h"

static const char *path(const char *dir, const char *name) {
    static char buf[16][1024];
    static int k;
    k = (k + 1) % 16;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}
#define DATA(name) path(QP_TEST_DATA_DIR "/../unit/sensitivity/data", name)
#define OUT(name)  path(QP_TEST_BINARY_DIR, name)

/* The driver on sens_small by node, picking with `mode` (budget: max_drift). */
static struct qp_sensitivity_report *run_driver(enum qp_sensitivity_pick_mode mode, double value,
                                                const char *tag) {
    struct qp_sensitivity_run_options o;
    qp_sensitivity_run_options_default(&o);
    char json[64], pl[64];
    snprintf(json, sizeof json, "pipeline_sens_%s.json", tag);
    snprintf(pl, sizeof pl, "pipeline_sens_%s.placement.json", tag);
    o.onnx_path = DATA("sens_small.onnx");
    o.calibration_data_path = DATA("sens_small.calib.npz");
    o.calibration_shapes = "x:1x3x8x8";
    o.placement_in = DATA("sens_small.placement.json");
    o.sens.granularity = QP_SENS_NODE;
    o.sens.n_threads = 1;
    o.picking = 1;
    if (mode == QP_SENSITIVITY_BUDGET)
        o.max_output_drift = value;
    else if (mode == QP_SENSITIVITY_THRESHOLD) {
        o.pick.threshold_mode = 1;
        o.pick.threshold = value;
    } else
        o.pick.coverage = value;
    o.output_json = OUT(json);
    o.placement_out = OUT(pl);
    struct qp_error err = {0};
    struct qp_sensitivity_report *r = NULL;
    if (qp_sensitivity_run(&o, &r, &err) != QP_OK) fail_msg("%s", err.msg);
    return r;
}

struct api {
    struct qp_model *m;
    struct qp_placement *pl;
    struct qp_provider *prov;
    struct qp_sensitivity *s;
};

static void api_score(struct api *a, enum qp_sensitivity_granularity g) {
    struct qp_error err = {0};
    memset(a, 0, sizeof *a);
    assert_int_equal(qp_model_load_file(DATA("sens_small.onnx"), NULL, &a->m, &err), QP_OK);
    assert_int_equal(qp_placement_load_file(DATA("sens_small.placement.json"), &a->pl, &err),
                     QP_OK);
    struct qp_calib_shapes shapes = {0};
    assert_int_equal(qp_calib_shapes_parse("x:1x3x8x8", &shapes, &err), QP_OK);
    struct qp_npz_provider_input in[4];
    size_t n = 0;
    assert_int_equal(qp_provider_graph_inputs(a->m->graph, &shapes, "test", in, 4, &n, &err),
                     QP_OK);
    qp_calib_shapes_release(&shapes);
    struct qp_data_options d;
    qp_data_options_default(&d);
    assert_int_equal(qp_provider_open(DATA("sens_small.calib.npz"), &d, in, n, &a->prov, &err),
                     QP_OK);
    struct qp_sensitivity_options o = {.granularity = g, .n_threads = 1};
    if (qp_sensitivity_score(a->m, a->pl, a->prov, NULL, &o, &a->s, &err) != QP_OK)
        fail_msg("%s", err.msg);
}

static void api_free(struct api *a) {
    qp_sensitivity_free(a->s);
    qp_provider_free(a->prov);
    qp_placement_free(a->pl);
    qp_model_free(a->m);
}

/* Ranking and scores of the public API equal the driver's, bit for bit. */
static void same_ranking(const struct api *a, const struct qp_sensitivity_report *r) {
    struct qp_sensitivity_summary sum;
    qp_sensitivity_get_summary(a->s, &sum);
    assert_int_equal(sum.n_targets, r->result->n_targets);
    assert_int_equal(sum.n_scored, r->ranking.n_scored);
    assert_true(sum.n_scored >= 3);
    assert_int_equal(sum.n_calibration_samples, r->n_calib_samples);
    assert_true(sum.total_score == r->ranking.total_mass);
    for (size_t i = 0; i < r->ranking.n_scored; i++) {
        struct qp_sensitivity_target t;
        assert_int_equal(qp_sensitivity_target(a->s, i, &t), 1);
        const struct qp_sens_target *want = &r->result->targets[r->ranking.order[i]];
        assert_string_equal(t.name, want->name);
        assert_true(t.score == want->score);
        assert_int_equal(t.rank, i + 1);
        assert_int_equal(t.state, QP_SENSITIVITY_SCORED);
        assert_null(t.error);
        assert_string_equal(qp_sensitivity_target_node(a->s, i, 0), want->nodes[0]);
        assert_null(qp_sensitivity_target_node(a->s, i, t.n_nodes));
        if (i) {
            struct qp_sensitivity_target prev;
            qp_sensitivity_target(a->s, i - 1, &prev);
            assert_true(prev.score >= t.score);
        }
    }
    struct qp_sensitivity_target t;
    assert_int_equal(qp_sensitivity_target(a->s, sum.n_targets, &t), 0);
}

/* Exclusions and the placement minus them equal the driver's. */
static void same_exclusions(const struct api *a, const struct qp_sensitivity_report *r,
                            const struct qp_sensitivity_pick_options *po, const char *pl_file) {
    struct qp_error err = {0};
    struct qp_sensitivity_exclusions *x = NULL;
    if (qp_sensitivity_pick(a->s, po, &x, &err) != QP_OK) fail_msg("%s", err.msg);
    struct qp_sensitivity_pick_summary ps;
    qp_sensitivity_exclusions_get_summary(x, &ps);
    assert_int_equal(ps.n_excluded, r->ex.n_excluded);
    assert_true(ps.excluded_score == r->ex.excluded_mass);
    for (size_t i = 0; i < ps.n_excluded; i++)
        assert_string_equal(qp_sensitivity_excluded(x, i),
                            r->result->targets[r->ex.excluded[i]].name);
    assert_null(qp_sensitivity_excluded(x, ps.n_excluded));
    if (po->mode == QP_SENSITIVITY_BUDGET) {
        assert_int_equal(ps.n_budget_groups, r->ex.n_budget_groups);
        assert_int_equal(ps.budget_met, r->ex.budget_met);
        assert_true(ps.drift_quantized == r->ex.steps[0].drift);
    }
    struct qp_placement *got = NULL, *want = NULL;
    assert_int_equal(qp_sensitivity_exclusions_placement(x, &got, &err), QP_OK);
    assert_int_equal(qp_placement_load_file(pl_file, &want, &err), QP_OK);
    assert_int_equal(qp_placement_equal(got, want), 1);
    size_t n_got = qp_placement_n_edges(got) + qp_placement_n_weights(got);
    size_t n_all = qp_placement_n_edges(a->pl) + qp_placement_n_weights(a->pl);
    if (ps.n_excluded)
        assert_true(n_got < n_all);
    else
        assert_int_equal(n_got, n_all);
    qp_placement_free(got);
    qp_placement_free(want);
    qp_sensitivity_exclusions_free(x);
}

static void test_threshold_matches_driver(void **state) {
    (void)state;
    struct qp_sensitivity_report *r = run_driver(QP_SENSITIVITY_THRESHOLD, 1e-6, "thr");
    assert_int_equal(r->ex.n_excluded, 4);
    struct api a;
    api_score(&a, QP_SENSITIVITY_NODE);
    same_ranking(&a, r);
    struct qp_sensitivity_pick_options po;
    qp_sensitivity_pick_options_default(&po);
    po.mode = QP_SENSITIVITY_THRESHOLD;
    po.threshold = 1e-6;
    same_exclusions(&a, r, &po, OUT("pipeline_sens_thr.placement.json"));
    api_free(&a);
    qp_sensitivity_report_free(r);
}

static void test_budget_matches_driver(void **state) {
    (void)state;
    struct qp_sensitivity_report *r = run_driver(QP_SENSITIVITY_BUDGET, 0, "budget");
    assert_true(r->ex.budget);
    struct api a;
    api_score(&a, QP_SENSITIVITY_NODE);
    struct qp_sensitivity_pick_options po;
    qp_sensitivity_pick_options_default(&po);
    po.mode = QP_SENSITIVITY_BUDGET;
    po.max_output_drift = 0;
    same_exclusions(&a, r, &po, OUT("pipeline_sens_budget.placement.json"));
    api_free(&a);
    qp_sensitivity_report_free(r);
}

static void test_refusals(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct api a;
    api_score(&a, QP_SENSITIVITY_OP_TYPE);
    struct qp_sensitivity *s = NULL;
    struct qp_sensitivity_options bad = {.metric = QP_SENSITIVITY_METRIC_COUNT};
    assert_int_equal(qp_sensitivity_score(a.m, a.pl, a.prov, NULL, &bad, &s, &err), QP_ERR_USAGE);
    assert_null(s);
    assert_int_equal(qp_sensitivity_score(NULL, a.pl, a.prov, NULL, NULL, &s, &err), QP_ERR_USAGE);
    struct qp_sensitivity_pick_options po;
    qp_sensitivity_pick_options_default(&po);
    struct qp_sensitivity_exclusions *x = NULL;
    po.coverage = 2;
    assert_int_equal(qp_sensitivity_pick(a.s, &po, &x, &err), QP_ERR_USAGE);
    qp_sensitivity_pick_options_default(&po);
    po.mode = QP_SENSITIVITY_BUDGET;
    po.max_output_drift = -1;
    assert_int_equal(qp_sensitivity_pick(a.s, &po, &x, &err), QP_ERR_USAGE);
    qp_sensitivity_pick_options_default(&po);
    po.blocks_path = OUT("no_such_blocks.json");
    assert_int_not_equal(qp_sensitivity_pick(a.s, &po, &x, &err), QP_OK);
    assert_null(x);
    api_free(&a);
}

/* Picking on plain scores: ModelOpt's worked examples, the analysis' own pick on its scores, the
 * blocks given as text, and the refusals. */
static void pick_plain(const char *const *names, const double *scores, size_t n,
                       const struct qp_sensitivity_pick_options *o, const char *blocks,
                       size_t want_n, const size_t *want) {
    struct qp_error err = {0};
    struct qp_sensitivity_score_pick *p = NULL;
    if (qp_sensitivity_pick_scores(names, scores, n, o, blocks, blocks ? strlen(blocks) : 0, &p,
                                   &err) != QP_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(p->n_excluded, want_n);
    for (size_t i = 0; i < want_n; i++)
        assert_int_equal(p->excluded[i], want[i]);
    qp_sensitivity_score_pick_free(p);
}

static void test_pick_plain_scores(void **state) {
    (void)state;
    const char *names[] = {"a", "b", "c", "d"};
    const double scores[] = {3, 4, 2, 1}; /* ranked b, a, c, d */
    struct qp_sensitivity_pick_options po;
    qp_sensitivity_pick_options_default(&po);
    po.coverage = 0.5;
    pick_plain(names, scores, 4, &po, NULL, 1, (const size_t[]){1});
    po.coverage = 0.8;
    pick_plain(names, scores, 4, &po, NULL, 2, (const size_t[]){1, 0});
    po.coverage = 0;
    pick_plain(names, scores, 4, &po, NULL, 0, NULL);
    po.mode = QP_SENSITIVITY_THRESHOLD;
    po.threshold = 1.5;
    pick_plain(names, scores, 4, &po, NULL, 3, (const size_t[]){1, 0, 2});
    /* Blocks as text: a and d form one group (sum 4; it ties with b and, met first, ranks
     * before it), picked whole. */
    qp_sensitivity_pick_options_default(&po);
    po.coverage = 0.5;
    pick_plain(names, scores, 4, &po, "{\"ad\": [\"a$\", \"d\"]}", 2, (const size_t[]){0, 3});
    po.coverage = 1;
    pick_plain(names, scores, 4, &po, "{\"ad\": [\"a$\", \"d\"]}", 4, (const size_t[]){0, 3, 1, 2});
    struct qp_error err = {0};
    struct qp_sensitivity_score_pick *p = NULL;
    po.coverage = 0.5;
    assert_int_equal(qp_sensitivity_pick_scores(names, scores, 4, &po, NULL, 0, &p, &err), QP_OK);
    assert_true(p->total_score == 10 && p->excluded_score == 4 && p->coverage_pct == 40);
    qp_sensitivity_score_pick_free(p);
    p = NULL;
    /* Refusals: nothing is handed out. */
    const char *twice[] = {"a", "b", "a"};
    assert_int_equal(qp_sensitivity_pick_scores(twice, scores, 3, &po, NULL, 0, &p, &err),
                     QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "'a' is given twice"));
    const double nan_scores[] = {1, 0.0 / 0.0};
    assert_int_equal(qp_sensitivity_pick_scores(names, nan_scores, 2, &po, NULL, 0, &p, &err),
                     QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "'b' is not finite"));
    assert_int_equal(qp_sensitivity_pick_scores(names, scores, 4, &po, "[1]", 3, &p, &err),
                     QP_ERR_BAD_INPUT);
    po.mode = QP_SENSITIVITY_BUDGET;
    assert_int_equal(qp_sensitivity_pick_scores(names, scores, 4, &po, NULL, 0, &p, &err),
                     QP_ERR_USAGE);
    assert_null(p);
}

/* The analysis' scores picked as plain scores give the analysis' own exclusions. */
static void test_pick_plain_matches_analysis(void **state) {
    (void)state;
    struct api a;
    api_score(&a, QP_SENSITIVITY_NODE);
    size_t n = qp_sensitivity_n_targets(a.s), ns = 0;
    const char **names = calloc(n, sizeof *names);
    double *scores = calloc(n, sizeof *scores);
    assert_non_null(names);
    assert_non_null(scores);
    for (size_t i = 0; i < n; i++) {
        struct qp_sensitivity_target t;
        qp_sensitivity_target(a.s, n - 1 - i, &t); /* lowest first: the picker must rank */
        if (t.state != QP_SENSITIVITY_SCORED) continue;
        names[ns] = t.name;
        scores[ns++] = t.score;
    }
    const double coverages[] = {0.3, 0.6, 0.9, 1.0};
    for (size_t c = 0; c < 4; c++) {
        struct qp_sensitivity_pick_options po;
        qp_sensitivity_pick_options_default(&po);
        po.coverage = coverages[c];
        struct qp_error err = {0};
        struct qp_sensitivity_exclusions *x = NULL;
        struct qp_sensitivity_score_pick *p = NULL;
        assert_int_equal(qp_sensitivity_pick(a.s, &po, &x, &err), QP_OK);
        assert_int_equal(qp_sensitivity_pick_scores(names, scores, ns, &po, NULL, 0, &p, &err),
                         QP_OK);
        struct qp_sensitivity_pick_summary ps;
        qp_sensitivity_exclusions_get_summary(x, &ps);
        assert_int_equal(p->n_excluded, ps.n_excluded);
        for (size_t i = 0; i < p->n_excluded; i++)
            assert_string_equal(names[p->excluded[i]], qp_sensitivity_excluded(x, i));
        assert_true(p->coverage_pct == ps.coverage_pct || ns > 1);
        qp_sensitivity_score_pick_free(p);
        qp_sensitivity_exclusions_free(x);
    }
    free(names);
    free(scores);
    api_free(&a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threshold_matches_driver),
        cmocka_unit_test(test_budget_matches_driver),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_pick_plain_scores),
        cmocka_unit_test(test_pick_plain_matches_analysis),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
