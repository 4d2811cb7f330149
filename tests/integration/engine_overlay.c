/*
 * engine_overlay MODEL: edge overlays on a real model (PaddleOCR cls, input 1x3x48x96) against the
 * same model rewritten with real QuantizeLinear -> DequantizeLinear nodes on those edges, bit for
 * bit (DESIGN.md invariant 3), and partial re-execution against full runs.
 *
 * The model is converted to opset 19 first (per-channel and FP8 Q/DQ need it). Edges: the
 * activation (int8, per tensor) and weight (int8, per output channel) inputs of every third
 * Conv, a uint8 edge with zero point 128 and an FP8 E4M3FN edge; scales come from the ranges of
 * a plain run (observer). A missing model skips (exit 77) unless QP_REQUIRE_REAL_MODELS=1.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/ir.h"
#include "ir/opset_convert.h"
#include "qplace/model.h"
#include "qplace/session.h"

#define MAX_OV 64
#define H      48
#define W      96

static int failures;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            failures++;                                                                            \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

struct edge {
    char node[256];
    int input;
    enum qp_dtype qtype;
    int axis;
    size_t n_params;
    float *scale;
    uint8_t *zp; /* NULL: 0 */
};

static float *amax; /* per value of the top graph: max |x| seen in the plain run */
static const struct qp_graph *obs_graph;

static int observe(const char *tensor, const char *node, const struct qp_array *v, void *user) {
    (void)node;
    (void)user;
    int i = qp_graph_find_value(obs_graph, tensor);
    if (i < 0 || v->dtype != QP_DTYPE_FLOAT) return 0;
    const float *d = v->data;
    for (size_t k = 0; k < v->nbytes / sizeof(float); k++)
        if (fabsf(d[k]) > amax[i]) amax[i] = fabsf(d[k]);
    return 0;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int load(const char *path, struct qp_model **m) {
    struct qp_error err = {0};
    if (qp_model_load_file(path, NULL, m, &err) != QP_OK ||
        qp_model_convert_opset(*m, 19, &err) != QP_OK) {
        printf("FAIL: %s: %s\n", path, err.msg);
        return 0;
    }
    return 1;
}

static int run(struct qp_session *s, const struct qp_array *in, int partial, float **out,
               size_t *n_out) {
    struct qp_error err = {0};
    enum qp_status st = partial ? qp_session_run_partial(s, &err) : qp_session_run(s, 1, in, &err);
    if (st != QP_OK) {
        printf("FAIL: run: %s\n", err.msg);
        return 0;
    }
    struct qp_array o;
    if (qp_session_output(s, 0, &o, &err) != QP_OK) return 0;
    free(*out);
    *out = malloc(o.nbytes);
    if (!*out) return 0;
    memcpy(*out, o.data, o.nbytes);
    *n_out = o.nbytes;
    return 1;
}

static void to_overlays(const struct edge *e, size_t n, struct qp_overlay *ov) {
    for (size_t i = 0; i < n; i++) {
        memset(&ov[i], 0, sizeof ov[i]);
        ov[i].node = e[i].node;
        ov[i].input = e[i].input;
        ov[i].qtype = e[i].qtype;
        ov[i].axis = e[i].axis;
        ov[i].n_params = e[i].n_params;
        ov[i].scale = e[i].scale;
        ov[i].zero_point = e[i].zp;
        ov[i].saturate = 1;
    }
}

static int rewrite(struct qp_model *m, const struct edge *e, size_t n) {
    struct qp_graph *g = qp_model_graph(m);
    struct qp_error err = {0};
    for (size_t i = 0; i < n; i++) {
        int c = qp_graph_find_node(g, e[i].node);
        if (c < 0) return 0;
        char sname[64], zname[64];
        snprintf(sname, sizeof sname, "ovq_scale_%zu", i);
        snprintf(zname, sizeof zname, "ovq_zp_%zu", i);
        int64_t *dims = malloc(sizeof *dims);
        float *sc = malloc(e[i].n_params * sizeof *sc);
        uint8_t *zp = calloc(e[i].n_params, 1);
        if (!dims || !sc || !zp) return 0;
        dims[0] = (int64_t)e[i].n_params;
        memcpy(sc, e[i].scale, e[i].n_params * sizeof *sc);
        if (e[i].zp) memcpy(zp, e[i].zp, e[i].n_params);
        if (qp_model_own(m, dims, &err) || qp_model_own(m, sc, &err) || qp_model_own(m, zp, &err))
            return 0;
        int rank = e[i].n_params > 1;
        struct qp_tensor ts = {.name = sname,
                               .dtype = QP_DTYPE_FLOAT,
                               .rank = rank,
                               .dims = dims,
                               .numel = e[i].n_params,
                               .data = sc,
                               .nbytes = e[i].n_params * sizeof *sc};
        struct qp_tensor tz = {.name = zname,
                               .dtype = e[i].qtype,
                               .rank = rank,
                               .dims = dims,
                               .numel = e[i].n_params,
                               .data = zp,
                               .nbytes = e[i].n_params};
        if (qp_graph_add_initializer(g, &ts, NULL, &err) ||
            qp_graph_add_initializer(g, &tz, NULL, &err))
            return 0;
        const char *extra[2] = {sname, zname};
        int q, dq;
        if (qp_graph_insert_on_edge(g, c, e[i].input, "QuantizeLinear", "ovq", 2, extra, &q,
                                    &err) ||
            qp_graph_insert_on_edge(g, c, e[i].input, "DequantizeLinear", "ovdq", 2, extra, &dq,
                                    &err)) {
            printf("FAIL: rewrite: %s\n", err.msg);
            return 0;
        }
        g->values[g->nodes[q].outputs[0]].dtype = e[i].qtype;
        if (e[i].n_params > 1) {
            struct qp_attr *a = qp_node_add_attr(g, q, "axis", QP_ATTR_INT);
            if (!a) return 0;
            a->i = e[i].axis;
            if (!(a = qp_node_add_attr(g, dq, "axis", QP_ATTR_INT))) return 0;
            a->i = e[i].axis;
        }
    }
    return qp_graph_toposort(g, &err) == QP_OK;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: engine_overlay MODEL\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        const char *req = getenv("QP_REQUIRE_REAL_MODELS");
        if (req && strcmp(req, "1") == 0) {
            printf("FAIL: %s is missing (QP_REQUIRE_REAL_MODELS=1; run scripts/setup.sh)\n",
                   argv[1]);
            return 1;
        }
        printf("SKIP: %s is missing (run scripts/setup.sh)\n", argv[1]);
        return 77;
    }
    fclose(f);
    struct qp_model *m = NULL, *mq = NULL;
    struct qp_session *s = NULL, *sq = NULL, *sp = NULL, *sf = NULL;
    struct edge edges[MAX_OV];
    size_t n_edges = 0;
    float *a = NULL, *b = NULL, *c = NULL;
    size_t na = 0, nb = 0, nc = 0;
    struct qp_error err = {0};
    struct qp_overlay ov[MAX_OV];
    float *x = malloc(sizeof(float) * 3 * H * W);
    memset(edges, 0, sizeof edges);
    CHECK(x, "out of memory");
    for (int i = 0; i < 3 * H * W; i++) /* stripes and a gradient: varied, deterministic */
        x[i] = (float)sin(0.05 * i) * 0.8f + (float)((i / W) % H) / H - 0.5f;
    CHECK(load(argv[1], &m) && load(argv[1], &mq), "load");
    const struct qp_graph *g = qp_model_graph(m);
    int64_t dims[4] = {1, 3, H, W};
    struct qp_array in;
    CHECK(qp_array_view(&in, QP_DTYPE_FLOAT, 4, dims, x, sizeof(float) * 3 * H * W, &err) == QP_OK,
          "%s", err.msg);
    CHECK(qp_session_create(m, NULL, 0, NULL, &s, &err) == QP_OK, "%s", err.msg);
    amax = calloc(g->n_values, sizeof *amax);
    CHECK(amax, "out of memory");
    obs_graph = g;
    qp_session_set_observer(s, observe, NULL);
    CHECK(run(s, &in, 0, &c, &nc), "plain run");
    qp_session_set_observer(s, NULL, NULL);

    /* Choose edges. */
    int n_conv = 0, have_u8 = 0, have_fp8 = 0;
    for (size_t k = 0; k < g->n_topo && n_edges + 2 <= MAX_OV; k++) {
        const struct qp_node *n = &g->nodes[g->topo[k]];
        int v0 = n->n_inputs > 0 ? n->inputs[0] : -1;
        if (v0 < 0 || g->values[v0].initializer >= 0 || !(amax[v0] > 0)) continue;
        if (strcmp(n->op_type, "Conv") == 0 && n_conv++ % 3 == 0) {
            struct edge *e = &edges[n_edges++];
            snprintf(e->node, sizeof e->node, "%s", n->name);
            e->qtype = QP_DTYPE_INT8;
            e->n_params = 1;
            e->scale = malloc(sizeof(float));
            CHECK(e->scale, "oom");
            e->scale[0] = amax[v0] / 127.0f;
            int wv = n->inputs[1];
            int wi = wv >= 0 ? g->values[wv].initializer : -1;
            if (wi >= 0 && g->inits[wi].dtype == QP_DTYPE_FLOAT && g->inits[wi].rank == 4) {
                const struct qp_tensor *t = &g->inits[wi];
                struct edge *w = &edges[n_edges++];
                snprintf(w->node, sizeof w->node, "%s", n->name);
                w->input = 1;
                w->qtype = QP_DTYPE_INT8;
                w->axis = 0;
                w->n_params = (size_t)t->dims[0];
                w->scale = malloc(w->n_params * sizeof(float));
                CHECK(w->scale, "oom");
                size_t per = (size_t)(t->numel / (uint64_t)t->dims[0]);
                const float *wd = t->data;
                for (size_t o = 0; o < w->n_params; o++) {
                    float mx = 0;
                    for (size_t j = 0; j < per; j++)
                        if (fabsf(wd[o * per + j]) > mx) mx = fabsf(wd[o * per + j]);
                    w->scale[o] = mx > 0 ? mx / 127.0f : 1.0f;
                }
            }
        } else if (!have_u8 && strcmp(n->op_type, "Add") == 0) {
            struct edge *e = &edges[n_edges++];
            have_u8 = 1;
            snprintf(e->node, sizeof e->node, "%s", n->name);
            e->qtype = QP_DTYPE_UINT8;
            e->n_params = 1;
            e->scale = malloc(sizeof(float));
            e->zp = malloc(1);
            CHECK(e->scale && e->zp, "oom");
            e->scale[0] = amax[v0] / 127.0f;
            e->zp[0] = 128;
        } else if (!have_fp8 && strcmp(n->op_type, "Mul") == 0) {
            struct edge *e = &edges[n_edges++];
            have_fp8 = 1;
            snprintf(e->node, sizeof e->node, "%s", n->name);
            e->qtype = QP_DTYPE_FLOAT8E4M3FN;
            e->n_params = 1;
            e->scale = malloc(sizeof(float));
            CHECK(e->scale, "oom");
            e->scale[0] = amax[v0] / 448.0f;
        }
    }
    CHECK(n_edges >= 8 && have_u8 && have_fp8, "only %zu edges chosen", n_edges);

    /* (a) overlays == rewritten Q/DQ model, bit for bit. */
    to_overlays(edges, n_edges, ov);
    CHECK(qp_session_set_overlays(s, n_edges, ov, &err) == QP_OK, "%s", err.msg);
    double t0 = now();
    CHECK(run(s, &in, 0, &a, &na), "overlay run");
    double t_full = now() - t0;
    size_t n_full = qp_session_nodes_executed(s);
    CHECK(rewrite(mq, edges, n_edges), "rewrite");
    CHECK(qp_session_create(mq, NULL, 0, NULL, &sq, &err) == QP_OK, "%s", err.msg);
    CHECK(run(sq, &in, 0, &b, &nb), "Q/DQ run");
    CHECK(na == nb && memcmp(a, b, na) == 0, "overlay run differs from the Q/DQ model");
    CHECK(nc == na && memcmp(a, c, na) != 0, "the overlays changed nothing");
    printf("ok   overlays on %zu edges == Q/DQ model (%zu output bytes, bit-identical)\n", n_edges,
           na);

    /* (b), (c) partial re-execution == full runs, computing fewer nodes. */
    CHECK(qp_session_create(m, NULL, 0, NULL, &sp, &err) == QP_OK, "%s", err.msg);
    CHECK(qp_session_create(m, NULL, 0, NULL, &sf, &err) == QP_OK, "%s", err.msg);
    qp_session_set_cache(sp, (size_t)256 << 20);
    CHECK(run(sp, &in, 0, &c, &nc), "reference run");
    size_t probes[4] = {n_edges, n_edges - 1, 1, n_edges / 2}; /* suffixes of the edge list */
    for (int p = 0; p < 4; p++) {
        size_t k = probes[p], first = n_edges - k;
        CHECK(qp_session_set_overlays(sp, k, ov + first, &err) == QP_OK, "%s", err.msg);
        CHECK(qp_session_set_overlays(sf, k, ov + first, &err) == QP_OK, "%s", err.msg);
        t0 = now();
        CHECK(run(sp, &in, 1, &a, &na), "partial run");
        double t_part = now() - t0;
        CHECK(run(sf, &in, 0, &b, &nb), "full run");
        CHECK(na == nb && memcmp(a, b, na) == 0, "partial run %d differs from a full run", p);
        size_t n_part = qp_session_nodes_executed(sp);
        /* With (nearly) every edge changed (p < 2) only 2-4 nodes near the input are not
         * downstream, and they may run anyway: a value the reference run kept inside a fused
         * step, or in a blocked layout the new edge set's plan does not use, is not in the
         * cache and is computed again. */
        CHECK(n_part < n_full || (p < 2 && n_part == n_full),
              "partial run computed %zu of %zu nodes", n_part, n_full);
        printf("ok   partial run with the last %zu overlays == full run; %zu of %zu nodes "
               "computed (%.1f ms, with planning for the new edge set; %.1f ms for the first full "
               "overlay run)\n",
               k, n_part, n_full, 1e3 * t_part, 1e3 * t_full);
    }
done:
    for (size_t i = 0; i < n_edges; i++) {
        free(edges[i].scale);
        free(edges[i].zp);
    }
    free(a);
    free(b);
    free(c);
    free(x);
    free(amax);
    qp_session_free(s);
    qp_session_free(sq);
    qp_session_free(sp);
    qp_session_free(sf);
    qp_model_free(m);
    qp_model_free(mq);
    printf("%s\n", failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
}
