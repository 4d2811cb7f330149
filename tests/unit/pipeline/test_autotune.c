/* The autotune driver's decisions on the `fixed` latency backend (pipeline/autotune.h): a scheme
 * the backend makes faster is adopted and kept through the guard; when nothing is faster the
 * search ends on the seed and the guard keeps the model without Q/DQ; a faster scheme over
 * --max_output_drift is rejected unraced; pareto.json's frontier; resume with drifts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "autotune/latency.h"
#include "autotune/region.h"
#include "autotune/scheme.h"
#include "ir/ir.h"
#include "pipeline/autotune.h"
#include "qplace/placement.h"

#define MODEL       QP_TEST_DATA_DIR "/../integration/quantize_models/resnet_like.onnx"
#define MAX_SCHEMES 4
#define MAX_TENSORS 128

/* A sorted set of tensor names (the inputs of a model's QuantizeLinear nodes). */
struct tset {
    size_t n;
    char *names[MAX_TENSORS];
};

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void tset_add(struct tset *s, const char *name) {
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0) return;
    assert_true(s->n < MAX_TENSORS);
    s->names[s->n++] = strdup(name);
    qsort(s->names, s->n, sizeof s->names[0], cmp_str);
}

static void tset_clear(struct tset *s) {
    for (size_t i = 0; i < s->n; i++)
        free(s->names[i]);
    s->n = 0;
}

static int tset_equal(const struct tset *a, const struct tset *b) {
    if (a->n != b->n) return 0;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->names[i], b->names[i]) != 0) return 0;
    return 1;
}

static void tset_of_model(const char *path, struct tset *s) {
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    assert_int_equal(qp_model_load_file(path, NULL, &m, &err), QP_OK);
    const struct qp_graph *g = m->graph;
    for (size_t i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && strcmp(g->nodes[i].op_type, "QuantizeLinear") == 0)
            tset_add(s, g->values[g->nodes[i].inputs[0]].name);
    qp_model_free(m);
}

/* present[i] = 1 when the model at path has a tensor named names->names[i] (a sub-model of a
 * pattern's representatives lacks the other instances' tensors). */
static void tset_present(const char *path, const struct tset *names, unsigned char *present) {
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    assert_int_equal(qp_model_load_file(path, NULL, &m, &err), QP_OK);
    for (size_t i = 0; i < names->n; i++)
        present[i] = qp_graph_find_value(m->graph, names->names[i]) >= 0;
    qp_model_free(m);
}

static void tset_of_placement(const struct qp_placement *p, struct tset *s) {
    for (size_t i = 0; i < p->n_edges; i++)
        tset_add(s, p->edges[i].tensor);
    for (size_t i = 0; i < p->n_weights; i++)
        tset_add(s, p->weights[i].tensor);
}

/* A latency from the structure alone, the same on any model of a family: each consumer slot fed
 * by a DequantizeLinear makes the model 3% faster when the consumer is a Conv, 3% slower
 * otherwise (the other way round with conv_slow). The fastest placement quantizes exactly the
 * Conv inputs (every input but the Conv inputs). */
static double structural_latency(const char *path, int conv_slow) {
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    assert_int_equal(qp_model_load_file(path, NULL, &m, &err), QP_OK);
    const struct qp_graph *g = m->graph;
    double t = 1.0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const struct qp_node *n = &g->nodes[i];
        if (n->dead || strcmp(n->op_type, "DequantizeLinear") == 0) continue;
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k], pr = v >= 0 ? g->values[v].producer : -1;
            if (pr >= 0 && strcmp(g->nodes[pr].op_type, "DequantizeLinear") == 0)
                t *= (strcmp(n->op_type, "Conv") == 0) != conv_slow ? 0.97 : 1.03;
        }
    }
    qp_model_free(m);
    return t;
}

/* The backend: a model is fast exactly when its quantized tensors are `fast`'s. */
struct world {
    struct tset fast;
    int any_fast; /* 0: every model takes the same time */
    int q_fast;   /* 1: every model holding Q/DQ is fast */
    /* 1: a model (whole or a sub-model) is fast when it quantizes every tensor of `add` and
     * none of `rem`: a rule that a sub-model of the changed pattern answers as the whole
     * model does */
    int by_change;
    int whole_slow;   /* with by_change: a whole model with the change is slow (2.0), not fast */
    double sub_scale; /* > 0: a sub-model takes this times what the rules above give */
    double sub_gain;  /* > 0, with by_change: a changed sub-model is only this much faster */
    int part_fast;    /* with by_change: only a model holding part of the change is fast */
    struct tset add, rem;
    int phantom;    /* 1: `fast` is fast only until the backend's first reset (a session bias) */
    int epoch;      /* resets so far (pair_backend) */
    int structural; /* 1: structural_latency */
    int conv_slow;  /* its conv_slow */
    /* the last model looked at, by file identity */
    char path[4096];
    dev_t dev;
    ino_t ino;
    struct timespec mtime;
    off_t size;
    double base;
    size_t n_samples; /* samples handed out */
};

static double latency(void *ctx, const char *path, size_t k) {
    struct world *w = ctx;
    struct stat st;
    w->n_samples++;
    if (stat(path, &st) != 0) return -1;
    if (strcmp(path, w->path) != 0 || st.st_dev != w->dev || st.st_ino != w->ino ||
        st.st_mtim.tv_sec != w->mtime.tv_sec || st.st_mtim.tv_nsec != w->mtime.tv_nsec ||
        st.st_size != w->size) {
        struct tset s = {0};
        tset_of_model(path, &s);
        /* the change, as far as the model holds its tensors */
        int changed = w->by_change;
        size_t seen = 0;
        unsigned char pa[MAX_TENSORS], pr[MAX_TENSORS];
        if (changed) {
            tset_present(path, &w->add, pa);
            tset_present(path, &w->rem, pr);
        }
        for (size_t i = 0; changed && i < w->add.n; i++) {
            if (!pa[i]) continue;
            seen++;
            changed = bsearch(&w->add.names[i], s.names, s.n, sizeof s.names[0], cmp_str) != NULL;
        }
        for (size_t i = 0; changed && i < w->rem.n; i++) {
            if (!pr[i]) continue;
            seen++;
            changed = bsearch(&w->rem.names[i], s.names, s.n, sizeof s.names[0], cmp_str) == NULL;
        }
        changed = changed && seen > 0 && (!w->part_fast || seen < w->add.n + w->rem.n);
        int fast = w->any_fast && tset_equal(&s, &w->fast) && !(w->phantom && w->epoch > 0);
        w->base = fast || (w->q_fast && s.n) || changed ? 0.5 : 1.0;
        if (changed && w->whole_slow && !strstr(path, ".autotune.sub.")) w->base = 2.0;
        if (w->sub_gain > 0 && changed && strstr(path, ".autotune.sub."))
            w->base = 1.0 - w->sub_gain;
        if (w->sub_scale > 0 && strstr(path, ".autotune.sub.")) w->base *= w->sub_scale;
        if (w->structural) w->base = structural_latency(path, w->conv_slow);
        tset_clear(&s);
        snprintf(w->path, sizeof w->path, "%s", path);
        w->dev = st.st_dev;
        w->ino = st.st_ino;
        w->mtime = st.st_mtim;
        w->size = st.st_size;
    }
    return w->base * (1.0 + 0.001 * (double)(k % 5)); /* a little spread, well under 1% */
}

/* The placement of the first mutation of the first pattern the search visits (the largest by
 * total node count; ties: the first), as the driver builds it: its tensors go into *out. */
static const char *g_model = MODEL;

static void target_scheme(struct tset *out) {
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    assert_int_equal(qp_model_load_file(g_model, NULL, &m, &err), QP_OK);
    struct qp_placement *seed = NULL;
    assert_int_equal(qp_placement_trt(m, NULL, &seed, &err), QP_OK);
    struct qp_regions *rs = NULL;
    assert_int_equal(qp_regions_build(m->graph, &rs, &err), QP_OK);
    size_t best = 0, best_total = 0;
    for (size_t p = 0; p < rs->n_patterns; p++) {
        size_t total = 0;
        for (size_t r = 0; r < rs->n_regions; r++)
            if (rs->regions[r].pattern == (int)p) total += rs->regions[r].n_nodes;
        if (rs->patterns[p].n_points && total > best_total) {
            best = p;
            best_total = total;
        }
    }
    size_t r0 = 0;
    while (rs->regions[r0].pattern != (int)best)
        r0++;
    uint64_t *bits = qp_scheme_alloc(rs->patterns[best].n_points);
    qp_scheme_from_placement(rs, r0, seed, bits);
    struct qp_scheme_list list = {0};
    assert_int_equal(qp_schemes_generate(rs, best, bits, 42 + best, MAX_SCHEMES, &list, &err),
                     QP_OK);
    assert_true(list.n >= 2);
    const uint64_t **choice = calloc(rs->n_patterns, sizeof *choice);
    choice[best] = qp_scheme_list_at(&list, 1);
    struct qp_placement *p = NULL;
    assert_int_equal(qp_schemes_apply(rs, seed, choice, &p, &err), QP_OK);
    assert_false(qp_placement_equal(p, seed));
    tset_of_placement(p, out);
    assert_true(out->n > 0);
    qp_placement_free(p);
    free(choice);
    qp_scheme_list_free(&list);
    free(bits);
    qp_regions_free(rs);
    qp_placement_free(seed);
    qp_model_free(m);
}

/* The fixed backend behind measure_pair and reset, as builtin offers them: each pair call
 * times a, then b; reset counts an epoch (world.phantom) and forgets the cached model. */
struct pair_backend {
    struct qp_latency_backend base;
    struct qp_latency_backend *inner;
    struct world *w;
};

static enum qp_status pb_measure(struct qp_latency_backend *b, const char *path, size_t n,
                                 double *ms, struct qp_error *err) {
    return qp_latency_measure(((struct pair_backend *)b)->inner, path, n, ms, err);
}

static enum qp_status pb_pair(struct qp_latency_backend *b, const char *a, const char *c, size_t n,
                              double *a_ms, double *c_ms, struct qp_error *err) {
    struct qp_latency_backend *in = ((struct pair_backend *)b)->inner;
    enum qp_status st = qp_latency_measure(in, a, n, a_ms, err);
    return st == QP_OK ? qp_latency_measure(in, c, n, c_ms, err) : st;
}

static void pb_reset(struct qp_latency_backend *b) {
    struct world *w = ((struct pair_backend *)b)->w;
    w->epoch++;
    w->path[0] = 0;
}

static void pb_free(struct qp_latency_backend *b) {
    qp_latency_backend_free(((struct pair_backend *)b)->inner);
    free(b);
}

static int g_pairs; /* run_from's backend: the fixed one behind pair_backend */

static enum qp_quant_mode g_mode = QP_QUANT_INT8;
static double g_max_drift = -1;
static enum qp_autotune_timing g_timing = QP_AUTOTUNE_TIMING_AUTO;

/* What a run may change from the defaults of run_from. */
static const char *g_cache, *g_filter;
static size_t g_schemes = MAX_SCHEMES;

static struct qp_autotune_report *run_from(struct world *w, const char *dir, const char *baseline) {
    struct qp_error err = {0};
    struct qp_latency_backend *b = NULL;
    assert_int_equal(qp_latency_fixed_create(latency, w, &b, &err), QP_OK);
    if (g_pairs) {
        struct pair_backend *pb = calloc(1, sizeof *pb);
        assert_non_null(pb);
        pb->base = (struct qp_latency_backend){.name = "pairs",
                                               .measure = pb_measure,
                                               .measure_pair = pb_pair,
                                               .reset = pb_reset,
                                               .free = pb_free};
        pb->inner = b;
        pb->w = w;
        b = &pb->base;
    }
    struct qp_autotune_options o;
    qp_autotune_options_default(&o);
    o.onnx_path = g_model;
    o.output_dir = dir;
    o.qdq_baseline = baseline;
    o.quant_mode = g_mode;
    o.timing = g_timing;
    o.pattern_cache_in = g_cache;
    o.node_filter_list = g_filter;
    o.schemes_per_pattern = g_schemes;
    o.backend = b;
    o.n_threads = 1;
    o.race.runs_per_round = 5;
    o.race.max_rounds = 3;
    o.max_output_drift = g_max_drift;
    struct qp_autotune_report *r = NULL;
    enum qp_status st = qp_autotune(&o, &r, &err);
    if (st != QP_OK) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(st, QP_OK);
    qp_latency_backend_free(b);
    return r;
}

static struct qp_autotune_report *run(struct world *w, const char *dir) {
    return run_from(w, dir, NULL);
}

static void rm_dir(const char *dir) {
    const char *files[] = {"placement.json",     "optimized_final.onnx", "log.jsonl",
                           "pattern_cache.json", "autotune_state.json",  "pareto.json"};
    char path[4200];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

static void test_one_faster(void **state) {
    (void)state;
    struct world w = {.any_fast = 1};
    target_scheme(&w.fast);
    const char *dir = QP_TEST_BINARY_DIR "/autotune_one_faster";
    rm_dir(dir);
    struct qp_autotune_report *r = run(&w, dir);
    assert_int_equal(r->n_adopted, 1);
    assert_true(r->n_measured >= 1);
    struct tset got = {0};
    tset_of_placement(r->best, &got);
    assert_true(tset_equal(&got, &w.fast));
    assert_true(r->guard_passed); /* the model without Q/DQ is slow */
    assert_true(r->seed_median_ms > 0.9 && r->best_median_ms < 0.6);
    /* optimized_final.onnx holds the adopted scheme, placement.json the same placement */
    struct tset final = {0};
    tset_of_model(QP_TEST_BINARY_DIR "/autotune_one_faster/optimized_final.onnx", &final);
    assert_true(tset_equal(&final, &w.fast));
    struct qp_error err = {0};
    struct qp_placement *pj = NULL;
    assert_int_equal(
        qp_placement_load_file(QP_TEST_BINARY_DIR "/autotune_one_faster/placement.json", &pj, &err),
        QP_OK);
    assert_true(qp_placement_equal(pj, r->best));
    qp_placement_free(pj);
    /* --qdq_baseline: that model's placement is the next search's seed */
    struct world w2 = {.any_fast = 0};
    const char *dir2 = QP_TEST_BINARY_DIR "/autotune_baseline";
    rm_dir(dir2);
    struct qp_autotune_report *r2 =
        run_from(&w2, dir2, QP_TEST_BINARY_DIR "/autotune_one_faster/optimized_final.onnx");
    assert_true(qp_placement_equal(r2->seed, r->best));
    assert_false(qp_placement_equal(r2->seed, r->seed));
    assert_int_equal(r2->n_adopted, 0);
    qp_autotune_report_free(r2);
    rm_dir(dir2);
    tset_clear(&final);
    tset_clear(&got);
    tset_clear(&w.fast);
    qp_autotune_report_free(r);
    rm_dir(dir);
}

static void test_none_faster(void **state) {
    (void)state;
    struct world w = {.any_fast = 0};
    const char *dir = QP_TEST_BINARY_DIR "/autotune_none_faster";
    rm_dir(dir);
    struct qp_autotune_report *r = run(&w, dir);
    assert_true(r->n_measured >= 1);
    assert_int_equal(r->n_adopted, 0);
    assert_true(qp_placement_equal(r->best, r->seed));
    assert_false(r->guard_passed); /* not 1.02x faster than the model without Q/DQ */
    struct tset final = {0};
    tset_of_model(QP_TEST_BINARY_DIR "/autotune_none_faster/optimized_final.onnx", &final);
    assert_int_equal(final.n, 0);
    qp_autotune_report_free(r);
    rm_dir(dir);
}

/* Keeps the first n steps of a state file, as a run killed after n races leaves it. */
static void truncate_state(const char *path, int n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char text[1 << 20];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = 0;
    cJSON *doc = cJSON_Parse(text);
    assert_non_null(doc);
    cJSON *steps = cJSON_GetObjectItemCaseSensitive(doc, "steps");
    assert_true(cJSON_GetArraySize(steps) > n);
    while (cJSON_GetArraySize(steps) > n)
        cJSON_DeleteItemFromArray(steps, n);
    char *out = cJSON_PrintUnformatted(doc);
    f = fopen(path, "wb");
    assert_non_null(f);
    fputs(out, f);
    fclose(f);
    free(out);
    cJSON_Delete(doc);
}

/* A run stopped after two races and resumed measures only the rest, and ends as an
 * uninterrupted run; a rerun with the whole state measures no scheme at all. */
/* Replicated races: on a backend with reset, a scheme FASTER only in the sessions it was first
 * raced in (a session bias: phantom) is raced again on fresh ones, does not hold, and is not
 * adopted; the report counts it and a resumed run replays it so. The same scheme truly faster
 * is adopted, replicated. */
static void test_replicate(void **state) {
    (void)state;
    const char *dir = QP_TEST_BINARY_DIR "/autotune_replicate";
    g_pairs = 1;
    struct world w = {.any_fast = 1, .phantom = 1};
    target_scheme(&w.fast);
    rm_dir(dir);
    struct qp_autotune_report *r = run(&w, dir);
    assert_int_equal(r->n_adopted, 0);
    assert_int_equal(r->n_not_replicated, 1);
    assert_true(w.epoch >= 1);
    assert_true(qp_placement_equal(r->best, r->seed));
    struct qp_autotune_report *again = run(&w, dir); /* every race replayed */
    assert_int_equal(again->n_replayed, r->n_measured);
    assert_int_equal(again->n_not_replicated, 1);
    assert_int_equal(again->n_adopted, 0);
    qp_autotune_report_free(again);
    qp_autotune_report_free(r);
    rm_dir(dir);
    struct world real = {.any_fast = 1};
    target_scheme(&real.fast);
    r = run(&real, dir);
    assert_int_equal(r->n_adopted, 1);
    assert_int_equal(r->n_not_replicated, 0);
    assert_true(real.epoch >= 1);
    struct tset got = {0};
    tset_of_placement(r->best, &got);
    assert_true(tset_equal(&got, &real.fast));
    tset_clear(&got);
    qp_autotune_report_free(r);
    rm_dir(dir);
    tset_clear(&w.fast);
    tset_clear(&real.fast);
    g_pairs = 0;
}

static void test_resume(void **state) {
    (void)state;
    struct world w = {.any_fast = 1};
    target_scheme(&w.fast);
    const char *dir = QP_TEST_BINARY_DIR "/autotune_resume";
    rm_dir(dir);
    struct qp_autotune_report *a = run(&w, dir);
    size_t samples_a = w.n_samples;
    assert_true(a->n_measured >= 3);
    assert_int_equal(a->n_replayed, 0);
    truncate_state(QP_TEST_BINARY_DIR "/autotune_resume/autotune_state.json", 2);
    w.n_samples = 0;
    struct qp_autotune_report *b = run(&w, dir);
    assert_int_equal(b->n_replayed, 2);
    assert_int_equal(b->n_measured, a->n_measured);
    assert_int_equal(b->n_adopted, a->n_adopted);
    assert_true(qp_placement_equal(b->best, a->best));
    assert_true(w.n_samples < samples_a);
    w.n_samples = 0;
    struct qp_autotune_report *c = run(&w, dir);
    assert_int_equal(c->n_replayed, a->n_measured);
    assert_true(qp_placement_equal(c->best, a->best));
    assert_true(w.n_samples > 0); /* the guard race only */
    size_t guard_samples = w.n_samples;
    assert_true(guard_samples < samples_a / 2);
    qp_autotune_report_free(a);
    qp_autotune_report_free(b);
    qp_autotune_report_free(c);
    tset_clear(&w.fast);
    rm_dir(dir);
}

/* --quant_type fp8: the models written hold float8e4m3fn quantizers. */
static void test_fp8(void **state) {
    (void)state;
    struct world w = {.q_fast = 1};
    const char *dir = QP_TEST_BINARY_DIR "/autotune_fp8";
    rm_dir(dir);
    g_mode = QP_QUANT_FP8;
    struct qp_autotune_report *r = run(&w, dir);
    g_mode = QP_QUANT_INT8;
    assert_true(r->guard_passed);
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    assert_int_equal(
        qp_model_load_file(QP_TEST_BINARY_DIR "/autotune_fp8/optimized_final.onnx", NULL, &m, &err),
        QP_OK);
    size_t n_q = 0;
    for (size_t i = 0; i < m->graph->n_nodes; i++) {
        const struct qp_node *n = &m->graph->nodes[i];
        if (n->dead || strcmp(n->op_type, "QuantizeLinear") != 0) continue;
        assert_true(n->n_inputs == 3);
        assert_int_equal(m->graph->values[n->inputs[2]].dtype, QP_DTYPE_FLOAT8E4M3FN);
        n_q++;
    }
    assert_true(n_q > 0);
    qp_model_free(m);
    qp_autotune_report_free(r);
    rm_dir(dir);
}

/* A stop request before the first race: no race, no final file, the report says so. */
static void test_stop(void **state) {
    (void)state;
    struct world w = {.any_fast = 0};
    const char *dir = QP_TEST_BINARY_DIR "/autotune_stop";
    rm_dir(dir);
    struct qp_error err = {0};
    struct qp_latency_backend *b = NULL;
    assert_int_equal(qp_latency_fixed_create(latency, &w, &b, &err), QP_OK);
    static volatile sig_atomic_t stop = 1;
    struct qp_autotune_options o;
    qp_autotune_options_default(&o);
    o.onnx_path = MODEL;
    o.output_dir = dir;
    o.backend = b;
    o.stop = &stop;
    struct qp_autotune_report *r = NULL;
    assert_int_equal(qp_autotune(&o, &r, &err), QP_OK);
    assert_true(r->interrupted);
    assert_int_equal(r->n_measured, 0);
    assert_int_equal(w.n_samples, 0);
    assert_int_equal(access(QP_TEST_BINARY_DIR "/autotune_stop/optimized_final.onnx", F_OK), -1);
    qp_autotune_report_free(r);
    qp_latency_backend_free(b);
    rm_dir(dir);
}

#define RESNET_SHORT QP_TEST_DATA_DIR "/../unit/autotune/data/resnet_short.onnx"
#define RESNET_DEEP  QP_TEST_DATA_DIR "/../unit/autotune/data/resnet_deep.onnx"

/* Issue 18's test: a pattern cache from a ResNet cuts measurements on a deeper ResNet. A search
 * on resnet_short (two identity blocks) leaves pattern_cache.json; on resnet_deep (four) the
 * search with that cache races fewer schemes than without it (patterns whose cached best holds
 * stop after cache_patience lost races) and ends on a placement at least as fast. */
static void test_cache_cuts_races(void **state) {
    (void)state;
    struct world w = {.structural = 1};
    const char *dir_a = QP_TEST_BINARY_DIR "/autotune_cache_short",
               *dir_b = QP_TEST_BINARY_DIR "/autotune_cache_deep_cold",
               *dir_c = QP_TEST_BINARY_DIR "/autotune_cache_deep_warm";
    rm_dir(dir_a);
    rm_dir(dir_b);
    rm_dir(dir_c);
    g_schemes = 8;
    g_model = RESNET_SHORT;
    struct qp_autotune_report *a = run(&w, dir_a);
    assert_true(a->n_adopted > 0);
    g_model = RESNET_DEEP;
    struct qp_autotune_report *cold = run(&w, dir_b);
    g_cache = QP_TEST_BINARY_DIR "/autotune_cache_short/pattern_cache.json";
    struct qp_autotune_report *warm = run(&w, dir_c);
    g_cache = NULL;
    g_model = MODEL;
    g_schemes = MAX_SCHEMES;
    fprintf(stderr, "races: resnet_short %zu; resnet_deep %zu without the cache, %zu with it\n",
            a->n_measured, cold->n_measured, warm->n_measured);
    assert_int_equal(cold->n_cache_stops, 0);
    assert_true(warm->n_cache_stops > 0);
    assert_true(warm->n_measured < cold->n_measured);
    double l_cold = structural_latency(
               QP_TEST_BINARY_DIR "/autotune_cache_deep_cold/optimized_final.onnx", 0),
           l_warm = structural_latency(
               QP_TEST_BINARY_DIR "/autotune_cache_deep_warm/optimized_final.onnx", 0);
    fprintf(stderr, "structural latency: %.4f without the cache, %.4f with it\n", l_cold, l_warm);
    assert_true(l_warm <= l_cold * 1.000001);
    qp_autotune_report_free(a);
    qp_autotune_report_free(cold);
    qp_autotune_report_free(warm);
    rm_dir(dir_a);
    rm_dir(dir_b);
    rm_dir(dir_c);
}

/* Slots of `a` that `b` lacks whose consumer is outside block 2's region of resnet_deep (its
 * nodes: conv_b2_*, relu_b2_*, add_b2, relu_b2). */
static size_t slots_outside_block2(const struct qp_placement *a, const struct qp_placement *b) {
    size_t n = 0;
    for (size_t i = 0; i < a->n_edges + a->n_weights; i++) {
        const char *node = i < a->n_edges ? a->edges[i].node : a->weights[i - a->n_edges].node;
        int input = i < a->n_edges ? a->edges[i].input : a->weights[i - a->n_edges].input;
        int is_w = 0;
        size_t idx = 0;
        if (qp_placement_find(b, node, input, &is_w, &idx)) continue;
        n += strstr(node, "_b2") == NULL;
    }
    return n;
}

/* --node_filter_list: only the regions with a matching node change, even where other instances
 * share their pattern (identity blocks 1-3 of resnet_deep); the others keep the seed's slots. A
 * filter that matches no node is bad input, and nothing is written. */
static void test_node_filter(void **state) {
    (void)state;
    const char *filter = QP_TEST_BINARY_DIR "/autotune_filter.txt";
    FILE *f = fopen(filter, "w");
    assert_non_null(f);
    fputs("# block 2 only\n\n  conv_b2_*  \n", f);
    fclose(f);
    struct world w = {.structural = 1, .conv_slow = 1};
    const char *dir = QP_TEST_BINARY_DIR "/autotune_filter";
    rm_dir(dir);
    g_filter = filter;
    g_schemes = 16;
    g_model = RESNET_DEEP;
    struct qp_autotune_report *r = run(&w, dir);
    g_model = MODEL;
    g_filter = NULL;
    g_schemes = MAX_SCHEMES;
    assert_true(r->n_regions_filtered > 0);
    assert_true(r->n_adopted > 0);
    /* every slot that differs from the seed is a slot of block 2's region */
    assert_false(qp_placement_equal(r->best, r->seed));
    assert_int_equal(slots_outside_block2(r->best, r->seed), 0);
    assert_int_equal(slots_outside_block2(r->seed, r->best), 0);
    struct qp_error err = {0};
    qp_autotune_report_free(r);
    rm_dir(dir);
    /* a pattern that matches nothing: bad input naming the nearest node, no folder */
    f = fopen(filter, "w");
    assert_non_null(f);
    fputs("conv_b2_*\nconv_b9_a\n", f);
    fclose(f);
    struct qp_latency_backend *b = NULL;
    assert_int_equal(qp_latency_fixed_create(latency, &w, &b, &err), QP_OK);
    struct qp_autotune_options o;
    qp_autotune_options_default(&o);
    o.onnx_path = RESNET_DEEP;
    o.output_dir = dir;
    o.backend = b;
    o.node_filter_list = filter;
    struct qp_autotune_report *none = NULL;
    assert_int_equal(qp_autotune(&o, &none, &err), QP_ERR_BAD_INPUT);
    assert_null(none);
    assert_non_null(strstr(err.msg, "line 2: pattern 'conv_b9_a' matches no node"));
    assert_non_null(strstr(err.msg, "nearest node: 'conv_b0_a'"));
    assert_int_equal(access(dir, F_OK), -1);
    /* no pattern at all; an unreadable file */
    f = fopen(filter, "w");
    assert_non_null(f);
    fputs("# only a comment\n   \n", f);
    fclose(f);
    assert_int_equal(qp_autotune(&o, &none, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "holds no pattern"));
    o.node_filter_list = QP_TEST_BINARY_DIR "/no_such_filter.txt";
    assert_int_equal(qp_autotune(&o, &none, &err), QP_ERR_IO);
    assert_int_equal(access(dir, F_OK), -1);
    qp_latency_backend_free(b);
    unlink(filter);
}

static cJSON *load_json(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char text[1 << 20];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = 0;
    cJSON *doc = cJSON_Parse(text);
    assert_non_null(doc);
    return doc;
}

static double jnum(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    assert_true(cJSON_IsNumber(v));
    return v->valuedouble;
}

/* b beats a on latency and drift, strictly on one of them. */
static int dominates(const cJSON *b, const cJSON *a) {
    double bm = jnum(b, "median_ms"), bd = jnum(b, "drift");
    double am = jnum(a, "median_ms"), ad = jnum(a, "drift");
    return bm <= am && bd <= ad && (bm < am || bd < ad);
}

/* The log.jsonl line of the raced or rejected scheme whose points are the target's. */
static int log_has_rejected(const char *path, double bound) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char line[1 << 16];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        cJSON *o = cJSON_Parse(line);
        assert_non_null(o);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "verdict");
        if (cJSON_IsString(v) && strcmp(v->valuestring, "rejected_drift") == 0) {
            assert_true(jnum(o, "drift") > bound);
            assert_false(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "adopted")));
            n++;
        }
        cJSON_Delete(o);
    }
    fclose(f);
    return n;
}

/* The scheme the backend makes faster is adopted without a drift bound; with a bound under its
 * drift it is rejected unraced (the seed stays), also when the seed itself is over the bound
 * (bound 0: the seed's drift is the bound then). */
static void test_drift_rejects(void **state) {
    (void)state;
    struct world w = {.any_fast = 1};
    target_scheme(&w.fast);
    const char *dir = QP_TEST_BINARY_DIR "/autotune_drift";
    rm_dir(dir);
    struct qp_autotune_report *a = run(&w, dir);
    assert_int_equal(a->n_adopted, 1);
    assert_int_equal(a->n_rejected_drift, 0);
    assert_true(a->seed_drift > 0 && a->best_drift > a->seed_drift); /* the test's premise */
    assert_true(a->n_drift_measured >= a->n_measured);
    for (int pass = 0; pass < 2; pass++) {
        rm_dir(dir);
        g_max_drift = pass == 0 ? (a->seed_drift + a->best_drift) / 2 : 0;
        w.n_samples = 0;
        struct qp_autotune_report *b = run(&w, dir);
        g_max_drift = -1;
        assert_int_equal(b->n_adopted, 0);
        assert_true(qp_placement_equal(b->best, b->seed));
        assert_true(b->n_rejected_drift >= 1);
        assert_true(b->n_measured + b->n_rejected_drift <= a->n_measured + a->n_rejected_drift);
        assert_int_equal(b->seed_over_bound, pass == 1);
        assert_true(b->drift_bound ==
                    (pass == 0 ? (a->seed_drift + a->best_drift) / 2 : b->seed_drift));
        assert_true(log_has_rejected(QP_TEST_BINARY_DIR "/autotune_drift/log.jsonl",
                                     b->drift_bound) == (int)b->n_rejected_drift);
        qp_autotune_report_free(b);
    }
    qp_autotune_report_free(a);
    tset_clear(&w.fast);
    rm_dir(dir);
}

/* pareto.json: the frontier is non-dominated among every measured placement, every other one
 * is dominated by a frontier entry, and the seed is on it or dominated by one of it. */
static void test_pareto(void **state) {
    (void)state;
    struct world w = {.any_fast = 1};
    target_scheme(&w.fast);
    const char *dir = QP_TEST_BINARY_DIR "/autotune_pareto";
    rm_dir(dir);
    struct qp_autotune_report *r = run(&w, dir);
    cJSON *doc = load_json(QP_TEST_BINARY_DIR "/autotune_pareto/pareto.json");
    const cJSON *fr = cJSON_GetObjectItemCaseSensitive(doc, "frontier");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(doc, "measured");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(doc, "format")->valuestring,
                        "qplace.autotune_pareto");
    assert_true(cJSON_GetArraySize(fr) >= 1);
    assert_int_equal((size_t)cJSON_GetArraySize(fr), r->n_frontier);
    /* seed + each race + best + without_qdq */
    assert_int_equal(cJSON_GetArraySize(all), (int)r->n_measured + 3);
    const cJSON *e, *x, *seed = NULL;
    double prev = 0;
    cJSON_ArrayForEach(e, fr) {
        assert_true(jnum(e, "median_ms") >= prev); /* fastest first */
        prev = jnum(e, "median_ms");
        cJSON_ArrayForEach(x, all) assert_false(dominates(x, e));
    }
    cJSON_ArrayForEach(x, all) {
        const char *label = cJSON_GetObjectItemCaseSensitive(x, "label")->valuestring;
        if (strcmp(label, "seed") == 0) seed = x;
        if (strcmp(label, "scheme") == 0)
            assert_true(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(x, "points")));
        int on = 0, beaten = 0;
        cJSON_ArrayForEach(e, fr) {
            on |= cJSON_Compare(e, x, 1);
            beaten |= dominates(e, x);
        }
        assert_true(on || beaten);
    }
    assert_non_null(seed);
    assert_true(jnum(seed, "drift") == r->seed_drift);
    /* the adopted scheme's race and the guard's measurement of it: optimized_final.onnx */
    int n_final = 0;
    cJSON_ArrayForEach(x, all) {
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(x, "final"))) continue;
        n_final++;
        assert_true(jnum(x, "drift") == r->final_drift);
        assert_true(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(x, "points")));
    }
    assert_true(r->guard_passed);
    assert_int_equal(n_final, 2);
    /* the adopted scheme (0.5x) beats the seed on latency: the seed is not on the frontier
     * unless its drift is lower */
    cJSON_Delete(doc);
    qp_autotune_report_free(r);
    tset_clear(&w.fast);
    rm_dir(dir);
}

/* With a drift bound that rejects schemes, a state cut after two steps resumes to the
 * uninterrupted run's result, measuring only the drifts it lacks; the whole state replays every
 * drift (none measured) and gives the same pareto.json frontier. */
static void test_resume_drift(void **state) {
    (void)state;
    struct world w = {.any_fast = 1};
    target_scheme(&w.fast);
    const char *dir = QP_TEST_BINARY_DIR "/autotune_resume_drift";
    rm_dir(dir);
    struct qp_autotune_report *a0 = run(&w, dir); /* for the bound */
    double bound = (a0->seed_drift + a0->best_drift) / 2;
    qp_autotune_report_free(a0);
    rm_dir(dir);
    g_max_drift = bound;
    struct qp_autotune_report *a = run(&w, dir);
    assert_true(a->n_rejected_drift >= 1);
    size_t steps = a->n_measured + a->n_rejected_drift;
    cJSON *pa = load_json(QP_TEST_BINARY_DIR "/autotune_resume_drift/pareto.json");
    truncate_state(QP_TEST_BINARY_DIR "/autotune_resume_drift/autotune_state.json", 2);
    struct qp_autotune_report *b = run(&w, dir);
    assert_int_equal(b->n_drift_replayed, 2);
    assert_int_equal(b->n_drift_measured + b->n_drift_replayed,
                     a->n_drift_measured + a->n_drift_replayed);
    assert_int_equal(b->n_rejected_drift, a->n_rejected_drift);
    assert_int_equal(b->n_adopted, a->n_adopted);
    assert_true(qp_placement_equal(b->best, a->best));
    assert_true(b->seed_drift == a->seed_drift && b->best_drift == a->best_drift);
    struct qp_autotune_report *c = run(&w, dir);
    g_max_drift = -1;
    assert_int_equal(c->n_drift_measured, 0);
    assert_int_equal(c->n_drift_replayed, steps);
    assert_int_equal(c->n_rejected_drift, a->n_rejected_drift);
    assert_true(qp_placement_equal(c->best, a->best));
    cJSON *pc = load_json(QP_TEST_BINARY_DIR "/autotune_resume_drift/pareto.json");
    const cJSON *ma = cJSON_GetObjectItemCaseSensitive(pa, "measured");
    const cJSON *mc = cJSON_GetObjectItemCaseSensitive(pc, "measured");
    assert_int_equal(cJSON_GetArraySize(ma), cJSON_GetArraySize(mc));
    for (int i = 0; i < cJSON_GetArraySize(ma); i++) {
        const cJSON *x = cJSON_GetArrayItem(ma, i), *y = cJSON_GetArrayItem(mc, i);
        const char *label = cJSON_GetObjectItemCaseSensitive(x, "label")->valuestring;
        assert_string_equal(label, cJSON_GetObjectItemCaseSensitive(y, "label")->valuestring);
        assert_true(jnum(x, "drift") == jnum(y, "drift"));
        assert_true(cJSON_Compare(cJSON_GetObjectItemCaseSensitive(x, "points"),
                                  cJSON_GetObjectItemCaseSensitive(y, "points"), 1));
        if (strcmp(label, "scheme") == 0) /* replayed races: the same medians */
            assert_true(jnum(x, "median_ms") == jnum(y, "median_ms"));
    }
    cJSON_Delete(pa);
    cJSON_Delete(pc);
    qp_autotune_report_free(a);
    qp_autotune_report_free(b);
    qp_autotune_report_free(c);
    tset_clear(&w.fast);
    rm_dir(dir);
}

/* w->add / w->rem: what the target scheme (target_scheme) adds to and removes from the trt
 * placement, for a `by_change` world. */
static void world_of_change(struct world *w) {
    struct tset target = {0}, seed = {0};
    target_scheme(&target);
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    assert_int_equal(qp_model_load_file(g_model, NULL, &m, &err), QP_OK);
    struct qp_placement *sp = NULL;
    assert_int_equal(qp_placement_trt(m, NULL, &sp, &err), QP_OK);
    tset_of_placement(sp, &seed);
    for (size_t i = 0; i < target.n; i++)
        if (!bsearch(&target.names[i], seed.names, seed.n, sizeof seed.names[0], cmp_str))
            tset_add(&w->add, target.names[i]);
    for (size_t i = 0; i < seed.n; i++)
        if (!bsearch(&seed.names[i], target.names, target.n, sizeof target.names[0], cmp_str))
            tset_add(&w->rem, seed.names[i]);
    assert_true(w->add.n + w->rem.n > 0);
    qp_placement_free(sp);
    qp_model_free(m);
    tset_clear(&target);
    tset_clear(&seed);
}

/* The same world searched with whole-model timing into dw, then region timing into dr (both
 * folders emptied first). */
static void run_both(struct world *w, const char *dw, const char *dr,
                     struct qp_autotune_report **rw, struct qp_autotune_report **rr) {
    rm_dir(dw);
    rm_dir(dr);
    g_timing = QP_AUTOTUNE_TIMING_WHOLE;
    *rw = run(w, dw);
    g_timing = QP_AUTOTUNE_TIMING_REGION;
    w->path[0] = 0;
    *rr = run(w, dr);
    g_timing = QP_AUTOTUNE_TIMING_AUTO;
}

/* Region-local timing ends on the placement whole-model timing ends on, when a sub-model is as
 * fast as the whole model would be with the same change; the log says which timing ran. When
 * the sub-models gain and the whole model loses, the check after the search keeps the seed. */
static void test_region_same(void **state) {
    (void)state;
    struct world w = {.by_change = 1, .sub_scale = 0.1};
    world_of_change(&w);
    const char *dw = QP_TEST_BINARY_DIR "/autotune_timing_whole";
    const char *dr = QP_TEST_BINARY_DIR "/autotune_timing_region";
    struct qp_autotune_report *rw = NULL, *rr = NULL;
    run_both(&w, dw, dr, &rw, &rr);
    assert_int_equal(rw->timing_region, 0);
    assert_int_equal(rr->timing_region, 1);
    assert_true(rw->n_adopted >= 1);
    assert_int_equal(rr->n_adopted, rw->n_adopted);
    assert_true(qp_placement_equal(rr->best, rw->best));
    assert_false(qp_placement_equal(rr->best, rr->seed));
    assert_true(rr->region_checked && !rr->region_reverted); /* the whole best is faster */
    assert_false(rw->region_checked);
    /* the guard and the medians of the report are whole-model ones */
    assert_true(rr->seed_median_ms > 0.9 && rr->best_median_ms < 0.6);
    FILE *f = fopen(QP_TEST_BINARY_DIR "/autotune_timing_region/log.jsonl", "r");
    assert_non_null(f);
    char line[65536];
    assert_non_null(fgets(line, sizeof line, f));
    assert_non_null(strstr(line, "\"timing\":\"region\""));
    fclose(f);
    /* pareto.json compares whole models: a region race's entry is the whole best's estimate less
     * the sub-model's gain (the sub-models here take a tenth of the whole model's time) */
    for (int k = 0; k < 2; k++) {
        cJSON *doc = load_json(k ? QP_TEST_BINARY_DIR "/autotune_timing_region/pareto.json"
                                 : QP_TEST_BINARY_DIR "/autotune_timing_whole/pareto.json");
        const cJSON *e;
        size_t n_schemes = 0;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc, "measured")) {
            const char *label = cJSON_GetObjectItemCaseSensitive(e, "label")->valuestring;
            int scheme = strcmp(label, "scheme") == 0;
            n_schemes += (size_t)scheme;
            assert_int_equal(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "estimated")),
                             k && scheme);
            if (scheme) assert_true(jnum(e, "median_ms") > 0.4);
        }
        assert_true(n_schemes >= 1);
        cJSON_Delete(doc);
    }
    qp_autotune_report_free(rw);
    qp_autotune_report_free(rr);
    /* sub-models that gain where the whole model loses: region timing adopts the change, the
     * check after the search races the whole models and keeps the seed */
    w.whole_slow = 1;
    w.sub_scale = 0;
    w.path[0] = 0;
    rm_dir(dr);
    g_timing = QP_AUTOTUNE_TIMING_REGION;
    rr = run(&w, dr);
    g_timing = QP_AUTOTUNE_TIMING_AUTO;
    assert_true(rr->n_adopted >= 1);
    assert_true(rr->region_checked && rr->region_reverted);
    assert_int_equal(rr->region_check.verdict, QP_LATENCY_SLOWER);
    assert_true(qp_placement_equal(rr->best, rr->seed));
    assert_true(rr->best_drift == rr->seed_drift);
    qp_autotune_report_free(rr);
    tset_clear(&w.add);
    tset_clear(&w.rem);
    rm_dir(dw);
    rm_dir(dr);
}

/* 1 when some line of the log holds `needle`. */
static int log_has(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[65536];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

/* Region timing, borderline sub-model races: the whole model gains 50% from the change, its
 * sub-model only `sub_gain`. At 0.7% (half the 1% minimum effect or more) the sub-model race
 * does not adopt, the whole-model race it escalates to does: the whole-model search's
 * placement. At 0.2% nothing escalates and nothing is adopted. */
static void test_region_borderline(void **state) {
    (void)state;
    struct world w = {.by_change = 1, .sub_gain = 0.007};
    world_of_change(&w);
    const char *dw = QP_TEST_BINARY_DIR "/autotune_border_whole";
    const char *dr = QP_TEST_BINARY_DIR "/autotune_border_region";
    struct qp_autotune_report *rw = NULL, *rr = NULL;
    run_both(&w, dw, dr, &rw, &rr);
    g_timing = QP_AUTOTUNE_TIMING_REGION;
    assert_true(rw->n_adopted >= 1);
    assert_int_equal(rw->n_escalated, 0);
    assert_true(rr->n_escalated >= 1);
    assert_true(rr->n_escalated_adopted >= 1);
    assert_true(qp_placement_equal(rr->best, rw->best));
    const char *log = QP_TEST_BINARY_DIR "/autotune_border_region/log.jsonl";
    assert_true(log_has(log, "\"timing\":\"escalated\""));
    assert_true(log_has(log, "\"escalated\":true"));
    /* resumed from its own state: every race replayed, the same placement */
    struct qp_placement *first = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_placement_copy(rr->best, &first, &err), QP_OK);
    size_t measured = rr->n_measured;
    qp_autotune_report_free(rr);
    w.path[0] = 0;
    rr = run(&w, dr);
    assert_int_equal(rr->n_replayed, measured);
    assert_true(qp_placement_equal(rr->best, first));
    qp_placement_free(first);
    qp_autotune_report_free(rr);
    /* far from the minimum effect: no whole-model race */
    w.sub_gain = 0.002;
    w.path[0] = 0;
    rm_dir(dr);
    rr = run(&w, dr);
    g_timing = QP_AUTOTUNE_TIMING_AUTO;
    assert_int_equal(rr->n_escalated, 0);
    assert_int_equal(rr->n_adopted, 0);
    assert_false(log_has(QP_TEST_BINARY_DIR "/autotune_border_region/log.jsonl",
                         "\"timing\":\"escalated\""));
    qp_autotune_report_free(rw);
    qp_autotune_report_free(rr);
    tset_clear(&w.add);
    tset_clear(&w.rem);
    rm_dir(dw);
    rm_dir(dr);
}

/* The first line of log `path`, parsed. */
static cJSON *first_log_line(const char *path) {
    FILE *f = fopen(path, "r");
    char line[65536];
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    cJSON *o = cJSON_Parse(line);
    assert_non_null(o);
    return o;
}

/* Region timing with representatives (docs/autotune.md "Representative instances"):
 * resnet_deep's three alike identity blocks are timed as one (log weight 3, a smaller
 * sub-model than region_all's), and a FASTER race of that sub-model is raced again on the
 * every-instance sub-model, which decides: the whole-model search's placement when both gain.
 * When only a sub-model holding part of the change gains (one block looks faster, the three
 * do not), nothing is adopted. When the sub-models gain and the whole model loses, region and
 * region_all both adopt and the check after the search reverts it. */
static void test_region_representatives(void **state) {
    (void)state;
    g_model = RESNET_DEEP;
    struct world w = {.by_change = 1, .sub_scale = 0.1};
    world_of_change(&w);
    const char *dw = QP_TEST_BINARY_DIR "/autotune_rep_whole";
    const char *dr = QP_TEST_BINARY_DIR "/autotune_rep_region";
    const char *log = QP_TEST_BINARY_DIR "/autotune_rep_region/log.jsonl";
    struct qp_autotune_report *rw = NULL, *rr = NULL;
    run_both(&w, dw, dr, &rw, &rr);
    assert_true(rw->n_adopted >= 1);
    assert_true(rr->n_confirmed >= 1);
    assert_int_equal(rr->n_adopted, rw->n_adopted);
    assert_true(rr->n_confirmed_adopted >= 1);
    assert_int_equal(rr->n_escalated, 0);
    assert_true(qp_placement_equal(rr->best, rw->best));
    assert_true(log_has(log, "\"weight\":3,"));
    assert_true(log_has(log, "\"timing\":\"confirmed\""));
    cJSON *first = first_log_line(log); /* the representatives' sub-model */
    double rep_nodes = jnum(first, "sub_nodes");
    cJSON_Delete(first);
    /* resumed from its own state: every race (confirmations included) replayed, the same
     * placement */
    struct qp_placement *was = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_placement_copy(rr->best, &was, &err), QP_OK);
    size_t measured = rr->n_measured;
    qp_autotune_report_free(rr);
    w.path[0] = 0;
    g_timing = QP_AUTOTUNE_TIMING_REGION;
    rr = run(&w, dr);
    assert_int_equal(rr->n_replayed, measured);
    assert_true(rr->n_confirmed >= 1);
    assert_true(qp_placement_equal(rr->best, was));
    qp_placement_free(was);
    qp_autotune_report_free(rw);
    qp_autotune_report_free(rr);
    /* a gain only part of the change shows: confirmed on every instance, not adopted */
    w.part_fast = 1;
    w.path[0] = 0;
    rm_dir(dr);
    g_timing = QP_AUTOTUNE_TIMING_REGION;
    rr = run(&w, dr);
    assert_true(rr->n_confirmed >= 1);
    assert_int_equal(rr->n_confirmed_adopted, 0);
    assert_int_equal(rr->n_adopted, 0);
    assert_true(qp_placement_equal(rr->best, rr->seed));
    qp_autotune_report_free(rr);
    w.part_fast = 0;
    /* the whole model loses from the change: both region timings adopt, the check reverts */
    w.whole_slow = 1;
    w.sub_scale = 0;
    for (int all = 0; all < 2; all++) {
        w.path[0] = 0;
        rm_dir(dr);
        g_timing = all ? QP_AUTOTUNE_TIMING_REGION_ALL : QP_AUTOTUNE_TIMING_REGION;
        rr = run(&w, dr);
        assert_true(rr->n_adopted >= 1);
        assert_true(rr->region_checked && rr->region_reverted);
        assert_true(qp_placement_equal(rr->best, rr->seed));
        assert_int_equal(rr->n_confirmed, all ? 0 : rr->n_confirmed);
        if (!all) assert_true(rr->n_confirmed_adopted >= 1);
        qp_autotune_report_free(rr);
    }
    g_timing = QP_AUTOTUNE_TIMING_AUTO;
    g_model = MODEL;
    assert_true(log_has(log, "\"timing\":\"region_all\""));
    assert_true(log_has(log, "\"weight\":1,"));
    first = first_log_line(log);
    assert_true(jnum(first, "sub_nodes") > rep_nodes);
    cJSON_Delete(first);
    tset_clear(&w.add);
    tset_clear(&w.rem);
    rm_dir(dw);
    rm_dir(dr);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_faster),
        cmocka_unit_test(test_none_faster),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_replicate),
        cmocka_unit_test(test_stop),
        cmocka_unit_test(test_fp8),
        cmocka_unit_test(test_drift_rejects),
        cmocka_unit_test(test_pareto),
        cmocka_unit_test(test_resume_drift),
        cmocka_unit_test(test_region_same),
        cmocka_unit_test(test_region_borderline),
        cmocka_unit_test(test_region_representatives),
        cmocka_unit_test(test_cache_cuts_races),
        cmocka_unit_test(test_node_filter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
