/* quantize --autotune (pipeline/quantize_autotune.h) on the `fixed` latency backend, so the
 * search's decisions are known: on vit_sdpa.onnx, a Q/DQ baseline holding ModelOpt #2123's
 * edges (into LayerNormalization, Softmax, Sqrt and Div, Cast -> Sqrt on a plan-time tensor)
 * seeds the search; every Q/DQ model is equally fast and twice the float model's speed, so
 * nothing is adopted, the guard passes, and the written model holds exactly the baseline's
 * placement. When no model is faster the guard fails and the model has no Q/DQ. A stop request
 * writes nothing; conflicting options are usage errors; the temporary folder goes. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "autotune/latency.h"
#include "ir/ir.h"
#include "pipeline/quantize_autotune.h"
#include "placement/diff.h"
#include "qplace/placement.h"

#define VIT      QP_TEST_DATA_DIR "/../unit/autotune/data/vit_sdpa.onnx"
#define BASE     QP_TEST_BINARY_DIR "/qa_vit_base.onnx"
#define OUT      QP_TEST_BINARY_DIR "/qa_vit_out.onnx"
#define PL_OUT   QP_TEST_BINARY_DIR "/qa_vit_out.json"
#define DIR_KEPT QP_TEST_BINARY_DIR "/qa_vit_dir"
#define TMP      QP_TEST_BINARY_DIR "/qa_tmp"

/* Latency by what a model holds: `qdq_ms` when it has a QuantizeLinear, else 1 ms. */
struct world {
    double qdq_ms;
};

static int has_q(const char *path) {
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    assert_int_equal(qp_model_load_file(path, NULL, &m, &err), QP_OK);
    int q = 0;
    for (size_t i = 0; i < m->graph->n_nodes && !q; i++)
        q = !m->graph->nodes[i].dead && strcmp(m->graph->nodes[i].op_type, "QuantizeLinear") == 0;
    qp_model_free(m);
    return q;
}

static double latency(void *ctx, const char *path, size_t k) {
    const struct world *w = ctx;
    return (has_q(path) ? w->qdq_ms : 1.0) * (1.0 + 0.001 * (double)(k % 5));
}

/* The trt placement plus every activation edge into LayerNormalization, Softmax, Sqrt and Div
 * (the consumers of #2123); *n_extra counts the edges added, *cast_sqrt says one is Cast ->
 * Sqrt. */
static struct qp_placement *vit_placement(size_t *n_extra, int *cast_sqrt) {
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    assert_int_equal(qp_model_load_file(VIT, NULL, &m, &err), QP_OK);
    struct qp_placement *p = NULL;
    assert_int_equal(qp_placement_trt(m, NULL, &p, &err), QP_OK);
    const struct qp_graph *g = m->graph;
    static const char *const ops[] = {"LayerNormalization", "Softmax", "Sqrt", "Div"};
    *n_extra = 0;
    *cast_sqrt = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const struct qp_node *n = &g->nodes[i];
        int want = 0;
        for (size_t k = 0; k < 4; k++)
            want |= strcmp(n->op_type, ops[k]) == 0;
        for (int j = 0; want && j < n->n_inputs; j++) {
            if (n->inputs[j] < 0) continue;
            const struct qp_value *v = &g->values[n->inputs[j]];
            if (v->initializer >= 0 || qp_placement_find(p, n->name, j, NULL, NULL)) continue;
            assert_int_equal(
                qp_placement_add_edge(p, v->name, n->name, j, "test.modelopt_2123", &err), QP_OK);
            (*n_extra)++;
            if (v->producer >= 0 && strcmp(g->nodes[v->producer].op_type, "Cast") == 0 &&
                strcmp(n->op_type, "Sqrt") == 0)
                *cast_sqrt = 1;
        }
    }
    qp_model_free(m);
    return p;
}

/* 1 when the Q/DQ of the model at `path` is exactly placement `p` (qplace diff's SAME). */
static int model_is(const char *path, const struct qp_placement *p) {
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    assert_int_equal(qp_model_load_file(path, NULL, &m, &err), QP_OK);
    struct qp_qdq_slots *a = NULL, *b = NULL;
    assert_int_equal(qp_qdq_slots_from_model(m->graph, &a, &err), QP_OK);
    assert_int_equal(qp_qdq_slots_from_placement(p, m->graph, &b, &err), QP_OK);
    struct qp_qdq_diff d;
    assert_int_equal(qp_qdq_diff(a, b, &d, &err), QP_OK);
    int same = qp_qdq_diff_same(&d);
    if (!same)
        fprintf(stderr, "model %s: %zu only in the model, %zu only in the placement\n", path,
                d.a_only[0] + d.a_only[1], d.b_only[0] + d.b_only[1]);
    qp_qdq_diff_release(&d);
    qp_qdq_slots_free(a);
    qp_qdq_slots_free(b);
    qp_model_free(m);
    return same;
}

static void rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[4200];
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' || (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    closedir(d);
    rmdir(dir);
}

static int dir_empty(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n == 0;
}

/* quantize's options for vit_sdpa written to `out` with fp32 high precision, one thread. */
static void vit_options(struct qp_quantize_options *q, const char *out) {
    qp_quantize_options_default(q);
    q->onnx_path = VIT;
    q->output_path = out;
    q->high_precision = QP_DTYPE_FLOAT;
    q->n_threads = 1;
}

/* The Q/DQ baseline: `p` written by quantize with fp32 high precision. */
static void write_baseline(const struct qp_placement *p) {
    struct qp_quantize_options q;
    vit_options(&q, BASE);
    q.placement = p;
    struct qp_error err = {0};
    struct qp_quantize_report *r = NULL;
    enum qp_status st = qp_quantize(&q, &r, &err);
    if (st != QP_OK) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(st, QP_OK);
    qp_quantize_report_free(r);
    assert_true(model_is(BASE, p));
}

static volatile sig_atomic_t g_stop;

/* quantize --autotune on vit_sdpa with the baseline and the world's latencies; the status. */
static enum qp_status run(struct world *w, const char *dir, struct qp_quantize_autotune_report **r,
                          struct qp_error *err) {
    struct qp_latency_backend *b = NULL;
    assert_int_equal(qp_latency_fixed_create(latency, w, &b, err), QP_OK);
    struct qp_quantize_options q;
    vit_options(&q, OUT);
    q.placement_out = PL_OUT;
    struct qp_autotune_options a;
    qp_autotune_options_default(&a);
    a.output_dir = dir;
    a.qdq_baseline = BASE;
    a.mode = QP_AUTOTUNE_QUICK;
    a.schemes_per_pattern = 2;
    a.high_precision = QP_DTYPE_FLOAT;
    a.n_threads = 1;
    a.backend = b;
    a.race.runs_per_round = 5;
    a.race.max_rounds = 2;
    a.stop = &g_stop;
    enum qp_status st = qp_quantize_autotune(&q, &a, r, err);
    qp_latency_backend_free(b);
    return st;
}

static void test_baseline_kept(void **state) {
    (void)state;
    size_t n_extra = 0;
    int cast_sqrt = 0;
    struct qp_placement *p = vit_placement(&n_extra, &cast_sqrt);
    assert_true(n_extra >= 10); /* 2 blocks x (LN, LN, Cast->Sqrt, Sqrt->Div, MatMul->Div, ...) */
    assert_true(cast_sqrt);
    write_baseline(p);
    rm_dir(DIR_KEPT);
    unlink(OUT);
    struct world w = {.qdq_ms = 0.5};
    struct qp_error err = {0};
    struct qp_quantize_autotune_report *r = NULL;
    enum qp_status st = run(&w, DIR_KEPT, &r, &err);
    if (st != QP_OK) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(st, QP_OK);
    assert_false(r->interrupted);
    assert_false(r->temporary_dir);
    assert_int_equal(r->search->n_adopted, 0);
    assert_true(r->search->guard_passed);
    assert_false(r->empty_placement);
    assert_string_equal(r->quantize->placement_source, "autotune");
    /* the seed is the baseline's placement, and the model written is exactly it */
    assert_true(model_is(BASE, r->search->seed));
    assert_true(model_is(OUT, p));
    assert_true(model_is(OUT, r->quantize->placement));
    struct qp_placement *pj = NULL, *po = NULL;
    assert_int_equal(qp_placement_load_file(DIR_KEPT "/placement.json", &pj, &err), QP_OK);
    assert_int_equal(qp_placement_load_file(PL_OUT, &po, &err), QP_OK);
    assert_true(model_is(OUT, pj));
    assert_true(model_is(OUT, po));
    assert_int_equal(access(DIR_KEPT "/autotune_state.json", F_OK), 0);
    qp_placement_free(pj);
    qp_placement_free(po);
    qp_quantize_autotune_report_free(r);
    qp_placement_free(p);
}

static void test_guard_failed(void **state) {
    (void)state;
    /* the baseline of the previous test; every model equally fast */
    assert_int_equal(access(BASE, F_OK), 0);
    assert_int_equal(setenv("TMPDIR", TMP, 1), 0);
    rm_dir(TMP);
    assert_int_equal(mkdir(TMP, 0777), 0);
    unlink(OUT);
    struct world w = {.qdq_ms = 1.0};
    struct qp_error err = {0};
    struct qp_quantize_autotune_report *r = NULL;
    assert_int_equal(run(&w, NULL, &r, &err), QP_OK);
    assert_false(r->search->guard_passed);
    assert_true(r->empty_placement);
    assert_true(r->temporary_dir);
    assert_false(has_q(OUT));
    struct qp_placement *none = qp_placement_create();
    assert_true(model_is(OUT, none));
    qp_placement_free(none);
    assert_true(dir_empty(TMP)); /* the search's folder is gone */
    qp_quantize_autotune_report_free(r);
    rmdir(TMP);
    unsetenv("TMPDIR");
}

static void test_stop_and_usage(void **state) {
    (void)state;
    unlink(OUT);
    unlink(PL_OUT);
    rm_dir(DIR_KEPT);
    struct world w = {.qdq_ms = 0.5};
    struct qp_error err = {0};
    struct qp_quantize_autotune_report *r = NULL;
    g_stop = 1;
    assert_int_equal(run(&w, DIR_KEPT, &r, &err), QP_OK);
    g_stop = 0;
    assert_true(r->interrupted);
    assert_null(r->quantize);
    assert_int_equal(access(OUT, F_OK), -1);
    assert_int_equal(access(PL_OUT, F_OK), -1);
    qp_quantize_autotune_report_free(r);
    /* a placement of quantize's own is refused before anything runs */
    struct qp_quantize_options q;
    qp_quantize_options_default(&q);
    q.onnx_path = VIT;
    q.output_path = OUT;
    q.rules_path = "rules.json";
    struct qp_autotune_options a;
    qp_autotune_options_default(&a);
    struct qp_latency_backend *b = NULL;
    assert_int_equal(qp_latency_fixed_create(latency, &w, &b, &err), QP_OK);
    a.backend = b;
    a.output_dir = QP_TEST_BINARY_DIR "/qa_usage";
    r = NULL;
    assert_int_equal(qp_quantize_autotune(&q, &a, &r, &err), QP_ERR_USAGE);
    assert_null(r);
    assert_non_null(strstr(err.msg, "cannot be combined"));
    assert_int_equal(access(a.output_dir, F_OK), -1);
    assert_int_equal(access(OUT, F_OK), -1);
    qp_latency_backend_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_baseline_kept),
        cmocka_unit_test(test_guard_failed),
        cmocka_unit_test(test_stop_and_usage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
