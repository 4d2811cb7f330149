/* Model-building helpers shared by the runtime tests (include after <cmocka.h> and the IR):
 * owned allocations, initializers, and the rewrite of an overlay's edge into a real
 * QuantizeLinear -> DequantizeLinear pair (what overlay runs must equal bit for bit). */
#ifndef QP_TESTS_RT_TESTMODEL_H
#define QP_TESTS_RT_TESTMODEL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test_model.h"
#include "ir/ir.h"
#include "qplace/session.h"

static struct qp_opset rt_test_opset19 = {"", 19};

/* An opset-19 model whose graph has one float input "x" of the given shape (dims borrowed). */
static struct qp_model *model_with_x(int rank, struct qp_dim *dims) {
    struct qp_model *m = test_model_create(&rt_test_opset19);
    test_model_add_input(m, "x", QP_DTYPE_FLOAT, rank, dims);
    return m;
}

/* The runtime tests' deterministic generator (an LCG): rt_rng is its state. */
static uint32_t rt_rng;

/* The next value in [-1, 1]. */
static inline float rt_frand(void) {
    rt_rng = rt_rng * 1664525u + 1013904223u;
    return (float)((rt_rng >> 8) % 20001) / 10000.0f - 1.0f;
}

/* n zeroed bytes owned by m. */
static void *model_alloc(struct qp_model *m, size_t n) {
    void *p = calloc(1, n);
    assert_non_null(p);
    struct qp_error err = {0};
    assert_int_equal(qp_model_own(m, p, &err), QP_OK);
    return p;
}

/* An initializer of graph g (m's top-level graph or a branch) with a copy of `data`. */
static void graph_add_init(struct qp_model *m, struct qp_graph *g, const char *name,
                           enum qp_dtype dt, int rank, const int64_t *dims, const void *data,
                           size_t nbytes) {
    struct qp_error err = {0};
    void *copy = model_alloc(m, nbytes ? nbytes : 1);
    memcpy(copy, data, nbytes);
    int64_t *dcopy = model_alloc(m, sizeof(int64_t) * (rank ? (size_t)rank : 1));
    uint64_t numel = 1;
    for (int i = 0; i < rank; i++) {
        dcopy[i] = dims[i];
        numel *= (uint64_t)dims[i];
    }
    struct qp_tensor t = {.name = name,
                          .dtype = dt,
                          .rank = rank,
                          .dims = dcopy,
                          .numel = numel,
                          .data = copy,
                          .nbytes = nbytes};
    if (qp_graph_add_initializer(g, &t, NULL, &err)) fail_msg("initializer %s: %s", name, err.msg);
}

/* A float initializer of m's graph with values from rt_frand in [lo, hi]. */
static inline void rt_rand_init(struct qp_model *m, const char *name, int rank, const int64_t *dims,
                                float lo, float hi) {
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= (size_t)dims[i];
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++)
        v[i] = lo + (hi - lo) * (rt_frand() + 1.0f) * 0.5f;
    graph_add_init(m, m->graph, name, QP_DTYPE_FLOAT, rank, dims, v, n * sizeof *v);
    free(v);
}

/* A node of m's graph with one output (a failure fails the test). */
static inline void rt_node(struct qp_model *m, const char *name, const char *op, int n_in,
                           const char *const *in, const char *out) {
    struct qp_error err = {0};
    int idx;
    assert_int_equal(qp_graph_add_node(m->graph, name, op, "", n_in, in, 1, &out, &idx, &err),
                     QP_OK);
}

/* "<base><suffix>" into buf (64 bytes): the names of a helper's nodes and initializers. */
static inline const char *rt_name(char *buf, const char *base, const char *suffix) {
    snprintf(buf, 64, "%s%s", base, suffix);
    return buf;
}

/* QuantizeLinear -> DequantizeLinear of `x` into `out`, per tensor, to `dt` (int8 or uint8) with
 * the zero point's byte *z and scale s (initializers out_s, out_z; nodes out_Q, out_DQ; the
 * quantized tensor out_q). */
static inline void rt_qdq_dt(struct qp_model *m, const char *x, const char *out, float s,
                             enum qp_dtype dt, const void *z) {
    char sc[64], zp[64], qn[64], qo[64], dn[64];
    rt_name(sc, out, "_s");
    rt_name(zp, out, "_z");
    rt_name(qn, out, "_Q");
    rt_name(qo, out, "_q");
    rt_name(dn, out, "_DQ");
    graph_add_init(m, m->graph, sc, QP_DTYPE_FLOAT, 0, NULL, &s, sizeof s);
    graph_add_init(m, m->graph, zp, dt, 0, NULL, z, 1);
    const char *qi[3] = {x, sc, zp}, *di[3] = {qo, sc, zp};
    rt_node(m, qn, "QuantizeLinear", 3, qi, qo);
    rt_node(m, dn, "DequantizeLinear", 3, di, out);
}

/* rt_qdq_dt to int8 with zero point z. */
static inline void rt_qdq(struct qp_model *m, const char *x, const char *out, float s, int8_t z) {
    rt_qdq_dt(m, x, out, s, QP_DTYPE_INT8, &z);
}

/* Inserts QuantizeLinear -> DequantizeLinear on overlay o's edge of m's graph, with o's scale,
 * zero point (zeros when NULL; one byte per parameter) and axis; initializers qs<k>, qz<k>.
 * The caller toposorts once all are inserted. */
static void insert_qdq(struct qp_model *m, const struct qp_overlay *o, int k) {
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    int consumer = qp_graph_find_node(g, o->node);
    assert_true(consumer >= 0);
    char sname[32], zname[32];
    snprintf(sname, sizeof sname, "qs%d", k);
    snprintf(zname, sizeof zname, "qz%d", k);
    int64_t pd = (int64_t)o->n_params;
    int rank = o->n_params > 1 ? 1 : 0;
    graph_add_init(m, g, sname, QP_DTYPE_FLOAT, rank, &pd, o->scale, o->n_params * sizeof(float));
    uint8_t *zeros = model_alloc(m, o->n_params ? o->n_params : 1);
    graph_add_init(m, g, zname, o->qtype, rank, &pd, o->zero_point ? o->zero_point : zeros,
                   o->n_params);
    const char *extra[2] = {sname, zname};
    int qn, dqn;
    assert_int_equal(
        qp_graph_insert_on_edge(g, consumer, o->input, "QuantizeLinear", "q", 2, extra, &qn, &err),
        QP_OK);
    g->values[g->nodes[qn].outputs[0]].dtype = o->qtype;
    assert_int_equal(qp_graph_insert_on_edge(g, consumer, o->input, "DequantizeLinear", "dq", 2,
                                             extra, &dqn, &err),
                     QP_OK);
    g->values[g->nodes[dqn].outputs[0]].dtype = QP_DTYPE_FLOAT;
    if (o->n_params > 1) {
        struct qp_attr *a = qp_node_add_attr(g, qn, "axis", QP_ATTR_INT);
        assert_non_null(a);
        a->i = o->axis;
        a = qp_node_add_attr(g, dqn, "axis", QP_ATTR_INT);
        assert_non_null(a);
        a->i = o->axis;
    }
}

#endif
