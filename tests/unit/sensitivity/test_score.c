/* Scoring on the small model of gen_sens_model.py (two Convs, a MatMul, a LayerNormalization, a
 * Softmax and a Sigmoid; six deterministic samples): LayerNormalization ranks first under every
 * metric at both granularities, activation probes score above 0, incremental equals naive (also
 * with a tiny cache budget), unprobed and failed targets are listed, the accuracy budget. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "calib/provider_npz.h"
#include "qplace/model.h"
#include "sensitivity/sensitivity.h"

static char data_dir[1024];

static const char *path(const char *name) {
    static char buf[4][1200];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", data_dir, name);
    return buf[k];
}

struct fixture {
    struct qp_model *m;
    struct qp_placement *pl;
    struct qp_provider *prov;
    struct qp_ranges *ranges;
};

static void fixture_load(struct fixture *f, const char *placement) {
    struct qp_error err = {0};
    memset(f, 0, sizeof *f);
    assert_int_equal(qp_model_load_file(path("sens_small.onnx"), NULL, &f->m, &err), QP_OK);
    assert_int_equal(qp_graph_toposort(f->m->graph, &err), QP_OK);
    assert_int_equal(qp_placement_load_file(path(placement), &f->pl, &err), QP_OK);
    assert_int_equal(qp_placement_validate(f->pl, f->m->graph, &err), QP_OK);
    struct qp_npz_provider_input in = {.name = "x",
                                       .dtype = QP_DTYPE_FLOAT,
                                       .rank = 4,
                                       .model_dims = {-1, 3, 8, 8},
                                       .batch_dims = {1, 3, 8, 8}};
    assert_int_equal(
        qp_provider_npz_create(path("sens_small.calib.npz"), &in, 1, 0, &f->prov, &err), QP_OK);
    uint64_t ns = 0;
    if (qp_sens_calibrate(f->m, f->pl, f->prov, QP_CALIB_MAX, 0, QP_DTYPE_INT8, 1, &f->ranges, &ns,
                          &err) != QP_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(ns, 6);
}

static void fixture_free(struct fixture *f) {
    qp_ranges_free(f->ranges);
    qp_provider_free(f->prov);
    qp_placement_free(f->pl);
    qp_model_free(f->m);
}

/* One engine thread: results do not depend on it, and a busy CI machine runs faster so. */
static void opts_default(struct qp_sens_options *o) {
    qp_sens_options_default(o);
    o->n_threads = 1;
}

static struct qp_sens_result *score(struct fixture *f, const struct qp_sens_options *o) {
    struct qp_error err = {0};
    struct qp_sens_result *r = NULL;
    if (qp_sens_score(f->m, f->pl, f->prov, f->ranges, o, &r, &err) != QP_OK)
        fail_msg("%s", err.msg);
    return r;
}

static const struct qp_sens_target *find(const struct qp_sens_result *r, const char *name) {
    for (size_t i = 0; i < r->n_targets; i++)
        if (strcmp(r->targets[i].name, name) == 0) return &r->targets[i];
    fail_msg("no target %s", name);
    return NULL;
}

static const struct qp_sens_target *highest(const struct qp_sens_result *r) {
    const struct qp_sens_target *best = NULL;
    for (size_t i = 0; i < r->n_targets; i++) {
        const struct qp_sens_target *t = &r->targets[i];
        assert_int_equal(t->state, QP_SENS_SCORED);
        if (!best || t->score > best->score) best = t;
    }
    return best;
}

static void test_layernorm_highest(void **state) {
    (void)state;
    struct fixture f;
    fixture_load(&f, "sens_small.placement.json");
    for (int m = 0; m < QP_SENS_METRIC_COUNT; m++)
        for (int g = 0; g < QP_SENS_GRANULARITY_COUNT; g++) {
            struct qp_sens_options o;
            opts_default(&o);
            o.metric = m;
            o.granularity = g;
            o.n_threads = 1;
            struct qp_sens_result *r = score(&f, &o);
            assert_int_equal(r->n_samples, 6);
            assert_int_equal(r->n_batches, 6);
            assert_int_equal(r->n_float_outputs, 2);
            const struct qp_sens_target *b = highest(r);
            if (strcmp(b->name, g == QP_SENS_NODE ? "ln" : "LayerNormalization") != 0)
                fail_msg("metric %s granularity %s: highest is %s", qp_sens_metric_name(m),
                         qp_sens_granularity_name(g), b->name);
            for (size_t i = 0; i < r->n_targets; i++)
                assert_true(r->targets[i].score >= 0);
            if (g == QP_SENS_NODE) {
                assert_int_equal(r->n_targets, 6);                /* conv1 sig1 conv2 mm ln sm */
                assert_string_equal(r->targets[0].name, "conv1"); /* topological order */
                assert_string_equal(r->targets[5].name, "sm");
            } else {
                assert_int_equal(r->n_targets, 5); /* sorted op types */
                assert_string_equal(r->targets[0].name, "Conv");
                assert_string_equal(r->targets[4].name, "Softmax");
            }
            qp_sens_result_free(r);
        }
    fixture_free(&f);
}

static void test_activation_probes(void **state) {
    (void)state;
    struct fixture f;
    fixture_load(&f, "sens_small.placement.json");
    struct qp_sens_options o;
    opts_default(&o);
    o.granularity = QP_SENS_NODE;
    for (int m = 0; m < QP_SENS_METRIC_COUNT; m++) {
        o.metric = m;
        struct qp_sens_result *r = score(&f, &o);
        assert_true(find(r, "sm")->score > 0);
        assert_true(find(r, "sig1")->score > 0);
        assert_int_equal(find(r, "sm")->n_edges, 1);
        assert_int_equal(find(r, "sm")->n_weights, 0);
        qp_sens_result_free(r);
    }
    fixture_free(&f);
}

/* An op-type probe is the union of its nodes' probes: same entries. */
static void test_op_type_is_union(void **state) {
    (void)state;
    struct fixture f;
    fixture_load(&f, "sens_small.placement.json");
    struct qp_sens_options o;
    opts_default(&o);
    struct qp_sens_result *ro = score(&f, &o);
    o.granularity = QP_SENS_NODE;
    struct qp_sens_result *rn = score(&f, &o);
    const struct qp_sens_target *conv = find(ro, "Conv"), *c1 = find(rn, "conv1"),
                                *c2 = find(rn, "conv2");
    assert_int_equal(conv->n_edges + conv->n_weights, 4);
    assert_int_equal(conv->n_nodes, 2);
    assert_string_equal(conv->nodes[0], "conv1");
    assert_string_equal(conv->nodes[1], "conv2");
    size_t k = 0;
    for (size_t i = 0; i < 2; i++) {
        const struct qp_sens_target *n = i ? c2 : c1;
        for (size_t j = 0; j < n->n_edges + n->n_weights; j++) {
            int hit = 0;
            for (size_t q = 0; q < 4; q++)
                hit |= conv->entries[q] == n->entries[j];
            assert_true(hit);
            k++;
        }
    }
    assert_int_equal(k, 4);
    /* A one-node op type scores as that node. */
    assert_true(fabs(find(ro, "MatMul")->score - find(rn, "mm")->score) <=
                1e-12 * find(rn, "mm")->score);
    qp_sens_result_free(ro);
    qp_sens_result_free(rn);
    fixture_free(&f);
}

static void check_same(const struct qp_sens_result *a, const struct qp_sens_result *b) {
    assert_int_equal(a->n_targets, b->n_targets);
    for (size_t i = 0; i < a->n_targets; i++) {
        assert_string_equal(a->targets[i].name, b->targets[i].name);
        assert_int_equal(a->targets[i].state, b->targets[i].state);
        double x = a->targets[i].score, y = b->targets[i].score;
        if (!(fabs(x - y) <= 1e-9 * fabs(y)))
            fail_msg("%s: %.17g vs %.17g", a->targets[i].name, x, y);
    }
}

static void test_incremental_equals_naive(void **state) {
    (void)state;
    struct fixture f;
    fixture_load(&f, "sens_small.placement.json");
    for (int p = 0; p < QP_SENS_PROBE_COUNT; p++)
        for (int g = 0; g < QP_SENS_GRANULARITY_COUNT; g++) {
            struct qp_sens_options o;
            opts_default(&o);
            o.granularity = g;
            o.probe = p;
            o.metric = QP_SENS_MSE;
            struct qp_sens_result *inc = score(&f, &o);
            o.cache_bytes = 2048; /* a budget too small for most tensors: recompute ancestors */
            struct qp_sens_result *tiny = score(&f, &o);
            o.incremental = 0;
            struct qp_sens_result *naive = score(&f, &o);
            check_same(inc, naive);
            check_same(tiny, naive);
            if (p == QP_SENS_QUANTIZE_ONE) {
                assert_true(inc->nodes_executed < naive->nodes_executed);
                for (size_t i = 0; i < inc->n_targets; i++)
                    assert_true(inc->targets[i].score > 0);
            }
            assert_int_equal(naive->nodes_executed, naive->nodes_full_pass * 6 * naive->n_targets);
            qp_sens_result_free(inc);
            qp_sens_result_free(tiny);
            qp_sens_result_free(naive);
        }
    fixture_free(&f);
}

/* Weight overlays take the writer's scales (qp_qdq_weight_scales): with weight_clip_mse (the
 * default, as `qplace quantize`'s) each channel's least-error clipping, without it the absmax.
 * Targets holding weights score differently between the two, targets without weights do not. */
static void test_weight_clipping(void **state) {
    (void)state;
    struct fixture f;
    fixture_load(&f, "sens_small.placement.json");
    struct qp_sens_options o;
    opts_default(&o);
    assert_int_equal(o.weight_clip_mse, 1);
    o.granularity = QP_SENS_NODE;
    o.metric = QP_SENS_MSE;
    struct qp_sens_result *clip = score(&f, &o);
    o.weight_clip_mse = 0;
    struct qp_sens_result *plain = score(&f, &o);
    assert_int_equal(clip->n_targets, plain->n_targets);
    size_t n_weighted = 0, n_differ = 0;
    for (size_t i = 0; i < clip->n_targets; i++) {
        const struct qp_sens_target *a = &clip->targets[i], *b = find(plain, a->name);
        assert_int_equal(a->state, QP_SENS_SCORED);
        if (!a->n_weights) {
            assert_memory_equal(&a->score, &b->score, sizeof a->score);
            continue;
        }
        n_weighted++;
        n_differ += a->score != b->score;
    }
    assert_true(n_weighted >= 2);
    assert_int_equal(n_differ, n_weighted);
    qp_sens_result_free(clip);
    qp_sens_result_free(plain);
    fixture_free(&f);
}

/* Bit for bit the same results: states, errors, scores, work done. */
static void check_identical(const struct qp_sens_result *a, const struct qp_sens_result *b) {
    assert_int_equal(a->n_targets, b->n_targets);
    for (size_t i = 0; i < a->n_targets; i++) {
        const struct qp_sens_target *x = &a->targets[i], *y = &b->targets[i];
        assert_string_equal(x->name, y->name);
        assert_int_equal(x->state, y->state);
        assert_memory_equal(&x->score, &y->score, sizeof x->score);
        if (x->error || y->error) {
            assert_non_null(x->error);
            assert_non_null(y->error);
            assert_string_equal(x->error, y->error);
        }
    }
    assert_int_equal(a->nodes_executed, b->nodes_executed);
    assert_int_equal(a->n_samples, b->n_samples);
}

/* Probes side by side on several workers (sessions of their own reading worker 0's reference)
 * give one worker's results bit for bit: every probe mode, granularity, incremental or not,
 * a cache too small for most tensors, failing targets, and a plan that fails with every entry
 * (one overlay set per probe on every worker). */
static void test_workers_same_scores(void **state) {
    (void)state;
    struct fixture fx[2];
    fixture_load(&fx[0], "sens_small.placement.json");
    fixture_load(&fx[1], "sens_small.failing.placement.json");
    struct qp_error err = {0};
    struct qp_range idx = {.tensor = "idx", .lo = 0, .hi = 3, .amax = 3, .n_values = 6};
    struct fixture planfail;
    fixture_load(&planfail, "sens_small.failing.placement.json");
    assert_int_equal(qp_ranges_set(planfail.ranges, &idx, &err), QP_OK);
    for (int p = 0; p < QP_SENS_PROBE_COUNT; p++)
        for (int g = 0; g < QP_SENS_GRANULARITY_COUNT; g++)
            for (int mode = 0; mode < 3; mode++)
                for (int fi = 0; fi < 3; fi++) {
                    struct fixture *f = fi < 2 ? &fx[fi] : &planfail;
                    struct qp_sens_options o;
                    opts_default(&o);
                    o.granularity = g;
                    o.probe = p;
                    o.incremental = mode != 2;
                    if (mode == 1) o.cache_bytes = 2048;
                    struct qp_sens_result *one = score(f, &o);
                    assert_int_equal(one->n_probe_workers, 1);
                    o.n_threads = 3;
                    o.probe_workers = 3;
                    struct qp_sens_result *three = score(f, &o);
                    size_t scored = 0; /* live at the start, at least */
                    for (size_t i = 0; i < three->n_targets; i++)
                        scored += three->targets[i].state == QP_SENS_SCORED;
                    assert_true(three->n_probe_workers >= 1 && three->n_probe_workers <= 3);
                    if (scored >= 3) assert_int_equal(three->n_probe_workers, 3);
                    check_identical(one, three);
                    qp_sens_result_free(one);
                    qp_sens_result_free(three);
                }
    /* Never more workers than threads; by default one per thread (memory permitting). */
    struct qp_sens_options o;
    opts_default(&o);
    o.granularity = QP_SENS_NODE;
    o.n_threads = 2;
    o.probe_workers = 8;
    struct qp_sens_result *r = score(&fx[0], &o);
    assert_int_equal(r->n_probe_workers, 2);
    qp_sens_result_free(r);
    o.probe_workers = 0;
    r = score(&fx[0], &o);
    assert_true(r->n_probe_workers >= 1 && r->n_probe_workers <= 2);
    qp_sens_result_free(r);
    fixture_free(&fx[0]);
    fixture_free(&fx[1]);
    fixture_free(&planfail);
}

static void test_unprobed(void **state) {
    (void)state;
    struct fixture f;
    fixture_load(&f, "sens_small.placement.json");
    struct qp_sens_options o;
    opts_default(&o);
    const char *scope[] = {"Conv", "Relu", "LayerNormalization"};
    o.scope = scope;
    o.n_scope = 3;
    struct qp_sens_result *r = score(&f, &o);
    assert_int_equal(r->n_targets, 3);
    assert_int_equal(find(r, "Relu")->state, QP_SENS_UNPROBED);
    assert_non_null(strstr(find(r, "Relu")->error, "quantizes no input"));
    assert_int_equal(find(r, "Relu")->score, 0);
    assert_int_equal(find(r, "Conv")->state, QP_SENS_SCORED);
    assert_true(find(r, "LayerNormalization")->score > find(r, "Conv")->score);
    qp_sens_result_free(r);
    /* exclude_one over a placement with one target: nothing left to quantize. */
    struct qp_error err = {0};
    struct qp_placement *one = qp_placement_create();
    assert_non_null(one);
    assert_int_equal(qp_placement_add_edge(one, "a", "ln", 0, "t", &err), QP_OK);
    assert_int_equal(qp_placement_add_edge(one, "l", "sm", 0, "t", &err), QP_OK);
    assert_int_equal(qp_placement_validate(one, f.m->graph, &err), QP_OK);
    o.n_scope = 0;
    o.probe = QP_SENS_EXCLUDE_ONE;
    o.granularity = QP_SENS_NODE;
    assert_int_equal(qp_sens_score(f.m, one, f.prov, f.ranges, &o, &r, &err), QP_OK);
    assert_int_equal(r->n_targets, 2);
    assert_int_equal(r->targets[0].state, QP_SENS_SCORED);
    assert_true(r->targets[0].score > 0); /* excluding ln leaves sm quantized */
    qp_sens_result_free(r);
    qp_placement_remove(one, "sm", 0);
    assert_int_equal(qp_sens_score(f.m, one, f.prov, f.ranges, &o, &r, &err), QP_OK);
    assert_int_equal(r->n_targets, 1);
    assert_int_equal(r->targets[0].state, QP_SENS_UNPROBED);
    assert_non_null(strstr(r->targets[0].error, "leaves no quantizer"));
    qp_sens_result_free(r);
    qp_placement_free(one);
    fixture_free(&f);
}

static void test_failed(void **state) {
    (void)state;
    struct fixture good, f;
    fixture_load(&good, "sens_small.placement.json");
    fixture_load(&f, "sens_small.failing.placement.json");
    struct qp_sens_options o;
    opts_default(&o);
    o.granularity = QP_SENS_NODE;
    struct qp_sens_result *r = score(&f, &o), *rg = score(&good, &o);
    assert_int_equal(r->n_targets, 7);
    const struct qp_sens_target *t = find(r, "cast_idx");
    assert_int_equal(t->state, QP_SENS_FAILED);
    assert_non_null(strstr(t->error, "'idx'"));
    assert_non_null(strstr(t->error, "no calibrated range"));
    /* The others are scored as without the failing edge. */
    for (size_t i = 0; i < rg->n_targets; i++) {
        const struct qp_sens_target *a = find(r, rg->targets[i].name);
        assert_int_equal(a->state, QP_SENS_SCORED);
        assert_true(fabs(a->score - rg->targets[i].score) <= 1e-12 * rg->targets[i].score);
    }
    qp_sens_result_free(r);
    /* A missing range (no calibration) fails the targets reading it, not the run. */
    struct qp_error err = {0};
    struct qp_ranges *partial = qp_ranges_create();
    for (size_t i = 0; i < qp_ranges_count(good.ranges); i++) {
        const struct qp_range *x = qp_ranges_at(good.ranges, i);
        if (strcmp(x->tensor, "a") != 0) assert_int_equal(qp_ranges_set(partial, x, &err), QP_OK);
    }
    assert_int_equal(qp_sens_score(good.m, good.pl, good.prov, partial, &o, &r, &err), QP_OK);
    assert_int_equal(find(r, "ln")->state, QP_SENS_FAILED);
    assert_int_equal(find(r, "sm")->state, QP_SENS_SCORED);
    assert_true(fabs(find(r, "sm")->score - find(rg, "sm")->score) <=
                1e-12 * find(rg, "sm")->score);
    qp_sens_result_free(r);
    /* exclude_one: every probe but ln's needs a's range. */
    o.probe = QP_SENS_EXCLUDE_ONE;
    assert_int_equal(qp_sens_score(good.m, good.pl, good.prov, partial, &o, &r, &err), QP_OK);
    for (size_t i = 0; i < r->n_targets; i++)
        assert_int_equal(r->targets[i].state,
                         strcmp(r->targets[i].name, "ln") == 0 ? QP_SENS_SCORED : QP_SENS_FAILED);
    qp_sens_result_free(r);
    qp_ranges_free(partial);
    qp_sens_result_free(rg);
    fixture_free(&f);
    fixture_free(&good);
}

/* A range for the int64 edge into cast_idx gets past calibration, so the session cannot be
 * planned with every entry's overlay (fake quantization needs float): scoring falls back to one
 * overlay set per probe, cast_idx fails with the engine's message, the others score as without
 * that edge (up to the rounding of a different fusion), at both granularities' node level and
 * incrementally or not. */
static void test_plan_failure_falls_back(void **state) {
    (void)state;
    struct fixture good, f;
    fixture_load(&good, "sens_small.placement.json");
    fixture_load(&f, "sens_small.failing.placement.json");
    struct qp_error err = {0};
    struct qp_range idx = {.tensor = "idx", .lo = 0, .hi = 3, .amax = 3, .n_values = 6};
    assert_int_equal(qp_ranges_set(f.ranges, &idx, &err), QP_OK);
    for (int inc = 0; inc < 2; inc++) {
        struct qp_sens_options o;
        opts_default(&o);
        o.granularity = QP_SENS_NODE;
        o.incremental = inc;
        struct qp_sens_result *r = score(&f, &o), *rg = score(&good, &o);
        const struct qp_sens_target *t = find(r, "cast_idx");
        assert_int_equal(t->state, QP_SENS_FAILED);
        assert_non_null(strstr(t->error, "needs float"));
        for (size_t i = 0; i < rg->n_targets; i++) {
            const struct qp_sens_target *a = find(r, rg->targets[i].name);
            assert_int_equal(a->state, QP_SENS_SCORED);
            /* Each fallback probe's plan holds only that probe's edges, so fusion takes chains
             * the all-entries plan keeps apart (conv1 + sig1 when sig1's input has no overlay):
             * fused Sigmoid and folding round differently, by up to 4e-4 relative on these
             * 1e-7-sized scores (1e-12 when the session was unfused). */
            assert_true(fabs(a->score - rg->targets[i].score) <= 1e-3 * rg->targets[i].score);
        }
        qp_sens_result_free(r);
        qp_sens_result_free(rg);
    }
    fixture_free(&f);
    fixture_free(&good);
}

static void test_budget(void **state) {
    (void)state;
    struct fixture f;
    fixture_load(&f, "sens_small.placement.json");
    struct qp_sens_options o;
    opts_default(&o);
    o.granularity = QP_SENS_NODE;
    struct qp_sens_result *r = score(&f, &o);
    /* Groups: targets by descending score. */
    size_t n = r->n_targets, order[8], sizes[8];
    const size_t *groups[8];
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (r->targets[order[j]].score > r->targets[order[i]].score) {
                size_t t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    for (size_t i = 0; i < n; i++) {
        groups[i] = &order[i];
        sizes[i] = 1;
    }
    assert_string_equal(r->targets[order[0]].name, "ln");
    struct qp_error err = {0};
    struct qp_sens_budget_step st[9];
    size_t k = 99;
    int met = 0;
    struct qp_placement *p = NULL;
    struct qp_sens_groups gs = {.n = n, .members = groups, .sizes = sizes};
    struct qp_sens_budget_goal goal = {.max_drift = 1e9, .min_top1 = 0};
    /* A budget the full placement meets: nothing excluded. */
    assert_int_equal(
        qp_sens_budget(f.m, f.pl, f.prov, f.ranges, &o, r, &gs, &goal, &k, st, &met, &p, &err),
        QP_OK);
    assert_int_equal(k, 0);
    assert_int_equal(met, 1);
    assert_true(st[0].drift > 0);
    assert_true(qp_placement_equal(p, f.pl));
    qp_placement_free(p);
    double full = st[0].drift, top1_full = st[0].top1;
    /* y [N, 4, 16] holds class scores (z's last dim is 1): 24 rows over the 6 samples. */
    assert_true(top1_full >= 0 && top1_full < 1);
    assert_true(fabs(top1_full * 24 - round(top1_full * 24)) < 1e-9);
    /* Half the full drift: ln goes first, then as many as needed; each earlier step was above. */
    goal.max_drift = full * 0.5;
    assert_int_equal(
        qp_sens_budget(f.m, f.pl, f.prov, f.ranges, &o, r, &gs, &goal, &k, st, &met, &p, &err),
        QP_OK);
    assert_int_equal(met, 1);
    assert_true(k >= 1);
    assert_true(st[k].measured && st[k].drift <= goal.max_drift);
    assert_true(st[k - 1].measured && st[k - 1].drift > goal.max_drift);
    for (size_t i = 0; i < k; i++)
        assert_true(!st[i].measured || st[i].drift > goal.max_drift);
    for (size_t i = k + 1; i <= n; i++)
        assert_false(st[i].measured);
    assert_int_equal(qp_placement_find(p, "ln", 0, NULL, NULL), 0);
    /* Exactly the first k targets' quantizers are gone. */
    for (size_t i = 0; i < n; i++)
        assert_int_equal(
            qp_placement_find(p, r->targets[order[i]].name,
                              strcmp(r->targets[order[i]].name, "mm") == 0 ||
                                      strncmp(r->targets[order[i]].name, "conv", 4) == 0
                                  ? 1
                                  : 0,
                              NULL, NULL),
            i >= k);
    qp_placement_free(p);
    /* Zero: only the float model (everything excluded) has no drift, and agrees everywhere. */
    goal.max_drift = 0;
    assert_int_equal(
        qp_sens_budget(f.m, f.pl, f.prov, f.ranges, &o, r, &gs, &goal, &k, st, &met, &p, &err),
        QP_OK);
    assert_int_equal(met, 1);
    assert_int_equal(k, n);
    assert_true(st[n].drift == 0);
    assert_true(st[n].top1 == 1);
    assert_int_equal(p->n_edges + p->n_weights, 0);
    qp_placement_free(p);
    /* Top-1 alone: excluded one at a time until the agreement reaches the bound, no earlier. */
    goal = (struct qp_sens_budget_goal){.max_drift = -1, .min_top1 = 1};
    assert_int_equal(
        qp_sens_budget(f.m, f.pl, f.prov, f.ranges, &o, r, &gs, &goal, &k, st, &met, NULL, &err),
        QP_OK);
    assert_int_equal(met, 1);
    assert_true(k >= 1);
    assert_true(st[k].top1 == 1);
    assert_true(st[k - 1].measured && st[k - 1].top1 < 1);
    for (size_t i = 0; i < k; i++)
        assert_true(!st[i].measured || st[i].top1 < 1);
    /* The full placement's own agreement is met at once; both bounds must hold. */
    goal.min_top1 = top1_full;
    assert_int_equal(
        qp_sens_budget(f.m, f.pl, f.prov, f.ranges, &o, r, &gs, &goal, &k, st, &met, NULL, &err),
        QP_OK);
    assert_int_equal(k, 0);
    goal.max_drift = full * 0.5;
    assert_int_equal(
        qp_sens_budget(f.m, f.pl, f.prov, f.ranges, &o, r, &gs, &goal, &k, st, &met, NULL, &err),
        QP_OK);
    assert_true(k >= 1 && st[k].drift <= full * 0.5 && st[k].top1 >= top1_full);
    /* Not met with only the first group allowed. */
    goal = (struct qp_sens_budget_goal){.max_drift = 0, .min_top1 = 0};
    gs.n = 1;
    assert_int_equal(
        qp_sens_budget(f.m, f.pl, f.prov, f.ranges, &o, r, &gs, &goal, &k, st, &met, NULL, &err),
        QP_OK);
    assert_int_equal(met, 0);
    assert_int_equal(k, 1);
    qp_sens_result_free(r);
    fixture_free(&f);
}

/* qp_sens_eval measures a sub-placement exactly as the budget measures its steps (same drift
 * and top-1, bit for bit), with the float reference of every batch computed once: the full
 * placement, the placement without the most sensitive target, and nothing quantized. */
static void test_eval(void **state) {
    (void)state;
    struct fixture f;
    fixture_load(&f, "sens_small.placement.json");
    struct qp_sens_options o;
    opts_default(&o);
    o.granularity = QP_SENS_NODE;
    struct qp_sens_result *r = score(&f, &o);
    const struct qp_sens_target *ln = find(r, "ln");
    size_t n = r->n_targets, idx = (size_t)(ln - r->targets), order[8], sizes[8];
    const size_t *groups[8];
    order[0] = idx; /* ln first, then the others in target order */
    for (size_t i = 0, k = 1; i < n; i++)
        if (i != idx) order[k++] = i;
    for (size_t i = 0; i < n; i++) {
        groups[i] = &order[i];
        sizes[i] = 1;
    }
    struct qp_error err = {0};
    struct qp_sens_budget_step st[9];
    size_t k = 0;
    int met = 0;
    struct qp_sens_groups gs = {.n = n, .members = groups, .sizes = sizes};
    struct qp_sens_budget_goal goal = {.max_drift = 0, .min_top1 = 0}; /* measures 0, 1, .. n */
    assert_int_equal(
        qp_sens_budget(f.m, f.pl, f.prov, f.ranges, &o, r, &gs, &goal, &k, st, &met, NULL, &err),
        QP_OK);
    assert_true(st[0].measured && st[1].measured && st[n].measured);
    struct qp_sens_eval *ev = NULL;
    assert_int_equal(qp_sens_eval_create(f.m, f.pl, f.prov, f.ranges, &o, &ev, &err), QP_OK);
    assert_true(qp_sens_eval_n_samples(ev) == r->n_samples);
    size_t ne = f.pl->n_edges + f.pl->n_weights;
    unsigned char on[64];
    assert_true(ne <= sizeof on);
    struct qp_sens_budget_step e;
    for (int pass = 0; pass < 2; pass++) { /* twice: the kept reference does not wear out */
        memset(on, 1, ne);
        assert_int_equal(qp_sens_eval_measure(ev, on, &e, &err), QP_OK);
        assert_true(e.measured && e.drift == st[0].drift && e.top1 == st[0].top1);
        for (size_t q = 0; q < ln->n_edges + ln->n_weights; q++)
            on[ln->entries[q]] = 0;
        assert_int_equal(qp_sens_eval_measure(ev, on, &e, &err), QP_OK);
        assert_true(e.drift == st[1].drift && e.top1 == st[1].top1);
        assert_true(e.drift < st[0].drift);
        memset(on, 0, ne);
        assert_int_equal(qp_sens_eval_measure(ev, on, &e, &err), QP_OK);
        assert_true(e.drift == 0 && e.top1 == 1 && st[n].drift == 0);
    }
    qp_sens_eval_free(ev);
    qp_sens_result_free(r);
    fixture_free(&f);
}

/* With one batch, an incremental evaluator's measurements after the first recompute only
 * what differs from the reference run: the same drifts and top-1 as full runs, bit for bit,
 * over placements that add, drop and swap entries, before and after a rebase, with fewer node
 * computations. */
static void test_eval_incremental(void **state) {
    (void)state;
    struct fixture f;
    fixture_load(&f, "sens_small.placement.json");
    struct qp_error err = {0};
    struct qp_provider *head = NULL;
    assert_int_equal(qp_provider_head_create(f.prov, 1, &head, &err), QP_OK);
    struct qp_sens_options o;
    opts_default(&o);
    struct qp_sens_eval *ev[2] = {NULL, NULL}; /* full runs, incremental */
    for (int i = 0; i < 2; i++) {
        o.incremental = i;
        assert_int_equal(qp_sens_eval_create(f.m, f.pl, head, f.ranges, &o, &ev[i], &err), QP_OK);
        assert_true(qp_sens_eval_n_samples(ev[i]) == 1);
    }
    size_t ne = f.pl->n_edges + f.pl->n_weights;
    unsigned char on[64];
    assert_true(ne >= 3 && ne <= sizeof on);
    size_t changed_late = 0;
    for (int step = 0; step < 8; step++) {
        memset(on, 1, ne);
        if (step == 1 || step == 5) on[ne - 1] = 0; /* the last entry off */
        if (step == 2) on[0] = 0;
        if (step == 3) memset(on, 0, ne);
        if (step == 6) on[ne / 2] = 0;
        if (step == 4) qp_sens_eval_rebase(ev[1]); /* the next run is full again */
        struct qp_sens_budget_step a, b;
        uint64_t before = qp_sens_eval_nodes_executed(ev[1]);
        assert_int_equal(qp_sens_eval_measure(ev[0], on, &a, &err), QP_OK);
        assert_int_equal(qp_sens_eval_measure(ev[1], on, &b, &err), QP_OK);
        assert_true(a.measured && b.measured);
        assert_true(a.drift == b.drift && a.top1 == b.top1);
        if (step == 1) changed_late = qp_sens_eval_nodes_executed(ev[1]) - before;
    }
    uint64_t full = qp_sens_eval_nodes_executed(ev[0]), inc = qp_sens_eval_nodes_executed(ev[1]);
    assert_true(inc < full);
    assert_true(changed_late > 0 && changed_late < full / 8); /* the last entry: a tail */
    qp_sens_eval_free(ev[0]);
    qp_sens_eval_free(ev[1]);
    qp_provider_free(head);
    fixture_free(&f);
}

static void test_bad_options(void **state) {
    (void)state;
    struct fixture f;
    fixture_load(&f, "sens_small.placement.json");
    struct qp_sens_options o;
    opts_default(&o);
    o.qtype = QP_DTYPE_INT16;
    struct qp_error err = {0};
    struct qp_sens_result *r = NULL;
    assert_int_equal(qp_sens_score(f.m, f.pl, f.prov, f.ranges, &o, &r, &err), QP_ERR_USAGE);
    assert_null(r);
    /* fp8 works and still ranks ln first. */
    o.qtype = QP_DTYPE_FLOAT8E4M3FN;
    o.granularity = QP_SENS_NODE;
    r = score(&f, &o);
    assert_true(find(r, "ln")->score > 0);
    qp_sens_result_free(r);
    fixture_free(&f);
}

/* A provider of one batch: x (1x3 float) and shp (the int64 shape {1, 3}). */
static enum qp_status keyed_next(struct qp_provider *p, int *end_out, struct qp_error *err) {
    static float x[3] = {0.5f, -2.0f, 1.0f};
    static int64_t shp[2] = {1, 3};
    int64_t dx[2] = {1, 3}, ds[1] = {2};
    int *done = p->impl;
    *end_out = *done;
    if (*done) return QP_OK;
    *done = 1;
    enum qp_status st = qp_array_view(&p->batch[0], QP_DTYPE_FLOAT, 2, dx, x, sizeof x, err);
    return st != QP_OK ? st
                       : qp_array_view(&p->batch[1], QP_DTYPE_INT64, 1, ds, shp, sizeof shp, err);
}
static enum qp_status keyed_reset(struct qp_provider *p, struct qp_error *err) {
    (void)err;
    *(int *)p->impl = 0;
    return QP_OK;
}
static void keyed_destroy(struct qp_provider *p) {
    (void)p;
}

/* Calibration learns which placement tensors are float from the session's plan; a model whose
 * input feeds a Reshape's shape (value-keyed: no plan before the bytes are known) takes the
 * observed run of the first batch instead, and its tensors still get their ranges. */
static void test_calibrate_value_keyed(void **state) {
    (void)state;
    static struct qp_opset op19 = {"", 19};
    static struct qp_dim dx[2] = {{1, NULL}, {3, NULL}}, ds[1] = {{2, NULL}};
    struct qp_error err = {0};
    struct qp_model *m = qp_model_create();
    assert_non_null(m);
    m->opsets = &op19;
    m->n_opsets = 1;
    struct qp_graph *g = m->graph;
    int x = qp_graph_value(g, "x"), sh = qp_graph_value(g, "shp");
    g->values[x].dtype = QP_DTYPE_FLOAT;
    g->values[x].rank = 2;
    g->values[x].dims = dx;
    g->values[sh].dtype = QP_DTYPE_INT64;
    g->values[sh].rank = 1;
    g->values[sh].dims = ds;
    assert_int_equal(qp_graph_add_input(g, x, &err), QP_OK);
    assert_int_equal(qp_graph_add_input(g, sh, &err), QP_OK);
    const char *rin[2] = {"x", "shp"}, *rout = "y", *ain = "y", *aout = "z";
    assert_int_equal(qp_graph_add_node(g, "reshape", "Reshape", "", 2, rin, 1, &rout, NULL, &err),
                     QP_OK);
    assert_int_equal(qp_graph_add_node(g, "relu", "Relu", "", 1, &ain, 1, &aout, NULL, &err),
                     QP_OK);
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "z"), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    struct qp_placement *pl = qp_placement_create();
    assert_non_null(pl);
    assert_int_equal(qp_placement_add_edge(pl, "y", "relu", 0, "test", &err), QP_OK);
    assert_int_equal(qp_placement_validate(pl, g, &err), QP_OK);
    static const struct qp_provider_ops ops = {keyed_next, keyed_reset, keyed_destroy};
    static const char *const names[2] = {"x", "shp"};
    static int done;
    struct qp_provider *prov = NULL;
    assert_int_equal(qp_provider_alloc(&ops, "test", names, 2, &prov, &err), QP_OK);
    done = 0;
    prov->impl = &done;
    prov->n_samples = 1;
    prov->n_batches = 1;
    struct qp_ranges *ranges = NULL;
    uint64_t ns = 0;
    if (qp_sens_calibrate(m, pl, prov, QP_CALIB_MAX, 0, QP_DTYPE_INT8, 1, &ranges, &ns, &err) !=
        QP_OK)
        fail_msg("%s", err.msg);
    const struct qp_range *rg = qp_ranges_find(ranges, "y");
    assert_non_null(rg);
    assert_true(rg->amax == 2.0f);
    qp_ranges_free(ranges);
    qp_provider_free(prov);
    qp_placement_free(pl);
    qp_model_free(m);
}

int main(void) {
    snprintf(data_dir, sizeof data_dir, "%s", __FILE__);
    char *slash = strrchr(data_dir, '/');
    if (slash)
        strcpy(slash, "/data");
    else
        strcpy(data_dir, "data");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm_highest),
        cmocka_unit_test(test_activation_probes),
        cmocka_unit_test(test_op_type_is_union),
        cmocka_unit_test(test_incremental_equals_naive),
        cmocka_unit_test(test_weight_clipping),
        cmocka_unit_test(test_workers_same_scores),
        cmocka_unit_test(test_unprobed),
        cmocka_unit_test(test_failed),
        cmocka_unit_test(test_plan_failure_falls_back),
        cmocka_unit_test(test_calibrate_value_keyed),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_eval),
        cmocka_unit_test(test_eval_incremental),
        cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
