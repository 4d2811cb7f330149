/* Edge overlays, partial re-execution and If on small graphs built with the IR:
 *  - an overlay run equals a run of the graph rewritten with real QuantizeLinear ->
 *    DequantizeLinear pairs on the same edges, bit for bit (random graphs, int8/uint8/FP8,
 *    per tensor and per channel, on activations and on weights);
 *  - partial re-execution equals a full run bit for bit over a sequence of overlay sets, with a
 *    large and a tiny cache budget, and computes only the nodes downstream of changed edges;
 *  - bypass: a bypassed overlay equals no overlay bit for bit (full and partial runs), toggling
 *    flags keeps the plan (weights: one kernel preparation per combination, reused), and the
 *    cases that must re-plan do (new parameters on a weight, a toggle on a folded constant);
 *  - If: the taken branch runs, outer values are read, constant conditions plan one branch,
 *    branches whose output shapes differ are refused at creation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ir/ir.h"
#include "qplace/session.h"
#include "runtime/runtime.h"

#include "rt_testmodel.h"

#define D 8 /* every activation is [2, D]; weights are [D, D] */

static struct qp_dim act_dims[2] = {{2, NULL}, {D, NULL}};
static const int64_t w_dims[2] = {D, D};

static uint32_t rng_state;
static uint32_t rnd(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return rng_state >> 8;
}
static float frand(void) {
    return (float)(rnd() % 20001) / 10000.0f - 1.0f;
}

static void add(struct qp_graph *g, const char *name, const char *op, int ni, const char *a,
                const char *b, const char *out) {
    const char *ins[2] = {a, b};
    struct qp_error err = {0};
    assert_int_equal(qp_graph_add_node(g, name, op, "", ni, ins, 1, &out, NULL, &err), QP_OK);
}

/* A random DAG: x -> n nodes (Relu, Sigmoid, Add, Mul, MatMul with a weight), each reading
 * earlier activations; the last two activations are outputs. Same seed, same graph. */
static struct qp_model *random_model(uint32_t seed, int n) {
    rng_state = seed;
    struct qp_model *m = model_with_x(2, act_dims);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    char names[64][16];
    snprintf(names[0], sizeof names[0], "x");
    for (int k = 1; k <= n; k++) {
        char node[16], w[16];
        snprintf(names[k], sizeof names[k], "a%d", k);
        snprintf(node, sizeof node, "n%d", k);
        const char *p = names[rnd() % (unsigned)k];
        const char *q = names[rnd() % (unsigned)k];
        switch (rnd() % 5) {
        case 0:
            add(g, node, "Relu", 1, p, NULL, names[k]);
            break;
        case 1:
            add(g, node, "Sigmoid", 1, p, NULL, names[k]);
            break;
        case 2:
            add(g, node, "Add", 2, p, q, names[k]);
            break;
        case 3:
            add(g, node, "Mul", 2, p, q, names[k]);
            break;
        default: {
            float wv[D * D];
            for (int i = 0; i < D * D; i++)
                wv[i] = frand() * 0.5f;
            snprintf(w, sizeof w, "w%d", k);
            graph_add_init(m, g, w, QP_DTYPE_FLOAT, 2, w_dims, wv, sizeof wv);
            add(g, node, "MatMul", 2, p, w, names[k]);
        }
        }
    }
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, names[n]), &err), QP_OK);
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, names[n - 1]), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

/* Parameters of one overlay, with storage. */
struct ovp {
    struct qp_overlay ov;
    char node[16];
    float scale[D];
    uint8_t zp[D];
};

static void random_overlay(const struct qp_graph *g, struct ovp *o, int n_nodes) {
    memset(o, 0, sizeof *o);
    int k = 1 + (int)(rnd() % (unsigned)n_nodes);
    snprintf(o->node, sizeof o->node, "n%d", k);
    const struct qp_node *nd = &g->nodes[qp_graph_find_node(g, o->node)];
    o->ov.node = o->node;
    o->ov.input = (int)(rnd() % (unsigned)nd->n_inputs);
    static const enum qp_dtype types[3] = {QP_DTYPE_INT8, QP_DTYPE_UINT8, QP_DTYPE_FLOAT8E4M3FN};
    o->ov.qtype = types[rnd() % 3];
    o->ov.saturate = 1;
    int per_axis = rnd() % 2;
    o->ov.n_params = per_axis ? D : 1;
    o->ov.axis = 1;
    for (size_t i = 0; i < o->ov.n_params; i++) {
        o->scale[i] = 0.002f + (float)(rnd() % 1000) / 40000.0f;
        o->zp[i] = o->ov.qtype == QP_DTYPE_UINT8  ? (uint8_t)(100 + rnd() % 50)
                   : o->ov.qtype == QP_DTYPE_INT8 ? (uint8_t)(int8_t)((int)(rnd() % 21) - 10)
                                                  : 0;
    }
    o->ov.scale = o->scale;
    o->ov.zero_point = rnd() % 4 ? o->zp : NULL;
    if (o->ov.qtype == QP_DTYPE_FLOAT8E4M3FN) o->ov.zero_point = NULL;
}

/* Rewrites `m` with QuantizeLinear -> DequantizeLinear on every overlay's edge. */
static void rewrite_qdq(struct qp_model *m, const struct ovp *ovs, int n) {
    struct qp_error err = {0};
    for (int i = 0; i < n; i++)
        insert_qdq(m, &ovs[i].ov, i);
    assert_int_equal(qp_graph_toposort(m->graph, &err), QP_OK);
}

static void fill_input(float *x, uint32_t seed) {
    rng_state = seed;
    for (int i = 0; i < 2 * D; i++)
        x[i] = frand() * 2.0f;
}

/* Runs `s` (fully, or partially) and copies both outputs into out[2][2*D]. */
static void run_outputs(struct qp_session *s, const float *x, int partial, float out[2][2 * D]) {
    struct qp_error err = {0};
    struct qp_array in;
    int64_t dims[2] = {2, D};
    assert_int_equal(
        qp_array_view(&in, QP_DTYPE_FLOAT, 2, dims, (void *)x, sizeof(float) * 2 * D, &err), QP_OK);
    if (partial)
        assert_int_equal(qp_session_run_partial(s, &err), QP_OK);
    else
        assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
    for (size_t o = 0; o < 2; o++) {
        struct qp_array a;
        assert_int_equal(qp_session_output(s, o, &a, &err), QP_OK);
        assert_int_equal(a.nbytes, sizeof(float) * 2 * D);
        memcpy(out[o], a.data, a.nbytes);
    }
}

static void overlays_of(const struct ovp *o, int n, struct qp_overlay *out) {
    for (int i = 0; i < n; i++)
        out[i] = o[i].ov;
}

/* Picks n overlays on distinct edges. */
static int pick_overlays(const struct qp_graph *g, int n_nodes, struct ovp *o, int n) {
    int made = 0;
    for (int tries = 0; made < n && tries < 100; tries++) {
        random_overlay(g, &o[made], n_nodes);
        int dup = 0;
        for (int j = 0; j < made; j++)
            dup |= strcmp(o[j].node, o[made].node) == 0 && o[j].ov.input == o[made].ov.input;
        if (!dup) made++;
    }
    return made;
}

static void test_overlay_equals_qdq_graph(void **state) {
    (void)state;
    int n_nonzero = 0;
    for (uint32_t seed = 1; seed <= 40; seed++) {
        const int n_nodes = 6 + (int)(seed % 7);
        struct qp_model *m = random_model(seed, n_nodes);
        rng_state = seed * 7919u;
        struct ovp ovs[4];
        int n_ov = pick_overlays(m->graph, n_nodes, ovs, 1 + (int)(seed % 4));
        struct qp_model *mq = random_model(seed, n_nodes);
        rewrite_qdq(mq, ovs, n_ov);
        struct qp_error err = {0};
        struct qp_session *s = NULL, *sq = NULL;
        assert_int_equal(qp_session_create(m, NULL, 0, NULL, &s, &err), QP_OK);
        assert_int_equal(qp_session_create(mq, NULL, 0, NULL, &sq, &err), QP_OK);
        struct qp_overlay list[4];
        overlays_of(ovs, n_ov, list);
        assert_int_equal(qp_session_set_overlays(s, (size_t)n_ov, list, &err), QP_OK);
        float x[2 * D], a[2][2 * D], b[2][2 * D], plain[2][2 * D];
        fill_input(x, seed);
        run_outputs(s, x, 0, a);
        run_outputs(sq, x, 0, b);
        assert_memory_equal(a, b, sizeof a);
        /* The overlays did something (at least for most seeds). */
        assert_int_equal(qp_session_set_overlays(s, 0, NULL, &err), QP_OK);
        run_outputs(s, x, 0, plain);
        n_nonzero += memcmp(plain, a, sizeof a) != 0;
        qp_session_free(s);
        qp_session_free(sq);
        qp_model_free(m);
        qp_model_free(mq);
    }
    assert_true(n_nonzero >= 30);
}

/* Nodes downstream of (and including) the consumers of the given node names. */
static size_t downstream(const struct qp_graph *g, const char *const *names, int n) {
    unsigned char *mark = calloc(g->n_nodes, 1);
    assert_non_null(mark);
    for (int i = 0; i < n; i++)
        mark[qp_graph_find_node(g, names[i])] = 1;
    size_t count = 0;
    for (size_t k = 0; k < g->n_topo; k++) {
        const struct qp_node *nd = &g->nodes[g->topo[k]];
        for (int i = 0; i < nd->n_inputs && !mark[g->topo[k]]; i++) {
            int v = nd->inputs[i];
            if (v >= 0 && g->values[v].producer >= 0 && mark[g->values[v].producer])
                mark[g->topo[k]] = 1;
        }
        count += mark[g->topo[k]];
    }
    free(mark);
    return count;
}

static void partial_sequence(size_t budget) {
    for (uint32_t seed = 100; seed < 120; seed++) {
        const int n_nodes = 8 + (int)(seed % 5);
        struct qp_model *m = random_model(seed, n_nodes);
        struct qp_error err = {0};
        struct qp_session *s = NULL, *full = NULL, *bor = NULL;
        assert_int_equal(qp_session_create(m, NULL, 0, NULL, &s, &err), QP_OK);
        assert_int_equal(qp_session_create(m, NULL, 0, NULL, &full, &err), QP_OK);
        struct qp_session_options lane1 = {.lane = 1};
        assert_int_equal(qp_session_create(m, &lane1, 0, NULL, &bor, &err), QP_OK);
        float x[2 * D], a[2][2 * D], b[2][2 * D];
        fill_input(x, seed);
        rng_state = seed * 31u;
        struct ovp ref[2];
        int n_ref = pick_overlays(m->graph, n_nodes, ref, 2);
        struct qp_overlay list[3];
        overlays_of(ref, n_ref, list);
        /* Reference run with overlays `ref`. */
        qp_session_set_cache(s, budget);
        assert_int_equal(qp_session_set_overlays(s, (size_t)n_ref, list, &err), QP_OK);
        run_outputs(s, x, 0, a);
        assert_int_equal(qp_session_nodes_executed(s), (size_t)n_nodes);
        /* A session on another lane reads that reference where s keeps it. */
        assert_int_equal(qp_session_borrow_cache(bor, s, &err), QP_OK);
        for (int probe = 0; probe < 5; probe++) {
            struct ovp cur[3];
            int n_cur;
            const char *changed[6];
            int n_changed = 0;
            if (probe == 0) { /* unchanged: nothing to compute */
                memcpy(cur, ref, sizeof ref);
                n_cur = n_ref;
            } else if (probe == 1) { /* one overlay removed */
                memcpy(cur, ref, sizeof ref);
                n_cur = n_ref - 1;
                changed[n_changed++] = ref[n_ref - 1].node;
            } else { /* the reference's plus a new edge, or new scales */
                memcpy(cur, ref, sizeof ref);
                n_cur = n_ref;
                if (probe == 4) {
                    cur[0].scale[0] *= 1.5f;
                    changed[n_changed++] = cur[0].node;
                } else {
                    struct ovp extra;
                    int dup;
                    do {
                        random_overlay(m->graph, &extra, n_nodes);
                        dup = 0;
                        for (int j = 0; j < n_cur; j++)
                            dup |= strcmp(cur[j].node, extra.node) == 0 &&
                                   cur[j].ov.input == extra.ov.input;
                    } while (dup);
                    cur[n_cur] = extra;
                    changed[n_changed++] = cur[n_cur++].node;
                }
            }
            struct qp_overlay cl[3];
            overlays_of(cur, n_cur, cl);
            for (int i = 0; i < n_cur; i++) { /* pointers into `cur` */
                cl[i].node = cur[i].node;
                cl[i].scale = cur[i].scale;
                if (cl[i].zero_point) cl[i].zero_point = cur[i].zp;
            }
            assert_int_equal(qp_session_set_overlays(s, (size_t)n_cur, cl, &err), QP_OK);
            assert_int_equal(qp_session_set_overlays(full, (size_t)n_cur, cl, &err), QP_OK);
            run_outputs(s, x, 1, a);
            run_outputs(full, x, 0, b);
            assert_memory_equal(a, b, sizeof a);
            float c[2][2 * D];
            assert_int_equal(qp_session_set_overlays(bor, (size_t)n_cur, cl, &err), QP_OK);
            run_outputs(bor, x, 1, c);
            assert_memory_equal(c, b, sizeof c);
            assert_int_equal(qp_session_nodes_executed(bor), qp_session_nodes_executed(s));
            size_t want = downstream(m->graph, changed, n_changed);
            if (budget > 1000000)
                assert_int_equal(qp_session_nodes_executed(s), want);
            else
                assert_true(qp_session_nodes_executed(s) >= want);
            assert_int_equal(qp_session_nodes_executed(full), (size_t)n_nodes);
        }
        qp_session_free(s); /* before the borrower: it lets go without touching s's arrays */
        qp_session_free(bor);
        qp_session_free(full);
        qp_model_free(m);
    }
}

static void test_partial_equals_full(void **state) {
    (void)state;
    partial_sequence((size_t)64 << 20);
}

static void test_partial_small_budget(void **state) {
    (void)state;
    partial_sequence(300); /* about two cached tensors: the rest is recomputed */
}

/* x -> A(Relu) -> B(Sigmoid) -> D(Add(B, C)); A -> C(Mul(A, A)) -> D; outputs d and b. */
static struct qp_model *abcd_model(void) {
    struct qp_model *m = model_with_x(2, act_dims);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    add(g, "A", "Relu", 1, "x", NULL, "a");
    add(g, "B", "Sigmoid", 1, "a", NULL, "b");
    add(g, "C", "Mul", 2, "a", "a", "c");
    add(g, "D", "Add", 2, "b", "c", "d");
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "d"), &err), QP_OK);
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "b"), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

/* An overlay on C's input recomputes C and D only. */
static void test_partial_counts(void **state) {
    (void)state;
    struct qp_model *m = abcd_model();
    struct qp_error err = {0};
    struct qp_session *s = NULL;
    assert_int_equal(qp_session_create(m, NULL, 0, NULL, &s, &err), QP_OK);
    float xv[2 * D], a[2][2 * D], b[2][2 * D];
    fill_input(xv, 5);
    assert_int_equal(qp_session_run_partial(s, &err), QP_ERR_USAGE); /* no reference yet */
    qp_session_set_cache(s, 1 << 20);
    run_outputs(s, xv, 0, a);
    assert_int_equal(qp_session_nodes_executed(s), 4);
    float scale = 0.05f;
    struct qp_overlay ov = {
        .node = "C", .input = 1, .qtype = QP_DTYPE_INT8, .n_params = 1, .scale = &scale};
    assert_int_equal(qp_session_set_overlays(s, 1, &ov, &err), QP_OK);
    run_outputs(s, xv, 1, b);
    assert_int_equal(qp_session_nodes_executed(s), 2);
    assert_memory_equal(a[1], b[1], sizeof a[1]); /* b: untouched */
    assert_memory_not_equal(a[0], b[0], sizeof a[0]);
    ov.node = "B";
    ov.input = 0;
    assert_int_equal(qp_session_set_overlays(s, 1, &ov, &err), QP_OK);
    run_outputs(s, xv, 1, b);
    /* Compared with the reference (no overlays), not with the last run: B and D. */
    assert_int_equal(qp_session_nodes_executed(s), 2);
    /* Bad overlays: named errors, previous overlays kept. */
    ov.node = "nope";
    assert_int_equal(qp_session_set_overlays(s, 1, &ov, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "nope"));
    ov.node = "D";
    ov.input = 2;
    assert_int_equal(qp_session_set_overlays(s, 1, &ov, &err), QP_ERR_BAD_INPUT);
    ov.input = 0;
    scale = -1;
    assert_int_equal(qp_session_set_overlays(s, 1, &ov, &err), QP_ERR_BAD_INPUT);
    scale = 0.05f;
    ov.qtype = QP_DTYPE_INT32;
    assert_int_equal(qp_session_set_overlays(s, 1, &ov, &err), QP_ERR_UNSUPPORTED);
    ov.qtype = QP_DTYPE_INT8;
    ov.n_params = 3; /* axis 1 has length D */
    float sc3[3] = {1, 1, 1};
    ov.scale = sc3;
    assert_int_equal(qp_session_set_overlays(s, 1, &ov, &err), QP_OK);
    assert_int_equal(qp_session_run_partial(s, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "'D'"));
    qp_session_free(s);
    qp_model_free(m);
}

/* qp_session_borrow_cache: what it refuses, how long a borrow lasts, lanes. */
static void test_borrow_cache(void **state) {
    (void)state;
    struct qp_model *m = abcd_model(), *m2 = model_with_x(2, act_dims);
    struct qp_error err = {0};
    add(m2->graph, "A", "Relu", 1, "x", NULL, "a");
    assert_int_equal(qp_graph_add_output(m2->graph, qp_graph_value(m2->graph, "a"), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(m2->graph, &err), QP_OK);
    struct qp_session_options bad = {.lane = QP_SESSION_MAX_LANES};
    struct qp_session *s = NULL, *b = NULL, *c = NULL, *other = NULL, *full = NULL;
    assert_int_equal(qp_session_create(m, &bad, 0, NULL, &s, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "lane"));
    bad.lane = -1;
    assert_int_equal(qp_session_create(m, &bad, 0, NULL, &s, &err), QP_ERR_USAGE);
    struct qp_session_options lane[3] = {
        {.lane = 0}, {.lane = 7}, {.lane = QP_SESSION_MAX_LANES - 1}};
    assert_int_equal(qp_session_create(m, &lane[0], 0, NULL, &s, &err), QP_OK);
    assert_int_equal(qp_session_create(m, &lane[1], 0, NULL, &b, &err), QP_OK);
    assert_int_equal(qp_session_create(m, &lane[2], 0, NULL, &c, &err), QP_OK);
    assert_int_equal(qp_session_create(m2, NULL, 0, NULL, &other, &err), QP_OK);
    assert_int_equal(qp_session_create(m, NULL, 0, NULL, &full, &err), QP_OK);
    assert_int_equal(qp_session_borrow_cache(b, s, &err), QP_ERR_USAGE); /* nothing recorded */
    assert_non_null(strstr(err.msg, "no reference"));
    assert_int_equal(qp_session_borrow_cache(s, s, &err), QP_ERR_USAGE);
    assert_int_equal(qp_session_borrow_cache(NULL, s, &err), QP_ERR_USAGE);
    float x1[2 * D], x2[2 * D], ref[2][2 * D], got[2][2 * D], want[2][2 * D];
    fill_input(x1, 11);
    fill_input(x2, 12);
    qp_session_set_cache(s, 1 << 20);
    run_outputs(s, x1, 0, ref);
    assert_int_equal(qp_session_borrow_cache(other, s, &err), QP_ERR_USAGE); /* another graph */
    assert_non_null(strstr(err.msg, "same model"));
    qp_session_set_cache(b, 1 << 20); /* b's own budget and buffers go when it borrows */
    run_outputs(b, x2, 0, got);
    assert_int_equal(qp_session_borrow_cache(b, s, &err), QP_OK);
    assert_int_equal(qp_session_borrow_cache(c, b, &err), QP_ERR_USAGE); /* not b's own */
    float scale = 0.05f;
    struct qp_overlay ov = {
        .node = "C", .input = 1, .qtype = QP_DTYPE_INT8, .n_params = 1, .scale = &scale};
    assert_int_equal(qp_session_set_overlays(b, 1, &ov, &err), QP_OK);
    assert_int_equal(qp_session_set_overlays(full, 1, &ov, &err), QP_OK);
    run_outputs(b, x2, 1, got); /* from s's reference, input x1 (x2 is not read) */
    assert_int_equal(qp_session_nodes_executed(b), 2);
    run_outputs(full, x1, 0, want);
    assert_memory_equal(got, want, sizeof got);
    /* b's full runs record nothing and leave the borrow (and s's reference) as they were. */
    run_outputs(b, x2, 0, got);
    run_outputs(b, x2, 1, got);
    assert_memory_equal(got, want, sizeof got);
    run_outputs(s, x2, 1, got); /* s, without overlays, reads its own reference */
    assert_memory_equal(got, ref, sizeof got);
    /* s records a new reference: b borrows again to read it. */
    run_outputs(s, x2, 0, ref);
    assert_int_equal(qp_session_borrow_cache(b, s, &err), QP_OK);
    run_outputs(b, x1, 1, got);
    run_outputs(full, x2, 0, want);
    assert_memory_equal(got, want, sizeof got);
    /* Setting a budget ends the borrow. */
    qp_session_set_cache(b, 1 << 20);
    assert_int_equal(qp_session_run_partial(b, &err), QP_ERR_USAGE);
    /* Several borrowers at once. */
    assert_int_equal(qp_session_borrow_cache(b, s, &err), QP_OK);
    assert_int_equal(qp_session_borrow_cache(c, s, &err), QP_OK);
    assert_int_equal(qp_session_set_overlays(c, 1, &ov, &err), QP_OK);
    run_outputs(c, x1, 1, got);
    assert_memory_equal(got, want, sizeof got);
    qp_session_free(s);
    qp_session_free(b);
    qp_session_free(c);
    qp_session_free(other);
    qp_session_free(full);
    qp_model_free(m);
    qp_model_free(m2);
}

/* ---- bypass ------------------------------------------------------------------------------- */

/* One session holds every overlay and toggles bypass flags; another is given exactly the
 * applied overlays each time; a third runs partially from an all-bypassed reference. All three
 * agree bit for bit, the first two sessions keep their one plan, and the partial runs compute
 * exactly the nodes downstream of the toggled edges. */
static void test_bypass_equals_subset(void **state) {
    (void)state;
    int n_differ = 0;
    for (uint32_t seed = 200; seed < 230; seed++) {
        const int n_nodes = 6 + (int)(seed % 7);
        struct qp_model *m = random_model(seed, n_nodes);
        rng_state = seed * 104729u;
        struct ovp ovs[6];
        int n_ov = pick_overlays(m->graph, n_nodes, ovs, 2 + (int)(seed % 5));
        struct qp_error err = {0};
        struct qp_session *s = NULL, *sub = NULL, *part = NULL;
        assert_int_equal(qp_session_create(m, NULL, 0, NULL, &s, &err), QP_OK);
        assert_int_equal(qp_session_create(m, NULL, 0, NULL, &sub, &err), QP_OK);
        assert_int_equal(qp_session_create(m, NULL, 0, NULL, &part, &err), QP_OK);
        struct qp_overlay all[6], some[6];
        overlays_of(ovs, n_ov, all);
        for (int i = 0; i < n_ov; i++)
            all[i].bypass = 1;
        float x[2 * D], a[2][2 * D], b[2][2 * D], c[2][2 * D], plain[2][2 * D];
        fill_input(x, seed);
        run_outputs(sub, x, 0, plain); /* no overlays at all */
        assert_int_equal(qp_session_set_overlays(s, (size_t)n_ov, all, &err), QP_OK);
        run_outputs(s, x, 0, a);
        assert_memory_equal(a, plain, sizeof a); /* all bypassed == none */
        assert_int_equal(s->n_plans, 1);
        const struct rt_plan *planned = s->plans[0];
        qp_session_set_cache(part, (size_t)64 << 20);
        assert_int_equal(qp_session_set_overlays(part, (size_t)n_ov, all, &err), QP_OK);
        run_outputs(part, x, 0, c);
        /* Every pattern twice (the second time reuses the weight preparations). */
        for (int rep = 0; rep < 2; rep++)
            for (unsigned pat = 0; pat < (1u << n_ov); pat++) {
                int n_some = 0;
                const char *changed[6];
                for (int i = 0; i < n_ov; i++) {
                    all[i].bypass = !(pat >> i & 1u);
                    if (!all[i].bypass) {
                        some[n_some++] = ovs[i].ov;
                        changed[n_some - 1] = ovs[i].node;
                    }
                }
                assert_int_equal(qp_session_set_overlays(s, (size_t)n_ov, all, &err), QP_OK);
                assert_int_equal(qp_session_set_overlays(part, (size_t)n_ov, all, &err), QP_OK);
                assert_int_equal(qp_session_set_overlays(sub, (size_t)n_some, some, &err), QP_OK);
                run_outputs(s, x, 0, a);
                run_outputs(sub, x, 0, b);
                run_outputs(part, x, 1, c);
                assert_memory_equal(a, b, sizeof a);
                assert_memory_equal(c, b, sizeof c);
                assert_int_equal(qp_session_nodes_executed(part),
                                 downstream(m->graph, changed, n_some));
                assert_int_equal(s->n_plans, 1);
                assert_ptr_equal(s->plans[0], planned);
                n_differ += memcmp(a, plain, sizeof a) != 0;
            }
        qp_session_free(s);
        qp_session_free(sub);
        qp_session_free(part);
        qp_model_free(m);
    }
    assert_true(n_differ > 100);
}

/* y = Gemm(x, W, C) + MatMul(x, Transpose(V)): weight overlays on W and C (two constants of one
 * node: four preparations), and one on V, whose consumer Transpose is evaluated at plan time. */
static struct qp_model *weights_model(void) {
    struct qp_model *m = model_with_x(2, act_dims);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    rng_state = 77;
    float w[D * D], v[D * D], cb[D];
    for (int i = 0; i < D * D; i++) {
        w[i] = frand();
        v[i] = frand();
    }
    for (int i = 0; i < D; i++)
        cb[i] = frand();
    int64_t cd = D;
    graph_add_init(m, g, "W", QP_DTYPE_FLOAT, 2, w_dims, w, sizeof w);
    graph_add_init(m, g, "V", QP_DTYPE_FLOAT, 2, w_dims, v, sizeof v);
    graph_add_init(m, g, "C", QP_DTYPE_FLOAT, 1, &cd, cb, sizeof cb);
    const char *gin[3] = {"x", "W", "C"}, *gout = "g";
    assert_int_equal(qp_graph_add_node(g, "gemm", "Gemm", "", 3, gin, 1, &gout, NULL, &err), QP_OK);
    add(g, "tr", "Transpose", 1, "V", NULL, "vt");
    add(g, "mm", "MatMul", 2, "x", "vt", "h");
    add(g, "sum", "Add", 2, "g", "h", "y");
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "y"), &err), QP_OK);
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "h"), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

static void test_bypass_weights(void **state) {
    (void)state;
    struct qp_model *m = weights_model();
    struct qp_error err = {0};
    float sw[D], sc = 0.02f, sv = 0.01f;
    for (int i = 0; i < D; i++)
        sw[i] = 0.004f + 0.001f * (float)i;
    struct qp_overlay all[3] = {
        {.node = "gemm", .input = 1, .qtype = QP_DTYPE_INT8, .axis = 1, .n_params = D, .scale = sw},
        {.node = "gemm", .input = 2, .qtype = QP_DTYPE_INT8, .n_params = 1, .scale = &sc},
        {.node = "tr", .input = 0, .qtype = QP_DTYPE_INT8, .n_params = 1, .scale = &sv},
    };
    struct qp_session *s = NULL;
    assert_int_equal(qp_session_create(m, NULL, 0, NULL, &s, &err), QP_OK);
    float x[2 * D], a[2][2 * D], b[2][2 * D], first[8][2][2 * D];
    fill_input(x, 3);
    /* W and C: every combination twice, against fresh sessions with exactly those overlays. */
    all[2].bypass = 1;
    const struct rt_plan *planned = NULL;
    for (int rep = 0; rep < 2; rep++)
        for (unsigned pat = 0; pat < 4; pat++) {
            struct qp_overlay some[2];
            size_t n_some = 0;
            for (int i = 0; i < 2; i++) {
                all[i].bypass = !(pat >> i & 1u);
                if (!all[i].bypass) some[n_some++] = all[i];
            }
            assert_int_equal(qp_session_set_overlays(s, 3, all, &err), QP_OK);
            run_outputs(s, x, 0, a);
            if (!planned) planned = s->plans[0];
            assert_int_equal(s->n_plans, 1);
            assert_ptr_equal(s->plans[0], planned);
            struct qp_session *f = NULL;
            assert_int_equal(qp_session_create(m, NULL, 0, NULL, &f, &err), QP_OK);
            assert_int_equal(qp_session_set_overlays(f, n_some, some, &err), QP_OK);
            run_outputs(f, x, 0, b);
            qp_session_free(f);
            assert_memory_equal(a, b, sizeof a);
            if (rep == 0) memcpy(first[pat], a, sizeof a);
            assert_memory_equal(first[pat], a, sizeof a);
        }
    assert_memory_not_equal(first[0], first[3], sizeof first[0]);
    /* The Gemm step holds one preparation per combination. */
    const struct rt_plan *p = s->plans[0];
    int found = 0;
    for (size_t k = 0; k < p->n_steps; k++)
        if (p->steps[k].kind == RT_STEP_NODE && p->steps[k].n_var) {
            assert_int_equal(p->steps[k].n_var, 4);
            found++;
        }
    assert_int_equal(found, 1);
    /* New parameters on a weight re-plan (its fake-quantized copy is made at plan time). */
    all[0].bypass = all[1].bypass = 0;
    sw[0] *= 3.0f;
    assert_int_equal(qp_session_set_overlays(s, 3, all, &err), QP_OK);
    run_outputs(s, x, 0, a);
    struct qp_session *f = NULL;
    assert_int_equal(qp_session_create(m, NULL, 0, NULL, &f, &err), QP_OK);
    assert_int_equal(qp_session_set_overlays(f, 2, all, &err), QP_OK);
    run_outputs(f, x, 0, b);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, first[3], sizeof a);
    /* A toggle on V, whose consumer Transpose is folded at plan time, re-plans too. */
    for (int on = 1; on >= 0; on--) {
        all[2].bypass = !on;
        assert_int_equal(qp_session_set_overlays(s, 3, all, &err), QP_OK);
        assert_int_equal(qp_session_set_overlays(f, on ? 3 : 2, all, &err), QP_OK);
        run_outputs(s, x, 0, a);
        run_outputs(f, x, 0, b);
        assert_memory_equal(a, b, sizeof a);
        assert_true(s->plans[0]->ov_baked[2] & RT_OV_BYPASS_BAKED);
    }
    /* Partial runs from an all-bypassed reference: toggling W recomputes gemm and sum only. */
    for (int i = 0; i < 3; i++)
        all[i].bypass = 1;
    qp_session_set_cache(s, 1 << 20);
    assert_int_equal(qp_session_set_overlays(s, 3, all, &err), QP_OK);
    run_outputs(s, x, 0, a);
    all[0].bypass = 0;
    assert_int_equal(qp_session_set_overlays(s, 3, all, &err), QP_OK);
    assert_int_equal(qp_session_set_overlays(f, 1, all, &err), QP_OK);
    run_outputs(s, x, 1, a);
    run_outputs(f, x, 0, b);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(qp_session_nodes_executed(s), 2);
    qp_session_free(f);
    qp_session_free(s);
    qp_model_free(m);
}

/* A session of m with a cache of two [2, D] tensors: a reference run (input fill_input(seed))
 * with *ov bypassed, then *ov applied (ov->bypass becomes 0): the partial run computes
 * `n_nodes` nodes and equals a fresh session's full run bit for bit. Returns the session. */
static struct qp_session *toggle_partial(const struct qp_model *m, struct qp_overlay *ov,
                                         uint32_t seed, size_t n_nodes) {
    struct qp_error err = {0};
    struct qp_session *s = NULL, *f = NULL;
    assert_int_equal(qp_session_create(m, NULL, 0, NULL, &s, &err), QP_OK);
    assert_int_equal(qp_session_create(m, NULL, 0, NULL, &f, &err), QP_OK);
    float xv[2 * D], a[2 * D], b[2 * D];
    fill_input(xv, seed);
    struct qp_array in, o;
    int64_t dims[2] = {2, D};
    assert_int_equal(qp_array_view(&in, QP_DTYPE_FLOAT, 2, dims, xv, sizeof xv, &err), QP_OK);
    qp_session_set_cache(s, 2 * sizeof(float) * 2 * D);
    ov->bypass = 1;
    assert_int_equal(qp_session_set_overlays(s, 1, ov, &err), QP_OK);
    assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
    ov->bypass = 0;
    assert_int_equal(qp_session_set_overlays(s, 1, ov, &err), QP_OK);
    assert_int_equal(qp_session_set_overlays(f, 1, ov, &err), QP_OK);
    assert_int_equal(qp_session_run_partial(s, &err), QP_OK);
    assert_int_equal(qp_session_nodes_executed(s), n_nodes);
    assert_int_equal(qp_session_output(s, 0, &o, &err), QP_OK);
    memcpy(a, o.data, sizeof a);
    assert_int_equal(qp_session_run(f, 1, &in, &err), QP_OK);
    assert_int_equal(qp_session_output(f, 0, &o, &err), QP_OK);
    memcpy(b, o.data, sizeof b);
    assert_memory_equal(a, b, sizeof a);
    qp_session_free(f);
    return s;
}

/* x -> A(Relu) -> B(Sigmoid) -> C(Relu) -> E(Sigmoid) -> F(Relu) -> y, an overlay on E's input,
 * a cache of two [2, D] tensors: the reference keeps c (what E reads) and y (the output), so
 * toggling the overlay computes E and F only. Keeping the first two tensors would recompute C
 * too, keeping the last two (y, e) all five. */
static void test_cache_keeps_relevant(void **state) {
    (void)state;
    struct qp_model *m = model_with_x(2, act_dims);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    add(g, "A", "Relu", 1, "x", NULL, "a");
    add(g, "B", "Sigmoid", 1, "a", NULL, "b");
    add(g, "C", "Relu", 1, "b", NULL, "c");
    add(g, "E", "Sigmoid", 1, "c", NULL, "e");
    add(g, "F", "Relu", 1, "e", NULL, "y");
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "y"), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    float scale = 0.05f;
    struct qp_overlay ov = {.node = "E",
                            .input = 0,
                            .qtype = QP_DTYPE_INT8,
                            .n_params = 1,
                            .scale = &scale,
                            .bypass = 1};
    struct qp_session *s = toggle_partial(m, &ov, 9, 2);
    /* Back to bypassed: nothing changed since the reference, nothing computed. */
    ov.bypass = 1;
    assert_int_equal(qp_session_set_overlays(s, 1, &ov, &err), QP_OK);
    assert_int_equal(qp_session_run_partial(s, &err), QP_OK);
    assert_int_equal(qp_session_nodes_executed(s), 0);
    qp_session_free(s);
    qp_model_free(m);
}

/* x -> A(Relu) -> M(MatMul by the constant W) -> C(Relu) -> E(Sigmoid) -> y, an overlay on W
 * only (no overlay step: M toggles it itself), a cache of two [2, D] tensors: the reference
 * keeps a (what M reads) and y, so toggling W computes M, C and E. Keeping the latest tensors
 * instead (y, c) would recompute A too. */
static void test_cache_keeps_weight_readers(void **state) {
    (void)state;
    struct qp_model *m = model_with_x(2, act_dims);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    float w[D * D];
    for (int i = 0; i < D * D; i++)
        w[i] = 0.05f * (float)((i * 7) % 13) - 0.3f;
    int64_t wd[2] = {D, D};
    graph_add_init(m, g, "W", QP_DTYPE_FLOAT, 2, wd, w, sizeof w);
    add(g, "A", "Relu", 1, "x", NULL, "a");
    add(g, "M", "MatMul", 2, "a", "W", "mm");
    add(g, "C", "Relu", 1, "mm", NULL, "c");
    add(g, "E", "Sigmoid", 1, "c", NULL, "y");
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "y"), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    float scale = 0.004f;
    struct qp_overlay ov = {.node = "M",
                            .input = 1,
                            .qtype = QP_DTYPE_INT8,
                            .n_params = 1,
                            .scale = &scale,
                            .bypass = 1};
    qp_session_free(toggle_partial(m, &ov, 5, 3));
    qp_model_free(m);
}

/* ---- If ----------------------------------------------------------------------------------- */

/* y = If(c) then Relu(x) * 2 else Neg(x) [else_shape_differs: Flatten of a [2,D,1] reshape ->
 * different shape]. x and c are graph inputs, or c is a constant. */
static struct qp_model *if_model(int const_cond, int cond_value, int mismatch) {
    struct qp_model *m = model_with_x(2, act_dims);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    if (const_cond) {
        uint8_t c = (uint8_t)cond_value;
        graph_add_init(m, g, "c", QP_DTYPE_BOOL, 0, NULL, &c, 1);
    } else {
        int c = qp_graph_value(g, "c");
        g->values[c].dtype = QP_DTYPE_BOOL;
        g->values[c].rank = 0;
        assert_int_equal(qp_graph_add_input(g, c, &err), QP_OK);
    }
    float two = 2.0f;
    graph_add_init(m, g, "two", QP_DTYPE_FLOAT, 0, NULL, &two, sizeof two);
    add(g, "pre", "Relu", 1, "x", NULL, "rx");
    const char *in = "c", *out = "y";
    int ifn;
    assert_int_equal(qp_graph_add_node(g, "if", "If", "", 1, &in, 1, &out, &ifn, &err), QP_OK);
    struct qp_graph *tb = qp_graph_create(m, g), *eb = qp_graph_create(m, g);
    assert_non_null(tb);
    assert_non_null(eb);
    add(tb, "t_mul", "Mul", 2, "rx", "two", "t_out");
    assert_int_equal(qp_graph_add_output(tb, qp_graph_value(tb, "t_out"), &err), QP_OK);
    if (mismatch) {
        int64_t shp[1] = {2 * D};
        graph_add_init(m, eb, "shp", QP_DTYPE_INT64, 1, (int64_t[]){1}, shp, sizeof shp);
        add(eb, "e_rs", "Reshape", 2, "x", "shp", "e_out");
    } else {
        add(eb, "e_neg", "Neg", 1, "x", NULL, "e_out");
    }
    assert_int_equal(qp_graph_add_output(eb, qp_graph_value(eb, "e_out"), &err), QP_OK);
    struct qp_attr *a = qp_node_add_attr(g, ifn, "then_branch", QP_ATTR_GRAPH);
    a->g = tb;
    a = qp_node_add_attr(g, ifn, "else_branch", QP_ATTR_GRAPH);
    a->g = eb;
    add(g, "post", "Add", 2, "y", "x", "z");
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "z"), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

static void check_if_result(const float *x, const float *z, int cond) {
    for (int i = 0; i < 2 * D; i++) {
        float y = cond ? (x[i] > 0 ? x[i] : 0.0f) * 2.0f : -x[i];
        assert_true(z[i] == y + x[i]);
    }
}

static void test_if_runs_taken_branch(void **state) {
    (void)state;
    struct qp_model *m = if_model(0, 0, 0);
    struct qp_error err = {0};
    struct qp_session *s = NULL;
    assert_int_equal(qp_session_create(m, NULL, 0, NULL, &s, &err), QP_OK);
    float x[2 * D];
    fill_input(x, 9);
    for (int cond = 0; cond < 2; cond++) {
        for (int threads = 1; threads <= 2; threads++) {
            qp_session_set_threads(s, threads);
            uint8_t c = (uint8_t)cond;
            struct qp_array in[2];
            int64_t dims[2] = {2, D};
            assert_int_equal(qp_array_view(&in[0], QP_DTYPE_FLOAT, 2, dims, x, sizeof x, &err),
                             QP_OK);
            assert_int_equal(qp_array_view(&in[1], QP_DTYPE_BOOL, 0, NULL, &c, 1, &err), QP_OK);
            assert_int_equal(qp_session_run(s, 2, in, &err), QP_OK);
            struct qp_array out;
            assert_int_equal(qp_session_output(s, 0, &out, &err), QP_OK);
            assert_int_equal(out.rank, 2);
            assert_int_equal(out.dims[1], D);
            check_if_result(x, out.data, cond);
            assert_int_equal(qp_session_nodes_executed(s), 3); /* pre, if, post */
        }
    }
    qp_session_free(s);
    qp_model_free(m);
}

static void test_if_const_cond(void **state) {
    (void)state;
    for (int cond = 0; cond < 2; cond++) {
        /* With a constant condition only the taken branch is planned, so a mismatching other
         * branch does not matter. */
        struct qp_model *m = if_model(1, cond, !cond ? 0 : 1);
        struct qp_error err = {0};
        struct qp_session *s = NULL;
        assert_int_equal(qp_session_create(m, NULL, 0, NULL, &s, &err), QP_OK);
        float x[2 * D];
        fill_input(x, 11);
        struct qp_array in;
        int64_t dims[2] = {2, D};
        assert_int_equal(qp_array_view(&in, QP_DTYPE_FLOAT, 2, dims, x, sizeof x, &err), QP_OK);
        assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
        struct qp_array out;
        assert_int_equal(qp_session_output(s, 0, &out, &err), QP_OK);
        check_if_result(x, out.data, cond);
        qp_session_free(s);
        qp_model_free(m);
    }
}

static void test_if_shape_mismatch(void **state) {
    (void)state;
    struct qp_model *m = if_model(0, 0, 1);
    struct qp_error err = {0};
    struct qp_session *s = NULL;
    assert_int_equal(qp_session_create(m, NULL, 0, NULL, &s, &err), QP_ERR_UNSUPPORTED);
    assert_null(s);
    assert_non_null(strstr(err.msg, "'if' (If)"));
    assert_non_null(strstr(err.msg, "different output"));
    qp_model_free(m);
}

/* An overlay upstream of an If: partial re-execution still equals a full run. */
static void test_if_partial(void **state) {
    (void)state;
    struct qp_model *m = if_model(0, 0, 0);
    struct qp_error err = {0};
    struct qp_session *s = NULL, *full = NULL;
    assert_int_equal(qp_session_create(m, NULL, 0, NULL, &s, &err), QP_OK);
    assert_int_equal(qp_session_create(m, NULL, 0, NULL, &full, &err), QP_OK);
    float x[2 * D];
    fill_input(x, 13);
    uint8_t c = 1;
    struct qp_array in[2];
    int64_t dims[2] = {2, D};
    assert_int_equal(qp_array_view(&in[0], QP_DTYPE_FLOAT, 2, dims, x, sizeof x, &err), QP_OK);
    assert_int_equal(qp_array_view(&in[1], QP_DTYPE_BOOL, 0, NULL, &c, 1, &err), QP_OK);
    qp_session_set_cache(s, 1 << 20);
    assert_int_equal(qp_session_run(s, 2, in, &err), QP_OK);
    float scale = 0.1f;
    struct qp_overlay ov = {
        .node = "pre", .input = 0, .qtype = QP_DTYPE_UINT8, .n_params = 1, .scale = &scale};
    uint8_t zp = 128;
    ov.zero_point = &zp;
    assert_int_equal(qp_session_set_overlays(s, 1, &ov, &err), QP_OK);
    assert_int_equal(qp_session_set_overlays(full, 1, &ov, &err), QP_OK);
    assert_int_equal(qp_session_run_partial(s, &err), QP_OK);
    assert_int_equal(qp_session_nodes_executed(s), 3);
    struct qp_array a, b;
    assert_int_equal(qp_session_output(s, 0, &a, &err), QP_OK);
    float got[2 * D];
    memcpy(got, a.data, sizeof got);
    assert_int_equal(qp_session_run(full, 2, in, &err), QP_OK);
    assert_int_equal(qp_session_output(full, 0, &b, &err), QP_OK);
    assert_memory_equal(got, b.data, sizeof got);
    /* A session on another lane borrowing s's reference (the branch reads outer values from
     * the borrowed slots) computes the same. */
    struct qp_session_options lane2 = {.lane = 2};
    struct qp_session *bor = NULL;
    assert_int_equal(qp_session_create(m, &lane2, 0, NULL, &bor, &err), QP_OK);
    assert_int_equal(qp_session_set_overlays(bor, 1, &ov, &err), QP_OK);
    assert_int_equal(qp_session_borrow_cache(bor, s, &err), QP_OK);
    assert_int_equal(qp_session_run_partial(bor, &err), QP_OK);
    assert_int_equal(qp_session_nodes_executed(bor), 3);
    assert_int_equal(qp_session_output(bor, 0, &a, &err), QP_OK);
    assert_memory_equal(a.data, b.data, sizeof got);
    qp_session_free(bor);
    qp_session_free(s);
    qp_session_free(full);
    qp_model_free(m);
}

/* An If inside a branch whose own branches read tensors of the top graph (two levels up). */
static void test_if_nested(void **state) {
    (void)state;
    struct qp_model *m = model_with_x(2, act_dims);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    int c = qp_graph_value(g, "c");
    g->values[c].dtype = QP_DTYPE_BOOL;
    g->values[c].rank = 0;
    assert_int_equal(qp_graph_add_input(g, c, &err), QP_OK);
    float two = 2.0f;
    graph_add_init(m, g, "two", QP_DTYPE_FLOAT, 0, NULL, &two, sizeof two);
    add(g, "pre", "Relu", 1, "x", NULL, "rx");
    const char *in = "c", *out = "y", *mid_out = "m_out";
    int ifn, inner;
    assert_int_equal(qp_graph_add_node(g, "outer_if", "If", "", 1, &in, 1, &out, &ifn, &err),
                     QP_OK);
    struct qp_graph *mid = qp_graph_create(m, g), *oe = qp_graph_create(m, g);
    assert_int_equal(
        qp_graph_add_node(mid, "inner_if", "If", "", 1, &in, 1, &mid_out, &inner, &err), QP_OK);
    assert_int_equal(qp_graph_add_output(mid, qp_graph_value(mid, "m_out"), &err), QP_OK);
    struct qp_graph *it = qp_graph_create(m, mid), *ie = qp_graph_create(m, mid);
    add(it, "it_mul", "Mul", 2, "rx", "two", "it_out");
    assert_int_equal(qp_graph_add_output(it, qp_graph_value(it, "it_out"), &err), QP_OK);
    add(ie, "ie_neg", "Neg", 1, "rx", NULL, "ie_out");
    assert_int_equal(qp_graph_add_output(ie, qp_graph_value(ie, "ie_out"), &err), QP_OK);
    add(oe, "oe_neg", "Neg", 1, "x", NULL, "oe_out");
    assert_int_equal(qp_graph_add_output(oe, qp_graph_value(oe, "oe_out"), &err), QP_OK);
    qp_node_add_attr(mid, inner, "then_branch", QP_ATTR_GRAPH)->g = it;
    qp_node_add_attr(mid, inner, "else_branch", QP_ATTR_GRAPH)->g = ie;
    qp_node_add_attr(g, ifn, "then_branch", QP_ATTR_GRAPH)->g = mid;
    qp_node_add_attr(g, ifn, "else_branch", QP_ATTR_GRAPH)->g = oe;
    /* Something after the If reuses arena memory, so a too-short lifetime of rx would show. */
    add(g, "post", "Sigmoid", 1, "y", NULL, "z");
    add(g, "post2", "Add", 2, "z", "y", "w");
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "w"), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    struct qp_session *s = NULL;
    assert_int_equal(qp_session_create(m, NULL, 0, NULL, &s, &err), QP_OK);
    float xv[2 * D];
    fill_input(xv, 17);
    for (int cond = 0; cond < 2; cond++) {
        uint8_t cv = (uint8_t)cond;
        struct qp_array ins[2];
        int64_t dims[2] = {2, D};
        assert_int_equal(qp_array_view(&ins[0], QP_DTYPE_FLOAT, 2, dims, xv, sizeof xv, &err),
                         QP_OK);
        assert_int_equal(qp_array_view(&ins[1], QP_DTYPE_BOOL, 0, NULL, &cv, 1, &err), QP_OK);
        assert_int_equal(qp_session_run(s, 2, ins, &err), QP_OK);
        struct qp_array o;
        assert_int_equal(qp_session_output(s, 0, &o, &err), QP_OK);
        const float *w = o.data;
        for (int i = 0; i < 2 * D; i++) {
            float rx = xv[i] > 0 ? xv[i] : 0.0f;
            float y = cond ? rx * 2.0f : -xv[i];
            float z = 1.0f / (1.0f + expf(-y));
            assert_float_equal(w[i], z + y, 1e-5);
        }
    }
    qp_session_free(s);
    qp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_overlay_equals_qdq_graph),
        cmocka_unit_test(test_partial_equals_full),
        cmocka_unit_test(test_partial_small_budget),
        cmocka_unit_test(test_partial_counts),
        cmocka_unit_test(test_borrow_cache),
        cmocka_unit_test(test_bypass_equals_subset),
        cmocka_unit_test(test_bypass_weights),
        cmocka_unit_test(test_cache_keeps_relevant),
        cmocka_unit_test(test_cache_keeps_weight_readers),
        cmocka_unit_test(test_if_runs_taken_branch),
        cmocka_unit_test(test_if_const_cond),
        cmocka_unit_test(test_if_shape_mismatch),
        cmocka_unit_test(test_if_partial),
        cmocka_unit_test(test_if_nested),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
